// SPDX-License-Identifier: Apache-2.0
// Data-checked map records (kMapChecked, meta.h) and replay's CRC rule
// (replay.h; store-v3.md 3.6 item 1, plan step 6 part A): the record's
// codec and bounds, the scan's verdicts over the unvouched tail, the data
// check over a pool file, and whole opens of format 3 pools whose journal
// ends in such records (format 2 refuses them).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/crc32c.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/journal.h"
#include "handler/store/pool.h"
#include "handler/store/replay.h"
#include "handler/store/superblock_v3.h"
#include "tests/store/journal_bytes.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kGood = 0x600d600d;  // the CRC FakeCheck finds the data to match
constexpr uint32_t kBad = 0xbadbad;

Record Checked(uint32_t lun, uint64_t lba, uint64_t phys, uint64_t len, uint32_t crc) {
  Record r;
  r.type = RecType::kMapChecked;
  r.lun = lun;
  r.runs.push_back({lba, phys, len});
  r.crcs.push_back(crc);
  return r;
}
Record Map(uint32_t lun, uint64_t lba, uint64_t phys, uint64_t len) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  r.runs.push_back({lba, phys, len});
  return r;
}
Record CreateLun(uint32_t id, const std::string& name, uint64_t bytes) {
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = id;
  r.name = name;
  r.a = bytes;
  r.bs = 512;
  r.uuid.fill(static_cast<uint8_t>(id));
  return r;
}

// Records framed one after the other from `lsn`, each with the `proven` a
// writer would have given it; where each starts.
struct Journal {
  explicit Journal(uint64_t first) : lsn(first) {}
  void Add(const Record& r, uint64_t proven) {
    offs.push_back(bytes.size());
    FrameRecord(r, lsn++, proven, &bytes);
  }
  std::vector<uint8_t> Image(size_t size) const {
    std::vector<uint8_t> j(std::max(size, bytes.size()), 0);
    std::copy(bytes.begin(), bytes.end(), j.begin());
    return j;
  }
  std::string bytes;
  uint64_t lsn;
  std::vector<size_t> offs;
};

// A check that finds a record's data matching when its first CRC is kGood,
// and counts the records it was asked about.
struct FakeCheck {
  std::vector<uint64_t> asked;  // lba of each checked record's first run
  DataCheck Fn() {
    return [this](const Record& r) -> Result<bool> {
      asked.push_back(r.runs.at(0).lba);
      return r.crcs.at(0) == kGood;
    };
  }
};

Result<JournalReplay> ScanV3(const std::vector<uint8_t>& j, uint64_t start, FakeCheck* check,
                             size_t window = kJournalWindowBytes) {
  MemoryJournalSource src(j.data(), j.size());
  return ScanJournal(&src, start, kFormatVersionV3, window, nullptr, check->Fn());
}

// ------------------------------------------------------------- the codec

TEST(MapCheckedRecord, RoundTripsThroughTheFrame) {
  Record r = Checked(3, 10, 500, 2, 0x11223344);
  r.runs.push_back({12, 900, 1});
  r.crcs.push_back(0x55667788);
  std::string s;
  FrameRecord(r, 42, 41, &s);
  EXPECT_EQ(s.size(), kRecordHeader + 4 + 4 + 2 * (24 + 4));
  Record back;
  RecordFrame f;
  ASSERT_EQ(ParseRecord(reinterpret_cast<const uint8_t*>(s.data()), s.size(), 42, &back, &f), s.size());
  EXPECT_EQ(back.type, RecType::kMapChecked);
  EXPECT_EQ(back.lun, 3u);
  ASSERT_EQ(back.runs.size(), 2u);
  EXPECT_EQ(back.runs[1].lba, 12u);
  EXPECT_EQ(back.runs[1].phys, 900u);
  EXPECT_EQ(back.crcs, (std::vector<uint32_t>{0x11223344, 0x55667788}));
  EXPECT_EQ(f.proven, 41u);
  EXPECT_NE(DescribeRecord(back).find("CRC"), std::string::npos) << DescribeRecord(back);
}

