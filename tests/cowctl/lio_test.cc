// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/lio.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "tests/cowctl/fake_tree.h"

namespace cowstore::cowctl {
namespace {

using testing::Exists;
using testing::FakeHost;
using testing::ReadText;
using testing::WriteText;

BackstoreSpec Spec(const std::string& pool, const std::string& lun, uint32_t bs = 512) {
  BackstoreSpec s;
  s.name = pool + "-" + lun;
  s.config = {pool, lun, {}};
  s.size = 1ull << 30;
  s.block_size = bs;
  s.wwn = "00112233-4455-6677-8899-aabbccddeeff";
  return s;
}

class LioTest : public ::testing::Test {
 protected:
  FakeHost host;
  Lio lio{LioOptions{host.configfs, host.proc, nullptr}};
};

TEST_F(LioTest, CreatesAUserBackstoreTheWayRtslibDoes) {
  auto spec = Spec("tank", "vm1");
  spec.config.options["copy_group"] = "esx";
  Backstore b = lio.CreateBackstore(spec);
  EXPECT_EQ(b.hba, "user_0");
  EXPECT_EQ(b.name, "tank-vm1");
  std::string p = host.T("core/user_0/tank-vm1");
  EXPECT_EQ(ReadText(p + "/control"),
            "dev_config=cowstore/tank/vm1;copy_group=esx\ndev_size=1073741824\nhw_block_size=512\n"
            "hw_max_sectors=32768\n");
  EXPECT_EQ(ReadText(p + "/enable"), "1");
  EXPECT_EQ(ReadText(p + "/wwn/vpd_unit_serial"), spec.wwn);
  EXPECT_EQ(b.config.options["copy_group"], "esx");
  EXPECT_EQ(b.size, 1ull << 30);
  EXPECT_EQ(b.wwn, spec.wwn);
  EXPECT_TRUE(b.enabled);
  // Never an emulate_* attribute: user backstores have none.
  EXPECT_FALSE(Exists(p + "/attrib"));
}

TEST_F(LioTest, MaxSectorsCover16MiBAt4KBlocks) {
  lio.CreateBackstore(Spec("tank", "vm4k", 4096));
  EXPECT_NE(ReadText(host.T("core/user_0/tank-vm4k/control")).find("hw_max_sectors=4096\n"), std::string::npos);
}

TEST_F(LioTest, PicksAFreeHbaIndexAcrossPlugins) {
  std::filesystem::create_directories(host.T("core/fileio_0/other"));
  std::filesystem::create_directories(host.T("core/user_1/fbo-disk"));
  WriteText(host.T("core/user_1/fbo-disk/control"), "dev_config=fbo//var/disk.img\n");
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  EXPECT_EQ(b.hba, "user_2");
  // Only cowstore backstores are listed as ours.
  ASSERT_EQ(lio.Backstores().size(), 1u);
  EXPECT_EQ(lio.Backstores()[0].key(), "user_2/tank-vm1");
}

TEST_F(LioTest, ReadsTheKernelsFilesWhenPresent) {
  std::string p = host.T("core/user_5/x");
  WriteText(p + "/attrib/dev_config", "cowstore/tank/vm9:wce=1\n");
  WriteText(p + "/attrib/dev_size", "4096\n");
  WriteText(p + "/attrib/hw_block_size", "4096\n");
  WriteText(p + "/wwn/vpd_unit_serial", "T10 VPD Unit Serial Number: abc-def\n");
  WriteText(p + "/enable", "1\n");
  auto b = lio.FindBackstore("tank", "vm9");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->size, 4096u);
  EXPECT_EQ(b->block_size, 4096u);
  EXPECT_EQ(b->wwn, "abc-def");
  EXPECT_EQ(b->config.options["wce"], "1");
}

// Restore holds saved identities against every LIO device, whoever made it.
TEST_F(LioTest, DevicesListsEveryBackstoreTypeWithItsSerial) {
  lio.CreateBackstore(Spec("tank", "vm1"));
  WriteText(host.T("core/iblock_0/disk/wwn/vpd_unit_serial"), "T10 VPD Unit Serial Number: 5b0f7c2e-27d4\n");
  WriteText(host.T("core/fileio_1/img/wwn/vpd_unit_serial"), "T10 VPD Unit Serial Number: \n");
  WriteText(host.T("core/fileio_1/hba_info"), "HBA Index: 1\n");
  std::filesystem::create_directories(host.T("core/alua/lu_gps"));
  std::vector<std::string> got;
  for (const auto& d : lio.Devices()) got.push_back(d.key + (d.user ? " user " : " ") + "'" + d.serial + "'");
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"fileio_1/img ''", "iblock_0/disk '5b0f7c2e-27d4'",
                                           "user_0/tank-vm1 user '00112233-4455-6677-8899-aabbccddeeff'"}));
  std::filesystem::create_directories(host.T("iscsi/iqn.2003-01.org.linux-iscsi:x"));
  EXPECT_EQ(lio.TargetNames("iscsi"), std::vector<std::string>{"iqn.2003-01.org.linux-iscsi:x"});
  EXPECT_TRUE(lio.TargetNames("loopback").empty());
}

