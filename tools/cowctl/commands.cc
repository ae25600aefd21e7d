// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/commands.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "handler/store/env.h"
#include "handler/store/names.h"
#include "tools/cowctl/config.h"
#include "tools/cowctl/interrupt.h"
#include "tools/cowctl/lio.h"
#include "tools/cowctl/output.h"
#include "tools/cowctl/pools.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

using store::Code;

Lio MakeLio(const Context& ctx) { return Lio(LioOptions{ctx.configfs_root, ctx.proc_root, nullptr}); }

void Emit(const Context& ctx, const Json& j, const std::string& human) {
  if (ctx.json) std::cout << j.Dump() << "\n";
  else std::cout << human;
  std::cout.flush();
}

std::optional<Backstore> BackstoreOf(const Context& ctx, const LunRef& ref) {
  Lio lio = MakeLio(ctx);
  if (!lio.Available()) return std::nullopt;
  return lio.FindBackstore(ref.pool, ref.lun);
}

// The identifier initiators see, as ESXi names the device (naa.6001405...):
// from the backstore's unit serial when there is one, else from the LUN's
// UUID, the serial cowctl gives a backstore it makes.
std::string LunNaa(const store::LunInfo& l, const std::optional<Backstore>& bs) {
  return NaaName(bs && !bs->wwn.empty() ? bs->wwn : UuidString(l.id));
}

Json LunJson(const std::string& pool, const store::LunInfo& l, const std::optional<Backstore>& bs) {
  Json j = Json::object();
  j["pool"] = pool;
  j["name"] = l.name;
  j["wwn"] = UuidString(l.id);
  j["naa"] = LunNaa(l, bs);
  j["size"] = l.size_bytes;
  j["block_size"] = l.block_size;
  j["mapped"] = l.mapped_bytes;
  j["exclusive"] = l.exclusive_bytes;
  j["shared"] = l.shared_bytes;
  if (bs) {
    Json b = Json::object();
    b["name"] = bs->name;
    b["path"] = bs->hba + "/" + bs->name;
    b["dev_config"] = bs->config.str();
    j["backstore"] = b;
  } else {
    j["backstore"] = nullptr;
  }
  return j;
}

std::string LunHuman(const std::string& pool, const store::LunInfo& l, const std::optional<Backstore>& bs) {
  std::vector<std::pair<std::string, std::string>> kv = {
      {"LUN", pool + "/" + l.name},
      {"WWN", UuidString(l.id)},
      {"NAA", LunNaa(l, bs) + (bs ? " (as ESXi lists it)" : " (as ESXi will list it once exported)")},
      {"size", FormatSize(l.size_bytes) + " (" + std::to_string(l.size_bytes) + " bytes)"},
      {"block size", std::to_string(l.block_size)},
      {"mapped", FormatSize(l.mapped_bytes)},
      {"exclusive", FormatSize(l.exclusive_bytes)},
      {"shared", FormatSize(l.shared_bytes)},
      {"backstore", bs ? "user:cowstore " + bs->name + " (" + bs->config.str() + ")" : "none (not exported)"},
  };
  return KeyValues(kv);
}