// The payload's shape: exactly one CRC per run after kMap's payload, and at
// most kMaxCheckedRuns runs (RecordBounds in replay_test.cc holds the
// longest at MaxPayloadBytes).
TEST(MapCheckedRecord, APayloadOffItsShapeDoesNotDecode) {
  std::string map_payload, checked_payload;
  Map(1, 0, 5, 1).EncodePayload(&map_payload);
  Checked(1, 0, 5, 1, 7).EncodePayload(&checked_payload);
  Record r;
  EXPECT_TRUE(Record::DecodePayload(RecType::kMapChecked, checked_payload.data(), checked_payload.size(), &r));
  EXPECT_FALSE(Record::DecodePayload(RecType::kMapChecked, map_payload.data(), map_payload.size(), &r))
      << "a run without its CRC";
  std::string longer = checked_payload + std::string(1, '\0');
  EXPECT_FALSE(Record::DecodePayload(RecType::kMapChecked, longer.data(), longer.size(), &r));
  EXPECT_FALSE(Record::DecodePayload(RecType::kMapChecked, checked_payload.data(), checked_payload.size() - 1, &r));
  // A count past the bound, with the bytes to match it.
  Record many;
  many.type = RecType::kMapChecked;
  for (uint32_t i = 0; i <= kMaxCheckedRuns; i++) {
    many.runs.push_back({2 * i, 2 * i, 1});
    many.crcs.push_back(i);
  }
  std::string p;
  many.EncodePayload(&p);
  EXPECT_FALSE(Record::DecodePayload(RecType::kMapChecked, p.data(), p.size(), &r));
  many.runs.pop_back();
  many.crcs.pop_back();
  p.clear();
  many.EncodePayload(&p);
  EXPECT_TRUE(Record::DecodePayload(RecType::kMapChecked, p.data(), p.size(), &r));
  EXPECT_EQ(p.size(), MaxPayloadBytes(RecType::kMapChecked));
}

// ApplyRecord treats it as kMap: the same map, and a sink asked for the
// same references.
TEST(MapCheckedRecord, AppliesExactlyAsAMap) {
  class Counting : public RefSink {
   public:
    Status CanInc(std::span<const store::Run> runs) const override {
      for (const store::Run& r : runs) asked += r.len;
      return Status::Ok();
    }
    Status Inc(uint64_t, uint64_t n) override {
      incs += n;
      return Status::Ok();
    }
    void Dec(uint64_t, uint64_t n) override { decs += n; }
    mutable uint64_t asked = 0;
    uint64_t incs = 0, decs = 0;
  };
  auto apply = [](const Record& second, Counting* sink) {
    MetaState st;
    st.au = 4096;
    EXPECT_TRUE(ApplyRecord(&st, CreateLun(1, "a", 1 << 20), sink, nullptr).ok());
    EXPECT_TRUE(ApplyRecord(&st, Map(1, 0, 100, 4), sink, nullptr).ok());
    Status s = ApplyRecord(&st, second, sink, nullptr);
    EXPECT_TRUE(s.ok()) << s.ToString();
    std::vector<std::string> runs;
    for (const auto& [lba, e] : st.Find(1)->map.runs())
      runs.push_back(std::to_string(lba) + "->" + std::to_string(e.phys) + "+" + std::to_string(e.len));
    return runs;
  };
  Counting as_map, as_checked;
  const std::vector<std::string> want = apply(Map(1, 2, 300, 3), &as_map);
  EXPECT_EQ(apply(Checked(1, 2, 300, 3, 0), &as_checked), want);
  EXPECT_EQ(want, (std::vector<std::string>{"0->100+2", "2->300+3"}));
  EXPECT_EQ(as_checked.asked, as_map.asked);
  EXPECT_EQ(as_checked.incs, as_map.incs);
  EXPECT_EQ(as_checked.decs, as_map.decs);
  EXPECT_EQ(as_checked.decs, 2u);
}

// What a writer of the one-sync path can make: runs inside the pool, no
// more grains than a kOneSyncWriteBytes write unaligned to the grain.
TEST(MapCheckedRecord, CheckedRecordRuleBoundsWhatReplayReads) {
  constexpr uint32_t kG = 4096;
  constexpr uint64_t kGrains = 1000;
  const uint64_t most = kOneSyncWriteBytes / kG + 1;  // 17
  EXPECT_EQ(CheckedRecordRule(Checked(1, 0, kGrains - most, most, 0), kG, kGrains), "");
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, 0, most + 1, 0), kG, kGrains), "");
  Record two = Checked(1, 0, 0, most, 0);
  two.runs.push_back({100, 500, 1});
  two.crcs.push_back(0);
  EXPECT_NE(CheckedRecordRule(two, kG, kGrains), "") << "the grains of all runs count";
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, 5, 0, 0), kG, kGrains), "") << "a run of no grains";
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, kGrains - 1, 2, 0), kG, kGrains), "");
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, kGrains, 1, 0), kG, kGrains), "");
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, 1, ~uint64_t{0}, 0), kG, kGrains), "") << "no overflow";
  // At grain = AU a 64 KiB write touches two grains at most.
  EXPECT_EQ(CheckedRecordRule(Checked(1, 0, 7, 2, 0), 1 << 20, kGrains), "");
  EXPECT_NE(CheckedRecordRule(Checked(1, 0, 7, 3, 0), 1 << 20, kGrains), "");
}

