// SPDX-License-Identifier: Apache-2.0
// Unit tests of the space map (space_map.h): free-run bookkeeping and the
// next-fit cursor, AU states through reserve / map / free / release, pending
// frees by ticket, the unshared marks that forbid in-place writes, checkpoint
// AUs, the soft threshold and the rebuild at open.
#include "handler/store/space_map.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include <string>
#include <vector>

namespace cowstore::store {
namespace {

using V = std::vector<uint64_t>;
using Runs = std::map<uint64_t, uint64_t>;

// ---------------------------------------------------------------- FreeRuns

TEST(FreeRuns, AddMergesWithBothNeighbours) {
  FreeRuns f;
  f.Add(10, 2);
  f.Add(20, 2);
  EXPECT_EQ(f.runs(), (Runs{{10, 2}, {20, 2}}));
  f.Add(12, 3);  // joins the left run only
  EXPECT_EQ(f.runs(), (Runs{{10, 5}, {20, 2}}));
  f.Add(18, 2);  // joins the right run only
  EXPECT_EQ(f.runs(), (Runs{{10, 5}, {18, 4}}));
  f.Add(15, 3);  // fills the gap: one run
  EXPECT_EQ(f.runs(), (Runs{{10, 12}}));
  f.Add(0, 1);   // apart from everything
  f.Add(5, 0);   // nothing
  EXPECT_EQ(f.runs(), (Runs{{0, 1}, {10, 12}}));
  EXPECT_EQ(f.count(), 13u);
}

TEST(FreeRuns, TakeIsNextFitFromTheCursor) {
  FreeRuns f;
  f.Add(0, 4);
  f.Add(10, 4);
  V out;
  ASSERT_TRUE(f.Take(2, &out));
  EXPECT_EQ(out, (V{0, 1}));
  out.clear();
  ASSERT_TRUE(f.Take(2, &out));  // continues where the last take ended
  EXPECT_EQ(out, (V{2, 3}));
  f.Add(0, 4);  // freed again behind the cursor: not reused first
  out.clear();
  ASSERT_TRUE(f.Take(1, &out));
  EXPECT_EQ(out, (V{10}));
  EXPECT_EQ(f.count(), 7u);
}

TEST(FreeRuns, TakePrefersOneRunThatHoldsEverything) {
  FreeRuns f;
  f.Add(0, 1);
  f.Add(3, 2);
  f.Add(8, 5);
  V out;
  ASSERT_TRUE(f.Take(3, &out));
  EXPECT_EQ(out, (V{8, 9, 10}));
  EXPECT_EQ(f.runs(), (Runs{{0, 1}, {3, 2}, {11, 2}}));
}

TEST(FreeRuns, TakeGathersPiecesAndWrapsAround) {
  FreeRuns f;
  f.Add(0, 2);
  f.Add(5, 2);
  f.Add(9, 1);
  V out;
  ASSERT_TRUE(f.Take(1, &out));  // cursor moves past 0
  EXPECT_EQ(out, (V{0}));
  out.clear();
  ASSERT_TRUE(f.Take(3, &out));  // no run holds 3: pieces from the first run
  EXPECT_EQ(out, (V{1, 5, 6}));
  out.clear();
  ASSERT_TRUE(f.Take(1, &out));
  EXPECT_EQ(out, (V{9}));
  f.Add(0, 1);
  out.clear();
  ASSERT_TRUE(f.Take(1, &out));  // nothing after the cursor: wraps to the start
  EXPECT_EQ(out, (V{0}));
  EXPECT_EQ(f.count(), 0u);
}

TEST(FreeRuns, TakeOfMoreThanIsFreeTakesNothing) {
  FreeRuns f;
  f.Add(0, 2);
  f.Add(4, 2);
  V out{99};
  EXPECT_FALSE(f.Take(5, &out));
  EXPECT_EQ(out, (V{99}));
  EXPECT_EQ(f.count(), 4u);
  EXPECT_TRUE(f.Take(0, &out));
  EXPECT_EQ(out, (V{99}));
  f.Clear();
  EXPECT_EQ(f.count(), 0u);
  EXPECT_TRUE(f.runs().empty());
}

TEST(FreeRuns, RemoveTakesAPieceOfOneRunOnly) {
  FreeRuns f;
  f.Add(10, 10);
  f.Add(30, 5);
  EXPECT_FALSE(f.Remove(18, 4));  // past its run's end
  EXPECT_FALSE(f.Remove(5, 2));   // before every run
  EXPECT_FALSE(f.Remove(25, 1));  // between runs
  EXPECT_EQ(f.runs(), (Runs{{10, 10}, {30, 5}}));
  EXPECT_TRUE(f.Remove(12, 3));  // the middle: splits
  EXPECT_EQ(f.runs(), (Runs{{10, 2}, {15, 5}, {30, 5}}));
  EXPECT_TRUE(f.Remove(10, 2));  // a whole run
  EXPECT_TRUE(f.Remove(18, 2));  // the tail
  EXPECT_TRUE(f.Remove(30, 1));  // the head
  EXPECT_TRUE(f.Remove(31, 0));
  EXPECT_EQ(f.runs(), (Runs{{15, 3}, {31, 4}}));
  EXPECT_EQ(f.count(), 7u);
}

// ---------------------------------------------------------------- SpaceMap

// A state with one LUN mapping logical AUs [0, 3) to physical [2, 5).
MetaState OneLun() {
  MetaState st;
  st.au = 64 * 1024;
  auto l = std::make_shared<LunState>();
  l->id = 1;
  l->name = "a";
  l->size = 16 * st.au;
  if (!l->map.Insert(0, 2, 3).ok()) std::abort();
  st.AddLun(l);
  return st;
}

class SpaceMapTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(m_.Rebuild(16, OneLun(), {0, 1}).ok()); }
  // Sums of the states, to check the counters against.
  uint64_t InState(AuState s) {
    uint64_t n = 0;
    for (uint64_t p = 0; p < m_.total_units(); p++) n += m_.state(p) == s;
    return n;
  }
  SpaceMap m_;
};

