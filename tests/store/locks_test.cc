// SPDX-License-Identifier: Apache-2.0
// The store's lock primitives under contention: Mutex (meta_mu_) and
// RangeLock. Each must exclude and must never lose a wake-up: a
// lost wake shows as a thread that never finishes, which the test's
// deadline turns into a failure instead of a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <thread>
#include <vector>

#include "handler/store/range_lock.h"
#include "handler/store/thread_annotations.h"

namespace cowstore::store {
namespace {

constexpr auto kDeadline = std::chrono::seconds(120);

// Runs body(t) on n threads; fails (instead of hanging) if they do not all
// finish by the deadline.
template <typename F>
void RunThreads(int n, F body) {
  std::vector<std::thread> th;
  std::promise<void> all_done;
  std::future<void> done = all_done.get_future();
  std::atomic<int> left{n};
  for (int t = 0; t < n; t++)
    th.emplace_back([&, t] {
      body(t);
      if (left.fetch_sub(1) == 1) all_done.set_value();
    });
  const bool finished = done.wait_for(kDeadline) == std::future_status::ready;
  if (!finished) {
    ADD_FAILURE() << left.load() << " threads still blocked: a lost wake-up";
    std::abort();  // the blocked threads cannot be joined
  }
  for (auto& x : th) x.join();
}

TEST(Mutex, ExcludesUnderContention) {
  Mutex mu;
  uint64_t counter = 0;  // a plain word: a lost update shows in the total
  int inside = 0;
  std::atomic<bool> overlap{false};
  constexpr int kThreads = 8, kIters = 200000;
  RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kIters; i++) {
      MutexLock g(&mu);
      if (++inside != 1) overlap = true;
      counter++;
      --inside;
    }
  });
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(counter, uint64_t{kThreads} * kIters);
}

TEST(Mutex, LongHoldsPutWaitersToSleepAndWakeThemAll) {
  // Holds far longer than any spin, so waiters must sleep on the futex and
  // every one must be woken: 32 threads, each taking it 50 times and holding
  // it across a yield/sleep.
  Mutex mu;
  int owner = -1;
  std::atomic<bool> overlap{false};
  std::atomic<int> taken{0};
  RunThreads(32, [&](int t) {
    for (int i = 0; i < 50; i++) {
      mu.Lock();
      if (owner != -1) overlap = true;
      owner = t;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      owner = -1;
      taken.fetch_add(1, std::memory_order_relaxed);
      mu.Unlock();
    }
  });
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(taken.load(), 32 * 50);
}

TEST(RangeLock, ExclusiveRangesExcludeOverlapsAndAdmitDisjointOnes) {
  RangeLock rl;
  constexpr int kThreads = 16, kIters = 3000, kSlots = 8;
  // Each thread locks [s, s+2) of 8 slots exclusively and checks nobody else
  // is in either slot; the counters are plain words guarded only by the
  // range lock.
  int inside[kSlots] = {};
  uint64_t writes[kSlots] = {};
  std::atomic<bool> overlap{false};
  RunThreads(kThreads, [&](int t) {
    for (int i = 0; i < kIters; i++) {
      const uint64_t s = static_cast<uint64_t>(t * 7 + i) % (kSlots - 1);
      RangeGuard g(&rl, s, s + 2, true);
      for (uint64_t k = s; k < s + 2; k++)
        if (++inside[k] != 1) overlap = true;
      for (uint64_t k = s; k < s + 2; k++) {
        writes[k]++;
        --inside[k];
      }
    }
  });
  EXPECT_FALSE(overlap.load());
  uint64_t total = 0;
  for (uint64_t w : writes) total += w;
  EXPECT_EQ(total, uint64_t{2} * kThreads * kIters);
}

TEST(RangeLock, SharedHoldersCoexistAndExcludeWriters) {
  RangeLock rl;
  std::atomic<int> readers{0}, writers{0};
  std::atomic<int> max_readers{0};
  std::atomic<bool> bad{false};
  RunThreads(12, [&](int t) {
    for (int i = 0; i < 2000; i++) {
      const bool x = (t % 4 == 0);
      RangeGuard g(&rl, 0, 4, x);
      if (x) {
        if (writers.fetch_add(1) != 0 || readers.load() != 0) bad = true;
        std::this_thread::yield();
        writers.fetch_sub(1);
      } else {
        int r = readers.fetch_add(1) + 1;
        if (writers.load() != 0) bad = true;
        int m = max_readers.load();
        while (r > m && !max_readers.compare_exchange_weak(m, r)) {
        }
        std::this_thread::yield();
        readers.fetch_sub(1);
      }
    }
  });
  EXPECT_FALSE(bad.load());
  EXPECT_GT(max_readers.load(), 1) << "shared holders never overlapped";
}

TEST(RangeLock, EveryBlockedLockerIsWokenByUnlock) {
  // One holder blocks 24 lockers of the same range; each release must let
  // the next in (none may sleep through its wake-up).
  for (int round = 0; round < 50; round++) {
    RangeLock rl;
    uint64_t tok = rl.Lock(10, 20, true);
    std::atomic<int> got{0};
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      rl.Unlock(tok);
    });
    RunThreads(24, [&](int t) {
      RangeGuard g(&rl, 15 - t % 3, 16 + t % 3, true);
      got.fetch_add(1);
    });
    releaser.join();
    EXPECT_EQ(got.load(), 24);
  }
}

}  // namespace
}  // namespace cowstore::store
