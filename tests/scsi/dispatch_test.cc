// SPDX-License-Identifier: Apache-2.0
// Execute(): opcode dispatch, CDB length, NACA, unit attentions, TUR,
// REQUEST SENSE, START STOP UNIT, PREVENT ALLOW MEDIUM REMOVAL.
#include <gtest/gtest.h>

#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class DispatchTest : public ScsiTest {};

TEST_F(DispatchTest, TestUnitReadyIsGood) { EXPECT_TRUE(IsGood(Exec(Bytes(6, 0)))); }

TEST_F(DispatchTest, UnknownOpcodeIsInvalidCommandOperationCode) {
  for (uint8_t op : {0x01, 0x04, 0x1C, 0x3B, 0x48, 0x7F, 0xA0, 0xC0, 0xFF}) {
    Bytes cdb(16, 0);
    cdb[0] = op;
    CommandResult r = Exec(cdb);
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidCommandOperationCode))
        << std::hex << int(op);
    EXPECT_TRUE(HasFieldPointer(r, true, 0, 7));
  }
}

TEST_F(DispatchTest, UnsupportedServiceActionIsInvalidFieldInCdb) {
  Bytes cdb(16, 0);
  cdb[0] = 0x9E;
  cdb[1] = 0x11;
  CommandResult r = Exec(cdb);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 4));
  cdb[0] = 0x83;
  cdb[1] = 0x01;  // LID4 EXTENDED COPY not implemented
  EXPECT_TRUE(HasSense(Exec(cdb), SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(DispatchTest, ShortCdbIsInvalidFieldInCdb) {
  Bytes cdb = {0x28, 0, 0, 0};
  CommandResult r = Exec(cdb);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasSense(Exec(Bytes{}), SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(DispatchTest, NacaBitRejected) {
  Bytes cdb = Read10(0, 1);
  cdb[9] = 0x04;
  CommandResult r = Exec(cdb);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 9, 2));
}

TEST_F(DispatchTest, UnitAttentionReportedOnceAndSkippedByInquiry) {
  lu_->RaiseUnitAttention(UnitAttention::kPowerOnResetOccurred);
  Bytes out;
  EXPECT_TRUE(IsGood(ExecIn(Inquiry(false, 0, 96), 96, &out)));  // INQUIRY does not consume
  EXPECT_TRUE(HasSense(Exec(Bytes(6, 0)), SenseKey::kUnitAttention, asc::kPowerOnResetOccurred));
  EXPECT_TRUE(IsGood(Exec(Bytes(6, 0))));
}

TEST_F(DispatchTest, DuplicateUnitAttentionQueuedOnce) {
  lu_->RaiseUnitAttention(UnitAttention::kCapacityDataHasChanged);
  lu_->RaiseUnitAttention(UnitAttention::kCapacityDataHasChanged);
  EXPECT_FALSE(IsGood(Exec(Bytes(6, 0))));
  EXPECT_TRUE(IsGood(Exec(Bytes(6, 0))));
}

TEST_F(DispatchTest, PowerOnUnitAttentionWhenConfigured) {
  LunConfig c = Config("0123abcd-0000-0000-0000-000000000009");
  c.power_on_unit_attention = true;
  auto lu = AddLu(*pool_, "p", 1 << 20, c);
  EXPECT_TRUE(HasSense(Exec(*lu, Bytes(6, 0)), SenseKey::kUnitAttention, asc::kPowerOnOccurred));
  EXPECT_TRUE(IsGood(Exec(*lu, Bytes(6, 0))));
}

TEST_F(DispatchTest, RequestSenseReturnsAndConsumesUnitAttention) {
  lu_->RaiseUnitAttention(UnitAttention::kCapacityDataHasChanged);
  Bytes out;
  Bytes cdb = {0x03, 0, 0, 0, 252, 0};
  ASSERT_TRUE(IsGood(ExecIn(cdb, 252, &out)));
  ASSERT_EQ(out.size(), 18u);
  EXPECT_EQ(out[0], 0x70);
  EXPECT_EQ(out[2] & 0x0F, 0x6);
  EXPECT_EQ(out[12], 0x2A);
  EXPECT_EQ(out[13], 0x09);
  ASSERT_TRUE(IsGood(ExecIn(cdb, 252, &out)));
  EXPECT_EQ(out[2] & 0x0F, 0x0);  // NO SENSE now
  EXPECT_EQ(out[12], 0x00);
}

TEST_F(DispatchTest, RequestSenseDescriptorFormatRejected) {
  Bytes cdb = {0x03, 0x01, 0, 0, 252, 0};
  CommandResult r = Exec(cdb);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 0));
}

TEST_F(DispatchTest, RequestSenseHonoursAllocationLength) {
  Bytes out;
  Bytes cdb = {0x03, 0, 0, 0, 8, 0};
  ASSERT_TRUE(IsGood(ExecIn(cdb, 64, &out)));
  EXPECT_EQ(out.size(), 8u);
}

TEST_F(DispatchTest, StartStopUnitAcceptsStartAndStop) {
  EXPECT_TRUE(IsGood(Exec({0x1B, 0, 0, 0, 0x01, 0})));
  EXPECT_TRUE(IsGood(Exec({0x1B, 0x01, 0, 0, 0x00, 0})));
  EXPECT_TRUE(IsGood(Exec(Bytes(6, 0))));  // still ready
}

TEST_F(DispatchTest, StartStopUnitRejectsLoejAndPowerConditions) {
  CommandResult r = Exec({0x1B, 0, 0, 0, 0x02, 0});
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 4, 1));
  r = Exec({0x1B, 0, 0, 0, 0x30, 0});
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 4, 7));
  EXPECT_TRUE(HasSense(Exec({0x1B, 0, 0, 0x01, 0x01, 0}), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
}

TEST_F(DispatchTest, PreventAllowMediumRemoval) {
  EXPECT_TRUE(IsGood(Exec({0x1E, 0, 0, 0, 0x01, 0})));
  EXPECT_TRUE(lu_->prevent_removal());
  EXPECT_TRUE(IsGood(Exec({0x1E, 0, 0, 0, 0x00, 0})));
  EXPECT_FALSE(lu_->prevent_removal());
  CommandResult r = Exec({0x1E, 0, 0, 0, 0x02, 0});
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 4, 1));
}

TEST_F(DispatchTest, CountersTrackCommandsAndCheckConditions) {
  uint64_t c0 = lu_->counters().commands.load();
  uint64_t e0 = lu_->counters().check_conditions.load();
  (void)Exec(Bytes(6, 0));
  Bytes bad(6, 0);
  bad[0] = 0x04;
  (void)Exec(bad);
  EXPECT_EQ(lu_->counters().commands.load(), c0 + 2);
  EXPECT_EQ(lu_->counters().check_conditions.load(), e0 + 1);
}

}  // namespace
}  // namespace cowstore::scsi::testing