TEST_F(LioTest, RefusesNameClashAndSecondBackstoreForALun) {
  lio.CreateBackstore(Spec("tank", "vm1"));
  auto again = Spec("tank", "vm1");
  again.name = "other";
  EXPECT_THROW(lio.CreateBackstore(again), UserError);
  auto clash = Spec("tank", "vm2");
  clash.name = "tank-vm1";
  EXPECT_THROW(lio.CreateBackstore(clash), UserError);
  EXPECT_FALSE(Exists(host.T("core/user_1")));  // nothing half-made
}

TEST_F(LioTest, MissingModuleSaysWhatToDo) {
  std::filesystem::remove_all(host.T(""));
  try {
    lio.CreateBackstore(Spec("tank", "vm1"));
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("modprobe target_core_user"), std::string::npos);
  }
}

TEST_F(LioTest, FindsTheRunnerOrSaysToStartIt) {
  EXPECT_NO_THROW(lio.RequireRunner());
  std::filesystem::remove_all(host.proc + "/4242");
  try {
    lio.RequireRunner();
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("systemctl start tcmu-runner"), std::string::npos);
  }
}

TEST_F(LioTest, WwnIsWrittenBeforeEnable) {
  std::vector<std::string> order;
  LioOptions o{host.configfs, host.proc, [&](const std::string& p, const std::string&) {
                 order.push_back(p.substr(p.rfind('/') + 1));
                 return 0;
               }};
  Lio(o).CreateBackstore(Spec("tank", "vm1"));
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order[order.size() - 2], "vpd_unit_serial");
  EXPECT_EQ(order.back(), "enable");
}

TEST_F(LioTest, RefusedEnableRollsBackTheBackstore) {
  // The kernel refuses enable when tcmu-runner's handler fails to open.
  LioOptions o{host.configfs, host.proc, [](const std::string& p, const std::string&) {
                 return p.ends_with("/enable") ? EIO : 0;
               }};
  Lio refusing(o);
  EXPECT_THROW(refusing.CreateBackstore(Spec("tank", "vm1")), UserError);
  EXPECT_TRUE(refusing.Backstores().empty());
  EXPECT_FALSE(Exists(host.T("core/user_0")));
}

TEST_F(LioTest, InvalidNameIsRefusedBeforeAnythingIsMade) {
  auto spec = Spec("tank", "vm1");
  spec.name = "bad/name";
  EXPECT_THROW(lio.CreateBackstore(spec), UserError);
  EXPECT_FALSE(Exists(host.T("core/user_0")));
}

TEST_F(LioTest, RefusedTpgEnableRollsBackTheTarget) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  LioOptions o{host.configfs, host.proc, [](const std::string& p, const std::string&) {
                 return p.find("/tpgt_1/enable") != std::string::npos ? EINVAL : 0;
               }};
  Lio refusing(o);
  EXPECT_THROW(refusing.ExportIscsi(b, {"iqn.2024-01.io.cowstore:nas.tank", {}, {}, std::nullopt}), UserError);
  EXPECT_FALSE(Exists(host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank")));
  EXPECT_TRUE(lio.LinksTo(b).empty());
}

TEST_F(LioTest, DeleteRemovesTheHbaDirToo) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  lio.DeleteBackstore(b);
  EXPECT_FALSE(Exists(host.T("core/user_0")));
  EXPECT_TRUE(lio.Backstores().empty());
}

