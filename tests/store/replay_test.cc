// SPDX-License-Identifier: Apache-2.0
// The journal's recovery rule in isolation (handler/store/replay.h): a torn
// tail is dropped quietly, damage to records later ones vouch for is not.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "handler/store/replay.h"
#include "handler/store/superblock_v3.h"  // kFormatVersionV3
#include "tests/store/journal_bytes.h"
#include "tests/store/patch_bytes.h"

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

// The in-memory scan, which fails only as the scan's rules do (never by a
// read): a failure is the test's.
JournalReplay Scan(const std::vector<uint8_t>& j, uint64_t start) {
  Result<JournalReplay> r = ScanJournal(j.data(), j.size(), start);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : JournalReplay{};
}

TEST(Replay, IntactJournalReplaysEverything) {
  auto j = Journal(1000, 10, 4096);
  JournalReplay r = Scan(j, 1000);
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
    JournalReplay r = Scan(j, 1000);
    EXPECT_EQ(r.records.size(), 3u) << bit;
    EXPECT_TRUE(r.damaged) << bit;
    EXPECT_EQ(r.end, offs[3]);
    ASSERT_EQ(r.lost.size(), 7u) << bit;  // the damaged one and the six after it
    EXPECT_NE(r.lost[0].find("damaged"), std::string::npos);
    EXPECT_NE(r.Explain().find("1003"), std::string::npos) << r.Explain();
    offs.clear();
  }
}

// A damaged ring of many small records: the lines naming what a repair
// gives up stop at kMaxLostLines (one more counts the rest), the count does
// not, so the daemon's memory does not grow with the ring.
TEST(Replay, TheLostListIsCappedAndCountsEveryOperation) {
  const int n = 3000;
  std::vector<size_t> offs;
  auto j = Journal(1000, n, 64 * n + 4096, 1, &offs);
  j[offs[10] + 20] ^= 1;
  JournalReplay r = Scan(j, 1000);
  ASSERT_TRUE(r.damaged);
  EXPECT_EQ(r.lost_operations, uint64_t{n - 10});  // the damaged one and every one after it
  ASSERT_EQ(r.lost.size(), 1 + JournalReplay::kMaxLostLines + 1);
  EXPECT_NE(r.lost[1].find("LSN 1011"), std::string::npos) << r.lost[1];
  EXPECT_NE(r.lost.back().find("and " + std::to_string(n - 11 - JournalReplay::kMaxLostLines) + " more"),
            std::string::npos)
      << r.lost.back();
  EXPECT_NE(r.Explain().find("the " + std::to_string(n - 11) + " operation(s) after it"), std::string::npos)
      << r.Explain();
}

// The first 33 bytes of a kMap record that passes every check but its CRC:
// later than the LSN Journal(1000, 5, ...)'s replay expects (1005), vouching
// for it, 512 KiB long (within kMap's bound), its run count matching that
// length, so each try decodes 512 KiB of runs (any bytes are runs) and sums
// their CRC. Laid every 33 bytes, each one's runs hold the next ones.
std::string FailingHeader() {
  constexpr uint32_t kRuns = 21845;  // 8 + 24 * 21845 = 512 KiB
  std::string h(kRecordHeader + 8, '\0');
  Put32(&h, 4, 8 + 24 * kRuns);
  Put64(&h, 8, 1006);
  Put64(&h, 16, 1000);
  h[24] = static_cast<char>(RecType::kMap);
  Put32(&h, 25, 1);      // LUN
  Put32(&h, 29, kRuns);  // run count
  return h;
}

