// SPDX-License-Identifier: Apache-2.0
// FormatV3's growth (format_v3.h): Grow declares a larger pool by the
// writer rule under a fresh sequence, and its every failing call, in every
// power-loss mode, opens at the old size or the new one, after which the
// pool checkpoints; a failed Grow leaves the slot it was writing in doubt,
// which the next checkpoint rewrites before its own superblock writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/journal_segments.h"
#include "handler/store/meta_format.h"
#include "tests/store/format_v3_pool.h"

namespace cowstore::store {
namespace {

using namespace v3pool;  // NOLINT(build/namespaces): the pool helpers, test-only
using v3pool::Lun;       // over store::Lun
using Op = FaultInjectionEnv::Op;

constexpr uint64_t kGrownSize = kSize + 40 * uint64_t{kAu};  // 40 AUs more
// A checkpoint grows the fixture's journal to at most 1/16 of its pool's
// 127 AUs (JournalTargetAus): the free runs below fit in that.
constexpr uint64_t kJournalShare = 127 / 16;
static_assert(kJournalShare == 7);

// The data area's AUs, as the chosen superblock declares them.
uint64_t UnitsOf(const Opened& o) { return o.v3->choice().sb.units; }
uint64_t UnitsFor(uint64_t size) { return (size - kAu) / kAu; }  // data_offset is one AU

// What Core::Grow does before the format's Grow: the device holds the size.
Status Extend(File* file, uint64_t size) {
  Status s = file->Truncate(size);
  return s.ok() ? file->Sync() : s;
}

// Two LUNs, and the pool's first checkpoint of them (the open's, which
// batches need), on disk and durable; returns the state, *lsn its journal's.
MetaState Populate(FaultInjectionEnv* env, uint64_t* lsn) {
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "a", 300, 1));
  st.AddLun(Lun(2, "b", 120, 2));
  st.next_lun_id = 3;
  Opened o;
  EXPECT_TRUE(Open(env, &o).ok());
  *lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  EXPECT_TRUE(Checkpoint(&o, st, *lsn).ok());
  return st;
}

// CutEachCall's setup: the pool `base` installed.
std::function<void(FaultInjectionEnv*)> InstallOf(const std::vector<uint8_t>& base) {
  return [&base](FaultInjectionEnv* env) { env->Install("p", base.data(), base.size()); };
}

class FormatV3Grow : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = env_.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), Id(9), kAu, kGrain, kSize, kJournal, 80).ok());
  }
  FaultInjectionEnv env_;
};

// ------------------------------------------------------------------ Grow

// Grown, then reopened: the new size, the same checkpoint and journal (a
// batch committed before the Grow and one after replay), a sequence above
// the previous, and both slots holding it.
TEST_F(FormatV3Grow, AGrownPoolReopensAtItsNewSize) {
  uint64_t lsn;
  MetaState st = Populate(&env_, &lsn);
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  lsn += kLsnGapAfterOpen;
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());  // the open's, before any batch, jumping the LSNs
  const Record one = MapOf(2001, 1500, 3);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({one}, lsn, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, one, nullptr, nullptr).ok());
  const uint64_t seq = o.format->superblock_seq();
  ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  Status s = o.format->Grow(o.file.get(), kGrownSize);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(UnitsOf(o), UnitsFor(kGrownSize));
  EXPECT_GT(o.format->superblock_seq(), seq);
  EXPECT_TRUE(o.v3->choice().redundant);
  const Record two = MapOf(3001, 1700, 2);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({two}, lsn + 1, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, two, nullptr, nullptr).ok());
  const uint64_t grown_seq = o.format->superblock_seq();
  o = Opened();

  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  EXPECT_EQ(UnitsOf(back), UnitsFor(kGrownSize));
  EXPECT_EQ(back.format->superblock_seq(), grown_seq);
  EXPECT_TRUE(back.v3->choice().redundant) << "both slots hold the grown superblock";
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, lsn + 2);
}