// ------------------------------------------------- the scan's CRC rule

constexpr uint64_t kStart = 1000;

// Batch A (LSNs 1000..1002) and batch B (1003..1005): B's records vouch for
// A (proven 1002), nothing vouches for B. `bad_lba` names the checked
// record whose data does not match (none: every one matches).
Journal TwoBatches(uint64_t bad_lba = ~uint64_t{0}) {
  auto crc = [&](uint64_t lba) { return lba == bad_lba ? kBad : kGood; };
  Journal j(kStart);
  j.Add(Map(1, 0, 100, 1), kStart - 1);
  j.Add(Checked(1, 1, 101, 1, crc(1)), kStart - 1);
  j.Add(Map(1, 2, 102, 1), kStart - 1);
  j.Add(Checked(1, 3, 103, 1, crc(3)), kStart + 2);
  j.Add(Checked(1, 4, 104, 1, crc(4)), kStart + 2);
  j.Add(Map(1, 5, 105, 1), kStart + 2);
  return j;
}

std::vector<uint64_t> Lbas(const JournalReplay& r) {
  std::vector<uint64_t> v;
  for (const Record& x : r.records) v.push_back(x.runs.at(0).lba);
  return v;
}

TEST(MapCrcReplay, MatchingDataInTheLastBatchReplays) {
  FakeCheck check;
  auto r = ScanV3(TwoBatches().Image(4096), kStart, &check);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Lbas(*r), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(r->next_lsn, kStart + 6);
  EXPECT_FALSE(r->data_mismatch);
  EXPECT_FALSE(r->damaged);
  // Only the unvouched batch's data was read; batch A's checked record is
  // vouched for by B's records.
  EXPECT_EQ(check.asked, (std::vector<uint64_t>{3, 4}));
}

// A mismatch in the last batch ends replay at that record: it and the rest
// of its batch are dropped, nothing before it; the records after it (its
// own batch's, proven below it) are no proof of damage.
TEST(MapCrcReplay, AMismatchInTheLastBatchDropsThatRecordAndTheRestOfItsBatch) {
  for (uint64_t bad : {3, 4}) {
    SCOPED_TRACE(bad);
    FakeCheck check;
    Journal j = TwoBatches(bad);
    auto r = ScanV3(j.Image(4096), kStart, &check);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::vector<uint64_t> want;
    for (uint64_t lba = 0; lba < bad; lba++) want.push_back(lba);
    EXPECT_EQ(Lbas(*r), want);
    EXPECT_EQ(r->next_lsn, kStart + bad);
    EXPECT_EQ(r->end, j.offs[bad]) << "the end a tear there would report";
    EXPECT_TRUE(r->data_mismatch);
    EXPECT_FALSE(r->damaged);
    EXPECT_FALSE(r->newer_generation);
    EXPECT_TRUE(r->lost.empty());
    // Core's verdict: clean (ReplayEndOf is what LoadState reports), and
    // it says why the tail went: the record's data, not the record.
    ReplayEnd end = ReplayEndOf(std::move(r).value());
    EXPECT_FALSE(end.damaged || end.newer_record_follows);
    EXPECT_TRUE(end.data_mismatch);
    EXPECT_NE(end.explain.find("LSN " + std::to_string(kStart + bad)), std::string::npos) << end.explain;
    EXPECT_NE(end.explain.find("do not hold the data its CRCs name"), std::string::npos) << end.explain;
    EXPECT_NE(end.explain.find("a torn write of its data"), std::string::npos) << end.explain;
  }
}

