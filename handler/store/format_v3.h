// SPDX-License-Identifier: Apache-2.0
// FormatV3: pool format 3 behind MetaFormat (meta_format.h; store-v3.md 3.4,
// 3.6, 3.7, plan step 5d). First part: Create, the superblock choice,
// LoadState of a pool whose index is empty, whose LUN table has no records
// and whose journal holds no record (exactly what Create lays out), and
// journal commits over the ring.
// Standalone: Core does not serve format 3 yet (ChooseMetaFormat refuses it
// unless asked for ServedFormats::kV1ToV3), and PoolOptions names no format.
//
// Where a new pool's pieces go (Create), in AUs of the data area:
//   bytes [0, 8 KiB)     both superblock slots (superblock_v3.h), one record
//                        at sequence 1 in each, byte for byte: the writer
//                        rule's steady state, so the chooser finds them
//                        redundant and no open has a slot to rewrite.
//   [8 KiB, data_offset) unused: the data area starts at the first AU
//                        boundary past the slots (data_offset = AU), since
//                        the codec wants it AU-aligned and pages address
//                        the data area only.
//   AU 0                 the metadata chunk (3.4 "Where pages go": pages
//                        come from AU-sized chunks taken from free space):
//                        its first 4 KiB hold the LUN table of no records
//                        (checkpoint sequence 1, next LUN id 1); the rest is
//                        free for the pages of later checkpoints. Next to
//                        the superblocks, so an open reads the metadata
//                        from the front of the device.
//   AUs [1, 1 + J)       the journal, one extent (JournalExtent) of J =
//                        journal bytes rounded up to whole AUs (its segments
//                        are AUs); replay starts at offset 0 with a random
//                        LSN (NewPoolJournalStartLsn, as v2). After the
//                        metadata chunk rather than before it, so the AUs
//                        following the journal are free data space at
//                        first and GrowJournal can lengthen its one extent
//                        in place (JournalExtentsJoin).
//   AUs [1 + J, units)   data, at least kMinPoolUnits of them (v2 keeps 8
//                        AUs beside its journal too).
// There is no index (kNoIndex): a pool without mapped LUNs has no leaf.
//
// Load: the metadata AUs Core must not hand out are the LUN table's pages'
// AUs and the journal's (LoadedMeta::meta_units). What this first part does
// not load it refuses with kUnsupported, before *st changes, never half:
// an index root (leaves: ReadCkptTree), LUN records, a journal holding
// records (replay over JournalRing).
//
// Writes: CommitBatch appends to the journal ring (JournalRing, in
// CommitJournalBatch's order), after the open's half of the writer rule:
// a slot not holding the chosen copy is rewritten with it, synced, before
// the format's first write. (Core's open also writes data, zeroing free AUs
// the older copy may still use, before any batch: wiring FormatV3 into Core
// needs that rewrite as a step of its own, called before the first write of
// any kind.) WriteCheckpoint and Grow are kUnsupported: step
// 5d's work left (WriteCkptTree, the LUN table, GrowJournal, a fresh
// checkpoint sequence per attempt).
#pragma once

#include <cstdint>
#include <optional>

#include "handler/store/journal_segments.h"  // JournalRing
#include "handler/store/meta_format.h"
#include "handler/store/superblock_v3.h"

namespace cowstore::store {

class FormatV3 final : public MetaFormat {
 public:
  // `device_bytes`: the file's or device's size, the bound the superblock
  // codec checks every address against.
  explicit FormatV3(uint64_t device_bytes) : device_bytes_(device_bytes) {}

  // Lays out a new, empty format 3 pool of `size` bytes on `file` (see the
  // layout above): the file extended to `size` (a block device must hold
  // it: the caller's check, as for v2), the journal's AUs cleared and the
  // LUN table page written, synced before the superblocks that name them,
  // then both slots, synced. kInvalidArgument, with nothing written, for an
  // AU off ValidAllocationUnit, a grain off GrainRule, a soft threshold
  // above 100, a journal size off JournalBytesRule, a size that cannot hold
  // the metadata chunk, the journal and kMinPoolUnits data AUs, or more
  // than PoolUnitsRuleV3 allows. The caller has checked that no pool is
  // there (Core::Create's check).
  static Status Create(File* file, const Uuid& uuid, uint32_t au, uint32_t grain, uint64_t size,
                       uint64_t journal_bytes, uint32_t soft_threshold_percent);

  // ChooseSuperblockV3 over the slots; the choice is kept (which slot, and
  // what the other holds, for the open that must rewrite it).
  Status ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) override;
  // Reads the LUN table and scans the journal ring from the replay start;
  // *out's verdict is the scan's (a torn tail is clean; a damaged or newer
  // journal is reported for Core, as v2's). kUnsupported for what this
  // first part does not load (header comment), with *st unchanged.
  Status LoadState(File* file, MetaState* st, LoadedMeta* out) override;

  // The journal ring from LoadState on (before it: nothing fits, nothing
  // was committed).
  bool Fits(size_t bytes) const override { return ring_ && ring_->Fits(bytes); }
  // Rewrites a slot the chooser named (above), then JournalRing::WriteBatch.
  // kNoSpace, nothing written, when the batch does not fit; on any failure
  // the ring's tail and durable LSN stay.
  Status CommitBatch(File* file, const JournalBatch& b) override;
  bool journal_empty() const override { return !ring_ || ring_->tail() == ring_->start(); }
  // 0 until a batch is committed: LoadState replays nothing, and 0 vouches
  // for nothing, which meta_format.h allows (a stale value vouches for
  // less). ring_ is engaged by LoadState, before the pool is shared.
  uint64_t durable_lsn() const override { return ring_ ? ring_->durable_lsn() : 0; }
  uint64_t superblock_seq() const override { return choice_.sb.seq; }
  // Step 5d's work left, kUnsupported (Core never reaches them:
  // ChooseMetaFormat, kV1V2): the checkpoint and growth.
  FrozenCheckpoint Freeze(const MetaState& st) const override;
  Status WriteCheckpoint(File* file, const FrozenCheckpoint& f, const std::vector<uint64_t>& units,
                         uint64_t start_lsn) override;
  Status Grow(File* file, uint64_t new_size) override;

  // The chosen copy and what the other slot holds (tests; the open's slot
  // rewrite later).
  const SuperblockChoice& choice() const { return choice_; }

 private:
  // Names a slot that is not redundant beside an error from what the chosen
  // copy names (ok passes through), as FormatV2::Fallback.
  Status Fallback(const Status& s) const;
  // The writer rule's open half (superblock_v3.h): unless both slots hold
  // the chosen copy, writes it into the other slot and syncs, so that no
  // later fault can fall back to that slot's older state (a stale or
  // damaged copy, or the v2 copy of an upgrade cut between its two slot
  // writes, which this completes: store-v3.md 3.7) once writes moved past it.
  Status RewriteOtherSlot(File* file);

  uint64_t device_bytes_;
  SuperblockChoice choice_;
  std::optional<JournalRing> ring_;  // engaged by LoadState
};

}  // namespace cowstore::store