// Core has checked the size, but the format still refuses what it cannot
// declare, before writing anything: no whole AU more (the same size, less
// than an AU more, smaller), more than PoolUnitsRuleV3 allows, and a Grow
// before LoadState.
TEST_F(FormatV3Grow, RefusesASizeItCannotDeclareWritingNothing) {
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  const uint64_t calls = env_.mutating_calls();
  const uint64_t seq = o.format->superblock_seq();
  for (uint64_t size : {kSize, kSize + kAu - 1, kSize - kAu, uint64_t{0}, uint64_t{1} << 63, ~uint64_t{0}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    Status s = o.format->Grow(o.file.get(), size);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  }
  EXPECT_EQ(env_.mutating_calls(), calls);
  EXPECT_EQ(o.format->superblock_seq(), seq);
  EXPECT_EQ(UnitsOf(o), UnitsFor(kSize));
  // One whole AU more is a size it declares.
  ASSERT_TRUE(o.format->Grow(o.file.get(), kSize + kAu).ok());
  EXPECT_EQ(UnitsOf(o), UnitsFor(kSize) + 1);

  FormatV3 unloaded(kGrownSize);
  EXPECT_EQ(unloaded.Grow(o.file.get(), kGrownSize).code(), Code::kInvalidArgument);
}

// Each Env call of a Grow failing, in each power-loss mode (or none: the
// same format retries): the pool opens at the old size or the new one,
// with its checkpoint, never neither; a checkpoint after the reopen (or the
// retry) works and opens again.
TEST_F(FormatV3Grow, EveryFailedCallOpensTheOldOrTheNewSize) {
  uint64_t lsn;
  const MetaState st = Populate(&env_, &lsn);
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  const Op kOps[] = {Op::kWrite, Op::kSync};
  uint64_t clean_calls[2];
  {
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    const uint64_t w = env.calls(Op::kWrite), s = env.calls(Op::kSync);
    ASSERT_TRUE(o.format->Grow(o.file.get(), kGrownSize).ok());
    clean_calls[0] = env.calls(Op::kWrite) - w;
    clean_calls[1] = env.calls(Op::kSync) - s;
    ASSERT_EQ(clean_calls[0], 2u) << "one write per slot";
    ASSERT_EQ(clean_calls[1], 3u) << "one first (the chosen copy may be in the cache only), one per slot";
  }
  int old_size = 0, new_size = 0;
  for (int k = 0; k < 2; k++) {
    for (uint64_t nth = 0; nth < clean_calls[k]; nth++) {
      for (int loss = -1; loss < 4; loss++) {  // -1: no power loss, the same format retries
        for (uint64_t seed = 0; seed < (loss >= 2 ? 4u : 1u); seed++) {
          SCOPED_TRACE("op " + std::to_string(k) + " call " + std::to_string(nth) + " loss " +
                       std::to_string(loss) + " seed " + std::to_string(seed));
          FaultInjectionEnv env;
          env.Install("p", base.data(), base.size());
          Opened o;
          ASSERT_TRUE(Open(&env, &o).ok());
          const uint64_t seq_before = o.format->superblock_seq();
          env.FailAt(kOps[k], nth, Code::kIOError);
          ASSERT_EQ(o.format->Grow(o.file.get(), kGrownSize).code(), Code::kIOError);
          EXPECT_EQ(UnitsOf(o), UnitsFor(kSize)) << "the format keeps the old size";
          EXPECT_EQ(o.format->superblock_seq(), seq_before);
          if (loss < 0) {
            ASSERT_TRUE(o.format->Grow(o.file.get(), kGrownSize).ok());
            // A failure after a slot write took seq_before + 1 (the first
            // sync, before any, spends nothing).
            const bool wrote = !(kOps[k] == Op::kSync && nth == 0);
            EXPECT_GT(o.format->superblock_seq(), seq_before + (wrote ? 1 : 0)) << "the retry's sequence is its own";
            ASSERT_TRUE(Checkpoint(&o, st, lsn + kLsnGapAfterOpen).ok());
            o = Opened();
            Opened back;
            ASSERT_TRUE(Open(&env, &back).ok());
            EXPECT_EQ(UnitsOf(back), UnitsFor(kGrownSize));
            ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
            continue;
          }
          o = Opened();
          env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
          Opened back;
          Status why = Open(&env, &back);
          ASSERT_TRUE(why.ok()) << why.ToString();
          const uint64_t units = UnitsOf(back);
          if (units == UnitsFor(kGrownSize)) {
            new_size++;
          } else {
            old_size++;
            EXPECT_EQ(units, UnitsFor(kSize));
          }
          ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
          EXPECT_EQ(back.meta.end.next_lsn, lsn);
          // It checkpoints, and that checkpoint opens at the size it had.
          ASSERT_TRUE(Checkpoint(&back, st, lsn + kLsnGapAfterOpen).ok());
          back = Opened();
          Opened again;
          ASSERT_TRUE(Open(&env, &again).ok());
          EXPECT_EQ(UnitsOf(again), units);
          ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, again.st));
          EXPECT_EQ(again.meta.end.next_lsn, lsn + kLsnGapAfterOpen);
        }
      }
    }
  }
  EXPECT_GT(old_size, 0);
  EXPECT_GT(new_size, 0) << "a failure at the second slot leaves the first slot's copy";
}

