// SPDX-License-Identifier: Apache-2.0
// Unit tests of the packed run tree (run_tree.h): a randomised differential
// test against a std::map holding the same runs with v1 ExtentMap's rules
// (merge on insert, split at range edges), bulk load, iteration order, leaf
// fill and the packing limits; then ExtentMap on top of it, against the
// same reference, in its packed form and after a run it cannot pack.
//
// The differential test also runs on trees with a test-only inner fan-out of
// 3 and 4, so that a few tens of thousands of runs make 4-6 levels: inner
// nodes split, merge, even out, the root grows and collapses, and walks cross
// every kind of node boundary.
//
// COWSTORE_RUN_TREE_OPS sets the operations per seed (default 250,000, four
// seeds: 1 M in all at the real fan-out, and again at the small ones).
#include "handler/store/run_tree.h"

#include "handler/store/extent_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <new>
#include <random>
#include <vector>

namespace cowstore::store {
namespace {

using MapRun = ::cowstore::store::Run;  // gtest's Test::Run would hide Run

// The reference: v1's ExtentMap algorithms over a std::map.
class Reference {
 public:
  struct Extent {
    uint64_t phys, len;
  };
  std::map<uint64_t, Extent> m;

  void SplitAt(uint64_t a) {
    auto it = m.upper_bound(a);
    if (it == m.begin()) return;
    --it;
    uint64_t start = it->first;
    Extent e = it->second;
    if (start == a || start + e.len <= a) return;
    it->second.len = a - start;
    m.emplace_hint(std::next(it), a, Extent{e.phys + (a - start), start + e.len - a});
  }
  void EraseStarting(uint64_t a, uint64_t end, std::vector<MapRun>* removed) {
    auto it = m.lower_bound(a);
    while (it != m.end() && it->first < end) {
      removed->push_back({it->first, it->second.phys, it->second.len});
      it = m.erase(it);
    }
  }
  void Insert(uint64_t lba, uint64_t phys, uint64_t len) {
    auto next = m.lower_bound(lba);
    if (next != m.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.len == lba && prev->second.phys + prev->second.len == phys) {
        prev->second.len += len;
        if (next != m.end() && next->first == lba + len && next->second.phys == phys + len) {
          prev->second.len += next->second.len;
          m.erase(next);
        }
        return;
      }
    }
    if (next != m.end() && next->first == lba + len && next->second.phys == phys + len) {
      Extent e{phys, len + next->second.len};
      auto hint = m.erase(next);
      m.emplace_hint(hint, lba, e);
      return;
    }
    m.emplace_hint(next, lba, Extent{phys, len});
  }
  bool Covering(uint64_t a, MapRun* out) const {
    auto it = m.upper_bound(a);
    if (it == m.begin()) return false;
    --it;
    if (it->first + it->second.len <= a) return false;
    *out = {it->first, it->second.phys, it->second.len};
    return true;
  }
  // The run containing a or the first one after it (nullopt at the end).
  bool FirstEndingAfter(uint64_t a, MapRun* out) const {
    if (Covering(a, out)) return true;
    auto it = m.upper_bound(a);
    if (it == m.end()) return false;
    *out = {it->first, it->second.phys, it->second.len};
    return true;
  }
  std::vector<MapRun> All() const {
    std::vector<MapRun> v;
    for (const auto& [k, e] : m) v.push_back({k, e.phys, e.len});
    return v;
  }
};

std::vector<MapRun> All(const RunTree& t) { return {t.begin(), t.end()}; }
// A kCounted tree's model: key -> (len, value).
using CountedModel = std::map<uint64_t, std::pair<uint64_t, uint64_t>>;
std::vector<MapRun> All(const CountedModel& ref) {
  std::vector<MapRun> v;
  for (const auto& [k, lv] : ref) v.push_back({k, lv.second, lv.first});
  return v;
}

uint64_t OpsPerSeed() {
  const char* e = std::getenv("COWSTORE_RUN_TREE_OPS");
  return e ? std::strtoull(e, nullptr, 10) : 250000;
}

// One randomised run: phases that grow the map to a few tens of thousands of
// runs (leaves split, lend, split in three) and shrink it again (leaves merge
// and even out), with inserts that continue a neighbour so runs merge, holes
// punched and refilled with the same physical units (double merges), splits,
// range erases of every size, and point/range queries.
// Walks up to `steps` runs from it and from the reference's run with key
// >= a: the same runs in the same order, across leaf and inner boundaries.
void ExpectSameWalk(const RunTree& t, RunTree::const_iterator it, const Reference& ref, uint64_t a,
                    size_t steps) {
  auto rt = ref.m.lower_bound(a);
  for (size_t k = 0; k < steps && rt != ref.m.end(); k++, ++it, ++rt) {
    ASSERT_TRUE(it != t.end()) << "walk from " << a << " ended after " << k;
    ASSERT_EQ(*it, (MapRun{rt->first, rt->second.phys, rt->second.len})) << "walk from " << a << " step " << k;
  }
  if (rt == ref.m.end()) {
    ASSERT_TRUE(it == t.end()) << "walk from " << a << " went past the last run";
  }
}

// After the random phases: erase the rest in random ranges, checking on the
// way, until nothing is left; levels collapse one by one.
void EraseAll(RunTree& t, Reference& ref, std::mt19937_64& rng, uint64_t space, uint32_t seed) {
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  size_t height = t.height(), ops = 0;
  std::vector<MapRun> got, want;
  while (!ref.m.empty()) {
    const uint64_t a = pick(space + 64), n = 1 + pick(pick(10) == 0 ? 8192 : 64);
    t.SplitAt(a);
    t.SplitAt(a + n);
    ref.SplitAt(a);
    ref.SplitAt(a + n);
    got.clear();
    want.clear();
    t.EraseStarting(a, a + n, &got);
    ref.EraseStarting(a, a + n, &want);
    ASSERT_EQ(got, want) << "seed " << seed << " erase " << ops;
    ASSERT_EQ(t.size(), ref.m.size());
    ASSERT_LE(t.height(), height) << "a tree only shrinking grew a level";
    height = t.height();
    if (++ops % 500 == 0) {
      ASSERT_EQ(t.Check(), "") << "seed " << seed << " erase " << ops;
      ASSERT_NO_FATAL_FAILURE(ExpectSameWalk(t, t.FirstEndingAfter(a), ref, a, 300));
    }
  }
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.height(), 0u);
  EXPECT_EQ(t.leaves(), 0u);
  EXPECT_TRUE(t.begin() == t.end());
  EXPECT_EQ(t.Check(), "");
}

