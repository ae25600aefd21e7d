// SPDX-License-Identifier: Apache-2.0
// cowctl lun: create, list, show, resize, delete, clone, snapshot, rollback, import, export.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>

#include "handler/store/names.h"
#include "tools/cowctl/capacity.h"
#include "tools/cowctl/cmd_common.h"
#include "tools/cowctl/interrupt.h"

namespace cowstore::cowctl {
namespace {

// The name of the LUN whose id is `id` in `luns` ("" when it is gone).
std::string NameOf(const std::vector<store::LunInfo>& luns, const store::Uuid& id) {
  for (const auto& l : luns) {
    if (l.id == id) return l.name;
  }
  return "";
}

// "vm1 (WWN ...)", or "deleted LUN (WWN ...)".
std::string OriginText(const std::vector<store::LunInfo>& luns, const store::LunInfo& l) {
  std::string name = NameOf(luns, l.origin);
  return (name.empty() ? std::string("a deleted LUN") : name) + " (WWN " + UuidString(l.origin) + ")";
}

std::string LunHuman(const std::string& pool, const store::LunInfo& l, const std::optional<Backstore>& bs,
                     const std::vector<store::LunInfo>& luns) {
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
  if (l.read_only) kv.push_back({"read-only", "yes (a snapshot: writes get WRITE PROTECTED)"});
  if (l.origin != store::Uuid{}) kv.push_back({"origin", OriginText(luns, l)});
  if (l.created_unix) kv.push_back({"created", TimeText(l.created_unix)});
  return KeyValues(kv);
}


uint32_t CheckBlockSize(uint32_t bs) {
  if (!store::ValidBlockSize(bs)) throw UserError("block size must be " + std::string(store::kBlockSizeRule));
  return bs;
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
    ApplyOvercommitRule(LunPromise(ref.pool, h->Space(), bytes), overcommit);
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
  Table t({"LUN", "SIZE", "BLOCK", "MAPPED", "SHARED", "BACKSTORE", "WWN", "RO", "ORIGIN", "CREATED"});
  for (const auto& p : pools) {
    std::unique_ptr<PoolHandle> h;
    try {
      h = OpenPool(ctx, p, true);
    } catch (const UserError&) {
      if (!pool.empty()) throw;
      continue;
    }
    const auto luns = h->Space().luns;
    for (const auto& l : luns) {
      std::optional<Backstore> bs;
      for (const auto& b : bss) {
        if (b.config.pool == p && b.config.lun == l.name) bs = b;
      }
      arr.push_back(LunJson(p, l, bs));
      t.Row({p + "/" + l.name, FormatSize(l.size_bytes), std::to_string(l.block_size), FormatSize(l.mapped_bytes),
             FormatSize(l.shared_bytes), bs ? bs->name : "-", UuidString(l.id), l.read_only ? "ro" : "-",
             l.origin == store::Uuid{} ? "-" : NameOf(luns, l.origin).empty() ? "(deleted)" : NameOf(luns, l.origin),
             l.created_unix ? TimeText(l.created_unix) : "-"});
    }
  }
  Emit(ctx, arr, t.empty() ? std::string("no LUNs\n") : t.Render());
}

void LunShow(const Context& ctx, const std::string& refs) {
  LunRef ref = ParseLunRef(refs);
  auto h = OpenPool(ctx, ref.pool, true);
  auto l = h->GetLun(ref.lun);
  auto bs = BackstoreOf(ctx, ref);
  std::vector<store::LunInfo> luns;
  if (l.origin != store::Uuid{}) luns = h->Space().luns;
  Json j = LunJson(ref.pool, l, bs);
  if (l.origin != store::Uuid{}) {
    std::string o = NameOf(luns, l.origin);
    j["origin_name"] = o.empty() ? Json(nullptr) : Json(o);
  }
  Emit(ctx, j, LunHuman(ref.pool, l, bs, luns));
}

void LunResize(const Context& ctx, const std::string& refs, const std::string& size, bool force,
               bool overcommit) {
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
    if (bytes > cur.size_bytes) {
      ApplyOvercommitRule(LunPromise(ref.pool, h.Space(), bytes - cur.size_bytes), overcommit);
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

// NAME or POOL/NAME of a LUN that must live in `pool` (a clone, a snapshot,
// a rollback's snapshot: they share extents).
std::string SamePoolName(const LunRef& src, const std::string& given, const char* what) {
  std::string name = given;
  // "tank/b" as well as "b" (as targetcli users and 'lun create' write it).
  if (auto slash = name.find('/'); slash != std::string::npos) {
    LunRef d = ParseLunRef(name);
    if (d.pool != src.pool) {
      throw UserError(std::string(what) + " stays in the pool of its source (it shares its extents): name it " +
                      src.pool + "/" + d.lun + ", or copy across pools with 'lun export' and 'lun import'");
    }
    name = d.lun;
  }
  return name;
}

// Deletes the oldest read-only snapshots of `origin` beyond the `keep`
// newest (by creation time, then name). An exported one is never deleted:
// it is skipped with a message (and still counts as kept).
Json Retain(const Context& ctx, const LunRef& src, const store::Uuid& origin, uint64_t keep) {
  std::vector<store::LunInfo> snaps;
  WithPool(ctx, src.pool, [&](PoolHandle& h) {
    for (const auto& l : h.Space().luns) {
      if (l.read_only && l.origin == origin) snaps.push_back(l);
    }
    return 0;
  });
  std::sort(snaps.begin(), snaps.end(), [](const store::LunInfo& a, const store::LunInfo& b) {
    return a.created_unix != b.created_unix ? a.created_unix > b.created_unix : a.name > b.name;
  });
  Json deleted = Json::array(), skipped = Json::array();
  for (size_t i = keep; i < snaps.size(); ++i) {
    LunRef r{src.pool, snaps[i].name};
    if (auto bs = BackstoreOf(ctx, r)) {
      std::cerr << "cowctl: keeping snapshot " << r.str() << " beyond --keep " << keep << ": it is exported (backstore "
                << bs->name << "); unexport it to let retention delete it\n";
      skipped.push_back(r.str());
      continue;
    }
    WithPool(ctx, src.pool, [&](PoolHandle& h) {
      h.DeleteLun(r.lun);
      return 0;
    });
    if (!ctx.json) std::cout << "deleted old snapshot " << r.str() << "\n";
    deleted.push_back(r.str());
  }
  Json j = Json::object();
  j["deleted"] = deleted;
  j["kept_exported"] = skipped;
  return j;
}

void LunClone(const Context& ctx, const std::string& srcs, const std::string& dst, bool snapshot,
              const BackstoreArgs& b, std::optional<uint64_t> keep = std::nullopt) {
  LunRef src = ParseLunRef(srcs);
  std::string name = SamePoolName(src, dst, snapshot ? "a snapshot" : "a clone");
  if (keep && *keep == 0) throw UserError("--keep must be at least 1 (the snapshot just made)");
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
  store::LunInfo l = WithPool(ctx, src.pool, [&](PoolHandle& h) {
    return snapshot ? h.SnapshotLun(src.lun, name) : h.CloneLun(src.lun, name);
  });
  std::optional<Backstore> made;
  if (b.make) {
    try {
      made = MakeBackstore(ctx, dref, l, b);
    } catch (const UserError&) {
      DeleteLunRolledBack(ctx, dref);
      throw;
    }
  }
  std::string text = std::string(snapshot ? "snapshot " : "clone ") + dref.str() + " of " + src.str() +
                     " created (WWN " + UuidString(l.id) + (snapshot ? ", read-only" : "") + ")\n";
  Json j = LunJson(src.pool, l, made);
  if (keep) {
    if (!ctx.json) std::cout << text;
    text.clear();
    j["retention"] = Retain(ctx, src, l.origin, *keep);
  }
  Emit(ctx, j, text);
}

void LunRollback(const Context& ctx, const std::string& refs, const std::string& snaps, bool force) {
  LunRef ref = ParseLunRef(refs);
  std::string snap = SamePoolName(ref, snaps, "a snapshot");
  RequireName(snap, "LUN");
  auto bs = BackstoreOf(ctx, ref);
  store::LunInfo l = WithPool(ctx, ref.pool, [&](PoolHandle& h) {
    store::LunInfo cur = h.GetLun(ref.lun);
    store::LunInfo s = h.GetLun(snap);
    if (!s.read_only) {
      throw UserError(ref.pool + "/" + snap + " is not a snapshot (not read-only): a rollback restores a "
                      "snapshot made with 'cowctl lun snapshot'");
    }
    if (s.origin != cur.id && !force) {
      throw UserError(ref.pool + "/" + snap + " is not a snapshot of " + ref.str() +
                      ": pass --force to give " + ref.str() + " its contents anyway");
    }
    return h.RollbackLun(ref.lun, snap);
  });
  std::string text = "rolled back " + ref.str() + " to snapshot " + ref.pool + "/" + snap + " (WWN " +
                     UuidString(l.id) + " kept";
  // One unit attention per LU (TCMU names no initiator): only one host is told.
  text += bs ? "; the first initiator to send a command is told the medium changed: other hosts "
               "must not have it mounted)\n"
             : ")\n";
  Json j = LunJson(ref.pool, l, bs);
  j["rolled_back_to"] = ref.pool + "/" + snap;
  Emit(ctx, j, text);
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
    bytes = BlockDeviceBytes(path, /*follow_links=*/false);
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
  // The rule `lun create` applies, to the size given or the source's.
  ApplyOvercommitRule(LunPromise(ref.pool, h->Space(), bytes ? bytes : ImportSize(path, bs)), overcommit);
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

}  // namespace

void AddLunCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto* lun = cl.app.add_subcommand("lun", "Create, clone, snapshot, roll back, resize, import and delete LUNs");
  lun->require_subcommand(1);
  auto& lref = cl.Keep(std::string());
  auto& lsize = cl.Keep(std::string());
  auto& lname = cl.Keep(std::string());
  auto& lpath = cl.Keep(std::string());
  auto& lbs = cl.Keep(uint32_t{512});
  auto& lforce = cl.Keep(false);
  auto& overcommit = cl.Keep(false);
  auto& bsa = cl.Keep(BackstoreArgs{});
  auto* lc = lun->add_subcommand("create", "Create a thin LUN (VAAI-capable from birth)");
  lc->add_option("lun", lref, "POOL/LUN")->required();
  lc->add_option("--size,-s", lsize, "Size, e.g. 100G")->required();
  lc->add_option("--block-size,-b", lbs, "Logical block size: 512 or 4096")->capture_default_str();
  lc->add_flag("--overcommit", overcommit, "Allow the pool's LUNs to total more than the pool can hold");
  AddBackstoreOptions(lc, bsa, true);
  lc->callback([&] {
    if (bsa.any_given()) bsa.make = true;
    LunCreate(ctx, lref, lsize, lbs, overcommit, bsa);
  });
  auto& lpool = cl.Keep(std::string());
  auto* ll = lun->add_subcommand("list", "List LUNs (of one pool or all)");
  ll->alias("ls");
  ll->add_option("pool", lpool, "Pool name");
  ll->callback([&] { LunList(ctx, lpool); });
  auto* lsh = lun->add_subcommand("show", "Show a LUN");
  lsh->add_option("lun", lref, "POOL/LUN")->required();
  lsh->callback([&] { LunShow(ctx, lref); });
  auto* lr = lun->add_subcommand("resize", "Resize a LUN (exported LUNs: LIO and the initiators are told)");
  lr->add_option("lun", lref, "POOL/LUN")->required();
  lr->add_option("--size,-s", lsize, "New size, or +SIZE to grow by that much")->required();
  lr->add_flag("--force", lforce, "Allow shrinking (discards the end)");
  lr->add_flag("--overcommit", overcommit, "Allow the pool's LUNs to total more than the pool can hold");
  lr->callback([&] { LunResize(ctx, lref, lsize, lforce, overcommit); });
  auto* ld = lun->add_subcommand("delete", "Delete a LUN (refused while exported unless --force)");
  ld->alias("rm");
  ld->add_option("lun", lref, "POOL/LUN")->required();
  ld->add_flag("--force", lforce, "Unexport and delete its backstore first");
  ld->callback([&] { LunDelete(ctx, lref, lforce); });
  auto* lcl = lun->add_subcommand("clone", "Clone a LUN: metadata only, fresh WWN");
  lcl->add_option("source", lref, "POOL/LUN")->required();
  lcl->add_option("name", lname, "Name of the clone (NAME or POOL/NAME, same pool)")->required();
  AddBackstoreOptions(lcl, bsa, true);
  lcl->callback([&] {
    if (bsa.any_given()) bsa.make = true;
    LunClone(ctx, lref, lname, false, bsa);
  });
  auto* lsn = lun->add_subcommand("snapshot", "Snapshot a LUN: read-only, named SOURCE.snap-<time> by default");
  lsn->add_option("source", lref, "POOL/LUN")->required();
  lsn->add_option("name", lname, "Name of the snapshot (NAME or POOL/NAME, same pool)");
  auto& keep = cl.Keep(uint64_t{0});
  auto* keep_opt = lsn->add_option("--keep", keep,
                                   "Then delete this LUN's oldest snapshots beyond the N newest (exported ones are kept)");
  lsn->callback([&, keep_opt] {
    LunClone(ctx, lref, lname, true, BackstoreArgs{},
             keep_opt->count() ? std::optional<uint64_t>(keep) : std::nullopt);
  });
  auto& snapname = cl.Keep(std::string());
  auto* lrb = lun->add_subcommand("rollback", "Give a LUN its snapshot's contents, keeping its name, WWN and exports");
  lrb->add_option("lun", lref, "POOL/LUN")->required();
  lrb->add_option("snapshot", snapname, "The snapshot (NAME or POOL/NAME, same pool)")->required();
  lrb->add_flag("--force", lforce, "Allow a snapshot of another LUN");
  lrb->callback([&] { LunRollback(ctx, lref, snapname, lforce); });
  auto* li = lun->add_subcommand("import", "Make a LUN from a raw image or block device (zero runs stay unmapped)");
  li->add_option("lun", lref, "POOL/LUN to create")->required();
  li->add_option("--from,-f", lpath, "Raw image file or block device")->required();
  li->add_option("--block-size,-b", lbs, "Logical block size: 512 or 4096")->capture_default_str();
  li->add_option("--size,-s", lsize, "LUN size (default: the source's, rounded up to a block)");
  auto& iovercommit = cl.Keep(false);
  li->add_flag("--overcommit", iovercommit, "Allow the pool's LUNs to total more than the pool can hold");
  li->callback([&] { LunImport(ctx, lref, lpath, lbs, lsize, iovercommit); });
  auto* le = lun->add_subcommand("export", "Write a LUN to a raw image (sparse) or block device");
  le->add_option("lun", lref, "POOL/LUN")->required();
  le->add_option("--to,-t", lpath, "Raw image file or block device")->required();
  le->add_flag("--force", lforce, "Replace an existing file, or overwrite a block device (never one in use)");
  auto& lmode = cl.Keep(std::string("0600"));
  le->add_option("--mode", lmode, "Permissions of the image file (octal)")->capture_default_str();
  le->callback([&] { LunExportRaw(ctx, lref, lpath, lforce, lmode); });
}

}  // namespace cowstore::cowctl
