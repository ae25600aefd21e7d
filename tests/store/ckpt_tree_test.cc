// SPDX-License-Identifier: Apache-2.0
// Format v3's incremental checkpoint tree (ckpt_tree.h): maps -> tree ->
// maps round trips, shadowing over random workloads against the maps as the
// reference, allocator failure, damage refused, and the counting-Env test of
// docs/design/store-v3.md plan step 5.
#include "handler/store/ckpt_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "handler/store/ckpt_page.h"
#include "handler/store/fault_env.h"
#include "tests/store/counting_file.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kPage = kIndexPageBytes;
constexpr uint64_t kAreaBegin = uint64_t{1} << 20;  // the data offset: past both superblock slots
constexpr uint64_t kAreaPages = 1 << 20;            // room for 1 M extents' leaves many times over
constexpr uint64_t kPhysGrains = uint64_t{1} << 40;

CkptPool TestPool() {
  CkptPool p;
  p.bound.pool.fill(0x5a);
  p.bound.addr_begin = kAreaBegin;
  p.bound.addr_end = kAreaBegin + kAreaPages * kPage;
  p.phys_grains = kPhysGrains;
  return p;
}

// The metadata chunk allocator's stand-in: lowest free page first (so freed
// pages are reused at once, the case where a stale page could be misread),
// failing with kNoSpace after `fail_after` more pages when armed.
class TestAllocator final : public PageAllocator {
 public:
  Result<uint64_t> Allocate() override {
    if (fail_after_ == 0) return Status(Code::kNoSpace, "test allocator: no space");
    if (fail_after_ > 0) fail_after_--;
    uint64_t a;
    if (!free_.empty()) {
      a = *free_.begin();
      free_.erase(free_.begin());
    } else {
      a = kAreaBegin + next_++ * kPage;
    }
    return a;
  }
  void Free(const std::vector<uint64_t>& pages) { free_.insert(pages.begin(), pages.end()); }
  void FailAfter(int64_t n) { fail_after_ = n; }

 private:
  std::set<uint64_t> free_;
  uint64_t next_ = 0;
  int64_t fail_after_ = -1;
};

// A pool file in RAM with its counting wrapper, and the checkpoint loop the
// engine will run: write the tree, (the superblock: the engine's, not here),
// then free what the previous tree no longer names.
class Store {
 public:
  Store() {
    auto f = env_.OpenLocked("pool", Env::Mode::kCreate);
    EXPECT_TRUE(f.ok());
    file_ = std::move(f.value());
    counting_ = std::make_unique<CountingFile>(file_.get());
  }

  Status Checkpoint(const std::map<uint32_t, ExtentMap>& maps, const DirtyRanges& dirty, CkptWrite* out) {
    return CheckpointAt(++seq_, maps, dirty, out);
  }

  // Checkpoint with the caller's sequence (a test of the sequence rule).
  Status CheckpointAt(uint64_t seq, const std::map<uint32_t, ExtentMap>& maps, const DirtyRanges& dirty,
                      CkptWrite* out) {
    seq_ = std::max(seq_, seq);
    std::map<uint32_t, const ExtentMap*> view;
    for (const auto& [lun, m] : maps) view[lun] = &m;
    counting_->Reset();
    Status s = WriteCkptTree(TestPool(), seq, view, dirty, tree_, alloc_, *counting_, out);
    if (!s.ok()) {
      alloc_.Free(out->written);  // nothing names them
      return s;
    }
    tree_ = out->tree;
    alloc_.Free(out->freed);  // the superblock naming tree_ is durable now
    return s;
  }

  Status Read(std::map<uint32_t, ExtentMap>* maps, CkptTree* tree) {
    return ReadCkptTree(TestPool(), tree_.root, *counting_, maps, tree);
  }

  std::string PageAt(uint64_t addr) {
    std::string b(kPage, '\0');
    EXPECT_TRUE(file_->Read(addr, b.size(), b.data()).ok());
    return b;
  }
  void PutPage(uint64_t addr, const std::string& b) { ASSERT_TRUE(file_->Write(addr, b.size(), b.data()).ok()); }

  const CkptTree& tree() const { return tree_; }
  uint64_t seq() const { return seq_; }
  CountingFile& file() { return *counting_; }
  FaultInjectionEnv& env() { return env_; }
  TestAllocator& alloc() { return alloc_; }

 private:
  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  std::unique_ptr<CountingFile> counting_;
  TestAllocator alloc_;
  CkptTree tree_;
  uint64_t seq_ = 0;
};

// A map's mapping as maximal runs, whatever the length limit made the map
// keep apart: two maps with one mapping compare equal.
std::vector<Run> Mapping(const ExtentMap& m) {
  std::vector<Run> out;
  for (const auto& [lba, x] : m.runs()) {
    if (!out.empty() && out.back().lba + out.back().len == lba && out.back().phys + out.back().len == x.phys)
      out.back().len += x.len;
    else
      out.push_back(Run{lba, x.phys, x.len});
  }
  return out;
}

// The maps the tree must give back: the non-empty ones.
void ExpectSameMaps(const std::map<uint32_t, ExtentMap>& want, const std::map<uint32_t, ExtentMap>& got) {
  std::set<uint32_t> want_luns, got_luns;
  for (const auto& [lun, m] : want)
    if (m.extents()) want_luns.insert(lun);
  for (const auto& [lun, m] : got) got_luns.insert(lun);
  ASSERT_EQ(want_luns, got_luns);
  for (uint32_t lun : want_luns) EXPECT_EQ(Mapping(want.at(lun)), Mapping(got.at(lun))) << "LUN " << lun;
}

std::set<uint64_t> AsSet(const std::vector<uint64_t>& v) { return {v.begin(), v.end()}; }

// The store's committed tree reads back as `maps`.
void ExpectReadsBack(Store& st, const std::map<uint32_t, ExtentMap>& maps) {
  std::map<uint32_t, ExtentMap> back;
  CkptTree tree;
  Status s = st.Read(&back, &tree);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameMaps(maps, back);
}

// Three LUNs of `runs` two-grain runs each, two grains apart (LUN n's runs
// at physical offset n), written as one checkpoint with everything dirty.
std::map<uint32_t, ExtentMap> CheckpointStripedLuns(Store* st, uint64_t runs, CkptWrite* w,
                                                    DirtyRanges* all_dirty = nullptr) {
  std::map<uint32_t, ExtentMap> maps;
  DirtyRanges dirty;
  for (uint32_t lun = 0; lun < 3; lun++) {
    ExtentMap& m = maps.emplace(lun, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < runs; i++) EXPECT_TRUE(m.Insert(i * 4, i * 4 + lun, 2).ok());
    dirty.MarkLun(lun);
  }
  if (all_dirty) all_dirty->Merge(dirty);
  EXPECT_TRUE(st->Checkpoint(maps, dirty, w).ok());
  return maps;
}