// Opens a pool, retrying while it is briefly busy (the handler closing it).
template <typename F>
auto WithPool(const Context& ctx, const std::string& pool, F&& fn) {
  for (int attempt = 0;; ++attempt) {
    auto h = OpenPool(ctx, pool);
    try {
      return fn(*h);
    } catch (const UserError& e) {
      bool busy = std::string(e.what()).find("in use") != std::string::npos;
      if (!busy || attempt >= 25) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// ---------------------------------------------------------------- pools

struct PoolCreateArgs {
  std::string name, size, device, file, au = "1M";
  uint32_t soft_threshold = 80;
};

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
  if (a.soft_threshold > 100) throw UserError("soft threshold is a percentage: 0..100 (0 disables)");
  po.soft_threshold_percent = a.soft_threshold;
  if (::mkdir(ctx.pool_dir.c_str(), 0755) != 0 && errno != EEXIST) {
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
  store::SpaceInfo s = r.value()->Space();
  (void)r.value()->Close();
  Json j = Json::object();
  j["pool"] = a.name;
  j["path"] = entry;
  j["size"] = s.pool_size_bytes;
  j["allocation_unit"] = s.allocation_unit;
  Emit(ctx, j, "created pool " + a.name + " (" + FormatSize(s.pool_size_bytes) + ", allocation unit " +
                   FormatSize(s.allocation_unit) + ") at " + entry + "\n");
}

Json SpaceJson(const std::string& name, const store::SpaceInfo& s, bool remote) {
  Json j = Json::object();
  uint64_t au = s.allocation_unit;
  j["pool"] = name;
  j["served_by_handler"] = remote;
  j["size"] = s.pool_size_bytes;
  j["allocation_unit"] = s.allocation_unit;
  j["allocated"] = s.allocated_units * au;
  j["metadata"] = s.metadata_units * au;
  j["shared"] = s.shared_units * au;
  j["free"] = s.free_units * au;
  j["mapped"] = s.mapped_bytes;
  j["saved_by_clones"] = s.saved_bytes;
  j["soft_threshold"] = s.soft_threshold_units * au;
  Json luns = Json::array();
  for (const auto& l : s.luns) luns.push_back(LunJson(name, l, std::nullopt));
  j["luns"] = luns;
  return j;
}

void PoolList(const Context& ctx) {
  Json arr = Json::array();
  Table t({"POOL", "SIZE", "ALLOCATED", "FREE", "SHARED", "SAVED", "LUNS", "OPEN BY"});
  for (const auto& name : PoolNames(ctx)) {
    try {
      auto h = OpenPool(ctx, name, true);
      auto s = h->Space();
      uint64_t au = s.allocation_unit;
      arr.push_back(SpaceJson(name, s, h->remote()));
      t.Row({name, FormatSize(s.pool_size_bytes), FormatSize(s.allocated_units * au), FormatSize(s.free_units * au),
             FormatSize(s.shared_units * au), FormatSize(s.saved_bytes), std::to_string(s.luns.size()),
             h->remote() ? "tcmu-runner" : "-"});
    } catch (const UserError& e) {
      Json j = Json::object();
      j["pool"] = name;
      j["error"] = e.what();
      arr.push_back(j);
      t.Row({name, "?", "?", "?", "?", "?", "?", std::string("error: ") + e.what()});
    }
  }
  Emit(ctx, arr, t.empty() ? "no pools in " + ctx.pool_dir + "\n" : t.Render());
}

void PoolShow(const Context& ctx, const std::string& name) {
  auto h = OpenPool(ctx, name, true);
  auto s = h->Space();
  Json j = SpaceJson(name, s, h->remote());
  uint64_t au = s.allocation_unit;
  auto pct = [&](uint64_t units) {
    return s.total_units ? " (" + std::to_string(units * 100 / s.total_units) + "%)" : std::string();
  };
  std::string human = KeyValues({
      {"pool", name},
      {"path", PoolPath(ctx, name)},
      {"open by", h->remote() ? "tcmu-runner (through its control socket)" : "nobody"},
      {"size", FormatSize(s.pool_size_bytes)},
      {"allocation unit", FormatSize(au)},
      {"allocated", FormatSize(s.allocated_units * au) + pct(s.allocated_units)},
      {"metadata", FormatSize(s.metadata_units * au)},
      {"shared", FormatSize(s.shared_units * au)},
      {"saved by clones", FormatSize(s.saved_bytes)},
      {"free", FormatSize(s.free_units * au) + pct(s.free_units)},
      {"soft threshold", FormatSize(s.soft_threshold_units * au) + pct(s.soft_threshold_units)},
  });
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
  if (!plan->damaged) {
    j["repaired"] = false;
    Emit(ctx, j, "pool " + name + ": the journal is intact; --repair fixes nothing else\n");
    return 1;
  }
  std::string list = "pool " + name + ": the journal is damaged at offset " + std::to_string(plan->offset) +
                     " (LSN " + std::to_string(plan->lsn) + "). Repairing gives up these " +
                     std::to_string(plan->dropped.size()) + " committed operation(s):\n";
  for (const auto& d : plan->dropped) list += "  " + d + "\n";
  if (!yes) {
    if (ctx.json || ::isatty(0) != 1)
      throw UserError("pool '" + name + "': the repair drops " + std::to_string(plan->dropped.size()) +
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
                   std::to_string(done->dropped.size()) + " operation(s) dropped\n");
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
  j["checked"] = "metadata";
  Json probs = Json::array();
  std::string human = std::string("pool ") + name + ": metadata " + (rep.clean ? "clean" : "PROBLEMS FOUND") +
                      " (" + std::to_string(rep.luns) + " LUNs, " + std::to_string(rep.extents) + " extents, " +
                      std::to_string(rep.allocated_units) + " allocated units, " +
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

// ---------------------------------------------------------------- LUNs

uint32_t CheckBlockSize(uint32_t bs) {
  if (!store::ValidBlockSize(bs)) throw UserError("block size must be " + std::string(store::kBlockSizeRule));
  return bs;
}

struct BackstoreArgs {
  bool make = false;
  std::string name, copy_group;
  std::string wce;  // "", "0", "1"
};

Cfgstring MakeCfg(const LunRef& ref, const BackstoreArgs& b) {
  Cfgstring c{ref.pool, ref.lun, {}};
  if (!b.copy_group.empty()) {
    RequireName(b.copy_group, "copy group");
    c.options["copy_group"] = b.copy_group;
  }
  if (!b.wce.empty()) {
    if (b.wce != "0" && b.wce != "1") throw UserError("--wce takes 0 or 1");
    c.options["wce"] = b.wce;
  }
  if (c.str().size() > 250) throw UserError("the cfgstring would pass the kernel's 255-character limit");
  return c;
}

// Creates the LIO backstore of an existing LUN. The caller has released
// its pool handle: tcmu-runner opens the pool when the backstore is enabled.
Backstore MakeBackstore(const Context& ctx, const LunRef& ref, const store::LunInfo& l, const BackstoreArgs& b) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  lio.RequireRunner();
  BackstoreSpec spec;
  spec.name = b.name.empty() ? ref.pool + "-" + ref.lun : b.name;
  if (spec.name.size() > 64) spec.name = ref.lun;
  spec.config = MakeCfg(ref, b);
  spec.size = l.size_bytes;
  spec.block_size = l.block_size;
  spec.wwn = UuidString(l.id);
  return lio.CreateBackstore(spec);
}

void DeleteLunRolledBack(const Context& ctx, const LunRef& ref) {
  try {
    WithPool(ctx, ref.pool, [&](PoolHandle& h) {
      h.DeleteLun(ref.lun);
      return 0;
    });
  } catch (const UserError& e) {
    std::cerr << "cowctl: warning: could not roll back LUN " << ref.str() << ": " << e.what() << "\n";
  }
}

void LunCreate(const Context& ctx, const std::string& refs, const std::string& size, uint32_t bs,
               bool overcommit, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  CheckBlockSize(bs);
  uint64_t bytes = ParseSize(size, "size");
  if (bytes == 0 || bytes % bs) {
    throw UserError("size must be a non-zero multiple of the block size (" + std::to_string(bs) + ")");
  }
  if (b.make) MakeCfg(ref, b);  // validate options before making anything
  store::LunInfo l;
  {
    auto h = OpenPool(ctx, ref.pool);
    auto s = h->Space();
    if (bytes > s.pool_size_bytes && !overcommit) {
      throw UserError("LUN size " + FormatSize(bytes) + " is larger than pool '" + ref.pool + "' (" +
                      FormatSize(s.pool_size_bytes) + "): grow the pool or pass --overcommit");
    }
    l = h->CreateLun(ref.lun, bytes, bs);
  }
  std::optional<Backstore> made;
  if (b.make) {
    try {
      made = MakeBackstore(ctx, ref, l, b);
    } catch (const UserError&) {
      DeleteLunRolledBack(ctx, ref);
      throw;
    }
  }
  Emit(ctx, LunJson(ref.pool, l, made),
       "created LUN " + ref.str() + " (" + FormatSize(l.size_bytes) + ", " + std::to_string(l.block_size) +
           "-byte blocks, WWN " + UuidString(l.id) + ")" +
           (made ? ", backstore user:cowstore/" + made->name : std::string()) + "\n");
}

void LunList(const Context& ctx, const std::string& pool) {
  std::vector<std::string> pools = pool.empty() ? PoolNames(ctx) : std::vector<std::string>{pool};
  Lio lio = MakeLio(ctx);
  std::vector<Backstore> bss = lio.Available() ? lio.Backstores() : std::vector<Backstore>{};
  Json arr = Json::array();
  Table t({"LUN", "SIZE", "BLOCK", "MAPPED", "SHARED", "BACKSTORE", "WWN"});
  for (const auto& p : pools) {
    std::unique_ptr<PoolHandle> h;
    try {
      h = OpenPool(ctx, p, true);
    } catch (const UserError&) {
      if (!pool.empty()) throw;
      continue;
    }
    for (const auto& l : h->Space().luns) {
      std::optional<Backstore> bs;
      for (const auto& b : bss) {
        if (b.config.pool == p && b.config.lun == l.name) bs = b;
      }
      arr.push_back(LunJson(p, l, bs));
      t.Row({p + "/" + l.name, FormatSize(l.size_bytes), std::to_string(l.block_size), FormatSize(l.mapped_bytes),
             FormatSize(l.shared_bytes), bs ? bs->name : "-", UuidString(l.id)});
    }
  }
  Emit(ctx, arr, t.empty() ? std::string("no LUNs\n") : t.Render());
}

void LunShow(const Context& ctx, const std::string& refs) {
  LunRef ref = ParseLunRef(refs);
  auto h = OpenPool(ctx, ref.pool, true);
  auto l = h->GetLun(ref.lun);
  auto bs = BackstoreOf(ctx, ref);
  Emit(ctx, LunJson(ref.pool, l, bs), LunHuman(ref.pool, l, bs));
}

void LunResize(const Context& ctx, const std::string& refs, const std::string& size, bool force) {
  LunRef ref = ParseLunRef(refs);
  // "+100G" grows by that much (as lvresize -L +100G); else the new size.
  const bool grow_by = !size.empty() && size[0] == '+';
  const uint64_t given = ParseSize(grow_by ? size.substr(1) : size, "size");
  uint64_t bytes = given;
  auto bs = BackstoreOf(ctx, ref);
  store::LunInfo l = WithPool(ctx, ref.pool, [&](PoolHandle& h) {
    auto cur = h.GetLun(ref.lun);
    if (grow_by) {
      if (given > UINT64_MAX - cur.size_bytes) throw UserError("size: " + size + " would overflow");
      bytes = cur.size_bytes + given;
    }
    if (bytes == 0 || bytes % cur.block_size) {
      throw UserError("size must be a non-zero multiple of the block size (" + std::to_string(cur.block_size) + ")");
    }
    if (bytes < cur.size_bytes && !force) {
      throw UserError("shrinking " + ref.str() + " from " + FormatSize(cur.size_bytes) + " to " + FormatSize(bytes) +
                      " discards data: pass --force if you mean it");
    }
    return h.ResizeLun(ref.lun, bytes);
  });
  if (bs) {
    // Tell LIO (and through it the handler's reconfig and the initiators).
    std::string p = bs->path + "/attrib/dev_size";
    int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string v = std::to_string(bytes);
      bool ok = ::write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
      ::close(fd);
      if (!ok) {
        std::cerr << "cowctl: warning: LIO did not take the new size (" << std::strerror(errno)
                  << "); initiators see it after the backstore is re-created\n";
      }
    }
  }
  Emit(ctx, LunJson(ref.pool, l, bs), "LUN " + ref.str() + " is now " + FormatSize(l.size_bytes) + "\n");
}

void Unexport(const Context& ctx, const LunRef& ref, bool and_backstore);

void LunDelete(const Context& ctx, const std::string& refs, bool force) {
  LunRef ref = ParseLunRef(refs);
  if (auto bs = BackstoreOf(ctx, ref)) {
    if (!force) {
      throw UserError(ref.str() + " is exported (backstore " + bs->name +
                      "): run 'cowctl unexport " + ref.str() + " --backstore' first, or use --force");
    }
    Unexport(ctx, ref, true);
  }
  WithPool(ctx, ref.pool, [&](PoolHandle& h) {
    h.DeleteLun(ref.lun);
    return 0;
  });
  Json j = Json::object();
  j["deleted"] = ref.str();
  Emit(ctx, j, "deleted LUN " + ref.str() + "\n");
}

void LunClone(const Context& ctx, const std::string& srcs, const std::string& dst, bool snapshot,
              const BackstoreArgs& b) {
  LunRef src = ParseLunRef(srcs);
  std::string name = dst;
  // "tank/b" as well as "b" (as targetcli users and 'lun create' write it):
  // a clone shares extents, so it stays in its source's pool.
  if (auto slash = name.find('/'); slash != std::string::npos) {
    LunRef d = ParseLunRef(name);
    if (d.pool != src.pool) {
      throw UserError("a clone stays in the pool of its source (it shares its extents): name it " + src.pool + "/" +
                      d.lun + ", or copy across pools with 'lun export' and 'lun import'");
    }
    name = d.lun;
  }
  if (name.empty()) {
    char ts[32];
    std::time_t now = std::time(nullptr);
    std::strftime(ts, sizeof ts, "%Y%m%d-%H%M%S", std::gmtime(&now));
    name = src.lun + ".snap-" + ts;
    if (name.size() > 64) name = name.substr(name.size() - 64);
  }
  RequireName(name, "LUN");
  LunRef dref{src.pool, name};
  if (b.make) MakeCfg(dref, b);
  store::LunInfo l = WithPool(ctx, src.pool, [&](PoolHandle& h) { return h.CloneLun(src.lun, name); });
  std::optional<Backstore> made;
  if (b.make) {
    try {
      made = MakeBackstore(ctx, dref, l, b);
    } catch (const UserError&) {
      DeleteLunRolledBack(ctx, dref);
      throw;
    }
  }
  Emit(ctx, LunJson(src.pool, l, made),
       std::string(snapshot ? "snapshot " : "clone ") + dref.str() + " of " + src.str() + " created (WWN " +
           UuidString(l.id) + ")\n");
}

// An absolute path, so that the handler process (another cwd) finds it.
std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[4096];
  if (!::getcwd(cwd, sizeof cwd)) throw UserError("cannot resolve " + p + ": " + std::strerror(errno));
  return std::string(cwd) + "/" + p;
}

// The size an import of `path` makes (0 when it cannot be told here: the
// import itself then says why). Opens nothing that could block: a regular
// file is sized by lstat, a block device through an O_NONBLOCK descriptor.
uint64_t ImportSize(const std::string& path, uint32_t bs) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return 0;
  uint64_t bytes = 0;
  if (S_ISREG(st.st_mode)) {
    bytes = static_cast<uint64_t>(st.st_size);
  } else if (S_ISBLK(st.st_mode)) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) bytes = 0;
    ::close(fd);
  }
  return (bytes + bs - 1) / bs * bs;
}

