// SPDX-License-Identifier: Apache-2.0
// The checkpoint bound (MetaFormat::NextCheckpointCost, meta_format.h): what
// every reservation and LUN change keeps free for the next checkpoint. It
// must never fall short of what a Freeze then asks (Core counts each Freeze
// that asks more: CkptBoundMissesForTest), over every format, with LUNs
// made, cloned, snapshotted and deleted and maps split and joined at random
// between frequent checkpoints; and it counts LUNs by a per-LUN size that
// both formats' encodings keep to.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/lun_table_page.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/pool_impl.h"
#include "tests/store/suite_formats.h"

namespace cowstore::store {
namespace {

using testing::AllFormats;
using testing::FormatName;
using testing::SuiteFormat;

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kBs = 512;

class CheckpointCostTest : public ::testing::TestWithParam<SuiteFormat> {};

// A LUN with the longest name and every attribute this build writes.
LunRecord LargestLun() {
  LunRecord r;
  r.id = 0xfffffffe;
  r.name = std::string(kMaxNameLength, 'n');
  r.uuid.fill(0xab);
  r.size = ~uint64_t{0} >> 8;
  r.bs = 4096;
  r.attrs.read_only = true;
  r.attrs.origin.fill(0xcd);
  r.attrs.created = ~uint64_t{0};
  return r;
}

TEST(CheckpointCost, BothEncodingsOfALunKeepToTheBound) {
  const LunRecord r = LargestLun();
  // Format 2: EncodeState's bytes for one LUN with an empty map (its run
  // count included), less the 12-byte header.
  MetaState st;
  st.next_lun_id = r.id + 1;
  auto l = std::make_unique<LunState>();
  l->id = r.id;
  l->name = r.name;
  l->uuid = r.uuid;
  l->size = r.size;
  l->bs = r.bs;
  l->attrs = r.attrs;
  st.AddLun(std::move(l));
  std::string enc;
  EncodeState(st, &enc);
  EXPECT_LE(enc.size() - 12, kLunCheckpointBytesBound);
  EXPECT_GE(enc.size() - 12, kLunCheckpointBytesBound - 8) << "the bound is no longer tight: say why";
  // Format 3: a LUN table record.
  EXPECT_LE(LunRecordBytes(r), kLunCheckpointBytesBound);
}

PoolOptions Options(const SuiteFormat& f, uint32_t soft_percent = 1) {
  PoolOptions o;
  f.Apply(&o);
  o.allocation_unit = kAu;
  o.size_bytes = 12 << 20;  // 1 % of it is one AU: format 3's journal stays at 64 KiB
  o.journal_bytes = 64 << 10;  // checkpoints every few dozen operations
  o.soft_threshold_percent = soft_percent;
  o.backing_check_interval_ms = kBackingSignalOff;
  return o;
}

bool OkOrRefused(const Status& s) { return s.ok() || s.code() == Code::kNoSpace; }

// Random LUN-table changes and writes and unmaps that split and join map
// runs, durable and buffered, at and past the reserve line, on LUNs named
// `prefix`N. Every answer is Ok or kNoSpace (nothing changed): a commit
// refused with records applied (kNotDurable) fails. Counts what was done
// and what was refused.
struct RandomOps {
  std::mt19937_64 rng;
  std::string prefix;
  uint64_t unit_blocks = 0;
  std::vector<std::string> names;
  int made = 0, ok_io = 0, refused_io = 0;

