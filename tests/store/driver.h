// SPDX-License-Identifier: Apache-2.0
// Drives a pool with random operations and keeps a Model in step; shared by
// the randomized model test and the crash test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "handler/store/fault_env.h"
#include "handler/store/meta.h"  // kOneSyncWriteBytes
#include "tests/store/model.h"

namespace cowstore::store::testing {

struct DriverOptions {
  uint32_t au = 64 * 1024;
  uint64_t pool_units = 48;
  uint64_t journal = 64 * 1024;
  uint64_t max_lun_bytes = 1 << 20;
  int max_luns = 4;
  uint32_t format = 2;          // PoolOptions::format (3: the store's tests only)
  uint32_t grain = 0;           // PoolOptions::grain (0 = the AU)
  uint32_t soft_threshold = 80;  // PoolOptions::soft_threshold_percent
  // The medium's atomic write unit (FaultInjectionEnv::SetAtomicWriteBytes),
  // which a format 3 pool lays its journal restarts out in; power loss still
  // tears at 512 bytes whatever it says.
  uint32_t atomic_write_bytes = 4096;
};

// A LUN-table operation interrupted by a crash: after recovery it either
// happened or not.
struct Uncertain {
  enum Kind { kNone, kCreate, kDelete, kResize, kCloneLun, kSnapshot, kRollback } kind = kNone;
  std::string name, other;
  uint64_t bytes = 0;
  uint32_t bs = 512;
};

class Driver {
 public:
  Driver(FaultInjectionEnv* env, uint64_t seed, DriverOptions o = {})
      : env_(env), rng_(seed), o_(o) {
    model_.au = o.au;
    model_.grain = o.grain ? o.grain : o.au;
  }

  ::testing::AssertionResult Create() {
    PoolOptions po;
    po.allocation_unit = o_.au;
    po.journal_bytes = o_.journal;
    po.format = o_.format;
    po.grain = o_.grain;
    po.soft_threshold_percent = o_.soft_threshold;
    uint64_t data_off = ((64 * 1024 + o_.journal + o_.au - 1) / o_.au) * o_.au;
    po.size_bytes = data_off + o_.pool_units * o_.au;
    auto p = Pool::Create(env_, "pool", po);
    if (!p.ok()) return ::testing::AssertionFailure() << p.status().ToString();
    pool_ = std::move(p.value());
    return ::testing::AssertionSuccess();
  }

  Pool* pool() { return pool_.get(); }
  Model& model() { return model_; }
  std::mt19937_64& rng() { return rng_; }
  const Uncertain& uncertain() const { return unc_; }
  uint64_t ops() const { return ops_; }
  // Durable writes of at most kOneSyncWriteBytes issued (format 3 takes the
  // one-sync path for those that map only new grains; the crash test counts
  // the kMapChecked records themselves in the journal).
  uint64_t small_durable_writes() const { return small_durable_writes_; }
  // Writes of nothing but zeros issued (one in 16).
  uint64_t zero_writes() const { return zero_writes_; }

