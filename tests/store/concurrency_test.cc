// SPDX-License-Identifier: Apache-2.0
// Concurrency tests (ctest label `concurrency`, run under TSan): parallel
// I/O to disjoint ranges, compare-and-write racing plain writes, clones racing
// writes, LUN-table changes racing I/O, checkpoints handing dirty state over
// while many threads write and clone. Over the suite's formats
// (suite_formats.h: /F2, /F3AU, /F3G4K).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/common/gate.h"
#include "tests/store/suite_formats.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 * 1024;
using D = Durability;
using testing::SuiteFormat;

std::unique_ptr<Pool> MakePool(FaultInjectionEnv* env, const SuiteFormat& f, uint64_t units = 256) {
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 128 * 1024;
  o.size_bytes = 192 * 1024 + units * kAu;
  // Format 3's journal is offered nothing (no unit below a 1 % line): the
  // data has format 2's room, and the 128 KiB journal checkpoints often.
  o.soft_threshold_percent = 1;
  f.Apply(&o);
  auto p = Pool::Create(env, "pool", o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p.value());
}

bool Uniform(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](uint8_t x) { return x == v[0]; });
}

class Concurrency : public ::testing::TestWithParam<SuiteFormat> {};
INSTANTIATE_TEST_SUITE_P(Formats, Concurrency, testing::AllFormats(), testing::FormatName());

