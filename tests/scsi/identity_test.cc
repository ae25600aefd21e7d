// SPDX-License-Identifier: Apache-2.0
// NAA derivation, sense building and the LunDirectory access rule.
#include <gtest/gtest.h>

#include "handler/scsi/lun_directory.h"
#include "handler/scsi/naa.h"
#include "handler/scsi/sense.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

TEST(NaaTest, DerivesOpenFabricsNaa6FromHexDigitsOfSerial) {
  Naa n = NaaFromUnitSerial("f3b0c2a4-1d2e-4f5a-8b9c-0123456789ab");
  const Naa want = {0x60, 0x01, 0x40, 0x5f, 0x3b, 0x0c, 0x2a, 0x41,
                    0xd2, 0xe4, 0xf5, 0xa8, 0xb9, 0xc0, 0x12, 0x34};
  EXPECT_EQ(n, want);
}

TEST(NaaTest, ShortSerialLeavesZerosAndSkipsNonHex) {
  Naa n = NaaFromUnitSerial("xyz-AB");
  const Naa want = {0x60, 0x01, 0x40, 0x5a, 0xb0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(n, want);
}

TEST(SenseTest, FixedFormatWithInformationAndFieldPointer) {
  CommandResult r = Sense(SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb)
                        .Information(0x1234)
                        .FieldPointer(true, 13, 3);
  EXPECT_EQ(r.status, ScsiStatus::kCheckCondition);
  EXPECT_EQ(r.sense[0], 0xF0);  // VALID | 0x70
  EXPECT_EQ(r.sense[7], 10);
  EXPECT_EQ(r.information(), 0x1234u);
  EXPECT_EQ(r.sense[15], 0x80 | 0x40 | 0x08 | 3);
  EXPECT_EQ(r.sense[17], 13);
}

TEST(SenseTest, InformationAbove32BitsLeavesValidClear) {
  CommandResult r = Sense(SenseKey::kMiscompare, asc::kMiscompareDuringVerify).Information(1ull << 40);
  EXPECT_FALSE(r.information_valid());
}

class DirectoryTest : public ScsiTest {};

TEST_F(DirectoryTest, LuReachesItselfWithoutCopyGroup) {
  EXPECT_EQ(directory_.Resolve(lu_->naa(), *lu_).get(), lu_.get());
}

TEST_F(DirectoryTest, OtherLuOnlyInSameNonEmptyCopyGroup) {
  auto a = AddLu(*pool_, "a", 1 << 20, Config("aaaa0000-0000-0000-0000-000000000001", "g1"));
  auto b = AddLu(*pool_, "b", 1 << 20, Config("bbbb0000-0000-0000-0000-000000000002", "g1"));
  auto c = AddLu(*pool_, "c", 1 << 20, Config("cccc0000-0000-0000-0000-000000000003", "g2"));
  EXPECT_EQ(directory_.Resolve(b->naa(), *a).get(), b.get());
  EXPECT_EQ(directory_.Resolve(c->naa(), *a), nullptr);   // other group
  EXPECT_EQ(directory_.Resolve(a->naa(), *lu_), nullptr);  // requester has no group
  EXPECT_EQ(directory_.Resolve(lu_->naa(), *a), nullptr);  // target has no group
}

TEST_F(DirectoryTest, AmbiguousNaaIsNotReachable) {
  auto a = AddLu(*pool_, "a", 1 << 20, Config("dddd0000-0000-0000-0000-000000000001", "g"));
  auto b = AddLu(*pool_, "b", 1 << 20, Config("eeee0000-0000-0000-0000-000000000001", "g"));
  auto b2 = AddLu(*pool_, "b2", 1 << 20, Config("eeee0000-0000-0000-0000-000000000001", "g"));
  EXPECT_EQ(directory_.Resolve(b->naa(), *a), nullptr);
  EXPECT_EQ(directory_.Resolve(b->naa(), *b), nullptr);  // not even itself
  EXPECT_EQ(directory_.Resolve(a->naa(), *a).get(), a.get());
}

TEST_F(DirectoryTest, UnregistersWhenLastReferenceGoes) {
  size_t before = directory_.size();
  {
    auto a = AddLu(*pool_, "a", 1 << 20, Config("ffff0000-0000-0000-0000-000000000001"));
    EXPECT_EQ(directory_.size(), before + 1);
    extra_.pop_back();
  }
  EXPECT_EQ(directory_.size(), before);
}

TEST_F(DirectoryTest, CreateRejectsEmptySerial) {
  auto lun = pool_->OpenLun("lun0");
  ASSERT_TRUE(lun.ok());
  auto lu = LogicalUnit::Create(LunConfig{}, lun.value(), &directory_);
  EXPECT_FALSE(lu.ok());
}

}  // namespace
}  // namespace cowstore::scsi::testing