// A record a later record vouches for is not checked: its data may have
// been overwritten in place since (allowed once the vouch is durable).
TEST(MapCrcReplay, AVouchedForRecordIsNotChecked) {
  FakeCheck check;
  auto r = ScanV3(TwoBatches(/*bad_lba=*/1).Image(4096), kStart, &check);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Lbas(*r), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(r->data_mismatch);
  EXPECT_EQ(check.asked, (std::vector<uint64_t>{3, 4}));
}

// The dropped record was durable after all: a CRC-valid record past a tear
// vouches for it. That is damage (its data does not match although its
// batch's sync returned), refused as damage to any vouched record is.
TEST(MapCrcReplay, AMismatchARecordPastATearVouchesForIsDamage) {
  Journal j(kStart);
  j.Add(Map(1, 0, 100, 1), kStart - 1);
  j.Add(Checked(1, 1, 101, 1, kBad), kStart - 1);
  j.Add(Map(1, 2, 102, 1), kStart - 1);   // torn below
  j.Add(Map(1, 3, 103, 1), kStart + 1);   // vouches for the checked record
  std::vector<uint8_t> img = j.Image(4096);
  img[j.offs[2] + kRecordHeader + 2] ^= 1;
  FakeCheck check;
  auto r = ScanV3(img, kStart, &check);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Lbas(*r), (std::vector<uint64_t>{0}));
  EXPECT_TRUE(r->data_mismatch);
  EXPECT_TRUE(r->damaged);
  EXPECT_EQ(r->end, j.offs[1]);
  // Reported as its data's damage: the record itself was read whole, so
  // what it was is named, not "contents unknown".
  const std::string why = r->Explain();
  EXPECT_NE(why.find("LSN " + std::to_string(kStart + 1)), std::string::npos) << why;
  EXPECT_NE(why.find("do not hold the data its CRCs name"), std::string::npos) << why;
  EXPECT_EQ(why.find("is damaged"), std::string::npos) << why;
  ASSERT_FALSE(r->lost.empty());
  EXPECT_NE(r->lost[0].find(DescribeRecord(Checked(1, 1, 101, 1, kBad))), std::string::npos) << r->lost[0];
  EXPECT_NE(r->lost[0].find("its data does not match its CRCs"), std::string::npos) << r->lost[0];
  EXPECT_EQ(ReplayEndOf(std::move(r).value()).explain, why);
  // With the data matching, the tear after it is clean.
  Journal ok(kStart);
  ok.Add(Map(1, 0, 100, 1), kStart - 1);
  ok.Add(Checked(1, 1, 101, 1, kGood), kStart - 1);
  img = ok.Image(4096);
  r = ScanV3(img, kStart, &check);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Lbas(*r), (std::vector<uint64_t>{0, 1}));
  EXPECT_FALSE(r->damaged);
}

