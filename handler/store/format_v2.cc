// SPDX-License-Identifier: Apache-2.0
#include "handler/store/format_v2.h"

#include <string>
#include <utility>
#include <vector>

#include "handler/store/checkpoint.h"
#include "handler/store/crc32c.h"
#include "handler/store/journal_source.h"
#include "handler/store/superblock_slots.h"
#include "handler/store/zero_fill.h"

namespace cowstore::store {

Status FormatV2::Create(File* file, const Uuid& uuid, uint32_t au, uint64_t size,
                        uint64_t journal_bytes, uint32_t soft_threshold_percent) {
  Superblock sb;
  sb.uuid = uuid;
  sb.au = au;
  sb.size_bytes = size;
  sb.journal_bytes = journal_bytes;
  sb.data_offset = DataOffsetV2(au, journal_bytes);
  sb.soft_threshold_percent = soft_threshold_percent;
  if (const uint64_t min_size = MinPoolBytes(au, journal_bytes); size < min_size)
    return Status(Code::kInvalidArgument, "pool too small: needs at least " + std::to_string(min_size) + " bytes");
  // Before anything is written: a superblock Decode would refuse leaves a
  // file that looks like a pool and never opens.
  if (std::string why = PoolUnitsRule(sb.total_units()); !why.empty())
    return Status(Code::kInvalidArgument, "pool too large: " + why + " of " + std::to_string(au) + " bytes");
  sb.journal_start_lsn = NewPoolJournalStartLsn();  // never the LSNs of an older pool here
  Status s;
  if (file->CanTruncate()) s = file->Truncate(size);
  if (s.ok()) s = ZeroFill(file, kJournalOffset, journal_bytes);  // stale bytes may frame as records
  // The size before the superblocks that declare it (as Grow does).
  if (s.ok()) s = file->Sync();
  for (uint64_t seq = 0; seq < 2 && s.ok(); seq++) {
    sb.seq = seq;
    std::string img = sb.Encode();
    s = file->Write(seq * kSuperblockSlot, img.size(), img.data());
  }
  if (s.ok()) s = file->Sync();
  return s;
}

namespace {

// Format 2 encodes the whole state every time (EncodeState): a 12-byte
// header, each LUN's fields and its runs at 24 bytes each, in a chain of AUs
// that carry kChunkHeader bytes of their own. The header counted as 64 bytes
// and the AU added are slack this estimate always had (the reserve, and
// every figure measured against it, stayed the same when it moved here).
class WholeStateCost final : public CheckpointCost {
 public:
  explicit WholeStateCost(uint32_t au) : au_(au) {}
  uint64_t UnitsBound(uint64_t luns, uint64_t extents) const override {
    return CheckpointUnits(64 + luns * kLunCheckpointBytesBound + extents * 24, au_) + 1;
  }

 private:
  const uint32_t au_;
};

}  // namespace

Status FormatV2::ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) {
  // The newest valid copy. Both slots normally hold the same newest copy
  // (WriteSuperblock). A newer format in either slot never reaches here:
  // ChooseMetaFormat refuses it first.
  Superblock best;
  bool have = false;
  int best_slot = -1;
  Status why;
  for (int slot = 0; slot < 2; slot++) {
    Superblock sb;
    Status s = Superblock::Decode(slots.slot[slot].data(), slots.slot[slot].size(), &sb);
    if (!s.ok()) {
      if (why.ok() || s.code() == Code::kUnsupported) why = s;
      damaged_slot_ = slot;
      continue;
    }
    if (!have || sb.seq > best.seq) {
      best = sb;
      best_slot = slot;
    }
    have = true;
  }
  if (!have) return why.ok() ? Status(Code::kCorruption, "no valid superblock") : why;
  sb_ = best;
  // The bound depends on the AU alone, which no later superblock changes
  // (Grow keeps it): one serves every checkpoint of the pool.
  cost_ = std::make_shared<WholeStateCost>(best.au);
  const std::vector<char>& chosen = slots.slot[best_slot];
  if (slots.slot[1 - best_slot] != chosen) {
    stale_slot_ = 1 - best_slot;
    chosen_copy_ = chosen;
  } else {
    stale_slot_ = -1;
    chosen_copy_.clear();
  }
  journal_.set_capacity(best.journal_bytes);
  g->uuid = best.uuid;
  g->au = best.au;
  // v1/v2 share at the AU: their maps, journal and checkpoint count AUs.
  // (v3's superblock carries its own grain: plan step 5.)
  g->grain = best.au;
  g->data_offset = best.data_offset;
  g->size_bytes = best.size_bytes;
  g->soft_threshold_percent = best.soft_threshold_percent;
  return Status::Ok();
}

