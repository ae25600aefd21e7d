// SPDX-License-Identifier: Apache-2.0
// CommandPipeline (command_pipeline.h): every command answered once; the
// commands that finish while a commit runs share the next one; GOOD only
// once durable (a power cut right after an answer keeps what it answered);
// a failed commit turns GOOD into the write error; the destructor answers
// everything queued; clones, unmaps and zeroings run one at a time in the
// serial lane, beside the rest. Labelled `concurrency` too, so the TSan
// stage runs it.
// (Every command kind's durability through the pipeline: durability_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <mutex>
#include <thread>
#include <vector>

#include "handler/scsi/opcodes.h"
#include "handler/scsi/sense.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint32_t kBlocks = 8;  // 4 KiB writes

// One command: what it runs on, its CDB and buffer.
struct Job {
  LogicalUnit* lu = nullptr;
  Bytes cdb;
  Bytes data;
  iovec iov{};
  // Set by a test that wants execute to answer this instead (and still
  // record `lu` for the commit).
  std::optional<CommandResult> forced;
  // Set by a test that wants execute to wait, before running this, until
  // Harness::Release.
  bool held = false;
};

// Drives a pipeline: owns the jobs, collects the answers.
class Harness {
 public:
  // serial_lane: the plugin's rule (IsPoolMetadataWork) picks the serial
  // lane's commands.
  explicit Harness(int workers = 2, std::function<void(const CommandPipeline::Finished&)> on_answer = nullptr,
                   bool serial_lane = false)
      : on_answer_(std::move(on_answer)) {
    CommandPipeline::Callbacks cb;
    cb.execute = [this](void* tag, DeferredCommit* deferred) {
      auto* j = static_cast<Job*>(tag);
      if (j->held) {
        std::unique_lock<std::mutex> lk(mu_);
        held_waiting_++;
        cv_.notify_all();
        cv_.wait(lk, [&] { return released_; });
      }
      // How many serial-lane commands run at once, and on which threads.
      const bool serial = IsPoolMetadataWork(j->cdb);
      if (serial) {
        const int now = ++serial_running_;
        for (int m = max_serial_running_.load(); now > m && !max_serial_running_.compare_exchange_weak(m, now);) {
        }
        std::lock_guard<std::mutex> g(mu_);
        serial_threads_.insert(std::this_thread::get_id());
      }
      struct Leave {
        std::atomic<int>* n;
        ~Leave() {
          if (n) --*n;
        }
      } leave{serial ? &serial_running_ : nullptr};
      if (serial) std::this_thread::sleep_for(std::chrono::microseconds(300));  // room for an overlap
      executed_++;
      if (j->forced) {
        deferred->Need(j->lu->lun_ptr());
        return *j->forced;
      }
      std::span<const iovec> data;
      if (!j->data.empty()) data = std::span<const iovec>(&j->iov, 1);
      return j->lu->Execute(j->cdb, data, deferred);
    };
    cb.complete = [this](std::span<const CommandPipeline::Finished> done) {
      if (gate_first_complete_.exchange(false)) {
        std::unique_lock<std::mutex> lk(mu_);
        in_gate_ = true;
        cv_.notify_all();
        cv_.wait(lk, [&] { return gate_open_; });
      }
      for (const auto& f : done) {
        if (on_answer_) on_answer_(f);
        std::lock_guard<std::mutex> g(mu_);
        answers_[static_cast<Job*>(f.tag)].push_back(f.result);
      }
      cv_.notify_all();
    };
    cb.commit_failure = [](const store::Status& s) {
      // As a LogicalUnit maps a failed durable write (counters aside).
      return CheckCondition(s.code() == store::Code::kIOError ? SenseKey::kMediumError
                                                              : SenseKey::kHardwareError,
                            s.code() == store::Code::kIOError ? asc::kWriteError
                                                              : asc::kInternalTargetFailure);
    };
    if (serial_lane) cb.serial = [](void* tag) { return IsPoolMetadataWork(static_cast<Job*>(tag)->cdb); };
    pipeline_ = std::make_unique<CommandPipeline>(workers, std::move(cb));
  }