TEST_F(SpaceMapTest, RebuildCountsTheMapsAndFreesTheRest) {
  EXPECT_EQ(m_.total_units(), 16u);
  EXPECT_EQ(m_.state(0), AuState::kMeta);
  EXPECT_EQ(m_.state(1), AuState::kMeta);
  for (uint64_t p = 2; p < 5; p++) {
    EXPECT_EQ(m_.state(p), AuState::kNone);
    EXPECT_EQ(m_.refs(p), 1u);
  }
  EXPECT_EQ(m_.free().runs(), (Runs{{5, 11}}));
  EXPECT_EQ(m_.free_units(), 11u);
  EXPECT_EQ(m_.mapped_units(), 3u);
  EXPECT_EQ(m_.meta_units(), 2u);
  EXPECT_EQ(m_.meta_aus(), (V{0, 1}));
  EXPECT_EQ(m_.shared_units(), 0u);
  EXPECT_FALSE(m_.has_pending());
}

// Withhold (the open's hold of a one-sync record's freed AUs): free AUs
// become pending and releasing, are never handed out, and Release gives
// them back; anything not wholly free is refused, changing nothing.
TEST_F(SpaceMapTest, AWithheldRunIsReleasingUntilReleased) {
  for (auto [r, why] : {std::pair{PendingRun{4, 2, 0}, "withholding AUs 4+2: not all free"},  // AU 4 mapped
                        std::pair{PendingRun{15, 2, 0}, "withholding AUs 15+2: beyond the pool"}}) {
    Status s = m_.Withhold(r);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_EQ(s.message(), why);
  }
  EXPECT_EQ(m_.free().runs(), (Runs{{5, 11}}));
  ASSERT_TRUE(m_.Withhold({8, 3, 0}).ok());
  EXPECT_EQ(m_.Withhold({10, 1, 0}).code(), Code::kInvalidArgument);  // withheld already
  EXPECT_EQ(m_.free().runs(), (Runs{{5, 3}, {11, 5}}));
  EXPECT_EQ(m_.free_units(), 8u);
  EXPECT_EQ(m_.releasing_units(), 3u);
  EXPECT_EQ(m_.pending_units(), 3u);  // what Check compares with the kPending states
  EXPECT_EQ(InState(AuState::kPending), 3u);
  EXPECT_TRUE(m_.has_pending());
  V out;
  ASSERT_TRUE(m_.Reserve(8, &out));
  for (uint64_t p : out) EXPECT_TRUE(p < 8 || p >= 11) << p;
  EXPECT_FALSE(m_.Reserve(1, &out));
  m_.Release({8, 3, 0}, /*zeroed=*/true);
  EXPECT_EQ(m_.releasing_units(), 0u);
  EXPECT_FALSE(m_.has_pending());
  EXPECT_EQ(m_.free().runs(), (Runs{{8, 3}}));
  EXPECT_EQ(InState(AuState::kFree), 3u);
}

