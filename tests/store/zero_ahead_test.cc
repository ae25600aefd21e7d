// SPDX-License-Identifier: Apache-2.0
// Zeroing ahead (zero_ahead.h): the worker thread on its own, and a format 3
// pool's use of it: a stock of warm runs written and synced off the write
// path, new chunks opening on them, nothing of it while the pool is short of
// room, quarantine after a failed zero write, a failed pool after a failed
// sync, and the stock punched at Close.
#include "handler/store/zero_ahead.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/grain_space.h"
#include "handler/store/pool.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store {
namespace {

// ------------------------------------------------------------- the worker

TEST(ZeroAheadWorker, APokeRunsRoundsUntilOneSaysDoneAndDrainWaitsForThem) {
  std::atomic<int> runs{0};
  ZeroAhead z([&] { return ++runs % 3 != 0; });
  z.Drain();  // nothing asked for: returns at once
  EXPECT_EQ(runs.load(), 0);
  z.Poke();
  z.Drain();
  EXPECT_EQ(runs.load(), 3);
  z.Poke();
  z.Drain();
  EXPECT_EQ(runs.load(), 6);
  EXPECT_EQ(z.rounds(), 6u);
}

TEST(ZeroAheadWorker, AThrowingRoundEndsItsRoundsAndTheNextPokeRunsAgain) {
  std::atomic<int> runs{0};
  ZeroAhead z([&]() -> bool {
    if (++runs == 1) throw std::runtime_error("round failed");
    return false;
  });
  z.Poke();
  z.Drain();
  EXPECT_EQ(runs.load(), 1);
  z.Poke();
  z.Drain();
  EXPECT_EQ(runs.load(), 2);
}

TEST(ZeroAheadWorker, DestroyingItStopsAWorkerThatWantsMoreRounds) {
  std::atomic<int> runs{0};
  {
    ZeroAhead z([&] {
      runs++;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return true;  // always more
    });
    z.Poke();
    while (runs.load() < 3) std::this_thread::yield();
  }  // joins: the worker stops between rounds
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(runs.load(), after);
}

// ------------------------------------------------------------- in a pool

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kBlock = 4096;
constexpr uint64_t kWarmGrains = kWarmRunBytes / kBlock;  // 16: one AU here
constexpr uint64_t kPool = 80 << 20;  // >= 1,024 AUs: the full stock (kWarmRuns)
// New chunks that take the stock below half, so that a round refills it.
constexpr uint64_t kUsed = kWarmRuns / 2 + 1;

struct Stock {
  std::vector<GrainRun> warm;
  uint64_t opened = 0, quarantined = 0, reserved = 0;
};

Stock StockOf(Core* core) {
  Stock s;
  core->WithSpaceForTest([&](PoolSpace& space) {
    auto& g = dynamic_cast<GrainSpace&>(space);
    s.warm = g.free_space().warm();
    s.opened = g.free_space().warm_opened();
    s.quarantined = g.quarantined_units();
    s.reserved = g.reserved_units();
  });
  return s;
}

// The physical grain LUN `name` maps LBA `lba` to.
uint64_t PhysOf(Core* core, const std::string& name, uint64_t lba) {
  uint64_t phys = UINT64_MAX;
  core->WithStateForTest([&](const MetaState& st) {
    const LunState* l = st.FindName(name);
    if (l == nullptr) return;
    std::vector<Run> r;
    l->map.Lookup(lba, 1, &r);
    if (!r.empty()) phys = r[0].phys + (lba - r[0].lba);
  });
  return phys;
}

// A format 3 pool of `size` at a 4 KiB grain below a 64 KiB AU (where
// zeroing ahead runs, on a File whose writes allocate), with no soft line
// unless told one.
PoolOptions ZeroAheadOptions(uint64_t size, uint32_t soft_percent = 0) {
  PoolOptions o;
  o.size_bytes = size;
  o.allocation_unit = kAu;
  o.format = 3;
  o.grain = kBlock;
  o.soft_threshold_percent = soft_percent;
  return o;
}

class ZeroAheadPool : public ::testing::Test {
 protected:
  void Make(uint64_t size, bool writes_allocate = true, uint32_t soft_percent = 0) {
    env_.SetWritesAllocate(writes_allocate);
    auto p = Pool::Create(&env_, "pool", ZeroAheadOptions(size, soft_percent));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool_ = std::move(p.value());
    core_ = CoreOfForTest(pool_.get());
    ASSERT_TRUE(pool_->CreateLun("a", 64ull << 20, kBlock).ok());
    auto l = pool_->OpenLun("a");
    ASSERT_TRUE(l.ok());
    lun_ = std::move(l.value());
  }
  Status WriteBlock(uint64_t lba, uint8_t fill, Durability d = Durability::kDurable) {
    std::vector<uint8_t> b(kBlock, fill);
    iovec v{b.data(), b.size()};
    return lun_->Write(lba, 1, {&v, 1}, d);
  }
  uint8_t ReadFirstByte(uint64_t lba) {
    std::vector<uint8_t> b(kBlock, 0xEE);
    iovec v{b.data(), b.size()};
    EXPECT_TRUE(lun_->Read(lba, 1, {&v, 1}).ok());
    return b[0];
  }
  // The first block of each 1 MiB LBA region: a new chunk each.
  static uint64_t Region(uint64_t r) { return r * ((1 << 20) / kBlock); }