void LunImport(const Context& ctx, const std::string& refs, const std::string& from, uint32_t bs,
               const std::string& size, bool overcommit) {
  LunRef ref = ParseLunRef(refs);
  CheckBlockSize(bs);
  uint64_t bytes = size.empty() ? 0 : ParseSize(size, "size");
  if (!size.empty() && (bytes == 0 || bytes % bs)) {
    throw UserError("size must be a non-zero multiple of the block size");
  }
  std::string path = Absolute(from);
  auto h = OpenPool(ctx, ref.pool);
  // The rule `lun create` applies: a LUN larger than its pool only when asked.
  uint64_t lun_bytes = bytes ? bytes : ImportSize(path, bs);
  uint64_t pool_bytes = h->Space().pool_size_bytes;
  if (lun_bytes > pool_bytes && !overcommit) {
    throw UserError("LUN size " + FormatSize(lun_bytes) + " is larger than pool '" + ref.pool + "' (" +
                    FormatSize(pool_bytes) + "): grow the pool or pass --overcommit");
  }
  control::CopyStats st;
  store::LunInfo l;
  {
    Interruptible interruptible;  // Ctrl-C: the import stops and leaves nothing
    Progress progress("importing " + ref.str());
    l = h->Import(ref.lun, path, bs, bytes, &st, &progress);
  }
  Json j = LunJson(ref.pool, l, std::nullopt);
  j["imported_from"] = path;
  j["written"] = st.written;
  j["left_unmapped"] = st.skipped;
  Emit(ctx, j, "imported " + path + " into " + ref.str() + ": " + FormatSize(st.written) + " written, " +
                   FormatSize(st.skipped) + " of zeros left unmapped\n");
}

