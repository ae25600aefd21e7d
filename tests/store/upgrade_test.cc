// SPDX-License-Identifier: Apache-2.0
// Pool::Upgrade (upgrade.h; docs/design/store-v3.md 3.7): a format 2 pool
// becomes format 3 in place, every LUN reading what it read, clones sharing
// at 4 KiB from then on; a power cut at any call of the upgrade, in every
// loss mode, leaves either the old pool or the upgraded one, each exactly,
// and a second upgrade completes; an older build refuses the upgraded pool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/meta_format.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "handler/store/upgrade.h"
#include "tests/common/sanitizers.h"
#include "tests/store/pattern.h"
#include "tests/store/slot_tear.h"

namespace cowstore::store {
namespace {

using D = Durability;
using Loss = FaultInjectionEnv::Loss;
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint32_t kAu = 64 * kKiB;
constexpr uint64_t kLunBytes = 1 * kMiB;

using testing::CutTearingSlotsInFlight;
using testing::Pattern;

std::vector<uint8_t> ReadLun(Pool& p, const std::string& name) {
  auto l = p.OpenLun(name);
  EXPECT_TRUE(l.ok()) << name << ": " << l.status().ToString();
  if (!l.ok()) return {};
  std::vector<uint8_t> v((*l)->block_count() * (*l)->block_size());
  Status s = (*l)->Read(0, (*l)->block_count(), v.data());
  EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
  return v;
}

// What a pool holds, as its users see it: every LUN's bytes and identity.
struct LunModel {
  std::vector<uint8_t> bytes;
  LunInfo info;
};
using PoolModel = std::map<std::string, LunModel>;

PoolModel ModelOf(Pool& p) {
  PoolModel m;
  for (const LunInfo& i : p.ListLuns()) m[i.name] = {ReadLun(p, i.name), i};
  return m;
}

// Equal as users see it: the same LUNs, identities, attributes and bytes
// (the byte counts of sharing change with the grain, so they are not compared).
void ExpectSameModel(const PoolModel& want, const PoolModel& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    SCOPED_TRACE("LUN " + name);
    auto it = got.find(name);
    ASSERT_NE(it, got.end());
    const LunModel& g = it->second;
    EXPECT_EQ(w.info.id, g.info.id);
    EXPECT_EQ(w.info.size_bytes, g.info.size_bytes);
    EXPECT_EQ(w.info.block_size, g.info.block_size);
    EXPECT_EQ(w.info.read_only, g.info.read_only);
    EXPECT_EQ(w.info.origin, g.info.origin);
    EXPECT_EQ(w.info.created_unix, g.info.created_unix);
    EXPECT_EQ(w.bytes.size(), g.bytes.size());
    EXPECT_TRUE(w.bytes == g.bytes) << "a LUN's bytes changed";
  }
}

// A format 2 pool (64 KiB AUs) with every kind of state an upgrade carries:
// a written LUN, its clone diverged by a few writes, a snapshot, a LUN of
// 4096-byte blocks, a zeroed range, a deleted LUN whose space went free
// (so the new metadata lands among used AUs), and records still in the
// journal: the image is taken while the pool is open, as after a power cut.
std::vector<uint8_t> Format2Image(uint64_t journal_bytes = 64 * kKiB) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.format = 2;
  o.allocation_unit = kAu;
  o.grain = kAu;
  o.size_bytes = 16 * kMiB;
  o.journal_bytes = journal_bytes;
  auto p = Pool::Create(&env, "p", o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  Pool& pool = **p;
  auto write = [&](const std::string& lun, uint64_t off, uint64_t n, uint8_t seed) {
    auto l = pool.OpenLun(lun).value();
    auto data = Pattern(n, seed);
    const uint32_t bs = l->block_size();
    EXPECT_TRUE(l->Write(off / bs, n / bs, data.data(), D::kDurable).ok());
  };
  EXPECT_TRUE(pool.CreateLun("scratch", kLunBytes, 512).ok());
  write("scratch", 0, kLunBytes, 9);
  EXPECT_TRUE(pool.CreateLun("base", kLunBytes, 512).ok());
  write("base", 0, kLunBytes, 1);
  EXPECT_TRUE(pool.CloneLun("base", "clone").ok());
  write("clone", 4 * kKiB, 4 * kKiB, 2);
  write("clone", 300 * kKiB, 8 * kKiB, 3);
  EXPECT_TRUE(pool.SnapshotLun("clone", "snap").ok());
  write("clone", 700 * kKiB, 4 * kKiB, 4);
  EXPECT_TRUE(pool.CreateLun("big-blocks", kLunBytes, 4096).ok());
  write("big-blocks", 128 * kKiB, 256 * kKiB, 5);
  {
    auto l = pool.OpenLun("base").value();
    EXPECT_TRUE(l->ZeroRange(512 * kKiB / 512, 128 * kKiB / 512, D::kDurable).ok());
  }
  EXPECT_TRUE(pool.DeleteLun("scratch").ok());
  write("big-blocks", 768 * kKiB, 64 * kKiB, 6);
  // A LUN ending inside an AU and inside a 4 KiB grain: the old map covers
  // its last AU whole, the new one must end with the LUN.
  EXPECT_TRUE(pool.CreateLun("odd", kLunBytes + 4608, 512).ok());
  write("odd", 0, kLunBytes + 4608, 7);
  return env.Snapshot("p");
}

PoolModel ModelOfImage(const std::vector<uint8_t>& img) {
  FaultInjectionEnv env;
  env.Install("p", img.data(), img.size());
  auto p = Pool::Open(&env, "p", OpenOptions{.read_only = true});
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  if (!p.ok()) return {};
  return ModelOf(**p);
}

// The pool in `env` opens, is the format `grain` says (the AU: format 2;
// 4 KiB: format 3), checks clean and holds `want`.
void ExpectPool(FaultInjectionEnv* env, const PoolModel& want, uint32_t* grain) {
  auto p = Pool::Open(env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  *grain = (*p)->grain();
  EXPECT_TRUE(*grain == kAu || *grain == 4096) << *grain;
  EXPECT_EQ((*p)->allocation_unit(), kAu);
  CheckReport r = (*p)->Check(nullptr, nullptr);
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
  ASSERT_NO_FATAL_FAILURE(ExpectSameModel(want, ModelOf(**p)));
  EXPECT_TRUE((*p)->Close().ok());
}

class Upgrade : public ::testing::Test {
 protected:
  void SetUp() override {
    img_ = Format2Image();
    ASSERT_FALSE(img_.empty());
    want_ = ModelOfImage(img_);
    ASSERT_EQ(want_.size(), 5u);
    env_.Install("p", img_.data(), img_.size());
  }
  std::vector<uint8_t> img_;
  PoolModel want_;
  FaultInjectionEnv env_;
};

TEST_F(Upgrade, AFormat2PoolBecomesFormat3KeepingEveryByteAndSharesAt4KiB) {
  auto r = Pool::Upgrade(&env_, "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->already);
  EXPECT_EQ(r->from_format, 2u);
  EXPECT_EQ(r->allocation_unit, kAu);
  EXPECT_EQ(r->grain, 4096u);
  EXPECT_EQ(r->luns, 5u);
  EXPECT_GT(r->extents, 0u);
  EXPECT_EQ(r->journal_bytes, 64 * kKiB);
  EXPECT_GT(r->metadata_pages, 0u);
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env_, want_, &grain));
  EXPECT_EQ(grain, 4096u);

  // The point of it: a 4 KiB write into data the clone shares with its
  // source now costs the clone 4 KiB, not an AU (64 KiB here).
  auto p = Pool::Open(&env_, "p");
  ASSERT_TRUE(p.ok());
  const uint64_t before = (*p)->GetLun("clone")->exclusive_bytes;
  auto l = (*p)->OpenLun("clone").value();
  auto data = Pattern(4 * kKiB, 77);
  ASSERT_TRUE(l->Write(500 * kKiB / 512, 8, data.data(), D::kDurable).ok());
  EXPECT_EQ((*p)->GetLun("clone")->exclusive_bytes, before + 4 * kKiB);
  l.reset();
  ASSERT_TRUE((*p)->Close().ok());
  p->reset();

  // An older build (formats 1 and 2 only) refuses the pool and writes nothing.
  auto f = env_.OpenLocked("p", Env::Mode::kReadOnly);
  ASSERT_TRUE(f.ok());
  SuperblockSlots slots;
  auto older = ChooseMetaFormat(f->get(), &slots, ServedFormats::kV1V2);
  EXPECT_EQ(older.status().code(), Code::kUnsupported) << older.status().ToString();
}

// Progress: never backwards, each check by its LUNs (five here, so more
// than the three steps' ends), and whole at the end.
TEST_F(Upgrade, ProgressMovesForwardThroughBothChecksToTheEnd) {
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  auto r = Pool::Upgrade(
      &env_, "p", 4096,
      [](void* c, uint64_t done, uint64_t total) {
        static_cast<std::vector<std::pair<uint64_t, uint64_t>>*>(c)->push_back({done, total});
      },
      &seen);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(seen.size(), 2 * want_.size());
  for (size_t i = 0; i < seen.size(); i++) {
    EXPECT_EQ(seen[i].second, 3000u);
    if (i > 0) {
      EXPECT_GE(seen[i].first, seen[i - 1].first) << "at report " << i;
    }
  }
  EXPECT_EQ(seen.back().first, 3000u);
}

TEST_F(Upgrade, ASecondUpgradeFindsFormat3AndChangesNothing) {
  ASSERT_TRUE(Pool::Upgrade(&env_, "p").ok());
  auto again = Pool::Upgrade(&env_, "p");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->already);
  EXPECT_EQ(again->from_format, 3u);
  EXPECT_EQ(again->grain, 4096u);
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env_, want_, &grain));
  EXPECT_EQ(grain, 4096u);
}

