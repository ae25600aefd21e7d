// SPDX-License-Identifier: Apache-2.0
// PosixEnv's File (handler/store/posix_env.cc) where it decides something
// itself: PunchHole skips ranges that are holes already (HoldsNoData), and
// must never skip one that holds data, written, synced or only cached; and
// the traits it declares for a regular file and a block device (env.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/meta.h"           // kSuperblockSlot
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"

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

// ------------------------------------------------- traits (store-v3.md 3.8)

// A regular file is the store's to size, in pages.
TEST_F(PosixPunch, ARegularFileCanTruncateAndWritesPages) {
  EXPECT_TRUE(file_->CanTruncate());
  EXPECT_EQ(file_->AtomicWriteBytes(), 4096u);
  ASSERT_TRUE(file_->Truncate(9 * kMiB).ok());
  EXPECT_EQ(file_->Size().value(), 9 * kMiB);
}

// A device's physical block, up to 4096: a zvol's 16 KiB volblocksize (its
// read-modify-write transactional) must not refuse the pool.
TEST(PosixDevice, TheAtomicUnitIsThePhysicalBlockUpTo4096) {
  EXPECT_EQ(DeviceAtomicWriteBytes(512, 512), 512u);
  EXPECT_EQ(DeviceAtomicWriteBytes(4096, 512), 4096u) << "512e";
  EXPECT_EQ(DeviceAtomicWriteBytes(16384, 512), 4096u) << "a zvol";
  EXPECT_EQ(DeviceAtomicWriteBytes(0, 2048), 2048u) << "only the logical size known";
  EXPECT_EQ(DeviceAtomicWriteBytes(0, 0), 4096u) << "neither known";
}

// A loop device of `sector` bytes over a sparse file of `bytes`; its path,
// empty (and why in *why) if none can be made here.
std::string AttachLoop(const std::string& backing, uint64_t bytes, uint32_t sector, std::string* why) {
  std::filesystem::remove(backing);
  { std::ofstream(backing).flush(); }
  std::filesystem::resize_file(backing, bytes);
  const std::string out = backing + ".out";
  const std::string cmd = "losetup --find --show --sector-size " + std::to_string(sector) + " " + backing +
                          " >" + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  text.erase(text.find_last_not_of('\n') + 1);
  if (rc != 0) {
    *why = text;
    return "";
  }
  return text;
}

// A block device is its own size, and declares its physical block as its
// atomic write unit: a loop device of 512-byte sectors 512, of 4096-byte
// sectors 4096. A format 3 pool made on the first takes 512 as its write
// unit (its superblock's), and a Grow past the device is refused.
TEST(PosixDevice, ADeviceIsItsOwnSizeAndWritesItsPhysicalBlock) {
  if (::geteuid() != 0 || std::system("losetup --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and losetup";
  const std::string base = ::testing::TempDir() + "/cowstore-dev-" + std::to_string(::getpid());
  for (uint32_t sector : {512u, 4096u}) {
    SCOPED_TRACE("sector " + std::to_string(sector));
    std::string why;
    const std::string dev = AttachLoop(base, 32 * kMiB, sector, &why);
    if (dev.empty()) GTEST_SKIP() << "no loop device: " << why;
    {
      auto f = DefaultEnv()->OpenLocked(dev, Env::Mode::kReadWrite);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      EXPECT_FALSE((*f)->CanTruncate());
      EXPECT_EQ((*f)->AtomicWriteBytes(), sector);
      EXPECT_EQ((*f)->Truncate(64 * kMiB).code(), Code::kUnsupported);
      EXPECT_EQ((*f)->Size().value(), 32 * kMiB);
    }
    PoolOptions o;
    o.format = 3;
    o.allocation_unit = 64 * kKiB;
    o.grain = 4096;
    o.journal_bytes = 64 * kKiB;
    {
      auto p = Pool::Create(DefaultEnv(), dev, o);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ((*p)->Grow(64 * kMiB).code(), Code::kInvalidArgument);
      ASSERT_TRUE((*p)->Close().ok());
    }
    std::vector<uint8_t> slot(kSuperblockSlot);
    {
      auto f = DefaultEnv()->OpenLocked(dev, Env::Mode::kReadOnly);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ASSERT_TRUE((*f)->Read(0, slot.size(), slot.data()).ok());
    }
    SuperblockV3 sb;
    Status s = DecodeSuperblockV3(slot.data(), slot.size(), 32 * kMiB, &sb);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(sb.write_unit, sector);
    std::system(("losetup -d " + dev).c_str());
    std::filesystem::remove(base);
  }
}

}  // namespace
}  // namespace cowstore::store
