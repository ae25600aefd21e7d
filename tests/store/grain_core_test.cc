// SPDX-License-Identifier: Apache-2.0
// Core at grain 4 KiB / AU 64 KiB (store-v3.md 5d, sub-step 4 "Space in
// grains"): a format 3 pool made by FormatV3::Create and opened by Core,
// whose space map is a GrainSpace. A clone's copy-on-write at random 4 KiB
// blocks, against a model counting grains: Space(), the per-LUN
// exclusive/shared figures, the check (clean, and finding a damaged count),
// a reopen giving the same figures, Grow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kGrain = 4 << 10;
constexpr uint64_t kGrainsPerAu = kAu / kGrain;
constexpr uint64_t kJournal = 256 << 10;
constexpr uint64_t kSize = 32 << 20;
constexpr uint64_t kLunGrains = 1024;  // LUN "a": 4 MiB of 4 KiB blocks

Uuid Id(uint8_t b) {
  Uuid u{};
  u.fill(b);
  return u;
}

// A soft threshold of 1 %: Core offers the journal no new AUs (it grows only
// below the line, checkpoint.cc), so the journal stays at kJournal and the
// figures below count the LUNs' grains and the create's metadata only.
void CreateV3(FaultInjectionEnv* env, uint64_t size = kSize) {
  auto f = env->OpenLocked("pool", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(FormatV3::Create(f->get(), Id(7), kAu, kGrain, size, kJournal, 1).ok());
}

std::shared_ptr<Core> Open(FaultInjectionEnv* env) {
  auto c = Core::Open(env, "pool", false);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c.value() : nullptr;
}

// Writes grain-sized blocks [lba, lba+n) of `lun`, each filled with `fill`.
Status WriteBlocks(Core* core, const std::string& lun, uint64_t lba, uint64_t n, uint8_t fill) {
  auto h = core->Acquire(lun);
  if (!h.ok()) return h.status();
  std::vector<uint8_t> data(n * kGrain, fill);
  iovec v{data.data(), data.size()};
  Status s = core->Write(h->get(), lba, n, {&v, 1}, Durability::kBuffered);
  core->ReleaseHandle(h->get());
  return s;
}

// What the model says: a LUN "a" written whole, its clone "b", and the
// grains of "b" overwritten since (each copied once, then in place).
struct Model {
  std::set<uint64_t> b_own;  // b's blocks no longer shared with a
  uint64_t mapped_grains() const { return kLunGrains + b_own.size(); }
  uint64_t shared_grains() const { return kLunGrains - b_own.size(); }
};

// Space() and both LUNs' figures against the model, exactly, in grains.
void ExpectFigures(Core* core, const Model& m, const std::string& when) {
  SCOPED_TRACE(when);
  const SpaceInfo si = core->Space();
  EXPECT_EQ(si.allocation_unit, kAu);
  EXPECT_EQ(si.unit_bytes, kGrain);
  EXPECT_EQ(si.metadata_units % kGrainsPerAu, 0u);
  EXPECT_GT(si.metadata_units, 0u);
  EXPECT_EQ(si.allocated_units, m.mapped_grains() + si.metadata_units);
  EXPECT_EQ(si.shared_units, m.shared_grains());
  EXPECT_LE(si.free_units + si.allocated_units, si.total_units);
  EXPECT_EQ(si.mapped_bytes, 2 * kLunGrains * kGrain);
  EXPECT_EQ(si.saved_bytes, si.mapped_bytes - m.mapped_grains() * kGrain);
  EXPECT_EQ(si.Bytes(si.shared_units), m.shared_grains() * kGrain);
  ASSERT_EQ(si.luns.size(), 2u);
  for (const LunInfo& l : si.luns) {
    SCOPED_TRACE(l.name);
    EXPECT_EQ(l.mapped_bytes, kLunGrains * kGrain);
    EXPECT_EQ(l.exclusive_bytes, m.b_own.size() * kGrain);
    EXPECT_EQ(l.shared_bytes, m.shared_grains() * kGrain);
    auto g = core->GetLun(l.name);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->exclusive_bytes, l.exclusive_bytes);
    EXPECT_EQ(g->shared_bytes, l.shared_bytes);
  }
}

void ExpectClean(Core* core, const std::string& when) {
  const CheckReport r = core->Check(nullptr, nullptr, true);
  EXPECT_TRUE(r.clean) << when << ": " << (r.problems.empty() ? "" : r.problems.front());
  EXPECT_EQ(r.leaked_units, 0u) << when;
}

