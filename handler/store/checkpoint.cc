// SPDX-License-Identifier: Apache-2.0
#include "handler/store/checkpoint.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "handler/store/crc32c.h"
#include "handler/store/format_v3.h"
#include "handler/store/pool_impl.h"
#include "handler/store/pool_journal_space.h"
#include "handler/store/soft_threshold.h"

namespace cowstore::store {

uint64_t CheckpointUnits(uint64_t bytes, uint32_t au) {
  return std::max<uint64_t>(1, DivUp(bytes, au - kChunkHeader));
}

Status WriteCheckpointChain(File* file, uint64_t data_offset, uint32_t au,
                            const std::vector<uint64_t>& aus, const std::string& payload,
                            uint64_t seq, const Uuid& uuid) {
  std::string chunk;
  const size_t per = au - kChunkHeader;
  for (size_t i = 0; i < aus.size(); i++) {
    size_t off = std::min(i * per, payload.size());
    ChunkHeader h;
    h.seq = seq;
    h.index = static_cast<uint32_t>(i);
    h.len = static_cast<uint32_t>(std::min(per, payload.size() - off));
    h.next = i + 1 < aus.size() ? aus[i + 1] : kNone;
    h.uuid = uuid;
    EncodeChunk(h, payload.data() + off, &chunk);
    Status s = file->Write(data_offset + aus[i] * au, chunk.size(), chunk.data());
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status ReadCheckpointChain(File* file, const Superblock& sb, uint64_t units, std::string* payload,
                           std::vector<uint64_t>* aus) {
  payload->clear();
  aus->clear();
  std::vector<char> chunk(sb.au);
  uint64_t p = sb.ckpt_first;
  for (uint32_t i = 0; payload->size() < sb.ckpt_bytes || i == 0; i++) {
    if (p >= units || aus->size() > units)
      return Status(Code::kCorruption, "checkpoint chain leaves the pool");
    Status s = file->Read(sb.data_offset + p * sb.au, sb.au, chunk.data());
    if (!s.ok()) return s;
    ChunkHeader h;
    bool ok = DecodeChunk(chunk.data(), chunk.size(), &h) && h.seq == sb.ckpt_seq &&
              h.index == i && h.uuid == sb.uuid;
    if (!ok)
      return Status(Code::kCorruption, "checkpoint chunk " + std::to_string(i) + " at AU " +
                                           std::to_string(p) + " is damaged");
    aus->push_back(p);
    payload->append(chunk.data() + kChunkHeader, h.len);
    if (payload->size() >= sb.ckpt_bytes) break;
    p = h.next;
  }
  if (payload->size() != sb.ckpt_bytes || Crc32c(0, payload->data(), payload->size()) != sb.ckpt_crc)
    return Status(Code::kCorruption, "checkpoint checksum mismatch");
  return Status::Ok();
}

namespace {

// Whatever failed, the pool has failed (meta_failed_): kIOError, as
// MetaFailed(), whatever code the cause had. kNoSpace or kInvalidArgument
// (no room for the checkpoint, a format's refusal) would promise that
// nothing changed, and kNoSpace would even invite a retry, while every
// later call fails. The message says what it was ("out of memory" for an
// exception, also for Open's checkpoint, whose caller discards the Core).
// (This may throw, outside any catch: the commit queue and the API edge
// catch it.)
Status CheckpointFailed(const Status& s) {
  constexpr std::string_view kReopen = "the pool must be reopened";
  std::string m = s.message();
  if (m.find(kReopen) == std::string::npos) m += "; " + std::string(kReopen);
  return Status(Code::kIOError, std::move(m));
}

// The journal never grows past this share of the pool used, whatever the
// soft threshold (off, or above it): data keeps the last fifth.
constexpr uint32_t kJournalLineMaxPercent = 80;

}  // namespace

// The JournalSpace a growing format 3 checkpoint takes its journal's runs
// from (FormatV3::WriteCheckpoint's overload, journal_segments.h), one per
// attempt: a PoolJournalSpace (pool_journal_space.h: runs taken are handed
// over, a run given back stays handed over) behind Core's metadata lock.
//
// What guards the space: meta_mu_, taken by each Take and Give. The format
// plans its journal inside WriteCheckpoint, outside meta_mu_ (data I/O and
// syncs happen there), while writers reserve and free units concurrently;
// the adapter's PoolSpace* is the pointer Core's space_ holds (made by Load,
// never replaced), and the adapter itself is GUARDED_BY meta_mu_, so every
// path to the space map holds the lock the map's other users hold. The
// leader calls Take and Give only from inside WriteCheckpoint, never under
// meta_mu_ (the lock is not reentrant), and nothing else sees the adapter.
//
// How much it offers (JournalOfferLocked): runs given back (already handed
// over) whenever asked; new runs only while the pool's used units stay
// below the line (the soft threshold, or 80 % if that is off or higher),
// one unit under it, so that the next data allocation is the one that
// crosses the threshold and raises the signal (SoftThresholdCrossed counts
// crossings from below only), and never into the frees' checkpoint room;
// counted again at each Take as writers move it; nothing at or past it. The
// format asks for JournalTargetAus (at least 16 MiB, but at most 1/16 of
// the pool), so a pool made with a small journal gives its first growing
// checkpoint up to that.
class Core::CheckpointJournalSpace final : public JournalSpace {
 public:
  // Reads the space_ pointer only (never replaced), not the space.
  explicit CheckpointJournalSpace(Core* core) : core_(core), inner_(core->space_.get()) {}

  std::optional<JournalExtent> Take(uint64_t max_aus) override {
    MutexLock g(&core_->meta_mu_);
    // A run given back is handed over already: no new space, no offer.
    if (inner_.holds_given()) return inner_.Take(max_aus);
    return inner_.Take(std::min(max_aus, core_->JournalOfferLocked()));
  }
  void Give(const JournalExtent& run) noexcept override {
    MutexLock g(&core_->meta_mu_);
    inner_.Give(run);  // noexcept; a run it cannot keep stays handed over
  }

 private:
  Core* const core_;
  PoolJournalSpace inner_ GUARDED_BY(core_->meta_mu_);
};

uint64_t Core::JournalOfferLocked() const {
  const uint64_t total = space_->total_units();
  // "Off" is the percentage, not a line that rounds to no unit (a small
  // pool at 1 %: the journal gets nothing, as the threshold asks).
  const uint32_t percent = soft_percent_ == 0 ? kJournalLineMaxPercent : std::min(soft_percent_, kJournalLineMaxPercent);
  const uint64_t line = SoftThresholdUnits(total, percent);
  const uint64_t most_used = line == 0 ? 0 : line - 1;  // strictly below the line
  const uint64_t keep_free =
      std::max(total - most_used, UnitsOfAus(CkptReserveLocked(0)));
  const uint64_t free = space_->free_units();
  return free > keep_free ? (free - keep_free) / UnitsOfAus(1) : 0;
}

bool Core::CkptBoundMissedLocked(const FrozenCheckpoint& f) const {
  const uint64_t extents = st_.extents();
  if (f.meta_units > CkptUnits(extents)) return true;
  // Format 3's Freeze asks AUs for its pages less the current chunks' free
  // ones, and the bound rounds up to whole AUs: a bound short by fewer
  // pages than an AU passes the check above (meta_format.h, PagesBound).
  const uint64_t pages = FormatV3::PagesBound(f);
  const std::optional<uint64_t> bound = ckpt_cost_->PagesBound(st_.luns().size(), extents);
  return bound && pages > *bound;
}

Status Core::NoCheckpointRoomLocked() const {
  return Status(Code::kNoSpace,
                "the pool is full: the metadata checkpoint it must write before any more "
                "records (its journal is full, or it was just opened) needs " +
                    std::to_string(ckpt_refused_aus_) + " free allocation units (" +
                    std::to_string(space_->free_whole_aus(ckpt_refused_aus_)) +
                    " now); grow the pool or free space, then retry (reads and overwrites in "
                    "place go on)");
}

// Freezes the state under the metadata lock and takes the AUs the format
// needs for it, then has the format write it outside the lock (checkpoint,
// superblock, journal restart: MetaFormat::WriteCheckpoint); then installs
// the AUs the format says the new checkpoint occupies (its meta_units(),
// not the AUs taken: a format may keep some of the previous checkpoint's
// and leave some taken unused): the previous checkpoint's others are freed
// once nothing can read them, the unused ones at once (PoolSpace::InstallMeta).
//
// A checkpoint that fails, at any step, whether it threw or returned an
// error, fails the pool (meta_failed_, set under meta_mu_ as AppendLocked
// and Grow set it, so nothing passes CheckUsable or AppendLocked in
// between):
// - once the buffered records are dropped (they are in the snapshot), even a
//   failure that wrote nothing leaves changes in memory that no later commit
//   can make durable;
// - a failure may come after the superblock that names the new checkpoint is
//   durable (the second slot, its sync, the journal restart: Core cannot
//   tell before from after), and the space map taking the new checkpoint and
//   freeing the old one (InstallMeta) may stop half done, or refuse a set
//   that disagrees with the AUs it handed over (an engine bug);
// - a failure before anything changed that is not for room (no memory to
//   encode it, a refusal for a bug) fails the pool too: one rule is simpler
//   to trust than two where nothing says the next attempt fares better.
// The one exception is a refusal for room (TakeMeta cannot give the AUs
// Freeze asked for), which changed nothing, wrote nothing and dropped no
// record: it returns kNoSpace (NoCheckpointRoomLocked), the pool does not
// fail, and the commit that asked is refused without failing the queue
// (CommitBatch, CommitQueue::RefuseBatch). Until the AUs it asked for are
// free, AppendLocked refuses every record with kNoSpace (nothing changes
// that the full journal would have to carry); once they are, the next
// record is taken and its commit tries again. The records still buffered
// stay applied in memory and are written by the checkpoint that succeeds
// (or lost with the cache if the pool is closed or cut first, as unflushed
// buffered writes are).
// The commit queue fails too (the error is the commit's), but that alone
// would let reads and LUN changes in memory go on from metadata that
// disagrees with the disk. Reopening rebuilds everything from the durable
// state. The error is always kIOError (CheckpointFailed), the failed pool's
// code, with the cause's message: never kNoSpace, which callers take for the
// refusal for room.
Status Core::CheckpointLocked(uint64_t* target) {
  constexpr std::string_view kWhere = "checkpoint failed";
  Status s;
  FrozenCheckpoint frozen;
  DirtyRanges taken;  // what `frozen` changed (dirty_ranges.h's hand-over)
  std::vector<uint64_t> aus;
  uint64_t start_lsn = 0;
  {
    MutexLock g(&meta_mu_);
    if (meta_failed_.load()) return MetaFailed();  // st_ may be half-changed
    try {
      // track_dirty_ is a copy (AppendLocked may not read format_). Were it
      // ever false for a format that tracks, every Freeze would get an empty
      // set and reuse every leaf: each change since the open silently lost.
      // Refusing costs one virtual call a checkpoint.
      if (track_dirty_ != format_->tracks_dirty()) {
        s = Status(Code::kIOError,
                   "checkpoint refused: the engine's dirty tracking disagrees with the metadata "
                   "format's (a bug); the pool must be reopened");
      } else if (space_->meta_units() != space_->meta_aus().size() * space_->units_per_au()) {
        // Nothing handed over may outlive a checkpoint: InstallMeta frees the
        // AUs handed over but not named at once, without a punch (meta_turnover.h),
        // which is sound only for AUs this checkpoint was handed. An AU left
        // from elsewhere could hold bytes a LUN would then read. A refusal,
        // not an assert, since release builds drop those.
        s = Status(Code::kIOError,
                   "checkpoint refused: metadata AUs were handed over outside a checkpoint (a "
                   "bug); the pool must be reopened");
      } else {
        frozen = format_->Freeze(st_, dirty_);
        freezes_.fetch_add(1, std::memory_order_relaxed);
        last_freeze_pages_.store(FormatV3::PagesBound(frozen), std::memory_order_relaxed);
        if (CkptBoundMissedLocked(frozen)) bound_misses_.fetch_add(1, std::memory_order_relaxed);
        if (space_->TakeMeta(frozen.meta_units, &aus)) {
          ckpt_refused_aus_ = 0;  // the pool takes records again
          // Until this checkpoint is installed, records keep coming, and the
          // one after it shadows the tree this one writes: the Freeze's
          // bound holds over both (a test's stand-in stays).
          if (frozen.next_cost && !cost_for_test_) ckpt_cost_ = frozen.next_cost;
          // The reserve's floor from now on (CkptBoundLocked). Not from a
          // refused Freeze: then ckpt_refused_aus_ gates records, and a
          // floor above the free AUs would refuse overwrites in place too.
          last_ckpt_aus_ = frozen.meta_units;
          *target = jbuf_.last_ticket();
          start_lsn = jbuf_.DropForCheckpoint();  // every buffered record is in the snapshot
          taken = dirty_.Take();  // with the copy: later marks are the next checkpoint's
        } else {
          // Refused before anything changed: TakeMeta took nothing, Freeze
          // is const (a copy; the format's carried marks untouched), no
          // record was dropped, nothing written. The pool serves on
          // (reads, overwrites in place; AppendLocked refuses records until
          // this many AUs are free), and every commit tries again
          // (CommitBatch) until one succeeds. The only kNoSpace this returns.
          ckpt_refused_aus_ = std::max<uint64_t>(frozen.meta_units, 1);
          return NoCheckpointRoomLocked();
        }
      }
    } catch (...) {
      s = StatusFromCurrentException(kWhere);  // never throws
    }
    if (!s.ok()) {
      meta_failed_.store(true);
      return CheckpointFailed(s);
    }
  }
  try {
    if (auto* v3 = dynamic_cast<FormatV3*>(format_.get())) {
      // Format 3 sizes its journal with the map (format_v3.h): a fresh
      // adapter per attempt (pool_journal_space.h says why), guarded as
      // CheckpointJournalSpace says. JournalGrowth is a report only: the
      // install below keeps or retires every AU by meta_units().
      CheckpointJournalSpace space(this);
      JournalGrowth growth;
      s = v3->WriteCheckpoint(file_.get(), frozen, aus, start_lsn, &space, &growth);
    } else {
      s = format_->WriteCheckpoint(file_.get(), frozen, aus, start_lsn);
    }
  } catch (...) {
    s = StatusFromCurrentException(kWhere);
  }
  // The bound over the tree just written, tighter than the Freeze's. Asked
  // here, on the leader (the only thread that changes the format), before
  // the lock; without memory for it, the Freeze's bound holds on: a
  // checkpoint that is durable must not fail the pool for this.
  std::shared_ptr<const CheckpointCost> exact;
  if (s.ok()) {
    try {
      exact = format_->NextCheckpointCost();
    } catch (...) {
    }
  }
  MutexLock g(&meta_mu_);
  if (s.ok()) {
    try {
      s = space_->InstallMeta(format_->meta_units(), *target);
      if (s.ok()) {
        // Every record before start_lsn left the journal: replay never
        // checks those kMapChecked records' data again (checked_grains.h).
        checked_.Vouch(start_lsn - 1);
        if (exact && !cost_for_test_) ckpt_cost_ = std::move(exact);
        return Status::Ok();
      }
    } catch (...) {
      s = StatusFromCurrentException(kWhere);
    }
  }
  try {
    dirty_.Merge(taken);  // the hand-over's contract, though the pool fails
  } catch (...) {
    // No memory: marks lost only matter to a checkpoint, and a failed pool
    // writes none.
  }
  meta_failed_.store(true);
  return CheckpointFailed(s);
}

}  // namespace cowstore::store
