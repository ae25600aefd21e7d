// SPDX-License-Identifier: Apache-2.0
// cowctl pool: create, list, show, check, scrub, grow, delete, upgrade.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/names.h"
#include "handler/store/superblock_v3.h"
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

// What pool upgrade shares at when not told (pool create's default grain).
uint64_t DefaultGrainBytes() { return ParseSize(kDefaultGrain, "grain"); }

// pool show's sharing unit, with the format the pool's superblock names
// (`probe`; nothing is said of one it could not read): a format 1 or 2 pool
// is told the way to 4 KiB sharing.
std::string SharingUnitText(const store::SpaceInfo& s, const PoolProbe& probe, const std::string& name) {
  std::string text = FormatSize(SharingUnit(s)) + (IsFormat3(s) ? " (format 3" : " (the allocation unit");
  if (probe.kind == PoolProbe::kPool && probe.format < store::kFormatVersionV3) {
    text += ", format " + std::to_string(probe.format) + ": 'cowctl pool upgrade " + name + "' shares at " +
            FormatSize(DefaultGrainBytes());
  } else if (probe.kind == PoolProbe::kPool && !IsFormat3(s)) {
    text += ", format " + std::to_string(probe.format);
  }
  return text + ")";
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

// `probe`: the pool's superblock, for its format (left out when it could
// not be read).
Json SpaceJson(const std::string& name, const store::SpaceInfo& s, bool remote, const PoolProbe& probe) {
  Json j = Json::object();
  j["pool"] = name;
  j["served_by_handler"] = remote;
  if (probe.kind == PoolProbe::kPool) j["format"] = probe.format;
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
      arr.push_back(SpaceJson(name, s, h->remote(), ProbePool(PoolPath(ctx, name))));
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
  const PoolProbe probe = ProbePool(PoolPath(ctx, name));
  Json j = SpaceJson(name, s, h->remote(), probe);
  auto pct = [&](uint64_t units) {
    return s.total_units ? " (" + std::to_string(units * 100 / s.total_units) + "%)" : std::string();
  };
  std::vector<std::pair<std::string, std::string>> kv = {
      {"pool", name},
      {"path", PoolPath(ctx, name)},
      {"open by", h->remote() ? "tcmu-runner (through its control socket)" : "nobody"},
      {"size", FormatSize(s.pool_size_bytes)},
      {"allocation unit", FormatSize(s.allocation_unit)},
      {"sharing unit", SharingUnitText(s, probe, name)},
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

// "1 LUN", "2 LUNs".
std::string Count(uint64_t n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// pool upgrade's options: `grain_given` when --grain was on the line.
struct PoolUpgradeArgs {
  std::string name, grain = kDefaultGrain;
  bool yes = false, grain_given = false;
};

// The upgrade is offline: tcmu-runner holds a pool while a backstore of
// one of its LUNs is there.
std::string ServedRefusal(const std::string& name) {
  return "pool '" + name + "' is in use by tcmu-runner: stop serving it first (remove its LUNs' backstores: " +
         "'cowctl unexport " + name + "/LUN --backstore' for each, or stop tcmu-runner), then upgrade it; " +
         "'cowctl restore' brings saved exports back";
}

// The store's Upgrade, again while another process holds the pool (another
// cowctl lets go when its command ends: waited for as OpenPool does), but
// never while tcmu-runner serves it: that is said at once.
store::UpgradeReport RunUpgrade(const Context& ctx, const std::string& name, uint32_t grain) {
  const std::string path = PoolPath(ctx, name);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ctx.wait_seconds);
  for (bool said = false;; said = true) {
    store::Result<store::UpgradeReport> r = [&] {
      Progress progress("upgrading " + name);
      auto got = store::Pool::Upgrade(
          store::DefaultEnv(), path, grain,
          [](void* c, uint64_t d, uint64_t t) { static_cast<Progress*>(c)->Update(d, t); }, &progress);
      progress.Done();
      return got;
    }();
    if (r.ok()) return r.value();
    // kBusy: another process has the pool (the store says at which step;
    // an upgrade run again finishes or finds format 3).
    if (r.status().code() == Code::kBusy) {
      const std::string why = r.status().message().empty() ? "" : " (" + r.status().message() + ")";
      if (ConnectPool(ctx, name)) {
        throw UserError(ServedRefusal(name) + why);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        throw UserError("pool '" + name + "' is held by another process" +
                        (ctx.wait_seconds > 0 ? " (waited " + std::to_string(ctx.wait_seconds) + " s)" : "") +
                        ": wait for the other cowctl (--wait SECONDS), or stop tcmu-runner serving it" + why);
      }
      if (!said) {
        std::fprintf(stderr, "cowctl: pool '%s' is held by another process; waiting up to %d s\n", name.c_str(),
                     ctx.wait_seconds);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    // No room for the new metadata, or a check that found problems: the
    // store's message says what and where. Anything else may have stopped
    // part way, which leaves the pool as it was or upgraded (pool.h).
    const Code code = r.status().code();
    if (code == Code::kNoSpace || code == Code::kCorruption) Fail(r.status(), "upgrading pool '" + name + "'");
    Fail(r.status(), "upgrading pool '" + name +
                         "' (an upgrade that stops part way leaves the pool as it was or upgraded: run 'cowctl pool "
                         "upgrade " + name + "' again once the cause is fixed)");
  }
}

// A format 3 pool: nothing to do (exit 0). A --grain given that is not its
// grain is said not to apply (the grain of a format 3 pool is fixed).
void EmitAlready(const Context& ctx, const PoolUpgradeArgs& a, uint64_t grain_asked, uint32_t au, uint32_t grain) {
  Json j = Json::object();
  j["pool"] = a.name;
  j["upgraded"] = false;
  j["already"] = true;
  j["format"] = store::kFormatVersionV3;
  j["allocation_unit"] = au;
  j["grain"] = grain;
  std::string note;
  if (a.grain_given && grain_asked != grain) {
    note = " (--grain " + a.grain + " not applied: a format 3 pool keeps its grain)";
  }
  Emit(ctx, j,
       "pool " + a.name + " is format 3 already (sharing unit " + FormatSize(grain) + "); nothing to do" + note + "\n");
}

// Converts a format 1 or 2 pool in place to format 3 (store-v3.md 3.7):
// says what it will do, asks (or takes --yes), then runs the store's
// Upgrade, which moves no data and is safe to interrupt, but which an
// older cowstore cannot follow: it refuses the upgraded pool.
void PoolUpgrade(const Context& ctx, const PoolUpgradeArgs& a) {
  const std::string& name = a.name;
  const uint64_t grain = ParseSize(a.grain, "grain");
  const std::string path = PoolPath(ctx, name);
  // What the pool is, read-only (nothing written before the answer): a
  // missing pool, a damaged one, one served by tcmu-runner or held by
  // another cowctl are said here as every pool command says them.
  store::SpaceInfo space;
  bool served = false;
  {
    auto h = OpenPool(ctx, name, true);
    space = h->Space();
    served = h->remote();
  }
  const PoolProbe probe = ProbePool(path);
  if (probe.kind != PoolProbe::kPool) throw UserError("pool '" + name + "': " + probe.detail);
  const bool format3 = probe.format >= store::kFormatVersionV3;
  if (served && !format3) {
    throw UserError(ServedRefusal(name));
  }
  if (!format3) {
    if (::access(path.c_str(), R_OK | W_OK) != 0) {
      const int err = errno;
      if (!ErrnoAdvice(err, "").empty()) {
        throw UserError("pool '" + name + "': " + path + ": " + std::strerror(err) + " (run cowctl as root)");
      }
    }
    if (std::string why = store::GrainRule(grain, probe.au); !why.empty()) {
      throw UserError("invalid --grain " + a.grain + " for pool '" + name + "' (allocation unit " +
                      FormatSize(probe.au) + "): " + why + "; nothing changed");
    }
    if (grain == probe.au) {
      throw UserError("--grain " + a.grain + " is the allocation unit of pool '" + name + "', which format " +
                      std::to_string(probe.format) + " shares at already: give a grain below it (default " +
                      kDefaultGrain + "); nothing changed");
    }
    if (!a.yes) {
      if (ctx.json || ::isatty(0) != 1) {
        throw UserError("pool '" + name + "': the upgrade to format 3 cannot be undone (cowstore versions older " +
                        "than format 3 will no longer open the pool); confirm with --yes (nothing changed)");
      }
      std::cerr << "pool " << name << ": format " << probe.format << ", allocation unit " << FormatSize(probe.au)
                << ", sharing unit " << FormatSize(probe.grain) << ", " << Count(space.luns.size(), "LUN") << ".\n"
                << "The upgrade converts it in place to format 3, sharing at " << FormatSize(grain)
                << ": a clone then\nowns only the " << FormatSize(grain)
                << " grains written after it. No data moves; the new journal and\n"
                << "checkpoint take space the pool has free. It is safe to interrupt (the pool is\n"
                << "then as it was or upgraded: run it again).\n"
                << "It cannot be undone: cowstore versions older than format 3 will no longer open\n"
                << "the pool.\n"
                << "Type 'upgrade' to convert the pool: " << std::flush;
      std::string answer;
      std::getline(std::cin, answer);
      if (answer != "upgrade") throw UserError("upgrade of pool '" + name + "' cancelled: nothing changed");
    }
  }
  if (served) {
    // Format 3 already (its superblock says so): nothing to do, and nothing
    // to stop serving it for.
    EmitAlready(ctx, a, grain, probe.au, probe.grain);
    return;
  }
  const store::UpgradeReport rep = RunUpgrade(ctx, name, static_cast<uint32_t>(grain));
  if (rep.already) {
    EmitAlready(ctx, a, grain, rep.allocation_unit, rep.grain);
    return;
  }
  Json j = Json::object();
  j["pool"] = name;
  j["upgraded"] = true;
  j["already"] = false;
  j["format"] = store::kFormatVersionV3;
  j["allocation_unit"] = rep.allocation_unit;
  j["grain"] = rep.grain;
  // Formats 1 and 2 share at the allocation unit.
  j["from_format"] = rep.from_format;
  j["from_grain"] = rep.allocation_unit;
  j["luns"] = rep.luns;
  j["extents"] = rep.extents;
  j["journal_bytes"] = rep.journal_bytes;
  j["metadata_pages"] = rep.metadata_pages;
  Emit(ctx, j,
       "pool " + name + ": upgraded from format " + std::to_string(rep.from_format) + " (" +
           FormatSize(rep.allocation_unit) + " sharing) to format 3 (" + FormatSize(rep.grain) +
           " sharing): " + Count(rep.luns, "LUN") + ", " + Count(rep.extents, "extent") + "; journal " +
           FormatSize(rep.journal_bytes) + ", checkpoint " + Count(rep.metadata_pages, "page") + "\n" +
           "  cowstore versions older than format 3 no longer open it\n");
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
  auto& pua = cl.Keep(PoolUpgradeArgs{});
  auto* pu = pool->add_subcommand(
      "upgrade", "Convert a format 1 or 2 pool in place to format 3, which shares at 4 KiB (offline; no data moves; "
                 "an older cowstore no longer opens it)");
  pu->add_option("name", pua.name, "Pool name")->required();
  auto* pug = pu->add_option("--grain", pua.grain,
                             "Sharing unit of the upgraded pool: a power of two from 512 bytes, below the pool's "
                             "allocation unit")
                  ->capture_default_str();
  pu->add_flag("--yes", pua.yes, "Do not ask (required without a terminal, and with --json)");
  pu->callback([&, pug] {
    pua.grain_given = pug->count() > 0;
    PoolUpgrade(ctx, pua);
  });
}

}  // namespace cowstore::cowctl
