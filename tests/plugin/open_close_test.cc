// SPDX-License-Identifier: Apache-2.0
// open/close/reconfig: the LUN's life as the runner drives it.
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

class OpenCloseTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank");
  }
  // The LUN as the store sees it, with no device open on the pool.
  store::LunInfo LunInPool(const std::string& pool, const std::string& lun) {
    auto p = store::Pool::Open(store::DefaultEnv(), PoolPath(pool));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return {};
    auto info = p.value()->GetLun(lun);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_TRUE(p.value()->Close().ok());
    return info.ok() ? info.value() : store::LunInfo{};
  }
  int OpenRc(tcmu_device* dev) { return runner().Open(dev); }
  uint64_t CapacityBlocks(tcmu_device* dev) {
    fake::Outcome o;
    Bytes b = RunIn(dev, ReadCapacity16(), 32, &o);
    EXPECT_EQ(o.scsi_status, 0);
    uint64_t last = 0;
    for (int i = 0; i < 8; ++i) last = last << 8 | b[i];
    return last + 1;
  }
};

TEST_F(OpenCloseTest, OpenCreatesMissingLunWithConfigfsSizeAndBlockSize) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 96ull << 20, 4096);
  EXPECT_NE(dev->tcmur_private, nullptr);
  CloseDevice(dev);
  store::LunInfo info = LunInPool("tank", "vm1");
  EXPECT_EQ(info.size_bytes, 96ull << 20);
  EXPECT_EQ(info.block_size, 4096u);
}

TEST_F(OpenCloseTest, CloseReleasesThePoolSoItCanBeOpenedAgain) {
  tcmu_device* a = OpenDevice("cowstore/tank/a");
  tcmu_device* b = OpenDevice("cowstore/tank/b");  // shares the open Pool
  CloseDevice(a);
  // Still held by b: a second opener of the pool file is refused.
  EXPECT_FALSE(store::Pool::Open(store::DefaultEnv(), PoolPath("tank")).ok());
  CloseDevice(b);
  auto p = store::Pool::Open(store::DefaultEnv(), PoolPath("tank"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p.value()->ListLuns().size(), 2u);
  EXPECT_TRUE(p.value()->Close().ok());
}

TEST_F(OpenCloseTest, ManyLunsOfOnePoolShareOnePoolObject) {
  std::vector<tcmu_device*> devs;
  for (int i = 0; i < 8; ++i) devs.push_back(OpenDevice("cowstore/tank/lun" + std::to_string(i)));
  for (tcmu_device* d : devs) EXPECT_EQ(Run(d, Tur()).scsi_status, 0);
  for (tcmu_device* d : devs) CloseDevice(d);
  EXPECT_TRUE(store::Pool::Open(store::DefaultEnv(), PoolPath("tank")).ok());
}

TEST_F(OpenCloseTest, ReopenOfExistingLunWithSameSizeKeepsData) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 8ull << 20);
  Bytes data(512, 0x5a);
  ASSERT_EQ(Run(dev, Write10(7, 1), &data).scsi_status, 0);
  CloseDevice(dev);
  dev = OpenDevice("cowstore/tank/vm1", 8ull << 20);
  fake::Outcome o;
  Bytes back = RunIn(dev, Read10(7, 1), 512, &o);
  EXPECT_EQ(o.scsi_status, 0);
  EXPECT_EQ(back, data);
}

TEST_F(OpenCloseTest, BiggerConfigfsSizeGrowsTheLun) {
  CloseDevice(OpenDevice("cowstore/tank/vm1", 8ull << 20));
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 16ull << 20);
  EXPECT_EQ(CapacityBlocks(dev), (16ull << 20) / 512);
  CloseDevice(dev);
  EXPECT_EQ(LunInPool("tank", "vm1").size_bytes, 16ull << 20);
}

TEST_F(OpenCloseTest, SmallerConfigfsSizeFailsOpenWithReason) {
  CloseDevice(OpenDevice("cowstore/tank/vm1", 16ull << 20));
  auto dev = MakeDevice("cowstore/tank/vm1", 8ull << 20);
  EXPECT_EQ(OpenRc(dev.get()), -EINVAL);
  EXPECT_EQ(dev->tcmur_private, nullptr);
  EXPECT_TRUE(runner().LogContains("the LUN is 16777216 bytes but the backstore's size is 8388608"));
  EXPECT_EQ(LunInPool("tank", "vm1").size_bytes, 16ull << 20);  // untouched
}

TEST_F(OpenCloseTest, BlockSizeMismatchFailsOpen) {
  CloseDevice(OpenDevice("cowstore/tank/vm1", 8ull << 20, 512));
  auto dev = MakeDevice("cowstore/tank/vm1", 8ull << 20, 4096);
  EXPECT_EQ(OpenRc(dev.get()), -EINVAL);
  EXPECT_TRUE(runner().LogContains("block size 512"));
}

TEST_F(OpenCloseTest, UnsupportedBlockSizeFailsOpen) {
  auto dev = MakeDevice("cowstore/tank/vm1", 8ull << 20, 1024);
  EXPECT_EQ(OpenRc(dev.get()), -EINVAL);
  EXPECT_TRUE(runner().LogContains("hw_block_size 1024 is not supported"));
}

