// SPDX-License-Identifier: Apache-2.0
#include "handler/store/format_v3.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/journal_segments.h"  // JournalLayout, JournalRingSource, ClearJournalRuns
#include "handler/store/ckpt_page.h"  // kLeafPageBytes
#include "handler/store/lun_table_page.h"
#include "handler/store/names.h"
#include "handler/store/journal.h"  // ReplayJournal
#include "handler/store/replay.h"
#include "handler/store/superblock_slots.h"

namespace cowstore::store {
namespace {

// A new pool's first (and only) superblock sequence, and the checkpoint
// sequence of its LUN table page: pages need 1 .. the superblock's.
constexpr uint64_t kCreateSeq = 1;
// Create's layout (format_v3.h): AU 0 the metadata chunk, the journal after.
constexpr uint64_t kCreateMetaAu = 0;
constexpr uint64_t kCreateJournalAu = 1;

std::string N(uint64_t v) { return std::to_string(v); }
// Create's data offset: the first AU boundary past both slots (an AU is >=
// 64 KiB).
uint64_t CreateDataOffset(uint32_t au) { return au; }
// The journal's AUs at Create (<= 1 GiB / 64 KiB: one extent).
uint64_t JournalAus(uint32_t au, uint64_t journal_bytes) { return (journal_bytes + au - 1) / au; }
// What the tree codec needs of the pool (ckpt_tree.h).
CkptPool PoolOf(const SuperblockV3& sb) { return CkptPool{IndexReadBound(sb), sb.grains()}; }

// LUN `id`'s entry in the LUN table's pages (its map goes to the tree).
LunRecord RecordOf(uint32_t id, const LunState& l) {
  LunRecord r;
  r.id = id;
  r.name = l.name;
  r.uuid = l.uuid;
  r.size = l.size;
  r.bs = l.bs;
  r.attrs = l.attrs;
  return r;
}

}  // namespace

uint64_t FormatV3::MinPoolBytes(uint32_t au, uint64_t journal_bytes) {
  const uint64_t metadata_aus = kCreateJournalAu + JournalAus(au, journal_bytes);  // AU 0, then the journal
  return CreateDataOffset(au) + (metadata_aus + kMinPoolUnits) * au;
}

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
  sb.data_offset = CreateDataOffset(au);
  sb.soft_threshold_percent = soft_threshold_percent;
  sb.write_unit = file->AtomicWriteBytes();  // the medium's (3.8); the codec holds it to 512..4096
  sb.origin_format = kFormatVersionV3;
  // From its creation: every format 3 pool may hold kMapChecked records
  // (writes_checked_maps), so a v3 build from before them must not open it
  // (it would read one as a tear and drop it, and every acknowledged record
  // after it). Set once here, before any record exists, and carried by every
  // later superblock (each is the current one, changed).
  sb.incompat = kIncompatCheckedMaps;
  sb.index = kNoIndex;
  const uint64_t journal_aus = JournalAus(au, journal_bytes);
  const uint64_t min_size = MinPoolBytes(au, journal_bytes);
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
  if (file->CanTruncate()) s = file->Truncate(size);
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
  slots_settled_ = false;  // the chosen copy may be in the cache only
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

  // The LUN table.
  LunTableExpect expect;
  expect.pool = sb.uuid;
  expect.seq = sb.lun_table.seq;
  expect.min_address = sb.data_offset;
  expect.end_address = sb.data_offset + sb.units * sb.au;
  LunTable table;
  Status s = ReadLunTable(file, sb.lun_table.addr, expect, &table);
  if (!s.ok()) return Fallback(s);

  // The maps, from the tree the index root names (none for kNoIndex).
  std::map<uint32_t, ExtentMap> maps;
  CkptTree tree;
  s = ReadCkptTree(PoolOf(sb), sb.index, *file, &maps, &tree);
  if (!s.ok()) return Fallback(s);
  // The chain and the tree are read apart, so neither codec sees the
  // other's pages: a page named by both would be freed as one while the
  // other still names it, then overwritten by a later checkpoint.
  std::vector<uint64_t> pages = tree.Pages();
  pages.insert(pages.end(), table.pages.begin(), table.pages.end());
  std::sort(pages.begin(), pages.end());
  if (std::adjacent_find(pages.begin(), pages.end()) != pages.end())
    return Fallback(Status(Code::kCorruption, "format 3: a page is both the LUN table's and the checkpoint tree's"));
  for (const JournalExtent& x : sb.journal)
    for (uint64_t a : pages)
      if ((a - sb.data_offset) / sb.au - x.first_au < x.aus)
        return Fallback(Status(Code::kCorruption, "format 3: checkpoint page at byte " + N(a) + " lies in the journal"));

