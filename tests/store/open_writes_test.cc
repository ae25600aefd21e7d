// SPDX-License-Identifier: Apache-2.0
// The open's writes (MetaFormat::PrepareWrites, meta_format.h): an open
// writes data (Core punches every free AU) before its checkpoint, into AUs
// an older superblock copy may still name, so the chosen copy must be
// durable, and the only one, before the first write of any kind. A power
// cut at every Env call of such an open (at format 3, the calls
// format_v3_ckpt_test's checkpoint sweeps do not cut), in every loss mode
// and with every superblock slot in flight torn, after a process died
// between a checkpoint's slot writes (the chosen copy in the cache only)
// and beside a damaged slot: the pool reopens, with the state last made
// durable. FormatV3 then writes no superblock twice for it; a failed
// PrepareWrites leaves the next to do all of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v2.h"
#include "handler/store/format_v3.h"
#include "handler/store/meta.h"
#include "handler/store/meta_format.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/common/sanitizers.h"
#include "tests/store/format_v3_pool.h"

namespace cowstore::store {
namespace {

using namespace v3pool;  // NOLINT(build/namespaces): the pool helpers, test-only
using v3pool::Lun;       // over store::Lun

// Cuts power at each mutating Env call of `attempt` (an open, run on the
// pool `setup` leaves in the env), from the first, until the attempt
// succeeds with the cut armed or `cuts` calls were cut. In every loss mode,
// kRandom and kTear with a few seeds each, and with every slot in flight
// torn (kTearSlotsInFlight); a cut that leaves nothing unsynced leaves the
// same media in every mode, so it is judged once. `reopen` then opens the
// pool and judges it, told which call was cut. Returns the first cut the
// attempt survived (Core's open does not wait for, nor fail by, the punch
// of what its checkpoint freed, thinner.h: whenever the thinner runs, the
// sweep ends at the open's last call of its own), or `cuts`.
using Attempt = std::function<Status(FaultInjectionEnv*)>;
uint64_t CutEachCallOfTheOpen(const std::function<void(FaultInjectionEnv*)>& setup, const Attempt& attempt,
                              uint64_t cuts, const std::function<void(FaultInjectionEnv*, uint64_t cut)>& reopen) {
  // kTearSlotsInFlight covers the worst tear of a slot; the seeds add
  // mixes of what else survives, which sanitizers make costly.
  const uint64_t seeds = sanitizer::kSanitized ? 2 : 8;
  FaultInjectionEnv env;  // one for all: Install then reuses its buffers
  for (uint64_t n = 0; n < cuts; n++) {
    bool survived = false, unsynced = true;
    for (int loss = 0; loss <= kTearSlotsInFlight && unsynced; loss++) {
      for (uint64_t seed = 0; seed < (loss == 2 || loss == 3 ? seeds : 1u); seed++) {
        SCOPED_TRACE("call " + std::to_string(n) + " loss " + std::to_string(loss) + " seed " +
                     std::to_string(seed));
        env.ClearFaults();
        setup(&env);
        env.CrashAfter(static_cast<int64_t>(n));
        const bool ok = attempt(&env).ok();
        if (loss == 0) {
          survived = ok;
          unsynced = env.unsynced_sectors("p") > 0;
        }
        if (loss == kTearSlotsInFlight)
          CutTearingSlotsInFlight(&env);
        else
          env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
        env.ClearFaults();
        reopen(&env, n);
        if (::testing::Test::HasFatalFailure()) return n;
      }
    }
    if (survived) return n;
  }
  return cuts;
}

// A state a process left when it died: the durable image, and the one
// superblock slot the cache held beside it. Install plus one slot write
// makes it again, without the open and checkpoint that made it.
struct DiedState {
  std::vector<uint8_t> durable;
  uint64_t slot = 0;
  std::vector<uint8_t> cached;  // that slot's bytes in the cache

