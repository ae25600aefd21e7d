// SPDX-License-Identifier: Apache-2.0
// WRITE SAME (10)/(16), UNMAP and GET LBA STATUS.
#include <gtest/gtest.h>

#include "handler/scsi/cdb.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kAuBlocks = (1u << 20) / 512;

class WriteSameTest : public ScsiTest {
 protected:
  uint64_t blocks() const { return kLunBytes / kBlock; }
  uint64_t LunMapped() { return pool_->GetLun("lun0")->mapped_bytes; }
  // Status of the first descriptor of GET LBA STATUS at lba: 0 mapped, 1 deallocated.
  std::pair<uint8_t, uint32_t> LbaStatus(uint64_t lba) {
    Bytes d;
    EXPECT_TRUE(IsGood(ExecIn(GetLbaStatus(lba, 24), 24, &d)));
    EXPECT_EQ(d.size(), 24u);
    EXPECT_EQ(Be64(&d[8]), lba);
    return {d[8 + 12], Be32(&d[8 + 8])};
  }
};

TEST_F(WriteSameTest, PatternFillsRangeBothCdbs) {
  Bytes blk = Pattern(kBlock, 1);
  ASSERT_TRUE(IsGood(Exec(WriteSame10(3, 5), blk)));
  ASSERT_TRUE(IsGood(Exec(WriteSame16(8, 300), blk)));
  Bytes got = Read(3, 305);
  for (size_t i = 0; i < 305; ++i) {
    ASSERT_EQ(Bytes(got.begin() + i * kBlock, got.begin() + (i + 1) * kBlock), blk) << i;
  }
  EXPECT_EQ(Read(2, 1), Bytes(kBlock, 0));
}

TEST_F(WriteSameTest, ZerosDeallocateWholeUnitsAndZeroEdges) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(4 * kAuBlocks * kBlock, 2))));
  const uint64_t mapped = LunMapped();
  EXPECT_EQ(mapped, 4u << 20);
  // From mid-AU 0 to mid-AU 3: AUs 1 and 2 become unmapped.
  ASSERT_TRUE(IsGood(Exec(WriteSame16(kAuBlocks / 2, 3 * kAuBlocks), Bytes(kBlock, 0))));
  EXPECT_EQ(LunMapped(), 2u << 20);
  EXPECT_EQ(Read(kAuBlocks / 2, 3 * kAuBlocks), Bytes(3 * kAuBlocks * kBlock, 0));
  EXPECT_NE(Read(kAuBlocks / 2 - 1, 1), Bytes(kBlock, 0));
  EXPECT_EQ(LbaStatus(kAuBlocks).first, 1);
}

TEST_F(WriteSameTest, UnmapBitUnalignedEdgesStillReadZeros) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(2 * kAuBlocks * kBlock, 3))));
  ASSERT_TRUE(IsGood(Exec(WriteSame16(1, kAuBlocks, 0x08), Bytes(kBlock, 0))));
  EXPECT_EQ(Read(1, kAuBlocks), Bytes(kAuBlocks * kBlock, 0));
  ASSERT_TRUE(IsGood(Exec(WriteSame10(7, 3, 0x08), Bytes(kBlock, 0))));
}

TEST_F(WriteSameTest, UnmapBitWithNonZeroPatternWritesThePattern) {
  Bytes blk = Pattern(kBlock, 4);
  ASSERT_TRUE(IsGood(Exec(WriteSame16(0, 4, 0x08), blk)));
  EXPECT_EQ(Read(3, 1), blk);
}

TEST_F(WriteSameTest, NdobMeansZeros) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(8 * kBlock, 5))));
  ASSERT_TRUE(IsGood(Exec(WriteSame16(2, 4, 0x01))));
  EXPECT_EQ(Read(2, 4), Bytes(4 * kBlock, 0));
  EXPECT_NE(Read(6, 1), Bytes(kBlock, 0));
}