// A Grow whose sync fails leaves a slot's write in doubt: the first slot's
// (unsynced, maybe torn by a cut) when the first sync fails, the second's
// (the first holding the new superblock) when the last one does. The
// checkpoint after it, in the same session, must neither write its first
// slot while the other may be torn (it rewrites the slot in doubt first)
// nor reuse the failed Grow's sequence (two copies of one sequence are
// "two writers" to the chooser), whether the session had checkpointed
// before (no sequence to spend) or not. Cut at every call of that
// checkpoint in every loss mode, and with every slot written since the
// last sync torn, the pool opens, old state or new, at either size.
TEST_F(FormatV3Grow, ACheckpointAfterAFailedGrowCutAtEveryCallStillOpens) {
  uint64_t lsn;
  const MetaState prev = Populate(&env_, &lsn);
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  MetaState next = Copy(prev);
  next.AddLun(Lun(3, "c", 80, 3));
  next.next_lun_id = 4;
  const uint64_t next_lsn = lsn + 2 * kLsnGapAfterOpen;
  for (const bool checkpointed : {false, true}) {
    for (const uint64_t slot_sync : {0u, 1u}) {
      SCOPED_TRACE(std::string(checkpointed ? "after a checkpoint" : "after the open") + ", Grow's slot sync " +
                   std::to_string(slot_sync) + " failed");
      // After the open, Grow syncs first (the chosen copy may be in the
      // cache only); after a checkpoint both slots are durable.
      const uint64_t failed_sync = slot_sync + (checkpointed ? 0 : 1);
      auto failed_grow = [&](Opened* o, FaultInjectionEnv* env) {
        if (checkpointed) {
          EXPECT_TRUE(Checkpoint(o, prev, lsn + kLsnGapAfterOpen).ok());
        }
        env->FailAt(Op::kSync, failed_sync, Code::kIOError);
        EXPECT_EQ(o->format->Grow(o->file.get(), kGrownSize).code(), Code::kIOError);
      };
      auto checkpoint = [&](Opened* o) { return Checkpoint(o, next, next_lsn); };
      {
        // Uncut, its pages and superblock take a sequence of their own: it
        // spends one above the failed Grow's first.
        FaultInjectionEnv env;
        env.Install("p", base.data(), base.size());
        Opened o;
        ASSERT_TRUE(Open(&env, &o).ok());
        failed_grow(&o, &env);
        const uint64_t failed_seq = o.format->superblock_seq() + 1;
        ASSERT_TRUE(checkpoint(&o).ok());
        EXPECT_GT(o.format->superblock_seq(), failed_seq + 1);
      }
      int old_state = 0, new_state = 0;
      CutEachCall(InstallOf(base), failed_grow, checkpoint, 3, [&](const Opened& back) {
        const uint64_t units = UnitsOf(back);
        EXPECT_TRUE(units == UnitsFor(kSize) || units == UnitsFor(kGrownSize)) << units;
        if (back.meta.end.next_lsn == next_lsn) {
          new_state++;
          EXPECT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
        } else {
          old_state++;
          EXPECT_EQ(back.meta.end.next_lsn, checkpointed ? lsn + kLsnGapAfterOpen : lsn);
          EXPECT_NO_FATAL_FAILURE(ExpectSameState(prev, back.st));
        }
      });
      EXPECT_GT(old_state, 0);
      EXPECT_GT(new_state, 0);
    }
  }
}

// A pool whose slot seq % 2 is damaged opens from the other slot, its only
// valid copy, which a Grow's first write (slot seq + 1 % 2) would replace:
// cut at every call of that Grow, in every loss mode and with every slot
// written since the last sync torn, the pool opens at the old size or the
// new one (the Grow rewrote the damaged slot first).
TEST_F(FormatV3Grow, AGrowAfterADamagedSlotCutAtEveryCallStillOpens) {
  uint64_t lsn;
  const MetaState st = Populate(&env_, &lsn);
  uint64_t seq;
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
    seq = o.format->superblock_seq();
  }
  env_.Corrupt("p", (seq % 2) * kSuperblockSlot + 64, 16);
  const std::vector<uint8_t> base = env_.Snapshot("p");
  auto damaged = [](Opened* o, FaultInjectionEnv*) { EXPECT_FALSE(o->v3->choice().redundant); };
  auto grow = [](Opened* o) { return o->format->Grow(o->file.get(), kGrownSize); };
  int old_size = 0, new_size = 0;
  CutEachCall(InstallOf(base), damaged, grow, 3, [&](const Opened& back) {
    (UnitsOf(back) == UnitsFor(kGrownSize) ? new_size : old_size)++;
    EXPECT_TRUE(UnitsOf(back) == UnitsFor(kSize) || UnitsOf(back) == UnitsFor(kGrownSize));
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
    EXPECT_EQ(back.meta.end.next_lsn, lsn);
  });
  EXPECT_GT(old_size, 0);
  EXPECT_GT(new_size, 0);
}

