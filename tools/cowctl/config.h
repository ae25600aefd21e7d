// SPDX-License-Identifier: Apache-2.0
// The saved configuration: every pool, LUN, backstore and export in one YAML
// file (default /etc/cowstore/cowstore.yaml). `cowctl save` writes it from
// what exists; `cowctl restore` makes what exists match it, idempotently.
// Every load error names the file, the line and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/cowctl/lio.h"

namespace cowstore::cowctl {

inline constexpr const char* kDefaultConfigPath = "/etc/cowstore/cowstore.yaml";

// Version 3 (this cowctl writes it; it reads 1 to 3) added pools[].uuid.
inline constexpr int kConfigVersion = 3;

struct LunConfig {
  std::string name;
  uint64_t size = 0;
  uint32_t block_size = 512;
  // Present when the LUN has a user:cowstore backstore.
  std::string backstore;   // rtslib storage object name
  std::string wwn;         // vpd_unit_serial: a UUID (8-4-4-4-12 hex digits)
  std::string copy_group;  // cfgstring option
  std::optional<bool> wce;
  std::optional<bool> thin_on_thin;  // cfgstring option; absent: the handler's default (on)
};

struct PoolConfig {
  std::string name;
  // The pool's identity (its superblock UUID, lowercase 8-4-4-4-12), which
  // restore checks before it uses, or relinks, a pool. Empty in a file of
  // version 1 or 2: restore then uses a pool found under the name, relinks
  // a `file:` pool (its path is the administrator's), never a `device:` one.
  std::string uuid;
  std::string device;  // block device (the pool dir entry is a symlink to it)
  std::string file;    // pool file when it is not <pool_dir>/<name> itself
  uint64_t size = 0;
  uint32_t allocation_unit = 1u << 20;
  // The sharing unit (bytes; 0: the allocation unit). Below the AU the pool
  // is format 3. A file without it (written before it was saved) means the
  // AU: format 2, what every pool was then.
  uint32_t grain = 0;
  uint32_t sharing_unit() const { return grain ? grain : allocation_unit; }
  uint32_t soft_threshold = 80;
  std::vector<LunConfig> luns;
};

struct ExportLun {
  uint32_t lun = 0;
  std::string pool;
  std::string name;
};

struct IscsiConfig {
  std::string target;
  std::vector<std::string> portals;
  std::vector<AclSpec> acls;  // empty: any initiator (demo mode)
  std::vector<ExportLun> luns;
};

struct LoopbackConfig {
  std::string wwn;
  std::vector<ExportLun> luns;
};

struct Config {
  std::vector<PoolConfig> pools;
  std::vector<IscsiConfig> iscsi;
  std::vector<LoopbackConfig> loopback;
};

// Every field is checked on load, identities included: pool UUIDs and LUN
// WWNs are UUIDs; two LUNs whose WWNs give one NAA identifier (NaaName) are
// refused, as are a backstore name, an iSCSI target or a loopback WWN used
// twice, a LUN exported twice by one target, CHAP strings LIO would not store (ChapProblem), portals that
// are not IPv4:port or [IPv6]:port, and a loopback WWN that is not naa. and
// 16 hex digits.
// Throws UserError "<file>:<line>: <field>: <problem>".
Config LoadConfig(const std::string& path);
Config ParseConfig(const std::string& text, const std::string& name);
std::string DumpConfig(const Config& config);
// "0ec52bfc-a7bb-48b7-94a4-24e650d2d1ef" (any case): 8-4-4-4-12 hex digits.
bool ValidUuidString(const std::string& s);
// Atomically replaces `path` (mode 0600: it may hold CHAP secrets).
void WriteConfig(const std::string& path, const Config& config);

}  // namespace cowstore::cowctl
