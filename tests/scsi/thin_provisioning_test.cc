// SPDX-License-Identifier: Apache-2.0
// Thin provisioning: out of space is DATA PROTECT 0x27/0x07 with nothing
// written and normal service once space is freed; crossing the soft
// threshold raises UNIT ATTENTION 0x38/0x07 once, and so does a backing
// filesystem that no longer holds the pool's remaining growth (thin on thin).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "handler/scsi/command.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kAuBlocks = (1u << 20) / 512;

class ThinProvisioningTest : public ScsiTest {
 protected:
  void SetUp() override {
    store::PoolOptions opts;
    opts.size_bytes = 40ull << 20;
    opts.allocation_unit = 1u << 20;
    opts.soft_threshold_percent = 50;
    auto pool = store::Pool::Create(&env_, "/small", opts);
    ASSERT_TRUE(pool.ok()) << pool.status().message();
    pool_ = std::move(pool.value());
    lu_ = AddLu(*pool_, "thin", 64ull << 20, Config("7777aaaa-0000-0000-0000-000000000001"));
    ASSERT_NE(lu_, nullptr);
  }
  // Writes one AU at a time until the pool is full; returns the AUs written.
  uint64_t FillPool(CommandResult* last) {
    uint64_t au = 0;
    for (; au < 64; ++au) {
      *last = Write(au * kAuBlocks, Bytes(kAuBlocks * kBlock, static_cast<uint8_t>(au + 1)));
      if (!last->good()) break;
      // Soft-threshold UAs are consumed by a TUR so the next write runs.
      (void)Exec(Bytes(6, 0));
    }
    return au;
  }
  // Writes AU `au` of the LU; a soft-threshold UNIT ATTENTION on the WRITE
  // is counted in *uas and the WRITE repeated (it must then succeed).
  void WriteAuCountingUa(uint64_t au, int* uas) {
    CommandResult w = Write(au * kAuBlocks, Bytes(kAuBlocks * kBlock, 1));
    if (w.good()) return;
    ASSERT_TRUE(HasSense(w, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
    ++*uas;
    ASSERT_TRUE(IsGood(Write(au * kAuBlocks, Bytes(kAuBlocks * kBlock, 1))));
  }
};

TEST_F(ThinProvisioningTest, OutOfSpaceIsDataProtectAndNothingWritten) {
  CommandResult last;
  const uint64_t written = FillPool(&last);
  ASSERT_GT(written, 0u);
  ASSERT_LT(written, 64u);
  EXPECT_TRUE(HasSense(last, SenseKey::kDataProtect, asc::kSpaceAllocationFailedWriteProtect));
  EXPECT_EQ(Read(written * kAuBlocks, kAuBlocks), Bytes(kAuBlocks * kBlock, 0));
  EXPECT_GE(lu_->counters().no_space_errors.load(), 1u);
  // Other write paths report the same.
  EXPECT_TRUE(HasSense(Exec(WriteSame16(written * kAuBlocks, 10), Bytes(kBlock, 9)),
                       SenseKey::kDataProtect, asc::kSpaceAllocationFailedWriteProtect));
  // Free space with UNMAP, then the write succeeds.
  Bytes p = UnmapParams({{0, 2 * kAuBlocks}});
  ASSERT_TRUE(IsGood(Exec(Unmap(static_cast<uint16_t>(p.size())), p)));
  EXPECT_TRUE(IsGood(Write(written * kAuBlocks, Bytes(kAuBlocks * kBlock, 0xAB))));
  EXPECT_EQ(Read(written * kAuBlocks, 1), Bytes(kBlock, 0xAB));
  EXPECT_EQ(Read(2 * kAuBlocks, 1), Bytes(kBlock, 3));  // earlier data intact
}

// A write the store applied but could not make durable (its checkpoint
// refused for room: store kNotDurable) is not GOOD: with the write cache
// off that would promise stable storage. It gets the out-of-space sense,
// which SBC lets leave the blocks either way, and is counted as such.
TEST_F(ThinProvisioningTest, NotDurableIsDataProtectLikeOutOfSpace) {
  const uint64_t before = lu_->counters().no_space_errors.load();
  CommandResult r = FromStoreStatus(*lu_, store::Status(store::Code::kNotDurable, "not yet durable"), true);
  EXPECT_TRUE(HasSense(r, SenseKey::kDataProtect, asc::kSpaceAllocationFailedWriteProtect));
  EXPECT_EQ(lu_->counters().no_space_errors.load(), before + 1);
  EXPECT_EQ(lu_->counters().internal_errors.load(), 0u);
}

TEST_F(ThinProvisioningTest, SoftThresholdUnitAttentionOnce) {
  int uas = 0;
  for (uint64_t au = 0; au < 16; ++au) {
    ASSERT_NO_FATAL_FAILURE(WriteAuCountingUa(au, &uas));
    CommandResult t = Exec(Bytes(6, 0));
    if (!t.good()) {
      EXPECT_TRUE(HasSense(t, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
      ++uas;
    }
  }
  EXPECT_EQ(uas, 1);
}

// The threshold is the pool's: an LU that never writes learns of a crossing
// caused by another LU of the pool on its next command (ESXi polls with TEST
// UNIT READY), exactly once.
TEST_F(ThinProvisioningTest, SoftThresholdReachesEveryLuOfThePool) {
  auto quiet = AddLu(*pool_, "quiet", 16ull << 20, Config("7777aaaa-0000-0000-0000-000000000002"));
  ASSERT_NE(quiet, nullptr);
  ASSERT_TRUE(IsGood(Exec(*quiet, Bytes(6, 0))));
  int writer_uas = 0;
  for (uint64_t au = 0; au < 16; ++au) ASSERT_NO_FATAL_FAILURE(WriteAuCountingUa(au, &writer_uas));
  ASSERT_GE(pool_->soft_threshold_generation(), 1u);
  CommandResult t = Exec(*quiet, Bytes(6, 0));
  EXPECT_TRUE(HasSense(t, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
  EXPECT_TRUE(IsGood(Exec(*quiet, Bytes(6, 0))));  // once
  // The writer had it too (on its next command after the crossing).
  CommandResult wt = Exec(Bytes(6, 0));
  EXPECT_EQ(writer_uas + (wt.good() ? 0 : 1), 1);
}

// Thin on thin: the pool file's filesystem filling up (here, the fake Env's
// free-space figure) is reported as the soft threshold, once per crossing,
// long before the pool's own threshold (50 %) is near.
class ThinOnThinTest : public ScsiTest {
 protected:
  void SetUp() override {
    store::PoolOptions opts;
    opts.size_bytes = 40ull << 20;
    opts.allocation_unit = 1u << 20;
    opts.soft_threshold_percent = 50;
    opts.backing_check_interval_ms = 0;  // asked at every allocation
    auto pool = store::Pool::Create(&env_, "/thin-on-thin", opts);
    ASSERT_TRUE(pool.ok()) << pool.status().message();
    pool_ = std::move(pool.value());
    lu_ = AddLu(*pool_, "thin", 64ull << 20, Config("7777aaaa-0000-0000-0000-0000000000b1"));
    ASSERT_NE(lu_, nullptr);
  }
  // Writes AU `au` and a TEST UNIT READY; returns how many of the two
  // reported the soft threshold (a WRITE that did is repeated).
  int WriteAu(uint64_t au) {
    int uas = 0;
    CommandResult w = Write(au * kAuBlocks, Bytes(kAuBlocks * kBlock, 7));
    if (!w.good()) {
      EXPECT_TRUE(HasSense(w, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
      ++uas;
      EXPECT_TRUE(IsGood(Write(au * kAuBlocks, Bytes(kAuBlocks * kBlock, 7))));
    }
    CommandResult t = Exec(Bytes(6, 0));
    if (!t.good()) {
      EXPECT_TRUE(HasSense(t, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
      ++uas;
    }
    return uas;
  }
};

TEST_F(ThinOnThinTest, ABackingFilesystemThatWouldNotHoldThePoolsGrowthIsTheSoftThreshold) {
  EXPECT_EQ(WriteAu(0), 0);  // 1 PiB free: nothing to say
  // The host filesystem has 4 MiB left; the pool can still grow by ~30 MiB.
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 4ull << 20});
  EXPECT_EQ(WriteAu(1), 1);
  EXPECT_EQ(WriteAu(2), 0);  // once
  EXPECT_TRUE(pool_->Space().backing_short);
  // Space again (someone freed files), then short again: reported again.
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 1ull << 40});
  EXPECT_EQ(WriteAu(3), 0);
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 1ull << 20});
  EXPECT_EQ(WriteAu(4), 1);
  EXPECT_LT(pool_->Space().allocated_units, pool_->Space().soft_threshold_units);  // not the percentage
}

// A LUN configured with thin_on_thin=0 reports its pool's percentage
// threshold but not the backing store's shortfall; its neighbour in the same
// pool (default: on) reports the shortfall once.
TEST_F(ThinOnThinTest, ALunWithTheSignalOffReportsOnlyThePercentageThreshold) {
  LunConfig off = Config("7777aaaa-0000-0000-0000-0000000000b2");
  off.thin_on_thin_signal = false;
  auto quiet = AddLu(*pool_, "quiet", 8ull << 20, off);
  ASSERT_NE(quiet, nullptr);
  ASSERT_TRUE(IsGood(Exec(*quiet, Bytes(6, 0))));
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 4ull << 20});
  EXPECT_EQ(WriteAu(0), 1);  // the default LU: once
  EXPECT_TRUE(IsGood(Exec(*quiet, Bytes(6, 0))));
  EXPECT_EQ(pool_->backing_short_generation(), 1u);
  // Past the pool's 50 %: the percentage crossing reaches both.
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 1ull << 40});
  int uas = 0;
  for (uint64_t au = 1; au < 40 && pool_->soft_threshold_generation() == 0; ++au) uas += WriteAu(au);
  ASSERT_EQ(pool_->soft_threshold_generation(), 1u);
  uas += WriteAu(39);  // the crossing's attention may come on the next command
  EXPECT_EQ(uas, 1);
  CommandResult t = Exec(*quiet, Bytes(6, 0));
  EXPECT_TRUE(HasSense(t, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached));
  EXPECT_TRUE(IsGood(Exec(*quiet, Bytes(6, 0))));
}

