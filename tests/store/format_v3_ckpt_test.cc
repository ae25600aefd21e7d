// SPDX-License-Identifier: Apache-2.0
// FormatV3's checkpoints (format_v3.h): what WriteCheckpoint writes loads
// back as the state it froze; a checkpoint cut at any Env call, in any
// power-loss mode, opens as the previous checkpoint or the new one, never a
// mix; the previous checkpoint's pages are not written before the
// superblock that replaces it is durable; every attempt takes a fresh
// sequence. Power cut at each call (also tearing every superblock slot in
// flight) of the first checkpoint after a damaged slot, of a retry after
// any superblock sync failed, and of the open's checkpoint after a process
// died inside one: the pool opens. The open's checkpoint must jump the
// LSNs past a torn tail's. An allocation failing anywhere in a checkpoint or LoadState
// leaves the format (and LoadState's *st) whole, and gives a growing
// checkpoint's journal runs back. LoadState's refusals (a
// page in the journal or named by both codecs, a record ApplyRecord
// refuses) leave *st whole; replayed deletes and rollbacks reach the next
// checkpoint; a ring restarted inside itself wraps and never reads a stale
// record, through power cuts at its open's checkpoint. No batch between
// LoadState and the open's checkpoint; a Freeze before LoadState is
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "handler/store/dirty_ranges.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/journal.h"
#include "handler/store/lun_table_page.h"
#include "handler/store/meta_format.h"
#include "tests/common/sanitizers.h"
#include "tests/store/format_v3_pool.h"

#if COWSTORE_CAN_REPLACE_NEW()
// Allocation failure, for the bad_alloc tests: while armed (>= 0), the
// allocation after that many more throws. Every other test runs unarmed.
// (Not under TSan, whose runtime owns operator new: sanitizers.h.)
namespace {
int64_t g_allocs_before_failure = -1;
}  // namespace

void* operator new(std::size_t n) {
  if (g_allocs_before_failure >= 0 && g_allocs_before_failure-- == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
#include "tests/common/malloc_delete.h"
#endif  // COWSTORE_CAN_REPLACE_NEW()

namespace cowstore::store {
namespace {

using namespace v3pool;  // NOLINT(build/namespaces): the pool helpers, test-only
using v3pool::Lun;       // over store::Lun


class FormatV3Ckpt : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = env_.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), Id(9), kAu, kGrain, kSize, kJournal, 80).ok());
  }
  // Opens a copy of the pool as it reads now (the writer may hold it open)
  // and expects `want`, loaded with the journal starting at `start_lsn`.
  void ExpectLoads(const MetaState& want, uint64_t start_lsn) {
    const std::vector<uint8_t> img = env_.Snapshot("p");
    FaultInjectionEnv copy;
    copy.Install("p", img.data(), img.size());
    Opened o;
    Status s = Open(&copy, &o);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, o.st));
    EXPECT_EQ(o.meta.end.next_lsn, start_lsn);
    EXPECT_EQ(o.meta.end.tail, 0u);
    EXPECT_TRUE(o.format->journal_empty());
  }
  // The bytes of `pages` in the current image.
  std::vector<std::string> Bytes(const std::vector<uint64_t>& pages) const {
    const std::vector<uint8_t> img = env_.Snapshot("p");
    std::vector<std::string> out;
    for (uint64_t a : pages) out.emplace_back(img.begin() + a, img.begin() + a + 4096);
    return out;
  }

  FaultInjectionEnv env_;
};

std::vector<uint64_t> LivePages(const FormatV3& v3) {
  std::vector<uint64_t> p = v3.tree().Pages();
  p.insert(p.end(), v3.lun_table_pages().begin(), v3.lun_table_pages().end());
  std::sort(p.begin(), p.end());
  return p;
}

// ------------------------------------------------------------ round trip

// Several checkpoints over one open, each reopened and compared with the
// state it froze: LUNs made, grown past one index page, emptied, deleted;
// every leaf rewritten (no dirty set) and only the dirty ones.
TEST_F(FormatV3Ckpt, SeveralCheckpointsLoadAsTheStateTheyFroze) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  uint64_t seq = o.format->superblock_seq();

  // 1: three LUNs, one of them large enough for two index levels
  // (30,000 runs: ~134 leaves, over 100 entries an index page holds).
  st.AddLun(Lun(1, "small", 10, 0));
  st.AddLun(Lun(2, "large", 30000, 3));
  st.AddLun(Lun(3, "empty", 0, 0));
  st.next_lun_id = 4;
  lsn += 1000;
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  EXPECT_GT(o.format->superblock_seq(), seq);
  seq = o.format->superblock_seq();
  EXPECT_GE(o.v3->tree().root.level, 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));

  // 2: only a range of LUN 2 changes, with its dirty set: most leaves are
  // named again, not written.
  const std::vector<uint64_t> before = o.v3->tree().Pages();
  st.Find(2)->map.Remove(20000, 2000, nullptr);
  ASSERT_TRUE(st.Find(2)->map.Insert(20001, 1999, 1).ok());
  DirtyRanges dirty;
  dirty.Mark(2, 20000, 2000);
  lsn += 7;
  ASSERT_TRUE(Checkpoint(&o, st, lsn, &dirty).ok());
  EXPECT_GT(o.format->superblock_seq(), seq);
  seq = o.format->superblock_seq();
  std::vector<uint64_t> after = o.v3->tree().Pages();
  std::vector<uint64_t> kept;
  std::sort(after.begin(), after.end());
  std::vector<uint64_t> sorted_before = before;
  std::sort(sorted_before.begin(), sorted_before.end());
  std::set_intersection(sorted_before.begin(), sorted_before.end(), after.begin(), after.end(),
                        std::back_inserter(kept));
  EXPECT_GT(kept.size(), before.size() / 2) << "unchanged leaves are named again";
  EXPECT_LT(kept.size(), before.size()) << "the changed ones are written afresh";
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));

  // 3: a LUN deleted, one emptied, one made; the next LUN id moves on.
  st.EraseLun(1);
  st.Find(2)->map.Remove(0, ExtentMap::kMaxLba, nullptr);
  st.AddLun(Lun(5, "new", 600, 11));
  st.next_lun_id = 6;
  lsn += 3;
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));

  // 4: no LUN at all: no index (kNoIndex), the LUN table keeps the next id.
  st.EraseLun(2);
  st.EraseLun(3);
  st.EraseLun(5);
  lsn += 1;
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  EXPECT_EQ(o.v3->tree().root, kNoIndex);
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
  EXPECT_EQ(o.v3->meta_units().size(), 2u) << "one chunk for the LUN table, the journal's AU";
}

// Checkpoint with `dirty`, and no more fresh pages (the new checkpoint's
// pages the previous did not name: every page it wrote) than its Freeze
// bounded it by. The AUs handed over are not enough to check the bound:
// free pages of the chunks would hide a bound that falls short.
void CheckpointWithinItsBound(Opened* o, const MetaState& st, uint64_t lsn, const DirtyRanges& dirty) {
  const std::vector<uint64_t> prev = LivePages(*o->v3);
  FrozenCheckpoint f = o->v3->Freeze(st, dirty);
  Status s = o->format->WriteCheckpoint(o->file.get(), f, FreeAus(*o->v3, f.meta_units), lsn);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint64_t> now = LivePages(*o->v3);
  std::vector<uint64_t> fresh;
  std::set_difference(now.begin(), now.end(), prev.begin(), prev.end(), std::back_inserter(fresh));
  EXPECT_LE(fresh.size(), FormatV3::PagesBound(f));
  uint64_t fresh_leaves = 0;
  for (const IndexEntry& e : o->v3->tree().leaves)
    fresh_leaves += !std::binary_search(prev.begin(), prev.end(), e.addr);
  EXPECT_EQ(fresh_leaves, FormatV3::FreshLeaves(f)) << "the bound counts the leaves as the writer packs them";
}

// Grows each of LUN 1's leaves `which` picks (by index) to `runs` runs, by
// single-grain runs at its free odd LBAs, and marks them dirty.
void GrowLeaves(MetaState* st, const FormatV3& v3, const std::function<bool(size_t)>& which, size_t runs,
                DirtyRanges* dirty) {
  ExtentMap& m = st->Find(1)->map;
  std::vector<IndexEntry> leaves;
  for (const IndexEntry& e : v3.tree().leaves)
    if (e.first.lun == 1) leaves.push_back(e);
  for (size_t k = 0; k < leaves.size(); k++) {
    if (!which(k)) continue;
    const IndexEntry& leaf = leaves[k];
    std::vector<store::Run> held;
    m.Lookup(leaf.first.lba, leaf.end.lba - leaf.first.lba, &held);
    for (uint64_t lba = leaf.first.lba | 1; held.size() < runs && lba < leaf.end.lba; lba += 2) {
      if (m.Find(lba) != ExtentMap::kUnmapped) continue;
      ASSERT_TRUE(m.Insert(lba, (lba * 5 + 777) % kPhysGrains, 1).ok());
      dirty->Mark(1, lba, 1);
      held.clear();
      m.Lookup(leaf.first.lba, leaf.end.lba - leaf.first.lba, &held);
    }
    ASSERT_EQ(held.size(), runs) << "leaf " << k;
  }
}

