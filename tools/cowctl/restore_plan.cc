// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/restore_plan.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "handler/store/superblock_v3.h"

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

namespace {

// How a size field is said in a refusal: as the file writes it (bytes),
// then readably.
std::string Bytes(uint32_t b, const std::string& more = "") {
  return std::to_string(b) + " (" + FormatSize(b) + more + ")";
}

// What the pool `pr` was made with and the file's entry says otherwise (""
// if nothing): the allocation unit, then the sharing unit, in which the
// format shows (below the AU: format 3). A file without `grain` means the
// AU, format 2 (PoolConfig::sharing_unit). Only for entries that saved a
// UUID: an older file's entry names the pool found under its name, whatever
// it was made with ("" then).
std::string GeometryMismatch(const PoolConfig& p, const PoolProbe& pr) {
  if (p.uuid.empty()) return "";
  auto say = [](const char* field, const std::string& pool, const std::string& file) {
    return std::string(field) + " " + pool + ", the file saved " + field + " " + file;
  };
  if (pr.au != p.allocation_unit) return say("allocation_unit", Bytes(pr.au), Bytes(p.allocation_unit));
  if (pr.grain != p.sharing_unit()) {
    auto format = [](uint32_t n) { return ", format " + std::to_string(n); };
    return say("grain", Bytes(pr.grain, format(pr.format)),
               Bytes(p.sharing_unit(), format(p.sharing_unit() < p.allocation_unit ? 3 : 2)));
  }
  return "";
}

// The pool the file saved at format 1 or 2 (its grain the allocation unit),
// converted to format 3 since by `cowctl pool upgrade` at the same
// allocation unit: its superblock records the format it was made at. The
// same pool, not one made otherwise: used, and said ("" when not so).
std::string UpgradedSince(const PoolConfig& p, const PoolProbe& pr) {
  if (p.uuid.empty() || pr.format != store::kFormatVersionV3 || pr.origin_format >= store::kFormatVersionV3 ||
      pr.origin_format == 0 || p.sharing_unit() != p.allocation_unit || pr.au != p.allocation_unit) {
    return "";
  }
  return "pool " + p.name + " was upgraded from format " + std::to_string(pr.origin_format) +
         " to format 3 (grain " + FormatSize(pr.grain) + ") since the file was saved: restored as it is now (run " +
         "'cowctl save' to record it)";
}

}  // namespace

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
  // The pool the file saved (same UUID), made otherwise than the file says
  // (the file edited by hand, most likely). Restore cannot tell which of the
  // two is right, and never reformats: it leaves the pool alone.
  auto unlike = [&](const std::string& where, const std::string& mismatch) {
    return skip(where + " holds this pool (UUID " + p.uuid + ") with " + mismatch +
                ": not restored, left as it is (restore never reformats a pool; if the pool is right, run "
                "'cowctl save' to record it)");
  };
  if (f.entry_exists) {
    const PoolProbe& pr = f.at_entry;
    if (pr.kind == PoolProbe::kAbsent) {
      return skip(entry + " points at " + f.link_target +
                  ", which is missing (device not attached, or its filesystem not mounted?): not restored");
    }
    if (pr.kind != PoolProbe::kPool) return skip(pr.detail + ": not restored");
    if (!p.uuid.empty() && UuidString(pr.uuid) != p.uuid) return other(pr, entry);
    s.note = UpgradedSince(p, pr);
    if (std::string m = GeometryMismatch(p, pr); !m.empty() && s.note.empty()) return unlike(entry, m);
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
      s.note = UpgradedSince(p, pr);
      if (std::string m = GeometryMismatch(p, pr); !m.empty() && s.note.empty()) return unlike(saved, m);
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

// ---------------------------------------------------------------- LIO

LioFacts ReadLioFacts(const Lio& lio) {
  LioFacts f;
  f.backstores = lio.Backstores();
  f.devices = lio.Devices();
  f.fabric_luns = lio.FabricLuns();
  f.iscsi_targets = lio.TargetNames("iscsi");
  f.loopback_targets = lio.TargetNames("loopback");
  f.owned_iscsi = lio.IscsiTargets();
  f.owned_loopback = lio.LoopbackTargets();
  return f;
}

namespace {

template <typename V, typename T>
bool Has(const V& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string Field(const std::string& what, size_t i) { return what + "[" + std::to_string(i) + "]"; }

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// PlanLio's state: the inputs and the plan being made.
class LioPlanner {
 public:
  LioPlanner(const Config& c, const std::vector<RestoreLun>& luns, const LioFacts& f) : c_(c), luns_(luns), f_(f) {}

  LioPlan Plan() {
    for (const auto& d : f_.devices) {
      if (!d.serial.empty()) naas_[NaaName(d.serial)] = Owner(d);
    }
    for (const auto& l : luns_) PlanBackstore(l);
    for (size_t i = 0; i < c_.iscsi.size(); ++i) PlanIscsi(c_.iscsi[i], Field("iscsi", i));
    for (size_t i = 0; i < c_.loopback.size(); ++i) PlanLoopback(c_.loopback[i], Field("loopback", i));
    return std::move(plan_);
  }

 private:
  const RestoreLun* Ready(const ExportLun& e) const {
    for (const auto& l : luns_) {
      if (l.pool == e.pool && l.cfg->name == e.name) return &l;
    }
    return nullptr;
  }
  // The step exporting a ready LUN `e` (the caller adds its target).
  LioStep ExportStep(LioStep::Kind kind, const ExportLun& e) const {
    LioStep s;
    s.kind = kind;
    s.pool = e.pool;
    s.lun = e.name;
    s.cfg = Ready(e)->cfg;
    return s;
  }
  const Backstore* Live(const std::string& pool, const std::string& lun) const {
    for (const auto& b : f_.backstores) {
      if (b.config.pool == pool && b.config.lun == lun) return &b;
    }
    return nullptr;
  }
  std::string Owner(const LioDevice& d) const {
    for (const auto& b : f_.backstores) {
      if (b.key() == d.key) return "backstore " + b.key() + " (" + b.config.pool + "/" + b.config.lun + ")";
    }
    return "LIO device " + d.key;
  }
  void Conflict(const std::string& field, const std::string& what) { plan_.conflicts.push_back(field + ": " + what); }

  // A backstore: there (for this LUN), or to be made under a free name with
  // an identity no LIO device has.
  void PlanBackstore(const RestoreLun& l) {
    const LunConfig& lc = *l.cfg;
    const std::string key = l.pool + "/" + lc.name;
    if (lc.backstore.empty()) return;
    if (const Backstore* b = Live(l.pool, lc.name)) {
      // The unit serial is the LUN's identity to an initiator (VPD 0x80,
      // and 0x83's NAA, by which ESXi knows the datastore): a backstore
      // serving this LUN under another one is not "as saved". Restore does
      // not change it (LIO refuses a new serial while the backstore is
      // exported, and initiators would see another disk): it refuses, and
      // says which of the two to keep.
      if (!l.id.empty() && !lc.wwn.empty() && Lower(b->wwn) != Lower(lc.wwn)) {
        Conflict(l.field + ".wwn", "LUN " + key + " has the backstore " + b->key() + " with the unit serial " +
                                       (b->wwn.empty() ? "(none)" : b->wwn) + " (" +
                                       (b->wwn.empty() ? "no NAA" : NaaName(b->wwn)) + "), the file saved " + lc.wwn +
                                       " (" + NaaName(lc.wwn) +
                                       "): initiators know the disk by it; if LIO's is right, run 'cowctl save'; if "
                                       "the file's is, 'cowctl backstore delete " + key +
                                       " --force' and restore again");
        return;
      }
      // A LUN this restore creates empty must not be served by a backstore
      // left in LIO: it may carry the identity of the disk that held the data.
      if (l.id.empty()) {
        Conflict(l.field + ".backstore", "LUN " + key + " is created empty by this restore, but LIO still has its "
                                             "backstore " + b->key() + " (unit serial " + b->wwn +
                                             "): an initiator would take the blank LUN for the disk it had; "
                                             "'cowctl backstore delete " + key + " --force' first");
        return;
      }
      if (b->name != lc.backstore) {
        plan_.warnings.push_back("LUN " + key + " has the backstore " + b->key() + ", the file names it " +
                                 lc.backstore + "; keeping it");
      }
      return;
    }
    for (const auto& d : f_.devices) {
      if (d.user && d.name == lc.backstore) {
        Conflict(l.field + ".backstore", "a user backstore named '" + lc.backstore + "' (for " + key +
                                             ") exists already as " + Owner(d) +
                                             ": remove or rename it with targetcli, then restore again");
        return;
      }
    }
    LioStep s;
    s.kind = LioStep::kBackstore;
    s.pool = l.pool;
    s.lun = lc.name;
    s.cfg = l.cfg;
    s.new_lun = l.id.empty();
    s.changes.push_back({"create backstore " + lc.backstore, "created backstore " + lc.backstore});
    if (!s.new_lun) {  // a new LUN gets its new identity, which nothing has
      const std::string wwn = lc.wwn.empty() ? l.id : lc.wwn;
      auto [at, fresh] = naas_.emplace(NaaName(wwn), "LUN " + key);
      if (!fresh) {
        Conflict(l.field + ".wwn", "LUN " + key + " would get the identifier " + at->first + ", which " + at->second +
                                       " has: an initiator would take the two for one disk; refusing (give one a "
                                       "new wwn)");
        return;
      }
    }
    plan_.steps.push_back(std::move(s));
  }

  // The backstore key an export would link to; empty when it is still to
  // be made ("" and *ok), or there is none (!*ok).
  std::string BackstoreOf(const ExportLun& e, bool* ok) const {
    const Backstore* b = Live(e.pool, e.name);
    *ok = b || !Ready(e)->cfg->backstore.empty();
    return b ? b->key() : "";
  }

  const IscsiTarget* OwnedIscsi(const std::string& iqn) const {
    for (const auto& t : f_.owned_iscsi) {
      if (t.iqn == iqn && t.tpg == 1) return &t;
    }
    return nullptr;
  }

  void PlanIscsi(const IscsiConfig& t, const std::string& field) {
    if (!std::any_of(t.luns.begin(), t.luns.end(), [&](const ExportLun& e) { return Ready(e); })) return;
    const bool exists = Has(f_.iscsi_targets, t.target);
    const IscsiTarget* live = OwnedIscsi(t.target);
    if (exists && !live) {
      Conflict(field + ".target", "iSCSI target " + t.target +
                                      " exists and was not made by cowctl: remove it with targetcli, or rename "
                                      "the target in the file");
      return;
    }
    std::map<std::string, std::vector<MappedLun>> acl_luns;  // initiator -> mapped LUNs, as planned so far
    if (live) {
      for (const auto& a : live->acls) acl_luns[a.initiator] = a.mapped_luns.value_or(std::vector<MappedLun>{});
    }
    bool first = true;
    for (size_t k = 0; k < t.luns.size(); ++k) {
      const ExportLun& e = t.luns[k];
      if (!Ready(e)) continue;
      LioStep s = ExportStep(LioStep::kIscsi, e);
      s.iscsi = &t;
      s.tpg_lun = e.lun;
      if (!PlanIscsiLun(t, e, Field(field + ".luns", k), &s)) continue;
      if (first && live) PlanIscsiTarget(t, *live, &s);
      first = false;
      for (size_t a = 0; a < t.acls.size(); ++a) {
        PlanMapping(t, t.acls[a], e.lun, Field(field + ".acls", a), &acl_luns[t.acls[a].initiator], &s);
      }
      if (!s.changes.empty()) plan_.steps.push_back(std::move(s));
    }
    WarnUnlisted(t, live);
  }

  // The LUN itself: free, or this LUN's already, at the saved number.
  bool PlanIscsiLun(const IscsiConfig& t, const ExportLun& e, const std::string& field, LioStep* s) {
    const std::string what = e.pool + "/" + e.name, n = std::to_string(e.lun);
    bool ok = false;
    const std::string key = BackstoreOf(e, &ok);
    if (!ok) {
      Conflict(field, "iSCSI target " + t.target + " exports " + what +
                          ", which has no backstore: give that LUN a 'backstore:' field");
      return false;
    }
    bool present = false;
    for (const auto& l : f_.fabric_luns) {
      if (l.fabric != "iscsi" || l.target != t.target || l.tpg != 1) continue;
      const bool ours = !key.empty() && l.backstore_key == key;
      if (l.lun == e.lun && !ours) {
        Conflict(field + ".lun", "LUN " + n + " of " + t.target + " is taken by " + l.backstore_key +
                                     ", the file puts " + what + " there");
        return false;
      }
      if (ours && l.lun != e.lun) {
        Conflict(field + ".lun", what + " is LUN " + std::to_string(l.lun) + " of " + t.target +
                                     ", the file says LUN " + n + ": unexport it first");
        return false;
      }
      present = present || ours;
    }
    if (!present) s->changes.push_back({"export " + what + " as LUN " + n + " of " + t.target,
                                        "exported " + what + " as LUN " + n + " of " + t.target});
    return true;
  }

  // An existing target's portals, ACLs and CHAP credentials the file has
  // and it lacks (a new target is made with all of them).
  void PlanIscsiTarget(const IscsiConfig& t, const IscsiTarget& live, LioStep* s) {
    for (const auto& p : t.portals) {
      if (!Has(live.portals, p)) s->changes.push_back({"add portal " + p + " to " + t.target,
                                                       "added portal " + p + " to " + t.target});
    }
    for (const auto& a : t.acls) {
      auto have = std::find_if(live.acls.begin(), live.acls.end(),
                               [&](const AclSpec& x) { return x.initiator == a.initiator; });
      if (have == live.acls.end()) {
        s->changes.push_back({"add ACL " + a.initiator + " to " + t.target, "added ACL " + a.initiator + " to " + t.target});
      } else if (!a.chap_user.empty() && (have->chap_user != a.chap_user || have->chap_password != a.chap_password)) {
        s->changes.push_back({"set the CHAP credentials of " + a.initiator + " on " + t.target,
                              "set the CHAP credentials of " + a.initiator + " on " + t.target});
      }
    }
  }

  // What ExportIscsi maps into ACL `a` for TPG LUN `lun` (MapLunAs with the
  // file's mapped_luns, MapLun for a file without them), given `have`, the
  // ACL's mappings (updated with what is planned).
  void PlanMapping(const IscsiConfig& t, const AclSpec& a, uint32_t lun, const std::string& field,
                   std::vector<MappedLun>* have, LioStep* s) {
    auto maps = [&](uint32_t n) { return std::any_of(have->begin(), have->end(), [&](const MappedLun& x) { return x.lun == n; }); };
    auto at = [&](uint32_t m) { return std::find_if(have->begin(), have->end(), [&](const MappedLun& x) { return x.mapped_lun == m; }); };
    auto as = [&](const MappedLun& m) {
      return "LUN " + std::to_string(m.lun) + " of " + t.target + " into " + a.initiator + " as LUN " +
             std::to_string(m.mapped_lun) + (m.write_protect ? " (write-protected)" : "");
    };
    auto map = [&](const MappedLun& m) {
      s->changes.push_back({"map " + as(m), "mapped " + as(m)});
      have->push_back(m);
    };
    if (!a.mapped_luns) {
      if (maps(lun)) return;
      uint32_t m = lun;
      if (at(m) != have->end()) {
        m = 0;
        while (at(m) != have->end()) ++m;
      }
      map({lun, m, false});
      return;
    }
    for (size_t i = 0; i < a.mapped_luns->size(); ++i) {
      const MappedLun& m = (*a.mapped_luns)[i];
      if (m.lun != lun) continue;
      auto live = at(m.mapped_lun);
      if (live != have->end() && live->lun != m.lun) {
        Conflict(Field(field + ".mapped_luns", i) + ".mapped_lun",
                 a.initiator + " sees LUN " + std::to_string(live->lun) + " of " + t.target + " as its LUN " +
                     std::to_string(m.mapped_lun) + ", where the file puts LUN " + std::to_string(m.lun) +
                     ": remove that mapping with targetcli, then restore again");
      } else if (live != have->end()) {
        if (live->write_protect == m.write_protect) continue;
        const std::string of = "LUN " + std::to_string(m.mapped_lun) + " of " + a.initiator + " on " + t.target;
        s->changes.push_back(m.write_protect ? Change{"write-protect " + of, "write-protected " + of}
                                             : Change{"lift the write protection of " + of,
                                                      "lifted the write protection of " + of});
        live->write_protect = m.write_protect;
      } else if (!maps(m.lun)) {  // (under another number: left alone, and warned about)
        map(m);
      }
    }
  }

  // Restore adds and never removes: a mapping beyond the file's is left, and said.
  void WarnUnlisted(const IscsiConfig& t, const IscsiTarget* live) {
    if (!live) return;
    for (const auto& a : t.acls) {
      for (const auto& la : live->acls) {
        if (la.initiator != a.initiator || !la.mapped_luns) continue;
        for (const auto& m : *la.mapped_luns) {
          bool listed = a.mapped_luns ? std::any_of(a.mapped_luns->begin(), a.mapped_luns->end(),
                                                    [&](const MappedLun& x) {
                                                      return x.lun == m.lun && x.mapped_lun == m.mapped_lun;
                                                    })
                                      : std::any_of(t.luns.begin(), t.luns.end(),
                                                    [&](const ExportLun& e) { return e.lun == m.lun; });
          if (listed) continue;
          plan_.warnings.push_back(a.initiator + " sees LUN " + std::to_string(m.lun) + " of " + t.target +
                                   " as LUN " + std::to_string(m.mapped_lun) +
                                   ", which the file does not map; left as it is (restore never removes a "
                                   "mapping: remove it with targetcli if it should go)");
        }
      }
    }
  }

  void PlanLoopback(const LoopbackConfig& t, const std::string& field) {
    if (!std::any_of(t.luns.begin(), t.luns.end(), [&](const ExportLun& e) { return Ready(e); })) return;
    const bool owned = std::any_of(f_.owned_loopback.begin(), f_.owned_loopback.end(),
                                   [&](const LoopbackTarget& o) { return o.wwn == t.wwn; });
    if (Has(f_.loopback_targets, t.wwn) && !owned) {
      Conflict(field + ".wwn", "loopback target " + t.wwn + " exists and was not made by cowctl");
      return;
    }
    for (size_t k = 0; k < t.luns.size(); ++k) {
      const ExportLun& e = t.luns[k];
      if (!Ready(e)) continue;
      const std::string what = e.pool + "/" + e.name, n = std::to_string(e.lun), lf = Field(field + ".luns", k);
      bool ok = false;
      const std::string key = BackstoreOf(e, &ok);
      if (!ok) {
        Conflict(lf, "loopback " + t.wwn + " exports " + what + " without backstore");
        continue;
      }
      // The saved LUN number, as for iSCSI: free, or this LUN's already.
      bool present = false, numbered = true;
      for (const auto& l : f_.fabric_luns) {
        if (l.fabric != "loopback" || l.tpg != 1) continue;
        const bool ours = !key.empty() && l.backstore_key == key;
        if (l.target == t.wwn && l.lun == e.lun && !ours) {
          Conflict(lf + ".lun", "LUN " + n + " of loopback " + t.wwn + " is taken by " + l.backstore_key +
                                    ", the file puts " + what + " there");
          numbered = false;
        } else if (ours && l.target == t.wwn && l.lun != e.lun) {
          Conflict(lf + ".lun", what + " is LUN " + std::to_string(l.lun) + " of loopback " + t.wwn +
                                    ", the file says LUN " + n + ": unexport it first");
          numbered = false;
        } else if (ours && l.target != t.wwn) {
          // ExportLoopback keeps a loopback export it finds (one is enough
          // for a local disk); said, not changed.
          plan_.warnings.push_back(what + " is exported over loopback " + l.target + ", the file says loopback " +
                                   t.wwn + "; keeping it");
          present = true;
        } else {
          present = present || ours;
        }
      }
      if (!numbered || present) continue;
      LioStep s = ExportStep(LioStep::kLoopback, e);
      s.loopback = &t;
      s.tpg_lun = e.lun;
      s.changes.push_back({"export " + what + " as LUN " + n + " of loopback " + t.wwn,
                           "exported " + what + " as LUN " + n + " of loopback " + t.wwn});
      plan_.steps.push_back(std::move(s));
    }
  }

  const Config& c_;
  const std::vector<RestoreLun>& luns_;
  const LioFacts& f_;
  std::map<std::string, std::string> naas_;  // NAA -> who has it (or will)
  LioPlan plan_;
};

}  // namespace

bool NeedsLio(const Config& c, const std::vector<RestoreLun>& luns) {
  auto ready = [&](const ExportLun& e) {
    return std::any_of(luns.begin(), luns.end(), [&](const RestoreLun& l) { return l.pool == e.pool && l.cfg->name == e.name; });
  };
  for (const auto& l : luns) {
    if (!l.cfg->backstore.empty()) return true;
  }
  for (const auto& t : c.iscsi) {
    if (std::any_of(t.luns.begin(), t.luns.end(), ready)) return true;
  }
  for (const auto& t : c.loopback) {
    if (std::any_of(t.luns.begin(), t.luns.end(), ready)) return true;
  }
  return false;
}

LioPlan PlanLio(const Config& c, const std::vector<RestoreLun>& luns, const LioFacts& f) {
  return LioPlanner(c, luns, f).Plan();
}

}  // namespace cowstore::cowctl
