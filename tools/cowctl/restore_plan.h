// SPDX-License-Identifier: Apache-2.0
// What `cowctl restore` does with each pool of a saved file, decided before
// anything is changed (docs/design/cowctl.md, "Restore at boot"): the facts
// are read first (ReadPoolFacts: the pool directory's entry, the saved
// device or file; ReadLioFacts: what configfs holds), then PlanPool,
// PlanLuns and PlanLio decide from them alone, so that every rule can be
// tested without root, devices, configfs or a pool. Apply only executes the
// plan, and --dry-run prints the same plan.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "handler/store/pool.h"
#include "tools/cowctl/config.h"
#include "tools/cowctl/pools.h"

namespace cowstore::cowctl {

// What is on this machine for one saved pool.
struct PoolFacts {
  std::string entry;          // <pool_dir>/<name>
  bool entry_exists = false;  // lstat: a file, device node or link (dangling too)
  PoolProbe at_entry;         // entry_exists: what the entry leads to
  std::string link_target;    // entry_exists and a link: where it points
  PoolProbe at_saved;         // !entry_exists: what the saved device or file holds (kAbsent when none saved)
};
PoolFacts ReadPoolFacts(const Context& ctx, const PoolConfig& p);

struct PoolStep {
  const PoolConfig* cfg = nullptr;
  enum Action { kUse, kRelink, kCreate, kSkip } action = kSkip;
  std::string target;                 // kRelink: the device or file the entry will point at
  std::string problem;                // kSkip: why, one line
  std::string note;                   // kUse, kRelink: said as a warning (e.g. upgraded since saved)
  std::vector<store::LunInfo> luns;   // kUse, kRelink: what the pool holds now (filled by the caller)
};

// Restore uses a pool only if it is the one the file saved (same UUID, when
// the file has it, and then made with the file's allocation unit and grain,
// or upgraded since from the file's format 1 or 2 to format 3 at that
// allocation unit by `cowctl pool upgrade`, which its superblock records:
// used, and said in `note`);
// relinks a lost entry only to a device or file holding
// that pool; creates one only when asked (and never on a device). Reads
// nothing but its arguments.
PoolStep PlanPool(const PoolConfig& p, const PoolFacts& f, bool create_missing);

// The LUNs of a pool restore uses (kUse, kRelink: `s.luns` filled), held
// against the file's: "pool/lun" keys.
struct LunPlan {
  std::set<std::string> ready;          // there (or to be created): exported as the file says
  std::set<std::string> created;        // missing, created empty (--create-missing), with a new WWN
  std::vector<std::string> problems;    // missing and not created: not restored, one line each
  std::vector<std::string> warnings;    // there, but not as the file says (the pool's is kept)
};
// Adds the LUNs of pool step `s` to `plan`. Reads nothing but its arguments.
void PlanLuns(const PoolStep& s, bool create_missing, LunPlan* plan);

// ---------------------------------------------------------------- LIO

// What LIO holds now, as far as a restore could touch it.
struct LioFacts {
  std::vector<Backstore> backstores;           // cowstore's
  std::vector<LioDevice> devices;              // every storage object, any handler
  std::vector<FabricLun> fabric_luns;          // every fabric, every owner
  std::vector<std::string> iscsi_targets;      // every iSCSI target configfs has
  std::vector<std::string> loopback_targets;   // every loopback target
  std::vector<IscsiTarget> owned_iscsi;        // cowctl's: portals, ACLs, CHAP, mappings
  std::vector<LoopbackTarget> owned_loopback;  // cowctl's
};
LioFacts ReadLioFacts(const Lio& lio);

// A LUN the pool step found restorable (LunPlan::ready), as the LIO plan
// needs it.
struct RestoreLun {
  std::string pool;
  const LunConfig* cfg = nullptr;
  std::string field;  // where the file has it: "pools[1].luns[0]"
  std::string id;     // its UUID now; empty: created by this restore (it gets a new one)
};

// One change, said before it is made (--dry-run prints "would " + will)
// and after (did).
struct Change {
  std::string will;  // "create backstore tank-vm1"
  std::string did;   // "created backstore tank-vm1"
};

// One call into configfs (Lio::CreateBackstore, ExportIscsi or
// ExportLoopback) and the changes it makes.
struct LioStep {
  enum Kind { kBackstore, kIscsi, kLoopback } kind = kBackstore;
  std::string pool, lun;                  // the LUN
  const LunConfig* cfg = nullptr;         // the LUN's entry in the file
  bool new_lun = false;                   // kBackstore: a LUN this restore creates: its new id, not the saved wwn
  const IscsiConfig* iscsi = nullptr;     // kIscsi: the target
  uint32_t tpg_lun = 0;                   // kIscsi, kLoopback: the saved LUN number
  const LoopbackConfig* loopback = nullptr;  // kLoopback: the target
  std::vector<Change> changes;            // never empty
};

struct LioPlan {
  std::vector<LioStep> steps;           // in order: backstores, iSCSI, loopback
  // "<field>: <what>": LIO has that object, differently. Any conflict:
  // restore changes nothing at all.
  std::vector<std::string> conflicts;
  std::vector<std::string> warnings;    // left as they are, and said
};

// Whether a restorable LUN has a backstore or an export (LIO must be there).
bool NeedsLio(const Config& c, const std::vector<RestoreLun>& luns);
// What LIO must get for the restorable `luns`: each object is to be made,
// is there as saved (nothing to do: a re-run is a no-op), or conflicts.
// Reads nothing but its arguments.
LioPlan PlanLio(const Config& c, const std::vector<RestoreLun>& luns, const LioFacts& f);

}  // namespace cowstore::cowctl