// *max_height: the greatest height the tree reached.
void Differential(uint32_t seed, uint64_t ops, uint32_t fanout = RunTree::kInnerFanout,
                  size_t* max_height_out = nullptr) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t space = 1 << 20;  // lba key space
  RunTree t(fanout);
  size_t max_height = 0;
  Reference ref;
  uint64_t next_phys = 0;
  std::vector<MapRun> got, want;
  bool growing = true;
  size_t max_size = 0;
  for (uint64_t op = 0; op < ops; op++) {
    if (op % 50000 == 0) growing = !growing || t.size() < 1000;
    const uint64_t a = pick(space);
    const uint64_t kind = pick(100);
    const uint64_t insert_share = growing ? 60 : 25;
    if (kind < insert_share) {
      // Insert into the gap at a, or continuing the run before a.
      MapRun cover;
      if (ref.Covering(a, &cover)) continue;
      auto next = ref.m.upper_bound(a);
      uint64_t gap_end = next == ref.m.end() ? space + 64 : next->first;
      uint64_t lba = a, phys;
      auto prev = ref.m.lower_bound(a);
      bool continue_prev = prev != ref.m.begin() && pick(3) == 0;
      if (continue_prev) {
        --prev;
        lba = prev->first + prev->second.len;  // <= a: a is not covered
        phys = prev->second.phys + prev->second.len;
      } else {
        phys = (next_phys += 1 + pick(8));
      }
      uint64_t len = std::min<uint64_t>(1 + pick(pick(4) == 0 ? 64 : 4), gap_end - lba);
      if (len == 0) continue;
      if (!continue_prev) next_phys += len;
      ASSERT_TRUE(t.Insert(lba, phys, len));
      ref.Insert(lba, phys, len);
    } else if (kind < insert_share + 10) {
      t.SplitAt(a);
      ref.SplitAt(a);
    } else if (kind < insert_share + 30) {
      // Range erase: split at both edges, erase what starts inside.
      uint64_t n = 1 + pick(pick(20) == 0 ? 4096 : 16);
      t.SplitAt(a);
      t.SplitAt(a + n);
      ref.SplitAt(a);
      ref.SplitAt(a + n);
      got.clear();
      want.clear();
      t.EraseStarting(a, a + n, &got);
      ref.EraseStarting(a, a + n, &want);
      ASSERT_EQ(got, want) << "seed " << seed << " op " << op;
      // Sometimes put the hole back as it was: runs merge on both sides.
      if (pick(2) == 0)
        for (const MapRun& r : want) {
          ASSERT_TRUE(t.Insert(r.lba, r.phys, r.len));
          ref.Insert(r.lba, r.phys, r.len);
        }
    } else {
      MapRun x, y;
      bool hx = t.Covering(a, &x), hy = ref.Covering(a, &y);
      ASSERT_EQ(hx, hy) << "seed " << seed << " op " << op << " a " << a;
      if (hx) {
        ASSERT_EQ(x, y);
      }
      auto it = t.FirstEndingAfter(a);
      hy = ref.FirstEndingAfter(a, &y);
      ASSERT_EQ(it != t.end(), hy);
      if (hy) {
        ASSERT_EQ(*it, y);
      }
      auto lb = t.lower_bound(a);
      auto rl = ref.m.lower_bound(a);
      ASSERT_EQ(lb == t.end(), rl == ref.m.end());
      if (rl != ref.m.end()) {
        ASSERT_EQ((*lb).lba, rl->first);
      }
      if (pick(50) == 0) {
        ASSERT_NO_FATAL_FAILURE(ExpectSameWalk(t, lb, ref, a, 1 + pick(2000)));
      }
    }
    ASSERT_EQ(t.size(), ref.m.size());
    max_size = std::max(max_size, t.size());
    max_height = std::max(max_height, t.height());
    if (op % 20000 == 0 || op + 1 == ops) {
      EXPECT_EQ(t.Check(), "") << "seed " << seed << " op " << op;
      EXPECT_EQ(All(t), ref.All()) << "seed " << seed << " op " << op;
      if (::testing::Test::HasFailure()) return;
    }
  }
  // The run exercised multi-leaf shapes, not one leaf.
  EXPECT_GT(max_size, 20u * RunTree::kLeafRuns) << "seed " << seed;
  // Copies of a multi-level tree are deep and equal.
  if (max_height_out) *max_height_out = max_height;
  RunTree c(t);
  EXPECT_EQ(c.Check(), "");
  const std::vector<MapRun> before = ref.All();
  EXPECT_EQ(All(c), before);
  EraseAll(t, ref, rng, space, seed);
  EXPECT_EQ(c.Check(), "");  // the copy does not share nodes with t
  EXPECT_EQ(All(c), before);
}

TEST(RunTreeDifferential, MatchesStdMapOverRandomOperations) {
  const uint64_t ops = OpsPerSeed();
  for (uint32_t seed : {1u, 2u, 3u, 0xc0ffeeu}) {
    SCOPED_TRACE(seed);
    Differential(seed, ops);
    if (HasFailure()) return;
  }
}

// The same with inner nodes of 3 and 4 children: 4-6 levels at these sizes.
TEST(RunTreeDifferential, MatchesStdMapWithManyInnerLevels) {
  const uint64_t ops = OpsPerSeed();
  for (uint32_t fanout : {3u, 4u})
    for (uint32_t seed : {11u, 12u}) {
      SCOPED_TRACE(testing::Message() << "fan-out " << fanout << " seed " << seed);
      size_t h = 0;
      Differential(seed, ops, fanout, &h);
      if (HasFailure()) return;
      EXPECT_GE(h, 4u);  // leaves and at least three inner levels
      std::printf("fan-out %u seed %u: up to %zu levels\n", fanout, seed, h);
    }
}

// Allocation failure: the n-th node allocation of an operation throws
// std::bad_alloc (test hook). Each insert, split and erase either happens in
// full or not at all: after every failure the tree still equals the
// reference and every invariant holds. Small fan-outs make the failing
// allocation land at every level of a split climbing to a new root; key-order
// appends, random inserts and splits reach each of MakeRoom's ways.
struct FailedOps {
  size_t failures = 0, deep = 0;  // deep: in a tree of >= 4 levels
};