  // Takes it from `env`, whose file is closed (and cut).
  void Capture(FaultInjectionEnv* env) {
    const std::vector<uint8_t> cache = env->Snapshot("p");
    env->PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);
    durable = env->Snapshot("p");
    ASSERT_EQ(cache.size(), durable.size());
    auto first = std::mismatch(cache.begin(), cache.end(), durable.begin()).first;
    ASSERT_NE(first, cache.end()) << "the cache held nothing the media did not";
    slot = static_cast<uint64_t>(first - cache.begin()) / kSuperblockSlot;
    ASSERT_LT(slot, 2u);
    const size_t at = slot * kSuperblockSlot;
    ASSERT_TRUE(std::equal(cache.begin() + at + kSuperblockSlot, cache.end(), durable.begin() + at + kSuperblockSlot))
        << "the cache held more than one slot";
    cached.assign(cache.begin() + at, cache.begin() + at + kSuperblockSlot);
  }
  void Make(FaultInjectionEnv* env) const {
    env->Install("p", durable.data(), durable.size());
    auto f = env->OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Write(slot * kSuperblockSlot, cached.size(), cached.data()).ok());
  }
};

// ------------------------------------------------------------ format 3

// A File that lets one superblock slot write through, of sequence `seq`,
// and then the disk dies (every later call fails): the process died right
// after it, and the cache holds that copy only.
class DieAfterSlotWrite final : public File {
 public:
  DieAfterSlotWrite(File* f, FaultInjectionEnv* env, uint64_t seq) : f_(f), env_(env), seq_(seq) {}
  Status Read(uint64_t off, size_t n, void* buf) override { return f_->Read(off, n, buf); }
  Status Write(uint64_t off, size_t n, const void* buf) override {
    Status s = f_->Write(off, n, buf);
    uint64_t seq = 0;
    if (off < 2 * kSuperblockSlot && n >= kSuperblockV3Seq + 8) {
      std::memcpy(&seq, static_cast<const char*>(buf) + kSuperblockV3Seq, 8);  // little-endian hosts
      if (s.ok() && seq == seq_) env_->CrashAfter(0);
    }
    return s;
  }
  Status Sync() override { return f_->Sync(); }
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
  Status DropCache() override { return f_->DropCache(); }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
  bool CanTruncate() const override { return f_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
  bool WritesAllocate() const override { return f_->WritesAllocate(); }
  bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

 private:
  File* f_;
  FaultInjectionEnv* env_;
  uint64_t seq_;
};

// The AUs of the data area outside `meta`, as runs (first, count): what
// Core's open punches (every AU no map and no metadata holds; these pools'
// data is not the format's concern, so every AU outside its metadata).
std::map<uint64_t, uint64_t> FreeRuns(const std::vector<uint64_t>& meta, uint64_t units) {
  std::map<uint64_t, uint64_t> runs;
  for (uint64_t u = 0; u < units; u++) {
    if (std::binary_search(meta.begin(), meta.end(), u)) continue;
    if (!runs.empty() && std::prev(runs.end())->first + std::prev(runs.end())->second == u)
      std::prev(runs.end())->second++;
    else
      runs.emplace(u, 1);
  }
  return runs;
}

// The open as Core makes it (recovery.cc): choose and load, PrepareWrites,
// a punch of every free run, then the open's checkpoint of what it loaded.
Status OpenAsCore(FaultInjectionEnv* env) {
  Opened o;
  if (Status s = Open(env, &o); !s.ok()) return s;
  if (Status s = o.format->PrepareWrites(o.file.get()); !s.ok()) return s;
  const SuperblockV3& sb = o.v3->choice().sb;
  for (const auto& [first, n] : FreeRuns(o.meta.meta_units, sb.units))
    if (Status s = o.file->PunchHole(sb.data_offset + first * sb.au, n * sb.au); !s.ok()) return s;
  return Checkpoint(&o, o.st, o.meta.end.next_lsn + kLsnGapAfterOpen);
}

// The cuts of OpenAsCore on the pool `setup` leaves that are this
// binary's own: PrepareWrites' calls, the punches, and the checkpoint's
// first call (cut after it: the spent sequence's slot write). The
// checkpoint's later calls are format_v3_ckpt_test's sweeps, from these
// same two states (APowerCutInTheFirstCheckpointAfterADamagedSlotStillOpens,
// APowerCutInTheOpensCheckpointAfterACrashedOneStillOpens).
uint64_t OpenAsCoreCuts(const std::function<void(FaultInjectionEnv*)>& setup) {
  FaultInjectionEnv env;
  setup(&env);
  Opened o;
  EXPECT_TRUE(Open(&env, &o).ok());
  const uint64_t at = env.mutating_calls();
  EXPECT_TRUE(o.format->PrepareWrites(o.file.get()).ok());
  const SuperblockV3& sb = o.v3->choice().sb;
  for (const auto& [first, n] : FreeRuns(o.meta.meta_units, sb.units))
    EXPECT_TRUE(o.file->PunchHole(sb.data_offset + first * sb.au, n * sb.au).ok());
  return env.mutating_calls() - at + 2;
}

class OpenWritesV3 : public ::testing::Test {
 protected:
  // A pool whose checkpoint holds `older_`, durable in both slots, its
  // pages past the metadata AU the pool was made with (units_); made once,
  // every test installs its image.
  static void SetUpTestSuite() {
    FaultInjectionEnv env;
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), Id(9), kAu, kGrain, kSize, kJournal, 80).ok());
    f->reset();
    older_.au = kGrain;
    older_.AddLun(Lun(1, "a", 6000, 1));
    older_.next_lun_id = 2;
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    lsn_ = o.meta.end.next_lsn + kLsnGapAfterOpen + 10;
    ASSERT_TRUE(Checkpoint(&o, older_, lsn_).ok());
    seq_ = o.format->superblock_seq();
    units_ = o.v3->meta_units();
    o = Opened();
    base_ = env.Snapshot("p");
  }
  void SetUp() override { ASSERT_FALSE(base_.empty()) << "the suite's pool was not made"; }

  static inline MetaState older_;
  static inline uint64_t lsn_ = 0, seq_ = 0;
  static inline std::vector<uint64_t> units_;
  static inline std::vector<uint8_t> base_;
};

