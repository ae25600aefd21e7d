// SPDX-License-Identifier: Apache-2.0
// PlanPool (tools/cowctl/restore_plan.h): what restore does with a saved
// pool, from the facts alone: no root, no device, no pool.
#include <gtest/gtest.h>

#include "tools/cowctl/restore_plan.h"

namespace cowstore::cowctl {
namespace {

const store::Uuid kSaved = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const store::Uuid kOther = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};

PoolProbe Pool(const store::Uuid& id) {
  PoolProbe p;
  p.kind = PoolProbe::kPool;
  p.uuid = id;
  return p;
}
PoolProbe Probe(PoolProbe::Kind kind, const std::string& detail) {
  PoolProbe p;
  p.kind = kind;
  p.detail = detail;
  return p;
}

PoolConfig FilePool() {
  PoolConfig p;
  p.name = "nas";
  p.uuid = UuidString(kSaved);
  p.file = "/mnt/disk/nas.pool";
  return p;
}
PoolConfig DevicePool() {
  PoolConfig p = FilePool();
  p.file.clear();
  p.device = "/dev/sdb";
  return p;
}
PoolFacts Entry(const PoolProbe& at_entry, const std::string& target = "/mnt/disk/nas.pool") {
  PoolFacts f;
  f.entry = "/var/lib/cowstore/pools/nas";
  f.entry_exists = true;
  f.at_entry = at_entry;
  f.link_target = target;
  return f;
}
PoolFacts NoEntry(const PoolProbe& at_saved) {
  PoolFacts f;
  f.entry = "/var/lib/cowstore/pools/nas";
  f.at_saved = at_saved;
  return f;
}

TEST(RestorePlan, ThePoolTheFileSavedIsUsed) {
  PoolConfig p = FilePool();
  EXPECT_EQ(PlanPool(p, Entry(Pool(kSaved)), false).action, PoolStep::kUse);
}

TEST(RestorePlan, AnotherPoolUnderTheSameNameIsLeftAlone) {
  PoolConfig p = FilePool();
  PoolStep s = PlanPool(p, Entry(Pool(kOther)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("another pool, left alone"), std::string::npos) << s.problem;
}

// The disk not mounted at boot: reported, nothing created, even though the
// link is there; with --create-missing neither (the link says where it was).
TEST(RestorePlan, AnUnmountedPoolIsNeverCreated) {
  PoolConfig p = FilePool();
  for (bool create : {false, true}) {
    PoolStep s = PlanPool(p, Entry(Probe(PoolProbe::kAbsent, "")), create);
    EXPECT_EQ(s.action, PoolStep::kSkip);
    EXPECT_NE(s.problem.find("which is missing"), std::string::npos) << s.problem;
  }
  PoolStep s = PlanPool(p, NoEntry(Probe(PoolProbe::kAbsent, "")), false);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("nothing created"), std::string::npos) << s.problem;
  EXPECT_EQ(PlanPool(p, NoEntry(Probe(PoolProbe::kAbsent, "")), true).action, PoolStep::kCreate);
}

TEST(RestorePlan, ADeviceIsRelinkedOnlyWhenItHoldsThisPool) {
  PoolConfig p = DevicePool();
  PoolStep s = PlanPool(p, NoEntry(Pool(kSaved)), false);
  EXPECT_EQ(s.action, PoolStep::kRelink);
  EXPECT_EQ(s.target, "/dev/sdb");
  EXPECT_EQ(PlanPool(p, NoEntry(Pool(kOther)), false).action, PoolStep::kSkip);
  // An older file (no UUID) cannot tell: device names change between boots.
  p.uuid.clear();
  s = PlanPool(p, NoEntry(Pool(kSaved)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("records no pool UUID"), std::string::npos) << s.problem;
}

TEST(RestorePlan, NoPoolIsEverCreatedOnADevice) {
  PoolConfig p = DevicePool();
  for (bool create : {false, true}) {
    PoolStep s = PlanPool(p, NoEntry(Probe(PoolProbe::kNotAPool, "/dev/sdb holds no cowstore pool")), create);
    EXPECT_EQ(s.action, PoolStep::kSkip);
    EXPECT_NE(s.problem.find("never creates a pool on a device"), std::string::npos) << s.problem;
    s = PlanPool(p, NoEntry(Probe(PoolProbe::kAbsent, "")), create);
    EXPECT_EQ(s.action, PoolStep::kSkip);
    EXPECT_NE(s.problem.find("device /dev/sdb is missing"), std::string::npos) << s.problem;
  }
}

TEST(RestorePlan, AFileThatIsNoPoolIsNeverOverwritten) {
  PoolConfig p = FilePool();
  PoolStep s = PlanPool(p, NoEntry(Probe(PoolProbe::kNotAPool, "/mnt/disk/nas.pool holds no cowstore pool")), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("never overwrites a file"), std::string::npos) << s.problem;
}

}  // namespace
}  // namespace cowstore::cowctl