// Writes `maps` as the store's next checkpoint, everything dirty, and reads it back.
void RoundTrip(const std::map<uint32_t, ExtentMap>& maps) {
  Store st;
  DirtyRanges dirty;
  for (const auto& [lun, m] : maps) dirty.MarkLun(lun);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
  std::map<uint32_t, ExtentMap> back;
  CkptTree tree;
  Status s = st.Read(&back, &tree);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameMaps(maps, back);
  EXPECT_EQ(tree.root, w.tree.root);
  EXPECT_EQ(tree.leaves, w.tree.leaves);
  EXPECT_EQ(AsSet(tree.Pages()), AsSet(w.written));
}

TEST(CkptTree, AnEmptyPoolIsKNoIndexAndWritesNothing) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  maps.emplace(7, ExtentMap(kPhysGrains));  // a LUN without runs has no leaves
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, DirtyRanges(), &w).ok());
  EXPECT_EQ(w.tree.root, kNoIndex);
  EXPECT_EQ(st.file().writes(), 0u);
  EXPECT_EQ(st.file().syncs(), 0u);
  std::map<uint32_t, ExtentMap> back;
  back.emplace(1, ExtentMap());
  CkptTree tree;
  ASSERT_TRUE(st.Read(&back, &tree).ok());
  EXPECT_TRUE(back.empty());
  EXPECT_EQ(tree.root, kNoIndex);
}

TEST(CkptTree, RoundTripOneLun) {
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& m = maps.emplace(3, ExtentMap(kPhysGrains)).first->second;
  for (uint64_t i = 0; i < 1000; i++) ASSERT_TRUE(m.Insert(i * 10, 5000 + i * 7, 1 + i % 5).ok());
  RoundTrip(maps);
}

TEST(CkptTree, RoundTripManyLunsWithHoles) {
  std::map<uint32_t, ExtentMap> maps;
  std::mt19937_64 rng(11);
  for (uint32_t lun = 0; lun < 400; lun += 1 + lun % 3) {
    ExtentMap& m = maps.emplace(lun, ExtentMap(kPhysGrains)).first->second;
    uint64_t lba = rng() % 1000;
    for (int i = 0; i < static_cast<int>(rng() % 600); i++) {
      const uint64_t len = 1 + rng() % 16;
      ASSERT_TRUE(m.Insert(lba, rng() % (kPhysGrains / 2), len).ok());
      lba += len + rng() % 100000;  // holes of every size
    }
  }
  RoundTrip(maps);
}

TEST(CkptTree, RoundTripRunsAtTheLimits) {
  constexpr uint64_t kMaxLen = RunTree::kMaxLen;
  constexpr uint64_t kEnd = ExtentMap::kMaxLba;
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& first = maps.emplace(0, ExtentMap(kPhysGrains)).first->second;
  ASSERT_TRUE(first.Insert(0, 0, 1).ok());                                     // LBA 0, phys 0
  ASSERT_TRUE(first.Insert(kEnd - 2 * kMaxLen, 8, kMaxLen).ok());              // 2^32-grain runs,
  ASSERT_TRUE(first.Insert(kEnd - kMaxLen, 8 + kMaxLen, kMaxLen).ok());        // contiguous, kept apart
  ExtentMap& last = maps.emplace(~uint32_t{0}, ExtentMap(kPhysGrains)).first->second;
  ASSERT_TRUE(last.Insert(kEnd - 1, kPhysGrains - 1, 1).ok());                 // last LBA, last grain
  RoundTrip(maps);
}

// A map can hold two runs Insert would have merged: Remove leaves the piece
// of a run it cuts beside a neighbour that was too long to merge with the
// whole run. The leaf holds them as one run, the one spelling the page codec
// accepts (ckpt_page.h, LeafRunsJoin).
TEST(CkptTree, NeighboursTheMapWouldMergeAreWrittenAsOneRun) {
  constexpr uint64_t kMaxLen = RunTree::kMaxLen;
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& m = maps.emplace(1, ExtentMap(kPhysGrains)).first->second;
  ASSERT_TRUE(m.Insert(0, 8, kMaxLen).ok());
  ASSERT_TRUE(m.Insert(kMaxLen, 8 + kMaxLen, 1).ok());  // 2^32 + 1 together: kept apart
  m.Remove(0, kMaxLen - 5, nullptr);
  ASSERT_EQ(m.extents(), 2u);  // [2^32 - 5, +5) and [2^32, +1): 6 grains, still apart
  Store st;
  DirtyRanges dirty;
  dirty.MarkLun(1);
  CkptWrite w;
  Status s = st.Checkpoint(maps, dirty, &w);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(w.tree.leaves.size(), 1u);
  const std::string b = st.PageAt(w.tree.leaves[0].addr);
  LeafPage leaf;
  s = DecodeLeafPage(b.data(), b.size(), LeafExpectFor(w.tree.leaves[0], TestPool().bound.pool, kPhysGrains), &leaf);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(leaf.runs, (std::vector<store::Run>{{kMaxLen - 5, 8 + kMaxLen - 5, 6}}));
  ExpectReadsBack(st, maps);
}

// Many LUNs with full leaves: three index levels, and a leaf at every limit.
TEST(CkptTree, RoundTripThreeLevels) {
  std::map<uint32_t, ExtentMap> maps;
  for (uint32_t lun = 0; lun < 20; lun++) {
    ExtentMap& m = maps.emplace(lun, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < 50000; i++) ASSERT_TRUE(m.Insert(i * 2, i * 3, 1).ok());
  }
  RoundTrip(maps);
}

// The workload of an engine between checkpoints, marking what it changes:
// writes (spread, or into a hot first MiB that keeps dirtying the same
// leaves), unmaps small and large (a large one can empty whole leaves), LUNs
// made, deleted, and made again under a deleted one's id.
class Workload {
 public:
  static constexpr uint64_t kSpan = 1 << 20, kHot = 1 << 8;
  // A LUN of more than 100 leaves (two index levels) that is never deleted.
  static constexpr uint32_t kBigLun = 100;

  explicit Workload(uint64_t seed) : rng_(seed) {}

  // A LUN of `runs` runs spread over its LBAs, all dirty.
  void Make(std::map<uint32_t, ExtentMap>* maps, DirtyRanges* dirty, uint32_t lun, uint64_t runs) {
    ExtentMap& m = maps->insert_or_assign(lun, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < runs; i++) Write(&m, rng_() % kSpan, 1 + rng_() % 8);
    dirty->MarkLun(lun);
  }

  void Step(std::map<uint32_t, ExtentMap>* maps, DirtyRanges* dirty) {
    const uint64_t op = rng_() % 1000;
    if (op < 8 || maps->empty()) {
      Make(maps, dirty, static_cast<uint32_t>(rng_() % 12), rng_() % 3000);
      return;
    }
    auto it = maps->begin();
    std::advance(it, rng_() % maps->size());
    if (op < 12 && it->first != kBigLun) {
      dirty->MarkLun(it->first);
      maps->erase(it);
      return;
    }
    const bool hot = op < 400;
    uint64_t lba = rng_() % (hot ? kHot : kSpan), len = 1 + rng_() % 32;
    if (op < 420) len = 1 + rng_() % 200000;  // a large unmap
    if (op < 550) {
      it->second.Remove(lba, len, nullptr);
    } else {
      Write(&it->second, lba, len);
    }
    dirty->Mark(it->first, lba, len);
  }