  FaultInjectionEnv env_;
  std::unique_ptr<Pool> pool_;
  Core* core_ = nullptr;
  std::shared_ptr<Lun> lun_;
};

TEST_F(ZeroAheadPool, AFirstWriteStocksWarmRunsAndTheNextNewChunkOpensOnTheLowest) {
  Make(kPool);
  const uint64_t writes0 = env_.calls(FaultInjectionEnv::Op::kWrite);
  const uint64_t syncs0 = env_.calls(FaultInjectionEnv::Op::kSync);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());  // no stock yet: asks for it
  core_->DrainZeroAheadForTest();
  Stock s = StockOf(core_);
  ASSERT_EQ(s.warm.size(), kWarmRuns);
  for (const GrainRun& w : s.warm) EXPECT_EQ(w.len, kWarmGrains);
  EXPECT_EQ(s.reserved, 0u);  // the round gave its grains back
  EXPECT_EQ(s.opened, 0u);
  // The write (data, record, sync) and the round (its zeros, a sync): the
  // 64 runs lie together, so the round is a few writes, not one a run.
  EXPECT_GE(env_.calls(FaultInjectionEnv::Op::kSync), syncs0 + 2);
  EXPECT_LE(env_.calls(FaultInjectionEnv::Op::kWrite), writes0 + 2 + 8);

  const uint64_t lowest = s.warm.front().start;
  ASSERT_TRUE(WriteBlock(Region(5), 2).ok());
  EXPECT_EQ(PhysOf(core_, "a", Region(5)), lowest);
  s = StockOf(core_);
  EXPECT_EQ(s.opened, 1u);
  EXPECT_EQ(s.warm.size(), kWarmRuns - 1);
  EXPECT_EQ(ReadFirstByte(Region(0)), 1);
  EXPECT_EQ(ReadFirstByte(Region(5)), 2);
  // Space() does not see the stock (it is free space).
  const SpaceInfo si = pool_->Space();
  EXPECT_EQ(si.free_units + si.allocated_units, si.total_units);
}

TEST_F(ZeroAheadPool, TheStockIsRefilledOnceBelowHalf) {
  Make(kPool);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());
  core_->DrainZeroAheadForTest();
  for (uint64_t r = 1; r < kUsed; r++) ASSERT_TRUE(WriteBlock(Region(r), 3).ok());
  core_->DrainZeroAheadForTest();
  EXPECT_EQ(StockOf(core_).warm.size(), kWarmRuns - (kUsed - 1));  // half: not yet
  ASSERT_TRUE(WriteBlock(Region(kUsed), 3).ok());
  core_->DrainZeroAheadForTest();
  Stock s = StockOf(core_);
  EXPECT_EQ(s.opened, kUsed);
  EXPECT_EQ(s.warm.size(), kWarmRuns);  // refilled
  for (uint64_t r = 1; r <= kUsed; r++) EXPECT_EQ(ReadFirstByte(Region(r)), 3);
  EXPECT_TRUE(pool_->Check().clean);
}