TEST_P(Concurrency, DisjointWritersAndReaders) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam());
  ASSERT_TRUE(pool->CreateLun("a", 4 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  std::mutex first_mu;
  std::string first;  // the first failure, for the report
  auto fail = [&](const std::string& what) {
    bad++;
    std::lock_guard<std::mutex> g(first_mu);
    if (first.empty()) first = what;
  };
  for (int t = 0; t < 4; t++) {
    th.emplace_back([&, t] {
      std::vector<uint8_t> buf(8192), out(8192);
      for (int i = 0; i < 200; i++) {
        uint64_t lba = t * 2048 + (i * 16) % 2048;
        std::memset(buf.data(), t * 50 + i % 50, buf.size());
        Status st = a->Write(lba, 16, buf.data(), i % 3 ? D::kBuffered : D::kDurable);
        if (!st.ok()) fail("write " + std::to_string(lba) + ": " + st.ToString());
        st = a->Read(lba, 16, out.data());
        if (!st.ok()) fail("read " + std::to_string(lba) + ": " + st.ToString());
        else if (out != buf) fail("read " + std::to_string(lba) + ": other data");
      }
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0) << first;
  EXPECT_TRUE(pool->Check().clean);
}

// Each CAW increments a counter block; lost updates would mean CAW was not
// atomic against the other CAWs. Plain writers hammer the neighbouring blocks
// of the same AU with uniform blocks; a reader must never see a torn block.
TEST_P(Concurrency, CompareAndWriteRacingWrites) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam());
  ASSERT_TRUE(pool->CreateLun("a", 1 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  std::vector<uint8_t> zero(512, 0);
  ASSERT_TRUE(a->Write(0, 1, zero.data(), D::kDurable).ok());
  std::atomic<uint64_t> successes{0};
  std::atomic<int> bad{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> th;
  for (int t = 0; t < 3; t++) {
    th.emplace_back([&] {
      std::vector<uint8_t> cur(512), next(512);
      for (int i = 0; i < 150; i++) {
        if (!a->Read(0, 1, cur.data()).ok()) bad++;
        uint64_t v;
        std::memcpy(&v, cur.data(), 8);
        next = cur;
        v++;
        std::memcpy(next.data(), &v, 8);
        Status s = a->CompareAndWrite(0, 1, cur.data(), next.data(), i % 4 ? D::kBuffered : D::kDurable);
        if (s.ok()) successes++;
        else if (s.code() != Code::kMiscompare) bad++;
        else if (s.miscompare_offset() >= 8) bad++;  // only the counter can differ
      }
    });
  }
  // Plain writes to the CAW'd block's neighbours, and a racing pair on block 2:
  // writers of uniform blocks and a CAW flipping 'A' blocks to 'B' blocks.
  th.emplace_back([&] {
    std::vector<uint8_t> buf(1024);
    for (int i = 0; !stop; i++) {
      std::memset(buf.data(), 'A', buf.size());
      if (!a->Write(1, 2, buf.data(), D::kBuffered).ok()) bad++;
    }
  });
  th.emplace_back([&] {
    std::vector<uint8_t> cmp(1024, 'A'), w(1024, 'B');
    for (int i = 0; !stop; i++) {
      Status s = a->CompareAndWrite(1, 2, cmp.data(), w.data(), D::kBuffered);
      if (!s.ok() && s.code() != Code::kMiscompare) bad++;
    }
  });
  th.emplace_back([&] {
    std::vector<uint8_t> v(1024);
    for (int i = 0; !stop; i++) {
      if (!a->Read(1, 2, v.data()).ok()) bad++;
      if (!Uniform(v)) bad++;
    }
  });
  for (int t = 0; t < 3; t++) th[t].join();
  stop = true;
  for (size_t t = 3; t < th.size(); t++) th[t].join();
  std::vector<uint8_t> cur(512);
  ASSERT_TRUE(a->Read(0, 1, cur.data()).ok());
  uint64_t v;
  std::memcpy(&v, cur.data(), 8);
  EXPECT_EQ(v, successes.load());
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(pool->Check().clean);
}

// A clone of a range that is being rewritten must capture one write or the
// other, whole: the source range lock makes each clone atomic.
TEST_P(Concurrency, ClonesRacingWrites) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam());
  ASSERT_TRUE(pool->CreateLun("src", 1 << 20, 512).ok());
  ASSERT_TRUE(pool->CreateLun("dst", 1 << 20, 512).ok());
  auto src = pool->OpenLun("src").value();
  auto dst = pool->OpenLun("dst").value();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread writer([&] {
    std::vector<uint8_t> buf(3 * kAu);
    for (int i = 0; !stop; i++) {
      std::memset(buf.data(), 1 + i % 200, buf.size());
      if (!src->Write(64, 3 * kAu / 512, buf.data(), D::kBuffered).ok()) bad++;  // unaligned
    }
  });
  std::thread writer2([&] {
    std::vector<uint8_t> buf(kAu);
    for (int i = 0; !stop; i++) {
      std::memset(buf.data(), 1 + i % 200, buf.size());
      if (!dst->Write(1024, 128, buf.data(), D::kBuffered).ok()) bad++;  // dst, elsewhere
    }
  });
  std::vector<uint8_t> v(3 * kAu);
  for (int i = 0; i < 150; i++) {
    bool aligned = i % 2;
    uint64_t dl = aligned ? 64 : 65;
    Status s = pool->CloneRange(*src, 64, *dst, dl, 3 * kAu / 512, i % 5 ? D::kBuffered : D::kDurable);
    if (!s.ok()) { bad++; continue; }
    if (!dst->Read(dl, 3 * kAu / 512, v.data()).ok()) bad++;
    if (!Uniform(v)) bad++;
    // And the reverse direction, racing the same writer (lock order test).
    s = pool->CloneRange(*dst, 1024, *src, 1024, 128, D::kBuffered);
    if (!s.ok()) bad++;
  }
  stop = true;
  writer.join();
  writer2.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(pool->Check().clean);
}

TEST_P(Concurrency, LunTableChangesRacingIo) {
  FaultInjectionEnv env;
  // Room for the worst case, so that any failure is a bug: each of the 30
  // clones kept may pin its own copy of all 16 AUs of "a" (the writer
  // copies-on-write whatever a clone shares), plus "a" itself. With 256
  // AUs a slow clone loop (ASan on a loaded machine) ran out of space.
  auto pool = MakePool(&env, GetParam(), 30 * 16 + 16 + 64);
  ASSERT_TRUE(pool->CreateLun("a", 1 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::mutex first_mu;
  std::string first;  // the first failure, for the report
  auto fail = [&](const Status& st, const char* what) {
    if (st.ok()) return;
    bad++;
    std::lock_guard<std::mutex> g(first_mu);
    if (first.empty()) first = std::string(what) + ": " + st.ToString();
  };
  std::thread io([&] {
    std::vector<uint8_t> buf(kAu, 7);
    for (int i = 0; !stop; i++) {
      fail(a->Write((i % 16) * 128, 128, buf.data(), i % 8 ? D::kBuffered : D::kDurable), "write");
      fail(a->ZeroRange(((i + 5) % 16) * 128, 64, D::kBuffered), "zero");
    }
  });
  for (int i = 0; i < 60; i++) {
    std::string n = "s" + std::to_string(i);
    auto c = pool->CloneLun("a", n);
    if (!c.ok()) { fail(c.status(), "clone"); continue; }
    fail(pool->ResizeLun(n, (i % 3 + 1) << 19), "resize");
    (void)pool->Space();
    if (i % 2) fail(pool->DeleteLun(n), "delete");
  }
  stop = true;
  io.join();
  EXPECT_EQ(bad.load(), 0) << first;
  CheckReport r = pool->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
}

// Sequential readers (whose reads run read-ahead, read_ahead.h: the map is
// looked up ahead of them without their range lock) racing writes, unmaps
// and a resize of the clone they read, and a reader of its source. Every
// 64 KiB they read is what one whole write or unmap left (uniform). Each
// reader finishes at least one whole pass, over a clone already split into
// 64 KiB pieces (read-ahead asks only for pieces under 512 KiB), so that
// read-ahead runs however slowly the threads get a CPU (a run that stopped
// on the clock alone once found no read-ahead under TSan on a loaded machine).
TEST_P(Concurrency, SequentialReadersRacingWritesAndAResize) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam(), 512);
  constexpr uint64_t kLun = 4 << 20, kBlocks = kLun / 512, kStep = kAu / 512;
  ASSERT_TRUE(pool->CreateLun("a", kLun, 512).ok());
  auto a = pool->OpenLun("a").value();
  {
    std::vector<uint8_t> buf(kAu);
    for (uint64_t lba = 0; lba < kBlocks; lba += kStep) {
      std::memset(buf.data(), static_cast<int>(1 + lba / kStep), buf.size());
      ASSERT_TRUE(a->Write(lba, kStep, buf.data(), D::kBuffered).ok());
    }
  }
  ASSERT_TRUE(pool->CloneLun("a", "c").ok());
  auto c = pool->OpenLun("c").value();
  {
    std::vector<uint8_t> buf(kAu, 200);
    for (uint64_t lba = 0; lba < kBlocks; lba += 2 * kStep)
      ASSERT_TRUE(c->Write(lba, kStep, buf.data(), D::kBuffered).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, readers_done_a_pass{0};
  std::mutex first_mu;
  std::string first;
  auto fail = [&](const std::string& what) {
    bad++;
    std::lock_guard<std::mutex> g(first_mu);
    if (first.empty()) first = what;
  };
  auto reader = [&](Lun* lun) {
    std::vector<uint8_t> v(kAu);
    for (int pass = 0; !stop; pass++) {
      for (uint64_t lba = 0; lba < kBlocks && !stop; lba += kStep) {
        Status st = lun->Read(lba, kStep, v.data());
        if (!st.ok()) {
          fail("read " + std::to_string(lba) + ": " + st.ToString());
        } else if (!Uniform(v)) {
          fail("read " + std::to_string(lba) + ": torn");
        }
      }
      if (pass == 0) readers_done_a_pass++;  // stop is set only after every reader's first
    }
  };
  std::vector<std::thread> th;
  th.emplace_back(reader, c.get());
  th.emplace_back(reader, c.get());
  th.emplace_back(reader, a.get());
  th.emplace_back([&] {
    std::vector<uint8_t> buf(kAu);
    std::mt19937 rng(7);
    for (int i = 0; !stop; i++) {
      const uint64_t lba = (rng() % (kBlocks / kStep)) * kStep;
      std::memset(buf.data(), 100 + i % 100, buf.size());
      Status st = i % 4 ? c->Write(lba, kStep, buf.data(), i % 16 ? D::kBuffered : D::kDurable)
                        : c->ZeroRange(lba, kStep, D::kBuffered);
      if (!st.ok()) fail("write " + std::to_string(lba) + ": " + st.ToString());
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Status st = pool->ResizeLun("c", kLun + (1 << 20));  // grows: the old blocks stay
  if (!st.ok()) fail("resize: " + st.ToString());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  while (readers_done_a_pass.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0) << first;
  EXPECT_FALSE(env.TakePrefetches().empty());  // the readers did read ahead
  CheckReport r = pool->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
}

// Durable writers share commits (group commit) and all survive a reopen.
TEST_P(Concurrency, DurableWritersShareCommits) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam());
  ASSERT_TRUE(pool->CreateLun("a", 4 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int t = 0; t < 6; t++)
    th.emplace_back([&, t] {
      std::vector<uint8_t> buf(512, static_cast<uint8_t>(t + 1));
      for (int i = 0; i < 100; i++)
        if (!a->Write(t * 1000 + i, 1, buf.data(), D::kDurable).ok()) bad++;
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0);
  a.reset();
  pool.reset();
  env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 1);  // only synced data survives
  auto p = Pool::Open(&env, "pool");
  ASSERT_TRUE(p.ok());
  auto b = (*p)->OpenLun("a").value();
  std::vector<uint8_t> v(512);
  for (int t = 0; t < 6; t++)
    for (int i = 0; i < 100; i++) {
      ASSERT_TRUE(b->Read(t * 1000 + i, 1, v.data()).ok());
      ASSERT_EQ(v[0], t + 1);
    }
}

// Six threads' durable writes (each into blocks of its own, new, then
// overwritten), sharing commits: at a random moment among them the disk
// dies, and each unsynced sector survives, is lost or is torn at random.
// The pool opens, checks clean, and every write that was answered GOOD
// reads back; one that was not reads old or new (or torn, if in place).
// The other fault: a sync that fails and, as Linux does, forgets the pages
// it could not write. Every commit from then on fails (the pool must be
// reopened): after a power cut, nothing answered GOOD is missing.
void ConcurrentCommitsUnderFaults(const SuiteFormat& format, bool failed_sync);

TEST_P(Concurrency, APowerCutAmidConcurrentCommitsLosesNoAnsweredWrite) {
  ConcurrentCommitsUnderFaults(GetParam(), false);
}

TEST_P(Concurrency, AFailedSyncAmidConcurrentCommitsLosesNoAnsweredWrite) {
  ConcurrentCommitsUnderFaults(GetParam(), true);
}

void ConcurrentCommitsUnderFaults(const SuiteFormat& format, bool failed_sync) {
  std::mt19937_64 rng(7 + format.format + format.grain + (failed_sync ? 100 : 0));
  constexpr int kThreads = 6, kBlocksEach = 96, kIters = 30;
  for (int iter = 0; iter < kIters; iter++) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    FaultInjectionEnv env;
    if (failed_sync) env.SetFailedSync(FaultInjectionEnv::FailedSync::kForget);
    auto pool = MakePool(&env, format);
    ASSERT_TRUE(pool->CreateLun("a", 4 << 20, 512).ok());
    auto a = pool->OpenLun("a").value();
    // Block b of thread t: LBA t * 1024 + b * 7 (apart, across AUs). Value
    // 1 + pass: each block is written twice, the second pass overwriting.
    auto lba = [](int t, int b) { return static_cast<uint64_t>(t) * 1024 + static_cast<uint64_t>(b) * 7; };
    std::vector<std::vector<int>> answered(kThreads, std::vector<int>(kBlocksEach, 0));  // passes answered
    // The fault is armed once `at` writes were answered; the writers wait
    // for it there, so it lands among their commits however the threads
    // are scheduled.
    const int at = 1 + static_cast<int>(rng() % (kThreads * kBlocksEach));
    std::atomic<int> writes{0};
    std::atomic<bool> armed{false};
    std::vector<std::thread> th;
    for (int t = 0; t < kThreads; t++)
      th.emplace_back([&, t] {
        for (int pass = 1; pass <= 2; pass++)
          for (int b = 0; b < kBlocksEach; b++) {
            while (writes.load() >= at && !armed.load()) std::this_thread::yield();
            std::vector<uint8_t> buf(512, static_cast<uint8_t>(16 * t + pass));
            if (!a->Write(lba(t, b), 1, buf.data(), D::kDurable).ok()) return;
            answered[t][b] = pass;
            writes++;
          }
      });
    while (writes.load() < at) std::this_thread::yield();
    if (failed_sync)
      env.FailAt(FaultInjectionEnv::Op::kSync, rng() % 4, Code::kIOError);
    else
      env.CrashAfter(static_cast<int64_t>(rng() % 24));
    armed = true;
    for (auto& t : th) t.join();
    ASSERT_LT(writes.load(), 2 * kThreads * kBlocksEach) << "the fault never struck";
    env.CrashAfter(0);  // dead for good: the destructors reach no disk
    a.reset();
    pool.reset();
    env.PowerLoss(failed_sync ? FaultInjectionEnv::Loss::kDropAll : static_cast<FaultInjectionEnv::Loss>(rng() % 4),
                  rng());
    auto p = Pool::Open(&env, "pool");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const CheckReport rep = (*p)->Check();
    ASSERT_TRUE(rep.clean) << rep.problems[0];
    auto b = (*p)->OpenLun("a").value();
    std::vector<uint8_t> v(512);
    for (int t = 0; t < kThreads; t++)
      for (int blk = 0; blk < kBlocksEach; blk++) {
        ASSERT_TRUE(b->Read(lba(t, blk), 1, v.data()).ok());
        // An overwrite in place still in flight may be torn (kTear tears
        // inside sectors); the last pass answered GOOD never is.
        if (answered[t][blk] < 2 && !Uniform(v)) continue;
        ASSERT_TRUE(Uniform(v)) << "thread " << t << " block " << blk << " torn";
        const int pass = v[0] == 0 ? 0 : v[0] - 16 * t;
        ASSERT_TRUE(v[0] == 0 || pass == 1 || pass == 2) << "thread " << t << " block " << blk << ": " << int{v[0]};
        // GOOD for pass p: p or a later pass (one in flight at the cut).
        ASSERT_GE(pass, answered[t][blk]) << "thread " << t << " block " << blk << " lost a write answered GOOD";
      }
  }
}

// Every kind of durable operation at once, from several threads (they share
// batches): each one that returned is on stable storage. The disk then dies
// and loses everything unsynced; the reopened pool must hold exactly what
// the threads' own models say.
TEST_P(Concurrency, EveryKindOfDurableOperationIsDurableWhenItReturns) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env, GetParam());
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(pool->CreateLun(n, 1 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  auto b = pool->OpenLun("b").value();
  auto c = pool->OpenLun("c").value();
  constexpr int kThreads = 4, kIters = 60;
  constexpr uint64_t kBpa = kAu / 512;  // blocks per AU
  // Per thread: the value each block of its AUs must hold (0 = zeros).
  std::vector<std::map<uint64_t, uint8_t>> want_a(kThreads), want_b(kThreads), want_c(kThreads);
  std::atomic<int> bad{0};
  std::atomic<bool> lun_exists{false};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      const uint64_t base = t * kBpa;  // thread t owns AU t of every LUN
      auto& wa = want_a[t];
      auto& wb = want_b[t];
      auto& wc = want_c[t];
      std::vector<uint8_t> blk(512), cmp(512);
      uint8_t caw_value = 0;
      for (int i = 0; i < kIters; i++) {
        uint8_t v = static_cast<uint8_t>(1 + (t * kIters + i) % 250);
        uint64_t lba = base + i % 8;
        switch (i % 6) {
          case 0:  // write (a record the first time, in place later)
            std::memset(blk.data(), v, 512);
            if (!a->Write(lba, 1, blk.data(), D::kDurable).ok()) bad++;
            wa[lba] = v;
            break;
          case 1:  // compare and write of a counter block
            std::memset(cmp.data(), caw_value, 512);
            std::memset(blk.data(), v, 512);
            if (!a->CompareAndWrite(base + 100, 1, cmp.data(), blk.data(), D::kDurable).ok()) bad++;
            caw_value = v;
            wa[base + 100] = v;
            break;
          case 2:  // zero one block (an in-place edge write)
            if (!a->ZeroRange(lba, 1, D::kDurable).ok()) bad++;
            wa[lba] = 0;
            break;
          case 3:  // clone the whole AU (metadata only) into b
            if (!pool->CloneRange(*a, base, *b, base, kBpa, D::kDurable).ok()) bad++;
            for (uint64_t k = base; k < base + kBpa; k++) wb[k] = wa.count(k) ? wa[k] : 0;
            break;
          case 4:  // map c's AU with a write ...
            std::memset(blk.data(), v, 512);
            if (!c->Write(lba, 1, blk.data(), D::kDurable).ok()) bad++;
            wc[lba] = v;
            break;
          case 5:  // ... and unmap it (or leave it mapped, every other time)
            if (i % 12 == 5) {
              if (!c->Unmap(base, kBpa, D::kDurable).ok()) bad++;
              wc.clear();
            }
            break;
        }
      }
    });
  th.emplace_back([&] {  // LUN-table changes in the same batches
    for (int i = 0; i < 20; i++) {
      if (i % 2 == 0) {
        if (!pool->CreateLun("x", 1 << 20, 512).ok()) bad++;
        lun_exists = true;
      } else {
        if (!pool->DeleteLun("x").ok()) bad++;
        lun_exists = false;
      }
    }
    if (!pool->CreateLun("y", 1 << 20, 512).ok()) bad++;
  });
  for (auto& t : th) t.join();
  ASSERT_EQ(bad.load(), 0);
  // The disk dies now: nothing more is written, the unsynced is lost.
  env.CrashAfter(0);
  a.reset();
  b.reset();
  c.reset();
  pool.reset();
  env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 7);
  auto p = Pool::Open(&env, "pool");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->GetLun("x").ok(), lun_exists.load());
  EXPECT_TRUE((*p)->GetLun("y").ok());
  std::vector<uint8_t> v(512);
  for (const char* n : {"a", "b", "c"}) {
    auto l = (*p)->OpenLun(n).value();
    auto& want = n[0] == 'a' ? want_a : n[0] == 'b' ? want_b : want_c;
    for (int t = 0; t < kThreads; t++)
      for (uint64_t k = t * kBpa; k < (t + 1) * kBpa; k++) {
        ASSERT_TRUE(l->Read(k, 1, v.data()).ok());
        uint8_t expect = want[t].count(k) ? want[t][k] : 0;
        ASSERT_TRUE(Uniform(v) && v[0] == expect)
            << "LUN " << n << " block " << k << ": " << int(v[0]) << ", want " << int(expect);
      }
  }
  CheckReport r = (*p)->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
}

// Holds every data write of at least `min` bytes at a closed gate.
class GateLargeWrites final : public Env {
 public:
  GateLargeWrites(Env* base, size_t min) : base_(base), min_(min) {}
  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override {
    auto f = base_->OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new Gated(this, std::move(f.value())));
  }
  bool Exists(const std::string& path) override { return base_->Exists(path); }

  cowstore::testing::Gate gate;

 private:
  class Gated final : public File {
   public:
    Gated(GateLargeWrites* env, std::unique_ptr<File> f) : env_(env), f_(std::move(f)) {}
    Status Read(uint64_t off, size_t n, void* buf) override { return f_->Read(off, n, buf); }
    Status Write(uint64_t off, size_t n, const void* buf) override {
      if (n >= env_->min_) env_->gate.Pass();
      return f_->Write(off, n, buf);
    }
    Status Sync() override { return f_->Sync(); }
    Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
    Status DropCache() override { return f_->DropCache(); }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
    bool CanTruncate() const override { return f_->CanTruncate(); }
    uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
    Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
    void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
    bool WritesAllocate() const override { return f_->WritesAllocate(); }
    bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

   private:
    GateLargeWrites* env_;
    std::unique_ptr<File> f_;
  };
  Env* base_;
  size_t min_;
};

