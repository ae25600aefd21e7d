// SPDX-License-Identifier: Apache-2.0
// Many initiators' EXTENDED COPYs at once with colliding list IDs, on
// tcmu-runner-like worker threads (run under TSan by the `concurrency`
// label): CopyListTable hammered directly, then whole commands through
// LogicalUnit::Execute in every LIST ID USAGE, each initiator checking its
// data and what COPY STATUS may answer it.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/sense.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

using State = CopyRecord::State;

// Every copy's progress is encoded as id * 1000 + step, so a record whose
// bytes belong to another copy's entry is caught.
TEST(CopyListTableConcurrencyTest, EntriesNeverMixAndAnswersAreConsistent) {
  CopyListTable t;
  constexpr int kThreads = 8;
  constexpr int kIterations = 1500;
  std::mutex mu;
  std::map<CopyId, std::pair<uint64_t, State>> finals;  // guarded by mu
  std::atomic<int> violations{0};

  auto check = [&](uint8_t list_id, const std::optional<CopyRecord>& r) {
    if (!r) return;
    if (r->list_id != list_id) violations++;
    if (r->bytes_transferred != 0 && r->bytes_transferred / 1000 != r->id) violations++;
    if (r->state != State::kInProgress) {
      std::lock_guard<std::mutex> lock(mu);
      auto it = finals.find(r->id);
      if (it == finals.end() || it->second.first != r->bytes_transferred ||
          it->second.second != r->state) {
        violations++;
      }
    }
  };

  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kIterations; ++i) {
        const auto list_id = static_cast<uint8_t>((th + i) % 4);
        auto id = t.Begin(list_id);
        if (!id) {
          violations++;
          continue;
        }
        const int steps = 1 + i % 3;
        for (int s = 1; s <= steps; ++s) {
          t.Progress(*id, static_cast<uint16_t>(s), *id * 1000 + s);
          check(list_id, t.Status(list_id));
        }
        const bool ok = (i % 5) != 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          finals[*id] = {*id * 1000 + steps, ok ? State::kCompleted : State::kFailed};
        }
        t.Finish(*id, ok ? Good() : CheckCondition(SenseKey::kCopyAborted, asc::kNoAdditionalSense));
        check(list_id, t.Status(list_id));
        if (i % 7 == 0) check(list_id, t.Take(list_id));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_LE(t.size(), 4u);  // nothing runs: at most one finished entry per list ID
  for (uint8_t l = 0; l < 4; ++l) {
    auto r = t.Status(l);
    if (r) {
      EXPECT_NE(r->state, State::kInProgress);
    }
  }
}

class XcopyInitiatorsTest : public ScsiTest {
 protected:
  XcopyInitiatorsTest() { pool_bytes_ = 96ull << 20; }  // every initiator's copies at once
  static constexpr int kInitiators = 4;
  static constexpr uint64_t kRegion = 8192;  // blocks each initiator owns on a and b
  static constexpr uint64_t kSourceBlocks = 4096;

  void SetUp() override {
    ScsiTest::SetUp();
    lus_[0] = AddLu(*pool_, "a", 16ull << 20, Config("aaaa4444-0000-0000-0000-000000000001", "g"));
    lus_[1] = AddLu(*pool_, "b", 16ull << 20, Config("bbbb4444-0000-0000-0000-000000000002", "g"));
    ASSERT_TRUE(lus_[0] && lus_[1]);
    for (int t = 0; t < kInitiators; ++t) {
      for (int l = 0; l < 2; ++l) {
        ASSERT_TRUE(IsGood(Write(*lus_[l], t * kRegion, Pattern(kSourceBlocks * kBlock,
                                                                 static_cast<uint8_t>(t * 2 + l)))));
      }
    }
  }
  void TearDown() override {
    lus_[0].reset();
    lus_[1].reset();
    ScsiTest::TearDown();
  }

  std::shared_ptr<LogicalUnit> lus_[2];
};

