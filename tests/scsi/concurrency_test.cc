// SPDX-License-Identifier: Apache-2.0
// Concurrency: VMFS-style ATS heartbeats racing plain writes, COMPARE AND
// WRITE atomic against WRITE on the same block, disjoint ranges in
// parallel, and a cross-pool EXTENDED COPY that does not stall other
// commands. Labelled `concurrency` (run under TSan too).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "handler/scsi/cdb.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

constexpr uint64_t kAuBlocks = (1u << 20) / 512;

class ConcurrencyTest : public ScsiTest {
 protected:
  ConcurrencyTest() { pool_bytes_ = 96ull << 20; }  // the cross-pool copy fills 48 MiB
  // Thread-safe variants (the fixture's helpers only use locals).
  CommandResult Caw(uint64_t lba, const Bytes& cmp, const Bytes& neu) {
    Bytes d = cmp;
    d.insert(d.end(), neu.begin(), neu.end());
    return Exec(CompareAndWrite(lba, 1), d);
  }
  Bytes Block(uint64_t lba) {
    Bytes out;
    CommandResult r = ExecIn(Read16(lba, 1), kBlock, &out);
    EXPECT_TRUE(IsGood(r));
    return out;
  }
  static Bytes Counter(uint64_t owner, uint64_t value) {
    Bytes b(kBlock, 0);
    PutBe64(&b[0], owner);
    PutBe64(&b[8], value);
    return b;
  }
};

// Each host bumps its own heartbeat slot with ATS and takes a shared lock
// block with ATS to increment a counter; plain writes hit the same AU.
TEST_F(ConcurrencyTest, AtsHeartbeatsWithRacingPlainWrites) {
  constexpr int kHosts = 4;
  constexpr int kRounds = 150;
  const uint64_t lock_lba = 0;
  const uint64_t hb_base = 8;      // heartbeat slots, one block each
  const uint64_t plain_base = 64;  // plain writes in the same AU
  for (int h = 0; h < kHosts; ++h) ASSERT_TRUE(IsGood(Write(hb_base + h, Counter(h, 0))));
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int h = 0; h < kHosts; ++h) {
    threads.emplace_back([&, h] {
      uint64_t beat = 0;
      for (int i = 0; i < kRounds; ++i) {
        // Heartbeat: only this host writes its slot, so every ATS must succeed.
        if (!Caw(hb_base + h, Counter(h, beat), Counter(h, beat + 1)).good()) ++failures;
        ++beat;
        // Lock-protected counter: optimistic ATS, retried on miscompare.
        for (;;) {
          Bytes cur = Block(lock_lba);
          const uint64_t v = Be64(&cur[8]);
          CommandResult r = Caw(lock_lba, cur, Counter(h, v + 1));
          if (r.good()) break;
          if (r.sense_key() != SenseKey::kMiscompare) {
            ++failures;
            break;
          }
        }
      }
    });
  }
  threads.emplace_back([&] {
    uint8_t v = 1;
    while (!stop.load()) {
      Bytes d(8 * kBlock, v++);
      if (!Exec(Write16(plain_base, 8), d).good()) ++failures;
    }
  });
  for (int h = 0; h < kHosts; ++h) threads[h].join();
  stop = true;
  threads.back().join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Be64(&Block(lock_lba)[8]), uint64_t{kHosts} * kRounds);
  for (int h = 0; h < kHosts; ++h) EXPECT_EQ(Block(hb_base + h), Counter(h, kRounds));
}

// A block that is only ever written whole with a uniform byte must never be
// seen torn, whether COMPARE AND WRITE or WRITE put it there.
TEST_F(ConcurrencyTest, CompareAndWriteIsAtomicAgainstPlainWrites) {
  const uint64_t lba = 77;
  ASSERT_TRUE(IsGood(Write(lba, Bytes(kBlock, 0))));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, caw_ok{0};
  // The writer goes on until the racing COMPARE AND WRITEs have also won a
  // few times (on a loaded machine 400 writes alone can starve every CAW
  // into miscompares), bounded so a CAW that never succeeds fails the test.
  std::thread writer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (int i = 0; i < 400 || (caw_ok.load() < 20 && std::chrono::steady_clock::now() < deadline);
         ++i) {
      (void)Write(lba, Bytes(kBlock, static_cast<uint8_t>(i % 7 + 1)));
    }
  });
  std::thread cawer([&] {
    while (!stop.load()) {
      Bytes cur = Block(lba);
      Bytes next(kBlock, static_cast<uint8_t>(cur[0] + 100));
      CommandResult r = Caw(lba, cur, next);
      if (r.good()) ++caw_ok;
    }
  });
  std::thread reader([&] {
    while (!stop.load()) {
      Bytes b = Block(lba);
      for (uint8_t x : b) {
        if (x != b[0]) {
          ++torn;
          break;
        }
      }
    }
  });
  writer.join();
  stop = true;
  cawer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(caw_ok.load(), 0);
}

