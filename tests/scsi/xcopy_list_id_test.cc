// SPDX-License-Identifier: Apache-2.0
// EXTENDED COPY list IDs shared by several initiators (TCMU gives no I_T
// nexus): CopyListTable's rules on their own (fake clock), then interleaved
// copies through LogicalUnit::Execute, where one copy is held "in flight"
// inside its first store read (GatedEnv) while others with the same list ID
// run, in every LIST ID USAGE (00b, 10b, 11b).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "handler/scsi/cdb.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/sense.h"
#include "tests/scsi/gated_env.h"
#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

using State = CopyRecord::State;

CommandResult Failure() { return CheckCondition(SenseKey::kCopyAborted, asc::kNoAdditionalSense); }

// ---------------------------------------------------------------- the table

class FakeClock {
 public:
  CopyListTable::Clock::time_point now() const { return t_; }
  void Advance(std::chrono::seconds s) { t_ += s; }
  std::function<CopyListTable::Clock::time_point()> fn() {
    return [this] { return now(); };
  }

 private:
  CopyListTable::Clock::time_point t_{std::chrono::hours(1)};
};

TEST(CopyListTableTest, SameListIdNeverRefusesAndEachCopyHasItsOwnEntry) {
  CopyListTable t;
  auto a = t.Begin(5);
  auto b = t.Begin(5);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  t.Progress(*a, 1, 100);
  t.Progress(*b, 2, 200);
  t.Finish(*a, Good());
  // b still runs: a's completion is never the answer for list ID 5.
  auto s = t.Status(5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id, *b);
  EXPECT_EQ(s->state, State::kInProgress);
  EXPECT_EQ(s->bytes_transferred, 200u);
  t.Finish(*b, Failure());
  s = t.Status(5);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id, *b);
  EXPECT_EQ(s->state, State::kFailed);
  EXPECT_EQ(s->segments_processed, 2);
  EXPECT_EQ(t.size(), 1u);  // b's result replaced a's
}

TEST(CopyListTableTest, LastToFinishAnswersNotLastToBegin) {
  CopyListTable t;
  auto a = t.Begin(9);
  auto b = t.Begin(9);
  t.Progress(*a, 1, 111);
  t.Progress(*b, 1, 222);
  t.Finish(*b, Good());
  t.Finish(*a, Failure());
  auto s = t.Status(9);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->id, *a);
  EXPECT_EQ(s->state, State::kFailed);
  EXPECT_EQ(s->bytes_transferred, 111u);
  EXPECT_EQ(t.size(), 1u);
}

TEST(CopyListTableTest, ARunningCopyHidesFinishedOnesWithItsListIdOnly) {
  CopyListTable t;
  auto a = t.Begin(3);
  t.Progress(*a, 1, 4096);
  t.Finish(*a, Good());
  auto other = t.Begin(4);
  auto b = t.Begin(3);
  t.Progress(*b, 0, 512);
  EXPECT_EQ(t.Status(3)->state, State::kInProgress);
  EXPECT_EQ(t.Status(3)->id, *b);
  EXPECT_EQ(t.Status(4)->id, *other);
  EXPECT_FALSE(t.Status(5));
  t.Finish(*b, Good());
  EXPECT_EQ(t.Status(3)->id, *b);
  EXPECT_EQ(t.Status(3)->bytes_transferred, 512u);
  // The running copy with another list ID is unaffected throughout.
  EXPECT_EQ(t.Status(4)->state, State::kInProgress);
}

TEST(CopyListTableTest, NewestRunningCopyAnswersWhileSeveralRun) {
  CopyListTable t;
  auto a = t.Begin(1);
  auto b = t.Begin(1);
  auto c = t.Begin(1);
  t.Progress(*a, 3, 3);
  t.Progress(*b, 2, 2);
  t.Progress(*c, 1, 1);
  EXPECT_EQ(t.Status(1)->id, *c);
  t.Finish(*c, Good());
  EXPECT_EQ(t.Status(1)->id, *b);  // still running beats finished
  EXPECT_EQ(t.Status(1)->state, State::kInProgress);
}

