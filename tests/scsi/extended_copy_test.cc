// SPDX-License-Identifier: Apache-2.0
// EXTENDED COPY (LID1) and RECEIVE COPY RESULTS.
#include <gtest/gtest.h>

#include "handler/scsi/cdb.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/sense.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kAuBlocks = (1u << 20) / 512;

class ExtendedCopyTest : public ScsiTest {
 protected:
  CommandResult Xcopy(LogicalUnit& lu, const XcopyList& l) {
    Bytes p = l.Build();
    return Exec(lu, ExtendedCopy(static_cast<uint32_t>(p.size())), p);
  }
  CommandResult Xcopy(const XcopyList& l) { return Xcopy(*lu_, l); }
  XcopyList SameLun(uint16_t blocks, uint64_t src, uint64_t dst) {
    XcopyList l;
    l.cscds.push_back(IdentCscd(lu_->naa()));
    l.segments.push_back(BlockSegment(0, 0, blocks, src, dst));
    return l;
  }
  Bytes Rcr(uint8_t sa, uint8_t list_id, CommandResult* r = nullptr) {
    Bytes out;
    CommandResult res = ExecIn(ReceiveCopyResults(sa, list_id, 1024), 1024, &out);
    if (r) *r = res;
    else EXPECT_TRUE(IsGood(res));
    return out;
  }
};

TEST_F(ExtendedCopyTest, SameLunCopyWithOneCscdAsSourceAndDestination) {
  Bytes d = Pattern(2048 * kBlock, 1);
  ASSERT_TRUE(IsGood(Write(0, d)));
  const uint64_t dst = kLunBytes / kBlock - 2048;
  ASSERT_TRUE(IsGood(Xcopy(SameLun(2048, 0, dst))));
  EXPECT_EQ(Read(dst, 2048), d);
  EXPECT_EQ(lu_->counters().xcopy_cloned_blocks.load(), 2048u);
}

TEST_F(ExtendedCopyTest, WholeUnitsAreSharedNotCopied) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(4 * kAuBlocks * kBlock, 2))));
  const uint64_t free_before = pool_->Space().free_units;
  XcopyList l;
  l.cscds.push_back(IdentCscd(lu_->naa()));
  for (int i = 0; i < 4; ++i) {
    l.segments.push_back(BlockSegment(0, 0, kAuBlocks, i * kAuBlocks, (16 + i) * kAuBlocks));
  }
  ASSERT_TRUE(IsGood(Xcopy(l)));
  EXPECT_EQ(pool_->Space().free_units, free_before);  // metadata only
  EXPECT_EQ(Read(16 * kAuBlocks, 4 * kAuBlocks), Read(0, 4 * kAuBlocks));
}