// A process that died right after a Grow's first slot write leaves that
// copy in the cache only; the next open (same cache, no power cut) chooses
// it, and its Grow must make it durable before writing the other slot, or
// both slots are in flight at once. Cut at every call of that Grow, in
// every loss mode and with every slot in flight torn: the pool opens, at
// one of the three sizes.
TEST_F(FormatV3Grow, AGrowAfterAProcessDiedInOneStillOpens) {
  constexpr uint64_t kGrownTwice = kGrownSize + 8 * uint64_t{kAu};
  uint64_t lsn;
  const MetaState st = Populate(&env_, &lsn);
  {
    Opened o;
    ASSERT_TRUE(Open(&env_, &o).ok());
    ASSERT_TRUE(Extend(o.file.get(), kGrownTwice).ok());
  }
  const std::vector<uint8_t> base = env_.Snapshot("p");
  auto crashed = [&](FaultInjectionEnv* env) {
    env->Install("p", base.data(), base.size());
    {
      Opened o;
      EXPECT_TRUE(Open(env, &o).ok());
      env->CrashAfter(2);  // the sync before it and the first slot's write pass, its sync fails
      EXPECT_FALSE(o.format->Grow(o.file.get(), kGrownSize).ok());
    }
    env->ClearFaults();  // the process is gone; the cache holds that write
  };
  {
    FaultInjectionEnv env;
    crashed(&env);
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    ASSERT_EQ(UnitsOf(o), UnitsFor(kGrownSize)) << "the reopen chose the copy in the cache";
    ASSERT_GT(env.unsynced_sectors("p"), 0u);
  }
  auto grow = [](Opened* o) { return o->format->Grow(o->file.get(), kGrownTwice); };
  int opened = 0;
  CutEachCall(crashed, [](Opened*, FaultInjectionEnv*) {}, grow, 3, [&](const Opened& back) {
    opened++;
    const uint64_t units = UnitsOf(back);
    EXPECT_TRUE(units == UnitsFor(kSize) || units == UnitsFor(kGrownSize) || units == UnitsFor(kGrownTwice))
        << units;
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
    EXPECT_EQ(back.meta.end.next_lsn, lsn);
  });
  EXPECT_GT(opened, 0);
}

// A Grow between two checkpoints: the second may put its pages in the new
// AUs (the format takes AUs up to the new size), the journal keeps the
// batches around it, and the pool reopens at the new size with the second
// checkpoint's state.
TEST_F(FormatV3Grow, ACheckpointAfterAGrowUsesTheNewAusAndReopens) {
  uint64_t lsn;
  MetaState st = Populate(&env_, &lsn);
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  lsn += kLsnGapAfterOpen;  // the open's checkpoint jumps
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  const Record one = MapOf(2001, 1500, 3);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({one}, lsn, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, one, nullptr, nullptr).ok());
  ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  ASSERT_TRUE(o.format->Grow(o.file.get(), kGrownSize).ok());
  const Record two = MapOf(3001, 1700, 2);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({two}, lsn + 1, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, two, nullptr, nullptr).ok());

  st.AddLun(Lun(3, "c", 6000, 3));  // more pages than the chunk's free ones
  st.next_lun_id = 4;
  const uint64_t next_lsn = lsn + 20;
  FrozenCheckpoint f = o.v3->Freeze(st);
  ASSERT_GT(f.meta_units, 0u);
  std::vector<uint64_t> units;  // the last AUs of the grown pool
  for (uint64_t i = 0; i < f.meta_units; i++) units.push_back(UnitsFor(kGrownSize) - 1 - i);
  EXPECT_EQ(o.format->WriteCheckpoint(o.file.get(), f, {UnitsFor(kGrownSize)}, next_lsn).code(),
            Code::kInvalidArgument)
      << "an AU past the new size";
  Status s = o.format->WriteCheckpoint(o.file.get(), f, units, next_lsn);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<uint64_t> meta = o.v3->meta_units();
  EXPECT_GE(meta.back(), UnitsFor(kSize)) << "its pages lie in the new AUs";
  o = Opened();

  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  EXPECT_EQ(UnitsOf(back), UnitsFor(kGrownSize));
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
  EXPECT_EQ(back.meta.end.next_lsn, next_lsn);
  EXPECT_EQ(back.meta.meta_units, meta);
}

// ------------------------------------------------------ the journal grown

// Records of LUN 1 that frame to exactly `bytes` (one kMap record of n
// runs, 33 + 24 n bytes, then seals of 25), mapping from `lba` on.
std::vector<Record> RecordsOfBytes(uint64_t bytes, uint64_t lba) {
  for (uint64_t seals = 0; seals < 24; seals++) {
    const uint64_t rest = bytes - kRecordHeader * seals;
    if (rest < 33 + 24 || (rest - 33) % 24 != 0) continue;
    std::vector<Record> out{MapOf(lba, 5, (rest - 33) / 24)};
    Record seal;
    seal.type = RecType::kSeal;
    out.insert(out.end(), seals, seal);
    return out;
  }
  ADD_FAILURE() << "no records of " << bytes << " bytes";
  return {};
}

