// SPDX-License-Identifier: Apache-2.0
// The pool's engine. Private to handler/store; callers use pool.h.
//
// Core ties the mechanisms together; its member functions live by mechanism:
//   pool_impl.cc   reservations, the commit, flush, grow, space
//   data_path.cc   Read, Write, CompareAndWrite, ZeroRange, Allocate, CloneRange
//   lun_table.cc   create, delete, resize, clone, list and open LUNs
//   checkpoint.cc  CheckpointLocked (and the chain format's I/O)
//   recovery.cc    Create, Open, Load (format choice, geometry checks, rebuild)
//   check.cc       Check
// with the state of three mechanisms in classes of their own: the space map,
// a PoolSpace (pool_space.h; SpaceMap per AU, GrainSpace below the AU), the
// JournalBuffer of records not yet committed (journal.h),
// and the on-disk format, MetaFormat (meta_format.h: superblock, checkpoint,
// journal on disk; FormatV2 for pool formats 1 and 2, FormatV3 for 3).
//
// Locking, outermost first:
//   LunState::lock (range locks, in (LUN id, lba) order)
//   leadership of Core::queue_ (one batch or Exclusive section at a time:
//                    the format's journal tail and superblock; commit_queue.h)
//   Core::meta_mu_   (LUN table and maps, space map, the journal buffer)
// Data I/O never happens under meta_mu_. Durable operations wait for their
// ticket in queue_ after releasing their range locks.
//
// Cancellation: none of these functions is a cancellation-safe region. A
// caller that may be cancelled (tcmu-runner threads) must disable
// cancellation around every store call (pthread_setcancelstate), or a
// cancelled leader would never hand the commit queue on.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/checked_grains.h"
#include "handler/store/commit_queue.h"
#include "handler/store/dirty_ranges.h"
#include "handler/store/env.h"
#include "handler/store/grain_space.h"
#include "handler/store/journal.h"
#include "handler/store/meta.h"
#include "handler/store/meta_format.h"
#include "handler/store/pool.h"
#include "handler/store/pool_space.h"
#include "handler/store/read_spans.h"
#include "handler/store/space_map.h"
#include "handler/store/thinner.h"
#include "handler/store/thread_annotations.h"
#include "handler/store/zero_ahead.h"