void FailureInjection(uint32_t seed, uint32_t fanout, uint64_t ops, FailedOps* out) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t space = 1 << 18;
  RunTree t(fanout);
  Reference ref;
  uint64_t next_phys = 0, appended = space;  // appends go past every other key
  std::vector<MapRun> got, want;
  size_t checked_failures = 0;
  // Runs op with the n-th allocation failing; true if it completed.
  auto attempt = [&](auto&& op) {
    RunTree::FailAllocationForTest(static_cast<int64_t>(pick(t.height() + 2)));  // a split needs <= height + 1
    bool done = true;
    try {
      op();
    } catch (const std::bad_alloc&) {
      done = false;
    }
    RunTree::FailAllocationForTest(-1);
    if (!done) {
      out->failures++;
      if (t.height() >= 4) out->deep++;
    }
    return done;
  };
  for (uint64_t op = 0; op < ops; op++) {
    const uint64_t kind = pick(100);
    const bool growing = (op / 4000) % 2 == 0;
    if (kind < (growing ? 55u : 25u)) {
      uint64_t lba, len = 1 + pick(8);
      if (pick(4) == 0) {
        lba = appended;
        appended += len + 1;  // never continues the run before: a new run
      } else {
        lba = pick(space);
        MapRun cover;
        if (ref.Covering(lba, &cover)) continue;
        auto next = ref.m.upper_bound(lba);
        len = std::min(len, (next == ref.m.end() ? appended : next->first) - lba);
      }
      const uint64_t phys = (next_phys += 1 + pick(4));
      next_phys += len;
      if (attempt([&] { ASSERT_TRUE(t.Insert(lba, phys, len)); })) ref.Insert(lba, phys, len);
    } else if (kind < 75) {
      const uint64_t a = pick(appended);
      if (attempt([&] { t.SplitAt(a); })) ref.SplitAt(a);
    } else {
      // Erase never allocates; its splits may fail, each on its own.
      const uint64_t a = pick(appended), n = 1 + pick(pick(10) == 0 ? 2048 : 32);
      if (attempt([&] { t.SplitAt(a); })) ref.SplitAt(a);
      if (attempt([&] { t.SplitAt(a + n); })) ref.SplitAt(a + n);
      got.clear();
      want.clear();
      t.EraseStarting(a, a + n, &got);
      ref.EraseStarting(a, a + n, &want);
      ASSERT_EQ(got, want) << "seed " << seed << " op " << op;
    }
    ASSERT_EQ(t.size(), ref.m.size()) << "seed " << seed << " op " << op;
    // Checked in full right after every failure, and every 1,000 ops.
    if (out->failures != checked_failures || op % 1000 == 0) {
      checked_failures = out->failures;
      ASSERT_EQ(t.Check(), "") << "seed " << seed << " op " << op;
      ASSERT_EQ(All(t), ref.All()) << "seed " << seed << " op " << op;
    }
  }
  ASSERT_EQ(t.Check(), "");
  ASSERT_EQ(All(t), ref.All());
}

TEST(RunTreeAllocationFailure, EveryInsertAndSplitIsAllOrNothing) {
  for (uint32_t fanout : {3u, 4u, RunTree::kInnerFanout})
    for (uint32_t seed : {21u, 22u}) {
      SCOPED_TRACE(testing::Message() << "fan-out " << fanout << " seed " << seed);
      FailedOps f;
      FailureInjection(seed, fanout, 200000, &f);
      if (HasFailure()) return;
      EXPECT_GT(f.failures, 20u);  // the hook fired (only splits allocate: ~1 insert in 100)
      if (fanout < 5) {
        EXPECT_GT(f.deep, 20u);  // and in trees of several levels
      }
      std::printf("fan-out %u seed %u: %zu allocations failed, %zu in trees of >= 4 levels\n", fanout, seed,
                  f.failures, f.deep);
    }
}

// Strict failure checking after every single failed operation (slower, so a
// smaller run): the tree is compared right after each failure.
TEST(RunTreeAllocationFailure, TreeIsIntactRightAfterEachFailure) {
  std::mt19937_64 rng(7);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  RunTree t(3);
  Reference ref;
  size_t failures = 0;
  for (uint64_t k = 0; k < 20000; k++) {
    // Alternate appends (the right edge splits up to a new root) and
    // inserts into the middle (leaves split in three, inner nodes split).
    const uint64_t lba = k % 2 ? 4 * k : 4 * pick(k + 1) + 2;
    MapRun cover;
    if (ref.Covering(lba, &cover) || ref.m.count(lba + 1)) continue;
    RunTree::FailAllocationForTest(static_cast<int64_t>(pick(t.height() + 2)));
    bool done = true;
    try {
      ASSERT_TRUE(t.Insert(lba, 10 * k + 5, 1));
    } catch (const std::bad_alloc&) {
      done = false;
    }
    RunTree::FailAllocationForTest(-1);
    if (done) {
      ref.Insert(lba, 10 * k + 5, 1);
      continue;
    }
    failures++;
    ASSERT_EQ(t.Check(), "") << "after failed insert " << k;
    ASSERT_EQ(All(t), ref.All()) << "after failed insert " << k;
    ASSERT_EQ(t.size(), ref.m.size());
  }
  EXPECT_GT(failures, 30u);
  EXPECT_GE(t.height(), 5u) << t.size() << " runs " << t.leaves() << " leaves";
}

// BulkLoad and copies build aside: a failure frees what was built (ASan's
// leak check sees the rest) and leaves the target as it was.
TEST(RunTreeAllocationFailure, BulkLoadAndCopyLeaveTheTargetAsItWas) {
  std::vector<MapRun> runs;
  for (uint64_t k = 0; k < 20000; k++) runs.push_back({3 * k, 7 * k, 2});
  RunTree t(3);
  ASSERT_TRUE(t.Insert(1ull << 40, 5, 1));
  const std::vector<MapRun> before = All(t);
  size_t failures = 0;
  for (int64_t n : {0, 1, 5, 50, 100, 120}) {
    RunTree::FailAllocationForTest(n);
    try {
      t.BulkLoad(runs);
      RunTree::FailAllocationForTest(-1);
      EXPECT_EQ(All(t), runs);  // n beyond what it needs: loaded
      t.BulkLoad({before.begin(), before.end()});
      continue;
    } catch (const std::bad_alloc&) {
      failures++;
    }
    RunTree::FailAllocationForTest(-1);
    ASSERT_EQ(t.Check(), "") << "failure at allocation " << n;
    ASSERT_EQ(All(t), before) << "failure at allocation " << n;
  }
  EXPECT_EQ(failures, 6u);  // 20,000 runs take 88 leaves and 30+ inner nodes
  t.BulkLoad(runs);
  for (int64_t n : {0, 3, 40, 110}) {
    RunTree::FailAllocationForTest(n);
    EXPECT_THROW({ RunTree c(t); }, std::bad_alloc) << n;
    RunTree::FailAllocationForTest(-1);
  }
  RunTree c(t);
  EXPECT_EQ(All(c), runs);
  EXPECT_EQ(c.Check(), "");
}

