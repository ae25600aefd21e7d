// SPDX-License-Identifier: Apache-2.0
// check_config: what targetcli shows the administrator ("cfgstring invalid:
// <reason>") before anything is created.
#include <gtest/gtest.h>

#include <string>

#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

class CheckConfigTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank");
  }
  // Expects rejection with a reason containing `needle`.
  void ExpectRejected(const std::string& cfg, const std::string& needle) {
    std::string reason;
    EXPECT_FALSE(CheckConfig(cfg, &reason)) << cfg;
    EXPECT_NE(reason.find(needle), std::string::npos) << cfg << " -> " << reason;
  }
  void ExpectAccepted(const std::string& cfg) {
    std::string reason;
    EXPECT_TRUE(CheckConfig(cfg, &reason)) << cfg << " -> " << reason;
  }
};

TEST_F(CheckConfigTest, AcceptsPoolAndLun) { ExpectAccepted("cowstore/tank/vm1"); }

TEST_F(CheckConfigTest, AcceptsOptionsInEitherSeparatorStyle) {
  ExpectAccepted("cowstore/tank/vm1:copy_group=esx");
  ExpectAccepted("cowstore/tank/vm1:copy_group=esx,wce=1");
  ExpectAccepted("cowstore/tank/vm1;copy_group=esx;wce=0");
  ExpectAccepted("cowstore/tank/vm_1.a-b:wce=1");
}

// The runner's own per-command timeout: the runner strips it before open.
// With asynchronous completion (nr_threads 0) it would link every command
// into a list inside memory libtcmu frees when the handler completes the
// command, so only a timeout of 0 (off) is accepted then.
TEST_F(CheckConfigTest, TheRunnersOwnTimeoutOptionOnlyWhereItIsSafe) {
  ExpectAccepted("cowstore/tank/vm1;tcmur_cmd_time_out=0");
  if (handler().nr_threads > 0) {
    ExpectAccepted("cowstore/tank/vm1;tcmur_cmd_time_out=30");
    ExpectAccepted("cowstore/tank/vm1:copy_group=esx;tcmur_cmd_time_out=30");
    return;
  }
  ExpectRejected("cowstore/tank/vm1;tcmur_cmd_time_out=30", "tcmur_cmd_time_out is not supported");
  ExpectRejected("cowstore/tank/vm1:copy_group=esx;tcmur_cmd_time_out=30", "COWSTORE_COMPLETION=sync");
  ExpectRejected("cowstore/tank/vm1;tcmur_cmd_time_out=-1;wce=1", "tcmur_cmd_time_out");  // atoi: -1, on
  ExpectAccepted("cowstore/tank/vm1;tcmur_cmd_time_out=x");  // atoi: 0, off
}

TEST_F(CheckConfigTest, RejectsOtherSubtype) {
  ExpectRejected("qcow/tank/vm1", "does not start with 'cowstore/'");
  ExpectRejected("tank/vm1", "expected cowstore/<pool>/<lun>");
  ExpectRejected("", "does not start with");
}

TEST_F(CheckConfigTest, RejectsMissingLun) {
  ExpectRejected("cowstore/tank", "names no LUN");
  ExpectRejected("cowstore/tank/", "LUN name is empty");
  ExpectRejected("cowstore//vm1", "pool name is empty");
}

TEST_F(CheckConfigTest, RejectsPathsThatWouldLeaveThePoolDirectory) {
  ExpectRejected("cowstore/../etc/vm1", "must not start with '.'");
  ExpectRejected("cowstore/tank/../../x", "more than two path components");
  ExpectRejected("cowstore/tank/sub/vm1", "more than two path components");
  ExpectRejected("cowstore/a..b/vm1", "must not contain \"..\"");
  ExpectRejected("cowstore/.hidden/vm1", "must not start with '.'");
  ExpectRejected("cowstore/-x/vm1", "must not start with '.' or '-'");
  ExpectRejected("cowstore/tank/vm1\\x", "contains");
}

