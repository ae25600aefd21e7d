// SPDX-License-Identifier: Apache-2.0
// INQUIRY standard data and VPD pages 00, 80, 83, 8F, B0, B1, B2.
#include <gtest/gtest.h>

#include <cstring>

#include "handler/scsi/cdb.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class InquiryTest : public ScsiTest {
 protected:
  Bytes Vpd(uint8_t page, uint16_t alloc = 1024) {
    Bytes out;
    EXPECT_TRUE(IsGood(ExecIn(Inquiry(true, page, alloc), alloc, &out)));
    return out;
  }
};

TEST_F(InquiryTest, StandardDataHas3pcHisupAndSpc4) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Inquiry(false, 0, 260), 260, &d)));
  ASSERT_GE(d.size(), 36u);
  EXPECT_EQ(d[0], 0x00);
  EXPECT_EQ(d[2], 0x06);
  EXPECT_EQ(d[3] & 0x0F, 2);
  EXPECT_TRUE(d[3] & 0x10);
  EXPECT_TRUE(d[5] & 0x08);  // 3PC
  EXPECT_EQ(size_t{d[4]} + 5, d.size());
  EXPECT_EQ(std::string(d.begin() + 8, d.begin() + 16), "COWSTORE");
  EXPECT_EQ(std::string(d.begin() + 16, d.begin() + 32), "cowstore        ");
}

TEST_F(InquiryTest, AllocationLengthTruncates) {
  Bytes d;
  CommandResult r = ExecIn(Inquiry(false, 0, 5), 260, &d);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(r.data_in_length, 5u);
}

TEST_F(InquiryTest, PageCodeWithoutEvpdRejected) {
  CommandResult r = Exec(Inquiry(false, 0x83, 255));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 2));
}