// Bytes with a plausible record header every few bytes (crafted, or damage
// no power cut leaves) after the stop: each failed try at a record costs up
// to its declared length, so the scan for later records would be quadratic.
// It stops when the bytes tried pass the budget and reports damage it cannot
// judge, so the open is refused and a repair is a person's decision.
TEST(Replay, HeadersEveryFewBytesStopTheScanAsUnjudgedDamage) {
  const size_t bytes = 1 << 20;
  std::vector<size_t> offs;
  auto j = Journal(1000, 5, bytes, 1, &offs);
  const size_t start = offs[4] + 80;  // past the fifth record
  for (size_t at = start; at + 33 <= bytes; at += 33) {
    const std::string h = FailingHeader();
    std::copy(h.begin(), h.end(), j.begin() + at);
  }
  JournalReplay r = Scan(j, 1000);
  EXPECT_EQ(r.records.size(), 5u);
  ASSERT_TRUE(r.damaged);
  EXPECT_TRUE(r.unjudged);
  EXPECT_GT(r.failed_record_bytes, JournalReplay::LaterScanBudget(bytes));
  EXPECT_LE(r.failed_record_bytes, JournalReplay::LaterScanBudget(bytes) + kMaxRecordBytes);
  ASSERT_FALSE(r.lost.empty());
  EXPECT_NE(r.lost.back().find("more damaged record headers"), std::string::npos) << r.lost.back();
  EXPECT_NE(r.Explain().find("cannot be judged"), std::string::npos) << r.Explain();
}

// The same bytes, fewer of them: a torn batch and a few stray headers stay
// well inside the budget and are a torn tail, as before.
TEST(Replay, AFewFailedHeadersAreATornTail) {
  const size_t bytes = 1 << 20;
  std::vector<size_t> offs;
  auto j = Journal(1000, 5, bytes, 1, &offs);
  for (size_t k = 0; k < 4; k++) {
    const std::string h = FailingHeader();
    std::copy(h.begin(), h.end(), j.begin() + offs[4] + 80 + 33 * k);
  }
  JournalReplay r = Scan(j, 1000);
  EXPECT_EQ(r.records.size(), 5u);
  EXPECT_FALSE(r.damaged);
  EXPECT_FALSE(r.unjudged);
  EXPECT_GT(r.failed_record_bytes, 0u);
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
    JournalReplay r = Scan(t, 1000);
    EXPECT_FALSE(r.damaged) << cut;
    EXPECT_FALSE(r.newer_generation) << cut;
    EXPECT_GE(r.records.size(), 6u);
  }
}

TEST(Replay, StaleOlderGenerationIsIgnored) {
  auto old = Journal(500, 40, 4096);
  auto cur = Journal(1000, 3, 200);
  std::copy(cur.begin(), cur.begin() + 150, old.begin());  // new records over old ones
  JournalReplay r = Scan(old, 1000);
  EXPECT_FALSE(r.damaged);
  EXPECT_FALSE(r.newer_generation);
}

