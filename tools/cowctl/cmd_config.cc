// SPDX-License-Identifier: Apache-2.0
// cowctl save and restore: pools, LUNs, backstores and exports to and from
// a YAML file (config.h); restore runs at boot (cowstore-restore.service).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>

#include "handler/store/env.h"
#include "tools/cowctl/capacity.h"
#include "tools/cowctl/cmd_common.h"
#include "tools/cowctl/config.h"
#include "tools/cowctl/restore_plan.h"

namespace cowstore::cowctl {
namespace {

Config Gather(const Context& ctx) {
  Config c;
  Lio lio = MakeLio(ctx);
  bool lio_on = lio.Available();
  std::vector<Backstore> bss = lio_on ? lio.Backstores() : std::vector<Backstore>{};
  std::map<std::string, std::pair<std::string, std::string>> by_key;  // backstore key -> pool, lun
  for (const auto& name : PoolNames(ctx)) {
    auto h = OpenPool(ctx, name, true);
    auto s = h->Space();
    PoolConfig p;
    p.name = name;
    std::string entry = PoolPath(ctx, name);
    PoolProbe probe = ProbePool(entry);
    if (probe.kind == PoolProbe::kPool) p.uuid = UuidString(probe.uuid);
    struct stat st;
    if (::lstat(entry.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlink(entry.c_str(), buf, sizeof buf - 1);
      std::string target = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
      struct stat t;
      if (::stat(entry.c_str(), &t) == 0 && S_ISBLK(t.st_mode)) p.device = target;
      else p.file = target;
    }
    p.size = s.pool_size_bytes;
    p.allocation_unit = s.allocation_unit;
    p.grain = static_cast<uint32_t>(SharingUnit(s));
    p.soft_threshold = SoftThresholdPercent(s);
    for (const auto& l : s.luns) {
      LunConfig lc;
      lc.name = l.name;
      lc.size = l.size_bytes;
      lc.block_size = l.block_size;
      for (const auto& b : bss) {
        if (b.config.pool != name || b.config.lun != l.name) continue;
        lc.backstore = b.name;
        lc.wwn = b.wwn;
        if (b.config.options.count("copy_group")) lc.copy_group = b.config.options.at("copy_group");
        if (b.config.options.count("wce")) lc.wce = b.config.options.at("wce") == "1";
        if (b.config.options.count("thin_on_thin")) lc.thin_on_thin = b.config.options.at("thin_on_thin") == "1";
        by_key[b.key()] = {name, l.name};
      }
      p.luns.push_back(std::move(lc));
    }
    c.pools.push_back(std::move(p));
  }
  if (!lio_on) return c;
  for (const auto& t : lio.IscsiTargets()) {
    IscsiConfig ic;
    ic.target = t.iqn;
    ic.portals = t.portals;
    for (const auto& [n, key] : t.luns) {
      if (by_key.count(key)) ic.luns.push_back({n, by_key[key].first, by_key[key].second});
    }
    // Who sees what, mapping for mapping (restore maps exactly this): only
    // LUNs the file has, so that it loads again.
    ic.acls = t.acls;
    for (auto& a : ic.acls) {
      if (!a.mapped_luns) a.mapped_luns.emplace();
      std::erase_if(*a.mapped_luns, [&](const MappedLun& m) {
        return std::none_of(ic.luns.begin(), ic.luns.end(), [&](const ExportLun& e) { return e.lun == m.lun; });
      });
    }
    c.iscsi.push_back(std::move(ic));
  }
  for (const auto& t : lio.LoopbackTargets()) {
    LoopbackConfig lc;
    lc.wwn = t.wwn;
    for (const auto& [n, key] : t.luns) {
      if (by_key.count(key)) lc.luns.push_back({n, by_key[key].first, by_key[key].second});
    }
    c.loopback.push_back(std::move(lc));
  }
  return c;
}

void Save(const Context& ctx, const std::string& file) {
  Config c = Gather(ctx);
  WriteConfig(file, c);
  size_t luns = 0;
  for (const auto& p : c.pools) luns += p.luns.size();
  Json j = Json::object();
  j["file"] = file;
  j["pools"] = static_cast<uint64_t>(c.pools.size());
  j["luns"] = static_cast<uint64_t>(luns);
  j["iscsi_targets"] = static_cast<uint64_t>(c.iscsi.size());
  j["loopback_targets"] = static_cast<uint64_t>(c.loopback.size());
  Emit(ctx, j, "saved " + std::to_string(c.pools.size()) + " pools, " + std::to_string(luns) + " LUNs, " +
                   std::to_string(c.iscsi.size()) + " iSCSI and " + std::to_string(c.loopback.size()) +
                   " loopback targets to " + file + "\n");
}

// PoolCreate without its report (restore prints its own summary).
void QuietPoolCreate(const Context& ctx, const PoolCreateArgs& a) {
  std::streambuf* old = std::cout.rdbuf(nullptr);
  try {
    PoolCreate(ctx, a);
  } catch (...) {
    std::cout.rdbuf(old);
    throw;
  }
  std::cout.rdbuf(old);
}

// The LUNs a usable pool holds now, read without changing it.
std::vector<store::LunInfo> PoolLuns(const Context& ctx, const PoolStep& s) {
  if (s.action == PoolStep::kUse) return OpenPool(ctx, s.cfg->name, true)->Space().luns;
  store::OpenOptions oo;
  oo.read_only = true;
  auto r = store::Pool::Open(store::DefaultEnv(), s.target, oo);
  if (!r.ok()) Fail(r.status(), "opening pool '" + s.cfg->name + "' on " + s.target);
  auto luns = r.value()->Space().luns;
  (void)r.value()->Close();
  return luns;
}

// The pools and LUNs restore can use, decided from the facts (PlanPool,
// PlanLuns) without changing anything.
struct PoolsPlan {
  std::vector<PoolStep> pools;
  std::vector<RestoreLun> luns;        // restorable: exported as the file says
  std::vector<std::string> problems;   // pools and LUNs not restored, one line each
  std::vector<std::string> warnings;
};

// The restorable LUNs of pool step `s` (the `index`th pool of the file).
void AddRestoreLuns(const PoolStep& s, size_t index, const LunPlan& lp, std::vector<RestoreLun>* out) {
  const PoolConfig& p = *s.cfg;
  for (size_t j = 0; j < p.luns.size(); ++j) {
    const std::string key = p.name + "/" + p.luns[j].name;
    if (!lp.ready.count(key)) continue;
    RestoreLun r{p.name, &p.luns[j], "pools[" + std::to_string(index) + "].luns[" + std::to_string(j) + "]", ""};
    for (const auto& x : s.luns) {
      if (x.name == p.luns[j].name && !lp.created.count(key)) r.id = UuidString(x.id);
    }
    out->push_back(std::move(r));
  }
}

PoolsPlan PlanPools(const Context& ctx, const Config& c, bool create_missing) {
  PoolsPlan pp;
  for (size_t i = 0; i < c.pools.size(); ++i) {
    const PoolConfig& p = c.pools[i];
    PoolStep s = PlanPool(p, ReadPoolFacts(ctx, p), create_missing);
    if (s.action == PoolStep::kUse || s.action == PoolStep::kRelink) {
      try {
        s.luns = PoolLuns(ctx, s);
      } catch (const UserError& e) {
        s.action = PoolStep::kSkip;
        s.problem = "pool " + p.name + ": " + e.what() + ": not restored";
      }
    }
    if (s.action == PoolStep::kSkip) {
      pp.problems.push_back(s.problem);
      pp.pools.push_back(std::move(s));
      continue;
    }
    LunPlan lp;
    PlanLuns(s, create_missing, &lp);
    if (!s.note.empty()) pp.warnings.push_back(s.note);
    pp.warnings.insert(pp.warnings.end(), lp.warnings.begin(), lp.warnings.end());
    pp.problems.insert(pp.problems.end(), lp.problems.begin(), lp.problems.end());
    AddRestoreLuns(s, i, lp, &pp.luns);
    pp.pools.push_back(std::move(s));
  }
  return pp;
}

// One step of the plan: the changes it makes, and how. --dry-run prints
// the changes; apply runs each step and prints them as done.
struct Step {
  std::vector<Change> changes;
  std::function<void()> apply;
};

void Relink(const Context& ctx, const PoolStep& s) {
  std::string entry = PoolPath(ctx, s.cfg->name);
  ::mkdir(ctx.pool_dir.c_str(), 0755);
  if (::symlink(s.target.c_str(), entry.c_str()) != 0) {
    throw UserError("cannot link " + entry + " to " + s.target + ": " + std::strerror(errno));
  }
}

void CreatePool(const Context& ctx, const PoolConfig& p) {
  // The saved size was accepted once; a filesystem now short of it is
  // warned about (on stderr), not a reason to keep the pool away.
  PoolCreateArgs a{p.name, std::to_string(p.size), "", p.file, std::to_string(p.allocation_unit),
                   p.soft_threshold, true};
  a.grain = std::to_string(p.sharing_unit());
  QuietPoolCreate(ctx, a);
}

void AddPoolSteps(const Context& ctx, const PoolsPlan& pp, std::vector<Step>* steps) {
  for (const auto& s : pp.pools) {
    const PoolConfig& p = *s.cfg;
    if (s.action == PoolStep::kSkip) continue;
    if (s.action == PoolStep::kRelink) {
      steps->push_back({{{"relink pool " + p.name + " to " + s.target,
                          "relinked pool " + p.name + " to " + s.target + (p.uuid.empty() ? "" : " (its UUID matches)")}},
                        [&ctx, &s] { Relink(ctx, s); }});
    } else if (s.action == PoolStep::kCreate) {
      steps->push_back({{{"create pool " + p.name + " (empty)",
                          "created pool " + p.name +
                              " (empty, as --create-missing asked; 'cowctl save' records its new UUID)"}},
                        [&ctx, &p] { CreatePool(ctx, p); }});
    }
    for (const auto& l : pp.luns) {
      if (l.pool != p.name || !l.id.empty()) continue;
      const std::string key = p.name + "/" + l.cfg->name;
      steps->push_back({{{"create LUN " + key + " (empty)",
                          "created LUN " + key + " (empty, with a new WWN, as --create-missing asked)"}},
                        [&ctx, &l] { OpenPool(ctx, l.pool)->CreateLun(l.cfg->name, l.cfg->size, l.cfg->block_size); }});
    }
  }
}

Backstore BackstoreFor(const Lio& lio, const LioStep& s) {
  auto bs = lio.FindBackstore(s.pool, s.lun);
  if (!bs) throw UserError("the backstore of " + s.pool + "/" + s.lun + " is gone");
  return *bs;
}

// One LioStep: one call into configfs, whole or not at all (each rolls
// back what it made).
void ApplyLioStep(const Context& ctx, Lio& lio, const LioStep& s) {
  switch (s.kind) {
    case LioStep::kBackstore: {
      const LunConfig& l = *s.cfg;
      LunRef ref{s.pool, s.lun};
      BackstoreArgs b{true, l.backstore, l.copy_group, l.wce ? (*l.wce ? "1" : "0") : ""};
      if (l.thin_on_thin) b.thin_on_thin = *l.thin_on_thin ? "1" : "0";
      store::LunInfo info = LunInfoOf(ctx, ref);
      BackstoreSpec spec;
      spec.name = l.backstore;
      spec.config = MakeCfg(ref, b);
      spec.size = info.size_bytes;
      spec.block_size = info.block_size;
      // A LUN created empty never takes the saved identity: an initiator
      // would take it for the disk that held the data.
      spec.wwn = l.wwn.empty() || s.new_lun ? UuidString(info.id) : l.wwn;
      lio.CreateBackstore(spec);
      return;
    }
    case LioStep::kIscsi: {
      // The saved file is the explicit act: a target saved without ACLs
      // was in demo mode and comes back in demo mode. No auto-mapping: an
      // ACL with mapped_luns gets exactly those, one without (a version 1
      // file) every LUN of the target; an ACL the file does not list gets
      // nothing.
      const IscsiConfig& t = *s.iscsi;
      lio.ExportIscsi(BackstoreFor(lio, s),
                      {t.target, t.portals, t.acls, s.tpg_lun, /*demo_mode=*/t.acls.empty(), /*auto_map=*/false});
      return;
    }
    case LioStep::kLoopback:
      lio.ExportLoopback(BackstoreFor(lio, s), s.loopback->wwn, s.tpg_lun);
      return;
  }
}

// Any conflict with what LIO has: each named on stderr, nothing changed.
void RefuseConflicts(const std::string& file, const std::vector<std::string>& conflicts) {
  if (conflicts.empty()) return;
  if (conflicts.size() == 1) throw UserError(file + ": " + conflicts[0] + " (nothing was changed)");
  for (const auto& c : conflicts) std::cerr << "cowctl: " << file << ": " << c << "\n";
  throw UserError(file + ": " + std::to_string(conflicts.size()) +
                  " conflicts with what LIO has (above): nothing was changed");
}

// What a restore did (or, --dry-run, would do), and what it did not get to.
struct Outcome {
  std::vector<std::string> changes, not_done;
};

void Report(const Context& ctx, const std::string& file, bool dry_run, const Outcome& o,
            const std::vector<std::string>& problems, const std::string* error) {
  Json j = Json::object();
  j["file"] = file;
  j["dry_run"] = dry_run;
  Json a = Json::array(), nd = Json::array(), pr = Json::array();
  std::string human;
  for (const auto& d : o.changes) {
    a.push_back(d);
    human += d + "\n";
  }
  for (const auto& d : o.not_done) {
    nd.push_back(d);
    human += "not done: " + d + "\n";
  }
  for (const auto& p : problems) pr.push_back(p);
  j["changes"] = a;
  j["not_restored"] = pr;
  if (error) {
    j["not_done"] = nd;
    j["error"] = *error;
  }
  if (o.changes.empty() && problems.empty() && !error) human = "nothing to do: everything in " + file + " is in place\n";
  Emit(ctx, j, human);
}

// Runs the steps in order; stops at the first that fails, with what was
// done and what was not.
void Apply(const std::vector<Step>& steps, Outcome* o) {
  size_t i = 0;
  try {
    for (; i < steps.size(); ++i) {
      steps[i].apply();
      for (const auto& c : steps[i].changes) o->changes.push_back(c.did);
    }
  } catch (const UserError&) {
    for (; i < steps.size(); ++i) {
      for (const auto& c : steps[i].changes) o->not_done.push_back(c.will);
    }
    throw;
  }
}

int Restore(const Context& ctx, const std::string& file, bool dry_run, bool create_missing) {
  // 1. The whole file, every field and identity (throws before any change).
  Config c = LoadConfig(file);
  // 2. The plan, from facts read first: pools and LUNs, then LIO.
  PoolsPlan pp = PlanPools(ctx, c, create_missing);
  for (const auto& w : pp.warnings) std::cerr << "cowctl: warning: " << file << ": " << w << "\n";
  Lio lio = MakeLio(ctx);
  LioPlan lp;
  if (NeedsLio(c, pp.luns)) {
    lio.RequireCore();
    lio.RequireRunner();
    lp = PlanLio(c, pp.luns, ReadLioFacts(lio));
  }
  RefuseConflicts(file, lp.conflicts);
  for (const auto& w : lp.warnings) std::cerr << "cowctl: warning: " << file << ": " << w << "\n";
  std::vector<Step> steps;
  AddPoolSteps(ctx, pp, &steps);
  for (const auto& s : lp.steps) steps.push_back({s.changes, [&ctx, &lio, &s] { ApplyLioStep(ctx, lio, s); }});

  // 3. Print the plan (--dry-run), or apply it.
  Outcome o;
  if (dry_run) {
    for (const auto& s : steps) {
      for (const auto& ch : s.changes) o.changes.push_back("would " + ch.will);
    }
  } else {
    try {
      Apply(steps, &o);
    } catch (const UserError& e) {
      // Each step is whole; nothing is undone: running restore again
      // finishes the job.
      std::string why = e.what();
      Report(ctx, file, dry_run, o, pp.problems, &why);
      for (const auto& p : pp.problems) std::cerr << "cowctl: " << p << "\n";
      throw UserError("restore stopped part-way: " + why + " (what it did, and did not, is listed on stdout; "
                      "what it did is left in place: fix the cause and run restore again to finish)");
    }
  }
  Report(ctx, file, dry_run, o, pp.problems, nullptr);
  for (const auto& p : pp.problems) std::cerr << "cowctl: " << p << "\n";
  if (pp.problems.empty()) return 0;
  std::cerr << "cowctl: " << (dry_run ? "would restore" : "restored") << " everything else in " << file << "; "
            << pp.problems.size() << (pp.problems.size() == 1 ? " item was" : " items were")
            << " not restored (above)\n";
  return 3;
}

}  // namespace

void AddConfigCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  int& rc = cl.rc;
  auto& cfile = cl.Keep(std::string(kDefaultConfigPath));
  auto& dry_run = cl.Keep(false);
  auto& create_missing = cl.Keep(false);
  auto* sv = cl.app.add_subcommand("save", "Save pools, LUNs, backstores and exports to a YAML file");
  sv->add_option("file", cfile, "File")->capture_default_str();
  sv->callback([&] { Save(ctx, cfile); });
  auto* rs = cl.app.add_subcommand("restore", "Make pools, LUNs and exports match a saved file (idempotent)");
  rs->add_option("file", cfile, "File")->capture_default_str();
  rs->add_flag("--dry-run,-n", dry_run, "Print what would change, change nothing");
  rs->add_flag("--create-missing", create_missing,
               "Create a missing pool or LUN empty (never on a device; a created LUN gets a new WWN)");
  rs->callback([&] { rc = Restore(ctx, cfile, dry_run, create_missing); });
}

}  // namespace cowstore::cowctl