// Scattered changes over many leaves, each marked dirty: every checkpoint
// writes no more pages than its Freeze bounded (so fits the AUs it asked
// for: Checkpoint hands over exactly those), writes only the dirty leaves'
// pages and loads back as the state. Then the bound's hard cases: many
// stretches of one or two leaves, each brought to about 240 runs a leaf
// (some past the 252 a leaf holds: they split), so index pages gain entries
// past their 100 and split too. Seeded: the same rounds every run.
TEST_F(FormatV3Ckpt, ScatteredDirtyRangesFitTheAusFreezeAskedForAndLoadBack) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "big", 30000, 1));
  st.AddLun(Lun(2, "small", 500, 2));
  st.next_lun_id = 3;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  ASSERT_TRUE(Checkpoint(&o, st, ++lsn).ok());
  std::mt19937_64 rng(42);
  for (int round = 0; round < 8; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    DirtyRanges dirty;
    const int changes = 1 + static_cast<int>(rng() % 40);
    for (int c = 0; c < changes; c++) {
      const uint32_t lun = rng() % 4 ? 1 : 2;
      ExtentMap& m = st.Find(lun)->map;
      const uint64_t lba = rng() % (lun == 1 ? 60000 : 1000);
      const uint64_t len = 1 + rng() % (round % 2 ? 600 : 3);  // whole leaves removed on odd rounds
      m.Remove(lba, len, nullptr);
      if (rng() % 2) {
        ASSERT_TRUE(m.Insert(lba, rng() % (kPhysGrains - len), len).ok());
      }
      dirty.Mark(lun, lba, len);
    }
    const std::vector<uint64_t> prev = o.v3->tree().Pages();
    ASSERT_NO_FATAL_FAILURE(CheckpointWithinItsBound(&o, st, ++lsn, dirty));
    std::vector<uint64_t> now = o.v3->tree().Pages(), fresh, old = prev;
    std::sort(now.begin(), now.end());
    std::sort(old.begin(), old.end());
    std::set_difference(now.begin(), now.end(), old.begin(), old.end(), std::back_inserter(fresh));
    EXPECT_LT(fresh.size(), now.size() / 2) << "only the dirty leaves and their index pages are written";
    ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
  }

  bool leaves_split = false, index_split = false;
  for (size_t round = 0; round < 4; round++) {
    SCOPED_TRACE("stretch round " + std::to_string(round));
    ExtentMap& m = st.Find(1)->map;
    std::vector<IndexEntry> leaves;
    for (const IndexEntry& e : o.v3->tree().leaves)
      if (e.first.lun == 1) leaves.push_back(e);
    DirtyRanges dirty;
    int stretches = 0;
    for (size_t k = round % 2; k + 1 < leaves.size(); k += 2) {
      // A stretch of leaf k, and of leaf k + 1 too every third time.
      const size_t last = k % 6 == round % 2 ? k + 1 : k;
      stretches++;
      for (size_t j = k; j <= last; j++) {
        const IndexEntry& leaf = leaves[j];
        std::vector<store::Run> held;
        m.Lookup(leaf.first.lba, leaf.end.lba - leaf.first.lba, &held);
        const size_t target = 236 + (j * 13) % 30;  // 236 .. 265 runs
        for (uint64_t lba = leaf.first.lba | 1; held.size() < target && lba < leaf.end.lba; lba += 2) {
          if (m.Find(lba) != ExtentMap::kUnmapped) continue;
          ASSERT_TRUE(m.Insert(lba, (lba * 5 + 777) % kPhysGrains, 1).ok());
          dirty.Mark(1, lba, 1);
          held.emplace_back();
        }
      }
    }
    ASSERT_GT(stretches, 20);
    const size_t leaves_before = o.v3->tree().leaves.size();
    const size_t index_before = o.v3->tree().levels[0].size();
    ASSERT_NO_FATAL_FAILURE(CheckpointWithinItsBound(&o, st, ++lsn, dirty));
    leaves_split |= o.v3->tree().leaves.size() > leaves_before;
    index_split |= o.v3->tree().levels[0].size() > index_before;
    ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
  }
  EXPECT_TRUE(leaves_split);
  EXPECT_TRUE(index_split);
}

// The leaves' worst case: every other leaf a stretch of its own, each
// grown to the 252 runs a leaf holds (rewritten as one leaf), then to 253
// (split in two). Freeze counts exactly the leaves written, no more: a
// bound counting each touched LUN's runs would reserve the whole LUN.
TEST_F(FormatV3Ckpt, FreezeCountsTheLeavesOfOneLeafStretchesThatSplit) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 224 * 20, 1));  // 20 leaves of 224 runs
  st.next_lun_id = 2;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  ASSERT_TRUE(Checkpoint(&o, st, ++lsn).ok());
  ASSERT_EQ(o.v3->tree().leaves.size(), 20u);
  const auto even = [](size_t k) { return k % 2 == 0; };
  for (size_t runs : {252u, 253u}) {
    SCOPED_TRACE(std::to_string(runs) + " runs a stretch");
    DirtyRanges dirty;
    ASSERT_NO_FATAL_FAILURE(GrowLeaves(&st, *o.v3, even, runs, &dirty));
    const FrozenCheckpoint f = o.v3->Freeze(st, dirty);
    EXPECT_EQ(FormatV3::FreshLeaves(f), runs == 252 ? 10u : 20u);
    const size_t leaves_before = o.v3->tree().leaves.size();
    ASSERT_NO_FATAL_FAILURE(CheckpointWithinItsBound(&o, st, ++lsn, dirty));
    EXPECT_EQ(o.v3->tree().leaves.size(), leaves_before + (runs == 252 ? 0 : 10));
    ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
  }
}

// What a reopen reports as metadata is what the writer keeps: every AU
// holding a page either names, and the journal's, none twice.
TEST_F(FormatV3Ckpt, LoadReportsTheChunksOfEveryPageAndTheJournal) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  for (uint32_t id = 1; id <= 40; id++) st.AddLun(Lun(id, "lun" + std::to_string(id), 300 * id, id));
  st.next_lun_id = 41;
  ASSERT_TRUE(Checkpoint(&o, st, o.meta.end.next_lsn + kLsnGapAfterOpen + 1).ok());
  const std::vector<uint64_t> kept = o.v3->meta_units();
  o = Opened();
  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  EXPECT_EQ(back.meta.meta_units, kept);
  const SuperblockV3& sb = back.v3->choice().sb;
  std::set<uint64_t> want;
  for (uint64_t a : LivePages(*back.v3)) want.insert((a - sb.data_offset) / sb.au);
  for (const JournalExtent& x : sb.journal)
    for (uint64_t i = 0; i < x.aus; i++) want.insert(x.first_au + i);
  EXPECT_EQ(back.meta.meta_units, std::vector<uint64_t>(want.begin(), want.end()));
  EXPECT_GT(want.size(), 3u) << "the pages need AUs beyond Create's chunk";
}

// ------------------------------------------------------------ shadowing

// A checkpoint writes none of the previous checkpoint's pages: they hold
// their bytes until the new superblock is durable. Freed pages are reused
// by the checkpoint after (the chunks are kept), and AUs no page uses any
// more are no longer metadata.
TEST_F(FormatV3Ckpt, ThePreviousCheckpointsPagesAreNotWritten) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 5000, 1));
  st.AddLun(Lun(2, "b", 700, 2));
  st.next_lun_id = 3;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  ASSERT_TRUE(Checkpoint(&o, st, ++lsn).ok());
  for (int round = 0; round < 4; round++) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::vector<uint64_t> prev = LivePages(*o.v3);
    const std::vector<std::string> prev_bytes = Bytes(prev);
    const std::vector<uint64_t> prev_meta = o.v3->meta_units();
    // Every leaf rewritten (no dirty set): the most pages a checkpoint writes.
    ASSERT_TRUE(st.Find(1)->map.Insert(20001 + round * 2, 1, 1).ok());
    ASSERT_TRUE(Checkpoint(&o, st, ++lsn).ok());
    EXPECT_EQ(Bytes(prev), prev_bytes);
    const std::vector<uint64_t> now = LivePages(*o.v3);
    std::vector<uint64_t> both;
    std::set_intersection(prev.begin(), prev.end(), now.begin(), now.end(), std::back_inserter(both));
    EXPECT_TRUE(both.empty()) << "every page was rewritten, each at a fresh address";
    if (round > 0) {
      // The pages freed by the checkpoint before are in use again: the
      // chunks are reused rather than new AUs taken every time.
      std::vector<uint64_t> common;
      const std::vector<uint64_t> meta = o.v3->meta_units();
      std::set_intersection(prev_meta.begin(), prev_meta.end(), meta.begin(), meta.end(),
                            std::back_inserter(common));
      EXPECT_GT(common.size(), o.v3->choice().sb.journal[0].aus) << "chunks reused";
    }
    ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
  }
}