TEST_F(CheckConfigTest, RejectsBadCharactersAndSaysWhichOnes) {
  ExpectRejected("cowstore/ta nk/vm1", "contains ' '");
  ExpectRejected("cowstore/tank/vm$1", "contains '$'");
  ExpectRejected(std::string("cowstore/tank/vm\x01", 18), "\\x01");
}

TEST_F(CheckConfigTest, RejectsOverlongNames) {
  ExpectAccepted("cowstore/tank/" + std::string(64, 'a'));
  ExpectRejected("cowstore/tank/" + std::string(65, 'a'), "at most 64");
  ExpectRejected("cowstore/" + std::string(65, 'p') + "/vm1", "at most 64");
}

TEST_F(CheckConfigTest, RejectsCfgstringTheKernelWouldTruncate) {
  std::string s = "cowstore/tank/vm1:copy_group=" + std::string(60, 'g');
  while (s.size() <= 255) s += ",wce=1";
  ExpectRejected(s, "at most 255");
}

TEST_F(CheckConfigTest, RejectsUnknownRepeatedAndMalformedOptions) {
  ExpectRejected("cowstore/tank/vm1:color=red", "unknown option 'color'");
  ExpectRejected("cowstore/tank/vm1:wce=2", "wce=0");
  ExpectRejected("cowstore/tank/vm1:wce=yes", "wce=0");
  ExpectRejected("cowstore/tank/vm1:wce", "has no value");
  ExpectRejected("cowstore/tank/vm1:wce=1,wce=0", "given twice");
  ExpectRejected("cowstore/tank/vm1:copy_group=a,copy_group=b", "given twice");
  ExpectRejected("cowstore/tank/vm1:copy_group=", "copy group name is empty");
  ExpectRejected("cowstore/tank/vm1:copy_group=a/b", "copy group name");
  ExpectRejected("cowstore/tank/vm1:", "gives no option");
  ExpectRejected("cowstore/tank/vm1:wce=1,", "ends with a separator");
  ExpectRejected("cowstore/tank/vm1:wce=1,,wce=0", "empty option");
  ExpectRejected("cowstore/tank/vm1;thin_on_thin=2", "thin_on_thin=0");
  ExpectRejected("cowstore/tank/vm1;thin_on_thin=off", "thin_on_thin=0");
  ExpectRejected("cowstore/tank/vm1;thin_on_thin=0;thin_on_thin=1", "given twice");
}

// thin_on_thin=0|1: whether the LUN reports its pool's filesystem falling
// short of the pool's growth as the soft threshold (default 1).
TEST_F(CheckConfigTest, AcceptsTheThinOnThinSwitch) {
  ExpectAccepted("cowstore/tank/vm1;thin_on_thin=0");
  ExpectAccepted("cowstore/tank/vm1;wce=1;thin_on_thin=1");
  ExpectAccepted("cowstore/tank/vm1:copy_group=g,thin_on_thin=0");
}

TEST_F(CheckConfigTest, RejectsMissingPoolNamingTheDirectory) {
  std::string reason;
  EXPECT_FALSE(CheckConfig("cowstore/nosuchpool/vm1", &reason));
  EXPECT_NE(reason.find("pool 'nosuchpool' does not exist"), std::string::npos) << reason;
  EXPECT_NE(reason.find(dir_ + "/nosuchpool"), std::string::npos) << reason;
  EXPECT_NE(reason.find("COWSTORE_POOL_DIR"), std::string::npos) << reason;
}

TEST_F(CheckConfigTest, NullCfgstringIsRejectedNotACrash) {
  char* why = nullptr;
  EXPECT_FALSE(handler().check_config(nullptr, &why));
  ASSERT_NE(why, nullptr);
  std::free(why);
  // A null reason pointer must not crash either.
  EXPECT_FALSE(handler().check_config("bogus", nullptr));
}

}  // namespace
}  // namespace cowstore::plugin_test
