// SPDX-License-Identifier: Apache-2.0
// Logging through tcmu-runner's own log (its file and syslog, its level),
// so cowstore's messages sit next to the daemon's. libtcmu exports
// tcmu_{crit,err,warn,info,dbg}_message; tcmu_dev_err and friends are macros
// over them. A null device logs without a device prefix.
#pragma once

#include <string>

struct tcmu_device;

namespace cowstore::plugin {

enum class LogLevel { kError, kWarning, kInfo, kDebug };

// Never throws; the message goes out as one line.
void Log(tcmu_device* dev, LogLevel level, const char* func, int line,
         const std::string& message) noexcept;

}  // namespace cowstore::plugin

#define COWSTORE_LOG_ERROR(dev, msg) \
  ::cowstore::plugin::Log((dev), ::cowstore::plugin::LogLevel::kError, __func__, __LINE__, (msg))
#define COWSTORE_LOG_WARN(dev, msg) \
  ::cowstore::plugin::Log((dev), ::cowstore::plugin::LogLevel::kWarning, __func__, __LINE__, (msg))
#define COWSTORE_LOG_INFO(dev, msg) \
  ::cowstore::plugin::Log((dev), ::cowstore::plugin::LogLevel::kInfo, __func__, __LINE__, (msg))
#define COWSTORE_LOG_DEBUG(dev, msg) \
  ::cowstore::plugin::Log((dev), ::cowstore::plugin::LogLevel::kDebug, __func__, __LINE__, (msg))