// A tree that maps a LUN the LUN table does not hold is refused, not loaded
// as an orphan map (its grains would count as used by no LUN), and the
// state is left as it was.
TEST_F(FormatV3Ckpt, AMapOfALunTheTableDoesNotHoldIsCorruption) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 50, 1));
  st.AddLun(Lun(2, "b", 50, 2));
  st.next_lun_id = 3;
  SuperblockV3 sb;
  std::vector<uint64_t> chain;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Checkpoint(&o, st, o.meta.end.next_lsn + kLsnGapAfterOpen + 1).ok());
    sb = o.v3->choice().sb;
    chain = o.v3->lun_table_pages();
  }
  // The table rewritten in place, under its own sequence, without LUN 2.
  auto f = env_.OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(chain.size(), 1u);
  LunRecord one;
  one.id = 1;
  one.name = "a";
  one.uuid = Id(1);
  one.size = uint64_t{1} << 30;
  one.attrs.created = 1700000001;
  uint64_t root = 0;
  std::vector<uint64_t> written;
  ASSERT_TRUE(WriteLunTable(f->get(), sb.uuid, sb.lun_table.seq, 3, {one},
                            [&]() -> Result<uint64_t> { return chain[0]; }, &root, &written)
                  .ok());
  ASSERT_TRUE((*f)->Sync().ok());
  f->reset();
  Opened o;
  o.st.next_lun_id = 99;
  Status s = Open(&env_, &o);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("maps LUN 2, which the LUN table does not hold"), std::string::npos) << s.ToString();
  EXPECT_TRUE(o.st.luns().empty());
  EXPECT_EQ(o.st.next_lun_id, 99u);
}

// Hands out `pages` in order (the crafted trees below), then kNoSpace.
class ListedPages final : public PageAllocator {
 public:
  explicit ListedPages(std::vector<uint64_t> pages) : pages_(std::move(pages)) {}
  Result<uint64_t> Allocate() override {
    if (next_ == pages_.size()) return Status(Code::kNoSpace, "no page listed");
    return pages_[next_++];
  }

 private:
  std::vector<uint64_t> pages_;
  size_t next_ = 0;
};

// A tree of `st`'s maps written at `first` (its first leaf) and then at the
// free pages of AU 0, under the sequence after `sb`'s; both slots then name
// it beside `sb`'s LUN table, synced. The tree's root must not be `first`.
void WriteTreeNamingPage(FaultInjectionEnv* env, const SuperblockV3& sb, const std::vector<uint64_t>& live,
                         const MetaState& st, uint64_t first) {
  auto f = env->OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  std::vector<uint64_t> pages{first};
  for (uint64_t a = sb.data_offset; a < sb.data_offset + sb.au; a += 4096)
    if (!std::binary_search(live.begin(), live.end(), a)) pages.push_back(a);
  ListedPages alloc(std::move(pages));
  std::map<uint32_t, const ExtentMap*> maps;
  DirtyRanges dirty;
  for (const auto& [id, l] : st.luns()) {
    maps.emplace(id, &l->map);
    dirty.MarkLun(id);
  }
  SuperblockV3 nsb = sb;
  nsb.seq = sb.seq + 1;
  CkptWrite w;
  ASSERT_TRUE(WriteCkptTree(CkptPool{IndexReadBound(nsb), nsb.grains()}, nsb.seq, maps, dirty, CkptTree(), alloc,
                            **f, &w)
                  .ok());
  ASSERT_NE(w.tree.root.entry.addr, first);
  ASSERT_TRUE(std::count(w.written.begin(), w.written.end(), first)) << "the crafted tree names the page";
  nsb.index = w.tree.root;
  std::string img;
  ASSERT_TRUE(EncodeSuperblockV3(nsb, &img).ok());
  for (uint64_t slot = 0; slot < 2; slot++) ASSERT_TRUE((*f)->Write(slot * kSuperblockSlot, img.size(), img.data()).ok());
  ASSERT_TRUE((*f)->Sync().ok());
}

// LoadState of the pool `env` holds, reading through `device` (the file
// itself when null), must refuse with kCorruption naming `what`, leaving the
// state it was given and the format as they were.
void ExpectLoadRefused(FaultInjectionEnv* env, const std::function<std::unique_ptr<File>(File*)>& device,
                       const std::string& what) {
  auto own = env->OpenLocked("p", Env::Mode::kReadOnly);
  ASSERT_TRUE(own.ok());
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(own->get(), &slots, ServedFormats::kV1ToV3);
  ASSERT_TRUE(chosen.ok());
  auto* v3 = dynamic_cast<FormatV3*>(chosen->get());
  ASSERT_NE(v3, nullptr);
  PoolGeometry g;
  Status s = v3->ChooseSuperblock(slots, &g);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint64_t> units = v3->meta_units();
  MetaState st;
  st.au = g.grain;
  st.next_lun_id = 99;
  LoadedMeta meta;
  std::unique_ptr<File> through = device ? device(own->get()) : nullptr;
  s = v3->LoadState(through ? through.get() : own->get(), &st, &meta);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  EXPECT_TRUE(st.luns().empty());
  EXPECT_EQ(st.next_lun_id, 99u);
  EXPECT_TRUE(meta.meta_units.empty());
  EXPECT_EQ(v3->meta_units(), units);
  EXPECT_TRUE(v3->tree().leaves.empty());
  EXPECT_FALSE(v3->Fits(1)) << "no ring engaged";
}

// A page of the tree (not its root, which the superblock codec checks)
// inside the journal would be overwritten by the next records: refused.
TEST_F(FormatV3Ckpt, ACheckpointPageInTheJournalIsCorruption) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 50, 1));
  st.next_lun_id = 2;
  SuperblockV3 sb;
  std::vector<uint64_t> live;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Checkpoint(&o, st, o.meta.end.next_lsn + kLsnGapAfterOpen + 1).ok());
    sb = o.v3->choice().sb;
    live = LivePages(*o.v3);
  }
  // The journal's last page: replay (from ring offset 0) never reads it.
  const uint64_t in_journal = sb.data_offset + (sb.journal[0].first_au + sb.journal[0].aus) * sb.au - 4096;
  ASSERT_NO_FATAL_FAILURE(WriteTreeNamingPage(&env_, sb, live, st, in_journal));
  ExpectLoadRefused(&env_, nullptr, "checkpoint page at byte " + std::to_string(in_journal) + " lies in the journal");
}

// A device whose page at `addr` reads once as `first` (the first read that
// touches it), then as what it holds: a page that changed between two reads.
class TwoFacedFile final : public File {
 public:
  TwoFacedFile(File* f, uint64_t addr, std::string first) : f_(f), addr_(addr), first_(std::move(first)) {}
  Status Read(uint64_t off, size_t n, void* buf) override {
    Status s = f_->Read(off, n, buf);
    if (!s.ok() || used_ || off >= addr_ + first_.size() || off + n <= addr_) return s;
    used_ = true;
    const uint64_t from = std::max(off, addr_), to = std::min(off + n, addr_ + first_.size());
    std::copy(first_.begin() + (from - addr_), first_.begin() + (to - addr_), static_cast<char*>(buf) + (from - off));
    return s;
  }
  Status Write(uint64_t off, size_t n, const void* buf) override { return f_->Write(off, n, buf); }
  Status Sync() override { return f_->Sync(); }
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
  Status DropCache() override { return f_->DropCache(); }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
  bool CanTruncate() const override { return f_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
  // As this file's own reads (counted, gated, changed as they are).
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return ReadV(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
  bool WritesAllocate() const override { return f_->WritesAllocate(); }
  bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

 private:
  File* f_;
  uint64_t addr_;
  std::string first_;
  bool used_ = false;
};

// The LUN table's page and a leaf at one address: the codecs read apart,
// so each accepts its page, but one checkpoint would later free it as the
// other's. No disk spells that with one content per address (the page
// codecs' magics differ): a device changing the page between LoadState's
// two reads does, and LoadState refuses it.
TEST_F(FormatV3Ckpt, APageBothTheLunTablesAndTheTreesIsCorruption) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 50, 1));
  st.next_lun_id = 2;
  SuperblockV3 sb;
  std::vector<uint64_t> live;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Checkpoint(&o, st, o.meta.end.next_lsn + kLsnGapAfterOpen + 1).ok());
    sb = o.v3->choice().sb;
    live = LivePages(*o.v3);
  }
  const uint64_t table = sb.lun_table.addr;
  const std::string table_page = Bytes({table})[0];
  // The leaf goes over the table's page; the device shows the table first.
  ASSERT_NO_FATAL_FAILURE(WriteTreeNamingPage(&env_, sb, live, st, table));
  ExpectLoadRefused(
      &env_, [&](File* f) { return std::make_unique<TwoFacedFile>(f, table, table_page); },
      "a page is both the LUN table's and the checkpoint tree's");
}

