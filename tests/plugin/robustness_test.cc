// SPDX-License-Identifier: Apache-2.0
// The daemon must survive whatever arrives: malformed commands, missing
// buffers, thread cancellation mid-command (the runner pthread_cancel()s its
// workers on device removal), and many threads at once.
#include <pthread.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

class RobustnessTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank", 4ull << 30);
    dev_ = OpenDevice("cowstore/tank/vm1", kSize);
    ASSERT_EQ(Run(dev_, Tur()).scsi_status, 0);
  }
  static constexpr uint64_t kSize = 256ull << 20;
  tcmu_device* dev_ = nullptr;
};

bool ValidStatus(const fake::Outcome& o) {
  return o.scsi_status == 0x00 || o.scsi_status == 0x02 || o.scsi_status == 0x08 ||
         o.scsi_status == 0x28;
}

TEST_F(RobustnessTest, RandomCdbsWithRandomBuffersNeverCrash) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 20000; ++i) {
    Bytes cdb(16);
    for (auto& b : cdb) b = static_cast<uint8_t>(rng());
    if (i % 3 == 0) {  // keep LBAs and lengths small often enough to do work
      for (size_t j = 2; j < 16; ++j) cdb[j] &= (j >= 10 ? 0x01 : 0x00);
    }
    if (cdb[0] == 0x7f) cdb[7] %= 8;  // variable-length CDB inside our buffer
    Bytes data(rng() % 3 == 0 ? 0 : rng() % 8192);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    fake::Outcome o = Run(dev_, cdb, &data);
    ASSERT_TRUE(ValidStatus(o)) << "opcode " << int(cdb[0]) << " status " << int(o.scsi_status);
    if (o.scsi_status == 0x02) {
      ASSERT_EQ(o.sense[0] & 0x7f, 0x70);
    }
  }
  EXPECT_EQ(runner().async_completions.load(), 0);
}

TEST_F(RobustnessTest, MissingPiecesOfACommandGiveCheckConditionNotACrash) {
  // No CDB.
  fake::Outcome o = runner().Finish(
      runner().Start(dev_, Tur(), nullptr, 0, [](tcmu::LibCmd* cmd) { cmd->cdb = nullptr; }));
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x4);
  EXPECT_EQ(o.asc(), 0x44);
  // Buffers announced but absent, for a READ(10) of one block (a well-formed
  // CDB: only the buffers are missing).
  o = runner().Finish(runner().Start(dev_, Read10(0, 1), nullptr, 0, [](tcmu::LibCmd* cmd) {
    cmd->iov_cnt = 3;
    cmd->iovec = nullptr;
  }));
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x4);
  // No tcmulib_cmd at all: nowhere to put sense, nothing to complete (the
  // runner never does this).
  tcmu::RunnerCmd rcmd{};
  rcmd.lib_cmd = nullptr;
  EXPECT_EQ(handler().handle_cmd(dev_, &rcmd), tcmu::kStsHwErr);
  EXPECT_EQ(runner().bad_completions.load(), 0);
}

TEST_F(RobustnessTest, CommandOnDeviceThatIsNotOpenGivesCheckCondition) {
  auto dev = MakeDevice("cowstore/tank/never");
  fake::Outcome o = Run(dev.get(), Tur());
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x4);
}

TEST_F(RobustnessTest, DataOutLengthMismatchIsRejected) {
  Bytes data(100, 1);  // WRITE(10) of 1 block needs 512 bytes
  fake::Outcome o = Run(dev_, Write10(0, 1), &data);
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x5);
}

struct CancelProbe {
  RobustnessTest* test = nullptr;
  tcmu_device* dev = nullptr;
  Bytes* data = nullptr;
  std::atomic<bool> started{false};
  std::atomic<bool> returned{false};
  iovec iov{};
  std::shared_ptr<fake::InFlight> command;
};

// A thread in the runner's role that calls handle_cmd (a worker with
// nr_threads > 0, the device's command thread with 0): cancellable
// (deferred), hands one command to handle_cmd, then reaches a cancellation
// point as the runner's loop does. Synchronously the command is done when
// handle_cmd returns; asynchronously it completes later, from the plugin's
// own threads, which the cancel does not touch.
void* CancellableWorker(void* arg) {
  auto* p = static_cast<CancelProbe*>(arg);
  p->started = true;
  p->command = fake::Runner::Get().Start(p->dev, Write16(0, 16 * 2048), &p->iov, 1);
  p->returned = true;
  for (;;) pthread_testcancel();
  return nullptr;
}

