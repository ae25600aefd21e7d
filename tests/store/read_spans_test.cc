// SPDX-License-Identifier: Apache-2.0
// Read-around (read_spans.h): which pieces of one read share a request, and
// (through Core, grain 4 KiB) that a diverged clone's region reads with few
// requests, the right bytes, and still reads when such a request fails.
#include "handler/store/read_spans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool_impl.h"
#include "tests/store/small_core.h"

namespace cowstore::store {
namespace {

constexpr uint64_t KiB = 1024;

// `got` as one buffer, or cut into buffers of 12.5 KiB (a caller's
// scattered iovecs, not aligned to grains).
std::vector<iovec> Buffers(std::vector<uint8_t>* got, bool scattered) {
  std::vector<iovec> iov;
  if (!scattered) return {{got->data(), got->size()}};
  for (size_t at = 0; at < got->size(); at += 12 * KiB + 512)
    iov.push_back({got->data() + at, std::min<size_t>(12 * KiB + 512, got->size() - at)});
  return iov;
}

TEST(ReadSpans, ADivergedRegionIsTwoRequests) {
  // A 1 MiB region: the source's grains in place at 1 MiB with a grain
  // missing every 64 KiB (the clone's own, packed at 9 MiB).
  std::vector<ReadPiece> pieces;
  uint64_t at = 0, own = 0;
  for (uint64_t g = 0; g < 256; g++, at += 4 * KiB) {
    if (g % 16 == 5)
      pieces.push_back({9 * 1024 * KiB + own++ * 4 * KiB, at, 4 * KiB});
    else if (!pieces.empty() && pieces.back().at + pieces.back().n == at && pieces.back().file_off < 9 * 1024 * KiB)
      pieces.back().n += 4 * KiB;
    else
      pieces.push_back({1024 * KiB + at, at, 4 * KiB});
  }
  ASSERT_EQ(pieces.size(), 33u);
  const std::vector<ReadSpan> spans = PlanReadSpans(&pieces);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].file_off, 1024 * KiB);
  EXPECT_EQ(spans[0].len, 1024 * KiB);
  EXPECT_EQ(spans[0].last - spans[0].first, 17u);
  EXPECT_EQ(spans[1].file_off, 9 * 1024 * KiB);
  EXPECT_EQ(spans[1].len, 16 * 4 * KiB);
  // Sorted by file offset, each span's pieces inside it.
  for (const ReadSpan& s : spans)
    for (size_t i = s.first; i < s.last; i++) {
      EXPECT_GE(pieces[i].file_off, s.file_off);
      EXPECT_LE(pieces[i].file_off + pieces[i].n, s.file_off + s.len);
    }
}

TEST(ReadSpans, FarGapsSplitSharedGrainsJoinAndASpanStaysBounded) {
  std::vector<ReadPiece> pieces = {
      {0, 0, 4 * KiB},
      {4 * KiB + kReadAroundGapBytes, 4 * KiB, 4 * KiB},      // exactly the gap: joins
      {8 * KiB + 2 * kReadAroundGapBytes + 1, 8 * KiB, 4 * KiB},  // one byte more: a new request
      {8 * KiB + 2 * kReadAroundGapBytes + 1, 12 * KiB, 4 * KiB},  // the same grain for another LBA
  };
  std::vector<ReadSpan> spans = PlanReadSpans(&pieces);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].len, 8 * KiB + kReadAroundGapBytes);
  EXPECT_EQ(spans[1].last - spans[1].first, 2u);
  EXPECT_EQ(spans[1].len, 4 * KiB);
  // Adjacent pieces past kReadAroundMaxBytes start a new request.
  pieces.clear();
  for (uint64_t i = 0; i < 3 * kReadAroundMaxBytes / (64 * KiB); i++)
    pieces.push_back({i * 64 * KiB, i * 64 * KiB, 64 * KiB});
  spans = PlanReadSpans(&pieces);
  ASSERT_EQ(spans.size(), 3u);
  for (const ReadSpan& s : spans) EXPECT_EQ(s.len, kReadAroundMaxBytes);
  EXPECT_TRUE(PlanReadSpans(&(pieces = {})).empty());
}

