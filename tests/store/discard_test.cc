// SPDX-License-Identifier: Apache-2.0
// A pool on a File whose discard does not zero (File::DiscardZeroes false,
// store-v3.md 3.8: an RBD image's partial-object discard, a device's plain
// BLKDISCARD). FaultInjectionEnv::SetDiscardZeroes(false) fills every punched
// range with a pattern, so a read of freed space that the store trusted to
// be zeros shows it. The power-cut run in this mode is store_crash_test's
// CrashTest.PowerLossAtRandomPointsFormat3Grain4KWhereDiscardKeepsBytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/journal_segments.h"  // ClearJournalRuns
#include "handler/store/meta.h"              // kJournalOffset
#include "handler/store/pool.h"
#include "handler/store/zero_fill.h"
#include "tests/store/pattern.h"
#include "suite_formats.h"

namespace cowstore::store {
namespace {

using D = Durability;
using testing::AllFormats;
using testing::FormatName;
using testing::SuiteFormat;

constexpr uint32_t kAu = 64 * 1024;
constexpr uint8_t kJunk = FaultInjectionEnv::kDiscardedByte;

using testing::Pattern;

bool AllAre(const uint8_t* p, size_t n, uint8_t b) {
  return std::all_of(p, p + n, [b](uint8_t x) { return x == b; });
}

uint64_t JunkSectors(const std::vector<uint8_t>& img) {
  uint64_t n = 0;
  for (size_t o = 0; o + 512 <= img.size(); o += 512) n += AllAre(img.data() + o, 512, kJunk);
  return n;
}

// ------------------------------------------------------------- the Env

TEST(DiscardThatKeepsBytes, FaultEnvFillsAPunchWithItsPatternAndZeroFillWritesZeros) {
  for (bool zeroes : {true, false}) {
    SCOPED_TRACE(zeroes ? "discard zeroes" : "discard keeps bytes");
    FaultInjectionEnv env;
    env.SetDiscardZeroes(zeroes);
    auto f = env.OpenLocked("f", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    File& file = **f;
    EXPECT_EQ(file.DiscardZeroes(), zeroes);
    const std::vector<uint8_t> data = Pattern(16384, 3);
    ASSERT_TRUE(file.Write(0, data.size(), data.data()).ok());
    ASSERT_TRUE(file.PunchHole(4096, 8192).ok());
    std::vector<uint8_t> v(16384);
    ASSERT_TRUE(file.Read(0, v.size(), v.data()).ok());
    EXPECT_TRUE(std::equal(v.begin(), v.begin() + 4096, data.begin()));
    EXPECT_TRUE(AllAre(v.data() + 4096, 8192, zeroes ? 0 : kJunk));
    EXPECT_TRUE(std::equal(v.begin() + 12288, v.end(), data.begin() + 12288));
    // A punch is a write to the power-cut model: unsynced until Sync.
    EXPECT_EQ(env.unsynced_sectors("f"), 32u);
    ASSERT_TRUE(file.Sync().ok());
    EXPECT_EQ(env.DurableSnapshot("f"), v);
    // ZeroFill leaves zeros either way (written where the discard keeps bytes).
    ASSERT_TRUE(ZeroFill(&file, 0, 16384).ok());
    ASSERT_TRUE(file.Read(0, v.size(), v.data()).ok());
    EXPECT_TRUE(AllAre(v.data(), v.size(), 0));
    EXPECT_EQ(env.calls(FaultInjectionEnv::Op::kWrite), zeroes ? 1u : 2u);
  }
}

// Journal space must read as zeros, not merely be freed: a segment new to a
// format 3 journal held data, which a guest may have shaped as records
// (journal_segments.h), and format 2's journal is emptied after each
// checkpoint. Both are zeroed, not discarded, where the discard keeps bytes.
TEST(DiscardThatKeepsBytes, ANewJournalSegmentIsZeroedNotDiscarded) {
  FaultInjectionEnv env;
  env.SetDiscardZeroes(false);
  auto f = env.OpenLocked("f", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  const std::vector<uint8_t> old = Pattern(4 * kAu, 5);  // a data area of 4 AUs after one AU
  ASSERT_TRUE((*f)->Write(kAu, old.size(), old.data()).ok());
  ASSERT_TRUE(ClearJournalRuns(f->get(), kAu, kAu, {{1, 2}}).ok());
  std::vector<uint8_t> v(old.size());
  ASSERT_TRUE((*f)->Read(kAu, v.size(), v.data()).ok());
  EXPECT_TRUE(std::equal(v.begin(), v.begin() + kAu, old.begin()));
  EXPECT_TRUE(AllAre(v.data() + kAu, 2 * kAu, 0));
  EXPECT_TRUE(std::equal(v.begin() + 3 * kAu, v.end(), old.begin() + 3 * kAu));
}

TEST(DiscardThatKeepsBytes, AFormat2JournalIsZeroedAfterACheckpoint) {
  FaultInjectionEnv env;
  env.SetDiscardZeroes(false);
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.size_bytes = 128 * 1024 + 64 * kAu;
  {
    auto p = Pool::Create(&env, "pool", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("a", 1 << 20, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    const std::vector<uint8_t> d = Pattern(4096, 7);
    for (uint64_t lba = 0; lba < 2048; lba += 64) ASSERT_TRUE(a->Write(lba, 8, d.data(), D::kDurable).ok());
    a.reset();
    ASSERT_TRUE((*p)->Close().ok());  // checkpoints, which empty the journal
  }
  const std::vector<uint8_t> img = env.Snapshot("pool");
  ASSERT_GE(img.size(), kJournalOffset + o.journal_bytes);
  // Past the records written since (Close's own), zeros: no sector of the
  // pattern a discard would have left.
  const std::vector<uint8_t> journal(img.begin() + kJournalOffset, img.begin() + kJournalOffset + o.journal_bytes);
  EXPECT_EQ(JunkSectors(journal), 0u);
  EXPECT_TRUE(AllAre(journal.data() + o.journal_bytes / 2, o.journal_bytes / 2, 0));
  ASSERT_TRUE(Pool::Open(&env, "pool").ok());
}

// ------------------------------------------------------------- a pool

class DiscardKeepsBytes : public ::testing::TestWithParam<SuiteFormat> {
 protected:
  void SetUp() override {
    env_.SetDiscardZeroes(false);
    PoolOptions o;
    o.allocation_unit = kAu;
    o.journal_bytes = 64 * 1024;
    o.size_bytes = 128 * 1024 + 64 * kAu + GetParam().JournalRoomBytes(kAu);
    GetParam().Apply(&o);
    // The pool's free space holds the pattern from here on: the load that
    // ends Create punches it, as every open does.
    auto p = Pool::Create(&env_, "pool", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(*p);
    ASSERT_TRUE(pool_->CreateLun("a", 1 << 20, 512).ok());
    Reopen();
  }
  void Reopen() {
    a_.reset();
    if (pool_) {
      ASSERT_TRUE(pool_->Close().ok());
    }
    pool_.reset();
    auto p = Pool::Open(&env_, "pool");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(*p);
    auto a = pool_->OpenLun("a");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    a_ = *a;
  }
  std::vector<uint8_t> ReadAll() {
    std::vector<uint8_t> v(1 << 20);
    EXPECT_TRUE(a_->Read(0, 2048, v.data()).ok());
    return v;
  }
  void ExpectClean() {
    CheckReport r = pool_->Check();
    EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
  }

  FaultInjectionEnv env_;
  std::unique_ptr<Pool> pool_;
  std::shared_ptr<Lun> a_;
};

INSTANTIATE_TEST_SUITE_P(Formats, DiscardKeepsBytes, AllFormats(), FormatName());

// Writes into part of fresh grains (one sector, a sector on each side of a
// grain boundary, an odd-sized run), buffered and durable, write the whole
// grain: the rest reads as zeros, before and after a reopen.
TEST_P(DiscardKeepsBytes, WritesIntoPartOfAFreedGrainReadZerosAroundThem) {
  ASSERT_GT(JunkSectors(env_.Snapshot("pool")), 1000u) << "no freed space holds the pattern";
  std::vector<uint8_t> model(1 << 20, 0);
  const uint64_t grain_blocks = (GetParam().grain ? GetParam().grain : kAu) / 512;
  struct W { uint64_t lba, n; D d; };
  const std::vector<W> writes = {
      {3, 1, D::kDurable},                          // one sector inside a grain
      {grain_blocks * 2 - 1, 2, D::kDurable},       // across a grain boundary
      {grain_blocks * 5 + 7, 37, D::kBuffered},     // an odd run
      {grain_blocks * 9 + 1, grain_blocks, D::kDurable},  // two partial grains
  };
  uint8_t seed = 10;
  for (const W& w : writes) {
    const std::vector<uint8_t> d = Pattern(w.n * 512, seed++);
    ASSERT_TRUE(a_->Write(w.lba, w.n, d.data(), w.d).ok());
    std::copy(d.begin(), d.end(), model.begin() + static_cast<ptrdiff_t>(w.lba * 512));
  }
  EXPECT_EQ(ReadAll(), model);
  ASSERT_TRUE(a_->Flush().ok());
  ExpectClean();
  Reopen();
  EXPECT_EQ(ReadAll(), model);
  ExpectClean();
}

// Thick provisioning maps fresh grains without data of its own: they must
// read as zeros, and what a write put in part of one stays as written.
TEST_P(DiscardKeepsBytes, AllocatedGrainsReadZeros) {
  std::vector<uint8_t> model(1 << 20, 0);
  const std::vector<uint8_t> d = Pattern(512, 40);
  ASSERT_TRUE(a_->Write(100, 1, d.data(), D::kDurable).ok());
  std::copy(d.begin(), d.end(), model.begin() + 100 * 512);
  ASSERT_TRUE(a_->Allocate(0, 2048, D::kDurable).ok());
  auto st = a_->GetAllocationStatus(0, 2048);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->size(), 1u);
  EXPECT_TRUE((*st)[0].mapped);
  EXPECT_EQ(ReadAll(), model);
  ExpectClean();
  Reopen();
  EXPECT_EQ(ReadAll(), model);
  ExpectClean();
}

// Freed grains come back to the allocator holding the pattern (an unmap's
// punch): written in part again, they read zeros around the new bytes.
TEST_P(DiscardKeepsBytes, GrainsFreedByAnUnmapAreNotTrustedWhenReused) {
  const std::vector<uint8_t> full = Pattern(1 << 20, 60);
  ASSERT_TRUE(a_->Write(0, 2048, full.data(), D::kDurable).ok());
  ASSERT_TRUE(a_->Unmap(0, 2048, D::kDurable).ok());
  ASSERT_TRUE(pool_->Flush().ok());
  std::vector<uint8_t> model(1 << 20, 0);
  EXPECT_EQ(ReadAll(), model);
  for (uint64_t lba = 1; lba < 2048; lba += 97) {
    const std::vector<uint8_t> d = Pattern(512, static_cast<uint8_t>(lba));
    ASSERT_TRUE(a_->Write(lba, 1, d.data(), D::kDurable).ok());
    std::copy(d.begin(), d.end(), model.begin() + static_cast<ptrdiff_t>(lba * 512));
  }
  EXPECT_EQ(ReadAll(), model);
  Reopen();
  EXPECT_EQ(ReadAll(), model);
  ExpectClean();
}

}  // namespace
}  // namespace cowstore::store
