// SPDX-License-Identifier: Apache-2.0
#include "handler/store/format_v3.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/journal_segments.h"  // JournalLayout, JournalRingSource, ClearJournalRuns
#include "handler/store/lun_table_page.h"
#include "handler/store/names.h"
#include "handler/store/replay.h"

namespace cowstore::store {
namespace {

// A new pool's first (and only) superblock sequence, and the checkpoint
// sequence of its LUN table page: pages need 1 .. the superblock's.
constexpr uint64_t kCreateSeq = 1;
// The pool's write unit (superblock_v3.h): Env does not declare its atomic
// write size yet (3.8, plan step 11), so the largest the codec allows,
// which is a multiple of every smaller one: a journal start aligned to it
// is aligned to the device's.
constexpr uint32_t kCreateWriteUnit = 4096;
// Create's layout (format_v3.h): AU 0 the metadata chunk, the journal after.
constexpr uint64_t kCreateMetaAu = 0;
constexpr uint64_t kCreateJournalAu = 1;

std::string N(uint64_t v) { return std::to_string(v); }
Status NotYet(const std::string& what) {
  return Status(Code::kUnsupported,
                "format 3: " + what + ", which this build does not load yet (store-v3.md plan step 5d)");
}
Status NotBuilt(const char* what) {
  return Status(Code::kUnsupported,
                std::string("format 3: ") + what + " is not built yet (store-v3.md plan step 5d)");
}

}  // namespace

Status FormatV3::Create(File* file, const Uuid& uuid, uint32_t au, uint32_t grain, uint64_t size,
                        uint64_t journal_bytes, uint32_t soft_threshold_percent) {
  // Every argument first: nothing is written for a pool that would not open.
  auto refuse = [](const std::string& why) { return Status(Code::kInvalidArgument, why); };
  if (!ValidAllocationUnit(au)) return refuse("allocation unit must be " + std::string(kAllocationUnitRule));
  if (std::string why = GrainRule(grain, au); !why.empty()) return refuse(why);
  if (soft_threshold_percent > 100) return refuse("soft threshold is a percentage");
  if (std::string why = JournalBytesRule(journal_bytes); !why.empty()) return refuse(why);

  SuperblockV3 sb;
  sb.uuid = uuid;
  sb.seq = kCreateSeq;
  sb.au = au;
  sb.grain = grain;
  sb.data_offset = au;  // the first AU boundary past both slots (an AU is >= 64 KiB)
  sb.soft_threshold_percent = soft_threshold_percent;
  sb.write_unit = kCreateWriteUnit;
  sb.origin_format = kFormatVersionV3;
  sb.index = kNoIndex;
  const uint64_t journal_aus = (journal_bytes + au - 1) / au;  // <= 1 GiB / 64 KiB: one extent
  const uint64_t metadata_aus = kCreateJournalAu + journal_aus;  // AU 0, then the journal
  const uint64_t min_size = sb.data_offset + (metadata_aus + kMinPoolUnits) * au;
  if (size < min_size)
    return refuse("pool too small: needs at least " + N(min_size) + " bytes (the metadata AU, a journal of " +
                  N(journal_aus) + " AUs and " + N(kMinPoolUnits) + " AUs of data)");
  sb.units = (size - sb.data_offset) / au;
  if (std::string why = PoolUnitsRuleV3(sb.units, au, grain); !why.empty())
    return refuse("pool too large: " + why + ", at an allocation unit of " + N(au) + " bytes");
  sb.lun_table = {sb.data_offset + kCreateMetaAu * au, kCreateSeq};
  sb.journal = {{kCreateJournalAu, journal_aus}};
  sb.journal_start = 0;
  sb.journal_start_lsn = NewPoolJournalStartLsn();  // never the LSNs of an older pool here
  // The codec's own rules, still before any write.
  std::string img;
  if (Status s = EncodeSuperblockV3(sb, &img); !s.ok()) return s;

  Status s;
  if (!file->IsBlockDevice()) s = file->Truncate(size);
  // Journal AUs read as zeros: on a reused device they may hold bytes that
  // frame as records (journal_segments.h, ClearJournalRuns).
  if (s.ok()) s = ClearJournalRuns(file, au, sb.data_offset, sb.journal);
  if (s.ok()) {
    bool taken = false;
    auto alloc = [&]() -> Result<uint64_t> {
      if (taken) return Status(Code::kNoSpace, "a new pool's LUN table is one page");
      taken = true;
      return sb.lun_table.addr;
    };
    uint64_t root = 0;
    std::vector<uint64_t> written;
    s = WriteLunTable(file, uuid, sb.lun_table.seq, MetaState().next_lun_id, {}, alloc, &root, &written);
  }
  // The size, the cleared journal and the LUN table before the superblocks
  // that declare and name them (as FormatV2::Create, and Grow).
  if (s.ok()) s = file->Sync();
  // Slot seq % 2 first, as the writer rule orders it (superblock_v3.h). No
  // sync between: no older copy exists to protect, and either slot alone is
  // the whole pool.
  const uint64_t first = sb.seq % 2;
  if (s.ok()) s = file->Write(first * kSuperblockSlot, img.size(), img.data());
  if (s.ok()) s = file->Write((1 - first) * kSuperblockSlot, img.size(), img.data());
  if (s.ok()) s = file->Sync();
  return s;
}

Status FormatV3::ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) {
  for (const std::vector<char>& slot : slots.slot)
    if (slot.size() != kSuperblockSlot)
      return Status(Code::kInvalidArgument, "a superblock slot is " + N(kSuperblockSlot) + " bytes");
  SuperblockChoice c;
  Status s = ChooseSuperblockV3(slots.slot[0].data(), slots.slot[1].data(), device_bytes_, &c);
  if (!s.ok()) return s;
  choice_ = std::move(c);
  const SuperblockV3& sb = choice_.sb;
  g->uuid = sb.uuid;
  g->au = sb.au;
  g->grain = sb.grain;
  g->data_offset = sb.data_offset;
  g->size_bytes = sb.data_offset + sb.units * sb.au;  // the codec bounded it by the device
  g->soft_threshold_percent = sb.soft_threshold_percent;
  return Status::Ok();
}

