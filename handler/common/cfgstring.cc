// SPDX-License-Identifier: Apache-2.0
#include "handler/common/cfgstring.h"

#include <cstdlib>

#include "handler/store/names.h"

namespace cowstore::common {
namespace {

constexpr std::string_view kRunnerTimeout = ";tcmur_cmd_time_out=";
constexpr std::string_view kExample = "cowstore/tank/vm1 or cowstore/tank/vm1;copy_group=esx";

// Printable rendering of user input inside a message.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += kHex[static_cast<unsigned char>(c) & 0xf];
    }
  }
  return out + "'";
}

// Removes tcmu-runner's own ";tcmur_cmd_time_out=N" (the runner strips it
// before open, but check_config sees the string as the user typed it).
std::string StripRunnerOptions(std::string_view in) {
  std::string s(in);
  for (size_t pos; (pos = s.find(kRunnerTimeout)) != std::string::npos;) {
    size_t end = s.find(';', pos + 1);
    s.erase(pos, end == std::string::npos ? std::string::npos : end - pos);
  }
  return s;
}

bool Fail(std::string* reason, std::string msg) {
  if (reason) *reason = std::move(msg);
  return false;
}

}  // namespace

bool AsksRunnerCommandTimeout(std::string_view raw) {
  for (size_t pos = raw.find(kRunnerTimeout); pos != std::string_view::npos;
       pos = raw.find(kRunnerTimeout, pos + 1)) {
    const size_t from = pos + kRunnerTimeout.size();
    const size_t end = raw.find(';', from);
    const std::string value(raw.substr(from, end == std::string_view::npos ? std::string_view::npos : end - from));
    if (std::atoi(value.c_str()) != 0) return true;
  }
  return false;
}

bool ParseCfgstring(std::string_view raw, LunSpec* spec, std::string* reason) {
  if (raw.size() > kMaxCfgstringLength) {
    return Fail(reason, "cfgstring is " + std::to_string(raw.size()) +
                            " characters long; the kernel keeps at most " +
                            std::to_string(kMaxCfgstringLength));
  }
  const std::string s = StripRunnerOptions(raw);
  const std::string prefix = std::string(kSubtype) + "/";
  if (s.compare(0, prefix.size(), prefix) != 0) {
    return Fail(reason, "cfgstring " + Quote(s) + " does not start with '" + prefix +
                            "'; expected cowstore/<pool>/<lun>, e.g. " + std::string(kExample));
  }
  std::string_view rest = std::string_view(s).substr(prefix.size());

  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) {
    return Fail(reason, "cfgstring " + Quote(s) +
                            " names no LUN; expected cowstore/<pool>/<lun>, e.g. " +
                            std::string(kExample));
  }
  LunSpec out;
  std::string_view pool = rest.substr(0, slash);
  rest = rest.substr(slash + 1);
  const size_t opt = rest.find_first_of(":;");
  std::string_view lun = rest.substr(0, opt);
  std::string_view options = opt == std::string_view::npos ? std::string_view() : rest.substr(opt + 1);

  if (!store::ValidName(pool, "pool name", reason)) return false;
  if (lun.find('/') != std::string_view::npos) {
    return Fail(reason, "cfgstring " + Quote(s) +
                            " has more than two path components; expected cowstore/<pool>/<lun> "
                            "(pools are files in the pool directory, not paths)");
  }
  if (!store::ValidName(lun, "LUN name", reason)) return false;
  out.pool = std::string(pool);
  out.lun = std::string(lun);

  if (opt != std::string_view::npos && options.empty()) {
    return Fail(reason, "cfgstring " + Quote(s) + " ends with '" + std::string(1, rest[opt]) +
                            "' but gives no option; options are copy_group=<name>, wce=0|1 and thin_on_thin=0|1");
  }
  bool seen_group = false, seen_wce = false, seen_tot = false;
  while (!options.empty()) {
    const size_t end = options.find_first_of(",;");
    std::string_view kv = options.substr(0, end);
    options = end == std::string_view::npos ? std::string_view() : options.substr(end + 1);
    if (end != std::string_view::npos && options.empty()) {
      return Fail(reason, "cfgstring " + Quote(s) + " ends with a separator; remove it");
    }
    const size_t eq = kv.find('=');
    if (kv.empty()) return Fail(reason, "cfgstring " + Quote(s) + " has an empty option");
    if (eq == std::string_view::npos) {
      return Fail(reason, "option " + Quote(kv) + " has no value; write key=value "
                          "(copy_group=<name>, wce=0|1 or thin_on_thin=0|1)");
    }
    std::string_view key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "copy_group") {
      if (seen_group) return Fail(reason, "option copy_group is given twice");
      seen_group = true;
      if (!store::ValidName(value, "copy group name", reason)) return false;
      out.copy_group = std::string(value);
    } else if (key == "wce") {
      if (seen_wce) return Fail(reason, "option wce is given twice");
      seen_wce = true;
      if (value != "0" && value != "1") {
        return Fail(reason, "option wce=" + std::string(value).substr(0, 16) +
                                " is invalid; use wce=0 (write cache off: every write is durable "
                                "when acknowledged, the default) or wce=1");
      }
      out.wce = value == "1";
    } else if (key == "thin_on_thin") {
      if (seen_tot) return Fail(reason, "option thin_on_thin is given twice");
      seen_tot = true;
      if (value != "0" && value != "1") {
        return Fail(reason, "option thin_on_thin=" + Quote(value.substr(0, 16)) +
                                " is invalid; use thin_on_thin=1 (report the pool's filesystem "
                                "falling short of the pool's growth as the soft threshold, the "
                                "default) or thin_on_thin=0 (do not)");
      }
      out.thin_on_thin = value == "1";
    } else {
      return Fail(reason, "unknown option " + Quote(key) +
                              "; the options are copy_group=<name>, wce=0|1 and thin_on_thin=0|1");
    }
  }
  *spec = std::move(out);
  return true;
}

std::string PoolDirectory() {
  const char* env = std::getenv(kPoolDirEnv);
  std::string dir = (env && *env) ? env : std::string(kDefaultPoolDir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

std::string PoolPath(const LunSpec& spec) {
  std::string dir = PoolDirectory();
  if (dir != "/") dir += '/';
  return dir + spec.pool;
}

std::string FormatCfgstring(const LunSpec& spec) {
  std::string s = std::string(kSubtype) + "/" + spec.pool + "/" + spec.lun;
  if (!spec.copy_group.empty()) s += ";copy_group=" + spec.copy_group;
  if (spec.wce) s += *spec.wce ? ";wce=1" : ";wce=0";
  if (spec.thin_on_thin) s += *spec.thin_on_thin ? ";thin_on_thin=1" : ";thin_on_thin=0";
  return s;
}

}  // namespace cowstore::common