TEST_F(RobustnessTest, CancellationDuringACommandTakesEffectOnlyAfterItCompletes) {
  Bytes data(16u << 20);  // the largest transfer the device accepts
  for (size_t i = 0; i < data.size(); i += 512) data[i] = static_cast<uint8_t>(i >> 9);
  CancelProbe probe;
  probe.test = this;
  probe.dev = dev_;
  probe.data = &data;
  probe.iov = {data.data(), data.size()};
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, CancellableWorker, &probe), 0);
  while (!probe.started) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(pthread_cancel(t), 0);
  void* ret = nullptr;
  ASSERT_EQ(pthread_join(t, &ret), 0);
  EXPECT_EQ(ret, PTHREAD_CANCELED);
  EXPECT_TRUE(probe.returned.load());
  ASSERT_NE(probe.command, nullptr);
  EXPECT_EQ(runner().Finish(probe.command).scsi_status, 0);
  // The whole write is there.
  Bytes back(16u << 20);
  ASSERT_EQ(Run(dev_, Read16(0, 16 * 2048), &back).scsi_status, 0);
  EXPECT_TRUE(back == data);
}

TEST_F(RobustnessTest, ParallelWritersToDisjointRangesAndLuns) {
  tcmu_device* other = OpenDevice("cowstore/tank/vm2", kSize);
  ASSERT_EQ(Run(other, Tur()).scsi_status, 0);
  constexpr int kThreads = 8, kOps = 64;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tcmu_device* d = (t % 2) ? other : dev_;
      Bytes buf(64 * 1024);
      for (int i = 0; i < kOps; ++i) {
        std::fill(buf.begin(), buf.end(), static_cast<uint8_t>(t * 31 + i));
        const uint64_t lba = (uint64_t(t) * kOps + i) * 128;
        if (Run(d, Write16(lba, 128), &buf).scsi_status != 0) ++failures;
        Bytes in(buf.size());
        if (Run(d, Read16(lba, 128), &in).scsi_status != 0 || in != buf) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(RobustnessTest, ReadsAndASameLunCloneRunConcurrently) {
  // A same-pool EXTENDED COPY is a metadata clone (quick, so no timing claim
  // here; the cross-pool test below makes one): reads on another worker
  // thread meanwhile all succeed and the copy lands whole.
  Bytes data(2048 * 512, 0x2f);
  ASSERT_EQ(Run(dev_, Write16(0, 2048), &data).scsi_status, 0);
  Bytes naa = NaaOf(dev_);
  std::vector<XcopySegment> segs;
  for (int i = 0; i < 64; ++i) segs.push_back({0, 0, 2048, 0, 262144 + uint64_t(i) * 2048});
  Bytes params = XcopyParams(7, 0, {naa}, segs, 512);
  std::thread copier([&] {
    fake::Outcome o = Run(dev_, ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
    EXPECT_EQ(o.scsi_status, 0) << int(o.sense_key()) << "/" << int(o.asc());
  });
  for (int i = 0; i < 200; ++i) {
    Bytes in(512);
    ASSERT_EQ(Run(dev_, Read16(500000, 1), &in).scsi_status, 0);
  }
  copier.join();
  Bytes back(2048 * 512);
  ASSERT_EQ(Run(dev_, Read16(262144 + 63 * 2048, 2048), &back).scsi_status, 0);
  EXPECT_EQ(back, data);
}

TEST_F(RobustnessTest, BothLunsKeepServingDuringACrossPoolDataCopy) {
  // Across pools EXTENDED COPY moves data (64 MiB here); reads of both the
  // source and the destination LUN must complete while it runs.
  MakePool("other", 1ull << 30);
  tcmu_device* src = OpenDevice("cowstore/tank/src;copy_group=g", kSize);
  tcmu_device* dst = OpenDevice("cowstore/other/dst;copy_group=g", kSize);
  Run(src, Tur());
  Run(dst, Tur());
  Bytes chunk(16u << 20, 0x4e);
  for (uint64_t lba = 0; lba < (64u << 20) / 512; lba += chunk.size() / 512) {
    ASSERT_EQ(Run(src, Write16(lba, chunk.size() / 512), &chunk).scsi_status, 0);
  }
  std::vector<XcopySegment> segs;
  for (uint64_t i = 0; i < 64; ++i) segs.push_back({0, 1, 2048, i * 2048, i * 2048});
  Bytes params = XcopyParams(9, 0, {NaaOf(src), NaaOf(dst)}, segs, 512);
  std::atomic<bool> done{false};
  std::thread copier([&] {
    fake::Outcome o = Run(dst, ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
    EXPECT_EQ(o.scsi_status, 0) << int(o.sense_key()) << "/" << int(o.asc());
    done = true;
  });
  int served = 0;
  while (!done) {
    Bytes in(4096);
    ASSERT_EQ(Run(served % 2 ? src : dst, Read16(400000, 8), &in).scsi_status, 0);
    ++served;
  }
  copier.join();
  EXPECT_GE(served, 1);
  Bytes back(1u << 20);
  ASSERT_EQ(Run(dst, Read16(63 * 2048, 2048), &back).scsi_status, 0);
  EXPECT_EQ(back, Bytes(1u << 20, 0x4e));
}

}  // namespace
}  // namespace cowstore::plugin_test