// Several initiators on one LU. TCMU gives the handler no I_T nexus, so the
// attention is the LU's: the first command to arrive after the crossing,
// from whichever initiator, gets it, and the others do not (documented in
// docs/design/scsi.md, "Known limits"). Four initiators polling with TEST
// UNIT READY at once see it exactly once between them.
TEST_F(ThinOnThinTest, SeveralInitiatorsOnOneLunShareOneAttentionPerCrossing) {
  env_.SetBacking(store::BackingSpace{true, 1ull << 40, 4ull << 20});
  for (int round = 0; round < 2; ++round) {
    // Room again between rounds, then short again: a second crossing.
    if (round == 1) {
      env_.SetBacking(store::BackingSpace{true, 1ull << 40, 1ull << 40});
      ASSERT_TRUE(IsGood(Write(10 * kAuBlocks, Bytes(kAuBlocks * kBlock, 3))));
      env_.SetBacking(store::BackingSpace{true, 1ull << 40, 1ull << 20});
    }
    ASSERT_TRUE(IsGood(Write((round + 1) * kAuBlocks, Bytes(kAuBlocks * kBlock, 3))));
    std::atomic<int> uas{0}, other{0};
    std::vector<std::thread> initiators;
    for (int i = 0; i < 4; ++i) {
      initiators.emplace_back([&] {
        for (int n = 0; n < 50; ++n) {
          CommandResult t = Exec(Bytes(6, 0));
          if (t.good()) continue;
          if (HasSense(t, SenseKey::kUnitAttention, asc::kThinProvisioningSoftThresholdReached)) ++uas;
          else ++other;
        }
      });
    }
    for (auto& t : initiators) t.join();
    EXPECT_EQ(uas.load(), 1) << "round " << round;
    EXPECT_EQ(other.load(), 0);
  }
  EXPECT_EQ(pool_->backing_short_generation(), 2u);
}

TEST_F(ThinProvisioningTest, CompareAndWriteOutOfSpace) {
  CommandResult last;
  const uint64_t written = FillPool(&last);
  Bytes d(2 * kBlock, 0);
  d[kBlock] = 1;
  CommandResult r = Exec(CompareAndWrite(written * kAuBlocks + 5, 1), d);
  EXPECT_TRUE(HasSense(r, SenseKey::kDataProtect, asc::kSpaceAllocationFailedWriteProtect));
  EXPECT_EQ(Read(written * kAuBlocks + 5, 1), Bytes(kBlock, 0));
}

}  // namespace
}  // namespace cowstore::scsi::testing