// Overwrites `percent` % of b's blocks, drawn at random (repeats included:
// a block b owns already is overwritten in place).
void Overwrite(Core* core, Model* m, std::mt19937_64* rng, uint64_t percent) {
  for (uint64_t i = 0; i < kLunGrains * percent / 100; i++) {
    const uint64_t lba = (*rng)() % kLunGrains;
    ASSERT_TRUE(WriteBlocks(core, "b", lba, 1, static_cast<uint8_t>(i)).ok());
    m->b_own.insert(lba);
  }
}

// A fresh format 3 pool holding LUN "a", written whole, and "b", its clone.
void CloneOfAWrittenLun(FaultInjectionEnv* env, std::shared_ptr<Core>* core) {
  ASSERT_NO_FATAL_FAILURE(CreateV3(env));
  *core = Open(env);
  ASSERT_TRUE(*core);
  ASSERT_TRUE((*core)->CreateLun("a", kLunGrains * kGrain, 4096).ok());
  ASSERT_TRUE(WriteBlocks(core->get(), "a", 0, kLunGrains, 1).ok());
  ASSERT_TRUE((*core)->CloneLun("a", "b").ok());
}

TEST(GrainCore, ACloneOverwrittenAtRandomCountsGrainsExactlyAndReopensTheSame) {
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FaultInjectionEnv env;
    ASSERT_NO_FATAL_FAILURE(CreateV3(&env));
    std::shared_ptr<Core> core = Open(&env);
    ASSERT_TRUE(core);
    ASSERT_EQ(core->grain(), kGrain);
    const SpaceInfo empty = core->Space();
    // The data area in grains, whole AUs of it.
    EXPECT_EQ(empty.total_units % kGrainsPerAu, 0u);
    EXPECT_GT(empty.total_units * kGrain, kSize - kJournal - 4 * kAu);
    EXPECT_EQ(empty.free_units + empty.metadata_units, empty.total_units);
    ASSERT_TRUE(core->CreateLun("a", kLunGrains * kGrain, 4096).ok());
    for (uint64_t lba = 0; lba < kLunGrains; lba += 64) ASSERT_TRUE(WriteBlocks(core.get(), "a", lba, 64, 0xa5).ok());
    ASSERT_TRUE(core->CloneLun("a", "b").ok());
    Model m;
    std::mt19937_64 rng(seed);
    ASSERT_NO_FATAL_FAILURE(ExpectFigures(core.get(), m, "after the clone"));
    ASSERT_NO_FATAL_FAILURE(Overwrite(core.get(), &m, &rng, 1));
    ASSERT_NO_FATAL_FAILURE(ExpectFigures(core.get(), m, "1 %"));
    ExpectClean(core.get(), "1 %");
    ASSERT_NO_FATAL_FAILURE(Overwrite(core.get(), &m, &rng, 5));
    ASSERT_GT(m.b_own.size(), kLunGrains * 5 / 100);  // both rounds landed, some blocks twice at most
    ASSERT_NO_FATAL_FAILURE(ExpectFigures(core.get(), m, "1 % then 5 %"));
    ExpectClean(core.get(), "1 % then 5 %");
    ASSERT_TRUE(core->Close().ok());
    core.reset();

    auto off = Pool::CheckOffline(&env, "pool");
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    EXPECT_TRUE(off->clean) << (off->problems.empty() ? "" : off->problems.front());

    core = Open(&env);
    ASSERT_TRUE(core);
    ASSERT_NO_FATAL_FAILURE(ExpectFigures(core.get(), m, "reopened"));
    ExpectClean(core.get(), "reopened");
    // Nothing in flight after an open: every grain is mapped, metadata or free.
    const SpaceInfo si = core->Space();
    EXPECT_EQ(si.free_units + si.allocated_units, si.total_units);
    ASSERT_TRUE(core->Close().ok());
  }
}

