// SPDX-License-Identifier: Apache-2.0
// CommitQueue (handler/store/commit_queue.h): ordering, batching (observed
// through the Env's sync counter), the fast path, leadership hand-off,
// Exclusive(), failure propagation, and many threads (labels unit and
// concurrency: run under TSan).
//
// The "store" here is a counter of appended tickets and a FaultInjectionEnv
// file: a batch seals the counter, syncs the file once and returns the seal.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "handler/store/commit_queue.h"
#include "handler/store/fault_env.h"
#include "tests/common/sanitizers.h"

// Counts this thread's heap allocations (for the test that a sleeping
// Wait() allocates nothing), and runs this thread out of memory on demand
// (CommitQueueOutOfMemory): with t_oom_after = n >= 0, the next n
// allocations succeed and every later one throws, until it is set back to
// -1. Only where a test binary may replace the global operator new (not
// under TSan: tests/common/sanitizers.h).
#if COWSTORE_CAN_REPLACE_NEW()
namespace {
thread_local uint64_t t_allocations = 0;
thread_local int64_t t_oom_after = -1;
}  // namespace
void* operator new(std::size_t n) {
  t_allocations++;
  if (t_oom_after == 0) throw std::bad_alloc();
  if (t_oom_after > 0) t_oom_after--;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
#include "tests/common/malloc_delete.h"
#endif  // COWSTORE_CAN_REPLACE_NEW()

namespace cowstore::store {
namespace {

using namespace std::chrono_literals;

// Blocks batches at will: a test closes the gate, lets a batch reach it, and
// lets batches through one by one (Allow) or all (Open).
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> g(mu_);
    permits_ = 0;
  }
  void Open() { Set(-1); }
  void Allow(int n) {
    std::lock_guard<std::mutex> g(mu_);
    if (permits_ >= 0) permits_ += n;
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> g(mu_);
    arrived_++;
    cv_.notify_all();
    cv_.wait(g, [&] { return permits_ != 0; });
    if (permits_ > 0) permits_--;
  }
  // How many batches have reached the gate in total.
  int Arrived() {
    std::lock_guard<std::mutex> g(mu_);
    return arrived_;
  }
  // Waits until `n` batches have reached the gate in total.
  void AwaitArrivals(int n) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return arrived_ >= n; });
  }

 private:
  void Set(int p) {
    std::lock_guard<std::mutex> g(mu_);
    permits_ = p;
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int permits_ = -1;  // -1: open
  int arrived_ = 0;
};

struct FakeStore {
  FaultInjectionEnv env;
  std::unique_ptr<File> file;
  std::atomic<uint64_t> appended{0};   // the newest ticket handed out
  std::atomic<uint64_t> durable{0};    // what the "disk" holds
  std::atomic<int> in_flight{0};
  std::atomic<bool> overlap{false};    // two batches ran at once
  std::atomic<bool> fail_next{false};
  std::chrono::microseconds sync_time{0};  // how long the "disk" takes to sync
  std::mutex seal_mu;
  std::vector<uint64_t> seals;         // each batch's seal, in order
  std::vector<std::thread::id> leaders;  // the thread that ran each batch
  Gate gate;
  CommitQueue queue;

  FakeStore()
      : file(env.OpenLocked("f", Env::Mode::kCreate).value()),
        queue([this] { return Batch(); }) {}

  uint64_t Append() { return appended.fetch_add(1) + 1; }

  Result<uint64_t> Batch() {
    if (in_flight.fetch_add(1) != 0) overlap = true;
    uint64_t seal = appended.load();  // everything appended so far
    {
      std::lock_guard<std::mutex> g(seal_mu);
      seals.push_back(seal);
      leaders.push_back(std::this_thread::get_id());
    }
    gate.Pass();
    if (sync_time.count()) std::this_thread::sleep_for(sync_time);
    Status s = fail_next.exchange(false) ? Status(Code::kIOError, "injected EIO") : file->Sync();
    in_flight.fetch_sub(1);
    if (!s.ok()) return s;
    durable.store(seal);
    return seal;
  }
  uint64_t Syncs() const { return env.sync_calls(); }
  int Slept() const { return static_cast<int>(queue.stats().slept); }
};

// Spins (with sleeps) until pred holds; fails the test after 10 s.
template <class Pred>
void Eventually(Pred pred) {
  for (int i = 0; i < 10000 && !pred(); i++) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(pred());
}

