// SPDX-License-Identifier: Apache-2.0
// Format v3's journal ring (journal_segments.h): the layout's mapping of ring
// bytes to the device, batches written at the tail and read back, replay of
// real records across segment and ring boundaries (the same verdict as the
// same bytes replayed contiguously), what a torn write, stale laps and damage
// leave, and the growth plan at a checkpoint.
#include "handler/store/journal_segments.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/replay.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 * 1024;
constexpr uint64_t kDataOffset = kAu;  // AU 0 of the data area
constexpr uint64_t kUnits = 64;
uint64_t Dev(uint64_t au, uint64_t in = 0) { return kDataOffset + au * kAu + in; }

JournalLayout Layout(std::vector<JournalExtent> x) {
  auto l = JournalLayout::Make(kAu, kDataOffset, kUnits, std::move(x));
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return std::move(l).value();
}

// Four one-AU segments, none next to another, out of device order: every
// segment boundary is a split on the device.
JournalLayout Scattered() { return Layout({{9, 1}, {3, 1}, {20, 1}, {14, 1}}); }

Record CreateLun(uint32_t id) {
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = id;
  r.name = "lun-" + std::to_string(id) + std::string(id % 37, 'x');  // sizes vary
  r.a = 1 << 20;
  r.bs = 512;
  return r;
}

Record Map(uint32_t lun, uint64_t i) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  for (uint64_t k = 0; k <= i % 5; k++) r.runs.push_back({i * 8 + k, 100 + i * 8 + k, 1});
  return r;
}

// The verdict of a replay, comparable between a ring and contiguous bytes.
std::vector<std::string> Verdict(const JournalReplay& jr) {
  std::vector<std::string> v;
  for (const Record& r : jr.records) v.push_back(DescribeRecord(r));
  v.push_back("end " + std::to_string(jr.end) + " next " + std::to_string(jr.next_lsn) +
              (jr.damaged ? " damaged" : "") + (jr.newer_generation ? " newer" : ""));
  return v;
}

// ------------------------------------------------------------------ layout

TEST(JournalLayout, RefusesListsTheSuperblockRefuses) {
  auto refused = [](uint32_t au, uint64_t off, uint64_t units, std::vector<JournalExtent> x) {
    auto l = JournalLayout::Make(au, off, units, std::move(x));
    return !l.ok() && l.status().code() == Code::kInvalidArgument;
  };
  EXPECT_FALSE(refused(kAu, kDataOffset, kUnits, {{0, 1}}));
  EXPECT_TRUE(refused(kAu / 2, kDataOffset, kUnits, {{0, 2}}));              // AU rule
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {}));                        // no extent
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {{0, 0}}));                  // empty extent
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {{63, 2}}));                 // past the pool
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {{64, 1}}));                 // past the pool
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {{0, 4}, {3, 1}}));          // overlap
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, {{0, 4}, {4, 1}}));          // [0, +5) in two
  EXPECT_FALSE(refused(kAu, kDataOffset, kUnits, {{4, 1}, {0, 4}}));         // another ring
  EXPECT_TRUE(refused(kAu, ~uint64_t{0} - kAu, kUnits, {{0, 1}}));           // area overflows
  EXPECT_TRUE(refused(kAu, kDataOffset, ~uint64_t{0}, {{0, 1}}));            // area overflows
  std::vector<JournalExtent> many;
  for (uint64_t i = 0; i <= kMaxJournalExtents; i++) many.push_back({2 * i, 1});
  EXPECT_TRUE(refused(kAu, kDataOffset, kUnits, many));                      // 33 extents
  many.pop_back();
  EXPECT_FALSE(refused(kAu, kDataOffset, kUnits, many));                     // 32
  const uint64_t big = uint64_t{1} << 40;
  EXPECT_TRUE(refused(kAu, kDataOffset, big, {{0, kMaxJournalExtentAus + 1}}));  // extent too long
  // 1 GiB is the cap: 16,384 AUs of 64 KiB pass, one more does not.
  EXPECT_FALSE(refused(kAu, kDataOffset, big, {{0, kMaxJournalBytes / kAu}}));
  EXPECT_TRUE(refused(kAu, kDataOffset, big, {{0, kMaxJournalBytes / kAu}, {kMaxJournalExtentAus, 1}}));
}

// The layout accepts exactly the extent lists the superblock encoder does.
TEST(JournalLayout, AcceptsWhatTheSuperblockAccepts) {
  SuperblockV3 sb;
  sb.au = kAu;
  sb.grain = 4096;
  sb.data_offset = kDataOffset;
  sb.units = uint64_t{1} << 20;
  sb.lun_table = {kDataOffset + (uint64_t{1} << 19) * kAu, 1};  // clear of every journal below
  sb.seq = 1;
  std::vector<std::vector<JournalExtent>> lists = {
      {{0, 1}}, {{9, 2}, {3, 1}}, {{0, 0}}, {{0, 4}, {3, 1}}, {{0, 4}, {4, 1}}, {{(uint64_t{1} << 20) - 1, 2}},
      {{0, kMaxJournalBytes / kAu}}, {{0, kMaxJournalBytes / kAu}, {kMaxJournalExtentAus, 1}},
      {{0, kMaxJournalExtentAus + 1}}, {}};
  std::vector<JournalExtent> many;
  for (uint64_t i = 0; i <= kMaxJournalExtents; i++) many.push_back({2 * i, 1});
  lists.push_back(many);
  many.pop_back();
  lists.push_back(many);
  for (const auto& list : lists) {
    sb.journal = list;
    std::string slot;
    EXPECT_EQ(JournalLayout::Of(sb).ok(), EncodeSuperblockV3(sb, &slot).ok())
        << list.size() << " extents, first " << (list.empty() ? 0 : list[0].aus) << " AUs";
  }
}