TEST_F(InquiryTest, CmddtRejected) {
  Bytes cdb = Inquiry(false, 0, 255);
  cdb[1] = 0x02;
  EXPECT_TRUE(HasSense(Exec(cdb), SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(InquiryTest, UnknownVpdPageRejected) {
  CommandResult r = Exec(Inquiry(true, 0x86, 255));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 2));
}

TEST_F(InquiryTest, SupportedPagesSorted) {
  Bytes d = Vpd(0x00);
  Bytes want = {0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2};
  ASSERT_EQ(d.size(), 4 + want.size());
  EXPECT_EQ(Bytes(d.begin() + 4, d.end()), want);
}

TEST_F(InquiryTest, UnitSerialIsConfiguredWwn) {
  Bytes d = Vpd(0x80);
  EXPECT_EQ(std::string(d.begin() + 4, d.end()), lu_->config().unit_serial);
}

TEST_F(InquiryTest, DeviceIdentificationHasNaa6OfTheSerial) {
  Bytes d = Vpd(0x83);
  ASSERT_GE(d.size(), 24u);
  EXPECT_EQ(Be16(&d[2]), d.size() - 4);
  EXPECT_EQ(d[4], 0x01);  // binary
  EXPECT_EQ(d[5], 0x03);  // LU, NAA
  EXPECT_EQ(d[7], 16);
  EXPECT_EQ(0, std::memcmp(&d[8], lu_->naa().data(), 16));
  EXPECT_EQ(d[8] >> 4, 6);
  // T10 vendor ID designator follows.
  EXPECT_EQ(d[24] & 0x0F, 0x02);
  EXPECT_EQ(d[25] & 0x0F, 0x01);
}

TEST_F(InquiryTest, ThirdPartyCopyListsXcopyAndReceiveCopyResults) {
  Bytes d = Vpd(0x8F);
  ASSERT_GE(Be16(&d[2]), 0x24);  // what Windows looks for
  EXPECT_EQ(Be16(&d[2]), d.size() - 4);
  // First descriptor: supported commands.
  EXPECT_EQ(Be16(&d[4]), 0x0001);
  const uint8_t list_len = d[8];
  Bytes list(d.begin() + 9, d.begin() + 9 + list_len);
  Bytes want = {0x83, 1, 0x00, 0x84, 3, 0x00, 0x03, 0x04};
  EXPECT_EQ(list, want);
  // Every descriptor length is a multiple of 4 and the walk ends exactly.
  size_t off = 4;
  int descriptors = 0;
  while (off < d.size()) {
    uint16_t len = Be16(&d[off + 2]);
    EXPECT_EQ(len % 4, 0) << Be16(&d[off]);
    off += 4 + len;
    ++descriptors;
  }
  EXPECT_EQ(off, d.size());
  EXPECT_GE(descriptors, 4);
}

// SPC-4 Parameter Data descriptor (0x0004): 4 reserved bytes, then the CSCD
// and segment counts at 8 and 10 and the list length at 12. sg_vpd -p tpc
// once showed "0 segment descriptors" because the reserved field was short.
TEST_F(InquiryTest, ThirdPartyCopyParameterDataAtSpcOffsets) {
  Bytes d = Vpd(0x8F);
  size_t off = 4;
  while (off + 4 <= d.size() && Be16(&d[off]) != 0x0004) off += 4 + Be16(&d[off + 2]);
  ASSERT_LT(off + 4 + 0x1C, d.size() + 1) << "no Parameter Data descriptor";
  const uint8_t* p = &d[off];
  EXPECT_EQ(Be16(p + 2), 0x1C);
  EXPECT_EQ(Be32(p + 4), 0u);  // reserved
  const Limits l = lu_->limits();
  EXPECT_EQ(Be16(p + 8), l.max_cscd_descriptors);
  EXPECT_EQ(Be16(p + 10), l.max_segment_descriptors);
  EXPECT_EQ(Be32(p + 12), l.max_descriptor_list_length);
  EXPECT_GE(l.max_segment_descriptors, 64);
  EXPECT_GE(l.max_cscd_descriptors, 64);
}

TEST_F(InquiryTest, BlockLimitsConsistentWithWhatIsAccepted) {
  Bytes d = Vpd(0xB0);
  ASSERT_EQ(d.size(), 64u);
  EXPECT_EQ(d[3], 0x3C);
  EXPECT_EQ(d[4] & 1, 1);  // WSNZ
  const Limits l = lu_->limits();
  EXPECT_EQ(d[5], l.max_compare_and_write_blocks);
  EXPECT_GE(d[5], 1);
  EXPECT_EQ(Be32(&d[8]), l.max_transfer_blocks);
  EXPECT_EQ(Be32(&d[20]), l.max_unmap_blocks);
  EXPECT_LE(Be32(&d[20]), 1u << 20);
  EXPECT_EQ(Be32(&d[24]), l.max_unmap_descriptors);
  EXPECT_EQ(Be32(&d[28]), (1u << 20) / kBlock);  // one AU, divides 1 MiB
  EXPECT_TRUE(d[32] & 0x80);                      // UGAVALID
  EXPECT_EQ(Be64(&d[36]), l.max_write_same_blocks);
  EXPECT_GE(Be64(&d[36]) * kBlock, 1u << 20);  // covers ESXi's 1 MiB WRITE SAME
}

TEST_F(InquiryTest, BlockDeviceCharacteristicsNonRotating) {
  Bytes d = Vpd(0xB1);
  ASSERT_EQ(d.size(), 64u);
  EXPECT_EQ(Be16(&d[4]), 1);
}

TEST_F(InquiryTest, LogicalBlockProvisioningThin) {
  Bytes d = Vpd(0xB2);
  ASSERT_EQ(d.size(), 8u);
  EXPECT_TRUE(d[5] & 0x80);  // LBPU
  EXPECT_TRUE(d[5] & 0x40);  // LBPWS
  EXPECT_TRUE(d[5] & 0x20);  // LBPWS10
  EXPECT_TRUE(d[5] & 0x04);  // LBPRZ
  EXPECT_EQ(d[6] & 0x07, 2);  // thin
}

TEST_F(InquiryTest, ReadCapacity10And16) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Cdb10(0x25, 0, 0), 8, &d)));
  ASSERT_EQ(d.size(), 8u);
  EXPECT_EQ(Be32(&d[0]), kLunBytes / kBlock - 1);
  EXPECT_EQ(Be32(&d[4]), kBlock);
  ASSERT_TRUE(IsGood(ExecIn(ReadCapacity16(32), 32, &d)));
  ASSERT_EQ(d.size(), 32u);
  EXPECT_EQ(Be64(&d[0]), kLunBytes / kBlock - 1);
  EXPECT_EQ(Be32(&d[8]), kBlock);
  EXPECT_EQ(d[12] & 1, 0);     // PROT_EN
  EXPECT_TRUE(d[14] & 0x80);   // LBPME
  EXPECT_TRUE(d[14] & 0x40);   // LBPRZ
}

TEST_F(InquiryTest, ReadCapacity16AllocationLength) {
  Bytes d;
  CommandResult r = ExecIn(ReadCapacity16(12), 32, &d);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(d.size(), 12u);
}

TEST_F(InquiryTest, ReadCapacity10LbaWithoutPmiRejected) {
  CommandResult r = Exec(Cdb10(0x25, 5, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(InquiryTest, ResizeRaisesCapacityChangedAndReportsNewSize) {
  ASSERT_TRUE(lu_->Resize(2 * kLunBytes).ok());
  EXPECT_TRUE(HasSense(Exec(Bytes(6, 0)), SenseKey::kUnitAttention, asc::kCapacityDataHasChanged));
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(ReadCapacity16(32), 32, &d)));
  EXPECT_EQ(Be64(&d[0]), 2 * kLunBytes / kBlock - 1);
}

}  // namespace
}  // namespace cowstore::scsi::testing