TEST_F(LioTest, ExportsOverIscsiWithAclsAndChap) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  IscsiSpec s;
  s.target = "iqn.2024-01.io.cowstore:nas.tank";
  s.portals = {"192.168.1.10:3260"};
  s.acls = {{"iqn.1998-01.com.vmware:esx1", "esxuser", "secret123456"}};
  FabricLun l = lio.ExportIscsi(b, s);
  EXPECT_EQ(l.lun, 0u);
  std::string tpg = host.T("iscsi/" + s.target + "/tpgt_1");
  EXPECT_TRUE(Exists(tpg + "/np/192.168.1.10:3260"));
  EXPECT_EQ(ReadText(tpg + "/enable"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/authentication"), "1");
  std::string acl = tpg + "/acls/iqn.1998-01.com.vmware:esx1";
  EXPECT_EQ(ReadText(acl + "/auth/userid"), "esxuser");
  EXPECT_EQ(ReadText(acl + "/auth/password"), "secret123456");
  EXPECT_TRUE(Exists(acl + "/lun_0"));
  auto links = lio.LinksTo(b);
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].fabric, "iscsi");
  // Idempotent: exporting again changes nothing and keeps LUN 0.
  EXPECT_EQ(lio.ExportIscsi(b, s).lun, 0u);
  EXPECT_EQ(lio.LinksTo(b).size(), 1u);
  // A second LUN lands on lun_1 of the same target.
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  EXPECT_EQ(lio.ExportIscsi(b2, s).lun, 1u);
  auto targets = lio.IscsiTargets();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].luns.size(), 2u);
  EXPECT_EQ(targets[0].acls.size(), 1u);
  EXPECT_EQ(targets[0].acls[0].chap_user, "esxuser");
}

TEST_F(LioTest, DemoModeOnDefaultPortalWhenAskedFor) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  EXPECT_EQ(lio.IscsiTpgAccess("iqn.2024-01.io.cowstore:nas.tank"), IscsiAccess::kNoTpg);
  lio.ExportIscsi(b, {"iqn.2024-01.io.cowstore:nas.tank", {}, {}, std::nullopt, /*demo_mode=*/true});
  std::string tpg = host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank/tpgt_1");
  EXPECT_TRUE(Exists(tpg + "/np/0.0.0.0:3260"));
  EXPECT_EQ(ReadText(tpg + "/attrib/generate_node_acls"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/cache_dynamic_acls"), "1");
  EXPECT_EQ(ReadText(tpg + "/attrib/demo_mode_write_protect"), "0");
  EXPECT_EQ(ReadText(tpg + "/enable"), "1");
  EXPECT_TRUE(lio.IscsiTargets()[0].demo_mode);
  EXPECT_EQ(lio.IscsiTpgAccess("iqn.2024-01.io.cowstore:nas.tank"), IscsiAccess::kDemo);
}

TEST_F(LioTest, NoInitiatorWithoutDemoModeIsRefusedBeforeAnythingIsMade) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  try {
    lio.ExportIscsi(b, {"iqn.2024-01.io.cowstore:nas.tank", {}, {}, std::nullopt});
    ADD_FAILURE() << "exported to every initiator without being asked";
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("refusing to export tank/vm1 to every initiator"), std::string::npos) << m;
    EXPECT_NE(m.find("--initiator IQN"), std::string::npos) << m;
    EXPECT_NE(m.find("--demo-mode"), std::string::npos) << m;
  }
  EXPECT_FALSE(Exists(host.T("iscsi")));
  EXPECT_TRUE(lio.LinksTo(b).empty());
}

TEST_F(LioTest, DemoModeWithInitiatorsIsRefused) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  IscsiSpec s{"iqn.2024-01.io.cowstore:nas.tank", {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt, true};
  EXPECT_THROW(lio.ExportIscsi(b, s), UserError);
  EXPECT_THROW(CheckIscsiAccess(IscsiAccess::kNoTpg, s, "tank/vm1"), UserError);
  EXPECT_FALSE(Exists(host.T("iscsi")));
}

TEST_F(LioTest, ADemoModeTargetTakesLunsOnlyWithDemoMode) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  const std::string iqn = "iqn.2024-01.io.cowstore:nas.tank";
  lio.ExportIscsi(b, {iqn, {}, {}, std::nullopt, true});
  std::string before = testing::Snapshot(host.configfs);
  EXPECT_THROW(lio.ExportIscsi(b2, {iqn, {}, {}, std::nullopt}), UserError);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  EXPECT_EQ(lio.ExportIscsi(b2, {iqn, {}, {}, std::nullopt, true}).lun, 1u);
  EXPECT_EQ(ReadText(host.T("iscsi/" + iqn + "/tpgt_1/attrib/generate_node_acls")), "1");
}