TEST(JournalLayout, CapacityIsTheSuperblocks) {
  SuperblockV3 sb;
  sb.au = kAu;
  sb.data_offset = kDataOffset;
  sb.units = kUnits;
  sb.journal = {{9, 2}, {3, 1}, {20, 5}};
  auto l = JournalLayout::Of(sb);
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->capacity(), sb.capacity());
  EXPECT_EQ(l->capacity(), 8 * kAu);
}

TEST(JournalLayout, MapsWithinAtAndAcrossExtentBoundariesAndTheWrap) {
  const JournalLayout l = Scattered();
  ASSERT_EQ(l.capacity(), 4 * kAu);
  std::vector<RingPiece> p;
  ASSERT_TRUE(l.Map(100, 50, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(9, 100), 50}}));
  // Ending exactly at the boundary: one piece; starting at it: the next extent.
  ASSERT_TRUE(l.Map(kAu - 50, 50, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(9, kAu - 50), 50}}));
  ASSERT_TRUE(l.Map(kAu, 10, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(3), 10}}));
  // Across one boundary, and across two (a whole extent in the middle).
  ASSERT_TRUE(l.Map(kAu - 7, 20, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(9, kAu - 7), 7}, {Dev(3), 13}}));
  ASSERT_TRUE(l.Map(kAu - 7, kAu + 20, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(9, kAu - 7), 7}, {Dev(3), kAu}, {Dev(20), 13}}));
  // Across the wrap: the last extent's end, then the first's start.
  ASSERT_TRUE(l.Map(4 * kAu - 5, 12, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(14, kAu - 5), 5}, {Dev(9), 7}}));
  // Logical positions are taken modulo the capacity.
  std::vector<RingPiece> q;
  ASSERT_TRUE(l.Map(3 * 4 * kAu + 4 * kAu - 5, 12, &q).ok());
  EXPECT_EQ(p, q);
  // The whole ring from its middle: five pieces, back to where it began.
  ASSERT_TRUE(l.Map(2 * kAu + 512, 4 * kAu, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(20, 512), kAu - 512}, {Dev(14), kAu}, {Dev(9), kAu},
                                       {Dev(3), kAu}, {Dev(20), 512}}));
  ASSERT_TRUE(l.Map(5, 0, &p).ok());
  EXPECT_TRUE(p.empty());
  EXPECT_EQ(l.Map(0, 4 * kAu + 1, &p).code(), Code::kInvalidArgument);
}

// The list never holds an extent continuing the one before it (one extent
// spells that), but the ring wraps from the last extent to the first, which
// may lie right after it on the device.
TEST(JournalLayout, ExtentsNextToEachOtherOnTheDeviceAreOnePiece) {
  const JournalLayout l = Layout({{5, 1}, {30, 1}, {4, 1}});
  std::vector<RingPiece> p;
  ASSERT_TRUE(l.Map(3 * kAu - 10, kAu + 20, &p).ok());
  EXPECT_EQ(p, (std::vector<RingPiece>{{Dev(4, kAu - 10), kAu + 10}, {Dev(30), 10}}));
}

// -------------------------------------------------------------------- ring

class JournalRingTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(Env::Mode::kCreate); }
  void Reopen(Env::Mode mode = Env::Mode::kReadWrite) {
    file_.reset();
    auto f = env_.OpenLocked("pool", mode);
    ASSERT_TRUE(f.ok());
    file_ = std::move(f.value());
    if (mode == Env::Mode::kCreate) {
      ASSERT_TRUE(file_->Truncate(Dev(kUnits)).ok());
      ASSERT_TRUE(file_->Sync().ok());
    }
  }
  JournalRing Ring(const JournalLayout& l, uint64_t start, uint64_t tail) {
    auto r = JournalRing::Open(l, start, tail);
    EXPECT_TRUE(r.ok());
    return std::move(r).value();
  }
  // Frames `recs` into one batch, vouching for what `ring` made durable.
  JournalBatch Batch(const std::vector<Record>& recs, const JournalRing& ring) {
    for (const Record& r : recs) buf_.Append(r, ring.durable_lsn());
    JournalBatch b;
    buf_.TakeBatch(&b);
    return b;
  }
  // Through the ring's source and replay's window, as open will read it.
  JournalReplay ScanRing(const JournalLayout& l, uint64_t start, uint64_t lsn,
                         size_t window = kJournalWindowBytes) {
    JournalRingSource src(file_.get(), l, start);
    EXPECT_EQ(src.size(), l.capacity());
    Result<JournalReplay> r = ScanJournal(&src, lsn, kFormatVersion, window);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : JournalReplay{};
  }
  // The whole ring in one buffer: what the tests compare against.
  std::vector<uint8_t> ReadRing(const JournalLayout& l, uint64_t start) {
    JournalRingSource src(file_.get(), l, start);
    std::vector<uint8_t> j(src.size());
    EXPECT_TRUE(src.Read(0, j.size(), j.data()).ok());
    return j;
  }
  // The same bytes as one contiguous journal region (zeros after them).
  static JournalReplay ScanContiguous(const std::string& bytes, uint64_t capacity, uint64_t lsn) {
    std::vector<uint8_t> j(bytes.begin(), bytes.end());
    j.resize(capacity);
    Result<JournalReplay> r = ScanJournal(j.data(), j.size(), lsn);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : JournalReplay{};
  }

  static constexpr uint64_t kStart = 1000;  // first LSN of the journal under test
  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  JournalBuffer buf_;
};