// A small durable operation is never queued behind a large one's data I/O:
// while a 2 MiB durable write is stuck writing its data, a CAW, a 4 KiB
// durable write, a clone and a LUN creation on other LUNs all complete (their
// batches do not wait for it).
TEST_P(Concurrency, SmallDurableOpsDoNotWaitForALargeWritesData) {
  FaultInjectionEnv base;
  GateLargeWrites env(&base, 1 << 20);
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 128 * 1024;
  o.size_bytes = 192 * 1024 + 256 * kAu;
  o.soft_threshold_percent = 1;  // as MakePool
  GetParam().Apply(&o);
  auto p = Pool::Create(&env, "pool", o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto pool = std::move(p.value());
  ASSERT_TRUE(pool->CreateLun("big", 4 << 20, 512).ok());
  ASSERT_TRUE(pool->CreateLun("small", 1 << 20, 512).ok());
  auto big = pool->OpenLun("big").value();
  auto small = pool->OpenLun("small").value();
  std::vector<uint8_t> zero(512, 0), one(512, 1), four(4096, 4);
  ASSERT_TRUE(small->Write(0, 1, zero.data(), D::kDurable).ok());
  ASSERT_TRUE(small->Write(200, 1, zero.data(), D::kDurable).ok());  // a second AU mapped
  env.gate.Close();
  std::vector<uint8_t> large(2 << 20, 7);
  std::thread writer([&] { EXPECT_TRUE(big->Write(0, large.size() / 512, large.data(), D::kDurable).ok()); });
  ASSERT_TRUE(env.gate.WaitForWaiting(1));
  std::atomic<bool> done{false};
  std::thread small_ops([&] {
    EXPECT_TRUE(small->CompareAndWrite(0, 1, zero.data(), one.data(), D::kDurable).ok());
    EXPECT_TRUE(small->Write(8, 8, four.data(), D::kDurable).ok());
    EXPECT_TRUE(pool->CloneRange(*small, 0, *small, kAu / 512 * 4, kAu / 512, D::kDurable).ok());
    EXPECT_TRUE(pool->CreateLun("another", 1 << 20, 512).ok());
    done = true;
  });
  for (int i = 0; i < 3000 && !done; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(done.load()) << "small durable operations waited for a large write's data";
  env.gate.Open();
  small_ops.join();
  writer.join();
  std::vector<uint8_t> v(512);
  ASSERT_TRUE(small->Read(kAu / 512 * 4, 1, v.data()).ok());
  EXPECT_EQ(v, one);
}


// The superblock's seq (both formats' copies alternate slots): how many
// superblocks, one per checkpoint, the pool has written.
uint64_t SuperblockSeq(FaultInjectionEnv* env) {
  const std::vector<uint8_t> img = env->Snapshot("pool");
  if (SuperblockEnvelopeVersion(img.data(), kSuperblockSlot) == kFormatVersionV3) {
    SuperblockChoice c;
    EXPECT_TRUE(ChooseSuperblockV3(img.data(), img.data() + kSuperblockSlot, img.size(), &c).ok());
    return c.sb.seq;
  }
  uint64_t seq = 0;
  for (int slot = 0; slot < 2; slot++) {
    Superblock sb;
    if (Superblock::Decode(reinterpret_cast<const char*>(img.data()) + slot * kSuperblockSlot, kSuperblockSlot, &sb).ok())
      seq = std::max(seq, sb.seq);
  }
  return seq;
}

// Core's dirty hand-over under load (dirty_ranges.h), probabilistically
// (HandOver below is the deterministic test; format 2 keeps no marks, so at
// /F2 this checks durability only): checkpoints are
// taken while many threads write, unmap and clone, and at format 3 each
// writes only the leaves marked dirty since the one before. A change made
// while a checkpoint is being written is not in it: its mark must carry
// over to the next one, or that checkpoint keeps the stale leaf and the
// journal before it is gone. So that a lost mark shows, the threads' LUNs
// are many (one leaf or so each) and each is changed now and then, not all
// the time: the workers are paced by a thread that fills the 64 KiB
// journal with LUN creations and deletions (a checkpoint every ~1,000 of
// them). After a flush the disk dies (nothing unsynced survives), and the
// reopened pool (the last checkpoint plus the journal's replay) must equal
// every thread's model, block by block, and be check-clean. The 1 % soft
// threshold keeps format 3's journal from growing (nothing offered).
TEST_P(Concurrency, CheckpointsWhileManyThreadsWriteAndCloneLoseNothing) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.soft_threshold_percent = 1;
  o.size_bytes = 128 * 1024 + 320 * kAu;
  o.backing_check_interval_ms = kBackingSignalOff;
  GetParam().Apply(&o);
  std::unique_ptr<Pool> pool;
  {
    auto p = Pool::Create(&env, "pool", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
  }
  constexpr int kThreads = 6, kLunsPerThread = 8, kIters = 150, kChurn = 4000;
  constexpr uint64_t kLunAus = 2, kBpa = kAu / 512, kBlocks = kLunAus * kBpa;
  const uint64_t bpg = GetParam().Unit(kAu) / 512;  // blocks per grain
  // Thread t owns LUNs t, t + kThreads, ...; per LUN each block's fill byte.
  std::vector<std::shared_ptr<Lun>> luns;
  std::vector<std::vector<uint8_t>> want(kThreads * kLunsPerThread, std::vector<uint8_t>(kBlocks));
  for (int i = 0; i < kThreads * kLunsPerThread; i++) {
    const std::string n = "l" + std::to_string(i);
    ASSERT_TRUE(pool->CreateLun(n, kBlocks * 512, 512).ok());
    luns.push_back(pool->OpenLun(n).value());
  }
  const uint64_t seq0 = SuperblockSeq(&env);
  std::atomic<int> bad{0};
  std::mutex first_mu;
  std::string first;
  auto fail = [&](const Status& st, const std::string& what) {
    if (st.ok()) return;
    bad++;
    std::lock_guard<std::mutex> g(first_mu);
    if (first.empty()) first = what + ": " + st.ToString();
  };
  std::atomic<int> churned{0};
  std::thread churn([&] {
    for (int i = 0; i < kChurn; i++) {
      fail(pool->CreateLun("churn", kAu, 512).status(), "create");
      fail(pool->DeleteLun("churn"), "delete");
      churned.store(i + 1);
    }
  });
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; t++)
    th.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      std::vector<uint8_t> buf;
      for (int i = 0; i < kIters; i++) {
        while (churned.load() < static_cast<int>(int64_t{i} * kChurn / kIters)) std::this_thread::yield();
        const int li = t + kThreads * static_cast<int>(rng() % kLunsPerThread);
        const int lj = t + kThreads * static_cast<int>(rng() % kLunsPerThread);
        const uint64_t n = 1 + rng() % (kBpa + kBpa / 2);
        const uint64_t off = rng() % (kBlocks - n + 1);
        const D d = rng() % 4 ? D::kBuffered : D::kDurable;
        const uint8_t v = static_cast<uint8_t>(1 + (t * 31 + i) % 251);
        std::vector<uint8_t>& w = want[li];
        switch (rng() % 3) {
          case 0:  // a write (a record unless in place)
            buf.assign(n * 512, v);
            fail(luns[li]->Write(off, n, buf.data(), d), "write");
            std::fill(w.begin() + off, w.begin() + off + n, v);
            break;
          case 1: {  // an unmap: the whole grains in the range read as zeros
            fail(luns[li]->Unmap(off, n, d), "unmap");
            for (uint64_t k = (off + bpg - 1) / bpg * bpg; k < (off + n) / bpg * bpg; k++) w[k] = 0;
            break;
          }
          case 2: {  // a clone into another of its LUNs, same phase (shares) or not (copies)
            const uint64_t doff = rng() % 2 ? off : rng() % (kBlocks - n + 1);
            fail(pool->CloneRange(*luns[li], off, *luns[lj], doff, n, d), "clone");
            std::vector<uint8_t> src(w.begin() + off, w.begin() + off + n);  // li may be lj
            std::copy(src.begin(), src.end(), want[lj].begin() + doff);
            break;
          }
        }
      }
    });
  churn.join();
  for (auto& x : th) x.join();
  ASSERT_EQ(bad.load(), 0) << first;
  // At least 3 checkpoints (each writes a superblock) since the threads
  // began: how many the run itself took depends on group-commit batching, so
  // more churn (no workers now) makes up the count, bounded, and a later one
  // also drops the journal past marks lost in the run's last checkpoint.
  for (int i = 0; i < 20000 && SuperblockSeq(&env) < seq0 + 3; i += 100)
    for (int k = 0; k < 100; k++) {
      fail(pool->CreateLun("churn", kAu, 512).status(), "create");
      fail(pool->DeleteLun("churn"), "delete");
    }
  ASSERT_EQ(bad.load(), 0) << first;
  ASSERT_GE(SuperblockSeq(&env), seq0 + 3) << "seq " << seq0 << " -> " << SuperblockSeq(&env);
  ASSERT_TRUE(pool->Flush().ok());
  // The disk dies: nothing more is written, nothing unsynced survives.
  env.CrashAfter(0);
  luns.clear();
  pool.reset();
  env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 5);
  env.ClearFaults();
  auto p = Pool::Open(&env, "pool");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  CheckReport r = (*p)->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
  std::vector<uint8_t> got(kBlocks * 512);
  for (int i = 0; i < kThreads * kLunsPerThread; i++) {
    auto l = (*p)->OpenLun("l" + std::to_string(i)).value();
    ASSERT_TRUE(l->Read(0, kBlocks, got.data()).ok());
    for (uint64_t k = 0; k < kBlocks; k++) {
      const uint8_t* blk = got.data() + k * 512;
      ASSERT_TRUE(std::all_of(blk, blk + 512, [&](uint8_t x) { return x == want[i][k]; }))
          << "LUN l" << i << " block " << k << ": " << int(blk[0]) << ", want " << int(want[i][k]);
    }
  }
}