  uint64_t R(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool trace_ = std::getenv("COWSTORE_TRACE") != nullptr;
  template <typename... A>
  void T(const A&... a) {
    if (!trace_) return;
    ((std::cerr << a << ' '), ...);
    std::cerr << (env_->crashed() ? " [CRASHED]" : "") << "\n";
  }

  Lun* Handle(const std::string& name) {
    auto it = handles_.find(name);
    if (it != handles_.end()) return it->second.get();
    auto l = pool_->OpenLun(name);
    if (!l.ok()) {
      // The pool failed under this step (a background sync met the dead
      // disk: see Step): a handle whose every call fails the same way, so
      // the step sees the failure it handles after a crash. Kept apart from
      // handles_ until Drop or Reopen (a failed pool stays failed).
      std::unique_ptr<DeadLun>& d = dead_[name];
      if (!d) {
        const ModelLun* ml = model_.luns.count(name) ? &model_.luns.at(name) : nullptr;
        d = std::make_unique<DeadLun>(*pool_, name, ml ? ml->bs : 512, ml ? ml->sectors * kSec / ml->bs : 0,
                                      l.status());
      }
      return d.get();
    }
    return (handles_[name] = l.value()).get();
  }

  // One random operation. Returns failure on a model mismatch. A crash of the
  // fault env shows as env->crashed() afterwards.
  ::testing::AssertionResult Step() {
    ::testing::AssertionResult r = StepOnce();
    // The pool writes and syncs in the background too (zeroing ahead,
    // zero_ahead.h): when the crash countdown ends in one of its syncs, the
    // pool fails, as after a failed commit, and whatever this step does
    // after that (a read-back of a write that succeeded before, above all)
    // fails with it. Once the disk is dead, a failure that is the failed
    // pool's proves nothing either way; any other still fails the step.
    if (!r && Crashed() && std::string(r.message()).find("must be reopened") != std::string::npos)
      return ::testing::AssertionSuccess();
    return r;
  }
  ::testing::AssertionResult StepOnce() {
    ops_++;
    if (model_.luns.empty()) return DoCreate();
    if (SubAuGrain() && R(4) == 0) return DoGrainStep();
    uint64_t k = R(100);
    if (k < 30) return DoWrite();
    if (k < 38) return DoZero(false);
    if (k < 44) return DoZero(true);
    if (k < 50) return DoCaw();
    if (k < 62) return DoClone();
    if (k < 67) return DoFlush();
    if (k < 77) return DoVerifyRandom();
    if (k < 80) return DoAllocStatus();
    if (k < 82) return DoAllocate();
    if (k < 87) return DoCreate();
    if (k < 90) return DoDelete();
    if (k < 94) return DoResize();
    if (k < 96) return DoCloneLun();
    if (k < 98) return DoCloneLun(/*snapshot=*/true);
    return DoRollback();
  }

  // Verifies every LUN against the model (strict unless after a crash, where
  // each sector may hold any of its candidates; then the model takes what it
  // saw as the truth).
  ::testing::AssertionResult VerifyAll(bool after_crash, bool allow_torn) {
    auto list = pool_->ListLuns();
    if (list.size() != model_.luns.size())
      return ::testing::AssertionFailure() << "pool has " << list.size() << " LUNs, model "
                                           << model_.luns.size();
    for (const LunInfo& li : list) {
      auto it = model_.luns.find(li.name);
      if (it == model_.luns.end()) return ::testing::AssertionFailure() << "unexpected LUN " << li.name;
      ModelLun& ml = it->second;
      if (li.read_only != ml.read_only)
        return ::testing::AssertionFailure() << "LUN " << li.name << " read_only " << li.read_only;
      if (li.size_bytes != ml.sectors * kSec || li.block_size != ml.bs)
        return ::testing::AssertionFailure() << "LUN " << li.name << " size " << li.size_bytes
                                             << " model " << ml.sectors * kSec;
      Lun* h = Handle(li.name);
      if (!h) return ::testing::AssertionFailure() << "cannot open " << li.name;
      std::vector<uint64_t> seen;
      auto r = VerifyRange(*h, ml, 0, ml.sectors, after_crash, allow_torn, &seen);
      if (!r) return r << " (LUN " << li.name << ")";
      if (after_crash) {
        for (uint64_t s = 0; s < ml.sectors; s++) {
          ml.maybe[s].clear();
          if (seen[s] == ~uint64_t{0} - 1) {
            torn_.push_back({li.name, s});
          } else {
            ml.cur[s] = seen[s];
          }
        }
      }
    }
    // Rewrite torn sectors' blocks with fresh data so the model is exact again.
    for (auto& [name, s] : torn_) {
      ModelLun& ml = model_.luns[name];
      uint64_t spb = ml.bs / kSec, b = s / spb;
      std::vector<uint8_t> buf;
      auto tags = MakeData(model_, spb, &buf);
      Status st = Handle(name)->Write(b, 1, buf.data(), Durability::kDurable);
      if (!st.ok()) return ::testing::AssertionFailure() << "rewrite torn: " << st.ToString();
      for (uint64_t i = 0; i < spb; i++) ml.cur[b * spb + i] = tags[i];
    }
    torn_.clear();
    return ::testing::AssertionSuccess();
  }

  // After a power cut: drop handles and the pool.
  void Drop() {
    handles_.clear();
    dead_.clear();
    pool_.reset();
  }

  ::testing::AssertionResult Reopen() {
    auto p = Pool::Open(env_, "pool");
    if (!p.ok()) return ::testing::AssertionFailure() << "reopen: " << p.status().ToString();
    dead_.clear();  // (they name the pool replaced)
    pool_ = std::move(p.value());
    return ::testing::AssertionSuccess();
  }

  // Settles an interrupted LUN-table operation by looking at the pool.
  void Reconcile() {
    if (unc_.kind == Uncertain::kNone) return;
    auto info = pool_->GetLun(unc_.name);
    switch (unc_.kind) {
      case Uncertain::kCreate:
        if (info.ok()) {
          model_.MakeDurable();
          model_.AddLun(unc_.name, unc_.bytes, unc_.bs);
        }
        break;
      case Uncertain::kDelete:
        if (!info.ok()) {
          model_.MakeDurable();
          model_.luns.erase(unc_.name);
        }
        break;
      case Uncertain::kResize:
        if (info.ok() && info->size_bytes == unc_.bytes) {
          model_.MakeDurable();
          model_.Resize(unc_.name, unc_.bytes);
        }
        break;
      case Uncertain::kCloneLun:
      case Uncertain::kSnapshot:
        if (pool_->GetLun(unc_.other).ok()) {
          model_.MakeDurable();
          model_.luns[unc_.other] = model_.luns[unc_.name];
          model_.luns[unc_.other].read_only = unc_.kind == Uncertain::kSnapshot;
        }
        break;
      case Uncertain::kRollback: {
        // All or nothing: the target reads exactly as the snapshot (which no
        // write can change) or the rollback did not happen and the target
        // keeps what it may hold after a crash (VerifyAll checks that).
        // When the target may still hold contents equal to the snapshot's,
        // the read cannot tell, and the model keeps both possibilities.
        ModelLun& snap = model_.luns[unc_.other];
        ModelLun& old = model_.luns[unc_.name];
        Lun* h = Handle(unc_.name);
        bool as_snap = info.ok() && h && info->size_bytes == snap.sectors * kSec &&
                       VerifyRange(*h, snap, 0, snap.sectors, false, false);
        bool as_old = info.ok() && h && info->size_bytes == old.sectors * kSec &&
                      VerifyRange(*h, old, 0, old.sectors, true, false);
        if (as_snap && !as_old) {
          model_.MakeDurable();
          ModelLun& t = model_.luns[unc_.name];
          t.cur = snap.cur;
          t.maybe = snap.maybe;
          t.sectors = snap.sectors;
        }
        break;
      }
      case Uncertain::kNone:
        break;
    }
    unc_ = {};
  }

 private:
  bool Crashed() const { return env_->crashed(); }

  std::string PickLun() {
    auto it = model_.luns.begin();
    std::advance(it, static_cast<long>(R(model_.luns.size())));
    return it->first;
  }
  // A random block range [lba, lba+n) inside the LUN, up to ~3 AUs.
  void PickRange(const ModelLun& ml, uint64_t* lba, uint64_t* n) {
    uint64_t blocks = ml.sectors * kSec / ml.bs;
    uint64_t max = std::max<uint64_t>(1, 3 * model_.au / ml.bs);
    uint64_t len = 1 + R(std::min(max, blocks));
    if (R(4) == 0) len = std::min<uint64_t>(blocks, 1 + R(8));
    *lba = R(blocks - len + 1);
    if (R(3) == 0) *lba -= *lba % (model_.au / ml.bs);  // AU aligned sometimes
    if (SubAuGrain() && R(3) == 0) GrainAlign(ml, lba, &len);  // whole grains, others not
    if (*lba + len > blocks) *lba = blocks - len;
    *n = len;
  }
  // Blocks per grain of a LUN (1 for 4 KiB blocks at a 4 KiB grain).
  uint64_t BlocksPerGrain(const ModelLun& ml) const { return std::max<uint64_t>(1, model_.grain / ml.bs); }
  // Moves [*lba, *lba + *len) out to whole grains (within the LUN).
  void GrainAlign(const ModelLun& ml, uint64_t* lba, uint64_t* len) {
    uint64_t bpg = BlocksPerGrain(ml), blocks = ml.sectors * kSec / ml.bs;
    uint64_t end = std::min(blocks, (*lba + *len + bpg - 1) / bpg * bpg);
    *lba -= *lba % bpg;
    *len = end - *lba;
  }
  // A grain below the AU: the driver then also shares, writes and unmaps
  // single grains on purpose (DoGrainStep).
  bool SubAuGrain() const { return model_.grain < model_.au; }
  // A LUN with its write cache off (write_through_) makes every write
  // durable, as the handler does for such a LUN.
  Durability PickDurability(const std::string& name = "") {
    if (!name.empty() && write_through_.count(name)) return Durability::kDurable;
    return R(10) < 3 ? Durability::kDurable : Durability::kBuffered;
  }

  // Applies new per-sector tags for [s, s+n) given the call's outcome.
  ::testing::AssertionResult Apply(const std::string& name, uint64_t s,
                                   const std::vector<uint64_t>& tags, const Status& st,
                                   Durability d, bool nothing_on_error) {
    ModelLun& ml = model_.luns[name];
    if (ml.read_only) {  // refused before anything is touched
      if (st.code() == Code::kReadOnly || (Crashed() && !st.ok()))
        return VerifyRange(*Handle(name), ml, s, tags.size(), false, false);
      return ::testing::AssertionFailure() << "write to read-only " << name << ": " << st.ToString();
    }
    if (st.ok()) {
      for (uint64_t i = 0; i < tags.size(); i++) Model::Set(ml, s + i, tags[i]);
      if (d == Durability::kDurable) model_.MakeDurable();
      // Every step is checked: the touched range reads back as the model says.
      return VerifyRange(*Handle(name), ml, s, tags.size(), false, false);
    }
    if (Crashed()) {
      for (uint64_t i = 0; i < tags.size(); i++) Model::Maybe(ml, s + i, tags[i]);
      return ::testing::AssertionSuccess();
    }
    if (st.code() != Code::kNoSpace && st.code() != Code::kIOError)
      return ::testing::AssertionFailure() << "unexpected " << st.ToString();
    // Failed without a crash: each sector is old or new; adopt what is there.
    std::vector<uint64_t> seen;
    Lun* h = Handle(name);
    ModelLun probe = ml;
    for (uint64_t i = 0; i < tags.size(); i++) Model::Maybe(probe, s + i, tags[i]);
    auto r = VerifyRange(*h, probe, s, tags.size(), !nothing_on_error, false, &seen);
    if (!r) return r << " after " << st.ToString();
    for (uint64_t i = 0; i < tags.size(); i++) Model::Set(ml, s + i, seen[i]);
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoWrite() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t lba, n;
    PickRange(ml, &lba, &n);
    return WriteAt(name, lba, n, PickDurability(name));
  }

  ::testing::AssertionResult WriteAt(const std::string& name, uint64_t lba, uint64_t n, Durability d) {
    ModelLun& ml = model_.luns[name];
    std::vector<uint8_t> buf;
    uint64_t spb = ml.bs / kSec;
    auto tags = MakeData(model_, n * spb, &buf);
    if (R(16) == 0) {  // nothing but zeros: format 3 maps it with a plain record (WriteBytesChunk)
      std::fill(tags.begin(), tags.end(), 0);
      std::fill(buf.begin(), buf.end(), 0);
      zero_writes_++;
    }
    if (d == Durability::kDurable && n * ml.bs <= kOneSyncWriteBytes) small_durable_writes_++;
    Lun* h = Handle(name);
    Status st;
    if (R(4) == 0 && n > 1) {  // scattered buffers
      std::vector<iovec> iov;
      uint64_t cut = 1 + R(buf.size() - 1);
      iov.push_back({buf.data(), cut});
      iov.push_back({buf.data() + cut, buf.size() - cut});
      st = h->Write(lba, n, std::span<const iovec>(iov), d);
    } else {
      st = h->Write(lba, n, buf.data(), d);
    }
    T("write", name, lba, n, int(d), "tag0", tags[0], st.ToString());
    return Apply(name, lba * spb, tags, st, d, true);
  }

  ::testing::AssertionResult DoZero(bool unmap) {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t lba, n;
    PickRange(ml, &lba, &n);
    return ZeroAt(name, lba, n, unmap, PickDurability(name));
  }

  ::testing::AssertionResult ZeroAt(const std::string& name, uint64_t lba, uint64_t n, bool unmap, Durability d) {
    ModelLun& ml = model_.luns[name];
    // Unmap deallocates the whole grains in the range, nothing else.
    uint64_t spb = ml.bs / kSec, spg = model_.grain / kSec;
    uint64_t s0 = lba * spb, s1 = (lba + n) * spb;
    std::vector<uint64_t> tags(s1 - s0);
    for (uint64_t s = s0; s < s1; s++) {
      bool whole = (s / spg) * spg >= s0 && (s / spg + 1) * spg <= s1;
      tags[s - s0] = (!unmap || whole) ? 0 : ml.cur[s];
    }
    Lun* h = Handle(name);
    Status st = unmap ? h->Unmap(lba, n, d) : h->ZeroRange(lba, n, d);
    T(unmap ? "unmap" : "zero", name, lba, n, int(d), st.ToString());
    return Apply(name, s0, tags, st, d, false);
  }

  ::testing::AssertionResult DoCaw() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t spb = ml.bs / kSec;
    uint64_t blocks = ml.sectors / spb;
    uint64_t n = 1 + R(std::min<uint64_t>(4, blocks));
    uint64_t lba = R(blocks - n + 1);
    std::vector<uint8_t> cmp(n * ml.bs), data;
    for (uint64_t i = 0; i < n * spb; i++) FillSector(ml.cur[lba * spb + i], cmp.data() + i * kSec);
    bool differ = R(2) == 0;
    uint64_t pos = R(cmp.size());
    if (differ) cmp[pos] ^= 1;
    auto tags = MakeData(model_, n * spb, &data);
    Durability d = PickDurability(name);
    Status st = Handle(name)->CompareAndWrite(lba, n, cmp.data(), data.data(), d);
    T("caw", name, lba, n, int(d), differ, "tag0", tags[0], st.ToString());
    if (ml.read_only) return Apply(name, lba * spb, tags, st, d, true);
    if (differ && !Crashed()) {
      if (st.code() != Code::kMiscompare || st.miscompare_offset() != pos)
        return ::testing::AssertionFailure() << "CAW expected miscompare at " << pos << ", got "
                                             << st.ToString();
      return ::testing::AssertionSuccess();
    }
    if (differ) return ::testing::AssertionSuccess();  // crashed: nothing written either way
    return Apply(name, lba * spb, tags, st, d, true);
  }

