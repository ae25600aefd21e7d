// SPDX-License-Identifier: Apache-2.0
// COMPARE AND WRITE: success, miscompare sense with offset, unwritten
// ranges compare as zeros, limits and malformed commands change nothing.
#include <gtest/gtest.h>

#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class CompareAndWriteTest : public ScsiTest {
 protected:
  Bytes Caw(const Bytes& compare, const Bytes& write) {
    Bytes d = compare;
    d.insert(d.end(), write.begin(), write.end());
    return d;
  }
};

TEST_F(CompareAndWriteTest, MatchingDataIsReplaced) {
  Bytes old = Pattern(kBlock, 1), neu = Pattern(kBlock, 2);
  ASSERT_TRUE(IsGood(Write(10, old)));
  ASSERT_TRUE(IsGood(Exec(CompareAndWrite(10, 1), Caw(old, neu))));
  EXPECT_EQ(Read(10, 1), neu);
  EXPECT_EQ(lu_->counters().compare_and_writes.load(), 1u);
}

TEST_F(CompareAndWriteTest, UnwrittenRangeComparesAsZeros) {
  Bytes neu = Pattern(kBlock, 3);
  ASSERT_TRUE(IsGood(Exec(CompareAndWrite(5000, 1), Caw(Bytes(kBlock, 0), neu))));
  EXPECT_EQ(Read(5000, 1), neu);
}

TEST_F(CompareAndWriteTest, MiscompareReportsFirstDifferingByteAndWritesNothing) {
  Bytes old = Pattern(4 * kBlock, 4);
  ASSERT_TRUE(IsGood(Write(20, old)));
  Bytes cmp = old;
  cmp[kBlock * 2 + 99] ^= 0x55;
  CommandResult r = Exec(CompareAndWrite(20, 4), Caw(cmp, Pattern(4 * kBlock, 5)));
  EXPECT_TRUE(HasSense(r, SenseKey::kMiscompare, asc::kMiscompareDuringVerify));
  EXPECT_TRUE(r.information_valid());
  EXPECT_EQ(r.information(), kBlock * 2 + 99);
  EXPECT_EQ(Read(20, 4), old);
  EXPECT_EQ(lu_->counters().miscompares.load(), 1u);
}

TEST_F(CompareAndWriteTest, MiscompareAtByteZero) {
  CommandResult r = Exec(CompareAndWrite(0, 1), Caw(Bytes(kBlock, 1), Bytes(kBlock, 2)));
  EXPECT_TRUE(HasSense(r, SenseKey::kMiscompare, asc::kMiscompareDuringVerify));
  EXPECT_TRUE(r.information_valid());
  EXPECT_EQ(r.information(), 0u);
}

TEST_F(CompareAndWriteTest, FuaAndDpoAccepted) {
  Bytes neu = Pattern(kBlock, 6);
  lu_->set_write_cache_enabled(true);
  ASSERT_TRUE(IsGood(Exec(CompareAndWrite(7, 1, 0x18), Caw(Bytes(kBlock, 0), neu))));
  EXPECT_EQ(Read(7, 1), neu);
}

TEST_F(CompareAndWriteTest, MaximumLengthAcceptedAboveRejected) {
  const uint32_t max = lu_->limits().max_compare_and_write_blocks;
  Bytes zeros(size_t{max} * kBlock, 0);
  ASSERT_TRUE(IsGood(Exec(CompareAndWrite(0, static_cast<uint8_t>(max)),
                          Caw(zeros, Pattern(zeros.size(), 7)))));
  if (max < 255) {
    Bytes z2(size_t{max + 1} * kBlock, 0);
    CommandResult r = Exec(CompareAndWrite(1000, static_cast<uint8_t>(max + 1)), Caw(z2, z2));
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
    EXPECT_TRUE(HasFieldPointer(r, true, 13));
  }
}

TEST_F(CompareAndWriteTest, ZeroBlocksIsGoodNoop) {
  EXPECT_TRUE(IsGood(Exec(CompareAndWrite(0, 0))));
}

TEST_F(CompareAndWriteTest, WrongDataOutSizeRejected) {
  CommandResult r = Exec(CompareAndWrite(0, 1), Bytes(4 * kBlock, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  r = Exec(CompareAndWrite(0, 3), Bytes(4 * kBlock, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_EQ(Read(0, 3), Bytes(3 * kBlock, 0));
}

TEST_F(CompareAndWriteTest, BeyondEndAndProtectRejected) {
  const uint64_t n = kLunBytes / kBlock;
  EXPECT_TRUE(HasSense(Exec(CompareAndWrite(n, 1), Bytes(2 * kBlock, 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(CompareAndWrite(n - 1, 2), Bytes(4 * kBlock, 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
  CommandResult r = Exec(CompareAndWrite(0, 1, 0x20), Bytes(2 * kBlock, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 7));
}

}  // namespace
}  // namespace cowstore::scsi::testing
