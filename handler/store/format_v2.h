// SPDX-License-Identifier: Apache-2.0
// FormatV2: pool formats 1 and 2 behind MetaFormat (meta_format.h). Two
// superblock slots, a checkpoint written whole as a chain of AU-sized
// chunks (checkpoint.h), and a fixed journal region (journal.h); the maps
// count AUs (grain == AU). A version 1 pool is read as it is and becomes
// version 2 at its first checkpoint (meta.h, kFormatVersion).
#pragma once

#include <memory>
#include <vector>

#include "handler/store/journal.h"
#include "handler/store/meta.h"
#include "handler/store/meta_format.h"

namespace cowstore::store {

class FormatV2 final : public MetaFormat {
 public:
  // Lays out a new, empty pool of `size` bytes on `file`: a file extended
  // to `size` and the journal region cleared, synced before the superblocks
  // that declare them, then both slots (sequences 0 and 1), synced.
  // kInvalidArgument, with nothing written, if `size` cannot hold the
  // journal and 8 AUs. The caller has checked the AU, journal size and
  // soft threshold against their rules and that no pool is there.
  static Status Create(File* file, const Uuid& uuid, uint32_t au, uint64_t size,
                       uint64_t journal_bytes, uint32_t soft_threshold_percent);
  // The smallest `size` Create accepts: the data area at DataOffsetV2, then
  // kMinPoolUnits AUs of data.
  static uint64_t MinPoolBytes(uint32_t au, uint64_t journal_bytes) {
    return DataOffsetV2(au, journal_bytes) + kMinPoolUnits * au;
  }

  Status ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) override;
  Status LoadState(File* file, MetaState* st, LoadedMeta* out) override;
  // Once: a sync, then the slot not holding the chosen copy gets it,
  // synced (format_v2.cc says why).
  Status PrepareWrites(File* file) override;
  bool Fits(size_t bytes) const override { return journal_.Fits(bytes); }
  Status CommitBatch(File* file, const JournalBatch& b) override;
  bool journal_empty() const override { return journal_.tail() == 0; }
  uint64_t durable_lsn() const override { return journal_.durable_lsn(); }
  uint64_t superblock_seq() const override { return sb_.seq; }
  bool tracks_dirty() const override { return false; }  // every checkpoint encodes every map
  bool writes_checked_maps() const override { return false; }  // older builds cannot read them
  FrozenCheckpoint Freeze(const MetaState& st, const DirtyRanges& dirty) const override;
  std::shared_ptr<const CheckpointCost> NextCheckpointCost() const override;
  Status WriteCheckpoint(File* file, const FrozenCheckpoint& f, const std::vector<uint64_t>& units,
                         uint64_t start_lsn) override;
  std::string UnitsRule(uint64_t aus) const override { return PoolUnitsRule(aus); }
  Status Grow(File* file, uint64_t new_size) override;
  // The current chain, in chain order (LoadState's, then each successful
  // checkpoint's `units`).
  std::vector<uint64_t> meta_units() const override { return chain_; }
  // The newest durable superblock (ChooseSuperblock's choice, then each
  // checkpoint's and Grow's): the upgrade to format 3 (upgrade.h) builds
  // the new superblock from it.
  const Superblock& superblock() const { return sb_; }

 private:
  // The writer rule for both slots (superblock_slots.h): synced when it
  // returns.
  static Status WriteSuperblock(File* file, const Superblock& sb);
  // Names the damaged slot beside an error from what the surviving copy
  // names (ok passes through).
  Status Fallback(const Status& s) const;

  Superblock sb_;          // the newest durable superblock
  std::vector<uint64_t> chain_;  // the AUs of the checkpoint sb_ names, in chain order
  // NextCheckpointCost's answer, made by ChooseSuperblock (null before).
  std::shared_ptr<const CheckpointCost> cost_;
  JournalWriter journal_;  // the journal on disk: its tail and durable LSN
  int damaged_slot_ = -1;  // a slot that did not decode at open, if any
  // The slot that did not hold the chosen copy at open (damaged, older or
  // torn), if any, until PrepareWrites gives it chosen_copy_: the chosen
  // slot's bytes as read.
  int stale_slot_ = -1;
  std::vector<char> chosen_copy_;
  bool writes_prepared_ = false;  // PrepareWrites succeeded
};

}  // namespace cowstore::store