// ---------------------------------------------------------------- replay

// Records committed after a checkpoint replay on open (ApplyRecord, as v2),
// and the next checkpoint holds them even when its caller's dirty set is
// empty: the maps they changed are named by no dirty range, so the format
// rewrites every LUN after a replay (without that, LUN 1's change would sit
// in a leaf named again, and be lost).
TEST_F(FormatV3Ckpt, ReplayedRecordsLoadAndTheNextCheckpointHoldsThem) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 700, 1));
  st.next_lun_id = 2;
  uint64_t lsn;
  std::vector<Record> records(3);
  records[0].type = RecType::kCreateLun;
  records[0].lun = 2;
  records[0].name = "r";
  records[0].uuid = Id(2);
  records[0].a = uint64_t{1} << 30;
  records[0].bs = 512;
  records[1].type = RecType::kMap;
  records[1].lun = 1;
  records[1].runs = {store::Run{1, 1500, 1}};  // between two runs of its first leaf
  records[2].type = RecType::kMap;
  records[2].lun = 2;
  records[2].runs = {store::Run{0, 1600, 4}};
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 5;
    ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
    JournalBatch b;
    for (size_t i = 0; i < records.size(); i++) FrameRecord(records[i], lsn + i, o.format->durable_lsn(), &b.bytes);
    b.last_lsn = lsn + records.size() - 1;
    ASSERT_TRUE(o.format->CommitBatch(o.file.get(), b).ok());
  }
  MetaState want = Copy(st);
  for (const Record& r : records) ASSERT_TRUE(ApplyRecord(&want, r, nullptr, nullptr).ok());
  const uint64_t next = lsn + records.size();

  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, o.st));
  EXPECT_EQ(o.meta.end.next_lsn, next);
  EXPECT_FALSE(o.format->journal_empty());
  ASSERT_TRUE(Checkpoint(&o, o.st, next + kLsnGapAfterOpen, &kNothingDirty).ok());
  o = Opened();
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(want, next + kLsnGapAfterOpen));
}

// `records` framed as one batch from `lsn` on, each vouching for `proven`.
// A LUN deleted and one rolled back by replayed records: the next
// checkpoint, given no dirty range, still drops the deleted LUN's leaves and
// rewrites the rolled-back one's, and the pool reopens as the replay left it.
// Only the rollback tests the dirty set the format carries after a replay:
// the tree writer drops the leaves of a LUN the frozen maps lack whatever
// the dirty set says (ckpt_tree.cc).
TEST_F(FormatV3Ckpt, AReplayedDeleteAndRollbackReachTheNextCheckpoint) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 300, 1));
  st.AddLun(Lun(2, "b", 400, 2));
  st.AddLun(Lun(3, "snap", 200, 3));
  st.next_lun_id = 4;
  std::vector<Record> records(2);
  records[0].type = RecType::kDeleteLun;
  records[0].lun = 2;
  records[1].type = RecType::kRollbackLun;
  records[1].lun = 1;
  records[1].lun2 = 3;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 5;
    ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
    ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf(records, lsn, o.format->durable_lsn())).ok());
  }
  MetaState want = Copy(st);
  for (const Record& r : records) ASSERT_TRUE(ApplyRecord(&want, r, nullptr, nullptr).ok());
  ASSERT_EQ(want.Find(2), nullptr);
  const uint64_t next = lsn + records.size();
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, o.st));
  ASSERT_TRUE(Checkpoint(&o, o.st, next + kLsnGapAfterOpen, &kNothingDirty).ok());
  for (const IndexEntry& e : o.v3->tree().leaves) EXPECT_NE(e.first.lun, 2u) << "the deleted LUN's leaves went";
  o = Opened();
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(want, next + kLsnGapAfterOpen));
}

// A replayed record ApplyRecord refuses (a map of a LUN no one holds) fails
// LoadState as ApplyRecord does, with the state it was given, the report
// and the format untouched.
TEST_F(FormatV3Ckpt, ARecordReplayRefusesLeavesTheStateAndTheFormatAsTheyWere) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 30, 1));
  st.next_lun_id = 2;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 5;
    ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
    Record orphan = MapOf(0, 7, 2);
    orphan.lun = 7;
    ASSERT_TRUE(
        o.format->CommitBatch(o.file.get(), BatchOf({MapOf(1, 900, 3), orphan}, lsn, o.format->durable_lsn())).ok());
  }
  ExpectLoadRefused(&env_, nullptr, "map on unknown LUN");
}

// ----------------------------------------------------- failures, power cuts

// Each Env call of a checkpoint failing in turn, then each power-loss mode:
// the pool opens as the previous checkpoint or the new one, whole. Then the
// same format, retried without a power cut, writes the new one.
TEST_F(FormatV3Ckpt, EveryFailedCallOpensThePreviousOrTheNewCheckpoint) {
  // The previous checkpoint, on disk and durable.
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 900, 1));
  prev.AddLun(Lun(2, "b", 300, 2));
  prev.AddLun(Lun(4, "c", 40, 4));
  prev.next_lun_id = 5;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  // The next: LUN 2 gone, LUN 1 changed in part, LUN 6 new.
  MetaState next = Copy(prev);
  next.EraseLun(2);
  next.Find(1)->map.Remove(100, 300, nullptr);
  next.AddLun(Lun(6, "d", 500, 6));
  next.next_lun_id = 7;
  DirtyRanges dirty;
  dirty.MarkLun(2);
  dirty.Mark(1, 100, 300);
  dirty.MarkLun(6);
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen + 50;

  using Op = FaultInjectionEnv::Op;
  const Op kOps[] = {Op::kWrite, Op::kSync};
  // The calls of a clean checkpoint, per kind (from a fresh open: it
  // spends a sequence first).
  uint64_t clean_calls[2];
  {
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    const uint64_t w = env.calls(Op::kWrite), s = env.calls(Op::kSync);
    ASSERT_TRUE(Checkpoint(&o, next, next_lsn, &dirty).ok());
    clean_calls[0] = env.calls(Op::kWrite) - w;
    clean_calls[1] = env.calls(Op::kSync) - s;
    EXPECT_GE(clean_calls[1], 5u) << "spent sequence (2 syncs), pages, both slots";
  }
  int old_state = 0, new_state = 0;
  for (int k = 0; k < 2; k++) {
    for (uint64_t nth = 0; nth < clean_calls[k]; nth++) {
      for (int loss = -1; loss < 4; loss++) {  // -1: no power loss, the same format retries
        for (uint64_t seed = 0; seed < (loss >= 2 ? 3u : 1u); seed++) {
          SCOPED_TRACE("op " + std::to_string(k) + " call " + std::to_string(nth) + " loss " + std::to_string(loss) +
                       " seed " + std::to_string(seed));
          FaultInjectionEnv env;
          env.Install("p", base.data(), base.size());
          Opened o;
          ASSERT_TRUE(Open(&env, &o).ok());
          const uint64_t seq_before = o.format->superblock_seq();
          env.FailAt(kOps[k], nth, Code::kIOError);
          Status s = Checkpoint(&o, next, next_lsn, &dirty);
          ASSERT_EQ(s.code(), Code::kIOError) << s.ToString();
          if (loss < 0) {
            // The format kept the previous checkpoint: the retry, under a
            // sequence of its own, writes the new one.
            const uint64_t failed_seq = o.format->superblock_seq() + 1;  // the failed attempt's, at most
            ASSERT_TRUE(Checkpoint(&o, next, next_lsn, &dirty).ok());
            EXPECT_GT(o.format->superblock_seq(), failed_seq);
            EXPECT_GT(o.format->superblock_seq(), seq_before + 1);
            o = Opened();
            Opened back;
            ASSERT_TRUE(Open(&env, &back).ok());
            ASSERT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
            continue;
          }
          o = Opened();
          env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
          Opened back;
          Status why = Open(&env, &back);
          ASSERT_TRUE(why.ok()) << why.ToString();
          if (back.meta.end.next_lsn == next_lsn) {
            new_state++;
            ASSERT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
          } else {
            old_state++;
            EXPECT_EQ(back.meta.end.next_lsn, lsn);
            ASSERT_NO_FATAL_FAILURE(ExpectSameState(prev, back.st));
          }
          // Whichever it is, it checkpoints again, and its sequences move
          // past every attempt's.
          // The failed attempt wrote pages under seq_before + 2 only once
          // the sequence before it was spent (two writes, two syncs).
          const bool pages_written = nth >= 2;
          ASSERT_TRUE(Checkpoint(&back, next, back.meta.end.next_lsn + kLsnGapAfterOpen).ok());
          EXPECT_GT(back.format->superblock_seq(), seq_before + (pages_written ? 2 : 1));
        }
      }
    }
  }
  EXPECT_GT(old_state, 0);
  EXPECT_GT(new_state, 0) << "a failure in the second slot's write leaves the new checkpoint durable";
}

