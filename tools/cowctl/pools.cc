// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/pools.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#include "handler/control/client.h"
#include "handler/control/messages.h"
#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/names.h"
#include "handler/store/superblock_v3.h"
#include "tools/cowctl/interrupt.h"
#include "tools/cowctl/lio.h"

namespace cowstore::cowctl {
namespace {

using store::Code;

// A failed copy: after Ctrl-C or SIGTERM, said as an interruption (the
// copy rolled back), not as the I/O error it is reported as.
[[noreturn]] void FailCopy(const store::Status& s, const std::string& what) {
  if (Interruptible::interrupted()) throw UserError("interrupted: " + what + ": " + s.message());
  Fail(s, what);
}

void ProgressThunk(void* ctx, uint64_t done, uint64_t total) {
  static_cast<Progress*>(ctx)->Update(done, total);
}

class LocalPool final : public PoolHandle {
 public:
  LocalPool(std::string name, std::string path, std::unique_ptr<store::Pool> pool)
      : path_(std::move(path)), pool_(std::move(pool)) {
    name_ = std::move(name);
  }
  ~LocalPool() override { (void)pool_->Close(); }
  bool remote() const override { return false; }
  store::SpaceInfo Space() override { return pool_->Space(); }
  store::LunInfo GetLun(const std::string& n) override {
    auto r = pool_->GetLun(n);
    if (!r.ok()) Fail(r.status(), "LUN " + name_ + "/" + n);
    return r.value();
  }
  store::LunInfo CreateLun(const std::string& n, uint64_t size, uint32_t bs) override {
    auto r = pool_->CreateLun(n, size, bs);
    if (!r.ok()) Fail(r.status(), "creating LUN " + name_ + "/" + n);
    return r.value();
  }
  void DeleteLun(const std::string& n) override {
    auto s = pool_->DeleteLun(n);
    if (!s.ok()) Fail(s, "deleting LUN " + name_ + "/" + n);
  }
  store::LunInfo ResizeLun(const std::string& n, uint64_t size) override {
    auto s = pool_->ResizeLun(n, size);
    if (!s.ok()) Fail(s, "resizing LUN " + name_ + "/" + n);
    return GetLun(n);
  }
  store::LunInfo CloneLun(const std::string& src, const std::string& dst) override {
    auto r = pool_->CloneLun(src, dst);
    if (!r.ok()) Fail(r.status(), "cloning " + name_ + "/" + src + " to " + dst);
    return r.value();
  }
  store::LunInfo SnapshotLun(const std::string& src, const std::string& dst) override {
    auto r = pool_->SnapshotLun(src, dst);
    if (!r.ok()) Fail(r.status(), "snapshotting " + name_ + "/" + src + " to " + dst);
    return r.value();
  }
  store::LunInfo RollbackLun(const std::string& lun, const std::string& snapshot) override {
    auto s = pool_->RollbackLun(lun, snapshot);
    if (!s.ok()) Fail(s, "rolling back " + name_ + "/" + lun + " to " + snapshot);
    return GetLun(lun);
  }
  void Grow(uint64_t size) override {
    auto s = pool_->Grow(size);
    if (!s.ok()) Fail(s, "growing pool " + name_);
  }
  store::CheckReport Check(Progress* progress) override {
    return pool_->Check(progress ? ProgressThunk : nullptr, progress);
  }
  control::ScrubReport Scrub(Progress* progress) override {
    auto r = control::Scrub(*pool_, progress ? ProgressThunk : nullptr, progress,
                            [] { return Interruptible::interrupted(); });
    if (!r.ok()) FailCopy(r.status(), "scrubbing pool " + name_);
    return r.value();
  }
  std::optional<std::vector<control::LunCounters>> Counters() override { return std::nullopt; }
  store::LunInfo Import(const std::string& n, const std::string& path, uint32_t bs, uint64_t size,
                        control::CopyStats* stats, Progress* progress) override {
    auto r = control::ImportImage(*pool_, n, path, bs, size, Options(progress), stats);
    if (!r.ok()) FailCopy(r.status(), "importing " + path + " into " + name_ + "/" + n);
    return r.value();
  }
  void Export(const std::string& n, const std::string& path, bool force, mode_t mode, control::CopyStats* stats,
              Progress* progress) override {
    control::ImageOptions o = Options(progress);
    o.force = force;
    o.mode = mode;
    auto s = control::ExportImage(*pool_, n, path, o, stats);
    if (!s.ok()) FailCopy(s, "exporting " + name_ + "/" + n + " to " + path);
  }

