// SPDX-License-Identifier: Apache-2.0
// LIO through configfs, following rtslib's layout so that what cowctl makes
// shows in `targetcli ls` and survives saveconfig/restoreconfig:
//
//   target/core/user_<N>/<name>            user:cowstore backstore (one per HBA dir)
//   target/iscsi/<iqn>/tpgt_1/{lun/lun_<L>/<link>, np/<ip>:<port>, acls/<iqn>/lun_<L>/<link>}
//   target/loopback/<naa>/tpgt_1/{nexus, lun/lun_<L>/<link>}
//
// The root is a parameter: tests point it at a plain directory tree. Writes
// work on both: attributes are opened with O_CREAT (a no-op on configfs,
// where they already exist) and "control" is appended to, so a plain tree
// records every control write. Reads prefer the kernel's files (attrib/,
// info) and fall back to what the control writes recorded.
//
// cowctl owns a backstore whose dev_config starts with "cowstore/", and a
// fabric target whose LUNs all link to such backstores. It never changes
// anything else (no emulate_* attribute either: user backstores have none).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tools/cowctl/util.h"

namespace cowstore::cowctl {

struct LioOptions {
  std::string configfs_root = "/sys/kernel/config";
  std::string proc_root = "/proc";  // where to look for a running tcmu-runner
  // Tests only: called before each attribute write; a non-zero errno makes
  // the write fail as the kernel would refuse it.
  std::function<int(const std::string& path, const std::string& value)> refuse_write;
};

struct Backstore {
  std::string name;   // rtslib storage object name
  std::string hba;    // "user_3"
  std::string path;   // <root>/target/core/user_3/<name>
  Cfgstring config;
  uint64_t size = 0;
  uint32_t block_size = 0;
  std::string wwn;    // vpd_unit_serial
  bool enabled = false;
  std::string key() const { return hba + "/" + name; }
};

// Any LIO storage object (every backstore type, whoever made it), with the
// identity an initiator sees (VPD 0x80/0x83 come from its unit serial).
struct LioDevice {
  std::string key;     // "<hba>/<name>": "user_0/tank-vm1", "iblock_1/disk"
  std::string name;
  bool user = false;   // a user (TCMU) backstore: its name space is cowstore's too
  std::string serial;  // wwn/vpd_unit_serial; empty when none
};

struct BackstoreSpec {
  std::string name;
  Cfgstring config;
  uint64_t size = 0;
  uint32_t block_size = 512;
  std::string wwn;
};

// One LUN of a fabric TPG.
struct FabricLun {
  std::string fabric;  // "iscsi", "loopback", ...
  std::string target;  // IQN / NAA
  uint32_t tpg = 1;
  uint32_t lun = 0;
  std::string path;    // the lun_<L> directory
  std::string backstore_key;  // "user_3/<name>" it links to
};

// A mapped LUN of a node ACL (acls/<initiator>/lun_<M>/<link> -> lun/lun_<L>):
// the initiator sees TPG LUN `lun` as its LUN `mapped_lun`.
struct MappedLun {
  uint32_t lun = 0;
  uint32_t mapped_lun = 0;
  bool write_protect = false;  // lun_<M>/write_protect
  bool operator==(const MappedLun&) const = default;
};

struct AclSpec {
  std::string initiator;
  std::string chap_user;
  std::string chap_password;
  // Exactly the LUNs this ACL maps (a saved configuration's `mapped_luns`;
  // IscsiTargets fills it from configfs). None: ExportIscsi's auto_map rules.
  // A value: ExportIscsi maps the LUN it exports into this ACL only if it is
  // listed here, under the listed number and write_protect (see MapLunAs in
  // lio.cc for what it does with a mapping that exists already), and never
  // auto-maps into this ACL.
  std::optional<std::vector<MappedLun>> mapped_luns = std::nullopt;
};

struct IscsiSpec {
  std::string target;                // IQN
  std::vector<std::string> portals;  // "ip:port"; empty: 0.0.0.0:3260 on a new TPG
  std::vector<AclSpec> acls;         // initiators let in (empty: see demo_mode)
  std::optional<uint32_t> lun;       // TPG LUN number; default: lowest free
  // Any initiator may log in and write (targetcli's demo mode: no ACLs).
  // Must be asked for: without ACLs and without it, a new TPG or one already
  // in demo mode is refused. Excludes acls.
  bool demo_mode = false;
  // targetcli's auto_add_mapped_luns (its default, true): a LUN added to the
  // TPG is mapped into every node ACL the TPG already has, and an ACL made
  // here maps every LUN of the TPG. Mapped LUN number = TPG LUN number (the
  // lowest free one if an ACL has that number taken). false: only the ACLs
  // in `acls` map the LUN, and only it. Nothing to map in demo mode.
  bool auto_map = true;
};

// A node ACL that maps a TPG LUN: `mapped_lun` is the number the initiator sees.
struct LunMapping {
  std::string initiator;
  uint32_t mapped_lun = 0;
};

// Who may log in to an iSCSI target's TPG 1, as configfs has it now.
enum class IscsiAccess {
  kNoTpg,  // no such target/TPG yet
  kDemo,   // generate_node_acls=1: any initiator (targetcli's demo mode)
  kAcls,   // only initiators with an ACL (possibly none yet)
};

struct IscsiTarget {
  std::string iqn;
  uint32_t tpg = 1;
  std::vector<std::string> portals;
  std::vector<std::pair<uint32_t, std::string>> luns;  // lun number, backstore key
  std::vector<AclSpec> acls;
  bool demo_mode = false;
};

struct LoopbackTarget {
  std::string wwn;
  std::string nexus;
  std::vector<std::pair<uint32_t, std::string>> luns;
};

class Lio {
 public:
  explicit Lio(LioOptions options);