  void Run(Pool& pool, int steps) {
    const std::vector<uint8_t> data(4 * kAu, 0x5a);
    for (int step = 0; step < steps; step++) {
      const uint64_t op = rng() % 100;
      if (names.size() < 2 || op < 1) {
        std::string n = prefix + "l" + std::to_string(made++);
        auto c = pool.CreateLun(n, (1 + rng() % 4) << 18, kBs);
        ASSERT_TRUE(OkOrRefused(c.status())) << c.status().ToString();
        if (c.ok()) names.push_back(n);
        continue;
      }
      const std::string& pick = names[rng() % names.size()];
      if (op < 4) {
        std::string n = prefix + "c" + std::to_string(made++);
        auto c = op < 3 ? pool.CloneLun(pick, n) : pool.SnapshotLun(pick, n);
        ASSERT_TRUE(OkOrRefused(c.status())) << c.status().ToString();
        if (c.ok()) names.push_back(n);
        continue;
      }
      if (op < 7 && names.size() > 4) {
        size_t i = rng() % names.size();
        Status d = pool.DeleteLun(names[i]);
        ASSERT_TRUE(OkOrRefused(d)) << d.ToString();
        if (d.ok()) names.erase(names.begin() + static_cast<ptrdiff_t>(i));
        continue;
      }
      if (op < 9) {
        Status f = pool.Flush();
        ASSERT_TRUE(f.ok()) << f.ToString();
        continue;
      }
      auto l = pool.OpenLun(pick);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      if ((*l)->read_only()) continue;
      const uint64_t units = (*l)->block_count() / unit_blocks;
      const uint64_t at = (rng() % units) * unit_blocks;
      const uint64_t len = std::min<uint64_t>((1 + rng() % 4) * unit_blocks, (*l)->block_count() - at);
      const Durability d = rng() % 4 == 0 ? Durability::kDurable : Durability::kBuffered;
      Status s = op < 60 ? (*l)->Write(at, len, data.data(), d) : (*l)->Unmap(at, len, d);
      ASSERT_TRUE(OkOrRefused(s)) << s.ToString();
      (s.ok() ? ok_io : refused_io)++;
    }
  }
};

void ExpectClean(Pool& pool) {
  CheckReport rep = pool.Check();
  EXPECT_TRUE(rep.clean) << (rep.problems.empty() ? "" : rep.problems[0]);
}

// Checkpoints come often and find every kind of dirty state: no Freeze may
// ask more than the bound said. Half way, the pool is closed and reopened
// (the bound the load sets, the open's checkpoint).
TEST_P(CheckpointCostTest, NoCheckpointAsksMoreThanTheBound) {
  FaultInjectionEnv env;
  RandomOps ops;
  ops.rng.seed(GetParam().grain + GetParam().format * 7919);
  ops.unit_blocks = (GetParam().grain ? GetParam().grain : kAu) / kBs;
  uint64_t freezes = 0;
  for (int half = 0; half < 2; half++) {
    auto p = half == 0 ? Pool::Create(&env, "p", Options(GetParam())) : Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Pool& pool = **p;
    Core* core = CoreOfForTest(&pool);
    ASSERT_NO_FATAL_FAILURE(ops.Run(pool, 30000));
    ASSERT_TRUE(pool.Flush().ok());
    freezes += core->FreezesForTest();
    EXPECT_EQ(core->CkptBoundMissesForTest(), 0u);
    ExpectClean(pool);
    ASSERT_TRUE(pool.Close().ok());
  }
  EXPECT_GT(ops.ok_io, 1000) << "the pool refused nearly everything: the workload tests little";
  EXPECT_GT(ops.refused_io, 0) << "the pool never filled: the reserve line was never reached";
  EXPECT_GT(freezes, 8u) << "too few checkpoints to say anything";
}

// The same with format 3's journal growing at checkpoints (the soft
// threshold off: up to its 1/16 share of the pool, below the 80 % line,
// never into the checkpoint reserve: CheckpointJournalSpace).
// Format 3 only: format 2's journal keeps its size.
class CheckpointCostGrowthTest : public ::testing::TestWithParam<SuiteFormat> {};

TEST_P(CheckpointCostGrowthTest, NoCheckpointAsksMoreThanTheBoundWhileTheJournalGrows) {
  FaultInjectionEnv env;
  auto p = Pool::Create(&env, "p", Options(GetParam(), /*soft_percent=*/0));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  RandomOps ops;
  ops.rng.seed(GetParam().grain + GetParam().format * 31);
  ops.unit_blocks = (GetParam().grain ? GetParam().grain : kAu) / kBs;
  ASSERT_NO_FATAL_FAILURE(ops.Run(pool, 120000));
  ASSERT_TRUE(pool.Flush().ok());
  Core* core = CoreOfForTest(&pool);
  // The open's, which grew the journal, and at least one that filled it.
  EXPECT_GT(core->FreezesForTest(), 1u) << "the grown journal never filled";
  EXPECT_GT(core->Space().metadata_units, 4u) << "the journal did not grow";
  EXPECT_GT(ops.refused_io, 0) << "the pool never filled: the reserve line was never reached";
  EXPECT_EQ(core->CkptBoundMissesForTest(), 0u);
  ExpectClean(pool);
}

// Several writers at the reserve line while checkpoints are written: the
// records taken while one is in flight are held to the bound over the tree
// it writes (FrozenCheckpoint::next_cost), not the one before. No answer
// is kNotDurable.
TEST_P(CheckpointCostTest, WritersDuringACheckpointAreHeldToTheNextTreesBound) {
  FaultInjectionEnv env;
  auto p = Pool::Create(&env, "p", Options(GetParam()));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  std::vector<RandomOps> ops(3);
  for (size_t i = 0; i < ops.size(); i++) {
    ops[i].rng.seed(1000 + i + GetParam().grain);
    ops[i].prefix = "t" + std::to_string(i);
    ops[i].unit_blocks = (GetParam().grain ? GetParam().grain : kAu) / kBs;
  }
  std::vector<std::thread> threads;
  for (RandomOps& o : ops) threads.emplace_back([&] { o.Run(pool, 16000); });
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(pool.Flush().ok());
  Core* core = CoreOfForTest(&pool);
  EXPECT_GT(core->FreezesForTest(), 4u) << "too few checkpoints to say anything";
  EXPECT_EQ(core->CkptBoundMissesForTest(), 0u);
  ExpectClean(pool);
}

// A bound of fixed figures, in AUs and in pages, whatever the state.
class FixedCost final : public CheckpointCost {
 public:
  FixedCost(uint64_t units, uint64_t pages) : units_(units), pages_(pages) {}
  uint64_t UnitsBound(uint64_t, uint64_t) const override { return units_; }
  std::optional<uint64_t> PagesBound(uint64_t, uint64_t) const override { return pages_; }