// Each initiator owns LBAs [t * kRegion, (t + 1) * kRegion) of both LUs;
// list IDs 40 and 41 collide across initiators in every usage; commands go
// to either LU. COPY STATUS after an initiator's own GOOD may be "in
// progress" (another held copy with the ID runs on that LU) or "completed"
// with the byte count of some 00b copy with that ID sent to that LU; never
// "failed" (no copy fails here) and never another LU's or list ID's copy.
TEST_F(XcopyInitiatorsTest, CollidingListIdsInEveryUsage) {
  constexpr int kCopies = 40;
  std::mutex mu;
  std::set<std::tuple<int, uint8_t, uint64_t>> planned_held;  // (lu, list id, bytes)
  std::atomic<int> refused{0}, bad_data{0}, bad_status{0}, in_progress_answers{0};

  auto initiator = [&](int t) {
    for (int i = 0; i < kCopies; ++i) {
      const uint8_t usage = std::array<uint8_t, 3>{0, 2, 3}[(t + i) % 3];
      const uint8_t list_id = usage == 3 ? 0 : static_cast<uint8_t>(40 + (i % 2));
      const int src = (t + i) % 2, dst = (t + i / 2) % 2, to = (i / 3) % 2;
      const int segs = 1 + (t + i) % 3;
      // 100 KiB to 0.5 MiB per segment, off the allocation units: data copies
      // long enough for copies of several initiators to overlap.
      const uint16_t blocks = static_cast<uint16_t>(200 + 250 * t + 7 * (i % 5));
      XcopyList l;
      l.list_id = list_id;
      l.list_id_usage = usage;
      l.cscds = {IdentCscd(lus_[src]->naa()), IdentCscd(lus_[dst]->naa())};
      const uint64_t base = t * kRegion;
      for (int s = 0; s < segs; ++s) {
        l.segments.push_back(BlockSegment(0, 1, blocks, base + 1 + s * blocks,
                                          base + kSourceBlocks + s * blocks));
      }
      const uint64_t bytes = uint64_t{blocks} * segs * kBlock;
      if (usage == 0) {
        std::lock_guard<std::mutex> lock(mu);
        planned_held.insert({to, list_id, bytes});
      }
      Bytes p = l.Build();
      CommandResult r = Exec(*lus_[to], ExtendedCopy(static_cast<uint32_t>(p.size())), p);
      if (!r.good()) {
        refused++;
        continue;
      }
      if (Read(*lus_[dst], base + kSourceBlocks, static_cast<uint32_t>(blocks * segs)) !=
          Read(*lus_[src], base + 1, static_cast<uint32_t>(blocks * segs))) {
        bad_data++;
      }
      if (usage != 0) continue;
      Bytes d;
      CommandResult s = ExecIn(*lus_[to], ReceiveCopyResults(0x00, list_id, 64), 64, &d);
      if (!s.good()) {
        bad_status++;  // our own held copy just finished: something must answer
        continue;
      }
      const uint8_t status = d[4] & 0x7F;
      const uint64_t got = uint64_t{Be32(&d[8])} << (10 * d[7]);
      if (status == 0x00) {
        in_progress_answers++;
      } else if (status != 0x01) {
        bad_status++;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        if (!planned_held.count({to, list_id, got})) bad_status++;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kInitiators; ++t) threads.emplace_back(initiator, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0);
  EXPECT_EQ(bad_data.load(), 0);
  EXPECT_EQ(bad_status.load(), 0);
  // Quiet now: every held list ID answers with a finished copy.
  std::set<std::pair<int, uint8_t>> held;
  for (const auto& [lu, id, bytes] : planned_held) held.insert({lu, id});
  EXPECT_EQ(held.size(), 4u);  // the plan holds every list ID on both LUs
  for (const auto& [lu, id] : held) {
    Bytes d;
    CommandResult s = ExecIn(*lus_[lu], ReceiveCopyResults(0x00, id, 64), 64, &d);
    ASSERT_TRUE(IsGood(s)) << lu << " " << int(id);
    EXPECT_EQ(d[4] & 0x7F, 0x01);
    EXPECT_TRUE(planned_held.count({lu, id, uint64_t{Be32(&d[8])} << (10 * d[7])}));
  }
  std::printf("COPY STATUS answered 'in progress' %d times (another held copy with the ID ran)\n",
              in_progress_answers.load());
}

}  // namespace
}  // namespace cowstore::scsi::testing
