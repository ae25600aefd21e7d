// SPDX-License-Identifier: Apache-2.0
// Background thinning (thinner.h): freed AUs are punched off the command path
// and become allocatable only afterwards; allocations wait for them rather
// than fail; a power cut between the durable freeing record and the punch
// exposes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "handler/store/thinner.h"
#include "tests/common/gate.h"
#include "tests/store/pattern.h"

namespace cowstore::store {
namespace {

using namespace std::chrono_literals;
using D = Durability;

// Punches wait at a closed gate (tests/common/gate.h).
using cowstore::testing::Gate;

// ------------------------------------------------------------ Thinner alone

struct Log {
  std::mutex m;
  std::vector<PendingRun> punched, released;
  std::vector<bool> zeroed;
};

TEST(Thinner, PunchesOffTheCallersThreadMergingRunsThenReleases) {
  Log log;
  Gate gate;
  std::atomic<std::thread::id> punch_thread{};
  Thinner t(
      [&](const PendingRun& r) {
        punch_thread = std::this_thread::get_id();
        gate.Pass();
        std::lock_guard<std::mutex> g(log.m);
        log.punched.push_back(r);
        return r.phys != 100;  // AU 100 cannot be zeroed
      },
      [&](const std::vector<PendingRun>& r, const std::vector<bool>& ok) {
        std::lock_guard<std::mutex> g(log.m);
        log.released.insert(log.released.end(), r.begin(), r.end());
        log.zeroed.insert(log.zeroed.end(), ok.begin(), ok.end());
      });
  gate.Close();
  t.Add({{10, 2, 1}, {100, 1, 2}, {12, 3, 3}});  // 10..14 touch: one punch
  // Add returned while the punch is held at the gate: the caller never waits.
  while (gate.waiting() == 0) std::this_thread::sleep_for(1ms);
  EXPECT_NE(punch_thread.load(), std::this_thread::get_id());
  EXPECT_EQ(t.backlog_units(), 6u);
  {
    std::lock_guard<std::mutex> g(log.m);
    EXPECT_TRUE(log.released.empty());  // nothing allocatable before its punch
  }
  gate.Open();
  t.Drain();
  EXPECT_EQ(t.backlog_units(), 0u);
  std::lock_guard<std::mutex> g(log.m);
  ASSERT_EQ(log.released.size(), 2u);
  EXPECT_EQ(log.released[0].phys, 10u);
  EXPECT_EQ(log.released[0].n, 5u);
  EXPECT_EQ(log.released[0].tag, 3u);
  EXPECT_TRUE(log.zeroed[0]);
  EXPECT_EQ(log.released[1].phys, 100u);
  EXPECT_FALSE(log.zeroed[1]);  // reported, so it goes to quarantine
}

TEST(Thinner, DrainWaitsForWhatWasAddedBeforeAndHelps) {
  std::atomic<uint64_t> released{0};
  Gate gate;
  Thinner t([&](const PendingRun&) { gate.Pass(); return true; },
            [&](const std::vector<PendingRun>& r, const std::vector<bool>&) {
              for (const PendingRun& x : r) released += x.n;
            });
  gate.Close();
  t.Add({{0, 1, 1}});
  while (gate.waiting() == 0) std::this_thread::sleep_for(1ms);  // the worker holds run 0
  t.Add({{5, 1, 2}});  // queued behind it
  std::atomic<bool> drained{false};
  std::thread d([&] {
    t.Drain();
    drained = true;
  });
  // The drainer takes the queued run itself: two punches at the gate.
  while (gate.waiting() < 2) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(drained.load());
  gate.Open();
  d.join();
  EXPECT_EQ(released.load(), 2u);
}

TEST(Thinner, DestructorStopsWithRunsQueued) {
  Gate gate;
  std::atomic<int> punches{0};
  std::thread opener;
  {
    Thinner t([&](const PendingRun&) { punches++; gate.Pass(); return true; },
              [](const std::vector<PendingRun>&, const std::vector<bool>&) {});
    gate.Close();
    t.Add({{0, 1, 1}});
    while (gate.waiting() == 0) std::this_thread::sleep_for(1ms);
    t.Add({{9, 1, 2}});
    opener = std::thread([&] {
      std::this_thread::sleep_for(20ms);
      gate.Open();
    });
  }  // joins the worker after its run in hand; the queued one is dropped
  opener.join();
  EXPECT_GE(punches.load(), 1);
  EXPECT_LE(punches.load(), 2);
}

// ------------------------------------------------------------ pacing

// The pool's activity as the worker sees it: while `busy`, every look finds a
// new value (a commit started and ended each time); otherwise the same one.
// Even: no commit is in flight when the worker looks.
struct Activity {
  std::atomic<bool> busy{true};
  std::atomic<uint64_t> n{0};
  Thinner::ActivityFn Fn() {
    return [this] { return busy.load() ? n.fetch_add(2) + 2 : n.load(); };
  }
};

// Punched units, in the order the punches ran.
struct Punches {
  std::mutex m;
  std::vector<PendingRun> runs;
  uint64_t units() {
    std::lock_guard<std::mutex> g(m);
    uint64_t u = 0;
    for (const PendingRun& r : runs) u += r.n;
    return u;
  }
  Thinner::PunchFn Fn() {
    return [this](const PendingRun& r) {
      std::lock_guard<std::mutex> g(m);
      runs.push_back(r);
      return true;
    };
  }
};

void NoRelease(const std::vector<PendingRun>&, const std::vector<bool>&) {}

// Polls for up to 20 s (a loaded CI machine), so only a real hang fails.
template <class F>
bool Eventually(F f) {
  for (int i = 0; i < 20000 && !f(); i++) std::this_thread::sleep_for(1ms);
  return f();
}

TEST(ThinnerPacing, WaitsWhileThePoolCommitsAndPunchesOnceItPauses) {
  Activity act;
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 10ms;
  pace.overdue = std::chrono::hours(1);
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  t.Add({{0, 4, 1}, {7, 1, 2}});
  // Each look at the activity finds a commit: no punch, however long it waits.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(p.units(), 0u);
  EXPECT_EQ(t.backlog_units(), 5u);
  act.busy = false;  // the commits stop
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() == 0; }));
  EXPECT_EQ(p.units(), 5u);
}