  ::testing::AssertionResult DoClone() {
    std::string sn = PickLun(), dn = PickLun();
    ModelLun& sm = model_.luns[sn];
    ModelLun& dm = model_.luns[dn];
    Durability d = PickDurability(dn);
    if (sm.bs != dm.bs) {
      Status st = pool_->CloneRange(*Handle(sn), 0, *Handle(dn), 0, 1, d);
      Code want = dm.read_only ? Code::kReadOnly : Code::kInvalidArgument;
      if (st.code() != want && !Crashed())
        return ::testing::AssertionFailure() << "clone across block sizes: " << st.ToString();
      return ::testing::AssertionSuccess();
    }
    uint64_t spb = sm.bs / kSec;
    uint64_t sb = sm.sectors / spb, db = dm.sectors / spb;
    uint64_t max = std::min(sb, db);
    uint64_t n = 1 + R(std::min<uint64_t>(max, 4 * model_.au / sm.bs));
    uint64_t sl = R(sb - n + 1), dl = R(db - n + 1);
    uint64_t bpa = model_.au / sm.bs;
    if (R(2) == 0) {  // same phase: shares whole AUs
      dl = dl - dl % bpa + sl % bpa;
      if (dl + n > db) dl = sl % bpa;
      if (dl + n > db) dl = R(db - n + 1);
    } else if (SubAuGrain() && R(2) == 0) {  // the same grain phase only: shares whole grains
      uint64_t bpg = BlocksPerGrain(sm);
      dl = dl - dl % bpg + sl % bpg;
      if (dl + n > db) dl = R(db - n + 1);
    }
    std::vector<uint64_t> tags(sm.cur.begin() + static_cast<long>(sl * spb),
                               sm.cur.begin() + static_cast<long>((sl + n) * spb));
    Status st = pool_->CloneRange(*Handle(sn), sl, *Handle(dn), dl, n, d);
    T("clone", sn, sl, dn, dl, n, int(d), st.ToString());
    return Apply(dn, dl * spb, tags, st, d, false);
  }