// A format 3 pool shares at its grain: EXTENDED COPY of whole grains is
// metadata, and a later one-block write into the copy makes it own one
// grain, not an AU (issue 10's promise, through the SCSI layer).
TEST_F(ExtendedCopyTest, AFormatThreePoolSharesWholeGrainsAndCopiesOneOnWrite) {
  auto pool3 = CreateGrainPool("/pool3");
  ASSERT_NE(pool3, nullptr);
  auto lu3 = AddLu(*pool3, "g0", 4ull << 20, Config("0a7d91e4-5c3b-4f2a-8e6d-6e0f3c1b2a35"));
  ASSERT_NE(lu3, nullptr);
  constexpr uint64_t kGrainBlocks = kGrain / kBlock;
  const Bytes data = Pattern(16 * kGrain, 3);  // 16 grains from LBA 0
  ASSERT_TRUE(IsGood(Write(*lu3, 0, data)));
  auto lun = [&] { return pool3->GetLun("g0").value(); };
  const uint64_t mapped = lun().mapped_bytes;
  ASSERT_EQ(mapped, 16 * kGrain);
  // Grains 1 and 2 to grains 100 and 101, one segment.
  XcopyList l;
  l.cscds.push_back(IdentCscd(lu3->naa()));
  l.segments.push_back(BlockSegment(0, 0, 2 * kGrainBlocks, kGrainBlocks, 100 * kGrainBlocks));
  ASSERT_TRUE(IsGood(Xcopy(*lu3, l)));
  EXPECT_EQ(Read(*lu3, 100 * kGrainBlocks, 2 * kGrainBlocks), Bytes(data.begin() + kGrain, data.begin() + 3 * kGrain));
  EXPECT_EQ(lun().shared_bytes, 4 * kGrain) << "both places of the two grains";
  EXPECT_EQ(lun().mapped_bytes, mapped + 2 * kGrain);
  const uint64_t distinct = pool3->Space().saved_bytes;
  EXPECT_EQ(distinct, 2 * kGrain) << "the copy took no new space";
  // One block written into the first copied grain: that grain alone is copied.
  const Bytes blk = Pattern(kBlock, 9);
  ASSERT_TRUE(IsGood(Write(*lu3, 100 * kGrainBlocks + 3, blk)));
  EXPECT_EQ(lun().shared_bytes, 2 * kGrain) << "the second copied grain is still shared";
  EXPECT_EQ(pool3->Space().saved_bytes, kGrain);
  Bytes want(data.begin() + kGrain, data.begin() + 2 * kGrain);
  std::copy(blk.begin(), blk.end(), want.begin() + 3 * kBlock);
  EXPECT_EQ(Read(*lu3, 100 * kGrainBlocks, kGrainBlocks), want);
  EXPECT_EQ(Read(*lu3, kGrainBlocks, kGrainBlocks), Bytes(data.begin() + kGrain, data.begin() + 2 * kGrain))
      << "the source is untouched";
  lu3.reset();
  CloseExtraPool(&pool3);
}

TEST_F(ExtendedCopyTest, EmptyParameterListIsGood) {
  EXPECT_TRUE(IsGood(Exec(ExtendedCopy(0))));
}

TEST_F(ExtendedCopyTest, ListIdUsageVariants) {
  for (uint8_t usage : {0, 2, 3}) {
    XcopyList l = SameLun(8, 0, 100);
    l.list_id = static_cast<uint8_t>(10 + usage);
    l.list_id_usage = usage;
    EXPECT_TRUE(IsGood(Xcopy(l))) << int(usage);
  }
  XcopyList l = SameLun(8, 0, 100);
  l.list_id_usage = 1;
  CommandResult r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 1, 4));
}

TEST_F(ExtendedCopyTest, TruncatedParameterListIsLengthError) {
  Bytes p = SameLun(8, 0, 100).Build();
  for (size_t cut : {size_t{10}, size_t{16 + 31}, p.size() - 1}) {
    Bytes q(p.begin(), p.begin() + cut);
    EXPECT_TRUE(HasSense(Exec(ExtendedCopy(static_cast<uint32_t>(q.size())), q),
                         SenseKey::kIllegalRequest, asc::kParameterListLengthError))
        << cut;
  }
  // Parameter list length larger than the data-out buffer.
  EXPECT_TRUE(HasSense(Exec(ExtendedCopy(static_cast<uint32_t>(p.size() + 10)), p),
                       SenseKey::kIllegalRequest, asc::kParameterListLengthError));
}

TEST_F(ExtendedCopyTest, TooManyDescriptorsAndListTooLong) {
  const Limits lim = lu_->limits();
  XcopyList l;
  for (int i = 0; i <= lim.max_cscd_descriptors; ++i) l.cscds.push_back(IdentCscd(lu_->naa()));
  l.segments.push_back(BlockSegment(0, 0, 1, 0, 1));
  EXPECT_TRUE(HasSense(Xcopy(l), SenseKey::kIllegalRequest, asc::kTooManyTargetDescriptors));
  l.cscds.resize(1);
  l.segments.assign(lim.max_segment_descriptors + 1, BlockSegment(0, 0, 1, 0, 1));
  EXPECT_TRUE(HasSense(Xcopy(l), SenseKey::kIllegalRequest, asc::kTooManySegmentDescriptors));
  l.cscds.assign(lim.max_cscd_descriptors + 1, IdentCscd(lu_->naa()));
  l.segments.assign(lim.max_segment_descriptors, BlockSegment(0, 0, 1, 0, 1));
  EXPECT_TRUE(HasSense(Xcopy(l), SenseKey::kIllegalRequest, asc::kParameterListLengthError));
}

