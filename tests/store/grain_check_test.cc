// SPDX-License-Identifier: Apache-2.0
// The check's recount of a GrainSpace (grain_check.h, store-v3.md 5d.4):
// CheckGrainCensus on a census laid out by hand, clean, then damaged one
// way per test so that each branch (every overlap of two places, each
// count against its runs, the leak and the counts above the pool, the
// shared totals) is what reports it; and on the census of a real
// GrainSpace with grains in every state (reserved, mapped by a record
// before Mapped, pending, releasing, quarantined), which must be clean.
#include "handler/store/grain_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/meta.h"

namespace cowstore::store {
namespace {

using MapRun = Run;  // inside a TEST, Run names testing::Test::Run

// 64 grains, 4 to the AU, each grain in one place:
//   [0, 4)   AU 0, checkpoint metadata
//   [4, 8)   free, held in a LUN's chunk
//   [8, 16)  mapped: LUN 1 maps [8, 16), LUN 2 [12, 16) (shared, 2 owners)
//   [16, 18) reserved
//   [18, 20) pending free
//   [20, 22) one releasing (grain 20), one quarantined (grain 21)
//   [22, 64) free in the index
struct Layout {
  std::vector<MapRun> runs{{0, 8, 8}, {0, 12, 4}};
  GrainCensus c;
  std::vector<uint64_t> format_meta{0};
  Layout() {
    c.total = 64;
    c.grains_per_au = 4;
    c.shared = {{12, 4, 2}};
    c.shared_grains = 4;
    c.region_shared = {4};
    c.mapped = 8;
    c.free_runs = {{22, 42}};
    c.chunk_runs = {{4, 4}};
    c.free = 46;
    c.meta_aus = {0};
    c.meta = 4;
    c.reserved_runs = {{{16, 2}, 0}};
    c.reserved = 2;
    c.pending_runs = {{18, 2, 7}};
    c.pending = 2;
    c.releasing_runs = {{20, 1, 6}};
    c.releasing = 1;
    c.quarantined_runs = {{21, 1, 0}};
    c.quarantined = 1;
  }
  CheckReport Check() const {
    CheckReport rep;
    CheckGrainCensus(runs, c, format_meta, &rep, [&](std::string p) {
      rep.clean = false;
      rep.problems.push_back(std::move(p));
    });
    return rep;
  }
};

std::string All(const CheckReport& r) {
  std::string s;
  for (const std::string& p : r.problems) s += "  " + p + "\n";
  return s;
}

// The report holds a problem containing `what`.
::testing::AssertionResult Reports(const CheckReport& r, const std::string& what) {
  for (const std::string& p : r.problems)
    if (p.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no problem contains \"" << what << "\"; reported:\n" << All(r);
}

TEST(GrainCheck, TheLayoutIsClean) {
  const CheckReport r = Layout().Check();
  EXPECT_TRUE(r.clean) << All(r);
  EXPECT_EQ(r.leaked_units, 0u);
  EXPECT_EQ(r.allocated_units, 8u + 4u);
}

// Chunk-held grains are free (free_units() counts them): their runs add up
// with the index's, and they are a place like any other.
TEST(GrainCheck, ChunkHeldGrainsAreFreeAndPlaced) {
  Layout l;
  l.c.chunk_runs = {{4, 3}};  // grain 7 in no place now
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "free-space runs do not add up: 42 grains in the index and 3 in LUN chunks, the count says 46"));
  EXPECT_TRUE(Reports(r, "1 grains are leaked (neither mapped, free, metadata nor in flight): leaked: grains [7, 8)"));
  Layout m;
  m.c.chunk_runs = {{4, 4}, {9, 1}};
  m.c.free = 47;
  m.c.releasing = 0;  // the counts balance
  EXPECT_TRUE(Reports(m.Check(), "grains [9, 10) are mapped and also free in a LUN's chunk"));
}

// The review's case: a grain both mapped and pending, its count balanced by
// one fewer releasing grain (the counts alone add up to the pool).
TEST(GrainCheck, MappedAndPending) {
  Layout l;
  l.c.pending_runs = {{9, 1, 5}, {18, 2, 7}};
  l.c.pending = 3;
  l.c.releasing_runs = {};
  l.c.releasing = 0;
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "grains [9, 10) are mapped and also pending free"));
  // Grain 20 is in no place now.
  EXPECT_TRUE(Reports(r, "1 grains are leaked (neither mapped, free, metadata nor in flight): leaked: grains [20, 21)"));
  EXPECT_EQ(r.leaked_units, 1u);
}