// The soft line (a share of the pool's grains used, its metadata's AUs
// included: a fifth of this small pool) is no bar to zeroing ahead: the pool
// filled to 54 % used, a block a region after that, each write followed by
// the rounds it asked for: the stock never stays below half (a round holds
// up to 5 % of the pool). So under the default line (80 %), under one the
// rounds bring within reach (57 %), and past one the fill crossed (40 %);
// the signal counts the fill's crossing and nothing of theirs.
struct SoftLineCase {
  uint32_t percent;
  uint64_t crossings;
};

void PrintTo(const SoftLineCase& c, std::ostream* os) { *os << c.percent << " %, " << c.crossings << " crossings"; }

class ZeroAheadSoftLine : public ZeroAheadPool, public ::testing::WithParamInterface<SoftLineCase> {};

TEST_P(ZeroAheadSoftLine, RoundsRunWhereverTheLineIs) {
  const SoftLineCase c = GetParam();
  Make(kPool, true, c.percent);
  constexpr uint64_t kFirstFilled = 34, kEndFilled = 61;  // 27 MiB of 80
  static_assert(kFirstFilled > kUsed);
  std::vector<uint8_t> mib(1 << 20, 7);
  iovec v{mib.data(), mib.size()};
  size_t lowest = kWarmRuns;
  for (uint64_t r = kFirstFilled; r < kEndFilled; r++) {
    ASSERT_TRUE(lun_->Write(Region(r), (1 << 20) / kBlock, {&v, 1}, Durability::kBuffered).ok());
    core_->DrainZeroAheadForTest();
    lowest = std::min(lowest, StockOf(core_).warm.size());
  }
  ASSERT_TRUE(lun_->Flush().ok());
  for (uint64_t r = 0; r <= kUsed; r++) {
    ASSERT_TRUE(WriteBlock(Region(r), 3).ok());
    core_->DrainZeroAheadForTest();
    lowest = std::min(lowest, StockOf(core_).warm.size());
  }

  const SpaceInfo si = pool_->Space();
  const uint64_t used = si.total_units - si.free_units;
  EXPECT_GT(used * 100, si.total_units * 53);
  EXPECT_LT(used * 100, si.total_units * 56);
  const Stock s = StockOf(core_);
  EXPECT_GE(s.opened, kUsed);
  EXPECT_GE(lowest, kWarmRuns / 2);
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(pool_->soft_threshold_generation(), c.crossings);
  EXPECT_EQ(ReadFirstByte(Region(kUsed)), 3);
  EXPECT_EQ(ReadFirstByte(Region(kFirstFilled)), 7);
  EXPECT_TRUE(pool_->Check().clean);
}

INSTANTIATE_TEST_SUITE_P(Lines, ZeroAheadSoftLine,
                         ::testing::Values(SoftLineCase{PoolOptions{}.soft_threshold_percent, 0}, SoftLineCase{57, 0},
                                           SoftLineCase{40, 1}),
                         [](const ::testing::TestParamInfo<SoftLineCase>& i) {
                           return "At" + std::to_string(i.param.percent) + "Percent";
                         });

