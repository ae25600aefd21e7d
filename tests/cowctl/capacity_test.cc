// SPDX-License-Identifier: Apache-2.0
// Thin on thin (tools/cowctl/capacity.h): the one overcommit rule and what
// pool show/list say about the backing store.
#include "tools/cowctl/capacity.h"

#include <gtest/gtest.h>

#include "handler/store/soft_threshold.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30, TiB = 1ull << 40;

// A 1 GiB pool of 1 MiB units, `used` MiB allocated, LUNs of `provisioned`
// bytes, on a filesystem with `backing_free` bytes free.
store::SpaceInfo Space(uint64_t used, uint64_t provisioned, uint64_t backing_free) {
  store::SpaceInfo s;
  s.pool_size_bytes = GiB;
  s.allocation_unit = MiB;
  s.total_units = 1024;
  s.allocated_units = used;
  s.free_units = 1024 - used;
  s.provisioned_bytes = provisioned;
  s.backing_known = true;
  s.backing_grows = true;
  s.backing_size_bytes = TiB;
  s.backing_free_bytes = backing_free;
  s.backing_short = store::OutgrowsBacking(true, backing_free, s.free_units * MiB);
  return s;
}

std::string Refusal(const Promise& p) {
  try {
    ApplyOvercommitRule(p, false);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Overcommit, TheLunsOfAPoolMayPromiseItsSizeAndMoreOnlyWhenAsked) {
  store::SpaceInfo s = Space(0, 512 * MiB, TiB);
  EXPECT_EQ(HoldableBytes(s), GiB);
  EXPECT_EQ(Refusal(LunPromise("tank", s, 512 * MiB)), "");  // exactly full
  std::string r = Refusal(LunPromise("tank", s, 512 * MiB + 512));
  EXPECT_EQ(r, "the LUNs of pool 'tank' would promise 1.00 GiB, more than the pool (1.00 GiB): grow the pool or "
               "pass --overcommit") << r;
  EXPECT_NO_THROW(ApplyOvercommitRule(LunPromise("tank", s, 10 * GiB), true));
  // A growth that would wrap around is refused, not wrapped.
  EXPECT_NE(Refusal(LunPromise("tank", s, UINT64_MAX)), "");
}

TEST(Overcommit, AFilesystemShortOfThePoolsGrowthLowersWhatThePoolCanHold) {
  // 100 MiB used; the pool could grow by 924 MiB, its filesystem has 300 MiB.
  store::SpaceInfo s = Space(100, 200 * MiB, 300 * MiB);
  EXPECT_EQ(HoldableBytes(s), 400 * MiB);
  // The LUNs' rule is the pool's size: the filesystem's shortfall was warned
  // about when the pool was made, and pool show/list keep warning.
  EXPECT_EQ(Refusal(LunPromise("tank", s, 824 * MiB)), "");
  EXPECT_NE(Refusal(LunPromise("tank", s, 824 * MiB + 512)).find("more than the pool (1.00 GiB)"), std::string::npos);
  // A device holds the whole pool.
  s.backing_grows = false;
  s.backing_free_bytes = s.backing_size_bytes = GiB;
  s.backing_short = false;
  EXPECT_EQ(HoldableBytes(s), GiB);
}

TEST(Overcommit, ANewPoolFileMayOutgrowItsFilesystemOnlyWhenAsked) {
  store::BackingSpace fs{true, 100 * GiB, 79 * GiB};
  std::string r = Refusal(PoolPromise("tank", 2 * TiB, fs));
  EXPECT_EQ(r, "pool 'tank' would promise 2.00 TiB, more than its filesystem (79.0 GiB free): give a smaller --size "
               "or pass --overcommit") << r;
  EXPECT_EQ(Refusal(PoolPromise("tank", 79 * GiB, fs)), "");
  EXPECT_NO_THROW(ApplyOvercommitRule(PoolPromise("tank", 2 * TiB, fs), true));
  store::BackingSpace dev{false, 10 * GiB, 10 * GiB};
  EXPECT_EQ(Refusal(PoolPromise("tank", 10 * GiB, dev)), "");
}

TEST(Overcommit, PoolShowSaysProvisionedRatioBackingAndWarns) {
  store::SpaceInfo s = Space(100, 3 * GiB / 2, 300 * MiB);
  EXPECT_DOUBLE_EQ(OvercommitRatio(s), 1.5);
  auto kv = CapacityKeyValues(s);
  ASSERT_EQ(kv.size(), 3u);
  EXPECT_EQ(kv[0].second, "1.50 GiB (1.50x of the pool: overcommitted)");
  EXPECT_EQ(kv[1].first, "backing free");
  EXPECT_EQ(kv[1].second, "300 MiB of 1.00 TiB (filesystem)");
  EXPECT_EQ(kv[2].first, "WARNING");
  EXPECT_EQ(kv[2].second, "the pool can still grow by 924 MiB but its filesystem has 300 MiB free: writes will fail "
                          "before the pool is full");
  Json j = Json::object();
  AddCapacityJson(s, j);
  std::string d = j.Dump(0);
  EXPECT_NE(d.find("\"provisioned\":1610612736"), std::string::npos) << d;
  EXPECT_NE(d.find("\"overcommit_ratio\":1.500"), std::string::npos) << d;
  EXPECT_NE(d.find("\"backing\":{\"kind\":\"filesystem\",\"size\":1099511627776,\"free\":314572800}"),
            std::string::npos) << d;
  EXPECT_NE(d.find("\"outgrows_backing\":true"), std::string::npos) << d;
  // Room enough: no warning.
  s = Space(100, 0, TiB);
  EXPECT_FALSE(OutgrowWarning(s));
  EXPECT_EQ(CapacityKeyValues(s).size(), 2u);
  // A handler that cannot tell: unknown, never a made-up figure.
  s.backing_known = false;
  Json u = Json::object();
  AddCapacityJson(s, u);
  EXPECT_NE(u.Dump(0).find("\"backing\":null"), std::string::npos);
  EXPECT_EQ(CapacityKeyValues(s)[1].second, "unknown");
}

// What pool show and save say is the store's rule run backwards: checked
// against store::SoftThresholdUnits itself, for every percentage.
uint32_t ShownPercent(uint64_t total, uint32_t percent) {
  store::SpaceInfo s;
  s.total_units = total;
  s.soft_threshold_units = store::SoftThresholdUnits(total, percent);
  return SoftThresholdPercent(s);
}

TEST(SoftThreshold, APoolOfAHundredUnitsOrMoreShowsThePercentageItWasMadeWith) {
  for (uint64_t total : {uint64_t{100}, uint64_t{101}, uint64_t{199}, uint64_t{1023}, uint64_t{1} << 48}) {
    for (uint32_t percent = 0; percent <= 100; ++percent) EXPECT_EQ(ShownPercent(total, percent), percent) << total;
  }
  for (uint64_t total = 100; total < 3000; ++total) {  // every remainder of total * percent / 100
    for (uint32_t percent : {1u, 33u, 79u, 80u, 99u}) ASSERT_EQ(ShownPercent(total, percent), percent) << total;
  }
  // 80 % of 101 units is 80 of them, 79.2 % by division: neither rounding
  // down nor to nearest gives 80 back.
  EXPECT_EQ(ShownPercent(101, 80), 80u);
}

// Fewer units cannot tell every percentage apart (8 units: 80 % and 75 %
// are both 6): what is shown makes the same threshold again.
TEST(SoftThreshold, AnySmallerPoolShowsAPercentageThatMakesTheSameThreshold) {
  for (uint64_t total = 8; total < 100; ++total) {
    for (uint32_t percent = 0; percent <= 100; ++percent) {
      const uint32_t shown = ShownPercent(total, percent);
      ASSERT_LE(shown, 100u);
      ASSERT_EQ(store::SoftThresholdUnits(total, shown), store::SoftThresholdUnits(total, percent))
          << total << " units at " << percent << " %: shown " << shown << " %";
    }
  }
  EXPECT_EQ(ShownPercent(8, 80), 75u);
  store::SpaceInfo none;  // a handler that reports no units: no percentage to make up
  EXPECT_EQ(SoftThresholdPercent(none), 0u);
}

}  // namespace
}  // namespace cowstore::cowctl
