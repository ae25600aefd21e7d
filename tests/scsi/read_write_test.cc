// SPDX-License-Identifier: Apache-2.0
// READ/WRITE 6/10/12/16, VERIFY 10/16, WRITE AND VERIFY 10/16,
// SYNCHRONIZE CACHE 10/16.
#include <gtest/gtest.h>

#include "handler/scsi/cdb.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class ReadWriteTest : public ScsiTest {
 protected:
  uint64_t blocks() const { return kLunBytes / kBlock; }
};

TEST_F(ReadWriteTest, NeverWrittenReadsZeros) {
  EXPECT_EQ(Read(100, 8), Bytes(8 * kBlock, 0));
}

TEST_F(ReadWriteTest, EveryWriteSizeRoundTrips) {
  Bytes d1 = Pattern(2 * kBlock, 1);
  ASSERT_TRUE(IsGood(Exec(Cdb6(0x0A, 10, 2), d1)));
  Bytes out;
  ASSERT_TRUE(IsGood(ExecIn(Cdb6(0x08, 10, 2), 2 * kBlock, &out)));
  EXPECT_EQ(out, d1);
  Bytes d2 = Pattern(3 * kBlock, 2);
  ASSERT_TRUE(IsGood(Exec(Write10(20, 3, 0x08), d2)));  // FUA
  ASSERT_TRUE(IsGood(ExecIn(Read10(20, 3, 0x10), 3 * kBlock, &out)));  // DPO
  EXPECT_EQ(out, d2);
  Bytes d3 = Pattern(4 * kBlock, 3);
  ASSERT_TRUE(IsGood(Exec(Write12(30, 4), d3)));
  ASSERT_TRUE(IsGood(ExecIn(Read12(30, 4), 4 * kBlock, &out)));
  EXPECT_EQ(out, d3);
  Bytes d4 = Pattern(5 * kBlock, 4);
  ASSERT_TRUE(IsGood(Exec(Write16(blocks() - 5, 5), d4)));
  ASSERT_TRUE(IsGood(ExecIn(Read16(blocks() - 5, 5), 5 * kBlock, &out)));
  EXPECT_EQ(out, d4);
}

TEST_F(ReadWriteTest, Read6ZeroLengthMeans256Blocks) {
  Bytes out;
  CommandResult r = ExecIn(Cdb6(0x08, 0, 0), 256 * kBlock, &out);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(r.data_in_length, 256 * kBlock);
}

TEST_F(ReadWriteTest, ZeroTransferLengthIsGoodAndChangesNothing) {
  EXPECT_TRUE(IsGood(Exec(Write10(0, 0))));
  EXPECT_TRUE(IsGood(Exec(Read16(0, 0))));
  EXPECT_TRUE(IsGood(Exec(Read16(blocks(), 0))));
}

TEST_F(ReadWriteTest, BeyondEndIsLbaOutOfRange) {
  Bytes d = Pattern(2 * kBlock, 5);
  EXPECT_TRUE(HasSense(Exec(Write16(blocks() - 1, 2), d), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_EQ(Read(blocks() - 1, 1), Bytes(kBlock, 0));  // nothing written
  Bytes out;
  EXPECT_TRUE(HasSense(ExecIn(Read16(blocks(), 1), kBlock, &out), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(ExecIn(Read16(~0ull, 1), kBlock, &out), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(ExecIn(Read16(1ull << 63, 1), kBlock, &out), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(Read16(blocks() + 1, 0)), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
}

TEST_F(ReadWriteTest, ProtectFieldsRejected) {
  for (uint8_t prot = 1; prot < 8; ++prot) {
    CommandResult r = Exec(Write10(0, 1, static_cast<uint8_t>(prot << 5)), Bytes(kBlock, 1));
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
    EXPECT_TRUE(HasFieldPointer(r, true, 1, 7));
    Bytes out;
    r = ExecIn(Read16(0, 1, static_cast<uint8_t>(prot << 5)), kBlock, &out);
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  }
  EXPECT_EQ(Read(0, 1), Bytes(kBlock, 0));
}

TEST_F(ReadWriteTest, TransferAboveMaximumRejected) {
  const uint32_t max = lu_->limits().max_transfer_blocks;
  Bytes out;
  CommandResult r = ExecIn(Read16(0, max + 1), 0, &out);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 10));
}

TEST_F(ReadWriteTest, ShortDataOutRejectedWithoutWriting) {
  CommandResult r = Exec(Write10(0, 2), Bytes(kBlock, 7));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_EQ(Read(0, 2), Bytes(2 * kBlock, 0));
}

TEST_F(ReadWriteTest, ShortDataInBufferGetsWhatFits) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(2 * kBlock, 9))));
  Bytes out;
  CommandResult r = ExecIn(Read10(0, 2), kBlock + 100, &out);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(r.data_in_length, kBlock + 100);
  const Bytes full = Pattern(2 * kBlock, 9);
  EXPECT_EQ(out, Bytes(full.begin(), full.begin() + kBlock + 100));
}

