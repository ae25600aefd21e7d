// SPDX-License-Identifier: Apache-2.0
// cowctl save and restore: pools, LUNs, backstores and exports to and from
// a YAML file (config.h); restore runs at boot (cowstore-restore.service).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <set>

#include "handler/store/env.h"
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
    p.soft_threshold = s.total_units
                           ? static_cast<uint32_t>((s.soft_threshold_units * 100 + s.total_units / 2) / s.total_units)
                           : 0;
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

int Restore(const Context& ctx, const std::string& file, bool dry_run, bool create_missing) {
  // 1. The whole file, every field and identity (throws before any change).
  Config c = LoadConfig(file);
  std::vector<std::string> problems;  // pools and LUNs not restored, one line each

  // 2. The pools and LUNs to restore, read-only.
  std::vector<PoolStep> steps;
  std::set<std::string> ready, created;  // "pool/lun": restorable; to be created empty
  for (const auto& p : c.pools) {
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
      problems.push_back(s.problem);
      steps.push_back(std::move(s));
      continue;
    }
    LunPlan lp;
    PlanLuns(s, create_missing, &lp);
    for (const auto& w : lp.warnings) std::cerr << "cowctl: warning: " << file << ": " << w << "\n";
    problems.insert(problems.end(), lp.problems.begin(), lp.problems.end());
    ready.insert(lp.ready.begin(), lp.ready.end());
    created.insert(lp.created.begin(), lp.created.end());
    steps.push_back(std::move(s));
  }
  auto is_ready = [&](const ExportLun& e) { return ready.count(e.pool + "/" + e.name) > 0; };

  // 3. LIO: what is there must agree with the file (else nothing changes).
  bool need_lio = false;
  for (const auto& p : c.pools) {
    for (const auto& l : p.luns) need_lio = need_lio || (!l.backstore.empty() && ready.count(p.name + "/" + l.name));
  }
  for (const auto& t : c.iscsi) need_lio = need_lio || std::any_of(t.luns.begin(), t.luns.end(), is_ready);
  for (const auto& t : c.loopback) need_lio = need_lio || std::any_of(t.luns.begin(), t.luns.end(), is_ready);
  Lio lio = MakeLio(ctx);
  if (need_lio) {
    lio.RequireCore();
    lio.RequireRunner();
    const auto live = lio.Backstores();
    const auto links = lio.FabricLuns();
    // Each backstore restore makes: its name free, its identity unique.
    std::map<std::string, std::string> naas;  // NAA -> who has it
    for (const auto& b : live) {
      if (!b.wwn.empty()) naas[NaaName(b.wwn)] = "backstore " + b.key() + " (" + b.config.pool + "/" + b.config.lun + ")";
    }
    for (const auto& s : steps) {
      if (s.action == PoolStep::kSkip) continue;
      for (const auto& l : s.cfg->luns) {
        std::string key = s.cfg->name + "/" + l.name;
        if (l.backstore.empty() || !ready.count(key)) continue;
        if (std::any_of(live.begin(), live.end(), [&](const Backstore& b) {
              return b.config.pool == s.cfg->name && b.config.lun == l.name;
            })) {
          continue;
        }
        if (lio.UserBackstoreExists(l.backstore)) {
          throw UserError(file + ": a user backstore named '" + l.backstore + "' (for " + key +
                          ") exists already: remove or rename it with targetcli, then restore again");
        }
        if (created.count(key)) continue;  // a new LUN gets its new identity
        std::string wwn = l.wwn;
        if (wwn.empty()) {
          for (const auto& x : s.luns) {
            if (x.name == l.name) wwn = UuidString(x.id);
          }
        }
        auto [at, fresh] = naas.emplace(NaaName(wwn), "LUN " + key);
        if (!fresh) {
          throw UserError(file + ": LUN " + key + " would get the identifier " + at->first + ", which " + at->second +
                          " has: an initiator would take the two for one disk; refusing (give one a new wwn)");
        }
      }
    }
    // Exports: targets cowctl owns, LUN numbers and mappings free.
    auto has_backstore_field = [&](const ExportLun& e) {
      for (const auto& p : c.pools) {
        for (const auto& l : p.luns) {
          if (p.name == e.pool && l.name == e.name) return !l.backstore.empty();
        }
      }
      return false;
    };
    auto owned_iscsi = lio.IscsiTargets();
    for (const auto& t : c.iscsi) {
      if (!std::any_of(t.luns.begin(), t.luns.end(), is_ready)) continue;
      bool exists = std::any_of(links.begin(), links.end(), [&](const FabricLun& l) {
        return l.fabric == "iscsi" && l.target == t.target;
      });
      bool owned = std::any_of(owned_iscsi.begin(), owned_iscsi.end(), [&](const IscsiTarget& o) { return o.iqn == t.target; });
      if (exists && !owned) {
        throw UserError(file + ": iSCSI target " + t.target + " exists and was not made by cowctl: remove it with "
                        "targetcli, or rename the target in the file");
      }
      for (const auto& e : t.luns) {
        if (!is_ready(e)) continue;
        auto bs = lio.FindBackstore(e.pool, e.name);
        if (!bs && !has_backstore_field(e)) {
          throw UserError(file + ": iSCSI target " + t.target + " exports " + e.pool + "/" + e.name +
                          ", which has no backstore: give that LUN a 'backstore:' field");
        }
        for (const auto& l : links) {
          if (l.fabric != "iscsi" || l.target != t.target) continue;
          bool ours = bs && l.backstore_key == bs->key();
          if (l.lun == e.lun && !ours) {
            throw UserError(file + ": LUN " + std::to_string(e.lun) + " of " + t.target + " is taken by " +
                            l.backstore_key + ", the file puts " + e.pool + "/" + e.name + " there");
          }
          if (ours && l.lun != e.lun) {
            throw UserError(file + ": " + e.pool + "/" + e.name + " is LUN " + std::to_string(l.lun) + " of " +
                            t.target + ", the file says LUN " + std::to_string(e.lun) + ": unexport it first");
          }
        }
      }
      for (const auto& a : t.acls) {
        if (!a.mapped_luns) continue;
        for (const auto& m : *a.mapped_luns) {
          for (const auto& have : lio.AclMappedLuns(t.target, a.initiator)) {
            if (have.mapped_lun == m.mapped_lun && have.lun != m.lun) {
              throw UserError(file + ": " + a.initiator + " sees LUN " + std::to_string(have.lun) + " of " + t.target +
                              " as its LUN " + std::to_string(m.mapped_lun) + ", where the file puts LUN " +
                              std::to_string(m.lun) + ": remove that mapping with targetcli, then restore again");
            }
          }
        }
      }
    }
    auto owned_loop = lio.LoopbackTargets();
    for (const auto& t : c.loopback) {
      if (!std::any_of(t.luns.begin(), t.luns.end(), is_ready)) continue;
      bool exists = std::any_of(links.begin(), links.end(), [&](const FabricLun& l) {
        return l.fabric == "loopback" && l.target == t.wwn;
      });
      bool owned = std::any_of(owned_loop.begin(), owned_loop.end(), [&](const LoopbackTarget& o) { return o.wwn == t.wwn; });
      if (exists && !owned) throw UserError(file + ": loopback target " + t.wwn + " exists and was not made by cowctl");
      for (const auto& e : t.luns) {
        if (is_ready(e) && !has_backstore_field(e) && !lio.FindBackstore(e.pool, e.name)) {
          throw UserError(file + ": loopback " + t.wwn + " exports " + e.pool + "/" + e.name + " without backstore");
        }
      }
    }
  }

  // 4. Apply (or, with --dry-run, say what would be done).
  std::vector<std::string> done;
  auto note = [&](const std::string& s) { done.push_back(s); };
  auto report = [&](const std::string* error) {
    Json j = Json::object();
    j["file"] = file;
    j["dry_run"] = dry_run;
    Json a = Json::array(), pr = Json::array();
    std::string human;
    for (const auto& d : done) {
      a.push_back(d);
      human += d + "\n";
    }
    for (const auto& p : problems) pr.push_back(p);
    j["changes"] = a;
    j["not_restored"] = pr;
    if (error) j["error"] = *error;
    if (done.empty() && problems.empty() && !error) human = "nothing to do: everything in " + file + " is in place\n";
    Emit(ctx, j, human);
  };
  try {
    for (const auto& s : steps) {
      const PoolConfig& p = *s.cfg;
      if (s.action == PoolStep::kRelink) {
        std::string entry = PoolPath(ctx, p.name);
        if (dry_run) {
          note("would relink pool " + p.name + " to " + s.target);
        } else {
          ::mkdir(ctx.pool_dir.c_str(), 0755);
          if (::symlink(s.target.c_str(), entry.c_str()) != 0) {
            throw UserError("cannot link " + entry + " to " + s.target + ": " + std::strerror(errno));
          }
          note("relinked pool " + p.name + " to " + s.target + (p.uuid.empty() ? "" : " (its UUID matches)"));
        }
      } else if (s.action == PoolStep::kCreate) {
        if (dry_run) {
          note("would create pool " + p.name + " (empty)");
        } else {
          // The saved size was accepted once; a filesystem now short of it
          // is warned about (on stderr), not a reason to keep the pool away.
          PoolCreateArgs a{p.name, std::to_string(p.size), "", p.file, std::to_string(p.allocation_unit),
                           p.soft_threshold, true};
          QuietPoolCreate(ctx, a);
          note("created pool " + p.name + " (empty, as --create-missing asked; 'cowctl save' records its new UUID)");
        }
      }
      if (s.action == PoolStep::kSkip) continue;
      for (const auto& l : p.luns) {
        std::string key = p.name + "/" + l.name;
        if (!created.count(key)) continue;
        if (dry_run) {
          note("would create LUN " + key + " (empty)");
          continue;
        }
        OpenPool(ctx, p.name)->CreateLun(l.name, l.size, l.block_size);
        note("created LUN " + key + " (empty, with a new WWN, as --create-missing asked)");
      }
    }
    if (need_lio) {
      for (const auto& p : c.pools) {
        for (const auto& l : p.luns) {
          LunRef ref{p.name, l.name};
          if (l.backstore.empty() || !ready.count(ref.str())) continue;
          if (lio.FindBackstore(p.name, l.name)) continue;
          if (dry_run) {
            note("would create backstore " + l.backstore);
            continue;
          }
          BackstoreArgs b{true, l.backstore, l.copy_group, l.wce ? (*l.wce ? "1" : "0") : ""};
          store::LunInfo info = LunInfoOf(ctx, ref);
          BackstoreSpec spec;
          spec.name = l.backstore;
          spec.config = MakeCfg(ref, b);
          spec.size = info.size_bytes;
          spec.block_size = info.block_size;
          // A LUN created empty never takes the saved identity: an initiator
          // would take it for the disk that held the data.
          spec.wwn = l.wwn.empty() || created.count(ref.str()) ? UuidString(info.id) : l.wwn;
          lio.CreateBackstore(spec);
          note("created backstore " + l.backstore);
        }
      }
      for (const auto& t : c.iscsi) {
        // The ACLs' mapped LUNs before, to tell what this restore mapped.
        std::map<std::string, std::vector<MappedLun>> before;
        for (const auto& a : t.acls) before[a.initiator] = lio.AclMappedLuns(t.target, a.initiator);
        auto maps = [](const std::vector<MappedLun>& v, const MappedLun& m) {
          return std::any_of(v.begin(), v.end(),
                             [&](const MappedLun& x) { return x.lun == m.lun && x.mapped_lun == m.mapped_lun; });
        };
        auto as = [&](const std::string& initiator, const MappedLun& m) {
          return "LUN " + std::to_string(m.lun) + " of " + t.target + " into " + initiator + " as LUN " +
                 std::to_string(m.mapped_lun) + (m.write_protect ? " (write-protected)" : "");
        };
        auto lun_ready = [&](uint32_t n) {
          return std::any_of(t.luns.begin(), t.luns.end(), [&](const ExportLun& e) { return e.lun == n && is_ready(e); });
        };
        for (const auto& e : t.luns) {
          if (!is_ready(e)) continue;
          auto bs = lio.FindBackstore(e.pool, e.name);
          if (!bs) {
            if (dry_run) note("would export " + e.pool + "/" + e.name + " on " + t.target);
            continue;  // (not dry_run: the backstore was made above)
          }
          bool present = false;
          for (const auto& l : lio.LinksTo(*bs)) present = present || (l.fabric == "iscsi" && l.target == t.target);
          if (dry_run) {
            if (!present) note("would export " + e.pool + "/" + e.name + " on " + t.target);
            continue;
          }
          // The saved file is the explicit act: a target saved without ACLs
          // was in demo mode and comes back in demo mode. No auto-mapping:
          // an ACL with mapped_luns gets exactly those, one without (a
          // version 1 file) every LUN of the target, as the file's exports
          // gave it; an ACL the file does not list gets nothing.
          lio.ExportIscsi(*bs, {t.target, t.portals, t.acls, e.lun, /*demo_mode=*/t.acls.empty(), /*auto_map=*/false});
          if (!present) note("exported " + e.pool + "/" + e.name + " as LUN " + std::to_string(e.lun) + " of " + t.target);
        }
        if (!std::any_of(t.luns.begin(), t.luns.end(), is_ready)) continue;
        for (const auto& a : t.acls) {
          auto now = lio.AclMappedLuns(t.target, a.initiator);
          if (dry_run) {
            // What restore would map: the listed mappings (every LUN of the
            // target for an ACL without mapped_luns) the ACL lacks.
            std::vector<MappedLun> want;
            if (a.mapped_luns) {
              want = *a.mapped_luns;
            } else {
              for (const auto& e : t.luns) want.push_back({e.lun, e.lun, false});
            }
            for (const auto& m : want) {
              if (!lun_ready(m.lun)) continue;
              bool have = a.mapped_luns ? maps(now, m)
                                        : std::any_of(now.begin(), now.end(), [&](const MappedLun& x) { return x.lun == m.lun; });
              if (!have) {
                note("would map " + as(a.initiator, m));
                continue;
              }
              auto live = std::find_if(now.begin(), now.end(), [&](const MappedLun& x) { return x.mapped_lun == m.mapped_lun; });
              if (a.mapped_luns && live != now.end() && live->write_protect != m.write_protect) {
                note((m.write_protect ? "would write-protect LUN " : "would lift the write protection of LUN ") +
                     std::to_string(m.mapped_lun) + " of " + a.initiator + " on " + t.target);
              }
            }
            continue;
          }
          const auto& old = before[a.initiator];
          for (const auto& m : now) {
            if (!maps(old, m)) {
              note("mapped " + as(a.initiator, m));
              continue;
            }
            auto was = std::find_if(old.begin(), old.end(), [&](const MappedLun& x) { return x.mapped_lun == m.mapped_lun; });
            if (was != old.end() && was->write_protect != m.write_protect) {
              note((m.write_protect ? "write-protected LUN " : "lifted the write protection of LUN ") +
                   std::to_string(m.mapped_lun) + " of " + a.initiator + " on " + t.target);
            }
          }
          // Restore adds and never removes (as with LUNs and ACLs it does
          // not list): a mapping beyond the file's is left, and said.
          for (const auto& m : now) {
            bool listed = a.mapped_luns ? maps(*a.mapped_luns, m)
                                        : std::any_of(t.luns.begin(), t.luns.end(), [&](const ExportLun& e) { return e.lun == m.lun; });
            if (!listed) {
              std::cerr << "cowctl: warning: " << file << ": " << a.initiator << " sees LUN " << m.lun << " of "
                        << t.target << " as LUN " << m.mapped_lun
                        << ", which the file does not map; left as it is (restore never removes a mapping: "
                           "remove it with targetcli if it should go)\n";
            }
          }
        }
      }
      for (const auto& t : c.loopback) {
        for (const auto& e : t.luns) {
          if (!is_ready(e)) continue;
          auto bs = lio.FindBackstore(e.pool, e.name);
          if (!bs) {
            if (dry_run) note("would export " + e.pool + "/" + e.name + " over loopback");
            continue;
          }
          bool present = false;
          for (const auto& l : lio.LinksTo(*bs)) present = present || l.fabric == "loopback";
          if (present) continue;
          if (dry_run) {
            note("would export " + e.pool + "/" + e.name + " over loopback");
            continue;
          }
          lio.ExportLoopback(*bs, t.wwn);
          note("exported " + e.pool + "/" + e.name + " over loopback " + t.wwn);
        }
      }
    }
  } catch (const UserError& e) {
    for (const auto& p : problems) std::cerr << "cowctl: " << p << "\n";
    if (done.empty()) throw;  // nothing was changed: the error says it all
    // Part-way: say exactly what was done (each object is whole), then why
    // it stopped. Nothing is undone; running restore again finishes the job.
    std::string why = e.what();
    report(&why);
    throw UserError("restore stopped part-way: " + why + " (what it did is listed on stdout, and left in place: "
                    "fix the cause and run restore again to finish)");
  }
  report(nullptr);
  for (const auto& p : problems) std::cerr << "cowctl: " << p << "\n";
  if (problems.empty()) return 0;
  std::cerr << "cowctl: " << (dry_run ? "would restore" : "restored") << " everything else in " << file << "; "
            << problems.size() << (problems.size() == 1 ? " item was" : " items were") << " not restored (above)\n";
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
