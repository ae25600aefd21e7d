// SPDX-License-Identifier: Apache-2.0
// Concurrency tests (ctest label `concurrency`, run under TSan): parallel
// I/O to disjoint ranges, compare-and-write racing plain writes, clones racing
// writes, LUN-table changes racing I/O.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "tests/common/gate.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 * 1024;
using D = Durability;

std::unique_ptr<Pool> MakePool(FaultInjectionEnv* env, uint64_t units = 256) {
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 128 * 1024;
  o.size_bytes = 192 * 1024 + units * kAu;
  auto p = Pool::Create(env, "pool", o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p.value());
}

bool Uniform(const std::vector<uint8_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](uint8_t x) { return x == v[0]; });
}

TEST(Concurrency, DisjointWritersAndReaders) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env);
  ASSERT_TRUE(pool->CreateLun("a", 4 << 20, 512).ok());
  auto a = pool->OpenLun("a").value();
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; t++) {
    th.emplace_back([&, t] {
      std::vector<uint8_t> buf(8192), out(8192);
      for (int i = 0; i < 200; i++) {
        uint64_t lba = t * 2048 + (i * 16) % 2048;
        std::memset(buf.data(), t * 50 + i % 50, buf.size());
        if (!a->Write(lba, 16, buf.data(), i % 3 ? D::kBuffered : D::kDurable).ok()) bad++;
        if (!a->Read(lba, 16, out.data()).ok() || out != buf) bad++;
      }
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(pool->Check().clean);
}

// Each CAW increments a counter block; lost updates would mean CAW was not
// atomic against the other CAWs. Plain writers hammer the neighbouring blocks
// of the same AU with uniform blocks; a reader must never see a torn block.
TEST(Concurrency, CompareAndWriteRacingWrites) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env);
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
TEST(Concurrency, ClonesRacingWrites) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env);
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

TEST(Concurrency, LunTableChangesRacingIo) {
  FaultInjectionEnv env;
  // Room for the worst case, so that any failure is a bug: each of the 30
  // clones kept may pin its own copy of all 16 AUs of "a" (the writer
  // copies-on-write whatever a clone shares), plus "a" itself. With 256
  // AUs a slow clone loop (ASan on a loaded machine) ran out of space.
  auto pool = MakePool(&env, 30 * 16 + 16 + 64);
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

// Durable writers share commits (group commit) and all survive a reopen.
TEST(Concurrency, DurableWritersShareCommits) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env);
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

// Every kind of durable operation at once, from several threads (they share
// batches): each one that returned is on stable storage. The disk then dies
// and loses everything unsynced; the reopened pool must hold exactly what
// the threads' own models say.
TEST(Concurrency, EveryKindOfDurableOperationIsDurableWhenItReturns) {
  FaultInjectionEnv env;
  auto pool = MakePool(&env);
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
    Status DropCache() override { return f_->DropCache(); }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
    bool IsBlockDevice() const override { return f_->IsBlockDevice(); }

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
TEST(Concurrency, SmallDurableOpsDoNotWaitForALargeWritesData) {
  FaultInjectionEnv base;
  GateLargeWrites env(&base, 1 << 20);
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 128 * 1024;
  o.size_bytes = 192 * 1024 + 256 * kAu;
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

}  // namespace
}  // namespace cowstore::store
