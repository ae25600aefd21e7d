// SPDX-License-Identifier: Apache-2.0
// Pins that cowctl, the handler and the store accept exactly the same names
// and cfgstrings, and that every cfgstring cowctl writes is one the handler
// reads back unchanged. (They once disagreed: cowctl made LUNs named "a..b"
// that no backstore could open, and read option keys the handler refuses.)
//
// Inputs: a hand-picked corpus of the edges of each rule plus random strings
// over an alphabet biased towards the characters that matter.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "handler/common/cfgstring.h"
#include "handler/store/names.h"
#include "tools/cowctl/util.h"

namespace cowstore {
namespace {

std::vector<std::string> NameCorpus() {
  std::vector<std::string> v = {
      "", "a", "tank", "vm_1.disk-0", "A-Z_09", std::string(64, 'a'), std::string(65, 'a'),
      ".", "..", ".hidden", "-opt", "_ok", "a..b", "a.b", "a...b", "ab..", "a.", "a-", "a/b",
      "a b", "a\tb", "a:b", "a;b", "a,b", "a=b", "../x", "x/..", "caf\xc3\xa9", std::string("a\0b", 3),
      "a\n", "\xff", "tcmur_cmd_time_out", "cowstore"};
  std::mt19937 rng(20261201);
  const std::string alphabet = "ab09_.-/;:,= \n\x7f\xc3";
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 70, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  return v;
}

TEST(Agreement, CowctlAndTheStoreAcceptTheSameNames) {
  for (const std::string& n : NameCorpus()) {
    const bool store_ok = store::ValidName(n);
    EXPECT_EQ(cowctl::ValidName(n), store_ok) << "'" << n << "'";
    bool cowctl_ok = true;
    try {
      cowctl::RequireName(n, "LUN");
    } catch (const cowctl::UserError&) {
      cowctl_ok = false;
    }
    EXPECT_EQ(cowctl_ok, store_ok) << "'" << n << "'";
  }
  EXPECT_FALSE(store::ValidName("a..b"));
}

TEST(Agreement, TheHandlerOpensEveryNameCowctlAccepts) {
  for (const std::string& n : NameCorpus()) {
    if (n.find_first_of("/;:,") != std::string::npos) continue;  // cfgstring syntax, not names
    const bool valid = cowctl::ValidName(n);
    common::LunSpec spec;
    std::string why;
    EXPECT_EQ(common::ParseCfgstring("cowstore/" + n + "/lun", &spec, &why), valid)
        << "pool '" << n << "': " << why;
    EXPECT_EQ(common::ParseCfgstring("cowstore/tank/" + n, &spec, &why), valid)
        << "LUN '" << n << "': " << why;
    EXPECT_EQ(common::ParseCfgstring("cowstore/tank/vm;copy_group=" + n, &spec, &why), valid)
        << "copy group '" << n << "': " << why;
  }
}

std::vector<std::string> CfgstringCorpus() {
  std::vector<std::string> v = {
      "cowstore/tank/vm1", "cowstore/tank/vm1;copy_group=esx", "cowstore/tank/vm1:copy_group=esx",
      "cowstore/tank/vm1:copy_group=esx,wce=1", "cowstore/tank/vm1;copy_group=esx;wce=0",
      "cowstore/tank/vm1;wce=1;tcmur_cmd_time_out=30", "cowstore/tank/vm1;tcmur_cmd_time_out=30",
      "cowstore/tank/vm1;junk=1", "cowstore/tank/vm1;wce=2", "cowstore/tank/vm1;wce",
      "cowstore/tank/vm1;copy_group=esx;copy_group=esx", "cowstore/tank/vm1;", "cowstore/tank/vm1:",
      "cowstore/tank/vm1;;wce=1", "cowstore/tank/vm1;wce=1;", "cowstore/tank", "cowstore/tank/",
      "cowstore//vm1", "cowstore/../etc/vm1", "cowstore/tank/a..b", "cowstore/tank/vm1/x",
      "fbo//var/x", "cowstorex/tank/vm1", "cow/tank/vm1", "", "cowstore/", "COWSTORE/tank/vm1",
      "cowstore/tank/vm1;copy_group=", "cowstore/tank/vm1;=1", "cowstore/tank/vm1;copy_group=a..b",
      "cowstore/tank/" + std::string(64, 'v'), "cowstore/tank/" + std::string(65, 'v'),
      "cowstore/tank/vm1;copy_group=" + std::string(240, 'g'), "cowstore/tank/vm1;thin_on_thin=0",
      "cowstore/tank/vm1;wce=1;thin_on_thin=1", "cowstore/tank/vm1;thin_on_thin=2",
      "cowstore/tank/vm1;thin_on_thin=0;thin_on_thin=0", "cowstore/tank/vm1:copy_group=g,thin_on_thin=0"};
  std::mt19937 rng(4242);
  const std::vector<std::string> pieces = {"cowstore", "/", "tank", "vm1", ";", ":", ",", "=",
                                           "copy_group", "wce", "thin_on_thin", "0", "1", "esx", "..", "a",
                                           "tcmur_cmd_time_out", " ", "x=y", "-", "."};
  for (int i = 0; i < 5000; ++i) {
    std::string s = rng() % 4 ? "cowstore/" : "";
    for (int k = rng() % 10; k > 0; --k) s += pieces[rng() % pieces.size()];
    v.push_back(s);
  }
  return v;
}

TEST(Agreement, CowctlAndTheHandlerReadTheSameCfgstrings) {
  for (const std::string& s : CfgstringCorpus()) {
    common::LunSpec spec;
    std::string why;
    const bool handler_ok = common::ParseCfgstring(s, &spec, &why);
    // configfs shows dev_config with a trailing newline; cowctl reads that.
    for (const std::string& shown : {s, s + "\n"}) {
      const auto mine = cowctl::ParseCfgstring(shown);
      ASSERT_EQ(mine.has_value(), handler_ok) << "'" << s << "': " << why;
      if (!mine) continue;
      EXPECT_EQ(mine->pool, spec.pool);
      EXPECT_EQ(mine->lun, spec.lun);
      EXPECT_EQ(mine->options.count("copy_group") ? mine->options.at("copy_group") : "", spec.copy_group);
      EXPECT_EQ(mine->options.count("wce") == 1, spec.wce.has_value());
      EXPECT_EQ(mine->options.count("thin_on_thin") == 1, spec.thin_on_thin.has_value());
    }
  }
}

TEST(Agreement, TheHandlerReadsBackEveryCfgstringCowctlWrites) {
  std::mt19937 rng(7);
  const std::vector<std::string> names = {"tank", "vm1", "a.b", "x-y_z", std::string(64, 'n'), "G1"};
  for (int i = 0; i < 2000; ++i) {
    cowctl::Cfgstring c{names[rng() % names.size()], names[rng() % names.size()], {}};
    if (rng() % 2) c.options["copy_group"] = names[rng() % names.size()];
    if (rng() % 3 == 0) c.options["wce"] = rng() % 2 ? "1" : "0";
    if (rng() % 3 == 0) c.options["thin_on_thin"] = rng() % 2 ? "1" : "0";
    const std::string written = c.str();
    common::LunSpec spec;
    std::string why;
    ASSERT_TRUE(common::ParseCfgstring(written, &spec, &why)) << written << ": " << why;
    EXPECT_EQ(written, common::FormatCfgstring(spec));
    const auto back = cowctl::ParseCfgstring(written);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->pool, c.pool);
    EXPECT_EQ(back->lun, c.lun);
    EXPECT_EQ(back->options, c.options);
  }
}

TEST(Agreement, OneUuidText) {
  store::Uuid id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(store::UuidText(id), "00112233-4455-6677-8899-aabbccddeeff");
  EXPECT_EQ(cowctl::UuidString(id), store::UuidText(id));
  store::Uuid back{};
  ASSERT_TRUE(store::ParseUuidText(store::UuidText(id), &back));
  EXPECT_EQ(back, id);
  ASSERT_TRUE(store::ParseUuidText("00112233445566778899AABBCCDDEEFF", &back));
  EXPECT_EQ(back, id);
  EXPECT_FALSE(store::ParseUuidText("00112233-4455-6677-8899-aabbccddeef", &back));
  EXPECT_FALSE(store::ParseUuidText("0011223344-55-6677-8899-aabbccddeeff", &back));
  EXPECT_FALSE(store::ParseUuidText("g0112233445566778899aabbccddeeff", &back));
}

TEST(Agreement, OneBlockSizeAndAllocationUnitRule) {
  for (uint64_t bs = 0; bs <= 8192; ++bs) EXPECT_EQ(store::ValidBlockSize(bs), bs == 512 || bs == 4096);
  for (uint64_t au : {0ull, 1ull, 32768ull, 65535ull, 65536ull, 98304ull, 131072ull, 262144ull,
                      524288ull, 1048576ull, 1048577ull, 2097152ull, 1ull << 40}) {
    const bool power_of_two = au && (au & (au - 1)) == 0;
    EXPECT_EQ(store::ValidAllocationUnit(au), power_of_two && au >= 65536 && au <= 1048576) << au;
  }
}

}  // namespace
}  // namespace cowstore