TEST(Replay, NewerGenerationIsReported) {
  auto j = Journal(1000 + (1ull << 32), 5, 4096);
  JournalReplay r = Scan(j, 1000);
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

// ------------------------------------------------- record bounds (meta.h)

// A record whose payload is its type's longest parses; one byte more does
// not, CRC-valid or not: so kMaxRecordBytes from an offset decide its verdict.
TEST(RecordBounds, EachTypesLongestRecordParsesAndOneByteMoreDoesNot) {
  auto parses = [](const std::string& s) {
    std::vector<uint8_t> j(s.begin(), s.end());
    j.resize(j.size() + 64);
    Record r;
    return ParseRecord(j.data(), j.size(), 7, &r) == s.size();
  };
  // Grows the payload of framed record `s` by `extra` bytes of `fill`
  // (plen and CRC resealed, as a writer with a bug would leave them).
  auto grown = [](std::string s, size_t extra) {
    s.append(extra, '\0');
    Put32(&s, 4, static_cast<uint32_t>(s.size() - kRecordHeader));
    ResealCrc(&s, 0);
    return s;
  };
  size_t longest = 0;
  for (uint8_t t = 1; t <= kLastRecType; t++) {
    Record r;
    r.type = static_cast<RecType>(t);
    r.name.assign(kMaxNameLength, 'n');
    if (r.type == RecType::kMap) r.runs.assign(kMaxMapRuns, store::Run{1, 2, 3});
    if (r.type == RecType::kMapChecked) {
      r.runs.assign(kMaxCheckedRuns, store::Run{1, 2, 3});
      r.crcs.assign(kMaxCheckedRuns, 0x12345678);
    }
    std::string s;
    FrameRecord(r, 7, 6, &s);
    const size_t attr_room = r.type == RecType::kSnapshotLun ? kMaxLunAttrBytes : 0;
    EXPECT_EQ(s.size() - kRecordHeader + attr_room, MaxPayloadBytes(r.type)) << int(t);
    longest = std::max(longest, s.size() + attr_room);
    if (r.type == RecType::kSnapshotLun) {
      // The attribute list at its bound: one attribute a later build may
      // add (unknown here: it parses, ApplyRecord refuses it by name).
      s.resize(s.size() - 4);
      std::string attrs;
      Encoder e(&attrs);
      e.U32(kMaxLunAttrBytes);
      e.U32(99);
      e.U32(kMaxLunAttrBytes - 8);
      attrs.append(kMaxLunAttrBytes - 8, '\0');
      s = grown(s + attrs, 0);
      ASSERT_EQ(s.size(), kRecordHeader + MaxPayloadBytes(r.type));
      EXPECT_TRUE(parses(s));
      Put32(&s, s.size() - kMaxLunAttrBytes - 4, kMaxLunAttrBytes + 1);
      EXPECT_FALSE(parses(grown(s, 1))) << "attribute list past its bound";
      continue;
    }
    EXPECT_TRUE(parses(s)) << int(t);
    // A kMap one run longer keeps its shape (count matches the bytes).
    if (r.type == RecType::kMap) {
      Put32(&s, kRecordHeader + 4, kMaxMapRuns + 1);
      EXPECT_FALSE(parses(grown(s, 24))) << "one run past kMaxMapRuns";
    } else if (r.type == RecType::kMapChecked) {
      Put32(&s, kRecordHeader + 4, kMaxCheckedRuns + 1);
      EXPECT_FALSE(parses(grown(s, 24 + 4))) << "one run past kMaxCheckedRuns";
    } else {
      EXPECT_FALSE(parses(grown(s, 1))) << int(t);
    }
  }
  EXPECT_EQ(longest, kMaxRecordBytes);
}

// ------------------------------------------------ replay through a window

Record BigMap(uint32_t lun, uint64_t lba, uint32_t runs) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  for (uint32_t k = 0; k < runs; k++) r.runs.push_back({lba + 2 * k, 1000 + lba + 2 * k, 1});
  return r;
}

// Frames records from `lsn` on into *s, one commit each (proven = lsn - 1),
// until *s holds at least `bytes`; returns the record offsets.
std::vector<size_t> FillRecords(std::string* s, uint64_t* lsn, size_t bytes, std::mt19937_64* rng) {
  std::vector<size_t> offs;
  while (s->size() < bytes) {
    offs.push_back(s->size());
    const uint32_t runs = (*rng)() % 8 == 0 ? 1 + (*rng)() % 20000 : 1 + (*rng)() % 6;  // some 480 KB
    FrameRecord(BigMap(1, (*rng)() % 100000, runs), *lsn, *lsn - 1, s);
    ++*lsn;
  }
  return offs;
}

std::vector<uint8_t> Bytes(const std::string& s, size_t n) {
  std::vector<uint8_t> j(s.begin(), s.end());
  j.resize(std::max(n, j.size()));
  return j;
}

TEST(ReplayWindow, RefusesWhatItCannotReadInPieces) {
  CountingSource src(std::vector<uint8_t>(4096));
  EXPECT_EQ(ScanJournal(&src, 1, 1).status().code(), Code::kInvalidArgument);  // v1: unbounded records
  EXPECT_EQ(ScanJournal(&src, 1, kFormatVersion, kMaxRecordBytes - 1).status().code(),
            Code::kInvalidArgument);
  EXPECT_TRUE(src.reads.empty());
}

// Records cut by the end of a read replay, as they do from memory.
TEST(ReplayWindow, RecordsStraddlingReadsReplay) {
  std::mt19937_64 rng(7);
  std::string s;
  uint64_t lsn = 1000;
  const std::vector<size_t> offs = FillRecords(&s, &lsn, 4 * kMaxRecordBytes, &rng);
  const std::vector<uint8_t> j = Bytes(s, s.size() + 4096);
  CountingSource src(j);
  const JournalReplay got = ScanWindowed(&src, 1000);
  EXPECT_EQ(got.records.size(), offs.size());
  EXPECT_EQ(ReplayVerdict(got), ReplayVerdict(Scan(j, 1000)));
  // Some read ended inside a record (not at its start): it was read in two.
  const std::set<size_t> starts(offs.begin(), offs.end());
  int cut = 0;
  for (const auto& [off, n] : src.reads) cut += off + n < s.size() && !starts.count(off + n);
  EXPECT_GE(cut, 2);
}