 private:
  // The pool's own file is never an image; Ctrl-C stops the copy.
  control::ImageOptions Options(Progress* progress) {
    control::ImageOptions o;
    auto pf = control::PoolFileAt(path_);
    if (!pf.ok()) Fail(pf.status(), "pool '" + name_ + "'");
    o.pool_file = pf.value();
    o.cancelled = [] { return Interruptible::interrupted(); };
    o.progress = progress ? ProgressThunk : nullptr;
    o.progress_ctx = progress;
    return o;
  }
  std::string path_;
  std::unique_ptr<store::Pool> pool_;
};

class RemotePool final : public PoolHandle {
 public:
  RemotePool(std::string name, std::unique_ptr<control::Client> c) : client_(std::move(c)) {
    name_ = std::move(name);
  }
  bool remote() const override { return true; }

  // With a progress bar, asks the handler to stream progress (ignored by a
  // handler of protocol version 1, which just answers at the end).
  control::Reply Call(const control::Record& req, const std::string& what, Progress* progress = nullptr) {
    control::Record sent = req;
    control::Client::ProgressCallback cb;
    if (progress) {
      sent.Set("progress", "1");
      cb = [progress](uint64_t done, uint64_t total) { progress->Update(done, total); };
    }
    auto r = client_->Call(sent, cb);
    if (!r.ok()) FailCopy(r.status(), what + " (through the handler's control socket)");
    if (!r->ok()) FailCopy(r->status(), what);
    return r.value();
  }
  store::SpaceInfo Space() override {
    return control::DecodeSpace(Call(control::Record("space"), "reading space of pool " + name_).records);
  }
  store::LunInfo One(const control::Reply& r) {
    for (const auto& rec : r.records) {
      if (rec.type == "lun") return control::DecodeLun(rec);
    }
    throw UserError("the handler's reply lacks the LUN");
  }
  store::LunInfo GetLun(const std::string& n) override {
    return One(Call(control::Record("lun-get").Set("name", n), "LUN " + name_ + "/" + n));
  }
  store::LunInfo CreateLun(const std::string& n, uint64_t size, uint32_t bs) override {
    return One(Call(control::Record("lun-create").Set("name", n).Set("size", size).Set("block_size", bs),
                    "creating LUN " + name_ + "/" + n));
  }
  void DeleteLun(const std::string& n) override {
    Call(control::Record("lun-delete").Set("name", n), "deleting LUN " + name_ + "/" + n);
  }
  store::LunInfo ResizeLun(const std::string& n, uint64_t size) override {
    return One(Call(control::Record("lun-resize").Set("name", n).Set("size", size), "resizing LUN " + name_ + "/" + n));
  }
  store::LunInfo CloneLun(const std::string& src, const std::string& dst) override {
    return One(Call(control::Record("lun-clone").Set("src", src).Set("dst", dst),
                    "cloning " + name_ + "/" + src + " to " + dst));
  }
  store::LunInfo SnapshotLun(const std::string& src, const std::string& dst) override {
    return One(Call(control::Record("lun-snapshot").Set("src", src).Set("dst", dst),
                    "snapshotting " + name_ + "/" + src + " to " + dst));
  }
  store::LunInfo RollbackLun(const std::string& lun, const std::string& snapshot) override {
    return One(Call(control::Record("lun-rollback").Set("name", lun).Set("snapshot", snapshot),
                    "rolling back " + name_ + "/" + lun + " to " + snapshot));
  }
  void Grow(uint64_t size) override { Call(control::Record("grow").Set("size", size), "growing pool " + name_); }
  store::CheckReport Check(Progress* progress) override {
    client_->SetTimeout(0);  // as long as the check takes
    auto r = Call(control::Record("check"), "checking pool " + name_, progress);
    return control::DecodeCheck(r.head, r.records);
  }
  // An older handler (still loaded by tcmu-runner after an upgrade) follows
  // links, blocks on FIFOs, truncates in place and may overwrite its own
  // pool: cowctl asks it for no image copy.
  void RequireSafeImages(const std::string& what) {
    auto r = client_->Call(control::Record("hello"));
    std::string features = r.ok() && r->ok() ? "," + r->head.Get("features") + "," : "";
    if (features.find(",safe-images,") == std::string::npos) {
      throw UserError(what + ": pool '" + name_ + "' is served by an older cowstore handler, whose import and "
                      "export are unsafe as root: restart tcmu-runner to load the installed handler, then retry");
    }
  }
  store::LunInfo Import(const std::string& n, const std::string& path, uint32_t bs, uint64_t size,
                        control::CopyStats* stats, Progress* progress) override {
    RequireSafeImages("importing " + path + " into " + name_ + "/" + n);
    client_->SetTimeout(0);  // as long as the copy takes
    client_->SetInterrupt([] { return Interruptible::interrupted(); });
    auto r = Call(control::Record("lun-import").Set("name", n).Set("path", path).Set("block_size", bs).Set("size", size),
                  "importing " + path + " into " + name_ + "/" + n + " (done by tcmu-runner's handler)", progress);
    *stats = control::DecodeCopyStats(r.head);
    return One(r);
  }
  void Export(const std::string& n, const std::string& path, bool force, mode_t mode, control::CopyStats* stats,
              Progress* progress) override {
    RequireSafeImages("exporting " + name_ + "/" + n + " to " + path);
    client_->SetTimeout(0);
    client_->SetInterrupt([] { return Interruptible::interrupted(); });
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    auto r = Call(control::Record("lun-export").Set("name", n).Set("path", path).Set("force", force ? "1" : "0").Set("mode", octal),
                  "exporting " + name_ + "/" + n + " to " + path + " (done by tcmu-runner's handler)", progress);
    *stats = control::DecodeCopyStats(r.head);
  }
  control::ScrubReport Scrub(Progress* progress) override {
    client_->SetTimeout(0);  // as long as reading the data takes
    client_->SetInterrupt([] { return Interruptible::interrupted(); });
    auto r = Call(control::Record("scrub"), "scrubbing pool " + name_ + " (done by tcmu-runner's handler)", progress);
    return control::DecodeScrub(r.head, r.records);
  }
  std::optional<std::vector<control::LunCounters>> Counters() override {
    auto r = client_->Call(control::Record("counters"));
    if (!r.ok() || !r->ok()) return std::nullopt;
    return control::DecodeCounters(r->records);
  }

