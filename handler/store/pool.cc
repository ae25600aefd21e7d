// SPDX-License-Identifier: Apache-2.0
// Pool and Lun: thin handles over Core; every entry point turns exceptions
// (std::bad_alloc and friends) into a Status so none escapes the API.
#include <cstdio>
#include <new>

#include "handler/store/format_v2.h"
#include "handler/store/format_v3.h"
#include "handler/store/pool_impl.h"
#include "handler/store/upgrade.h"

namespace cowstore::store {
namespace {

template <typename F>
auto Guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return StatusFromCurrentException();
  }
}

class LunImpl final : public Lun {
 public:
  LunImpl(std::shared_ptr<Core> core, std::shared_ptr<LunState> l, Pool* pool)
      : core_(std::move(core)), l_(std::move(l)), pool_(pool), name_(l_->name) {}
  ~LunImpl() override { core_->ReleaseHandle(l_.get()); }

  const std::string& name() const override { return name_; }
  Uuid id() const override { return l_->uuid; }
  uint32_t block_size() const override { return l_->bs; }
  uint64_t block_count() const override { return core_->BlockCount(l_.get()); }
  Pool& pool() override { return *pool_; }
  bool read_only() const override { return l_->attrs.read_only; }  // never changes

  Status Read(uint64_t lba, uint64_t count, std::span<const iovec> iov) override {
    return Guard([&] { return core_->Read(l_.get(), lba, count, iov); });
  }
  Status Write(uint64_t lba, uint64_t count, std::span<const iovec> iov, Durability d) override {
    return Guard([&] { return core_->Write(l_.get(), lba, count, iov, d); });
  }
  Status CompareAndWrite(uint64_t lba, uint64_t count, const void* compare, const void* write,
                         Durability d) override {
    return Guard([&] { return core_->CompareAndWrite(l_.get(), lba, count, compare, write, d); });
  }
  Status ZeroRange(uint64_t lba, uint64_t count, Durability d) override {
    return Guard([&] { return core_->ZeroRange(l_.get(), lba, count, d, false); });
  }
  Status Unmap(uint64_t lba, uint64_t count, Durability d) override {
    return Guard([&] { return core_->ZeroRange(l_.get(), lba, count, d, true); });
  }
  Status Flush() override {
    return Guard([&] { return core_->Flush(); });
  }
  Result<std::vector<AllocationRun>> GetAllocationStatus(uint64_t lba, uint64_t count) override {
    return Guard([&] { return core_->AllocationStatus(l_.get(), lba, count); });
  }
  Status Allocate(uint64_t lba, uint64_t count, Durability d) override {
    return Guard([&] { return core_->Allocate(l_.get(), lba, count, d); });
  }

  Core* core() const { return core_.get(); }
  LunState* state() const { return l_.get(); }

  using Lun::Read;
  using Lun::Write;

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<LunState> l_;
  Pool* pool_;
  std::string name_;
};

class PoolImpl final : public Pool {
 public:
  explicit PoolImpl(std::shared_ptr<Core> core) : core_(std::move(core)) { core_->owner = this; }
  ~PoolImpl() override {
    // A Close refused for room (Core::Close) leaves buffered writes in
    // memory only, and a destructor has no caller to tell: say so, rather
    // than drop them in silence. The caller should Close (and Grow) first.
    Status s = Close();
    if (!s.ok())
      std::fprintf(stderr, "cowstore: pool destroyed without a clean close: %s\n",
                   s.ToString().c_str());
  }
  Core* core() const { return core_.get(); }

  Status Close() override { return Guard([&] { return core_->Close(); }); }
  Uuid uuid() const override { return core_->uuid(); }
  uint32_t allocation_unit() const override { return core_->au(); }
  uint32_t grain() const override { return core_->grain(); }

