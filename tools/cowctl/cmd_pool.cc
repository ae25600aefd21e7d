// SPDX-License-Identifier: Apache-2.0
// cowctl pool: create, list, show, check, scrub, grow, delete.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/names.h"
#include "tools/cowctl/capacity.h"
#include "tools/cowctl/cmd_common.h"
#include "tools/cowctl/interrupt.h"

namespace cowstore::cowctl {

using store::Code;

namespace {

// --grain (kDefaultGrain when not given): a sharing unit below the AU makes
// a format 3 pool (a clone owns only the grains written after it); the AU
// makes format 2, the pool every cowctl made before format 3 existed.
void SetSharingUnit(const std::string& text, store::PoolOptions* po) {
  const uint64_t grain = ParseSize(text, "grain");
  if (std::string why = store::GrainRule(grain, po->allocation_unit); !why.empty()) {
    throw UserError("invalid --grain " + text + " for an allocation unit of " + FormatSize(po->allocation_unit) +
                    ": " + why);
  }
  if (grain == po->allocation_unit) return;
  po->format = 3;
  po->grain = static_cast<uint32_t>(grain);
}

// Only format 3 shares below the AU.
bool IsFormat3(const store::SpaceInfo& s) { return SharingUnit(s) < s.allocation_unit; }

std::string SharingUnitText(const store::SpaceInfo& s) {
  return FormatSize(SharingUnit(s)) + (IsFormat3(s) ? " (format 3)" : " (the allocation unit)");
}

// A pool of `have` bytes too small for the format asked: refused before
// anything is made, with the minimum, and with format 2 when it is smaller
// (by one allocation unit: format 3 keeps its metadata in an AU of its own).
void RequireMinimumSize(const store::PoolOptions& po, uint64_t have, const std::string& what) {
  static_assert(store::kDefaultJournalBytes == 16u << 20, "the message below names the journal's size");
  const uint64_t au = po.allocation_unit;
  const uint64_t need = store::MinPoolBytes(po);
  if (have == 0 || have >= need) return;
  std::string msg = "pool too small: " + what + " is " + FormatSize(have) + " (" + std::to_string(have) +
                    " bytes); a format " + std::to_string(po.format) + " pool with an allocation unit of " +
                    FormatSize(au) + " needs at least " + FormatSize(need) + " (" + std::to_string(need) +
                    " bytes: its metadata, a 16 MiB journal and " + std::to_string(store::kMinPoolUnits) +
                    " allocation units of data)";
  store::PoolOptions format2 = po;
  format2.format = 2;
  format2.grain = 0;
  const uint64_t v2 = store::MinPoolBytes(format2);
  if (po.format == 3 && v2 < need) {
    msg += "; a format 2 pool (--grain " + FormatSize(au) + ", the allocation unit) needs " + FormatSize(v2) +
           " (" + std::to_string(v2) + " bytes)";
  }
  throw UserError(msg);
}

}  // namespace

uint64_t SharingUnit(const store::SpaceInfo& s) { return s.Bytes(1); }

void PoolCreate(const Context& ctx, const PoolCreateArgs& a) {
  RequireName(a.name, "pool");
  store::PoolOptions po;
  if (!a.device.empty() && !a.file.empty()) throw UserError("give either --device or --file, not both");
  if (a.device.empty() && a.size.empty()) throw UserError("a file pool needs --size (e.g. --size 100G)");
  po.size_bytes = a.size.empty() ? 0 : ParseSize(a.size, "size");
  uint64_t au = ParseSize(a.au, "allocation unit");
  if (!store::ValidAllocationUnit(au)) {
    throw UserError("allocation unit must be " + std::string(store::kAllocationUnitRule) +
                    " (it must divide 1 MiB)");
  }
  po.allocation_unit = static_cast<uint32_t>(au);
  SetSharingUnit(a.grain, &po);
  if (a.soft_threshold > 100) throw UserError("soft threshold is a percentage: 0..100 (0 disables)");
  po.soft_threshold_percent = a.soft_threshold;
  // Before anything is made (the pool directory included).
  if (a.device.empty()) {
    RequireMinimumSize(po, po.size_bytes, "--size " + a.size);
  } else {
    // 0 when it cannot be told here: the store's own refusal then says why.
    RequireMinimumSize(po, BlockDeviceBytes(a.device, /*follow_links=*/true), a.device);
  }
  // A pool directory made here is removed again (when still empty) if the
  // pool is not made: a refused create leaves nothing behind.
  struct MadeDir {
    std::string path;
    bool made = false, keep = false;
    ~MadeDir() {
      if (made && !keep) ::rmdir(path.c_str());
    }
  } made_dir{ctx.pool_dir};
  if (::mkdir(ctx.pool_dir.c_str(), 0755) == 0) {
    made_dir.made = true;
  } else if (errno != EEXIST) {
    int err = errno;
    std::string advice = ErrnoAdvice(err, "");
    throw UserError("cannot create pool directory " + ctx.pool_dir + ": " + std::strerror(err) +
                    (advice.empty() ? "" : " (" + advice + ")"));
  }
  if (::access(ctx.pool_dir.c_str(), W_OK) != 0 && !ErrnoAdvice(errno, "").empty()) {
    throw UserError("cannot create pool '" + a.name + "' in " + ctx.pool_dir + ": " + std::strerror(errno) +
                    " (run cowctl as root)");
  }
  std::string entry = PoolPath(ctx, a.name);
  struct stat st;
  if (::lstat(entry.c_str(), &st) == 0) throw UserError("pool '" + a.name + "' already exists (" + entry + ")");
  std::string target = entry;
  bool made_link = false, made_file = false;
  if (!a.device.empty()) {
    if (::stat(a.device.c_str(), &st) != 0) {
      throw UserError("device " + a.device + " does not exist: check the name (lsblk)");
    }
    if (!S_ISBLK(st.st_mode)) throw UserError(a.device + " is not a block device (use --file for a file pool)");
    target = a.device;
  } else if (!a.file.empty()) {
    if (a.file.empty() || a.file[0] != '/') throw UserError("--file needs an absolute path");
    if (::lstat(a.file.c_str(), &st) == 0) throw UserError(a.file + " already exists: pick a new file");
    target = a.file;
    made_file = true;
  } else {
    made_file = true;
  }
  // Thin on thin: a sparse pool file larger than its filesystem's free space
  // is legitimate (it grows as written), so it is warned about, not refused;
  // --overcommit says the administrator knows. pool show/list and the soft
  // threshold keep warning while it can outgrow the filesystem. (An Env that
  // cannot tell leaves it to the store's own errors.)
  if (auto b = store::DefaultEnv()->BackingOf(target); b.ok() && !a.overcommit) {
    ApplyOvercommitRule(PoolPromise(a.name, po.size_bytes, *b), /*overcommit=*/true);
  }
  if (target != entry) {
    if (::symlink(target.c_str(), entry.c_str()) != 0) {
      throw UserError("cannot create " + entry + ": " + std::strerror(errno));
    }
    made_link = true;
  }
  auto r = store::Pool::Create(store::DefaultEnv(), target, po);
  if (!r.ok()) {
    if (made_file) ::unlink(target.c_str());
    if (made_link) ::unlink(entry.c_str());
    Fail(r.status(), "creating pool '" + a.name + "'");
  }
  made_dir.keep = true;
  store::SpaceInfo s = r.value()->Space();
  (void)r.value()->Close();
  Json j = Json::object();
  j["pool"] = a.name;
  j["path"] = entry;
  j["size"] = s.pool_size_bytes;
  j["allocation_unit"] = s.allocation_unit;
  j["grain"] = SharingUnit(s);
  Emit(ctx, j,
       "created pool " + a.name + " (" + FormatSize(s.pool_size_bytes) + ", allocation unit " +
           FormatSize(s.allocation_unit) + ", sharing unit " + FormatSize(SharingUnit(s)) +
           (IsFormat3(s) ? ", format 3" : "") + ") at " + entry + "\n");
}

namespace {

Json SpaceJson(const std::string& name, const store::SpaceInfo& s, bool remote) {
  Json j = Json::object();
  j["pool"] = name;
  j["served_by_handler"] = remote;
  j["size"] = s.pool_size_bytes;
  j["allocation_unit"] = s.allocation_unit;
  j["grain"] = SharingUnit(s);
  j["allocated"] = s.Bytes(s.allocated_units);
  j["metadata"] = s.Bytes(s.metadata_units);
  j["shared"] = s.Bytes(s.shared_units);
  j["free"] = s.Bytes(s.free_units);
  j["thinning"] = s.Bytes(s.thinning_units);  // of "free": freed, not yet punched
  j["mapped"] = s.mapped_bytes;
  j["saved_by_clones"] = s.saved_bytes;
  j["soft_threshold"] = s.Bytes(s.soft_threshold_units);
  AddCapacityJson(s, j);  // provisioned, overcommit ratio, backing store, warnings
  Json luns = Json::array();
  for (const auto& l : s.luns) luns.push_back(LunJson(name, l, std::nullopt));
  j["luns"] = luns;
  return j;
}

// Freed space whose punch is still under way: part of "free" (an allocation
// waits for it), not yet given back to what holds the pool.
std::string ThinningText(const store::SpaceInfo& s) {
  const uint64_t bytes = s.Bytes(s.thinning_units);
  if (bytes == 0) return FormatSize(0);
  const bool device = s.backing_known && !s.backing_grows;
  return FormatSize(bytes) + " (in free; still being returned to the " + (device ? "device" : "filesystem") + ")";
}

void PoolList(const Context& ctx) {
  Json arr = Json::array();
  // SHARING UNIT: what a clone pays for when it diverges (the grain at
  // format 3, the AU at format 2), which `pool list --json` has as "grain".
  Table t({"POOL", "SIZE", "SHARING UNIT", "ALLOCATED", "FREE", "SHARED", "SAVED", "PROVISIONED", "BACKING FREE",
           "LUNS", "OPEN BY"});
  std::string warnings;
  for (const auto& name : PoolNames(ctx)) {
    try {
      auto h = OpenPool(ctx, name, true);
      auto s = h->Space();
      arr.push_back(SpaceJson(name, s, h->remote()));
      std::string backing = !s.backing_known ? "?" : s.backing_grows ? FormatSize(s.backing_free_bytes) : "device";
      if (OutgrowWarning(s)) backing += " (!)";
      t.Row({name, FormatSize(s.pool_size_bytes), FormatSize(SharingUnit(s)), FormatSize(s.Bytes(s.allocated_units)),
             FormatSize(s.Bytes(s.free_units)),
             FormatSize(s.Bytes(s.shared_units)), FormatSize(s.saved_bytes),
             FormatSize(s.provisioned_bytes) + " (" + FormatRatio(OvercommitRatio(s)) + ")", backing,
             std::to_string(s.luns.size()), h->remote() ? "tcmu-runner" : "-"});
      if (auto w = OutgrowWarning(s)) warnings += "warning: pool " + name + ": " + *w + "\n";
    } catch (const UserError& e) {
      Json j = Json::object();
      j["pool"] = name;
      j["error"] = e.what();
      arr.push_back(j);
      t.Row({name, "?", "?", "?", "?", "?", "?", "?", "?", "?", std::string("error: ") + e.what()});
    }
  }
  Emit(ctx, arr, t.empty() ? "no pools in " + ctx.pool_dir + "\n" : t.Render() + warnings);
}

void PoolShow(const Context& ctx, const std::string& name) {
  auto h = OpenPool(ctx, name, true);
  auto s = h->Space();
  Json j = SpaceJson(name, s, h->remote());
  auto pct = [&](uint64_t units) {
    return s.total_units ? " (" + std::to_string(units * 100 / s.total_units) + "%)" : std::string();
  };
  std::vector<std::pair<std::string, std::string>> kv = {
      {"pool", name},
      {"path", PoolPath(ctx, name)},
      {"open by", h->remote() ? "tcmu-runner (through its control socket)" : "nobody"},
      {"size", FormatSize(s.pool_size_bytes)},
      {"allocation unit", FormatSize(s.allocation_unit)},
      {"sharing unit", SharingUnitText(s)},
      {"allocated", FormatSize(s.Bytes(s.allocated_units)) + pct(s.allocated_units)},
      {"metadata", FormatSize(s.Bytes(s.metadata_units))},
      {"shared", FormatSize(s.Bytes(s.shared_units))},
      {"saved by clones", FormatSize(s.saved_bytes)},
      {"free", FormatSize(s.Bytes(s.free_units)) + pct(s.free_units)},
      {"thinning", ThinningText(s)},
      {"soft threshold",
       FormatSize(s.Bytes(s.soft_threshold_units)) + " (" + std::to_string(SoftThresholdPercent(s)) + "%)"},
  };
  for (auto& e : CapacityKeyValues(s)) kv.push_back(std::move(e));  // provisioned, backing store, warning
  std::string human = KeyValues(kv);
  if (!s.luns.empty()) {
    Table t({"LUN", "SIZE", "BLOCK", "MAPPED", "EXCLUSIVE", "SHARED", "WWN"});
    for (const auto& l : s.luns) {
      t.Row({l.name, FormatSize(l.size_bytes), std::to_string(l.block_size), FormatSize(l.mapped_bytes),
             FormatSize(l.exclusive_bytes), FormatSize(l.shared_bytes), UuidString(l.id)});
    }
    human += "\n" + t.Render();
  }
  Emit(ctx, j, human);
}

// The documented recovery for committed journal records that are damaged
// (docs/design/store.md, "Recovery"): says exactly which operations are given
// up, asks (or takes --yes), then opens the pool dropping them.
int PoolRepair(const Context& ctx, const std::string& name, bool yes) {
  std::string path = PoolPath(ctx, name);
  auto plan = store::Pool::RepairJournal(store::DefaultEnv(), path, false);
  if (!plan.ok()) {
    if (plan.status().code() == Code::kBusy)
      throw UserError("pool '" + name + "' is in use (served by tcmu-runner?): stop serving it before a repair");
    Fail(plan.status(), "repairing pool '" + name + "'");
  }
  Json j = Json::object();
  j["pool"] = name;
  Json dropped = Json::array();
  for (const auto& d : plan->dropped) dropped.push_back(d);
  j["dropped"] = dropped;
  j["dropped_operations"] = plan->dropped_operations;
  if (!plan->damaged) {
    j["repaired"] = false;
    Emit(ctx, j, "pool " + name + ": the journal is intact; --repair fixes nothing else\n");
    return 1;
  }
  std::string list = "pool " + name + ": the journal is damaged at offset " + std::to_string(plan->offset) +
                     " (LSN " + std::to_string(plan->lsn) + "). Repairing gives up these " +
                     std::to_string(plan->dropped_operations) + " committed operation(s):\n";
  for (const auto& d : plan->dropped) list += "  " + d + "\n";
  if (!yes) {
    if (ctx.json || ::isatty(0) != 1)
      throw UserError("pool '" + name + "': the repair drops " + std::to_string(plan->dropped_operations) +
                      " committed operation(s) (see 'cowctl pool check " + name +
                      " --repair' on a terminal); confirm with --yes");
    std::cerr << list << "Type 'drop' to give them up and open the pool: " << std::flush;
    std::string answer;
    std::getline(std::cin, answer);
    if (answer != "drop") throw UserError("repair of pool '" + name + "' cancelled: nothing changed");
  }
  auto done = store::Pool::RepairJournal(store::DefaultEnv(), path, true);
  if (!done.ok()) Fail(done.status(), "repairing pool '" + name + "'");
  j["repaired"] = true;
  Emit(ctx, j, (yes ? list : std::string()) + "pool " + name + ": repaired; " +
                   std::to_string(done->dropped_operations) + " operation(s) dropped\n");
  return 0;
}

int PoolCheck(const Context& ctx, const std::string& name) {
  std::string path = PoolPath(ctx, name);
  store::CheckReport rep;
  bool remote = false;
  {
    Progress progress("checking " + name);
    auto r = store::Pool::CheckOffline(
        store::DefaultEnv(), path, [](void* c, uint64_t d, uint64_t t) { static_cast<Progress*>(c)->Update(d, t); },
        &progress);
    progress.Done();
    if (r.ok()) {
      rep = r.value();
    } else if (r.status().code() == Code::kBusy) {
      auto h = OpenPool(ctx, name, true);
      Progress remote_progress("checking " + name + " (by tcmu-runner's handler)");
      rep = h->Check(&remote_progress);
      remote_progress.Done();
      remote = h->remote();
    } else if (r.status().code() == Code::kNotFound) {
      OpenPool(ctx, name, true);  // says what is missing
      Fail(r.status(), "checking pool '" + name + "'");
    } else {
      Fail(r.status(), "checking pool '" + name + "'");
    }
  }
  Json j = Json::object();
  j["pool"] = name;
  j["online"] = remote;
  j["clean"] = rep.clean;
  j["luns"] = rep.luns;
  j["extents"] = rep.extents;
  j["allocated_units"] = rep.allocated_units;
  j["leaked_units"] = rep.leaked_units;
  // The units are the pool's grain (the AU at formats 1 and 2); a handler
  // older than unit_bytes does not say, and then neither do we.
  std::string units = " units";
  if (rep.unit_bytes != 0) {
    j["unit_bytes"] = rep.unit_bytes;
    j["allocated_bytes"] = rep.allocated_units * rep.unit_bytes;
    j["leaked_bytes"] = rep.leaked_units * rep.unit_bytes;
    units = " units of " + FormatSize(rep.unit_bytes) + " (" + FormatSize(rep.allocated_units * rep.unit_bytes) + ")";
  }
  j["checked"] = "metadata";
  Json probs = Json::array();
  std::string human = std::string("pool ") + name + ": metadata " + (rep.clean ? "clean" : "PROBLEMS FOUND") +
                      " (" + std::to_string(rep.luns) + " LUNs, " + std::to_string(rep.extents) + " extents, " +
                      std::to_string(rep.allocated_units) + " allocated" + units + ", " +
                      std::to_string(rep.leaked_units) + " leaked)\n" +
                      "  data not read: 'cowctl pool scrub " + name + "' reads every mapped block\n";
  for (const auto& p : rep.problems) {
    probs.push_back(p);
    human += "  " + p + "\n";
  }
  j["problems"] = probs;
  Emit(ctx, j, human);
  return rep.clean ? 0 : 1;
}

int PoolScrub(const Context& ctx, const std::string& name) {
  auto h = OpenPool(ctx, name, true);
  control::ScrubReport rep;
  {
    Interruptible interruptible;  // Ctrl-C stops reading; nothing to undo
    Progress progress("scrubbing " + name + (h->remote() ? " (by tcmu-runner's handler)" : ""));
    rep = h->Scrub(&progress);
  }
  Json j = Json::object();
  j["pool"] = name;
  j["online"] = h->remote();
  j["clean"] = rep.clean();
  j["luns"] = rep.luns;
  j["mapped_bytes"] = rep.mapped_bytes;
  j["read_bytes"] = rep.read_bytes;
  Json bad = Json::array();
  std::string human = "pool " + name + ": " + (rep.clean() ? "data readable" : "UNREADABLE DATA") + " (" +
                      std::to_string(rep.luns) + " LUNs, " + FormatSize(rep.read_bytes) + " of " +
                      FormatSize(rep.mapped_bytes) + " mapped read)\n";
  for (const auto& u : rep.unreadable) {
    Json b = Json::object();
    b["lun"] = name + "/" + u.lun;
    b["lba"] = u.lba;
    b["count"] = u.count;
    b["error"] = u.error;
    bad.push_back(b);
    human += "  " + name + "/" + u.lun + " blocks " + std::to_string(u.lba) + "-" + std::to_string(u.lba + u.count - 1) +
             ": " + u.error + "\n";
  }
  j["unreadable"] = bad;
  Emit(ctx, j, human);
  return rep.clean() ? 0 : 1;
}

void PoolGrow(const Context& ctx, const std::string& name, const std::string& size) {
  uint64_t bytes = size.empty() ? 0 : ParseSize(size, "size");
  auto h = OpenPool(ctx, name);
  auto before = h->Space();
  if (bytes && bytes <= before.pool_size_bytes) {
    throw UserError("pool '" + name + "' is already " + FormatSize(before.pool_size_bytes) +
                    ": a pool only grows (give a larger --size)");
  }
  h->Grow(bytes);
  auto s = h->Space();
  Json j = Json::object();
  j["pool"] = name;
  j["size"] = s.pool_size_bytes;
  Emit(ctx, j, "pool " + name + " grown from " + FormatSize(before.pool_size_bytes) + " to " +
                   FormatSize(s.pool_size_bytes) + "\n");
}

void PoolDelete(const Context& ctx, const std::string& name, bool force) {
  std::string entry = PoolPath(ctx, name);
  Lio lio = MakeLio(ctx);
  if (lio.Available()) {
    for (const auto& b : lio.Backstores()) {
      if (b.config.pool == name) {
        throw UserError("pool '" + name + "' has the backstore " + b.name + " (LUN " + b.config.lun +
                        "): delete its exports first");
      }
    }
  }
  {
    auto h = OpenPool(ctx, name);
    if (h->remote()) throw UserError("pool '" + name + "' is open in tcmu-runner: unexport its LUNs first");
    auto s = h->Space();
    if (!s.luns.empty() && !force) {
      throw UserError("pool '" + name + "' still holds " + std::to_string(s.luns.size()) +
                      " LUNs: delete them or use --force");
    }
  }
  struct stat st;
  bool link = ::lstat(entry.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  if (link) {
    char buf[4096];
    ssize_t n = ::readlink(entry.c_str(), buf, sizeof buf - 1);
    if (n > 0) {
      buf[n] = 0;
      struct stat t;
      if (::stat(buf, &t) == 0 && S_ISREG(t.st_mode)) ::unlink(buf);
    }
  }
  ::unlink(entry.c_str());
  Json j = Json::object();
  j["deleted"] = name;
  Emit(ctx, j, "deleted pool " + name + (link ? " (the device keeps its data until overwritten)" : "") + "\n");
}
}  // namespace

void AddPoolCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  int& rc = cl.rc;
  auto* pool = cl.app.add_subcommand("pool", "Create, inspect, check and grow pools");
  pool->require_subcommand(1);
  auto& pca = cl.Keep(PoolCreateArgs{});
  auto* pc = pool->add_subcommand("create", "Create a pool on a sparse file or a block device");
  pc->add_option("name", pca.name, "Pool name")->required();
  pc->add_option("--size,-s", pca.size, "Size (file pools; e.g. 500G)");
  pc->add_option("--device,-d", pca.device, "Block device to hold the pool (whole device)");
  pc->add_option("--file", pca.file, "Put the pool file here (linked from the pool directory)");
  pc->add_option("--allocation-unit,-a", pca.au,
                 "Allocation unit, 64K..1M, power of two: the piece the pool's space is handed out in")
      ->capture_default_str();
  pc->add_option("--grain", pca.grain,
                 "Sharing unit: the smallest piece a clone and its source stop sharing when one is written (power "
                 "of two, 512 up to the allocation unit). Below the allocation unit (the default) the pool is "
                 "format 3: a clone owns only the grains written after it. Equal to it, format 2, which an "
                 "older cowstore reads: --allocation-unit 1M --grain 1M")
      ->capture_default_str();
  pc->add_option("--soft-threshold", pca.soft_threshold, "Percent full that raises the thin-provisioning warning")
      ->capture_default_str();
  pc->add_flag("--overcommit", pca.overcommit, "Do not warn when the pool file is larger than its filesystem's free space");
  pc->callback([&] { PoolCreate(ctx, pca); });
  pool->add_subcommand("list", "List pools with their space")->alias("ls")->callback([&] { PoolList(ctx); });
  auto& pname = cl.Keep(std::string());
  auto& psize = cl.Keep(std::string());
  auto& pforce = cl.Keep(false);
  auto* ps = pool->add_subcommand("show", "Space of a pool: size, allocated, shared, saved, free, per LUN");
  ps->add_option("name", pname, "Pool name")->required();
  ps->callback([&] { PoolShow(ctx, pname); });
  auto* pk = pool->add_subcommand("check", "Check a pool's metadata (data is not read: see scrub)");
  pk->add_option("name", pname, "Pool name")->required();
  auto& prepair = cl.Keep(false);
  auto& pyes = cl.Keep(false);
  pk->add_flag("--repair", prepair, "Damaged journal: drop the operations after the damage (lists them, asks)");
  pk->add_flag("--yes", pyes, "With --repair: do not ask");
  pk->callback([&] {
    rc = PoolCheck(ctx, pname);
    if (prepair && rc != 0) rc = PoolRepair(ctx, pname, pyes) == 0 ? PoolCheck(ctx, pname) : 1;
  });
  auto* psc = pool->add_subcommand("scrub", "Read every mapped block of a pool; report unreadable ranges by LUN");
  psc->add_option("name", pname, "Pool name")->required();
  psc->callback([&] { rc = PoolScrub(ctx, pname); });
  auto* pg = pool->add_subcommand("grow", "Grow a pool (file: to --size; device: to the device size)");
  pg->add_option("name", pname, "Pool name")->required();
  pg->add_option("--size,-s", psize, "New size (file pools)");
  pg->callback([&] { PoolGrow(ctx, pname, psize); });
  auto* pd = pool->add_subcommand("delete", "Delete a pool and its file");
  pd->alias("rm");
  pd->add_option("name", pname, "Pool name")->required();
  pd->add_flag("--force", pforce, "Delete even if it still holds LUNs");
  pd->callback([&] { PoolDelete(ctx, pname, pforce); });
}

}  // namespace cowstore::cowctl