TEST_F(JournalRingTest, OpenRefusesATailOutsideOneRing) {
  const JournalLayout l = Scattered();
  EXPECT_TRUE(JournalRing::Open(l, 100, 100 + l.capacity()).ok());  // full
  EXPECT_FALSE(JournalRing::Open(l, 100, 101 + l.capacity()).ok());
  EXPECT_FALSE(JournalRing::Open(l, 100, 99).ok());
}

TEST_F(JournalRingTest, BatchIsWrittenOnePiecePerSegmentAndReadsBack) {
  const JournalLayout l = Scattered();
  const uint64_t start = 4 * kAu - 1024;  // 1 KiB before the wrap
  JournalRing ring = Ring(l, start, start);
  std::string payload;
  for (int i = 0; i < 3 * 1024 + 77; i++) payload.push_back(static_cast<char>(i * 7 + 1));
  const uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  ASSERT_TRUE(ring.WriteAtTail(file_.get(), payload).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite), writes + 2);  // end of segment 3, start of 0
  // The device holds it where Map says, and the ring reads back from start.
  std::vector<uint8_t> d = env_.Snapshot("pool");
  EXPECT_EQ(std::string(d.begin() + Dev(14, kAu - 1024), d.begin() + Dev(15)), payload.substr(0, 1024));
  EXPECT_EQ(std::string(d.begin() + Dev(9), d.begin() + Dev(9) + payload.size() - 1024), payload.substr(1024));
  const std::vector<uint8_t> j = ReadRing(l, start % l.capacity());
  ASSERT_EQ(j.size(), l.capacity());
  EXPECT_EQ(std::string(j.begin(), j.begin() + payload.size()), payload);
  EXPECT_TRUE(std::all_of(j.begin() + payload.size(), j.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(JournalRingTest, FitsGuardsTheLiveRecords) {
  const JournalLayout l = Scattered();
  JournalRing ring = Ring(l, 3 * kAu, 3 * kAu + 1000);
  EXPECT_TRUE(ring.Fits(l.capacity() - 1000));
  EXPECT_FALSE(ring.Fits(l.capacity() - 999));
  JournalBatch b;
  b.bytes.assign(l.capacity() - 999, 'j');
  const uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  const uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  EXPECT_EQ(ring.WriteBatch(file_.get(), b).code(), Code::kNoSpace);
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite), writes);  // nothing written, nothing synced
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync), syncs);
  EXPECT_EQ(ring.tail(), 3 * kAu + 1000);
  b.bytes.pop_back();
  ASSERT_TRUE(ring.WriteBatch(file_.get(), b).ok());
  EXPECT_EQ(ring.tail(), 3 * kAu + l.capacity());  // full: the tail met the start
  EXPECT_FALSE(ring.Fits(1));
  EXPECT_TRUE(ring.Fits(0));
}

TEST_F(JournalRingTest, RestartStartsTheEmptyJournalOnAWriteUnitAtTheTail) {
  const JournalLayout l = Scattered();
  JournalRing ring = Ring(l, 3 * kAu, 3 * kAu + l.capacity() - 100);  // ends 100 bytes before the start
  const uint64_t off = ring.Restart(512);
  EXPECT_EQ(off, 3 * kAu);  // rounded up onto the old start, a whole ring later
  EXPECT_EQ(ring.start(), ring.tail());
  EXPECT_TRUE(ring.Fits(l.capacity()));
  JournalRing r2 = Ring(l, 0, 513);
  EXPECT_EQ(r2.Restart(512), 1024u);
  // The superblock's rule is its own write unit: a 4 KiB-unit pool's start
  // is 4 KiB-aligned, and the encoder accepts it.
  JournalRing r3 = Ring(l, 0, 513);
  const uint64_t start = r3.Restart(4096);
  EXPECT_EQ(start, 4096u);
  SuperblockV3 sb;
  sb.uuid[0] = 1;
  sb.seq = 1;
  sb.au = kAu;
  sb.grain = 4096;
  sb.data_offset = kDataOffset;
  sb.units = kUnits;
  sb.journal = l.extents();
  sb.lun_table = {kDataOffset + 30 * kAu, 1};  // clear of the journal's AUs
  sb.write_unit = 4096;
  sb.journal_start = start;
  std::string slot;
  EXPECT_TRUE(EncodeSuperblockV3(sb, &slot).ok());
  sb.journal_start = 1024;  // what a 512-byte rounding gives: refused
  EXPECT_FALSE(EncodeSuperblockV3(sb, &slot).ok());
}

