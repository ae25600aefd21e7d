// SPDX-License-Identifier: Apache-2.0
// PlanLio (tools/cowctl/restore_plan.h): what restore does in LIO, decided
// from fake facts alone: created, already as saved, or a conflict that
// stops the whole restore before anything changes.
#include <gtest/gtest.h>

#include <cctype>

#include "tools/cowctl/restore_plan.h"

namespace cowstore::cowctl {
namespace {

const std::string kWwn1 = "0ec52bfc-a7bb-48b7-94a4-24e650d2d1ef";
const std::string kWwn2 = "5b0f7c2e-27d4-4a8e-9f3c-0d6a1e2b4c5d";
const std::string kTarget = "iqn.2024-01.io.cowstore:nas.tank";
const std::string kEsx1 = "iqn.1998-01.com.vmware:esx1";

// A saved NAS: tank/vm1 and tank/vm2 with backstores, LUN 0 and 1 of one
// iSCSI target, both mapped into esx1's ACL.
class LioPlanTest : public ::testing::Test {
 protected:
  Config c;
  LioFacts f;
  std::vector<RestoreLun> luns;

  void SetUp() override {
    PoolConfig p;
    p.name = "tank";
    for (const auto& [name, wwn] : {std::pair{"vm1", kWwn1}, std::pair{"vm2", kWwn2}}) {
      LunConfig l;
      l.name = name;
      l.size = 8 << 20;
      l.backstore = std::string("tank-") + name;
      l.wwn = wwn;
      p.luns.push_back(l);
    }
    c.pools.push_back(p);
    IscsiConfig t;
    t.target = kTarget;
    t.portals = {"0.0.0.0:3260"};
    AclSpec a{kEsx1, "", ""};
    a.mapped_luns = std::vector<MappedLun>{{0, 0, false}, {1, 1, false}};
    t.acls.push_back(a);
    t.luns = {{0, "tank", "vm1"}, {1, "tank", "vm2"}};
    c.iscsi.push_back(t);
    Ready();
  }
  // Every LUN of the file restorable (ids: the LUN's current UUID).
  void Ready() {
    luns.clear();
    for (size_t j = 0; j < c.pools[0].luns.size(); ++j) {
      luns.push_back({"tank", &c.pools[0].luns[j], "pools[0].luns[" + std::to_string(j) + "]",
                      "11111111-2222-3333-4444-00000000000" + std::to_string(j)});
    }
  }
  // LIO as the file has it: what a restore leaves.
  void AsSaved() {
    AddBackstore("tank-vm1", "tank", "vm1", kWwn1);
    AddBackstore("tank-vm2", "tank", "vm2", kWwn2);
    f.iscsi_targets = {kTarget};
    IscsiTarget t;
    t.iqn = kTarget;
    t.portals = {"0.0.0.0:3260"};
    t.luns = {{0, "user_0/tank-vm1"}, {1, "user_0/tank-vm2"}};
    t.acls = c.iscsi[0].acls;
    f.owned_iscsi = {t};
    Link("iscsi", kTarget, 0, "user_0/tank-vm1");
    Link("iscsi", kTarget, 1, "user_0/tank-vm2");
  }
  void AddBackstore(const std::string& name, const std::string& pool, const std::string& lun, const std::string& wwn,
                    const std::string& hba = "user_0") {
    Backstore b;
    b.name = name;
    b.hba = hba;
    b.config.pool = pool;
    b.config.lun = lun;
    b.wwn = wwn;
    f.backstores.push_back(b);
    f.devices.push_back({b.key(), name, true, wwn});
  }
  void Link(const std::string& fabric, const std::string& target, uint32_t lun, const std::string& key) {
    f.fabric_luns.push_back({fabric, target, 1, lun, "", key});
  }
  LioPlan Plan() { return PlanLio(c, luns, f); }
  static std::vector<std::string> Wills(const LioPlan& p) {
    std::vector<std::string> out;
    for (const auto& s : p.steps) {
      for (const auto& ch : s.changes) out.push_back(ch.will);
    }
    return out;
  }
  // The plan's only conflict, which must start with `field`.
  static std::string OnlyConflict(const LioPlan& p, const std::string& field) {
    EXPECT_EQ(p.conflicts.size(), 1u) << ::testing::PrintToString(p.conflicts);
    if (p.conflicts.empty()) return "";
    EXPECT_EQ(p.conflicts[0].rfind(field + ": ", 0), 0u) << p.conflicts[0];
    return p.conflicts[0];
  }
};

TEST_F(LioPlanTest, AfterABootEverythingIsCreatedInOrder) {
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(Wills(p), (std::vector<std::string>{
                          "create backstore tank-vm1",
                          "create backstore tank-vm2",
                          "export tank/vm1 as LUN 0 of " + kTarget,
                          "map LUN 0 of " + kTarget + " into " + kEsx1 + " as LUN 0",
                          "export tank/vm2 as LUN 1 of " + kTarget,
                          "map LUN 1 of " + kTarget + " into " + kEsx1 + " as LUN 1",
                      }));
  ASSERT_EQ(p.steps.size(), 4u);
  EXPECT_EQ(p.steps[0].kind, LioStep::kBackstore);
  EXPECT_FALSE(p.steps[0].new_lun);
  EXPECT_EQ(p.steps[3].kind, LioStep::kIscsi);
  EXPECT_EQ(p.steps[3].tpg_lun, 1u);
  EXPECT_EQ(p.steps[3].changes[0].did, "exported tank/vm2 as LUN 1 of " + kTarget);
}

TEST_F(LioPlanTest, ARerunIsANoOp) {
  AsSaved();
  LioPlan p = Plan();
  EXPECT_TRUE(p.steps.empty()) << ::testing::PrintToString(Wills(p));
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  EXPECT_TRUE(p.warnings.empty()) << ::testing::PrintToString(p.warnings);
}

TEST_F(LioPlanTest, OnlyWhatIsMissingIsPlanned) {
  AsSaved();
  f.owned_iscsi[0].portals.clear();
  f.owned_iscsi[0].acls[0].mapped_luns->pop_back();  // esx1 lost LUN 1
  EXPECT_EQ(Wills(Plan()), (std::vector<std::string>{
                               "add portal 0.0.0.0:3260 to " + kTarget,
                               "map LUN 1 of " + kTarget + " into " + kEsx1 + " as LUN 1",
                           }));
}

TEST_F(LioPlanTest, ABackstoreNameAnotherLunHasIsAConflict) {
  AddBackstore("tank-vm1", "tank", "other", "");  // made by hand for another LUN
  std::string c0 = OnlyConflict(Plan(), "pools[0].luns[0].backstore");
  EXPECT_NE(c0.find("a user backstore named 'tank-vm1' (for tank/vm1) exists already as backstore user_0/tank-vm1 "
                    "(tank/other)"),
            std::string::npos)
      << c0;
  // Another handler's user backstore of that name too (rtslib keeps the names unique).
  f = {};
  f.devices.push_back({"user_3/tank-vm2", "tank-vm2", true, ""});
  c0 = OnlyConflict(Plan(), "pools[0].luns[1].backstore");
  EXPECT_NE(c0.find("exists already as LIO device user_3/tank-vm2"), std::string::npos) << c0;
}

TEST_F(LioPlanTest, AWwnAnotherLioDeviceHasIsAConflict) {
  // An iblock device (not cowstore's) with vm2's saved identity.
  f.devices.push_back({"iblock_0/disk", "disk", false, kWwn2});
  std::string c0 = OnlyConflict(Plan(), "pools[0].luns[1].wwn");
  EXPECT_NE(c0.find("LUN tank/vm2 would get the identifier " + NaaName(kWwn2) + ", which LIO device iblock_0/disk has"),
            std::string::npos)
      << c0;
}

TEST_F(LioPlanTest, AWwnAnotherCowstoreBackstoreHasIsAConflict) {
  AddBackstore("tank-copy", "tank", "copy", kWwn1);
  std::string c0 = OnlyConflict(Plan(), "pools[0].luns[0].wwn");
  EXPECT_NE(c0.find("which backstore user_0/tank-copy (tank/copy) has"), std::string::npos) << c0;
}

TEST_F(LioPlanTest, ALunCreatedByThisRestoreGetsANewIdentityAndNoConflict) {
  f.devices.push_back({"iblock_0/disk", "disk", false, kWwn1});
  luns[0].id.clear();  // tank/vm1 is created empty (--create-missing)
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  ASSERT_FALSE(p.steps.empty());
  EXPECT_TRUE(p.steps[0].new_lun);
}

TEST_F(LioPlanTest, ATpgWithAnotherLunAtTheSavedNumberIsAConflict) {
  AddBackstore("other", "tank", "other", "");
  f.iscsi_targets = {kTarget};
  IscsiTarget t;
  t.iqn = kTarget;
  f.owned_iscsi = {t};
  Link("iscsi", kTarget, 1, "user_0/other");
  std::string c0 = OnlyConflict(Plan(), "iscsi[0].luns[1].lun");
  EXPECT_NE(c0.find("LUN 1 of " + kTarget + " is taken by user_0/other, the file puts tank/vm2 there"),
            std::string::npos)
      << c0;
}

TEST_F(LioPlanTest, ALunExportedUnderAnotherNumberIsAConflict) {
  AsSaved();
  f.fabric_luns[0].lun = 7;
  std::string c0 = OnlyConflict(Plan(), "iscsi[0].luns[0].lun");
  EXPECT_NE(c0.find("tank/vm1 is LUN 7 of " + kTarget + ", the file says LUN 0"), std::string::npos) << c0;
}

TEST_F(LioPlanTest, ATargetCowctlDidNotMakeIsAConflictEvenEmpty) {
  f.iscsi_targets = {kTarget};  // made with targetcli, no LUN yet
  std::string c0 = OnlyConflict(Plan(), "iscsi[0].target");
  EXPECT_NE(c0.find("exists and was not made by cowctl"), std::string::npos) << c0;
}

TEST_F(LioPlanTest, AMappedLunNumberTakenByAnotherLunIsAConflict) {
  AsSaved();
  (*f.owned_iscsi[0].acls[0].mapped_luns)[1] = {0, 1, false};  // esx1 sees LUN 0 as its LUN 1 too
  std::string c0 = OnlyConflict(Plan(), "iscsi[0].acls[0].mapped_luns[1].mapped_lun");
  EXPECT_NE(c0.find(kEsx1 + " sees LUN 0 of " + kTarget + " as its LUN 1, where the file puts LUN 1"),
            std::string::npos)
      << c0;
}

TEST_F(LioPlanTest, WriteProtectionIsMadeAsSavedAndExtraMappingsAreLeftAndSaid) {
  AsSaved();
  (*c.iscsi[0].acls[0].mapped_luns)[0].write_protect = true;
  f.owned_iscsi[0].acls[0].mapped_luns->push_back({1, 5, false});
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  EXPECT_EQ(Wills(p), std::vector<std::string>{"write-protect LUN 0 of " + kEsx1 + " on " + kTarget});
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find(kEsx1 + " sees LUN 1 of " + kTarget + " as LUN 5, which the file does not map"),
            std::string::npos)
      << p.warnings[0];
}

TEST_F(LioPlanTest, AVersion1AclGetsEveryLunUnderAFreeNumber) {
  c.iscsi[0].acls[0].mapped_luns.reset();
  AsSaved();
  f.owned_iscsi[0].acls[0].mapped_luns = std::vector<MappedLun>{{0, 0, false}, {0, 1, false}};
  // LUN 1 is not mapped; number 1 is taken (by LUN 0): the lowest free one.
  EXPECT_EQ(Wills(Plan()), std::vector<std::string>{"map LUN 1 of " + kTarget + " into " + kEsx1 + " as LUN 2"});
}

TEST_F(LioPlanTest, AnExportWithoutBackstoreIsAConflict) {
  c.pools[0].luns[1].backstore.clear();
  std::string c0 = OnlyConflict(Plan(), "iscsi[0].luns[1]");
  EXPECT_NE(c0.find("exports tank/vm2, which has no backstore"), std::string::npos) << c0;
}

TEST_F(LioPlanTest, OnlyRestorableLunsArePlanned) {
  luns.pop_back();  // tank/vm2 not restored (its pool missing, say)
  f.devices.push_back({"iblock_0/disk", "disk", false, kWwn2});  // no conflict for what is not restored
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  for (const auto& w : Wills(p)) EXPECT_EQ(w.find("vm2"), std::string::npos) << w;
  EXPECT_TRUE(NeedsLio(c, luns));
  luns.clear();
  EXPECT_FALSE(NeedsLio(c, luns));
}

TEST_F(LioPlanTest, EveryConflictIsListed) {
  f.devices.push_back({"iblock_0/disk", "disk", false, kWwn1});
  f.iscsi_targets = {kTarget};
  EXPECT_EQ(Plan().conflicts.size(), 2u);
}

TEST_F(LioPlanTest, Loopback) {
  c.iscsi.clear();
  LoopbackConfig l;
  l.wwn = "naa.5001405aabbccdd0";
  l.luns = {{0, "tank", "vm1"}};
  c.loopback.push_back(l);
  EXPECT_EQ(Wills(Plan()), (std::vector<std::string>{"create backstore tank-vm1", "create backstore tank-vm2",
                                                     "export tank/vm1 as LUN 0 of loopback naa.5001405aabbccdd0"}));
  f.loopback_targets = {l.wwn};  // someone else's
  OnlyConflict(Plan(), "loopback[0].wwn");
  AddBackstore("tank-vm1", "tank", "vm1", kWwn1);
  AddBackstore("tank-vm2", "tank", "vm2", kWwn2);
  f.owned_loopback.push_back({l.wwn, "", {{0, "user_0/tank-vm1"}}});
  Link("loopback", l.wwn, 0, "user_0/tank-vm1");
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty() && p.steps.empty()) << ::testing::PrintToString(Wills(p));
}