// The chosen copy beside a damaged slot is the pool's only one, and the
// open's first superblock write (the spent sequence's, to slot seq % 2)
// goes to the slot holding it: PrepareWrites rewrites the damaged slot
// first. Cut at every call of the open: the pool opens, with the state it
// held.
TEST_F(OpenWritesV3, APowerCutAnywhereInAnOpenBesideADamagedSlotStillOpens) {
  auto damaged = [&](FaultInjectionEnv* env) {
    env->Install("p", base_.data(), base_.size());
    env->Corrupt("p", (seq_ % 2) * kSuperblockSlot + 64, 16);  // not the slot the open writes first
  };
  {
    FaultInjectionEnv env;
    damaged(&env);
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    ASSERT_FALSE(o.v3->choice().redundant);
    ASSERT_EQ(o.v3->choice().slot, static_cast<int>((seq_ + 1) % 2)) << "the chosen copy's slot is written first";
  }
  const uint64_t cuts = OpenAsCoreCuts(damaged);
  ASSERT_GE(cuts, 5u) << "sync, rewrite, sync, a punch, the spend write";
  const uint64_t survived = CutEachCallOfTheOpen(damaged, OpenAsCore, cuts, [&](FaultInjectionEnv* env, uint64_t) {
    Opened back;
    Status why = Open(env, &back);
    ASSERT_TRUE(why.ok()) << why.ToString();
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(older_, back.st));
  });
  EXPECT_EQ(survived, cuts) << "an open cut short failed";
}