TEST_F(LioTest, AnAclTargetTakesLunsWithoutInitiatorAndKeepsItsAcls) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  Backstore b3 = lio.CreateBackstore(Spec("tank", "vm3"));
  const std::string iqn = "iqn.2024-01.io.cowstore:nas.tank";
  lio.ExportIscsi(b, {iqn, {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt});
  EXPECT_EQ(lio.IscsiTpgAccess(iqn), IscsiAccess::kAcls);
  std::string tpg = host.T("iscsi/" + iqn + "/tpgt_1");
  // auto_map (the default): the ACL the target has sees the new LUN.
  EXPECT_EQ(lio.ExportIscsi(b2, {iqn, {}, {}, std::nullopt}).lun, 1u);
  EXPECT_FALSE(Exists(tpg + "/attrib/generate_node_acls"));
  EXPECT_TRUE(Exists(tpg + "/acls/iqn.1998-01.com.vmware:esx1/lun_0"));
  EXPECT_TRUE(Exists(tpg + "/acls/iqn.1998-01.com.vmware:esx1/lun_1"));
  // Without it: the LUN is added and no ACL maps it.
  IscsiSpec s{iqn, {}, {}, std::nullopt};
  s.auto_map = false;
  FabricLun l3 = lio.ExportIscsi(b3, s);
  EXPECT_EQ(l3.lun, 2u);
  EXPECT_TRUE(Exists(tpg + "/lun/lun_2"));
  EXPECT_FALSE(Exists(tpg + "/acls/iqn.1998-01.com.vmware:esx1/lun_2"));  // not mapped: nobody sees it yet
  EXPECT_TRUE(lio.MappedTo(l3).empty());
  EXPECT_FALSE(lio.IscsiTargets()[0].demo_mode);
}

// ------------------------------------------------ auto_add_mapped_luns

const std::string kTgt = "iqn.2024-01.io.cowstore:nas.tank";
const std::string kEsx1 = "iqn.1998-01.com.vmware:esx1";
const std::string kEsx2 = "iqn.1998-01.com.vmware:esx2";
const std::string kEsx3 = "iqn.1998-01.com.vmware:esx3";

IscsiSpec Acls(std::vector<std::string> initiators, bool auto_map = true) {
  IscsiSpec s{kTgt, {}, {}, std::nullopt};
  for (auto& i : initiators) s.acls.push_back({i, "", ""});
  s.auto_map = auto_map;
  return s;
}

std::string Mappings(const FakeHost& host) { return testing::AclMappings(host.T("iscsi/" + kTgt + "/tpgt_1/acls")); }

std::string Names(const std::vector<LunMapping>& m) {
  std::string out;
  for (const auto& x : m) out += x.initiator + "=" + std::to_string(x.mapped_lun) + " ";
  return out;
}

TEST_F(LioTest, ANewLunIsMappedIntoEveryAclOfTheTarget) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  Backstore b3 = lio.CreateBackstore(Spec("tank", "vm3"));
  lio.ExportIscsi(b, Acls({kEsx1, kEsx2}));
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_0 " + kEsx2 + ":lun_0->lun_0 ");
  // No initiator named: both ACLs see it, as LUN 1.
  FabricLun l2 = lio.ExportIscsi(b2, IscsiSpec{kTgt, {}, {}, std::nullopt});
  EXPECT_EQ(Names(lio.MappedTo(l2)), kEsx1 + "=1 " + kEsx2 + "=1 ");
  // One named: the other one sees it too.
  FabricLun l3 = lio.ExportIscsi(b3, Acls({kEsx1}));
  EXPECT_EQ(Names(lio.MappedTo(l3)), kEsx1 + "=2 " + kEsx2 + "=2 ");
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_0 " + kEsx1 + ":lun_1->lun_1 " + kEsx1 + ":lun_2->lun_2 " + kEsx2 +
                                ":lun_0->lun_0 " + kEsx2 + ":lun_1->lun_1 " + kEsx2 + ":lun_2->lun_2 ");
  // Exporting again changes nothing.
  std::string before = testing::Snapshot(host.configfs);
  EXPECT_EQ(lio.ExportIscsi(b3, Acls({kEsx1})).lun, 2u);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

TEST_F(LioTest, ANewAclSeesEveryLunOfTheTarget) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  Backstore b3 = lio.CreateBackstore(Spec("tank", "vm3"));
  lio.ExportIscsi(b, Acls({kEsx1}));
  lio.ExportIscsi(b2, Acls({kEsx1}));
  // esx2 is new: it gets LUN 0 and 1 as well as the new LUN 2; esx1 gets LUN 2.
  lio.ExportIscsi(b3, Acls({kEsx2}));
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_0 " + kEsx1 + ":lun_1->lun_1 " + kEsx1 + ":lun_2->lun_2 " + kEsx2 +
                                ":lun_0->lun_0 " + kEsx2 + ":lun_1->lun_1 " + kEsx2 + ":lun_2->lun_2 ");
  // A new ACL named for a LUN already in the target gets every LUN too.
  lio.ExportIscsi(b, Acls({kEsx3}));
  EXPECT_NE(Mappings(host).find(kEsx3 + ":lun_0->lun_0 " + kEsx3 + ":lun_1->lun_1 " + kEsx3 + ":lun_2->lun_2 "),
            std::string::npos)
      << Mappings(host);
}