  MetaState loaded;
  loaded.au = st->au;
  loaded.max_phys = sb.grains();  // the maps' bound, as the checkpoint's leaves were read under
  loaded.next_lun_id = table.next_lun_id;
  for (LunRecord& r : table.luns) {
    auto l = loaded.NewLun();
    l->id = r.id;
    l->name = std::move(r.name);
    l->uuid = r.uuid;
    l->size = r.size;
    l->bs = r.bs;
    l->attrs = r.attrs;
    if (auto m = maps.find(r.id); m != maps.end()) {
      l->map = std::move(m->second);  // read under the same bound
      maps.erase(m);
    }
    loaded.AddLun(std::move(l));  // ids and names unique: ReadLunTable's rule
  }
  if (!maps.empty())
    return Fallback(Status(Code::kCorruption, "format 3: the checkpoint tree maps LUN " + N(maps.begin()->first) +
                                                  ", which the LUN table does not hold"));

  // The journal ring from the replay start: its records applied to the
  // checkpoint's state (ApplyRecord, as v2's ReplayJournal), framed as
  // format 2 frames them (with `proven`), so damage is judged by the same
  // rule: a torn or cleared ring is clean; damage later records vouch for,
  // or a newer generation, is reported for Core to refuse or accept.
  auto layout = JournalLayout::Of(sb);
  if (!layout.ok()) return Fallback(layout.status());  // a decoded superblock's list: not expected
  JournalRingSource source(file, *layout, sb.journal_start);
  // Each record first meets format 3's bound on a LUN's blocks
  // (RecordLunBlocksRule: the maps' keys are 48 bits), which ApplyRecord,
  // shared with formats 1 and 2, does not apply; then ApplyRecord, without
  // marks (every LUN is marked below after a replay that applied records).
  // Version 3: its kMapChecked records' data checked by replay's CRC rule
  // (replay.h) in this pool's grains.
  std::vector<Run> checked;  // the grains of the replayed records nothing vouches for
  uint64_t check_budget = MaxCheckedDataBytes(sb.grain, sb.grains());
  auto scanned = ScanJournal(&source, sb.journal_start_lsn, kFormatVersionV3, kJournalWindowBytes,
                             [&loaded](Record&& r) -> Status {
                               if (std::string why = RecordLunBlocksRule(loaded, r); !why.empty())
                                 return Status(Code::kCorruption, "journal replay: " + why);
                               return ApplyRecord(&loaded, r, nullptr, nullptr);
                             },
                             [file, &sb, &checked, &check_budget](const Record& r) -> Result<bool> {
                               Result<bool> same = CheckMappedData(file, sb.data_offset, sb.grain, sb.grains(),
                                                                   r, &check_budget);
                               if (!same.ok() || !*same) return same;
                               try {  // at most the unvouched tail's (LoadedMeta::unvouched)
                                 checked.insert(checked.end(), r.runs.begin(), r.runs.end());
                               } catch (...) {
                                 return StatusFromCurrentException("replay's data check");
                               }
                               return true;
                             });
  if (!scanned.ok()) return scanned.status();
  ReplayEnd end = ReplayEndOf(std::move(scanned).value());
  // The ring's logical positions start at the replay start's ring offset
  // (journal_segments.h); the tail is past the records replayed.
  auto ring = JournalRing::Open(*layout, sb.journal_start, sb.journal_start + end.tail);
  if (!ring.ok()) return ring.status();
  // Replayed records changed maps the tree does not hold, and no dirty
  // range names them: the next checkpoint rewrites every LUN's leaves.
  DirtyRanges replayed;
  if (end.next_lsn != sb.journal_start_lsn) {
    for (const auto& [id, l] : loaded.luns()) replayed.MarkLun(id);
    for (const IndexEntry& e : tree.leaves) replayed.MarkLun(e.first.lun);
  }

  // What allocates (the chunks, the units reported) before anything
  // changes: an exception (bad_alloc) leaves *st and the format as they
  // were. Nothing refused or allocated from here on: the state and the
  // report change together, by moves.
  std::set<uint64_t> chunks = ChunksOf(tree, table.pages);
  std::vector<uint64_t> units = UnitsOf(chunks);
  *st = std::move(loaded);
  tree_ = std::move(tree);
  lun_pages_ = std::move(table.pages);
  chunks_.swap(chunks);
  seq_spent_ = true;  // an attempt of the last session may have used sb.seq + 1
  needs_open_ckpt_ = true;  // the ring may hold stale records past end.tail
  replayed_next_lsn_ = end.next_lsn;
  carried_dirty_ = std::move(replayed);
  checkpoints_++;     // a Freeze of another tree does not apply to this one
  out->meta_units = std::move(units);
  out->end = std::move(end);
  out->unvouched = std::move(checked);
  ring_.emplace(std::move(ring).value());
  return Status::Ok();
}

