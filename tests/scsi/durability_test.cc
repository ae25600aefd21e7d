// SPDX-License-Identifier: Apache-2.0
// WCE=0 means every GOOD is durable: the test cuts power right after the
// command (the disk dies, unsynced sectors are dropped), reopens the pool and
// checks the command's effect is there. WCE=1 leaves it to FUA and
// SYNCHRONIZE CACHE.
#include <gtest/gtest.h>

#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kAuBlocks = (1u << 20) / 512;

// Every case runs three ways (Route): blocking, with a deferred commit
// made right after the command, and through a CommandPipeline.
class DurabilityTest : public ScsiTest, public ::testing::WithParamInterface<Route> {
 protected:
  void SetUp() override {
    ScsiTest::SetUp();
    route_ = GetParam();
  }
};

TEST_P(DurabilityTest, WriteSurvivesPowerLossWithCacheOff) {
  ASSERT_TRUE(IsGood(Write(5, Pattern(4 * kBlock, 1))));
  CrashAndReopen();
  EXPECT_EQ(Read(5, 4), Pattern(4 * kBlock, 1));
}

// The harness really drops what was not made durable (so the tests above
// prove something).
TEST_P(DurabilityTest, BufferedWriteWithoutSyncIsLost) {
  lu_->set_write_cache_enabled(true);
  ASSERT_TRUE(IsGood(Write(30, Pattern(kBlock, 9))));
  CrashAndReopen();
  EXPECT_EQ(Read(30, 1), Bytes(kBlock, 0));
}

TEST_P(DurabilityTest, FuaAndSynchronizeCacheWithCacheOn) {
  lu_->set_write_cache_enabled(true);
  ASSERT_TRUE(IsGood(Exec(Write10(9, 1, 0x08), Pattern(kBlock, 2))));  // FUA
  ASSERT_TRUE(IsGood(Write(20, Pattern(kBlock, 3))));
  ASSERT_TRUE(IsGood(Exec(Cdb10(0x35, 0, 0))));
  CrashAndReopen();
  EXPECT_EQ(Read(9, 1), Pattern(kBlock, 2));
  EXPECT_EQ(Read(20, 1), Pattern(kBlock, 3));
}

TEST_P(DurabilityTest, WriteAndVerifySurvivesEvenWithTheCacheOn) {
  lu_->set_write_cache_enabled(true);  // WRITE AND VERIFY is durable regardless
  ASSERT_TRUE(IsGood(Exec(cdb::WriteAndVerify16(40, 2), Pattern(2 * kBlock, 6))));
  CrashAndReopen();
  EXPECT_EQ(Read(40, 2), Pattern(2 * kBlock, 6));
}

TEST_P(DurabilityTest, CompareAndWriteSurvives) {
  Bytes d(2 * kBlock, 0);
  d[kBlock] = 7;
  ASSERT_TRUE(IsGood(Exec(CompareAndWrite(3, 1), d)));
  CrashAndReopen();
  EXPECT_EQ(Read(3, 1)[0], 7);
}

TEST_P(DurabilityTest, MultiDescriptorUnmapSurvives) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(4 * kAuBlocks * kBlock, 3))));
  Bytes p = UnmapParams({{0, kAuBlocks}, {2 * kAuBlocks, kAuBlocks}, {kAuBlocks + 1, 3}});
  ASSERT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
  CrashAndReopen();
  EXPECT_EQ(Read(0, kAuBlocks), Bytes(kAuBlocks * kBlock, 0));
  EXPECT_EQ(Read(kAuBlocks + 1, 3), Bytes(3 * kBlock, 0));
  EXPECT_EQ(Read(2 * kAuBlocks, 1), Bytes(kBlock, 0));
  EXPECT_EQ(pool_->GetLun("lun0")->mapped_bytes, 2u << 20);
}

TEST_P(DurabilityTest, LongPatternWriteSameSurvives) {
  ASSERT_TRUE(IsGood(Exec(WriteSame16(0, 3 * kAuBlocks + 5), Pattern(kBlock, 4))));
  CrashAndReopen();
  EXPECT_EQ(Read(3 * kAuBlocks + 4, 1), Pattern(kBlock, 4));
  EXPECT_EQ(Read(0, 1), Pattern(kBlock, 4));
}

TEST_P(DurabilityTest, MultiSegmentExtendedCopySurvives) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(2 * kAuBlocks * kBlock, 5))));
  XcopyList l;
  l.cscds.push_back(IdentCscd(lu_->naa()));
  l.segments = {BlockSegment(0, 0, kAuBlocks, 0, 8 * kAuBlocks),
                BlockSegment(0, 0, kAuBlocks, kAuBlocks, 9 * kAuBlocks),
                BlockSegment(0, 0, 7, 3, 20 * kAuBlocks + 1)};
  Bytes p = l.Build();
  ASSERT_TRUE(IsGood(Exec(ExtendedCopy(static_cast<uint32_t>(p.size())), p)));
  const Bytes src = Read(0, 2 * kAuBlocks);
  CrashAndReopen();
  EXPECT_EQ(Read(8 * kAuBlocks, 2 * kAuBlocks), src);
  EXPECT_EQ(Read(20 * kAuBlocks + 1, 7), Bytes(src.begin() + 3 * kBlock, src.begin() + 10 * kBlock));
}

TEST_P(DurabilityTest, TurningCacheOffMakesEarlierWritesDurable) {
  lu_->set_write_cache_enabled(true);
  ASSERT_TRUE(IsGood(Write(5, Pattern(4 * kBlock, 1))));
  Bytes page;
  ASSERT_TRUE(IsGood(ExecIn({0x1A, 0x08, 0x08, 0, 255, 0}, 255, &page)));
  page[0] = 0;
  page[2] = 0;
  page[6] &= ~0x04;
  ASSERT_TRUE(IsGood(Exec({0x15, 0x10, 0, 0, static_cast<uint8_t>(page.size()), 0}, page)));
  CrashAndReopen();
  EXPECT_EQ(Read(5, 4), Pattern(4 * kBlock, 1));
}

INSTANTIATE_TEST_SUITE_P(Routes, DurabilityTest,
                         ::testing::Values(Route::kBlocking, Route::kDeferred, Route::kPipeline),
                         [](const ::testing::TestParamInfo<Route>& i) { return RouteName(i.param); });

}  // namespace
}  // namespace cowstore::scsi::testing
