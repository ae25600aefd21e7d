// SPDX-License-Identifier: Apache-2.0
// Unit tests of the journal (journal.h): the in-memory buffer and its
// tickets, the commit step's order of syncs and writes, and replay's edge
// cases (empty, torn, bad CRC, wrong LSN, a record ending exactly at the end).
#include "handler/store/journal.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "handler/store/fault_env.h"
#include "tests/common/sanitizers.h"

// The out-of-memory test below replaces the global operator new, which a
// TSan build cannot (tests/common/sanitizers.h): it is built without it
// there only; the plain and ASan/UBSan builds run it.

#if COWSTORE_CAN_REPLACE_NEW()
// Allocation failure for this test binary: while positive, this thread's
// allocations count it down, and the one that brings it to zero throws
// std::bad_alloc (0: allocations never fail).
namespace {
thread_local long allocs_until_failure = 0;
}  // namespace

void* operator new(std::size_t n) {
  if (allocs_until_failure > 0 && --allocs_until_failure == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
#include "tests/common/malloc_delete.h"
#endif  // COWSTORE_CAN_REPLACE_NEW()

namespace cowstore::store {
namespace {

constexpr uint64_t kStart = 1000;  // first LSN of the journal under test

Record CreateLun(uint32_t id, const std::string& name) {
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = id;
  r.name = name;
  r.a = 1 << 20;
  r.bs = 512;
  return r;
}

Record Map(uint32_t lun, uint64_t lba, uint64_t phys, uint64_t len) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  r.runs.push_back({lba, phys, len});
  return r;
}

// Frames `recs` with consecutive LSNs from `lsn`; *ends gets each record's end.
std::vector<uint8_t> Frame(const std::vector<Record>& recs, uint64_t lsn,
                           std::vector<size_t>* ends = nullptr) {
  std::string s;
  for (const Record& r : recs) {
    FrameRecord(r, lsn++, &s);
    if (ends) ends->push_back(s.size());
  }
  return std::vector<uint8_t>(s.begin(), s.end());
}

MetaState Fresh() {
  MetaState st;
  st.au = 64 * 1024;
  return st;
}

// ------------------------------------------------------------------ framing

TEST(JournalFraming, RoundTripsEveryField) {
  Record r = Map(7, 3, 40, 5);
  r.runs.push_back({9, 50, 2});
  std::string s;
  FrameRecord(r, 42, &s);
  ASSERT_GT(s.size(), kRecordHeader);
  Record back;
  uint64_t lsn = 0;
  EXPECT_EQ(ParseRecord(reinterpret_cast<const uint8_t*>(s.data()), s.size(), 42, &back, &lsn),
            s.size());
  EXPECT_EQ(lsn, 42u);
  EXPECT_EQ(back.type, RecType::kMap);
  EXPECT_EQ(back.lun, 7u);
  EXPECT_EQ(back.runs, r.runs);
}

TEST(JournalFraming, SnapshotAndRollbackRecordsRoundTrip) {
  Record snap = CreateLun(0, "s");
  snap.type = RecType::kSnapshotLun;
  snap.lun = 3;
  snap.lun2 = 4;
  snap.attrs = {true, Uuid{9, 8, 7}, 1700000000};
  Record rb;
  rb.type = RecType::kRollbackLun;
  rb.lun = 3;
  rb.lun2 = 4;
  for (const Record& r : {snap, rb}) {
    std::string s;
    FrameRecord(r, 42, &s);
    Record back;
    ASSERT_EQ(ParseRecord(reinterpret_cast<const uint8_t*>(s.data()), s.size(), 42, &back), s.size());
    EXPECT_EQ(back.type, r.type);
    EXPECT_EQ(back.lun, r.lun);
    EXPECT_EQ(back.lun2, r.lun2);
    EXPECT_EQ(back.attrs.read_only, r.attrs.read_only);
    EXPECT_EQ(back.attrs.origin, r.attrs.origin);
    EXPECT_EQ(back.attrs.created, r.attrs.created);
  }
}

TEST(JournalFraming, RefusesAnotherLsnUnlessAnyIsAccepted) {
  std::string s;
  FrameRecord(CreateLun(1, "a"), 42, &s);
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  Record r;
  EXPECT_EQ(ParseRecord(p, s.size(), 43, &r), 0u);
  EXPECT_EQ(ParseRecord(p, s.size(), 41, &r), 0u);
  uint64_t lsn = 0;
  EXPECT_EQ(ParseRecord(p, s.size(), kNone, &r, &lsn), s.size());
  EXPECT_EQ(lsn, 42u);
}

// ------------------------------------------------------------------- buffer

TEST(JournalBuffer, TicketsAndLsnsAreConsecutive) {
  JournalBuffer b;
  b.set_next_lsn(kStart);
  EXPECT_EQ(b.next_ticket(), 1u);
  EXPECT_EQ(b.Append(CreateLun(1, "a")), 1u);
  EXPECT_EQ(b.TicketWithoutRecord(), 2u);  // orders an in-place write; no bytes
  EXPECT_EQ(b.Append(Map(1, 0, 0, 1)), 3u);
  EXPECT_EQ(b.last_ticket(), 3u);

  JournalBatch batch;
  b.TakeBatch(&batch);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(batch.last_ticket, 3u);
  auto want = Frame({CreateLun(1, "a"), Map(1, 0, 0, 1)}, kStart);
  EXPECT_EQ(batch.bytes, std::string(want.begin(), want.end()));
  // LSNs and tickets go on after a batch.
  b.Append(Map(1, 1, 1, 1));
  b.TakeBatch(&batch);
  EXPECT_EQ(batch.last_ticket, 4u);
  Record r;
  EXPECT_NE(ParseRecord(reinterpret_cast<const uint8_t*>(batch.bytes.data()), batch.bytes.size(),
                        kStart + 2, &r),
            0u);
}

TEST(JournalBuffer, DataDirtyTravelsWithOneBatchOnly) {
  JournalBuffer b;
  b.NoteDataWritten();
  b.Append(Map(1, 0, 0, 1));
  JournalBatch batch;
  b.TakeBatch(&batch);
  EXPECT_TRUE(batch.data_dirty);
  b.Append(Map(1, 1, 1, 1));
  b.TakeBatch(&batch);
  EXPECT_FALSE(batch.data_dirty);
}

TEST(JournalBuffer, CheckpointDropsRecordsAndKeepsNumbering) {
  JournalBuffer b;
  b.set_next_lsn(kStart);
  b.Append(CreateLun(1, "a"));
  b.NoteDataWritten();
  EXPECT_EQ(b.DropForCheckpoint(), kStart + 1);  // the new journal starts here
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.last_ticket(), 1u);
  JournalBatch batch;
  b.TakeBatch(&batch);
  EXPECT_FALSE(batch.data_dirty);
  b.SkipLsns(100);
  b.Append(Map(1, 0, 0, 1));
  b.TakeBatch(&batch);
  Record r;
  EXPECT_NE(ParseRecord(reinterpret_cast<const uint8_t*>(batch.bytes.data()), batch.bytes.size(),
                        kStart + 101, &r),
            0u);
}

#if COWSTORE_CAN_REPLACE_NEW()
// An append that runs out of memory at any of its allocations leaves the
// buffer as it was: the same bytes, LSN, ticket and sync flags. (It used to
// frame in place and take the LSN first: a failure at the header's
// allocation left a zeroed half frame and an LSN gap, and every later
// record was committed behind damage that replay refuses.)
TEST(JournalBuffer, AppendThatRunsOutOfMemoryChangesNothing) {
  Record big = Map(1, 0, 0, 1);
  for (uint64_t i = 1; i < 40; i++) big.runs.push_back({2 * i, 100 + i, 1});
  int failures = 0;
  for (long n = 1;; n++) {
    SCOPED_TRACE("allocation " + std::to_string(n) + " of the append fails");
    JournalBuffer b;
    b.set_next_lsn(kStart);
    b.Append(CreateLun(1, "a"));
    b.TicketWithoutRecord();  // an in-place write after it: Append would order it
    allocs_until_failure = n;
    bool threw = false;
    try {
      b.Append(big);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    allocs_until_failure = 0;
    JournalBatch batch;
    if (!threw) {  // every allocation of the append has failed once
      EXPECT_EQ(b.next_lsn(), kStart + 2);
      b.TakeBatch(&batch);
      auto want = Frame({CreateLun(1, "a"), big}, kStart);
      EXPECT_EQ(batch.bytes, std::string(want.begin(), want.end()));
      break;
    }
    failures++;
    EXPECT_EQ(b.next_lsn(), kStart + 1);
    EXPECT_EQ(b.last_ticket(), 2u);
    b.TakeBatch(&batch);
    auto want = Frame({CreateLun(1, "a")}, kStart);
    EXPECT_EQ(batch.bytes, std::string(want.begin(), want.end()));
    EXPECT_EQ(batch.last_lsn, kStart);
    EXPECT_TRUE(batch.inplace_dirty);
    EXPECT_FALSE(batch.data_dirty);
    ASSERT_LT(n, 1000) << "the append never succeeded";
  }
  EXPECT_GE(failures, 2) << "framing and buffering both allocate";
}
#endif  // COWSTORE_CAN_REPLACE_NEW()

// ------------------------------------------------------------------- replay

TEST(JournalReplay, EmptyJournalReplaysNothing) {
  std::vector<uint8_t> j(64 * 1024, 0);
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, 0u);
  EXPECT_EQ(end.next_lsn, kStart);
  EXPECT_FALSE(end.newer_record_follows);
  EXPECT_TRUE(st.luns().empty());
  // A zero-length region too.
  ASSERT_TRUE(ReplayJournal(j.data(), 0, kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, 0u);
}

TEST(JournalReplay, AppliesConsecutiveRecordsInOrder) {
  std::vector<size_t> ends;
  auto j = Frame({CreateLun(1, "a"), Map(1, 0, 10, 2), CreateLun(2, "b")}, kStart, &ends);
  j.resize(64 * 1024, 0);
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, ends.back());
  EXPECT_EQ(end.next_lsn, kStart + 3);
  EXPECT_FALSE(end.newer_record_follows);
  ASSERT_NE(st.FindName("a"), nullptr);
  ASSERT_NE(st.FindName("b"), nullptr);
  EXPECT_EQ(st.FindName("a")->map.Find(1), 11u);
}

TEST(JournalReplay, RecordEndingExactlyAtTheJournalEndIsReplayed) {
  std::vector<size_t> ends;
  auto j = Frame({CreateLun(1, "a"), Map(1, 0, 10, 2)}, kStart, &ends);
  ASSERT_EQ(j.size(), ends.back());  // no slack after the last record
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, j.size());
  EXPECT_EQ(end.next_lsn, kStart + 2);
  EXPECT_EQ(st.FindName("a")->map.Find(0), 10u);
}

TEST(JournalReplay, TornLastRecordEndsReplayBeforeIt) {
  std::vector<size_t> ends;
  auto j = Frame({CreateLun(1, "a"), Map(1, 0, 10, 2)}, kStart, &ends);
  for (size_t cut = ends[0]; cut < ends[1]; cut++) {
    // Cut short by the journal's end ...
    MetaState st = Fresh();
    ReplayEnd end;
    ASSERT_TRUE(ReplayJournal(j.data(), cut, kStart, &st, &end).ok());
    EXPECT_EQ(end.tail, ends[0]) << cut;
    EXPECT_EQ(end.next_lsn, kStart + 1);
    EXPECT_EQ(st.FindName("a")->map.extents(), 0u);
    // ... or by other bytes where the rest never reached the disk.
    std::vector<uint8_t> torn = j;
    for (size_t i = cut; i < torn.size(); i++) torn[i] = static_cast<uint8_t>(~j[i]);
    st = Fresh();
    ASSERT_TRUE(ReplayJournal(torn.data(), torn.size(), kStart, &st, &end).ok());
    EXPECT_EQ(end.tail, ends[0]) << cut;
  }
}

TEST(JournalReplay, BadCrcEndsReplayAtThatRecord) {
  std::vector<size_t> ends;
  auto j = Frame({CreateLun(1, "a"), Map(1, 0, 10, 2), Map(1, 5, 20, 1)}, kStart, &ends);
  for (size_t byte = ends[0]; byte < ends[1]; byte++) {
    auto bad = j;
    bad[byte] ^= 0x20;
    MetaState st = Fresh();
    ReplayEnd end;
    ASSERT_TRUE(ReplayJournal(bad.data(), bad.size(), kStart, &st, &end).ok());
    EXPECT_EQ(end.tail, ends[0]) << byte;
    EXPECT_EQ(end.next_lsn, kStart + 1) << byte;
    EXPECT_EQ(st.FindName("a")->map.extents(), 0u) << byte;  // neither later record
  }
}

TEST(JournalReplay, WrongLsnEndsReplayAndANewerOneIsReported) {
  // A stale record (an older generation's LSN) where the next one should be.
  std::string s;
  FrameRecord(CreateLun(1, "a"), kStart, &s);
  size_t first = s.size();
  FrameRecord(Map(1, 0, 10, 1), kStart - 7, &s);
  std::vector<uint8_t> j(s.begin(), s.end());
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, first);
  EXPECT_EQ(end.next_lsn, kStart + 1);
  EXPECT_FALSE(end.newer_record_follows);

  // A record with a later LSN: the journal is newer than the superblock that
  // started replay.
  s.resize(first);
  FrameRecord(Map(1, 0, 10, 1), kStart + 5, &s);
  j.assign(s.begin(), s.end());
  st = Fresh();
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, first);
  EXPECT_TRUE(end.newer_record_follows);

  // Starting from the wrong LSN replays nothing.
  st = Fresh();
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart + 1, &st, &end).ok());
  EXPECT_EQ(end.tail, 0u);
  EXPECT_TRUE(st.luns().empty());
}

