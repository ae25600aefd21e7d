// SPDX-License-Identifier: Apache-2.0
// MetaFormat: what the engine (Core, pool_impl.h) asks of an on-disk
// metadata format, so that formats can sit side by side (store-v3.md,
// plan step 5b). A format owns the superblock, the checkpoint and the
// journal on disk; Core keeps the locking, the commit queue, the space map
// and the data path, and decides what to do with what the format reports.
//
// Callers: Core calls every member as the commit queue's leader (its
// pointer to the format is PT_GUARDED_BY the queue), except durable_lsn(),
// which is safe from any thread. A format takes no lock of its own.
//
// Errors are the store's: kCorruption for damage the format refuses,
// kUnsupported for what a newer build wrote, an Env's error as it came.
// A failed CommitBatch, WriteCheckpoint or Grow leaves the format's
// in-memory state as it was before the call (but for PrepareWrites' step,
// which they may do first and which stays done once it succeeded); Core
// then fails the pool (the disk may hold a torn write that only a reopen
// can judge).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "handler/store/dirty_ranges.h"
#include "handler/store/env.h"
#include "handler/store/journal.h"
#include "handler/store/meta.h"
#include "handler/store/status.h"

namespace cowstore::store {

// Both superblock slots as read from the device, once per open (the
// chooser reads them; the chosen format decodes them).
struct SuperblockSlots {
  std::vector<char> slot[2];
};

// The pool's geometry, as the chosen superblock declares it.
struct PoolGeometry {
  Uuid uuid{};
  uint32_t au = 0;     // allocation unit: data area alignment, metadata chunks
  uint32_t grain = 0;  // unit of sharing and of the maps (GrainRule, names.h)
  uint64_t data_offset = 0;
  uint64_t size_bytes = 0;  // declared size; the device must hold it
  uint32_t soft_threshold_percent = 0;
  uint64_t total_units() const { return (size_bytes - data_offset) / au; }
};

// What LoadState hands back beside the state.
struct LoadedMeta {
  std::vector<uint64_t> meta_units;  // AUs the loaded checkpoint occupies
  // Where replay stopped and its verdict (journal.h). Whether a damaged or
  // newer journal may be opened anyway is Core's decision (the caller's
  // accept_journal_loss), not the format's.
  ReplayEnd end;
  // The grains the replayed kMapChecked records map that no record of the
  // journal vouches for (replay.h, the CRC rule; format 3 only): replay
  // checked them against their CRCs, and will again after a cut until a
  // checkpoint takes them out of the journal, so they must keep their
  // bytes until then (checked_grains.h). A run may repeat.
  std::vector<Run> unvouched;
};

// What a format freezes beside (or instead of) an encoded payload: FormatV3
// keeps the maps and LUN records its page writers take. Core only carries it
// from Freeze to WriteCheckpoint.
struct FrozenDetail {
  virtual ~FrozenDetail() = default;
};

class CheckpointCost;

// The metadata state frozen for a checkpoint, taken under Core's metadata
// lock (the state changes as soon as it is released).
struct FrozenCheckpoint {
  std::string payload;      // the state in the format's encoding (FormatV2)
  uint64_t meta_units = 0;  // AUs Core must take from the space map for it
  std::shared_ptr<const FrozenDetail> detail;  // the format's own (FormatV3); FormatV2: none
  // A bound (CheckpointCost) that holds from this Freeze until the
  // checkpoint after the next, whether this one is written or not: while it
  // is being written, records keep coming, and the next Freeze shadows the
  // tree it writes, not the one NextCheckpointCost() was asked over.
  std::shared_ptr<const CheckpointCost> next_cost;
};

// A bound on the AUs the next checkpoint's Freeze asks for
// (FrozenCheckpoint::meta_units), from counts alone. Core keeps that much
// room free before it takes any record (every reservation and LUN change
// checks it: Core::CkptBoundLocked), so a checkpoint is refused for room only
// if a bound falls short, and an operation refused for room has changed
// nothing. A bound that overshoots costs free space held back, one that
// falls short an operation applied but not durable (kNotDurable).
// Immutable: Core asks the format for one after each load and checkpoint
// (NextCheckpointCost, from the thread that changes the format) and reads it
// under its metadata lock from any thread.
class CheckpointCost {
 public:
  virtual ~CheckpointCost() = default;
  // For a state of at most `luns` LUNs whose maps hold at most `extents`
  // extents in all, whatever changed since the last checkpoint.
  virtual uint64_t UnitsBound(uint64_t luns, uint64_t extents) const = 0;
  // The same bound in pages, for a format whose checkpoint is written in
  // pages smaller than an AU (FormatV3: the pages its Freeze bounds its
  // writes by, FormatV3::PagesBound); nullopt for one that counts no pages
  // (FormatV2). UnitsBound rounds up to whole AUs and a Freeze takes fewer
  // AUs than it writes pages for (the current chunks' free pages first), so
  // only this tells Core's miss detector (CkptBoundMissedLocked) of a bound
  // short by less than one AU, which a later checkpoint's free pages may
  // not cover.
  virtual std::optional<uint64_t> PagesBound(uint64_t luns, uint64_t extents) const {
    (void)luns;
    (void)extents;
    return std::nullopt;
  }
};

class MetaFormat {
 public:
  virtual ~MetaFormat() = default;