 private:
  std::unique_ptr<control::Client> client_;
};

// A superblock of a format this cowctl does not know shares only the
// envelope (magic, version, its CRC: superblock_v3.h) with the ones it
// knows: its UUID may lie anywhere, so none is read (the v1/v2 decoder
// would take bytes 12..28 for one). The store refuses to open such a pool,
// whichever copy is newer (ChooseSuperblockV3), and the probe names none.
PoolProbe UnknownFormat(const std::string& path, uint32_t format) {
  PoolProbe p;
  p.kind = PoolProbe::kUnknownFormat;
  p.detail = path + " has a cowstore superblock of format " + std::to_string(format) + "; this cowctl knows formats " +
             std::to_string(store::kOldestFormatVersion) + " to " + std::to_string(store::kFormatVersionV3) +
             " (made by a newer cowstore: upgrade cowctl)";
  return p;
}

// One superblock copy of a format up to 3 (kSuperblockSlot bytes at `at`):
// true, with p's kind, uuid, format, au, grain and origin_format set, if it
// names a pool; else *fault says why when it bears cowstore's magic.
bool ReadCopy(const char* at, PoolProbe* p, std::string* fault) {
  // Format 3 lays out its superblock otherwise (superblock_v3.h): the
  // older codec would take its incompat flags for a quarter of the UUID.
  // No size bound: the probe only names the pool (a sparse pool file is
  // shorter than its data area); the open checks the rest.
  if (store::SuperblockEnvelopeVersion(at, store::kSuperblockSlot) == store::kFormatVersionV3) {
    store::SuperblockV3 sb;
    store::Status s = store::DecodeSuperblockV3(at, store::kSuperblockSlot, UINT64_MAX, &sb);
    if (!s.ok()) {
      *fault = s.message();
      return false;
    }
    *p = {.kind = PoolProbe::kPool,
          .uuid = sb.uuid,
          .format = store::kFormatVersionV3,
          .au = sb.au,
          .grain = sb.grain,
          .origin_format = sb.origin_format,
          .detail = {}};
    return true;
  }
  store::Superblock sb;
  store::Status s = store::Superblock::Decode(at, store::kSuperblockSlot, &sb);
  if (s.ok()) {
    // Formats 1 and 2 share at the AU.
    *p = {.kind = PoolProbe::kPool,
          .uuid = sb.uuid,
          .format = sb.version,
          .au = sb.au,
          .grain = sb.au,
          .origin_format = sb.version,
          .detail = {}};
    return true;
  }
  // Damaged (kCorruption), or of version 0, which no cowstore writes
  // (kUnsupported: versions above 3 never get here). Decode says
  // kCorruption for a bad magic and a bad checksum alike; the first 8
  // bytes (docs/design/store.md) tell a damaged pool from none.
  if (std::memcmp(at, store::kSuperblockMagic, 8) == 0) *fault = s.message();
  return false;
}

}  // namespace

std::string UuidHexString(const store::Uuid& id) { return UuidString(id); }

PoolProbe ProbePool(const std::string& path) {
  PoolProbe p;
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    p.kind = errno == ENOENT ? PoolProbe::kAbsent : PoolProbe::kNotAPool;
    p.detail = std::string("cannot open ") + path + ": " + std::strerror(errno);
    return p;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))) {
    ::close(fd);
    p.kind = PoolProbe::kNotAPool;
    p.detail = path + " is neither a regular file nor a block device";
    return p;
  }
  std::string buf(2 * store::kSuperblockSlot, '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  int err = errno;
  ::close(fd);
  if (n < 0) {
    p.kind = PoolProbe::kDamaged;
    p.detail = std::string("cannot read ") + path + ": " + std::strerror(err);
    return p;
  }
  const size_t slots = std::min<size_t>(2, static_cast<size_t>(n) / store::kSuperblockSlot);
  auto copy = [&](size_t slot) { return buf.data() + slot * store::kSuperblockSlot; };
  for (size_t slot = 0; slot < slots; ++slot) {
    const uint32_t v = store::SuperblockEnvelopeVersion(copy(slot), store::kSuperblockSlot);
    if (v > store::kFormatVersionV3) return UnknownFormat(path, v);
  }
  bool magic = false;
  std::string why;
  for (size_t slot = 0; slot < slots; ++slot) {
    std::string fault;
    if (ReadCopy(copy(slot), &p, &fault)) return p;
    if (!fault.empty()) {
      magic = true;
      why = fault;
    }
  }
  p.kind = magic ? PoolProbe::kDamaged : PoolProbe::kNotAPool;
  p.detail = magic ? path + " has a damaged cowstore superblock (" + why + ")" : path + " holds no cowstore pool";
  return p;
}