// The records held back for a vouch are handed to the sink in order, once
// each, also when the vouch lies beyond the window (read again from the
// source) and when the held stretch itself holds checked records.
TEST(MapCrcReplay, HeldRecordsAreHandedOverOnceInOrderThroughAWindow) {
  Journal j(kStart);
  uint64_t lba = 0;
  std::vector<uint64_t> want;
  auto add = [&](const Record& r, uint64_t proven) {
    j.Add(r, proven);
    want.push_back(r.runs.at(0).lba);
  };
  // Batch A: a checked record, then ~3 MiB of long maps (two windows of
  // kMaxRecordBytes), then batch B vouching for A, with its own checked
  // record, vouched for by batch C; C's last record is checked, matching.
  add(Checked(1, lba++, 50, 1, kBad), kStart - 1);
  for (int i = 0; i < 3; i++) {
    Record big;
    big.type = RecType::kMap;
    big.lun = 1;
    for (uint32_t k = 0; k < kMaxMapRuns / 2; k++, lba += 2) big.runs.push_back({lba, 1000 + lba, 1});
    add(big, kStart - 1);
  }
  const uint64_t a_last = j.lsn - 1;
  add(Checked(1, lba++, 60, 1, kBad), a_last);
  add(Map(1, lba++, 61, 1), a_last);
  const uint64_t b_last = j.lsn - 1;
  add(Map(1, lba++, 70, 1), b_last);
  add(Checked(1, lba++, 71, 1, kGood), b_last);
  CountingSource src(j.Image(j.bytes.size() + 4096));
  std::vector<uint64_t> got;
  FakeCheck check;
  auto r = ScanJournal(&src, kStart, kFormatVersionV3, kMaxRecordBytes,
                       [&](Record&& x) {
                         got.push_back(x.runs.at(0).lba);
                         return Status::Ok();
                       },
                       check.Fn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(got, want);
  EXPECT_EQ(r->replayed, want.size());
  EXPECT_FALSE(r->data_mismatch);
  EXPECT_EQ(check.asked, (std::vector<uint64_t>{want.back()})) << "only C's checked record";
  EXPECT_LE(src.largest_read, kMaxRecordBytes);
}

// Each checked record vouched for only `trail` records later: reading each
// held stretch again would read the journal `trail` times; the rule's
// budget reads it again less than three times, with the same verdict.
TEST(MapCrcReplay, ATrailingProvenDoesNotMakeTheScanQuadratic) {
  constexpr uint64_t kRecords = 3000, kTrail = 300;
  Journal j(kStart);
  for (uint64_t i = 0; i < kRecords; i++)
    j.Add(Checked(1, i, 100 + i, 1, kGood), i < kTrail ? kStart - 1 : kStart + i - kTrail);
  const std::vector<uint8_t> img = j.Image(0);
  FakeCheck check;
  uint64_t handed = 0, last = 0;
  MemoryJournalSource src(img.data(), img.size());
  auto r = ScanJournal(&src, kStart, kFormatVersionV3, kJournalWindowBytes,
                       [&](Record&& x) {
                         EXPECT_EQ(x.runs.at(0).lba, handed) << "in order, once each";
                         last = x.runs.at(0).lba;
                         handed++;
                         return Status::Ok();
                       },
                       check.Fn());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(handed, kRecords);
  EXPECT_EQ(last, kRecords - 1);
  EXPECT_FALSE(r->data_mismatch);
  EXPECT_EQ(check.asked.size(), kTrail) << "the last `trail` records are unvouched";
  EXPECT_LT(r->reread_bytes, 3 * img.size());
  EXPECT_GT(r->reread_bytes, 0u);
}

// Formats 1 and 2 never hold the record: it is refused, not applied as a map.
TEST(MapCrcReplay, AFormat2JournalHoldingOneIsCorruption) {
  Journal j = TwoBatches();
  const std::vector<uint8_t> img = j.Image(4096);
  MemoryJournalSource src(img.data(), img.size());
  auto r = ScanJournal(&src, kStart, kFormatVersion);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().message().find("format 2"), std::string::npos) << r.status().ToString();
  // FormatV2's replay (its superblock's version).
  MetaState st;
  st.au = 1 << 20;
  ASSERT_TRUE(ApplyRecord(&st, CreateLun(1, "a", 64 << 20), nullptr, nullptr).ok());
  ReplayEnd end;
  EXPECT_EQ(ReplayJournal(img.data(), img.size(), kStart, &st, &end, kFormatVersion).code(), Code::kCorruption);
}

TEST(MapCrcReplay, AVersion3RecordToCheckWithoutACheckIsRefused) {
  const std::vector<uint8_t> img = TwoBatches().Image(4096);
  MemoryJournalSource src(img.data(), img.size());
  EXPECT_EQ(ScanJournal(&src, kStart, kFormatVersionV3).status().code(), Code::kInvalidArgument);
}

// --------------------------------------------- the data check on a file

TEST(MapCrcData, CheckMappedDataReadsTheRunsGrains) {
  FaultInjectionEnv env;
  auto f = env.OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  constexpr uint32_t kG = 4096;
  constexpr uint64_t kOff = 65536;
  ASSERT_TRUE((*f)->Truncate(kOff + 64 * kG).ok());
  std::string a(3 * kG, 'a'), b(kG, 'b');
  a[5000] = 'x';
  ASSERT_TRUE((*f)->Write(kOff + 10 * kG, a.size(), a.data()).ok());
  ASSERT_TRUE((*f)->Write(kOff + 20 * kG, b.size(), b.data()).ok());
  Record r = Checked(1, 0, 10, 3, Crc32c(0, a.data(), a.size()));
  r.runs.push_back({3, 20, 1});
  r.crcs.push_back(Crc32c(0, b.data(), b.size()));
  uint64_t budget = ~uint64_t{0};
  auto same = CheckMappedData(f->get(), kOff, kG, 64, r, &budget);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(*same);
  r.crcs[1] ^= 1;
  same = CheckMappedData(f->get(), kOff, kG, 64, r, &budget);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same) << "the second run's CRC";
  r.crcs[1] ^= 1;
  a[5000] = 'a';  // the CRC of other bytes than the file's
  r.crcs[0] = Crc32c(0, a.data(), a.size());
  same = CheckMappedData(f->get(), kOff, kG, 64, r, &budget);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same);
  // Outside the pool: refused before any read.
  EXPECT_EQ(CheckMappedData(f->get(), kOff, kG, 20, r, &budget).status().code(), Code::kCorruption);
}