  // A held job and a closed gate are let go first: a test that failed
  // before its Release() or OpenGate() ends instead of waiting for ever.
  ~Harness() {
    Release();
    OpenGate();
    pipeline_.reset();
  }
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  Job* Add(LogicalUnit& lu, Bytes cdb, Bytes data = {}) {
    std::lock_guard<std::mutex> g(mu_);
    jobs_.emplace_back();
    Job* j = &jobs_.back();
    j->lu = &lu;
    j->cdb = std::move(cdb);
    j->data = std::move(data);
    j->iov = {j->data.data(), j->data.size()};
    return j;
  }
  void Submit(Job* j) { ASSERT_TRUE(pipeline_->Submit(j)); }

  // Waits until `n` answers in all have arrived (60 s at most).
  bool WaitForAnswers(size_t n) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(60), [&] { return CountLocked() >= n; });
  }
  std::vector<CommandResult> AnswersOf(Job* j) {
    std::lock_guard<std::mutex> g(mu_);
    return answers_[j];
  }
  size_t answers() {
    std::lock_guard<std::mutex> g(mu_);
    return CountLocked();
  }

  // The next batch handed back blocks in `complete` until OpenGate().
  void CloseGateAtNextAnswer() { gate_first_complete_ = true; }
  bool WaitInGate() {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(60), [&] { return in_gate_; });
  }
  void OpenGate() {
    std::lock_guard<std::mutex> g(mu_);
    gate_open_ = true;
    cv_.notify_all();
  }

  // Held jobs: wait until `n` have reached execute; let them all run.
  bool WaitHeld(int n) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::seconds(60), [&] { return held_waiting_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> g(mu_);
    released_ = true;
    cv_.notify_all();
  }
  int max_serial_running() const { return max_serial_running_.load(); }
  size_t serial_threads() {
    std::lock_guard<std::mutex> g(mu_);
    return serial_threads_.size();
  }

  CommandPipeline& pipeline() { return *pipeline_; }
  void Stop() { pipeline_.reset(); }
  int executed() const { return executed_.load(); }

 private:
  size_t CountLocked() const {
    size_t n = 0;
    for (const auto& [job, list] : answers_) n += list.size();
    return n;
  }

  std::function<void(const CommandPipeline::Finished&)> on_answer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // stable addresses
  std::map<Job*, std::vector<CommandResult>> answers_;
  std::atomic<bool> gate_first_complete_{false};
  bool in_gate_ = false;
  bool gate_open_ = false;
  std::atomic<int> executed_{0};
  int held_waiting_ = 0;
  bool released_ = false;
  std::atomic<int> serial_running_{0}, max_serial_running_{0};
  std::set<std::thread::id> serial_threads_;
  std::unique_ptr<CommandPipeline> pipeline_;
};

class CommandPipelineTest : public ScsiTest {
 protected:
  Bytes Block4K(uint8_t seed) { return Pattern(kBlocks * kBlock, seed); }
};

TEST_F(CommandPipelineTest, EveryCommandIsAnsweredOnceWithItsOwnResult) {
  Harness h;
  std::vector<Job*> writes, reads, bad;
  for (int i = 0; i < 64; ++i) writes.push_back(h.Add(*lu_, Write16(uint64_t(i) * kBlocks, kBlocks), Block4K(i)));
  for (int i = 0; i < 32; ++i) reads.push_back(h.Add(*lu_, Read16(uint64_t(i) * kBlocks, kBlocks), Bytes(kBlocks * kBlock)));
  for (int i = 0; i < 4; ++i) bad.push_back(h.Add(*lu_, Bytes{0xC7, 0, 0, 0, 0, 0}));
  for (Job* j : writes) h.Submit(j);
  ASSERT_TRUE(h.WaitForAnswers(writes.size()));
  for (Job* j : reads) h.Submit(j);
  for (Job* j : bad) h.Submit(j);
  ASSERT_TRUE(h.WaitForAnswers(100));
  for (Job* j : writes) {
    auto a = h.AnswersOf(j);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_TRUE(IsGood(a[0]));
  }
  for (int i = 0; i < 32; ++i) {
    auto a = h.AnswersOf(reads[i]);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_TRUE(IsGood(a[0]));
    EXPECT_EQ(reads[i]->data, Block4K(i)) << "read " << i;
  }
  for (Job* j : bad) {
    auto a = h.AnswersOf(j);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_TRUE(HasSense(a[0], SenseKey::kIllegalRequest, asc::kInvalidCommandOperationCode));
  }
  const CommandPipeline::Stats s = h.pipeline().stats();
  EXPECT_EQ(s.submitted, 100u);
  EXPECT_EQ(s.committed, 64u);           // the writes (write cache off)
  EXPECT_EQ(s.completed_at_once, 36u);   // reads and refusals wait for no commit
  EXPECT_GE(s.commits, 1u);
  EXPECT_LE(s.commits, 64u);
  EXPECT_EQ(s.commit_failures, 0u);
}