TEST_F(ReadWriteTest, ScatteredIovecsWork) {
  Bytes data = Pattern(4 * kBlock, 11);
  std::vector<iovec> iov;
  for (size_t off = 0; off < data.size(); off += 300) {
    iov.push_back(iovec{data.data() + off, std::min<size_t>(300, data.size() - off)});
  }
  Bytes cdb = Write10(40, 4);
  ASSERT_TRUE(IsGood(lu_->Execute(cdb, iov)));
  Bytes back(4 * kBlock);
  std::vector<iovec> in;
  for (size_t off = 0; off < back.size(); off += 700) {
    in.push_back(iovec{back.data() + off, std::min<size_t>(700, back.size() - off)});
  }
  Bytes rcdb = Read10(40, 4);
  ASSERT_TRUE(IsGood(lu_->Execute(rcdb, in)));
  EXPECT_EQ(back, data);
}

TEST_F(ReadWriteTest, WriteCountsBlocks) {
  uint64_t before = lu_->counters().written_blocks.load();
  ASSERT_TRUE(IsGood(Write(0, Pattern(3 * kBlock, 1))));
  EXPECT_EQ(lu_->counters().written_blocks.load(), before + 3);
}

TEST_F(ReadWriteTest, VerifyMediumOnly) {
  EXPECT_TRUE(IsGood(Exec(Cdb10(0x2F, 0, 16))));
  EXPECT_TRUE(IsGood(Exec(Cdb16(0x8F, 0, 16))));
  EXPECT_TRUE(HasSense(Exec(Cdb16(0x8F, blocks() - 1, 2)), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
}

TEST_F(ReadWriteTest, VerifyBytchk1ComparesAndReportsOffset) {
  Bytes d = Pattern(4 * kBlock, 21);
  ASSERT_TRUE(IsGood(Write(8, d)));
  EXPECT_TRUE(IsGood(Exec(Cdb10(0x2F, 8, 4, 0x02), d)));
  Bytes bad = d;
  bad[2 * kBlock + 17] ^= 0xFF;
  CommandResult r = Exec(Cdb16(0x8F, 8, 4, 0x02), bad);
  EXPECT_TRUE(HasSense(r, SenseKey::kMiscompare, asc::kMiscompareDuringVerify));
  EXPECT_TRUE(r.information_valid());
  EXPECT_EQ(r.information(), 2 * kBlock + 17);
}

TEST_F(ReadWriteTest, VerifyBytchk3ComparesOneBlockAgainstEach) {
  Bytes blk = Pattern(kBlock, 22);
  Bytes d;
  for (int i = 0; i < 3; ++i) d.insert(d.end(), blk.begin(), blk.end());
  ASSERT_TRUE(IsGood(Write(50, d)));
  EXPECT_TRUE(IsGood(Exec(Cdb10(0x2F, 50, 3, 0x06), blk)));
  CommandResult r = Exec(Cdb10(0x2F, 50, 4, 0x06), blk);  // 4th block is zeros
  EXPECT_TRUE(HasSense(r, SenseKey::kMiscompare, asc::kMiscompareDuringVerify));
  EXPECT_EQ(r.information(), 3 * kBlock);
}

TEST_F(ReadWriteTest, VerifyReservedBytchkAndProtectRejected) {
  CommandResult r = Exec(Cdb10(0x2F, 0, 1, 0x04));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 2));
  EXPECT_TRUE(HasSense(Exec(Cdb10(0x2F, 0, 1, 0x20)), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasSense(Exec(Cdb10(0x2F, 0, 2, 0x02), Bytes(kBlock, 0)), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));  // data-out too short
}

TEST_F(ReadWriteTest, WriteAndVerifyWritesDurably) {
  Bytes d = Pattern(2 * kBlock, 31);
  ASSERT_TRUE(IsGood(Exec(Cdb10(0x2E, 70, 2, 0x02), d)));
  EXPECT_EQ(Read(70, 2), d);
  Bytes e = Pattern(2 * kBlock, 32);
  ASSERT_TRUE(IsGood(Exec(Cdb16(0x8E, 72, 2), e)));
  EXPECT_EQ(Read(72, 2), e);
  EXPECT_TRUE(HasSense(Exec(Cdb16(0x8E, 72, 2, 0x04), e), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasSense(Exec(Cdb16(0x8E, 72, 2, 0x40), e), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasSense(Exec(Cdb16(0x8E, blocks() - 1, 2), e), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
}

TEST_F(ReadWriteTest, SynchronizeCache) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(kBlock, 1))));
  EXPECT_TRUE(IsGood(Exec(Cdb10(0x35, 0, 0))));
  EXPECT_TRUE(IsGood(Exec(Cdb16(0x91, 0, 0, 0x02))));
  EXPECT_TRUE(IsGood(Exec(Cdb16(0x91, blocks() - 1, 1))));
  EXPECT_TRUE(HasSense(Exec(Cdb16(0x91, blocks() - 1, 2)), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(Cdb10(0x35, static_cast<uint32_t>(blocks() + 1), 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
}

TEST_F(ReadWriteTest, BufferedWritesBecomeDurableOnSynchronizeCache) {
  lu_->set_write_cache_enabled(true);
  ASSERT_TRUE(IsGood(Write(0, Pattern(kBlock, 1))));
  ASSERT_TRUE(IsGood(Exec(Cdb10(0x35, 0, 0))));
  EXPECT_EQ(env_.unsynced_sectors("/pool0"), 0u);
}

}  // namespace
}  // namespace cowstore::scsi::testing