// kCounted runs: one value for the whole run; equal neighbours merge,
// different ones do not; a split keeps the value on both halves; lengths
// reach 2^48 and values 2^32 - 1 (SharedRefs' and FreeSpace's records).
TEST(RunTreeCounted, MergesEqualValuesAndSplitsKeepTheValue) {
  RunTree t(RunKind::kCounted);
  EXPECT_EQ(t.kind(), RunKind::kCounted);
  ASSERT_TRUE(t.Insert(10, 2, 5));
  ASSERT_TRUE(t.Insert(15, 3, 5));  // different value: two runs
  ASSERT_TRUE(t.Insert(20, 3, 5));  // equal: merges with the one before
  EXPECT_EQ(All(t), (std::vector<MapRun>{{10, 2, 5}, {15, 3, 10}}));
  ASSERT_TRUE(t.Insert(5, 2, 5));  // merges with the one after
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 2, 10}, {15, 3, 10}}));
  t.SplitAt(20);
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 2, 10}, {15, 3, 5}, {20, 3, 5}}));
  std::vector<MapRun> gone;
  t.EraseStarting(15, 20, &gone);
  EXPECT_EQ(gone, (std::vector<MapRun>{{15, 3, 5}}));
  ASSERT_TRUE(t.Insert(15, 2, 5));  // fills the hole: both sides merge (value 2, then 3 stays apart)
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 2, 15}, {20, 3, 5}}));
  // Wide lengths and the value bound.
  const uint64_t big = (uint64_t{1} << 40) + 7;
  ASSERT_TRUE(t.Insert(1000, RunTree::kMaxCountedValue, big));
  MapRun r;
  ASSERT_TRUE(t.Covering(1000 + big - 1, &r));
  EXPECT_EQ(r, (MapRun{1000, RunTree::kMaxCountedValue, big}));
  EXPECT_FALSE(t.Insert(1000 + big, RunTree::kMaxCountedValue + 1, 1));
  EXPECT_FALSE(t.Insert(RunTree::kMaxKey - 1, 2, 2));
  EXPECT_TRUE(t.Insert(RunTree::kMaxKey - 1, 2, 1));
  EXPECT_EQ(t.Check(), "");
  // Copies and moves keep the kind.
  RunTree c(t);
  EXPECT_EQ(c.kind(), RunKind::kCounted);
  EXPECT_EQ(All(c), All(t));
  RunTree m(std::move(c));
  EXPECT_EQ(m.kind(), RunKind::kCounted);
  EXPECT_EQ(All(m), All(t));
}

// Many counted runs at random against a std::map of (len, value) with the
// same merge rule, through leaf splits, merges and a bulk load.
TEST(RunTreeCounted, MatchesStdMapAtRandom) {
  std::mt19937_64 rng(31);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  RunTree t(RunKind::kCounted, 4);
  CountedModel ref;
  auto ref_all = [&] { return All(ref); };
  auto ref_insert = [&](uint64_t k, uint64_t len, uint64_t v) {
    auto next = ref.lower_bound(k);
    if (next != ref.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.first == k && prev->second.second == v) {
        prev->second.first += len;
        if (next != ref.end() && next->first == k + len && next->second.second == v) {
          prev->second.first += next->second.first;
          ref.erase(next);
        }
        return;
      }
    }
    if (next != ref.end() && next->first == k + len && next->second.second == v) {
      const uint64_t l2 = len + next->second.first;
      ref.erase(next);
      ref[k] = {l2, v};
      return;
    }
    ref[k] = {len, v};
  };
  for (int op = 0; op < 60000; op++) {
    const uint64_t a = pick(1 << 16);
    auto it = ref.upper_bound(a);
    {  // Floor: the last run starting at or before a
      MapRun f;
      const bool has = t.Floor(a, &f);
      ASSERT_EQ(has, it != ref.begin()) << op;
      if (has) {
        auto w = std::prev(it);
        ASSERT_EQ(f, (MapRun{w->first, w->second.second, w->second.first})) << op;
      }
    }
    if (pick(3) != 0) {
      if (it != ref.begin() && std::prev(it)->first + std::prev(it)->second.first > a) continue;  // covered
      const uint64_t room = it == ref.end() ? 64 : it->first - a;
      const uint64_t len = std::min<uint64_t>(1 + pick(8), room), v = 2 + pick(3);
      ASSERT_TRUE(t.Insert(a, v, len));
      ref_insert(a, len, v);
    } else {
      const uint64_t n = 1 + pick(64);
      t.SplitAt(a);
      t.SplitAt(a + n);
      std::vector<MapRun> got;
      t.EraseStarting(a, a + n, &got);
      std::vector<MapRun> want;
      // The reference: clip at both edges, then take what starts inside.
      for (uint64_t e : {a, a + n}) {
        auto j = ref.upper_bound(e);
        if (j == ref.begin()) continue;
        --j;
        const auto [len, v] = j->second;
        if (j->first < e && j->first + len > e) {
          j->second.first = e - j->first;
          ref[e] = {j->first + len - e, v};
        }
      }
      for (auto j = ref.lower_bound(a); j != ref.end() && j->first < a + n; j = ref.erase(j))
        want.push_back({j->first, j->second.second, j->second.first});
      ASSERT_EQ(got, want) << op;
    }
    if (op % 5000 == 0) {
      ASSERT_EQ(t.Check(), "") << op;
      ASSERT_EQ(All(t), ref_all()) << op;
    }
  }
  ASSERT_EQ(All(t), ref_all());
  EXPECT_GE(t.height(), 3u);
  RunTree b(RunKind::kCounted);
  b.BulkLoad(All(t));
  EXPECT_EQ(b.Check(), "");
  EXPECT_EQ(All(b), ref_all());
}