// Real records written in batches from just before the wrap, so they cross
// the wrap and a segment boundary: the ring's replay is the contiguous one.
TEST_F(JournalRingTest, ReplayAcrossSegmentsAndTheWrapMatchesContiguousReplay) {
  const JournalLayout l = Scattered();
  const uint64_t start = 4 * kAu - 3 * 512;
  JournalRing ring = Ring(l, start, start);
  buf_.set_next_lsn(kStart);
  std::string all;
  uint32_t id = 1;
  while (ring.tail() - start < kAu + 4096) {  // past the wrap and into segment 1
    std::vector<Record> recs;
    for (int k = 0; k < 7; k++) recs.push_back(CreateLun(id++));
    JournalBatch b = Batch(recs, ring);
    ASSERT_TRUE(ring.WriteBatch(file_.get(), b).ok());
    all += b.bytes;
  }
  Reopen();
  const JournalReplay want = ScanContiguous(all, l.capacity(), kStart);
  const JournalReplay got = ScanRing(l, start % l.capacity(), kStart);
  EXPECT_EQ(Verdict(got), Verdict(want));
  EXPECT_EQ(got.end, all.size());
  EXPECT_EQ(got.records.size(), id - 1);
  EXPECT_FALSE(got.damaged || got.newer_generation);

  // And applied through ReplayJournal: every LUN, the tail and next LSN.
  JournalRingSource src(file_.get(), l, start % l.capacity());
  MetaState st;
  st.au = kAu;
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(&src, kStart, &st, &end).ok());
  EXPECT_EQ(st.luns().size(), id - 1);
  ASSERT_NE(st.FindName(CreateLun(id - 1).name), nullptr);
  EXPECT_EQ(end.tail, all.size());
  EXPECT_EQ(end.next_lsn, kStart + id - 1);
  EXPECT_FALSE(end.damaged || end.newer_record_follows);
}

// Two laps of a small ring with checkpoints between: what the ring holds
// after the live records (the earlier generations' records, some cut
// through by newer writes) never replays and never refuses.
TEST_F(JournalRingTest, StaleLapsNeverReplayNorRefuse) {
  const JournalLayout l = Layout({{40, 1}, {7, 1}});
  JournalRing ring = Ring(l, 0, 0);
  uint64_t lsn = 1;
  buf_.set_next_lsn(lsn);
  uint64_t id = 0;
  for (int gen = 0; gen < 9; gen++) {
    // A generation fills most of the ring, then a checkpoint empties it.
    const uint64_t gen_start_lsn = buf_.next_lsn();
    const uint64_t gen_start = ring.start();
    std::string bytes;
    while (ring.tail() - ring.start() < l.capacity() * 3 / 4) {
      std::vector<Record> recs = {Map(1, id), Map(2, id + 1), CreateLun(static_cast<uint32_t>(id % 50 + 1))};
      id += 2;
      JournalBatch b = Batch(recs, ring);
      ASSERT_TRUE(ring.WriteBatch(file_.get(), b).ok());
      bytes += b.bytes;
    }
    const JournalReplay got = ScanRing(l, gen_start % l.capacity(), gen_start_lsn);
    EXPECT_EQ(Verdict(got), Verdict(ScanContiguous(bytes, l.capacity(), gen_start_lsn))) << "gen " << gen;
    EXPECT_EQ(got.end, bytes.size());
    EXPECT_FALSE(got.damaged || got.newer_generation) << "gen " << gen;
    ring.Restart(512);
    buf_.DropForCheckpoint();
    if (gen % 3 == 2) buf_.SkipLsns(uint64_t{1} << 32);  // as an open does
  }
  // An empty journal right after a checkpoint: nothing replays, nothing
  // refuses, although the ring is full of older records.
  const JournalReplay empty = ScanRing(l, ring.start() % l.capacity(), buf_.next_lsn());
  EXPECT_TRUE(empty.records.empty());
  EXPECT_EQ(empty.end, 0u);
  EXPECT_FALSE(empty.damaged || empty.newer_generation);
}

// The checkpoint's new start and LSN, with the record replay expects there
// missing: an older record of the generation before stands where it should.
// Not a newer generation (its LSN is lower), not damage (it proves nothing).
TEST_F(JournalRingTest, OlderRecordWhereReplayStopsIsNotNewer) {
  const JournalLayout l = Layout({{40, 1}, {7, 1}});
  JournalRing ring = Ring(l, 0, 0);
  buf_.set_next_lsn(kStart);
  std::vector<Record> recs;
  for (uint32_t i = 1; i <= 40; i++) recs.push_back(CreateLun(i));
  ASSERT_TRUE(ring.WriteBatch(file_.get(), Batch(recs, ring)).ok());
  ASSERT_TRUE(ring.WriteBatch(file_.get(), Batch({CreateLun(41)}, ring)).ok());
  const uint64_t next = buf_.next_lsn();
  // Replay as if the superblock said "start at 0 with LSN next": the record
  // at 0 is whole and CRC-valid, but older, as is every one after it.
  const JournalReplay got = ScanRing(l, 0, next);
  EXPECT_TRUE(got.records.empty());
  EXPECT_FALSE(got.damaged || got.newer_generation);
}