// CutEachCall over a fresh open of `base`: the pool must open as `prev`
// (journal at `lsn`) or `next` (at `next_lsn`). Returns the opens of each
// kind, {prev, next}.
std::pair<int, int> CutEachCallOf(const std::vector<uint8_t>& base,
                                  const std::function<void(Opened*, FaultInjectionEnv*)>& before,
                                  const std::function<Status(Opened*)>& attempt, const MetaState& prev, uint64_t lsn,
                                  const MetaState& next, uint64_t next_lsn, uint64_t seeds) {
  std::pair<int, int> opened{0, 0};
  CutEachCall([&](FaultInjectionEnv* env) { env->Install("p", base.data(), base.size()); }, before, attempt, seeds,
              [&](const Opened& back) {
                if (back.meta.end.next_lsn == next_lsn) {
                  opened.second++;
                  EXPECT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
                } else {
                  opened.first++;
                  EXPECT_EQ(back.meta.end.next_lsn, lsn);
                  EXPECT_NO_FATAL_FAILURE(ExpectSameState(prev, back.st));
                }
              });
  return opened;
}

// A pool whose slot seq % 2 is damaged opens from the other slot, its only
// valid copy: the open's first checkpoint (which spends a sequence first)
// must not write over that copy before the damaged slot holds the chosen
// one, or a power cut tearing that write leaves no slot to open.
TEST_F(FormatV3Ckpt, APowerCutInTheFirstCheckpointAfterADamagedSlotStillOpens) {
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 200, 1));
  prev.next_lun_id = 2;
  uint64_t lsn, seq;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
    seq = o.format->superblock_seq();
  }
  env_.Corrupt("p", (seq % 2) * kSuperblockSlot + 64, 16);
  const std::vector<uint8_t> base = env_.Snapshot("p");
  {
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    ASSERT_FALSE(o.v3->choice().redundant);
    ASSERT_EQ(o.v3->choice().slot, static_cast<int>(1 - seq % 2));
  }
  MetaState next = Copy(prev);
  next.AddLun(Lun(2, "b", 100, 2));
  next.next_lun_id = 3;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen + 50;
  auto [old_state, new_state] = CutEachCallOf(
      base, [](Opened*, FaultInjectionEnv*) {},
      [&](Opened* o) { return Checkpoint(o, next, next_lsn); }, prev, lsn, next, next_lsn, 8);
  EXPECT_GT(old_state, 0);
  EXPECT_GT(new_state, 0);
}

// A device with a hook on every write: passed on, lost (the call succeeds
// and the media keeps its old bytes, a misbehaving disk's lost write), or
// failed.
class HookedFile final : public File {
 public:
  enum class Fate { kPass, kLose, kFail };
  HookedFile(File* f, std::function<Fate(uint64_t off)> hook) : f_(f), hook_(std::move(hook)) {}
  Status Read(uint64_t off, size_t n, void* buf) override { return f_->Read(off, n, buf); }
  Status Write(uint64_t off, size_t n, const void* buf) override {
    switch (hook_(off)) {
      case Fate::kPass: return f_->Write(off, n, buf);
      case Fate::kLose: return Status::Ok();
      case Fate::kFail: break;
    }
    return Status(Code::kIOError, "injected");
  }
  Status Sync() override { return f_->Sync(); }
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
  Status DropCache() override { return f_->DropCache(); }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
  bool CanTruncate() const override { return f_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
  bool WritesAllocate() const override { return f_->WritesAllocate(); }
  bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

 private:
  File* f_;
  std::function<Fate(uint64_t)> hook_;
};

// The superblock writes of a checkpoint from a fresh open (the spent
// sequence's two, the checkpoint's two): each one's slot, and the index
// of the sync after it among the checkpoint's syncs.
struct SlotWrite {
  int slot;
  uint64_t sync;
};
std::vector<SlotWrite> SlotWritesOf(const std::vector<uint8_t>& base, const MetaState& next, uint64_t next_lsn) {
  FaultInjectionEnv env;
  env.Install("p", base.data(), base.size());
  Opened o;
  EXPECT_TRUE(Open(&env, &o).ok());
  const uint64_t syncs = env.calls(FaultInjectionEnv::Op::kSync);
  std::vector<SlotWrite> out;
  HookedFile trace(o.file.get(), [&](uint64_t off) {
    if (off < 2 * kSuperblockSlot)
      out.push_back({static_cast<int>(off / kSuperblockSlot), env.calls(FaultInjectionEnv::Op::kSync) - syncs});
    return HookedFile::Fate::kPass;
  });
  const FrozenCheckpoint f = o.v3->Freeze(next);
  EXPECT_TRUE(o.format->WriteCheckpoint(&trace, f, FreeAus(*o.v3, f.meta_units), next_lsn).ok());
  EXPECT_EQ(out.size(), 4u);
  return out;
}

// An attempt whose superblock sync fails leaves that slot's copy in the
// cache only (or torn). A retry by the same format must rewrite that slot
// with the chosen copy, synced, before it writes the other (the failed
// sync of the spent sequence's first slot, or of the checkpoint's: else
// the retry's first write, to the other slot, puts both slots in flight),
// and after the last sync failed must not write another superblock under
// the failed attempt's sequence (a cut between its two slot writes would
// leave two copies of one sequence: "two writers"). Each superblock sync
// failing in turn, then a power cut at each call of the retry: the pool
// opens.
TEST_F(FormatV3Ckpt, APowerCutInARetryAfterAnyFailedSuperblockSyncStillOpens) {
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 200, 1));
  prev.next_lun_id = 2;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  MetaState next = Copy(prev);
  next.AddLun(Lun(2, "b", 100, 2));
  next.next_lun_id = 3;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen + 50;
  const std::vector<SlotWrite> writes = SlotWritesOf(base, next, next_lsn);
  ASSERT_EQ(writes.size(), 4u);
  for (const SlotWrite& w : writes) {
    SCOPED_TRACE("the sync after a write to slot " + std::to_string(w.slot) + " fails (sync " +
                 std::to_string(w.sync) + ")");
    auto fail_sync = [&](Opened* o, FaultInjectionEnv* env) {
      env->FailAt(FaultInjectionEnv::Op::kSync, w.sync, Code::kIOError);
      ASSERT_EQ(Checkpoint(o, next, next_lsn).code(), Code::kIOError);
      EXPECT_FALSE(o->v3->choice().redundant);
      EXPECT_EQ(o->v3->choice().other, w.slot) << "the slot the failed sync left to rewrite";
    };
    auto [old_state, new_state] = CutEachCallOf(
        base, fail_sync, [&](Opened* o) { return Checkpoint(o, next, next_lsn); }, prev, lsn, next, next_lsn, 8);
    EXPECT_GT(old_state + new_state, 0);
  }
}