// Grains larger than the pieces the check reads in: the CRC spans pieces.
TEST(MapCrcData, ARunOfLargeGrainsIsCheckedAcrossPieces) {
  FaultInjectionEnv env;
  auto f = env.OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  constexpr uint32_t kG = 128 << 10;
  ASSERT_TRUE((*f)->Truncate(8 * uint64_t{kG}).ok());
  std::string d(2 * kG, '\0');
  for (size_t i = 0; i < d.size(); i++) d[i] = static_cast<char>(i * 7 + i / 4096);
  ASSERT_TRUE((*f)->Write(3 * uint64_t{kG}, d.size(), d.data()).ok());
  const Record r = Checked(1, 0, 3, 2, Crc32c(0, d.data(), d.size()));
  uint64_t budget = ~uint64_t{0};
  auto same = CheckMappedData(f->get(), 0, kG, 8, r, &budget);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(*same);
  const char last = static_cast<char>(d.back() ^ 1);
  ASSERT_TRUE((*f)->Write(5 * uint64_t{kG} - 1, 1, &last).ok());
  same = CheckMappedData(f->get(), 0, kG, 8, r, &budget);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same) << "the run's last byte, in its last piece";
}

// What one replay may check is a budget the checks spend: a record needing
// more than is left is refused before any read, and a refusal spends nothing.
TEST(MapCrcData, ARecordPastTheBudgetIsCorruptionAndReadsNothing) {
  FaultInjectionEnv env;
  auto f = env.OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  constexpr uint32_t kG = 4096;
  ASSERT_TRUE((*f)->Truncate(64 * kG).ok());
  const std::string zeros(2 * kG, '\0');
  const Record r = Checked(1, 0, 5, 2, Crc32c(0, zeros.data(), zeros.size()));
  uint64_t budget = 5 * kG;
  for (int i = 0; i < 2; i++) {
    auto same = CheckMappedData(f->get(), 0, kG, 64, r, &budget);
    ASSERT_TRUE(same.ok()) << same.status().ToString();
    EXPECT_TRUE(*same);
  }
  EXPECT_EQ(budget, uint64_t{kG});
  const uint64_t reads = env.calls(FaultInjectionEnv::Op::kRead);
  auto past = CheckMappedData(f->get(), 0, kG, 64, r, &budget);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), Code::kCorruption);
  EXPECT_NE(past.status().message().find("more grains than the pool holds"), std::string::npos)
      << past.status().ToString();
  EXPECT_EQ(budget, uint64_t{kG});
  EXPECT_EQ(env.calls(FaultInjectionEnv::Op::kRead), reads);
  // The bound the format passes: the pool's grains, once.
  EXPECT_EQ(MaxCheckedDataBytes(kG, 64), 64u * kG);
}

// ------------------------------------------- whole opens of format 3 pools

// A format 3 pool (4 KiB grains) FormatV3::Create lays out, its journal
// then written by hand: LUN "a" created, and the records each test gives,
// at the LSNs after it; the data of checked records in the data area.
class MapCrcPool : public ::testing::Test {
 protected:
  static constexpr uint32_t kAu = 64 << 10;
  static constexpr uint32_t kG = 4096;
  static constexpr uint64_t kFirstGrain = 20 * (kAu / kG);  // AU 20: free data space

