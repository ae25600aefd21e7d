// SPDX-License-Identifier: Apache-2.0
// PosixEnv's File (handler/store/posix_env.cc) where it decides something
// itself: PunchHole skips ranges that are holes already (HoldsNoData), and
// must never skip one that holds data, written, synced or only cached.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "handler/store/env.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * kKiB;

class PosixPunch : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/cowstore-punch-" + std::to_string(::getpid());
    std::filesystem::remove(path_);
    auto f = DefaultEnv()->OpenLocked(path_, Env::Mode::kCreate);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = std::move(f.value());
    ASSERT_TRUE(file_->Truncate(8 * kMiB).ok());
  }
  void TearDown() override {
    file_.reset();
    std::filesystem::remove(path_);
  }
  void Fill(uint64_t off, uint64_t n, uint8_t byte) {
    std::vector<uint8_t> b(n, byte);
    ASSERT_TRUE(file_->Write(off, n, b.data()).ok());
  }
  // The bytes of [off, off + n) that are not zero.
  uint64_t NonZero(uint64_t off, uint64_t n) {
    std::vector<uint8_t> b(n, 0xff);
    EXPECT_TRUE(file_->Read(off, n, b.data()).ok());
    uint64_t k = 0;
    for (uint8_t c : b) k += c != 0;
    return k;
  }
  std::string path_;
  std::unique_ptr<File> file_;
};

TEST_F(PosixPunch, DataOnlyInTheCacheIsPunched) {
  Fill(1 * kMiB, 64 * kKiB, 0xab);  // dirty pages, never written back
  ASSERT_TRUE(file_->PunchHole(1 * kMiB, 64 * kKiB).ok());
  EXPECT_EQ(NonZero(1 * kMiB, 64 * kKiB), 0u);
}

TEST_F(PosixPunch, SyncedDataIsPunched) {
  Fill(1 * kMiB, 64 * kKiB, 0xab);
  ASSERT_TRUE(file_->Sync().ok());
  ASSERT_TRUE(file_->PunchHole(1 * kMiB, 64 * kKiB).ok());
  EXPECT_EQ(NonZero(1 * kMiB, 64 * kKiB), 0u);
}

// A range that starts in a hole and holds data further on (its last 4 KiB,
// cached or synced) is not a hole: looking only where it starts would keep
// that data in a free grain.
TEST_F(PosixPunch, DataAfterAHoleInTheRangeIsPunched) {
  Fill(2 * kMiB - 4 * kKiB, 4 * kKiB, 0xcd);
  ASSERT_TRUE(file_->PunchHole(1 * kMiB, 1 * kMiB).ok());
  EXPECT_EQ(NonZero(1 * kMiB, 1 * kMiB), 0u);
  Fill(4 * kMiB - 4 * kKiB, 4 * kKiB, 0xcd);
  ASSERT_TRUE(file_->Sync().ok());
  ASSERT_TRUE(file_->PunchHole(3 * kMiB, 1 * kMiB).ok());
  EXPECT_EQ(NonZero(3 * kMiB, 1 * kMiB), 0u);
}

// A hole reads as zeros with or without the punch, and the data around it
// stays (the skip must not widen or shift the range).
TEST_F(PosixPunch, AHoleStaysZeroAndItsNeighboursKeepTheirData) {
  Fill(1 * kMiB - 4 * kKiB, 4 * kKiB, 0x11);
  Fill(2 * kMiB, 4 * kKiB, 0x22);
  ASSERT_TRUE(file_->PunchHole(1 * kMiB, 1 * kMiB).ok());
  EXPECT_EQ(NonZero(1 * kMiB, 1 * kMiB), 0u);
  EXPECT_EQ(NonZero(1 * kMiB - 4 * kKiB, 4 * kKiB), 4 * kKiB);
  EXPECT_EQ(NonZero(2 * kMiB, 4 * kKiB), 4 * kKiB);
  // Past the last data, and past the end of the file.
  ASSERT_TRUE(file_->PunchHole(6 * kMiB, 4 * kMiB).ok());
  EXPECT_EQ(NonZero(6 * kMiB, 2 * kMiB), 0u);
}

}  // namespace
}  // namespace cowstore::store