  ::testing::AssertionResult DoFlush() {
    Status st = R(2) ? pool_->Flush() : Handle(PickLun())->Flush();
    T("flush", st.ToString());
    if (st.ok()) model_.MakeDurable();
    else if (!Crashed()) return ::testing::AssertionFailure() << "flush: " << st.ToString();
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoVerifyRandom() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t lba, n;
    PickRange(ml, &lba, &n);
    uint64_t spb = ml.bs / kSec;
    return VerifyRange(*Handle(name), ml, lba * spb, n * spb, false, false);
  }

  ::testing::AssertionResult DoAllocStatus() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t spb = ml.bs / kSec, blocks = ml.sectors / spb;
    uint64_t lba = R(blocks), n = 1 + R(blocks - lba);
    auto runs = Handle(name)->GetAllocationStatus(lba, n);
    if (!runs.ok()) return ::testing::AssertionFailure() << runs.status().ToString();
    uint64_t pos = lba;
    for (const AllocationRun& r : *runs) {
      if (r.lba != pos || r.count == 0) return ::testing::AssertionFailure() << "runs not contiguous";
      if (!r.mapped)
        for (uint64_t s = r.lba * spb; s < (r.lba + r.count) * spb; s++)
          if (ml.cur[s] != 0)
            return ::testing::AssertionFailure() << "sector " << s << " reported deallocated but holds data";
      pos += r.count;
    }
    if (pos != lba + n) return ::testing::AssertionFailure() << "runs do not cover the range";
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoAllocate() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t lba, n;
    PickRange(ml, &lba, &n);
    Status st = Handle(name)->Allocate(lba, n, Durability::kBuffered);
    T("allocate", name, lba, n, st.ToString());
    if (ml.read_only && st.code() != Code::kReadOnly && !Crashed())
      return ::testing::AssertionFailure() << "allocate on read-only: " << st.ToString();
    if (!st.ok() && st.code() != Code::kNoSpace && st.code() != Code::kReadOnly && !Crashed())
      return ::testing::AssertionFailure() << "allocate: " << st.ToString();
    return ::testing::AssertionSuccess();  // contents unchanged either way
  }