TEST(JournalReplay, ValidRecordThatDoesNotFitTheStateIsCorruption) {
  auto j = Frame({CreateLun(1, "a"), CreateLun(1, "a")}, kStart);
  MetaState st = Fresh();
  ReplayEnd end;
  EXPECT_EQ(ReplayJournal(j.data(), j.size(), kStart, &st, &end).code(), Code::kCorruption);
}

// --------------------------------------------------------- the commit step

class JournalWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = env_.OpenLocked("pool", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    file_ = std::move(f.value());
    ASSERT_TRUE(file_->Truncate(kJournalOffset + kCapacity).ok());
    w_.set_capacity(kCapacity);
  }
  std::vector<uint8_t> Journal() {
    std::vector<uint8_t> j(kCapacity);
    EXPECT_TRUE(file_->Read(kJournalOffset, j.size(), j.data()).ok());
    return j;
  }
  static constexpr uint64_t kCapacity = 64 * 1024;
  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  JournalWriter w_;
  JournalBuffer buf_;
};

TEST_F(JournalWriterTest, BatchIsDurableAndReplaysAfterPowerLoss) {
  buf_.set_next_lsn(kStart);
  buf_.Append(CreateLun(1, "a"));
  buf_.Append(Map(1, 0, 10, 2));
  JournalBatch b;
  buf_.TakeBatch(&b);
  uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  ASSERT_TRUE(w_.WriteBatch(file_.get(), b).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync), syncs + 1);  // no data: one sync
  EXPECT_EQ(w_.tail(), b.bytes.size());

  file_.reset();
  env_.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 1);
  auto f = env_.OpenLocked("pool", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  file_ = std::move(f.value());
  auto j = Journal();
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(end.tail, b.bytes.size());
  EXPECT_EQ(st.FindName("a")->map.Find(0), 10u);
}