// Holds, once armed, the next superblock write (a write of one slot at
// 0 or kSuperblockSlot): a checkpoint's last write, made after Core took
// the dirty marks and before it installs the checkpoint (checkpoint.cc).
class GateSuperblockWrite final : public Env {
 public:
  explicit GateSuperblockWrite(Env* base) : base_(base) {}
  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override {
    auto f = base_->OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new Gated(this, std::move(f.value())));
  }
  bool Exists(const std::string& path) override { return base_->Exists(path); }

  cowstore::testing::Gate gate;
  std::atomic<bool> armed{false};

 private:
  class Gated final : public File {
   public:
    Gated(GateSuperblockWrite* env, std::unique_ptr<File> f) : env_(env), f_(std::move(f)) {}
    Status Read(uint64_t off, size_t n, void* buf) override { return f_->Read(off, n, buf); }
    Status Write(uint64_t off, size_t n, const void* buf) override {
      if (n == kSuperblockSlot && off < 2 * kSuperblockSlot && env_->armed.exchange(false)) env_->gate.Pass();
      return f_->Write(off, n, buf);
    }
    Status Sync() override { return f_->Sync(); }
    Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
    Status DropCache() override { return f_->DropCache(); }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
    bool CanTruncate() const override { return f_->CanTruncate(); }
    uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
    Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
    void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
    bool WritesAllocate() const override { return f_->WritesAllocate(); }
    bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

   private:
    GateSuperblockWrite* env_;
    std::unique_ptr<File> f_;
  };
  Env* base_;
};