void LunExportRaw(const Context& ctx, const std::string& refs, const std::string& to, bool force,
                  const std::string& mode_text) {
  LunRef ref = ParseLunRef(refs);
  auto mode = control::ParseMode(mode_text);
  if (!mode) throw UserError("--mode " + mode_text + ": give octal permissions, as chmod takes them (e.g. 0640)");
  std::string path = Absolute(to);
  auto h = OpenPool(ctx, ref.pool, true);
  store::LunInfo l = h->GetLun(ref.lun);
  control::CopyStats st;
  {
    Interruptible interruptible;  // Ctrl-C: the export stops, the old file stays
    Progress progress("exporting " + ref.str());
    h->Export(ref.lun, path, force, *mode, &st, &progress);
  }
  Json j = Json::object();
  j["lun"] = ref.str();
  j["to"] = path;
  j["size"] = l.size_bytes;
  j["written"] = st.written;
  j["holes"] = st.skipped;
  Emit(ctx, j, "exported " + ref.str() + " to " + path + ": " + FormatSize(st.written) + " written, " +
                   FormatSize(st.skipped) + " left as holes\n");
}

// ---------------------------------------------------------------- LIO

Json BackstoreJson(const Backstore& b) {
  Json j = Json::object();
  j["name"] = b.name;
  j["path"] = b.hba + "/" + b.name;
  j["pool"] = b.config.pool;
  j["lun"] = b.config.lun;
  j["dev_config"] = b.config.str();
  j["size"] = b.size;
  j["block_size"] = b.block_size;
  j["wwn"] = b.wwn;
  j["enabled"] = b.enabled;
  return j;
}

store::LunInfo LunInfoOf(const Context& ctx, const LunRef& ref) {
  auto h = OpenPool(ctx, ref.pool, true);
  return h->GetLun(ref.lun);
}

void BackstoreCreate(const Context& ctx, const std::string& refs, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  MakeCfg(ref, b);
  store::LunInfo l = LunInfoOf(ctx, ref);
  Backstore bs = MakeBackstore(ctx, ref, l, b);
  Emit(ctx, BackstoreJson(bs), "created backstore user:cowstore/" + bs.name + " for " + ref.str() + "\n");
}

void BackstoreList(const Context& ctx) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  Json arr = Json::array();
  Table t({"BACKSTORE", "PATH", "LUN", "SIZE", "BLOCK", "CONFIG", "EXPORTS"});
  for (const auto& b : lio.Backstores()) {
    arr.push_back(BackstoreJson(b));
    auto links = lio.LinksTo(b);
    t.Row({b.name, b.hba + "/" + b.name, b.config.pool + "/" + b.config.lun, FormatSize(b.size),
           std::to_string(b.block_size), b.config.str(), std::to_string(links.size())});
  }
  Emit(ctx, arr, t.empty() ? std::string("no cowstore backstores\n") : t.Render());
}

void Unexport(const Context& ctx, const LunRef& ref, bool and_backstore) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  auto bs = lio.FindBackstore(ref.pool, ref.lun);
  if (!bs) throw UserError(ref.str() + " has no backstore: nothing to unexport");
  lio.Unexport(*bs);
  if (and_backstore) lio.DeleteBackstore(*bs);
}

struct ExportArgs {
  std::string target, chap_user, chap_password;
  std::vector<std::string> portals, initiators;
  int64_t lun = -1;
  bool demo_mode = false;
  bool no_auto_map = false;
};

// Exports ref's backstore (made first if it has none) through `export_fn`;
// a backstore made here is removed again when the export fails, so a failed
// export leaves nothing behind.
template <typename ExportFn>
std::pair<Backstore, FabricLun> ExportBackstore(const Context& ctx, Lio& lio, const LunRef& ref,
                                                const BackstoreArgs& b, ExportFn export_fn) {
  auto bs = lio.FindBackstore(ref.pool, ref.lun);
  const bool made = !bs;
  if (made) bs = MakeBackstore(ctx, ref, LunInfoOf(ctx, ref), b);
  try {
    return {*bs, export_fn(*bs)};
  } catch (const UserError&) {
    if (made) {
      try { lio.DeleteBackstore(*bs); } catch (const UserError&) {}
    }
    throw;
  }
}

void ExportIscsi(const Context& ctx, const std::string& refs, const ExportArgs& a, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  IscsiSpec spec;
  spec.target = a.target.empty() ? DefaultIscsiTarget(ref.pool) : a.target;
  spec.portals = a.portals;
  for (const auto& i : a.initiators) spec.acls.push_back({i, a.chap_user, a.chap_password});
  if (!a.chap_user.empty() && a.initiators.empty()) {
    throw UserError("CHAP is set per initiator: name one with --initiator");
  }
  if (a.lun >= 0) spec.lun = static_cast<uint32_t>(a.lun);
  spec.demo_mode = a.demo_mode;
  spec.auto_map = !a.no_auto_map;
  // Who may log in is decided here, before the backstore or anything else
  // is made: no ACLs means every initiator only when --demo-mode says so.
  const IscsiAccess access = lio.IscsiTpgAccess(spec.target);
  CheckIscsiAccess(access, spec, ref.str());
  auto [bs, l] = ExportBackstore(ctx, lio, ref, b, [&](const Backstore& s) { return lio.ExportIscsi(s, spec); });
  // Who sees the LUN now: every ACL that maps it (all of the TPG's unless
  // --no-auto-map), whoever made the mapping.
  const std::vector<LunMapping> mapped = lio.MappedTo(l);
  Json to = Json::array();
  std::string seen;
  for (const auto& m : mapped) {
    to.push_back(m.initiator);
    seen += (seen.empty() ? "" : ", ") + m.initiator;
    if (m.mapped_lun != l.lun) seen += " (as LUN " + std::to_string(m.mapped_lun) + ")";
  }
  if (spec.demo_mode) {
    std::cerr << "cowctl: warning: demo mode: any initiator can log in to " << l.target << " and write to "
              << ref.str() << " (no ACLs)\n";
  } else if (mapped.empty()) {
    std::cerr << "cowctl: note: " << l.target << " admits only the initiators in its ACLs, and none maps LUN "
              << l.lun << ", so no initiator sees it: map it with --initiator IQN\n";
  }
  Json j = Json::object();
  j["lun"] = ref.str();
  j["fabric"] = "iscsi";
  j["target"] = l.target;
  j["tpg"] = l.tpg;
  j["lun_number"] = l.lun;
  j["backstore"] = bs.name;
  j["demo_mode"] = spec.demo_mode;
  j["mapped_to"] = to;
  j["naa"] = NaaName(bs.wwn);
  Emit(ctx, j,
       "exported " + ref.str() + " as LUN " + std::to_string(l.lun) + " of " + l.target + "\n" +
           (seen.empty() ? std::string() : "seen by " + seen + "\n") + "ESXi lists it as " + NaaName(bs.wwn) + "\n");
}