  // A new LUN's name; below the AU grain, one LUN in three has its write
  // cache off, so runs of durable small writes take the one-sync path back
  // to back (batches of kMapChecked records only).
  std::string NewName() {
    std::string name = "lun" + std::to_string(name_seq_++);
    if (SubAuGrain() && R(3) == 0) write_through_.insert(name);
    return name;
  }

  // A range of the grain size, or of a few grains (up to the one-sync
  // path's kOneSyncWriteBytes), grain-aligned, or unaligned by a few blocks
  // at either end so that partial grains are copied too.
  void PickGrainRange(const ModelLun& ml, uint64_t* lba, uint64_t* n) {
    uint64_t bpg = BlocksPerGrain(ml), blocks = ml.sectors * kSec / ml.bs;
    uint64_t most = std::max<uint64_t>(1, kOneSyncWriteBytes / ml.bs);
    uint64_t len = R(2) ? bpg : bpg * (1 + R(most / bpg));
    uint64_t at = R(blocks) / bpg * bpg;
    if (R(3) == 0) {  // unaligned: starts inside a grain, or ends inside one
      if (R(2)) at += R(bpg);
      else len = std::max<uint64_t>(1, len - R(bpg));
    }
    len = std::min(std::min(len, most), blocks);
    if (at + len > blocks) at = blocks - len;
    *lba = at;
    *n = len;
  }