// An edit that would empty the only leaf, or outgrow it, is not made in
// place: freeing or growing the leaf is EraseStarting's and Insert's.
TEST(RunTreeCounted, ReplaceInLeafLeavesEmptyingAndGrowingTheOnlyLeafToOthers) {
  RunTree t(RunKind::kCounted);
  ASSERT_TRUE(t.Insert(10, 2, 5));
  EXPECT_FALSE(t.TryReplaceInLeaf(0, 100, nullptr, 0));
  EXPECT_EQ(All(t), (std::vector<MapRun>{{10, 2, 5}}));
  const std::vector<MapRun> five = {{0, 3, 1}, {2, 4, 1}, {4, 5, 1}, {6, 6, 1}, {8, 7, 1}};
  EXPECT_FALSE(t.TryReplaceInLeaf(0, 100, five.data(), five.size()));  // the leaf holds 4
  EXPECT_EQ(All(t), (std::vector<MapRun>{{10, 2, 5}}));
  EXPECT_TRUE(t.TryReplaceInLeaf(0, 100, five.data(), 4));
  EXPECT_EQ(All(t), (std::vector<MapRun>(five.begin(), five.begin() + 4)));
  EXPECT_EQ(t.Check(), "");
  RunTree empty(RunKind::kCounted);
  EXPECT_FALSE(empty.TryReplaceInLeaf(0, 100, five.data(), 1));
  EXPECT_TRUE(empty.empty());
}

// TryReplaceInLeaf (with and without its hint) against a std::map, over a
// tree of many leaves and three or more inner levels: an edit it takes leaves every invariant (Check:
// separators, fill, leaf links) and the model's runs; one it refuses (it
// crosses a leaf's end, or would overfill or empty the leaf) changes nothing,
// and is then made by erasing and inserting, as SharedRefs does.
TEST(RunTreeCounted, ReplaceInLeafMatchesStdMapOrChangesNothing) {
  std::mt19937_64 rng(41);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  RunTree t(RunKind::kCounted, 3);
  CountedModel ref;
  auto ref_all = [&] { return All(ref); };
  uint64_t value = 2;  // every run's value differs: nothing would merge
  constexpr uint64_t kKeys = 1 << 16;
  for (int i = 0; i < 3000; i++) {
    const uint64_t a = pick(kKeys);
    auto it = ref.upper_bound(a);
    if (it != ref.begin() && std::prev(it)->first + std::prev(it)->second.first > a) continue;
    const uint64_t len = std::min<uint64_t>(1 + pick(8), (it == ref.end() ? kKeys : it->first) - a);
    ASSERT_TRUE(t.Insert(a, value, len));
    ref[a] = {len, value++};
  }
  uint64_t taken = 0, refused = 0;
  size_t fewest = ref.size();
  for (int op = 0; op < 50000; op++) {
    // A third of the ops shrink the tree to a few leaves (wide spans, few
    // new runs: leaves fall below a third and rebalance), then it grows
    // back (narrow spans, more new runs: leaves fill, refuse, and split).
    const bool shrink = op < 25000;
    const uint64_t a = pick(kKeys), b = a + 1 + (shrink ? pick(80) : pick(pick(8) == 0 ? 400 : 24));
    // The room the new runs may take: after the run before a, before the
    // first run starting at or after b.
    auto before = ref.lower_bound(a);
    const uint64_t lo = before == ref.begin() ? a : std::max(a, std::prev(before)->first + std::prev(before)->second.first);
    auto after = ref.lower_bound(b);
    const uint64_t hi = after == ref.end() ? kKeys + 64 : after->first;
    std::vector<MapRun> runs;
    for (uint64_t at = lo, k = shrink ? uint64_t{pick(4) == 0} : pick(8); k > 0 && at < hi; k--) {
      const uint64_t s = at + pick(std::min<uint64_t>(hi - at, 6));
      const uint64_t len = 1 + pick(std::min<uint64_t>(hi - s, 10));
      if (s >= hi) break;
      runs.push_back({s, value++, len});
      at = s + len;
    }
    // Without a hint, with the right one (the first run at or after a, as
    // SharedRefs passes), and with wrong ones (the first run, or the one
    // after the right one: checked, and the edit made as without).
    const int mode = op % 4;
    RunTree::const_iterator hint = t.lower_bound(a);
    if (mode == 2) hint = t.begin();
    if (mode == 3 && hint != t.end()) ++hint;
    const bool ok = mode == 0 ? t.TryReplaceInLeaf(a, b, runs.data(), runs.size())
                              : t.TryReplaceInLeaf(hint, a, b, runs.data(), runs.size());
    (ok ? taken : refused)++;
    if (!ok) {  // nothing changed; then the same edit as SharedRefs makes it
      ASSERT_EQ(t.Check(), "") << op;
      ASSERT_EQ(All(t), ref_all()) << op;
      t.EraseStarting(a, b, nullptr);
      for (const MapRun& r : runs) ASSERT_TRUE(t.Insert(r.lba, r.phys, r.len));
    }
    ref.erase(ref.lower_bound(a), ref.lower_bound(b));
    for (const MapRun& r : runs) ref[r.lba] = {r.len, r.phys};
    ASSERT_EQ(t.size(), ref.size()) << op;
    fewest = std::min(fewest, ref.size());
    if (op % 50 == 0) {
      ASSERT_EQ(t.Check(), "") << op;
      ASSERT_EQ(All(t), ref_all()) << op;
    }
  }
  ASSERT_EQ(t.Check(), "");
  ASSERT_EQ(All(t), ref_all());
  // The tree shrank to a few leaves and grew to many levels, and both
  // outcomes happened often, or this tested little.
  EXPECT_LE(fewest, 2 * RunTree::kLeafRuns);
  EXPECT_GE(t.height(), 4u);
  EXPECT_GE(taken, 5000u);
  EXPECT_GE(refused, 100u);
  std::printf("TryReplaceInLeaf: %lu taken, %lu refused; fewest %zu runs, now %zu, height %zu\n",
              (unsigned long)taken, (unsigned long)refused, fewest, t.size(), t.height());
}

