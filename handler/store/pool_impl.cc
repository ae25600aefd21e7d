// SPDX-License-Identifier: Apache-2.0
// What ties the engine together: reference counting and reservations over
// the space map, the commit step, and pool-wide operations (flush, grow, space).

#include "handler/store/pool_impl.h"

#include <algorithm>
#include <chrono>
#include <new>

#include "handler/store/crc32c.h"
#include "handler/store/random.h"

namespace cowstore::store {

Uuid NewUuid() {
  Uuid u;
  RandomBytes(u.data(), u.size());
  u[6] = (u[6] & 0x0f) | 0x40;  // RFC 4122 version 4
  u[8] = (u[8] & 0x3f) | 0x80;
  return u;
}

Status Core::CanInc(std::span<const Run> runs) const { return space_->CanInc(runs); }

Status Core::Inc(uint64_t phys, uint64_t n) { return space_->Inc(phys, n); }

void Core::Dec(uint64_t phys, uint64_t n) {
  space_->Dec(phys, n, jbuf_.next_ticket());  // the ticket AppendLocked hands out
}

Result<uint64_t> Core::AppendLocked(const Record& r, const std::vector<Run>* clone_pieces) {
  if (meta_failed_.load()) return MetaFailed();  // the state may be half-changed
  // A checkpoint was refused for room: the journal is full, so this record
  // could not be made durable either. Refused, nothing changed, until the
  // AUs that checkpoint asked for are free (a Grow, frees thinned); then
  // taken, and its commit tries the checkpoint again.
  if (ShortOfRefusedCheckpointLocked()) return NoCheckpointRoomLocked();
  // First what may fail while nothing has changed: the frame, and room for
  // it in the buffer (an exception here is kNoSpace, truthfully).
  JournalBuffer::Framed f = jbuf_.Frame(r, DurableLsn());
  try {
    // Records built at run time fit the state (ExtentMap's rule holds for
    // every run: extent_map.h), and the API checks a stricter LUN rule than
    // ApplyRecord's (meta.h, LunRecordRule: names, sizes, ids) before it
    // builds one, so that refusal (worded "journal replay: ...") cannot
    // happen here. What ApplyRecord can still refuse is an increment past a
    // reference count's bound. Either way it refuses before changing
    // anything.
    Status s = ApplyRecord(&st_, r, this, track_dirty_ ? &dirty_ : nullptr, clone_pieces);
    if (!s.ok()) return s;
    if (fail_after_apply_for_test > 0 && --fail_after_apply_for_test == 0) throw std::bad_alloc();
    // Which LSN changed what, so an online check can tell which LUNs the
    // durable metadata it read must already describe.
    for (uint32_t id : {r.lun, r.lun2})
      if (LunState* l = st_.Find(id)) l->mod_lsn = f.lsn;
    if (r.type == RecType::kCreateLun || r.type == RecType::kDeleteLun ||
        r.type == RecType::kCloneLun || r.type == RecType::kSnapshotLun)
      st_.table_lsn = f.lsn;
    return jbuf_.Add(std::move(f));  // allocates nothing
  } catch (...) {
    // ApplyRecord threw part way (e.g. a map insert after the remove it
    // follows): the maps and reference counts may be half-changed, and the
    // grains it freed are pending under a ticket no record will carry. No
    // later batch or checkpoint may write any of it: the pool fails, and
    // reopening recovers the durable state from the journal.
    meta_failed_.store(true);
    queue_.Fail(MetaFailed());
    return MetaFailed();
  }
}

Status Core::MetaFailed() {
  return Status(Code::kIOError,
                "the pool failed (a metadata update that stopped part way, a failed checkpoint, "
                "or a failed write or sync of its own): it must be reopened");
}

uint64_t Core::CkptUnits(uint64_t extents) const {
  return ckpt_cost_->UnitsBound(st_.luns().size(), extents);
}

bool Core::ShortOfRefusedCheckpointLocked() const {
  return ckpt_refused_aus_ != 0 && !HasRoomFor(*space_, 0, ckpt_refused_aus_);
}

uint64_t Core::CkptBoundLocked(uint64_t extents) const {
  // The format's bound, but never less than the last checkpoint took (its
  // Freeze's meta_units): slack on top of a bound that holds, kept from
  // when format 3 was held to format 2's estimate, which its checkpoints
  // outgrew.
  return std::max(CkptUnits(extents), last_ckpt_aus_);
}

bool Core::AffordableLocked(uint64_t need, uint64_t extra_extents) const {
  // What neither allocates nor adds an extent (an overwrite in place)
  // takes no space and appends no record: it needs no checkpoint room, or a
  // pool short of it (an open that could not checkpoint) would refuse
  // writes to data it already holds. Its commit is the data sync, or the
  // batch of others' records it joins, which answers for itself.
  if (need == 0 && extra_extents == 0) return true;
  return HasRoomFor(*space_, need, CkptReserveLocked(extra_extents));
}

uint64_t Core::CkptReserveLocked(uint64_t extra_extents) const {
  return CkptBoundLocked(st_.extents() + extra_extents + kFreeingReserveExtents);
}

bool Core::AffordableToFreeLocked(uint64_t extra_extents) const {
  return HasRoomFor(*space_, 0, CkptBoundLocked(st_.extents() + extra_extents));
}

Status Core::PoolFullLocked(uint64_t need) const {
  // The free figure is the space's (what Space() reports as free), which
  // holds the room kept for the next checkpoint: said, so that "needed" below
  // "free" does not read as a contradiction. The room itself depends on the
  // caller's extents (CkptReserveLocked), which not every caller passes.
  return Status(Code::kNoSpace, "pool is full: " + std::to_string(UnitBytes(need)) + " bytes needed, " +
                                    std::to_string(UnitBytes(space_->free_units())) +
                                    " free including the room kept for the metadata checkpoint, "
                                    "which data may not use; grow the pool or free space");
}

Status Core::ReserveLocked(uint64_t need, uint64_t extra_extents, std::vector<uint64_t>* out,
                           const AllocHint& hint) {
  if (!AffordableLocked(need, extra_extents))
    return PoolFullLocked(need);
  uint64_t free_before = space_->free_units();
  // Not from the whole AUs AffordableLocked counted for the checkpoint.
  if (need > 0 &&
      !space_->ReserveKeepingAus(need, CkptReserveLocked(extra_extents), out, hint))
    return PoolFullLocked(need);  // what AffordableLocked checked: unreachable
  if (space_->CrossedSoftThreshold(free_before, zeroing_grains_)) soft_gen_++;
  if (hint.lun != AllocHint::kNoLun) MaybeZeroAheadLocked();
  return Status::Ok();
}

void Core::Unreserve(const std::vector<uint64_t>& grains, bool dirty) {
  std::vector<uint64_t> bad;
  if (dirty) {
    for (uint64_t p : grains)
      if (!file_->PunchHole(GrainOffset(p), grain_).ok()) bad.push_back(p);
  }
  MutexLock g(&meta_mu_);
  space_->Unreserve(grains, bad);
}

// One batch: everything appended so far, or a checkpoint when it would not
// fit in the journal. Runs only as queue_'s leader, so nothing else commits.
Result<uint64_t> Core::CommitBatch() {
  queue_.AssertLeader();  // the queue calls this only from its leader
  // Tells thinner_ a sync is on its way, now and when this returns.
  struct Activity {
    std::atomic<uint64_t>* n;
    explicit Activity(std::atomic<uint64_t>* c) : n(c) { n->fetch_add(1, std::memory_order_relaxed); }
    ~Activity() { n->fetch_add(1, std::memory_order_relaxed); }
  } activity(&batches_);
  JournalBatch batch;
  bool ckpt = false;
  Status s;
  {
    MutexLock g(&meta_mu_);
    if (meta_failed_.load()) return MetaFailed();  // nothing buffered may be written
    if (ckpt_refused_aus_ != 0 && jbuf_.empty()) {
      // Refused, with no record buffered (an open that could not
      // checkpoint, nothing appended since): nothing needs the checkpoint.
      // What a Flush, a durable overwrite in place or a Close must make
      // durable is data in grains durable metadata already maps: a data
      // sync is the whole commit, as for an in-place write on any pool.
      const uint64_t last = jbuf_.last_ticket();
      g.Unlock();
      s = file_->Sync();
      if (!s.ok()) {
        FailPool();  // see below
        return Status(s.code(), "commit failed, pool must be reopened: " + s.message());
      }
      return last;
    }
    if (ShortOfRefusedCheckpointLocked()) {
      // Still fewer whole AUs free than the refused checkpoint asked, and
      // no record was taken since (AppendLocked's gate): it would be refused
      // again. Refused at once, without a Freeze (a copy of the state under
      // meta_mu_, which reads take: every flush would stall them).
      s = NoCheckpointRoomLocked();
    } else {
      // A checkpoint refused for room is retried before anything else is
      // written: the journal was full, or the open could not checkpoint
      // (recovery.cc) and no record may follow the journal as replayed.
      ckpt = ckpt_refused_aus_ != 0 || !format_->Fits(jbuf_.bytes());
      if (!ckpt) jbuf_.TakeBatch(&batch);
    }
  }
  uint64_t target = batch.last_ticket;
  const bool refused_early = !s.ok();
  if (!refused_early)
    s = ckpt ? CheckpointLocked(&target) : format_->CommitBatch(file_.get(), batch);
  if (refused_early || (ckpt && s.code() == Code::kNoSpace)) {
    // Refused for room before anything changed (CheckpointLocked's only
    // kNoSpace): the pool serves on, and so does the queue. A refused
    // commit always has records buffered (with none, a refused pool's
    // commit is the data sync above), applied in memory: its waiters' own
    // among them. So they get kNotDurable, not kNoSpace, whose contract is
    // "nothing changed" (a DeleteLun told kNoSpace would have deleted the
    // LUN all the same). The records stay buffered for the checkpoint that
    // succeeds once there is room. (Every operation refuses before applying
    // when the checkpoint bound has no room: CkptBoundLocked. This is what
    // is left if the bound fell short.)
    queue_.RefuseBatch();
    return Status(Code::kNotDurable, s.message() +
                                         "; what was buffered stays applied (reads see it) and "
                                         "becomes durable with the first checkpoint that finds room");
  }
  if (!s.ok()) {
    // Reads stop too (CheckUsable), not only commits: a failed write or sync
    // may have left the batch's data (and the copies of older, acknowledged
    // blocks its copy-on-write made) only in cache pages the OS marked clean
    // (env.h, File::DropCache) and may evict at any time, while the maps in
    // memory point at them: a read could then return zeros for acknowledged
    // data. (A failed checkpoint has failed the pool already.)
    FailPool();
    return Status(s.code(), "commit failed, pool must be reopened: " + s.message());
  }
  if (!ckpt && batch.proven != 0) {
    // Durable now, its records vouch for every record up to their `proven`:
    // replay will not check those kMapChecked records' data again, so their
    // grains may change (checked_grains.h). Before the queue publishes the
    // target, so the ReleasePending that follows sees the vouch.
    MutexLock g(&meta_mu_);
    checked_.Vouch(batch.proven);
  }
  return target;  // queue_ publishes it, wakes its waiters, then ReleasePending
}

void Core::FailPool() {
  MutexLock g(&meta_mu_);  // as every setter: nothing passes CheckUsable or AppendLocked in between
  meta_failed_.store(true);
}

void Core::ReleasePending(uint64_t target) {
  std::vector<PendingRun> ready;
  {
    MutexLock g(&meta_mu_);
    ready = space_->TakeReleasable(target);
    // A run holding a grain of a checked record not vouched for must keep
    // its bytes until the vouch (checked_grains.h: replay would check them):
    // held back, and handed over by the call that finds it vouched.
    HoldUnvouchedLocked(&ready);
  }
  // The freeing records are durable: no recovered state can map these AUs,
  // so they may be zeroed (punched, keeping the file thin) and reused. The
  // punch happens off this (a command's) thread.
  thinner_.Add(std::move(ready));
}

void Core::HoldUnvouchedLocked(std::vector<PendingRun>* ready) {
  if (held_.empty() && checked_.empty()) return;  // formats 1 and 2, most batches
  // Held runs the vouch has reached join *ready (room made first: without
  // memory they stay held, for the next call).
  bool room = true;
  try {
    ready->reserve(ready->size() + held_.size());
  } catch (...) {
    room = false;
  }
  size_t kept = 0;
  for (size_t i = 0; i < held_.size(); i++) {
    if (room && held_[i].first <= checked_.vouched())
      ready->push_back(held_[i].second);
    else
      held_[kept++] = held_[i];
  }
  held_.resize(kept);
  size_t out = 0;
  for (size_t i = 0; i < ready->size(); i++) {
    const PendingRun& r = (*ready)[i];
    const uint64_t need = checked_.NeededLsn(r.phys, r.n);
    if (need == 0) {
      (*ready)[out++] = r;
      continue;
    }
    try {
      held_.push_back({need, r});
    } catch (...) {
      // No memory to hold it: not released at all, rather than punched
      // early. It stays releasing (thinning) until the pool is reopened,
      // whose rebuild frees it: space leaks for this session only.
    }
  }
  ready->resize(out);
}

bool Core::PunchRun(const PendingRun& r) {
  return file_->PunchHole(GrainOffset(r.phys), r.n * grain_).ok();
}

void Core::ReleaseRuns(const std::vector<PendingRun>& runs, const std::vector<bool>& zeroed) {
  MutexLock g(&meta_mu_);
  for (size_t i = 0; i < runs.size(); i++) space_->Release(runs[i], zeroed[i]);
}

Status Core::ReclaimPending() {
  Status c = Commit(CurrentSeq());  // the freeing records
  // The caller's own operation applied nothing yet: for it, a commit refused
  // for room is a refusal with nothing changed (kNoSpace).
  if (c.code() == Code::kNotDurable) return Status(Code::kNoSpace, c.message());
  if (!c.ok()) return c;
  queue_.DrainHooks();  // their runs are in thinner_ once the hooks finished
  bool held;
  {
    MutexLock g(&meta_mu_);
    held = !held_.empty();
    // Runs held for a vouch (held_): their checked records are durable (they
    // precede the freeing ones), so one more durable record framed now
    // vouches for them. A seal is the record that changes nothing.
    if (held) {
      Record seal;
      seal.type = RecType::kSeal;
      Result<uint64_t> t = AppendLocked(seal);
      if (!t.ok()) held = false;  // a failed pool or no room: the caller's retry answers
    }
  }
  if (held) {
    c = Commit(CurrentSeq());
    if (c.code() == Code::kNotDurable) return Status(Code::kNoSpace, c.message());
    if (!c.ok()) return c;
    queue_.DrainHooks();
  }
  thinner_.Drain();  // and on the free list once punched
  zero_ahead_.Drain();  // a round's reservation back in free space
  return Status::Ok();
}

Status Core::CheckUsable() const {
  if (closed_.load()) return Status(Code::kClosed, "pool is closed");
  if (meta_failed_.load()) return MetaFailed();  // its in-memory state cannot be trusted
  return Status::Ok();
}

Status Core::Close() {
  if (closed_.exchange(true)) return Status::Ok();
  if (read_only_) return Status::Ok();
  // No round starts once closed_ is set (ZeroAheadRound looks under
  // meta_mu_); the one in flight ends, then the stock is punched.
  zero_ahead_.Drain();
  PunchWarmRuns();
  Status s = Commit(CurrentSeq());  // everything buffered so far
  if (s.code() == Code::kNotDurable && !meta_failed_.load()) {
    // The checkpoint was refused for room (CommitBatch; the pool did not
    // fail): what is buffered, acknowledged
    // buffered writes among it, is still in memory only. The pool stays
    // open so that room can be made (Grow) and Close tried again; a
    // second Close, or the destructor's, retries rather than report Ok.
    closed_.store(false);
    return s;
  }
  if (!s.ok()) return s;
  // Seal: a last record whose `proven` vouches for every record before it, so
  // damage to the final commit of a cleanly closed pool is refused rather
  // than taken for a power-cut tear (docs/design/store.md, "Recovery rules").
  {
    CommitQueue::ExclusiveGuard leader(&queue_);  // no batch in flight: durable_lsn is final
    MutexLock g(&meta_mu_);
    if (format_->journal_empty() && jbuf_.empty()) return Status::Ok();  // nothing to vouch for
    // An open that could not checkpoint, with nothing appended since: the
    // journal is as the last session left it, and a seal could not be
    // written without the checkpoint there is no room for.
    if (ckpt_refused_aus_ != 0 && jbuf_.empty()) return Status::Ok();
    Record seal;
    seal.type = RecType::kSeal;
    Result<uint64_t> t = AppendLocked(seal);
    if (!t.ok()) return t.status();  // a seal changes nothing: cannot be refused
  }
  s = Commit(CurrentSeq());
  // Give back what is still being thinned, so a closed pool is as thin as
  // its maps say and nothing touches the file after Close.
  queue_.DrainHooks();
  thinner_.Drain();
  return s;
}

Status Core::Flush() {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return Status::Ok();
  return Commit(CurrentSeq());
}

Status Core::Grow(uint64_t new_size) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  CommitQueue::ExclusiveGuard leader(&queue_);  // the superblock: no batch meanwhile
  if (Status f = queue_.failed(); !f.ok()) return f;
  if (!file_->CanTruncate()) {  // the medium's size: what its administrator gave it (env.h)
    auto dsz = file_->Size();
    if (!dsz.ok()) return dsz.status();
    if (new_size == 0) new_size = *dsz;
    if (new_size > *dsz) return Status(Code::kInvalidArgument, "size exceeds the device");
  }
  uint64_t old_size;
  {
    MutexLock g(&meta_mu_);
    old_size = size_bytes_;  // what the format's superblock declares: set by Load and here only
  }
  if (new_size < old_size) return Status(Code::kInvalidArgument, "a pool cannot shrink");
  if (new_size == old_size) return Status::Ok();
  const uint64_t units = (new_size - data_offset_) / au_;
  // The format's own bound: format 2's 2^32 AUs would cap a format 3 pool
  // at 256 TiB (64 KiB AUs), far below its 2^48 grains.
  if (std::string why = format_->UnitsRule(units); !why.empty())
    return Status(Code::kInvalidArgument, why);
  // Allocate the index first: once a superblock names the new size, every
  // later open must index it, so a size memory cannot index fails here, with
  // nothing changed.
  // The space map counts grains.
  const uint64_t space_units = UnitsOfAus(units);
  {
    MutexLock g(&meta_mu_);
    s = space_->ReserveIndex(space_units);
  }
  if (s.code() == Code::kNoSpace)
    return Status(Code::kNoSpace, "not enough memory to index " + std::to_string(units) +
                                      " allocation units: the pool keeps its size");
  if (!s.ok()) return Status(s.code(), s.message() + ": the pool keeps its size");
  if (file_->CanTruncate()) {
    // The new size must be durable before a superblock declares it: a cut
    // between the two would leave a pool that declares more than its file
    // holds, which open refuses (a short file is data loss).
    s = file_->Truncate(new_size);
    if (!s.ok()) return s;
    // A failed sync fails the pool, as a commit's does: the kernel may have
    // dropped the dirty pages it could not write (data of operations not yet
    // committed among them), and the next sync would report success without
    // them (docs/design/store.md, "Commit protocol").
    s = file_->Sync();
    if (!s.ok()) {
      FailPool();  // reads too: see CommitBatch
      queue_.Fail(s);
      return s;
    }
  }
  try {
    s = format_->Grow(file_.get(), new_size);
  } catch (...) {  // e.g. an Env out of memory after the first slot's write
    s = StatusFromCurrentException();
  }
  if (!s.ok()) {
    FailPool();  // its syncs may have failed: see CommitBatch
    queue_.Fail(s);
    return s;
  }
  MutexLock g(&meta_mu_);
  try {
    space_->Grow(space_units);  // within the reserved index, but may need a node
  } catch (...) {
    // The superblock names the new size and the space map could not take
    // it: serving on would hand out the old units while every later
    // superblock declares the new ones, and the map may be half-grown. The
    // pool fails; reopening indexes the declared size.
    meta_failed_.store(true);
    queue_.Fail(MetaFailed());
    return MetaFailed();
  }
  // The maps take the new units (format 3: the pool's grains were their
  // bound; allocates nothing); formats 1 and 2 keep 2^32 AUs, which no pool
  // of theirs passes.
  st_.RaiseMapBound(space_units);
  size_bytes_ = new_size;
  return Status::Ok();
}