// A process died right after its checkpoint's first slot write: the next
// open (the cache outlives the process) chooses that copy, held in the
// cache only, whose checkpoint frees the older one's pages. The open
// punches them: unless PrepareWrites made the chosen copy durable first, a
// cut after a punch reopens the older copy over punched pages. Cut at
// every call of the open: the pool opens, with the newer state once
// PrepareWrites' sync is past, else either.
TEST_F(OpenWritesV3, APowerCutAnywhereInAnOpenAfterAProcessDiedBetweenTheSlotsStillOpens) {
  MetaState newer;  // no LUN: one LUN table page, in the chunk the pool was made with
  newer.au = kGrain;
  newer.next_lun_id = 2;
  const uint64_t newer_lsn = lsn_ + kLsnGapAfterOpen + 50;
  DiedState state;
  {
    FaultInjectionEnv env;
    env.Install("p", base_.data(), base_.size());
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    // The checkpoint's own superblock: after the spent sequence's.
    DieAfterSlotWrite die(o.file.get(), &env, seq_ + 2);
    const FrozenCheckpoint f = o.v3->Freeze(newer);
    ASSERT_FALSE(o.format->WriteCheckpoint(&die, f, FreeAus(*o.v3, f.meta_units), newer_lsn).ok());
    o = Opened();
    env.ClearFaults();  // the process is gone; the cache holds its last write
    ASSERT_NO_FATAL_FAILURE(state.Capture(&env));
  }
  auto died = [&](FaultInjectionEnv* env) { ASSERT_NO_FATAL_FAILURE(state.Make(env)); };
  {
    FaultInjectionEnv env;
    died(&env);
    ASSERT_GT(env.unsynced_sectors("p"), 0u);
    Opened o;
    ASSERT_TRUE(Open(&env, &o).ok());
    ASSERT_EQ(o.format->superblock_seq(), seq_ + 2) << "the open chose the copy in the cache";
    ASSERT_EQ(o.meta.end.next_lsn, newer_lsn);
    bool punched = false;  // the older copy names an AU the open punches
    for (uint64_t u : units_) punched |= !std::binary_search(o.meta.meta_units.begin(), o.meta.meta_units.end(), u);
    ASSERT_TRUE(punched);
  }
  const uint64_t cuts = OpenAsCoreCuts(died);
  int older = 0, newest = 0;
  const uint64_t survived = CutEachCallOfTheOpen(died, OpenAsCore, cuts, [&](FaultInjectionEnv* env, uint64_t cut) {
    Opened back;
    Status why = Open(env, &back);
    ASSERT_TRUE(why.ok()) << why.ToString();
    const uint64_t at = back.meta.end.next_lsn;
    const bool is_newer = at == newer_lsn || at == newer_lsn + kLsnGapAfterOpen;
    (is_newer ? newest : older)++;
    // The first call is PrepareWrites' sync: cut there, the copy in the
    // cache may be lost, and nothing else was written.
    if (cut > 0) {
      EXPECT_TRUE(is_newer) << at;
    }
    EXPECT_TRUE(is_newer || at == lsn_) << at;
    EXPECT_NO_FATAL_FAILURE(ExpectSameState(is_newer ? newer : older_, back.st));
  });
  EXPECT_EQ(survived, cuts) << "an open cut short failed";
  EXPECT_GT(older, 0);
  EXPECT_GT(newest, 0);
}