// A record in the middle damaged on the media, the record that vouches for
// it in the next segment: refused, as in a contiguous journal.
TEST_F(JournalRingTest, DamageBeforeALaterRecordInAnotherSegmentIsRefused) {
  const JournalLayout l = Scattered();
  const uint64_t start = kAu - 2048;  // batch 1 in segment 0, batch 2 crosses into segment 1
  JournalRing ring = Ring(l, start, start);
  buf_.set_next_lsn(kStart);
  std::vector<Record> first;
  for (uint32_t i = 1; i <= 12; i++) first.push_back(CreateLun(i));
  JournalBatch b1 = Batch(first, ring);
  ASSERT_LT(b1.bytes.size(), 2048u);
  ASSERT_TRUE(ring.WriteBatch(file_.get(), b1).ok());
  const uint64_t second_at = ring.tail();
  std::vector<Record> second;
  for (uint32_t i = 13; i <= 60; i++) second.push_back(CreateLun(i));
  JournalBatch b2 = Batch(second, ring);
  ASSERT_TRUE(ring.WriteBatch(file_.get(), b2).ok());
  ASSERT_GT(ring.tail(), kAu + 512);
  const JournalReplay clean = ScanRing(l, start, kStart);
  ASSERT_EQ(clean.records.size(), 60u);
  // Damage a record of batch 1 (segment 0 is device AU 9), and wipe batch
  // 2's bytes in segment 0: the only records vouching for batch 1 are then
  // those in segment 1.
  env_.Corrupt("pool", Dev(9, start + 300), 1);
  const std::string zeros(kAu - second_at, '\0');
  ASSERT_TRUE(file_->Write(Dev(9, second_at), zeros.size(), zeros.data()).ok());
  Reopen();
  const JournalReplay got = ScanRing(l, start, kStart);
  EXPECT_TRUE(got.damaged);
  EXPECT_FALSE(got.newer_generation);
  EXPECT_LT(got.records.size(), 12u);
  EXPECT_GT(got.lost.size(), 1u);

  // The same bytes as a contiguous journal get the same verdict.
  const std::vector<uint8_t> j = ReadRing(l, start);
  const std::string live(j.begin(), j.begin() + (ring.tail() - start));
  EXPECT_EQ(Verdict(got), Verdict(ScanContiguous(live, l.capacity(), kStart)));
  // Without the damage, the wipe alone: batch 1 replays, batch 2 is a tear.
  std::string healed = live;
  healed[300] ^= 0x5a;
  const JournalReplay torn = ScanContiguous(healed, l.capacity(), kStart);
  EXPECT_EQ(torn.records.size(), 12u);
  EXPECT_FALSE(torn.damaged);

  // Through ReplayJournal, as open will call it.
  JournalRingSource src(file_.get(), l, start);
  MetaState st;
  st.au = kAu;
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(&src, kStart, &st, &end).ok());
  EXPECT_TRUE(end.damaged);
  EXPECT_FALSE(end.explain.empty());
  EXPECT_FALSE(end.lost.empty());
}

// A ring larger than replay's window, written from 100 KiB before the wrap:
// the first read crosses the wrap (and segment boundaries), later ones slide
// over records cut by their ends. Intact, and with damage before the wrap
// that records windows later vouch for: the contiguous verdicts.
TEST_F(JournalRingTest, WindowedReplayOverTheWrapMatchesContiguousReplay) {
  const JournalLayout l = Layout({{50, 10}, {3, 10}, {20, 10}, {35, 10}});  // 2.5 MiB
  const size_t window = kMaxRecordBytes;
  ASSERT_GT(l.capacity(), window + 512 * 1024);
  const uint64_t start = l.capacity() - 100 * 1024;
  JournalRing ring = Ring(l, start, start);
  buf_.set_next_lsn(kStart);
  std::string all;
  uint64_t i = 0;
  while (ring.tail() - start < window + 400 * 1024) {
    std::vector<Record> recs;
    for (int k = 0; k < 3; k++, i++) {
      Record r = Map(1 + i % 3, i);
      for (uint64_t x = 0; x < 100 + i * 37 % 700; x++) r.runs.push_back({1000 + i * 1000 + x, 5000 + x, 1});
      recs.push_back(r);
    }
    JournalBatch b = Batch(recs, ring);
    ASSERT_TRUE(ring.WriteBatch(file_.get(), b).ok());
    all += b.bytes;
  }
  Reopen();
  const JournalReplay got = ScanRing(l, start, kStart, window);
  EXPECT_EQ(Verdict(got), Verdict(ScanContiguous(all, l.capacity(), kStart)));
  EXPECT_EQ(got.records.size(), i);
  EXPECT_EQ(got.end, all.size());
  EXPECT_FALSE(got.damaged || got.newer_generation);

  env_.Corrupt("pool", Dev(35, 10 * kAu - 50 * 1024), 1);  // a record 50 KiB before the wrap
  Reopen();
  const JournalReplay bad = ScanRing(l, start, kStart, window);
  EXPECT_TRUE(bad.damaged);
  EXPECT_LT(bad.end, 100u * 1024);
  const std::vector<uint8_t> j = ReadRing(l, start);
  const std::string live(j.begin(), j.begin() + all.size());
  EXPECT_EQ(Verdict(bad), Verdict(ScanContiguous(live, l.capacity(), kStart)));
  EXPECT_EQ(bad.lost, ScanContiguous(live, l.capacity(), kStart).lost);
}

