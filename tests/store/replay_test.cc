// SPDX-License-Identifier: Apache-2.0
// The journal's recovery rule in isolation (handler/store/replay.h): a torn
// tail is dropped quietly, damage to records later ones vouch for is not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "handler/store/replay.h"

namespace cowstore::store {
namespace {

Record Map(uint32_t lun, uint64_t lba) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  r.runs.push_back({lba, lba + 100, 1});
  return r;
}

// Records lsn0.. framed as a sequential writer does: each one after the
// previous commit's sync (proven = lsn - 1), unless `batch` groups them.
std::vector<uint8_t> Journal(uint64_t lsn0, int n, size_t bytes, int batch = 1,
                             std::vector<size_t>* offsets = nullptr) {
  std::string s;
  for (int i = 0; i < n; i++) {
    if (offsets) offsets->push_back(s.size());
    uint64_t lsn = lsn0 + i;
    uint64_t proven = lsn0 + (i / batch) * batch - 1;  // last LSN of the previous batch
    FrameRecord(Map(1, i), lsn, proven, &s);
  }
  std::vector<uint8_t> j(bytes, 0);
  std::copy(s.begin(), s.end(), j.begin());
  return j;
}

TEST(Replay, IntactJournalReplaysEverything) {
  auto j = Journal(1000, 10, 4096);
  JournalReplay r = ScanJournal(j.data(), j.size(), 1000);
  EXPECT_EQ(r.records.size(), 10u);
  EXPECT_EQ(r.next_lsn, 1010u);
  EXPECT_FALSE(r.damaged);
  EXPECT_FALSE(r.newer_generation);
}

TEST(Replay, DamageBeforeVouchingRecordsIsReported) {
  std::vector<size_t> offs;
  for (size_t bit = 0; bit < 8 * 57; bit += 7) {
    auto j = Journal(1000, 10, 4096, 1, &offs);
    j[offs[3] + bit / 8] ^= uint8_t(1u << (bit % 8));
    JournalReplay r = ScanJournal(j.data(), j.size(), 1000);
    EXPECT_EQ(r.records.size(), 3u) << bit;
    EXPECT_TRUE(r.damaged) << bit;
    EXPECT_EQ(r.end, offs[3]);
    ASSERT_EQ(r.lost.size(), 7u) << bit;  // the damaged one and the six after it
    EXPECT_NE(r.lost[0].find("damaged"), std::string::npos);
    EXPECT_NE(r.Explain().find("1003"), std::string::npos) << r.Explain();
    offs.clear();
  }
}

TEST(Replay, TornLastBatchIsNotDamage) {
  // Records 6..9 went out in one commit that never synced; any of their bytes
  // may be missing (zeros), later ones surviving earlier ones.
  std::vector<size_t> offs;
  auto base = Journal(1000, 10, 4096, 1, &offs);
  std::vector<uint8_t> j = base;
  std::string s;
  for (int i = 6; i < 10; i++) FrameRecord(Map(1, i), 1000 + i, 1005, &s);
  std::copy(s.begin(), s.end(), j.begin() + offs[6]);
  for (size_t cut = offs[6]; cut < offs[6] + s.size(); cut += 13) {
    std::vector<uint8_t> t = j;
    std::fill(t.begin() + cut, t.begin() + cut + 40, 0);  // a lost piece
    JournalReplay r = ScanJournal(t.data(), t.size(), 1000);
    EXPECT_FALSE(r.damaged) << cut;
    EXPECT_FALSE(r.newer_generation) << cut;
    EXPECT_GE(r.records.size(), 6u);
  }
}

TEST(Replay, StaleOlderGenerationIsIgnored) {
  auto old = Journal(500, 40, 4096);
  auto cur = Journal(1000, 3, 200);
  std::copy(cur.begin(), cur.begin() + 150, old.begin());  // new records over old ones
  JournalReplay r = ScanJournal(old.data(), old.size(), 1000);
  EXPECT_FALSE(r.damaged);
  EXPECT_FALSE(r.newer_generation);
}

TEST(Replay, NewerGenerationIsReported) {
  auto j = Journal(1000 + (1ull << 32), 5, 4096);
  JournalReplay r = ScanJournal(j.data(), j.size(), 1000);
  EXPECT_TRUE(r.newer_generation);
  EXPECT_EQ(r.records.size(), 0u);
  EXPECT_EQ(r.lost.size(), 5u);
}

TEST(Replay, RecordsCannotVouchForThemselves) {
  std::string s;
  FrameRecord(Map(1, 0), 1000, 1000, &s);  // proven must be below the record's own LSN
  std::vector<uint8_t> j(s.begin(), s.end());
  j.resize(1024);
  Record r;
  EXPECT_EQ(ParseRecord(j.data(), j.size(), 1000, &r), 0u);
}

}  // namespace
}  // namespace cowstore::store