// While a round holds its grains, writers take the pool to just short of
// the line: no crossing, though with the round's grains it would be one
// (Space() shows them free). The write that reaches the line is the one.
TEST_F(ZeroAheadPool, ARoundsGrainsAreNotUsedForTheSoftLine) {
  constexpr uint32_t kPercent = 35;
  Make(kPool, true, kPercent);
  const uint64_t line = pool_->Space().total_units * kPercent / 100;
  auto used = [&] {
    const SpaceInfo si = pool_->Space();
    return si.total_units - si.free_units;
  };
  ASSERT_LT(used() + 2 * kWarmRuns * kWarmGrains, line);  // the round's grains would reach it
  uint64_t next = Region(40), round_grains = 0;
  std::atomic<int> rounds{0};
  // The write that opens the chunk (and so starts the round) holds its own
  // grain reserved until its commit: the hook waits for it to return, so
  // that what is reserved then is the round's alone (it was 1,025 of 1,024
  // in about one run in thirty on a loaded machine).
  std::atomic<bool> first_returned{false};
  core_->SetZeroAheadHookForTest([&] {
    if (rounds++ > 0) return;
    while (!first_returned.load()) std::this_thread::yield();
    round_grains = StockOf(core_).reserved;
    while (used() + 1 < line) ASSERT_TRUE(WriteBlock(next++, 4, Durability::kBuffered).ok());
  });
  const Status first = WriteBlock(Region(0), 1);
  first_returned = true;
  ASSERT_TRUE(first.ok()) << first.ToString();
  core_->DrainZeroAheadForTest();
  ASSERT_GE(rounds.load(), 1);
  EXPECT_EQ(round_grains, kWarmRuns * kWarmGrains);
  EXPECT_EQ(used() + 1, line);
  EXPECT_EQ(pool_->soft_threshold_generation(), 0u);
  EXPECT_EQ(StockOf(core_).warm.size(), kWarmRuns);
  core_->SetZeroAheadHookForTest(nullptr);
  ASSERT_TRUE(WriteBlock(next++, 5).ok());
  EXPECT_EQ(pool_->soft_threshold_generation(), 1u);
  EXPECT_EQ(ReadFirstByte(next - 2), 4);
  EXPECT_TRUE(pool_->Check().clean);
}

// A pool as `cowctl pool create` makes one (format 3, a 64 KiB AU, a 4 KiB
// grain, the default 80 % line) on a file through PosixEnv, a third used:
// zeroing ahead is on (PosixFile's WritesAllocate and NewSyncHandle) and
// keeps its stock, as in service. Until session 40 the line's guard stopped
// it once a fifth of such a pool was used.
TEST(ZeroAheadOnAFile, APoolAsCowctlMakesItKeepsItsStockAThirdUsed) {
  const std::string path = ::testing::TempDir() + "/cowstore-zero-ahead-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  const PoolOptions o = ZeroAheadOptions(128 << 20, PoolOptions{}.soft_threshold_percent);
  ASSERT_EQ(o.soft_threshold_percent, 80u);
  {
    auto p = Pool::Create(DefaultEnv(), path, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::unique_ptr<Pool> pool = std::move(p.value());
    Core* core = CoreOfForTest(pool.get());
    ASSERT_TRUE(pool->CreateLun("a", 96 << 20, kBlock).ok());
    auto l = pool->OpenLun("a");
    ASSERT_TRUE(l.ok());
    std::shared_ptr<Lun> lun = std::move(l.value());
    constexpr uint64_t kPerRegion = (1 << 20) / kBlock;
    std::vector<uint8_t> mib(1 << 20, 7);
    iovec v{mib.data(), mib.size()};
    for (uint64_t r = 40; r < 80; r++)
      ASSERT_TRUE(lun->Write(r * kPerRegion, kPerRegion, {&v, 1}, Durability::kBuffered).ok());
    ASSERT_TRUE(lun->Flush().ok());
    const SpaceInfo si = pool->Space();
    EXPECT_GT((si.total_units - si.free_units) * 100, si.total_units * 30);
    // A block a region, each write followed by the rounds it asked for.
    std::vector<uint8_t> b(kBlock, 3);
    iovec bv{b.data(), b.size()};
    size_t lowest = kWarmRuns;
    constexpr uint64_t kNewChunks = 40;  // regions 0..39: more than the stock's half
    static_assert(kNewChunks > kWarmRuns / 2);
    // The stock made first, as a pool in service has it: on a loaded
    // machine the first write could otherwise come before the round the
    // fill asked for, and open its chunk off the stock (1 run in ~60).
    core->DrainZeroAheadForTest();
    ASSERT_EQ(StockOf(core).warm.size(), kWarmRuns);
    for (uint64_t r = 0; r < kNewChunks; r++) {
      ASSERT_TRUE(lun->Write(r * kPerRegion, 1, {&bv, 1}, Durability::kDurable).ok());
      core->DrainZeroAheadForTest();
      lowest = std::min(lowest, StockOf(core).warm.size());
    }
    const Stock s = StockOf(core);
    EXPECT_GE(s.opened, kNewChunks);
    EXPECT_GE(lowest, kWarmRuns / 2);
    EXPECT_EQ(s.quarantined, 0u);
    std::vector<uint8_t> got(kBlock);
    iovec gv{got.data(), got.size()};
    ASSERT_TRUE(lun->Read((kNewChunks - 1) * kPerRegion, 1, {&gv, 1}).ok());
    EXPECT_EQ(got, b);
    lun.reset();
    EXPECT_TRUE(pool->Check().clean);
    EXPECT_TRUE(pool->Close().ok());
  }
  ::unlink(path.c_str());
}

TEST_F(ZeroAheadPool, NothingIsZeroedAheadWithoutTheEnvsSay) {
  Make(kPool, /*writes_allocate=*/false);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());
  core_->DrainZeroAheadForTest();
  EXPECT_TRUE(StockOf(core_).warm.empty());
}