// A batch cut by a power loss while crossing a segment boundary (two Env
// writes, the sync never returned): whatever survives of either piece, replay
// keeps the durable batch, stops inside the cut one, and calls it a torn
// tail, never damage.
TEST_F(JournalRingTest, TornWriteAcrossASegmentBoundaryIsATornTail) {
  const JournalLayout l = Scattered();
  const uint64_t start = 2 * kAu - 4096;
  std::set<size_t> outcomes;
  for (uint64_t seed = 0; seed < 60; seed++) {
    file_.reset();
    env_.Delete("pool");
    env_.CrashAfter(-1);
    SetUp();
    JournalRing ring = Ring(l, start, start);
    buf_ = JournalBuffer();
    buf_.set_next_lsn(kStart);
    std::vector<Record> first, second;
    for (uint32_t i = 1; i <= 8; i++) first.push_back(CreateLun(i));
    for (uint32_t i = 9; i <= 60; i++) second.push_back(CreateLun(i));
    JournalBatch b1 = Batch(first, ring);
    ASSERT_TRUE(ring.WriteBatch(file_.get(), b1).ok());
    JournalBatch b2 = Batch(second, ring);
    std::vector<RingPiece> pieces;
    ASSERT_TRUE(l.Map(ring.tail(), b2.bytes.size(), &pieces).ok());
    ASSERT_EQ(pieces.size(), 2u);  // it crosses from segment 1 into segment 2
    env_.CrashAfter(2);            // both writes land in the cache; the sync fails
    EXPECT_FALSE(ring.WriteBatch(file_.get(), b2).ok());
    EXPECT_EQ(ring.tail(), start + b1.bytes.size());
    file_.reset();
    const auto loss = seed == 0 ? FaultInjectionEnv::Loss::kDropAll
                      : seed == 1 ? FaultInjectionEnv::Loss::kKeepAll
                                  : FaultInjectionEnv::Loss::kTear;
    env_.PowerLoss(loss, seed);
    Reopen();
    const JournalReplay got = ScanRing(l, start, kStart);
    EXPECT_FALSE(got.damaged) << "seed " << seed;
    EXPECT_FALSE(got.newer_generation) << "seed " << seed;
    ASSERT_GE(got.records.size(), first.size()) << "seed " << seed;  // batch 1 was durable
    for (size_t i = 0; i < got.records.size(); i++)
      EXPECT_EQ(got.records[i].name, CreateLun(static_cast<uint32_t>(i + 1)).name);
    outcomes.insert(got.records.size());
  }
  // The cases above did happen: all of batch 2, none of it, and cuts between.
  EXPECT_TRUE(outcomes.count(8));
  EXPECT_TRUE(outcomes.count(60));
  EXPECT_GT(outcomes.size(), 3u);
}

// The case a per-sector loss makes rare, written on purpose: the second
// piece (after the segment boundary) reached the disk, the first did not.
TEST_F(JournalRingTest, OnlyTheSecondPieceOfACutBatchSurvivingIsATornTail) {
  const JournalLayout l = Scattered();
  const uint64_t start = 2 * kAu - 4096;
  JournalRing ring = Ring(l, start, start);
  buf_.set_next_lsn(kStart);
  std::vector<Record> first, second;
  for (uint32_t i = 1; i <= 8; i++) first.push_back(CreateLun(i));
  for (uint32_t i = 9; i <= 60; i++) second.push_back(CreateLun(i));
  ASSERT_TRUE(ring.WriteBatch(file_.get(), Batch(first, ring)).ok());
  JournalBatch b2 = Batch(second, ring);
  std::vector<RingPiece> pieces;
  ASSERT_TRUE(l.Map(ring.tail(), b2.bytes.size(), &pieces).ok());
  ASSERT_EQ(pieces.size(), 2u);
  ASSERT_TRUE(file_->Write(pieces[1].offset, pieces[1].len, b2.bytes.data() + pieces[0].len).ok());
  ASSERT_TRUE(file_->Sync().ok());
  const JournalReplay got = ScanRing(l, start, kStart);
  EXPECT_EQ(got.records.size(), first.size());
  EXPECT_FALSE(got.damaged);
  EXPECT_FALSE(got.newer_generation);
  // Had a later batch vouched for the cut one, the same bytes would be damage:
  // the check still sees records past the boundary.
  JournalRing after = Ring(l, start, ring.tail() + b2.bytes.size());
  buf_.Append(CreateLun(61), buf_.next_lsn() - 1);  // vouches for all of batch 2
  JournalBatch b3;
  buf_.TakeBatch(&b3);
  ASSERT_TRUE(after.WriteBatch(file_.get(), b3).ok());
  EXPECT_TRUE(ScanRing(l, start, kStart).damaged);
}

TEST_F(JournalRingTest, ClearJournalRunsZerosNewSegments) {
  std::string junk(2 * kAu, '\x5a');
  ASSERT_TRUE(file_->Write(Dev(30), junk.size(), junk.data()).ok());
  ASSERT_TRUE(ClearJournalRuns(file_.get(), kAu, kDataOffset, {{30, 1}}).ok());
  std::vector<uint8_t> d = env_.Snapshot("pool");
  EXPECT_TRUE(std::all_of(d.begin() + Dev(30), d.begin() + Dev(31), [](uint8_t b) { return b == 0; }));
  EXPECT_EQ(d[Dev(31)], 0x5a);  // only the run
}

// ------------------------------------------------------------------ growth

// The map's part: a pool so large that its share never binds.
uint64_t MapTarget(uint64_t map_extents, uint32_t au) {
  return JournalTargetAus(map_extents, au, kMaxPoolUnits, 0);
}

TEST(JournalGrowth, TargetIsSizedWithTheMapInWholeAus) {
  constexpr uint32_t kMiB = 1 << 20;
  EXPECT_EQ(MapTarget(0, kAu), kDefaultJournalBytes / kAu);
  EXPECT_EQ(MapTarget(kDefaultJournalBytes / 48, kAu), kDefaultJournalBytes / kAu);
  EXPECT_EQ(MapTarget(1'000'000, kAu), (48'000'000 + kAu - 1) / kAu);  // rounded up
  EXPECT_EQ(MapTarget(kDefaultJournalBytes / 48 + 1, kMiB), kDefaultJournalBytes / kMiB + 1);
  EXPECT_EQ(MapTarget(100'000'000, kAu), kMaxJournalBytes / kAu);  // the 1 GiB cap
  EXPECT_EQ(MapTarget(~uint64_t{0}, kMiB), kMaxJournalBytes / kMiB);
  // Every target is a list the superblock accepts.
  for (uint64_t e : {uint64_t{0}, uint64_t{1'000'000}, ~uint64_t{0}})
    EXPECT_TRUE(JournalLayout::Make(kAu, kDataOffset, uint64_t{1} << 30, {{0, MapTarget(e, kAu)}}).ok());
}