// Key-order and reverse-order loads grow and split the right and left edges
// of every inner level; walks from every leaf boundary see the same runs.
TEST(RunTree, InnerLevelsGrowAtBothEdgesAndWalksCrossThem) {
  for (int reverse = 0; reverse < 2; reverse++) {
    RunTree t(3);
    Reference ref;
    const uint64_t n = 60000;
    for (uint64_t k = 0; k < n; k++) {
      uint64_t i = reverse ? n - 1 - k : k;
      ASSERT_TRUE(t.Insert(2 * i, 3 * i, 1));
      ref.Insert(2 * i, 3 * i, 1);
    }
    ASSERT_EQ(t.Check(), "");
    EXPECT_GE(t.height(), 5u) << t.size() << " runs " << t.leaves() << " leaves";
    ASSERT_EQ(All(t), ref.All());
    // Every position a walk can start from, including a leaf's last run.
    for (uint64_t a = 0; a < 2 * n; a += 2 * RunTree::kLeafRuns / 3 + 1)
      ASSERT_NO_FATAL_FAILURE(ExpectSameWalk(t, t.lower_bound(a), ref, a, RunTree::kLeafRuns + 2));
    // Erase from the left edge in large bites: leaves empty whole.
    std::vector<MapRun> got, want;
    for (uint64_t a = 0; a < 2 * n; a += 1000) {
      got.clear();
      want.clear();
      t.EraseStarting(a, a + 1000, &got);
      ref.EraseStarting(a, a + 1000, &want);
      ASSERT_EQ(got, want);
      ASSERT_EQ(t.Check(), "") << a;
    }
    EXPECT_TRUE(t.empty());
    EXPECT_EQ(t.height(), 0u);
  }
}

TEST(RunTree, BulkLoadBuildsInnerLevels) {
  for (uint32_t fanout : {3u, RunTree::kInnerFanout}) {
    std::vector<MapRun> runs;
    const uint64_t n = fanout == 3 ? 100000 : 3000000;
    for (uint64_t i = 0; i < n; i++) runs.push_back({5 * i, 7 * i + 1, 4});
    RunTree t(fanout);
    t.BulkLoad(runs);
    ASSERT_EQ(t.Check(), "") << fanout;
    EXPECT_GE(t.height(), 3u) << fanout;
    ASSERT_EQ(All(t), runs);
    // Later inserts everywhere split leaves and inner nodes of a loaded tree.
    for (uint64_t i = 0; i < n; i += 2) ASSERT_TRUE(t.Insert(5 * i + 4, 1000000000 + i, 1));
    ASSERT_EQ(t.Check(), "") << fanout;
    EXPECT_EQ(t.size(), n + n / 2);
  }
}

TEST(RunTree, MergesOnlyRunsThatContinueEachOther) {
  RunTree t;
  ASSERT_TRUE(t.Insert(10, 100, 5));
  ASSERT_TRUE(t.Insert(15, 105, 5));  // continues: one run
  ASSERT_TRUE(t.Insert(20, 300, 5));  // lba continues, phys does not
  ASSERT_TRUE(t.Insert(5, 95, 5));    // continues the first run from below
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 95, 15}, {20, 300, 5}}));
  t.SplitAt(12);
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 95, 7}, {12, 102, 8}, {20, 300, 5}}));
  std::vector<MapRun> removed;
  t.SplitAt(14);
  t.EraseStarting(12, 14, &removed);
  EXPECT_EQ(removed, (std::vector<MapRun>{{12, 102, 2}}));
  ASSERT_TRUE(t.Insert(12, 102, 2));  // refills the hole: both sides merge
  EXPECT_EQ(All(t), (std::vector<MapRun>{{5, 95, 15}, {20, 300, 5}}));
  MapRun r;
  ASSERT_TRUE(t.Covering(19, &r));
  EXPECT_EQ(r, (MapRun{5, 95, 15}));
  EXPECT_FALSE(t.Covering(4, &r));
  EXPECT_FALSE(t.Covering(25, &r));
  EXPECT_EQ(t.Check(), "");
}

TEST(RunTree, SmallTreesTakeSmallLeaves) {
  RunTree t;
  ASSERT_TRUE(t.Insert(10, 20, 1));
  EXPECT_LE(t.MemoryBytes(), 16u + 4 * 16);  // header, 4 runs
  for (uint64_t i = 1; i < 255; i++) ASSERT_TRUE(t.Insert(10 + 2 * i, 100 * i, 1));
  EXPECT_EQ(t.leaves(), 1u);
  EXPECT_EQ(t.MemoryBytes(), 4096u);
  ASSERT_TRUE(t.Insert(5, 1, 1));  // the 256th run, before the others: a split
  EXPECT_EQ(t.leaves(), 2u);
  EXPECT_EQ(t.height(), 2u);  // two leaves under a root
  EXPECT_EQ(t.Check(), "");
  RunTree c(t);
  EXPECT_EQ(All(c), All(t));
}

TEST(RunTree, IteratesInKeyOrderWhateverTheInsertOrder) {
  std::vector<uint64_t> keys(100000);
  for (uint64_t i = 0; i < keys.size(); i++) keys[i] = 3 * i;
  std::mt19937_64 rng(7);
  for (int order = 0; order < 3; order++) {
    if (order == 1) std::reverse(keys.begin(), keys.end());
    if (order == 2) std::shuffle(keys.begin(), keys.end(), rng);
    RunTree t;
    for (uint64_t k : keys) ASSERT_TRUE(t.Insert(k, 2 * k + 7, 2));  // phys gaps: nothing merges
    ASSERT_EQ(t.size(), keys.size());
    ASSERT_EQ(t.Check(), "");
    uint64_t expect = 0;
    for (MapRun r : t) {
      ASSERT_EQ(r, (MapRun{expect, 2 * expect + 7, 2})) << "order " << order;
      expect += 3;
    }
    EXPECT_EQ(expect, 3 * keys.size());
  }
}

