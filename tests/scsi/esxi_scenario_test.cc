// SPDX-License-Identifier: Apache-2.0
// ESXi-shaped scenarios on a sparse pool file (the POSIX Env under
// /dev/shm when available): a 20 GiB "VMDK" cloned between two LUNs of one
// copy group with 4 MiB and 16 MiB XCOPY segments (metadata clone: no data
// AU is allocated), eager-zeroing with 1 MiB WRITE SAME, and UNMAP reclaim
// visible in the pool's space accounting.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "handler/scsi/cdb.h"
#include "handler/store/env.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint32_t kBs = 512;

class EsxiScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = std::string(dir) + "/cowstore-scsi-esxi-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::remove(path_.c_str());
    store::PoolOptions o;
    // Thin: the LUNs (up to 2 x 20 GiB) far exceed the pool, the data written
    // (< 100 MiB) does not. The pool stays small enough for /dev/shm to hold
    // its growth, or the thin-on-thin warning (a unit attention) would
    // interrupt these scenarios; ThinOnThinTest covers that warning.
    o.size_bytes = 1 * kGiB;
    o.allocation_unit = 1u << 20;
    auto p = store::Pool::Create(store::DefaultEnv(), path_, o);
    ASSERT_TRUE(p.ok()) << p.status().message();
    pool_ = std::move(p.value());
  }
  void TearDown() override {
    lus_.clear();
    if (pool_) {
      EXPECT_TRUE(pool_->Close().ok());
    }
    pool_.reset();
    std::remove(path_.c_str());
  }
  std::shared_ptr<LogicalUnit> Lu(const std::string& name, uint64_t bytes, const std::string& serial,
                                  const std::string& group) {
    EXPECT_TRUE(pool_->CreateLun(name, bytes, kBs).ok());
    auto lun = pool_->OpenLun(name);
    EXPECT_TRUE(lun.ok());
    LunConfig c;
    c.unit_serial = serial;
    c.copy_group = group;
    auto lu = LogicalUnit::Create(c, lun.value(), &dir_);
    EXPECT_TRUE(lu.ok());
    lus_.push_back(lu.value());
    return lu.value();
  }
  static CommandResult Exec(LogicalUnit& lu, const Bytes& cdb, const Bytes& out = {}) {
    Bytes copy = out;
    iovec v{copy.data(), copy.size()};
    return lu.Execute(cdb, std::span<const iovec>(&v, copy.empty() ? 0 : 1));
  }
  static Bytes Read(LogicalUnit& lu, uint64_t lba, uint32_t blocks) {
    Bytes b(size_t{blocks} * kBs);
    iovec v{b.data(), b.size()};
    Bytes cdb = Read16(lba, blocks);
    EXPECT_TRUE(IsGood(lu.Execute(cdb, std::span<const iovec>(&v, 1))));
    return b;
  }

  std::string path_;
  std::unique_ptr<store::Pool> pool_;
  LunDirectory dir_;
  std::vector<std::shared_ptr<LogicalUnit>> lus_;
};