// A File that records the kind and offset of every mutating call.
class TraceFile final : public File {
 public:
  struct Call {
    FaultInjectionEnv::Op op;
    uint64_t off;
  };
  explicit TraceFile(File* f) : f_(f) {}
  Status Read(uint64_t off, size_t n, void* buf) override { return f_->Read(off, n, buf); }
  Status Write(uint64_t off, size_t n, const void* buf) override {
    calls.push_back({FaultInjectionEnv::Op::kWrite, off});
    return f_->Write(off, n, buf);
  }
  Status Sync() override {
    calls.push_back({FaultInjectionEnv::Op::kSync, 0});
    return f_->Sync();
  }
  // None: the trace is of every mutating call, and a handle's syncs would
  // not pass through it.
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return NoSyncHandle(); }
  Status DropCache() override {
    calls.push_back({FaultInjectionEnv::Op::kDropCache, 0});
    return f_->DropCache();
  }
  Result<uint64_t> Size() override { return f_->Size(); }
  Status Truncate(uint64_t size) override { return f_->Truncate(size); }
  Status PunchHole(uint64_t off, uint64_t n) override {
    calls.push_back({FaultInjectionEnv::Op::kPunch, off});
    return f_->PunchHole(off, n);
  }
  bool CanTruncate() const override { return f_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
  bool WritesAllocate() const override { return f_->WritesAllocate(); }
  bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

  std::vector<Call> calls;

 private:
  File* f_;
};

// After PrepareWrites the writer rule's open half is done: the open's
// checkpoint starts with its spent sequence's slot write, with no sync
// and no rewrite of the chosen copy before it.
TEST_F(OpenWritesV3, TheCheckpointAfterPrepareWritesDoesNotRedoIt) {
  FaultInjectionEnv env;
  env.Install("p", base_.data(), base_.size());
  env.Corrupt("p", (seq_ % 2) * kSuperblockSlot + 64, 16);
  Opened o;
  ASSERT_TRUE(Open(&env, &o).ok());
  TraceFile prepare(o.file.get());
  ASSERT_TRUE(o.format->PrepareWrites(&prepare).ok());
  ASSERT_EQ(prepare.calls.size(), 3u);  // sync, the damaged slot rewritten, sync
  EXPECT_EQ(prepare.calls[0].op, FaultInjectionEnv::Op::kSync);
  EXPECT_EQ(prepare.calls[1].op, FaultInjectionEnv::Op::kWrite);
  EXPECT_EQ(prepare.calls[1].off, (seq_ % 2) * kSuperblockSlot);
  EXPECT_TRUE(o.v3->choice().redundant);
  TraceFile ckpt(o.file.get());
  const FrozenCheckpoint f = o.v3->Freeze(o.st);
  ASSERT_TRUE(o.format->WriteCheckpoint(&ckpt, f, FreeAus(*o.v3, f.meta_units),
                                        o.meta.end.next_lsn + kLsnGapAfterOpen)
                  .ok());
  ASSERT_FALSE(ckpt.calls.empty());
  EXPECT_EQ(ckpt.calls[0].op, FaultInjectionEnv::Op::kWrite) << "no sync first";
  EXPECT_EQ(ckpt.calls[0].off, ((seq_ + 1) % 2) * kSuperblockSlot) << "the spent sequence's first slot";
  EXPECT_TRUE(o.v3->choice().redundant);
}

// A PrepareWrites that fails (the rewrite, or a sync) leaves the slot in
// doubt: the next call does it all again.
TEST_F(OpenWritesV3, AFailedPrepareWritesLeavesTheNextToDoItAll) {
  for (FaultInjectionEnv::Op op : {FaultInjectionEnv::Op::kSync, FaultInjectionEnv::Op::kWrite}) {
    for (uint64_t nth = 0; nth < (op == FaultInjectionEnv::Op::kSync ? 2u : 1u); nth++) {
      SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " nth " + std::to_string(nth));
      FaultInjectionEnv env;
      env.Install("p", base_.data(), base_.size());
      env.Corrupt("p", (seq_ % 2) * kSuperblockSlot + 64, 16);
      Opened o;
      ASSERT_TRUE(Open(&env, &o).ok());
      env.FailAt(op, nth, Code::kIOError);
      EXPECT_EQ(o.format->PrepareWrites(o.file.get()).code(), Code::kIOError);
      EXPECT_FALSE(o.v3->choice().redundant);
      TraceFile again(o.file.get());
      ASSERT_TRUE(o.format->PrepareWrites(&again).ok());
      EXPECT_EQ(again.calls.size(), 3u) << "sync, rewrite, sync";
      EXPECT_TRUE(o.v3->choice().redundant);
      o = Opened();
      env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);  // what reached the media
      Opened back;
      const std::vector<uint8_t> img = env.Snapshot("p");
      FaultInjectionEnv copy;
      copy.Install("p", img.data(), img.size());
      ASSERT_TRUE(Open(&copy, &back).ok());
      EXPECT_TRUE(back.v3->choice().redundant) << "both slots hold the chosen copy, byte for byte";
    }
  }
}