  const std::string& root() const { return opt_.configfs_root; }
  // Both throw a UserError that says what to do.
  void RequireCore() const;    // target_core_user loaded, configfs mounted
  void RequireRunner() const;  // a tcmu-runner process is running
  bool Available() const;      // target/core exists

  std::vector<Backstore> Backstores() const;  // cowstore ones only
  std::optional<Backstore> FindBackstore(const std::string& pool, const std::string& lun) const;
  std::optional<Backstore> FindBackstoreByKey(const std::string& key) const;
  // Whether any user backstore (cowstore's or another handler's) is named
  // `name`: rtslib keeps storage object names unique per plugin.
  bool UserBackstoreExists(const std::string& name) const;
  // Every storage object configfs has (target/core/<type>_<N>/<name>).
  std::vector<LioDevice> Devices() const;
  // The targets of `fabric` configfs has, whoever made them ("iscsi", "loopback").
  std::vector<std::string> TargetNames(const std::string& fabric) const;
  // Creates, configures and enables the backstore; removes it again on error.
  Backstore CreateBackstore(const BackstoreSpec& spec);
  // Refuses while a fabric LUN links to it.
  void DeleteBackstore(const Backstore& bs);

  std::vector<FabricLun> FabricLuns() const;  // every fabric, every owner
  std::vector<FabricLun> LinksTo(const Backstore& bs) const;