TEST(CopyListTableTest, TakeHandsAFinishedEntryOverOnceAndLeavesARunningOne) {
  CopyListTable t;
  auto a = t.Begin(2);
  auto r = t.Take(2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, State::kInProgress);
  EXPECT_TRUE(t.Status(2));
  t.Finish(*a, Failure());
  r = t.Take(2);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, State::kFailed);
  EXPECT_EQ(r->result.sense_key(), SenseKey::kCopyAborted);
  EXPECT_FALSE(t.Take(2));
  EXPECT_FALSE(t.Status(2));
  EXPECT_EQ(t.size(), 0u);
}

TEST(CopyListTableTest, FinishedResultsExpireRunningOnesDoNot) {
  FakeClock clock;
  CopyListTable t(clock.fn());
  auto a = t.Begin(7);
  auto b = t.Begin(8);
  t.Finish(*a, Good());
  clock.Advance(CopyListTable::kHeldFor - std::chrono::seconds(1));
  EXPECT_TRUE(t.Status(7));
  clock.Advance(std::chrono::seconds(1));
  EXPECT_FALSE(t.Status(7));
  EXPECT_FALSE(t.Take(7));
  clock.Advance(std::chrono::hours(10));
  ASSERT_TRUE(t.Status(8));  // a copy that runs long stays visible
  t.Finish(*b, Good());
  EXPECT_EQ(t.Status(8)->state, State::kCompleted);
  clock.Advance(CopyListTable::kHeldFor);
  EXPECT_FALSE(t.Status(8));
  EXPECT_EQ(t.size(), 0u);
}

TEST(CopyListTableTest, AtMostOneFinishedEntryPerListId) {
  CopyListTable t;
  for (int round = 0; round < 5; ++round) {
    for (int id = 0; id < 256; ++id) {
      auto c = t.Begin(static_cast<uint8_t>(id));
      ASSERT_TRUE(c);
      t.Progress(*c, 1, static_cast<uint64_t>(round));
      t.Finish(*c, Good());
    }
  }
  EXPECT_EQ(t.size(), 256u);
  EXPECT_EQ(t.Status(255)->bytes_transferred, 4u);
}

TEST(CopyListTableTest, RunningEntriesAreCappedAndTheCopyRunsUnrecorded) {
  CopyListTable t;
  std::vector<CopyId> ids;
  for (size_t i = 0; i < CopyListTable::kMaxRunning; ++i) {
    auto c = t.Begin(static_cast<uint8_t>(i));
    ASSERT_TRUE(c);
    ids.push_back(*c);
  }
  EXPECT_FALSE(t.Begin(0));
  t.Finish(ids[0], Good());
  EXPECT_TRUE(t.Begin(0));
}

TEST(CopyListTableTest, FinishIsIdempotentAndUnknownIdsAreIgnored) {
  CopyListTable t;
  auto a = t.Begin(6);
  t.Finish(*a, Failure());
  t.Finish(*a, Good());          // a second Finish changes nothing
  t.Progress(*a, 9, 9);          // nor does progress after the end
  t.Finish(*a + 100, Good());    // an id never issued
  EXPECT_EQ(t.Status(6)->state, State::kFailed);
  EXPECT_EQ(t.Status(6)->segments_processed, 0);
  EXPECT_EQ(t.size(), 1u);
}

TEST(HeldCopyTest, UnwindingFinishesTheEntryAsInternalTargetFailure) {
  CopyListTable t;
  try {
    HeldCopy h(&t, 12);
    h.Progress(1, 512);
    throw std::runtime_error("store exploded");
  } catch (const std::runtime_error&) {
  }
  auto s = t.Status(12);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, State::kFailed);
  EXPECT_EQ(s->result.sense_key(), SenseKey::kHardwareError);
  EXPECT_EQ(s->result.additional_sense(), asc::kInternalTargetFailure);
  EXPECT_EQ(s->bytes_transferred, 512u);
  {
    HeldCopy h(&t, 13);
    h.Finish(Good());
  }
  EXPECT_EQ(t.Status(13)->state, State::kCompleted);
  HeldCopy none(nullptr, 14);  // 10b/11b: no table, nothing recorded
  none.Progress(1, 1);
  none.Finish(Good());
  EXPECT_EQ(t.size(), 2u);
}

