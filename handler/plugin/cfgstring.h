// The cfgstring of a cowstore LUN, as tcmu-runner hands it to the handler
// (tcmu_dev_get_cfgstring, check_config):
//
//   cowstore/<pool>/<lun>[:key=value[,key=value...]]
//   cowstore/<pool>/<lun>[;key=value[;key=value...]]   (same meaning)
//
// e.g. cowstore/tank/vm1:copy_group=esx. <pool> and <lun> are names of
// 1..64 characters from [A-Za-z0-9_.-], not starting with '.' or '-' and
// without "..". The pool is the file <pool_dir>/<pool>; <pool_dir> is
// /var/lib/cowstore/pools unless the daemon's environment sets
// COWSTORE_POOL_DIR, so no cfgstring can name a path outside it.
//
// Options: copy_group=<name> (EXTENDED COPY between different LUNs only
// inside one copy group; same name rules), wce=0|1 (initial write cache,
// default 0). Unknown or repeated options are errors. tcmu-runner's own
// per-device option ";tcmur_cmd_time_out=N" is ignored wherever it appears.
//
// The ';' form exists because the ':' one cannot pass every tool: rtslib-fb
// (targetcli) refuses ':' in a config string, and the kernel's configfs
// control parser splits "dev_config=..." at ','. See docs/design/plugin.md.
//
// Pure functions, no tcmu-runner dependency; errors are sentences meant for
// the person at targetcli.
#pragma once

#include <string>
#include <string_view>

namespace cowstore::plugin {

inline constexpr std::string_view kSubtype = "cowstore";
inline constexpr std::string_view kDefaultPoolDir = "/var/lib/cowstore/pools";
inline constexpr const char* kPoolDirEnv = "COWSTORE_POOL_DIR";
// The kernel keeps dev_config in a 256-byte buffer (TCMU_CONFIG_LEN).
inline constexpr size_t kMaxCfgstringLength = 255;
inline constexpr size_t kMaxNameLength = 64;

struct LunSpec {
  std::string pool;        // pool name (a file name inside the pool directory)
  std::string lun;         // LUN name inside the pool
  std::string copy_group;  // empty: none
  bool wce = false;
};

// Parses and validates `cfgstring`. On failure returns false and sets
// *reason to a sentence saying what is wrong and how to write it instead.
bool ParseCfgstring(std::string_view cfgstring, LunSpec* spec, std::string* reason);

// Whether `name` is a valid pool, LUN or copy group name; if not, *reason
// (when non-null) says why, naming it as `what` ("pool name", ...).
bool ValidName(std::string_view name, std::string_view what, std::string* reason);

// The pool directory in effect: $COWSTORE_POOL_DIR if set and non-empty,
// else kDefaultPoolDir. Trailing slashes removed.
std::string PoolDirectory();

// <pool_dir>/<pool>. `spec` must have been validated by ParseCfgstring.
std::string PoolPath(const LunSpec& spec);

// Canonical form (for logs): cowstore/<pool>/<lun>[:copy_group=...,wce=1].
std::string ToString(const LunSpec& spec);

}  // namespace cowstore::plugin
