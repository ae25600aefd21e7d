// SPDX-License-Identifier: Apache-2.0
// REPORT SUPPORTED OPERATION CODES: every reporting option, RCTD, and that
// the report matches what Execute() accepts.
#include <gtest/gtest.h>

#include <set>

#include "handler/scsi/cdb.h"
#include "handler/scsi/opcodes.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class ReportOpcodesTest : public ScsiTest {
 protected:
  Bytes Rsoc(uint8_t options, uint8_t op, uint16_t sa, bool rctd = false, uint32_t alloc = 8192) {
    Bytes c(12, 0);
    c[0] = 0xA3;
    c[1] = 0x0C;
    c[2] = static_cast<uint8_t>(options | (rctd ? 0x80 : 0));
    c[3] = op;
    PutBe16(&c[4], sa);
    PutBe32(&c[6], alloc);
    return c;
  }
};

// The table's kPoolMetadataWork flag (what CommandPipeline's serial lane
// takes in the plugin): EXTENDED COPY(LID1), WRITE SAME(10/16) and UNMAP,
// and nothing else, whatever the other bytes; an empty CDB, an unknown
// opcode or service action is not.
TEST(PoolMetadataWork, ExactlyExtendedCopyWriteSameAndUnmap) {
  const std::set<uint8_t> metadata = {0x41, 0x42, 0x83, 0x93};
  for (const OpcodeInfo& e : OpcodeTable()) {
    Bytes cdb(e.cdb_length, 0xFF);
    cdb[0] = e.opcode;
    if (e.has_service_action) cdb[1] = static_cast<uint8_t>(0xE0 | e.service_action);
    EXPECT_EQ(IsPoolMetadataWork(cdb), metadata.count(e.opcode) == 1) << e.name;
  }
  EXPECT_TRUE(IsPoolMetadataWork(Bytes{0x83, 0x00}));   // LID1
  EXPECT_FALSE(IsPoolMetadataWork(Bytes{0x83, 0x01}));  // LID4: not served
  EXPECT_FALSE(IsPoolMetadataWork(Bytes{0x84, 0x00}));  // RECEIVE COPY RESULTS
  EXPECT_FALSE(IsPoolMetadataWork(Bytes{0xC7, 0x00}));  // no such command
  EXPECT_FALSE(IsPoolMetadataWork(Bytes{}));
}

TEST_F(ReportOpcodesTest, AllCommandsListsExactlyTheTable) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(0, 0, 0), 8192, &d)));
  const uint32_t len = Be32(&d[0]);
  ASSERT_EQ(len + 4, d.size());
  ASSERT_EQ(len % 8, 0u);
  EXPECT_EQ(len / 8, OpcodeTable().size());
  for (size_t off = 4; off < d.size(); off += 8) {
    const uint8_t op = d[off];
    const bool servactv = d[off + 5] & 1;
    const uint16_t sa = Be16(&d[off + 2]);
    bool known = false;
    const OpcodeInfo* e = FindOpcode(op, sa, &known);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->has_service_action, servactv);
    EXPECT_EQ(Be16(&d[off + 6]), e->cdb_length);
    // Each listed command is really implemented: it never answers
    // INVALID COMMAND OPERATION CODE.
    Bytes cdb(e->cdb_length, 0);
    cdb[0] = op;
    if (servactv) cdb[1] = static_cast<uint8_t>(sa);
    CommandResult r = Exec(cdb);
    EXPECT_FALSE(r.status == ScsiStatus::kCheckCondition &&
                 r.additional_sense() == asc::kInvalidCommandOperationCode)
        << e->name;
  }
}

// For every listed command, the one-command options agree with SERVACTV and
// return usage data starting with the opcode.
TEST_F(ReportOpcodesTest, OneCommandOptionsAgreeWithTheList) {
  for (const OpcodeInfo& e : OpcodeTable()) {
    const uint16_t sa = e.has_service_action ? e.service_action : 0;
    Bytes d;
    CommandResult r1 = ExecIn(Rsoc(1, e.opcode, sa), 512, &d);
    CommandResult r2 = ExecIn(Rsoc(2, e.opcode, sa), 512, &d);
    if (e.has_service_action) {
      EXPECT_TRUE(HasSense(r1, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb)) << e.name;
      ASSERT_TRUE(IsGood(r2)) << e.name;
    } else {
      EXPECT_TRUE(HasSense(r2, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb)) << e.name;
      ASSERT_TRUE(IsGood(ExecIn(Rsoc(1, e.opcode, sa), 512, &d))) << e.name;
    }
    ASSERT_GE(d.size(), 5u);
    EXPECT_EQ(d[1] & 0x07, 3) << e.name;
    EXPECT_EQ(Be16(&d[2]), e.cdb_length) << e.name;
    EXPECT_EQ(d[4], e.opcode) << e.name;
  }
}

TEST_F(ReportOpcodesTest, AllCommandsWithTimeouts) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(0, 0, 0, true), 8192, &d)));
  EXPECT_EQ(Be32(&d[0]), OpcodeTable().size() * 20);
  EXPECT_TRUE(d[4 + 5] & 0x02);  // CTDP
  EXPECT_EQ(Be16(&d[4 + 8]), 0x0A);
}

TEST_F(ReportOpcodesTest, OneCommandWithUsageData) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(1, 0x89, 0), 512, &d)));
  ASSERT_EQ(d.size(), 4u + 16);
  EXPECT_EQ(d[1] & 0x07, 3);
  EXPECT_EQ(Be16(&d[2]), 16);
  EXPECT_EQ(d[4], 0x89);
  EXPECT_EQ(d[4 + 13], 0xFF);  // NUMBER OF LOGICAL BLOCKS used
}

TEST_F(ReportOpcodesTest, OneCommandNotSupported) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(1, 0x04, 0), 512, &d)));
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[1] & 0x07, 1);
}

TEST_F(ReportOpcodesTest, OneCommandOptionRejectsServiceActionOpcode) {
  CommandResult r = Exec(Rsoc(1, 0x9E, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 2, 2));
}

TEST_F(ReportOpcodesTest, ServiceActionOption) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(2, 0x9E, 0x10), 512, &d)));
  EXPECT_EQ(d[1] & 0x07, 3);
  EXPECT_EQ(d[5], 0x10);
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(2, 0x9E, 0x11), 512, &d)));
  EXPECT_EQ(d[1] & 0x07, 1);
  EXPECT_TRUE(HasSense(Exec(Rsoc(2, 0x28, 0)), SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(ReportOpcodesTest, Option3WithAndWithoutServiceAction) {
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(3, 0x28, 0), 512, &d)));
  EXPECT_EQ(d[1] & 0x07, 3);
  ASSERT_TRUE(IsGood(ExecIn(Rsoc(3, 0x84, 0x03, true), 512, &d)));
  EXPECT_EQ(d[1] & 0x07, 3);
  EXPECT_TRUE(d[1] & 0x80);
  EXPECT_EQ(d.size(), 4u + 16 + 12);
}

TEST_F(ReportOpcodesTest, ReservedReportingOptionRejected) {
  CommandResult r = Exec(Rsoc(5, 0, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 2, 2));
}

TEST_F(ReportOpcodesTest, AllocationLengthTruncates) {
  Bytes d;
  CommandResult r = ExecIn(Rsoc(0, 0, 0, false, 10), 8192, &d);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(d.size(), 10u);
}

}  // namespace
}  // namespace cowstore::scsi::testing