// ------------------------------------------------- through LogicalUnit::Execute

struct CopyStatusData {
  CommandResult result;
  uint8_t status = 0xFF;  // COPY MANAGER STATUS
  uint16_t segments = 0;
  uint64_t bytes = 0;
};

class XcopyListIdTest : public ScsiTest {
 protected:
  static constexpr uint64_t kSmall = 8ull << 20;

  void SetUp() override {
    ScsiTest::SetUp();
    gated_ = std::make_unique<GatedEnv>(&env_);
    store::PoolOptions opts;
    opts.size_bytes = 32ull << 20;
    opts.allocation_unit = 1u << 20;
    auto p = store::Pool::Create(gated_.get(), "/pool-gated", opts);
    ASSERT_TRUE(p.ok()) << p.status().message();
    gated_pool_ = std::move(p.value());
    a_ = AddLu(*pool_, "a", kSmall, Config("aaaa3333-0000-0000-0000-000000000001", "grp"));
    b_ = AddLu(*pool_, "b", kSmall, Config("bbbb3333-0000-0000-0000-000000000002", "grp"));
    g_ = AddLu(*gated_pool_, "g", kSmall, Config("cccc3333-0000-0000-0000-000000000003", "grp"));
    ASSERT_TRUE(a_ && b_ && g_);
    ASSERT_TRUE(IsGood(Write(*g_, 0, Pattern(256 * kBlock, 0x31))));
    ASSERT_TRUE(IsGood(Write(*a_, 0, Pattern(256 * kBlock, 0x41))));
    ASSERT_TRUE(IsGood(Write(*b_, 0, Pattern(256 * kBlock, 0x51))));
  }
  void TearDown() override {
    gated_->Open();
    if (inflight_.joinable()) inflight_.join();
    a_.reset();
    b_.reset();
    g_.reset();
    CloseExtraPool(&gated_pool_);
    ScsiTest::TearDown();
  }

  static XcopyList List(uint8_t id, uint8_t usage, std::vector<Bytes> cscds,
                        std::vector<Bytes> segments) {
    XcopyList l;
    l.list_id = usage == 3 ? 0 : id;  // 11b: no list ID (zero, SPC-4)
    l.list_id_usage = usage;
    l.cscds = std::move(cscds);
    l.segments = std::move(segments);
    return l;
  }
  CommandResult Xcopy(LogicalUnit& lu, const XcopyList& l) {
    Bytes p = l.Build();
    return Exec(lu, ExtendedCopy(static_cast<uint32_t>(p.size())), p);
  }
  // A copy inside `lu` of `blocks` from LBA 0 to `dst`.
  CommandResult CopyWithin(LogicalUnit& lu, uint8_t id, uint8_t usage, uint16_t blocks,
                           uint64_t dst) {
    return Xcopy(lu, List(id, usage, {IdentCscd(lu.naa())}, {BlockSegment(0, 0, blocks, 0, dst)}));
  }
  CopyStatusData Status(LogicalUnit& lu, uint8_t id) {
    CopyStatusData s;
    Bytes d;
    s.result = ExecIn(lu, ReceiveCopyResults(0x00, id, 64), 64, &d);
    if (s.result.good() && d.size() >= 12) {
      s.status = d[4] & 0x7F;
      s.segments = Be16(&d[5]);
      s.bytes = uint64_t{Be32(&d[8])} << (10 * d[7]);
    }
    return s;
  }
  CommandResult FailedSegmentDetails(LogicalUnit& lu, uint8_t id, Bytes* d) {
    return ExecIn(lu, ReceiveCopyResults(0x04, id, 256), 256, d);
  }
  // Starts an EXTENDED COPY of `blocks` from the gated LU g to `to` (sent to
  // `to`) and returns once it is parked in its first read of g: from then
  // on it is a copy in flight until Release().
  void StartInFlight(LogicalUnit& to, uint8_t id, uint8_t usage, uint16_t blocks, uint64_t dst) {
    gated_->Close();
    XcopyList l = List(id, usage, {IdentCscd(g_->naa()), IdentCscd(to.naa())},
                       {BlockSegment(0, 1, blocks, 0, dst)});
    inflight_ = std::thread([this, &to, l] { inflight_result_ = Xcopy(to, l); });
    ASSERT_TRUE(gated_->WaitForBlocked(1));
  }
  CommandResult Release() {
    gated_->Open();
    inflight_.join();
    return inflight_result_;
  }