namespace cowstore::store {

inline uint64_t DivUp(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
// The most one background punch covers (thinner.h): punching 8 MiB takes
// ~3 ms on ext4 with `-o discard` here, the longest a sync waits behind it.
constexpr uint64_t kPunchSliceBytes = 8ull << 20;
// How many of a region's runs below a write HintLocked looks at for its goal:
// a diverged clone's region alternates shared and own runs, so the nearest
// own one is a run or two down; more would cost every write for little.
constexpr int kHintRunsLooked = 4;
// Zeroing ahead (zero_ahead.h): the stock of warm runs, each at most
// kWarmRunBytes (a chunk's start: the rest of a 1 MiB chunk stays a hole,
// so random first writes, one per new chunk, cost 64 KiB of zeros each and
// not a whole AU); rounds refill it to kWarmRuns, or one run per
// kAusPerWarmRun AUs of a smaller pool, once fewer than half are left. So
// at most 4 MiB of a pool's free space, and 1/16 of a small one, is not thin.
constexpr uint64_t kWarmRunBytes = 64 << 10;
constexpr size_t kWarmRuns = 64;
constexpr uint64_t kAusPerWarmRun = 16;
// After a round found no room: reservations that pass before it is asked
// again (a full pool must not cost every write a wake-up and a lock).
constexpr uint32_t kZeroAheadBackoff = 256;
// A random RFC 4122 version 4 UUID (pools and LUNs).
Uuid NewUuid();
inline Status ReadOnly() { return Status(Code::kInvalidArgument, "pool is open read-only"); }
// A LUN's attributes never change after it is created, so this needs no lock.
inline Status CheckWritable(const LunState& l) {
  if (!l.attrs.read_only) return Status::Ok();
  return Status(Code::kReadOnly, "LUN " + l.name + " is read-only (a snapshot)");
}

class Core final : public RefSink, public std::enable_shared_from_this<Core> {
 public:
  Core(Env* env, std::unique_ptr<File> file, bool read_only)
      : env_(env), file_(std::move(file)), read_only_(read_only),
        queue_([this] { return CommitBatch(); }, [this](uint64_t d) { ReleasePending(d); }),
        zero_ahead_([this] { return ZeroAheadRound(); }),
        thinner_([this](const PendingRun& r) { return PunchRun(r); },
                 [this](const std::vector<PendingRun>& r, const std::vector<bool>& ok) {
                   ReleaseRuns(r, ok);
                 },
                 [this] { return batches_.load(std::memory_order_relaxed); }) {}

  static Result<std::shared_ptr<Core>> Create(Env* env, const std::string& path,
                                              const PoolOptions& o);
  static Result<std::shared_ptr<Core>> Open(Env* env, const std::string& path, bool read_only,
                                            bool accept_journal_loss = false);
  // What recovery gave up under accept_journal_loss (nothing otherwise).
  const JournalLoss& journal_loss() const { return loss_; }

  Status Close() EXCLUDES(queue_, meta_mu_);
  Status CheckUsable() const;

  // Pool operations.
  Result<LunInfo> CreateLun(const std::string& name, uint64_t size, uint32_t bs);
  Status DeleteLun(const std::string& name);
  Status ResizeLun(const std::string& name, uint64_t size);
  Result<LunInfo> CloneLun(const std::string& src, const std::string& dst);
  Result<LunInfo> SnapshotLun(const std::string& src, const std::string& dst);
  Status RollbackLun(const std::string& target, const std::string& snapshot);
  std::vector<LunInfo> ListLuns();
  Result<LunInfo> GetLun(const std::string& name);
  Result<std::shared_ptr<LunState>> Acquire(const std::string& name);
  void ReleaseHandle(LunState* l);
  Status CloneRange(LunState* src, uint64_t src_lba, LunState* dst, uint64_t dst_lba,
                    uint64_t count, Durability d);
  Status Flush();
  Status Grow(uint64_t new_size);
  SpaceInfo Space();
  uint64_t soft_generation() const { return soft_gen_.load(); }
  uint64_t backing_generation() const { return backing_gen_.load(); }
  // kBackingSignalOff becomes a negative interval: never asked.
  void set_backing_check_interval_ms(uint32_t ms) {
    backing_interval_ns_ = ms == kBackingSignalOff ? -1 : int64_t{ms} * 1000000;
  }
  CheckReport Check(ProgressFn progress, void* ctx, bool compare_disk);

  // LUN operations (lba/count in the LUN's blocks).
  Status Read(LunState* l, uint64_t lba, uint64_t count, std::span<const iovec> iov);
  Status Write(LunState* l, uint64_t lba, uint64_t count, std::span<const iovec> iov,
               Durability d);
  Status CompareAndWrite(LunState* l, uint64_t lba, uint64_t count, const void* cmp,
                         const void* data, Durability d);
  Status ZeroRange(LunState* l, uint64_t lba, uint64_t count, Durability d, bool unmap_only);
  Status Allocate(LunState* l, uint64_t lba, uint64_t count, Durability d);
  Result<std::vector<AllocationRun>> AllocationStatus(LunState* l, uint64_t lba, uint64_t count);
  uint64_t BlockCount(LunState* l);
  uint32_t au() const { return au_; }
  uint32_t grain() const { return grain_; }
  Uuid uuid() const { return sb_uuid_; }

  Pool* owner = nullptr;

  // Tests: the separate ranges marked dirty since the last checkpoint
  // (always 0 for a format that does not track them).
  size_t DirtyRangesForTest() EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    return dirty_.ranges();
  }
  // Tests: how many checkpoints have frozen the state (freezes_).
  uint64_t FreezesForTest() const { return freezes_.load(); }
  // Tests: how many Freezes asked for more than the format's bound promised
  // for that state (CkptBoundMissedLocked): a bound that fell short.
  uint64_t CkptBoundMissesForTest() const { return bound_misses_.load(); }
  // Tests: the pages the last Freeze bounded its checkpoint's writes by
  // (FormatV3::PagesBound; 0 for format 2), to build a bound short of it
  // by one page.
  uint64_t LastFreezePagesForTest() const { return last_freeze_pages_.load(); }
  // Tests: a bound that falls short (one that returns fewer AUs than a
  // checkpoint takes), in place of the format's from now on, to reach the
  // state a bug in a bound would leave: a checkpoint refused for room with
  // records applied. Null: the format's again, from the next checkpoint.
  void SetCheckpointCostForTest(std::shared_ptr<const CheckpointCost> c) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    cost_for_test_ = c;
    if (c) ckpt_cost_ = std::move(c);
  }
  // Tests: breaks what CheckpointLocked checks (track_dirty_ below).
  void SetTrackDirtyForTest(bool on) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    track_dirty_ = on;
  }

  // Tests: hands `n` AUs over as TakeMeta does for a checkpoint, outside
  // one (breaks what CheckpointLocked checks before it takes its own).
  bool TakeMetaForTest(uint64_t n) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    std::vector<uint64_t> aus;
    return space_->TakeMeta(n, &aus);
  }

  // Tests: runs `f` on the space map under meta_mu_ (to damage a count the
  // check must find).
  template <class F>
  void WithSpaceForTest(F f) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    f(*space_);
  }
  // Tests: waits until the zeroing-ahead rounds asked for have run.
  void DrainZeroAheadForTest() { zero_ahead_.Drain(); }
  // Tests: one round on the caller's thread (whatever the stock).
  void ZeroAheadRoundForTest() { (void)ZeroAheadRound(); }
  // Tests: what each round calls once it holds its grains, before it
  // writes them, on its own thread with no lock held (to act in that span).
  void SetZeroAheadHookForTest(std::function<void()> hook) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    zero_ahead_hook_ = std::move(hook);
  }
  // The LUN table and maps, read under the lock (where data landed).
  template <typename F>
  void WithStateForTest(F f) EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    f(static_cast<const MetaState&>(st_));
  }

  // RefSink: ApplyRecord's reference changes, from AppendLocked.
  Status CanInc(std::span<const Run> runs) const override REQUIRES(meta_mu_);
  Status Inc(uint64_t phys, uint64_t n) override REQUIRES(meta_mu_);
  void Dec(uint64_t phys, uint64_t n) override REQUIRES(meta_mu_);

 private:
  // Reads the pool (superblock, checkpoint, journal) into memory; a writable
  // pool then writes a fresh checkpoint. Runs as queue_'s exclusive leader
  // (nothing else can reach the pool during open, but the analysis checks it).
  Status Load() EXCLUDES(queue_, meta_mu_) {
    CommitQueue::ExclusiveGuard leader(&queue_);
    return LoadLocked();
  }
  Status LoadLocked() REQUIRES(queue_) EXCLUDES(meta_mu_);
  // Makes the space map for the format Load chose (space_, flat_space_).
  void NewSpaceLocked() REQUIRES(meta_mu_);
  // Returns once `ticket` is durable (group commit through queue_).
  Status Commit(uint64_t ticket) EXCLUDES(queue_, meta_mu_) { return queue_.Wait(ticket); }
  // A durable operation's commit: its own ticket (the newest record it
  // appended or whose effect it observed), which covers everything buffered
  // before it too; one that appended and observed nothing (ticket 0) waits
  // for everything buffered so far (pool.h: a durable call makes earlier
  // buffered ones durable).
  Status CommitOwn(uint64_t ticket) EXCLUDES(queue_, meta_mu_) {
    return Commit(ticket ? ticket : CurrentSeq());
  }
  // queue_'s commit function: one batch (or a checkpoint when the journal is
  // full). Called by queue_ only, as its leader.
  Result<uint64_t> CommitBatch() EXCLUDES(meta_mu_);
  // Fails the pool (meta_failed_, under meta_mu_): reads, writes and LUN
  // changes answer MetaFailed() until it is reopened.
  void FailPool() EXCLUDES(meta_mu_);
  // kNoSpace only for a refusal for room that changed nothing (the pool
  // serves on: checkpoint.cc); every other failure fails the pool (kIOError).
  Status CheckpointLocked(uint64_t* target) REQUIRES(queue_) EXCLUDES(meta_mu_);
  // The kNoSpace of a checkpoint refused for room, and of every record
  // refused until that room is free (ckpt_refused_aus_).
  Status NoCheckpointRoomLocked() const REQUIRES(meta_mu_);
  // A checkpoint was refused for room and fewer whole AUs than it asked are
  // free still: records are refused (AppendLocked) and so is a commit,
  // without a Freeze (CommitBatch).
  bool ShortOfRefusedCheckpointLocked() const REQUIRES(meta_mu_);
  // Format 3's journal growth: the JournalSpace a checkpoint attempt hands
  // FormatV3 (checkpoint.cc: what guards the space, how much it offers),
  // and that offer, in whole AUs.
  class CheckpointJournalSpace;
  uint64_t JournalOfferLocked() const REQUIRES(meta_mu_);
  // queue_'s after-hook: hands the runs whose freeing record is now durable
  // to thinner_, which punches them and then ReleaseRuns them (thinner.h).
  void ReleasePending(uint64_t target) EXCLUDES(meta_mu_);
  // ReleasePending's rule for one-sync writes: moves the runs of *ready
  // that hold an unvouched checked grain into held_, and the held runs now
  // vouched for into *ready.
  void HoldUnvouchedLocked(std::vector<PendingRun>* ready) REQUIRES(meta_mu_);
  bool PunchRun(const PendingRun& r) EXCLUDES(meta_mu_);
  // Zeroing ahead (zero_ahead.h). One round: reserves up to the stock's
  // missing warm runs (kNoLun: from the index, next to the last round's),
  // writes zeros over them and syncs, then gives them back as free and
  // warm; if a write or the sync fails they go to quarantine instead.
  // Nothing while the pool is closed or failed, or without room to spare
  // (twice its own AUs past what keeps chunks open). Returns false: one
  // round refills the stock, and the next low stock asks again (ZeroAhead's
  // "another at once").
  bool ZeroAheadRound() EXCLUDES(meta_mu_);
  // Space that comes back without a new record: pending frees (and their
  // punches), and a zeroing-ahead round's reservation. ReclaimPending waits
  // for both, so a caller short of room retries after it when this holds.
  bool SpaceComingBackLocked() const REQUIRES(meta_mu_) {
    return space_->has_pending() || zeroing_grains_ != 0;
  }
  // After a reservation for a LUN: asks for a round when the stock is low.
  void MaybeZeroAheadLocked() REQUIRES(meta_mu_);
  // The stock a round refills to (kWarmRuns, less in a small pool).
  size_t WarmTargetLocked() const REQUIRES(meta_mu_);
  // Close: punches the warm runs left (the pool closes as thin as its maps
  // say), each out of free space meanwhile. REQUIRES: no round running.
  void PunchWarmRuns() EXCLUDES(meta_mu_);
  void ReleaseRuns(const std::vector<PendingRun>& runs, const std::vector<bool>& zeroed)
      EXCLUDES(meta_mu_);
  // An allocation found too little free while frees are under way: makes
  // them durable (and vouched for, where held_ holds them), then waits for
  // (and helps) their punches. Call without meta_mu_, then retry once.
  Status ReclaimPending() EXCLUDES(queue_, meta_mu_);
  // Applies `r` and buffers it; returns its ticket. An error if ApplyRecord
  // refuses it (a reference count would overflow): then nothing changed and
  // nothing was buffered. std::bad_alloc (from framing) also changes
  // nothing. If ApplyRecord throws, the state may be half-changed: the pool
  // fails (MetaFailed, sticky: see meta_failed_). `clone_pieces`: a kClone's
  // source pieces the caller looked up under this hold (ApplyRecord's).
  Result<uint64_t> AppendLocked(const Record& r, const std::vector<Run>* clone_pieces = nullptr)
      REQUIRES(meta_mu_);
  // The error of a failed pool (meta_failed_).
  static Status MetaFailed();
  // The highest durable LSN, which every record framed now carries as its
  // `proven`. Safe without leading queue_ (the analysis cannot see it):
  // MetaFormat::durable_lsn() is atomic and raised only once what it names
  // is durable, so any value read is durable; a stale one merely vouches for
  // less. format_ itself is set once, by Load, before the Core is shared;
  // whatever replaces it later (an in-place upgrade) must also hold meta_mu_,
  // under which AppendLocked calls this.
  uint64_t DurableLsn() const NO_THREAD_SAFETY_ANALYSIS { return format_->durable_lsn(); }
  // The format's bound on the next checkpoint's AUs (ckpt_cost_) for the
  // LUNs there are and `extents` extents.
  uint64_t CkptUnits(uint64_t extents) const REQUIRES(meta_mu_);
  // Whether `f`, frozen from st_ as it stands, asks more than ckpt_cost_
  // promised for it: more AUs than CkptUnits, or, when both the Freeze and
  // the bound count pages (format 3: CheckpointCost::PagesBound), more
  // pages. Counted in bound_misses_ (tests); changes nothing else.
  bool CkptBoundMissedLocked(const FrozenCheckpoint& f) const REQUIRES(meta_mu_);
  // The checkpoint AUs room must keep for `extents` extents: CkptUnits, but
  // at least the AUs the last checkpoint asked (last_ckpt_aus_). The one
  // rule CkptReserveLocked and AffordableToFreeLocked both use.
  uint64_t CkptBoundLocked(uint64_t extents) const REQUIRES(meta_mu_);
  uint64_t CurrentSeq() EXCLUDES(meta_mu_) {
    MutexLock g(&meta_mu_);
    return jbuf_.last_ticket();
  }
  // Checkpoint room that only frees may use. Everything that makes the pool
  // hold more (a write that allocates, a new LUN, a clone, a snapshot, a
  // rollback, an in-pool copy) must leave room for this many more extents
  // on top of its own, so that on a full pool UNMAP and WRITE SAME of zeros,
  // which may split extents without freeing anything at once (shared data),
  // still fit: ~1,000 of them, each giving back its AUs if unshared.
  // At most one AU of the pool at either format (store.md, "Space", gives
  // each format's figure).
  static constexpr uint64_t kFreeingReserveExtents = 1024;
  // Room for `need` more grains and `extra_extents` more extents, leaving the
  // frees' reserve (none is needed by what allocates nothing and adds no
  // extent: an overwrite in place).
  bool AffordableLocked(uint64_t need, uint64_t extra_extents) const REQUIRES(meta_mu_);
  // The checkpoint AUs that room keeps for `extra_extents` more extents and
  // the frees' reserve: what AffordableLocked counts, what a data
  // reservation keeps whole (ReserveLocked) and the journal's offer leaves.
  uint64_t CkptReserveLocked(uint64_t extra_extents) const REQUIRES(meta_mu_);
  // Room for a free that adds up to `extra_extents` extents; may use the reserve.
  bool AffordableToFreeLocked(uint64_t extra_extents) const REQUIRES(meta_mu_);
  // The kNoSpace of an operation that needs `need` more grains than fit;
  // its free figure includes the checkpoint room (pool_impl.cc says why).
  Status PoolFullLocked(uint64_t need) const REQUIRES(meta_mu_);
  // Takes `need` grains for an operation, near where `hint` says
  // (HintLocked). kNoSpace if the pool cannot give them while keeping room
  // for a checkpoint.
  Status ReserveLocked(uint64_t need, uint64_t extra_extents, std::vector<uint64_t>* out,
                       const AllocHint& hint = {}) REQUIRES(meta_mu_);
  // Where a write of l's grains from `first_grain` on should get its new
  // grains (store-v3.md 3.5): the chunk of its 1 MiB LBA region, and as goal
  // the grain after the region's nearest grain below that l alone owns (so
  // a region whose chunk was closed continues next to its own data).
  AllocHint HintLocked(const LunState& l, uint64_t first_grain) const REQUIRES(meta_mu_);
  // Returns reserved grains that may hold data: zero them, then free them.
  void Unreserve(const std::vector<uint64_t>& grains, bool dirty) EXCLUDES(meta_mu_);
  // The one conversion between the space map's unit and AUs and bytes.
  // space_ counts grains (SpaceMap at grain == AU, where a grain is the AU;
  // GrainSpace below), the format's geometry and checkpoint chunks count
  // AUs, and what Space() and LunInfo report is bytes or grains: every
  // count crosses here, never through au_ directly.
  uint64_t UnitsOfAus(uint64_t aus) const { return aus * (au_ / grain_); }
  uint64_t UnitBytes(uint64_t units) const { return units * grain_; }
  // Where physical AU p (a checkpoint chunk) and physical grain p begin.
  uint64_t AuOffset(uint64_t p) const { return data_offset_ + p * au_; }
  uint64_t GrainOffset(uint64_t p) const { return data_offset_ + p * grain_; }
  Status CheckRange(LunState* l, uint64_t lba, uint64_t count) EXCLUDES(meta_mu_);
  Status CheckRangeLocked(LunState* l, uint64_t lba, uint64_t count) REQUIRES(meta_mu_);
  LunInfo InfoLocked(const LunState& l) const REQUIRES(meta_mu_);
  // Byte-range data paths; REQUIRE the caller's range lock (exclusive for
  // writes) covering the grains touched. Write returns a commit ticket.
  Status ReadBytes(LunState* l, uint64_t off, uint64_t len, uint8_t* dst) EXCLUDES(meta_mu_);
  // The file reads of l's mapped bytes [off, off + len) (read_spans.h), in
  // LBA order, and the unmapped bytes of the request (which read as zeros).
  Status MappedPieces(LunState* l, uint64_t off, uint64_t len, std::vector<ReadPiece>* out,
                      std::vector<ReadHole>* holes) EXCLUDES(meta_mu_);
  Status ReadBytesV(LunState* l, uint64_t off, uint64_t len, std::span<const iovec> iov)
      EXCLUDES(meta_mu_);
  // Tells l's read-ahead (read_ahead.h) of a read of [off, off + len), and
  // asks the file for the small requests of the bytes it says come next.
  void ReadAheadOf(LunState* l, uint64_t off, uint64_t len) EXCLUDES(meta_mu_);
  Status WriteBytes(LunState* l, uint64_t off, uint64_t len, const uint8_t* src, uint64_t* ticket)
      EXCLUDES(queue_, meta_mu_);
  Status WriteBytesChunk(LunState* l, uint64_t off, uint64_t len, const uint8_t* src,
                         uint64_t* ticket) EXCLUDES(queue_, meta_mu_);
  // Blocks a caller asks to have checked (CheckRangeLocked) in the hold that
  // changes the map, rather than in a hold of their own.
  struct BlocksToCheck {
    uint64_t lba, count;
  };
  Status UnmapGrains(LunState* l, uint64_t w0, uint64_t w1, uint64_t* ticket,
                     const BlocksToCheck* check = nullptr) EXCLUDES(queue_, meta_mu_);
  Status ZeroBytes(LunState* l, uint64_t off, uint64_t len, uint64_t* ticket)
      EXCLUDES(queue_, meta_mu_);
  // Thin on thin, after an allocation: at most once per interval asks the
  // Env what the backing store has free; finding it newly short of the
  // pool's remaining growth (OutgrowsBacking) bumps backing_gen_. Never under
  // meta_mu_: it is a system call, which may wait on a network filesystem.
  void PollBacking() EXCLUDES(meta_mu_);
  Result<LunInfo> CopyLun(const std::string& src, const std::string& dst, bool snapshot);

  Env* env_;
  std::unique_ptr<File> file_;
  bool read_only_;
  bool accept_journal_loss_ = false;  // OpenOptions::accept_journal_loss
  JournalLoss loss_;
  std::atomic<bool> closed_{false};

  // Geometry (fixed after open; the pool's AU count is space_'s, which Grow
  // changes under both locks).
  //
  // au_ is the allocation chunk and the on-disk geometry: the data area's
  // alignment, checkpoint chunks, the pool's size in units, what Space()
  // reports. grain_ is the unit of sharing (store-v3.md 3.1): LUN maps
  // (logical and physical), range locks, copy-on-write, the in-place rule,
  // unshared marks, reference counts, reservations, pending frees and the
  // punches that zero them are all in grains (GrainRule holds).
  //
  // v1/v2 pools run at grain_ == au_ (FormatV2 sets grain_ = au_), with the
  // flat SpaceMap, whose unit is then both; format 3 may have grain_ < au_,
  // counted by a GrainSpace in grains (NewSpaceLocked). Load sets grain_
  // from the format's geometry; nothing else sets it.
  uint32_t au_ = 0;
  uint32_t grain_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t size_bytes_ GUARDED_BY(meta_mu_) = 0;  // declared size
  // The superblock's soft threshold percentage (0: off), set by Load: the
  // journal's offer (JournalOfferLocked) reads it.
  uint32_t soft_percent_ GUARDED_BY(meta_mu_) = 0;
  Uuid sb_uuid_{};

  // Group commit: the durable ticket, the sticky failure (a failed commit:
  // the pool must be reopened), one batch in flight at a time. Its
  // leadership (a batch or an Exclusive section) is a capability: what only
  // the leader may touch is GUARDED_BY(queue_).
  CommitQueue queue_ ACQUIRED_BEFORE(meta_mu_);
  // The on-disk format (superblock, checkpoint, the journal's tail and
  // durable LSN), chosen by Load from the superblocks' version. Only the
  // leader calls it, except DurableLsn.
  std::unique_ptr<MetaFormat> format_ PT_GUARDED_BY(queue_);

  mutable Mutex meta_mu_;
  // The LUN table and maps. LunState's fields other than its range lock are
  // guarded by meta_mu_ too (the analysis cannot name it from meta.h).
  MetaState st_ GUARDED_BY(meta_mu_);
  // CloneRange's source pieces, kept between calls so that a clone under
  // the lock allocates nothing once it has grown (every use is within one
  // hold: filled, then read by AppendLocked).
  std::vector<Run> clone_pieces_ GUARDED_BY(meta_mu_);
  // The space map, made by Load for the pool's geometry (NewSpaceLocked:
  // the flat SpaceMap at grain == AU, a GrainSpace below), and never
  // replaced. flat_space_ / grain_space_ are the same object typed, for the
  // check, which compares what only that class has (the flat map's per-AU
  // states, GrainSpace's shared records); the other is null. Everything
  // else goes through space_, in its units (grains: UnitsOfAus and UnitBytes convert).
  std::unique_ptr<PoolSpace> space_ PT_GUARDED_BY(meta_mu_);
  SpaceMap* flat_space_ PT_GUARDED_BY(meta_mu_) = nullptr;
  GrainSpace* grain_space_ PT_GUARDED_BY(meta_mu_) = nullptr;
  JournalBuffer jbuf_ GUARDED_BY(meta_mu_);  // records not yet committed; hands out tickets
  // What the records applied since the last checkpoint changed
  // (dirty_ranges.h), marked by AppendLocked's ApplyRecord when
  // track_dirty_; CheckpointLocked hands it to Freeze and takes it in the
  // same critical section, and merges it back if the checkpoint fails. A
  // replay's changes are the format's to mark (FormatV3 carries every LUN
  // after an open that replayed records).
  DirtyRanges dirty_ GUARDED_BY(meta_mu_);
  // format_->tracks_dirty(), copied by LoadLocked (under meta_mu_, before
  // the Core is shared) when it chooses the format: AppendLocked holds
  // meta_mu_, not the queue's leadership format_ is guarded by. A copy can
  // go stale where format_ is set anew: CheckpointLocked refuses (fails the
  // pool) if they differ, rather than checkpoint a tracking format with no
  // marks.
  bool track_dirty_ GUARDED_BY(meta_mu_) = false;
  // format_->writes_checked_maps(), copied by LoadLocked as track_dirty_ is
  // (and for the same reason): whether a small write that maps new grains
  // takes the one-sync path (WriteBytesChunk, data_path.cc).
  bool one_sync_ GUARDED_BY(meta_mu_) = false;
  // The grains of kMapChecked records no durable record vouches for yet
  // (checked_grains.h says why they must not change): not writable in place
  // (WriteBytesChunk), and a durably freed run holding one waits in held_.
  // Vouched as batches commit (CommitBatch: the batch's `proven`) and by
  // each checkpoint (every record it holds leaves the journal).
  CheckedGrains checked_ GUARDED_BY(meta_mu_);
  // Runs whose freeing record is durable but which hold a grain checked_
  // has not seen vouched for, each with the LSN whose vouch frees it
  // (CheckedGrains::NeededLsn): handed to thinner_ by the ReleasePending
  // that finds it vouched. At most one run per unvouched grain (the runs
  // are disjoint), so bounded as checked_ is; they stay "releasing" in
  // space_ meanwhile (thinning space, as a punch in progress).
  std::vector<std::pair<uint64_t, PendingRun>> held_ GUARDED_BY(meta_mu_);
  // A metadata update failed part way (AppendLocked), a checkpoint failed
  // (checkpoint.cc says why each one counts), or the space map could not
  // take a size Grow had made durable, or a journal batch or Grow failed
  // (FailPool: the OS may have forgotten data the maps point at): st_ and
  // space_ may be half-changed or disagree with the disk, so every
  // operation fails, reads too, and no batch or
  // checkpoint writes anything from now on (both look under meta_mu_, where
  // it is set).
  std::atomic<bool> meta_failed_{false};
  // Not 0 while the last checkpoint was refused for room (checkpoint.cc):
  // the whole AUs it asked for. The journal is full and the records
  // buffered cannot be written until a checkpoint succeeds, so AppendLocked
  // refuses every record (kNoSpace, nothing changed) while fewer whole AUs
  // than this are free; reads and overwrites in place (no record) go on.
  // While it is set, every commit is that checkpoint again (CommitBatch),
  // whatever the journal holds: it is also set by an open that could not
  // checkpoint (recovery.cc), after which nothing may be appended to the
  // journal as replayed. Cleared when a checkpoint takes its AUs.
  uint64_t ckpt_refused_aus_ GUARDED_BY(meta_mu_) = 0;
  // The AUs the last checkpoint that took its AUs asked (its Freeze's
  // meta_units): a floor under the checkpoint reserve (CkptBoundLocked).
  uint64_t last_ckpt_aus_ GUARDED_BY(meta_mu_) = 0;
  // The format's bound on what its next checkpoint takes: the load's
  // (MetaFormat::NextCheckpointCost), then each Freeze's next_cost while its
  // checkpoint is written, then that checkpoint's NextCheckpointCost. Read by
  // every reservation under meta_mu_.
  std::shared_ptr<const CheckpointCost> ckpt_cost_ GUARDED_BY(meta_mu_);
  std::shared_ptr<const CheckpointCost> cost_for_test_ GUARDED_BY(meta_mu_);  // sticky override
  std::atomic<uint64_t> bound_misses_{0};  // Freezes past the bound (tests)
  std::atomic<uint64_t> last_freeze_pages_{0};  // LastFreezePagesForTest
  // Freezes run (each copies the state under meta_mu_): tests count them.
  std::atomic<uint64_t> freezes_{0};
  std::atomic<uint64_t> soft_gen_{0};     // soft_threshold_percent crossings
  std::atomic<uint64_t> backing_gen_{0};  // backing store crossings (thin on thin)
  // PollBacking's state: when it may ask next (steady clock, ns), and what
  // it found last (short: the crossing was signalled).
  std::atomic<int64_t> backing_next_ns_{0};
  int64_t backing_interval_ns_ = -1;  // set once, before the pool is shared
  std::atomic<bool> backing_short_{false};
  // Raised at the start and at the end of every commit batch, so odd while one
  // is in flight: thinner_ punches when it is even and has stopped changing (a
  // punch delays the syncs it overlaps, thinner.h).
  std::atomic<uint64_t> batches_{0};
  // Zeroing ahead: on for format 3 below the AU (where chunks are), on a
  // file whose writes into holes allocate (File::WritesAllocate), opened
  // read-write. Set by NewSpaceLocked before the Core is shared.
  bool zero_ahead_on_ GUARDED_BY(meta_mu_) = false;
  uint64_t warm_goal_ GUARDED_BY(meta_mu_) = AllocHint::kNoGoal;  // where the last round ended
  uint32_t zero_ahead_backoff_ GUARDED_BY(meta_mu_) = 0;  // kZeroAheadBackoff
  uint64_t zeroing_grains_ GUARDED_BY(meta_mu_) = 0;  // reserved by the round in flight
  std::function<void()> zero_ahead_hook_ GUARDED_BY(meta_mu_);  // SetZeroAheadHookForTest
  // What a round syncs through (NewSpaceLocked says why not file_->Sync):
  // set with zero_ahead_on_ before the Core is shared, then only read.
  std::unique_ptr<File::SyncHandle> zero_ahead_sync_;
  // Last: destroyed first, so their workers stop before what they touch goes.
  ZeroAhead zero_ahead_;
  Thinner thinner_;
};

// Tests: the Core behind a Pool that Pool::Create or Pool::Open returned.
Core* CoreOfForTest(Pool* p);

}  // namespace cowstore::store