TEST_F(CommandPipelineTest, CommandsThatFinishWhileACommitRunsShareTheNextOne) {
  Harness h;
  h.CloseGateAtNextAnswer();
  h.Submit(h.Add(*lu_, Write16(0, kBlocks), Block4K(0)));
  ASSERT_TRUE(h.WaitInGate());  // the committer is handing back the first batch
  constexpr int kMore = 40;
  for (int i = 1; i <= kMore; ++i) h.Submit(h.Add(*lu_, Write16(uint64_t(i) * kBlocks, kBlocks), Block4K(i)));
  // Every one executed and waiting for the committer.
  for (int spin = 0; spin < 60000 && h.pipeline().stats().awaiting_commit < kMore; ++spin)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(h.pipeline().stats().awaiting_commit, uint64_t{kMore});
  h.OpenGate();
  ASSERT_TRUE(h.WaitForAnswers(kMore + 1));
  const CommandPipeline::Stats s = h.pipeline().stats();
  EXPECT_EQ(s.commits, 2u);  // one for the first write, one for the forty
  EXPECT_EQ(s.committed, uint64_t{kMore + 1});
  for (int i = 0; i <= kMore; ++i) EXPECT_EQ(Read(uint64_t(i) * kBlocks, kBlocks), Block4K(i));
}

TEST_F(CommandPipelineTest, GoodMeansDurableEvenWhenPowerIsCutRightAfterTheAnswer) {
  std::atomic<bool> cut{false};
  // The first GOOD answer cuts the power: nothing reaches the disk after it.
  Harness h(2, [&](const CommandPipeline::Finished& f) {
    if (f.result.good() && !cut.exchange(true)) env_.CrashAfter(0);
  });
  constexpr int kWrites = 96;
  std::vector<Job*> writes;
  for (int i = 0; i < kWrites; ++i) writes.push_back(h.Add(*lu_, Write16(uint64_t(i) * kBlocks, kBlocks), Block4K(i + 1)));
  for (Job* j : writes) h.Submit(j);
  ASSERT_TRUE(h.WaitForAnswers(kWrites));
  h.Stop();
  ASSERT_TRUE(cut.load());
  CrashAndReopen();
  int good = 0;
  for (int i = 0; i < kWrites; ++i) {
    auto a = h.AnswersOf(writes[i]);
    ASSERT_EQ(a.size(), 1u);
    if (!a[0].good()) continue;
    ++good;
    EXPECT_EQ(Read(uint64_t(i) * kBlocks, kBlocks), Block4K(i + 1)) << "write " << i << " was answered GOOD";
  }
  EXPECT_GE(good, 1);
}

