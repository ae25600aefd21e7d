// SPDX-License-Identifier: Apache-2.0
// Format v3's journal placement (docs/design/store-v3.md 3.4, plan step 5):
// the journal is a ring of `capacity` bytes made of the superblock's extents
// (runs of AUs in the data area, in journal order; superblock_v3.h). This
// file maps ring bytes to the device, appends batches at the ring's tail,
// gathers the ring for replay, and plans the journal's growth at a
// checkpoint, for FormatV3 (format_v3.h).
//
// Positions. Writers keep two *logical* positions that only grow: `start`
// (where replay begins, the superblock's journal_start on the first lap) and
// `tail` (where the next batch goes), with start <= tail <= start + capacity;
// a position's ring offset is position % capacity. Full and empty then differ
// (tail - start == capacity vs 0) without a wasted byte or a flag.
//
// Replay. JournalRingSource presents the `capacity` bytes from the replay
// start round the ring as one journal region, read piece by piece through
// replay's bounded window (journal_source.h), so ReplayJournal runs
// unchanged: a record cut by a segment boundary or by the wrap is
// contiguous there. Past the live records the region holds, in ring order,
// what this journal held before the replay start: records of earlier laps and of the generation the
// last checkpoint closed, every one with a lower LSN than the replay start
// (LSNs only grow, and each open skips 2^32 of them). ReplayJournal ends
// replay at the first record without the expected LSN and looks past it only
// for records with *later* LSNs, so those bytes neither replay nor make a
// healthy journal refuse; a damaged record is still refused when a later
// record vouches for it, in whatever segment that record lies
// (store_journal_segments_test shows each case).
//
// What the ring adds for the caller (plan step 7):
//  * a batch cut by a power loss, in any of its pieces, is a torn tail: no
//    record of it vouches for it (their `proven` predates the batch), so
//    replay stops in it and does not call it damage;
//  * after a checkpoint the journal is empty: the new replay start is the
//    tail rounded up to the pool's write unit (Restart), with the
//    next LSN; nothing needs punching, the old records' LSNs are all lower;
//  * a segment new to the journal (GrowJournal's `allocated`) held data, and
//    a guest can write bytes that frame as a record with a plausible LSN:
//    ClearJournalRuns must zero it, and a sync follow, before the superblock
//    that names it is written (then replay starts at offset 0 of the new
//    list). Extents a plan drops (`freed`) hold old records only: they are
//    free space once that superblock is durable (3.6: open punches free runs).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/journal.h"
#include "handler/store/journal_source.h"
#include "handler/store/status.h"
#include "handler/store/superblock_v3.h"

namespace cowstore::store {

// Device bytes [offset, offset + len) holding part of a ring range.
struct RingPiece {
  uint64_t offset = 0;
  uint64_t len = 0;
  bool operator==(const RingPiece&) const = default;
};

class JournalLayout {
 public:
  // kInvalidArgument unless the list is one the superblock accepts: an AU
  // ValidAllocationUnit allows, extents JournalExtentsRule accepts (the
  // superblock codec's own rule), and a data area
  // [data_offset, data_offset + units * AU) that does not overflow.
  static Result<JournalLayout> Make(uint32_t au, uint64_t data_offset, uint64_t units,
                                    std::vector<JournalExtent> extents);
  static Result<JournalLayout> Of(const SuperblockV3& sb) {
    return Make(sb.au, sb.data_offset, sb.units, sb.journal);
  }

  uint64_t capacity() const { return capacity_; }
  const std::vector<JournalExtent>& extents() const { return extents_; }

  // Replaces *out with the device pieces of ring bytes [pos, pos + len), in
  // ring order: split at every extent boundary and wrapping at the capacity
  // (pos is a logical position, taken modulo the capacity). kInvalidArgument
  // if len > capacity (the range would overlap itself).
  Status Map(uint64_t pos, uint64_t len, std::vector<RingPiece>* out) const;

 private:
  JournalLayout() = default;
  uint32_t au_ = 0;
  uint64_t data_offset_ = 0;
  uint64_t capacity_ = 0;
  std::vector<JournalExtent> extents_;
  std::vector<uint64_t> ends_;  // ring offset where each extent ends (cumulative)
};

// The ring's tail on disk and the commit step that appends to it: the v3
// counterpart of JournalWriter, with the same order of syncs (CommitJournalBatch).
class JournalRing {
 public:
  // A ring whose replay starts at logical position `start` (the superblock's
  // journal_start on an open, 0 after the list changed) and whose records
  // end at `tail` (start + ReplayEnd::tail after replay). kInvalidArgument
  // unless start <= tail <= start + capacity.
  static Result<JournalRing> Open(JournalLayout layout, uint64_t start, uint64_t tail);

  const JournalLayout& layout() const { return layout_; }
  uint64_t start() const { return start_; }
  uint64_t tail() const { return tail_; }
  // False if `bytes` more would overwrite live records (those from the
  // replay start on): the pool must checkpoint first.
  bool Fits(size_t bytes) const { return bytes <= layout_.capacity() - (tail_ - start_); }

  // Writes `bytes` at the tail, one Env write per piece, without a sync and
  // without moving the tail. kNoSpace (nothing written) unless Fits.
  Status WriteAtTail(File* file, const std::string& bytes) const;
  // The commit step (CommitJournalBatch around WriteAtTail): on success the batch
  // is durable and the tail moves past it; on failure the tail stays and
  // the pool must be reopened (what reached the disk is a torn tail).
  Status WriteBatch(File* file, const JournalBatch& b);