 private:
  void Write(ExtentMap* m, uint64_t lba, uint64_t len) {
    m->Remove(lba, len, nullptr);
    ASSERT_TRUE(m->Insert(lba, next_phys_, len).ok());
    next_phys_ += len + rng_() % 2;  // sometimes contiguous with the run before: merges
  }
  std::mt19937_64 rng_;
  uint64_t next_phys_ = 1;
};

// Whether clean leaf i of `leaves` is the one neighbour a touched stretch of
// its LUN that emptied takes in (ckpt_tree.h: no leaf is empty): the stretch
// just before it, or, if the stretch just after it is the LUN's last, that.
bool TakenIn(const std::vector<IndexEntry>& leaves, size_t i, const DirtyRanges& dirty, const ExtentMap& map) {
  const uint32_t lun = leaves[i].first.lun;
  auto touched = [&](size_t k) {
    return k < leaves.size() && leaves[k].first.lun == lun && dirty.Touches(lun, leaves[k].first.lba, leaves[k].end.lba);
  };
  auto empty = [&](uint64_t first, uint64_t end) {
    std::vector<Run> runs;
    map.Lookup(first, end - first, &runs);
    return runs.empty();
  };
  if (i > 0 && touched(i - 1)) {
    size_t b = i - 1;
    while (b > 0 && touched(b - 1)) b--;
    if (empty(leaves[b].first.lba, leaves[i - 1].end.lba)) return true;
  }
  if (touched(i + 1)) {
    size_t e = i + 1;
    while (touched(e + 1)) e++;
    const bool lun_last = e + 1 == leaves.size() || leaves[e + 1].first.lun != lun;
    if (lun_last && empty(leaves[i + 1].first.lba, leaves[e].end.lba)) return true;
  }
  return false;
}

// Over many checkpoints of random work: the tree reads back as the maps; no
// page the previous tree used was written; the freed list is exactly the
// previous pages the new tree no longer reaches; every leaf no dirty range
// touched is named again unchanged (shadowing reuses, it does not rewrite).
TEST(CkptTree, RandomWorkloadsOverManyCheckpointsShadowThePreviousTree) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Store st;
    Workload work(seed);
    std::map<uint32_t, ExtentMap> maps;
    std::mt19937_64 rng(seed * 977);
    for (int ckpt = 0; ckpt < 25; ckpt++) {
      DirtyRanges dirty;
      if (ckpt == 0) work.Make(&maps, &dirty, Workload::kBigLun, 30000);
      const int steps = static_cast<int>(rng() % 600);
      for (int i = 0; i < steps; i++) work.Step(&maps, &dirty);
      const CkptTree prev = st.tree();
      const std::set<uint64_t> prev_pages = AsSet(prev.Pages());
      CkptWrite w;
      Status s = st.Checkpoint(maps, dirty, &w);
      ASSERT_TRUE(s.ok()) << s.ToString();
      for (uint64_t a : st.file().written_at()) ASSERT_FALSE(prev_pages.count(a)) << "overwrote page " << a;
      EXPECT_EQ(AsSet(w.written), st.file().written_at());

      std::map<uint32_t, ExtentMap> back;
      CkptTree read;
      s = st.Read(&back, &read);
      ASSERT_TRUE(s.ok()) << s.ToString();
      ExpectSameMaps(maps, back);
      const std::set<uint64_t> reachable = AsSet(read.Pages());
      std::set<uint64_t> gone;
      std::set_difference(prev_pages.begin(), prev_pages.end(), reachable.begin(), reachable.end(),
                          std::inserter(gone, gone.end()));
      EXPECT_EQ(AsSet(w.freed), gone);
      EXPECT_EQ(w.freed.size(), gone.size());  // no page listed twice

      const std::set<std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>> now = [&] {
        std::set<std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>> t;
        for (const IndexEntry& e : read.leaves) t.emplace(e.first.lun, e.first.lba, e.addr, e.seq);
        return t;
      }();
      for (size_t i = 0; i < prev.leaves.size(); i++) {
        const IndexEntry& e = prev.leaves[i];
        auto m = maps.find(e.first.lun);
        if (m == maps.end() || m->second.extents() == 0 || dirty.Touches(e.first.lun, e.first.lba, e.end.lba))
          continue;
        if (TakenIn(prev.leaves, i, dirty, m->second)) continue;
        EXPECT_TRUE(now.count({e.first.lun, e.first.lba, e.addr, e.seq})) << "clean leaf at " << e.addr << " rewritten";
      }
    }
  }
}

// Builds a tree of several LUNs and checkpoints, then makes the allocator fail
// at every point of the next checkpoint: the previous tree's pages are
// unchanged and still read back as its maps.
// Three checkpoints of random work on `st`, the big LUN among them.
void CommitThreeCheckpoints(Store* st, Workload* work, std::map<uint32_t, ExtentMap>* maps) {
  for (int ckpt = 0; ckpt < 3; ckpt++) {
    DirtyRanges dirty;
    if (ckpt == 0) work->Make(maps, &dirty, Workload::kBigLun, 30000);
    for (int i = 0; i < 400; i++) work->Step(maps, &dirty);
    CkptWrite w;
    ASSERT_TRUE(st->Checkpoint(*maps, dirty, &w).ok());
  }
}

// Three committed checkpoints of a random workload, then 400 steps not yet
// checkpointed: where a failing checkpoint attempt starts from.
struct PendingCheckpoint {
  explicit PendingCheckpoint(uint64_t seed) : work(seed) {
    CommitThreeCheckpoints(&st, &work, &maps);
    committed = maps;
    for (int i = 0; i < 400; i++) work.Step(&maps, &dirty);
    for (uint64_t a : st.tree().Pages()) before[a] = st.PageAt(a);
  }
  // The previous tree's pages are byte-identical and read back as committed.
  void ExpectPreviousTreeIntact(const std::string& at) {
    for (const auto& [a, bytes] : before) ASSERT_EQ(st.PageAt(a), bytes) << at << ": page " << a << " changed";
    std::map<uint32_t, ExtentMap> back;
    CkptTree tree;
    ASSERT_TRUE(st.Read(&back, &tree).ok()) << at;
    ExpectSameMaps(committed, back);
  }
  Store st;
  Workload work;
  std::map<uint32_t, ExtentMap> maps;
  std::map<uint32_t, ExtentMap> committed;
  DirtyRanges dirty;
  std::map<uint64_t, std::string> before;  // the previous tree's pages
};