  Result<LunInfo> CreateLun(const std::string& name, uint64_t size, uint32_t bs) override {
    return Guard([&] { return core_->CreateLun(name, size, bs); });
  }
  Status DeleteLun(const std::string& name) override {
    return Guard([&] { return core_->DeleteLun(name); });
  }
  Status ResizeLun(const std::string& name, uint64_t size) override {
    return Guard([&] { return core_->ResizeLun(name, size); });
  }
  Result<LunInfo> CloneLun(const std::string& src, const std::string& dst) override {
    return Guard([&] { return core_->CloneLun(src, dst); });
  }
  Result<LunInfo> SnapshotLun(const std::string& src, const std::string& dst) override {
    return Guard([&] { return core_->SnapshotLun(src, dst); });
  }
  Status RollbackLun(const std::string& lun, const std::string& snapshot) override {
    return Guard([&] { return core_->RollbackLun(lun, snapshot); });
  }
  std::vector<LunInfo> ListLuns() const override {
    try {
      return core_->ListLuns();
    } catch (...) {
      return {};
    }
  }
  Result<LunInfo> GetLun(const std::string& name) const override {
    return Guard([&] { return core_->GetLun(name); });
  }
  Result<std::shared_ptr<Lun>> OpenLun(const std::string& name) override {
    return Guard([&]() -> Result<std::shared_ptr<Lun>> {
      auto l = core_->Acquire(name);
      if (!l.ok()) return l.status();
      return std::shared_ptr<Lun>(std::make_shared<LunImpl>(core_, l.value(), this));
    });
  }
  Status CloneRange(Lun& src, uint64_t src_lba, Lun& dst, uint64_t dst_lba, uint64_t count,
                    Durability d) override {
    auto* s = dynamic_cast<LunImpl*>(&src);
    auto* t = dynamic_cast<LunImpl*>(&dst);
    if (!s || !t || s->core() != core_.get() || t->core() != core_.get())
      return Status(Code::kInvalidArgument, "clone between LUNs of different pools");
    return Guard([&] { return core_->CloneRange(s->state(), src_lba, t->state(), dst_lba, count, d); });
  }
  Status Flush() override { return Guard([&] { return core_->Flush(); }); }
  Status Grow(uint64_t new_size) override { return Guard([&] { return core_->Grow(new_size); }); }
  SpaceInfo Space() const override {
    try {
      return core_->Space();
    } catch (...) {
      return {};
    }
  }
  uint64_t soft_threshold_generation() const override { return core_->soft_generation(); }
  uint64_t backing_short_generation() const override { return core_->backing_generation(); }
  CheckReport Check(ProgressFn progress, void* ctx) override {
    try {
      return core_->Check(progress, ctx, true);
    } catch (...) {
      CheckReport r;
      r.clean = false;
      r.problems.push_back("check ran out of memory");
      return r;
    }
  }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

uint64_t JournalBytesOf(const PoolOptions& o) { return o.journal_bytes ? o.journal_bytes : kDefaultJournalBytes; }

uint64_t MinPoolBytes(const PoolOptions& o) {
  const uint64_t journal = JournalBytesOf(o);
  return o.format == kFormatVersionV3 ? FormatV3::MinPoolBytes(o.allocation_unit, journal)
                                      : FormatV2::MinPoolBytes(o.allocation_unit, journal);
}

Result<std::unique_ptr<Pool>> Pool::Create(Env* env, const std::string& path,
                                           const PoolOptions& options) {
  return Guard([&]() -> Result<std::unique_ptr<Pool>> {
    auto c = Core::Create(env, path, options);
    if (!c.ok()) return c.status();
    c.value()->set_backing_check_interval_ms(options.backing_check_interval_ms);
    return std::unique_ptr<Pool>(new PoolImpl(c.value()));
  });
}

Result<std::unique_ptr<Pool>> Pool::Open(Env* env, const std::string& path,
                                         const OpenOptions& options) {
  return Guard([&]() -> Result<std::unique_ptr<Pool>> {
    auto c = Core::Open(env, path, options.read_only, options.accept_journal_loss);
    if (!c.ok()) return c.status();
    c.value()->set_backing_check_interval_ms(options.backing_check_interval_ms);
    return std::unique_ptr<Pool>(new PoolImpl(c.value()));
  });
}

Result<CheckReport> Pool::CheckOffline(Env* env, const std::string& path, ProgressFn progress,
                                       void* ctx) {
  return Guard([&]() -> Result<CheckReport> {
    auto c = Core::Open(env, path, true);
    if (!c.ok()) {
      if (c.status().code() != Code::kCorruption && c.status().code() != Code::kUnsupported)
        return c.status();
      CheckReport r;
      r.clean = false;
      r.problems.push_back(c.status().ToString());
      return r;
    }
    return c.value()->Check(progress, ctx, true);
  });
}

Result<JournalLoss> Pool::RepairJournal(Env* env, const std::string& path, bool apply) {
  return Guard([&]() -> Result<JournalLoss> {
    // Read-only: recovery runs in memory only. Writable: Open checkpoints the
    // surviving prefix, which clears the journal; then the pool is closed.
    auto c = Core::Open(env, path, !apply, true);
    if (!c.ok()) return c.status();
    JournalLoss loss = c.value()->journal_loss();
    Status s = c.value()->Close();
    if (!s.ok()) return s;
    return loss;
  });
}

namespace {

// Pool::Upgrade's progress, in thousandths of its three steps: each check
// reports the LUNs it has done (a large pool's check is most of the time),
// the write its end.
struct UpgradeProgress {
  ProgressFn fn = nullptr;
  void* ctx = nullptr;
  uint64_t step = 0;  // 0, 1, 2
  static constexpr uint64_t kPerStep = 1000;
  void Report(uint64_t done, uint64_t total) const {
    if (fn) fn(ctx, step * kPerStep + (total ? done * kPerStep / total : kPerStep), 3 * kPerStep);
  }
  static void OfCheck(void* self, uint64_t done, uint64_t total) {
    static_cast<UpgradeProgress*>(self)->Report(done, total);
  }
};

// The check of an open pool (Core::Check: with `compare_disk`, also a second
// load of the disk's metadata to compare), then its close: kCorruption
// saying `problem` and every problem the check found, else the close's
// status. *report (if given) gets the check's report.
Status CheckAndClose(Core* c, bool compare_disk, const std::string& problem, CheckReport* report,
                     ProgressFn progress, void* ctx) {
  CheckReport r = c->Check(progress, ctx, compare_disk);
  Status closed = c->Close();
  if (!r.clean) {
    std::string why;
    for (const std::string& p : r.problems) why += (why.empty() ? "" : "; ") + p;
    return Status(Code::kCorruption, problem + ": " + why);
  }
  if (report) *report = std::move(r);
  return closed;
}

}  // namespace

Result<UpgradeReport> Pool::Upgrade(Env* env, const std::string& path, uint32_t grain, ProgressFn progress,
                                    void* ctx) {
  return Guard([&]() -> Result<UpgradeReport> {
    // Steps: open and check the pool as it is, write format 3, open and check that.
    UpgradeProgress steps{progress, ctx, 0};
    // 0. The format it has now (a format 1 pool becomes 2 at the open below).
    uint32_t from_format = 0;
    {
      auto f = env->OpenLocked(path, Env::Mode::kReadOnly);
      if (!f.ok()) return f.status();
      auto v = PoolFormatOf(f.value().get());
      if (!v.ok()) return v.status();
      from_format = v.value();
    }
    // 1. Opened writable as it is: its journal replayed and checkpointed (a
    // format 1 pool becomes format 2 here), then checked; anything amiss
    // refuses before a byte of format 3 is written. A format 3 pool is only
    // opened (which settles an upgrade cut between its slot writes) and
    // closed. (Should another process upgrade it between step 0 and here,
    // UpgradeFile finds format 3 and reports `already` itself.)
    {
      auto c = Core::Open(env, path, false);
      if (!c.ok()) return c.status();
      if (from_format == kFormatVersionV3) {
        UpgradeReport r;
        r.already = true;
        r.from_format = kFormatVersionV3;
        r.allocation_unit = c.value()->au();
        r.grain = c.value()->grain();
        if (Status s = c.value()->Close(); !s.ok()) return s;
        return r;
      }
      // The in-memory state's invariants, not a second load of the disk to
      // compare: the state was loaded from the disk just now, and a format
      // 2 pool's second copy costs as much RAM and time again (its space
      // is a flat array: 1.3 GiB at 16 TiB of 64 KiB AUs), while UpgradeFile
      // loads the disk again anyway and checks what it translates.
      if (Status s = CheckAndClose(c.value().get(), false,
                                   "the pool's check found problems, so nothing was upgraded", nullptr,
                                   UpgradeProgress::OfCheck, &steps);
          !s.ok())
        return s;
    }
    steps.Report(1, 1);
    steps.step = 1;
    // 2. The upgrade itself, under the pool's lock (another process may have
    // opened it since: UpgradeFile loads the state it finds).
    UpgradeReport r;
    {
      auto f = env->OpenLocked(path, Env::Mode::kReadWrite);
      if (!f.ok()) return f.status();
      if (Status s = UpgradeFile(f.value().get(), grain, &r); !s.ok()) return s;
    }
    steps.Report(1, 1);
    steps.step = 2;
    // 3. Opened as format 3 (the open's checkpoint, free space punched) and
    // checked before success is reported.
    auto c = Core::Open(env, path, false);
    if (!c.ok()) return Status(c.status().code(), "the upgraded pool does not open: " + c.status().message());
    CheckReport after;
    if (Status s = CheckAndClose(c.value().get(), true, "the upgraded pool's check found problems", &after,
                                 UpgradeProgress::OfCheck, &steps);
        !s.ok())
      return s;
    r.from_format = from_format;
    r.luns = after.luns;
    r.extents = after.extents;
    steps.Report(1, 1);
    return r;
  });
}

Core* CoreOfForTest(Pool* p) { return static_cast<PoolImpl*>(p)->core(); }

}  // namespace cowstore::store