TEST_F(CommandPipelineTest, AFailedCommitTurnsGoodIntoTheWriteErrorAndAFailedCommandKeepsItsOwn) {
  Harness h;
  env_.FailAt(store::FaultInjectionEnv::Op::kSync, 0, store::Code::kIOError);  // the next sync
  Job* own = h.Add(*lu_, Bytes{});
  own->forced = CheckCondition(SenseKey::kCopyAborted, asc::kNoAdditionalSense);
  Job* write = h.Add(*lu_, Write16(0, kBlocks), Block4K(3));
  // Whichever commit runs first fails, and the pool's failure is sticky, so
  // the other's commit fails too, in the same batch or the next.
  h.Submit(own);
  h.Submit(write);
  ASSERT_TRUE(h.WaitForAnswers(2)) << "answers: " << h.answers();
  EXPECT_TRUE(HasSense(h.AnswersOf(write)[0], SenseKey::kMediumError, asc::kWriteError));
  EXPECT_TRUE(HasSense(h.AnswersOf(own)[0], SenseKey::kCopyAborted, asc::kNoAdditionalSense));
  EXPECT_GE(h.pipeline().stats().commit_failures, 1u);
  h.Stop();
  CrashAndReopen();  // a pool whose commit failed must be reopened
}

TEST_F(CommandPipelineTest, DestroyingThePipelineAnswersEverythingQueued) {
  auto h = std::make_unique<Harness>(1);
  constexpr int kWrites = 200;
  for (int i = 0; i < kWrites; ++i) h->Submit(h->Add(*lu_, Write16(uint64_t(i) * kBlocks, kBlocks), Block4K(i)));
  h->Stop();  // returns only once every command was answered
  EXPECT_EQ(h->answers(), size_t{kWrites});
  EXPECT_EQ(h->executed(), kWrites);
}

TEST_F(CommandPipelineTest, ManySubmittersOverTwoPoolsEachCommitted) {
  auto other_pool = CreateGrainPool("/pool1");
  ASSERT_NE(other_pool, nullptr);
  auto other = AddLu(*other_pool, "lunB", 16ull << 20, Config("5f3b0c2a-41d2-4e8b-9a1c-0000000000b2"), 4096);
  ASSERT_NE(other, nullptr);
  Harness h(3);
  constexpr int kThreads = 4, kPer = 50;
  std::vector<std::vector<Job*>> jobs(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPer; ++i) {
      LogicalUnit& lu = (i % 2) ? *other : *lu_;
      const uint32_t blocks = (i % 2) ? 1 : kBlocks;  // 4 KiB either way
      jobs[t].push_back(h.Add(lu, Write16(uint64_t(t * kPer + i) * blocks, blocks), Block4K(t * kPer + i)));
    }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (Job* j : jobs[t]) ASSERT_TRUE(h.pipeline().Submit(j));
    });
  for (auto& th : threads) th.join();
  ASSERT_TRUE(h.WaitForAnswers(kThreads * kPer));
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPer; ++i) {
      auto a = h.AnswersOf(jobs[t][i]);
      ASSERT_EQ(a.size(), 1u);
      EXPECT_TRUE(IsGood(a[0]));
      const bool b = i % 2;
      const uint32_t blocks = b ? 1 : kBlocks;
      EXPECT_EQ(Read(b ? *other : *lu_, uint64_t(t * kPer + i) * blocks, blocks), Block4K(t * kPer + i));
    }
  h.Stop();
  other.reset();
  CloseExtraPool(&other_pool);
}