// The pool of the fixture: its journal one AU (AU 1), after it AUs free.
// Grown by a checkpoint, in place (the space's run follows the journal:
// JournalExtentsJoin lengthens its one extent) or by a new extent (a run
// elsewhere): the superblock names the new list, meta_units() holds its
// AUs, the runs taken are reported and the space no longer holds them; a
// batch longer than the old journal crosses into the new AUs, and a reopen
// replays it over the grown ring. Each list is kJournalShare AUs.
TEST_F(FormatV3Grow, ACheckpointGrowsTheJournalInPlaceOrByANewExtent) {
  uint64_t lsn;
  MetaState st0 = Populate(&env_, &lsn);
  const uint64_t start = lsn + kLsnGapAfterOpen;  // each open's checkpoint jumps
  const std::vector<uint8_t> base = env_.Snapshot("p");
  struct Case {
    const char* name;
    std::map<uint64_t, uint64_t> free;
    std::vector<JournalExtent> journal;
  };
  const Case cases[] = {
      {"in place", {{2, 6}}, {{1, 7}}},
      {"a new extent", {{40, 6}}, {{1, 1}, {40, 6}}},
      {"in place and a new extent", {{2, 4}, {60, 2}}, {{1, 5}, {60, 2}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    MetaState st = Copy(st0);
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    ASSERT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, 1}}));
    RunSpace space(c.free);
    JournalGrowth growth;
    Status s = GrowingCheckpoint(&o, st, start, &space, &growth);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const SuperblockV3& sb = o.v3->choice().sb;
    EXPECT_EQ(sb.journal, c.journal);
    EXPECT_EQ(sb.journal_start, 0u);
    EXPECT_TRUE(growth.freed.empty());
    std::vector<uint64_t> grown = AusOf(c.journal);
    std::vector<uint64_t> taken = AusOf(growth.allocated);
    grown.erase(grown.begin());  // AU 1 was the journal's
    EXPECT_EQ(taken, grown);
    for (uint64_t au : taken) EXPECT_FALSE(space.Holds(au)) << au;
    const std::vector<uint64_t> meta = o.v3->meta_units();
    EXPECT_TRUE(std::includes(meta.begin(), meta.end(), taken.begin(), taken.end()));
    EXPECT_TRUE(o.format->journal_empty());
    // 100 KiB of records: past the old journal's 64 KiB.
    const std::vector<Record> records = RecordsOfBytes(100 << 10, 3001);
    const JournalBatch b = BatchOf(records, start, o.format->durable_lsn());
    ASSERT_EQ(b.bytes.size(), 100u << 10);
    ASSERT_TRUE(o.format->Fits(b.bytes.size()));
    ASSERT_TRUE(o.format->CommitBatch(o.file.get(), b).ok());
    for (const Record& r : records) ASSERT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
    o = Opened();

    Opened back;
    ASSERT_TRUE(Open(&env, &back).ok());
    EXPECT_EQ(back.v3->choice().sb.journal, c.journal);
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
    EXPECT_EQ(back.meta.end.next_lsn, start + records.size());
    EXPECT_EQ(back.meta.end.tail, 100u << 10);
    EXPECT_FALSE(back.meta.end.damaged);
    EXPECT_EQ(back.meta.meta_units, meta);
  }
}

// A JournalSpace with nothing free: the list stays, nothing is taken or
// reported (a smaller journal means more checkpoints, never a failed one).
TEST_F(FormatV3Grow, ACheckpointWithoutRoomOrNeedKeepsTheJournal) {
  uint64_t lsn;
  MetaState st = Populate(&env_, &lsn);
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  RunSpace none({});
  JournalGrowth growth;
  ASSERT_TRUE(GrowingCheckpoint(&o, st, lsn + kLsnGapAfterOpen, &none, &growth).ok());
  EXPECT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, 1}}));
  EXPECT_TRUE(growth.allocated.empty());
  EXPECT_TRUE(growth.freed.empty());
}