TEST(CkptTree, AllocatorFailureChangesNothingThePreviousTreeUses) {
  PendingCheckpoint pending(42);
  Store& st = pending.st;
  std::map<uint32_t, ExtentMap>& maps = pending.maps;
  const DirtyRanges& dirty = pending.dirty;

  for (int64_t n = 0;; n++) {
    st.alloc().FailAfter(n);
    CkptWrite w;
    Status s = st.Checkpoint(maps, dirty, &w);
    st.alloc().FailAfter(-1);
    if (s.ok()) {
      ASSERT_GT(n, 1);  // the failures above covered every allocation of this checkpoint
      break;
    }
    ASSERT_EQ(s.code(), Code::kNoSpace) << s.ToString();
    EXPECT_EQ(w.written.size(), static_cast<size_t>(n));
    EXPECT_EQ(w.tree.root, kNoIndex) << "no tree on failure";
    EXPECT_TRUE(w.tree.Pages().empty());
    pending.ExpectPreviousTreeIntact("allocation " + std::to_string(n));
  }
  ExpectReadsBack(st, maps);
}

// Why a sequence is used up by any attempt that may have written a page
// (ckpt_tree.h): an attempt fails after writing its pages (the sync fails, or
// the machine dies), the maps change, and the retry gets the same addresses
// from the lowest-first allocator. If one write of the retry is lost, the
// failed attempt's page is still there, CRC-valid. Under the failed attempt's
// sequence it passes the exact-sequence check and reads back as the old
// maps: a silent rollback. Under a fresh sequence the read is refused.
TEST(CkptTree, ARetryUnderAFreshSequenceRefusesAFailedAttemptsPage) {
  for (const bool reuse : {true, false}) {
    SCOPED_TRACE(reuse ? "retry reuses the sequence" : "retry takes a fresh sequence");
    Store st;
    std::map<uint32_t, ExtentMap> maps;
    ExtentMap& m = maps.emplace(1, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < 10; i++) ASSERT_TRUE(m.Insert(i * 10, 100 + i * 10, 5).ok());
    DirtyRanges dirty;
    dirty.MarkLun(1);
    CkptWrite w;
    ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());

    // Attempt `seq`: its pages are written, its sync fails; nothing names them.
    const uint64_t seq = st.seq() + 1;
    std::map<uint32_t, ExtentMap> failed_maps = maps;
    failed_maps.at(1).Remove(0, 5, nullptr);
    ASSERT_TRUE(failed_maps.at(1).Insert(0, 5000, 5).ok());
    DirtyRanges first;
    first.Mark(1, 0, 5);
    st.env().FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
    ASSERT_EQ(st.CheckpointAt(seq, failed_maps, first, &w).code(), Code::kIOError);
    std::map<uint64_t, std::string> failed_pages;
    for (uint64_t a : w.written) failed_pages[a] = st.PageAt(a);

    // The retry, of maps changed since, at the same addresses.
    maps = failed_maps;
    maps.at(1).Remove(0, 5, nullptr);
    ASSERT_TRUE(maps.at(1).Insert(0, 6000, 5).ok());
    DirtyRanges again;
    again.Mark(1, 0, 5);
    ASSERT_TRUE(st.CheckpointAt(reuse ? seq : seq + 1, maps, again, &w).ok());
    ASSERT_EQ(w.tree.leaves.size(), 1u);
    const uint64_t leaf = w.tree.leaves[0].addr;
    ASSERT_TRUE(failed_pages.count(leaf)) << "the retry's leaf is where the failed attempt wrote one";

    st.PutPage(leaf, failed_pages[leaf]);  // the retry's leaf write was lost
    std::map<uint32_t, ExtentMap> back;
    CkptTree tree;
    Status s = st.Read(&back, &tree);
    if (reuse) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      ExpectSameMaps(failed_maps, back);  // the rollback the rule exists to prevent
    } else {
      EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    }
  }
}

// The file failing at every write of a checkpoint in turn, then at its sync:
// the previous tree's pages are unchanged and still read back as its maps,
// `written` is exactly the pages the attempt wrote (or tried to), and nothing
// is freed.
TEST(CkptTree, WriteOrSyncFailureChangesNothingThePreviousTreeUses) {
  PendingCheckpoint pending(43);
  Store& st = pending.st;
  std::map<uint32_t, ExtentMap>& maps = pending.maps;
  const DirtyRanges& dirty = pending.dirty;

  auto unchanged = [&](const CkptWrite& w, const std::string& at) {
    EXPECT_EQ(w.tree.root, kNoIndex) << at << ": no tree on failure";
    EXPECT_TRUE(w.tree.Pages().empty()) << at;
    EXPECT_EQ(AsSet(w.written), st.file().written_at()) << at;
    EXPECT_EQ(w.written.size(), st.file().written_at().size()) << at;
    EXPECT_TRUE(w.freed.empty()) << at;
    pending.ExpectPreviousTreeIntact(at);
  };
  {
    // The sync: every page is written, none is named.
    st.env().FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
    CkptWrite w;
    ASSERT_EQ(st.Checkpoint(maps, dirty, &w).code(), Code::kIOError);
    st.env().ClearFaults();
    EXPECT_EQ(st.file().syncs(), 1u);
    EXPECT_GT(w.written.size(), 2u);
    unchanged(w, "sync");
  }
  for (uint64_t n = 0;; n++) {
    st.env().FailAt(FaultInjectionEnv::Op::kWrite, n, Code::kIOError);
    CkptWrite w;
    Status s = st.Checkpoint(maps, dirty, &w);
    st.env().ClearFaults();
    if (s.ok()) {  // n is past the last write: the fault never fired
      ASSERT_EQ(n, st.file().writes());
      ASSERT_GT(n, 2u);
      break;
    }
    ASSERT_EQ(s.code(), Code::kIOError) << s.ToString();
    EXPECT_EQ(st.file().writes(), n + 1) << "stops at the failed write";
    EXPECT_EQ(st.file().syncs(), 0u);
    unchanged(w, "write " + std::to_string(n));
  }
  ExpectReadsBack(st, maps);
}

