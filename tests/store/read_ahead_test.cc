// SPDX-License-Identifier: Apache-2.0
// Read-ahead by LBA (read_ahead.h): which reads are a stream, and which bytes
// each one asks for ahead of it; through Core, what the file is asked for.
#include "handler/store/read_ahead.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool_impl.h"
#include "tests/store/small_core.h"

namespace cowstore::store {
namespace {

constexpr uint64_t MiB = 1 << 20, KiB = 1 << 10;

TEST(ReadAhead, AStreamFetchesAheadFromItsThirdReadEachByteOnce) {
  ReadAhead ra;
  EXPECT_EQ(ra.Next(0, MiB).len, 0u);       // a new stream
  EXPECT_EQ(ra.Next(MiB, MiB).len, 0u);     // one hit: not yet a stream
  ReadAhead::Range r = ra.Next(2 * MiB, MiB);  // the third: the window after it
  EXPECT_EQ(r.off, 3 * MiB);
  EXPECT_EQ(r.len, kReadAheadBytes);
  uint64_t fetched_to = r.off + r.len;
  for (uint64_t at = 3 * MiB; at < 64 * MiB; at += MiB) {
    r = ra.Next(at, MiB);
    // Each read moves the window by what it read: the new part only.
    EXPECT_EQ(r.off, fetched_to);
    EXPECT_EQ(r.len, MiB);
    EXPECT_EQ(r.off + r.len, at + MiB + kReadAheadBytes);
    fetched_to = r.off + r.len;
  }
}

TEST(ReadAhead, SmallReadsFetchInSteps) {
  ReadAhead ra;
  std::vector<ReadAhead::Range> got;
  for (uint64_t at = 0; at < 16 * MiB; at += 4 * KiB) {
    ReadAhead::Range r = ra.Next(at, 4 * KiB);
    if (r.len) got.push_back(r);
  }
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].off, 12 * KiB);  // after the third read
  EXPECT_EQ(got[0].len, kReadAheadBytes);
  for (size_t i = 1; i < got.size(); i++) {
    EXPECT_EQ(got[i].off, got[i - 1].off + got[i - 1].len);  // contiguous, no byte twice
    EXPECT_GE(got[i].len, kReadAheadStepBytes);               // never less than a step
  }
  // 4,096 reads, one call to the map and the file per MiB or so, not per read.
  EXPECT_LE(got.size(), 16u + 1u);
}

TEST(ReadAhead, ReadsALittleOutOfOrderStayOneStream) {
  ReadAhead ra;
  // Issued in order at queue depth 4, arriving swapped in pairs.
  const uint64_t order[] = {1, 0, 3, 2, 5, 4, 7, 6, 9, 8};
  uint64_t fetched = 0;
  for (uint64_t i : order) fetched += ra.Next(i * 128 * KiB, 128 * KiB).len;
  EXPECT_GT(fetched, 0u);
  // Beyond the slack it is another stream: no fetch for it yet.
  EXPECT_EQ(ra.Next(10 * 128 * KiB + kReadAheadSlackBytes + 1, 128 * KiB).len, 0u);
}

TEST(ReadAhead, RandomReadsNeverFetch) {
  ReadAhead ra;
  // 1 MiB reads of a 64 MiB LUN in an order where no read starts where one
  // of the last eight ended.
  uint64_t fetched = 0;
  for (uint64_t i = 0, at = 0; i < 64; i++, at = (at + 37) % 64) fetched += ra.Next(at * MiB, MiB).len;
  EXPECT_EQ(fetched, 0u);
  // 4 KiB reads at random places of a 1 TiB LUN.
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    fetched += ra.Next((x % (1ull << 28)) * 4 * KiB, 4 * KiB).len;
  }
  EXPECT_EQ(fetched, 0u);
}

TEST(ReadAhead, InterleavedStreamsEachKeepTheirOwn) {
  ReadAhead ra;
  // kReadAheadStreams readers, far apart, taking turns.
  std::vector<uint64_t> next(kReadAheadStreams), fetched(kReadAheadStreams);
  for (size_t s = 0; s < next.size(); s++) next[s] = s * (1ull << 30);
  for (int round = 0; round < 20; round++)
    for (size_t s = 0; s < next.size(); s++) {
      ReadAhead::Range r = ra.Next(next[s], MiB);
      if (r.len) {
        EXPECT_GE(r.off, next[s] + MiB);
        EXPECT_LE(r.off + r.len, next[s] + MiB + kReadAheadBytes);
      }
      fetched[s] += r.len;
      next[s] += MiB;
    }
  // Each fetched its window once and then a MiB per read.
  for (size_t s = 0; s < next.size(); s++) EXPECT_EQ(fetched[s], kReadAheadBytes + 17 * MiB) << s;
  // One more stream than slots: the least recent gives way, and the others
  // keep going.
  EXPECT_EQ(ra.Next(99ull << 30, MiB).len, 0u);
  EXPECT_EQ(ra.Next(next[1], MiB).len, MiB);  // stream 1 was not the least recent
  EXPECT_EQ(ra.Next(next[0], MiB).len, 0u);   // stream 0 was: it starts again
}