  // Sharing and unsharing at the grain (store-v3.md 3.6 item 1, plan steps
  // 6 and 7): single grains shared by a range clone and then written on
  // either side (copy-on-write of one grain, a partial one copying the rest
  // of it), rewritten before the batch that mapped them is vouched for,
  // unmapped one grain at a time, and durable small first writes into
  // fresh space, which on format 3 take the one-sync path (kMapChecked).
  ::testing::AssertionResult DoGrainStep() {
    uint64_t k = R(10);
    if (k < 5) return DoShareThenDiverge();
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t lba, n;
    PickGrainRange(ml, &lba, &n);
    if (k < 7) {  // one grain (or a part of one) unmapped
      n = std::min(n, BlocksPerGrain(ml));
      return ZeroAt(name, lba, n, true, PickDurability(name));
    }
    // A durable first write: into a stretch the model holds as zeros (most
    // often unmapped: fresh grains) when one of a few tries finds one, else
    // wherever it lands (shared grains, or a mix with in-place ones, which
    // takes the plain record).
    for (int tries = 0; tries < 4; tries++) {
      uint64_t s = lba * ml.bs / kSec, e = (lba + n) * ml.bs / kSec;
      if (std::all_of(ml.cur.begin() + static_cast<long>(s), ml.cur.begin() + static_cast<long>(e),
                      [](uint64_t t) { return t == 0; }))
        break;
      PickGrainRange(ml, &lba, &n);
    }
    ::testing::AssertionResult r = WriteAt(name, lba, n, Durability::kDurable);
    if (!r || Crashed() || R(2)) return r;
    // Written again at once, before anything vouches for it: copy-on-write
    // with a checked record of its own (checked_grains.h).
    return WriteAt(name, lba + R(n), 1, PickDurability(name));
  }

