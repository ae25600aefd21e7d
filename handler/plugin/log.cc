// SPDX-License-Identifier: Apache-2.0
#include "handler/plugin/log.h"

#include "handler/plugin/tcmu.h"

namespace cowstore::plugin {

void Log(tcmu_device* dev, LogLevel level, const char* func, int line,
         const std::string& message) noexcept {
  const char* text = message.c_str();
  switch (level) {
    case LogLevel::kError:
      tcmu_err_message(dev, func, line, "%s\n", text);
      break;
    case LogLevel::kWarning:
      tcmu_warn_message(dev, func, line, "%s\n", text);
      break;
    case LogLevel::kInfo:
      tcmu_info_message(dev, func, line, "%s\n", text);
      break;
    case LogLevel::kDebug:
      tcmu_dbg_message(dev, func, line, "%s\n", text);
      break;
  }
}

}  // namespace cowstore::plugin