// No leaf is empty, so a touched leaf whose runs are all gone takes in a
// neighbour: the next leaf, or for the LUN's last leaf the one before it
// (taken back from the leaves already kept). Emptying the first, a middle and
// the last of five leaves: the two become one leaf over both key ranges,
// every other leaf is kept, and the two old leaves and the root are freed.
TEST(CkptTree, AnEmptiedLeafTakesInANeighbour) {
  for (const size_t emptied : {size_t{0}, size_t{2}, size_t{4}}) {
    SCOPED_TRACE("emptied leaf " + std::to_string(emptied));
    Store st;
    std::map<uint32_t, ExtentMap> maps;
    ExtentMap& m = maps.emplace(6, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < 1000; i++) ASSERT_TRUE(m.Insert(i * 10, 7 + i * 10, 4).ok());
    DirtyRanges all;
    all.MarkLun(6);
    CkptWrite w;
    ASSERT_TRUE(st.Checkpoint(maps, all, &w).ok());
    const CkptTree prev = st.tree();
    ASSERT_EQ(prev.leaves.size(), 5u);
    ASSERT_EQ(prev.levels.size(), 1u);

    const IndexEntry gone = prev.leaves[emptied];
    m.Remove(gone.first.lba, gone.end.lba - gone.first.lba, nullptr);
    DirtyRanges dirty;
    dirty.Mark(6, gone.first.lba, gone.end.lba - gone.first.lba);
    ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());

    const size_t taken = emptied + 1 < prev.leaves.size() ? emptied + 1 : emptied - 1;
    const size_t lo = std::min(emptied, taken), hi = std::max(emptied, taken);
    std::vector<IndexEntry> want;
    for (size_t i = 0; i < prev.leaves.size(); i++) {
      if (i == hi) continue;
      if (i == lo) {
        want.push_back(IndexEntry{prev.leaves[lo].first, prev.leaves[hi].end, 0, 0});
        continue;
      }
      want.push_back(prev.leaves[i]);
    }
    ASSERT_EQ(w.tree.leaves.size(), want.size());
    for (size_t i = 0; i < want.size(); i++) {
      EXPECT_EQ(w.tree.leaves[i].first, want[i].first) << i;
      EXPECT_EQ(w.tree.leaves[i].end, want[i].end) << i;
      if (i != lo) {
        EXPECT_EQ(w.tree.leaves[i], want[i]) << "leaf " << i << " kept";
      }
    }
    EXPECT_EQ(LeafTilingRule(w.tree.leaves), "");
    EXPECT_EQ(AsSet(w.freed), (std::set<uint64_t>{prev.leaves[lo].addr, prev.leaves[hi].addr, prev.root.entry.addr}));
    EXPECT_EQ(w.written.size(), 2u);  // the joined leaf and the root
    std::map<uint32_t, ExtentMap> back;
    CkptTree tree;
    Status s = st.Read(&back, &tree);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectSameMaps(maps, back);
  }
}

// A map holding a run past the pool's physical grains (a caller's bug) is
// refused before its leaf is written: the writer never commits a tree the
// reader would refuse.
TEST(CkptTree, ARunPastThePoolsGrainsIsRefusedUnwritten) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& m = maps.emplace(1, ExtentMap(2 * kPhysGrains)).first->second;
  ASSERT_TRUE(m.Insert(0, 10, 5).ok());
  ASSERT_TRUE(m.Insert(100, kPhysGrains - 2, 4).ok());  // ends 2 grains past the pool
  DirtyRanges dirty;
  dirty.MarkLun(1);
  CkptWrite w;
  Status s = st.Checkpoint(maps, dirty, &w);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("physical grains"), std::string::npos) << s.message();
  EXPECT_EQ(st.file().writes(), 0u);
  EXPECT_EQ(st.tree().root, kNoIndex);
}

// The previous tree given as the output's own tree would be wiped when the
// output is reset: refused, with nothing written and the tree left as it was.
TEST(CkptTree, APreviousTreeAliasingTheOutputIsRefused) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  ASSERT_TRUE(maps.emplace(1, ExtentMap(kPhysGrains)).first->second.Insert(0, 10, 5).ok());
  DirtyRanges dirty;
  dirty.MarkLun(1);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
  ASSERT_TRUE(maps.at(1).Insert(100, 50, 5).ok());
  std::map<uint32_t, const ExtentMap*> view{{1, &maps.at(1)}};
  st.file().Reset();
  const CkptTree before = w.tree;
  Status s = WriteCkptTree(TestPool(), st.seq() + 1, view, dirty, w.tree, st.alloc(), st.file(), &w);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(st.file().writes(), 0u);
  EXPECT_EQ(w.tree.root, before.root);
  EXPECT_EQ(w.tree.leaves, before.leaves);
}

// An allocator giving an address outside the pool's pages (CheckPageAddress,
// the index codec's rule) is refused, and that address is not listed in
// `written` as a page to give back.
TEST(CkptTree, AnAllocatorGivingAnAddressOutsideThePoolIsRefused) {
  struct Fixed final : PageAllocator {
    uint64_t addr;
    explicit Fixed(uint64_t a) : addr(a) {}
    Result<uint64_t> Allocate() override { return addr; }
  };
  std::map<uint32_t, ExtentMap> maps;
  ASSERT_TRUE(maps.emplace(1, ExtentMap(kPhysGrains)).first->second.Insert(0, 10, 5).ok());
  std::map<uint32_t, const ExtentMap*> view{{1, &maps.at(1)}};
  DirtyRanges dirty;
  dirty.MarkLun(1);
  const CkptPool pool = TestPool();
  for (uint64_t bad : {kAreaBegin + 1, kAreaBegin - kPage, pool.bound.addr_end, uint64_t{0}}) {
    Store st;
    Fixed alloc(bad);
    CkptWrite w;
    Status s = WriteCkptTree(pool, 1, view, dirty, CkptTree{}, alloc, st.file(), &w);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("address " + std::to_string(bad)), std::string::npos) << s.message();
    EXPECT_TRUE(w.written.empty()) << bad;
    EXPECT_EQ(st.file().writes(), 0u) << bad;
  }
}

// After shadowing, key order is not address order (a rewritten LUN's leaves
// move to fresh pages): the reader reads the leaves by address, one
// sequential pass over the metadata area instead of seeks back and forth.
TEST(CkptTree, TheReaderReadsLeavesInAddressOrder) {
  Store st;
  CkptWrite w;
  std::map<uint32_t, ExtentMap> maps = CheckpointStripedLuns(&st, 1000, &w);
  ASSERT_FALSE(::testing::Test::HasFailure());
  DirtyRanges lun0;
  lun0.MarkLun(0);
  ASSERT_TRUE(st.Checkpoint(maps, lun0, &w).ok());  // LUN 0's leaves move past the others
  std::vector<uint64_t> by_key;
  for (const IndexEntry& e : w.tree.leaves) by_key.push_back(e.addr);
  ASSERT_FALSE(std::is_sorted(by_key.begin(), by_key.end())) << "the test needs key order != address order";

  st.file().Reset();
  ExpectReadsBack(st, maps);
  const std::set<uint64_t> leaves = AsSet(by_key);
  std::vector<uint64_t> leaf_reads;
  for (uint64_t a : st.file().read_at())
    if (leaves.count(a)) leaf_reads.push_back(a);
  EXPECT_EQ(leaf_reads.size(), leaves.size());
  EXPECT_TRUE(std::is_sorted(leaf_reads.begin(), leaf_reads.end()));
}

// An allocator with a bug: shadowing does not rest on it.
TEST(CkptTree, AnAllocatorGivingAPageThePreviousTreeUsesIsRefused) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  ASSERT_TRUE(maps.emplace(1, ExtentMap(kPhysGrains)).first->second.Insert(0, 10, 5).ok());
  DirtyRanges dirty;
  dirty.MarkLun(1);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
  st.alloc().Free(st.tree().Pages());  // the bug: pages still in use handed out again
  ASSERT_TRUE(maps.at(1).Insert(100, 50, 5).ok());
  dirty.Mark(1, 100, 5);
  const uint64_t written = st.file().writes();
  Status s = st.Checkpoint(maps, dirty, &w);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("previous tree uses"), std::string::npos) << s.message();
  EXPECT_EQ(st.file().writes(), 0u) << written;
}