// Core's dirty hand-over, deterministically (dirty_ranges.h): a LUN's map
// changed while a checkpoint is being written is not in that checkpoint,
// so its mark must carry over to the next one. The gate holds a
// checkpoint's superblock write (its leaves are written by then); while it
// is held, a buffered write maps a fresh AU of LUN "x". Then the gate opens,
// LUN changes elsewhere fill the journal until one more checkpoint is on
// disk (x left alone: that checkpoint drops x's record, so only x's carried
// mark makes it write x's leaf), the pool flushes and the disk dies. The
// reopened pool must read x's write. Format 3 only: format 2 keeps no marks
// (every checkpoint writes the whole map), so there is no hand-over to test.
class HandOver : public ::testing::TestWithParam<SuiteFormat> {};
INSTANTIATE_TEST_SUITE_P(Formats, HandOver, ::testing::Values(testing::kF3Au, testing::kF3G4k),
                         testing::FormatName());

TEST_P(HandOver, AMapChangedWhileACheckpointIsWrittenIsInTheNext) {
  FaultInjectionEnv base;
  GateSuperblockWrite env(&base);
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.soft_threshold_percent = 1;  // as MakePool: format 3's journal does not grow
  o.size_bytes = 128 * 1024 + 64 * kAu;
  o.backing_check_interval_ms = kBackingSignalOff;
  GetParam().Apply(&o);
  std::unique_ptr<Pool> pool;
  {
    auto p = Pool::Create(&env, "pool", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
  }
  constexpr uint64_t kBpa = kAu / 512;
  ASSERT_TRUE(pool->CreateLun("x", 4 * kAu, 512).ok());
  auto x = pool->OpenLun("x").value();
  std::vector<uint8_t> one(kAu, 1), two(kAu, 2);
  ASSERT_TRUE(x->Write(0, kBpa, one.data(), D::kDurable).ok());  // x's leaf exists before
  // Durable LUN creations and deletions: records only, x's map untouched.
  std::atomic<bool> stop{false};
  std::atomic<int> churn_failed{0};
  auto churn_once = [&] {
    if (!pool->CreateLun("churn", kAu, 512).ok()) churn_failed++;
    if (!pool->DeleteLun("churn").ok()) churn_failed++;
  };
  env.gate.Close();
  env.armed = true;
  std::thread churn([&] {
    for (int i = 0; i < 100000 && !stop; i++) churn_once();
  });
  const bool held = env.gate.WaitForWaiting(1);
  // x's AU 2 gets its first mapping while the checkpoint is held.
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    EXPECT_TRUE(x->Write(2 * kBpa, kBpa, two.data(), D::kBuffered).ok());
    wrote = true;
  });
  for (int i = 0; i < 3000 && !wrote && held; i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool wrote_while_held = wrote.load() && env.gate.waiting() == 1;
  stop = true;
  env.gate.Open();
  writer.join();
  churn.join();
  ASSERT_TRUE(held) << "no checkpoint reached its superblock write";
  ASSERT_TRUE(wrote_while_held) << "the buffered write waited for the held checkpoint";
  ASSERT_EQ(churn_failed.load(), 0);
  const uint64_t s1 = SuperblockSeq(&base);  // the held checkpoint is on disk now
  // One more checkpoint, x left alone (bounded: ~1,000 churns fill the journal).
  for (int i = 0; i < 20000 && SuperblockSeq(&base) < s1 + 1; i += 50)
    for (int k = 0; k < 50; k++) churn_once();
  ASSERT_EQ(churn_failed.load(), 0);
  ASSERT_GE(SuperblockSeq(&base), s1 + 1) << "no checkpoint after the held one";
  ASSERT_TRUE(pool->Flush().ok());
  base.CrashAfter(0);
  x.reset();
  pool.reset();
  base.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 5);
  base.ClearFaults();
  auto p = Pool::Open(&base, "pool");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto l = (*p)->OpenLun("x").value();
  std::vector<uint8_t> got(4 * kAu);
  ASSERT_TRUE(l->Read(0, 4 * kBpa, got.data()).ok());
  std::vector<uint8_t> want(4 * kAu, 0);
  std::fill(want.begin(), want.begin() + kAu, 1);
  std::fill(want.begin() + 2 * kAu, want.begin() + 3 * kAu, 2);
  for (uint64_t k = 0; k < 4 * kBpa; k++)
    ASSERT_EQ(got[k * 512], want[k * 512]) << "LUN x block " << k;
  EXPECT_EQ(got, want);
  CheckReport r = (*p)->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
}

}  // namespace
}  // namespace cowstore::store