std::vector<uint64_t> FormatV3::PagesOf(const CkptTree& tree, const std::vector<uint64_t>& lun_pages) {
  std::vector<uint64_t> pages = tree.Pages();
  pages.insert(pages.end(), lun_pages.begin(), lun_pages.end());
  std::sort(pages.begin(), pages.end());
  return pages;
}

std::set<uint64_t> FormatV3::ChunksOf(const CkptTree& tree, const std::vector<uint64_t>& lun_pages) const {
  std::set<uint64_t> chunks;
  for (uint64_t a : PagesOf(tree, lun_pages)) chunks.insert(AuOf(a));
  return chunks;
}

std::vector<uint64_t> FormatV3::UnitsOf(const std::set<uint64_t>& chunks) const {
  std::vector<uint64_t> units(chunks.begin(), chunks.end());
  for (const JournalExtent& x : choice_.sb.journal)
    for (uint64_t i = 0; i < x.aus; i++) units.push_back(x.first_au + i);
  std::sort(units.begin(), units.end());
  return units;
}

Status FormatV3::PrepareWrites(File* file) {
  if (!ring_) return Status(Code::kInvalidArgument, "format 3: PrepareWrites before LoadState");
  return SettleSlots(file);
}

Status FormatV3::SettleSlots(File* file) {
  if (slots_settled_) return Status::Ok();
  // The chosen copy durable before either slot is written, or a cut could
  // tear the other slot while the chosen one is lost from the cache. This
  // sync cures a process that died before its own sync, not a sync that
  // failed: after an fsync error Linux marks the pages clean, and a later
  // fsync may return 0 without writing them. A pool whose sync failed must
  // not be reopened writable from the same page cache (without a reboot)
  // on the strength of this sync; nor does a retry in this process make
  // the failed attempt's pages durable.
  if (Status s = file->Sync(); !s.ok()) return s;
  if (!choice_.redundant) {
    std::string img;
    Status s = EncodeSuperblockV3(choice_.sb, &img);
    if (s.ok()) s = file->Write(choice_.other * kSuperblockSlot, img.size(), img.data());
    if (s.ok()) s = file->Sync();
    if (!s.ok()) return s;
    choice_.redundant = true;
    choice_.other = -1;
    choice_.other_state.clear();
  }
  slots_settled_ = true;
  return Status::Ok();
}

Status FormatV3::CommitBatch(File* file, const JournalBatch& b) {
  if (!ring_) return Status(Code::kInvalidArgument, "format 3: CommitBatch before LoadState");
  if (needs_open_ckpt_)
    return Status(Code::kInvalidArgument,
                  "format 3: no batch before the open's checkpoint (the replayed ring may hold stale records "
                  "past its tail)");
  if (ckpt_failed_)
    return Status(Code::kInvalidArgument, "format 3: a checkpoint failed; only a checkpoint or a reopen may follow");
  // The writer rule's open half needs no step here: after the open's
  // checkpoint, which every batch follows, both slots hold one durable copy
  // (slots_settled_).
  if (!ring_->Fits(b.bytes.size()))
    return Status(Code::kNoSpace, "journal full: " + N(b.bytes.size()) + " bytes do not fit");
  return ring_->WriteBatch(file, b);
}