// With one copy unreadable the other may be older than it was: if what it
// names does not load, say both things rather than blame the checkpoint.
Status FormatV2::Fallback(const Status& s) const {
  if (damaged_slot_ < 0 || s.ok()) return s;
  return Status(s.code(), "superblock slot " + std::to_string(damaged_slot_) +
                              " is damaged and the copy in slot " +
                              std::to_string(1 - damaged_slot_) + " (sequence " +
                              std::to_string(sb_.seq) + ") does not load: " + s.message());
}

Status FormatV2::LoadState(File* file, MetaState* st, LoadedMeta* out) {
  const uint32_t unit = st->au;  // the grain, which DecodeState does not know
  // The checkpoint chain.
  out->meta_units.clear();
  if (sb_.ckpt_first != kNone) {
    std::string payload;
    Status s = ReadCheckpointChain(file, sb_, sb_.total_units(), &payload, &out->meta_units);
    if (!s.ok()) return Fallback(s);
    s = DecodeState(payload, st, sb_.version);
    if (!s.ok()) return Fallback(s);
    st->au = unit;
  }
  // meta_units() changes only when every step passed (copied now: nothing
  // allocates after the replay).
  std::vector<uint64_t> chain = out->meta_units;
  // Journal replay: records with consecutive LSNs from journal_start_lsn;
  // the first bad or stale record ends it. A torn tail ends it quietly;
  // damage to records later ones vouch for, or a journal of a newer
  // superblock, is reported in out->end for Core to refuse or accept.
  // Version 2 through replay's window, not whole: the region may be 1 GiB
  // and this runs inside tcmu-runner. Version 1 records have no size bound
  // (replay.h), so a version-1 journal is still read whole, once: the
  // first writable open upgrades the pool to version 2.
  Status s;
  if (sb_.version >= 2) {
    FileRegionJournalSource journal(file, kJournalOffset, journal_.capacity());
    s = ReplayJournal(&journal, sb_.journal_start_lsn, st, &out->end, sb_.version);
  } else {
    std::vector<uint8_t> j(journal_.capacity());
    s = file->Read(kJournalOffset, j.size(), j.data());
    if (s.ok()) s = ReplayJournal(j.data(), j.size(), sb_.journal_start_lsn, st, &out->end, sb_.version);
  }
  if (!s.ok()) return s;
  journal_.set_tail(out->end.tail);
  chain_ = std::move(chain);
  return Status::Ok();
}

// The writer rule's open half, before the open's first write of any kind.
//
// First a sync: the chosen copy may be in the cache only. A process that
// died between its checkpoint's first slot write and that write's sync
// leaves the next open choosing it (the cache outlives the process) while
// the media hold the older copy in both slots. That checkpoint freed the
// older one's chain, and the open punches free AUs and writes its
// checkpoint's chain into them before any sync: a cut then would reopen
// the older copy over a punched chain (open_writes_test). The sync cures a
// process that died, not a sync that failed: after an fsync error Linux
// marks the pages clean, and a later fsync may return 0 without writing
// them, so a pool whose sync failed must not be reopened writable from the
// same page cache (without a reboot) trusting this sync.
//
// Then the slot not holding the chosen copy (damaged, older, or a torn
// write), if any, gets that copy, synced: WriteSuperblock puts each copy
// in both slots, so with slot seq % 2 damaged the chosen copy sits only in
// the other slot, and the next superblock (seq + 1) goes to that slot
// first; a torn write there would leave no valid copy. The chosen slot's
// bytes are written as they were read, so the two slots are equal (a
// version 1 copy stays version 1) and the next write, to either slot,
// leaves a valid chosen copy in the other.
Status FormatV2::PrepareWrites(File* file) {
  if (writes_prepared_) return Status::Ok();
  if (Status s = file->Sync(); !s.ok()) return s;
  if (stale_slot_ >= 0) {
    Status s = file->Write(stale_slot_ * kSuperblockSlot, chosen_copy_.size(), chosen_copy_.data());
    if (s.ok()) s = file->Sync();
    if (!s.ok()) return s;
    stale_slot_ = -1;
    chosen_copy_.clear();
  }
  writes_prepared_ = true;
  return Status::Ok();
}

