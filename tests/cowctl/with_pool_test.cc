// SPDX-License-Identifier: Apache-2.0
// WithPool (tools/cowctl/cmd_common.h) retries on the store's kBusy code, as
// the store or the handler's control reply gives it, and on nothing else.
#include <gtest/gtest.h>

#include <filesystem>

#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "tests/cowctl/fake_tree.h"
#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

using store::Code;
using store::Status;

struct APool : ::testing::Test {
  testing::TempDir dir;
  Context ctx;
  void SetUp() override {
    ctx.pool_dir = dir.path() + "/pools";
    ctx.run_dir = dir.path() + "/run";
    std::filesystem::create_directories(ctx.pool_dir);
    store::PoolOptions po;
    po.size_bytes = 64ull << 20;
    auto r = store::Pool::Create(store::DefaultEnv(), ctx.pool_dir + "/tank", po);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r.value()->Close().ok());
  }
};

TEST_F(APool, FailKeepsTheStoresCode) {
  try {
    Fail(Status(Code::kBusy, "LUN a is open"), "deleting LUN tank/a");
    FAIL() << "Fail returned";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.code(), Code::kBusy);
    EXPECT_NE(std::string(e.what()).find("deleting LUN tank/a"), std::string::npos) << e.what();
  }
}

TEST_F(APool, ABusyStoreIsAskedAgainUntilItAnswers) {
  int calls = 0;
  int got = WithPool(ctx, "tank", [&](PoolHandle&) {
    if (++calls < 3) Fail(Status(Code::kBusy, "LUN a is open"), "deleting LUN tank/a");
    return 7;
  });
  EXPECT_EQ(got, 7);
  EXPECT_EQ(calls, 3);
}

// The words "in use" in a refusal (a mounted device, here) are no busy code:
// the refusal is final and said at once, not after 25 tries and 5 seconds.
// One call proves it; no clock is read (a loaded CI machine is no measure).
TEST_F(APool, ARefusalThatSaysInUseIsNotRetried) {
  int calls = 0;
  EXPECT_THROW(WithPool(ctx, "tank",
                        [&](PoolHandle&) -> int {
                          ++calls;
                          Fail(Status(Code::kInvalidArgument,
                                      "/dev/sdb is in use (mounted, or held by another program)"),
                               "exporting tank/a to /dev/sdb");
                        }),
               StoreError);
  EXPECT_EQ(calls, 1);
}

TEST_F(APool, CowctlsOwnRefusalsAreNotRetried) {
  int calls = 0;
  EXPECT_THROW(WithPool(ctx, "tank",
                        [&](PoolHandle&) -> int {
                          ++calls;
                          throw UserError("shrinking tank/a discards data: the LUN is in use");
                        }),
               UserError);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace cowstore::cowctl