// The pool's share: 1/16 of its AUs, rounded down, at least one AU; below
// the map's target it binds, above it the map's target (and 1 GiB) stands.
TEST(JournalGrowth, TargetIsCappedAtASixteenthOfThePool) {
  constexpr uint32_t kMiB = 1 << 20;
  const uint64_t by_map = kDefaultJournalBytes / kAu;  // 256 AUs for a small map
  EXPECT_EQ(JournalTargetAus(0, kAu, 767, 0), 47u) << "a 48 MiB pool: 767 / 16, rounded down";
  EXPECT_EQ(JournalTargetAus(0, kAu, 16 * 47 + 15, 0), 47u);
  EXPECT_EQ(JournalTargetAus(0, kAu, 16 * 48, 0), 48u);
  EXPECT_EQ(JournalTargetAus(1'000'000, kAu, 16 * 100, 0), 100u) << "however large the map";
  EXPECT_EQ(JournalTargetAus(0, kAu, kMinPoolUnits, 0), 1u) << "one AU at least";
  EXPECT_EQ(JournalTargetAus(0, kAu, 0, 0), 1u);
  // From 256 MiB on (4,096 AUs of 64 KiB) the pool keeps the map's target.
  EXPECT_EQ(JournalTargetAus(0, kAu, 16 * by_map - 1, 0), by_map - 1);
  EXPECT_EQ(JournalTargetAus(0, kAu, 16 * by_map, 0), by_map);
  EXPECT_EQ(JournalTargetAus(0, kAu, 16 * by_map + 1000, 0), by_map);
  EXPECT_EQ(JournalTargetAus(0, kMiB, 256, 0), 16u) << "256 MiB at 1 MiB AUs";
  // The 1 GiB cap still holds where the share would allow more.
  EXPECT_EQ(JournalTargetAus(~uint64_t{0}, kAu, kMaxPoolUnits, 0), kMaxJournalBytes / kAu);
  EXPECT_EQ(JournalTargetAus(~uint64_t{0}, kMiB, kMaxPoolUnits, 0), kMaxJournalBytes / kMiB);
  EXPECT_EQ(JournalTargetAus(100'000'000, kAu, 16 * (kMaxJournalBytes / kAu) + 16, 0), kMaxJournalBytes / kAu);
}

// Nothing shrinks: a journal already above the share (a small pool made
// with a 16 MiB journal) has its own size as its target, as does one above
// the map's target; one below the share still grows to it.
TEST(JournalGrowth, TargetIsNeverBelowTheJournalsSize) {
  EXPECT_EQ(JournalTargetAus(0, kAu, 767, 256), 256u) << "a 48 MiB pool made with a 16 MiB journal";
  EXPECT_EQ(JournalTargetAus(1'000'000, kAu, 767, 100), 100u);
  EXPECT_EQ(JournalTargetAus(0, kAu, 767, 47), 47u);
  EXPECT_EQ(JournalTargetAus(0, kAu, 767, 46), 47u);
  EXPECT_EQ(JournalTargetAus(0, kAu, kMaxPoolUnits, 300), 300u);
}

// Free space as a set of runs: Take hands out the longest (a prefix of it,
// or all of it when `whole`), Give takes runs back; it counts what is out.
class FakeSpace : public JournalSpace {
 public:
  explicit FakeSpace(std::vector<JournalExtent> free, bool whole = false) : whole_(whole) {
    for (const JournalExtent& r : free) free_[r.first_au] = r.aus;
  }
  std::optional<JournalExtent> Take(uint64_t max_aus) override {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (best == free_.end() || it->second > best->second) best = it;
    if (best == free_.end()) return std::nullopt;
    JournalExtent r{best->first, whole_ ? best->second : std::min(best->second, max_aus)};
    if (r.aus < best->second) free_[r.first_au + r.aus] = best->second - r.aus;
    free_.erase(best);
    out_ += r.aus;
    return r;
  }
  void Give(const JournalExtent& r) override {
    EXPECT_GE(out_, r.aus);
    out_ -= r.aus;
    free_[r.first_au] = r.aus;  // runs are not merged back: fine for these tests
  }
  uint64_t out() const { return out_; }

 private:
  std::map<uint64_t, uint64_t> free_;
  bool whole_;
  uint64_t out_ = 0;
};

uint64_t SumAus(const std::vector<JournalExtent>& v) {
  uint64_t n = 0;
  for (const JournalExtent& x : v) n += x.aus;
  return n;
}

// What every plan must be: a list the superblock accepts, exactly the
// current list plus what was allocated minus what was freed, and nothing
// taken from the space but what the plan allocated.
void ExpectConsistent(const std::vector<JournalExtent>& current, const JournalPlan& p, const FakeSpace& s) {
  EXPECT_TRUE(JournalLayout::Make(kAu, kDataOffset, uint64_t{1} << 20, p.extents).ok());
  EXPECT_EQ(SumAus(p.extents), SumAus(current) + SumAus(p.allocated) - SumAus(p.freed));
  EXPECT_EQ(s.out(), SumAus(p.allocated));
  EXPECT_GE(SumAus(p.extents), SumAus(current));  // never shrinks
}