TEST(ReadAhead, ConcurrentReadersOfOneStreamFetchEachByteOnce) {
  ReadAhead ra;
  std::vector<std::vector<ReadAhead::Range>> got(2);
  std::vector<std::thread> ts;
  // Two threads take turns through one sequential stream (a reader's
  // commands served by two workers): every range fetched is new.
  std::atomic<uint64_t> next{0};
  for (int t = 0; t < 2; t++)
    ts.emplace_back([&, t] {
      for (;;) {
        const uint64_t at = next.fetch_add(64 * KiB);
        if (at >= 256 * MiB) return;
        ReadAhead::Range r = ra.Next(at, 64 * KiB);
        if (r.len) got[t].push_back(r);
      }
    });
  for (auto& t : ts) t.join();
  std::vector<ReadAhead::Range> all = got[0];
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.off < b.off; });
  ASSERT_FALSE(all.empty());
  for (size_t i = 1; i < all.size(); i++) EXPECT_GE(all[i].off, all[i - 1].off + all[i - 1].len);
}


// Through Core: a 16 MiB clone with one grain of each 64 KiB its own (each
// region's 16 in a chunk of their own, past the source's data), read.
class CoreReadAhead : public ::testing::Test {
 protected:
  static constexpr uint32_t kGrain = 4 << 10;  // small_core.h's MakeGrainCore
  static constexpr uint64_t kRegions = 16, kGrains = kRegions * 256;

  void SetUp() override {
    core_ = testing::MakeGrainCore(&env_, 64 << 20);
    ASSERT_NE(core_, nullptr);
    ASSERT_TRUE(core_->CreateLun("a", kGrains * kGrain, 4096).ok());
    std::vector<uint8_t> base(kGrains * kGrain);
    for (size_t i = 0; i < base.size(); i++) base[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
    auto a = core_->Acquire("a");
    ASSERT_TRUE(a.ok());
    iovec all{base.data(), base.size()};
    ASSERT_TRUE(core_->Write(a->get(), 0, kGrains, {&all, 1}, Durability::kBuffered).ok());
    core_->ReleaseHandle(a->get());
    ASSERT_TRUE(core_->CloneLun("a", "b").ok());
    auto b = core_->Acquire("b");
    ASSERT_TRUE(b.ok());
    b_ = b->get();
    // The clone's own grains: every byte of one is 0x40 + its region, which
    // no grain of the source is (its bytes all differ).
    for (uint64_t g = 5; g < kGrains; g += 16) {
      std::vector<uint8_t> d(kGrain, static_cast<uint8_t>(0x40 + g / 256));
      iovec v{d.data(), d.size()};
      ASSERT_TRUE(core_->Write(b_, g, 1, {&v, 1}, Durability::kBuffered).ok());
    }
    ASSERT_TRUE(core_->Flush().ok());
    env_.TakePrefetches();
  }
  void TearDown() override {
    if (b_) core_->ReleaseHandle(b_);
  }
  void ReadRegion(uint64_t r) {
    std::vector<uint8_t> buf(256 * kGrain);
    iovec v{buf.data(), buf.size()};
    ASSERT_TRUE(core_->Read(b_, r * 256, 256, {&v, 1}).ok());
  }

  FaultInjectionEnv env_;
  std::shared_ptr<Core> core_;
  LunState* b_ = nullptr;
};

TEST_F(CoreReadAhead, ASequentialReaderIsSentTheClonesOwnGrainsAheadAndNothingElse) {
  std::vector<std::pair<uint64_t, uint64_t>> asked;
  for (uint64_t r = 0; r < kRegions; r++) {
    ReadRegion(r);
    auto p = env_.TakePrefetches();
    if (r < 2) {
      EXPECT_TRUE(p.empty()) << r;  // not a stream yet
    } else if ((r + 1) * MiB + kReadAheadBytes <= kRegions * MiB) {
      EXPECT_FALSE(p.empty()) << r;  // the window's new MiB (later: past the LUN's end)
    }
    asked.insert(asked.end(), p.begin(), p.end());
  }
  // Which grains of the file were asked for: by what they hold.
  const std::vector<uint8_t> file = env_.Snapshot("pool");
  std::vector<int> seen(kRegions, 0);
  for (const auto& [off, n] : asked) {
    EXPECT_LT(n, kReadAheadSpanMax);
    ASSERT_EQ(off % kGrain, 0u);
    ASSERT_EQ(n % kGrain, 0u);
    for (uint64_t at = off; at < off + n; at += kGrain) {
      const uint8_t v = file[at];
      const bool own = std::all_of(file.begin() + at, file.begin() + at + kGrain, [v](uint8_t c) { return c == v; });
      ASSERT_TRUE(own && v >= 0x40 && v < 0x40 + kRegions) << "asked for a grain not the clone's own at " << at;
      seen[v - 0x40]++;
    }
  }
  // Regions 3 on (the third read's window and later), each grain once.
  for (uint64_t r = 0; r < kRegions; r++) EXPECT_EQ(seen[r], r < 3 ? 0 : 16) << "region " << r;
}

TEST_F(CoreReadAhead, ARandomReaderIsSentNothing) {
  for (uint64_t i = 0, r = 0; i < kRegions; i++, r = (r + 5) % kRegions) ReadRegion(r);
  EXPECT_TRUE(env_.TakePrefetches().empty());
}

}  // namespace
}  // namespace cowstore::store
