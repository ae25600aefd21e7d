// SPDX-License-Identifier: Apache-2.0
// The LUN table: create, delete, resize, clone, list and open LUNs.

#include "handler/store/pool_impl.h"

#include <algorithm>

#include "handler/store/names.h"

namespace cowstore::store {
namespace {

// The LUN table page refuses more blocks than its maps can key (meta.h,
// LunBlocksRule): a LUN that CreateLun makes or ResizeLun sizes must be one
// the v3 writer can write. Checked before the pool-relative bound, so the
// reason is the same in any pool. CopyLun does not check it: a clone or
// snapshot takes its source's size, and a v1/v2 pool may hold a LUN above
// the bound that an older build made; refusing would take snapshots from
// that LUN's users, and such a pool cannot become v3 anyway. ResizeLun on
// that LUN is refused for any new size still above the bound.
Status BlocksRule(uint64_t size, uint32_t bs) {
  if (std::string why = LunBlocksRule(size, bs); !why.empty()) return Status(Code::kInvalidArgument, why);
  return Status::Ok();
}

// A new LUN takes next_lun_id and moves it one up; UINT32_MAX is never an id
// (meta.h, LunRecordRule), so at UINT32_MAX the ids have run out. Checked
// under meta_mu_, before anything is appended.
Status LunIdsLeft(const MetaState& st) {
  if (st.next_lun_id != UINT32_MAX) return Status::Ok();
  return Status(Code::kNoSpace, "no LUN ids left: this pool has used all " + std::to_string(UINT32_MAX - 1) +
                                    " (no LUN can be created, cloned or snapshotted in it)");
}

}  // namespace

LunInfo Core::InfoLocked(const LunState& l) const {
  LunInfo i;
  i.name = l.name;
  i.id = l.uuid;
  i.size_bytes = l.size;
  i.block_size = l.bs;
  i.read_only = l.attrs.read_only;
  i.origin = l.attrs.origin;
  i.created_unix = l.attrs.created;
  std::vector<Run> runs;
  runs.reserve(l.map.extents());
  for (const auto& [lba, e] : l.map.runs()) runs.push_back({lba, e.phys, e.len});
  const LunShare u = space_->Usage(runs);
  i.mapped_bytes = UnitBytes(u.exclusive + u.shared);
  i.exclusive_bytes = UnitBytes(u.exclusive);
  i.shared_bytes = UnitBytes(u.shared);
  return i;
}

Result<LunInfo> Core::CreateLun(const std::string& name, uint64_t size, uint32_t bs) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  std::string why;
  if (!ValidName(name, "LUN name", &why)) return Status(Code::kInvalidArgument, why);
  if (!ValidBlockSize(bs))
    return Status(Code::kInvalidArgument, "block size must be " + std::string(kBlockSizeRule));
  if (size == 0 || size % bs) return Status(Code::kInvalidArgument, "size must be a positive multiple of the block size");
  if (Status b = BlocksRule(size, bs); !b.ok()) return b;
  // A block must lie within one grain (the unit of copy-on-write).
  if (bs > grain_)
    return Status(Code::kInvalidArgument, "block size " + std::to_string(bs) +
                                              " is larger than the pool's grain (" +
                                              std::to_string(grain_) + " bytes)");
  LunInfo info;
  for (int attempt = 0;; attempt++) {
    MutexLock g(&meta_mu_);
    // A geometry bound in the maps' unit (LUN grains <= 1024 x pool grains;
    // at grain == AU <= 2^42, inside ExtentMap::kMaxLba; below it
    // BlocksRule above bounds the LUN first).
    if (size / grain_ > space_->total_units() * 1024)
      return Status(Code::kInvalidArgument, "LUN size is absurdly larger than the pool");
    if (st_.FindName(name)) return Status(Code::kAlreadyExists, "LUN " + name + " exists");
    if (Status ids = LunIdsLeft(st_); !ids.ok()) return ids;
    if (!AffordableLocked(0, 8)) {
      if (attempt > 0 || !space_->has_pending()) return Status(Code::kNoSpace, "no room for another LUN");
      g.Unlock();
      Status c = ReclaimPending();  // freed AUs still being punched: wait for them
      if (!c.ok()) return c;
      continue;
    }
    Record r;
    r.type = RecType::kCreateLun;
    r.lun = st_.next_lun_id;
    r.uuid = NewUuid();
    r.a = size;
    r.bs = bs;
    r.name = name;
    Result<uint64_t> t = AppendLocked(r);
    if (!t.ok()) return t.status();
    info = InfoLocked(*st_.Find(r.lun));
    break;
  }
  s = Commit(CurrentSeq());
  if (!s.ok()) return s;
  return info;
}

