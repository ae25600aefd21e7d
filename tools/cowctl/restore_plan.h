// SPDX-License-Identifier: Apache-2.0
// What `cowctl restore` does with each pool of a saved file, decided before
// anything is changed (docs/design/cowctl.md, "Restore at boot"): the facts
// are read first (ReadPoolFacts: the pool directory's entry, the saved
// device or file), then PlanPool decides from them alone, so that every
// rule can be tested without root, devices or a pool.
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
  std::vector<store::LunInfo> luns;   // kUse, kRelink: what the pool holds now (filled by the caller)
};

// Restore uses a pool only if it is the one the file saved (same UUID, when
// the file has it); relinks a lost entry only to a device or file holding
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

}  // namespace cowstore::cowctl