// A clone diverging at random, its 1 MiB regions written in turn: each
// region's new grains lie together, in one AU's worth of grains (its chunk,
// store-v3.md 3.5), so a sequential read of the region reads the source's
// grains in place and one short stretch of new ones. Deleting the clone
// gives its chunks' free grains back.
TEST(GrainCore, EachRegionsNewGrainsLieTogetherAndTheLunsDeleteClosesItsChunks) {
  FaultInjectionEnv env;
  std::shared_ptr<Core> core;
  ASSERT_NO_FATAL_FAILURE(CloneOfAWrittenLun(&env, &core));
  constexpr uint64_t kPerRegion = (1 << 20) / kGrain, kRegions = kLunGrains / kPerRegion;
  ASSERT_EQ(kRegions, 4u);
  std::vector<std::set<uint64_t>> written(kRegions);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 40; i++) {
    const uint64_t region = i % kRegions;
    uint64_t lba;
    do lba = region * kPerRegion + rng() % kPerRegion; while (written[region].contains(lba));
    written[region].insert(lba);
    ASSERT_TRUE(WriteBlocks(core.get(), "b", lba, 1, static_cast<uint8_t>(i)).ok());
  }
  core->WithStateForTest([&](const MetaState& st) {
    const LunState* b = st.FindName("b");
    ASSERT_TRUE(b);
    for (uint64_t region = 0; region < kRegions; region++) {
      uint64_t lo = UINT64_MAX, hi = 0;
      for (uint64_t lba : written[region]) {
        std::vector<store::Run> r;
        b->map.Lookup(lba, 1, &r);
        ASSERT_EQ(r.size(), 1u);
        lo = std::min(lo, r[0].phys);
        hi = std::max(hi, r[0].phys);
      }
      EXPECT_LT(hi - lo, kGrainsPerAu) << "region " << region << ": its 10 new grains span " << hi - lo + 1;
    }
  });
  ExpectClean(core.get(), "after the writes");
  core->WithSpaceForTest([&](PoolSpace& s) {
    EXPECT_FALSE(dynamic_cast<GrainSpace&>(s).free_space().chunk_runs().empty());
  });
  const uint64_t free_before = core->Space().free_units;
  ASSERT_TRUE(core->DeleteLun("b").ok());
  core->WithSpaceForTest([&](PoolSpace& s) {
    const FreeSpace& fs = dynamic_cast<GrainSpace&>(s).free_space();
    EXPECT_TRUE(fs.chunk_runs().empty());
    EXPECT_EQ(fs.chunk_count(), 0u);
  });
  EXPECT_GE(core->Space().free_units, free_before);  // b's grains pending or free, none lost
  ExpectClean(core.get(), "after the delete");
}

// Deleting the source frees, grain by grain, what only it mapped: b's
// shared grains become its own, the freed grains free again.
TEST(GrainCore, DeletingTheSourceFreesItsOwnGrainsAndLeavesTheCloneExclusive) {
  FaultInjectionEnv env;
  std::shared_ptr<Core> core;
  ASSERT_NO_FATAL_FAILURE(CloneOfAWrittenLun(&env, &core));
  Model m;
  std::mt19937_64 rng(9);
  ASSERT_NO_FATAL_FAILURE(Overwrite(core.get(), &m, &rng, 5));
  ASSERT_TRUE(core->DeleteLun("a").ok());
  ASSERT_TRUE(core->Close().ok());
  core.reset();
  core = Open(&env);
  ASSERT_TRUE(core);
  const SpaceInfo si = core->Space();
  EXPECT_EQ(si.allocated_units, kLunGrains + si.metadata_units);
  EXPECT_EQ(si.shared_units, 0u);
  EXPECT_EQ(si.free_units + si.allocated_units, si.total_units);
  ASSERT_EQ(si.luns.size(), 1u);
  EXPECT_EQ(si.luns[0].exclusive_bytes, kLunGrains * kGrain);
  EXPECT_EQ(si.luns[0].shared_bytes, 0u);
  ExpectClean(core.get(), "after the delete");
  ASSERT_TRUE(core->Close().ok());
}

// The check recounts a GrainSpace from the maps: a shared count one too
// high, and a grain taken from free space that nothing maps (leaked), are
// each reported.
TEST(GrainCore, TheCheckFindsADamagedSharedCountAndALeakedGrain) {
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(CreateV3(&env));
  std::shared_ptr<Core> core = Open(&env);
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->CreateLun("a", kLunGrains * kGrain, 4096).ok());
  ASSERT_TRUE(WriteBlocks(core.get(), "a", 0, 64, 1).ok());
  ASSERT_TRUE(core->CloneLun("a", "b").ok());
  ExpectClean(core.get(), "before the damage");

  core->WithSpaceForTest([](PoolSpace& s) {
    auto* g = dynamic_cast<GrainSpace*>(&s);
    ASSERT_NE(g, nullptr);
    const std::vector<SharedRecord> recs = g->shared().All();
    ASSERT_FALSE(recs.empty());
    ASSERT_TRUE(s.Inc(recs.front().phys + 3, 1).ok());  // one grain of the clone's, counted 3
  });
  CheckReport r = core->Check(nullptr, nullptr, false);
  EXPECT_FALSE(r.clean);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems.front().find("reference count"), std::string::npos) << r.problems.front();

  FaultInjectionEnv env2;
  ASSERT_NO_FATAL_FAILURE(CreateV3(&env2));
  core.reset();
  core = Open(&env2);
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->CreateLun("a", kLunGrains * kGrain, 4096).ok());
  ASSERT_TRUE(WriteBlocks(core.get(), "a", 0, 64, 1).ok());
  core->WithSpaceForTest([](PoolSpace& s) {
    std::vector<uint64_t> g;
    ASSERT_TRUE(s.Reserve(2, &g));
    s.Mapped(g);  // out of free space and reservations, and no record maps them
  });
  r = core->Check(nullptr, nullptr, false);
  EXPECT_FALSE(r.clean);
  EXPECT_EQ(r.leaked_units, 2u);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems.front().find("2 grains are leaked"), std::string::npos) << r.problems.front();
}

