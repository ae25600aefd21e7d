// SPDX-License-Identifier: Apache-2.0
// PoolJournalSpace (pool_journal_space.h) over every space class: the runs
// it takes are the longest whole free AUs, handed over like TakeMeta's; a
// run given back is free at once; the next InstallMeta keeps the runs the
// journal holds and frees the others at once; and GrowJournal plans over it.
#include "handler/store/pool_journal_space.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/grain_space.h"
#include "handler/store/meta.h"
#include "handler/store/space_map.h"

namespace cowstore::store {
namespace {

constexpr uint64_t KiB = 1024;

struct SpaceKind {
  const char* name;
  std::unique_ptr<PoolSpace> (*make)();
};
const SpaceKind kSpaceKinds[] = {
    {"SpaceMap", [] { return std::unique_ptr<PoolSpace>(new SpaceMap); }},
    {"GrainSpace, grain == AU", [] { return std::unique_ptr<PoolSpace>(new GrainSpace(64 * KiB, 64 * KiB)); }},
    {"GrainSpace, 16 grains an AU", [] { return std::unique_ptr<PoolSpace>(new GrainSpace(4 * KiB, 64 * KiB)); }},
};

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
    // Given back: free again at once, and taken again.
    js.Give(*b);
    EXPECT_EQ(s.free_units(), free0 - 14 * g);
    EXPECT_EQ(s.meta_units(), 15 * g);
    EXPECT_EQ(s.free_whole_aus(100), 4u);
    const auto c = js.Take(2);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(*c, (JournalExtent{1, 2}));
    // The checkpoint keeps AU 0 and the journal's run 6..19: AUs 1 and 2,
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

// GrowJournal over the pool's space: the runs it keeps are the new list's,
// every other run it took is back in free space, and an install of the
// new list keeps them.
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

}  // namespace
}  // namespace cowstore::store