// ------------------------------------------------------------ format 2

// A closed format 2 pool with LUN "a" holding `data` (V2Data).
std::vector<uint8_t> V2Data() {
  std::vector<uint8_t> data(256 << 10);
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  return data;
}
void MakeV2Pool(const std::vector<uint8_t>& data, std::vector<uint8_t>* base) {
  constexpr uint32_t kAu2 = 64 * 1024;
  FaultInjectionEnv env;
  PoolOptions po;
  po.allocation_unit = kAu2;
  po.journal_bytes = 64 * 1024;
  po.size_bytes = 64 * uint64_t{kAu2};
  auto p = Pool::Create(&env, "p", po);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->CreateLun("a", 1 << 20, 512).ok());
  auto a = (*p)->OpenLun("a");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Write(0, data.size() / 512, data.data(), Durability::kDurable).ok());
  a->reset();
  ASSERT_TRUE((*p)->Close().ok());
  p->reset();
  *base = env.Snapshot("p");
}

// Core's open, and the pool closed again (with the disk dead, by the cut,
// its close writes nothing).
Status OpenPool(FaultInjectionEnv* env) { return Pool::Open(env, "p").status(); }

// An upper bound on the cuts of Core's open of the pool `setup` leaves:
// its calls, and the thinner's if it ran before they were counted.
uint64_t OpenPoolCuts(const std::function<void(FaultInjectionEnv*)>& setup) {
  FaultInjectionEnv env;
  setup(&env);
  const uint64_t at = env.mutating_calls();
  auto p = Pool::Open(&env, "p");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return env.mutating_calls() - at + 1;
}