TEST(ThinnerPacing, DrainDoesNotWaitForAPause) {
  Activity act;
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 10ms;
  pace.overdue = std::chrono::hours(1);
  pace.overdue = 30s;  // bounded, so a regression fails here rather than hangs
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  const auto t0 = std::chrono::steady_clock::now();
  t.Add({{0, 4, 1}});
  t.Drain();  // an allocation needs the space now: punched on this thread
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  EXPECT_EQ(p.units(), 4u);
  EXPECT_EQ(t.backlog_units(), 0u);
}

TEST(ThinnerPacing, PunchesAnywayOnceOverdue) {
  Activity act;  // busy for ever
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 10ms;
  pace.overdue = 50ms;
  const auto t0 = std::chrono::steady_clock::now();
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  t.Add({{0, 4, 1}});
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() == 0; }));
  // Not before `overdue` had passed since the worker began.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_EQ(p.units(), 4u);
}

TEST(ThinnerPacing, NoPunchCoversMoreThanASlice) {
  Punches p;
  std::vector<PendingRun> released;
  std::mutex m;
  ThinnerPacing pace;
  pace.slice_units = 4;
  Thinner t(p.Fn(),
            [&](const std::vector<PendingRun>& r, const std::vector<bool>&) {
              std::lock_guard<std::mutex> g(m);
              released.insert(released.end(), r.begin(), r.end());
            },
            nullptr, pace);
  t.Add({{0, 10, 1}, {10, 3, 2}, {20, 4, 3}});
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() == 0; }));
  std::vector<uint8_t> seen(24, 0);
  std::lock_guard<std::mutex> pg(p.m);
  for (const PendingRun& r : p.runs) {
    EXPECT_LE(r.n, 4u);
    for (uint64_t u = r.phys; u < r.phys + r.n; u++) seen[u]++;
  }
  for (uint64_t u = 0; u < 24; u++) EXPECT_EQ(seen[u], (u < 13 || u >= 20) ? 1 : 0) << u;
  // Each piece keeps the ticket of the record that freed it (a merge of two
  // pieces takes the later one).
  std::lock_guard<std::mutex> g(m);
  for (const PendingRun& r : released) {
    if (r.phys >= 20) EXPECT_EQ(r.tag, 3u);
    else if (r.phys + r.n <= 10) EXPECT_EQ(r.tag, 1u);
    else EXPECT_EQ(r.tag, 2u);
  }
}