TEST(JournalGrowth, UnfragmentedSpaceGrowsByOneRun) {
  const std::vector<JournalExtent> cur = {{10, 256}};
  FakeSpace s({{1000, 5000}, {300, 20}});
  JournalPlan p = GrowJournal(cur, 300, &s);
  EXPECT_EQ(p.extents, (std::vector<JournalExtent>{{10, 256}, {1000, 44}}));
  EXPECT_EQ(p.allocated, (std::vector<JournalExtent>{{1000, 44}}));
  EXPECT_TRUE(p.freed.empty());
  ExpectConsistent(cur, p, s);
}

TEST(JournalGrowth, RunAfterTheLastExtentLengthensIt) {
  const std::vector<JournalExtent> cur = {{10, 256}};
  FakeSpace s({{266, 5000}});
  JournalPlan p = GrowJournal(cur, 700, &s);
  EXPECT_EQ(p.extents, (std::vector<JournalExtent>{{10, 700}}));
  EXPECT_EQ(p.allocated, (std::vector<JournalExtent>{{266, 444}}));
  ExpectConsistent(cur, p, s);
}

TEST(JournalGrowth, AtTheTargetNothingChanges) {
  const std::vector<JournalExtent> cur = {{10, 256}};
  FakeSpace s({{1000, 5000}});
  JournalPlan p = GrowJournal(cur, 256, &s);
  EXPECT_EQ(p.extents, cur);
  EXPECT_FALSE(p.changed());
  EXPECT_EQ(s.out(), 0u);
}

TEST(JournalGrowth, FragmentedSpaceFillsUpTo32Runs) {
  const std::vector<JournalExtent> cur = {{0, 256}};
  std::vector<JournalExtent> free;
  for (uint64_t i = 0; i < 100; i++) free.push_back({1000 + i * 10, 8});  // never adjacent
  FakeSpace s(free);
  JournalPlan p = GrowJournal(cur, 2000, &s);
  ASSERT_EQ(p.extents.size(), kMaxJournalExtents);
  EXPECT_EQ(p.extents.front(), cur.front());  // kept: fresh runs would hold only 256
  EXPECT_EQ(SumAus(p.extents), 256 + 31 * 8);
  EXPECT_EQ(p.allocated.size(), kMaxJournalExtents - 1);
  EXPECT_TRUE(p.freed.empty());
  ExpectConsistent(cur, p, s);
}

TEST(JournalGrowth, TooFragmentedKeepsTheCurrentList) {
  std::vector<JournalExtent> cur;
  for (uint64_t i = 0; i < kMaxJournalExtents; i++) cur.push_back({i * 20, 8});  // 32 runs, 256 AUs
  std::vector<JournalExtent> free;
  for (uint64_t i = 0; i < 200; i++) free.push_back({5000 + i * 10, 4});
  FakeSpace s(free);
  JournalPlan p = GrowJournal(cur, 1024, &s);
  EXPECT_EQ(p.extents, cur);
  EXPECT_FALSE(p.changed());
  EXPECT_EQ(s.out(), 0u);  // every run it tried is back
  // And with no free space at all.
  FakeSpace none({});
  EXPECT_FALSE(GrowJournal({{0, 256}}, 1024, &none).changed());
}

TEST(JournalGrowth, AFullListIsReplacedByFewerLongerRuns) {
  std::vector<JournalExtent> cur;
  for (uint64_t i = 0; i < kMaxJournalExtents; i++) cur.push_back({i * 20, 8});
  FakeSpace s({{5000, 3000}, {9000, 4}});
  JournalPlan p = GrowJournal(cur, 1024, &s);
  EXPECT_EQ(p.extents, (std::vector<JournalExtent>{{5000, 1024}}));
  EXPECT_EQ(p.allocated, p.extents);
  EXPECT_EQ(p.freed, cur);
  ExpectConsistent(cur, p, s);
}

TEST(JournalGrowth, ReachesTheCapWithARunLongerThanAsked) {
  const std::vector<JournalExtent> cur = {{0, 256}};
  const uint64_t cap = MapTarget(~uint64_t{0}, kAu);
  FakeSpace s({{100'000, 300'000}}, /*whole=*/true);  // hands out the whole run
  JournalPlan p = GrowJournal(cur, cap, &s);
  EXPECT_EQ(SumAus(p.extents) * kAu, kMaxJournalBytes);
  EXPECT_EQ(p.extents, (std::vector<JournalExtent>{{0, 256}, {100'000, cap - 256}}));
  ExpectConsistent(cur, p, s);
}

// No valid AU lets a 1 GiB journal need an extent above kMaxJournalExtentAus
// (16,384 AUs at 64 KiB), so this asks for more than any target to show the
// per-extent bound holds anyway: long runs are cut at it.
TEST(JournalGrowth, ExtentsNeverPassTheirLengthBound) {
  const std::vector<JournalExtent> cur = {{0, 256}};
  FakeSpace s({{100'000, 3 * kMaxJournalExtentAus}}, /*whole=*/true);
  JournalPlan p = GrowJournal(cur, 256 + kMaxJournalExtentAus + 10, &s);
  EXPECT_EQ(p.extents, (std::vector<JournalExtent>{
                           {0, 256}, {100'000, kMaxJournalExtentAus}, {100'000 + kMaxJournalExtentAus, 10}}));
  for (const JournalExtent& x : p.extents) EXPECT_LE(x.aus, kMaxJournalExtentAus);
  EXPECT_EQ(s.out(), kMaxJournalExtentAus + 10);
}

}  // namespace
}  // namespace cowstore::store