TEST_F(LioTest, WithoutAutoMapOnlyTheNamedAclsMapOnlyTheNewLun) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  Backstore b3 = lio.CreateBackstore(Spec("tank", "vm3"));
  lio.ExportIscsi(b, Acls({kEsx1, kEsx2}, false));
  FabricLun l2 = lio.ExportIscsi(b2, Acls({kEsx3}, false));  // a new ACL: this LUN only
  EXPECT_EQ(Names(lio.MappedTo(l2)), kEsx3 + "=1 ");
  FabricLun l3 = lio.ExportIscsi(b3, Acls({}, false));  // nobody
  EXPECT_TRUE(lio.MappedTo(l3).empty());
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_0 " + kEsx2 + ":lun_0->lun_0 " + kEsx3 + ":lun_1->lun_1 ");
}

// targetcli lets an ACL's mapped LUN numbers differ from the TPG's: the new
// LUN takes the lowest free number there, and unexport finds mapped LUNs by
// their link, not their number.
TEST_F(LioTest, MappedLunNumbersTakenInAnAclAreSkipped) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  lio.ExportIscsi(b, Acls({kEsx1}));
  std::string acl = host.T("iscsi/" + kTgt + "/tpgt_1/acls/" + kEsx1);
  std::filesystem::rename(acl + "/lun_0", acl + "/lun_1");  // targetcli: mapped LUN 1 -> TPG LUN 0
  FabricLun l2 = lio.ExportIscsi(b2, Acls({}));
  EXPECT_EQ(l2.lun, 1u);
  EXPECT_EQ(Names(lio.MappedTo(l2)), kEsx1 + "=0 ");
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_1 " + kEsx1 + ":lun_1->lun_0 ");
  lio.Unexport(b);
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_1 ");
}

TEST_F(LioTest, UnexportRemovesTheLunFromEveryAcl) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  lio.ExportIscsi(b, Acls({kEsx1, kEsx2}));
  lio.ExportIscsi(b2, Acls({kEsx3}));
  FabricLun l0 = lio.LinksTo(b)[0];
  EXPECT_EQ(Names(lio.MappedTo(l0)), kEsx1 + "=0 " + kEsx2 + "=0 " + kEsx3 + "=0 ");
  lio.Unexport(b);
  EXPECT_TRUE(lio.MappedTo(l0).empty());
  EXPECT_FALSE(Exists(host.T("iscsi/" + kTgt + "/tpgt_1/lun/lun_0")));
  // Mappings() also fails on any link left dangling.
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_1->lun_1 " + kEsx2 + ":lun_1->lun_1 " + kEsx3 + ":lun_1->lun_1 ");
  lio.Unexport(b2);
  EXPECT_FALSE(Exists(host.T("iscsi/" + kTgt)));
}

TEST_F(LioTest, AFailedExportRollsBackItsAutoMappedLuns) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  lio.ExportIscsi(b, Acls({kEsx1, kEsx2}));
  std::string before = testing::Snapshot(host.configfs);
  // Turning CHAP on is the last write, after every mapping is made.
  LioOptions o{host.configfs, host.proc, [](const std::string& p, const std::string&) {
                 return p.ends_with("/attrib/authentication") ? EINVAL : 0;
               }};
  Lio refusing(o);
  IscsiSpec s = Acls({kEsx3});
  s.acls[0].chap_user = "esx3";
  s.acls[0].chap_password = "secret123456";
  EXPECT_THROW(refusing.ExportIscsi(b2, s), UserError);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

// ------------------------------------------------ exact mappings (restore)

IscsiSpec Exact(std::vector<std::pair<std::string, std::vector<MappedLun>>> acls, bool auto_map = false) {
  IscsiSpec s{kTgt, {}, {}, std::nullopt};
  for (auto& [i, m] : acls) {
    AclSpec a{i, "", ""};
    a.mapped_luns = m;
    s.acls.push_back(a);
  }
  s.auto_map = auto_map;
  return s;
}