TEST_F(WriteSameTest, ZeroBlocksRejectedBecauseWsnz) {
  CommandResult r = Exec(WriteSame16(0, 0), Bytes(kBlock, 0));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 10));
  EXPECT_TRUE(HasSense(Exec(WriteSame10(0, 0), Bytes(kBlock, 0)), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
}

TEST_F(WriteSameTest, MaximumWriteSameLength) {
  const uint64_t max = lu_->limits().max_write_same_blocks;
  if (max + 1 <= 0xFFFFFFFFu) {
    CommandResult r = Exec(WriteSame16(0, static_cast<uint32_t>(max + 1)), Bytes(kBlock, 0));
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  }
  const uint64_t n = std::min<uint64_t>(max, blocks());
  EXPECT_TRUE(IsGood(Exec(WriteSame16(blocks() - n, static_cast<uint32_t>(n)), Bytes(kBlock, 0))));
}

TEST_F(WriteSameTest, BeyondEndIsLbaOutOfRange) {
  EXPECT_TRUE(HasSense(Exec(WriteSame16(blocks() - 1, 2), Bytes(kBlock, 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(WriteSame16(1ull << 63, 1), Bytes(kBlock, 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(WriteSame10(static_cast<uint32_t>(blocks()), 1), Bytes(kBlock, 0)),
                       SenseKey::kIllegalRequest, asc::kLbaOutOfRange));
}

TEST_F(WriteSameTest, UnsupportedBitsRejectedWithPointers) {
  struct Case { uint8_t byte1; int bit; };
  for (Case c : {Case{0x10, 4}, Case{0x04, 2}, Case{0x02, 1}, Case{0x20, 7}, Case{0xE0, 7}}) {
    CommandResult r = Exec(WriteSame16(0, 1, c.byte1), Bytes(kBlock, 1));
    EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb)) << int(c.byte1);
    EXPECT_TRUE(HasFieldPointer(r, true, 1, c.bit)) << int(c.byte1);
  }
  EXPECT_TRUE(HasSense(Exec(WriteSame10(0, 1, 0x01), Bytes(kBlock, 1)), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
  EXPECT_EQ(Read(0, 1), Bytes(kBlock, 0));
}

TEST_F(WriteSameTest, WrongDataOutSizeRejected) {
  EXPECT_TRUE(HasSense(Exec(WriteSame10(0, 1, 0x08), Bytes(kBlock / 2, 0)),
                       SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasSense(Exec(WriteSame16(0, 1), Bytes(2 * kBlock, 1)), SenseKey::kIllegalRequest,
                       asc::kInvalidFieldInCdb));
  EXPECT_EQ(Read(0, 1), Bytes(kBlock, 0));
}

class UnmapTest : public WriteSameTest {};

TEST_F(UnmapTest, ManyDescriptorsReturnSpaceAndReadZeros) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(8 * kAuBlocks * kBlock, 6))));
  const uint64_t free_before = pool_->Space().free_units;
  std::vector<std::pair<uint64_t, uint32_t>> ranges;
  for (uint64_t au = 0; au < 8; au += 2) ranges.push_back({au * kAuBlocks, kAuBlocks});
  ranges.push_back({kAuBlocks + 3, 5});  // unaligned piece inside AU 1
  Bytes p = UnmapParams(ranges);
  ASSERT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
  EXPECT_EQ(pool_->Space().free_units, free_before + 4);
  EXPECT_EQ(Read(0, kAuBlocks), Bytes(kAuBlocks * kBlock, 0));
  EXPECT_EQ(Read(kAuBlocks + 3, 5), Bytes(5 * kBlock, 0));
  EXPECT_NE(Read(kAuBlocks + 8, 1), Bytes(kBlock, 0));
  EXPECT_EQ(lu_->counters().unmapped_blocks.load(), 4 * kAuBlocks + 5);
}

TEST_F(UnmapTest, OneToManyBlocksAtStartReadZeros) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(256 * kBlock, 7))));
  for (uint32_t i = 1; i <= 256; i *= 2) {
    Bytes p = UnmapParams({{0, i}});
    ASSERT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
    EXPECT_EQ(Read(0, i), Bytes(size_t{i} * kBlock, 0));
  }
}

TEST_F(UnmapTest, EmptyAndZeroLengthDescriptorsAreGood) {
  EXPECT_TRUE(IsGood(Exec(Unmap(0))));
  Bytes p = UnmapParams({{5, 0}});
  EXPECT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
  p = UnmapParams({});
  EXPECT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
}