// Through Core: a clone with one grain of each 64 KiB rewritten reads its
// 1 MiB with a handful of requests, the right bytes, contiguous and
// scattered buffers alike; a failed request is retried piece by piece.
TEST(ReadSpans, ACloneReadsWithFewRequestsAndSurvivesAFailedOne) {
  constexpr uint32_t kGrain = 4 << 10;
  constexpr uint64_t kGrains = 256;
  FaultInjectionEnv env;
  std::shared_ptr<Core> core = testing::MakeGrainCore(&env, 32 << 20);
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(core->CreateLun("a", kGrains * kGrain, 4096).ok());
  std::vector<uint8_t> want(kGrains * kGrain);
  for (size_t i = 0; i < want.size(); i++) want[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  auto write = [&](const std::string& lun, uint64_t lba, uint64_t n, const uint8_t* d) {
    auto h = core->Acquire(lun);
    ASSERT_TRUE(h.ok());
    iovec v{const_cast<uint8_t*>(d), n * kGrain};
    ASSERT_TRUE(core->Write(h->get(), lba, n, {&v, 1}, Durability::kBuffered).ok());
    core->ReleaseHandle(h->get());
  };
  write("a", 0, kGrains, want.data());
  ASSERT_TRUE(core->CloneLun("a", "b").ok());
  for (uint64_t g = 5; g < kGrains; g += 16) {
    std::vector<uint8_t> d(kGrain, static_cast<uint8_t>(g));
    write("b", g, 1, d.data());
    std::copy(d.begin(), d.end(), want.begin() + g * kGrain);
  }
  ASSERT_TRUE(core->Flush().ok());
  auto h = core->Acquire("b");
  ASSERT_TRUE(h.ok());
  for (int failing = 0; failing < 2; failing++)
    for (int scattered = 0; scattered < 2; scattered++) {
      SCOPED_TRACE(std::string(failing ? "first request fails" : "no fault") + (scattered ? ", scattered" : ""));
      std::vector<uint8_t> got(want.size(), 0xee);
      const std::vector<iovec> iov = Buffers(&got, scattered);
      if (failing) env.FailAt(FaultInjectionEnv::Op::kRead, 0, Code::kIOError);
      const uint64_t reads_before = env.calls(FaultInjectionEnv::Op::kRead);
      ASSERT_TRUE(core->Read(h->get(), 0, kGrains, iov).ok());
      const uint64_t reads = env.calls(FaultInjectionEnv::Op::kRead) - reads_before;
      EXPECT_EQ(got, want);
      // The source's grains in one request, the clone's 16 in one more (its
      // region's chunk); a failed request is retried piece by piece (its 16
      // or 17 pieces), the other read whole.
      if (failing)
        EXPECT_GE(reads, 1u + 16u);
      else
        EXPECT_LE(reads, 2u);
      env.ClearFaults();
    }
  core->ReleaseHandle(h->get());
}


TEST(ReadSpans, TheLongestRequestInPlaceIsPickedAndOnlyOne) {
  // The source's data in place (three pieces, gaps between them), a chunk
  // of the clone's own grains, and a shorter run in place elsewhere.
  std::vector<ReadPiece> pieces = {
      {1024 * KiB, 0, 8 * KiB},
      {1024 * KiB + 12 * KiB, 12 * KiB, 20 * KiB},
      {1024 * KiB + 36 * KiB, 36 * KiB, 28 * KiB},
      {9 * 1024 * KiB, 8 * KiB, 4 * KiB},               // the clone's own
      {9 * 1024 * KiB + 4 * KiB, 32 * KiB, 4 * KiB},    // next to it, for a later LBA
      {20 * 1024 * KiB, 64 * KiB, 4 * KiB},             // in place with the next one
      {20 * 1024 * KiB + 8 * KiB, 72 * KiB, 4 * KiB},
  };
  std::vector<ReadSpan> spans = PlanReadSpans(&pieces);
  ASSERT_EQ(spans.size(), 3u);
  size_t k = InPlaceSpan(spans, pieces);
  ASSERT_LT(k, spans.size());
  EXPECT_EQ(spans[k].file_off, 1024 * KiB);
  EXPECT_EQ(spans[k].len, 64 * KiB);
  // The chunk's pieces are not where their LBAs would put them.
  std::vector<ReadPiece> chunk = {{9 * 1024 * KiB, 8 * KiB, 4 * KiB}, {9 * 1024 * KiB + 4 * KiB, 32 * KiB, 4 * KiB}};
  spans = PlanReadSpans(&chunk);
  EXPECT_EQ(InPlaceSpan(spans, chunk), spans.size());
  // Two LBAs of one grain (file offsets equal): not in place.
  std::vector<ReadPiece> twice = {{0, 0, 4 * KiB}, {0, 4 * KiB, 4 * KiB}};
  spans = PlanReadSpans(&twice);
  EXPECT_EQ(InPlaceSpan(spans, twice), spans.size());
  // A request of one piece is read straight anyway: not picked.
  std::vector<ReadPiece> one = {{0, 0, 64 * KiB}};
  spans = PlanReadSpans(&one);
  EXPECT_EQ(InPlaceSpan(spans, one), spans.size());
}

// Through Core: a clone's region whose source data is read in place, with
// its own grains far away and holes (unmapped grains) inside the in-place
// request: the holes read as zeros, though that request's gaps put the
// source's bytes there first; and so when that request fails.
TEST(ReadSpans, HolesInsideTheInPlaceRequestReadAsZeros) {
  constexpr uint32_t kGrain = 4 << 10;
  constexpr uint64_t kGrains = 1024;  // 4 MiB: the clone's chunk lands past it
  FaultInjectionEnv env;
  std::shared_ptr<Core> core = testing::MakeGrainCore(&env, 32 << 20);
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(core->CreateLun("a", kGrains * kGrain, 4096).ok());
  std::vector<uint8_t> want(kGrains * kGrain);
  for (size_t i = 0; i < want.size(); i++) want[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  auto h = core->Acquire("a");
  ASSERT_TRUE(h.ok());
  iovec all{want.data(), want.size()};
  ASSERT_TRUE(core->Write(h->get(), 0, kGrains, {&all, 1}, Durability::kBuffered).ok());
  core->ReleaseHandle(h->get());
  ASSERT_TRUE(core->CloneLun("a", "b").ok());
  h = core->Acquire("b");
  ASSERT_TRUE(h.ok());
  for (uint64_t g = 5; g < 256; g += 16) {
    std::vector<uint8_t> d(kGrain, static_cast<uint8_t>(g));
    iovec v{d.data(), d.size()};
    ASSERT_TRUE(core->Write(h->get(), g, 1, {&v, 1}, Durability::kBuffered).ok());
    std::copy(d.begin(), d.end(), want.begin() + g * kGrain);
  }
  for (const auto& [g, n] : {std::pair<uint64_t, uint64_t>{8, 2}, {100, 1}, {250, 3}}) {
    ASSERT_TRUE(core->ZeroRange(h->get(), g, n, Durability::kBuffered, true).ok());
    std::fill(want.begin() + g * kGrain, want.begin() + (g + n) * kGrain, 0);
  }
  ASSERT_TRUE(core->Flush().ok());
  const uint64_t region = 256 * kGrain;
  for (int failing = 0; failing < 2; failing++)
    for (int scattered = 0; scattered < 2; scattered++) {
      SCOPED_TRACE(std::string(failing ? "first request fails" : "no fault") + (scattered ? ", scattered" : ""));
      std::vector<uint8_t> got(region, 0xee);
      const std::vector<iovec> iov = Buffers(&got, scattered);
      if (failing) env.FailAt(FaultInjectionEnv::Op::kRead, 0, Code::kIOError);
      const uint64_t reads_before = env.calls(FaultInjectionEnv::Op::kRead);
      ASSERT_TRUE(core->Read(h->get(), 0, 256, iov).ok());
      const uint64_t reads = env.calls(FaultInjectionEnv::Op::kRead) - reads_before;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin()));
      // In place and the chunk: two requests (one buffer), or the in-place
      // one retried piece by piece.
      if (!scattered) {
        if (failing)
          EXPECT_GT(reads, 2u + 16u);
        else
          EXPECT_EQ(reads, 2u);
      }
      env.ClearFaults();
    }
  core->ReleaseHandle(h->get());
}

}  // namespace
}  // namespace cowstore::store