Status FormatV2::CommitBatch(File* file, const JournalBatch& b) {
  return journal_.WriteBatch(file, b);
}

FrozenCheckpoint FormatV2::Freeze(const MetaState& st, const DirtyRanges&) const {
  FrozenCheckpoint f;
  EncodeState(st, &f.payload);
  f.meta_units = CheckpointUnits(f.payload.size(), sb_.au);
  f.next_cost = cost_;  // the whole state every time: no tree to outgrow
  return f;
}

std::shared_ptr<const CheckpointCost> FormatV2::NextCheckpointCost() const { return cost_; }

Status FormatV2::WriteCheckpoint(File* file, const FrozenCheckpoint& f,
                                 const std::vector<uint64_t>& units, uint64_t start_lsn) {
  // The chain is exactly the units Freeze asked for: a shorter one would cut
  // the payload, a longer one would leave AUs in meta_units() holding nothing.
  // A chain has a first AU: a checkpoint of none (a FrozenCheckpoint Freeze
  // did not make) is refused too.
  if (units.size() != f.meta_units || units.empty())
    return Status(Code::kInvalidArgument, "checkpoint of " + std::to_string(f.meta_units) +
                                              " AUs given " + std::to_string(units.size()));
  if (Status s = PrepareWrites(file); !s.ok()) return s;  // if the open did not
  std::vector<uint64_t> chain = units;  // copied first: once written, only moves
  Superblock nsb = sb_;
  nsb.seq = sb_.seq + 1;
  // The upgrade of a version-1 pool: this superblock names a checkpoint and
  // a journal generation in the current format, so it is the one write that
  // changes the version (until it is durable the old one opens as it was).
  nsb.version = kFormatVersion;
  nsb.ckpt_first = units[0];
  nsb.ckpt_seq = nsb.seq;
  nsb.ckpt_bytes = f.payload.size();
  nsb.ckpt_crc = Crc32c(0, f.payload.data(), f.payload.size());
  nsb.journal_start_lsn = start_lsn;
  Status s = WriteCheckpointChain(file, sb_.data_offset, sb_.au, units, f.payload, nsb.seq, sb_.uuid);
  if (s.ok()) s = file->Sync();  // data and checkpoint before the superblock
  if (s.ok()) s = WriteSuperblock(file, nsb);
  if (!s.ok()) return s;  // Core fails the pool (CheckpointLocked); reopening recovers
  sb_ = nsb;
  chain_ = std::move(chain);
  journal_.Restart(file);
  journal_.set_durable_lsn(start_lsn - 1);  // the checkpoint holds every earlier record
  return Status::Ok();
}

Status FormatV2::Grow(File* file, uint64_t new_size) {
  if (Status s = PrepareWrites(file); !s.ok()) return s;  // if the open did not
  Superblock nsb = sb_;
  nsb.seq++;
  nsb.size_bytes = new_size;
  if (Status s = WriteSuperblock(file, nsb); !s.ok()) return s;
  sb_ = nsb;
  return Status::Ok();
}

// Writes `sb` into both slots by the writer rule (superblock_slots.h):
// synced when it returns.
Status FormatV2::WriteSuperblock(File* file, const Superblock& sb) {
  return WriteSlotsInOrder(file, sb.Encode(), sb.seq);
}

}  // namespace cowstore::store