void ExportLoop(const Context& ctx, const std::string& refs, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  auto [bs, l] = ExportBackstore(ctx, lio, ref, b, [&](const Backstore& s) { return lio.ExportLoopback(s); });
  Json j = Json::object();
  j["lun"] = ref.str();
  j["fabric"] = "loopback";
  j["target"] = l.target;
  j["lun_number"] = l.lun;
  j["naa"] = NaaName(bs.wwn);
  Emit(ctx, j, "exported " + ref.str() + " over tcm_loop as " + l.target + " LUN " + std::to_string(l.lun) +
                   " (a local /dev/sdX appears, " + NaaName(bs.wwn) + ")\n");
}

void ExportList(const Context& ctx) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  Json arr = Json::array();
  Table t({"LUN", "FABRIC", "TARGET", "TPG", "LUN#", "BACKSTORE", "NAA"});
  for (const auto& b : lio.Backstores()) {
    for (const auto& l : lio.LinksTo(b)) {
      Json j = Json::object();
      j["lun"] = b.config.pool + "/" + b.config.lun;
      j["fabric"] = l.fabric;
      j["target"] = l.target;
      j["tpg"] = l.tpg;
      j["lun_number"] = l.lun;
      j["backstore"] = b.name;
      j["naa"] = NaaName(b.wwn);
      arr.push_back(j);
      t.Row({b.config.pool + "/" + b.config.lun, l.fabric, l.target, std::to_string(l.tpg), std::to_string(l.lun),
             b.name, NaaName(b.wwn)});
    }
  }
  Emit(ctx, arr, t.empty() ? std::string("no cowstore exports\n") : t.Render());
}

// ---------------------------------------------------------------- VAAI, top

void VaaiStatus(const Context& ctx, const std::string& refs) {
  Lio lio = MakeLio(ctx);
  std::vector<Backstore> bss = lio.Available() ? lio.Backstores() : std::vector<Backstore>{};
  std::vector<LunRef> refs_list;
  if (!refs.empty()) {
    LunRef r = ParseLunRef(refs);
    LunInfoOf(ctx, r);  // exists?
    refs_list.push_back(r);
  } else {
    for (const auto& b : bss) refs_list.push_back({b.config.pool, b.config.lun});
  }
  std::map<std::string, std::optional<std::vector<control::LunCounters>>> counters;
  Json arr = Json::array();
  std::string human;
  for (const auto& ref : refs_list) {
    std::optional<Backstore> bs;
    for (const auto& b : bss) {
      if (b.config.pool == ref.pool && b.config.lun == ref.lun) bs = b;
    }
    if (!counters.count(ref.pool)) {
      auto h = ConnectPool(ctx, ref.pool);
      counters[ref.pool] = h ? h->Counters() : std::nullopt;
    }
    std::string group = bs && bs->config.options.count("copy_group") ? bs->config.options.at("copy_group") : "";
    std::string st = bs ? "supported" : "unsupported (not exported)";
    Json j = Json::object();
    j["lun"] = ref.str();
    j["exported"] = bs.has_value();
    j["ats"] = st;
    j["clone"] = st;
    j["zero"] = st;
    j["delete"] = st;
    j["copy_group"] = group;
    // As esxcli storage core device vaai status get heads each device.
    if (bs) j["naa"] = NaaName(bs->wwn);
    else j["naa"] = nullptr;
    human += bs ? NaaName(bs->wwn) + " (" + ref.str() + ")\n" : ref.str() + " (not exported)\n";
    human += "   VAAI Plugin Name: (none: VMW_VAAIP_T10, standard T10 commands)\n";
    human += "   ATS Status: " + st + "\n";
    human += "   Clone Status: " + st +
             (bs ? (group.empty() ? " (within this LUN; set a copy group for clones between LUNs)"
                                  : " (within copy group '" + group + "')")
                 : std::string()) + "\n";
    human += "   Zero Status: " + st + "\n";
    human += "   Delete Status: " + st + "\n";
    const auto& cs = counters[ref.pool];
    std::optional<control::LunCounters> mine;
    if (cs) {
      for (const auto& c : *cs) {
        if (c.lun == ref.lun) mine = c;
      }
    }
    if (mine) {
      Json cj = Json::object();
      for (const auto& [k, v] : mine->counters) cj[k] = v;
      j["counters"] = cj;
      human += "   Handler counters:";
      for (const auto& [k, v] : mine->counters) human += " " + k + "=" + std::to_string(v);
      human += "\n";
    } else {
      j["counters"] = nullptr;
      human += "   Handler counters: unavailable (pool not served by a running handler)\n";
    }
    arr.push_back(j);
  }
  if (refs_list.empty()) human = "no exported cowstore LUNs (export one with 'cowctl export iscsi POOL/LUN')\n";
  Emit(ctx, arr, human);
}

void Top(const Context& ctx, double interval, int count) {
  if (interval < 0.1) throw UserError("--interval must be at least 0.1 seconds");
  using Snap = std::map<std::string, std::map<std::string, uint64_t>>;  // pool/lun -> counters
  auto snapshot = [&]() {
    Snap s;
    for (const auto& p : PoolNames(ctx)) {
      auto h = ConnectPool(ctx, p);
      if (!h) continue;
      auto cs = h->Counters();
      if (!cs) continue;
      for (const auto& c : *cs) {
        auto& m = s[p + "/" + c.lun];
        for (const auto& [k, v] : c.counters) m[k] = v;
      }
    }
    return s;
  };
  bool tty = ::isatty(1) == 1 && !ctx.json;
  Snap prev = snapshot();
  auto t0 = std::chrono::steady_clock::now();
  if (prev.empty() && count != 0 && !tty) {
    // Degrade gracefully: nothing serves a pool, so there is nothing to rate.
  }
  for (int i = 0; count == 0 || i < count; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    Snap cur = snapshot();
    auto t1 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    auto rate = [&](const std::string& lun, const char* k) {
      uint64_t a = prev.count(lun) && prev[lun].count(k) ? prev[lun][k] : 0;
      uint64_t b = cur[lun].count(k) ? cur[lun][k] : 0;
      return b >= a ? static_cast<double>(b - a) / dt : 0.0;
    };
    Json arr = Json::array();
    Table t({"LUN", "IOPS", "READ/s", "WRITE/s", "ATS/s", "MISCMP", "XCOPY/s", "CLONED/s", "COPIED/s", "ZEROED/s",
             "UNMAPPED/s"});
    // Counter names as the handler reports them (zero_blocks: older name).
    auto zeroed = [&](const std::string& lun) { return rate(lun, "write_same_blocks") + rate(lun, "zero_blocks"); };
    for (const auto& [lun, m] : cur) {
      uint64_t miscompares = m.count("ats_miscompares") ? m.at("ats_miscompares") : 0;
      Json j = Json::object();
      j["lun"] = lun;
      j["iops"] = rate(lun, "commands");
      j["read_bytes_per_s"] = rate(lun, "read_bytes");
      j["write_bytes_per_s"] = rate(lun, "write_bytes");
      j["ats_per_s"] = rate(lun, "ats");
      j["ats_miscompares"] = miscompares;
      j["xcopy_per_s"] = rate(lun, "xcopy");
      j["clone_blocks_per_s"] = rate(lun, "clone_blocks");
      j["copy_blocks_per_s"] = rate(lun, "copy_blocks");
      j["zero_blocks_per_s"] = zeroed(lun);
      j["unmap_blocks_per_s"] = rate(lun, "unmap_blocks");
      Json all = Json::object();
      for (const auto& [k, v] : m) all[k] = v;
      j["counters"] = all;
      arr.push_back(j);
      auto num = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.0f", v);
        return std::string(b);
      };
      t.Row({lun, num(rate(lun, "commands")), FormatSize(static_cast<uint64_t>(rate(lun, "read_bytes"))),
             FormatSize(static_cast<uint64_t>(rate(lun, "write_bytes"))), num(rate(lun, "ats")),
             std::to_string(miscompares), num(rate(lun, "xcopy")), num(rate(lun, "clone_blocks")),
             num(rate(lun, "copy_blocks")), num(zeroed(lun)), num(rate(lun, "unmap_blocks"))});
    }
    std::string human;
    if (tty) human += "\033[H\033[2J";
    char hdr[64];
    std::time_t now = std::time(nullptr);
    std::strftime(hdr, sizeof hdr, "%H:%M:%S", std::localtime(&now));
    human += std::string("cowctl top - ") + hdr + " (every " + std::to_string(interval).substr(0, 4) + " s)\n";
    human += cur.empty() ? "no pool is served by a running handler: nothing to show (is tcmu-runner running and "
                           "a cowstore LUN exported?)\n"
                         : t.Render();
    Emit(ctx, arr, human);
    prev = std::move(cur);
  }
}