// A previous tree that is not one consistent tree is refused before anything
// is written: shadowing trusts it to say which pages are in use and which
// leaves hold what.
TEST(CkptTree, AnInconsistentPreviousTreeIsRefused) {
  Store st;
  DirtyRanges dirty;
  CkptWrite w;
  std::map<uint32_t, ExtentMap> maps = CheckpointStripedLuns(&st, 10000, &w, &dirty);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const CkptTree good = st.tree();
  ASSERT_EQ(good.levels.size(), 2u);
  ASSERT_GE(good.levels[0].size(), 2u);
  const uint64_t unused = kAreaBegin + (kAreaPages - 1) * kPage;

  auto refused = [&](const CkptTree& bad, const std::string& why) {
    std::map<uint32_t, const ExtentMap*> view;
    for (const auto& [lun, m] : maps) view[lun] = &m;
    st.file().Reset();
    CkptWrite out;
    Status s = WriteCkptTree(TestPool(), st.seq() + 1, view, dirty, bad, st.alloc(), st.file(), &out);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << why << ": " << s.ToString();
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    EXPECT_EQ(st.file().writes(), 0u) << why;
  };
  {
    CkptTree t = good;
    t.leaves[3].addr = unused;  // a leaf the level-0 pages do not name
    refused(t, "level-0 pages' entries are not the leaves");
  }
  {
    CkptTree t = good;
    t.leaves.pop_back();  // the last leaf left out
    refused(t, "level-0 pages' entries are not the leaves");
  }
  {
    CkptTree t = good;
    t.levels[0][1].addr = unused;  // a level-0 page its parent does not name
    refused(t, "level-1 pages' entries do not name the level-0 pages");
  }
  {
    CkptTree t = good;
    t.levels[0][0].page.level = 1;
    refused(t, "level-0 page at");
  }
  {
    CkptTree t = good;
    t.root.entry.first.lba = 1;  // a root that is not the top page's entry
    refused(t, "the root does not name the top page");
  }
  {
    CkptTree t = good;  // two leaves at one address, named so by the index too
    t.leaves[1].addr = t.leaves[0].addr;
    t.levels[0][0].page.entries[1].addr = t.leaves[0].addr;
    refused(t, "used twice");
  }
  {
    CkptTree t = good;  // an index page at a leaf's address
    t.levels[0][1].addr = t.leaves[0].addr;
    t.levels[1][0].page.entries[1].addr = t.leaves[0].addr;
    refused(t, "used twice");
  }
  // And the good tree is taken.
  std::map<uint32_t, const ExtentMap*> view;
  for (const auto& [lun, m] : maps) view[lun] = &m;
  CkptWrite out;
  EXPECT_TRUE(WriteCkptTree(TestPool(), st.seq() + 1, view, dirty, good, st.alloc(), st.file(), &out).ok());
}

// Leaves tile each LUN, and the LUNs come in increasing order: a LUN's
// leaves are one stretch.
TEST(CkptTree, LeafTilingRuleWantsLunsInOrder) {
  const uint64_t end = ExtentMap::kMaxLba;
  const IndexEntry a{{1, 0}, {1, end}, 1 * kPage + kAreaBegin, 1};
  const IndexEntry b{{2, 0}, {2, end}, 2 * kPage + kAreaBegin, 1};
  const IndexEntry a_again{{1, 0}, {1, end}, 3 * kPage + kAreaBegin, 1};
  EXPECT_EQ(LeafTilingRule({a, b}), "");
  EXPECT_NE(LeafTilingRule({a, b, a_again}), "");
  EXPECT_NE(LeafTilingRule({b, a}), "");
  EXPECT_NE(LeafTilingRule({a, a_again}), "");
}

// Every page of a small tree damaged in turn is refused, and so are the
// shapes this component rules out.
TEST(CkptTree, DamageIsRefused) {
  Store st;
  CkptWrite w;
  std::map<uint32_t, ExtentMap> maps = CheckpointStripedLuns(&st, 10000, &w);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_GE(w.tree.levels.size(), 2u);  // index pages of two levels and leaves
  for (uint64_t a : st.tree().Pages()) {
    const std::string good = st.PageAt(a);
    std::string bad = good;
    bad[100] ^= 0x10;
    st.PutPage(a, bad);
    std::map<uint32_t, ExtentMap> back;
    CkptTree tree;
    Status s = st.Read(&back, &tree);
    EXPECT_EQ(s.code(), Code::kCorruption) << "page " << a << ": " << s.ToString();
    st.PutPage(a, good);
  }
  // A CRC-valid leaf of another checkpoint at the address the index names.
  {
    const IndexEntry leaf = st.tree().leaves[5];
    const std::string good = st.PageAt(leaf.addr);
    std::string stale = good;
    Put64(&stale, 56, leaf.seq + 1);  // the leaf's checkpoint sequence (ckpt_page.h's layout)
    ResealCrc(&stale, kLeafPageCrcOffset);
    st.PutPage(leaf.addr, stale);
    std::map<uint32_t, ExtentMap> back;
    CkptTree tree;
    EXPECT_EQ(st.Read(&back, &tree).code(), Code::kCorruption);
    st.PutPage(leaf.addr, good);
  }
  std::map<uint32_t, ExtentMap> back;
  CkptTree tree;
  ASSERT_TRUE(st.Read(&back, &tree).ok());
}

// kNoIndex is the one spelling of the empty index: the empty level-0 root
// page BuildIndex writes for no leaves is refused, and so is a root with no
// page that is not kNoIndex.
TEST(CkptTree, TheEmptyIndexHasOneSpelling) {
  Store st;
  IndexPage empty_page;  // the empty level-0 root page the codec can spell
  empty_page.pool = TestPool().bound.pool;
  empty_page.seq = 1;
  std::string bytes;
  ASSERT_TRUE(EncodeIndexPage(empty_page, &bytes).ok());
  st.PutPage(kAreaBegin, bytes);
  const IndexRoot root{EntryFor(empty_page, kAreaBegin), 0};
  std::map<uint32_t, ExtentMap> maps;
  CkptTree tree;
  CountingFile& f = st.file();
  Status s = ReadCkptTree(TestPool(), root, f, &maps, &tree);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("kNoIndex"), std::string::npos) << s.message();
  IndexRoot odd = kNoIndex;
  odd.level = 1;
  EXPECT_EQ(ReadCkptTree(TestPool(), odd, f, &maps, &tree).code(), Code::kCorruption);
}