// A space handing out an AU of the checkpoint's own (the metadata chunk,
// the journal, an AU given for pages) is refused before any write, the run
// given back.
TEST_F(FormatV3Grow, ARunTakenFromTheCheckpointsOwnAusIsRefused) {
  uint64_t lsn;
  MetaState st = Populate(&env_, &lsn);
  st.AddLun(Lun(3, "c", 6000, 3));  // pages past the chunk: AUs given
  st.next_lun_id = 4;
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  FrozenCheckpoint f = o.v3->Freeze(st);
  ASSERT_GT(f.meta_units, 0u);
  const std::vector<uint64_t> units = FreeAus(*o.v3, f.meta_units);
  for (uint64_t au : {uint64_t{0}, uint64_t{1}, units.front()}) {
    SCOPED_TRACE("AU " + std::to_string(au));
    RunSpace space({{au, 1}});
    JournalGrowth growth;
    const uint64_t calls = env_.mutating_calls();
    Status s = o.v3->WriteCheckpoint(o.file.get(), f, units, lsn + kLsnGapAfterOpen, &space, &growth);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_EQ(env_.mutating_calls(), calls);
    EXPECT_EQ(space.runs(), (std::map<uint64_t, uint64_t>{{au, 1}}));
  }
  RunSpace space({{units.back() + 1, 4}});
  Status s = o.v3->WriteCheckpoint(o.file.get(), f, units, lsn + kLsnGapAfterOpen, &space, nullptr);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// The target follows the map (3.4: 48 bytes an extent above 16 MiB): a
// pool created with a 16 MiB journal keeps it for a small map, and a map
// of 360,000 extents (16.5 MiB of journal) grows it to exactly
// JournalTargetAus of them, in place. The pool is large enough (272 MiB)
// that its share (1/16) allows that.
TEST(FormatV3GrowTarget, TheJournalGrowsToTheTargetOfTheFrozenMaps) {
  constexpr uint64_t kJournal16 = 16 << 20;  // 256 AUs
  constexpr uint64_t kBig = 272 << 20;       // 4351 AUs: a share of 271
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), Id(9), kAu, kGrain, kBig, kJournal16, 80).ok());
  }
  Opened o;
  ASSERT_TRUE(Open(&env, &o).ok());
  const uint64_t after_journal = 1 + 256;
  MetaState st;
  st.au = kGrain;
  st.AddLun(Lun(1, "small", 100, 1));
  st.next_lun_id = 5;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  {
    RunSpace space({{after_journal, 100}});
    JournalGrowth growth;
    ASSERT_TRUE(GrowingCheckpoint(&o, st, lsn, &space, &growth).ok());
    EXPECT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, 256}})) << "16 MiB is the least";
    EXPECT_TRUE(growth.allocated.empty());
  }
  for (uint32_t id = 2; id <= 4; id++) st.AddLun(Lun(id, "big" + std::to_string(id), 90000, id));
  st.Find(1)->map.Remove(0, ExtentMap::kMaxLba, nullptr);
  for (uint64_t i = 0; i < 90000; i++) ASSERT_TRUE(st.Find(1)->map.Insert(2 * i, (i * 5) % kPhysGrains, 1).ok());
  const uint64_t target = JournalTargetAus(360000, kAu, UnitsOf(o), 256);
  ASSERT_EQ(target, 264u);
  RunSpace space({{after_journal, 100}});
  JournalGrowth growth;
  lsn += 5;
  Status s = GrowingCheckpoint(&o, st, lsn, &space, &growth);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, target}}));
  EXPECT_EQ(growth.allocated, (std::vector<JournalExtent>{{after_journal, target - 256}}));
  EXPECT_EQ(space.runs(), (std::map<uint64_t, uint64_t>{{1 + target, 100 - (target - 256)}}));
}

// The pool's share caps the map's target: with the same 360,000 extents
// (264 AUs of journal), a 48 MiB pool's one-AU journal stops at 1/16 of
// its 767 AUs and stays there at the next checkpoint, while a 272 MiB
// pool's grows on to the map's target.
TEST(FormatV3GrowTarget, ASmallPoolsJournalStopsAtItsShare) {
  auto grown = [](uint64_t size) -> uint64_t {
    FaultInjectionEnv env;
    {
      auto f = env.OpenLocked("p", Env::Mode::kCreate);
      EXPECT_TRUE(f.ok());
      EXPECT_TRUE(FormatV3::Create(f->get(), Id(9), kAu, kGrain, size, kJournal, 80).ok());
    }
    Opened o;
    EXPECT_TRUE(Open(&env, &o).ok());
    MetaState st;
    st.au = kGrain;
    for (uint32_t id = 1; id <= 4; id++) st.AddLun(Lun(id, "big" + std::to_string(id), 90000, id));
    st.next_lun_id = 5;
    uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
    // Free runs past the one-AU journal, then at the pool's end (the
    // first checkpoint's pages lie between).
    for (const auto& free : {std::map<uint64_t, uint64_t>{{2, 300}}, {{UnitsOf(o) - 100, 100}}}) {
      RunSpace space(free);
      Status s = GrowingCheckpoint(&o, st, lsn, &space, nullptr);
      EXPECT_TRUE(s.ok()) << s.ToString();
      lsn += 5;
    }
    uint64_t aus = 0;
    for (const JournalExtent& x : o.v3->choice().sb.journal) aus += x.aus;
    return aus;
  };
  EXPECT_EQ(grown(48 << 20), 767u / 16) << "the share bounds it";
  EXPECT_EQ(grown(272 << 20), 264u) << "the map's target bounds it";
}

// A pool checkpointed and holding a committed batch in its one-AU journal:
// *prev the state with the batch, *lsn the LSN after it.
std::vector<uint8_t> PoolWithABatch(FaultInjectionEnv* env, MetaState* prev, uint64_t* lsn) {
  *prev = Populate(env, lsn);
  Opened o;
  EXPECT_TRUE(Open(env, &o).ok());
  *lsn += kLsnGapAfterOpen;  // the open's checkpoint jumps
  EXPECT_TRUE(Checkpoint(&o, *prev, *lsn).ok());
  const std::vector<Record> records{MapOf(2001, 1500, 3), MapOf(3001, 1600, 40)};
  EXPECT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf(records, *lsn, o.format->durable_lsn())).ok());
  for (const Record& r : records) EXPECT_TRUE(ApplyRecord(prev, r, nullptr, nullptr).ok());
  *lsn += records.size();
  o = Opened();
  return env->Snapshot("p");
}

