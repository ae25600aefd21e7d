// SPDX-License-Identifier: Apache-2.0
// ExtentMap's physical bound as a parameter of the map (extent_map.h): the
// default is v1/v2's 2^32 AUs; a larger bound (v3's grains) accepts runs past
// 2^32 and still refuses, changing nothing, what breaks its own bound.
#include "handler/store/extent_map.h"

#include <gtest/gtest.h>

#include <vector>

namespace cowstore::store {
namespace {

using MapRun = ::cowstore::store::Run;

std::vector<MapRun> All(const ExtentMap& m) {
  std::vector<MapRun> out;
  for (const auto& [lba, e] : m.runs()) out.push_back({lba, e.phys, e.len});
  return out;
}

TEST(ExtentMapBound, DefaultIsV1V2PoolUnits) {
  ExtentMap m;
  EXPECT_EQ(m.max_phys(), ExtentMap::kMaxPhys);
  EXPECT_EQ(ExtentMap::kMaxPhys, uint64_t{1} << 32);
  Status s = m.Insert(0, ExtentMap::kMaxPhys - 1, 2);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("physical end beyond 2^32 units"), std::string::npos) << s.message();
  EXPECT_TRUE(m.Insert(0, ExtentMap::kMaxPhys - 1, 1).ok());
}

TEST(ExtentMapBound, ALargerBoundAcceptsRunsPast2To32AndRefusesPastItsOwn) {
  const uint64_t kBound = uint64_t{1} << 40;
  ExtentMap m(kBound);
  EXPECT_EQ(m.max_phys(), kBound);
  // Past v1/v2's bound: refused by the default rule, held by this map.
  const uint64_t p = (uint64_t{1} << 33) + 7;
  EXPECT_FALSE(ExtentMap::Valid(0, p, 16));
  EXPECT_TRUE(ExtentMap::Valid(0, p, 16, kBound));
  EXPECT_TRUE(m.Holds(0, p, 16));
  ASSERT_TRUE(m.Insert(0, p, 16).ok());
  EXPECT_EQ(m.Find(3), p + 3);
  // Up to the bound exactly, and merged with a neighbour.
  ASSERT_TRUE(m.Insert(100, kBound - 8, 4).ok());
  ASSERT_TRUE(m.Insert(104, kBound - 4, 4).ok());
  EXPECT_EQ(All(m), (std::vector<MapRun>{{0, p, 16}, {100, kBound - 8, 8}}));
  EXPECT_EQ(m.mapped_units(), 24u);

  struct Bad {
    uint64_t lba, phys, len;
    const char* why;
  };
  for (const Bad& b : {Bad{200, kBound, 1, "physical end beyond 2^40 units"},
                       Bad{200, kBound - 1, 2, "physical end beyond 2^40 units"},
                       Bad{200, ~uint64_t{0} - 3, 2, "physical end beyond 2^40 units"},
                       Bad{200, 0, (uint64_t{1} << 32) + 1, "longer than 2^32 units"},
                       Bad{ExtentMap::kMaxLba - 1, 5, 2, "logical end beyond 2^48"}}) {
    EXPECT_FALSE(m.Holds(b.lba, b.phys, b.len));
    EXPECT_NE(m.Refusal(b.lba, b.phys, b.len).find(b.why), std::string::npos)
        << m.Refusal(b.lba, b.phys, b.len);
    Status s = m.Insert(b.lba, b.phys, b.len);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find(b.why), std::string::npos) << s.message();
    EXPECT_EQ(All(m), (std::vector<MapRun>{{0, p, 16}, {100, kBound - 8, 8}}));
    EXPECT_EQ(m.mapped_units(), 24u);
  }
  // A copy keeps the bound; Clear does too.
  ExtentMap c = m;
  EXPECT_EQ(c.max_phys(), kBound);
  c.Clear();
  EXPECT_EQ(c.max_phys(), kBound);
  EXPECT_TRUE(c.Insert(0, kBound - 1, 1).ok());
}

// Above a 2^32 bound two valid runs can continue each other past RunTree's
// longest run (kMaxLen = 2^32): the map keeps them apart, and the run
// inserts (a valid run always does).
TEST(ExtentMapBound, NeighboursPastTheLongestRunStayApart) {
  const uint64_t kMax = RunTree::kMaxLen;
  ExtentMap m(uint64_t{1} << 40);
  ASSERT_TRUE(m.Insert(0, 0, kMax).ok());
  ASSERT_TRUE(m.Insert(kMax, kMax, 1).ok());
  EXPECT_EQ(All(m), (std::vector<MapRun>{{0, 0, kMax}, {kMax, kMax, 1}}));
  EXPECT_EQ(m.mapped_units(), kMax + 1);
  // Filling a hole between two long runs: joins the one it fits with.
  ASSERT_TRUE(m.Insert(2 * kMax + 10, 2 * kMax + 10, kMax - 20).ok());
  ASSERT_TRUE(m.Insert(3 * kMax - 5, 3 * kMax - 5, kMax - 1).ok());
  ASSERT_TRUE(m.Insert(3 * kMax - 10, 3 * kMax - 10, 5).ok());  // continues both
  EXPECT_EQ(All(m), (std::vector<MapRun>{{0, 0, kMax},
                                         {kMax, kMax, 1},
                                         {2 * kMax + 10, 2 * kMax + 10, kMax - 15},
                                         {3 * kMax - 5, 3 * kMax - 5, kMax - 1}}));
  EXPECT_EQ(m.mapped_units(), kMax + 1 + (kMax - 15) + (kMax - 1));
}

TEST(ExtentMapBound, BoundIsClampedToRunTreesLimit) {
  EXPECT_EQ(ExtentMap(~uint64_t{0}).max_phys(), ExtentMap::kMaxPhysLimit);
  EXPECT_EQ(ExtentMap(0).max_phys(), 1u);
  ExtentMap m(~uint64_t{0});
  EXPECT_TRUE(m.Insert(0, ExtentMap::kMaxPhysLimit - 1, 1).ok());
  EXPECT_EQ(m.Insert(1, ExtentMap::kMaxPhysLimit, 1).code(), Code::kInvalidArgument);
}

// AnyMapped answers Lookup's emptiness without the copy: every window over a
// map with holes, edges included, against Lookup.
TEST(ExtentMapAnyMapped, EqualsLookupNotEmptyForEveryWindow) {
  ExtentMap m;
  ASSERT_TRUE(m.Insert(3, 100, 2).ok());   // [3, 5)
  ASSERT_TRUE(m.Insert(9, 200, 1).ok());   // [9, 10)
  ASSERT_TRUE(m.Insert(10, 500, 4).ok());  // [10, 14), not contiguous in phys
  int mapped = 0;
  for (uint64_t a = 0; a < 16; a++)
    for (uint64_t n = 0; a + n <= 16; n++) {
      std::vector<MapRun> looked;
      m.Lookup(a, n, &looked);
      EXPECT_EQ(m.AnyMapped(a, n), !looked.empty()) << a << "+" << n;
      mapped += !looked.empty();
    }
  EXPECT_GT(mapped, 0);
  EXPECT_FALSE(m.AnyMapped(5, 4));  // the hole between
  EXPECT_TRUE(m.AnyMapped(4, 1));
  EXPECT_FALSE(m.AnyMapped(14, ExtentMap::kMaxLba - 14));
}

}  // namespace
}  // namespace cowstore::store