TEST_F(Upgrade, AGrainTheAllocationUnitDoesNotTakeIsRefusedAndThePoolStaysFormat2) {
  for (uint32_t grain : {3000u, 128 * 1024u, 256u}) {
    SCOPED_TRACE(grain);
    auto r = Pool::Upgrade(&env_, "p", grain);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  }
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env_, want_, &grain));
  EXPECT_EQ(grain, kAu);
}

TEST(UpgradeFull, APoolTooFullForTheNewMetadataIsRefusedAndStaysFormat2) {
  // A journal of 1 MiB: format 3 needs 16 free AUs for it. A thick LUN
  // takes every AU the pool lets data have, which leaves fewer.
  std::vector<uint8_t> img = Format2Image(1 * kMiB);
  ASSERT_FALSE(img.empty());
  FaultInjectionEnv env;
  env.Install("p", img.data(), img.size());
  PoolModel want;
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok());
    const SpaceInfo sp = (*p)->Space();
    ASSERT_TRUE((*p)->CreateLun("filler", sp.Bytes(sp.free_units), 512).ok());
    auto l = (*p)->OpenLun("filler").value();
    const uint64_t per_au = kAu / 512;
    uint64_t lba = 0;
    while (lba < l->block_count() && l->Allocate(lba, per_au, D::kDurable).ok()) lba += per_au;
    ASSERT_GT(lba, 0u);
    l.reset();
    want = ModelOf(**p);
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto r = Pool::Upgrade(&env, "p");
  EXPECT_EQ(r.status().code(), Code::kNoSpace) << r.status().ToString();
  EXPECT_NE(r.status().message().find("free"), std::string::npos) << r.status().message();
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env, want, &grain));
  EXPECT_EQ(grain, kAu);
}