// Blocks a pool of `size` takes, one a region, until it is full; the most
// warm runs seen on the way in *warm_seen.
uint64_t BlocksUntilFull(FaultInjectionEnv* env, uint64_t size, bool writes_allocate, size_t* warm_seen) {
  env->SetWritesAllocate(writes_allocate);
  auto p = Pool::Create(env, "pool", ZeroAheadOptions(size));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return 0;
  constexpr uint64_t kLun = 4ull << 30;
  EXPECT_TRUE(p.value()->CreateLun("a", kLun, kBlock).ok());
  auto l = p.value()->OpenLun("a");
  EXPECT_TRUE(l.ok());
  if (!l.ok()) return 0;
  Core* core = CoreOfForTest(p.value().get());
  std::vector<uint8_t> b(kBlock, 5);
  iovec v{b.data(), b.size()};
  const uint64_t per_region = (1 << 20) / kBlock, regions = kLun >> 20;
  uint64_t n = 0;
  for (;; n++) {
    // Each region's first block (a new chunk each), then each one's second...
    const uint64_t lba = (n % regions) * per_region + n / regions;
    Status s = l.value()->Write(lba, 1, {&v, 1}, Durability::kBuffered);
    if (s.code() == Code::kNoSpace) break;
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) break;
    if (n % 16 == 0) {
      core->DrainZeroAheadForTest();
      *warm_seen = std::max(*warm_seen, StockOf(core).warm.size());
    }
  }
  core->DrainZeroAheadForTest();
  EXPECT_EQ(StockOf(core).reserved, 0u);
  l.value().reset();
  const CheckReport r = p.value()->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
  return n;
}

TEST(ZeroAheadFullPool, ZeroingAheadCostsAFillingPoolNoBlock) {
  // A small pool (a stock of a few runs) written a block a region until
  // full: as many blocks with zeroing ahead as without (its rounds stop
  // short of room, and new chunks take the stock).
  FaultInjectionEnv with, without;
  size_t warm_with = 0, warm_without = 0;
  const uint64_t a = BlocksUntilFull(&with, 24 << 20, true, &warm_with);
  const uint64_t b = BlocksUntilFull(&without, 24 << 20, false, &warm_without);
  EXPECT_GT(a, 1000u);
  EXPECT_EQ(a, b);
  EXPECT_GT(warm_with, 0u);
  EXPECT_EQ(warm_without, 0u);
}

