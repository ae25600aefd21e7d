// SPDX-License-Identifier: Apache-2.0
// MODE SENSE / MODE SELECT (6) and (10): pages, page controls, WCE and
// durability, and the parameter-list checks of MODE SELECT.
#include <gtest/gtest.h>

#include "handler/scsi/cdb.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class ModePagesTest : public ScsiTest {
 protected:
  Bytes Sense6(uint8_t pc_page, uint8_t subpage = 0, uint8_t byte1 = 0, uint8_t alloc = 255) {
    Bytes out;
    last_ = ExecIn({0x1A, byte1, pc_page, subpage, alloc, 0}, 255, &out);
    return out;
  }
  Bytes Sense10(uint8_t pc_page, uint8_t byte1 = 0) {
    Bytes out;
    Bytes cdb(10, 0);
    cdb[0] = 0x5A;
    cdb[1] = byte1;
    cdb[2] = pc_page;
    PutBe16(&cdb[7], 1024);
    last_ = ExecIn(cdb, 1024, &out);
    return out;
  }
  CommandResult Select6(const Bytes& params, uint8_t byte1 = 0x10) {
    return Exec({0x15, byte1, 0, 0, static_cast<uint8_t>(params.size()), 0}, params);
  }
  CommandResult Select10(const Bytes& params, uint8_t byte1 = 0x10) {
    Bytes cdb(10, 0);
    cdb[0] = 0x55;
    cdb[1] = byte1;
    PutBe16(&cdb[7], static_cast<uint16_t>(params.size()));
    return Exec(cdb, params);
  }
  // MODE SELECT(6) parameter list carrying the current caching page with WCE.
  Bytes CachingParams(bool wce) {
    Bytes p = Sense6(0x08, 0, 0x08);  // DBD
    p[0] = 0;                          // MODE DATA LENGTH is reserved in SELECT
    p[2] = 0;                          // device-specific parameter
    if (wce) p[4 + 2] |= 0x04; else p[4 + 2] &= ~0x04;
    return p;
  }
  CommandResult last_;
};

TEST_F(ModePagesTest, AllPagesHasCachingControlAndErrorRecovery) {
  Bytes d = Sense6(0x3F);
  ASSERT_TRUE(IsGood(last_));
  ASSERT_EQ(size_t{d[0]} + 1, d.size());
  EXPECT_TRUE(d[2] & 0x10);  // DPOFUA
  EXPECT_EQ(d[3], 8);        // one short block descriptor
  EXPECT_EQ(Be32(&d[4]), kLunBytes / kBlock);
  EXPECT_EQ(Be24(&d[9]), kBlock);
  std::vector<uint8_t> codes;
  for (size_t off = 12; off < d.size(); off += 2 + d[off + 1]) codes.push_back(d[off] & 0x3F);
  EXPECT_EQ(codes, (std::vector<uint8_t>{0x01, 0x08, 0x0A}));
}