// A loopback export comes back at its saved LUN number, as an iSCSI one.
TEST_F(LioPlanTest, ALoopbackExportKeepsItsSavedNumber) {
  const std::string wwn = "naa.5001405aabbccdd0";
  c.iscsi.clear();
  c.loopback.push_back({wwn, {{3, "tank", "vm1"}}});
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.steps[2].kind, LioStep::kLoopback);
  EXPECT_EQ(p.steps[2].tpg_lun, 3u);
  EXPECT_EQ(p.steps[2].changes[0].will, "export tank/vm1 as LUN 3 of loopback " + wwn);
  EXPECT_EQ(p.steps[2].changes[0].did, "exported tank/vm1 as LUN 3 of loopback " + wwn);
}

TEST_F(LioPlanTest, ALoopbackLunNumberTakenByAnotherBackstoreIsAConflict) {
  const std::string wwn = "naa.5001405aabbccdd0";
  c.iscsi.clear();
  c.loopback.push_back({wwn, {{3, "tank", "vm1"}}});
  AddBackstore("other", "tank", "other", "");
  f.loopback_targets = {wwn};
  f.owned_loopback.push_back({wwn, "", {{3, "user_0/other"}}});
  Link("loopback", wwn, 3, "user_0/other");
  std::string c0 = OnlyConflict(Plan(), "loopback[0].luns[0].lun");
  EXPECT_NE(c0.find("LUN 3 of loopback " + wwn + " is taken by user_0/other, the file puts tank/vm1 there"),
            std::string::npos)
      << c0;
}