[[noreturn]] void Fail(const store::Status& s, const std::string& what) {
  std::string hint;
  switch (s.code()) {
    case Code::kNotFound: hint = "not found"; break;
    case Code::kAlreadyExists: hint = "the name is taken: pick another"; break;
    case Code::kInvalidArgument: hint = "refused"; break;
    case Code::kNoSpace: hint = "not enough free space in the pool: free some or run 'cowctl pool grow'"; break;
    case Code::kBusy: hint = "in use (exported LUNs are held open by tcmu-runner: unexport first)"; break;
    case Code::kCorruption: hint = "metadata damaged: run 'cowctl pool check'"; break;
    case Code::kUnsupported: hint = "made by a newer cowstore: upgrade cowctl"; break;
    case Code::kIOError: hint = "I/O error: check the device and dmesg"; break;
    case Code::kReadOnly: hint = "read-only (a snapshot): roll a LUN back to it, or clone it"; break;
    case Code::kNotDurable:
      hint = "not saved: the pool has no room for its metadata checkpoint. Run 'cowctl pool grow' "
             "(or free space): a running handler then saves the change, which it holds until it "
             "stops; where cowctl opened the pool itself, the change was dropped: retry after growing";
      break;
    default: hint = store::CodeName(s.code()); break;
  }
  std::string msg = what + ": " + hint;
  if (!s.message().empty()) msg += " (" + s.message() + ")";
  throw StoreError(s.code(), msg);
}