TEST_F(ExtendedCopyTest, MaximumDescriptorCountsAccepted) {
  const Limits lim = lu_->limits();
  ASSERT_GE(lim.max_cscd_descriptors, 64);
  ASSERT_GE(lim.max_segment_descriptors, 64);
  ASSERT_TRUE(IsGood(Write(0, Pattern(64 * kBlock, 3))));
  XcopyList l;
  l.cscds.assign(lim.max_cscd_descriptors, IdentCscd(lu_->naa()));
  for (int i = 0; i < lim.max_segment_descriptors; ++i) {
    l.segments.push_back(BlockSegment(static_cast<uint16_t>(i % lim.max_cscd_descriptors),
                                      static_cast<uint16_t>((i + 1) % lim.max_cscd_descriptors),
                                      1, i % 64, 1000 + i));
  }
  ASSERT_TRUE(IsGood(Xcopy(l)));
  EXPECT_EQ(Read(1000, 64), Read(0, 64));
}

TEST_F(ExtendedCopyTest, UnsupportedDescriptorTypes) {
  XcopyList l = SameLun(1, 0, 1);
  l.cscds[0][0] = 0xE0;  // Fibre Channel N_Port_Name
  CommandResult r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kUnsupportedTargetDescriptorTypeCode));
  EXPECT_TRUE(HasFieldPointer(r, false, 16));
  l = SameLun(1, 0, 1);
  l.segments[0][0] = 0x03;  // stream -> stream
  r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kUnsupportedSegmentDescriptorTypeCode));
  EXPECT_TRUE(HasFieldPointer(r, false, 48));
}

TEST_F(ExtendedCopyTest, MalformedDescriptorsPointAtTheField) {
  XcopyList l = SameLun(1, 0, 1);
  l.cscds[0][1] = 0x01;  // peripheral device type: not a block device
  CommandResult r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 17, 4));
  l = SameLun(1, 0, 1);
  PutBe16(&l.segments[0][2], 0x14);
  r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 50));
  l = SameLun(1, 0, 1);
  Bytes p = l.Build();
  PutBe32(&p[12], 4);  // inline data
  p.resize(p.size() + 4);
  r = Exec(ExtendedCopy(static_cast<uint32_t>(p.size())), p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 12));
  l = SameLun(1, 0, 1);
  l.cscds[0][30] = 0x10;  // disk block length 4096+512 != 512
  r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
}

TEST_F(ExtendedCopyTest, LuIdTypeIsIgnored) {
  XcopyList l = SameLun(1, 0, 1);
  l.cscds[0][1] = 0xC0;
  EXPECT_TRUE(IsGood(Xcopy(l)));
}

TEST_F(ExtendedCopyTest, BadCscdIndexAndBeyondEndAreCopyAborted) {
  XcopyList l = SameLun(8, 0, 100);
  PutBe16(&l.segments[0][6], 1);
  CommandResult r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kCopyAborted, asc::kCopyTargetDeviceNotReachable));
  EXPECT_TRUE(HasSense(Xcopy(SameLun(2048, 0, kLunBytes / kBlock - 1)), SenseKey::kCopyAborted,
                       asc::kNoAdditionalSense));
  EXPECT_TRUE(HasSense(Xcopy(SameLun(2, kLunBytes / kBlock - 1, 0)), SenseKey::kCopyAborted,
                       asc::kNoAdditionalSense));
}

TEST_F(ExtendedCopyTest, FailedSegmentLeavesEarlierOnesAndChangesNothingWhenInvalid) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(8 * kBlock, 4))));
  XcopyList l = SameLun(8, 0, 100);
  l.segments.push_back(BlockSegment(0, 0, 8, 0, kLunBytes / kBlock - 4));
  EXPECT_TRUE(HasSense(Xcopy(l), SenseKey::kCopyAborted, asc::kNoAdditionalSense));
  EXPECT_EQ(Read(100, 8), Bytes(8 * kBlock, 0));  // validated before anything moved
}