// The record that vouches for the damaged one lies windows later: found.
TEST(ReplayWindow, DamageVouchedForFromALaterWindowIsReported) {
  std::mt19937_64 rng(8);
  std::string s;
  uint64_t lsn = 1000;
  const std::vector<size_t> offs = FillRecords(&s, &lsn, 100000, &rng);
  s[offs[3] + kRecordHeader + 2] ^= 0x10;  // media damage in record 1003
  const size_t far = s.size() + 3 * kMaxRecordBytes + 12345;
  std::string later;
  FrameRecord(BigMap(2, 0, 1), lsn, lsn - 1, &later);  // vouches for everything before it
  std::vector<uint8_t> j = Bytes(s, far + later.size() + 100);
  std::copy(later.begin(), later.end(), j.begin() + far);
  CountingSource src(j);
  const JournalReplay got = ScanWindowed(&src, 1000);
  EXPECT_TRUE(got.damaged);
  EXPECT_EQ(got.records.size(), 3u);
  ASSERT_EQ(got.lost.size(), offs.size() - 3 + 1);  // the damaged one, the rest after it, the far one
  EXPECT_NE(got.lost.back().find("LSN " + std::to_string(lsn)), std::string::npos);
  EXPECT_EQ(ReplayVerdict(got), ReplayVerdict(Scan(j, 1000)));
  EXPECT_GT(src.reads.size(), 3u);
  // Without the far record the records right after the damaged one vouch
  // for it (one commit each): damaged all the same.
  std::vector<uint8_t> near = Bytes(s, far + later.size() + 100);
  CountingSource src2(near);
  EXPECT_TRUE(ScanWindowed(&src2, 1000).damaged);
}

// The record where replay stops belongs to a newer generation, and a read
// ends inside it: still the newer-generation verdict.
TEST(ReplayWindow, NewerGenerationAcrossAReadIsReported) {
  std::mt19937_64 rng(9);
  const size_t window = kMaxRecordBytes;
  std::string s;
  uint64_t lsn = 1000;
  while (s.size() < window - 3000) FrameRecord(BigMap(1, lsn, 1 + lsn % 5), lsn, lsn - 1, &s), lsn++;
  const size_t at = s.size();
  FrameRecord(BigMap(1, 0, 200), lsn + (1ull << 32), lsn + (1ull << 32) - 1, &s);  // 4.8 KB
  ASSERT_LT(at, window);
  ASSERT_GT(s.size(), window);
  const std::vector<uint8_t> j = Bytes(s, 3 * window);
  CountingSource src(j);
  const JournalReplay got = ScanWindowed(&src, 1000, window);
  EXPECT_TRUE(got.newer_generation);
  EXPECT_FALSE(got.damaged);
  EXPECT_EQ(got.end, at);
  EXPECT_EQ(ReplayVerdict(got), ReplayVerdict(Scan(j, 1000)));
  bool split = false;
  for (const auto& [off, n] : src.reads) split |= off + n > at && off + n < s.size();
  EXPECT_TRUE(split);
}