// A grain GrainRule allows but a LUN's blocks do not fit (512 bytes
// against 4096-byte blocks): refused before anything is written.
TEST_F(Upgrade, AGrainBelowALunsBlockSizeIsRefusedAndThePoolStaysFormat2) {
  auto r = Pool::Upgrade(&env_, "p", 512);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("big-blocks"), std::string::npos) << r.status().message();
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env_, want_, &grain));
  EXPECT_EQ(grain, kAu);
}

TEST_F(Upgrade, APoolInUseElsewhereIsRefusedBusy) {
  auto p = Pool::Open(&env_, "p");
  ASSERT_TRUE(p.ok());
  auto r = Pool::Upgrade(&env_, "p");
  EXPECT_EQ(r.status().code(), Code::kBusy) << r.status().ToString();
  EXPECT_EQ((*p)->grain(), kAu);
}

// The proof the design asks for: a power cut at every mutating call of an
// upgrade, in each loss mode. Afterwards the pool opens as format 2 or
// format 3, checks clean and holds exactly what it held; a second upgrade
// then completes, and the pool is format 3 holding the same.
TEST_F(Upgrade, APowerCutAtAnyCallLeavesTheOldPoolOrTheNewOneExactly) {
  uint64_t calls = 0;
  {
    FaultInjectionEnv count;
    count.Install("p", img_.data(), img_.size());
    const uint64_t c0 = count.mutating_calls();
    ASSERT_TRUE(Pool::Upgrade(&count, "p").ok());
    calls = count.mutating_calls() - c0;
  }
  ASSERT_GT(calls, 10u);
  std::printf("an upgrade of the test pool makes %llu mutating calls\n", static_cast<unsigned long long>(calls));
  int old_pools = 0, new_pools = 0, uncut = 0;
  // The random modes with several seeds each: a cut between two unsynced
  // writes (say both superblock slots) loses the pool only when both tear,
  // which a few seeds rarely do; so also every slot in flight torn
  // (slot_tear.h), which is what catches an upgrade whose two slot writes
  // are ever in flight together.
  struct Mode {
    Loss loss;
    uint64_t seed;
    bool tear_slots = false;
  };
  std::vector<Mode> modes = {{Loss::kDropAll, 0}, {Loss::kDropAll, 0, true}};
  if (!sanitizer::kTsan) modes.push_back({Loss::kKeepAll, 0});
  // (Under the sanitizers, torn once, and under TSan not kept: every call
  // is still cut. TSan costs the most here and finds the least: one thread
  // upgrades.)
  for (uint64_t seed = 1; seed <= (sanitizer::kSanitized ? 1 : 2); seed++) {
    if (!sanitizer::kSanitized) modes.push_back({Loss::kRandom, seed});
    modes.push_back({Loss::kTear, seed});
  }
  for (uint64_t cut = 0; cut < calls; cut++) {
    for (const auto& [loss, seed, tear_slots] : modes) {
      SCOPED_TRACE("cut after " + std::to_string(cut) + " calls, loss mode " +
                   (tear_slots ? std::string("slots in flight torn") : std::to_string(static_cast<int>(loss))) +
                   ", seed " + std::to_string(seed));
      FaultInjectionEnv env;
      env.Install("p", img_.data(), img_.size());
      env.CrashAfter(static_cast<int64_t>(cut));
      auto r = Pool::Upgrade(&env, "p");
      // The pool's background punches (thinner.h) count too, so a late cut
      // may fall past a run that made fewer calls: then nothing was cut.
      if (r.ok()) uncut++;
      if (tear_slots)
        CutTearingSlotsInFlight(&env);
      else
        env.PowerLoss(loss, cut * 64 + seed);
      env.Disarm();
      uint32_t grain = 0;
      ASSERT_NO_FATAL_FAILURE(ExpectPool(&env, want_, &grain));
      (grain == kAu ? old_pools : new_pools)++;
      auto again = Pool::Upgrade(&env, "p");
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      ASSERT_NO_FATAL_FAILURE(ExpectPool(&env, want_, &grain));
      EXPECT_EQ(grain, 4096u);
    }
  }
  // Both outcomes occur: the cuts span the commit point; and nearly every
  // run was cut.
  EXPECT_GT(old_pools, 0);
  EXPECT_GT(new_pools, 0);
  EXPECT_LT(uncut * 10, old_pools + new_pools) << uncut << " runs were not cut";
}

