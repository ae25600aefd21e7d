// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/util.h"

#include <gtest/gtest.h>

namespace cowstore::cowctl {
namespace {

TEST(Names, AcceptsTheTeamRule) {
  EXPECT_TRUE(ValidName("tank"));
  EXPECT_TRUE(ValidName("vm_1.disk-0"));
  EXPECT_TRUE(ValidName(std::string(64, 'a')));
  EXPECT_FALSE(ValidName(""));
  EXPECT_FALSE(ValidName(std::string(65, 'a')));
  EXPECT_FALSE(ValidName(".hidden"));
  EXPECT_FALSE(ValidName("-opt"));
  EXPECT_FALSE(ValidName("a/b"));
  EXPECT_FALSE(ValidName("a b"));
  EXPECT_FALSE(ValidName("../x"));
  EXPECT_THROW(RequireName("a:b", "pool"), UserError);
}

TEST(Sizes, ParsesBinaryUnits) {
  EXPECT_EQ(ParseSize("4096", "size"), 4096u);
  EXPECT_EQ(ParseSize("64K", "size"), 64u << 10);
  EXPECT_EQ(ParseSize("1M", "size"), 1u << 20);
  EXPECT_EQ(ParseSize("10G", "size"), 10ull << 30);
  EXPECT_EQ(ParseSize("10GiB", "size"), 10ull << 30);
  EXPECT_EQ(ParseSize("2tb", "size"), 2ull << 40);
  EXPECT_EQ(ParseSize("1.5G", "size"), 3ull << 29);
  EXPECT_EQ(ParseSize("512B", "size"), 512u);
}

TEST(Sizes, RejectsJunkAndOverflow) {
  for (const char* bad : {"", "G", "10X", "-1", "1..5G", "99999999999999999999", "20000P", "1.G"}) {
    EXPECT_THROW(ParseSize(bad, "size"), UserError) << bad;
  }
}

TEST(Sizes, FormatsForPeople) {
  EXPECT_EQ(FormatSize(512), "512 B");
  EXPECT_EQ(FormatSize(1 << 20), "1.00 MiB");
  EXPECT_EQ(FormatSize(10ull << 30), "10.0 GiB");
  EXPECT_EQ(FormatSize(500ull << 30), "500 GiB");
}

TEST(LunRefs, NeedPoolSlashLun) {
  auto r = ParseLunRef("tank/vm1");
  EXPECT_EQ(r.pool, "tank");
  EXPECT_EQ(r.lun, "vm1");
  EXPECT_THROW(ParseLunRef("tank"), UserError);
  EXPECT_THROW(ParseLunRef("tank/vm1/x"), UserError);
  EXPECT_THROW(ParseLunRef("/vm1"), UserError);
  EXPECT_THROW(ParseLunRef("tank/.x"), UserError);
}

TEST(Cfgstrings, RoundTripWithOptions) {
  Cfgstring c{"tank", "vm1", {{"copy_group", "esx"}}};
  EXPECT_EQ(c.str(), "cowstore/tank/vm1;copy_group=esx");
  c.options["wce"] = "1";
  EXPECT_EQ(c.str(), "cowstore/tank/vm1;copy_group=esx;wce=1");
  EXPECT_EQ(ParseCfgstring(c.str())->options, c.options);
  EXPECT_EQ(ParseCfgstring("cowstore/tank/vm1;tcmur_cmd_time_out=30;wce=1")->options.size(), 1u);
  auto p = ParseCfgstring("cowstore/tank/vm1:copy_group=esx,wce=1\n");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pool, "tank");
  EXPECT_EQ(p->lun, "vm1");
  EXPECT_EQ(p->options.at("copy_group"), "esx");
  EXPECT_EQ(p->options.at("wce"), "1");
  EXPECT_EQ(ParseCfgstring("cowstore/tank/vm1")->str(), "cowstore/tank/vm1");
  c.options["thin_on_thin"] = "0";  // cowctl --thin-on-thin 0
  EXPECT_EQ(c.str(), "cowstore/tank/vm1;copy_group=esx;wce=1;thin_on_thin=0");
  EXPECT_EQ(ParseCfgstring(c.str())->options, c.options);
}

TEST(Cfgstrings, OthersAreNotOurs) {
  EXPECT_FALSE(ParseCfgstring("fbo//var/x"));
  EXPECT_FALSE(ParseCfgstring("cowstore/tank"));
  EXPECT_FALSE(ParseCfgstring("cowstore/../etc/vm1"));
  EXPECT_FALSE(ParseCfgstring("cowstore/tank/vm1:junk"));
}

TEST(Wwn, IsTheUuidForm) {
  std::array<uint8_t, 16> id{};
  for (int i = 0; i < 16; ++i) id[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(UuidString(id), "00112233-4455-6677-8899-aabbccddeeff");
  EXPECT_NE(RandomBytes16(), RandomBytes16());
}

}  // namespace
}  // namespace cowstore::cowctl
