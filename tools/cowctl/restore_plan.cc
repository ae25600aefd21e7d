// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/restore_plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace cowstore::cowctl {

PoolFacts ReadPoolFacts(const Context& ctx, const PoolConfig& p) {
  PoolFacts f;
  f.entry = PoolPath(ctx, p.name);
  struct stat st;
  f.entry_exists = ::lstat(f.entry.c_str(), &st) == 0;
  if (f.entry_exists) {
    f.at_entry = ProbePool(f.entry);
    char buf[4096];
    ssize_t n = ::readlink(f.entry.c_str(), buf, sizeof buf - 1);
    f.link_target = n > 0 ? std::string(buf, static_cast<size_t>(n)) : f.entry;
    return f;
  }
  const std::string saved = !p.device.empty() ? p.device : p.file;
  if (!saved.empty()) f.at_saved = ProbePool(saved);
  return f;
}

PoolStep PlanPool(const PoolConfig& p, const PoolFacts& f, bool create_missing) {
  PoolStep s;
  s.cfg = &p;
  const std::string& entry = f.entry;
  auto skip = [&](const std::string& why) {
    s.action = PoolStep::kSkip;
    s.problem = "pool " + p.name + ": " + why;
    return s;
  };
  auto other = [&](const PoolProbe& pr, const std::string& where) {
    return skip(where + " holds the pool with UUID " + UuidString(pr.uuid) + ", the file saved UUID " + p.uuid +
                ": another pool, left alone (if it is the one you want, run 'cowctl save' to record it)");
  };
  if (f.entry_exists) {
    const PoolProbe& pr = f.at_entry;
    if (pr.kind == PoolProbe::kAbsent) {
      return skip(entry + " points at " + f.link_target +
                  ", which is missing (device not attached, or its filesystem not mounted?): not restored");
    }
    if (pr.kind != PoolProbe::kPool) return skip(pr.detail + ": not restored");
    if (!p.uuid.empty() && UuidString(pr.uuid) != p.uuid) return other(pr, entry);
    s.action = PoolStep::kUse;
    return s;
  }
  // The pool directory has no entry for it: the saved device or file may
  // still hold it (a lost link), else it is missing.
  const std::string saved = !p.device.empty() ? p.device : p.file;
  if (!saved.empty()) {
    const PoolProbe& pr = f.at_saved;
    if (pr.kind == PoolProbe::kPool) {
      if (!p.uuid.empty() && UuidString(pr.uuid) != p.uuid) return other(pr, saved);
      if (p.uuid.empty() && !p.device.empty()) {
        return skip("the file records no pool UUID (written by an older cowctl), so restore cannot tell that " +
                    p.device + " holds this pool (device names change between boots): if it does, run 'ln -s " +
                    p.device + " " + entry + "' and 'cowctl save'");
      }
      s.action = PoolStep::kRelink;
      s.target = saved;
      return s;
    }
    if (!p.device.empty()) {
      if (pr.kind == PoolProbe::kAbsent) {
        return skip("device " + p.device + " is missing: not restored (attach it, then restore again)");
      }
      return skip(pr.detail + ": not restored (restore never creates a pool on a device; if " + p.device +
                  " is meant for it, run 'cowctl pool create " + p.name + " --device " + p.device + "')");
    }
    if (pr.kind != PoolProbe::kAbsent) return skip(pr.detail + ": not restored (restore never overwrites a file)");
  }
  if (!create_missing) {
    return skip((p.file.empty() ? entry : p.file) +
                " is missing (its filesystem not mounted?): not restored, nothing created (if it is really "
                "gone, 'cowctl restore --create-missing' creates it empty)");
  }
  s.action = PoolStep::kCreate;
  return s;
}

void PlanLuns(const PoolStep& s, bool create_missing, LunPlan* plan) {
  const PoolConfig& p = *s.cfg;
  for (const auto& l : p.luns) {
    std::string key = p.name + "/" + l.name;
    auto it = std::find_if(s.luns.begin(), s.luns.end(), [&](const store::LunInfo& x) { return x.name == l.name; });
    if (it != s.luns.end()) {
      if (it->size_bytes != l.size || it->block_size != l.block_size) {
        plan->warnings.push_back("LUN " + key + " is " + std::to_string(it->size_bytes) + " bytes / " +
                                 std::to_string(it->block_size) + "-byte blocks, the file says " +
                                 std::to_string(l.size) + " / " + std::to_string(l.block_size) +
                                 "; keeping the pool's");
      }
    } else if (create_missing) {
      plan->created.insert(key);
    } else {
      plan->problems.push_back("LUN " + key + ": missing from pool " + p.name +
                               " (deleted since the save?): not created, not exported (if it is really gone, "
                               "'cowctl restore --create-missing' creates it empty, with a new WWN)");
      continue;
    }
    plan->ready.insert(key);
  }
}

}  // namespace cowstore::cowctl