// Free space in single AUs (two LUNs' first writes interleaved, one of them
// deleted): no free run holds the 1 MiB journal (16 AUs), which goes into
// several runs; the format 3 open takes that list, and the pool serves and
// reopens after more writes.
TEST(UpgradeFragmented, AJournalInManyFreeRunsOpensAndServes) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.format = 2;
  o.allocation_unit = kAu;
  o.grain = kAu;
  o.size_bytes = 16 * kMiB;
  o.journal_bytes = 1 * kMiB;
  PoolModel want;
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const uint64_t aus = 112;  // of the 239 AUs of data: 224, and the tail left holds no 16
    ASSERT_TRUE((*p)->CreateLun("keep", aus * kAu, 512).ok());
    ASSERT_TRUE((*p)->CreateLun("gone", aus * kAu, 512).ok());
    auto keep = (*p)->OpenLun("keep").value();
    auto gone = (*p)->OpenLun("gone").value();
    for (uint64_t i = 0; i < aus; i++) {
      auto a = Pattern(kAu, static_cast<uint8_t>(i));
      ASSERT_TRUE(keep->Write(i * kAu / 512, kAu / 512, a.data(), D::kBuffered).ok());
      ASSERT_TRUE(gone->Write(i * kAu / 512, kAu / 512, a.data(), D::kBuffered).ok());
    }
    ASSERT_TRUE((*p)->Flush().ok());
    keep.reset();
    gone.reset();
    ASSERT_TRUE((*p)->DeleteLun("gone").ok());
    want = ModelOf(**p);
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto r = Pool::Upgrade(&env, "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->journal_bytes, 1 * kMiB);
  {
    auto f = env.OpenLocked("p", Env::Mode::kReadOnly);
    ASSERT_TRUE(f.ok());
    std::vector<char> slot(kSuperblockSlot);
    ASSERT_TRUE((*f)->Read(0, slot.size(), slot.data()).ok());
    SuperblockV3 sb;
    ASSERT_TRUE(DecodeSuperblockV3(slot.data(), slot.size(), 16 * kMiB, &sb).ok());
    EXPECT_GT(sb.journal.size(), 1u) << "the journal found one free run: the test no longer fragments";
  }
  uint32_t grain = 0;
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env, want, &grain));
  EXPECT_EQ(grain, 4096u);
  // It serves: writes into the upgraded LUN and a clone of it, then a reopen.
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->CloneLun("keep", "copy").ok());
    auto l = (*p)->OpenLun("copy").value();
    for (uint64_t i = 0; i < 200; i++) {
      auto a = Pattern(4 * kKiB, static_cast<uint8_t>(200 + i));
      ASSERT_TRUE(l->Write((i * 37 % 1280) * 8, 8, a.data(), D::kDurable).ok());
    }
    l.reset();
    want = ModelOf(**p);
    ASSERT_TRUE((*p)->Close().ok());
  }
  ASSERT_NO_FATAL_FAILURE(ExpectPool(&env, want, &grain));
}

