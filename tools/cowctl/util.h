// SPDX-License-Identifier: Apache-2.0
// Small shared pieces of cowctl: names, sizes, LUN references, the handler's
// cfgstring, WWNs, and the one error type every command reports.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cowstore::cowctl {

// A failure the user can act on: printed as one line "cowctl: <what>" and the
// process exits non-zero. Every command undoes what it made before throwing.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// Pool, LUN and copy group names: store::ValidName (handler/store/names.h),
// the one rule the store and the handler check too.
bool ValidName(const std::string& name);
void RequireName(const std::string& name, const char* what);

// "10G", "512M", "1.5T", "4096", "4k", "10GiB" (binary units) -> bytes.
// Throws UserError naming `what` on junk or overflow.
uint64_t ParseSize(const std::string& text, const char* what);
// Bytes -> "10.0 GiB" style (exact "512 B" below 1 KiB).
std::string FormatSize(uint64_t bytes);
// A block device's size, or 0 when it cannot be told. Opened O_NONBLOCK:
// sizing a device must never wait on it. follow_links false: a symlink at
// `path` itself is not followed (O_NOFOLLOW).
uint64_t BlockDeviceBytes(const std::string& path, bool follow_links);

// "pool/lun" as used on the command line.
struct LunRef {
  std::string pool;
  std::string lun;
  std::string str() const { return pool + "/" + lun; }
};
LunRef ParseLunRef(const std::string& text);

// The handler's cfgstring, parsed and written by the handler's own functions
// (handler/common/cfgstring.h): cowctl writes cowstore/<pool>/<lun>[;key=value...]
// and reads every form the handler accepts, nothing else. `options` holds the
// options given (copy_group, wce, thin_on_thin).
struct Cfgstring {
  std::string pool;
  std::string lun;
  std::map<std::string, std::string> options;  // copy_group, wce, thin_on_thin
  std::string str() const;                      // with the "cowstore/" prefix
};
// Parses a dev_config value; nullopt unless it is a cowstore one.
std::optional<Cfgstring> ParseCfgstring(const std::string& dev_config);

// A LUN's 128-bit identity as the 8-4-4-4-12 hex form written to
// wwn/vpd_unit_serial (what the handler turns into its NAA designator).
std::string UuidString(const std::array<uint8_t, 16>& id);
// 16 random bytes from the kernel's CSPRNG.
std::array<uint8_t, 16> RandomBytes16();
// FNV-1a, for short stable names derived from longer ones.
uint64_t Hash64(const std::string& s);
std::string Hex(uint64_t v, int digits);

std::string Trim(const std::string& s);
std::vector<std::string> Split(const std::string& s, char sep);

// Environment/option defaults.
std::string DefaultPoolDir();  // $COWSTORE_POOL_DIR or /var/lib/cowstore/pools
std::string DefaultRunDir();   // $COWSTORE_RUN_DIR or /run/cowstore

}  // namespace cowstore::cowctl