TEST_F(ConcurrencyTest, DisjointRangesInParallel) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const uint64_t lba = (t * 8 + i % 8) * kAuBlocks / 4;
        Bytes d = Pattern(16 * kBlock, static_cast<uint8_t>(t * 40 + i));
        if (!Exec(Write16(lba, 16), d).good()) ++bad;
        Bytes out;
        if (!ExecIn(Read16(lba, 16), d.size(), &out).good() || out != d) ++bad;
        if (i % 10 == 0) {
          Bytes inq;
          if (!ExecIn(Inquiry(true, 0xB0, 64), 64, &inq).good()) ++bad;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(ConcurrencyTest, ModeSelectAndUnitAttentionsRaceWithIo) {
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    for (int i = 0; i < 200; ++i) {
      lu_->set_write_cache_enabled(i % 2 == 0);
      lu_->RaiseUnitAttention(UnitAttention::kModeParametersChanged);
      lu_->PollSoftThreshold();
    }
    lu_->set_write_cache_enabled(false);
    stop = true;
  });
  std::thread io([&] {
    while (!stop.load()) {
      CommandResult r = Write(3, Bytes(kBlock, 1));
      if (!r.good()) {
        EXPECT_EQ(r.sense_key(), SenseKey::kUnitAttention);
      }
    }
  });
  toggler.join();
  io.join();
}

// A long cross-pool copy is chunked and lock-free at this layer: commands
// to both LUNs complete while it runs.
TEST_F(ConcurrencyTest, CrossPoolCopyDoesNotStallOtherCommands) {
  store::PoolOptions opts;
  opts.size_bytes = 96ull << 20;
  auto other = store::Pool::Create(&env_, "/pool1", opts);
  ASSERT_TRUE(other.ok());
  {
    auto a = AddLu(*pool_, "a", 60ull << 20, Config("aaaa3333-0000-0000-0000-000000000001", "g"));
    auto b = AddLu(*other.value(), "b", 60ull << 20, Config("bbbb3333-0000-0000-0000-000000000002", "g"));
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(IsGood(Write(*a, i * 8 * kAuBlocks, Pattern(8 * kAuBlocks * kBlock, static_cast<uint8_t>(i)))));
    }
    XcopyList l;
    l.cscds = {IdentCscd(a->naa()), IdentCscd(b->naa())};
    for (int i = 0; i < 12; ++i) {
      l.segments.push_back(BlockSegment(0, 1, static_cast<uint16_t>(4 * kAuBlocks), i * 4 * kAuBlocks,
                                        i * 4 * kAuBlocks));
    }
    Bytes p = l.Build();
    std::atomic<bool> copying{true};
    std::atomic<int> done_during{0};
    std::thread copier([&] {
      EXPECT_TRUE(IsGood(Exec(*a, ExtendedCopy(static_cast<uint32_t>(p.size())), p)));
      copying = false;
    });
    while (copying.load()) {
      Bytes out;
      ExecIn(*b, Read16(100 * kAuBlocks / 2, 1), kBlock, &out);
      Write(*a, 59 * kAuBlocks, Bytes(kBlock, 5));
      if (copying.load()) ++done_during;
    }
    copier.join();
    EXPECT_GT(done_during.load(), 0);
    EXPECT_EQ(Read(*b, 40 * kAuBlocks, 64), Read(*a, 40 * kAuBlocks, 64));
    extra_.clear();
  }
  lu_.reset();
  ASSERT_TRUE(other.value()->Close().ok());
}

}  // namespace
}  // namespace cowstore::scsi::testing