Status Core::DeleteLun(const std::string& name) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  {
    MutexLock g(&meta_mu_);
    LunState* l = st_.FindName(name);
    if (!l) return Status(Code::kNotFound, "no LUN " + name);
    if (l->open_handles > 0) return Status(Code::kBusy, "LUN " + name + " is open");
    Record r;
    r.type = RecType::kDeleteLun;
    r.lun = l->id;
    Result<uint64_t> t = AppendLocked(r);
    if (!t.ok()) return t.status();
    space_->ForgetLun(r.lun);  // its chunks' free grains back to the index
  }
  return Commit(CurrentSeq());
}

Status Core::ResizeLun(const std::string& name, uint64_t size) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  std::shared_ptr<LunState> l;
  {
    MutexLock g(&meta_mu_);
    LunState* p = st_.FindName(name);
    if (!p) return Status(Code::kNotFound, "no LUN " + name);
    l = st_.FindShared(p->id);
  }
  if (size == 0 || size % l->bs)
    return Status(Code::kInvalidArgument, "size must be a positive multiple of the block size");
  if (Status b = BlocksRule(size, l->bs); !b.ok()) return b;
  if (l->attrs.read_only) return Status(Code::kReadOnly, "LUN " + name + " is read-only (a snapshot)");
  {
    RangeGuard rg(&l->lock, 0, kNone, true);
    uint64_t old;
    {
      MutexLock g(&meta_mu_);
      if (size / grain_ > space_->total_units() * 1024)  // as CreateLun's
        return Status(Code::kInvalidArgument, "LUN size is absurdly larger than the pool");
      if (l->deleted) return Status(Code::kNotFound, "no LUN " + name);
      old = l->size;
    }
    uint64_t ticket = 0;
    if (size < old && size % grain_) {
      // Zero the cut-off tail of the last grain so growing later exposes zeros.
      uint64_t end = std::min(old, DivUp(size, grain_) * grain_);
      s = ZeroBytes(l.get(), size, end - size, &ticket);
      if (!s.ok()) return s;
    }
    MutexLock g(&meta_mu_);
    Record r;
    r.type = RecType::kResizeLun;
    r.lun = l->id;
    r.a = size;
    Result<uint64_t> t = AppendLocked(r);
    if (!t.ok()) return t.status();
  }
  return Commit(CurrentSeq());
}

Result<LunInfo> Core::CloneLun(const std::string& src, const std::string& dst) {
  return CopyLun(src, dst, false);
}

Result<LunInfo> Core::SnapshotLun(const std::string& src, const std::string& dst) {
  return CopyLun(src, dst, true);
}

Result<LunInfo> Core::CopyLun(const std::string& src, const std::string& dst, bool snapshot) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  std::string why;
  if (!ValidName(dst, "LUN name", &why)) return Status(Code::kInvalidArgument, why);
  auto h = Acquire(src);
  if (!h.ok()) return h.status();
  std::shared_ptr<LunState> l = h.value();
  LunInfo info;
  for (int attempt = 0;; attempt++) {
    bool reclaim = false;  // short of room only while freed AUs are being punched
    s = Status::Ok();
    {
      RangeGuard rg(&l->lock, 0, kNone, false);  // no in-place write may race the copy
      MutexLock g(&meta_mu_);
      if (st_.FindName(dst)) s = Status(Code::kAlreadyExists, "LUN " + dst + " exists");
      else if (Status ids = LunIdsLeft(st_); !ids.ok()) s = ids;
      else if (!AffordableLocked(0, l->map.extents() + 8)) {
        s = Status(Code::kNoSpace, "no room for the clone's metadata");
        reclaim = attempt == 0 && space_->has_pending();
      }
      if (s.ok()) {
        Record r;
        r.type = snapshot ? RecType::kSnapshotLun : RecType::kCloneLun;
        if (snapshot) r.attrs = {true, l->uuid, env_->NowUnixSeconds()};
        r.lun = l->id;
        r.lun2 = st_.next_lun_id;
        r.uuid = NewUuid();
        r.name = dst;
        Result<uint64_t> t = AppendLocked(r);  // refused if a reference count would overflow
        if (t.ok()) info = InfoLocked(*st_.Find(r.lun2));
        else s = t.status();
      }
    }
    if (!reclaim) break;
    s = ReclaimPending();  // outside the range lock, so I/O on the LUN is not held up by the drain
    if (!s.ok()) break;
  }
  ReleaseHandle(l.get());
  if (!s.ok()) return s;
  s = Commit(CurrentSeq());
  if (!s.ok()) return s;
  return info;
}