TEST_F(ModePagesTest, AllPagesAndSubpages) {
  Bytes d = Sense6(0x3F, 0xFF);
  EXPECT_TRUE(IsGood(last_));
  (void)Sense6(0x3F, 0x01);
  EXPECT_TRUE(HasSense(last_, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(ModePagesTest, CachingPageWceOffByDefault) {
  Bytes d = Sense6(0x08, 0, 0x08);
  ASSERT_TRUE(IsGood(last_));
  EXPECT_EQ(d[3], 0);  // DBD: no block descriptor
  ASSERT_EQ(d.size(), 4u + 20);
  EXPECT_EQ(d[4], 0x08);
  EXPECT_EQ(d[5], 0x12);
  EXPECT_EQ(d[6] & 0x04, 0);
  EXPECT_EQ(lu_->write_durability(false), store::Durability::kDurable);
}

TEST_F(ModePagesTest, ChangeableShowsOnlyWce) {
  Bytes d = Sense6(0x40 | 0x08, 0, 0x08);
  ASSERT_TRUE(IsGood(last_));
  EXPECT_EQ(d[6], 0x04);
  for (size_t i = 7; i < d.size(); ++i) EXPECT_EQ(d[i], 0) << i;
  d = Sense6(0x40 | 0x0A, 0, 0x08);
  for (size_t i = 6; i < d.size(); ++i) EXPECT_EQ(d[i], 0) << i;
}

TEST_F(ModePagesTest, DefaultValues) {
  Bytes d = Sense6(0x80 | 0x0A, 0, 0x08);
  ASSERT_TRUE(IsGood(last_));
  EXPECT_EQ(d[4], 0x0A);
  EXPECT_EQ(d[6] & 0x04, 0);  // D_SENSE 0: fixed format
}

TEST_F(ModePagesTest, SavedValuesNotSupported) {
  (void)Sense6(0xC0 | 0x08);
  EXPECT_TRUE(HasSense(last_, SenseKey::kIllegalRequest, asc::kSavingParametersNotSupported));
}

TEST_F(ModePagesTest, UnknownPageAndSubpageRejected) {
  (void)Sense6(0x19);
  EXPECT_TRUE(HasSense(last_, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(last_, true, 2, 5));
  (void)Sense6(0x08, 0x01);
  EXPECT_TRUE(HasSense(last_, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(last_, true, 3));
}

TEST_F(ModePagesTest, ModeSense6AllocationLengthTruncates) {
  Bytes d = Sense6(0x3F, 0, 0, 4);
  EXPECT_TRUE(IsGood(last_));
  EXPECT_EQ(d.size(), 4u);
}

TEST_F(ModePagesTest, ModeSense10WithLongLba) {
  Bytes d = Sense10(0x08, 0x10);
  ASSERT_TRUE(IsGood(last_));
  EXPECT_EQ(Be16(&d[0]) + 2u, d.size());
  EXPECT_EQ(d[4] & 1, 1);
  EXPECT_EQ(Be16(&d[6]), 16);
  EXPECT_EQ(Be64(&d[8]), kLunBytes / kBlock);
  EXPECT_EQ(Be32(&d[20]), kBlock);
  EXPECT_EQ(d[24], 0x08);
}

TEST_F(ModePagesTest, ModeSelectTurnsWriteCacheOnAndOff) {
  ASSERT_TRUE(IsGood(Select6(CachingParams(true))));
  EXPECT_TRUE(lu_->write_cache_enabled());
  EXPECT_EQ(lu_->write_durability(false), store::Durability::kBuffered);
  EXPECT_EQ(lu_->write_durability(true), store::Durability::kDurable);  // FUA
  Bytes d = Sense6(0x08, 0, 0x08);
  EXPECT_TRUE(d[6] & 0x04);
  ASSERT_TRUE(IsGood(Select6(CachingParams(false))));
  EXPECT_FALSE(lu_->write_cache_enabled());
}

TEST_F(ModePagesTest, ModeSelect10WithBlockDescriptor) {
  Bytes d = Sense10(0x08);
  ASSERT_TRUE(IsGood(last_));
  d[0] = d[1] = 0;
  d[8 + 8 + 2] |= 0x04;
  ASSERT_TRUE(IsGood(Select10(d)));
  EXPECT_TRUE(lu_->write_cache_enabled());
}

TEST_F(ModePagesTest, ModeSelectRejectsNonChangeableBits) {
  Bytes p = CachingParams(false);
  p[4 + 2] |= 0x01;  // RCD is not changeable
  CommandResult r = Select6(p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 6, 0));
  EXPECT_FALSE(lu_->write_cache_enabled());
}

TEST_F(ModePagesTest, ModeSelectRejectsWrongPageLengthAndUnknownPage) {
  Bytes p = CachingParams(true);
  p[5] = 0x10;
  p.resize(4 + 18);
  CommandResult r = Select6(p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 5));
  p = CachingParams(true);
  p[4] = 0x19;
  EXPECT_TRUE(HasSense(Select6(p), SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_FALSE(lu_->write_cache_enabled());
}

TEST_F(ModePagesTest, ModeSelectSaveAndPfChecks) {
  CommandResult r = Select6(CachingParams(true), 0x11);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 0));
  r = Select6(CachingParams(true), 0x00);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 4));
  EXPECT_FALSE(lu_->write_cache_enabled());
}

TEST_F(ModePagesTest, ModeSelectTruncatedListIsParameterListLengthError) {
  Bytes p = CachingParams(true);
  p.resize(10);
  EXPECT_TRUE(HasSense(Select6(p), SenseKey::kIllegalRequest, asc::kParameterListLengthError));
  EXPECT_TRUE(HasSense(Select6(Bytes(2, 0)), SenseKey::kIllegalRequest,
                       asc::kParameterListLengthError));
}

TEST_F(ModePagesTest, ModeSelectWrongBlockLengthRejected) {
  Bytes p = Sense6(0x08);
  ASSERT_EQ(p[3], 8);
  p[0] = 0;
  p[2] = 0;
  PutBe16(&p[4 + 6], 4096);
  p[4 + 5] = 0;
  CommandResult r = Select6(p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
}

TEST_F(ModePagesTest, ModeSelectEmptyListIsGood) { EXPECT_TRUE(IsGood(Select6(Bytes{}))); }

}  // namespace
}  // namespace cowstore::scsi::testing