// A process that dies right after a superblock slot write leaves that copy
// in the cache only, and the next open (the cache outlives the process)
// may choose it: its checkpoint must make it durable before it writes
// either slot, or a cut could tear both. The process dying after each slot
// write of a checkpoint in turn, the pool reopened in the same env, then a
// power cut at each call of the open's checkpoint: the pool opens, as the
// previous checkpoint or the crashed one.
TEST_F(FormatV3Ckpt, APowerCutInTheOpensCheckpointAfterACrashedOneStillOpens) {
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 200, 1));
  prev.next_lun_id = 2;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  MetaState next = Copy(prev);
  next.AddLun(Lun(2, "b", 100, 2));
  next.next_lun_id = 3;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen + 50;
  const std::vector<SlotWrite> writes = SlotWritesOf(base, next, next_lsn);
  ASSERT_EQ(writes.size(), 4u);
  for (size_t i = 0; i < writes.size(); i++) {
    SCOPED_TRACE("the process dies after slot write " + std::to_string(i));
    // The calls before that write, and the write itself, then the process
    // dies: its handles go, nothing reaches the media, the cache stays.
    auto crashed = [&](FaultInjectionEnv* env) {
      env->Install("p", base.data(), base.size());
      Opened o;
      EXPECT_TRUE(Open(env, &o).ok());
      const uint64_t syncs = env->calls(FaultInjectionEnv::Op::kSync);
      HookedFile die(o.file.get(), [&](uint64_t off) {
        if (off < 2 * kSuperblockSlot && env->calls(FaultInjectionEnv::Op::kSync) - syncs == writes[i].sync)
          env->CrashAfter(1);
        return HookedFile::Fate::kPass;
      });
      const FrozenCheckpoint f = o.v3->Freeze(next);
      EXPECT_FALSE(o.format->WriteCheckpoint(&die, f, FreeAus(*o.v3, f.meta_units), next_lsn).ok());
      o = Opened();
      env->ClearFaults();
    };
    if (i == 2) {  // the checkpoint's first slot write: the reopen takes it
      FaultInjectionEnv env;
      crashed(&env);
      Opened o;
      ASSERT_TRUE(Open(&env, &o).ok());
      ASSERT_EQ(o.meta.end.next_lsn, next_lsn);
      ASSERT_GT(env.unsynced_sectors("p"), 0u);
    }
    auto open_checkpoint = [](Opened* r) { return Checkpoint(r, r->st, r->meta.end.next_lsn + kLsnGapAfterOpen); };
    CutEachCall(crashed, [](Opened*, FaultInjectionEnv*) {}, open_checkpoint, 8, [&](const Opened& back) {
      const uint64_t at = back.meta.end.next_lsn;
      const bool is_next = at == next_lsn || at == next_lsn + kLsnGapAfterOpen;
      EXPECT_TRUE(is_next || at == lsn || at == lsn + kLsnGapAfterOpen) << at;
      EXPECT_NO_FATAL_FAILURE(ExpectSameState(is_next ? next : prev, back.st));
    });
  }
}

// The ring restarted at a nonzero offset, then a batch that wraps past its
// end over the first lap's records: reopened, the batch replays across the
// wrap and stops at the stale record after it. The open's checkpoint then
// restarts the ring where a stale, CRC-valid record of the first lap begins:
// a power cut at any call of it, or right after it (its second slot synced,
// no batch yet), opens with that record unread; a batch written there
// replays alone.
TEST_F(FormatV3Ckpt, ARingRestartedInsideItWrapsAndNeverReadsStaleRecords) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 50, 1));
  st.next_lun_id = 2;
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  const uint64_t lsn0 = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
  ASSERT_TRUE(Checkpoint(&o, st, lsn0).ok());
  const SuperblockV3 sb = o.v3->choice().sb;
  ASSERT_EQ(sb.journal_start, 0u);
  const uint64_t capacity = sb.capacity();
  ASSERT_EQ(capacity, 65536u);
  // Lap 1, from offset 0: 4096 bytes exactly (a map of 12 runs, 321 bytes,
  // and 151 seals of 25), then 20 maps of 10 runs (273 bytes each), the
  // first of them at offset 4096.
  std::vector<Record> a{MapOf(5000, 100, 12)};
  Record seal;
  seal.type = RecType::kSeal;
  a.insert(a.end(), 151, seal);
  for (uint64_t i = 0; i < 20; i++) a.push_back(MapOf(6000 + 20 * i, 300 + 30 * i, 10));
  const JournalBatch lap1 = BatchOf(a, lsn0, o.format->durable_lsn());
  ASSERT_EQ(lap1.bytes.size(), 4096u + 20 * 273);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), lap1).ok());
  for (const Record& r : a) ASSERT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
  // The restart rounds the tail up: 12288.
  const uint64_t lsn1 = lsn0 + a.size() + 10;
  ASSERT_TRUE(Checkpoint(&o, st, lsn1).ok());
  ASSERT_EQ(o.v3->choice().sb.journal_start, 12288u);
  // Lap 2: 200 maps of 10 runs (54,600 bytes) from 12288, past the ring's
  // end to offset 1352; the first 20 remap lap 1's LBAs to other grains.
  std::vector<Record> b;
  for (uint64_t i = 0; i < 200; i++) b.push_back(MapOf(6000 + 20 * i, 1000 + 30 * i, 10));
  const JournalBatch lap2 = BatchOf(b, lsn1, o.format->durable_lsn());
  ASSERT_EQ(lap2.bytes.size(), capacity - 12288 + 1352);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), lap2).ok());
  MetaState want = Copy(st);
  for (const Record& r : b) ASSERT_TRUE(ApplyRecord(&want, r, nullptr, nullptr).ok());
  o = Opened();
  const std::vector<uint8_t> base = env_.Snapshot("p");
  // Lap 1's record at ring offset 4096 is whole, CRC-valid and stale.
  const uint64_t ring_at = sb.data_offset + sb.journal[0].first_au * sb.au;
  Record stale;
  RecordFrame frame;
  ASSERT_GT(ParseRecord(base.data() + ring_at + 4096, 4096, kNone, &stale, &frame), 0u);
  ASSERT_EQ(frame.lsn, lsn0 + 152);

  const uint64_t lsn2 = lsn1 + b.size() + kLsnGapAfterOpen;
  FaultInjectionEnv env;
  {
    env.Install("p", base.data(), base.size());
    Opened r;
    ASSERT_TRUE(Open(&env, &r).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, r.st));
    EXPECT_EQ(r.meta.end.next_lsn, lsn1 + b.size());
    EXPECT_EQ(r.meta.end.tail, lap2.bytes.size());
    EXPECT_FALSE(r.meta.end.damaged);
    EXPECT_FALSE(r.meta.end.newer_record_follows);
  }
  auto open_checkpoint = [&](Opened* r) { return Checkpoint(r, r->st, lsn2, &kNothingDirty); };
  auto [old_state, new_state] = CutEachCallOf(
      base, [](Opened*, FaultInjectionEnv*) {}, open_checkpoint, want, lsn1 + b.size(), want, lsn2, 2);
  EXPECT_GT(old_state, 0);
  EXPECT_GT(new_state, 0);
  // After it, synced whole, a power cut changes nothing (the cuts inside
  // it are CutEachCallOf's above): a reopen finds the stale record unread.
  env.ClearFaults();
  env.Install("p", base.data(), base.size());
  {
    Opened r;
    ASSERT_TRUE(Open(&env, &r).ok());
    ASSERT_TRUE(open_checkpoint(&r).ok());
    ASSERT_EQ(r.v3->choice().sb.journal_start, 4096u) << "the new start is the stale record's";
  }
  env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 1);
  {
    Opened back;
    ASSERT_TRUE(Open(&env, &back).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, back.st));
    EXPECT_EQ(back.meta.end.next_lsn, lsn2);
    EXPECT_EQ(back.meta.end.tail, 0u);
    EXPECT_FALSE(back.meta.end.damaged);
    EXPECT_FALSE(back.meta.end.newer_record_follows);
  }
  // A batch written at that start replays, and nothing of lap 1 after it.
  env.Install("p", base.data(), base.size());
  {
    Opened r;
    ASSERT_TRUE(Open(&env, &r).ok());
    ASSERT_TRUE(open_checkpoint(&r).ok());
    const Record one = MapOf(6001, 1900, 1);
    ASSERT_TRUE(r.format->CommitBatch(r.file.get(), BatchOf({one}, lsn2, r.format->durable_lsn())).ok());
    ASSERT_TRUE(ApplyRecord(&want, one, nullptr, nullptr).ok());
  }
  Opened back;
  ASSERT_TRUE(Open(&env, &back).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, lsn2 + 1);
  EXPECT_FALSE(back.meta.end.damaged);
}

#if COWSTORE_CAN_REPLACE_NEW()
// The AUs the format's pages lie in and the journal's, from what the
// format names (its tree and LUN table chain), sorted: meta_units() must
// agree with it whatever happened.
std::vector<uint64_t> UnitsOfPagesNamed(const FormatV3& v3) {
  const SuperblockV3& sb = v3.choice().sb;
  std::set<uint64_t> units;
  for (uint64_t a : LivePages(v3)) units.insert((a - sb.data_offset) / sb.au);
  for (const JournalExtent& x : sb.journal)
    for (uint64_t i = 0; i < x.aus; i++) units.insert(x.first_au + i);
  return {units.begin(), units.end()};
}