// Review finding 1: a releasing grain that is also free (it could be handed
// out, written and then punched: silent loss), its count balanced by a leaked
// grain, so the counts alone add up to the pool.
TEST(GrainCheck, ReleasingAndFree) {
  Layout l;
  l.c.releasing_runs = {{30, 1, 6}};  // grain 30 is free too; grain 20 leaked
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "grains [30, 31) are free and also releasing (being punched)"));
  EXPECT_TRUE(Reports(r, "1 grains are leaked (neither mapped, free, metadata nor in flight): leaked: grains [20, 21)"));
  EXPECT_EQ(r.leaked_units, 1u);
}

// The same for a quarantined grain that a LUN maps.
TEST(GrainCheck, QuarantinedAndMapped) {
  Layout l;
  l.c.quarantined_runs = {{9, 1, 0}};  // grain 9 is mapped too; grain 21 leaked
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "grains [9, 10) are mapped and also quarantined"));
  EXPECT_TRUE(Reports(r, "leaked: grains [21, 22)"));
}

// Releasing and quarantined runs add up to their counts.
TEST(GrainCheck, ReleasingAndQuarantinedCountsAgainstRuns) {
  Layout l;
  l.c.releasing = 2;
  l.c.quarantined = 0;
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "releasing grain count mismatch: 1 grains in releasing runs, the count says 2"));
  EXPECT_TRUE(Reports(r, "quarantined grain count mismatch: 1 grains in quarantined runs, the count says 0"));
}

// Review finding 2: the free index's own Check (size classes against runs
// by offset) is reported.
TEST(GrainCheck, FreeIndexProblemIsReported) {
  Layout l;
  l.c.index_problem = "class 5 holds stray runs";
  EXPECT_TRUE(Reports(l.Check(), "the free index's size classes disagree with its runs by offset: class 5 holds stray runs"));
}

// Review finding 4: AUs still handed over at check time (the check leads the
// queue, so no checkpoint is between TakeMeta and InstallMeta) are reported.
TEST(GrainCheck, AusLeftHandedOverAreReported) {
  Layout l;
  l.c.handed_over = {15};  // grains [60, 64), no longer free
  l.c.free_runs = {{22, 38}};
  l.c.free = 42;
  l.c.meta = 8;
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "1 metadata AUs are handed over to a checkpoint that never installed them (first: AU 15)")) << All(r);
  EXPECT_EQ(r.problems.size(), 1u) << All(r);
}

TEST(GrainCheck, MappedAndFree) {
  Layout l;
  l.c.free_runs = {{10, 1}, {22, 42}};
  l.c.free = 47;
  l.c.releasing = 0;
  EXPECT_TRUE(Reports(l.Check(), "grains [10, 11) are mapped and also free"));
}

TEST(GrainCheck, MappedAndCheckpointMetadata) {
  Layout l;
  l.c.meta_aus = {0, 2};  // grains [8, 12)
  l.format_meta = l.c.meta_aus;
  l.c.meta = 8;
  EXPECT_TRUE(Reports(l.Check(), "grains [8, 12) are mapped and also checkpoint metadata"));
}

TEST(GrainCheck, FreeAndCheckpointMetadata) {
  Layout l;
  l.c.meta_aus = {0, 10};  // grains [40, 44)
  l.format_meta = l.c.meta_aus;
  l.c.meta = 8;
  EXPECT_TRUE(Reports(l.Check(), "grains [40, 44) are free and also checkpoint metadata"));
}