  // Open, step 1: chooses the superblock copy the pool opens from and
  // returns its geometry. Reads nothing but `slots`. Core checks the
  // geometry against the device before step 2.
  virtual Status ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) = 0;
  // Open, step 2: reads the checkpoint the chosen superblock names into *st
  // (a fresh MetaState whose unit is the geometry's grain) and replays the
  // journal after it. The journal's tail is the format's from then on.
  // Core's open writes a checkpoint before its first batch (recovery.cc);
  // a format may refuse a batch before it (FormatV3 does: its replayed ring
  // may hold stale records past the tail).
  virtual Status LoadState(File* file, MetaState* st, LoadedMeta* out) = 0;
  // Open, step 3, writable opens only: called once, after LoadState and
  // before Core's first write of any kind (LoadLocked's step 4, recovery.cc,
  // punches free AUs before its checkpoint). Those writes may hit what an older
  // superblock copy names (its checkpoint's AUs are free under the chosen
  // copy), so the chosen copy must first be durable (it may sit in the
  // cache only: a process died before its sync) and, by the format's
  // writer rule, the copy a later cut falls back to (both formats rewrite
  // a slot not holding it). On error the open fails: nothing of Core's was
  // written. WriteCheckpoint and Grow called without it stay safe (the
  // format does this step itself first); once it succeeded they do not redo
  // it, but a slot a failed superblock write left in doubt is rewritten
  // with the chosen copy before the next superblock write (FormatV3).
  virtual Status PrepareWrites(File* file) = 0;

  // False if a batch of `bytes` more record bytes does not fit the journal:
  // Core checkpoints instead.
  virtual bool Fits(size_t bytes) const = 0;
  // Appends `b` durably, in CommitJournalBatch's order (data sync, records,
  // sync). On success every record of `b` is durable and durable_lsn() has
  // reached b.last_lsn.
  virtual Status CommitBatch(File* file, const JournalBatch& b) = 0;
  // Nothing in the journal since the last checkpoint (a clean close then
  // needs no seal).
  virtual bool journal_empty() const = 0;
  // The highest LSN known durable, which every record framed now carries as
  // its `proven`. Safe from any thread without the queue's leadership: it
  // is atomic and raised only once what it names is durable, so any value
  // read is durable (a stale one vouches for less).
  virtual uint64_t durable_lsn() const = 0;
  // The newest durable superblock's sequence: changes with every superblock
  // written (checkpoint, grow), so an online check can tell whether the
  // metadata it read from disk is still the current checkpoint.
  virtual uint64_t superblock_seq() const = 0;