 private:
  const uint64_t units_, pages_;
};

struct FirstFreeze {
  uint64_t pages = 0;   // what it bounded its writes by (FormatV3::PagesBound)
  uint64_t misses = 0;  // CkptBoundMissesForTest after it
};

// A format 3 pool at grain 4 KiB under FixedCost(units, pages), then
// durable one-grain writes, each a new extent, until the journal is full
// and a checkpoint freezes the state: the same calls, so the same state at
// that Freeze, in every pool this makes.
void RunToFirstFreeze(uint64_t units, uint64_t pages, FirstFreeze* out) {
  FaultInjectionEnv env;
  auto p = Pool::Create(&env, "p", Options(testing::kF3G4k));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  Core* core = CoreOfForTest(&pool);
  core->SetCheckpointCostForTest(std::make_shared<FixedCost>(units, pages));
  const uint64_t before = core->FreezesForTest();
  const uint64_t misses_before = core->CkptBoundMissesForTest();
  ASSERT_TRUE(pool.CreateLun("l", 8 << 20, kBs).ok());
  auto l = pool.OpenLun("l");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const uint64_t grain_blocks = testing::kF3G4k.grain / kBs;
  const std::vector<uint8_t> data(testing::kF3G4k.grain, 0x5a);
  // Every other grain, each write an extent of its own; past the LUN's
  // end, unmapped again in the same order (a record each too).
  const uint64_t lba_end = (*l)->block_count();
  for (uint64_t i = 0; core->FreezesForTest() == before; i++) {
    ASSERT_LT(i, lba_end / grain_blocks) << "the journal never filled";
    const uint64_t lba = (2 * i * grain_blocks) % lba_end;
    Status s = 2 * i * grain_blocks < lba_end
                   ? (*l)->Write(lba, grain_blocks, data.data(), Durability::kDurable)
                   : (*l)->Unmap(lba, grain_blocks, Durability::kDurable);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(core->FreezesForTest(), before + 1);
  out->pages = core->LastFreezePagesForTest();
  out->misses = core->CkptBoundMissesForTest() - misses_before;
}

// Format 3 asks AUs for its pages less the current chunks' free pages, and
// a bound rounds up to whole AUs: a bound short by one page is short by no
// AU, and only the detector's page comparison sees it.
TEST(CheckpointCostMisses, ABoundShortByOnePageButNoAuIsAMiss) {
  constexpr uint64_t kUnits = 4;  // ample for this small tree: the first run checks it
  FirstFreeze ample;
  ASSERT_NO_FATAL_FAILURE(RunToFirstFreeze(kUnits, ~uint64_t{0}, &ample));
  EXPECT_EQ(ample.misses, 0u) << "kUnits is short: the test says nothing of pages";
  ASSERT_GT(ample.pages, 1u);
  const uint64_t pages_per_au = kAu / 4096;  // format 3's checkpoint pages (kLeafPageBytes)
  ASSERT_LE((ample.pages - 1 + pages_per_au - 1) / pages_per_au, kUnits) << "one page short is an AU short";

  FirstFreeze exact;
  ASSERT_NO_FATAL_FAILURE(RunToFirstFreeze(kUnits, ample.pages, &exact));
  ASSERT_EQ(exact.pages, ample.pages) << "the runs froze different states";
  EXPECT_EQ(exact.misses, 0u) << "a bound of exactly the pages asked holds";

  FirstFreeze short_one;
  ASSERT_NO_FATAL_FAILURE(RunToFirstFreeze(kUnits, ample.pages - 1, &short_one));
  ASSERT_EQ(short_one.pages, ample.pages) << "the runs froze different states";
  EXPECT_EQ(short_one.misses, 1u) << "a bound one page short went unseen";
}

INSTANTIATE_TEST_SUITE_P(Formats, CheckpointCostTest, AllFormats(), FormatName());
INSTANTIATE_TEST_SUITE_P(Formats, CheckpointCostGrowthTest, ::testing::Values(testing::kF3Au, testing::kF3G4k),
                         FormatName());

}  // namespace
}  // namespace cowstore::store