TEST(CommitQueue, DurableTicketReturnsAtOnceWithoutABatch) {
  FakeStore st;
  uint64_t t = st.Append();
  ASSERT_TRUE(st.queue.Wait(t).ok());
  uint64_t syncs = st.Syncs();
  EXPECT_TRUE(st.queue.Wait(t).ok());
  EXPECT_TRUE(st.queue.Wait(0).ok());
  EXPECT_EQ(st.Syncs(), syncs);
  CommitQueue::Stats s = st.queue.stats();
  EXPECT_EQ(s.batches, 1u);
  EXPECT_EQ(s.waits, 3u);
  EXPECT_EQ(s.fast_returns, 2u);
}

TEST(CommitQueue, OneCallerOneBatchOneSync) {
  FakeStore st;
  uint64_t syncs = st.Syncs();
  for (int i = 1; i <= 5; i++) {
    uint64_t t = st.Append();
    ASSERT_TRUE(st.queue.Wait(t).ok());
    EXPECT_GE(st.durable.load(), t);
    EXPECT_EQ(st.queue.durable(), t);
    EXPECT_EQ(st.Syncs(), syncs + i);
  }
}

// While one batch's sync is in flight, 31 callers append and wait: they all
// go into the next batch, which costs one sync.
TEST(CommitQueue, CallersArrivingDuringASyncShareTheNextOne) {
  FakeStore st;
  uint64_t syncs = st.Syncs();
  st.gate.Close();
  std::thread first([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
  st.gate.AwaitArrivals(1);
  std::vector<std::thread> rest;
  for (int i = 0; i < 31; i++)
    rest.emplace_back([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
  Eventually([&] { return st.Slept() == 31; });
  st.gate.Open();
  first.join();
  for (auto& t : rest) t.join();
  EXPECT_EQ(st.Syncs(), syncs + 2);
  EXPECT_EQ(st.queue.stats().batches, 2u);
  ASSERT_EQ(st.seals.size(), 2u);
  EXPECT_EQ(st.seals[0], 1u);
  EXPECT_EQ(st.seals[1], 32u);
  EXPECT_FALSE(st.overlap.load());
}

// A caller whose ticket the batch in flight covers returns when that batch
// ends, while the next batch (which it does not need) is still running.
TEST(CommitQueue, NobodyWaitsForASyncItDoesNotNeed) {
  FakeStore st;
  st.gate.Close();
  uint64_t t1 = st.Append(), t2 = st.Append();
  std::thread a([&] { EXPECT_TRUE(st.queue.Wait(t1).ok()); });
  st.gate.AwaitArrivals(1);  // batch 1 sealed tickets 1 and 2
  std::atomic<bool> b_done{false};
  std::thread b([&] {
    EXPECT_TRUE(st.queue.Wait(t2).ok());
    b_done = true;
  });
  Eventually([&] { return st.Slept() == 1; });
  uint64_t t3 = st.Append();
  std::atomic<bool> c_done{false};
  std::thread c([&] {
    EXPECT_TRUE(st.queue.Wait(t3).ok());
    c_done = true;
  });
  Eventually([&] { return st.Slept() == 2; });
  // Let batch 1 finish, but hold batch 2 (led by c) at the gate.
  st.gate.Allow(1);
  a.join();
  b.join();  // returned on batch 1 alone ...
  EXPECT_TRUE(b_done.load());
  st.gate.AwaitArrivals(2);  // ... while batch 2 runs
  EXPECT_FALSE(c_done.load());
  st.gate.Open();
  c.join();
  EXPECT_TRUE(c_done.load());
  EXPECT_EQ(st.seals, (std::vector<uint64_t>{2, 3}));
}

// When a batch ends, the oldest ticket still waiting leads the next one, and
// each waiter wakes once (no thundering herd that goes back to sleep).
TEST(CommitQueue, OldestWaiterLeadsTheNextBatch) {
  FakeStore st;
  st.gate.Close();
  std::thread first([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
  st.gate.AwaitArrivals(1);
  std::vector<std::thread> th;
  std::vector<std::thread::id> ids;
  for (int i = 0; i < 8; i++) {
    uint64_t t = st.Append();
    th.emplace_back([&, t] { EXPECT_TRUE(st.queue.Wait(t).ok()); });
    ids.push_back(th.back().get_id());
    Eventually([&] { return st.Slept() == i + 1; });
  }
  st.gate.Open();
  first.join();
  for (auto& t : th) t.join();
  CommitQueue::Stats s = st.queue.stats();
  EXPECT_EQ(s.batches, 2u);
  EXPECT_EQ(s.slept, 8u);
  ASSERT_EQ(st.leaders.size(), 2u);
  EXPECT_EQ(st.leaders[1], ids[0]);  // ticket 2, the oldest waiter, led batch 2
  EXPECT_EQ(st.seals.back(), 9u);    // and covered all 8
}

// A thread that must finish: a thread still running after 10 s is a hang
// (a queue led by nobody, a next leader never signalled, a hook never
// ended). The test fails then instead of hanging the suite: Fail() releases
// what sleeps in Wait(); what it cannot release (an Exclusive() section or
// DrainHooks() waiting for a leader or a hook that will never end) aborts
// the binary with the reason.
class Finishing {
 public:
  template <class Fn>
  explicit Finishing(const char* what, Fn fn)
      : what_(what), t_([this, fn] {
          fn();
          done_ = true;
        }) {}
  void Join(CommitQueue* q) {
    if (!Within(10s)) {
      ADD_FAILURE() << what_ << " never returned";
      q->Fail(Status(Code::kIOError, "test: release the stranded"));
      if (!Within(5s)) {
        std::fprintf(stderr, "%s never returned, even after Fail(): aborting\n", what_);
        std::abort();
      }
    }
    t_.join();
  }

 private:
  bool Within(std::chrono::milliseconds limit) {
    for (auto waited = 0ms; !done_.load() && waited < limit; waited += 1ms)
      std::this_thread::sleep_for(1ms);
    return done_.load();
  }
  const char* what_;
  std::atomic<bool> done_{false};
  std::thread t_;
};

// The waiters a batch makes durable are woken by one system call, not one
// each: with a wake per waiter, each woken caller preempted the leader
// before its next wake (at queue depth 32, ~0.65 involuntary context
// switches and ~6 us of CPU per command; commit_queue.h).
TEST(CommitQueue, ABatchWakesAllItsWaitersWithOneCall) {
  FakeStore st;
  st.gate.Close();
  std::vector<uint64_t> t(32);
  for (uint64_t& x : t) x = st.Append();
  Finishing leader("the leader's Wait", [&] { EXPECT_TRUE(st.queue.Wait(t[0]).ok()); });
  st.gate.AwaitArrivals(1);  // the batch sealed all 32 tickets
  std::vector<std::unique_ptr<Finishing>> waiters;
  for (int i = 1; i < 32; i++)
    waiters.push_back(std::make_unique<Finishing>(
        "a waiter's Wait", [&st, x = t[i]] { EXPECT_TRUE(st.queue.Wait(x).ok()); }));
  Eventually([&] { return st.Slept() == 31; });
  EXPECT_EQ(st.queue.stats().wake_calls, 0u);
  st.gate.Open();
  leader.Join(&st.queue);
  for (auto& w : waiters) w->Join(&st.queue);
  EXPECT_EQ(st.queue.stats().batches, 1u);
  EXPECT_EQ(st.queue.stats().wake_calls, 1u);
}

// Waiters share the queue's futex word, each under one of 32 bits, given in
// the order they queue: with more than 32 asleep, a wake reaches waiters it
// is not for. Each must go back to sleep (not return before its ticket is
// durable, nor lead a second batch), and each it is for must wake, the next
// leader too when a waiter that slept before it shares its bit. Here 40
// wait behind batch 1 (which sealed tickets 1..8): the first 7 queued (bits
// 0..6) are durable with it; 25 more (bits 7..31) and 7 more (bits 0..6
// again) are not; the 40th (bit 7 again, after the one that has it) holds
// the oldest ticket not durable, so it leads batch 2.
TEST(CommitQueue, WaitersSharingAWakeBitWakeOnlyForTheirOwnTicket) {
  FakeStore st;
  st.gate.Close();
  for (int i = 0; i < 8; i++) st.Append();
  Finishing leader("the leader's Wait", [&] { EXPECT_TRUE(st.queue.Wait(1).ok()); });
  st.gate.AwaitArrivals(1);  // batch 1 sealed tickets 1..8
  for (int i = 0; i < 33; i++) st.Append();  // 9..41: for batch 2
  std::vector<uint64_t> order;  // tickets in the order their waiters queue
  for (uint64_t x = 2; x <= 8; x++) order.push_back(x);    // bits 0..6, durable with batch 1
  for (uint64_t x = 10; x <= 41; x++) order.push_back(x);  // bits 7..31 and 0..6
  order.push_back(9);                                      // bit 7: the next leader
  std::atomic<int> early{0};  // returned before their ticket was durable
  std::vector<std::atomic<bool>> back(order.size());
  std::vector<std::unique_ptr<Finishing>> waiters;
  for (size_t i = 0; i < order.size(); i++) {
    waiters.push_back(std::make_unique<Finishing>("a waiter's Wait", [&, i] {
      EXPECT_TRUE(st.queue.Wait(order[i]).ok());
      if (st.durable.load() < order[i]) early++;
      back[i] = true;
    }));
    Eventually([&] { return st.Slept() == static_cast<int>(i) + 1; });
  }
  st.gate.Allow(1);
  leader.Join(&st.queue);
  for (size_t i = 0; i < 7; i++) waiters[i]->Join(&st.queue);  // woken by batch 1
  // Batch 2 must start, led by ticket 9's waiter (its wake also reached
  // ticket 10's, which slept first under the same bit).
  for (int i = 0; i < 10000 && st.gate.Arrived() < 2; i++) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(st.gate.Arrived(), 2) << "the next leader was never woken";
  for (size_t i = 7; i < order.size(); i++) EXPECT_FALSE(back[i].load()) << "ticket " << order[i];
  st.gate.Open();
  for (size_t i = 7; i < waiters.size(); i++) waiters[i]->Join(&st.queue);
  EXPECT_EQ(early.load(), 0);
  EXPECT_FALSE(st.overlap.load());
  EXPECT_EQ(st.seals, (std::vector<uint64_t>{8, 41}));
  ASSERT_EQ(st.leaders.size(), 2u);
}

// A caller that sleeps until its ticket is durable allocates nothing: its
// place in the queue lives on its own stack (a durable command at queue
// depth 32 used to pay a malloc and a free for it).
#if COWSTORE_CAN_REPLACE_NEW()
TEST(CommitQueue, SleepingWaitAllocatesNothing) {
  FakeStore st;
  st.gate.Close();
  uint64_t t1 = st.Append(), t = st.Append();
  std::thread first([&] { EXPECT_TRUE(st.queue.Wait(t1).ok()); });
  st.gate.AwaitArrivals(1);  // the batch sealed both tickets: the waiter only waits
  std::atomic<uint64_t> allocations{~uint64_t{0}};
  std::thread waiter([&] {
    const uint64_t before = t_allocations;
    EXPECT_TRUE(st.queue.Wait(t).ok());
    allocations = t_allocations - before;
  });
  Eventually([&] { return st.Slept() == 1; });
  st.gate.Open();
  first.join();
  waiter.join();
  EXPECT_EQ(st.queue.stats().batches, 1u);
  EXPECT_EQ(allocations.load(), 0u);
}

// Out of memory on a leader's path: the leader's allocations fail from the
// k-th one after its first batch's commit function returns (for every k up
// to all those the path makes; a real shortage fails more than one), and
// that batch succeeds, returns an error or throws. Whatever happens, nothing
// is left asleep: the leader's Wait returns a Status (a throw escapes
// neither the noexcept RunCommit, which would terminate, nor Wait), the
// waiter the batch covered and a second thread waiting for a later ticket
// return, and so do DrainHooks() and an Exclusive() section; every batch
// that succeeded runs its hook, with the ticket it made durable (none is
// skipped for memory: Core::ReclaimPending drains exactly that hook).
TEST(CommitQueueOutOfMemory, ALeaderOutOfMemoryNeverStrandsTheQueueOrSkipsAHook) {
  enum class Outcome { kOk, kError, kThrow };
  for (Outcome outcome : {Outcome::kOk, Outcome::kError, Outcome::kThrow}) {
    uint64_t path_allocations = 0;  // measured by the first round (no failure)
    for (int64_t k = -1; k < static_cast<int64_t>(path_allocations) + 1; k++) {
      SCOPED_TRACE("outcome " + std::to_string(static_cast<int>(outcome)) + ", allocation " +
                   std::to_string(k) + " on fails");
      std::atomic<uint64_t> appended{0};
      std::atomic<int> batches{0}, hooks{0};
      std::atomic<uint64_t> hook_durable[2] = {0, 0};  // the hooks' tickets, by batch
      uint64_t armed_at = 0;                           // t_allocations of the leader's thread
      Gate gate;
      gate.Close();
      // The first batch covers tickets 1-2 only; the next one all.
      CommitQueue q(
          [&]() -> Result<uint64_t> {
            if (batches++ != 0) return appended.load();
            gate.Pass();
            const Status error(Code::kIOError, "injected: a message too long for a short string");
            Result<uint64_t> r = outcome == Outcome::kError ? Result<uint64_t>(error)
                                                            : Result<uint64_t>(uint64_t{2});
            armed_at = t_allocations;
            t_oom_after = k < 0 ? INT64_MAX : k;
            if (outcome == Outcome::kThrow) throw std::bad_alloc();
            return r;
          },
          [&](uint64_t durable) {  // allocates nothing: it may run out of memory
            const int n = hooks++;
            if (n < 2) hook_durable[n] = durable;
          });
      Status leader_status, covered_status, later_status;
      bool leader_threw = false;
      uint64_t leader_allocations = 0;
      Finishing leader("the leader's Wait", [&] {
        try {
          leader_status = q.Wait(appended.fetch_add(1) + 1);
        } catch (...) {
          leader_threw = true;
        }
        leader_allocations = t_allocations - armed_at;
        t_oom_after = -1;
      });
      gate.AwaitArrivals(1);
      Finishing covered("the covered waiter's Wait",
                        [&] { covered_status = q.Wait(appended.fetch_add(1) + 1); });
      Eventually([&] { return q.stats().slept == 1; });
      Finishing later("the later waiter's Wait",
                      [&] { later_status = q.Wait(appended.fetch_add(1) + 1); });
      Eventually([&] { return q.stats().slept == 2; });
      gate.Open();
      leader.Join(&q);
      covered.Join(&q);
      later.Join(&q);
      Finishing drain("DrainHooks", [&] { q.DrainHooks(); });
      drain.Join(&q);
      bool ran = false;
      Finishing exclusive("Exclusive", [&] {
        EXPECT_TRUE(q.Exclusive([&] {
                       ran = true;
                       return Status::Ok();
                     }).ok());
      });
      exclusive.Join(&q);
      EXPECT_TRUE(ran);
      if (k < 0) path_allocations = leader_allocations;

      EXPECT_FALSE(leader_threw);
      switch (outcome) {
        case Outcome::kOk:
          EXPECT_TRUE(leader_status.ok()) << leader_status.ToString();
          EXPECT_TRUE(covered_status.ok()) << covered_status.ToString();
          EXPECT_TRUE(later_status.ok()) << later_status.ToString();
          EXPECT_EQ(q.durable(), 3u);
          EXPECT_EQ(hooks.load(), 2) << "a batch's hook was skipped";
          EXPECT_EQ(hook_durable[0].load() + hook_durable[1].load(), 2u + 3u);
          break;
        case Outcome::kError:
        case Outcome::kThrow: {
          const Code code = outcome == Outcome::kError ? Code::kIOError : Code::kNoSpace;
          EXPECT_EQ(leader_status.code(), code) << leader_status.ToString();
          EXPECT_EQ(covered_status.code(), code) << covered_status.ToString();
          EXPECT_EQ(later_status.code(), code) << later_status.ToString();
          EXPECT_EQ(q.durable(), 0u);
          EXPECT_EQ(hooks.load(), 0);
          EXPECT_EQ(q.Wait(appended.fetch_add(1) + 1).code(), code);  // sticky
          break;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// Fail() is called from catch blocks (Core::AppendLocked): out of memory for
// the copy of its reason, it still fails the queue and wakes the waiters.
TEST(CommitQueueOutOfMemory, FailWithoutMemoryStillFailsTheQueue) {
  FakeStore st;
  st.gate.Close();
  uint64_t t1 = st.Append(), t2 = st.Append();
  std::thread leader([&] { EXPECT_FALSE(st.queue.Wait(t2).ok()); });
  st.gate.AwaitArrivals(1);
  const Status why(Code::kIOError, "injected: a message too long for a short string");
  bool threw = false;
  t_oom_after = 0;
  try {
    st.queue.Fail(why);
  } catch (...) {
    threw = true;
  }
  t_oom_after = -1;
  st.fail_next = true;
  st.gate.Open();
  leader.join();
  EXPECT_FALSE(threw);
  EXPECT_EQ(st.queue.failed().code(), Code::kIOError);
  EXPECT_EQ(st.queue.Wait(t1 + 2).code(), Code::kIOError);
}
#endif  // COWSTORE_CAN_REPLACE_NEW()

TEST(CommitQueue, FailureIsStickyAndWakesEveryWaiter) {
  FakeStore st;
  uint64_t ok_ticket = st.Append();
  ASSERT_TRUE(st.queue.Wait(ok_ticket).ok());
  st.gate.Close();
  st.fail_next = true;
  std::vector<std::thread> th;
  std::atomic<int> errors{0};
  th.emplace_back([&] {
    if (st.queue.Wait(st.Append()).code() == Code::kIOError) errors++;
  });
  st.gate.AwaitArrivals(2);  // batch 1 was the successful one
  for (int i = 0; i < 16; i++)
    th.emplace_back([&] {
      if (st.queue.Wait(st.Append()).code() == Code::kIOError) errors++;
    });
  Eventually([&] { return st.Slept() == 16; });
  st.gate.Open();
  for (auto& t : th) t.join();
  EXPECT_EQ(errors.load(), 17);
  uint64_t batches = st.queue.stats().batches;
  EXPECT_EQ(batches, 2u);  // the failed batch; nobody led another one
  // Later: a durable ticket is still fine, a new one gets the error at once.
  EXPECT_TRUE(st.queue.Wait(ok_ticket).ok());
  Status s = st.queue.Wait(st.Append());
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_NE(s.message().find("injected EIO"), std::string::npos);
  EXPECT_EQ(st.queue.stats().batches, batches);
  EXPECT_EQ(st.queue.durable(), ok_ticket);
  EXPECT_FALSE(st.queue.failed().ok());
}

TEST(CommitQueue, FailFromOutsideWakesWaiters) {
  FakeStore st;
  st.gate.Close();
  std::thread a([&] { (void)st.queue.Wait(st.Append()); });
  st.gate.AwaitArrivals(1);
  std::atomic<bool> got{false};
  std::thread b([&] { got = st.queue.Wait(st.Append()).code() == Code::kNoSpace; });
  Eventually([&] { return st.Slept() == 1; });
  st.queue.Fail(Status(Code::kNoSpace, "superblock write failed"));
  b.join();  // woken by Fail, not by the batch still at the gate
  EXPECT_TRUE(got.load());
  st.gate.Open();
  a.join();
  EXPECT_EQ(st.queue.stats().batches, 1u);
}

// A commit function that throws (std::bad_alloc while a checkpoint is
// encoded) fails the queue as an error does: the leader gets a Status, not
// the exception, and the caller asleep behind it is woken with the failure
// instead of waiting for a leader that has gone.
TEST(CommitQueue, ACommitThatThrowsFailsTheQueueAndWakesEveryone) {
  std::atomic<uint64_t> appended{0};
  Gate gate;
  gate.Close();
  CommitQueue q([&]() -> Result<uint64_t> {
    gate.Pass();
    throw std::bad_alloc();
  });
  Status a_status, b_status;
  std::atomic<bool> a_threw{false}, b_done{false};
  std::thread a([&] {
    try {
      a_status = q.Wait(appended.fetch_add(1) + 1);
    } catch (...) {
      a_threw = true;
    }
  });
  gate.AwaitArrivals(1);
  std::thread b([&] {
    b_status = q.Wait(appended.fetch_add(1) + 1);
    b_done = true;
  });
  Eventually([&] { return q.stats().slept == 1; });
  gate.Open();
  a.join();
  for (int i = 0; i < 5000 && !b_done.load(); i++) std::this_thread::sleep_for(1ms);
  const bool woken = b_done.load();
  if (!woken) q.Fail(Status(Code::kIOError, "test: release the stranded waiter"));
  b.join();
  EXPECT_FALSE(a_threw.load());
  EXPECT_EQ(a_status.code(), Code::kNoSpace);
  EXPECT_NE(a_status.message().find("out of memory"), std::string::npos) << a_status.message();
  EXPECT_TRUE(woken) << "the waiter behind the leader that threw was never woken";
  EXPECT_EQ(b_status.code(), Code::kNoSpace);
  // Sticky, and nothing is left waiting for a leader: new callers and an
  // exclusive section return at once.
  EXPECT_EQ(q.Wait(appended.fetch_add(1) + 1).code(), Code::kNoSpace);
  bool ran = false;
  EXPECT_TRUE(q.Exclusive([&] {
                 ran = true;
                 return Status::Ok();
               }).ok());
  EXPECT_TRUE(ran);
}

// An after-hook that throws still ends as a hook: the batch's caller gets
// its (durable) OK, and DrainHooks() and Exclusive() do not wait for it.
TEST(CommitQueue, AnAfterHookThatThrowsStillEnds) {
  std::atomic<uint64_t> appended{0};
  CommitQueue q([&]() -> Result<uint64_t> { return appended.load(); },
                [&](uint64_t) { throw std::runtime_error("hook failed"); });
  Status s;
  bool threw = false;
  try {
    s = q.Wait(appended.fetch_add(1) + 1);
  } catch (...) {
    threw = true;
  }
  EXPECT_FALSE(threw);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(q.durable(), 1u);
  std::atomic<bool> drained{false};
  std::thread d([&] {
    q.DrainHooks();
    EXPECT_TRUE(q.Exclusive([] { return Status::Ok(); }).ok());
    drained = true;
  });
  Eventually([&] { return drained.load(); });
  d.join();
}

TEST(CommitQueue, ExclusiveRunsBetweenBatchesAndBeforeWaitingOnes) {
  FakeStore st;
  st.gate.Close();
  std::thread a([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
  st.gate.AwaitArrivals(1);
  std::thread b([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
  Eventually([&] { return st.Slept() == 1; });
  std::atomic<bool> ran{false};
  size_t seals_seen = 99;
  std::thread x([&] {
    EXPECT_TRUE(st.queue
                    .Exclusive([&] {
                      EXPECT_EQ(st.in_flight.load(), 0);
                      std::lock_guard<std::mutex> g(st.seal_mu);
                      seals_seen = st.seals.size();
                      ran = true;
                      return Status::Ok();
                    })
                    .ok());
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(ran.load());  // batch 1 is still in flight
  st.gate.Open();
  a.join();
  b.join();
  x.join();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(seals_seen, 1u);  // after batch 1, before b's batch
  // Exclusive's own status is returned and is not sticky.
  EXPECT_EQ(st.queue.Exclusive([] { return Status(Code::kBusy, "x"); }).code(), Code::kBusy);
  EXPECT_TRUE(st.queue.Wait(st.Append()).ok());
}

TEST(CommitQueue, ExclusiveGuardHoldsOffBatchesForItsScope) {
  FakeStore st;
  std::thread w;
  {
    CommitQueue::ExclusiveGuard g(&st.queue);
    w = std::thread([&] { EXPECT_TRUE(st.queue.Wait(st.Append()).ok()); });
    Eventually([&] { return st.Slept() == 1; });
    std::this_thread::sleep_for(10ms);
    EXPECT_EQ(st.queue.stats().batches, 0u);  // the waiter cannot lead yet
  }
  w.join();
  EXPECT_EQ(st.queue.stats().batches, 1u);
}

TEST(CommitQueue, PublishFromExclusiveMakesTicketsDurable) {
  FakeStore st;
  uint64_t t = st.Append();
  ASSERT_TRUE(st.queue.Exclusive([&] {
    st.queue.Publish(t);
    return Status::Ok();
  }).ok());
  EXPECT_EQ(st.queue.durable(), t);
  EXPECT_TRUE(st.queue.Wait(t).ok());
  EXPECT_EQ(st.queue.stats().batches, 0u);
}

// The after-hook runs once leadership has been handed on: a slow hook (hole
// punches) overlaps the next batch instead of holding it up. Each hook sees
// a ticket its batch made durable, the last one sees the last ticket, and
// every hook has run before the Wait() that led its batch returns.
TEST(CommitQueue, AfterHookRunsBesideTheNextBatchWithDurableTickets) {
  std::atomic<uint64_t> appended{0}, durable{0};
  std::atomic<int> in_after{0}, bad{0};
  std::atomic<bool> overlap{false};
  std::mutex seen_mu;
  std::vector<uint64_t> seen;
  CommitQueue q(
      [&]() -> Result<uint64_t> {
        if (in_after.load() > 0) overlap = true;
        std::this_thread::sleep_for(50us);
        uint64_t d = appended.load();
        durable = d;
        return d;
      },
      [&](uint64_t d) {
        in_after++;
        if (d > durable.load()) bad++;  // only what is durable may be freed
        {
          std::lock_guard<std::mutex> g(seen_mu);
          seen.push_back(d);
        }
        std::this_thread::sleep_for(2ms);  // a punch on a `discard` file system
        in_after--;
      });
  std::vector<std::thread> th;
  for (int i = 0; i < 8; i++)
    th.emplace_back([&] {
      for (int k = 0; k < 100; k++) EXPECT_TRUE(q.Wait(appended.fetch_add(1) + 1).ok());
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(in_after.load(), 0);  // every hook ended before its leader returned
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(overlap.load());  // batches did not wait for the slow hooks
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(*std::max_element(seen.begin(), seen.end()), 800u);
  EXPECT_EQ(seen.size(), q.stats().batches);
}

// An Exclusive() section (check, grow) never sees a hook half done: it starts
// only once the hooks of earlier batches have finished. DrainHooks() waits
// for the hooks already started.
TEST(CommitQueue, ExclusiveAndDrainHooksWaitForRunningHooks) {
  std::atomic<uint64_t> appended{0};
  std::atomic<int> in_after{0};
  Gate hook_gate;
  hook_gate.Close();
  CommitQueue q([&]() -> Result<uint64_t> { return appended.load(); },
                [&](uint64_t) {
                  in_after++;
                  hook_gate.Pass();
                  in_after--;
                });
  std::thread a([&] { EXPECT_TRUE(q.Wait(appended.fetch_add(1) + 1).ok()); });
  Eventually([&] { return in_after.load() == 1; });
  EXPECT_EQ(q.durable(), 1u);  // durable before its hook ran
  std::atomic<bool> drained{false}, ran{false};
  std::thread d([&] {
    q.DrainHooks();
    drained = true;
  });
  std::thread x([&] {
    EXPECT_TRUE(q.Exclusive([&] {
                   EXPECT_EQ(in_after.load(), 0);
                   ran = true;
                   return Status::Ok();
                 }).ok());
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(drained.load());
  EXPECT_FALSE(ran.load());
  hook_gate.Open();
  a.join();
  d.join();
  x.join();
  EXPECT_TRUE(drained.load());
  EXPECT_TRUE(ran.load());
  q.DrainHooks();  // none running: returns at once
}

// A caller woken because another leader's batch made its ticket durable, and
// then short of space, drains the hooks to get the batch's freed runs back
// (Core::ReclaimPending): DrainHooks must find that batch's hook, so the hook
// counts as running from the moment the tickets are durable, not from a
// moment after the waiters were woken. Repeated: the window was a few
// instructions wide.
TEST(CommitQueue, DrainHooksAfterAWakeWaitsForTheHookOfTheBatchThatWokeIt) {
  int missed = 0;
  for (int round = 0; round < 300; round++) {
    std::atomic<uint64_t> appended{0};
    std::atomic<bool> hook_done{false};
    CommitQueue q(
        [&]() -> Result<uint64_t> {
          std::this_thread::sleep_for(300us);  // a sync: the other caller queues meanwhile
          return appended.load();
        },
        [&](uint64_t) {
          std::this_thread::sleep_for(200us);  // a punch
          hook_done = true;
        });
    std::thread leader([&] { EXPECT_TRUE(q.Wait(appended.fetch_add(1) + 1).ok()); });
    std::thread waiter([&] {
      std::this_thread::sleep_for(100us);
      EXPECT_TRUE(q.Wait(appended.fetch_add(1) + 1).ok());
      q.DrainHooks();
      if (!hook_done.load()) missed++;
    });
    leader.join();
    waiter.join();
  }
  EXPECT_EQ(missed, 0);
}

// Many threads: every Wait returns only once its ticket is on the "disk",
// batches never overlap, seals only grow, and the threads share syncs.
TEST(CommitQueue, ManyThreadsShareSyncsAndKeepOrder) {
  FakeStore st;
  st.sync_time = 200us;  // an fdatasync on a real disk: what lets batches form
  constexpr int kThreads = 32, kOps = 300;
  uint64_t syncs = st.Syncs();
  std::atomic<int> bad{0};
  std::vector<std::thread> th;
  for (int i = 0; i < kThreads; i++)
    th.emplace_back([&] {
      for (int k = 0; k < kOps; k++) {
        uint64_t t = st.Append();
        if (!st.queue.Wait(t).ok() || st.durable.load() < t || st.queue.durable() < t) bad++;
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_FALSE(st.overlap.load());
  for (size_t i = 1; i < st.seals.size(); i++) EXPECT_LE(st.seals[i - 1], st.seals[i]);
  uint64_t used = st.Syncs() - syncs;
  EXPECT_EQ(used, st.queue.stats().batches);
  // 9,600 operations: unshared, one sync each. While a sync is in flight the
  // other 31 threads append and wait, so batches hold many operations.
  EXPECT_LT(used, uint64_t{kThreads} * kOps / 8) << used << " syncs";
  EXPECT_EQ(st.queue.durable(), uint64_t{kThreads} * kOps);
}

TEST(EnvSyncCounter, CountsEverySyncOfEveryFile) {
  FaultInjectionEnv env;
  auto f = env.OpenLocked("x", Env::Mode::kCreate).value();
  auto g = env.OpenLocked("y", Env::Mode::kCreate).value();
  EXPECT_EQ(env.sync_calls(), 0u);
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(g->Sync().ok());
  env.FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(f->Sync().ok());  // a failed call is counted too
  EXPECT_EQ(env.sync_calls(), 3u);
  EXPECT_EQ(env.calls(FaultInjectionEnv::Op::kSync), 3u);
}

TEST(EnvSyncCounter, PosixEnvCountsFdatasyncs) {
  std::string path = ::testing::TempDir() + "/cowstore-sync-counter";
  Env* env = DefaultEnv();
  auto f = env->OpenLocked(path, Env::Mode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  uint64_t before = env->sync_calls();
  ASSERT_TRUE(f.value()->Write(0, 4, "abcd").ok());
  ASSERT_TRUE(f.value()->Sync().ok());
  ASSERT_TRUE(f.value()->Sync().ok());
  // Other tests in this process could sync too; none runs concurrently here.
  EXPECT_EQ(env->sync_calls(), before + 2);
  f.value().reset();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace cowstore::store
