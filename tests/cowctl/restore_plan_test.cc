// SPDX-License-Identifier: Apache-2.0
// PlanPool (tools/cowctl/restore_plan.h): what restore does with a saved
// pool, from the facts alone: no root, no device, no pool.
#include <gtest/gtest.h>

#include "tools/cowctl/restore_plan.h"

namespace cowstore::cowctl {
namespace {

const store::Uuid kSaved = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
const store::Uuid kOther = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};

// A pool as the file's entries (FilePool, DevicePool) describe it: format
// 2, allocation unit 1 MiB (the file's default), shared at its AU; or made
// with another AU and grain.
PoolProbe Pool(const store::Uuid& id, uint32_t au = 1u << 20, uint32_t grain = 1u << 20) {
  PoolProbe p;
  p.kind = PoolProbe::kPool;
  p.uuid = id;
  p.format = grain < au ? 3 : 2;
  p.au = au;
  p.grain = grain;
  p.origin_format = p.format;  // made so, not upgraded
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

// The file's pool (same UUID) made otherwise than the file says: the file
// was edited, or was saved from another pool's superblock. Refused, naming
// the field, the pool's value and the file's, whether restore would use the
// pool or relink it; restore never reformats.
TEST(RestorePlan, ThisPoolWithAnotherAllocationUnitOrGrainIsLeftAlone) {
  const std::string refusal = " (restore never reformats a pool; if the pool is right, run 'cowctl save' to record it)";
  PoolConfig p = FilePool();
  PoolStep s = PlanPool(p, Entry(Pool(kSaved, 64u << 10, 64u << 10)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_EQ(s.problem, "pool nas: /var/lib/cowstore/pools/nas holds this pool (UUID " + p.uuid +
                           ") with allocation_unit 65536 (64.0 KiB), the file saved allocation_unit 1048576 "
                           "(1.00 MiB): not restored, left as it is" + refusal);
  s = PlanPool(p, NoEntry(Pool(kSaved, 64u << 10, 64u << 10)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_EQ(s.problem, "pool nas: /mnt/disk/nas.pool holds this pool (UUID " + p.uuid +
                           ") with allocation_unit 65536 (64.0 KiB), the file saved allocation_unit 1048576 "
                           "(1.00 MiB): not restored, left as it is" + refusal);
  // A file without grain means format 2: a format 3 pool is not that.
  s = PlanPool(p, Entry(Pool(kSaved, 1u << 20, 4096)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("holds this pool (UUID " + p.uuid + ") with grain 4096 (4.00 KiB, format 3), the file "
                           "saved grain 1048576 (1.00 MiB, format 2): not restored"),
            std::string::npos)
      << s.problem;
  p.grain = 4096;
  s = PlanPool(p, NoEntry(Pool(kSaved)), true);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("with grain 1048576 (1.00 MiB, format 2), the file saved grain 4096 (4.00 KiB, format 3)"),
            std::string::npos)
      << s.problem;
  p.grain = 8192;
  EXPECT_NE(PlanPool(p, Entry(Pool(kSaved, 1u << 20, 4096)), true)
                .problem.find("with grain 4096 (4.00 KiB, format 3), the file saved grain 8192 (8.00 KiB, format 3)"),
            std::string::npos);
  // As saved: used, or relinked.
  p.grain = 4096;
  EXPECT_EQ(PlanPool(p, Entry(Pool(kSaved, 1u << 20, 4096)), true).action, PoolStep::kUse);
  EXPECT_EQ(PlanPool(p, NoEntry(Pool(kSaved, 1u << 20, 4096)), true).action, PoolStep::kRelink);
  p.grain = 1u << 20;  // the AU spelled out: format 2, as no grain says
  EXPECT_EQ(PlanPool(p, Entry(Pool(kSaved)), true).action, PoolStep::kUse);
  // Another pool's UUID is said as such, whatever its geometry.
  EXPECT_NE(PlanPool(p, Entry(Pool(kOther, 64u << 10, 4096)), true).problem.find("another pool, left alone"),
            std::string::npos);
  // An older file (no UUID) keeps its rule: the pool under the name is used.
  p.uuid.clear();
  EXPECT_EQ(PlanPool(p, Entry(Pool(kSaved, 64u << 10, 64u << 10)), true).action, PoolStep::kUse);
}

// A pool `cowctl pool upgrade` converted since the file was saved (format
// 2 then): its superblock says it was made at format 1 or 2, with the
// file's UUID and allocation unit. The same pool: used, or relinked, as it
// is now, and said. One made at format 3, or whose allocation unit or
// grain the file does not give as its old ones, is still left alone.
TEST(RestorePlan, APoolUpgradedSinceTheFileWasSavedIsUsedAndSaidSo) {
  PoolConfig p = FilePool();  // format 2 at 1 MiB
  PoolProbe up = Pool(kSaved, 1u << 20, 4096);
  up.origin_format = 2;
  PoolStep s = PlanPool(p, Entry(up), false);
  EXPECT_EQ(s.action, PoolStep::kUse) << s.problem;
  EXPECT_EQ(s.note, "pool nas was upgraded from format 2 to format 3 (grain 4.00 KiB) since the file was saved: "
                    "restored as it is now (run 'cowctl save' to record it)");
  s = PlanPool(p, NoEntry(up), false);
  EXPECT_EQ(s.action, PoolStep::kRelink) << s.problem;
  EXPECT_NE(s.note.find("upgraded from format 2"), std::string::npos);
  up.origin_format = 1;
  EXPECT_NE(PlanPool(p, Entry(up), false).note.find("upgraded from format 1 to format 3"), std::string::npos);
  // As saved: nothing to say.
  EXPECT_EQ(PlanPool(p, Entry(Pool(kSaved)), false).note, "");
  // Made at format 3: not the pool the file describes.
  up.origin_format = 3;
  s = PlanPool(p, Entry(up), false);
  EXPECT_EQ(s.action, PoolStep::kSkip);
  EXPECT_NE(s.problem.find("with grain 4096 (4.00 KiB, format 3), the file saved grain 1048576"), std::string::npos)
      << s.problem;
  // Upgraded, but from another allocation unit than the file's.
  up.origin_format = 2;
  up.au = 64u << 10;
  EXPECT_EQ(PlanPool(p, Entry(up), false).action, PoolStep::kSkip);
  // The file saved format 3 (another grain): not the format it was upgraded from.
  up.au = 1u << 20;
  p.grain = 8192;
  EXPECT_EQ(PlanPool(p, Entry(up), false).action, PoolStep::kSkip);
  // Another pool's UUID: another pool.
  p.grain = 0;
  up.uuid = kOther;
  EXPECT_NE(PlanPool(p, Entry(up), false).problem.find("another pool, left alone"), std::string::npos);
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

// A LUN missing from a pool that is there (deleted since the save) is not
// created unless asked, and then empty with a new WWN; one that differs from
// the file keeps the pool's size, with a warning.
TEST(RestorePlan, MissingLunsAreCreatedOnlyWhenAsked) {
  PoolConfig p = FilePool();
  p.luns.push_back({});
  p.luns.back().name = "esxds";
  p.luns.back().size = 1 << 30;
  p.luns.back().block_size = 512;
  p.luns.push_back(p.luns.back());
  p.luns.back().name = "gone";
  PoolStep s;
  s.cfg = &p;
  s.action = PoolStep::kUse;
  s.luns.push_back({});
  s.luns.back().name = "esxds";
  s.luns.back().size_bytes = 2u << 30;
  s.luns.back().block_size = 512;

  LunPlan plan;
  PlanLuns(s, false, &plan);
  EXPECT_EQ(plan.ready, std::set<std::string>{"nas/esxds"});
  EXPECT_TRUE(plan.created.empty());
  ASSERT_EQ(plan.problems.size(), 1u);
  EXPECT_NE(plan.problems[0].find("LUN nas/gone: missing from pool nas"), std::string::npos) << plan.problems[0];
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("keeping the pool's"), std::string::npos) << plan.warnings[0];

  LunPlan asked;
  PlanLuns(s, true, &asked);
  EXPECT_EQ(asked.ready, (std::set<std::string>{"nas/esxds", "nas/gone"}));
  EXPECT_EQ(asked.created, std::set<std::string>{"nas/gone"});
  EXPECT_TRUE(asked.problems.empty());
}

}  // namespace
}  // namespace cowstore::cowctl