// Core's check places every grain of its GrainSpace (grain_check.h): a
// grain a LUN maps that the space also holds pending (its last owner
// dropped by a record the maps never saw) is named with both places.
TEST(GrainCore, TheCheckFindsAGrainMappedAndPending) {
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(CreateV3(&env));
  std::shared_ptr<Core> core = Open(&env);
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->CreateLun("a", kLunGrains * kGrain, 4096).ok());
  ASSERT_TRUE(WriteBlocks(core.get(), "a", 0, 8, 1).ok());
  ExpectClean(core.get(), "before the damage");
  uint64_t victim = 0;
  core->WithSpaceForTest([&](PoolSpace& s) {
    auto* g = dynamic_cast<GrainSpace*>(&s);
    ASSERT_NE(g, nullptr);
    // The first mapped grain: the first one neither free nor metadata.
    const std::map<uint64_t, uint64_t> free = g->free_runs();
    std::set<uint64_t> meta;
    for (uint64_t au : g->meta_aus())
      for (uint64_t q = au * kGrainsPerAu; q < (au + 1) * kGrainsPerAu; q++) meta.insert(q);
    for (victim = 0;; victim++) {
      auto it = free.upper_bound(victim);
      const bool is_free = it != free.begin() && std::prev(it)->first + std::prev(it)->second > victim;
      if (!is_free && !meta.contains(victim)) break;
    }
    s.Dec(victim, 1, UINT64_MAX);  // pending under a ticket never durable
  });
  const CheckReport r = core->Check(nullptr, nullptr, false);
  EXPECT_FALSE(r.clean);
  bool found = false;
  for (const std::string& p : r.problems)
    found = found || p.find("grains [" + std::to_string(victim) + ", " + std::to_string(victim + 1) +
                            ") are mapped and also pending free") != std::string::npos;
  EXPECT_TRUE(found) << (r.problems.empty() ? "no problem" : r.problems.front());
  EXPECT_EQ(r.unit_bytes, kGrain);
}

// Grow at grain < AU: the new AUs arrive as grains, free; the check and a
// reopen agree.
TEST(GrainCore, GrowAddsTheNewAusAsFreeGrains) {
  // Too small for the LUN's data until it grows.
  constexpr uint64_t kSmall = 4 << 20, kGrown = kSmall + 32 * kAu;
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(CreateV3(&env, kSmall));
  std::shared_ptr<Core> core = Open(&env);
  ASSERT_TRUE(core);
  ASSERT_TRUE(core->CreateLun("a", kLunGrains * kGrain, 4096).ok());
  ASSERT_TRUE(WriteBlocks(core.get(), "a", 0, 100, 1).ok());
  const SpaceInfo before = core->Space();
  ASSERT_LT(before.total_units, kLunGrains);
  ASSERT_TRUE(core->Grow(kGrown).ok());
  const SpaceInfo after = core->Space();
  EXPECT_EQ(after.total_units, before.total_units + 32 * kGrainsPerAu);
  EXPECT_EQ(after.free_units, before.free_units + 32 * kGrainsPerAu);
  EXPECT_EQ(after.allocated_units, before.allocated_units);
  EXPECT_EQ(after.pool_size_bytes, kGrown);
  ExpectClean(core.get(), "grown");
  // The rest of the LUN fits only in the new grains.
  ASSERT_TRUE(WriteBlocks(core.get(), "a", 100, kLunGrains - 100, 2).ok());
  ExpectClean(core.get(), "grown and filled");
  ASSERT_TRUE(core->Close().ok());
  core.reset();
  core = Open(&env);
  ASSERT_TRUE(core);
  const SpaceInfo re = core->Space();
  EXPECT_EQ(re.total_units, after.total_units);
  EXPECT_EQ(re.allocated_units, kLunGrains + re.metadata_units);
  EXPECT_EQ(re.free_units + re.allocated_units, re.total_units);
  ExpectClean(core.get(), "grown, reopened");
  ASSERT_TRUE(core->Close().ok());
}

}  // namespace
}  // namespace cowstore::store