  // A range cloned at the same grain phase (whole grains shared, AUs not),
  // then a few small writes into the copy and the source alike.
  ::testing::AssertionResult DoShareThenDiverge() {
    std::string sn = PickLun(), dn = PickLun();
    ModelLun& sm = model_.luns[sn];
    ModelLun& dm = model_.luns[dn];
    if (sm.bs != dm.bs) return DoClone();
    uint64_t bpg = BlocksPerGrain(sm);
    uint64_t sb = sm.sectors * kSec / sm.bs, db = dm.sectors * kSec / dm.bs;
    uint64_t n = std::min({sb, db, bpg * (1 + R(16))});
    uint64_t sl = R(sb - n + 1) / bpg * bpg, dl = R(db - n + 1) / bpg * bpg;
    if (sl + n > sb) sl = sb - n;
    if (dl + n > db) dl = db - n;
    uint64_t spb = sm.bs / kSec;
    std::vector<uint64_t> tags(sm.cur.begin() + static_cast<long>(sl * spb),
                               sm.cur.begin() + static_cast<long>((sl + n) * spb));
    Durability d = PickDurability(dn);
    Status st = pool_->CloneRange(*Handle(sn), sl, *Handle(dn), dl, n, d);
    T("share", sn, sl, dn, dl, n, int(d), st.ToString());
    ::testing::AssertionResult r = Apply(dn, dl * spb, tags, st, d, false);
    if (!r || !st.ok()) return r;
    for (uint64_t w = 1 + R(4); w > 0 && !Crashed(); w--) {
      bool src = R(2);
      const std::string& name = src ? sn : dn;
      uint64_t base = src ? sl : dl;
      // One grain, part of one, or a few blocks across a grain boundary.
      uint64_t at = base + R(n), len = 1 + R(std::min<uint64_t>(2 * bpg, n));
      if (R(2)) {
        at -= (at - base) % bpg;
        len = std::min(bpg, n - (at - base));
      }
      len = std::min(len, base + n - at);
      r = WriteAt(name, at, len, PickDurability(name));
      if (!r) return r;
    }
    return r;
  }