  // Whether Freeze needs `dirty` (FormatV3's incremental checkpoint): Core
  // marks what each record changes (ApplyRecord's `dirty`) only then, so a
  // format that rewrites every map (FormatV2) costs nothing. Fixed for the
  // format's life.
  virtual bool tracks_dirty() const = 0;
  // Whether the journal may hold kMapChecked records, so Core may take the
  // one-sync path for small first writes (store-v3.md 3.6 item 1): format 3
  // only, since formats 1 and 2 refuse the type at replay (builds before it
  // cannot read it). Fixed for the format's life.
  virtual bool writes_checked_maps() const = 0;
  // Checkpoint, step 1, under Core's metadata lock: encodes `st`. `dirty`:
  // every range whose map changed since the last successful checkpoint
  // (dirty_ranges.h: Core takes it in the same critical section, merges it
  // back if the checkpoint fails); ignored unless tracks_dirty().
  virtual FrozenCheckpoint Freeze(const MetaState& st, const DirtyRanges& dirty) const = 0;
  // The bound Freeze keeps to until the next checkpoint (CheckpointCost)
  // over the checkpoint as it stands: valid from LoadState, and from each
  // successful WriteCheckpoint (after which Core asks again) to the next
  // Freeze, which hands over its FrozenCheckpoint::next_cost.
  virtual std::shared_ptr<const CheckpointCost> NextCheckpointCost() const = 0;
  // Checkpoint, step 2, without the metadata lock: writes `f` into `units`
  // (the FrozenCheckpoint's meta_units AUs, taken by Core; FormatV2 uses
  // them all, FormatV3 those it needs), syncs, writes a
  // superblock naming it into both slots, syncs, then empties the journal,
  // which continues at `start_lsn`. The first checkpoint after LoadState
  // needs a `start_lsn` at least kLsnGapAfterOpen (meta.h) past the
  // replayed records' next LSN: a torn tail may leave stale records of the
  // LSNs after it in the journal, where new records may be written next to
  // them (FormatV3 refuses a smaller one). On success the checkpoint holds
  // every record before start_lsn and meta_units() names its AUs: the
  // previous checkpoint's AUs not among them may be released. On failure
  // the format keeps the previous checkpoint in memory (meta_units() too);
  // on disk either may be current (a failure after the first slot's write),
  // and the next open decides. The journal keeps its extents here; a format
  // that sizes its journal with the map takes the free space to grow it
  // from through an overload of its own (FormatV3's, with a JournalSpace:
  // journal_segments.h), which Core calls for that format (checkpoint.cc): the
  // interface stays this one call.
  virtual Status WriteCheckpoint(File* file, const FrozenCheckpoint& f,
                                 const std::vector<uint64_t>& units, uint64_t start_lsn) = 0;

  // The AUs the current checkpoint occupies (after LoadState, what
  // LoadedMeta::meta_units named; after a successful WriteCheckpoint, the
  // new checkpoint's; a failed one leaves them). Core installs them in the
  // space map after each checkpoint (PoolSpace::InstallMeta): every AU it
  // handed over that is not here, and every AU of the previous set that is
  // not, it frees. FormatV2: its chain, in chain order; FormatV3: its
  // chunks and journal, sorted.
  virtual std::vector<uint64_t> meta_units() const = 0;

  // Why a pool of `aus` allocation units does not fit this format ("" if it
  // does): what Core::Grow asks before it changes anything. Format 2 counts
  // AUs in 32 bits; format 3 bounds grains (2^48) and bytes (2^62).
  virtual std::string UnitsRule(uint64_t aus) const = 0;

  // Declares the pool `new_size` bytes, durably (superblock in both slots,
  // synced). The caller has checked the size and made the device hold it.
  virtual Status Grow(File* file, uint64_t new_size) = 0;
};

// Which formats an open may be served with. This build knows formats 1 to
// 3, and Core asks for kV1ToV3 (plan step 5d, sub-steps 4 and 6), at any
// grain. kV1V2 answers what a build serving formats 1 and 2 only would
// (tests of that answer).
enum class ServedFormats : uint8_t {
  kV1V2,    // formats 1 and 2 only: a format 3 pool is kUnsupported, nothing written
  kV1ToV3,  // Core, FormatV3's tests: a format 3 pool gets a FormatV3
};

// Reads both superblock slots and picks the format that reads them, by the
// envelope every format shares (superblock_v3.h): FormatV3 if either slot's
// envelope says 3 (a v3 pool, or an upgrade cut between its two slot
// writes, which ChooseSuperblockV3 judges), else FormatV2 (versions 1 and 2,
// and slots whose envelope is damaged or blank, which it judges as its own).
// kUnsupported, nothing written: a version above 3 in either slot (a newer
// build's pool, however valid the other slot), or format 3 when `served`
// is kV1V2.
Result<std::unique_ptr<MetaFormat>> ChooseMetaFormat(File* file, SuperblockSlots* slots,
                                                     ServedFormats served = ServedFormats::kV1V2);

}  // namespace cowstore::store