TEST(RunTree, PacksLeavesFullInKeyOrderAndTwoThirdsAtRandom) {
  const uint64_t n = 200000;
  RunTree seq;
  for (uint64_t i = 0; i < n; i++) ASSERT_TRUE(seq.Insert(2 * i, 3 * i, 1));
  EXPECT_EQ(seq.leaves(), (n + RunTree::kLeafRuns - 1) / RunTree::kLeafRuns);
  double seq_bytes = static_cast<double>(seq.MemoryBytes()) / n;
  // 4096 / 255 = 16.06 in the leaves; inner nodes split in halves add
  // 4096 / 128 a leaf: 0.13 a run.
  EXPECT_LE(seq_bytes, 16.25);

  std::vector<uint64_t> keys(n);
  for (uint64_t i = 0; i < n; i++) keys[i] = i;
  std::mt19937_64 rng(11);
  std::shuffle(keys.begin(), keys.end(), rng);
  RunTree rnd;
  for (uint64_t k : keys) ASSERT_TRUE(rnd.Insert(2 * k, 3 * k, 1));
  ASSERT_EQ(rnd.Check(), "");
  double rnd_bytes = static_cast<double>(rnd.MemoryBytes()) / n;
  // >= 2/3 fill is 4096 / 170 = 24.1 bytes a run; random order does better.
  EXPECT_LE(rnd_bytes, 24.0) << rnd.leaves() << " leaves";
  std::printf("bytes per run: key order %.2f, random order %.2f\n", seq_bytes, rnd_bytes);
}

TEST(RunTree, BulkLoadFillsNinetyPercentAndStaysValid) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{229}, size_t{230}, size_t{100000}}) {
    std::vector<MapRun> runs;
    for (uint64_t i = 0; i < n; i++) runs.push_back({5 * i, 7 * i + 1, 4});
    RunTree t;
    ASSERT_TRUE(t.Insert(1u << 30, 0, 1));  // replaced by the load
    t.BulkLoad(runs);
    ASSERT_EQ(t.Check(), "") << n;
    ASSERT_EQ(All(t), runs);
    if (n >= 1000) {
      double fill = static_cast<double>(n) / (t.leaves() * RunTree::kLeafRuns);
      EXPECT_GE(fill, 0.89);
      EXPECT_LE(fill, 0.91);
    }
    // Later inserts in the gaps and erases keep it valid.
    for (uint64_t i = 0; i < n; i += 3) ASSERT_TRUE(t.Insert(5 * i + 4, 1000000 + i, 1));
    std::vector<MapRun> removed;
    t.EraseStarting(0, 5 * n / 2, &removed);
    ASSERT_EQ(t.Check(), "") << n;
  }
}

TEST(RunTree, EraseOfEverythingFreesEveryLeaf) {
  RunTree t;
  for (uint64_t i = 0; i < 50000; i++) ASSERT_TRUE(t.Insert(2 * i, 3 * i, 1));
  std::vector<MapRun> removed;
  t.EraseStarting(0, ~uint64_t{0}, &removed);
  EXPECT_EQ(removed.size(), 50000u);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.leaves(), 0u);
  EXPECT_TRUE(t.begin() == t.end());
}

TEST(RunTree, RefusesWhatCannotBePackedAndChangesNothing) {
  const uint64_t k = RunTree::kMaxKey, l = RunTree::kMaxLen;
  RunTree t;
  EXPECT_FALSE(t.Insert(k, 0, 1));
  EXPECT_FALSE(t.Insert(0, k, 1));
  EXPECT_FALSE(t.Insert(k - 1, 0, 2));
  EXPECT_FALSE(t.Insert(0, 0, l + 1));
  EXPECT_TRUE(t.empty());
  // The largest values round-trip.
  ASSERT_TRUE(t.Insert(k - l, k - l, l));
  ASSERT_TRUE(t.Insert(0, 5, l - 3));
  EXPECT_EQ(All(t), (std::vector<MapRun>{{0, 5, l - 3}, {k - l, k - l, l}}));
  ASSERT_TRUE(t.Insert(l - 3, l + 2, 3));  // merges to exactly kMaxLen
  EXPECT_EQ(All(t), (std::vector<MapRun>{{0, 5, l}, {k - l, k - l, l}}));
  EXPECT_EQ(t.Check(), "");
}

// A merge that would make a run longer than kMaxLen is not made: the new run
// stays apart from that neighbour (a run that fits always inserts).
TEST(RunTree, NeighboursTooLongToMergeStayApart) {
  const uint64_t k = RunTree::kMaxKey, l = RunTree::kMaxLen;
  RunTree t;
  ASSERT_TRUE(t.Insert(k - l, k - l, l));
  ASSERT_TRUE(t.Insert(k - l - 1, k - l - 1, 1));  // continues the last one: apart
  EXPECT_EQ(All(t), (std::vector<MapRun>{{k - l - 1, k - l - 1, 1}, {k - l, k - l, l}}));
  // After a run: apart from it.
  ASSERT_TRUE(t.Insert(0, 0, l - 3));
  ASSERT_TRUE(t.Insert(l - 3, l - 3, 4));
  EXPECT_EQ(All(t), (std::vector<MapRun>{{0, 0, l - 3}, {l - 3, l - 3, 4}, {k - l - 1, k - l - 1, 1}, {k - l, k - l, l}}));
  // Between two: joins the one it fits with (the previous one first).
  RunTree u;
  ASSERT_TRUE(u.Insert(0, 0, l - 10));
  ASSERT_TRUE(u.Insert(l - 5, l - 5, 100));
  ASSERT_TRUE(u.Insert(l - 10, l - 10, 5));  // all three: l + 95; previous + it: l - 5
  EXPECT_EQ(All(u), (std::vector<MapRun>{{0, 0, l - 5}, {l - 5, l - 5, 100}}));
  RunTree v;
  ASSERT_TRUE(v.Insert(0, 0, l - 2));
  ASSERT_TRUE(v.Insert(l + 3, l + 3, 10));
  ASSERT_TRUE(v.Insert(l - 2, l - 2, 5));  // too long with the previous, joins the next
  EXPECT_EQ(All(v), (std::vector<MapRun>{{0, 0, l - 2}, {l - 2, l - 2, 15}}));
  RunTree w;
  ASSERT_TRUE(w.Insert(0, 0, l - 1));
  ASSERT_TRUE(w.Insert(l + 1, l + 1, l - 1));
  ASSERT_TRUE(w.Insert(l - 1, l - 1, 2));  // fits with neither
  EXPECT_EQ(w.size(), 3u);
  for (const RunTree* x : {&t, &u, &v, &w}) EXPECT_EQ(x->Check(), "");
}