  ::testing::AssertionResult DoCreate() {
    if (static_cast<int>(model_.luns.size()) >= o_.max_luns) return DoWrite();
    uint32_t bs = R(4) == 0 ? 4096 : 512;
    uint64_t bytes = (1 + R(o_.max_lun_bytes / bs)) * bs;
    std::string name = NewName();
    auto r = pool_->CreateLun(name, bytes, bs);
    T("create", name, bytes, bs, r.status().ToString());
    if (r.ok()) {
      model_.AddLun(name, bytes, bs);
      model_.MakeDurable();
    } else if (Crashed()) {
      unc_ = {Uncertain::kCreate, name, "", bytes, bs};
    } else if (r.status().code() != Code::kNoSpace) {
      return ::testing::AssertionFailure() << "create: " << r.status().ToString();
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoDelete() {
    if (model_.luns.size() <= 1) return DoWrite();
    std::string name = PickLun();
    handles_.erase(name);
    Status st = pool_->DeleteLun(name);
    T("delete", name, st.ToString());
    if (st.ok()) {
      model_.luns.erase(name);
      model_.MakeDurable();
    } else if (Crashed()) {
      unc_ = {Uncertain::kDelete, name, "", 0, 512};
    } else {
      return ::testing::AssertionFailure() << "delete: " << st.ToString();
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoResize() {
    std::string name = PickLun();
    ModelLun& ml = model_.luns[name];
    uint64_t bytes = (1 + R(o_.max_lun_bytes / ml.bs)) * ml.bs;
    if (bytes == ml.sectors * kSec) return ::testing::AssertionSuccess();
    uint64_t old_sectors = ml.sectors;
    Status st = pool_->ResizeLun(name, bytes);
    T("resize", name, bytes, st.ToString());
    if (ml.read_only) {
      if (st.code() == Code::kReadOnly || (Crashed() && !st.ok())) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure() << "resize of read-only " << name << ": " << st.ToString();
    }
    if (st.ok()) {
      model_.Resize(name, bytes);
      model_.MakeDurable();
    } else if (Crashed()) {
      unc_ = {Uncertain::kResize, name, "", bytes, ml.bs};
      // A shrink zeroes the cut-off part of the last grain first.
      uint64_t spg = model_.grain / kSec, ns = bytes / kSec;
      for (uint64_t s = ns; s < std::min(old_sectors, (ns + spg - 1) / spg * spg); s++)
        Model::Maybe(ml, s, 0);
    } else if (st.code() != Code::kNoSpace) {  // a shrink may need to copy a shared AU
      return ::testing::AssertionFailure() << "resize: " << st.ToString();
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult DoCloneLun(bool snapshot = false) {
    if (static_cast<int>(model_.luns.size()) >= o_.max_luns) return DoClone();
    std::string src = PickLun(), dst = NewName();
    auto r = snapshot ? pool_->SnapshotLun(src, dst) : pool_->CloneLun(src, dst);
    T(snapshot ? "snapshot" : "clonelun", src, dst, r.status().ToString());
    if (r.ok()) {
      model_.MakeDurable();
      model_.luns[dst] = model_.luns[src];
      model_.luns[dst].read_only = snapshot;
      if (r->read_only != snapshot || (snapshot && r->origin != pool_->GetLun(src)->id))
        return ::testing::AssertionFailure() << "snapshot attributes of " << dst;
    } else if (Crashed()) {
      unc_ = {snapshot ? Uncertain::kSnapshot : Uncertain::kCloneLun, src, dst, 0, 512};
    } else if (r.status().code() != Code::kNoSpace) {
      return ::testing::AssertionFailure() << "clone LUN: " << r.status().ToString();
    }
    return ::testing::AssertionSuccess();
  }

  // Rolls a LUN (open: the driver holds handles) back to a LUN of the same
  // block size; refused when the target is read-only.
  ::testing::AssertionResult DoRollback() {
    std::string t = PickLun(), src = PickLun();
    ModelLun& tm = model_.luns[t];
    ModelLun& sm = model_.luns[src];
    Handle(t);  // rollback works on an open LUN
    Status st = pool_->RollbackLun(t, src);
    T("rollback", t, src, st.ToString());
    if (Crashed() && !st.ok()) {
      if (t != src && !tm.read_only && tm.bs == sm.bs) unc_ = {Uncertain::kRollback, t, src, 0, 512};
      return ::testing::AssertionSuccess();
    }
    Code want = t == src ? Code::kInvalidArgument
                : tm.read_only ? Code::kReadOnly
                : tm.bs != sm.bs ? Code::kInvalidArgument : Code::kOk;
    if (st.code() == Code::kNoSpace && want == Code::kOk) return ::testing::AssertionSuccess();
    if (st.code() != want)
      return ::testing::AssertionFailure() << "rollback " << t << " to " << src << ": " << st.ToString();
    if (st.ok()) {
      model_.MakeDurable();
      tm.cur = sm.cur;
      tm.maybe = sm.maybe;
      tm.sectors = sm.sectors;
      return VerifyRange(*Handle(t), tm, 0, tm.sectors, false, false);
    }
    return ::testing::AssertionSuccess();
  }

  FaultInjectionEnv* env_;
  std::mt19937_64 rng_;
  DriverOptions o_;
  Model model_;
  std::unique_ptr<Pool> pool_;
  std::map<std::string, std::shared_ptr<Lun>> handles_;
  // A LUN handle whose every call fails with the status the pool's OpenLun
  // gave (Handle, after the pool failed).
  class DeadLun final : public Lun {
   public:
    DeadLun(Pool& pool, std::string name, uint32_t bs, uint64_t blocks, Status why)
        : pool_(pool), name_(std::move(name)), bs_(bs), blocks_(blocks), why_(std::move(why)) {}
    const std::string& name() const override { return name_; }
    Uuid id() const override { return Uuid{}; }
    uint32_t block_size() const override { return bs_; }
    uint64_t block_count() const override { return blocks_; }
    Pool& pool() override { return pool_; }
    bool read_only() const override { return false; }
    Status Read(uint64_t, uint64_t, std::span<const iovec>) override { return why_; }
    Status Write(uint64_t, uint64_t, std::span<const iovec>, Durability) override { return why_; }
    Status CompareAndWrite(uint64_t, uint64_t, const void*, const void*, Durability) override { return why_; }
    Status ZeroRange(uint64_t, uint64_t, Durability) override { return why_; }
    Status Unmap(uint64_t, uint64_t, Durability) override { return why_; }
    Status Flush() override { return why_; }
    Result<std::vector<AllocationRun>> GetAllocationStatus(uint64_t, uint64_t) override { return why_; }
    Status Allocate(uint64_t, uint64_t, Durability) override { return why_; }

   private:
    Pool& pool_;
    std::string name_;
    uint32_t bs_;
    uint64_t blocks_;
    Status why_;
  };
  std::map<std::string, std::unique_ptr<DeadLun>> dead_;
  Uncertain unc_;
  uint64_t ops_ = 0;
  int name_seq_ = 0;
  std::vector<std::pair<std::string, uint64_t>> torn_;
  std::set<std::string> write_through_;  // LUNs with the write cache off (NewName)
  uint64_t small_durable_writes_ = 0;
  uint64_t zero_writes_ = 0;
};

}  // namespace cowstore::store::testing