TEST_F(LioTest, AnAclWithMappedLunsMapsExactlyThose) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  // esx1 sees LUN 0 as 0 and LUN 1 as 5, write-protected; esx2 sees nothing.
  // auto_map on: it does not reach into ACLs that list their LUNs.
  auto spec = Exact({{kEsx1, {{0, 0, false}, {1, 5, true}}}, {kEsx2, {}}}, /*auto_map=*/true);
  spec.lun = 0;
  lio.ExportIscsi(b, spec);
  spec.lun = 1;
  lio.ExportIscsi(b2, spec);
  EXPECT_EQ(Mappings(host), kEsx1 + ":lun_0->lun_0 " + kEsx1 + ":lun_5->lun_1 ");
  std::string acl = host.T("iscsi/" + kTgt + "/tpgt_1/acls/" + kEsx1);
  EXPECT_EQ(ReadText(acl + "/lun_5/write_protect"), "1");
  EXPECT_FALSE(Exists(acl + "/lun_0/write_protect"));  // as made: nothing to write
  EXPECT_TRUE(Exists(host.T("iscsi/" + kTgt + "/tpgt_1/acls/" + kEsx2)));
  EXPECT_EQ(lio.AclMappedLuns(kTgt, kEsx1), (std::vector<MappedLun>{{0, 0, false}, {1, 5, true}}));
  EXPECT_TRUE(lio.AclMappedLuns(kTgt, kEsx2).empty());
  EXPECT_TRUE(lio.AclMappedLuns(kTgt, kEsx3).empty());
  auto t = lio.IscsiTargets();
  ASSERT_EQ(t.size(), 1u);
  ASSERT_EQ(t[0].acls.size(), 2u);
  EXPECT_EQ(t[0].acls[0].mapped_luns, (std::vector<MappedLun>{{0, 0, false}, {1, 5, true}}));
  EXPECT_EQ(t[0].acls[1].mapped_luns, std::vector<MappedLun>{});
  // Again: nothing changes.
  std::string before = testing::Snapshot(host.configfs);
  lio.ExportIscsi(b2, spec);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  // A write protection lifted by hand comes back; nothing else changes.
  testing::WriteText(acl + "/lun_5/write_protect", "0");
  lio.ExportIscsi(b2, spec);
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
}

TEST_F(LioTest, AMappedLunNumberTakenByAnotherLunIsRefusedAndRolledBack) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  lio.ExportIscsi(b, Acls({kEsx1}));  // esx1 sees LUN 0 as 0
  std::string before = testing::Snapshot(host.configfs);
  auto spec = Exact({{kEsx1, {{0, 0, false}, {1, 0, false}}}});
  spec.lun = 1;
  EXPECT_THROW(lio.ExportIscsi(b2, spec), UserError);  // twice mapped LUN 0
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  spec = Exact({{kEsx1, {{1, 0, false}}}});
  spec.lun = 1;
  try {
    lio.ExportIscsi(b2, spec);
    ADD_FAILURE() << "mapped LUN 0 is LUN 0's";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(kEsx1 + " sees LUN 0 of " + kTgt + " as its LUN 0, where LUN 1 should be"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(testing::Snapshot(host.configfs), before);  // LUN 1 rolled back too
}

// Every access case of `cowctl export iscsi`, by the target's current state.
TEST(IscsiAccessRules, WhatExportIscsiAllows) {
  const std::string iqn = "iqn.2024-01.io.cowstore:nas.tank";
  IscsiSpec none{iqn, {}, {}, std::nullopt, false};
  IscsiSpec demo{iqn, {}, {}, std::nullopt, true};
  IscsiSpec acl{iqn, {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt, false};
  IscsiSpec both{iqn, {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt, true};
  auto allowed = [](IscsiAccess a, const IscsiSpec& s) {
    try {
      CheckIscsiAccess(a, s, "tank/vm1");
      return true;
    } catch (const UserError&) {
      return false;
    }
  };
  using A = IscsiAccess;
  EXPECT_FALSE(allowed(A::kNoTpg, none));
  EXPECT_FALSE(allowed(A::kDemo, none));
  EXPECT_TRUE(allowed(A::kAcls, none));
  EXPECT_TRUE(allowed(A::kNoTpg, demo));
  EXPECT_TRUE(allowed(A::kDemo, demo));
  EXPECT_FALSE(allowed(A::kAcls, demo));
  EXPECT_TRUE(allowed(A::kNoTpg, acl));
  EXPECT_FALSE(allowed(A::kDemo, acl));
  EXPECT_TRUE(allowed(A::kAcls, acl));
  for (A a : {A::kNoTpg, A::kDemo, A::kAcls}) EXPECT_FALSE(allowed(a, both));
  // Names are checked first, whatever the access.
  EXPECT_FALSE(allowed(A::kAcls, IscsiSpec{"bogus", {}, {}, std::nullopt, false}));
}

TEST_F(LioTest, BadExportInputIsRefusedBeforeAnythingIsMade) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  EXPECT_THROW(lio.ExportIscsi(b, {"notaniqn", {}, {}, std::nullopt}), UserError);
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {"1.2.3.4"}, {}, std::nullopt}), UserError);
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {"1.2.3.400:3260"}, {}, std::nullopt}), UserError);
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {}, {{"bad initiator", "", ""}}, std::nullopt}),
               UserError);
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {}, {{"iqn.2024-01.io.x:i", "u", ""}}, std::nullopt}),
               UserError);
  // What LIO would not store as it was given (or store as "no CHAP").
  for (const char* secret : {"two\nlines123456", "s\xc3\xa9" "cret123456", "with space12", "NULL12345678"}) {
    EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {}, {{"iqn.2024-01.io.x:i", "u", secret}}, std::nullopt}),
                 UserError)
        << secret;
  }
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {}, {{"iqn.2024-01.io.x:i", "a\nb", "secret123456"}},
                                   std::nullopt}),
               UserError);
  // An IPv6 portal names a directory: only an address goes in it.
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2024-01.io.x:y", {"[/../../../x]:3260"}, {}, std::nullopt, true}), UserError);
  EXPECT_FALSE(Exists(host.T("iscsi/iqn.2024-01.io.x:y")));
  EXPECT_FALSE(Exists(host.T("x")));
  // So does a loopback WWN.
  EXPECT_THROW(lio.ExportLoopback(b, "naa./../../../../aa"), UserError);
  EXPECT_THROW(lio.ExportLoopback(b, "naa.5001405abcdefxyz"), UserError);
  EXPECT_FALSE(Exists(host.T("loopback")));
  EXPECT_FALSE(Exists(host.T("aa")));
}