// The chosen copy may be older than the other slot's (damaged) one: if what
// it names does not load, say both things rather than blame the page.
Status FormatV3::Fallback(const Status& s) const {
  if (s.ok() || choice_.redundant || choice_.other < 0) return s;
  return Status(s.code(), "superblock slot " + N(choice_.other) + " was passed over (" + choice_.other_state +
                              ") and the copy in slot " + N(choice_.slot) + " (sequence " + N(choice_.sb.seq) +
                              ") does not load: " + s.message());
}

Status FormatV3::LoadState(File* file, MetaState* st, LoadedMeta* out) {
  if (choice_.slot < 0) return Status(Code::kInvalidArgument, "format 3: LoadState before ChooseSuperblock");
  const SuperblockV3& sb = choice_.sb;
  if (sb.index != kNoIndex)
    return NotYet("the pool's checkpoint index (root page at byte " + N(sb.index.entry.addr) + ", sequence " +
                  N(sb.index.entry.seq) + ") names the LUNs' maps");

  // The LUN table.
  LunTableExpect expect;
  expect.pool = sb.uuid;
  expect.seq = sb.lun_table.seq;
  expect.min_address = sb.data_offset;
  expect.end_address = sb.data_offset + sb.units * sb.au;
  LunTable table;
  Status s = ReadLunTable(file, sb.lun_table.addr, expect, &table);
  if (!s.ok()) return Fallback(s);
  if (!table.luns.empty()) return NotYet("the LUN table holds " + N(table.luns.size()) + " LUN(s)");

  // The journal ring from the replay start. Any record with the start LSN
  // would have to be applied: refused at the first, so nothing is applied
  // and the scan stops there. With none, the scan's verdict stands: a torn
  // or cleared ring is clean; damage later records vouch for, or a newer
  // generation, is reported for Core to refuse or accept, as v2's.
  auto layout = JournalLayout::Of(sb);
  if (!layout.ok()) return Fallback(layout.status());  // a decoded superblock's list: not expected
  JournalRingSource source(file, *layout, sb.journal_start);
  // Records are framed as format 2 frames them (with `proven`), so the
  // scan judges damage by the same rule.
  auto scan = ScanJournal(&source, sb.journal_start_lsn, kFormatVersion, kJournalWindowBytes, [&sb](Record&&) {
    return NotYet("the journal holds records from LSN " + N(sb.journal_start_lsn) + " on");
  });
  if (!scan.ok()) return scan.status();

  std::vector<uint64_t> units;
  for (uint64_t addr : table.pages) units.push_back((addr - sb.data_offset) / sb.au);
  for (const JournalExtent& x : sb.journal)
    for (uint64_t i = 0; i < x.aus; i++) units.push_back(x.first_au + i);
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());

  ReplayEnd end = ReplayEndOf(std::move(scan).value());
  // The ring's logical positions start at the replay start's ring offset
  // (journal_segments.h); nothing was replayed, so the tail is there too.
  auto ring = JournalRing::Open(*layout, sb.journal_start, sb.journal_start + end.tail);
  if (!ring.ok()) return ring.status();

  // Nothing refused from here on: the state and the report change together.
  st->next_lun_id = table.next_lun_id;
  out->meta_units = std::move(units);
  out->end = std::move(end);
  ring_.emplace(std::move(ring).value());
  return Status::Ok();
}

Status FormatV3::RewriteOtherSlot(File* file) {
  if (choice_.redundant) return Status::Ok();
  // The chosen copy re-encodes to its own bytes (the codec has one
  // spelling), so both slots then hold it byte for byte.
  std::string img;
  Status s = EncodeSuperblockV3(choice_.sb, &img);
  if (s.ok()) s = file->Write(choice_.other * kSuperblockSlot, img.size(), img.data());
  if (s.ok()) s = file->Sync();
  if (!s.ok()) return s;
  choice_.redundant = true;
  choice_.other = -1;
  choice_.other_state.clear();
  return Status::Ok();
}

Status FormatV3::CommitBatch(File* file, const JournalBatch& b) {
  if (!ring_) return Status(Code::kInvalidArgument, "format 3: CommitBatch before LoadState");
  // Refused before the slot rewrite too: a batch that does not fit changes
  // nothing on disk (the caller checkpoints instead).
  if (!ring_->Fits(b.bytes.size()))
    return Status(Code::kNoSpace, "journal full: " + N(b.bytes.size()) + " bytes do not fit");
  Status s = RewriteOtherSlot(file);
  if (!s.ok()) return s;
  return ring_->WriteBatch(file, b);
}

FrozenCheckpoint FormatV3::Freeze(const MetaState&) const {
  return FrozenCheckpoint();  // WriteCheckpoint refuses it: step 5d's WriteCkptTree and LUN table
}

Status FormatV3::WriteCheckpoint(File*, const FrozenCheckpoint&, const std::vector<uint64_t>&, uint64_t) {
  return NotBuilt("writing a checkpoint");
}

Status FormatV3::Grow(File*, uint64_t) { return NotBuilt("growing a pool"); }

}  // namespace cowstore::store