TEST_F(SpaceMapTest, RebuildRefusesAMappedCheckpointAu) {
  SpaceMap m;
  Status s = m.Rebuild(16, OneLun(), {3});
  EXPECT_EQ(s.code(), Code::kCorruption);
}

// #16: a reference count at its bound refuses the increment at run time,
// changing nothing (before, Inc wrapped it to 0 and only Rebuild checked).
TEST_F(SpaceMapTest, IncPastTheCountsBoundIsRefusedAndChangesNothing) {
  m_.set_max_refs(3);  // AUs 2..4 have 1 reference (OneLun)
  ASSERT_TRUE(m_.Inc(2, 3).ok());
  ASSERT_TRUE(m_.Inc(3, 1).ok());  // refs 2, 3, 2 for AUs 2, 3, 4
  auto counts = [&] { return V{m_.refs(2), m_.refs(3), m_.refs(4)}; };
  ASSERT_EQ(counts(), (V{2, 3, 2}));
  Status s = m_.Inc(2, 3);  // AU 3 would pass 3
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("AU 3 already has 3 references"), std::string::npos) << s.message();
  EXPECT_EQ(counts(), (V{2, 3, 2}));  // AU 2 was not incremented either
  EXPECT_EQ(m_.mapped_units(), 3u);
  // CanInc counts an AU once per run naming it: two runs over AU 2 take it
  // from 2 to 4; one run, or two over AUs below the bound, fit.
  EXPECT_TRUE(m_.CanInc(std::vector<store::Run>{{0, 2, 1}}).ok());
  EXPECT_EQ(m_.CanInc(std::vector<store::Run>{{0, 2, 1}, {9, 2, 1}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(m_.CanInc(std::vector<store::Run>{{0, 3, 1}}).code(), Code::kInvalidArgument);
  EXPECT_TRUE(m_.CanInc(std::vector<store::Run>{{0, 4, 1}}).ok());
  EXPECT_EQ(m_.CanInc(std::vector<store::Run>{{0, 4, 1}, {5, 2, 3}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(counts(), (V{2, 3, 2}));
  // The full 32-bit bound, reached by Rebuild's own check too.
  SpaceMap big;
  MetaState st = OneLun();
  big.set_max_refs(1);
  EXPECT_EQ(big.Rebuild(16, st, {}).code(), Code::kOk);
  EXPECT_EQ(big.Inc(2, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(SpaceMap::kMaxRefs, UINT32_MAX);
}

// The pool's RefSink in miniature: ApplyRecord's reference changes go to a
// SpaceMap (as Core does).
class MapSink : public RefSink {
 public:
  explicit MapSink(SpaceMap* m) : m_(m) {}
  Status CanInc(std::span<const Run> runs) const override { return m_->CanInc(runs); }
  Status Inc(uint64_t phys, uint64_t n) override { return m_->Inc(phys, n); }
  void Dec(uint64_t phys, uint64_t n) override { m_->Dec(phys, n, 1); }

 private:
  SpaceMap* m_;
};

// A record that would take a count past its bound is refused whole: neither
// the maps nor any count change, whichever of its runs hits the bound.
TEST_F(SpaceMapTest, ARecordThatWouldOverflowACountChangesNothing) {
  MetaState st = OneLun();  // LUN 1: [0, 3) -> [2, 5)
  auto b = std::make_shared<LunState>();
  b->id = 2;
  b->name = "b";
  b->size = 16 * st.au;
  st.AddLun(b);
  st.next_lun_id = 3;
  MapSink sink(&m_);
  m_.set_max_refs(2);
  ASSERT_TRUE(m_.Inc(4, 1).ok());  // AU 4 at the bound
  std::string before;
  EncodeState(st, &before);
  std::vector<uint32_t> refs_before = m_.all_refs();
  auto unchanged = [&] {
    std::string now;
    EncodeState(st, &now);
    EXPECT_EQ(now, before);
    EXPECT_EQ(m_.all_refs(), refs_before);
  };
  Record clone;  // AUs 2..4 to LUN b: AU 4 would have 3
  clone.type = RecType::kClone;
  clone.lun = 1;
  clone.lun2 = 2;
  clone.a = 0;
  clone.b = 0;
  clone.n = 3;
  EXPECT_EQ(ApplyRecord(&st, clone, &sink, nullptr).code(), Code::kInvalidArgument);
  unchanged();
  Record copy;  // CloneLun
  copy.type = RecType::kCloneLun;
  copy.lun = 1;
  copy.lun2 = 3;
  copy.name = "c";
  EXPECT_EQ(ApplyRecord(&st, copy, &sink, nullptr).code(), Code::kInvalidArgument);
  unchanged();
  EXPECT_EQ(st.Find(3), nullptr);
  Record map;  // a first run that fits, a second one naming AU 4
  map.type = RecType::kMap;
  map.lun = 2;
  map.runs = {{0, 2, 1}, {1, 4, 1}};
  EXPECT_EQ(ApplyRecord(&st, map, &sink, nullptr).code(), Code::kInvalidArgument);
  unchanged();
  Record rollback;  // LUN b becomes LUN a: AU 4 again
  rollback.type = RecType::kRollbackLun;
  rollback.lun = 2;
  rollback.lun2 = 1;
  EXPECT_EQ(ApplyRecord(&st, rollback, &sink, nullptr).code(), Code::kInvalidArgument);
  unchanged();
  // Below the bound the same clone applies.
  clone.n = 2;
  ASSERT_TRUE(ApplyRecord(&st, clone, &sink, nullptr).ok());
  EXPECT_EQ(m_.refs(2), 2u);
  EXPECT_EQ(m_.refs(3), 2u);
  EXPECT_EQ(st.Find(2)->map.mapped_units(), 2u);
}

TEST_F(SpaceMapTest, ReserveMapAndUnreserve) {
  V got;
  ASSERT_TRUE(m_.Reserve(3, &got));
  EXPECT_EQ(got, (V{5, 6, 7}));
  EXPECT_EQ(m_.reserved_units(), 3u);
  EXPECT_EQ(InState(AuState::kReserved), 3u);
  EXPECT_EQ(m_.free_units(), 8u);

  m_.Mapped({5});
  ASSERT_TRUE(m_.Inc(5, 1).ok());  // the record mapping it
  EXPECT_EQ(m_.state(5), AuState::kNone);
  EXPECT_EQ(m_.refs(5), 1u);
  EXPECT_EQ(m_.reserved_units(), 2u);

  m_.Unreserve({6, 7}, /*unzeroed=*/{7});
  EXPECT_EQ(m_.state(6), AuState::kFree);
  EXPECT_EQ(m_.state(7), AuState::kQuarantine);  // never handed out again
  EXPECT_EQ(m_.reserved_units(), 0u);
  EXPECT_EQ(m_.free_units(), 9u);
  EXPECT_EQ(InState(AuState::kFree), m_.free_units());

  V all;
  EXPECT_FALSE(m_.Reserve(10, &all));  // only 9 free: nothing taken
  EXPECT_TRUE(all.empty());
  EXPECT_EQ(m_.free_units(), 9u);
}

TEST_F(SpaceMapTest, FreedAusWaitForTheirRecordThenRelease) {
  m_.Dec(2, 2, /*tag=*/7);  // AUs 2 and 3 lose their only reference
  EXPECT_EQ(m_.state(2), AuState::kPending);
  EXPECT_EQ(m_.state(3), AuState::kPending);
  EXPECT_EQ(m_.pending_units(), 2u);
  EXPECT_EQ(m_.mapped_units(), 1u);
  EXPECT_TRUE(m_.has_pending());

  EXPECT_TRUE(m_.TakeReleasable(6).empty());  // its record is not durable yet
  auto ready = m_.TakeReleasable(7);
  ASSERT_EQ(ready.size(), 1u);  // one merged run
  EXPECT_EQ(ready[0].phys, 2u);
  EXPECT_EQ(ready[0].n, 2u);
  EXPECT_EQ(m_.state(2), AuState::kPending);  // until released
  EXPECT_EQ(m_.releasing_units(), 2u);
  EXPECT_EQ(m_.pending_units(), 2u);
  EXPECT_TRUE(m_.has_pending());  // they will be free without a new record

  m_.Release(ready[0], /*zeroed=*/true);
  EXPECT_FALSE(m_.has_pending());
  EXPECT_EQ(m_.releasing_units(), 0u);
  EXPECT_EQ(m_.state(2), AuState::kFree);
  EXPECT_EQ(m_.free().runs(), (Runs{{2, 2}, {5, 11}}));
}

// Release's precondition, checked as FreeSpace::Release checks its own
// (TryRelease; Release asserts it): AUs not releasing (mapped, reserved,
// checkpoint metadata, free, released already, beyond the pool) are refused
// with kInvalidArgument, changing nothing. Unchecked, each of these became
// free (or quarantined) whatever it was, and releasing_ fell below what is
// releasing, or wrapped. (AUs still waiting for their record are kPending
// as releasing ones are, and not told apart: see TryRelease.)
TEST_F(SpaceMapTest, ReleaseRefusesAusThatAreNotReleasingAndChangesNothing) {
  m_.Dec(2, 2, /*tag=*/7);  // AUs 2 and 3: their record has ticket 7
  const std::vector<PendingRun> ready = m_.TakeReleasable(7);
  ASSERT_EQ(ready.size(), 1u);  // {2, 2}: releasing; AU 4 stays mapped
  V out;
  ASSERT_TRUE(m_.Reserve(1, &out));  // a free AU, reserved
  ASSERT_EQ(out.size(), 1u);
  auto refused = [&](const PendingRun& r, bool zeroed, const std::string& what,
                     const char* why = "some were never taken to be released") {
    SCOPED_TRACE(what);
    const std::vector<AuState> states = m_.all_states();
    const Runs free_runs = m_.free().runs();
    const uint64_t releasing = m_.releasing_units(), pending = m_.pending_units(),
                   quarantined = m_.quarantined_units();
    Status s = m_.TryRelease(r, zeroed);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_EQ(s.message(), "release of AUs " + std::to_string(r.phys) + "+" + std::to_string(r.n) + ": " + why);
    EXPECT_EQ(m_.all_states(), states);
    EXPECT_EQ(m_.free().runs(), free_runs);
    EXPECT_EQ(m_.releasing_units(), releasing);
    EXPECT_EQ(m_.pending_units(), pending);
    EXPECT_EQ(m_.quarantined_units(), quarantined);
  };
  refused({4, 1, 0}, true, "mapped");
  refused({3, 2, 7}, true, "releasing, then mapped");
  refused({out[0], 1, 0}, true, "reserved");
  refused({0, 1, 0}, false, "checkpoint metadata");
  refused({14, 1, 0}, true, "free");
  refused({15, 2, 0}, true, "beyond the pool", "beyond the pool");
  ASSERT_TRUE(m_.TryRelease(ready[0], /*zeroed=*/true).ok());
  EXPECT_EQ(m_.state(2), AuState::kFree);
  EXPECT_EQ(m_.releasing_units(), 0u);
  refused(ready[0], true, "released already");
}

TEST_F(SpaceMapTest, PendingIsReleasedByTagOnly) {
  m_.Dec(2, 1, 5);
  m_.Dec(4, 1, 9);
  m_.Dec(3, 1, 5);  // same tag, not contiguous with the last entry
  auto ready = m_.TakeReleasable(5);
  uint64_t n = 0;
  for (const PendingRun& r : ready) {
    EXPECT_LE(r.tag, 5u);
    n += r.n;
  }
  EXPECT_EQ(n, 2u);  // AUs 2 and 3
  EXPECT_EQ(m_.pending_units(), 3u);  // 2 releasing, 1 waiting
  for (const PendingRun& r : ready) m_.Release(r, true);
  EXPECT_EQ(m_.pending_units(), 1u);
  EXPECT_EQ(m_.state(4), AuState::kPending);
  ready = m_.TakeReleasable(9);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].phys, 4u);
  m_.Release(ready[0], /*zeroed=*/false);  // could not be zeroed
  EXPECT_EQ(m_.state(4), AuState::kQuarantine);
  EXPECT_EQ(m_.free_units(), 13u);
}

// Frees interleaved across records and out of AU order come back as one run
// per physical stretch (one hole punch each), in AU order.
TEST_F(SpaceMapTest, ReleasableRunsAreMergedInAuOrder) {
  V got;
  ASSERT_TRUE(m_.Reserve(3, &got));  // AUs 5, 6, 7: now 2..7 are mapped
  m_.Mapped(got);
  ASSERT_TRUE(m_.Inc(5, 3).ok());
  m_.Dec(6, 1, 5);
  m_.Dec(4, 1, 6);
  m_.Dec(2, 1, 7);
  m_.Dec(5, 1, 8);
  m_.Dec(3, 1, 9);
  ASSERT_TRUE(m_.Inc(7, 1).ok());
  m_.Dec(7, 1, 9);  // AU 7 keeps its reference
  auto ready = m_.TakeReleasable(8);  // records 5..8: AUs 6, 4, 2, 5
  ASSERT_EQ(ready.size(), 2u);
  EXPECT_EQ(ready[0].phys, 2u);
  EXPECT_EQ(ready[0].n, 1u);
  EXPECT_EQ(ready[1].phys, 4u);
  EXPECT_EQ(ready[1].n, 3u);
  EXPECT_EQ(m_.releasing_units(), 4u);
  for (const PendingRun& r : ready) m_.Release(r, true);
  ready = m_.TakeReleasable(9);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].phys, 3u);
  m_.Release(ready[0], true);
  EXPECT_FALSE(m_.has_pending());
  EXPECT_EQ(m_.refs(7), 1u);
  EXPECT_EQ(m_.free().runs(), (Runs{{2, 5}, {8, 8}}));
}

TEST_F(SpaceMapTest, UnsharedAuIsNotWrittenInPlaceUntilItsRecordIsDurable) {
  EXPECT_TRUE(m_.WritableInPlace(2, 0));
  ASSERT_TRUE(m_.Inc(2, 1).ok());  // a clone shares AU 2
  EXPECT_EQ(m_.shared_units(), 1u);
  EXPECT_FALSE(m_.WritableInPlace(2, 100));
  m_.Dec(2, 1, /*tag=*/8);  // the clone lets go, in record 8
  EXPECT_EQ(m_.refs(2), 1u);
  EXPECT_FALSE(m_.WritableInPlace(2, 7));  // on disk it may still be shared
  EXPECT_TRUE(m_.WritableInPlace(2, 8));
  m_.TakeReleasable(8);  // record 8 durable: the mark goes
  EXPECT_TRUE(m_.WritableInPlace(2, 0));
  EXPECT_FALSE(m_.has_pending());  // nothing was freed
}

TEST_F(SpaceMapTest, NewCheckpointRetiresTheOldOneThroughPending) {
  V aus;
  ASSERT_TRUE(m_.TakeMeta(2, &aus));
  EXPECT_EQ(aus, (V{5, 6}));
  EXPECT_EQ(m_.state(5), AuState::kMeta);
  EXPECT_EQ(m_.meta_units(), 4u);  // both chains, until the new one is installed
  ASSERT_TRUE(m_.InstallMeta(aus, /*tag=*/3).ok());
  EXPECT_EQ(m_.meta_aus(), (V{5, 6}));
  EXPECT_EQ(m_.meta_units(), 2u);
  EXPECT_EQ(m_.state(0), AuState::kPending);
  EXPECT_EQ(m_.state(1), AuState::kPending);
  EXPECT_TRUE(m_.TakeReleasable(2).empty());
  auto ready = m_.TakeReleasable(3);
  for (const PendingRun& r : ready) m_.Release(r, true);
  EXPECT_EQ(m_.state(0), AuState::kFree);
  EXPECT_EQ(m_.free_units(), 11u);
}

TEST_F(SpaceMapTest, SoftThresholdIsCrossedOnce) {
  m_.set_soft_percent(50);  // 8 of 16 AUs
  EXPECT_EQ(m_.soft_threshold_units(), 8u);
  V got;
  uint64_t before = m_.free_units();  // 5 used
  ASSERT_TRUE(m_.Reserve(2, &got));   // 7 used
  EXPECT_FALSE(m_.CrossedSoftThreshold(before, 0));
  before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(1, &got));  // 8 used
  EXPECT_TRUE(m_.CrossedSoftThreshold(before, 0));
  before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(1, &got));  // already above
  EXPECT_FALSE(m_.CrossedSoftThreshold(before, 0));
  m_.set_soft_percent(0);
  EXPECT_FALSE(m_.CrossedSoftThreshold(16, 0));
}

// AUs freed durably but still being punched are free by every record and
// in Space(): a write that brings the rest to the threshold's line is no
// crossing while they are counted.
TEST_F(SpaceMapTest, AusBeingPunchedDoNotCountTowardTheSoftThreshold) {
  m_.set_soft_percent(50);  // 8 of 16 AUs; 5 used
  V got;
  ASSERT_TRUE(m_.Reserve(2, &got));  // 7 used
  m_.Dec(2, 2, /*tag=*/7);           // AUs 2 and 3 freed ...
  ASSERT_EQ(m_.TakeReleasable(7).size(), 1u);
  ASSERT_EQ(m_.releasing_units(), 2u);  // ... and being punched: 5 used
  uint64_t before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(2, &got));  // 7 used, 9 by free_units() alone
  EXPECT_FALSE(m_.CrossedSoftThreshold(before, 0));
  before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(1, &got));  // 8 used: this one crosses
  EXPECT_TRUE(m_.CrossedSoftThreshold(before, 0));
}