  std::unique_ptr<GatedEnv> gated_;
  std::unique_ptr<store::Pool> gated_pool_;
  std::shared_ptr<LogicalUnit> a_, b_, g_;
  std::thread inflight_;
  CommandResult inflight_result_;
};

TEST_F(XcopyListIdTest, HeldCopyInFlightRefusesNoUsageAndAnswersForItsLu) {
  StartInFlight(*a_, 7, 0, 64, 1000);
  // Another initiator uses list ID 7 on the same LU in every usage: all run.
  for (uint8_t usage : {0, 2, 3}) {
    const uint64_t dst = 2000 + usage * 100;
    ASSERT_TRUE(IsGood(CopyWithin(*a_, 7, usage, 32, dst))) << int(usage);
    EXPECT_EQ(Read(*a_, dst, 32), Read(*a_, 0, 32)) << int(usage);
  }
  // Same LU, same list ID, both held: the answer is the copy still running
  // (never a finished copy while the asker's own may still run).
  CopyStatusData s = Status(*a_, 7);
  ASSERT_TRUE(IsGood(s.result));
  EXPECT_EQ(s.status, 0x00);
  EXPECT_EQ(s.segments, 0);
  EXPECT_EQ(s.bytes, 0u);
  // Another LU tells the copies apart: b holds nothing for 7, then its own.
  EXPECT_TRUE(HasSense(Status(*b_, 7).result, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  ASSERT_TRUE(IsGood(CopyWithin(*b_, 7, 0, 48, 3000)));
  s = Status(*b_, 7);
  EXPECT_EQ(s.status, 0x01);
  EXPECT_EQ(s.segments, 1);
  EXPECT_EQ(s.bytes, 48u * kBlock);

  ASSERT_TRUE(IsGood(Release()));
  EXPECT_EQ(Read(*a_, 1000, 64), Read(*g_, 0, 64));
  // The in-flight copy finished last: its results replace the earlier ones.
  s = Status(*a_, 7);
  EXPECT_EQ(s.status, 0x01);
  EXPECT_EQ(s.bytes, 64u * kBlock);
  EXPECT_EQ(Status(*b_, 7).bytes, 48u * kBlock);  // b unaffected
}

TEST_F(XcopyListIdTest, UnheldCopiesInFlightNeitherRefuseNorAnswer) {
  for (uint8_t inflight_usage : {2, 3}) {
    SCOPED_TRACE(int(inflight_usage));
    const uint8_t id = inflight_usage == 2 ? 9 : 0;
    StartInFlight(*a_, id, inflight_usage, 64, 1000);
    ASSERT_TRUE(IsGood(CopyWithin(*a_, id, 2, 16, 2000)));  // the refusal of issue 13
    ASSERT_TRUE(IsGood(CopyWithin(*a_, id, 3, 16, 2100)));
    ASSERT_TRUE(IsGood(CopyWithin(*a_, id, 0, 40, 2200)));
    // Only the 00b copy is held: it is the answer, exactly, although
    // copies with the same list ID are still running.
    CopyStatusData s = Status(*a_, id);
    EXPECT_EQ(s.status, 0x01);
    EXPECT_EQ(s.segments, 1);
    EXPECT_EQ(s.bytes, 40u * kBlock);
    ASSERT_TRUE(IsGood(Release()));
    s = Status(*a_, id);
    EXPECT_EQ(s.bytes, 40u * kBlock);  // the unheld copy left nothing behind
    Bytes d;
    ASSERT_TRUE(IsGood(FailedSegmentDetails(*a_, id, &d)));  // hand over the result
  }
}

TEST_F(XcopyListIdTest, ARunningCopyIsNeverReportedFinishedByAnEarlierResult) {
  ASSERT_TRUE(IsGood(CopyWithin(*a_, 11, 0, 24, 2000)));
  EXPECT_EQ(Status(*a_, 11).bytes, 24u * kBlock);
  StartInFlight(*a_, 11, 0, 64, 1000);
  CopyStatusData s = Status(*a_, 11);
  EXPECT_EQ(s.status, 0x00);
  // FAILED SEGMENT DETAILS of a running copy: nothing yet, nothing consumed.
  Bytes d;
  ASSERT_TRUE(IsGood(FailedSegmentDetails(*a_, 11, &d)));
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(Be32(&d[0]), 0u);
  EXPECT_EQ(Status(*a_, 11).status, 0x00);
  ASSERT_TRUE(IsGood(Release()));
  s = Status(*a_, 11);
  EXPECT_EQ(s.status, 0x01);
  EXPECT_EQ(s.bytes, 64u * kBlock);
  ASSERT_TRUE(IsGood(FailedSegmentDetails(*a_, 11, &d)));
  EXPECT_EQ(d.size(), 4u);
  EXPECT_TRUE(HasSense(Status(*a_, 11).result, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
}

TEST_F(XcopyListIdTest, AFailureIsReportedOnItsOwnLuOnly) {
  StartInFlight(*b_, 13, 0, 64, 1000);
  // A copy on a with the same list ID fails (its second segment runs past
  // the end of a; the first one was done).
  XcopyList l = List(13, 0, {IdentCscd(a_->naa())},
                     {BlockSegment(0, 0, 8, 0, 500), BlockSegment(0, 0, 8, 0, kSmall / kBlock - 4)});
  EXPECT_TRUE(HasSense(Xcopy(*a_, l), SenseKey::kCopyAborted, asc::kNoAdditionalSense));
  CopyStatusData s = Status(*a_, 13);
  EXPECT_EQ(s.status, 0x02);  // completed with errors
  EXPECT_EQ(Status(*b_, 13).status, 0x00);  // b's copy still runs
  Bytes d;
  ASSERT_TRUE(IsGood(FailedSegmentDetails(*a_, 13, &d)));
  ASSERT_EQ(d.size(), 60u + 18);
  EXPECT_EQ(d[60 + 2] & 0x0F, 0x0A);  // COPY ABORTED, a's own
  ASSERT_TRUE(IsGood(Release()));
  s = Status(*b_, 13);
  EXPECT_EQ(s.status, 0x01);
  EXPECT_EQ(s.bytes, 64u * kBlock);
  ASSERT_TRUE(IsGood(FailedSegmentDetails(*b_, 13, &d)));
  EXPECT_EQ(d.size(), 4u);  // no failure on b
}

TEST_F(XcopyListIdTest, OneInitiatorReusingAListIdGetsTheLatestCopy) {
  // SPC-4 for one nexus: a new copy with the list ID replaces held results.
  XcopyList bad = List(15, 0, {IdentCscd(a_->naa())},
                       {BlockSegment(0, 0, 8, 0, kSmall / kBlock - 4)});
  EXPECT_FALSE(IsGood(Xcopy(*a_, bad)));
  EXPECT_EQ(Status(*a_, 15).status, 0x02);
  ASSERT_TRUE(IsGood(CopyWithin(*a_, 15, 0, 16, 2000)));
  CopyStatusData s = Status(*a_, 15);
  EXPECT_EQ(s.status, 0x01);
  EXPECT_EQ(s.bytes, 16u * kBlock);
  Bytes d;
  ASSERT_TRUE(IsGood(FailedSegmentDetails(*a_, 15, &d)));
  EXPECT_EQ(d.size(), 4u);
  EXPECT_TRUE(HasSense(Status(*a_, 15).result, SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb));
  EXPECT_FALSE(IsGood(Xcopy(*a_, bad)));
  EXPECT_EQ(Status(*a_, 15).status, 0x02);
}

}  // namespace
}  // namespace cowstore::scsi::testing