// A LUN's leaves must tile its LBAs: a gap (a leaf left out of a valid index)
// is refused, since a change there would have no leaf to go to.
TEST(CkptTree, LeavesThatDoNotTileTheirLunAreRefused) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& m = maps.emplace(2, ExtentMap(kPhysGrains)).first->second;
  for (uint64_t i = 0; i < 1000; i++) ASSERT_TRUE(m.Insert(i * 3, i * 3, 1).ok());
  DirtyRanges dirty;
  dirty.MarkLun(2);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
  ASSERT_GE(w.tree.leaves.size(), 3u);
  std::vector<IndexEntry> leaves = w.tree.leaves;
  leaves.erase(leaves.begin() + 1);  // an index without the second leaf
  std::vector<std::pair<uint64_t, std::string>> pages;
  IndexRoot root;
  ASSERT_TRUE(BuildIndex(TestPool().bound, 2, leaves, [&] { return st.alloc().Allocate(); }, &pages, &root).ok());
  for (const auto& [a, b] : pages) st.PutPage(a, b);
  std::map<uint32_t, ExtentMap> back;
  CkptTree tree;
  Status s = ReadCkptTree(TestPool(), root, st.file(), &back, &tree);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("does not start where"), std::string::npos) << s.message();
}

// A leaf without runs is refused: a LUN without runs has no leaves.
TEST(CkptTree, AnEmptyLeafIsRefused) {
  Store st;
  LeafPage leaf;
  leaf.pool = TestPool().bound.pool;
  leaf.lun = 4;
  leaf.first_lba = 0;
  leaf.end_lba = ExtentMap::kMaxLba;
  leaf.seq = 1;
  std::string bytes;
  ASSERT_TRUE(EncodeLeafPage(leaf, &bytes).ok());
  Result<uint64_t> at = st.alloc().Allocate();
  ASSERT_TRUE(at.ok());
  st.PutPage(*at, bytes);
  std::vector<std::pair<uint64_t, std::string>> pages;
  IndexRoot root;
  const IndexEntry entry{{4, 0}, {4, ExtentMap::kMaxLba}, *at, 1};
  ASSERT_TRUE(BuildIndex(TestPool().bound, 1, {entry}, [&] { return st.alloc().Allocate(); }, &pages, &root).ok());
  for (const auto& [a, b] : pages) st.PutPage(a, b);
  std::map<uint32_t, ExtentMap> back;
  CkptTree tree;
  Status s = ReadCkptTree(TestPool(), root, st.file(), &back, &tree);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("holds no run"), std::string::npos) << s.message();
}

// 1 M extents over 10 LUNs: 4 grains mapped, 4 not, each extent its own run.
std::map<uint32_t, ExtentMap> MillionExtents() {
  std::map<uint32_t, ExtentMap> maps;
  for (uint32_t lun = 0; lun < 10; lun++) {
    ExtentMap& m = maps.emplace(lun, ExtentMap(kPhysGrains)).first->second;
    for (uint64_t i = 0; i < 100000; i++) EXPECT_TRUE(m.Insert(i * 8, (lun * 100000 + i) * 5, 4).ok());
  }
  return maps;
}

// A copy-on-write of one grain inside extent `i`: one extent becomes three.
void ChangeOneExtent(std::map<uint32_t, ExtentMap>* maps, DirtyRanges* dirty, uint64_t i, uint64_t* phys) {
  const uint32_t lun = i % 10;
  const uint64_t lba = (i / 10 % 100000) * 8 + 1;
  maps->at(lun).Remove(lba, 1, nullptr);
  ASSERT_TRUE(maps->at(lun).Insert(lba, (*phys)++, 1).ok());
  dirty->Mark(lun, lba, 1);
}

// The counting-Env test (plan step 5): after a full checkpoint of a pool of
// 1,000,000 extents, changing one extent writes at most 3 pages at the next
// checkpoint: its leaf, its level-0 index page and the root. The superblock
// that names the new root is the engine's write and is not counted here.
TEST(CkptTree, ChangingOneExtentOfAMillionWritesAtMostThreePages) {
  Store st;
  std::map<uint32_t, ExtentMap> maps = MillionExtents();
  DirtyRanges dirty;
  for (const auto& [lun, m] : maps) dirty.MarkLun(lun);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
  uint64_t phys = kPhysGrains / 2;
  for (uint64_t i : {0ull, 123457ull, 999999ull}) {
    DirtyRanges one;
    ChangeOneExtent(&maps, &one, i, &phys);
    ASSERT_TRUE(st.Checkpoint(maps, one, &w).ok());
    EXPECT_LE(st.file().writes(), 3u) << "extent " << i;
    EXPECT_EQ(st.file().writes(), w.tree.levels.size() + 1) << "one leaf and one page a level";
    EXPECT_EQ(w.freed.size(), st.file().writes());
    EXPECT_EQ(st.file().syncs(), 1u);
  }
  ExpectReadsBack(st, maps);
}

// A leaf is rewritten whole while its runs fit the page, so it can grow to
// kLeafPageRuns (252) past the 224 it is split to; the change that then
// overflows it splits it in two: two leaves, its index page and the root,
// 4 pages in a two-level tree (ckpt_tree.h's bound).
TEST(CkptTree, ChangingOneExtentOfAFullLeafWritesAtMostFourPages) {
  Store st;
  std::map<uint32_t, ExtentMap> maps;
  ExtentMap& m = maps.emplace(0, ExtentMap(kPhysGrains)).first->second;
  for (uint64_t i = 0; i < 30000; i++) ASSERT_TRUE(m.Insert(i * 8, i * 5, 4).ok());
  DirtyRanges all;
  all.MarkLun(0);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, all, &w).ok());
  ASSERT_EQ(w.tree.levels.size(), 2u);
  uint64_t phys = kPhysGrains / 2;
  size_t most_runs = 0;  // the first leaf's, as last written whole
  bool split = false;
  for (uint64_t i = 0; !split; i++) {
    ASSERT_LT(i, 100u) << "the first leaf never split";
    DirtyRanges one;
    const uint64_t lba = i * 8 + 1;  // a copy-on-write inside the first leaf's run i: one run becomes three
    m.Remove(lba, 1, nullptr);
    ASSERT_TRUE(m.Insert(lba, phys++, 1).ok());
    one.Mark(0, lba, 1);
    const size_t leaves_before = st.tree().leaves.size();
    ASSERT_TRUE(st.Checkpoint(maps, one, &w).ok());
    EXPECT_LE(st.file().writes(), 4u) << "change " << i;
    split = w.tree.leaves.size() > leaves_before;
    if (split) {
      EXPECT_EQ(st.file().writes(), 4u) << "two leaves, the level-0 page, the root";
    } else {
      EXPECT_EQ(st.file().writes(), 3u) << "change " << i;
      std::vector<store::Run> runs;
      const IndexEntry& first = w.tree.leaves[0];
      m.Lookup(first.first.lba, first.end.lba - first.first.lba, &runs);
      most_runs = std::max(most_runs, runs.size());
    }
  }
  EXPECT_GT(most_runs, kLeafFillRuns);  // rewritten whole past the fill...
  EXPECT_LE(most_runs, kLeafPageRuns);  // ...up to the page
  EXPECT_GE(most_runs + 2, kLeafPageRuns);
  ExpectReadsBack(st, maps);
}

