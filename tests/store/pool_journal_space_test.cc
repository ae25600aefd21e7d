// SPDX-License-Identifier: Apache-2.0
// PoolJournalSpace (pool_journal_space.h) over every space class: the runs
// it takes are the longest whole free AUs, handed over like TakeMeta's; a
// run given back stays handed over (a failed format 3 checkpoint's
// superblock may name it); the next InstallMeta keeps the runs the journal
// holds and frees the others at once; and GrowJournal plans over it. Also
// PoolSpace::GiveMetaRun's refusals and TakeMetaRun over unaligned runs.
#include "handler/store/pool_journal_space.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/grain_space.h"
#include "handler/store/meta.h"
#include "handler/store/space_map.h"
#include "tests/store/format_v3_pool.h"
#include "tests/store/space_kinds.h"

namespace cowstore::store {
namespace {

constexpr uint64_t KiB = 1024;

using testing::kSpaceKinds;  // every space class (space_kinds.h)
using testing::SpaceKind;

// 20 AUs: `ckpt` the checkpoint (AU 0 unless said), one unit of AU 5
// mapped, so the whole free AUs are 1..4 and 6..19 less the checkpoint's.
void Make(PoolSpace* s, std::vector<uint64_t> ckpt = {0}) {
  const uint64_t g = s->units_per_au();
  MetaState st;
  st.au = static_cast<uint32_t>(64 * KiB / g);
  auto l = std::make_shared<LunState>();
  l->id = 1;
  l->name = "a";
  if (!l->map.Insert(0, 5 * g, 1).ok()) std::abort();
  l->size = st.au;
  st.AddLun(l);
  ASSERT_TRUE(s->Rebuild(20 * g, st, std::move(ckpt)).ok());
}

TEST(PoolJournalSpace, TakesTheLongestRunsAndInstallKeepsWhatTheJournalHolds) {
  for (const SpaceKind& kind : kSpaceKinds) {
    SCOPED_TRACE(kind.name);
    std::unique_ptr<PoolSpace> owned = kind.make();
    PoolSpace& s = *owned;
    Make(&s);
    if (::testing::Test::HasFatalFailure()) return;
    const uint64_t g = s.units_per_au(), free0 = s.free_units();
    PoolJournalSpace space(&s);
    JournalSpace& js = space;
    EXPECT_FALSE(js.Take(0).has_value());
    const auto a = js.Take(100);  // the longest run, whole
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, (JournalExtent{6, 14}));
    const auto b = js.Take(3);  // the longest left, cut to 3 from its start
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(*b, (JournalExtent{1, 3}));
    EXPECT_EQ(s.free_units(), free0 - 17 * g);
    EXPECT_EQ(s.meta_units(), 18 * g);  // the checkpoint and both runs, handed over
    EXPECT_EQ(s.free_whole_aus(100), 1u);
    // Given back: still handed over (nothing in the space changes), and
    // taken again first.
    js.Give(*b);
    EXPECT_EQ(s.free_units(), free0 - 17 * g);
    EXPECT_EQ(s.meta_units(), 18 * g);
    EXPECT_EQ(s.free_whole_aus(100), 1u);
    const auto c = js.Take(2);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(*c, (JournalExtent{1, 2}));
    EXPECT_EQ(s.free_units(), free0 - 17 * g);
    // The checkpoint keeps AU 0 and the journal's run 6..19: AUs 1 to 3,
    // handed over and unused, are free at once, and nothing is pending.
    std::vector<uint64_t> next = {0};
    for (uint64_t au = 6; au < 20; au++) next.push_back(au);
    ASSERT_TRUE(s.InstallMeta(next, /*tag=*/9).ok());
    EXPECT_EQ(s.meta_aus(), next);
    EXPECT_EQ(s.meta_units(), 15 * g);
    EXPECT_EQ(s.free_units(), free0 - 14 * g);
    EXPECT_EQ(s.pending_units(), 0u);
    EXPECT_EQ(s.free_whole_aus(100), 4u);
    EXPECT_FALSE(s.has_pending());
  }
}

// GrowJournal over the pool's space: the runs it keeps are the new list's
// (here all it took), and an install of the new list keeps them.
TEST(PoolJournalSpace, GrowJournalPlansOverThePoolAndGivesBackWhatItDoesNotKeep) {
  for (const SpaceKind& kind : kSpaceKinds) {
    SCOPED_TRACE(kind.name);
    std::unique_ptr<PoolSpace> owned = kind.make();
    PoolSpace& s = *owned;
    Make(&s, {0, 1, 2});  // the journal: AUs 1..2
    if (::testing::Test::HasFatalFailure()) return;
    const uint64_t g = s.units_per_au(), free0 = s.free_units();
    PoolJournalSpace space(&s);
    const JournalPlan plan = GrowJournal({JournalExtent{1, 2}}, 6, &space);
    uint64_t kept = 0;
    for (const JournalExtent& e : plan.allocated) kept += e.aus;
    ASSERT_GT(kept, 0u);
    EXPECT_EQ(s.free_units(), free0 - kept * g);
    EXPECT_EQ(s.meta_units(), (3 + kept) * g);
    std::vector<uint64_t> next = {0, 1, 2};
    for (const JournalExtent& e : plan.allocated)
      for (uint64_t au = e.first_au; au < e.first_au + e.aus; au++) next.push_back(au);
    ASSERT_TRUE(s.InstallMeta(next, /*tag=*/4).ok());
    EXPECT_EQ(s.free_units(), free0 - kept * g);
    EXPECT_EQ(s.pending_units(), 0u);
  }
}

// GiveMetaRun of a run not wholly handed over (a current checkpoint AU, a
// free AU, a mapped one, a run half handed over, an empty run) changes
// nothing: that check alone keeps a live checkpoint AU off the free list.
TEST(PoolJournalSpace, GiveMetaRunOfARunNotWhollyHandedOverChangesNothing) {
  for (const SpaceKind& kind : kSpaceKinds) {
    SCOPED_TRACE(kind.name);
    std::unique_ptr<PoolSpace> owned = kind.make();
    PoolSpace& s = *owned;
    Make(&s);
    if (::testing::Test::HasFatalFailure()) return;
    uint64_t first = 0;
    ASSERT_EQ(s.TakeMetaRun(3, &first), 3u);
    ASSERT_EQ(first, 6u);  // AUs 6..8 handed over
    const uint64_t free0 = s.free_units(), meta0 = s.meta_units(), whole0 = s.free_whole_aus(100);
    const struct {
      uint64_t first, aus;
    } runs[] = {{0, 1}, {1, 1}, {5, 1}, {5, 2}, {8, 2}, {0, 9}, {6, 0}};
    for (const auto& r : runs) {
      SCOPED_TRACE("run " + std::to_string(r.first) + "+" + std::to_string(r.aus));
      s.GiveMetaRun(r.first, r.aus);
      EXPECT_EQ(s.free_units(), free0);
      EXPECT_EQ(s.meta_units(), meta0);
      EXPECT_EQ(s.free_whole_aus(100), whole0);
      EXPECT_EQ(s.meta_aus(), (std::vector<uint64_t>{0}));
    }
    s.GiveMetaRun(6, 3);  // the run itself: free at once
    EXPECT_EQ(s.free_units(), free0 + 3 * s.units_per_au());
  }
}

// Grains smaller than the AU: a longer free run that starts mid-AU can hold
// fewer whole AUs than a shorter aligned one of the same size class, and
// TakeMetaRun takes the one with more whole AUs.
TEST(PoolJournalSpace, TakeMetaRunCountsWholeAusOfUnalignedRuns) {
  GrainSpace s(4 * KiB, 64 * KiB);  // 16 grains an AU
  const uint64_t g = s.units_per_au();
  ASSERT_EQ(g, 16u);
  // 10 AUs, AU 0 the checkpoint. Free: grains [17, 63) (46 grains, only
  // AU 2 whole) and [96, 128) (32 grains, AUs 6 and 7); the rest mapped.
  MetaState st;
  st.au = 4 * KiB;
  auto l = std::make_shared<LunState>();
  l->id = 1;
  l->name = "a";
  if (!l->map.Insert(0, 16, 1).ok() || !l->map.Insert(1, 63, 33).ok() || !l->map.Insert(34, 128, 32).ok())
    std::abort();
  l->size = 66 * st.au;
  st.AddLun(l);
  ASSERT_TRUE(s.Rebuild(10 * g, st, {0}).ok());
  ASSERT_EQ(s.free_units(), 46u + 32u);
  uint64_t first = 0;
  ASSERT_EQ(s.TakeMetaRun(10, &first), 2u);
  EXPECT_EQ(first, 6u);
  ASSERT_EQ(s.TakeMetaRun(10, &first), 1u);
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(s.TakeMetaRun(10, &first), 0u);
  EXPECT_EQ(s.free_units(), 46u - 16u);
}

// A growing format 3 checkpoint over the pool's space that fails at any
// call (each follows the plan: clearing the new runs, the pages, either
// superblock slot, a sync): its superblock may be on disk naming the runs
// it took, so they stay handed over, out of free space, until a reopen
// (format_v3.h); no data write can land in them meanwhile.
TEST(PoolJournalSpace, AFailedFormatV3CheckpointLeavesItsRunsOutOfFreeSpace) {
  namespace p = v3pool;
  using Op = FaultInjectionEnv::Op;
  std::vector<uint8_t> base;
  {
    FaultInjectionEnv env;
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), p::Id(9), p::kAu, p::kGrain, p::kSize, p::kJournal, 80).ok());
    f->reset();
    base = env.Snapshot("p");
  }
  MetaState st;
  st.au = p::kGrain;
  st.AddLun(p::Lun(1, "a", 300, 1));
  st.next_lun_id = 2;
  for (const SpaceKind& kind : kSpaceKinds) {
    SCOPED_TRACE(kind.name);
    // The pool opened, its space rebuilt over the format's AUs, and a
    // growing checkpoint as Core would run it, failing at (op, nth) unless
    // `fail` is false. Returns its status; *meta/*free the space's counts
    // after it, before any install.
    auto attempt = [&](bool fail, Op op, uint64_t nth, uint64_t* calls, uint64_t* meta, uint64_t* free,
                       uint64_t* meta0, uint64_t* free0) {
      FaultInjectionEnv env;
      env.Install("p", base.data(), base.size());
      p::Opened o;
      EXPECT_TRUE(p::Open(&env, &o).ok());
      std::unique_ptr<PoolSpace> owned = kind.make();
      PoolSpace& s = *owned;
      const uint64_t g = s.units_per_au();
      MetaState empty;
      empty.au = static_cast<uint32_t>(p::kAu / g);
      EXPECT_TRUE(s.Rebuild(o.v3->choice().sb.units * g, empty, o.v3->meta_units()).ok());
      *meta0 = s.meta_units();
      *free0 = s.free_units();
      FrozenCheckpoint f = o.v3->Freeze(st);
      std::vector<uint64_t> units;
      EXPECT_TRUE(s.TakeMeta(f.meta_units, &units));
      PoolJournalSpace js(&s);
      JournalGrowth growth;
      if (fail) env.FailAt(op, nth, Code::kIOError);
      const uint64_t at = env.calls(op);
      Status r = o.v3->WriteCheckpoint(o.file.get(), f, units, o.meta.end.next_lsn + kLsnGapAfterOpen, &js, &growth);
      *calls = env.calls(op) - at;
      *meta = s.meta_units();
      *free = s.free_units();
      if (r.ok()) {
        EXPECT_FALSE(growth.allocated.empty()) << "the journal grows";
        EXPECT_TRUE(s.InstallMeta(o.v3->meta_units(), 1).ok());
      }
      return r;
    };
    for (const Op op : {Op::kWrite, Op::kSync, Op::kPunch}) {
      uint64_t clean = 0, meta = 0, free = 0, meta0 = 0, free0 = 0;
      ASSERT_TRUE(attempt(false, op, 0, &clean, &meta, &free, &meta0, &free0).ok());
      ASSERT_GT(meta, meta0);
      const uint64_t taken = meta - meta0;  // pages and journal runs, handed over
      ASSERT_EQ(free, free0 - taken);
      ASSERT_GT(clean, 0u);
      for (uint64_t nth = 0; nth < clean; nth++) {
        SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " call " + std::to_string(nth));
        uint64_t calls = 0;
        ASSERT_EQ(attempt(true, op, nth, &calls, &meta, &free, &meta0, &free0).code(), Code::kIOError);
        EXPECT_EQ(meta, meta0 + taken) << "every run taken stays handed over";
        EXPECT_EQ(free, free0 - taken) << "no run taken is free again";
      }
    }
  }
}

}  // namespace
}  // namespace cowstore::store