TEST_F(LioTest, TakenLunNumberRollsBackTheNewTarget) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  IscsiSpec s{"iqn.2024-01.io.cowstore:nas.tank", {}, {}, 3, /*demo_mode=*/true};
  lio.ExportIscsi(b, s);
  EXPECT_THROW(lio.ExportIscsi(b2, s), UserError);
  EXPECT_TRUE(lio.LinksTo(b2).empty());
}

TEST_F(LioTest, NeverTouchesATargetcliTarget) {
  // targetcli made a target with a fileio LUN.
  std::string tpg = host.T("iscsi/iqn.2003-01.org.linux-iscsi.nas:sn.1/tpgt_1");
  std::filesystem::create_directories(host.T("core/fileio_0/disk"));
  std::filesystem::create_directories(tpg + "/lun/lun_0");
  std::filesystem::create_symlink(host.T("core/fileio_0/disk"), tpg + "/lun/lun_0/abcdef0123");
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  EXPECT_THROW(lio.ExportIscsi(b, {"iqn.2003-01.org.linux-iscsi.nas:sn.1", {}, {}, std::nullopt}), UserError);
  EXPECT_TRUE(lio.IscsiTargets().empty());
  EXPECT_EQ(lio.FabricLuns().size(), 1u);
}

TEST_F(LioTest, DeleteRefusedWhileExportedAndUnexportCleansUp) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  IscsiSpec s{"iqn.2024-01.io.cowstore:nas.tank", {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt};
  lio.ExportIscsi(b, s);
  lio.ExportLoopback(b);
  EXPECT_THROW(lio.DeleteBackstore(b), UserError);
  lio.Unexport(b);
  EXPECT_TRUE(lio.LinksTo(b).empty());
  EXPECT_FALSE(Exists(host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank")));
  EXPECT_TRUE(lio.LoopbackTargets().empty());
  lio.DeleteBackstore(b);
  EXPECT_TRUE(lio.Backstores().empty());
}

TEST_F(LioTest, UnexportKeepsTheTargetWhileOtherLunsRemain) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  Backstore b2 = lio.CreateBackstore(Spec("tank", "vm2"));
  IscsiSpec s{"iqn.2024-01.io.cowstore:nas.tank", {}, {{"iqn.1998-01.com.vmware:esx1", "", ""}}, std::nullopt};
  lio.ExportIscsi(b, s);
  lio.ExportIscsi(b2, s);
  lio.Unexport(b);
  EXPECT_FALSE(Exists(host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank/tpgt_1/lun/lun_0")));
  EXPECT_FALSE(Exists(host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank/tpgt_1/acls/iqn.1998-01.com.vmware:esx1/lun_0")));
  EXPECT_TRUE(Exists(host.T("iscsi/iqn.2024-01.io.cowstore:nas.tank/tpgt_1/lun/lun_1")));
}

TEST_F(LioTest, LoopbackExportHasANexus) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  FabricLun l = lio.ExportLoopback(b);
  EXPECT_EQ(l.fabric, "loopback");
  EXPECT_EQ(l.target.size(), 20u);
  std::string nexus = ReadText(host.T("loopback/" + l.target + "/tpgt_1/nexus"));
  EXPECT_EQ(nexus.rfind("naa.5001405", 0), 0u);
  EXPECT_EQ(lio.ExportLoopback(b).target, l.target);  // idempotent
  ASSERT_EQ(lio.LoopbackTargets().size(), 1u);
  EXPECT_EQ(lio.LoopbackTargets()[0].nexus, nexus);
}

// Restore gives a loopback export its saved LUN number; a number another
// LUN has is refused before anything is made.
TEST_F(LioTest, LoopbackExportAtAGivenLunNumber) {
  const std::string wwn = "naa.5001405aabbccdd0";
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  FabricLun l = lio.ExportLoopback(b, wwn, 3);
  EXPECT_EQ(l.lun, 3u);
  EXPECT_TRUE(Exists(host.T("loopback/" + wwn + "/tpgt_1/lun/lun_3")));
  EXPECT_FALSE(Exists(host.T("loopback/" + wwn + "/tpgt_1/lun/lun_0")));
  EXPECT_EQ(lio.ExportLoopback(b, wwn, 3).lun, 3u);  // idempotent
  ASSERT_EQ(lio.LoopbackTargets().size(), 1u);
  EXPECT_EQ(lio.LoopbackTargets()[0].luns, (std::vector<std::pair<uint32_t, std::string>>{{3, b.key()}}));
  try {
    lio.ExportLoopback(b, wwn, 4);
    ADD_FAILURE() << "exported twice";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("tank/vm1 is already LUN 3 of loopback " + wwn), std::string::npos) << e.what();
  }
  BackstoreSpec s2 = Spec("tank", "vm2");
  s2.wwn = "00112233-4455-6677-8899-aabbccddee00";
  Backstore b2 = lio.CreateBackstore(s2);
  const std::string before = testing::Snapshot(host.configfs);
  try {
    lio.ExportLoopback(b2, wwn, 3);
    ADD_FAILURE() << "LUN 3 given twice";
  } catch (const UserError& e) {
    // The message names the backstore that holds the number.
    EXPECT_NE(std::string(e.what()).find("LUN 3 of loopback " + wwn + " is taken by " + b.key()), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(testing::Snapshot(host.configfs), before);
  EXPECT_EQ(lio.ExportLoopback(b2, wwn).lun, 0u);  // no number: the lowest free
  // With no target named, a number is checked against the target the LUN
  // is exported on (cowctl export loop --lun).
  EXPECT_EQ(lio.ExportLoopback(b2, "", 0).lun, 0u);
  try {
    lio.ExportLoopback(b2, "", 1);
    ADD_FAILURE() << "exported at a second number";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("tank/vm2 is already LUN 0 of loopback " + wwn), std::string::npos)
        << e.what();
  }
}

TEST_F(LioTest, OtherFabricsBlockUnexport) {
  Backstore b = lio.CreateBackstore(Spec("tank", "vm1"));
  std::string lun = host.T("vhost/naa.5001405aaaaaaaaa/tpgt_1/lun/lun_0");
  std::filesystem::create_directories(lun);
  std::filesystem::create_symlink(b.path, lun + "/0123456789");
  EXPECT_THROW(lio.Unexport(b), UserError);
  EXPECT_TRUE(Exists(lun + "/0123456789"));
}

TEST(Iqn, Validation) {
  EXPECT_TRUE(ValidIqn("iqn.2003-01.org.linux-iscsi.host:sn.1234"));
  EXPECT_TRUE(ValidIqn("naa.5001405abcdef012"));
  EXPECT_FALSE(ValidIqn("iqn.bad"));
  EXPECT_FALSE(ValidIqn("iqn.2003-01.org x"));
  EXPECT_TRUE(ValidPortal("[::]:3260"));
  EXPECT_TRUE(ValidPortal("[fe80::1:2]:3260"));
  // Permission errors: root is told to look at dmesg, anyone else to be root.
  EXPECT_EQ(ErrnoAdvice(EACCES, "see dmesg"), ::geteuid() == 0 ? "see dmesg" : "run cowctl as root");
  EXPECT_EQ(ErrnoAdvice(EINVAL, "see dmesg"), "see dmesg");
  EXPECT_FALSE(ValidPortal("[..]:3260"));
  EXPECT_FALSE(ValidPortal("[::/..]:3260"));
  EXPECT_FALSE(ValidPortal("[1.2.3.4]:3260"));
  EXPECT_FALSE(ValidPortal("0.0.0.0:0"));
  EXPECT_EQ(DefaultIscsiTarget("Tank_1").find("iqn.2024-01.io.cowstore:"), 0u);
  EXPECT_TRUE(ValidIqn(DefaultIscsiTarget("Tank_1")));
}

}  // namespace
}  // namespace cowstore::cowctl