TEST(GrainCheck, HandedOverMetadataIsAPlaceToo) {
  Layout l;
  l.c.handed_over = {1};  // grains [4, 8): the chunk's
  l.c.meta = 8;
  EXPECT_TRUE(Reports(l.Check(), "grains [4, 8) are free in a LUN's chunk and also metadata handed over"));
}

TEST(GrainCheck, ReservedAndMapped) {
  Layout l;
  l.c.reserved_runs = {{{14, 2}, 0}};  // no record maps them yet, but the maps do
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "grains [14, 16) are mapped and also reserved"));
  EXPECT_TRUE(Reports(r, "2 grains are leaked"));  // [16, 18), no longer reserved
}

// A reserved grain a record mapped already (Inc before Mapped) is mapped
// and counted reserved: no overlap, no double count; unless no map names it.
TEST(GrainCheck, ReservedGrainsARecordMappedMustBeMapped) {
  Layout l;
  l.c.reserved_runs = {{{10, 2}, 1}, {{16, 2}, 0}};
  l.c.reserved = 4;
  CheckReport r = l.Check();
  EXPECT_TRUE(r.clean) << All(r);
  l.c.reserved_runs = {{{16, 2}, 1}};
  l.c.reserved = 2;
  l.c.mapped = 10;
  r = l.Check();
  EXPECT_TRUE(Reports(r, "grains [16, 18) are reserved and mapped by a record, but no map names them all"));
}

TEST(GrainCheck, ReservedAndPendingCountsAgainstTheirRuns) {
  Layout l;
  l.c.reserved = 3;
  l.c.pending = 1;
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "reserved grain count mismatch: 2 grains in reservations, the count says 3"));
  EXPECT_TRUE(Reports(r, "pending-free grain count mismatch: 2 grains in pending runs, the count says 1"));
}

TEST(GrainCheck, CountsAboveThePool) {
  Layout l;
  l.c.quarantined = 6;
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "the space map places 69 grains in a pool of 64"));
  EXPECT_TRUE(Reports(r, "quarantined grain count mismatch: 1 grains in quarantined runs, the count says 6"));
}

TEST(GrainCheck, CheckpointAuOutsideThePool) {
  Layout l;
  l.c.meta_aus = {0, 16};  // the pool's AUs are 0..15
  l.format_meta = l.c.meta_aus;
  l.c.meta = 8;
  EXPECT_TRUE(Reports(l.Check(), "checkpoint AU 16 is outside the pool"));
}

TEST(GrainCheck, FreeRunsThatDoNotAddUpToTheCount) {
  Layout l;
  l.c.free = 45;
  EXPECT_TRUE(Reports(l.Check(), "free-space runs do not add up: 42 grains in the index and 4 in LUN chunks, the count says 45"));
}

TEST(GrainCheck, ALeakIsNamedByGrain) {
  Layout l;
  l.c.releasing = l.c.quarantined = 0;
  l.c.releasing_runs = l.c.quarantined_runs = {};
  const CheckReport r = l.Check();
  EXPECT_TRUE(Reports(r, "2 grains are leaked (neither mapped, free, metadata nor in flight): leaked: grains [20, 22)"));
  EXPECT_EQ(r.leaked_units, 2u);
}

TEST(GrainCheck, SharedTotalAndRegionCounters) {
  Layout l;
  l.c.shared_grains = 5;
  EXPECT_TRUE(Reports(l.Check(), "the space map counts 5 shared grains, maps say 4"));
  Layout m;
  m.c.region_shared = {3};
  EXPECT_TRUE(Reports(m.Check(), "the shared-grain counter of region 0 (grains [0, 64)) says 3, maps say 4"));
  Layout n;
  n.c.region_shared = {4, 0};
  EXPECT_TRUE(Reports(n.Check(), "the space map keeps 2 shared-grain region counters, a pool of 64 grains has 1"));
}