Status Core::RollbackLun(const std::string& target, const std::string& snapshot) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  if (target == snapshot) return Status(Code::kInvalidArgument, "a LUN cannot roll back to itself");
  auto ht = Acquire(target);
  if (!ht.ok()) return ht.status();
  std::shared_ptr<LunState> t = ht.value();
  auto hs = Acquire(snapshot);  // keeps it from being deleted meanwhile
  if (!hs.ok()) {
    ReleaseHandle(t.get());
    return hs.status();
  }
  std::shared_ptr<LunState> snap = hs.value();
  for (int attempt = 0;; attempt++) {
    bool reclaim = false;  // short of room only while freed AUs are being punched
    // Every I/O on the target drains and new I/O waits until the swap is
    // durable, so no initiator reads contents a power cut could take back.
    // Range locks in LUN id order (range_lock.h).
    RangeGuard g1, g2;
    if (t->id < snap->id) {
      g1 = RangeGuard(&t->lock, 0, kNone, true);
      g2 = RangeGuard(&snap->lock, 0, kNone, false);
    } else {
      g1 = RangeGuard(&snap->lock, 0, kNone, false);
      g2 = RangeGuard(&t->lock, 0, kNone, true);
    }
    {
      MutexLock g(&meta_mu_);
      if (t->deleted || snap->deleted) s = Status(Code::kNotFound, "LUN was deleted");
      else if (t->attrs.read_only)
        s = Status(Code::kReadOnly, "LUN " + target + " is read-only (a snapshot)");
      else if (t->bs != snap->bs)
        s = Status(Code::kInvalidArgument, "LUN " + target + " and " + snapshot +
                                               " have different block sizes");
      else if (!AffordableLocked(0, snap->map.extents() + 8)) {
        s = Status(Code::kNoSpace, "no room for the rollback's metadata");
        reclaim = attempt == 0 && space_->has_pending();
      }
      if (s.ok()) {
        Record r;
        r.type = RecType::kRollbackLun;
        r.lun = t->id;
        r.lun2 = snap->id;
        Result<uint64_t> appended = AppendLocked(r);  // refused if a count would overflow
        if (!appended.ok()) s = appended.status();
      }
    }
    if (s.ok()) s = Commit(CurrentSeq());
    if (!reclaim) break;
    g2.Release();  // I/O on both LUNs need not wait out the drain
    g1.Release();
    s = ReclaimPending();
    if (!s.ok()) break;
  }
  ReleaseHandle(snap.get());
  ReleaseHandle(t.get());
  return s;
}

std::vector<LunInfo> Core::ListLuns() {
  MutexLock g(&meta_mu_);
  std::vector<LunInfo> v;
  for (const auto& [id, l] : st_.luns()) v.push_back(InfoLocked(*l));
  std::sort(v.begin(), v.end(), [](const LunInfo& a, const LunInfo& b) { return a.name < b.name; });
  return v;
}

Result<LunInfo> Core::GetLun(const std::string& name) {
  MutexLock g(&meta_mu_);
  LunState* l = st_.FindName(name);
  if (!l) return Status(Code::kNotFound, "no LUN " + name);
  return InfoLocked(*l);
}

Result<std::shared_ptr<LunState>> Core::Acquire(const std::string& name) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  MutexLock g(&meta_mu_);
  LunState* l = st_.FindName(name);
  if (!l) return Status(Code::kNotFound, "no LUN " + name);
  l->open_handles++;
  return st_.FindShared(l->id);
}

void Core::ReleaseHandle(LunState* l) {
  MutexLock g(&meta_mu_);
  l->open_handles--;
}

}  // namespace cowstore::store