  void SetUp() override {
    auto f = env_.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    Uuid id{};
    id.fill(9);
    ASSERT_TRUE(FormatV3::Create(f->get(), id, kAu, kG, 4 << 20, kAu, 0).ok());
    const std::vector<uint8_t> img = env_.Snapshot("p");
    ASSERT_TRUE(DecodeSuperblockV3(img.data(), kSuperblockSlot, img.size(), &sb_).ok());
    journal_ = std::make_unique<Journal>(sb_.journal_start_lsn);
    journal_->Add(CreateLun(1, "a", 1 << 20), 0);
  }
  // Grain `g`'s contents (`len` grains of `fill`) written, and their CRC.
  uint32_t Data(uint64_t g, uint64_t len, char fill) {
    const std::string d(len * kG, fill);
    WriteAt(sb_.data_offset + g * kG, d);
    return Crc32c(0, d.data(), d.size());
  }
  void WriteAt(uint64_t off, const std::string& bytes) {
    auto f = env_.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(off, bytes.size(), bytes.data()).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  void WriteJournal() { WriteAt(sb_.data_offset + sb_.journal[0].first_au * sb_.au, journal_->bytes); }
  // Opens the pool (the whole open: replay, rebuild, punches, checkpoint)
  // and returns LUN "a"'s mapped bytes.
  uint64_t OpenAndMapped() {
    auto p = Pool::Open(&env_, "p");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return ~uint64_t{0};
    auto l = (*p)->GetLun("a");
    EXPECT_TRUE(l.ok());
    EXPECT_TRUE((*p)->Close().ok());
    return l.ok() ? l->mapped_bytes : ~uint64_t{0};
  }

  FaultInjectionEnv env_;
  SuperblockV3 sb_;
  std::unique_ptr<Journal> journal_;
};

TEST_F(MapCrcPool, MatchingDataOpensWithTheRecordApplied) {
  journal_->Add(Checked(1, 0, kFirstGrain, 2, Data(kFirstGrain, 2, 'd')), 0);
  journal_->Add(Map(1, 8, kFirstGrain + 8, 1), 0);
  WriteJournal();
  EXPECT_EQ(OpenAndMapped(), 3 * kG);
  auto p = Pool::Open(&env_, "p");
  ASSERT_TRUE(p.ok());
  auto lun = (*p)->OpenLun("a");
  ASSERT_TRUE(lun.ok());
  std::string got(2 * kG, '\0');
  ASSERT_TRUE((*lun)->Read(0, 2 * kG / 512, got.data()).ok());
  EXPECT_EQ(got, std::string(2 * kG, 'd'));
}

TEST_F(MapCrcPool, MismatchingDataOpensWithoutItAndTheRestOfItsBatch) {
  const uint32_t crc = Data(kFirstGrain, 2, 'd');
  Data(kFirstGrain + 1, 1, 'e');  // the record's data never all reached the disk
  journal_->Add(Map(1, 4, kFirstGrain + 4, 1), 0);
  journal_->Add(Checked(1, 0, kFirstGrain, 2, crc), 0);
  journal_->Add(Map(1, 8, kFirstGrain + 8, 1), 0);
  WriteJournal();
  EXPECT_EQ(OpenAndMapped(), 1 * kG) << "only the map before the checked record";
  // The open's checkpoint holds that state: the next open agrees.
  EXPECT_EQ(OpenAndMapped(), 1 * kG);
}

TEST_F(MapCrcPool, AVouchedForRecordOpensUnchecked) {
  const uint32_t crc = Data(kFirstGrain, 2, 'd');
  Data(kFirstGrain, 1, 'o');  // overwritten in place after a vouch was durable
  journal_->Add(Checked(1, 0, kFirstGrain, 2, crc), 0);
  const uint64_t checked_lsn = journal_->lsn - 1;
  journal_->Add(Map(1, 8, kFirstGrain + 8, 1), checked_lsn);
  WriteJournal();
  EXPECT_EQ(OpenAndMapped(), 3 * kG);
}

TEST_F(MapCrcPool, AMismatchALaterRecordProvesDurableIsCorruption) {
  const uint32_t crc = Data(kFirstGrain, 2, 'd');
  Data(kFirstGrain, 1, 'o');
  journal_->Add(Checked(1, 0, kFirstGrain, 2, crc), 0);
  const uint64_t checked_lsn = journal_->lsn - 1;
  journal_->Add(Map(1, 4, kFirstGrain + 4, 1), 0);
  journal_->Add(Map(1, 8, kFirstGrain + 8, 1), checked_lsn);
  journal_->bytes[journal_->offs[2] + kRecordHeader] ^= 1;  // torn
  WriteJournal();
  auto p = Pool::Open(&env_, "p");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
  // The open says it was the record's data, and what the record was.
  const std::string why = p.status().message();
  EXPECT_NE(why.find("LSN " + std::to_string(checked_lsn)), std::string::npos) << why;
  EXPECT_NE(why.find("do not hold the data its CRCs name"), std::string::npos) << why;
  EXPECT_EQ(why.find("is damaged"), std::string::npos) << why;
  auto plan = Pool::RepairJournal(&env_, "p", false);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->damaged);
  ASSERT_FALSE(plan->dropped.empty());
  EXPECT_NE(plan->dropped[0].find("its data does not match its CRCs"), std::string::npos) << plan->dropped[0];
  EXPECT_NE(plan->dropped[0].find(DescribeRecord(Checked(1, 0, kFirstGrain, 2, crc))), std::string::npos)
      << plan->dropped[0];
}