// Many journals, intact and damaged every way replay tells apart: the
// windowed scan's verdict is the in-memory scan's, record for record.
TEST(ReplayWindow, WindowedScanEqualsInMemoryScan) {
  std::set<std::string> kinds;
  for (uint64_t seed = 0; seed < 40; seed++) {
    std::mt19937_64 rng(seed);
    const uint64_t start = 1000 + rng() % 100000;
    const size_t size = kMaxRecordBytes + rng() % (3 * kMaxRecordBytes);
    // Stale bytes under it: an older generation's records all through.
    std::string old;
    uint64_t old_lsn = start - 500;
    FillRecords(&old, &old_lsn, size, &rng);
    old_lsn = std::max<uint64_t>(2, start - 900000);
    std::string cur;
    uint64_t lsn = start;
    // Batches: records of a batch vouch for the batch before.
    std::vector<size_t> offs;
    while (cur.size() < size * 3 / 4) {
      const uint64_t proven = lsn - 1;
      for (int k = 1 + rng() % 4; k > 0; k--) {
        offs.push_back(cur.size());
        const uint32_t runs = rng() % 10 == 0 ? 1 + rng() % 30000 : 1 + rng() % 6;
        FrameRecord(BigMap(1 + rng() % 3, rng() % 100000, runs), lsn++, proven, &cur);
      }
    }
    std::vector<uint8_t> j = Bytes(old, size);
    j.resize(size);
    std::copy(cur.begin(), cur.begin() + std::min(cur.size(), j.size()), j.begin());
    const size_t victim = offs[rng() % offs.size()];
    switch (rng() % 6) {
      case 0: break;  // intact
      case 1: j[victim + rng() % kRecordHeader] ^= 1 << (rng() % 8); break;  // header flip
      case 2: j[std::min(j.size() - 1, victim + kRecordHeader + rng() % 5000)] ^= 0x40; break;
      case 3: std::fill(j.begin() + victim, j.begin() + std::min(j.size(), victim + rng() % 300000), 0); break;
      case 4: {  // a newer generation's record over one of ours
        std::string nr;
        FrameRecord(BigMap(1, 0, 1 + rng() % 3000), lsn + (1ull << 32), lsn + (1ull << 32) - 1, &nr);
        std::copy(nr.begin(), nr.begin() + std::min(nr.size(), j.size() - victim), j.begin() + victim);
        break;
      }
      case 5: j.resize(cur.size() > 100 ? cur.size() - rng() % 100 : cur.size()); break;  // cut short
    }
    const JournalReplay want = Scan(j, start);
    CountingSource src(j);
    const size_t window = kMaxRecordBytes + rng() % kMaxRecordBytes;
    const JournalReplay got = ScanWindowed(&src, start, window);
    EXPECT_EQ(ReplayVerdict(got), ReplayVerdict(want)) << "seed " << seed;
    EXPECT_LE(src.largest_read, window);
    kinds.insert(want.damaged ? "damaged" : want.newer_generation ? "newer" : "clean");
  }
  EXPECT_EQ(kinds.size(), 3u);  // every verdict was compared
}

// A 1 GiB journal (live records, then a cleared ring, then one record at
// its very end vouching for a damaged one): replay holds at most
// kJournalWindowBytes (4 MiB) of it, and reads each byte about once (a
// slide keeps what it already holds).
class GeneratedSource : public JournalSource {
 public:
  GeneratedSource(std::string head, std::string tail, uint64_t size)
      : head_(std::move(head)), tail_(std::move(tail)), size_(size) {}
  uint64_t size() const override { return size_; }
  Status Read(uint64_t off, size_t n, uint8_t* buf) override {
    std::memset(buf, 0, n);
    auto copy = [&](const std::string& part, uint64_t at) {
      const uint64_t b = std::max(off, at), e = std::min(off + n, at + part.size());
      if (b < e) std::memcpy(buf + (b - off), part.data() + (b - at), e - b);
    };
    copy(head_, 0);
    copy(tail_, size_ - tail_.size());
    largest_read = std::max(largest_read, n);
    read_bytes += n;
    return Status::Ok();
  }
  size_t largest_read = 0;
  uint64_t read_bytes = 0;

 private:
  std::string head_, tail_;
  uint64_t size_;
};