TEST_F(ExtendedCopyTest, UnknownNaaIsNotReachable) {
  XcopyList l;
  l.cscds.push_back(IdentCscd(NaaFromUnitSerial("deadbeef")));
  l.segments.push_back(BlockSegment(0, 0, 1, 0, 1));
  CommandResult r = Xcopy(l);
  EXPECT_TRUE(HasSense(r, SenseKey::kCopyAborted, asc::kCopyTargetDeviceNotReachable));
}

TEST_F(ExtendedCopyTest, CrossLunNeedsSameCopyGroup) {
  auto a = AddLu(*pool_, "a", 8 << 20, Config("aaaa1111-0000-0000-0000-000000000001", "esx"));
  auto b = AddLu(*pool_, "b", 8 << 20, Config("bbbb1111-0000-0000-0000-000000000002", "esx"));
  auto c = AddLu(*pool_, "c", 8 << 20, Config("cccc1111-0000-0000-0000-000000000003"));
  Bytes d = Pattern(16 * kBlock, 5);
  ASSERT_TRUE(IsGood(Write(*a, 0, d)));
  XcopyList l;
  l.cscds = {IdentCscd(a->naa()), IdentCscd(b->naa())};
  l.segments = {BlockSegment(0, 1, 16, 0, 32)};
  ASSERT_TRUE(IsGood(Xcopy(*a, l)));
  EXPECT_EQ(Read(*b, 32, 16), d);
  // The command may be sent to either LU of the group.
  l.segments = {BlockSegment(0, 1, 16, 0, 64)};
  ASSERT_TRUE(IsGood(Xcopy(*b, l)));
  EXPECT_EQ(Read(*b, 64, 16), d);
  // No group: refused, nothing written.
  l.cscds = {IdentCscd(a->naa()), IdentCscd(c->naa())};
  l.segments = {BlockSegment(0, 1, 16, 0, 0)};
  EXPECT_TRUE(HasSense(Xcopy(*a, l), SenseKey::kCopyAborted, asc::kCopyTargetDeviceNotReachable));
  EXPECT_TRUE(HasSense(Xcopy(*c, l), SenseKey::kCopyAborted, asc::kCopyTargetDeviceNotReachable));
  EXPECT_EQ(Read(*c, 0, 16), Bytes(16 * kBlock, 0));
  // An LU outside the group cannot read from the group either.
  l.cscds = {IdentCscd(a->naa()), IdentCscd(lu_->naa())};
  EXPECT_TRUE(HasSense(Xcopy(*lu_, l), SenseKey::kCopyAborted, asc::kCopyTargetDeviceNotReachable));
}

TEST_F(ExtendedCopyTest, CrossPoolIsDataCopy) {
  store::PoolOptions opts;
  opts.size_bytes = 48ull << 20;
  auto other = store::Pool::Create(&env_, "/pool1", opts);
  ASSERT_TRUE(other.ok());
  {
    auto a = AddLu(*pool_, "a", 8 << 20, Config("aaaa2222-0000-0000-0000-000000000001", "grp"));
    auto b = AddLu(*other.value(), "b", 8 << 20, Config("bbbb2222-0000-0000-0000-000000000002", "grp"));
    Bytes d = Pattern(3 * kAuBlocks * kBlock, 6);
    ASSERT_TRUE(IsGood(Write(*a, 0, d)));
    XcopyList l;
    l.cscds = {IdentCscd(a->naa()), IdentCscd(b->naa())};
    l.segments = {BlockSegment(0, 1, static_cast<uint16_t>(2 * kAuBlocks), 7, 3),
                  BlockSegment(0, 1, 100, 2 * kAuBlocks + 7, 2 * kAuBlocks + 3)};
    ASSERT_TRUE(IsGood(Xcopy(*a, l)));
    EXPECT_EQ(Read(*b, 3, 2 * kAuBlocks + 100), Read(*a, 7, 2 * kAuBlocks + 100));
    EXPECT_EQ(a->counters().xcopy_copied_blocks.load(), 2 * kAuBlocks + 100);
    extra_.clear();
  }
  lu_.reset();
  ASSERT_TRUE(other.value()->Close().ok());
}

TEST_F(ExtendedCopyTest, OverlappingSameLunCopyBehavesLikeMemmove) {
  Bytes d = Pattern(64 * kBlock, 7);
  ASSERT_TRUE(IsGood(Write(0, d)));
  ASSERT_TRUE(IsGood(Xcopy(SameLun(64, 0, 16))));
  EXPECT_EQ(Read(16, 64), d);
}