// ---------------------------------------------------------------- save / restore

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

// What restore does with one pool of the file, decided before anything is
// changed (docs/design/cowctl.md, "Restore at boot").
struct PoolStep {
  const PoolConfig* cfg = nullptr;
  enum Action { kUse, kRelink, kCreate, kSkip } action = kSkip;
  std::string target;                 // kRelink: the device or file the entry will point at
  std::string problem;                // kSkip: why, one line
  std::vector<store::LunInfo> luns;   // kUse, kRelink: what the pool holds now
};

std::string LinkTarget(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : path;
}

// Restore uses a pool only if it is the one the file saved (same UUID, when
// the file has it); relinks a lost entry only to a device or file holding
// that pool; creates one only when asked (and never on a device).
PoolStep PlanPool(const Context& ctx, const PoolConfig& p, bool create_missing) {
  PoolStep s;
  s.cfg = &p;
  const std::string entry = PoolPath(ctx, p.name);
  auto skip = [&](const std::string& why) {
    s.action = PoolStep::kSkip;
    s.problem = "pool " + p.name + ": " + why;
    return s;
  };
  auto other = [&](const PoolProbe& pr, const std::string& where) {
    return skip(where + " holds the pool with UUID " + UuidString(pr.uuid) + ", the file saved UUID " + p.uuid +
                ": another pool, left alone (if it is the one you want, run 'cowctl save' to record it)");
  };
  struct stat st;
  if (::lstat(entry.c_str(), &st) == 0) {
    PoolProbe pr = ProbePool(entry);
    if (pr.kind == PoolProbe::kAbsent) {
      return skip(entry + " points at " + LinkTarget(entry) +
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
    PoolProbe pr = ProbePool(saved);
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
    PoolStep s = PlanPool(ctx, p, create_missing);
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
    for (const auto& l : p.luns) {
      std::string key = p.name + "/" + l.name;
      auto it = std::find_if(s.luns.begin(), s.luns.end(), [&](const store::LunInfo& x) { return x.name == l.name; });
      if (it != s.luns.end()) {
        if (it->size_bytes != l.size || it->block_size != l.block_size) {
          std::cerr << "cowctl: warning: " << file << ": LUN " << key << " is " << it->size_bytes << " bytes / "
                    << it->block_size << "-byte blocks, the file says " << l.size << " / " << l.block_size
                    << "; keeping the pool's\n";
        }
      } else if (create_missing) {
        created.insert(key);
      } else {
        problems.push_back("LUN " + key + ": missing from pool " + p.name +
                           " (deleted since the save?): not created, not exported (if it is really gone, "
                           "'cowctl restore --create-missing' creates it empty, with a new WWN)");
        continue;
      }
      ready.insert(key);
    }
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
          PoolCreateArgs a{p.name, std::to_string(p.size), "", p.file, std::to_string(p.allocation_unit),
                           p.soft_threshold};
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

// The word of argv that is not a subcommand where one is expected, with the
// command it was given to and that command's subcommands (CLI11 says only
// "A subcommand is required"). Options, and the values of those that take
// one, are stepped over; nullopt once a command takes positional arguments.
struct UnknownWord {
  std::string word, command, choices;
};
std::optional<UnknownWord> FindUnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "cowctl";
  for (int i = 1; i < argc; ++i) {
    std::string tok = argv[i];
    if (tok == "--") return std::nullopt;
    if (tok.size() > 1 && tok[0] == '-') {
      if (tok.find('=') != std::string::npos) continue;
      const CLI::Option* o = nullptr;
      for (CLI::App* a = cur; a && !o; a = a->get_parent()) o = a->get_option_no_throw(tok);
      if (o && o->get_expected_min() > 0) ++i;  // its value
      continue;
    }
    auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;
    auto it = std::find_if(subs.begin(), subs.end(), [&](CLI::App* a) { return a->check_name(tok); });
    if (it == subs.end()) {
      std::string choices;
      for (auto* a : subs) choices += (choices.empty() ? "" : ", ") + a->get_name();
      return UnknownWord{tok, path, choices};
    }
    cur = *it;
    path += " " + tok;
  }
  return std::nullopt;
}

}  // namespace

int Main(int argc, char** argv) {
  Context ctx;
  CLI::App app{"cowctl: manage cowstore pools, LUNs and their LIO exports (VAAI-capable iSCSI LUNs)", "cowctl"};
  app.set_version_flag("--version", std::string("cowctl ") + "0.1.0");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--pool-dir", ctx.pool_dir, "Where pools live (env COWSTORE_POOL_DIR)")->capture_default_str();
  app.add_option("--configfs-root", ctx.configfs_root, "configfs mount point")->capture_default_str();
  app.add_option("--run-dir", ctx.run_dir, "Where handler control sockets are (env COWSTORE_RUN_DIR)")
      ->capture_default_str();
  app.add_option("--proc-root", ctx.proc_root, "procfs, to find tcmu-runner (tests)")->group("");
  app.add_flag("--json", ctx.json, "Machine-readable JSON output");
  int rc = 0;

  // pool
  auto* pool = app.add_subcommand("pool", "Create, inspect, check and grow pools");
  pool->require_subcommand(1);
  PoolCreateArgs pca;
  auto* pc = pool->add_subcommand("create", "Create a pool on a sparse file or a block device");
  pc->add_option("name", pca.name, "Pool name")->required();
  pc->add_option("--size,-s", pca.size, "Size (file pools; e.g. 500G)");
  pc->add_option("--device,-d", pca.device, "Block device to hold the pool (whole device)");
  pc->add_option("--file", pca.file, "Put the pool file here (linked from the pool directory)");
  pc->add_option("--allocation-unit,-a", pca.au, "Allocation unit, 64K..1M, power of two")->capture_default_str();
  pc->add_option("--soft-threshold", pca.soft_threshold, "Percent full that raises the thin-provisioning warning")
      ->capture_default_str();
  pc->callback([&] { PoolCreate(ctx, pca); });
  pool->add_subcommand("list", "List pools with their space")->callback([&] { PoolList(ctx); });
  std::string pname, psize;
  bool pforce = false;
  auto* ps = pool->add_subcommand("show", "Space of a pool: size, allocated, shared, saved, free, per LUN");
  ps->add_option("name", pname, "Pool name")->required();
  ps->callback([&] { PoolShow(ctx, pname); });
  auto* pk = pool->add_subcommand("check", "Check a pool's metadata (data is not read: see scrub)");
  pk->add_option("name", pname, "Pool name")->required();
  bool prepair = false, pyes = false;
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
  pd->add_option("name", pname, "Pool name")->required();
  pd->add_flag("--force", pforce, "Delete even if it still holds LUNs");
  pd->callback([&] { PoolDelete(ctx, pname, pforce); });

  // lun
  auto* lun = app.add_subcommand("lun", "Create, clone, snapshot, resize, import and delete LUNs");
  lun->require_subcommand(1);
  std::string lref, lsize, lname, lpath;
  uint32_t lbs = 512;
  bool lforce = false, overcommit = false;
  BackstoreArgs bsa;
  auto add_bs_opts = [&](CLI::App* c, bool with_flag) {
    if (with_flag) c->add_flag("--backstore", bsa.make, "Also create the LIO user:cowstore backstore");
    c->add_option("--backstore-name", bsa.name, "Backstore name (default POOL-LUN)");
    c->add_option("--copy-group", bsa.copy_group, "XCOPY copy group: clones between LUNs of one group are offloaded");
    c->add_option("--wce", bsa.wce, "Write cache enabled (0: every GOOD is durable, the default)");
  };
  auto* lc = lun->add_subcommand("create", "Create a thin LUN (VAAI-capable from birth)");
  lc->add_option("lun", lref, "POOL/LUN")->required();
  lc->add_option("--size,-s", lsize, "Size, e.g. 100G")->required();
  lc->add_option("--block-size,-b", lbs, "Logical block size: 512 or 4096")->capture_default_str();
  lc->add_flag("--overcommit", overcommit, "Allow a LUN larger than the pool");
  add_bs_opts(lc, true);
  lc->callback([&] {
    if (!bsa.copy_group.empty() || !bsa.wce.empty() || !bsa.name.empty()) bsa.make = true;
    LunCreate(ctx, lref, lsize, lbs, overcommit, bsa);
  });
  std::string lpool;
  auto* ll = lun->add_subcommand("list", "List LUNs (of one pool or all)");
  ll->add_option("pool", lpool, "Pool name");
  ll->callback([&] { LunList(ctx, lpool); });
  auto* lsh = lun->add_subcommand("show", "Show a LUN");
  lsh->add_option("lun", lref, "POOL/LUN")->required();
  lsh->callback([&] { LunShow(ctx, lref); });
  auto* lr = lun->add_subcommand("resize", "Resize a LUN (exported LUNs: LIO and the initiators are told)");
  lr->add_option("lun", lref, "POOL/LUN")->required();
  lr->add_option("--size,-s", lsize, "New size, or +SIZE to grow by that much")->required();
  lr->add_flag("--force", lforce, "Allow shrinking (discards the end)");
  lr->callback([&] { LunResize(ctx, lref, lsize, lforce); });
  auto* ld = lun->add_subcommand("delete", "Delete a LUN (refused while exported unless --force)");
  ld->add_option("lun", lref, "POOL/LUN")->required();
  ld->add_flag("--force", lforce, "Unexport and delete its backstore first");
  ld->callback([&] { LunDelete(ctx, lref, lforce); });
  auto* lcl = lun->add_subcommand("clone", "Clone a LUN: metadata only, fresh WWN");
  lcl->add_option("source", lref, "POOL/LUN")->required();
  lcl->add_option("name", lname, "Name of the clone (NAME or POOL/NAME, same pool)")->required();
  add_bs_opts(lcl, true);
  lcl->callback([&] {
    if (!bsa.copy_group.empty() || !bsa.wce.empty() || !bsa.name.empty()) bsa.make = true;
    LunClone(ctx, lref, lname, false, bsa);
  });
  auto* lsn = lun->add_subcommand("snapshot", "Snapshot a LUN: a clone named SOURCE.snap-<time> by default");
  lsn->add_option("source", lref, "POOL/LUN")->required();
  lsn->add_option("name", lname, "Name of the snapshot (NAME or POOL/NAME, same pool)");
  lsn->callback([&] { LunClone(ctx, lref, lname, true, BackstoreArgs{}); });
  auto* li = lun->add_subcommand("import", "Make a LUN from a raw image or block device (zero runs stay unmapped)");
  li->add_option("lun", lref, "POOL/LUN to create")->required();
  li->add_option("--from,-f", lpath, "Raw image file or block device")->required();
  li->add_option("--block-size,-b", lbs, "Logical block size: 512 or 4096")->capture_default_str();
  li->add_option("--size,-s", lsize, "LUN size (default: the source's, rounded up to a block)");
  bool iovercommit = false;
  li->add_flag("--overcommit", iovercommit, "Allow a LUN larger than the pool");
  li->callback([&] { LunImport(ctx, lref, lpath, lbs, lsize, iovercommit); });
  auto* le = lun->add_subcommand("export", "Write a LUN to a raw image (sparse) or block device");
  le->add_option("lun", lref, "POOL/LUN")->required();
  le->add_option("--to,-t", lpath, "Raw image file or block device")->required();
  le->add_flag("--force", lforce, "Replace an existing file, or overwrite a block device (never one in use)");
  std::string lmode = "0600";
  le->add_option("--mode", lmode, "Permissions of the image file (octal)")->capture_default_str();
  le->callback([&] { LunExportRaw(ctx, lref, lpath, lforce, lmode); });

  // backstore
  auto* bsc = app.add_subcommand("backstore", "LIO user:cowstore backstores");
  bsc->require_subcommand(1);
  auto* bc = bsc->add_subcommand("create", "Create the backstore of an existing LUN");
  bc->add_option("lun", lref, "POOL/LUN")->required();
  add_bs_opts(bc, false);
  bc->callback([&] { BackstoreCreate(ctx, lref, bsa); });
  bsc->add_subcommand("list", "List cowstore backstores")->callback([&] { BackstoreList(ctx); });
  auto* bd = bsc->add_subcommand("delete", "Delete a LUN's backstore (refused while exported unless --force)");
  bd->add_option("lun", lref, "POOL/LUN")->required();
  bd->add_flag("--force", lforce, "Unexport first");
  bd->callback([&] {
    LunRef ref = ParseLunRef(lref);
    Lio lio = MakeLio(ctx);
    lio.RequireCore();
    auto b = lio.FindBackstore(ref.pool, ref.lun);
    if (!b) throw UserError(ref.str() + " has no backstore");
    if (lforce) lio.Unexport(*b);
    lio.DeleteBackstore(*b);
    Json j = Json::object();
    j["deleted"] = b->name;
    Emit(ctx, j, "deleted backstore " + b->name + "\n");
  });

  // export / unexport
  auto* ex = app.add_subcommand("export", "Export a LUN over iSCSI or tcm_loop");
  ex->require_subcommand(1);
  ExportArgs ea;
  auto* ei = ex->add_subcommand("iscsi", "Export over iSCSI (creates the backstore if needed)");
  ei->add_option("lun", lref, "POOL/LUN")->required();
  ei->add_option("--target,-t", ea.target, "Target IQN (default iqn.2024-01.io.cowstore:<host>.<pool>)");
  ei->add_option("--portal,-p", ea.portals, "Portal IP:port (repeatable; default 0.0.0.0:3260 on a new target)");
  ei->add_option("--initiator,-i", ea.initiators,
                 "Initiator IQN allowed in (repeatable; needed for a new target unless --demo-mode)");
  ei->add_flag("--demo-mode", ea.demo_mode, "let any initiator log in, without ACLs (lab use)");
  ei->add_flag("--no-auto-map", ea.no_auto_map,
               "Map the new LUN only into the ACLs named with -i (targetcli's auto_add_mapped_luns=false)");
  ei->add_option("--chap-user", ea.chap_user, "CHAP user name for the named initiators");
  ei->add_option("--chap-password", ea.chap_password, "CHAP secret (12-16 characters)");
  ei->add_option("--lun", ea.lun, "LUN number in the target (default: lowest free)");
  add_bs_opts(ei, false);
  ei->footer(
      "Who may log in is set when the target is made: with --initiator, only those initiators (ACLs);\n"
      "with --demo-mode, any initiator (no ACLs); with neither, a new target is refused. Adding a LUN to an\n"
      "existing target keeps its policy: a target in demo mode takes LUNs only with --demo-mode; a target\n"
      "with ACLs takes them with or without --initiator. As targetcli does (auto_add_mapped_luns), a LUN\n"
      "added to a target is mapped into every ACL it has, and a new --initiator ACL sees every LUN of the\n"
      "target. With --no-auto-map, only the --initiator ACLs are mapped, and only to this LUN (with no\n"
      "--initiator, the LUN is added but no initiator sees it).");
  ei->callback([&] {
    if (ea.demo_mode && !ea.initiators.empty()) {
      throw CLI::ValidationError("--demo-mode",
                                 "cannot be used with --initiator: demo mode lets every initiator in, "
                                 "--initiator names the only ones allowed; pick one");
    }
    ExportIscsi(ctx, lref, ea, bsa);
  });
  auto* elp = ex->add_subcommand("loop", "Export through tcm_loop (a local SCSI disk)");
  elp->add_option("lun", lref, "POOL/LUN")->required();
  add_bs_opts(elp, false);
  elp->callback([&] { ExportLoop(ctx, lref, bsa); });
  ex->add_subcommand("list", "List exports of cowstore LUNs")->callback([&] { ExportList(ctx); });
  bool with_bs = false;
  auto* ue = app.add_subcommand("unexport", "Remove every iSCSI/loopback export of a LUN");
  ue->add_option("lun", lref, "POOL/LUN")->required();
  ue->add_flag("--backstore", with_bs, "Also delete the backstore");
  ue->callback([&] {
    LunRef ref = ParseLunRef(lref);
    Unexport(ctx, ref, with_bs);
    Json j = Json::object();
    j["unexported"] = ref.str();
    Emit(ctx, j, "unexported " + ref.str() + (with_bs ? " and deleted its backstore" : "") + "\n");
  });

  // vaai, top
  auto* va = app.add_subcommand("vaai", "VAAI support as ESXi lists it");
  va->require_subcommand(1);
  auto* vs = va->add_subcommand("status", "ATS/Clone/Zero/Delete status and handler counters");
  vs->add_option("lun", lref, "POOL/LUN (default: every exported LUN)");
  vs->callback([&] { VaaiStatus(ctx, lref); });
  double interval = 1.0;
  int count = 0;
  auto* top = app.add_subcommand("top", "Live per-LUN IOPS, throughput and VAAI operations");
  top->add_option("--interval,-n", interval, "Seconds between updates")->capture_default_str();
  top->add_option("--count,-c", count, "Number of updates (0: until interrupted)")->capture_default_str();
  top->callback([&] { Top(ctx, interval, count); });

  // save, restore
  std::string cfile = kDefaultConfigPath;
  bool dry_run = false, create_missing = false;
  auto* sv = app.add_subcommand("save", "Save pools, LUNs, backstores and exports to a YAML file");
  sv->add_option("file", cfile, "File")->capture_default_str();
  sv->callback([&] { Save(ctx, cfile); });
  auto* rs = app.add_subcommand("restore", "Make pools, LUNs and exports match a saved file (idempotent)");
  rs->add_option("file", cfile, "File")->capture_default_str();
  rs->add_flag("--dry-run,-n", dry_run, "Print what would change, change nothing");
  rs->add_flag("--create-missing", create_missing,
               "Create a missing pool or LUN empty (never on a device; a created LUN gets a new WWN)");
  rs->callback([&] { rc = Restore(ctx, cfile, dry_run, create_missing); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (auto u = FindUnknownCommand(app, argc, argv)) {
      std::cerr << "cowctl: unknown " << (u->command == "cowctl" ? "command" : "subcommand") << " '" << u->word
                << "'" << (u->command == "cowctl" ? "" : " of '" + u->command + "'") << " (one of: " << u->choices
                << "; see '" << u->command << " --help')\n";
      return 2;
    }
    std::string cmd = "cowctl";
    for (auto* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      cmd += " " + sub->get_name();
    }
    std::cerr << "cowctl: " << e.what() << " (see '" << cmd << " --help')\n";
    return 2;
  } catch (const UserError& e) {
    std::cerr << "cowctl: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "cowctl: internal error: " << e.what() << "\n";
    return 1;
  }
  return rc;
}

}  // namespace cowstore::cowctl