TEST_F(ZeroAheadPool, AFailedZeroWriteQuarantinesTheRoundsGrainsAndThePoolServesOn) {
  Make(kPool);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());
  core_->DrainZeroAheadForTest();
  ASSERT_EQ(StockOf(core_).warm.size(), kWarmRuns);
  for (uint64_t r = 1; r < kUsed; r++) ASSERT_TRUE(WriteBlock(Region(r), 2).ok());
  core_->DrainZeroAheadForTest();
  ASSERT_EQ(StockOf(core_).warm.size(), kWarmRuns - (kUsed - 1));
  // A round on this thread (the stock is at half: no other runs), whose
  // first write fails.
  env_.FailAt(FaultInjectionEnv::Op::kWrite, 0, Code::kIOError);
  core_->ZeroAheadRoundForTest();
  const Stock s = StockOf(core_);
  EXPECT_EQ(s.warm.size(), kWarmRuns - (kUsed - 1));
  EXPECT_EQ(s.quarantined, (kUsed - 1) * kWarmGrains);  // the refill's grains
  EXPECT_EQ(s.reserved, 0u);
  const Status w = WriteBlock(Region(kUsed), 4);
  ASSERT_TRUE(w.ok()) << w.ToString();
  EXPECT_EQ(ReadFirstByte(Region(kUsed)), 4);
  EXPECT_TRUE(pool_->Check().clean);
}

TEST_F(ZeroAheadPool, AFailedRoundSyncFailsThePool) {
  Make(kPool);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());
  core_->DrainZeroAheadForTest();
  ASSERT_EQ(StockOf(core_).warm.size(), kWarmRuns);
  for (uint64_t r = 1; r < kUsed; r++) ASSERT_TRUE(WriteBlock(Region(r), 2).ok());
  core_->DrainZeroAheadForTest();
  ASSERT_EQ(StockOf(core_).warm.size(), kWarmRuns - (kUsed - 1));
  // A buffered overwrite in place: it allocates nothing, so it neither takes
  // from the stock nor pokes a round, and it syncs nothing.
  ASSERT_TRUE(WriteBlock(Region(0), 3, Durability::kBuffered).ok());
  // The stock is at half, so no other round runs: the round on this thread
  // refills it, and its sync (the next one) fails.
  const uint64_t syncs0 = env_.calls(FaultInjectionEnv::Op::kSync);
  env_.FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
  const Stock before = StockOf(core_);
  core_->ZeroAheadRoundForTest();
  ASSERT_GT(env_.calls(FaultInjectionEnv::Op::kSync), syncs0);
  // The round's grains are not added to the stock (it is the stock of
  // before, run for run): they are quarantined, as after a failed write.
  const Stock after = StockOf(core_);
  ASSERT_EQ(after.warm.size(), before.warm.size());
  for (size_t i = 0; i < after.warm.size(); i++) {
    EXPECT_EQ(after.warm[i].start, before.warm[i].start);
    EXPECT_EQ(after.warm[i].len, before.warm[i].len);
  }
  EXPECT_EQ(after.quarantined, (kWarmRuns - before.warm.size()) * kWarmGrains);
  EXPECT_EQ(after.reserved, 0u);
  // The sync may have dropped the overwrite's data (fsyncgate): nothing may
  // report it durable now, nor read it back.
  EXPECT_FALSE(pool_->Flush().ok());
  std::vector<uint8_t> b(kBlock);
  iovec v{b.data(), b.size()};
  EXPECT_FALSE(lun_->Read(Region(0), 1, {&v, 1}).ok());
}

TEST_F(ZeroAheadPool, CloseGivesTheStockBackAsHolesAndTheReopenedPoolChecksClean) {
  Make(kPool);
  ASSERT_TRUE(WriteBlock(Region(0), 1).ok());
  core_->DrainZeroAheadForTest();
  ASSERT_EQ(StockOf(core_).warm.size(), kWarmRuns);
  const uint64_t punches0 = env_.calls(FaultInjectionEnv::Op::kPunch);
  lun_.reset();
  ASSERT_TRUE(pool_->Close().ok());
  EXPECT_GE(env_.calls(FaultInjectionEnv::Op::kPunch), punches0 + kWarmRuns);
  pool_.reset();
  auto p = Pool::Open(&env_, "pool");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const CheckReport r = p.value()->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
  auto l = p.value()->OpenLun("a");
  ASSERT_TRUE(l.ok());
  std::vector<uint8_t> b(kBlock);
  iovec v{b.data(), b.size()};
  ASSERT_TRUE(l.value()->Read(Region(0), 1, {&v, 1}).ok());
  EXPECT_EQ(b[0], 1);
}