// An allocation failing (bad_alloc) at any point of a checkpoint leaves the
// format whole, as the previous checkpoint or the new one: its meta_units()
// are the chunks of the pages it names, and a retry writes the new
// checkpoint, which opens.
TEST_F(FormatV3Ckpt, ABadAllocAnywhereInACheckpointLeavesTheFormatWhole) {
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 30, 1));
  prev.next_lun_id = 2;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  MetaState next = Copy(prev);
  next.AddLun(Lun(2, "b", 20, 2));
  next.next_lun_id = 3;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen + 50;
  FaultInjectionEnv env;
  int thrown = 0;
  for (int64_t n = 0;; n++) {
    SCOPED_TRACE("allocation " + std::to_string(n));
    env.Install("p", base.data(), base.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    const FrozenCheckpoint f = o.v3->Freeze(next);
    const std::vector<uint64_t> units = FreeAus(*o.v3, f.meta_units);
    Status s;
    bool threw = false;
    g_allocs_before_failure = n;
    try {
      s = o.format->WriteCheckpoint(o.file.get(), f, units, next_lsn);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_allocs_before_failure = -1;
    if (s.ok() && !threw) break;
    thrown++;  // a bad_alloc thrown, or one a callee turned into a status
    ASSERT_EQ(o.v3->meta_units(), UnitsOfPagesNamed(*o.v3));
    ASSERT_TRUE(Checkpoint(&o, next, next_lsn).ok());
    o = Opened();
    Opened back;
    ASSERT_TRUE(Open(&env, &back).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
  }
  EXPECT_GT(thrown, 0);
}

// The same for a checkpoint that grows the journal (GrowJournal from a
// space of two runs, one after the journal): wherever an allocation fails,
// every run taken is back in the space, the format keeps its journal, and
// a retry grows it and opens.
TEST_F(FormatV3Ckpt, ABadAllocAnywhereInAGrowingCheckpointGivesItsRunsBack) {
  MetaState prev;
  prev.au = kGrain;
  prev.AddLun(Lun(1, "a", 30, 1));
  prev.next_lun_id = 2;
  uint64_t lsn;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
    ASSERT_TRUE(Checkpoint(&o, prev, lsn).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  MetaState next = Copy(prev);
  next.AddLun(Lun(2, "b", 20, 2));
  next.next_lun_id = 3;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen;
  const std::map<uint64_t, uint64_t> free{{2, 6}, {40, 10}};
  const std::vector<JournalExtent> old_journal{{1, 1}};
  FaultInjectionEnv env;
  int thrown = 0;
  for (int64_t n = 0;; n++) {
    SCOPED_TRACE("allocation " + std::to_string(n));
    env.Install("p", base.data(), base.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    const FrozenCheckpoint f = o.v3->Freeze(next);
    RunSpace space(free);
    std::vector<uint64_t> units;  // above the space's runs
    for (uint64_t u = 60; units.size() < f.meta_units; u++) units.push_back(u);
    JournalGrowth growth;
    Status s;
    bool threw = false;
    g_allocs_before_failure = n;
    try {
      s = o.v3->WriteCheckpoint(o.file.get(), f, units, next_lsn, &space, &growth);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_allocs_before_failure = -1;
    if (s.ok() && !threw) {
      EXPECT_NE(o.v3->choice().sb.journal, old_journal);
      break;
    }
    thrown++;
    ASSERT_EQ(space.runs(), free);
    EXPECT_TRUE(growth.allocated.empty());
    ASSERT_EQ(o.v3->choice().sb.journal, old_journal);
    ASSERT_EQ(o.v3->meta_units(), UnitsOfPagesNamed(*o.v3));
    s = GrowingCheckpoint(&o, next, next_lsn, &space, &growth);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<JournalExtent> grown = o.v3->choice().sb.journal;
    EXPECT_NE(grown, old_journal);
    o = Opened();
    Opened back;
    ASSERT_TRUE(Open(&env, &back).ok());
    EXPECT_EQ(back.v3->choice().sb.journal, grown);
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
  }
  EXPECT_GT(thrown, 0);
}

// An allocation failing at any point of LoadState leaves the state it was
// given and the format as they were; LoadState then loads.
TEST_F(FormatV3Ckpt, ABadAllocAnywhereInLoadStateLeavesTheStateAsItWas) {
  MetaState want;
  want.au = kGrain;
  want.AddLun(Lun(1, "a", 30, 1));
  want.AddLun(Lun(2, "b", 20, 2));
  want.next_lun_id = 3;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Checkpoint(&o, want, o.meta.end.next_lsn + kLsnGapAfterOpen + 10).ok());
  }
  int thrown = 0;
  for (int64_t n = 0;; n++) {
    SCOPED_TRACE("allocation " + std::to_string(n));
    auto file = env_.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(file.ok());
    SuperblockSlots slots;
    auto chosen = ChooseMetaFormat(file->get(), &slots, ServedFormats::kV1ToV3);
    ASSERT_TRUE(chosen.ok());
    auto* v3 = dynamic_cast<FormatV3*>(chosen->get());
    ASSERT_NE(v3, nullptr);
    PoolGeometry g;
    ASSERT_TRUE(v3->ChooseSuperblock(slots, &g).ok());
    const std::vector<uint64_t> units_before = v3->meta_units();
    MetaState st;
    st.au = g.grain;
    st.next_lun_id = 77;
    LoadedMeta meta;
    Status s;
    bool threw = false;
    g_allocs_before_failure = n;
    try {
      s = v3->LoadState(file->get(), &st, &meta);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_allocs_before_failure = -1;
    if (s.ok() && !threw) {
      ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, st));
      break;
    }
    // A bad_alloc thrown, or one the replay turned into kNoSpace.
    if (!threw) {
      EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
    }
    thrown++;
    EXPECT_TRUE(st.luns().empty());
    EXPECT_EQ(st.next_lun_id, 77u);
    EXPECT_EQ(v3->meta_units(), units_before);
    EXPECT_TRUE(v3->tree().leaves.empty());
    EXPECT_FALSE(v3->Fits(1));
    st.next_lun_id = 1;
    ASSERT_TRUE(v3->LoadState(file->get(), &st, &meta).ok());
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, st));
  }
  EXPECT_GT(thrown, 0);
}

#endif  // COWSTORE_CAN_REPLACE_NEW()

// store-v3.md step 5d's hazard: an attempt writes its pages and fails at
// its superblock; the retry takes the same free pages, and the disk loses
// those writes. The pages then hold the failed attempt's bytes, CRC-valid:
// under the retry's own sequence they are refused (kCorruption), where
// under the failed attempt's they would load its maps silently.
TEST_F(FormatV3Ckpt, ARetrysLostPageIsRefusedNeverReadAsTheFailedAttempts) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 300, 1));
  st.next_lun_id = 2;
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  const uint64_t data_offset = o.v3->choice().sb.data_offset;

  // Attempt A: a state of other runs; its pages are written, its first
  // superblock slot write fails.
  MetaState a = Copy(st);
  a.EraseLun(1);
  a.AddLun(Lun(1, "a", 300, 5));
  std::set<uint64_t> a_pages;
  HookedFile fail_sb(o.file.get(), [&](uint64_t off) {
    if (off >= data_offset) {
      a_pages.insert(off);
      return HookedFile::Fate::kPass;
    }
    return a_pages.empty() ? HookedFile::Fate::kPass : HookedFile::Fate::kFail;
  });
  FrozenCheckpoint fa = o.v3->Freeze(a);
  ASSERT_EQ(o.format->WriteCheckpoint(&fail_sb, fa, FreeAus(*o.v3, fa.meta_units), lsn + 1).code(),
            Code::kIOError);
  ASSERT_FALSE(a_pages.empty());

  // Retry B: yet other runs; every write to a page A wrote is lost.
  MetaState b = Copy(st);
  b.EraseLun(1);
  b.AddLun(Lun(1, "a", 300, 9));
  std::set<uint64_t> lost;
  HookedFile lose(o.file.get(), [&](uint64_t off) {
    if (!a_pages.count(off)) return HookedFile::Fate::kPass;
    lost.insert(off);
    return HookedFile::Fate::kLose;
  });
  FrozenCheckpoint fb = o.v3->Freeze(b);
  ASSERT_TRUE(o.format->WriteCheckpoint(&lose, fb, FreeAus(*o.v3, fb.meta_units), lsn + 1).ok());
  ASSERT_FALSE(lost.empty()) << "the retry took pages the failed attempt wrote";
  o = Opened();

  Opened back;
  Status s = Open(&env_, &back);
  EXPECT_EQ(s.code(), Code::kCorruption) << (s.ok() ? "loaded a state mixing attempt A's pages" : s.ToString());
}