// The serial lane (command_pipeline.h): UNMAP and WRITE SAME (as EXTENDED
// COPY, IsPoolMetadataWork) run one at a time, all on one thread, while
// writes run on the workers beside them; each is answered once, with its
// effect on the LUN.
TEST_F(CommandPipelineTest, ClonesUnmapsAndZeroingsRunOneAtATimeBesideTheRest) {
  Harness h(4, nullptr, /*serial_lane=*/true);
  constexpr int kEach = 24;
  std::vector<Job*> writes, unmaps, zeroes;
  for (int i = 0; i < kEach; ++i) {
    // Blocks [0, 96 x 8) written, then every other 4 KiB of the first half
    // unmapped or zeroed; the second half is the writes'.
    writes.push_back(h.Add(*lu_, Write16(uint64_t(kEach * 2 + i) * kBlocks, kBlocks), Block4K(i + 1)));
    const Bytes params = UnmapParams({{uint64_t(i) * 2 * kBlocks, kBlocks}});
    unmaps.push_back(h.Add(*lu_, Unmap(static_cast<uint16_t>(params.size())), params));
    zeroes.push_back(h.Add(*lu_, WriteSame16(uint64_t(i * 2 + 1) * kBlocks, kBlocks), Bytes(kBlock, 0)));
  }
  for (int i = 0; i < kEach * 2; ++i) ASSERT_TRUE(IsGood(Write(uint64_t(i) * kBlocks, Block4K(0x80))));
  for (int i = 0; i < kEach; ++i) {
    h.Submit(unmaps[i]);
    h.Submit(writes[i]);
    h.Submit(zeroes[i]);
  }
  ASSERT_TRUE(h.WaitForAnswers(3 * kEach));
  EXPECT_EQ(h.max_serial_running(), 1);
  EXPECT_EQ(h.serial_threads(), 1u);
  const CommandPipeline::Stats s = h.pipeline().stats();
  EXPECT_EQ(s.submitted, uint64_t{3 * kEach});
  EXPECT_EQ(s.serial, uint64_t{2 * kEach});
  for (auto* list : {&writes, &unmaps, &zeroes})
    for (Job* j : *list) {
      auto a = h.AnswersOf(j);
      ASSERT_EQ(a.size(), 1u);
      EXPECT_TRUE(IsGood(a[0]));
    }
  const Bytes zero(kBlocks * kBlock, 0);
  for (int i = 0; i < kEach; ++i) {
    EXPECT_EQ(Read(uint64_t(i) * 2 * kBlocks, kBlocks), zero) << "unmapped " << i;
    EXPECT_EQ(Read(uint64_t(i * 2 + 1) * kBlocks, kBlocks), zero) << "zeroed " << i;
    EXPECT_EQ(Read(uint64_t(kEach * 2 + i) * kBlocks, kBlocks), Block4K(i + 1)) << "written " << i;
  }
}

// A serial command that waits (here, held before it runs) holds up only the
// serial lane: a read and a write of the other lane are answered meanwhile,
// the next serial command does not start, and destroying the pipeline
// answers everything.
TEST_F(CommandPipelineTest, ACommandOfTheOtherLaneIsNotHeldBehindASerialOne) {
  auto h = std::make_unique<Harness>(2, nullptr, /*serial_lane=*/true);
  const Bytes params = UnmapParams({{0, kBlocks}});
  Job* held = h->Add(*lu_, Unmap(static_cast<uint16_t>(params.size())), params);
  held->held = true;
  Job* next = h->Add(*lu_, WriteSame16(kBlocks, kBlocks), Bytes(kBlock, 0));
  Job* write = h->Add(*lu_, Write16(4 * kBlocks, kBlocks), Block4K(7));
  Job* read = h->Add(*lu_, Read16(4 * kBlocks, kBlocks), Bytes(kBlocks * kBlock));
  h->Submit(held);
  ASSERT_TRUE(h->WaitHeld(1));
  h->Submit(next);
  h->Submit(write);
  ASSERT_TRUE(h->WaitForAnswers(1));  // the write, committed with the serial lane held
  ASSERT_EQ(h->AnswersOf(write).size(), 1u);
  h->Submit(read);
  ASSERT_TRUE(h->WaitForAnswers(2));
  ASSERT_EQ(h->AnswersOf(read).size(), 1u);
  EXPECT_TRUE(IsGood(h->AnswersOf(read)[0]));
  EXPECT_EQ(read->data, Block4K(7));
  EXPECT_EQ(h->executed(), 2);  // the held UNMAP has not run, nor the WRITE SAME behind it
  EXPECT_EQ(h->pipeline().stats().queued, 1u);
  h->Release();
  h->Stop();  // answers the held command and the one queued behind it
  EXPECT_EQ(h->answers(), 4u);
  EXPECT_EQ(h->executed(), 4);
  for (Job* j : {held, next}) {
    auto a = h->AnswersOf(j);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_TRUE(IsGood(a[0]));
  }
}

}  // namespace
}  // namespace cowstore::scsi::testing
