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
#include <string>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/meta_format.h"
#include "tests/store/format_v3_pool.h"

namespace cowstore::store {
namespace {

using namespace v3pool;  // NOLINT(build/namespaces): the pool helpers, test-only
using v3pool::Lun;       // over store::Lun
using Op = FaultInjectionEnv::Op;

constexpr uint64_t kGrownSize = kSize + 40 * uint64_t{kAu};  // 40 AUs more

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
  *lsn = o.meta.end.next_lsn + 10;
  EXPECT_TRUE(Checkpoint(&o, st, *lsn).ok());
  return st;
}

// A cut that tears every superblock slot written since the last sync (each
// kTear may tear, by chance): the durable image, those slots garbled.
void TearUnsyncedSlots(FaultInjectionEnv* env) {
  const std::vector<uint8_t> now = env->Snapshot("p");
  env->PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);
  std::vector<uint8_t> img = env->Snapshot("p");
  for (uint64_t slot = 0; slot < 2; slot++) {
    const auto at = static_cast<std::ptrdiff_t>(slot * kSuperblockSlot);
    if (!std::equal(now.begin() + at, now.begin() + at + kSuperblockSlot, img.begin() + at))
      for (uint64_t i = 0; i < 64; i++) img[at + 32 + i] ^= 0x5a;
  }
  env->Install("p", img.data(), img.size());
}