// After a failed checkpoint the disk may name the attempt's journal start
// (its first slot written), which records appended at the old tail would
// not follow: no batch until a checkpoint succeeds, then batches replay.
TEST_F(FormatV3Ckpt, NoBatchBetweenAFailedCheckpointAndASuccessfulOne) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 100, 1));
  st.next_lun_id = 2;
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
  env_.FailAt(FaultInjectionEnv::Op::kSync, 3, Code::kIOError);  // the first slot's (after the spent sequence's two and the pages')
  ASSERT_EQ(Checkpoint(&o, st, lsn).code(), Code::kIOError);
  Record seal;
  seal.type = RecType::kSeal;
  JournalBatch b;
  FrameRecord(seal, lsn, o.format->durable_lsn(), &b.bytes);
  b.last_lsn = lsn;
  const uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  EXPECT_EQ(o.format->CommitBatch(o.file.get(), b).code(), Code::kInvalidArgument);
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite), writes);
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), b).ok());
  EXPECT_EQ(o.format->durable_lsn(), lsn);
  o = Opened();
  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, lsn + 1);
}

// A replay that ended at a torn tail may leave stale CRC-valid records
// right after it: a batch appended there could be followed, on the next
// replay, by a stale record of the next LSN. So no batch between LoadState
// and the open's checkpoint (which restarts the ring under LSNs above
// theirs); nothing is written for a refused one. Then batches go through
// and replay.
TEST_F(FormatV3Ckpt, NoBatchBetweenLoadStateAndTheOpensCheckpoint) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 100, 1));
  st.next_lun_id = 2;
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
  Record seal;
  seal.type = RecType::kSeal;
  JournalBatch b;
  FrameRecord(seal, o.meta.end.next_lsn, o.format->durable_lsn(), &b.bytes);
  b.last_lsn = o.meta.end.next_lsn;
  const std::vector<uint8_t> before = env_.Snapshot("p");
  const uint64_t calls = env_.mutating_calls();
  Status s = o.format->CommitBatch(o.file.get(), b);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(env_.mutating_calls(), calls);
  EXPECT_EQ(env_.Snapshot("p"), before);
  EXPECT_TRUE(o.format->journal_empty());
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  b.bytes.clear();
  FrameRecord(seal, lsn, o.format->durable_lsn(), &b.bytes);
  b.last_lsn = lsn;
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), b).ok());
  EXPECT_EQ(o.format->durable_lsn(), lsn);
  o = Opened();
  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, lsn + 1);
}

// A replay that stops at a torn record L may leave the batch's next record,
// L + 1, whole after it (its `proven` below L: a clean tail). The open's
// checkpoint restarts the ring at the write unit after the tail, here onto
// record L: under a start LSN of L, a record written there could be
// followed by the stale L + 1 on the next replay. So a start LSN less than
// kLsnGapAfterOpen past L is refused, nothing written; with the jump, a
// batch written there replays alone.
TEST_F(FormatV3Ckpt, TheOpensCheckpointMustJumpPastTheLsnsATornTailMayHold) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 30, 1));
  st.next_lun_id = 2;
  uint64_t lsn;
  SuperblockV3 sb;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
    ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
    sb = o.v3->choice().sb;
    ASSERT_TRUE(
        o.format->CommitBatch(o.file.get(), BatchOf({MapOf(1, 900, 3), MapOf(101, 950, 3)}, lsn, lsn - 1)).ok());
  }
  // Record L torn: a byte of its payload lost.
  env_.Corrupt("p", sb.data_offset + sb.journal[0].first_au * sb.au + sb.journal_start + kRecordHeader + 2, 1);
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  ASSERT_EQ(o.meta.end.next_lsn, lsn);
  ASSERT_EQ(o.meta.end.tail, 0u);
  ASSERT_FALSE(o.meta.end.damaged);
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, o.st));
  const std::vector<uint8_t> before = env_.Snapshot("p");
  const uint64_t calls = env_.mutating_calls();
  for (uint64_t start : {lsn, lsn + 2, lsn + kLsnGapAfterOpen - 1}) {
    Status s = Checkpoint(&o, o.st, start);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << start - lsn << ": " << s.ToString();
  }
  EXPECT_EQ(env_.mutating_calls(), calls);
  EXPECT_EQ(env_.Snapshot("p"), before);
  const uint64_t jumped = lsn + kLsnGapAfterOpen;
  ASSERT_TRUE(Checkpoint(&o, o.st, jumped).ok());
  ASSERT_EQ(o.v3->choice().sb.journal_start, sb.journal_start) << "restarted onto the torn record";
  // One record the size of the torn one: the stale L + 1 lies right after it.
  const Record one = MapOf(1, 1200, 3);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({one}, jumped, o.format->durable_lsn())).ok());
  MetaState want = Copy(st);
  ASSERT_TRUE(ApplyRecord(&want, one, nullptr, nullptr).ok());
  o = Opened();
  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, jumped + 1);
  EXPECT_FALSE(back.meta.end.damaged);
}

// A Freeze before LoadState (before ChooseSuperblock too: no AU size yet)
// asks for nothing, without dividing by a zero page count, and
// WriteCheckpoint refuses it, nothing written, also once the format loaded.
TEST_F(FormatV3Ckpt, AFreezeBeforeLoadStateAsksForNothingAndIsRefused) {
  auto file = env_.OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(file.ok());
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(file->get(), &slots, ServedFormats::kV1ToV3);
  ASSERT_TRUE(chosen.ok());
  MetaFormat& format = **chosen;
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 3000, 1));
  st.next_lun_id = 2;
  const FrozenCheckpoint before_choice = format.Freeze(st, DirtyRanges());
  EXPECT_EQ(before_choice.meta_units, 0u);
  PoolGeometry g;
  ASSERT_TRUE(format.ChooseSuperblock(slots, &g).ok());
  const FrozenCheckpoint before_load = format.Freeze(st, DirtyRanges());
  EXPECT_EQ(before_load.meta_units, 0u);
  MetaState loaded;
  loaded.au = g.grain;
  LoadedMeta meta;
  ASSERT_TRUE(format.LoadState(file->get(), &loaded, &meta).ok());
  const uint64_t calls = env_.mutating_calls();
  for (const FrozenCheckpoint* f : {&before_choice, &before_load}) {
    Status s = format.WriteCheckpoint(file->get(), *f, {}, meta.end.next_lsn + kLsnGapAfterOpen);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  }
  EXPECT_EQ(env_.mutating_calls(), calls);
}

// A Freeze belongs to the format and tree it was taken from, and the AUs
// handed over must be free: refused before anything is written.
TEST_F(FormatV3Ckpt, RefusesAStaleFreezeAndAusThatAreNotFree) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 3000, 1));
  st.next_lun_id = 2;
  const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen + 1;
  FrozenCheckpoint f = o.v3->Freeze(st);
  ASSERT_GT(f.meta_units, 0u);
  const uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  std::vector<uint64_t> journal_au = FreeAus(*o.v3, f.meta_units);
  journal_au[0] = o.v3->choice().sb.journal[0].first_au;
  EXPECT_EQ(o.format->WriteCheckpoint(o.file.get(), f, journal_au, lsn).code(), Code::kInvalidArgument);
  std::vector<uint64_t> twice = FreeAus(*o.v3, f.meta_units);
  twice.push_back(twice[0]);
  EXPECT_EQ(o.format->WriteCheckpoint(o.file.get(), f, twice, lsn).code(), Code::kInvalidArgument);
  EXPECT_EQ(o.format->WriteCheckpoint(o.file.get(), FrozenCheckpoint(), {}, lsn).code(), Code::kInvalidArgument);
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite), writes);
  ASSERT_TRUE(o.format->WriteCheckpoint(o.file.get(), f, FreeAus(*o.v3, f.meta_units), lsn).ok());
  // f froze the tree before that checkpoint: its dirty set means nothing now.
  Status s = o.format->WriteCheckpoint(o.file.get(), f, FreeAus(*o.v3, f.meta_units), lsn + 1);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  // Too few AUs: kNoSpace, and the pool still opens as it was.
  st.AddLun(Lun(2, "b", 3000, 2));
  st.next_lun_id = 3;
  FrozenCheckpoint g = o.v3->Freeze(st);
  ASSERT_GT(g.meta_units, 0u);
  EXPECT_EQ(o.format->WriteCheckpoint(o.file.get(), g, {}, lsn + 1).code(), Code::kNoSpace);
  st.EraseLun(2);
  st.next_lun_id = 2;
  ASSERT_NO_FATAL_FAILURE(ExpectLoads(st, lsn));
}

}  // namespace
}  // namespace cowstore::store