TEST_F(EsxiScenarioTest, CloneTwentyGiBVmdkBetweenLunsOfOneCopyGroup) {
  const uint64_t vmdk = 20 * kGiB;
  auto src = Lu("ds1", vmdk + 64 * kMiB, "a10ffee0-0000-4000-8000-000000000001", "esx-cluster");
  auto dst = Lu("ds2", vmdk + 64 * kMiB, "b20ffee0-0000-4000-8000-000000000002", "esx-cluster");
  // A sparse guest image: the first 8 MiB (boot) and 1 MiB every GiB.
  std::vector<uint64_t> data_lbas;
  for (uint64_t off = 0; off < 8 * kMiB; off += kMiB) data_lbas.push_back(off / kBs);
  for (uint64_t g = 1; g < 20; ++g) data_lbas.push_back((g * kGiB + 3 * kMiB) / kBs);
  for (size_t i = 0; i < data_lbas.size(); ++i) {
    Bytes d = Pattern(kMiB, static_cast<uint8_t>(i));
    ASSERT_TRUE(IsGood(Exec(*src, Write16(data_lbas[i], kMiB / kBs), d)));
  }
  const store::SpaceInfo before = pool_->Space();
  // First half in 4 MiB segments (ESXi default), second half in 16 MiB ones;
  // one segment per EXTENDED COPY, as ESXi's data mover sends them.
  auto t0 = std::chrono::steady_clock::now();
  uint64_t commands = 0;
  for (uint64_t off = 0; off < vmdk; ) {
    const uint64_t seg = off < vmdk / 2 ? 4 * kMiB : 16 * kMiB;
    XcopyList l;
    l.cscds = {IdentCscd(src->naa()), IdentCscd(dst->naa())};
    l.segments = {BlockSegment(0, 1, static_cast<uint16_t>(seg / kBs), off / kBs, off / kBs)};
    Bytes p = l.Build();
    ASSERT_TRUE(IsGood(Exec(*src, ExtendedCopy(static_cast<uint32_t>(p.size())), p))) << off;
    off += seg;
    ++commands;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("xcopy_commands", static_cast<int>(commands));
  std::printf("20 GiB clone: %llu EXTENDED COPY commands in %.2f s\n",
              static_cast<unsigned long long>(commands), secs);
  EXPECT_EQ(commands, 2560u + 640u);
  const store::SpaceInfo after = pool_->Space();
  // Metadata clone: no new data units (only checkpoint metadata may grow).
  EXPECT_EQ(after.allocated_units - after.metadata_units,
            before.allocated_units - before.metadata_units);
  EXPECT_EQ(after.shared_units, data_lbas.size());
  for (size_t i = 0; i < data_lbas.size(); ++i) {
    EXPECT_EQ(Read(*dst, data_lbas[i], 64), Read(*src, data_lbas[i], 64)) << i;
  }
  EXPECT_EQ(Read(*dst, 10 * kGiB / kBs, 8), Bytes(8 * kBs, 0));
  EXPECT_EQ(src->counters().xcopy_cloned_blocks.load(), vmdk / kBs);
}

TEST_F(EsxiScenarioTest, EagerZeroWithOneMiBWriteSame) {
  auto lu = Lu("vmfs", 4 * kGiB, "c30ffee0-0000-4000-8000-000000000003", "");
  // Some old data in the way, as when a datastore is reused.
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(IsGood(Exec(*lu, Write16(i * 64 * kMiB / kBs, kMiB / kBs), Pattern(kMiB, 1))));
  }
  const uint64_t allocated_before = pool_->Space().allocated_units;
  const uint64_t n = 2 * kGiB / kMiB;  // 2 GiB of a 100 GiB eager-zero, same commands
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(IsGood(Exec(*lu, WriteSame16(i * kMiB / kBs, kMiB / kBs), Bytes(kBs, 0))));
  }
  EXPECT_EQ(Read(*lu, 64 * kMiB / kBs, 16), Bytes(16 * kBs, 0));
  // Zeroing deallocated the old data inside the range and allocated nothing.
  EXPECT_LE(pool_->Space().allocated_units, allocated_before - 16 + 1);
  EXPECT_EQ(lu->counters().write_same_blocks.load(), 2 * kGiB / kBs);
}

TEST_F(EsxiScenarioTest, UnmapReclaimVisibleInPoolSpace) {
  auto lu = Lu("vmfs6", 1 * kGiB, "d40ffee0-0000-4000-8000-000000000004", "");
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(IsGood(Exec(*lu, Write16(i * kMiB / kBs, kMiB / kBs), Pattern(kMiB, 2))));
  }
  const uint64_t free_before = pool_->Space().free_units;
  // VMFS6 automatic UNMAP: 1 MiB granularity, many descriptors per command.
  std::vector<std::pair<uint64_t, uint32_t>> ranges;
  for (uint64_t i = 0; i < 64; ++i) ranges.push_back({i * kMiB / kBs, kMiB / kBs});
  Bytes p = UnmapParams(ranges);
  ASSERT_TRUE(IsGood(Exec(*lu, Unmap(static_cast<uint16_t>(p.size())), p)));
  EXPECT_EQ(pool_->Space().free_units, free_before + 64);
  EXPECT_EQ(pool_->GetLun("vmfs6")->mapped_bytes, 0u);
  EXPECT_EQ(Read(*lu, 0, 8), Bytes(8 * kBs, 0));
}

}  // namespace
}  // namespace cowstore::scsi::testing