  // After a checkpoint made every record obsolete: the journal is empty and
  // replay starts at the tail rounded up to `write_unit` (the superblock's
  // write_unit: its rule for journal_start, so a torn append never shares a
  // write unit with the start). Returns the new start's ring offset, for the
  // superblock's journal_start.
  uint64_t Restart(uint32_t write_unit);
  // The ring offset Restart(write_unit) would return, without restarting:
  // the superblock that names it is written before the ring restarts.
  uint64_t RestartOffset(uint32_t write_unit) const {
    return RoundUp(tail_, write_unit) % layout_.capacity();
  }
  // Raises durable_lsn() to `lsn` (never lowers it): a checkpoint made every
  // record before its start LSN durable, journaled or not.
  void RaiseDurableLsn(uint64_t lsn) {
    if (lsn > durable_lsn()) durable_lsn_.store(lsn, std::memory_order_release);
  }

  // The highest LSN known durable (set only after a batch's sync returned).
  // Atomic, as JournalWriter's: whoever frames records reads it
  // (Core::DurableLsn) without leading the commit queue; release/acquire so
  // a reader that sees an LSN also sees that its sync had returned.
  uint64_t durable_lsn() const { return durable_lsn_.load(std::memory_order_acquire); }

  // Movable for Open's Result only: a ring is moved before anyone shares it.
  JournalRing(JournalRing&& o) noexcept
      : layout_(std::move(o.layout_)), start_(o.start_), tail_(o.tail_), durable_lsn_(o.durable_lsn()) {}
  JournalRing& operator=(JournalRing&& o) noexcept {
    layout_ = std::move(o.layout_);
    start_ = o.start_;
    tail_ = o.tail_;
    durable_lsn_.store(o.durable_lsn(), std::memory_order_release);
    return *this;
  }

 private:
  explicit JournalRing(JournalLayout layout) : layout_(std::move(layout)) {}
  static uint64_t RoundUp(uint64_t pos, uint32_t unit) { return (pos + unit - 1) / unit * unit; }
  JournalLayout layout_;
  uint64_t start_ = 0;
  uint64_t tail_ = 0;
  std::atomic<uint64_t> durable_lsn_{0};
};

// The ring's `capacity` bytes from ring offset `start` round to just before
// it, as the journal region ScanJournal/ReplayJournal take (see the header
// comment): their ReplayEnd::tail is then the live bytes after `start`.
// Reads one device piece per extent crossed; holds nothing itself.
class JournalRingSource : public JournalSource {
 public:
  JournalRingSource(File* file, JournalLayout layout, uint64_t start)
      : file_(file), layout_(std::move(layout)), start_(start) {}
  uint64_t size() const override { return layout_.capacity(); }
  Status Read(uint64_t offset, size_t n, uint8_t* buf) override;

 private:
  File* file_;
  JournalLayout layout_;
  uint64_t start_;
};

// Zeros (ZeroFill) `runs` of the layout's data area: segments new to the
// journal, before the superblock that names them (see the header comment).
// The caller syncs.
Status ClearJournalRuns(File* file, uint32_t au, uint64_t data_offset,
                        const std::vector<JournalExtent>& runs);

// --------------------------------------------------------------- growth

// The journal 3.4 sizes with the map: max(16 MiB, 48 bytes x extents),
// capped at kMaxJournalBytes, in whole AUs (rounded up below the cap), and
// at 1/16 of the pool's `pool_aus` (rounded down, at least one AU: the
// rest of a pool is for data; why 1/16 is at the definition); never below
// `current_aus`, the journal's size now, as GrowJournal never shrinks it.
uint64_t JournalTargetAus(uint64_t map_extents, uint32_t au, uint64_t pool_aus, uint64_t current_aus);

// Where new segments come from: the engine plugs its free space in here
// (FreeSpace::Allocate / Unreserve over whole AUs).
class JournalSpace {
 public:
  virtual ~JournalSpace() = default;
  // Takes a free run of 1 .. max_aus AUs, the longest there is up to that
  // (so a journal gets few long runs); nullopt when none is free. A longer
  // run is allowed: the planner keeps what it needs and gives the rest back.
  virtual std::optional<JournalExtent> Take(uint64_t max_aus) = 0;
  // Returns a run Take handed out that the plan does not use. Must not
  // throw: it runs on failure paths too (FormatV3's checkpoint gives back
  // every run after a failure, a std::bad_alloc included), and a run it
  // could not take back would be lost to the space.
  virtual void Give(const JournalExtent& run) = 0;
};

struct JournalPlan {
  std::vector<JournalExtent> extents;    // the list for the new superblock
  std::vector<JournalExtent> allocated;  // taken from the space: ClearJournalRuns them
  std::vector<JournalExtent> freed;      // current extents no longer listed
  bool changed() const { return !allocated.empty() || !freed.empty(); }
};

// Plans the journal at a checkpoint (it is empty then, so the list may be
// replaced), within kMaxJournalExtents extents of at most
// kMaxJournalExtentAus AUs (with AUs >= 64 KiB the 1 GiB cap is 16,384 AUs,
// so only a run longer than asked meets that bound; it is cut). Below
// `target_aus` it first grows the current list (its extents kept, the
// longest free runs after them, a run adjacent to the last extent merged
// into it): the fewest AUs taken. If that falls short (32 extents already,
// or fragmented space) it gives those back and tries fresh runs for the
// whole target, which replace the list if they hold more; else it grows as
// far as it can. When free space is too fragmented to add anything the
// current list stays: a smaller journal means more checkpoints, never a
// failed one. Never shrinks. Every run taken and not in the plan is given
// back, an exception too (std::bad_alloc: every run taken is given back
// before it leaves). `current` must be a valid list (JournalLayout::Make).
JournalPlan GrowJournal(const std::vector<JournalExtent>& current, uint64_t target_aus,
                        JournalSpace* space);

}  // namespace cowstore::store