TEST_F(ExtendedCopyTest, ZeroBlockSegmentIsGood) {
  EXPECT_TRUE(IsGood(Xcopy(SameLun(0, 0, 1))));
}

class ReceiveCopyResultsTest : public ExtendedCopyTest {};

TEST_F(ReceiveCopyResultsTest, OperatingParametersMatchLimits) {
  Bytes d = Rcr(0x03, 0);
  ASSERT_EQ(d.size(), 46u);
  const Limits l = lu_->limits();
  EXPECT_EQ(Be32(&d[0]), 42u);
  EXPECT_EQ(d[4] & 1, 1);
  EXPECT_EQ(Be16(&d[8]), l.max_cscd_descriptors);
  EXPECT_EQ(Be16(&d[10]), l.max_segment_descriptors);
  EXPECT_EQ(Be32(&d[12]), l.max_descriptor_list_length);
  EXPECT_EQ(Be32(&d[16]), l.max_segment_bytes);
  EXPECT_EQ(Be32(&d[20]), 0u);
  EXPECT_EQ(d[43], 2);
  EXPECT_EQ(d[44], 0x02);
  EXPECT_EQ(d[45], 0xE4);
}

TEST_F(ReceiveCopyResultsTest, CopyStatusOfHeldListId) {
  CommandResult r;
  (void)Rcr(0x00, 1, &r);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  XcopyList l = SameLun(2048, 0, 4096);
  l.list_id = 1;
  l.list_id_usage = 0;
  ASSERT_TRUE(IsGood(Xcopy(l)));
  Bytes d = Rcr(0x00, 1);
  ASSERT_EQ(d.size(), 12u);
  EXPECT_EQ(Be32(&d[0]), 8u);
  EXPECT_EQ(d[4] & 0x7F, 0x01);  // completed without errors
  EXPECT_EQ(Be16(&d[5]), 1);
  EXPECT_EQ(d[7], 0);  // bytes
  EXPECT_EQ(Be32(&d[8]), 2048 * kBlock);
  // Still there for another status query.
  (void)Rcr(0x00, 1);
}

TEST_F(ReceiveCopyResultsTest, NoHoldUsagesKeepNothing) {
  XcopyList l = SameLun(8, 0, 4096);
  l.list_id = 7;
  l.list_id_usage = 2;
  ASSERT_TRUE(IsGood(Xcopy(l)));
  CommandResult r;
  (void)Rcr(0x00, 7, &r);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(ReceiveCopyResultsTest, FailedSegmentDetailsCarrySense) {
  XcopyList l = SameLun(8, 0, 100);
  l.segments.push_back(BlockSegment(0, 0, 8, 0, kLunBytes / kBlock - 4));
  l.list_id = 3;
  l.list_id_usage = 0;
  EXPECT_FALSE(IsGood(Xcopy(l)));
  Bytes s = Rcr(0x00, 3);
  EXPECT_EQ(s[4] & 0x7F, 0x02);  // completed with errors
  Bytes d = Rcr(0x04, 3);
  ASSERT_EQ(d.size(), 60u + 18);
  EXPECT_EQ(Be32(&d[0]), 56u + 18);
  EXPECT_EQ(d[56], 0x02);
  EXPECT_EQ(Be16(&d[58]), 18);
  EXPECT_EQ(d[60 + 2] & 0x0F, 0x0A);  // COPY ABORTED
  // Handed over once.
  CommandResult r;
  (void)Rcr(0x04, 3, &r);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(ReceiveCopyResultsTest, FailedSegmentDetailsAfterSuccess) {
  XcopyList l = SameLun(8, 0, 100);
  l.list_id = 4;
  l.list_id_usage = 0;
  ASSERT_TRUE(IsGood(Xcopy(l)));
  Bytes d = Rcr(0x04, 4);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(Be32(&d[0]), 0u);
}

TEST_F(ReceiveCopyResultsTest, ReceiveDataNotSupported) {
  CommandResult r;
  (void)Rcr(0x01, 0, &r);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

}  // namespace
}  // namespace cowstore::scsi::testing
