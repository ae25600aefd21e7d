// SPDX-License-Identifier: Apache-2.0
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
// default 0), thin_on_thin=0|1 (report the pool's backing store falling
// short of the pool's remaining growth as THIN PROVISIONING SOFT THRESHOLD
// REACHED; default 1). Unknown or repeated options are errors. tcmu-runner's own
// per-device option ";tcmur_cmd_time_out=N" is ignored wherever it appears.
//
// The one definition of this format: the handler parses it (check_config,
// open), cowctl writes it into configfs and reads it back, both through this
// library (cowstore_common). Names follow store::ValidName.
//
// The ';' form exists because the ':' one cannot pass every tool: rtslib-fb
// (targetcli) refuses ':' in a config string, and the kernel's configfs
// control parser splits "dev_config=..." at ','. See docs/design/plugin.md.
//
// Pure functions, no tcmu-runner dependency; errors are sentences meant for
// the person at targetcli or cowctl.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cowstore::common {

inline constexpr std::string_view kSubtype = "cowstore";
inline constexpr std::string_view kDefaultPoolDir = "/var/lib/cowstore/pools";
inline constexpr const char* kPoolDirEnv = "COWSTORE_POOL_DIR";
// The kernel keeps dev_config in a 256-byte buffer (TCMU_CONFIG_LEN).
inline constexpr size_t kMaxCfgstringLength = 255;

struct LunSpec {
  std::string pool;         // pool name (a file name inside the pool directory)
  std::string lun;          // LUN name inside the pool
  std::string copy_group;   // empty: none
  std::optional<bool> wce;  // as given; absent means off
  std::optional<bool> thin_on_thin;  // as given; absent means on
  bool write_cache() const { return wce.value_or(false); }
  bool thin_on_thin_signal() const { return thin_on_thin.value_or(true); }
  bool operator==(const LunSpec&) const = default;
};

// Parses and validates `cfgstring`. On failure returns false and sets
// *reason to a sentence saying what is wrong and how to write it instead.
bool ParseCfgstring(std::string_view cfgstring, LunSpec* spec, std::string* reason);

// Whether `cfgstring`, as the user wrote it, turns on tcmu-runner's own
// per-command timeout (";tcmur_cmd_time_out=N" with N != 0 as the runner's
// atoi() reads it). ParseCfgstring accepts the option (the runner strips it
// before open); a handler that completes commands itself must refuse it
// (handler/plugin/device_server.h).
bool AsksRunnerCommandTimeout(std::string_view cfgstring);

// The pool directory in effect: $COWSTORE_POOL_DIR if set and non-empty,
// else kDefaultPoolDir. Trailing slashes removed.
std::string PoolDirectory();

// <pool_dir>/<pool>. `spec` must have been validated by ParseCfgstring.
std::string PoolPath(const LunSpec& spec);

// The canonical text, as cowctl writes it into configfs and the handler
// logs it: cowstore/<pool>/<lun>[;copy_group=<name>][;wce=0|1][;thin_on_thin=0|1] (the ';'
// form: configfs cuts a control write at ',', rtslib refuses ':').
// ParseCfgstring(FormatCfgstring(s)) == s for every valid spec.
std::string FormatCfgstring(const LunSpec& spec);

}  // namespace cowstore::common