  // Exports over iSCSI (idempotent: an existing link in that target is
  // kept, missing portals and ACLs are added). Rolls back what it made.
  // Refuses, before changing anything, invalid names, demo_mode with acls,
  // and (no acls, no demo_mode) a new TPG or one in demo mode. A TPG's
  // access policy is set when it is made and never changed afterwards.
  FabricLun ExportIscsi(const Backstore& bs, const IscsiSpec& spec);
  IscsiAccess IscsiTpgAccess(const std::string& target) const;
  // The node ACLs of the LUN's TPG whose mapped LUNs link to it, by
  // initiator name (whatever their mapped LUN numbers).
  std::vector<LunMapping> MappedTo(const FabricLun& lun) const;
  // The mapped LUNs of node ACL `initiator` of iSCSI target `target` (TPG 1),
  // by mapped LUN number; a lun_<M> that links to no TPG LUN is left out.
  // Empty when there is no such ACL.
  std::vector<MappedLun> AclMappedLuns(const std::string& target, const std::string& initiator) const;
  // Exports through tcm_loop (idempotent: a loopback export of `bs` is kept,
  // on whatever target). `wwn`: the target (default: one derived from the
  // backstore). `lun`: the TPG LUN number (default: lowest free); refused,
  // before anything is made, when another LUN has it (the message names its
  // backstore) or `bs` is another LUN of that target already (with no
  // `wwn`: of the loopback target it is exported on).
  FabricLun ExportLoopback(const Backstore& bs, const std::string& wwn = "",
                           std::optional<uint32_t> lun = std::nullopt);
  // Removes every iSCSI/loopback LUN linking to `bs` (first every ACL's
  // mapped LUN linking to it, as rtslib does) and the cowctl targets this
  // leaves empty. Throws (and changes nothing) if another fabric links.
  void Unexport(const Backstore& bs);

  std::vector<IscsiTarget> IscsiTargets() const;      // cowctl-owned only
  std::vector<LoopbackTarget> LoopbackTargets() const;  // cowctl-owned only

 private:
  std::string T(const std::string& rel) const { return opt_.configfs_root + "/target/" + rel; }
  bool OwnedTarget(const std::string& fabric, const std::string& target) const;
  void EnsureFabric(const std::string& fabric, const char* module) const;
  void RemoveTarget(const std::string& fabric, const std::string& target) const;

  LioOptions opt_;
};

// The access rules of `cowctl export iscsi` (`what` names the LUN, "POOL/LUN"),
// given the target's current access. Throws a UserError saying what to do:
//  - no acls, no demo_mode: refused for a new target and for one in demo mode
//    (either would let every initiator in); fine for a target with ACLs;
//  - demo_mode: fine for a new target or one in demo mode; refused for a
//    target with ACLs (demo mode is set only when a target is made);
//  - acls: refused for a target in demo mode (the ACLs would not keep any
//    initiator out); demo_mode together with acls is refused.
// ExportIscsi applies the first and last rule itself (restore relies on
// only those); the CLI calls this before it makes anything. It also holds a
// new CHAP secret to 12-16 characters (Microsoft's initiator needs that);
// ExportIscsi, and so restore, takes any secret LIO accepts (ChapProblem).
void CheckIscsiAccess(IscsiAccess access, const IscsiSpec& spec, const std::string& what);

// What to do about a failed open/mkdir/write in configfs, the pool directory
// or /etc/cowstore: "run cowctl as root" for EACCES/EPERM when not root,
// else `otherwise`.
std::string ErrnoAdvice(int err, const std::string& otherwise);

// The NAA identifier an initiator sees for a backstore whose
// wwn/vpd_unit_serial is `unit_serial` ("naa.6001405" and 25 hex digits, as
// ESXi lists it): the handler's VPD 0x83 designator (handler/scsi/naa.h).
std::string NaaName(const std::string& unit_serial);

// Default target name for a pool: iqn.2024-01.io.cowstore:<host>.<pool>
std::string DefaultIscsiTarget(const std::string& pool);
bool ValidIqn(const std::string& iqn);
// "IPv4:port" or "[IPv6]:port" (the address parsed by inet_pton, so nothing
// else reaches the np/ directory name in configfs).
bool ValidPortal(const std::string& portal);
// A loopback target's WWN: "naa." and 16 hex digits (it names a directory).
bool ValidLoopbackWwn(const std::string& wwn);
// A CHAP user name or secret as LIO stores it (auth/userid, auth/password):
// 1..255 bytes of printable ASCII without spaces, not starting with "NULL"
// (which LIO reads as "no CHAP"). Empty when fine, else what is wrong.
std::string ChapProblem(const std::string& value);

}  // namespace cowstore::cowctl