TEST_F(UnmapTest, ShortParameterListIsLengthError) {
  Bytes p(6, 0);
  EXPECT_TRUE(HasSense(Exec(Unmap(6), p), SenseKey::kIllegalRequest,
                       asc::kParameterListLengthError));
  EXPECT_TRUE(HasSense(Exec(Unmap(24), Bytes(8, 0)), SenseKey::kIllegalRequest,
                       asc::kParameterListLengthError));
}

TEST_F(UnmapTest, OutOfRangeDescriptorChangesNothing) {
  ASSERT_TRUE(IsGood(Write(0, Pattern(kBlock, 8))));
  Bytes p = UnmapParams({{0, 1}, {blocks() - 1, 2}});
  EXPECT_TRUE(HasSense(Exec(Unmap(static_cast<uint16_t>(p.size())), p), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_EQ(Read(0, 1), Pattern(kBlock, 8));
}

TEST_F(UnmapTest, LimitsEnforcedAsAdvertised) {
  const Limits l = lu_->limits();
  std::vector<std::pair<uint64_t, uint32_t>> many(l.max_unmap_descriptors + 1, {0, 1});
  Bytes p = UnmapParams(many);
  CommandResult r = Exec(Unmap(static_cast<uint16_t>(p.size())), p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  many.pop_back();
  p = UnmapParams(many);
  EXPECT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
  p = UnmapParams({{0, l.max_unmap_blocks + 1}});
  r = Exec(Unmap(static_cast<uint16_t>(p.size())), p);
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList));
  EXPECT_TRUE(HasFieldPointer(r, false, 16));
}

TEST_F(UnmapTest, AnchorRejected) {
  Bytes cdb = Unmap(24);
  cdb[1] = 1;
  CommandResult r = Exec(cdb, UnmapParams({{0, 1}}));
  EXPECT_TRUE(HasSense(r, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_TRUE(HasFieldPointer(r, true, 1, 0));
}

// A format 3 pool (4 KiB grain under a 64 KiB AU): UNMAP frees whole grains,
// and the Block Limits page says so.
class GrainUnmapTest : public WriteSameTest {
 protected:
  static constexpr uint32_t kGrainBlocks = kGrain / kBlock;
  void SetUp() override {
    WriteSameTest::SetUp();
    pool3_ = CreateGrainPool("/pool3");
    ASSERT_NE(pool3_, nullptr);
    lu3_ = AddLu(*pool3_, "g0", 4ull << 20, Config("5f3b0c2a-41d2-4e8b-9a1c-000000000033"));
    ASSERT_NE(lu3_, nullptr);
  }
  void TearDown() override {
    lu3_.reset();
    CloseExtraPool(&pool3_);
    WriteSameTest::TearDown();
  }
  uint32_t UnmapGranularity(LogicalUnit& lu) {
    Bytes d;
    EXPECT_TRUE(IsGood(ExecIn(lu, Inquiry(true, 0xB0, 64), 64, &d)));
    EXPECT_EQ(d.size(), 64u);
    EXPECT_TRUE(d[32] & 0x80);  // UGAVALID, alignment 0
    return Be32(&d[28]);
  }
  std::unique_ptr<store::Pool> pool3_;
  std::shared_ptr<LogicalUnit> lu3_;
};

TEST_F(GrainUnmapTest, BlockLimitsGiveTheGrainAsUnmapGranularity) {
  EXPECT_EQ(UnmapGranularity(*lu3_), kGrainBlocks);
  EXPECT_EQ(UnmapGranularity(*lu_), kAuBlocks) << "a format 2 pool frees whole AUs";
  auto big = AddLu(*pool3_, "g4k", 4ull << 20, Config("5f3b0c2a-41d2-4e8b-9a1c-000000000034"), 4096);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(UnmapGranularity(*big), 1u) << "one 4096-byte block is one grain";
}

TEST_F(GrainUnmapTest, UnmapOfOneGrainFreesItAndOnlyIt) {
  const uint64_t au_blocks = (64u << 10) / kBlock;
  ASSERT_TRUE(IsGood(Write(*lu3_, 0, Pattern(2 * au_blocks * kBlock, 11))));
  const uint64_t mapped = pool3_->GetLun("g0")->mapped_bytes;
  EXPECT_EQ(mapped, 128u << 10);
  // The third grain of the first AU.
  const uint64_t lba = 2 * kGrainBlocks;
  Bytes p = UnmapParams({{lba, kGrainBlocks}});
  ASSERT_TRUE(IsGood(Exec(*lu3_, Unmap(static_cast<uint16_t>(p.size())), p)));
  EXPECT_EQ(pool3_->GetLun("g0")->mapped_bytes, mapped - kGrain);
  EXPECT_EQ(Read(*lu3_, lba, kGrainBlocks), Bytes(kGrain, 0));
  Bytes all = Pattern(2 * au_blocks * kBlock, 11);
  EXPECT_EQ(Read(*lu3_, 0, lba), Bytes(all.begin(), all.begin() + lba * kBlock));
  EXPECT_EQ(Read(*lu3_, lba + kGrainBlocks, 1),
            Bytes(all.begin() + (lba + kGrainBlocks) * kBlock, all.begin() + (lba + kGrainBlocks + 1) * kBlock));
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(*lu3_, GetLbaStatus(0, 1024), 1024, &d)));
  ASSERT_GE(d.size(), 8u + 3 * 16);
  EXPECT_EQ(Be64(&d[8]), 0u);
  EXPECT_EQ(Be32(&d[16]), lba);
  EXPECT_EQ(d[20], 0);  // mapped
  EXPECT_EQ(Be64(&d[24]), lba);
  EXPECT_EQ(Be32(&d[32]), kGrainBlocks);
  EXPECT_EQ(d[36], 1);  // deallocated: exactly the grain
  EXPECT_EQ(Be64(&d[40]), lba + kGrainBlocks);
  EXPECT_EQ(d[52], 0);
}

class LbaStatusTest : public WriteSameTest {};

TEST_F(LbaStatusTest, ReportsMappedAndDeallocatedRuns) {
  ASSERT_TRUE(IsGood(Write(kAuBlocks, Pattern(kBlock, 9))));
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(GetLbaStatus(0, 1024), 1024, &d)));
  ASSERT_GE(d.size(), 8u + 3 * 16);
  EXPECT_EQ(Be32(&d[0]) + 4, d.size());
  EXPECT_EQ(Be64(&d[8]), 0u);
  EXPECT_EQ(Be32(&d[16]), kAuBlocks);
  EXPECT_EQ(d[20], 1);  // deallocated
  EXPECT_EQ(Be64(&d[24]), kAuBlocks);
  EXPECT_EQ(Be32(&d[32]), kAuBlocks);
  EXPECT_EQ(d[36], 0);  // mapped (whole AU)
  EXPECT_EQ(d[52], 1);
  EXPECT_EQ(Be64(&d[40]) + Be32(&d[48]), blocks());
}

TEST_F(LbaStatusTest, StartsAtRequestedLbaNearEnd) {
  for (uint64_t i = 1; i <= 3; ++i) {
    auto st = LbaStatus(blocks() - i);
    EXPECT_EQ(st.first, 1);
    EXPECT_EQ(st.second, i);
  }
}

TEST_F(LbaStatusTest, BeyondEndRejected) {
  EXPECT_TRUE(HasSense(Exec(GetLbaStatus(blocks(), 24)), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
  EXPECT_TRUE(HasSense(Exec(GetLbaStatus(~0ull, 24)), SenseKey::kIllegalRequest,
                       asc::kLbaOutOfRange));
}

TEST_F(LbaStatusTest, SmallAllocationLength) {
  Bytes d;
  CommandResult r = ExecIn(GetLbaStatus(0, 16), 16, &d);
  EXPECT_TRUE(IsGood(r));
  EXPECT_EQ(d.size(), 16u);
  EXPECT_TRUE(IsGood(ExecIn(GetLbaStatus(0, 0), 0, &d)));
}

}  // namespace
}  // namespace cowstore::scsi::testing