TEST(ThinnerPacing, NoPunchWhileACommitIsInFlight) {
  // The pool's counter sits still, and odd, for as long as a sync takes: that
  // is not a pause.
  std::atomic<uint64_t> counter{7};
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 10ms;
  pace.overdue = std::chrono::hours(1);
  Thinner t(p.Fn(), NoRelease, [&] { return counter.load(); }, pace);
  t.Add({{0, 4, 1}});
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(p.units(), 0u);
  counter = 8;  // the commit ended and none follows
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() == 0; }));
  EXPECT_EQ(p.units(), 4u);
}

TEST(ThinnerPacing, ALargeBacklogIsPunchedWithoutWaiting) {
  Activity act;  // busy for ever
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 10ms;
  pace.overdue = std::chrono::hours(1);
  pace.slice_units = 4;
  pace.urgent_units = 10;
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  t.Add({{0, 30, 1}});
  // Punched down to the urgent bound, a slice at a time; the rest waits for a
  // pause (or `overdue`).
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() <= 10; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_GE(t.backlog_units(), 7u);  // 30 - 4 x 6 = 6 would mean it went on
  std::lock_guard<std::mutex> g(p.m);
  for (const PendingRun& r : p.runs) EXPECT_LE(r.n, 4u);
}

TEST(ThinnerPacing, DrainPunchesASliceAtATime) {
  Activity act;
  Punches p;
  ThinnerPacing pace;
  pace.overdue = std::chrono::hours(1);
  pace.slice_units = 4;
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  t.Add({{0, 32, 1}, {40, 9, 2}});
  t.Drain();
  EXPECT_EQ(p.units(), 41u);
  std::lock_guard<std::mutex> g(p.m);
  for (const PendingRun& r : p.runs) EXPECT_LE(r.n, 4u);
}

TEST(ThinnerPacing, RunsAddedAfterADrainTookTheQueueStillGetPunched) {
  Activity act;
  Punches p;
  ThinnerPacing pace;
  pace.quiet = 20ms;
  pace.overdue = std::chrono::hours(1);
  Thinner t(p.Fn(), NoRelease, act.Fn(), pace);
  t.Add({{0, 1, 1}});  // the worker now waits for a pause
  std::this_thread::sleep_for(5ms);
  t.Drain();           // takes it from under the waiting worker
  EXPECT_EQ(p.units(), 1u);
  t.Add({{5, 2, 2}});  // the queue was empty: the worker must still see this
  act.busy = false;
  EXPECT_TRUE(Eventually([&] { return t.backlog_units() == 0; }));
  EXPECT_EQ(p.units(), 3u);
}

// ------------------------------------------------------------ through a pool

// Passes everything to a FaultInjectionEnv, holding punches at a gate.
class GatedFile final : public File {
 public:
  GatedFile(std::unique_ptr<File> f, Gate* g) : f_(std::move(f)), g_(g) {}
  Status Read(uint64_t o, size_t n, void* b) override { return f_->Read(o, n, b); }
  Status Write(uint64_t o, size_t n, const void* b) override { return f_->Write(o, n, b); }
  Status Sync() override { return f_->Sync(); }
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
  Status DropCache() override { return f_->DropCache(); }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t s) override { return f_->Truncate(s); }
  Status PunchHole(uint64_t o, uint64_t n) override {
    g_->Pass();
    uint64_t m = largest_punch->load();
    while (n > m && !largest_punch->compare_exchange_weak(m, n)) {}
    return f_->PunchHole(o, n);
  }
  bool CanTruncate() const override { return f_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
  bool WritesAllocate() const override { return f_->WritesAllocate(); }
  bool DiscardZeroes() const override { return f_->DiscardZeroes(); }
  std::atomic<uint64_t>* largest_punch = nullptr;

 private:
  std::unique_ptr<File> f_;
  Gate* g_;
};

class GatedEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override {
    auto f = inner.OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    auto g = std::make_unique<GatedFile>(std::move(f.value()), &gate);
    g->largest_punch = &largest_punch;
    return std::unique_ptr<File>(std::move(g));
  }
  bool Exists(const std::string& path) override { return inner.Exists(path); }
  FaultInjectionEnv inner;
  Gate gate;
  std::atomic<uint64_t> largest_punch{0};  // bytes
};

constexpr uint32_t kAu = 64 * 1024;
PoolOptions Opts(uint64_t units) {
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.size_bytes = 128 * 1024 + units * kAu;
  return o;
}
using testing::Pattern;
bool AllZero(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint8_t x) { return x == 0; });
}

TEST(PoolThinning, FreedSpaceShowsAsThinningAndAllocationsWaitForIt) {
  GatedEnv env;
  auto p = Pool::Create(&env, "p", Opts(16));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  ASSERT_TRUE(pool.CreateLun("a", 2 << 20, 512).ok());
  auto a = pool.OpenLun("a").value();
  const uint64_t bpa = kAu / 512;
  auto data = Pattern(kAu, 0xA5);
  uint64_t written = 0;
  while (a->Write(written * bpa, bpa, data.data(), D::kDurable).ok()) written++;
  ASSERT_GT(written, 8u);
  const uint64_t free_full = pool.Space().free_units;

  env.gate.Close();  // punches now wait
  ASSERT_TRUE(a->Unmap(0, written * bpa, D::kDurable).ok());  // returns: no punch on its path
  SpaceInfo s = pool.Space();
  EXPECT_EQ(s.thinning_units, written);                   // coming back, said as such
  EXPECT_EQ(s.free_units, free_full + written);           // and counted as free
  EXPECT_TRUE(pool.Check().clean);                        // a consistent state meanwhile

  // Writing it all again needs those AUs: it waits for the punches instead
  // of failing with kNoSpace.
  std::atomic<uint64_t> rewritten{0};
  std::atomic<bool> finished{false};
  Status w;
  std::thread writer([&] {
    for (uint64_t i = 0; i < written && w.ok(); i++, rewritten++)
      w = a->Write(i * bpa, bpa, data.data(), D::kDurable);
    finished = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(finished.load());  // blocked on the punches, not failed
  EXPECT_LT(rewritten.load(), written);
  env.gate.Open();
  writer.join();
  EXPECT_TRUE(w.ok()) << w.ToString();
  EXPECT_EQ(rewritten.load(), written);
  EXPECT_EQ(pool.Space().thinning_units, 0u);
  EXPECT_TRUE(pool.Check().clean);
  std::vector<uint8_t> v(kAu);
  ASSERT_TRUE(a->Read(0, bpa, v.data()).ok());
  EXPECT_EQ(v, data);
}

// A rollback frees the target's exclusive AUs like any other freeing record:
// pending until the rollback's record is durable (RollbackLun returns only
// then), then punched off the caller's thread, and only then reusable.
TEST(PoolThinning, RollbackFreesThroughThePunchLikeAnUnmap) {
  GatedEnv env;
  auto p = Pool::Create(&env, "p", Opts(16));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  ASSERT_TRUE(pool.CreateLun("a", 2 << 20, 512).ok());
  auto a = pool.OpenLun("a").value();
  const uint64_t bpa = kAu / 512;
  const auto data = Pattern(kAu, 0xA5);
  ASSERT_TRUE(a->Write(0, bpa, data.data(), D::kDurable).ok());
  ASSERT_TRUE(pool.SnapshotLun("a", "a.snap").ok());
  // The snapshot shares AU 0; everything written from here on is a's alone.
  const auto other = Pattern(2 * kAu, 0xA5);
  std::vector<uint8_t> second(other.begin() + kAu, other.end());
  uint64_t written = 0;
  while (written < 8 && a->Write(written * bpa, bpa, second.data(), D::kDurable).ok()) written++;
  ASSERT_EQ(written, 8u);
  const uint64_t free_before = pool.Space().free_units;

  env.gate.Close();  // punches now wait
  ASSERT_TRUE(pool.RollbackLun("a", "a.snap").ok());  // returns: no punch on its path
  SpaceInfo s = pool.Space();
  EXPECT_EQ(s.thinning_units, written);  // every AU only a held, on its way back
  EXPECT_EQ(s.free_units, free_before + written);
  EXPECT_TRUE(pool.Check().clean);
  std::vector<uint8_t> v(kAu);
  ASSERT_TRUE(a->Read(0, bpa, v.data()).ok());
  EXPECT_EQ(v, data);  // the snapshot's contents
  ASSERT_TRUE(a->Read(bpa, bpa, v.data()).ok());
  EXPECT_TRUE(AllZero(v));

  // Allocating more than was free before needs the rollback's AUs: it waits
  // for their punch instead of reusing them unzeroed or failing with kNoSpace.
  const uint64_t want = free_before + written / 2;
  ASSERT_TRUE(pool.CreateLun("b", 2 << 20, 512).ok());
  auto b = pool.OpenLun("b").value();
  std::atomic<bool> finished{false};
  Status w;
  std::thread writer([&] {
    w = b->Allocate(0, want * bpa, D::kDurable);
    finished = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(finished.load());  // blocked on the punches, not failed
  env.gate.Open();
  writer.join();
  EXPECT_TRUE(w.ok()) << w.ToString();
  EXPECT_EQ(pool.Space().thinning_units, 0u);
  EXPECT_TRUE(pool.Check().clean);
  std::vector<uint8_t> z(want * kAu);
  ASSERT_TRUE(b->Read(0, want * bpa, z.data()).ok());
  EXPECT_TRUE(AllZero(z));  // none of a's overwritten data came back
}

// A power cut after the freeing record is durable and before the punch: the
// AUs hold the old data on disk, are free in the recovered state, and must
// read as zeros before anything can allocate them (recovery punches every
// free AU at open).
TEST(PoolThinning, PowerCutBeforeThePunchExposesNothing) {
  GatedEnv env;
  const uint64_t bpa = kAu / 512;
  const auto data = Pattern(4 * kAu, 0xA5);
  {
    auto p = Pool::Create(&env, "p", Opts(16));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("a", 1 << 20, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    ASSERT_TRUE(a->Write(0, 4 * bpa, data.data(), D::kDurable).ok());
    env.gate.Close();
    ASSERT_TRUE(a->Unmap(0, 4 * bpa, D::kDurable).ok());  // the record is durable
    while (env.gate.waiting() == 0) std::this_thread::sleep_for(1ms);  // punch not done
    env.inner.CrashAfter(0);  // the machine dies here
    env.gate.Open();          // the punch now fails: the disk is gone
    a.reset();
    p->reset();
  }
  env.inner.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 1);
  auto has_data = [&] {
    std::vector<uint8_t> img = env.inner.Snapshot("p");
    return std::search(img.begin(), img.end(), data.begin(), data.begin() + 4096) != img.end();
  };
  ASSERT_TRUE(has_data()) << "the scenario needs the old data still in the freed AUs";

  auto p = Pool::Open(&env, "p", OpenOptions{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(has_data());  // open zeroed the free AUs before taking any write
  auto a = (*p)->OpenLun("a").value();
  std::vector<uint8_t> v(4 * kAu);
  ASSERT_TRUE(a->Read(0, 4 * bpa, v.data()).ok());
  EXPECT_TRUE(AllZero(v));  // the unmap survived
  // Every AU the pool can hand out reads as zeros: map them all and read.
  ASSERT_TRUE((*p)->CreateLun("b", 8 * kAu, 512).ok());
  auto b = (*p)->OpenLun("b").value();
  ASSERT_TRUE(b->Allocate(0, 8 * bpa, D::kDurable).ok());
  std::vector<uint8_t> w(8 * kAu);
  ASSERT_TRUE(b->Read(0, 8 * bpa, w.data()).ok());
  EXPECT_TRUE(AllZero(w));
  EXPECT_TRUE((*p)->Check().clean);
}

// The pool sets the slice (kPunchSliceBytes, 8 MiB): freeing 12.5 MiB of
// written data is punched in pieces no larger, however the AUs were freed.
TEST(PoolThinning, NoPunchIsLargerThanASlice) {
  GatedEnv env;
  auto p = Pool::Create(&env, "p", Opts(300));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  ASSERT_TRUE(pool.CreateLun("a", 200 * kAu, 512).ok());
  auto a = pool.OpenLun("a").value();
  const uint64_t bpa = kAu / 512;
  const auto data = Pattern(200 * kAu, 0xA5);
  ASSERT_TRUE(a->Write(0, 200 * bpa, data.data(), D::kDurable).ok());
  env.largest_punch = 0;  // open punched the free space whole: not a thinning punch
  ASSERT_TRUE(a->Unmap(0, 200 * bpa, D::kDurable).ok());  // one record frees 200 contiguous AUs
  ASSERT_TRUE(Eventually([&] { return pool.Space().thinning_units == 0; }));
  EXPECT_GT(env.largest_punch.load(), 0u);
  EXPECT_LE(env.largest_punch.load(), 8u << 20);
  EXPECT_TRUE(pool.Check().clean);
}

// A LUN-table change that needs checkpoint room only the thinning AUs can
// give waits for their punch, as an allocation does, instead of failing with
// kNoSpace for space Space() already shows as free. Each case: a pool filled
// until neither data nor another LUN fits, then a large LUN unmapped with its
// punches held at the gate.
class PoolThinningLunTable : public ::testing::TestWithParam<const char*> {};

TEST_P(PoolThinningLunTable, WaitsForThePunchesInsteadOfRefusing) {
  GatedEnv env;
  auto p = Pool::Create(&env, "p", Opts(16));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  const uint64_t bpa = kAu / 512;
  const auto data = Pattern(kAu, 0xA5);
  ASSERT_TRUE(pool.CreateLun("a", 2 << 20, 512).ok());
  ASSERT_TRUE(pool.OpenLun("a").value()->Write(0, bpa, data.data(), D::kDurable).ok());
  ASSERT_TRUE(pool.SnapshotLun("a", "a.snap").ok());
  ASSERT_TRUE(pool.CreateLun("big", 2 << 20, 512).ok());
  auto big = pool.OpenLun("big").value();
  uint64_t written = 0;
  while (big->Write(written * bpa, bpa, data.data(), D::kDurable).ok()) written++;
  ASSERT_GT(written, 8u);
  int fillers = 0;  // each LUN adds to the checkpoint until none fits
  while (pool.CreateLun("filler" + std::to_string(fillers), 1 << 20, 512).ok()) ASSERT_LT(++fillers, 5000);
  ASSERT_EQ(pool.CreateLun("one-more", 1 << 20, 512).status().code(), Code::kNoSpace);

  // The setup leans on the checkpoint's sizing (CkptUnits): the unmap below
  // must still fit (room for 2 more extents) where a new LUN (8) does not.
  // A change there shows as a failed ASSERT in this setup, never as a pass.
  env.gate.Close();  // punches now wait
  // Unmapped rather than deleted: a deleted LUN would give back its own
  // checkpoint room, and the change below would fit without the punches.
  ASSERT_TRUE(big->Unmap(0, written * bpa, D::kDurable).ok());
  ASSERT_EQ(pool.Space().thinning_units, written);

  const std::string op = GetParam();
  std::atomic<bool> finished{false};
  Status st;
  std::thread worker([&] {
    if (op == "create") st = pool.CreateLun("late", 1 << 20, 512).status();
    else if (op == "clone") st = pool.CloneLun("a", "a.clone").status();
    else if (op == "snapshot") st = pool.SnapshotLun("a", "a.snap2").status();
    else st = pool.RollbackLun("a", "a.snap");
    finished = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(finished.load());  // waiting for the punches, not refused
  env.gate.Open();
  worker.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(pool.Check().clean);
  std::vector<uint8_t> v(kAu);
  ASSERT_TRUE(pool.OpenLun("a").value()->Read(0, bpa, v.data()).ok());
  EXPECT_EQ(v, data);
}

INSTANTIATE_TEST_SUITE_P(EachChange, PoolThinningLunTable,
                         ::testing::Values("create", "clone", "snapshot", "rollback"));

// A full pool must still take the UNMAPs (and WRITE SAMEs of zeros) that an
// administrator sends to make room, even when they free nothing at once:
// here the data is shared with a snapshot, so each unmap only splits the
// LUN's extent, and nothing is being thinned to wait for. Growth keeps
// checkpoint room for Core::kFreeingReserveExtents more extents that only
// frees may use; without it the pool filled up to within a few extents of
// its checkpoint room, and the unmaps were refused with kNoSpace.
TEST(PoolFull, UnmapsThatSplitSharedExtentsStillFit) {
  GatedEnv env;
  auto p = Pool::Create(&env, "p", Opts(64));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  const uint64_t bpa = kAu / 512;
  // Enough splits (19 x 24 bytes of checkpoint) to pass any slack the fill
  // leaves (each filler LUN takes 160 bytes of it).
  const uint64_t grains = 40;
  const auto data = Pattern(grains * kAu, 0xA5);
  ASSERT_TRUE(pool.CreateLun("a", grains * kAu, 512).ok());
  auto a = pool.OpenLun("a").value();
  ASSERT_TRUE(a->Write(0, grains * bpa, data.data(), D::kDurable).ok());
  ASSERT_TRUE(pool.SnapshotLun("a", "a.snap").ok());
  // Fill the data, then the checkpoint's room with LUNs (each adds to it),
  // until neither fits.
  ASSERT_TRUE(pool.CreateLun("big", 64 * kAu, 512).ok());
  auto big = pool.OpenLun("big").value();
  uint64_t written = 0;
  while (big->Write(written * bpa, bpa, data.data(), D::kDurable).ok()) written++;
  ASSERT_GT(written, 0u);
  int fillers = 0;
  while (pool.CreateLun("filler" + std::to_string(fillers), 1 << 20, 512).ok()) ASSERT_LT(++fillers, 20000);
  ASSERT_EQ(pool.CreateLun("one-more", 1 << 20, 512).status().code(), Code::kNoSpace);
  ASSERT_EQ(pool.Space().thinning_units, 0u);

  // Every other grain of `a`: each unmap splits one shared extent in two.
  for (uint64_t g = 1; g + 1 < grains; g += 2)
    ASSERT_TRUE(a->Unmap(g * bpa, bpa, D::kDurable).ok()) << "grain " << g;
  EXPECT_EQ(pool.Space().thinning_units, 0u);  // shared: nothing was freed
  // Inside the reserve, data the pool already holds is still writable in place.
  const auto other = Pattern(2 * kAu, 0xA5);
  ASSERT_TRUE(big->Write(0, bpa, other.data() + 17, D::kDurable).ok());
  std::vector<uint8_t> w(kAu);
  ASSERT_TRUE(big->Read(0, bpa, w.data()).ok());
  EXPECT_TRUE(std::equal(w.begin(), w.end(), other.begin() + 17));
  std::vector<uint8_t> v(kAu);
  for (uint64_t g = 0; g < grains; g++) {
    ASSERT_TRUE(a->Read(g * bpa, bpa, v.data()).ok());
    if (g % 2 == 1 && g + 1 < grains) EXPECT_TRUE(AllZero(v)) << "grain " << g;
    else EXPECT_TRUE(std::equal(v.begin(), v.end(), data.begin() + g * kAu)) << "grain " << g;
  }
  EXPECT_TRUE(pool.Check().clean);
}

}  // namespace
}  // namespace cowstore::store