// Replay checks each grain once at most (MaxCheckedDataBytes: a writer
// names a grain in one unvouched checked record at most): an unvouched tail
// naming the same grains again and again past the pool's grains is refused,
// not read, even with every check matching.
TEST_F(MapCrcPool, AnUnvouchedTailCheckingMoreThanThePoolsGrainsIsCorruption) {
  constexpr uint64_t kPerRecord = kOneSyncWriteBytes / kG;  // 16 grains
  const uint32_t crc = Data(kFirstGrain, kPerRecord, 'd');
  const uint64_t records = sb_.grains() / kPerRecord + 1;
  for (uint64_t i = 0; i < records; i++) journal_->Add(Checked(1, 0, kFirstGrain, kPerRecord, crc), 0);
  WriteJournal();
  auto p = Pool::Open(&env_, "p");
  ASSERT_FALSE(p.ok()) << "read " << records * kPerRecord << " grains of a pool of " << sb_.grains();
  EXPECT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
  EXPECT_NE(p.status().message().find("more grains than the pool holds"), std::string::npos)
      << p.status().ToString();
}

// At the pool's grains exactly it opens: the bound refuses nothing a writer
// can leave (one record less than above).
TEST_F(MapCrcPool, AnUnvouchedTailCheckingThePoolsGrainsOpens) {
  ASSERT_EQ(sb_.grains() % 16, 0u);
  constexpr uint64_t kPerRecord = 16;
  const uint32_t crc = Data(kFirstGrain, kPerRecord, 'd');
  for (uint64_t i = 0; i < sb_.grains() / kPerRecord; i++)
    journal_->Add(Checked(1, 0, kFirstGrain, kPerRecord, crc), 0);
  WriteJournal();
  EXPECT_EQ(OpenAndMapped(), kPerRecord * kG);
}

// A format 2 pool whose journal holds the record: refused by the open.
TEST(MapCrcFormat2, APoolWhoseJournalHoldsOneIsRefused) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.size_bytes = 64 << 20;
  o.allocation_unit = 1 << 20;
  o.journal_bytes = 1 << 20;
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("a", 8 << 20, 512).ok());
    ASSERT_TRUE((*p)->Close().ok());
  }
  std::vector<uint8_t> img = env.Snapshot("p");
  Superblock sb;
  Superblock sb1;
  ASSERT_TRUE(Superblock::Decode(img.data(), kSuperblockSlot, &sb).ok());
  if (Superblock::Decode(img.data() + kSuperblockSlot, kSuperblockSlot, &sb1).ok() && sb1.seq > sb.seq) sb = sb1;
  // Where the replay of the closed pool ends: the record goes there.
  Result<JournalReplay> scanned = ScanJournal(img.data() + kJournalOffset, sb.journal_bytes, sb.journal_start_lsn);
  ASSERT_TRUE(scanned.ok()) << scanned.status().ToString();
  const JournalReplay& jr = *scanned;
  ASSERT_FALSE(jr.damaged);
  // LUN "a" is LUN 1; grain = AU 30, inside the pool.
  std::string rec;
  FrameRecord(Checked(1, 0, 30, 1, 0), jr.next_lsn, 0, &rec);
  {
    auto f = env.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(kJournalOffset + jr.end, rec.size(), rec.data()).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  auto p = Pool::Open(&env, "p");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kCorruption);
  EXPECT_NE(p.status().message().find("data-checked"), std::string::npos) << p.status().ToString();
  // The same record as a plain map opens: the refusal is the type's.
  FrameRecord(Map(1, 0, 30, 1), jr.next_lsn, 0, &(rec = std::string()));
  {
    auto f = env.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(kJournalOffset + jr.end, rec.size(), rec.data()).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  auto q = Pool::Open(&env, "p");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto l = (*q)->GetLun("a");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->mapped_bytes, uint64_t{1} << 20);
}

}  // namespace
}  // namespace cowstore::store