// The figure for store-v3.md: pages and bytes a checkpoint writes in a pool
// of 1 M extents, for 1, 100 and 10,000 extents changed since the last one.
TEST(CkptTree, PagesWrittenPerCheckpointForAMillionExtents) {
  Store st;
  std::map<uint32_t, ExtentMap> maps = MillionExtents();
  DirtyRanges all;
  for (const auto& [lun, m] : maps) all.MarkLun(lun);
  CkptWrite w;
  ASSERT_TRUE(st.Checkpoint(maps, all, &w).ok());
  std::printf("1M extents, full checkpoint: %zu leaves, %zu index levels, %llu pages, %llu bytes written\n",
              w.tree.leaves.size(), w.tree.levels.size(), static_cast<unsigned long long>(st.file().writes()),
              static_cast<unsigned long long>(st.file().bytes_written()));
  std::mt19937_64 rng(7);
  uint64_t phys = kPhysGrains / 2;
  uint64_t last = 0;
  for (uint64_t changed : {1, 100, 10000}) {
    DirtyRanges dirty;
    for (uint64_t k = 0; k < changed; k++) ChangeOneExtent(&maps, &dirty, rng() % 1000000, &phys);
    ASSERT_TRUE(st.Checkpoint(maps, dirty, &w).ok());
    std::printf("1M extents, %llu changed: %llu pages, %llu bytes written, %zu pages freed\n",
                static_cast<unsigned long long>(changed), static_cast<unsigned long long>(st.file().writes()),
                static_cast<unsigned long long>(st.file().bytes_written()), w.freed.size());
    EXPECT_GT(st.file().writes(), last);  // more change, more pages: O(pages changed)
    EXPECT_EQ(st.file().bytes_written(), st.file().writes() * kPage);
    last = st.file().writes();
  }
  ExpectReadsBack(st, maps);
}

TEST(DirtyRanges, MarksCoalesceAndTouchesIsExact) {
  DirtyRanges d;
  EXPECT_FALSE(d.Touches(1, 0, ExtentMap::kMaxLba));
  d.Mark(1, 10, 5);  // [10, 15)
  d.Mark(1, 15, 5);  // touches: [10, 20)
  d.Mark(1, 30, 0);  // nothing
  d.Mark(2, 100, 1);
  EXPECT_EQ(d.ranges(), 2u);
  EXPECT_FALSE(d.Touches(1, 0, 10));
  EXPECT_TRUE(d.Touches(1, 0, 11));
  EXPECT_TRUE(d.Touches(1, 19, 30));
  EXPECT_FALSE(d.Touches(1, 20, 30));
  EXPECT_FALSE(d.Touches(3, 0, ExtentMap::kMaxLba));
  d.Mark(1, 5, 100);  // swallows [10, 20)
  EXPECT_EQ(d.ranges(), 2u);
  d.Mark(1, ExtentMap::kMaxLba - 1, 100);  // clipped at 2^48
  EXPECT_TRUE(d.Touches(1, ExtentMap::kMaxLba - 1, ExtentMap::kMaxLba));
  d.MarkLun(4);
  EXPECT_TRUE(d.Touches(4, 12345, 12346));
  const DirtyRanges taken = d.Take();
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(taken.Touches(4, 12345, 12346));
}

// The engine's hand-over (dirty_ranges.h): the set is taken when the maps are
// frozen, marks made while the checkpoint runs stay for the next one, and a
// failed checkpoint's set is merged back, coalescing with the new marks.
TEST(DirtyRanges, TakeLeavesLaterMarksAndMergeGivesBackAFailedCheckpointsSet) {
  DirtyRanges d;
  d.Mark(1, 10, 10);  // [10, 20)
  d.Mark(2, 0, 5);
  const DirtyRanges taken = d.Take();  // the maps are frozen here
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(taken.Touches(1, 15, 16));
  EXPECT_TRUE(taken.Touches(2, 0, 1));
  d.Mark(1, 20, 5);  // a write while the checkpoint of the copy runs: [20, 25)
  d.Mark(3, 7, 1);

  DirtyRanges after_success = d;  // the checkpoint commits: only the later marks remain
  EXPECT_FALSE(after_success.Touches(1, 10, 20));
  EXPECT_FALSE(after_success.Touches(2, 0, 5));
  EXPECT_TRUE(after_success.Touches(1, 20, 25));
  EXPECT_TRUE(after_success.Touches(3, 7, 8));

  d.Merge(taken);  // the checkpoint fails: both sets are the next one's
  EXPECT_TRUE(d.Touches(1, 10, 11));
  EXPECT_TRUE(d.Touches(1, 24, 25));
  EXPECT_TRUE(d.Touches(2, 4, 5));
  EXPECT_TRUE(d.Touches(3, 7, 8));
  EXPECT_FALSE(d.Touches(1, 25, 30));
  EXPECT_EQ(d.ranges(), 3u);  // [10, 25) coalesced, LUN 2's, LUN 3's
}

// The memory bound (dirty_ranges.h): past kMaxRangesPerLun separate ranges a
// LUN's marks widen, so the set stays bounded, and still covers every mark;
// other LUNs keep theirs exact.
TEST(DirtyRanges, ManySeparateMarksWidenToABoundThatStillCoversThem) {
  constexpr uint64_t kMarks = 3 * DirtyRanges::kMaxRangesPerLun;
  DirtyRanges d;
  d.Mark(2, 10, 1);
  d.Mark(2, 30, 1);
  for (uint64_t i = 0; i < kMarks; i++) d.Mark(1, 4 * i, 1);  // every 4th key
  EXPECT_LE(d.ranges(1), DirtyRanges::kMaxRangesPerLun);
  for (uint64_t i = 0; i < kMarks; i++) ASSERT_TRUE(d.Touches(1, 4 * i, 4 * i + 1)) << "key " << 4 * i;
  EXPECT_EQ(d.ranges(2), 2u);
  EXPECT_FALSE(d.Touches(2, 11, 30));
  // Widened marks stay widened until the set is taken.
  d.Mark(1, kMarks * 4 + 1000, 1);
  EXPECT_LE(d.ranges(1), DirtyRanges::kMaxRangesPerLun);
  EXPECT_GT(d.Take().ranges(1), 0u);
  d.Mark(1, 4, 1);
  d.Mark(1, 8, 1);
  EXPECT_EQ(d.ranges(1), 2u);  // a fresh set is exact again
  EXPECT_FALSE(d.Touches(1, 5, 8));
  // Marks 2^34 keys apart: the widening goes on until they merge.
  DirtyRanges far;
  for (uint64_t i = 0; i <= DirtyRanges::kMaxRangesPerLun; i++) far.Mark(7, i << 34, 1);
  EXPECT_LE(far.ranges(7), DirtyRanges::kMaxRangesPerLun);
  for (uint64_t i = 0; i <= DirtyRanges::kMaxRangesPerLun; i += 97)
    ASSERT_TRUE(far.Touches(7, i << 34, (i << 34) + 1)) << i;
}

}  // namespace
}  // namespace cowstore::store