// Each Env call of a growing checkpoint failing, without a power cut: the
// runs it took are back in the space, the format keeps its journal (list,
// meta_units(), a batch refused as after any failed checkpoint), and a
// retry with the same space grows it and reopens with the new list.
TEST_F(FormatV3Grow, AFailedGrowingCheckpointGivesItsRunsBack) {
  MetaState prev;
  uint64_t lsn;
  const std::vector<uint8_t> base = PoolWithABatch(&env_, &prev, &lsn);
  MetaState next = Copy(prev);
  next.AddLun(Lun(3, "c", 80, 3));
  next.next_lun_id = 4;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen;
  const std::map<uint64_t, uint64_t> free{{2, 2}, {40, 4}};  // kJournalShare with the journal
  // The longest run first (RunSpace, as FreeSpace): AU 2's run then joins
  // no extent, and the list goes on after AU 43.
  const std::vector<JournalExtent> grown{{1, 1}, {40, 4}, {2, 2}};
  for (const Op op : {Op::kWrite, Op::kSync, Op::kPunch}) {
    uint64_t clean = 0;
    {
      FaultInjectionEnv env;
      env.Install("p", base.data(), base.size());
      Opened o;
      ASSERT_TRUE(Open(&env, &o).ok());
      RunSpace space(free);
      const uint64_t at = env.calls(op);
      ASSERT_TRUE(GrowingCheckpoint(&o, next, next_lsn, &space, nullptr).ok());
      clean = env.calls(op) - at;
      EXPECT_EQ(o.v3->choice().sb.journal, grown);
    }
    if (op == Op::kPunch) {
      EXPECT_EQ(clean, 2u) << "one punch per new run";
    }
    for (uint64_t nth = 0; nth < clean; nth++) {
      SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " call " + std::to_string(nth));
      FaultInjectionEnv env;
      env.Install("p", base.data(), base.size());
      Opened o;
      ASSERT_TRUE(Open(&env, &o).ok());
      const std::vector<uint64_t> meta = o.v3->meta_units();
      RunSpace space(free);
      JournalGrowth growth;
      env.FailAt(op, nth, Code::kIOError);
      ASSERT_EQ(GrowingCheckpoint(&o, next, next_lsn, &space, &growth).code(), Code::kIOError);
      EXPECT_EQ(space.runs(), free);
      EXPECT_TRUE(growth.allocated.empty() && growth.freed.empty());
      EXPECT_EQ(o.v3->meta_units(), meta);
      EXPECT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, 1}}));
      EXPECT_EQ(o.format->CommitBatch(o.file.get(), BatchOf({MapOf(5001, 9, 1)}, next_lsn, 0)).code(),
                Code::kInvalidArgument);
      Status s = GrowingCheckpoint(&o, next, next_lsn, &space, &growth);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(o.v3->choice().sb.journal, grown);
      EXPECT_EQ(AusOf(growth.allocated), AusOf({{40, 4}, {2, 2}}));
      EXPECT_TRUE(space.runs().empty());
      // The ring restarted at the new list's start: a batch longer than the
      // old journal replays from there.
      MetaState want = Copy(next);
      const std::vector<Record> records = RecordsOfBytes(100 << 10, 7001);
      ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf(records, next_lsn, o.format->durable_lsn())).ok());
      for (const Record& r : records) ASSERT_TRUE(ApplyRecord(&want, r, nullptr, nullptr).ok());
      o = Opened();
      Opened back;
      ASSERT_TRUE(Open(&env, &back).ok());
      EXPECT_EQ(back.v3->choice().sb.journal, grown);
      EXPECT_EQ(back.v3->choice().sb.journal_start, 0u);
      EXPECT_EQ(back.meta.end.next_lsn, next_lsn + records.size());
      ASSERT_NO_FATAL_FAILURE(ExpectSameState(want, back.st));
    }
  }
}