// Runs `attempt(env, -1)` on `base` once uncut, to count the mutating calls
// it makes after its setup, then `attempt(env, n)` (a crash after n more)
// for each of them, in every loss mode (`seeds` per random one) and with
// TearUnsyncedSlots; `check` judges each pool reopened, which must open.
void CutEachCall(const std::vector<uint8_t>& base,
                 const std::function<uint64_t(FaultInjectionEnv*, int64_t)>& attempt,
                 const std::function<void(const Opened&)>& check, uint64_t seeds = 6) {
  uint64_t calls;
  {
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    calls = attempt(&env, -1);
  }
  FaultInjectionEnv env;  // one for all: Install then reuses its buffers
  for (uint64_t n = 0; n < calls; n++) {
    for (int loss = 0; loss <= 4; loss++) {  // 4: TearUnsyncedSlots
      for (uint64_t seed = 0; seed < (loss == 2 || loss == 3 ? seeds : 1u); seed++) {
        SCOPED_TRACE("call " + std::to_string(n) + " of " + std::to_string(calls) + " loss " +
                     std::to_string(loss) + " seed " + std::to_string(seed));
        env.ClearFaults();
        env.Install("p", base.data(), base.size());
        attempt(&env, static_cast<int64_t>(n));
        if (loss == 4) {
          TearUnsyncedSlots(&env);
        } else {
          env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
        }
        Opened back;
        Status why = Open(&env, &back);
        EXPECT_TRUE(why.ok()) << why.ToString();
        if (why.ok()) check(back);
      }
    }
  }
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
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());  // the open's, before any batch
  const Record one = MapOf(2001, 1500, 3);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({one}, lsn, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, one, nullptr).ok());
  const uint64_t seq = o.format->superblock_seq();
  ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  Status s = o.format->Grow(o.file.get(), kGrownSize);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(UnitsOf(o), UnitsFor(kGrownSize));
  EXPECT_GT(o.format->superblock_seq(), seq);
  EXPECT_TRUE(o.v3->choice().redundant);
  const Record two = MapOf(3001, 1700, 2);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({two}, lsn + 1, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, two, nullptr).ok());
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
    ASSERT_EQ(clean_calls[1], 2u) << "one sync per slot";
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
            EXPECT_GT(o.format->superblock_seq(), seq_before + 1) << "the retry's sequence is its own";
            ASSERT_TRUE(Checkpoint(&o, st, lsn + 1).ok());
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
          ASSERT_TRUE(Checkpoint(&back, st, lsn + 1).ok());
          back = Opened();
          Opened again;
          ASSERT_TRUE(Open(&env, &again).ok());
          EXPECT_EQ(UnitsOf(again), units);
          ASSERT_NO_FATAL_FAILURE(ExpectSameState(st, again.st));
          EXPECT_EQ(again.meta.end.next_lsn, lsn + 1);
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
  const uint64_t next_lsn = lsn + 40;
  for (const bool checkpointed : {false, true}) {
    for (const uint64_t failed_sync : {0u, 1u}) {
      SCOPED_TRACE(std::string(checkpointed ? "after a checkpoint" : "after the open") + ", Grow's sync " +
                   std::to_string(failed_sync) + " failed");
      auto failed_grow_then_checkpoint = [&](FaultInjectionEnv* env, int64_t crash_after) {
        Opened o;
        EXPECT_TRUE(Open(env, &o).ok());
        if (checkpointed) {
          EXPECT_TRUE(Checkpoint(&o, prev, lsn).ok());
        }
        env->FailAt(Op::kSync, failed_sync, Code::kIOError);
        EXPECT_EQ(o.format->Grow(o.file.get(), kGrownSize).code(), Code::kIOError);
        const uint64_t at = env->mutating_calls();
        env->CrashAfter(crash_after);
        const uint64_t failed_seq = o.format->superblock_seq() + 1;
        Status s = Checkpoint(&o, next, next_lsn);
        EXPECT_EQ(s.ok(), crash_after < 0) << s.ToString();
        // Uncut, its pages and superblock took a sequence of their own: it
        // spent one above the failed Grow's first.
        if (s.ok()) {
          EXPECT_GT(o.format->superblock_seq(), failed_seq + 1);
        }
        return env->mutating_calls() - at;
      };
      int old_state = 0, new_state = 0;
      CutEachCall(base, failed_grow_then_checkpoint, [&](const Opened& back) {
        const uint64_t units = UnitsOf(back);
        EXPECT_TRUE(units == UnitsFor(kSize) || units == UnitsFor(kGrownSize)) << units;
        if (back.meta.end.next_lsn == next_lsn) {
          new_state++;
          EXPECT_NO_FATAL_FAILURE(ExpectSameState(next, back.st));
        } else {
          old_state++;
          EXPECT_EQ(back.meta.end.next_lsn, lsn);
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
  auto grow = [&](FaultInjectionEnv* env, int64_t crash_after) {
    Opened o;
    EXPECT_TRUE(Open(env, &o).ok());
    EXPECT_FALSE(o.v3->choice().redundant);
    const uint64_t at = env->mutating_calls();
    env->CrashAfter(crash_after);
    Status s = o.format->Grow(o.file.get(), kGrownSize);
    EXPECT_EQ(s.ok(), crash_after < 0) << s.ToString();
    return env->mutating_calls() - at;
  };
  int old_size = 0, new_size = 0;
  CutEachCall(base, grow, [&](const Opened& back) {
    (UnitsOf(back) == UnitsFor(kGrownSize) ? new_size : old_size)++;
    EXPECT_TRUE(UnitsOf(back) == UnitsFor(kSize) || UnitsOf(back) == UnitsFor(kGrownSize));
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(st, back.st));
    EXPECT_EQ(back.meta.end.next_lsn, lsn);
  });
  EXPECT_GT(old_size, 0);
  EXPECT_GT(new_size, 0);
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
  ASSERT_TRUE(Checkpoint(&o, st, lsn).ok());
  const Record one = MapOf(2001, 1500, 3);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({one}, lsn, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, one, nullptr).ok());
  ASSERT_TRUE(Extend(o.file.get(), kGrownSize).ok());
  ASSERT_TRUE(o.format->Grow(o.file.get(), kGrownSize).ok());
  const Record two = MapOf(3001, 1700, 2);
  ASSERT_TRUE(o.format->CommitBatch(o.file.get(), BatchOf({two}, lsn + 1, o.format->durable_lsn())).ok());
  ASSERT_TRUE(ApplyRecord(&st, two, nullptr).ok());

  st.AddLun(Lun(3, "c", 6000, 3));  // more pages than the chunk's free ones
  st.next_lun_id = 4;
  const uint64_t next_lsn = lsn + 20;
  FrozenCheckpoint f = o.format->Freeze(st);
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

}  // namespace
}  // namespace cowstore::store