void Core::PollBacking() {
  if (backing_interval_ns_ < 0) return;  // the signal is off
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t due = backing_next_ns_.load(std::memory_order_relaxed);
  if (now < due) return;
  // One asker per interval; the others go on at once.
  if (!backing_next_ns_.compare_exchange_strong(due, now + backing_interval_ns_)) return;
  auto b = file_->Backing();
  if (!b.ok()) return;  // the Env cannot tell: no thin-on-thin signal
  uint64_t growth;
  {
    MutexLock g(&meta_mu_);
    growth = UnitBytes(space_->free_units());
  }
  const bool outgrows = OutgrowsBacking(b->grows, b->free_bytes, growth);
  if (!outgrows) backing_short_.store(false);
  else if (!backing_short_.exchange(true)) backing_gen_++;
}

SpaceInfo Core::Space() {
  SpaceInfo si;
  // Asked before taking the lock (a system call; see PollBacking).
  if (file_) {
    if (auto b = file_->Backing(); b.ok()) {
      si.backing_known = true;
      si.backing_grows = b->grows;
      si.backing_size_bytes = b->size_bytes;
      si.backing_free_bytes = b->free_bytes;
    }
  }
  MutexLock g(&meta_mu_);
  si.pool_size_bytes = size_bytes_;
  // The *_units figures count the space map's units, grains (the AU at
  // grain == AU), of unit_bytes each (pool.h).
  si.allocation_unit = au_;
  si.unit_bytes = static_cast<uint32_t>(UnitBytes(1));
  si.total_units = space_->total_units();
  si.allocated_units = space_->mapped_units() + space_->meta_units();
  si.metadata_units = space_->meta_units();
  si.shared_units = space_->shared_units();
  // Units whose punch is still under way are free space (an allocation
  // waits for them), said apart so a reader sees it coming back.
  si.thinning_units = space_->releasing_units();
  // So are a zeroing-ahead round's (reserved only while their zeros are
  // written): the figure does not dip while one runs.
  si.free_units = space_->free_units() + si.thinning_units + zeroing_grains_;
  for (const auto& [id, l] : st_.luns()) {
    si.luns.push_back(InfoLocked(*l));
    si.mapped_bytes += si.luns.back().mapped_bytes;
    si.provisioned_bytes += si.luns.back().size_bytes;
  }
  si.saved_bytes = si.mapped_bytes - UnitBytes(space_->mapped_units());
  si.soft_threshold_units = space_->soft_threshold_units();
  si.backing_short = si.backing_known &&
                     OutgrowsBacking(si.backing_grows, si.backing_free_bytes, UnitBytes(si.free_units));
  return si;
}

}  // namespace cowstore::store