TEST(ReplayWindow, AGibibyteRingIsReplayedInAFewMebibytes) {
  std::mt19937_64 rng(10);
  std::string head;
  uint64_t lsn = 1000;
  const std::vector<size_t> offs = FillRecords(&head, &lsn, 6 << 20, &rng);
  head[offs[offs.size() / 2] + 30] ^= 1;  // damaged; the records after it vouch
  std::string tail;
  FrameRecord(BigMap(3, 0, 1), lsn, lsn - 1, &tail);
  GeneratedSource src(head, tail, kMaxJournalBytes);
  Result<JournalReplay> r = ScanJournal(&src, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->records.size(), offs.size() / 2);
  EXPECT_TRUE(r->damaged);
  EXPECT_NE(r->lost.back().find("LSN " + std::to_string(lsn)), std::string::npos);  // the ring's last bytes
  // Peak memory: the window (4 MiB), never more than 8 MiB for 1 GiB.
  EXPECT_EQ(src.largest_read, kJournalWindowBytes);
  EXPECT_LE(kJournalWindowBytes, size_t{8} << 20);
  // Each byte read about once: slides reread only what they keep.
  EXPECT_LT(src.read_bytes, kMaxJournalBytes + 64 * kJournalWindowBytes);
  std::printf("1 GiB ring: largest read %zu bytes, %llu bytes read\n", src.largest_read,
              static_cast<unsigned long long>(src.read_bytes));
}

// Replay hands records to a sink as it reads them and keeps none, so a ring
// of many small records costs the window, not memory per record; the sink
// sees exactly what would have been kept, in order, and its failure ends the
// scan with that failure.
TEST(ReplayWindow, ASinkSeesEveryRecordInOrderAndNoneIsKept) {
  std::vector<size_t> offs;
  const int n = 3000;
  auto j = Journal(1000, n, 64 * n + 4096, 1, &offs);
  j[offs[n - 100] + 20] ^= 1;  // damaged: 99 later records vouch for it
  MemoryJournalSource kept_src(j.data(), j.size()), sunk_src(j.data(), j.size());
  Result<JournalReplay> kept = ScanJournal(&kept_src, 1000);
  std::vector<Record> seen;
  Result<JournalReplay> sunk = ScanJournal(&sunk_src, 1000, kFormatVersion, kJournalWindowBytes,
                                           [&](Record&& r) {
                                             seen.push_back(std::move(r));
                                             return Status::Ok();
                                           });
  ASSERT_TRUE(kept.ok() && sunk.ok());
  EXPECT_TRUE(sunk->records.empty());
  EXPECT_EQ(sunk->replayed, uint64_t{n - 100});
  EXPECT_EQ(kept->replayed, uint64_t{n - 100});
  ASSERT_EQ(seen.size(), kept->records.size());
  for (size_t i = 0; i < seen.size(); i++) {
    ASSERT_EQ(seen[i].runs.size(), 1u);
    EXPECT_EQ(seen[i].runs[0].lba, kept->records[i].runs[0].lba) << i;
  }
  JournalReplay sunk_with_records = *sunk;
  sunk_with_records.records = seen;
  EXPECT_EQ(ReplayVerdict(sunk_with_records), ReplayVerdict(*kept));

  int calls = 0;
  MemoryJournalSource failing_src(j.data(), j.size());
  Result<JournalReplay> failed = ScanJournal(&failing_src, 1000, kFormatVersion, kJournalWindowBytes,
                                             [&](Record&&) {
                                               return ++calls == 7 ? Status(Code::kCorruption, "bad seventh")
                                                                   : Status::Ok();
                                             });
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "bad seventh");
  EXPECT_EQ(calls, 7);
}

// The in-memory scan fails as the scan does, returned, not thrown: a
// data-checked map in a format 2 journal (no format 2 pool holds one), and
// one to check at format 3 without a data check.
TEST(Replay, TheInMemoryScanReturnsTheScansFailure) {
  Record checked = Map(1, 0);
  checked.type = RecType::kMapChecked;
  checked.crcs.push_back(0);
  std::string s;
  FrameRecord(Map(1, 0), 1000, 999, &s);
  const size_t first = s.size();
  FrameRecord(checked, 1001, 999, &s);
  std::vector<uint8_t> j(s.begin(), s.end());
  j.resize(4096);
  Result<JournalReplay> r = ScanJournal(j.data(), j.size(), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption) << r.status().ToString();
  r = ScanJournal(j.data(), j.size(), 1000, kFormatVersionV3);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  // Without that record it scans.
  std::fill(j.begin() + static_cast<std::ptrdiff_t>(first), j.end(), 0);
  r = ScanJournal(j.data(), j.size(), 1000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->records.size(), 1u);
}

}  // namespace
}  // namespace cowstore::store