TEST_F(JournalWriterTest, DataIsSyncedBeforeTheRecordsThatPointAtIt) {
  buf_.NoteDataWritten();
  buf_.Append(Map(1, 0, 10, 1));
  JournalBatch b;
  buf_.TakeBatch(&b);
  // The first sync must come before the journal write: fail the write and
  // see that one sync already happened.
  env_.FailAt(FaultInjectionEnv::Op::kWrite, 0, Code::kIOError);
  uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  EXPECT_FALSE(w_.WriteBatch(file_.get(), b).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync), syncs + 1);
  EXPECT_EQ(w_.tail(), 0u);  // a failed batch does not move the tail
  env_.ClearFaults();
  ASSERT_TRUE(w_.WriteBatch(file_.get(), b).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync), syncs + 3);  // data, journal
}

TEST_F(JournalWriterTest, EmptyBatchCostsNothing) {
  JournalBatch b;
  buf_.TakeBatch(&b);
  uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  ASSERT_TRUE(w_.WriteBatch(file_.get(), b).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync), syncs);
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite), writes);
}

TEST_F(JournalWriterTest, BatchesAppendAtTheTailUntilFull) {
  buf_.set_next_lsn(kStart);
  size_t total = 0;
  for (uint32_t i = 1; i <= 3; i++) {
    buf_.Append(CreateLun(i, "lun" + std::to_string(i)));
    JournalBatch b;
    buf_.TakeBatch(&b);
    ASSERT_TRUE(w_.Fits(b.bytes.size()));
    ASSERT_TRUE(w_.WriteBatch(file_.get(), b).ok());
    total += b.bytes.size();
  }
  EXPECT_EQ(w_.tail(), total);
  auto j = Journal();
  MetaState st = Fresh();
  ReplayEnd end;
  ASSERT_TRUE(ReplayJournal(j.data(), j.size(), kStart, &st, &end).ok());
  EXPECT_EQ(st.luns().size(), 3u);
  EXPECT_EQ(end.tail, total);

  EXPECT_TRUE(w_.Fits(kCapacity - total));
  EXPECT_FALSE(w_.Fits(kCapacity - total + 1));
}

TEST_F(JournalWriterTest, RestartEmptiesTheJournal) {
  buf_.set_next_lsn(kStart);
  buf_.Append(CreateLun(1, "a"));
  JournalBatch b;
  buf_.TakeBatch(&b);
  ASSERT_TRUE(w_.WriteBatch(file_.get(), b).ok());
  w_.Restart(file_.get());
  EXPECT_EQ(w_.tail(), 0u);
  for (uint8_t c : Journal()) ASSERT_EQ(c, 0);
}

}  // namespace
}  // namespace cowstore::store
