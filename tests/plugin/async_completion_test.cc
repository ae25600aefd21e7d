// SPDX-License-Identifier: Apache-2.0
// Asynchronous completion (device_server.h), as tcmu-runner runs it with
// nr_threads 0: handle_cmd returns TCMU_STS_ASYNC_HANDLED at once and the
// plugin completes each command later through libtcmu's
// tcmulib_command_complete, which frees it (the fake frees it too, so a use
// after completion shows under ASan). In synchronous mode (the same suite
// runs again with COWSTORE_COMPLETION=sync) the runner's worker completes
// what handle_cmd returns; these tests check what both promise.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

constexpr uint64_t kSize = 256ull << 20;

class AsyncCompletionTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank");
    dev_ = OpenDevice("cowstore/tank/vm1", kSize);
    ASSERT_EQ(Run(dev_, Tur()).scsi_status, 0);
    completions_before_ = runner().lib_completions.load();
  }
  bool async() { return handler().nr_threads == 0; }

  // One 64 KiB write of `fill` at slot i, with its buffer kept alive.
  struct Write {
    Bytes data;
    iovec iov{};
    std::shared_ptr<fake::InFlight> cmd;
  };
  std::unique_ptr<Write> StartWrite(tcmu_device* dev, uint64_t slot, uint8_t fill) {
    auto w = std::make_unique<Write>();
    w->data.assign(64 * 1024, fill);
    w->iov = {w->data.data(), w->data.size()};
    w->cmd = runner().Start(dev, Write16(slot * 128, 128), &w->iov, 1);
    return w;
  }

  tcmu_device* dev_ = nullptr;
  int completions_before_ = 0;
};

TEST_F(AsyncCompletionTest, EveryCommandIsCompletedOnceAndHandleCmdNeverBlocksOnIt) {
  constexpr int kCommands = 96;
  std::vector<std::unique_ptr<Write>> writes;
  for (int i = 0; i < kCommands; ++i) {
    writes.push_back(StartWrite(dev_, i, static_cast<uint8_t>(i + 1)));
    EXPECT_EQ(writes.back()->cmd->returned, async() ? tcmu::kStsAsyncHandled : tcmu::kStsOk);
  }
  for (auto& w : writes) {
    const fake::Outcome o = runner().Finish(w->cmd);
    EXPECT_EQ(o.scsi_status, 0);
    EXPECT_EQ(o.tcmu_status, tcmu::kStsOk);
  }
  for (int i = 0; i < kCommands; ++i) {
    Bytes in(64 * 1024);
    ASSERT_EQ(Run(dev_, Read16(uint64_t(i) * 128, 128), &in).scsi_status, 0);
    EXPECT_EQ(in, Bytes(64 * 1024, static_cast<uint8_t>(i + 1))) << "slot " << i;
  }
  EXPECT_EQ(runner().bad_completions.load(), 0);
  EXPECT_EQ(runner().overlapping_completions.load(), 0);
  EXPECT_EQ(runner().async_completions.load(), 0);  // tcmur_cmd_complete: never
  if (async()) {
    // The writes, the reads and nothing else, each once.
    EXPECT_EQ(runner().lib_completions.load() - completions_before_, 2 * kCommands);
    EXPECT_GE(runner().processing_completes.load(), 1);
  } else {
    EXPECT_EQ(runner().lib_completions.load(), completions_before_);
  }
}

TEST_F(AsyncCompletionTest, CloseCompletesEveryCommandStillInFlightAndKeepsWhatWasAnsweredGood) {
  constexpr int kCommands = 64;
  std::vector<std::unique_ptr<Write>> writes;
  for (int i = 0; i < kCommands; ++i) writes.push_back(StartWrite(dev_, i, static_cast<uint8_t>(0x40 + i)));
  CloseDevice(dev_);  // the runner's close(): the ring is still mapped, the handler drains
  for (auto& w : writes) {
    EXPECT_TRUE(runner().Completed(w->cmd)) << "completed only after close() returned";
    EXPECT_EQ(runner().Finish(w->cmd).scsi_status, 0);
  }
  EXPECT_EQ(runner().bad_completions.load(), 0);
  // Write cache off: GOOD was durable, and the LUN holds it when reopened.
  tcmu_device* again = OpenDevice("cowstore/tank/vm1", kSize);
  for (int i = 0; i < kCommands; ++i) {
    Bytes in(64 * 1024);
    fake::Outcome o = Run(again, Read16(uint64_t(i) * 128, 128), &in);
    if (o.scsi_status == 0x02 && o.sense_key() == 0x6) o = Run(again, Read16(uint64_t(i) * 128, 128), &in);
    ASSERT_EQ(o.scsi_status, 0);
    EXPECT_EQ(in, Bytes(64 * 1024, static_cast<uint8_t>(0x40 + i))) << "slot " << i;
  }
}

TEST_F(AsyncCompletionTest, DevicesCompleteIndependentlyFromManySubmitters) {
  tcmu_device* other = OpenDevice("cowstore/tank/vm2", kSize);
  ASSERT_EQ(Run(other, Tur()).scsi_status, 0);
  constexpr int kThreads = 4, kPerThread = 48;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      tcmu_device* d = t % 2 ? other : dev_;
      std::vector<std::unique_ptr<Write>> mine;
      for (int i = 0; i < kPerThread; ++i)
        mine.push_back(StartWrite(d, uint64_t(t) * kPerThread + i, static_cast<uint8_t>(t * 50 + i)));
      for (auto& w : mine)
        if (runner().Finish(w->cmd).scsi_status != 0) ++failures[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  EXPECT_EQ(runner().bad_completions.load(), 0);
  EXPECT_EQ(runner().overlapping_completions.load(), 0);  // per device, never two at once
  Bytes in(64 * 1024);
  ASSERT_EQ(Run(other, Read16((uint64_t(1) * kPerThread + 5) * 128, 128), &in).scsi_status, 0);
  EXPECT_EQ(in, Bytes(64 * 1024, static_cast<uint8_t>(50 + 5)));
}

TEST_F(AsyncCompletionTest, ACommandForADeviceNeverOpenedIsStillAnswered) {
  auto dev = MakeDevice("cowstore/tank/never");
  const fake::Outcome o = runner().Finish(runner().Start(dev.get(), Tur(), nullptr, 0));
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x4);
  EXPECT_EQ(runner().bad_completions.load(), 0);
}

}  // namespace
}  // namespace cowstore::plugin_test