TEST_F(LioPlanTest, ALunOfTheLoopbackTargetUnderAnotherNumberIsAConflict) {
  const std::string wwn = "naa.5001405aabbccdd0";
  c.iscsi.clear();
  c.loopback.push_back({wwn, {{3, "tank", "vm1"}}});
  AddBackstore("tank-vm1", "tank", "vm1", kWwn1);
  AddBackstore("tank-vm2", "tank", "vm2", kWwn2);
  f.loopback_targets = {wwn};
  f.owned_loopback.push_back({wwn, "", {{0, "user_0/tank-vm1"}}});
  Link("loopback", wwn, 0, "user_0/tank-vm1");
  std::string c0 = OnlyConflict(Plan(), "loopback[0].luns[0].lun");
  EXPECT_NE(c0.find("tank/vm1 is LUN 0 of loopback " + wwn + ", the file says LUN 3: unexport it first"),
            std::string::npos)
      << c0;
  // At the saved number: nothing to do.
  f.fabric_luns.back().lun = 3;
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty() && p.steps.empty()) << ::testing::PrintToString(p.conflicts) << ::testing::PrintToString(Wills(p));
}

// The unit serial is the LUN's identity to ESXi: a backstore serving the LUN
// under another one is not kept silently.
TEST_F(LioPlanTest, ABackstoreWithAnotherSerialIsAConflict) {
  AsSaved();
  const std::string other = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
  f.backstores[1].wwn = other;
  f.devices[1].serial = other;
  std::string c0 = OnlyConflict(Plan(), "pools[0].luns[1].wwn");
  EXPECT_NE(c0.find("LUN tank/vm2 has the backstore user_0/tank-vm2 with the unit serial " + other + " (" +
                    NaaName(other) + "), the file saved " + kWwn2 + " (" + NaaName(kWwn2) + ")"),
            std::string::npos)
      << c0;
  EXPECT_NE(c0.find("run 'cowctl save'"), std::string::npos) << c0;
  EXPECT_NE(c0.find("'cowctl backstore delete tank/vm2 --force' and restore again"), std::string::npos) << c0;
  // None at all: the same.
  f.backstores[1].wwn.clear();
  OnlyConflict(Plan(), "pools[0].luns[1].wwn");
  // The same serial in capitals is the same identity.
  f.backstores[1].wwn = kWwn2;
  for (auto& ch : f.backstores[1].wwn) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  LioPlan p = Plan();
  EXPECT_TRUE(p.conflicts.empty()) << ::testing::PrintToString(p.conflicts);
}

// A LUN this restore creates empty (--create-missing) is not served by a
// backstore LIO still has for it, which may carry the lost disk's identity.
TEST_F(LioPlanTest, ABackstoreLeftForALunCreatedEmptyIsAConflict) {
  AsSaved();
  luns[0].id.clear();
  std::string c0 = OnlyConflict(Plan(), "pools[0].luns[0].backstore");
  EXPECT_NE(c0.find("LUN tank/vm1 is created empty by this restore, but LIO still has its backstore user_0/tank-vm1"),
            std::string::npos)
      << c0;
}

}  // namespace
}  // namespace cowstore::cowctl