// Units zeroing ahead holds for a round are out of free space but not used
// (Space() shows them free): a write is no crossing by their count.
TEST_F(SpaceMapTest, UnitsLentDoNotCountTowardTheSoftThreshold) {
  m_.set_soft_percent(50);  // 8 of 16 AUs; 5 used
  V lent, got;
  ASSERT_TRUE(m_.Reserve(2, &lent));  // held by a round: still 5 used
  uint64_t before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(2, &got));  // 7 used, 9 counting the lent ones
  EXPECT_FALSE(m_.CrossedSoftThreshold(before, 2));
  EXPECT_TRUE(m_.CrossedSoftThreshold(before, 0));
  before = m_.free_units();
  ASSERT_TRUE(m_.Reserve(1, &got));  // 8 used: this one crosses
  EXPECT_TRUE(m_.CrossedSoftThreshold(before, 2));
}

TEST_F(SpaceMapTest, GrowAddsFreeAus) {
  m_.Grow(20);
  EXPECT_EQ(m_.total_units(), 20u);
  EXPECT_EQ(m_.free().runs(), (Runs{{5, 15}}));
  for (uint64_t p = 16; p < 20; p++) {
    EXPECT_EQ(m_.state(p), AuState::kFree);
    EXPECT_EQ(m_.refs(p), 0u);
  }
}

}  // namespace
}  // namespace cowstore::store