TEST(RunTree, CopiesAreDeepAndMovesEmptyTheSource) {
  RunTree a;
  for (uint64_t i = 0; i < 1000; i++) ASSERT_TRUE(a.Insert(2 * i, 3 * i, 1));
  RunTree b(a);
  std::vector<MapRun> removed;
  a.EraseStarting(0, 1000, &removed);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(a.size(), 500u);
  RunTree c(std::move(b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(c.size(), 1000u);
  b = c;
  c = std::move(a);
  EXPECT_EQ(b.size(), 1000u);
  EXPECT_EQ(c.size(), 500u);
  EXPECT_EQ(b.Check(), "");
  EXPECT_EQ(c.Check(), "");
}


// ------------------------------------------------------------ ExtentMap

std::vector<MapRun> RefLookup(const Reference& ref, uint64_t a, uint64_t n) {
  std::vector<MapRun> out;
  uint64_t end = a + n;
  auto it = ref.m.upper_bound(a);
  if (it != ref.m.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.len > a) it = p;
  }
  for (; it != ref.m.end() && it->first < end; ++it) {
    uint64_t s = std::max(a, it->first);
    uint64_t e = std::min(end, it->first + it->second.len);
    out.push_back({s, it->second.phys + (s - it->first), e - s});
  }
  return out;
}

std::vector<MapRun> All(const ExtentMap& m) {
  std::vector<MapRun> v;
  for (const auto& [lba, e] : m.runs()) v.push_back({lba, e.phys, e.len});
  auto it = m.runs().begin();
  if (!v.empty()) {
    EXPECT_EQ(it->first, v[0].lba);  // operator-> as check.cc uses it
  }
  EXPECT_EQ(m.runs().size(), v.size());
  return v;
}

// ExtentMap against the reference.
void ExtentMapDifferential(uint32_t seed, uint64_t ops) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t space = 1 << 18;
  ExtentMap m;
  Reference ref;
  uint64_t mapped = 0, next_phys = 0;
  for (uint64_t op = 0; op < ops; op++) {
    const uint64_t a = pick(space), n = 1 + pick(pick(10) == 0 ? 2048 : 8);
    const uint64_t kind = pick(10);
    if (kind < 5) {
      std::vector<MapRun> got, want = RefLookup(ref, a, n);
      m.Lookup(a, n, &got);
      if (!want.empty()) continue;  // mapped: leave it
      uint64_t phys = pick(2) ? next_phys : (next_phys += 1 + pick(4));
      ASSERT_TRUE(m.Insert(a, phys, n).ok()) << op;
      ref.Insert(a, phys, n);
      next_phys += n;
      mapped += n;
    } else if (kind < 8) {
      std::vector<MapRun> got, want;
      const bool report = pick(4) != 0;
      m.Remove(a, n, report ? &got : nullptr);
      ref.SplitAt(a);
      ref.SplitAt(a + n);
      ref.EraseStarting(a, a + n, &want);
      for (const MapRun& r : want) mapped -= r.len;
      if (report) {
        ASSERT_EQ(got, want) << op;
      }
    } else {
      std::vector<MapRun> got;
      m.Lookup(a, n, &got);
      ASSERT_EQ(got, RefLookup(ref, a, n)) << op;
      MapRun r;
      uint64_t want = ref.Covering(a, &r) ? r.phys + (a - r.lba) : ExtentMap::kUnmapped;
      ASSERT_EQ(m.Find(a), want) << op;
    }
    ASSERT_EQ(m.extents(), ref.m.size()) << op;
    ASSERT_EQ(m.mapped_units(), mapped) << op;
    if (op % 10000 == 0 || op + 1 == ops) {
      ASSERT_EQ(All(m), ref.All()) << op;
    }
  }
}

TEST(ExtentMapOnRunTree, MatchesV1Semantics) { ExtentMapDifferential(5, 100000); }

// The rule (extent_map.h): a run that breaks it is refused and changes
// nothing; runs that obey it always insert, even merged to the longest run.
TEST(ExtentMapOnRunTree, RunsOutsideTheRuleAreRefusedAndChangeNothing) {
  const uint64_t kLba = ExtentMap::kMaxLba, kPhys = ExtentMap::kMaxPhys;
  ExtentMap m;
  ASSERT_TRUE(m.Insert(0, 1, 4).ok());
  struct Bad {
    uint64_t lba, phys, len;
    const char* why;
  };
  for (const Bad& b : {Bad{4, 5, kPhys, "physical end beyond 2^32"},
                       Bad{4, kPhys, 1, "physical end beyond 2^32"},
                       Bad{4, ~uint64_t{0} - 10, 5, "physical end beyond 2^32"},
                       Bad{kLba - 1, 5, 2, "logical end beyond 2^48"},
                       Bad{uint64_t{1} << 60, 2, 1, "logical end beyond 2^48"},
                       Bad{4, 5, ~uint64_t{0}, "logical end beyond 2^48"}}) {
    EXPECT_FALSE(ExtentMap::Valid(b.lba, b.phys, b.len));
    EXPECT_NE(ExtentMap::OutOfRange(b.lba, b.phys, b.len).find(b.why), std::string::npos);
    Status s = m.Insert(b.lba, b.phys, b.len);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find(b.why), std::string::npos) << s.message();
    EXPECT_EQ(All(m), (std::vector<MapRun>{{0, 1, 4}}));
    EXPECT_EQ(m.mapped_units(), 4u);
  }
  EXPECT_EQ(ExtentMap::OutOfRange(0, 0, 0), "empty extent");
  // At the bounds: the last logical and physical units, and two halves of
  // the whole physical space merging into one run of 2^32 (RunTree::kMaxLen).
  m.Clear();
  ASSERT_TRUE(m.Insert(kLba - 3, kPhys - 3, 3).ok());
  ASSERT_TRUE(m.Insert(0, 0, kPhys / 2).ok());
  ASSERT_TRUE(m.Insert(kPhys / 2, kPhys / 2, kPhys / 2 - 3).ok());
  EXPECT_EQ(All(m), (std::vector<MapRun>{{0, 0, kPhys - 3}, {kLba - 3, kPhys - 3, 3}}));
  m.Remove(kLba - 3, 3, nullptr);
  ASSERT_TRUE(m.Insert(kPhys - 3, kPhys - 3, 3).ok());
  EXPECT_EQ(All(m), (std::vector<MapRun>{{0, 0, kPhys}}));
  EXPECT_EQ(m.Find(kPhys - 1), kPhys - 1);
  EXPECT_EQ(m.mapped_units(), kPhys);
}

}  // namespace
}  // namespace cowstore::store