namespace {

// What Freeze copies for WriteCheckpoint (meta_format.h's FrozenDetail).
struct FrozenV3 final : FrozenDetail {
  // By address: a Freeze must never outlive its format (format_v3.h), or a
  // format later built at that address could take it for its own.
  const FormatV3* format = nullptr;  // the format that froze it ...
  uint64_t checkpoint = 0;           // ... over its tree after this many checkpoints
  uint32_t next_lun_id = 0;
  std::vector<LunRecord> luns;         // id order
  std::map<uint32_t, ExtentMap> maps;  // the LUNs with runs
  DirtyRanges dirty;                   // relative to that tree
  uint64_t pages = 0;                  // the bound on the pages its checkpoint writes
  uint64_t leaves = 0;                 // ... of which fresh leaves (exact)
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The index pages a checkpoint writes over `leaves` leaves at most (fresh
// and named again), with prev_pages[l] pages at level l of the previous
// tree: at each level, over n children, new pages fill the stretches
// between the P pages named again, at most P + 1 stretches, so at most
// ceil(n / kIndexFillEntries) + P + 1 of them, and never more than n. The
// sum runs over every level the tree may have. Grows with `leaves` and
// with each prev_pages[l]. *new_pages (if given) gets a bound on each
// level's pages in the tree written: the P kept and those written, at most
// one a child; each is at least prev_pages[l].
uint64_t IndexPagesBound(uint64_t leaves, const std::vector<uint64_t>& prev_pages,
                         std::vector<uint64_t>* new_pages = nullptr) {
  uint64_t pages = 0;
  uint64_t n = leaves;
  for (uint32_t level = 0; n > 0 && level <= kIndexMaxLevel; level++) {
    const uint64_t p = level < prev_pages.size() ? prev_pages[level] : 0;
    const uint64_t written = std::min(n, CeilDiv(n, kIndexFillEntries) + p + 1);
    pages += written;
    const uint64_t total = std::min(n, p + written);
    if (new_pages) new_pages->push_back(total);
    if (total <= 1) break;  // the root
    n = total;
  }
  return pages;
}

std::vector<uint64_t> LevelSizes(const CkptTree& t) {
  std::vector<uint64_t> sizes;
  for (const auto& level : t.levels) sizes.push_back(level.size());
  return sizes;
}

// A bound on the pages WriteCkptTree writes for `f` over `prev`: its fresh
// leaves exactly (FreshLeafCount, by its own rule: only the stretches of
// previous leaves it re-packs, so a change costs about its own leaves, not
// the LUN's), stored in f.leaves, and the index pages over them and the
// previous leaves (IndexPagesBound, which bounds the new tree's levels in
// *new_levels). A bound that overshoots costs AUs Core gets back, one that
// falls short a failed checkpoint (the pages run out: the pool fails).
uint64_t TreePagesBound(FrozenV3& f, const CkptTree& prev, std::vector<uint64_t>* new_levels) {
  std::map<uint32_t, const ExtentMap*> maps;
  for (const auto& [id, m] : f.maps) maps.emplace(id, &m);
  const uint64_t leaves = FreshLeafCount(maps, f.dirty, prev);
  f.leaves = leaves;
  return leaves + IndexPagesBound(prev.leaves.size() + leaves, LevelSizes(prev), new_levels);
}

// Freeze's meta_units from counts, over the tree as it stands, whatever is
// dirty: every page new (none reused from the chunks' free pages).
//   LUN table: a page holds records until the next does not fit, so each
//     holds at least (kLunPageBytes - kLunPageHeader) - kLunCheckpointBytesBound
//     bytes of them.
//   Fresh leaves (FreshLeafCount): each re-packed stretch of n runs takes
//     one leaf if n <= kLeafPageRuns, else ceil(n / kLeafFillRuns): at most
//     n / kLeafFillRuns + 1 either way. A stretch is a maximal run of
//     previous leaves, or a LUN new to the tree: S <= previous leaves +
//     LUNs. (Not <= extents: one long run may cross many stretches.)
//     A map run crossing a stretch's ends is clipped into it, so the
//     stretches hold at most extents + 2S runs. Joining runs (VisitJoined) only
//     lowers the count.
//   Index pages: IndexPagesBound over the previous and the fresh leaves.
// One LUN more than asked: one being created or cloned is a new record and
// a new stretch.
class ShadowTreeCost final : public CheckpointCost {
 public:
  ShadowTreeCost(uint64_t pages_per_au, uint64_t prev_leaves, std::vector<uint64_t> prev_levels)
      : pages_per_au_(pages_per_au), prev_leaves_(prev_leaves), prev_levels_(std::move(prev_levels)) {}
  uint64_t UnitsBound(uint64_t luns, uint64_t extents) const override {
    return CeilDiv(Pages(luns, extents), pages_per_au_);
  }
  std::optional<uint64_t> PagesBound(uint64_t luns, uint64_t extents) const override {
    return Pages(luns, extents);
  }

 private:
  uint64_t Pages(uint64_t luns, uint64_t extents) const {
    luns += 1;
    const uint64_t lun_pages =
        1 + CeilDiv(luns * kLunCheckpointBytesBound, kLunPageBytes - kLunPageHeader - kLunCheckpointBytesBound);
    const uint64_t stretches = prev_leaves_ + luns;
    const uint64_t leaves = CeilDiv(extents + 2 * stretches, kLeafFillRuns) + stretches;
    return lun_pages + leaves + IndexPagesBound(prev_leaves_ + leaves, prev_levels_);
  }

  const uint64_t pages_per_au_;
  const uint64_t prev_leaves_;
  const std::vector<uint64_t> prev_levels_;
};

// Gives the pages of the chunks the current checkpoint leaves free, then
// those of the AUs Core handed over, in address order within each.
class ChunkPages final : public PageAllocator {
 public:
  explicit ChunkPages(std::vector<uint64_t> pages) : pages_(std::move(pages)) {}
  Result<uint64_t> Allocate() override {
    if (next_ == pages_.size())
      return Status(Code::kNoSpace, "format 3: the checkpoint's pages do not fit the metadata AUs given");
    return pages_[next_++];
  }

 private:
  std::vector<uint64_t> pages_;
  size_t next_ = 0;
};

}  // namespace

FrozenCheckpoint FormatV3::Freeze(const MetaState& st) const {
  DirtyRanges all;
  for (const auto& [id, l] : st.luns()) all.MarkLun(id);
  for (const IndexEntry& e : tree_.leaves) all.MarkLun(e.first.lun);  // deleted LUNs' leaves go
  return Freeze(st, all);
}

FrozenCheckpoint FormatV3::Freeze(const MetaState& st, const DirtyRanges& dirty) const {
  // Before LoadState there is no checkpoint to shadow (before
  // ChooseSuperblock, not even an AU size to count pages by): a Freeze of
  // no detail, which WriteCheckpoint refuses.
  if (!ring_) return FrozenCheckpoint();
  auto f = std::make_shared<FrozenV3>();
  f->format = this;
  f->checkpoint = checkpoints_;
  f->next_lun_id = st.next_lun_id;
  for (const auto& [id, l] : st.luns()) {
    f->luns.push_back(RecordOf(id, *l));
    if (l->map.extents() > 0) f->maps.emplace(id, l->map);
  }
  f->dirty.Merge(dirty);
  f->dirty.Merge(carried_dirty_);

  std::vector<uint64_t> new_levels;
  const uint64_t pages = LunTablePageCount(f->luns) + TreePagesBound(*f, tree_, &new_levels);
  f->pages = pages;
  const uint64_t per_au = choice_.sb.au / kLeafPageBytes;
  const uint64_t free_pages = chunks_.size() * per_au - PagesOf(tree_, lun_pages_).size();
  FrozenCheckpoint out;
  out.meta_units = pages > free_pages ? CeilDiv(pages - free_pages, per_au) : 0;
  // The next Freeze shadows the tree this one writes: at most the previous
  // leaves (those kept) and the fresh ones, with the levels IndexPagesBound
  // allowed. ShadowTreeCost grows with both, so it also holds over the
  // current tree, should this checkpoint not be written.
  out.next_cost = std::make_shared<ShadowTreeCost>(per_au, tree_.leaves.size() + f->leaves, std::move(new_levels));
  out.detail = std::move(f);
  return out;
}

uint64_t FormatV3::UpgradePageAus(uint32_t au, uint64_t luns, uint64_t extents) {
  return ShadowTreeCost(au / kLeafPageBytes, 0, {}).UnitsBound(luns, extents);
}

Status FormatV3::WriteUpgrade(File* file, SuperblockV3 sb, const MetaState& st, const std::vector<uint64_t>& page_aus,
                              uint64_t* pages_written) {
  *pages_written = 0;
  // The codec's rules first (the roots are placeholders here, in the data
  // area): nothing is written for a superblock no open would take.
  sb.lun_table = {sb.data_offset, sb.seq};
  sb.index = kNoIndex;
  std::string img;
  if (Status s = EncodeSuperblockV3(sb, &img); !s.ok()) return s;
  for (uint64_t au : page_aus)
    if (au >= sb.units)
      return Status(Code::kInvalidArgument, "format 3 upgrade: page AU " + N(au) + " lies past the pool");

  std::vector<uint64_t> pages;
  const uint64_t per_au = sb.au / kLeafPageBytes;
  for (uint64_t au : page_aus)
    for (uint64_t i = 0; i < per_au; i++) pages.push_back(sb.data_offset + au * sb.au + i * kLeafPageBytes);
  ChunkPages alloc(std::move(pages));
  std::vector<LunRecord> luns;
  std::map<uint32_t, const ExtentMap*> maps;
  DirtyRanges all;
  for (const auto& [id, l] : st.luns()) {
    luns.push_back(RecordOf(id, *l));
    if (l->map.extents() > 0) maps.emplace(id, &l->map);
    all.MarkLun(id);
  }

  // The journal's runs zeroed (they held data, which may frame as
  // records), the LUN table and the tree, one sync over all of them; then
  // the superblock naming them, slot by slot (the writer rule).
  Status s = ClearJournalRuns(file, sb.au, sb.data_offset, sb.journal);
  uint64_t lun_root = 0;
  std::vector<uint64_t> lun_pages;
  if (s.ok())
    s = WriteLunTable(file, sb.uuid, sb.seq, st.next_lun_id, luns, [&alloc] { return alloc.Allocate(); }, &lun_root,
                      &lun_pages);
  CkptWrite w;
  if (s.ok()) s = WriteCkptTree(PoolOf(sb), sb.seq, maps, all, CkptTree(), alloc, *file, &w);
  if (s.ok()) s = file->Sync();
  if (!s.ok()) return s;
  *pages_written = lun_pages.size() + w.written.size();
  sb.index = w.tree.root;
  sb.lun_table = {lun_root, sb.seq};
  if (s = EncodeSuperblockV3(sb, &img); !s.ok()) return s;
  return WriteSlotsInOrder(file, img, sb.seq);
}

std::shared_ptr<const CheckpointCost> FormatV3::NextCheckpointCost() const {
  // Before LoadState there is no AU size to count pages by; nothing asks.
  const uint64_t per_au = ring_ ? choice_.sb.au / kLeafPageBytes : 1;
  return std::make_shared<ShadowTreeCost>(per_au, tree_.leaves.size(), LevelSizes(tree_));
}

uint64_t FormatV3::PagesBound(const FrozenCheckpoint& frozen) {
  const auto* f = dynamic_cast<const FrozenV3*>(frozen.detail.get());
  return f ? f->pages : 0;
}

uint64_t FormatV3::FreshLeaves(const FrozenCheckpoint& frozen) {
  const auto* f = dynamic_cast<const FrozenV3*>(frozen.detail.get());
  return f ? f->leaves : 0;
}

Status FormatV3::WriteSuperblock(File* file, SuperblockV3 sb) {
  std::string img;
  Status s = EncodeSuperblockV3(sb, &img);
  if (s.ok()) highest_seq_used_ = std::max(highest_seq_used_, sb.seq);
  // Before each slot write, that slot is marked for the next superblock
  // write (a retry's, Grow's) to rewrite with the chosen copy, synced,
  // first (SettleSlots): a failure (a status, or an exception) may
  // leave it holding a copy in the cache only, or a torn one, and writing
  // the other slot then could leave both in flight. `slot` names the other
  // one, which holds the chosen copy or, once the first slot was synced,
  // this copy.
  if (s.ok())
    s = WriteSlotsInOrder(file, img, sb.seq, [&](uint64_t slot) {
      slots_settled_ = false;
      choice_.redundant = false;
      choice_.other = static_cast<int>(slot);
      choice_.slot = static_cast<int>(1 - slot);
      choice_.other_state.clear();  // no chooser's verdict (and no allocation)
    });
  if (!s.ok()) return s;
  choice_.sb = std::move(sb);  // a move: nothing after the durable writes may throw
  choice_.slot = 0;
  choice_.redundant = true;
  choice_.other = -1;
  choice_.other_state.clear();
  slots_settled_ = true;
  return Status::Ok();
}

Status FormatV3::WriteCheckpoint(File* file, const FrozenCheckpoint& frozen, const std::vector<uint64_t>& units,
                                 uint64_t start_lsn) {
  return WriteCheckpoint(file, frozen, units, start_lsn, nullptr, nullptr);
}

Status FormatV3::WriteCheckpoint(File* file, const FrozenCheckpoint& frozen, const std::vector<uint64_t>& units,
                                 uint64_t start_lsn, JournalSpace* space, JournalGrowth* growth) {
  if (growth) *growth = JournalGrowth();
  // The runs a growing journal took go back to `space` on any failure
  // (header comment), an exception too.
  JournalPlan plan;
  Status s;
  try {
    s = CheckpointBody(file, frozen, units, start_lsn, space, &plan, growth);
  } catch (...) {
    for (const JournalExtent& r : plan.allocated) space->Give(r);
    throw;
  }
  if (!s.ok())
    for (const JournalExtent& r : plan.allocated) space->Give(r);
  return s;
}

Status FormatV3::CheckpointBody(File* file, const FrozenCheckpoint& frozen, const std::vector<uint64_t>& units,
                                uint64_t start_lsn, JournalSpace* space, JournalPlan* plan, JournalGrowth* growth) {
  if (!ring_) return Status(Code::kInvalidArgument, "format 3: WriteCheckpoint before LoadState");
  const auto* f = dynamic_cast<const FrozenV3*>(frozen.detail.get());
  if (f == nullptr || f->format != this || f->checkpoint != checkpoints_)
    return Status(Code::kInvalidArgument, "format 3: the checkpoint was not frozen by this format over its tree");
  if (needs_open_ckpt_ && (start_lsn < replayed_next_lsn_ || start_lsn - replayed_next_lsn_ < kLsnGapAfterOpen))
    return Status(Code::kInvalidArgument, "format 3: the open's checkpoint must start the journal at least " +
                                              N(kLsnGapAfterOpen) + " LSNs past the replayed ones (" +
                                              N(replayed_next_lsn_) + "), not at " + N(start_lsn));
  const SuperblockV3 cur = choice_.sb;
  const std::vector<uint64_t> journal_and_chunks = meta_units();
  std::set<uint64_t> given;
  for (uint64_t u : units)
    if (u >= cur.units || std::binary_search(journal_and_chunks.begin(), journal_and_chunks.end(), u) ||
        !given.insert(u).second)
      return Status(Code::kInvalidArgument, "format 3: AU " + N(u) + " given for a checkpoint is not a free AU");

  // The journal's list for the new superblock: the current one, or the one
  // GrowJournal plans for the frozen maps (3.4: the journal sized with the
  // map, within its share of the pool), whose runs new to it must be free
  // AUs the pages do not use.
  plan->extents = cur.journal;
  if (space != nullptr) {
    uint64_t extents = 0, journal_aus = 0;
    for (const auto& [id, m] : f->maps) extents += m.extents();
    for (const JournalExtent& x : cur.journal) journal_aus += x.aus;
    *plan = GrowJournal(cur.journal, JournalTargetAus(extents, cur.au, cur.units, journal_aus), space);
    for (const JournalExtent& r : plan->allocated)
      for (uint64_t u = r.first_au; u - r.first_au < r.aus; u++)
        if (u >= cur.units || std::binary_search(journal_and_chunks.begin(), journal_and_chunks.end(), u) ||
            given.count(u))
          return Status(Code::kInvalidArgument,
                        "format 3: AU " + N(u) + " taken for the journal is not a free AU outside the checkpoint's");
  }
  // A changed list is a new ring: replay starts at its offset 0 (its new
  // segments cleared below, its kept ones holding records of lower LSNs
  // only), the ring built now, before the superblock, since it allocates.
  std::optional<JournalRing> new_ring;
  if (plan->changed()) {
    auto layout = JournalLayout::Make(cur.au, cur.data_offset, cur.units, plan->extents);
    if (!layout.ok()) return layout.status();
    auto ring = JournalRing::Open(std::move(layout).value(), 0, 0);
    if (!ring.ok()) return ring.status();
    new_ring.emplace(std::move(ring).value());
  }

  // The new superblock, checked by its codec before anything is written
  // (all but the roots, which the writers give).
  SuperblockV3 nsb = cur;
  nsb.journal = plan->extents;
  // A pool copied onto a medium of a larger atomic unit (3.8) lays its
  // journal out in that unit from now on; a multiple of it is one of every
  // smaller unit, so the unit only grows.
  nsb.write_unit = std::max(cur.write_unit, file->AtomicWriteBytes());
  nsb.journal_start = new_ring ? 0 : ring_->RestartOffset(nsb.write_unit);
  nsb.journal_start_lsn = start_lsn;
  std::string img;
  if (Status s = EncodeSuperblockV3(nsb, &img); !s.ok()) return s;
  // The report, made now: nothing allocates once the superblock is durable.
  JournalGrowth report{plan->allocated, plan->freed};
  // The frozen dirty set is carried into the next Freeze from here on, so
  // that any failure (a status, or an exception: bad_alloc) keeps it; a
  // success clears it.
  carried_dirty_.Merge(f->dirty);

  // The writer rule's open half first, unless PrepareWrites or a durable
  // superblock write did it: when the chooser passed over a slot (damaged,
  // stale), the chosen copy is the pool's only valid one, and the spend
  // write below may go to its slot first; a cut tearing that write would
  // leave no slot to open. So the chosen copy is made durable (a previous
  // process may have died before its sync) and the other slot gets it,
  // synced, before any superblock of a new sequence is written.
  if (Status s = SettleSlots(file); !s.ok()) return s;
  // Spend a sequence an earlier attempt may have used (header comment),
  // under one above every sequence this format wrote: a failed attempt's
  // superblock may sit in both slots under choice_.sb.seq + 1 (it failed
  // at its last sync), and a different copy under that sequence in one
  // slot would be "two writers" to the chooser.
  if (seq_spent_) {
    SuperblockV3 burn = cur;
    burn.seq = std::max(cur.seq, highest_seq_used_) + 1;
    if (Status s = WriteSuperblock(file, std::move(burn)); !s.ok()) return s;
    seq_spent_ = false;
  }
  nsb.seq = choice_.sb.seq + 1;
  highest_seq_used_ = std::max(highest_seq_used_, nsb.seq);
  seq_spent_ = true;  // from here on pages may carry nsb.seq
  ckpt_failed_ = true;  // until the attempt succeeds (CommitBatch)

  // The pages: those of the chunks the current checkpoint leaves free,
  // then the AUs given, each in address order.
  std::vector<uint64_t> live = PagesOf(tree_, lun_pages_);
  std::vector<uint64_t> pages;
  const uint64_t per_au = cur.au / kLeafPageBytes;
  auto add_au = [&](uint64_t au) {
    for (uint64_t i = 0; i < per_au; i++) {
      const uint64_t a = cur.data_offset + au * cur.au + i * kLeafPageBytes;
      if (!std::binary_search(live.begin(), live.end(), a)) pages.push_back(a);
    }
  };
  for (uint64_t au : chunks_) add_au(au);
  for (uint64_t au : given) add_au(au);
  ChunkPages alloc(std::move(pages));

  // The journal's new segments zeroed (they held data, which may frame as
  // records: journal_segments.h), then the LUN table, then the tree, whose
  // sync covers all three (and the data written before: 3.6 item 1); then
  // the superblock naming them.
  Status s = ClearJournalRuns(file, cur.au, cur.data_offset, plan->allocated);
  uint64_t lun_root = 0;
  std::vector<uint64_t> lun_pages;
  if (s.ok())
    s = WriteLunTable(file, cur.uuid, nsb.seq, f->next_lun_id, f->luns, [&alloc] { return alloc.Allocate(); },
                      &lun_root, &lun_pages);
  std::map<uint32_t, const ExtentMap*> maps;
  for (const auto& [id, m] : f->maps) maps.emplace(id, &m);
  CkptWrite w;
  if (s.ok()) s = WriteCkptTree(PoolOf(cur), nsb.seq, maps, f->dirty, tree_, alloc, *file, &w);
  if (s.ok() && w.written.empty()) s = file->Sync();  // WriteCkptTree syncs only what it wrote
  // The new chunks before the superblock: nothing that allocates (and may
  // throw) runs once it is durable, so the format never holds half of it.
  std::set<uint64_t> chunks;
  if (s.ok()) chunks = ChunksOf(w.tree, lun_pages);
  if (s.ok()) {
    nsb.index = w.tree.root;
    nsb.lun_table = {lun_root, nsb.seq};
    s = WriteSuperblock(file, std::move(nsb));
  }
  if (!s.ok()) return s;
  // The new checkpoint is durable: it is the format's (by moves and swaps
  // only), and the pages of the previous one it no longer names are free
  // (so are the chunks left without a live page: meta_units()).
  tree_ = std::move(w.tree);
  lun_pages_ = std::move(lun_pages);
  chunks_.swap(chunks);
  seq_spent_ = false;
  ckpt_failed_ = false;
  needs_open_ckpt_ = false;
  carried_dirty_ = DirtyRanges();
  checkpoints_++;
  // The checkpoint holds every record before start_lsn.
  if (new_ring) {
    new_ring->RaiseDurableLsn(std::max(ring_->durable_lsn(), start_lsn - 1));
    *ring_ = std::move(*new_ring);  // a move: the durable LSN never reads lower
  } else {
    ring_->Restart(choice_.sb.write_unit);
    ring_->RaiseDurableLsn(start_lsn - 1);
  }
  if (growth) std::swap(*growth, report);
  return Status::Ok();
}

std::string FormatV3::UnitsRule(uint64_t aus) const {
  if (!ring_) return "format 3: no pool loaded";
  return PoolUnitsRuleV3(aus, choice_.sb.au, choice_.sb.grain);
}

Status FormatV3::Grow(File* file, uint64_t new_size) {
  if (!ring_) return Status(Code::kInvalidArgument, "format 3: Grow before LoadState");
  // Every refusal before any write.
  const SuperblockV3& cur = choice_.sb;
  const uint64_t cur_size = cur.data_offset + cur.units * cur.au;
  if (new_size <= cur_size || (new_size - cur.data_offset) / cur.au == cur.units)
    return Status(Code::kInvalidArgument, "format 3: a pool grows by whole AUs: " + N(new_size) +
                                              " bytes adds none to its " + N(cur_size));
  SuperblockV3 nsb = cur;
  nsb.units = (new_size - cur.data_offset) / cur.au;
  if (std::string why = PoolUnitsRuleV3(nsb.units, cur.au, cur.grain); !why.empty())
    return Status(Code::kInvalidArgument, "format 3: pool too large: " + why);
  // A sequence above every one this format wrote (as a checkpoint's spend
  // write: a failed attempt's superblock may be on disk under any of them).
  nsb.seq = std::max(cur.seq, highest_seq_used_) + 1;
  std::string img;
  if (Status s = EncodeSuperblockV3(nsb, &img); !s.ok()) return s;

  // The writer rule's open half first, as WriteCheckpoint's (which says
  // why), unless done: the chosen copy made durable, then the other slot
  // rewritten with it.
  if (Status s = SettleSlots(file); !s.ok()) return s;
  // Until the new superblock is durable in both slots, either slot may hold
  // it (under a sequence no later write may reuse: WriteSuperblock raised
  // highest_seq_used_), so the next checkpoint spends a sequence first.
  seq_spent_ = true;
  if (Status s = WriteSuperblock(file, std::move(nsb)); !s.ok()) return s;
  // It names the current checkpoint under a sequence above every page an
  // attempt wrote: a spend write, so the next checkpoint needs none.
  seq_spent_ = false;
  return Status::Ok();
}

}  // namespace cowstore::store