// The pool opens with LUN "a" holding `data`.
void ExpectV2PoolHolds(FaultInjectionEnv* env, const std::vector<uint8_t>& data) {
  auto p = Pool::Open(env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto a = (*p)->OpenLun("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::vector<uint8_t> got(data.size());
  ASSERT_TRUE((*a)->Read(0, got.size() / 512, got.data()).ok());
  EXPECT_TRUE(got == data);
  a->reset();
  EXPECT_TRUE((*p)->Close().ok());
}

// Every copy of this writer sits in both slots: with slot seq % 2 damaged,
// the chosen copy is the one in the other slot, which the open's
// checkpoint (seq + 1) writes first. PrepareWrites rewrites the damaged
// slot first. Cut at every call of Core's open: the pool opens, with its
// LUN and data.
TEST(OpenWritesV2, APowerCutAnywhereInAnOpenBesideADamagedSlotStillOpens) {
  const std::vector<uint8_t> data = V2Data();
  std::vector<uint8_t> base;
  ASSERT_NO_FATAL_FAILURE(MakeV2Pool(data, &base));
  Superblock sb;
  ASSERT_TRUE(Superblock::Decode(base.data(), kSuperblockSlot, &sb).ok());
  const uint64_t damaged_slot = sb.seq % 2;
  auto damaged = [&](FaultInjectionEnv* env) {
    env->Install("p", base.data(), base.size());
    env->Corrupt("p", damaged_slot * kSuperblockSlot + 64, 16);
  };
  {
    FaultInjectionEnv env;
    damaged(&env);
    const std::vector<uint8_t> img = env.Snapshot("p");
    Superblock s;
    ASSERT_FALSE(Superblock::Decode(img.data() + damaged_slot * kSuperblockSlot, kSuperblockSlot, &s).ok());
    ASSERT_TRUE(Superblock::Decode(img.data() + (1 - damaged_slot) * kSuperblockSlot, kSuperblockSlot, &s).ok());
    ASSERT_EQ(s.seq, sb.seq) << "the only valid copy is in the slot the open's checkpoint writes first";
  }
  const uint64_t cuts = OpenPoolCuts(damaged);
  const uint64_t survived = CutEachCallOfTheOpen(damaged, OpenPool, cuts, [&](FaultInjectionEnv* env, uint64_t) {
    ExpectV2PoolHolds(env, data);
  });
  EXPECT_LT(survived, cuts) << "the sweep reached the open's end";
  EXPECT_GE(survived, 5u) << "sync, rewrite, sync, punches, the checkpoint";
}

// The same hole at format 2: a process died right after its open's
// checkpoint's first slot write, so the next open
// chooses that copy from the cache, whose checkpoint freed the older
// copy's chain; the open punches it. PrepareWrites' sync first makes the
// chosen copy durable. Cut at every call of Core's open: the pool opens,
// with its LUN and data.
TEST(OpenWritesV2, APowerCutAnywhereInAnOpenAfterAProcessDiedBetweenTheSlotsStillOpens) {
  const std::vector<uint8_t> data = V2Data();
  std::vector<uint8_t> base;
  ASSERT_NO_FATAL_FAILURE(MakeV2Pool(data, &base));
  auto seqs = [](const std::vector<uint8_t>& img) {
    Superblock s[2];
    for (int i = 0; i < 2; i++)
      EXPECT_TRUE(Superblock::Decode(img.data() + i * kSuperblockSlot, kSuperblockSlot, &s[i]).ok());
    return std::make_pair(s[0].seq, s[1].seq);
  };
  // The process dies (the disk with it, for that process) right after the
  // open checkpoint's first slot write: the first crash point that leaves
  // the slots different in the cache.
  DiedState state;
  for (uint64_t n = 0;; n++) {
    ASSERT_LT(n, 64u);
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    env.CrashAfter(static_cast<int64_t>(n));
    ASSERT_FALSE(Pool::Open(&env, "p").ok());
    auto [s0, s1] = seqs(env.Snapshot("p"));
    if (s0 == s1) continue;
    env.ClearFaults();  // the process is gone; the cache holds its slot write
    ASSERT_NO_FATAL_FAILURE(state.Capture(&env));
    break;
  }
  auto died = [&](FaultInjectionEnv* env) { ASSERT_NO_FATAL_FAILURE(state.Make(env)); };
  Superblock older;  // what the media hold in both slots
  ASSERT_TRUE(Superblock::Decode(state.durable.data() + (1 - state.slot) * kSuperblockSlot, kSuperblockSlot, &older).ok());
  ASSERT_NE(older.ckpt_first, kNone);
  {
    // The open chooses the cached copy, and the older copy's chain is
    // gone from the cache after it (punched, or reused): a reopen of the
    // older copy alone would fail.
    FaultInjectionEnv env;
    died(&env);
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const std::vector<uint8_t> img = env.Snapshot("p");
    const size_t at = older.data_offset + older.ckpt_first * older.au;
    EXPECT_FALSE(std::equal(img.begin() + at, img.begin() + at + older.au, state.durable.begin() + at))
        << "the open left the older copy's chain in place";
  }
  const uint64_t cuts = OpenPoolCuts(died);
  const uint64_t survived = CutEachCallOfTheOpen(died, OpenPool, cuts, [&](FaultInjectionEnv* env, uint64_t) {
    ExpectV2PoolHolds(env, data);
  });
  EXPECT_LT(survived, cuts) << "the sweep reached the open's end";
}

// FormatV2's PrepareWrites beside a damaged slot, as LoadLocked calls it:
// a sync, the damaged slot given the chosen copy's bytes, a sync; once
// done, neither a second call nor the open's checkpoint redoes it; one that
// failed leaves the next to do it all. Afterwards the media hold the
// chosen copy in both slots, byte for byte.
TEST(OpenWritesV2, PrepareWritesGivesTheDamagedSlotTheChosenCopyOnce) {
  const std::vector<uint8_t> data = V2Data();
  std::vector<uint8_t> base;
  ASSERT_NO_FATAL_FAILURE(MakeV2Pool(data, &base));
  Superblock sb;
  ASSERT_TRUE(Superblock::Decode(base.data(), kSuperblockSlot, &sb).ok());
  const uint64_t damaged_slot = sb.seq % 2;
  for (bool fail_first : {false, true}) {
    SCOPED_TRACE(fail_first ? "the rewrite fails first" : "no failure");
    FaultInjectionEnv env;
    env.Install("p", base.data(), base.size());
    env.Corrupt("p", damaged_slot * kSuperblockSlot + 64, 16);
    {
      auto f = env.OpenLocked("p", Env::Mode::kReadWrite);
      ASSERT_TRUE(f.ok());
      SuperblockSlots slots;
      auto chosen = ChooseMetaFormat(f->get(), &slots);
      ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
      std::unique_ptr<MetaFormat> format = std::move(chosen).value();
      PoolGeometry geo;
      ASSERT_TRUE(format->ChooseSuperblock(slots, &geo).ok());
      MetaState st;
      st.au = geo.grain;
      LoadedMeta meta;
      ASSERT_TRUE(format->LoadState(f->get(), &st, &meta).ok());
      if (fail_first) {
        env.FailAt(FaultInjectionEnv::Op::kWrite, 0, Code::kIOError);
        EXPECT_EQ(format->PrepareWrites(f->get()).code(), Code::kIOError);
      }
      TraceFile prepare(f->get());
      ASSERT_TRUE(format->PrepareWrites(&prepare).ok());
      ASSERT_EQ(prepare.calls.size(), 3u) << "sync, rewrite, sync";
      EXPECT_EQ(prepare.calls[0].op, FaultInjectionEnv::Op::kSync);
      EXPECT_EQ(prepare.calls[1].op, FaultInjectionEnv::Op::kWrite);
      EXPECT_EQ(prepare.calls[1].off, damaged_slot * kSuperblockSlot);
      EXPECT_EQ(prepare.calls[2].op, FaultInjectionEnv::Op::kSync);
      TraceFile again(f->get());
      ASSERT_TRUE(format->PrepareWrites(&again).ok());
      EXPECT_TRUE(again.calls.empty()) << "done once";
      TraceFile ckpt(f->get());
      const FrozenCheckpoint frozen = format->Freeze(st, DirtyRanges());
      std::vector<uint64_t> units;
      for (uint64_t u = geo.total_units() - frozen.meta_units; u < geo.total_units(); u++) units.push_back(u);
      ASSERT_TRUE(format->WriteCheckpoint(&ckpt, frozen, units, meta.end.next_lsn + kLsnGapAfterOpen).ok());
      ASSERT_FALSE(ckpt.calls.empty());
      EXPECT_EQ(ckpt.calls[0].op, FaultInjectionEnv::Op::kWrite) << "no sync first";
    }
    env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);
    const std::vector<uint8_t> img = env.Snapshot("p");
    EXPECT_TRUE(std::equal(img.begin(), img.begin() + kSuperblockSlot, img.begin() + kSuperblockSlot))
        << "the checkpoint's copy in both slots";
    ASSERT_NO_FATAL_FAILURE(ExpectV2PoolHolds(&env, data));
  }
}

}  // namespace
}  // namespace cowstore::store