TEST_F(OpenCloseTest, ZeroSizeFailsOpen) {
  auto dev = MakeDevice("cowstore/tank/vm1", 0);
  EXPECT_EQ(OpenRc(dev.get()), -EINVAL);
}

TEST_F(OpenCloseTest, MissingPoolFailsOpenWithENOENT) {
  auto dev = MakeDevice("cowstore/nopool/vm1");
  EXPECT_EQ(OpenRc(dev.get()), -ENOENT);
  EXPECT_TRUE(runner().LogContains("cannot open pool " + PoolPath("nopool")));
}

// A pool the store refuses to open (both superblock copies damaged) fails
// its LUNs' opens with EIO and a reason that names the tool to look at it,
// inside the daemon: no crash, not a byte of the pool file changed, no half
// entry left (a second open fails the same way), and another pool of the
// same daemon goes on serving.
TEST_F(OpenCloseTest, DamagedPoolFailsOpenLeavesItUntouchedAndOtherPoolsServe) {
  MakePool("bad", 64ull << 20);
  CloseDevice(OpenDevice("cowstore/bad/vm1", 8ull << 20));
  const std::string bad = PoolPath("bad");
  auto read_all = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  {
    std::string img = read_all(bad);
    ASSERT_GT(img.size(), 2 * store::kSuperblockSlot);
    img[100] ^= 0x40;  // past each copy's magic: a CRC failure, not "no pool"
    img[store::kSuperblockSlot + 100] ^= 0x40;
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << img;
  }
  const std::string before = read_all(bad);
  tcmu_device* tank = OpenDevice("cowstore/tank/vm1", 8ull << 20);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto dev = MakeDevice("cowstore/bad/vm1", 8ull << 20);
    EXPECT_EQ(OpenRc(dev.get()), -EIO);
    EXPECT_EQ(dev->tcmur_private, nullptr);
  }
  EXPECT_TRUE(runner().LogContains("cannot open pool " + bad + ": Corruption"));
  EXPECT_TRUE(runner().LogContains("`cowctl pool check bad`"));
  EXPECT_EQ(read_all(bad), before);
  Bytes data(512, 0x3c);
  ASSERT_EQ(Run(tank, Write10(5, 1), &data).scsi_status, 0);
  fake::Outcome o;
  EXPECT_EQ(RunIn(tank, Read10(5, 1), 512, &o), data);
  EXPECT_EQ(o.scsi_status, 0);
}

TEST_F(OpenCloseTest, InvalidCfgstringFailsOpen) {
  auto dev = MakeDevice("cowstore/tank/vm1:bogus=1");
  EXPECT_EQ(OpenRc(dev.get()), -EINVAL);
  EXPECT_TRUE(runner().LogContains("unknown option 'bogus'"));
}

TEST_F(OpenCloseTest, SameLunTwiceInOneDaemonFailsTheSecondOpen) {
  OpenDevice("cowstore/tank/vm1");
  auto dev = MakeDevice("cowstore/tank/vm1");
  EXPECT_EQ(OpenRc(dev.get()), -EBUSY);
  EXPECT_TRUE(runner().LogContains("another backstore"));
}

TEST_F(OpenCloseTest, PoolDirectoryComesFromTheEnvironment) {
  // A pool of the same name elsewhere is not reachable.
  auto dev = MakeDevice("cowstore/tank/vm1");
  setenv("COWSTORE_POOL_DIR", "/nonexistent-dir", 1);
  EXPECT_EQ(OpenRc(dev.get()), -ENOENT);
  EXPECT_TRUE(runner().LogContains("/nonexistent-dir/tank"));
  setenv("COWSTORE_POOL_DIR", dir_.c_str(), 1);
  EXPECT_EQ(OpenRc(dev.get()), 0);
  CloseDevice(dev.get());
}

TEST_F(OpenCloseTest, ReconfigResizeGrowsAndRaisesCapacityChanged) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 8ull << 20);
  EXPECT_EQ(Run(dev, Tur()).scsi_status, 0);
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgDevSize;
  cfg.data.dev_size = 32ull << 20;
  EXPECT_EQ(handler().reconfig(dev, &cfg), 0);
  // The runner's own pending UA is never reported in handle_cmd-only mode:
  // the logical unit reports CAPACITY DATA HAS CHANGED itself, once.
  fake::Outcome o = Run(dev, Tur());
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x6);
  EXPECT_EQ(o.asc(), 0x2a);
  EXPECT_EQ(o.ascq(), 0x09);
  EXPECT_EQ(Run(dev, Tur()).scsi_status, 0);
  EXPECT_EQ(CapacityBlocks(dev), (32ull << 20) / 512);
  CloseDevice(dev);
  EXPECT_EQ(LunInPool("tank", "vm1").size_bytes, 32ull << 20);
}