// A round's sync runs beside the writers' commits. When it fails, Linux
// forgets the pages it could not write (FailedSync::kForget), writers'
// among them, and reports the error once to each open of the file. The
// round syncs through an open of its own (File::NewSyncHandle), so a
// commit's sync that follows still reports the error. Had it used the
// pool's own descriptor, it would have taken the error, and a commit
// already past the failed-pool check would have answered GOOD for data the
// power cut then loses. Rounds and commits at once, the failure at one of
// the next few syncs, whichever that is.
TEST(ZeroAheadRace, NoWriteIsAnsweredDurableThatARoundsFailedSyncForgot) {
  constexpr int kIters = 120;
  constexpr uint64_t kLunBytes = 64ull << 20;
  constexpr uint64_t kRegions = kLunBytes / (1 << 20);
  std::mt19937_64 rng(20261207);
  int failed_writes = 0;
  for (int iter = 0; iter < kIters; iter++) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    FaultInjectionEnv env;
    env.SetWritesAllocate(true);
    env.SetFailedSync(FaultInjectionEnv::FailedSync::kForget);
    auto p = Pool::Create(&env, "pool", ZeroAheadOptions(kPool));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::unique_ptr<Pool> pool = std::move(p.value());
    ASSERT_TRUE(pool->CreateLun("a", kLunBytes, kBlock).ok());
    auto l = pool->OpenLun("a");
    ASSERT_TRUE(l.ok());
    std::shared_ptr<Lun> lun = std::move(l.value());
    auto fill = [](uint64_t region, int t) { return static_cast<uint8_t>(1 + (region * 2 + t) % 250); };
    // Each writer a block at the start of every other 1 MiB region: a new
    // chunk each, which takes from the stock and pokes rounds.
    std::vector<uint64_t> answered[2];
    // After a few writes (the rounds they poked under way) the writers wait
    // for the failure to be armed, then go on: it lands among their
    // commits and the rounds, however the threads are scheduled.
    const int after = 1 + static_cast<int>(rng() % 12);
    std::atomic<int> written{0};
    std::atomic<bool> armed{false};
    std::vector<std::thread> writers;
    for (int t = 0; t < 2; t++) {
      writers.emplace_back([&, t] {
        for (uint64_t r = static_cast<uint64_t>(t); r < kRegions; r += 2) {
          while (written.load() >= after && !armed.load()) std::this_thread::yield();
          std::vector<uint8_t> b(kBlock, fill(r, t));
          iovec v{b.data(), b.size()};
          if (!lun->Write(r * ((1 << 20) / kBlock), 1, {&v, 1}, Durability::kDurable).ok()) return;
          answered[t].push_back(r);
          written++;
        }
      });
    }
    while (written.load() < after) std::this_thread::yield();
    env.FailAt(FaultInjectionEnv::Op::kSync, rng() % 4, Code::kIOError);
    armed = true;
    for (auto& w : writers) w.join();
    failed_writes += answered[0].size() + answered[1].size() < kRegions ? 1 : 0;
    lun.reset();
    pool.reset();
    env.ClearFaults();
    env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, iter);
    auto reopened = Pool::Open(&env, "pool");
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    auto rl = reopened.value()->OpenLun("a");
    ASSERT_TRUE(rl.ok());
    for (int t = 0; t < 2; t++) {
      for (uint64_t r : answered[t]) {
        std::vector<uint8_t> b(kBlock);
        iovec v{b.data(), b.size()};
        ASSERT_TRUE(rl.value()->Read(r * ((1 << 20) / kBlock), 1, {&v, 1}).ok());
        ASSERT_EQ(b, std::vector<uint8_t>(kBlock, fill(r, t)))
            << "region " << r << " was answered durable and is lost";
      }
    }
  }
  // The failure landed while writes ran (else nothing here was tested).
  EXPECT_EQ(failed_writes, kIters);
}

}  // namespace
}  // namespace cowstore::store