// A real GrainSpace, AU 64 KiB of 4 KiB grains, with grains in every
// state at once: its census is clean, and a grain left in two places is
// found.
MetaState StateOf(const std::vector<std::vector<MapRun>>& luns) {
  MetaState st;
  st.au = 4096;
  for (size_t i = 0; i < luns.size(); i++) {
    auto l = std::make_shared<LunState>();
    l->id = static_cast<uint32_t>(i + 1);
    l->name = "lun" + std::to_string(i + 1);
    l->map = ExtentMap(ExtentMap::kMaxPhys);
    uint64_t end = 0;
    for (const MapRun& r : luns[i]) {
      EXPECT_TRUE(l->map.Insert(r.lba, r.phys, r.len).ok());
      end = std::max(end, r.lba + r.len);
    }
    l->size = end * st.au;
    st.AddLun(l);
  }
  return st;
}

std::vector<MapRun> RunsOf(const MetaState& st) {
  std::vector<MapRun> v;
  for (const auto& [id, l] : st.luns())
    for (const auto& [lba, e] : l->map.runs()) v.push_back({lba, e.phys, e.len});
  return v;
}

CheckReport CheckSpace(const GrainSpace& s, const std::vector<MapRun>& runs) {
  CheckReport rep;
  CheckGrainCensus(runs, s.Census(), s.meta_aus(), &rep, [&](std::string p) {
    rep.clean = false;
    rep.problems.push_back(std::move(p));
  });
  return rep;
}

TEST(GrainCheck, ARealSpaceWithGrainsInEveryStateIsClean) {
  GrainSpace s(4096, 64 * 1024);
  const uint64_t g = s.grains_per_au();
  // LUN 1 maps [g, 3g), LUN 2 shares [2g, 2g + 4); AU 0 is metadata.
  std::vector<std::vector<MapRun>> luns{{{0, g, 2 * g}}, {{0, 2 * g, 4}}};
  ASSERT_TRUE(s.Rebuild(8 * g, StateOf(luns), {0}).ok());
  CheckReport r = CheckSpace(s, RunsOf(StateOf(luns)));
  ASSERT_TRUE(r.clean) << All(r);

  // Reserved: 6 grains; 2 of them mapped by a record (LUN 2 at lba 4)
  // before Mapped.
  std::vector<uint64_t> res;
  ASSERT_TRUE(s.Reserve(6, &res));
  std::sort(res.begin(), res.end());
  ASSERT_TRUE(s.Inc(res[0], 1).ok());
  luns[1].push_back({4, res[0], 1});
  r = CheckSpace(s, RunsOf(StateOf(luns)));
  EXPECT_TRUE(r.clean) << "reserved, one mapped by a record:\n" << All(r);
  s.Mapped({res[0]});
  // Pending: LUN 1's first 3 grains overwritten (its last owner gone).
  s.Dec(g, 3, /*tag=*/9);
  luns[0] = {{3, g + 3, 2 * g - 3}};
  r = CheckSpace(s, RunsOf(StateOf(luns)));
  EXPECT_TRUE(r.clean) << "pending:\n" << All(r);
  // Releasing, then one run back free and another quarantined.
  s.Dec(g + 3, 2, /*tag=*/10);
  luns[0] = {{5, g + 5, 2 * g - 5}};
  std::vector<PendingRun> ready = s.TakeReleasable(9);
  ASSERT_EQ(ready.size(), 1u);
  r = CheckSpace(s, RunsOf(StateOf(luns)));
  EXPECT_TRUE(r.clean) << "releasing:\n" << All(r);
  s.Release(ready[0], /*zeroed=*/false);
  std::vector<uint64_t> unused(res.begin() + 1, res.end());
  s.Unreserve(unused, {unused.front()});
  ASSERT_GT(s.quarantined_units(), 3u);
  r = CheckSpace(s, RunsOf(StateOf(luns)));
  EXPECT_TRUE(r.clean) << "quarantined:\n" << All(r);
  EXPECT_EQ(r.leaked_units, 0u);

  // A map naming a pending grain (the record that freed it lost): mapped
  // and pending, with the counts still adding up to the pool.
  luns[0].push_back({3, g + 3, 1});
  r = CheckSpace(s, RunsOf(StateOf(luns)));
  EXPECT_TRUE(Reports(r, "grains [" + std::to_string(g + 3) + ", " + std::to_string(g + 4) +
                             ") are mapped and also pending free"));
}

}  // namespace
}  // namespace cowstore::store
