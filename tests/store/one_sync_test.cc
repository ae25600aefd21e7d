// SPDX-License-Identifier: Apache-2.0
// One-sync first writes, Core's side (store-v3.md 3.6 item 1, plan step 6
// part B): on format 3 a small write that maps new grains writes a
// kMapChecked record and its batch syncs once; its grains stay
// copy-on-write, and freed ones unpunched, until a durable record vouches
// for it (checked_grains.h). Each test names the fix it fails without.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "handler/store/pool_impl.h"
#include "tests/store/pattern.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kBs = 512;
constexpr uint64_t kLunBytes = 1 << 20;

using testing::Pattern;

// A pool of `format` (grain `grain`, 0: the AU) holding LUN "a" (1 MiB of
// Pattern(.., 1), durable) and "b", its clone: b's first writes go into
// shared data.
class OneSync : public ::testing::Test {
 protected:
  void Make(uint32_t format, uint32_t grain) {
    PoolOptions o;
    o.allocation_unit = kAu;
    o.journal_bytes = small_journal_ ? 64 << 10 : 1 << 20;
    // A checkpoint grows the journal only while the used space is below
    // the soft threshold: at 1 % the create's first one grows it a little
    // (the pool is empty then), and no later one does.
    if (small_journal_) o.soft_threshold_percent = 1;
    o.size_bytes = 64 << 20;
    o.format = format;
    o.grain = grain;
    auto p = Pool::Create(&env_, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(p.value());
    ASSERT_TRUE(pool_->CreateLun("a", kLunBytes, kBs).ok());
    a_ = pool_->OpenLun("a").value();
    ASSERT_TRUE(a_->Write(0, kLunBytes / kBs, base_.data(), Durability::kDurable).ok());
    ASSERT_TRUE(pool_->CloneLun("a", "b").ok());
    b_ = pool_->OpenLun("b").value();
  }
  // A power cut now: nothing more reaches the disk, unsynced sectors go as
  // `loss` says (drawn from `seed`); the pool is closed, not reopened.
  void PowerCut(FaultInjectionEnv::Loss loss, uint64_t seed) {
    env_.CrashAfter(0);  // the destructors' writes never reach the disk
    a_.reset();
    b_.reset();
    pool_.reset();
    env_.PowerLoss(loss, seed);
    env_.CrashAfter(-1);
  }
  // A power cut, then the pool is opened again (and checked).
  void Cut(FaultInjectionEnv::Loss loss) {
    PowerCut(loss, 7);
    Reopen();
  }
  void Reopen() {
    auto p = Pool::Open(&env_, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(p.value());
    CheckReport rep = pool_->Check();
    ASSERT_TRUE(rep.clean) << rep.problems[0];
    a_ = pool_->OpenLun("a").value();
    b_ = pool_->OpenLun("b").value();
  }
  std::vector<uint8_t> Read(Lun& l, uint64_t lba, uint64_t blocks) {
    std::vector<uint8_t> got(blocks * kBs);
    EXPECT_TRUE(l.Read(lba, blocks, got.data()).ok());
    return got;
  }
  std::vector<uint8_t> Base(uint64_t lba, uint64_t blocks) const {
    return {base_.begin() + lba * kBs, base_.begin() + (lba + blocks) * kBs};
  }
  uint64_t Syncs() const { return env_.calls(FaultInjectionEnv::Op::kSync); }

  bool small_journal_ = false;  // Make's: checkpoints come every few thousand records
  FaultInjectionEnv env_;
  std::unique_ptr<Pool> pool_;
  std::shared_ptr<Lun> a_, b_;
  const std::vector<uint8_t> base_ = Pattern(kLunBytes, 1);
};

// (a) A durable 4 KiB first write into shared data, and into fresh space:
// one sync on format 3 (the data sync is skipped: without the kMapChecked
// record, i.e. with `checked` false in WriteBytesChunk, this finds 2), two
// on format 2, whose journal cannot hold the record.
struct SyncCase {
  uint32_t format, grain, syncs;
};
class OneSyncSyncs : public OneSync, public ::testing::WithParamInterface<SyncCase> {};

TEST_P(OneSyncSyncs, AFirstWriteOfFourKiBCostsThisManySyncs) {
  ASSERT_NO_FATAL_FAILURE(Make(GetParam().format, GetParam().grain));
  ASSERT_TRUE(pool_->CreateLun("c", kLunBytes, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const std::vector<uint8_t> d = Pattern(4096, 9);
  for (uint64_t i = 0; i < 4; i++) {
    const uint64_t lba = i * (kAu / kBs) + 8;  // a different AU (and grain) each time
    uint64_t before = Syncs();
    ASSERT_TRUE(b_->Write(lba, 8, d.data(), Durability::kDurable).ok());
    EXPECT_EQ(Syncs() - before, GetParam().syncs) << "into shared data, write " << i;
    before = Syncs();
    ASSERT_TRUE(c->Write(lba, 8, d.data(), Durability::kDurable).ok());
    EXPECT_EQ(Syncs() - before, GetParam().syncs) << "into fresh space, write " << i;
  }
  // Written data reads back, the rest of b is still a's.
  EXPECT_EQ(Read(*b_, 8, 8), d);
  EXPECT_EQ(Read(*b_, 0, 8), Base(0, 8));
  // And it is all there after a cut with every unsynced sector dropped.
  c.reset();
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  for (uint64_t i = 0; i < 4; i++) EXPECT_EQ(Read(*b_, i * (kAu / kBs) + 8, 8), d) << i;
  auto c2 = pool_->OpenLun("c").value();
  EXPECT_EQ(Read(*c2, 8, 8), d);
}

INSTANTIATE_TEST_SUITE_P(Formats, OneSyncSyncs,
                         ::testing::Values(SyncCase{3, 4096, 1}, SyncCase{3, 0, 1},
                                           SyncCase{2, 0, 2}),
                         [](const auto& i) {
                           return "F" + std::to_string(i.param.format) +
                                  (i.param.grain ? "G" + std::to_string(i.param.grain) : "AU");
                         });

// (b) A cut with the batch's records durable but one write's data not:
// that write's record and the rest of its batch are dropped, what came
// before stays, and the pool opens. The batch's one sync fails (nothing
// synced), every unsynced sector then survives the cut except the grain
// the middle write put its data in, which reads as it did before (zeros: a
// fresh grain). Without the one-sync path (a plain kMap record) the data
// sync comes first and fails before any record is written: the first write
// of the batch is then missing too.
TEST_F(OneSync, RecordDurableDataNotDropsThatRecordAndTheRestOfItsBatch) {
  ASSERT_NO_FATAL_FAILURE(Make(3, 4096));
  const std::vector<uint8_t> w = Pattern(4096, 20), x = Pattern(4096, 21), y = Pattern(4096, 22),
                             z = Pattern(4096, 23);
  ASSERT_TRUE(b_->Write(200, 8, w.data(), Durability::kDurable).ok());  // an earlier batch
  ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Write(64, 8, y.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Write(128, 8, z.data(), Durability::kBuffered).ok());
  env_.FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(pool_->Flush().ok());
  env_.ClearFaults();
  PowerCut(FaultInjectionEnv::Loss::kKeepAll, 1);
  // y's grain back to its old contents: the only place y was written.
  std::vector<uint8_t> img = env_.Snapshot("p");
  size_t found = 0;
  for (size_t off = 0; off + y.size() <= img.size(); off += 4096)
    if (std::memcmp(img.data() + off, y.data(), y.size()) == 0) {
      std::memset(img.data() + off, 0, y.size());
      found++;
    }
  ASSERT_EQ(found, 1u);
  env_.Install("p", img.data(), img.size());
  ASSERT_NO_FATAL_FAILURE(Reopen());
  EXPECT_EQ(Read(*b_, 200, 8), w) << "an earlier batch";
  EXPECT_EQ(Read(*b_, 0, 8), x) << "the batch's record before the mismatch";
  EXPECT_EQ(Read(*b_, 64, 8), Base(64, 8)) << "the record whose data is missing";
  EXPECT_EQ(Read(*b_, 128, 8), Base(128, 8)) << "the rest of its batch";
  EXPECT_EQ(Read(*a_, 0, kLunBytes / kBs), base_);
}

// (c) A rewrite of a just-first-written grain before a cut loses nothing
// acknowledged: the first write's checked record is not vouched for until
// a record framed after its sync is durable, so the rewrite goes
// copy-on-write. In place (without the !checked_.Unvouched test in
// WriteBytesChunk), the durable rewrite appends no record, so nothing
// vouches for the first, replay checks its grain, finds the rewrite's
// bytes, and drops both: b reads a's data again. A partial rewrite also
// checks the CRC of a copied grain (the copy's rest is the first write's).
TEST_F(OneSync, ARewriteBeforeAVouchLosesNothingAcknowledged) {
  ASSERT_NO_FATAL_FAILURE(Make(3, 4096));
  const std::vector<uint8_t> x = Pattern(4096, 30), y = Pattern(4096, 31), s = Pattern(kBs, 32);
  // Cut right after each rewrite: any later record would vouch.
  ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kDurable).ok());
  ASSERT_TRUE(b_->Write(0, 8, y.data(), Durability::kDurable).ok());
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  EXPECT_EQ(Read(*b_, 0, 8), y);
  ASSERT_TRUE(b_->Write(64, 8, x.data(), Durability::kDurable).ok());
  ASSERT_TRUE(b_->Write(65, 1, s.data(), Durability::kDurable).ok());  // partial
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  EXPECT_EQ(Read(*b_, 0, 8), y);
  std::vector<uint8_t> want = x;
  std::memcpy(want.data() + kBs, s.data(), kBs);
  EXPECT_EQ(Read(*b_, 64, 8), want);
  EXPECT_EQ(Read(*a_, 0, kLunBytes / kBs), base_);
}

// A partial first write into fresh space: the record's CRC covers the
// grain's zeros around the data (else replay drops it).
TEST_F(OneSync, APartialFirstWriteIntoFreshSpaceSurvivesACut) {
  ASSERT_NO_FATAL_FAILURE(Make(3, 4096));
  ASSERT_TRUE(pool_->CreateLun("c", kLunBytes, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const std::vector<uint8_t> s = Pattern(3 * kBs, 40);
  ASSERT_TRUE(c->Write(3, 3, s.data(), Durability::kDurable).ok());  // grain 0, in part
  ASSERT_TRUE(c->Write(7, 3, s.data(), Durability::kDurable).ok());  // across two grains
  c.reset();
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  c = pool_->OpenLun("c").value();
  std::vector<uint8_t> want(16 * kBs, 0);
  std::memcpy(want.data() + 3 * kBs, s.data(), s.size());
  std::memcpy(want.data() + 7 * kBs, s.data(), s.size());
  EXPECT_EQ(Read(*c, 0, 16), want);
}

// The tests of held grains run at grain 4 KiB (GrainSpace) and at grain =
// AU (SpaceMap): the open holds them through either space.
// An unmap frees whole grains only: the tests unmap one.
class OneSyncGrain : public OneSync, public ::testing::WithParamInterface<uint32_t> {
 protected:
  uint64_t GrainBlocks() const { return (GetParam() ? GetParam() : kAu) / kBs; }
  // The pool's image after a power cut that leaves its journal ending in a
  // first write's checked record (nothing vouches for it) and the unmap
  // that freed its grain: the next open finds that grain free.
  std::vector<uint8_t> AJournalEndingInAFreedUnvouchedWrite(uint8_t seed) {
    Make(3, GetParam());
    if (HasFatalFailure()) return {};  // no pool: the caller stops
    const std::vector<uint8_t> x = Pattern(4096, seed);
    EXPECT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
    EXPECT_TRUE(b_->Unmap(0, GrainBlocks(), Durability::kBuffered).ok());
    EXPECT_TRUE(pool_->Flush().ok());
    PowerCut(FaultInjectionEnv::Loss::kKeepAll, 1);
    return env_.Snapshot("p");
  }
  // After whatever an open at `what` left (every sector of it kept): the
  // next open still has both acknowledged records (b reads the unmap's
  // zeros, not a's data) and a untouched.
  void ExpectBothRecordsAfterACut(uint64_t seed, const std::string& what) {
    PowerCut(FaultInjectionEnv::Loss::kKeepAll, seed);  // the failed open's pool is gone already
    ASSERT_NO_FATAL_FAILURE(Reopen());
    EXPECT_EQ(Read(*b_, 0, 8), std::vector<uint8_t>(4096, 0)) << what;
    EXPECT_EQ(Read(*a_, 0, kLunBytes / kBs), base_) << what;
    a_.reset();
    b_.reset();
    pool_.reset();
  }
  // Durable writes of `d` into c from LBA 0 until the pool refuses one with
  // kNoSpace: an AU a write, then a grain a write. *lba: where the last,
  // refused, write began.
  void FillToTheLine(Lun& c, const std::vector<uint8_t>& d, uint64_t* lba) {
    *lba = 0;
    for (uint64_t step : {uint64_t{kAu / kBs}, GrainBlocks()})
      for (;; *lba += step) {
        Status s = c.Write(*lba, step, d.data(), Durability::kDurable);
        if (!s.ok()) {
          ASSERT_EQ(s.code(), Code::kNoSpace) << s.ToString();
          break;
        }
      }
  }
};
INSTANTIATE_TEST_SUITE_P(Grains, OneSyncGrain, ::testing::Values(4096u, 0u),
                         [](const auto& i) { return i.param ? "G" + std::to_string(i.param) : std::string("AU"); });

// Grain reuse: a first write and an unmap of it in one batch. Once the
// batch is durable the unmap's free is durable too, but nothing vouches for
// the write's checked record yet: were the grain punched (or reused) now,
// replay would check it, find zeros, and drop both acknowledged records (b
// would read a's data again). So the run waits, thinning, for the vouch
// (Core::held_; without HoldUnvouchedLocked the thinner punches it within
// milliseconds and this fails), and comes back once one is durable.
TEST_P(OneSyncGrain, AGrainFreedBeforeItsVouchIsNotPunched) {
  ASSERT_NO_FATAL_FAILURE(Make(3, GetParam()));
  const std::vector<uint8_t> x = Pattern(4096, 50);
  ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Unmap(0, GrainBlocks(), Durability::kBuffered).ok());
  ASSERT_TRUE(pool_->Flush().ok());
  // Long enough for the thinner (2 ms of quiet, 50 ms at most) to punch it.
  for (int i = 0; i < 20 && pool_->Space().thinning_units == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(pool_->Space().thinning_units, 1u) << "held until the vouch";
  // Every unsynced sector kept: a punch may reach the disk without a sync
  // of ours (the file system's journal commits it).
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kKeepAll));
  EXPECT_EQ(Read(*b_, 0, 8), std::vector<uint8_t>(4096, 0)) << "the unmap, acknowledged";
  EXPECT_EQ(Read(*a_, 0, kLunBytes / kBs), base_);
  // Held runs come back once a durable record vouches for their record.
  ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Unmap(0, GrainBlocks(), Durability::kBuffered).ok());
  ASSERT_TRUE(pool_->Flush().ok());
  ASSERT_TRUE(b_->Write(4 * GrainBlocks(), 8, x.data(), Durability::kDurable).ok());  // framed after: vouches
  for (int i = 0; i < 200 && pool_->Space().thinning_units != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(pool_->Space().thinning_units, 0u);
}

// A checkpoint vouches too: every record it holds has left the journal, so
// replay never checks their data again (CheckpointLocked's checked_.Vouch).
// A held run comes back with the first checkpoint after its record, not
// before it. Each round holds a run (a first write and the unmap of its
// grain in one batch), then commits one more record, which vouches: as a
// batch (its `proven`) in most rounds, as a checkpoint (its record no
// longer fits the small journal) in the one this test is after, where the
// checkpoint's Vouch is the only one. Rounds go without waits until the
// journal is nearly full (one journal's worth counted first), then each
// waits out the thinner before its commit: still held. Without the
// checkpoint's Vouch the run stays held after it, until a later batch.
TEST_P(OneSyncGrain, AHeldRunComesBackAfterTheCheckpointThatVouchesForIt) {
  small_journal_ = true;
  ASSERT_NO_FATAL_FAILURE(Make(3, GetParam()));
  Core* core = CoreOfForTest(pool_.get());
  ASSERT_TRUE(pool_->CreateLun("c", kLunBytes, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const std::vector<uint8_t> x = Pattern(4096, 90);
  const uint64_t g = GrainBlocks();
  auto thinning = [&] { return pool_->Space().thinning_units; };
  auto settle = [&] {  // every freed run punched and back
    for (int i = 0; i < 400 && thinning() != 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  std::vector<bool> c_mapped(kLunBytes / kBs / g);
  uint64_t since = 0, per_journal = 0;  // rounds since the last checkpoint, in one journal
  int checkpoints = 0;
  bool vouched_by_a_checkpoint = false;
  uint64_t round = 0;
  for (; round < 40000 && !vouched_by_a_checkpoint; round++, since++) {
    const bool wait = per_journal != 0 && since + 3 >= per_journal;
    if (wait) {
      settle();
      ASSERT_EQ(thinning(), 0u) << "round " << round;
    }
    const uint64_t freezes = core->FreezesForTest();
    ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
    ASSERT_TRUE(b_->Unmap(0, g, Durability::kBuffered).ok());
    ASSERT_TRUE(pool_->Flush().ok());
    const bool held = core->FreezesForTest() == freezes;  // else a checkpoint: vouched at once
    // One more record (a grain of c mapped or unmapped in turn: no space
    // used up), framed after that batch synced: buffered, it vouches for
    // nothing until it is durable.
    const uint64_t k = round % c_mapped.size();
    ASSERT_TRUE((c_mapped[k] ? c->Unmap(k * g, g, Durability::kBuffered)
                             : c->Write(k * g, 8, x.data(), Durability::kBuffered)).ok());
    c_mapped[k] = !c_mapped[k];
    if (wait && held) {
      std::this_thread::sleep_for(std::chrono::milliseconds(80));  // the thinner waits 50 ms at most
      ASSERT_EQ(thinning(), 1u) << "round " << round << ": held until a vouch";
    }
    ASSERT_TRUE(pool_->Flush().ok());
    if (core->FreezesForTest() == freezes) continue;
    vouched_by_a_checkpoint = wait && held;
    if (checkpoints++ > 0 && per_journal == 0) per_journal = since;
    since = 0;
  }
  ASSERT_TRUE(vouched_by_a_checkpoint) << "no checkpoint came right after a held run";
  settle();
  EXPECT_EQ(thinning(), 0u) << "still held after the checkpoint that vouches for it";
  // Back in free space, where the check finds it (neither held nor leaked).
  CheckReport rep = pool_->Check();
  EXPECT_TRUE(rep.clean) << rep.problems[0];
  EXPECT_EQ(rep.leaked_units, 0u);
  RecordProperty("rounds", std::to_string(round));
  RecordProperty("rounds_per_journal", std::to_string(per_journal));
}

// A checkpoint bound of one AU whatever the state: a stand-in for a bug in
// the format's bound, the only way to an open too full for its checkpoint
// (the real bound keeps that room at run time).
class OneAuBound final : public CheckpointCost {
 public:
  uint64_t UnitsBound(uint64_t, uint64_t) const override { return 1; }
};

// The check of an open too full for its checkpoint, whose replayed journal
// ends in a first write's checked record and the unmap that freed its
// grain: the open withholds that grain (PoolSpace::Withhold) until a vouch,
// which here only the first commit after a Grow brings. Meanwhile the
// check counts it where Withhold put it (releasing), neither free nor
// leaked, and finds the pool clean; after the Grow it is back.
TEST_P(OneSyncGrain, ACheckCountsTheGrainsAnOpenTooFullForItsCheckpointWithholds) {
  ASSERT_NO_FATAL_FAILURE(Make(3, GetParam()));
  CoreOfForTest(pool_.get())->SetCheckpointCostForTest(std::make_shared<OneAuBound>());
  const uint64_t g = GrainBlocks();
  const std::vector<uint8_t> d = Pattern(kAu, 100);
  // Many LUNs of two grains, their records still in the journal at the
  // cut (it holds far more than this test appends): the open's replay
  // dirties every one's leaf, so its checkpoint needs many pages.
  constexpr int kLuns = 48;
  std::vector<std::shared_ptr<Lun>> luns;
  for (int i = 0; i < kLuns; i++) {
    ASSERT_TRUE(pool_->CreateLun("l" + std::to_string(i), kLunBytes, kBs).ok());
    luns.push_back(pool_->OpenLun("l" + std::to_string(i)).value());
    ASSERT_TRUE(luns.back()->Write(0, 8, d.data(), Durability::kBuffered).ok());
    ASSERT_TRUE(luns.back()->Write(2 * g, 8, d.data(), Durability::kBuffered).ok());
  }
  ASSERT_TRUE(pool_->Flush().ok());
  ASSERT_TRUE(pool_->CreateLun("c", 64ull << 20, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  uint64_t lba = 0;  // filled to the stand-in's line
  ASSERT_NO_FATAL_FAILURE(FillToTheLine(*c, d, &lba));
  // One grain back (vouched for long ago) for b's first write, which an
  // unmap in the same batch frees: held, durable, at the cut.
  ASSERT_TRUE(c->Unmap(0, g, Durability::kDurable).ok());
  for (int i = 0; i < 400 && pool_->Space().thinning_units != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::vector<uint8_t> x = Pattern(4096, 101);
  ASSERT_TRUE(b_->Write(0, 8, x.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Unmap(0, g, Durability::kBuffered).ok());
  ASSERT_TRUE(pool_->Flush().ok());
  luns.clear();
  c.reset();
  PowerCut(FaultInjectionEnv::Loss::kKeepAll, 1);

  auto p = Pool::Open(&env_, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  pool_ = std::move(p.value());
  Status probe = pool_->CreateLun("probe", kLunBytes, kBs).status();
  ASSERT_EQ(probe.code(), Code::kNoSpace) << "the open had room for its checkpoint: " << probe.ToString();
  EXPECT_EQ(pool_->Space().thinning_units, 1u) << "withheld";
  CheckReport rep = pool_->Check();
  EXPECT_TRUE(rep.clean) << rep.problems[0];
  EXPECT_EQ(rep.leaked_units, 0u);
  uint64_t total = 0, placed = 0;
  CoreOfForTest(pool_.get())->WithSpaceForTest([&](PoolSpace& s) {
    EXPECT_EQ(s.releasing_units(), 1u);
    EXPECT_EQ(s.pending_units(), 1u);  // releasing ones among them
    total = s.total_units();
    placed = s.free_units() + s.mapped_units() + s.meta_units() + s.reserved_units() + s.pending_units() +
             s.quarantined_units();
  });
  EXPECT_EQ(placed, total);
  // Room (a Grow), then a record: its commit is the refused checkpoint,
  // whose Vouch gives the grain back.
  ASSERT_TRUE(pool_->Grow(128ull << 20).ok());
  a_ = pool_->OpenLun("a").value();
  b_ = pool_->OpenLun("b").value();
  ASSERT_TRUE(b_->Write(4 * g, 8, x.data(), Durability::kDurable).ok());
  for (int i = 0; i < 400 && pool_->Space().thinning_units != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(pool_->Space().thinning_units, 0u);
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  EXPECT_EQ(Read(*b_, 0, 8), std::vector<uint8_t>(4096, 0)) << "the unmap, acknowledged";
  EXPECT_EQ(Read(*b_, 4 * g, 8), x);
  EXPECT_EQ(Read(*a_, 0, kLunBytes / kBs), base_);
}

// The same grain across an open: the journal on disk ends in the first
// write's checked record (not vouched for) and the unmap that freed its
// grain, so the open finds the grain free. Punched before the open's
// checkpoint is durable, a cut in between would leave replay checking the
// record against zeros and dropping both acknowledged records. So the open
// holds such grains out of free space until its checkpoint vouches
// (recovery.cc; without that, with every free grain punched first, a cut
// among the open's writes finds b reading a's data). Cut at every mutating
// call of the open.
TEST_P(OneSyncGrain, AnOpenKeepsTheFreedGrainOfAnUnvouchedRecordUntilItsCheckpoint) {
  const std::vector<uint8_t> img = AJournalEndingInAFreedUnvouchedWrite(60);
  ASSERT_FALSE(HasFailure());
  int cuts = 0;
  for (int64_t k = 0; k < 1000; k++) {
    env_.Install("p", img.data(), img.size());
    env_.CrashAfter(k);
    bool crashed;
    {
      auto p = Pool::Open(&env_, "p");
      crashed = env_.crashed();
      if (!crashed) {
        ASSERT_TRUE(p.ok()) << p.status().ToString();
      }
    }
    ASSERT_NO_FATAL_FAILURE(ExpectBothRecordsAfterACut(k, "cut at call " + std::to_string(k)));
    if (!crashed) break;
    cuts++;
  }
  EXPECT_GT(cuts, 3);  // the open writes: punches, checkpoint, superblocks
}

// The same journal, with the open failing at each of its writes and syncs
// in turn (an I/O error: the open's checkpoint fails, or what comes before
// it). The grain freed after the unvouched record must keep its bytes
// whatever failed: the next open replays that record again and checks it.
// Without the hold (recovery.cc punching such grains after its checkpoint
// whether or not the checkpoint succeeded) a failed checkpoint leaves the
// grain zeroed, and the next open drops both acknowledged records: b reads
// a's data again.
TEST_P(OneSyncGrain, AFailedOpenKeepsTheFreedGrainOfAnUnvouchedRecord) {
  const std::vector<uint8_t> img = AJournalEndingInAFreedUnvouchedWrite(61);
  ASSERT_FALSE(HasFailure());
  for (FaultInjectionEnv::Op op :
       {FaultInjectionEnv::Op::kWrite, FaultInjectionEnv::Op::kSync, FaultInjectionEnv::Op::kPunch}) {
    int failed = 0;
    for (uint64_t k = 0; k < 1000; k++) {
      env_.Install("p", img.data(), img.size());
      env_.FailAt(op, k, Code::kIOError);
      bool opened;
      {
        auto p = Pool::Open(&env_, "p");
        opened = p.ok();
      }
      env_.ClearFaults();
      ASSERT_NO_FATAL_FAILURE(
          ExpectBothRecordsAfterACut(k, "op " + std::to_string(int(op)) + " call " + std::to_string(k)));
      if (opened) break;
      failed++;
    }
    // Writes and syncs: the checkpoint's own calls among them; punches:
    // the open's zeroing of free space, one call a free run (and the image's
    // free space may be one run: new grains are packed from the start of
    // free space since allocation sets the checkpoint's room aside at its
    // end).
    const bool one_punch = op == FaultInjectionEnv::Op::kPunch;
    EXPECT_GT(failed, one_punch ? 0 : 1) << "op " << int(op);
  }
}

// A chunk that writes one grain in place and maps one fresh grain takes
// the plain record and its data sync (2 syncs, not 1): no CRC covers the
// in-place data, which a later record of the batch must not outlive.
// Without the in-place test in WriteBytesChunk's `checked` this finds 1.
TEST_F(OneSync, AChunkWithAnInPlaceGrainSyncsItsDataFirst) {
  ASSERT_NO_FATAL_FAILURE(Make(3, 4096));
  ASSERT_TRUE(pool_->CreateLun("c", kLunBytes, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const std::vector<uint8_t> d = Pattern(8192, 70);
  ASSERT_TRUE(c->Write(0, 8, d.data(), Durability::kDurable).ok());    // grain 0, checked
  ASSERT_TRUE(c->Write(64, 8, d.data(), Durability::kDurable).ok());   // vouches for it
  ASSERT_TRUE(c->Write(128, 8, d.data(), Durability::kDurable).ok());  // and that one's durable
  uint64_t before = Syncs();
  ASSERT_TRUE(c->Write(0, 16, d.data(), Durability::kDurable).ok());  // grain 0 in place, grain 1 fresh
  EXPECT_EQ(Syncs() - before, 2u);
  c.reset();
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  c = pool_->OpenLun("c").value();
  EXPECT_EQ(Read(*c, 0, 16), d);
}

// A first write whose grain would hold nothing but zeros takes the plain
// record and its data sync (2 syncs, not 1): a punched grain reads as
// zeros too, so the record's CRC could not tell its data from their
// absence (WriteBytesChunk, the all-zero run). One byte that is not zero
// is enough for the one-sync path, and so is a zero write into shared data
// whose grain keeps some of the source's bytes. Into fresh space, into
// shared data whole, and in part; all of it survives a cut. Without the
// all-zero test the zero writes find 1.
TEST_F(OneSync, AFirstWriteOfNothingButZerosSyncsItsDataFirst) {
  ASSERT_NO_FATAL_FAILURE(Make(3, 4096));
  ASSERT_TRUE(pool_->CreateLun("c", kLunBytes, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const std::vector<uint8_t> zeros(4096, 0);
  std::vector<uint8_t> almost = zeros;
  almost[1234] = 1;
  struct Case {
    Lun* lun;
    uint64_t lba, blocks;
    const std::vector<uint8_t>* data;
    uint64_t syncs;
    const char* what;
  };
  const Case cases[] = {
      {c.get(), 0, 8, &zeros, 2, "zeros into fresh space"},
      {c.get(), 128, 8, &almost, 1, "one byte set, fresh space"},
      {c.get(), 256, 1, &zeros, 2, "512 zero bytes into fresh space (the rest of the grain reads as zeros)"},
      {b_.get(), 0, 8, &zeros, 2, "zeros over a whole shared grain"},
      {b_.get(), 128, 8, &almost, 1, "one byte set, shared data"},
      {b_.get(), 256, 1, &zeros, 1, "512 zero bytes into a shared grain (it keeps the source's other bytes)"},
  };
  for (const Case& k : cases) {
    const uint64_t before = Syncs();
    ASSERT_TRUE(k.lun->Write(k.lba, k.blocks, k.data->data(), Durability::kDurable).ok()) << k.what;
    EXPECT_EQ(Syncs() - before, k.syncs) << k.what;
  }
  c.reset();
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  c = pool_->OpenLun("c").value();
  EXPECT_EQ(Read(*c, 0, 8), zeros);
  EXPECT_EQ(Read(*c, 128, 8), almost);
  EXPECT_EQ(Read(*c, 256, 8), zeros);
  EXPECT_EQ(Read(*b_, 0, 8), zeros);
  EXPECT_EQ(Read(*b_, 128, 8), almost);
  std::vector<uint8_t> grain = Base(256, 8);
  std::fill(grain.begin(), grain.begin() + kBs, 0);
  EXPECT_EQ(Read(*b_, 256, 8), grain);
}

// The seal (Core::ReclaimPending): a pool at its reserve line whose only
// reusable grain is held for a vouch. A write that needs a grain finds none
// free, makes the frees durable, and, since a run is still held, appends a
// seal: the one record that changes nothing, framed after the held
// record's batch synced, so its commit vouches and the run comes back for
// the retry. Without the seal the write fails with kNoSpace.
TEST_P(OneSyncGrain, AWriteAtTheReserveLineGetsTheHeldGrainBackThroughASeal) {
  ASSERT_NO_FATAL_FAILURE(Make(3, GetParam()));
  constexpr uint64_t kLunBlocks = (64ull << 20) / kBs;
  ASSERT_TRUE(pool_->CreateLun("c", kLunBlocks * kBs, kBs).ok());
  auto c = pool_->OpenLun("c").value();
  const uint64_t g = GrainBlocks();
  const std::vector<uint8_t> d = Pattern(kAu, 80);
  uint64_t lba = 0;
  ASSERT_NO_FATAL_FAILURE(FillToTheLine(*c, d, &lba));
  ASSERT_GT(lba, g);
  // One grain back (long vouched for), then taken by a first write that an
  // unmap frees in the same batch: durable, but held for the vouch. (An
  // unmap frees whole grains only: at grain = AU, the 4 KiB write's AU.)
  ASSERT_TRUE(c->Unmap(0, g, Durability::kDurable).ok());
  for (int i = 0; i < 200 && pool_->Space().thinning_units != 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(b_->Write(g, 8, d.data(), Durability::kBuffered).ok());
  ASSERT_TRUE(b_->Unmap(g, g, Durability::kBuffered).ok());
  ASSERT_TRUE(pool_->Flush().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(pool_->Space().thinning_units, 1u) << "held until the vouch";
  Status s = c->Write(0, 8, d.data(), Durability::kDurable);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pool_->Space().thinning_units, 0u);
  EXPECT_EQ(Read(*c, 0, 8), std::vector<uint8_t>(d.begin(), d.begin() + 4096));
  c.reset();
  ASSERT_NO_FATAL_FAILURE(Cut(FaultInjectionEnv::Loss::kDropAll));
  c = pool_->OpenLun("c").value();
  EXPECT_EQ(Read(*c, 0, 8), std::vector<uint8_t>(d.begin(), d.begin() + 4096));
  EXPECT_EQ(Read(*b_, g, 8), std::vector<uint8_t>(4096, 0));
}

}  // namespace
}  // namespace cowstore::store