std::string PoolPath(const Context& ctx, const std::string& pool) {
  RequireName(pool, "pool");
  return ctx.pool_dir + "/" + pool;
}

std::vector<std::string> PoolNames(const Context& ctx) {
  std::vector<std::string> out;
  DIR* d = ::opendir(ctx.pool_dir.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (ValidName(n) && n.find(".tmp") == std::string::npos) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<PoolHandle> ConnectPool(const Context& ctx, const std::string& pool) {
  auto c = control::Client::Connect(control::SocketPath(ctx.run_dir, pool));
  if (!c.ok()) return nullptr;
  return std::make_unique<RemotePool>(pool, std::move(c.value()));
}

std::unique_ptr<PoolHandle> OpenPool(const Context& ctx, const std::string& pool, bool read_only) {
  std::string path = PoolPath(ctx, pool);
  struct stat st;
  // Not root: say so, rather than "not found" or the store's "I/O error".
  auto denied = [&](int err) {
    if (ErrnoAdvice(err, "") == "") return;
    throw UserError("pool '" + pool + "': " + path + ": " + std::strerror(err) + " (run cowctl as root)");
  };
  if (::lstat(path.c_str(), &st) != 0) {
    denied(errno);
    throw UserError("pool '" + pool + "' not found in " + ctx.pool_dir +
                    " (create it with 'cowctl pool create', or point --pool-dir/COWSTORE_POOL_DIR at it)");
  }
  if (S_ISLNK(st.st_mode) && ::stat(path.c_str(), &st) != 0) {
    throw UserError("pool '" + pool + "' points at a missing device or file (" + path +
                    "): attach the device, or remove the stale link");
  }
  if (::access(path.c_str(), read_only ? R_OK : R_OK | W_OK) != 0) denied(errno);
  store::OpenOptions oo;
  oo.read_only = read_only;
  // The pool's lock is held either by tcmu-runner (which answers on the
  // control socket) or by another cowctl, which lets go when its command
  // ends: wait for that one as flock -w does, saying so once.
  const std::string sock = control::SocketPath(ctx.run_dir, pool);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(ctx.wait_seconds);
  for (bool said = false;; said = true) {
    auto r = store::Pool::Open(store::DefaultEnv(), path, oo);
    if (r.ok()) return std::make_unique<LocalPool>(pool, path, std::move(r.value()));
    if (r.status().code() != Code::kBusy) Fail(r.status(), "opening pool '" + pool + "'");
    auto c = control::Client::Connect(sock);
    if (c.ok()) return std::make_unique<RemotePool>(pool, std::move(c.value()));
    if (std::chrono::steady_clock::now() >= deadline) {
      throw UserError("pool '" + pool + "' is held by another process and nothing answers on " + sock +
                      (ctx.wait_seconds > 0 ? " (waited " + std::to_string(ctx.wait_seconds) + " s)" : "") +
                      ": wait for the other cowctl (--wait SECONDS), or restart tcmu-runner");
    }
    if (!said) {
      std::fprintf(stderr, "cowctl: pool '%s' is held by another process; waiting up to %d s\n", pool.c_str(),
                   ctx.wait_seconds);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace cowstore::cowctl