TEST_F(OpenCloseTest, ReconfigResizeShrinksWithAWarning) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 32ull << 20);
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgDevSize;
  cfg.data.dev_size = 8ull << 20;
  EXPECT_EQ(handler().reconfig(dev, &cfg), 0);
  EXPECT_TRUE(runner().LogContains("shrunk from 33554432 bytes to 8388608 bytes"));
  Run(dev, Tur());  // CAPACITY DATA HAS CHANGED
  EXPECT_EQ(CapacityBlocks(dev), (8ull << 20) / 512);
}

TEST_F(OpenCloseTest, ReconfigResizeToUnalignedSizeIsRefused) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1", 8ull << 20, 4096);
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgDevSize;
  cfg.data.dev_size = (8ull << 20) + 512;
  EXPECT_EQ(handler().reconfig(dev, &cfg), -EINVAL);
  EXPECT_EQ(CapacityBlocks(dev), (8ull << 20) / 4096);
}

TEST_F(OpenCloseTest, ReconfigCfgstringChangeIsRefusedSameStringAccepted) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1:copy_group=a");
  std::string other = "cowstore/tank/vm2";
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgDevCfgstring;
  cfg.data.dev_cfgstring = other.data();
  EXPECT_EQ(handler().reconfig(dev, &cfg), -EOPNOTSUPP);
  EXPECT_TRUE(runner().LogContains("changing the cfgstring of an open LUN"));
  std::string same = "cowstore/tank/vm1:copy_group=a";
  cfg.data.dev_cfgstring = same.data();
  EXPECT_EQ(handler().reconfig(dev, &cfg), 0);
}

TEST_F(OpenCloseTest, ReconfigWriteCacheShowsInCachingModePage) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1");
  auto wce = [&] {
    fake::Outcome o;
    Bytes b = RunIn(dev, ModeSense6(0x08, 64), 64, &o);
    EXPECT_EQ(o.scsi_status, 0);
    const size_t page = 4 + b[3];  // after header and block descriptors
    return (b[page + 2] & 0x04) != 0;
  };
  EXPECT_FALSE(wce());  // default wce=0
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgWriteCache;
  cfg.data.write_cache = true;
  EXPECT_EQ(handler().reconfig(dev, &cfg), 0);
  Run(dev, Tur());  // consumes MODE PARAMETERS CHANGED
  EXPECT_TRUE(wce());
}

TEST_F(OpenCloseTest, WceOptionSetsTheInitialWriteCache) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1:wce=1");
  fake::Outcome o;
  Bytes b = RunIn(dev, ModeSense6(0x08, 64), 64, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_NE(b[4 + b[3] + 2] & 0x04, 0);
}

TEST_F(OpenCloseTest, UnitSerialWrittenAfterOpenIsUsedFromTheFirstCommand) {
  // rtslib and cowctl write wwn/vpd_unit_serial after enabling the backstore.
  auto dev = MakeDevice("cowstore/tank/vm1");
  dev->wwn = "";
  ASSERT_EQ(OpenRc(dev.get()), 0);
  dev->wwn = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  fake::Outcome o;
  Bytes page = RunIn(dev.get(), Inquiry(true, 0x80, 255), 255, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(&page[4]), page[3]).substr(0, 36),
            "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
  Bytes naa = NaaOf(dev.get());
  EXPECT_EQ(naa[0], 0x60);
  EXPECT_EQ(naa[3], 0x50);  // 0x5 | first hex digit '0'
  EXPECT_EQ(naa[4], 0xf1);
  CloseDevice(dev.get());
}

TEST_F(OpenCloseTest, UnitAttentionsQueuedBeforeTheSerialWasSetAreStillReported) {
  auto dev = MakeDevice("cowstore/tank/vm1", 8ull << 20);
  dev->wwn = "";
  ASSERT_EQ(OpenRc(dev.get()), 0);
  tcmu::CfgInfo cfg{};
  cfg.type = tcmu::kCfgDevSize;
  cfg.data.dev_size = 16ull << 20;
  ASSERT_EQ(handler().reconfig(dev.get(), &cfg), 0);
  dev->wwn = NewSerial();  // the logical unit is rebuilt at the first command
  fake::Outcome o = Run(dev.get(), Tur());
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.asc(), 0x2a);
  EXPECT_EQ(o.ascq(), 0x09);
  CloseDevice(dev.get());
}

TEST_F(OpenCloseTest, WithoutAnyUnitSerialTheLunStillServes) {
  auto dev = MakeDevice("cowstore/tank/vm1");
  dev->wwn.reset();  // configfs unreadable
  ASSERT_EQ(OpenRc(dev.get()), 0);
  EXPECT_EQ(Run(dev.get(), Tur()).scsi_status, 0);
  fake::Outcome o;
  Bytes page = RunIn(dev.get(), Inquiry(true, 0x80, 255), 255, &o);
  EXPECT_EQ(o.scsi_status, 0);
  EXPECT_GT(page[3], 0);  // derived from the LUN's UUID
  CloseDevice(dev.get());
}

TEST_F(OpenCloseTest, CloseOfNeverOpenedDeviceIsHarmless) {
  auto dev = MakeDevice("cowstore/tank/vm1");
  runner().Close(dev.get());
  EXPECT_EQ(dev->tcmur_private, nullptr);
}

}  // namespace
}  // namespace cowstore::plugin_test