// A power cut at each call of a checkpoint that grows the journal (in
// place; by a new extent), in every loss mode and with every slot written
// since the last sync torn: the pool opens with the old journal, replaying
// the batch committed in it, or with the new one and the new checkpoint.
TEST_F(FormatV3Grow, APowerCutInAGrowingCheckpointOpensTheOldOrTheNewJournal) {
  MetaState prev;
  uint64_t lsn;
  const std::vector<uint8_t> base = PoolWithABatch(&env_, &prev, &lsn);
  MetaState next = Copy(prev);
  next.AddLun(Lun(3, "c", 80, 3));
  next.next_lun_id = 4;
  const uint64_t next_lsn = lsn + kLsnGapAfterOpen;
  const std::vector<JournalExtent> old_journal{{1, 1}};
  struct Case {
    std::map<uint64_t, uint64_t> free;
    std::vector<JournalExtent> journal;
  };
  const Case cases[] = {{{{2, 6}}, {{1, 7}}}, {{{40, 6}}, {{1, 1}, {40, 6}}}};  // kJournalShare AUs
  for (const Case& c : cases) {
    SCOPED_TRACE("to " + std::to_string(c.journal.size()) + " extents");
    auto attempt = [&](Opened* o) {
      RunSpace space(c.free);
      Status s = GrowingCheckpoint(o, next, next_lsn, &space, nullptr);
      if (s.ok()) {
        EXPECT_EQ(o->v3->choice().sb.journal, c.journal);
      }
      return s;
    };
    int old_state = 0, new_state = 0;
    CutEachCall(InstallOf(base), [](Opened*, FaultInjectionEnv*) {}, attempt, 4, [&](const Opened& back) {
      if (back.meta.end.next_lsn == next_lsn) {
        new_state++;
        EXPECT_EQ(back.v3->choice().sb.journal, c.journal);
        EXPECT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
      } else {
        old_state++;
        EXPECT_EQ(back.meta.end.next_lsn, lsn) << "the committed batch replays";
        EXPECT_EQ(back.v3->choice().sb.journal, old_journal);
        EXPECT_NO_FATAL_FAILURE(ExpectSameState(prev, back.st));
      }
      EXPECT_FALSE(back.meta.end.damaged);
    });
    EXPECT_GT(old_state, 0);
    EXPECT_GT(new_state, 0);
  }
}

// A run new to the journal held data, and data can frame as a record (a
// guest writes anything): here a CRC-valid record with the very LSN the
// grown ring expects once its first 64 KiB (the old AU) are full, at the
// start of the AU the journal takes. The checkpoint clears it: a reopen
// with the ring empty finds no newer record ahead, and a batch filling the
// old AU exactly replays alone, the planted record never applied.
TEST_F(FormatV3Grow, AStaleRecordInANewSegmentIsNeverReplayed) {
  uint64_t lsn;
  MetaState st = Populate(&env_, &lsn);
  Opened o;
  ASSERT_TRUE(Open(&env_, &o).ok());
  const SuperblockV3 sb = o.v3->choice().sb;
  const uint64_t new_au = 40;
  const std::vector<Record> fill = RecordsOfBytes(sb.capacity(), 3001);  // the old AU, exactly
  const uint64_t start = lsn + kLsnGapAfterOpen;           // the first open's checkpoint
  const uint64_t start2 = start + kLsnGapAfterOpen;        // the next open's
  const uint64_t stale_lsn = start2 + fill.size();
  const Record planted = MapOf(9001, 77, 5);
  std::string img;
  FrameRecord(planted, stale_lsn, stale_lsn - 1, &img);
  const uint64_t at = sb.data_offset + new_au * sb.au;
  ASSERT_TRUE(o.file->Write(at, img.size(), img.data()).ok());
  ASSERT_TRUE(o.file->Sync().ok());

  RunSpace space({{new_au, 4}});
  JournalGrowth growth;
  ASSERT_TRUE(GrowingCheckpoint(&o, st, start, &space, &growth).ok());
  ASSERT_EQ(o.v3->choice().sb.journal, (std::vector<JournalExtent>{{1, 1}, {new_au, 4}}));
  const std::vector<uint8_t> grown = env_.Snapshot("p");
  EXPECT_TRUE(std::all_of(grown.begin() + at, grown.begin() + at + sb.au, [](uint8_t b) { return b == 0; }))
      << "the new AU is cleared";
  o = Opened();
  {
    Opened back;
    ASSERT_TRUE(Open(&env_, &back).ok());
    EXPECT_EQ(back.meta.end.next_lsn, start);
    EXPECT_FALSE(back.meta.end.newer_record_follows);
    EXPECT_FALSE(back.meta.end.damaged);
    ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
    ASSERT_TRUE(Checkpoint(&back, st, start2).ok());  // the open's, in place: the list is unchanged
    ASSERT_EQ(back.v3->choice().sb.journal_start, 0u);
    const JournalBatch b = BatchOf(fill, start2, back.format->durable_lsn());
    ASSERT_EQ(b.bytes.size(), sb.capacity());
    ASSERT_TRUE(back.format->CommitBatch(back.file.get(), b).ok());
    for (const Record& r : fill) ASSERT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
  }
  Opened back;
  ASSERT_TRUE(Open(&env_, &back).ok());
  EXPECT_EQ(back.meta.end.next_lsn, stale_lsn) << "replay stops where the planted record was";
  EXPECT_EQ(back.meta.end.tail, sb.capacity());
  EXPECT_FALSE(back.meta.end.newer_record_follows);
  EXPECT_FALSE(back.meta.end.damaged);
  ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
}

}  // namespace
}  // namespace cowstore::store