// On a real file (PosixEnv): the lock another open holds refuses the
// upgrade (kBusy); closed, the pool upgrades and reads the same.
TEST(UpgradePosix, AnOpenPoolIsBusyAndAClosedOneUpgrades) {
  const std::string path = ::testing::TempDir() + "/cowstore-upgrade-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  PoolOptions o;
  o.format = 2;
  o.allocation_unit = kAu;
  o.grain = kAu;
  o.size_bytes = 32 * kMiB;
  o.journal_bytes = 4 * kMiB;
  PoolModel want;
  {
    auto p = Pool::Create(DefaultEnv(), path, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("a", kLunBytes, 512).ok());
    auto l = (*p)->OpenLun("a").value();
    auto data = Pattern(kLunBytes / 2, 21);
    ASSERT_TRUE(l->Write(0, data.size() / 512, data.data(), D::kDurable).ok());
    l.reset();
    want = ModelOf(**p);
    auto busy = Pool::Upgrade(DefaultEnv(), path);
    EXPECT_EQ(busy.status().code(), Code::kBusy) << busy.status().ToString();
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto r = Pool::Upgrade(DefaultEnv(), path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->from_format, 2u);
  {
    auto p = Pool::Open(DefaultEnv(), path);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)->grain(), 4096u);
    ASSERT_NO_FATAL_FAILURE(ExpectSameModel(want, ModelOf(**p)));
    ASSERT_TRUE((*p)->Close().ok());
  }
  ::unlink(path.c_str());
}

// ------------------------------------------------------- the layout's rule

TEST(UpgradeLayout, PagesTakeTheLowestFreeAusAndTheJournalTheFirstRunThatHoldsIt) {
  // Used: 0-1, 5, 7-9 (as maps list them: out of order, overlapping).
  // Free: 2-4, 6, 10-19.
  auto l = PlanUpgradeLayout(20, {{9, 1}, {0, 2}, {5, 1}, {7, 2}, {0, 1}, {8, 2}}, 2, 4);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->page_aus, (std::vector<uint64_t>{2, 3}));
  ASSERT_EQ(l->journal.size(), 1u);
  EXPECT_EQ(l->journal[0], (JournalExtent{10, 4}));
}

TEST(UpgradeLayout, AJournalNoFreeRunHoldsTakesSeveralRunsInOrder) {
  // Free: 1, 3-4, 6-7, 9.
  auto l = PlanUpgradeLayout(10, {{0, 1}, {2, 1}, {5, 1}, {8, 1}}, 1, 5);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->page_aus, (std::vector<uint64_t>{1}));
  EXPECT_EQ(l->journal, (std::vector<JournalExtent>{{3, 2}, {6, 2}, {9, 1}}));
}

TEST(UpgradeLayout, TooLittleOrTooFragmentedFreeSpaceIsNoSpace) {
  auto l = PlanUpgradeLayout(10, {{0, 1}, {2, 1}, {5, 1}, {8, 1}}, 2, 5);  // 6 free, 7 needed
  EXPECT_EQ(l.status().code(), Code::kNoSpace);
  std::vector<UsedRun> every_other;
  for (uint64_t u = 0; u < 200; u += 2) every_other.push_back({u, 1});
  l = PlanUpgradeLayout(200, every_other, 1, kMaxJournalExtents + 1);  // 100 free AUs, none adjacent
  EXPECT_EQ(l.status().code(), Code::kNoSpace);
  EXPECT_NE(l.status().message().find("fragmented"), std::string::npos) << l.status().message();
  l = PlanUpgradeLayout(200, every_other, 1, kMaxJournalExtents);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
}

}  // namespace
}  // namespace cowstore::store
