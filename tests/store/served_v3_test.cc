// SPDX-License-Identifier: Apache-2.0
// Format 3 served by Core at grain == AU (store-v3.md, plan step 5d,
// sub-step 6): PoolOptions' format and grain, a v3 pool through
// Pool::Create/Open (read-write and read-only), CheckOffline and Grow on it,
// the journal grown at checkpoints within what Core offers (nothing below
// the soft threshold), v3 replay's LUN blocks rule, and a growing
// checkpoint failing at every Env call: the pool fails with kIOError and
// reopens consistent and check-clean.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/journal_segments.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/store/format_v3_pool.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kBs = 512;
constexpr uint64_t kBlocksPerAu = kAu / kBs;

PoolOptions V3(uint64_t size, uint32_t soft) {
  PoolOptions o;
  o.format = 3;
  o.allocation_unit = kAu;
  o.size_bytes = size;
  o.journal_bytes = 64 << 10;  // one AU: a checkpoint every few hundred records
  o.soft_threshold_percent = soft;
  o.backing_check_interval_ms = kBackingSignalOff;
  return o;
}

// The superblock the pool opens from (both slots' choice), from the image.
SuperblockV3 Superblock(const FaultInjectionEnv& env, const std::string& path = "p") {
  const std::vector<uint8_t> img = env.Snapshot(path);
  SuperblockChoice c;
  Status s = ChooseSuperblockV3(img.data(), img.data() + kSuperblockSlot, img.size(), &c);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return c.sb;
}
uint64_t JournalAus(const SuperblockV3& sb) {
  uint64_t n = 0;
  for (const JournalExtent& x : sb.journal) n += x.aus;
  return n;
}

void ExpectCheckClean(FaultInjectionEnv* env) {
  auto r = Pool::CheckOffline(env, "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean) << (r->problems.empty() ? "" : r->problems.front());
}

// ------------------------------------------------------------ options

TEST(ServedV3Options, FormatAndGrainAreCheckedBeforeAnythingIsWritten) {
  struct Case {
    uint32_t format, grain;
    const char* why;
  };
  for (const Case& c : {Case{1, 0, "pool format must be 2 or 3"}, Case{4, 0, "pool format must be 2 or 3"},
                        Case{2, 4096, "format 2 has no grain"},
                        Case{3, 3000, "grain"}}) {
    FaultInjectionEnv env;
    PoolOptions o = V3(8 << 20, 80);
    o.format = c.format;
    o.grain = c.grain;
    auto p = Pool::Create(&env, "p", o);
    ASSERT_FALSE(p.ok()) << c.format << "/" << c.grain;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_NE(p.status().message().find(c.why), std::string::npos) << p.status().ToString();
    EXPECT_FALSE(env.Exists("p"));
  }
  // Format 3 at grain = AU (0 or the AU spelled out) makes a format 3 pool;
  // the default stays format 2.
  for (uint32_t grain : {0u, kAu}) {
    FaultInjectionEnv env;
    PoolOptions o = V3(8 << 20, 80);
    o.grain = grain;
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->Close().ok());
    const std::vector<uint8_t> img = env.Snapshot("p");
    EXPECT_EQ(SuperblockEnvelopeVersion(img.data(), kSuperblockSlot), kFormatVersionV3);
    EXPECT_EQ(Superblock(env).grain, kAu);
  }
  FaultInjectionEnv env;
  PoolOptions o = V3(8 << 20, 80);
  o.format = PoolOptions().format;
  ASSERT_TRUE(Pool::Create(&env, "p", o).ok());
  const std::vector<uint8_t> img = env.Snapshot("p");
  EXPECT_EQ(SuperblockEnvelopeVersion(img.data(), kSuperblockSlot), kFormatVersion);
}

// A format 3 pool whose grain is below the AU is made by Pool::Create and
// served (sub-step 4's GrainSpace), read-write and read-only, check-clean,
// its grain as asked (store_grain_core_test covers what it counts).
TEST(ServedV3Options, APoolOfASmallerGrainIsMadeAndServed) {
  FaultInjectionEnv env;
  PoolOptions o = V3(8 << 20, 80);
  o.grain = 4096;
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("a", 1 << 20, 512).ok());
    std::vector<uint8_t> buf(4096, 0x5a);
    auto l = (*p)->OpenLun("a");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE((*l)->Write(8, 8, buf.data(), Durability::kDurable).ok());  // 8 x 512 = one grain
    l->reset();
    ASSERT_TRUE((*p)->Close().ok());
  }
  EXPECT_EQ(Superblock(env).grain, 4096u);
  for (bool read_only : {false, true}) {
    auto p = Pool::Open(&env, "p", {.read_only = read_only});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    SpaceInfo si = (*p)->Space();
    EXPECT_EQ(si.unit_bytes, 4096u);
    EXPECT_EQ(si.luns.at(0).mapped_bytes, 4096u);
    std::vector<uint8_t> got(4096);
    auto l = (*p)->OpenLun("a");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE((*l)->Read(8, 8, got.data()).ok());
    EXPECT_EQ(got, std::vector<uint8_t>(4096, 0x5a));
    l->reset();
    ASSERT_TRUE((*p)->Close().ok());
  }
  ExpectCheckClean(&env);
}

// ------------------------------------------------------------ the model

// Every LUN's bytes as the API promises them (pool.h), at grain == AU.
struct Model {
  std::map<std::string, std::vector<uint8_t>> luns;
};

void ExpectSame(Pool* pool, const Model& m) {
  ASSERT_EQ(pool->ListLuns().size(), m.luns.size());
  for (const auto& [name, bytes] : m.luns) {
    auto l = pool->OpenLun(name);
    ASSERT_TRUE(l.ok()) << name << ": " << l.status().ToString();
    std::vector<uint8_t> got(bytes.size());
    ASSERT_TRUE((*l)->Read(0, bytes.size() / kBs, got.data()).ok());
    ASSERT_TRUE(got == bytes) << "LUN " << name << " differs from the model";
  }
}

// Random writes, unmaps, range clones and LUN clones over a v3 pool of a
// 64 KiB journal; a reopen every so often, compared byte for byte; Grow
// and writes into the new space; the check clean throughout. With a 1 %
// soft threshold the pool's free space is at the threshold's line from the
// start: the journal never grows (nothing offered), so checkpoints come
// every few hundred records.
TEST(ServedV3, ModelOverReopensCheckpointsAndGrow) {
  FaultInjectionEnv env;
  const PoolOptions o = V3(8 << 20, 1);  // 127 AUs: 1 % leaves 126 free
  std::unique_ptr<Pool> pool;
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
  }
  const uint64_t first_seq = Superblock(env).seq;
  Model m;
  for (const char* name : {"a", "b"}) {
    ASSERT_TRUE(pool->CreateLun(name, 16 * kAu, kBs).ok());
    m.luns[name].assign(16 * kAu, 0);
  }
  std::mt19937_64 rng(11);
  auto pick = [&](uint64_t n) { return rng() % n; };
  int reopens = 0, clones = 0;
  auto reopen = [&](bool check) {
    ASSERT_TRUE(pool->Close().ok());
    pool.reset();
    if (check) {
      ASSERT_NO_FATAL_FAILURE(ExpectCheckClean(&env));
    }
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
    reopens++;
    ASSERT_NO_FATAL_FAILURE(ExpectSame(pool.get(), m));
  };
  auto run = [&](int ops) {
    for (int i = 0; i < ops; i++) {
      std::vector<std::string> names;
      for (const auto& [n, b] : m.luns) names.push_back(n);
      const std::string& name = names[pick(names.size())];
      std::vector<uint8_t>& bytes = m.luns[name];
      const uint64_t blocks = bytes.size() / kBs;
      auto l = pool->OpenLun(name);
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      const uint64_t lba = pick(blocks);
      const uint64_t n = 1 + pick(std::min<uint64_t>(blocks - lba, 3 * kBlocksPerAu));
      const Durability d = pick(4) == 0 ? Durability::kDurable : Durability::kBuffered;
      switch (pick(12)) {
        case 0: case 1: case 2: case 3: {
          // Each block its own bytes (a random fill value and word).
          std::vector<uint8_t> data(n * kBs);
          for (uint64_t b = 0; b < n; b++) {
            const uint64_t v = rng();
            std::memset(data.data() + b * kBs, static_cast<int>(v & 0xff), kBs);
            std::memcpy(data.data() + b * kBs + (v >> 8) % (kBs - 8), &v, 8);
          }
          ASSERT_TRUE((*l)->Write(lba, n, data.data(), d).ok());
          std::memcpy(bytes.data() + lba * kBs, data.data(), data.size());
          break;
        }
        case 4: case 5: {  // whole AUs inside the range read as zeros; the edges stay
          ASSERT_TRUE((*l)->Unmap(lba, n, d).ok());
          const uint64_t a0 = (lba + kBlocksPerAu - 1) / kBlocksPerAu * kBlocksPerAu;
          const uint64_t a1 = (lba + n) / kBlocksPerAu * kBlocksPerAu;
          if (a1 > a0) std::fill(bytes.begin() + a0 * kBs, bytes.begin() + a1 * kBs, 0);
          break;
        }
        case 6: case 7: {  // a range clone, maybe within the LUN (memmove)
          const std::string& dst_name = names[pick(names.size())];
          std::vector<uint8_t>& dst = m.luns[dst_name];
          auto t = pool->OpenLun(dst_name);
          ASSERT_TRUE(t.ok());
          const uint64_t dlba = pick(dst.size() / kBs - n + 1 > 0 ? dst.size() / kBs - n + 1 : 1);
          if (dlba + n > dst.size() / kBs) break;
          ASSERT_TRUE(pool->CloneRange(**l, lba, **t, dlba, n, d).ok());
          std::memmove(dst.data() + dlba * kBs, bytes.data() + lba * kBs, n * kBs);
          break;
        }
        case 8: {  // a LUN clone, or a clone deleted
          if (m.luns.size() < 4) {
            const std::string c = "c" + std::to_string(clones++);
            ASSERT_TRUE(pool->CloneLun(name, c).ok());
            m.luns[c] = bytes;
          } else if (name != "a" && name != "b") {
            l->reset();
            ASSERT_TRUE(pool->DeleteLun(name).ok());
            m.luns.erase(name);
          }
          break;
        }
        case 9: case 10: {  // LUN table records: fill the journal faster
          ASSERT_TRUE(pool->CreateLun("t", kAu, kBs).ok());
          ASSERT_TRUE(pool->DeleteLun("t").ok());
          break;
        }
        case 11: {
          std::vector<uint8_t> got(n * kBs);
          ASSERT_TRUE((*l)->Read(lba, n, got.data()).ok());
          ASSERT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + lba * kBs)) << name << " at " << lba;
          break;
        }
      }
    }
  };
  for (int round = 0; round < 4; round++) {
    ASSERT_NO_FATAL_FAILURE(run(6000));
    ASSERT_NO_FATAL_FAILURE(reopen(round % 2 == 0));
    // Nothing above the soft threshold's line: the journal keeps its AU.
    EXPECT_EQ(JournalAus(Superblock(env)), 1u);
  }
  // Checkpoints beyond the reopens' own (each reopen writes a spend
  // superblock and a checkpoint): the 64 KiB journal filled again and again.
  const uint64_t seqs = Superblock(env).seq - first_seq;
  EXPECT_GE(seqs, 2u * reopens + 6) << "the journal should have filled many times";

  // Read-only: the same bytes, the check clean.
  ASSERT_TRUE(pool->Close().ok());
  pool.reset();
  {
    auto ro = Pool::Open(&env, "p", {.read_only = true});
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectSame(ro->get(), m));
    EXPECT_TRUE((*ro)->Check().clean);
  }
  // Grow (FormatV3::Grow), reopen, fill part of the new space.
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok());
    pool = std::move(p).value();
  }
  ASSERT_TRUE(pool->Grow(16 << 20).ok());
  EXPECT_EQ(Superblock(env).units, ((16u << 20) - kAu) / kAu);
  ASSERT_NO_FATAL_FAILURE(reopen(true));
  EXPECT_EQ(pool->Space().pool_size_bytes, 16u << 20);
  ASSERT_TRUE(pool->CreateLun("big", 120 * kAu, kBs).ok());
  m.luns["big"].assign(120 * kAu, 0);
  {
    auto l = pool->OpenLun("big");
    ASSERT_TRUE(l.ok());
    std::vector<uint8_t> data(kAu);
    for (uint64_t au = 0; au < 120; au += 2) {
      for (auto& b : data) b = static_cast<uint8_t>(rng());
      ASSERT_TRUE((*l)->Write(au * kBlocksPerAu, kBlocksPerAu, data.data(), Durability::kBuffered).ok()) << au;
      std::memcpy(m.luns["big"].data() + au * kAu, data.data(), kAu);
    }
  }
  ASSERT_NO_FATAL_FAILURE(run(300));
  ASSERT_NO_FATAL_FAILURE(reopen(true));
  ASSERT_TRUE(pool->Close().ok());
  pool.reset();
  ASSERT_NO_FATAL_FAILURE(ExpectCheckClean(&env));
}

// ------------------------------------------------------------ journal growth

// Core offers the journal the free AUs above the soft threshold's line and
// nothing below it: a 64 KiB journal grows at the pool's first checkpoint
// (the create's) by exactly what lies above the line less one AU, in place,
// so the next data allocation crosses the threshold and raises the signal;
// a Grow raises the line's room, and the next checkpoint (the reopen's)
// takes it, up to JournalTargetAus. Free space never falls to the line.
// The line is low (5 %) so that the offer, not the pool's share (1/16),
// bounds the first growth, and the Grow large (to 512 MiB) so that the
// share allows the whole 16 MiB.
TEST(ServedV3, TheJournalGrowsByWhatCoreOffersAndNoFurther) {
  FaultInjectionEnv env;
  const uint64_t size = 64ull << 20;  // 1023 AUs
  {
    auto p = Pool::Create(&env, "p", V3(size, 5));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const SpaceInfo si = (*p)->Space();
    const uint64_t line_free = si.total_units - si.soft_threshold_units;
    EXPECT_EQ(si.free_units, line_free + 1) << "the journal took the room above the line but one AU";
    const SuperblockV3 sb = Superblock(env);
    ASSERT_EQ(sb.journal.size(), 1u) << "grown in place";
    EXPECT_GT(JournalAus(sb), 1u);
    EXPECT_LT(JournalAus(sb), JournalTargetAus(0, kAu, sb.units, 0)) << "the offer, not the target, bounded it";
    // meta AUs: the chunk and the journal.
    EXPECT_EQ(si.metadata_units, 1 + JournalAus(sb));
    ASSERT_TRUE((*p)->CreateLun("a", 4 * kAu, kBs).ok());
    // The first data AU is the crossing: the signal is not lost to the
    // journal's growth.
    const uint64_t gen = (*p)->soft_threshold_generation();
    {
      auto l = (*p)->OpenLun("a");
      ASSERT_TRUE(l.ok());
      std::vector<uint8_t> data(kAu, 7);
      ASSERT_TRUE((*l)->Write(0, kBlocksPerAu, data.data(), Durability::kDurable).ok());
    }
    EXPECT_EQ((*p)->soft_threshold_generation(), gen + 1) << "the write crossed the soft threshold";
    ASSERT_TRUE((*p)->Grow(8 * size).ok());
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const SuperblockV3 sb = Superblock(env);
  EXPECT_EQ(JournalAus(sb), kDefaultJournalBytes / kAu) << "the reopen's checkpoint grew it to its target";
  EXPECT_EQ(JournalAus(sb), JournalTargetAus(0, kAu, sb.units, 0));
  const SpaceInfo si = (*p)->Space();
  EXPECT_GT(si.free_units, si.total_units - si.soft_threshold_units);
  ASSERT_TRUE((*p)->Close().ok());
  p->reset();
  ExpectCheckClean(&env);
}

// Where Core offers more than the pool's share (a 25 % line), the journal
// stops at the share, 1/16 of the pool's AUs, and the rest stays free for
// data; a larger pool's share is larger, and the next checkpoint grows the
// journal to it.
TEST(ServedV3, TheJournalGrowsToItsShareOfThePoolAndNoFurther) {
  FaultInjectionEnv env;
  const uint64_t size = 64ull << 20;  // 1023 AUs: a share of 63
  {
    auto p = Pool::Create(&env, "p", V3(size, 25));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    const SuperblockV3 sb = Superblock(env);
    EXPECT_EQ(JournalAus(sb), 1023u / 16) << "the share, not the offer, bounded it";
    const SpaceInfo si = (*p)->Space();
    EXPECT_EQ(si.metadata_units, 1 + JournalAus(sb));
    EXPECT_GT(si.free_units, si.total_units - si.soft_threshold_units + 1) << "room above the line is left";
    ASSERT_TRUE((*p)->Grow(2 * size).ok());  // 2047 AUs: a share of 127
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(JournalAus(Superblock(env)), 2047u / 16) << "the reopen's checkpoint grew it to the new share";
  ASSERT_TRUE((*p)->Close().ok());
  p->reset();
  ExpectCheckClean(&env);
}

// ------------------------------------------------------------ replay rule

// A CRC-valid journal record of a v3 pool that creates (or resizes) a LUN
// above 2^48 blocks is refused by the open (kCorruption), read-only too,
// nothing written: format 3's maps key blocks in 48 bits, and ApplyRecord,
// shared with formats 1 and 2, does not know the format.
TEST(ServedV3, ReplayAppliesTheLunBlocksRule) {
  for (RecType type : {RecType::kCreateLun, RecType::kResizeLun}) {
    FaultInjectionEnv env;
    {
      auto p = Pool::Create(&env, "p", V3(8 << 20, 80));
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE((*p)->CreateLun("a", kAu, kBs).ok());
      ASSERT_TRUE((*p)->Close().ok());
    }
    {
      v3pool::Opened o;
      ASSERT_TRUE(v3pool::Open(&env, &o).ok());
      const uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
      ASSERT_TRUE(v3pool::Checkpoint(&o, o.st, lsn).ok());
      Record r;
      r.type = type;
      r.lun = type == RecType::kCreateLun ? o.st.next_lun_id : o.st.FindName("a")->id;
      r.name = "huge";
      r.uuid = v3pool::Id(9);
      r.bs = kBs;
      r.a = (kMaxLunBlocks + 1) * kBs;  // LunRecordRule holds; LunBlocksRule does not
      ASSERT_TRUE(o.format->CommitBatch(o.file.get(), v3pool::BatchOf({r}, lsn, lsn - 1)).ok());
    }
    const std::vector<uint8_t> before = env.Snapshot("p");
    for (bool read_only : {false, true}) {
      auto p = Pool::Open(&env, "p", {.read_only = read_only});
      ASSERT_FALSE(p.ok()) << static_cast<int>(type);
      EXPECT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
      EXPECT_NE(p.status().message().find("2^48"), std::string::npos) << p.status().ToString();
    }
    EXPECT_EQ(env.Snapshot("p"), before);
  }
}

// ------------------------------------------------------------ failures

// A growing checkpoint failing at each of its writes, syncs and punches,
// with EIO and with ENOSPC: the call that ran into it and every later one
// get kIOError (the pool failed: an ENOSPC must not read as "nothing
// changed"), and the pool reopens, after a power cut too, with LUN "a"'s
// bytes, check-clean.
//
// The pool: 127 AUs at a 1 % soft threshold (nothing offered: the open's
// checkpoint keeps the journal's one AU), grown to 1023 AUs, which puts
// room above the line: the next checkpoint, the one a churn of LUN
// creates and deletes brings about, grows the journal.
class ServedV3Failure : public ::testing::Test {
 protected:
  static constexpr uint64_t kGrownSize = 64ull << 20;

  void SetUp() override {
    FaultInjectionEnv env;
    {
      auto p = Pool::Create(&env, "p", V3(8 << 20, 1));
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE((*p)->CreateLun("a", 4 * kAu, kBs).ok());
      auto l = (*p)->OpenLun("a");
      ASSERT_TRUE(l.ok());
      data_.resize(4 * kAu);
      std::mt19937_64 rng(5);
      for (auto& b : data_) b = static_cast<uint8_t>(rng());
      ASSERT_TRUE((*l)->Write(0, 4 * kBlocksPerAu, data_.data(), Durability::kDurable).ok());
      l->reset();
      ASSERT_TRUE((*p)->Close().ok());
    }
    base_ = env.Snapshot("p");
  }

  // Opens the base image in a fresh `env`, grows it and makes `ops` churn
  // operations (a create, then a delete, of LUN "x"), returning the pool.
  std::unique_ptr<Pool> Prepare(FaultInjectionEnv* env, int ops) {
    env->Install("p", base_.data(), base_.size());
    auto p = Pool::Open(env, "p");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return nullptr;
    EXPECT_TRUE((*p)->Grow(kGrownSize).ok());
    for (int i = 0; i < ops; i++) EXPECT_TRUE(Churn(p->get(), i).ok()) << i;
    return std::move(p).value();
  }
  static Status Churn(Pool* p, int i) {
    return i % 2 == 0 ? p->CreateLun("x", kAu, kBs).status() : p->DeleteLun("x");
  }
  void ExpectA(Pool* p) {
    auto l = p->OpenLun("a");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    std::vector<uint8_t> got(data_.size());
    ASSERT_TRUE((*l)->Read(0, 4 * kBlocksPerAu, got.data()).ok());
    EXPECT_TRUE(got == data_);
  }

  std::vector<uint8_t> base_, data_;
};

TEST_F(ServedV3Failure, AGrowingCheckpointFailingAtEveryCallFailsThePoolWithIOError) {
  using Op = FaultInjectionEnv::Op;
  const Op kOps[] = {Op::kWrite, Op::kSync, Op::kPunch};
  // The dry run: which churn operation checkpoints (its Env calls), and
  // that the checkpoint grows the journal.
  int trigger = -1;
  uint64_t calls[3] = {};
  {
    FaultInjectionEnv env;
    std::unique_ptr<Pool> p = Prepare(&env, 0);
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(JournalAus(Superblock(env)), 1u);
    for (int i = 0; i < 5000 && trigger < 0; i++) {
      uint64_t before[3];
      for (int k = 0; k < 3; k++) before[k] = env.calls(kOps[k]);
      ASSERT_TRUE(Churn(p.get(), i).ok()) << i;
      // A batch writes its records once (twice at the ring's wrap); a
      // checkpoint writes pages and two superblock slots.
      if (env.calls(Op::kWrite) - before[0] > 2) {
        trigger = i;
        for (int k = 0; k < 3; k++) calls[k] = env.calls(kOps[k]) - before[k];
      }
    }
    ASSERT_GE(trigger, 0) << "no checkpoint";
    ASSERT_TRUE(p->Close().ok());
    EXPECT_GT(JournalAus(Superblock(env)), 1u) << "the checkpoint did not grow the journal";
    EXPECT_GT(calls[2], 0u) << "a journal grown by new runs clears them (punches)";
  }
  int cases = 0;
  for (int k = 0; k < 3; k++) {
    for (uint64_t nth = 0; nth < calls[k]; nth++) {
      for (Code code : {Code::kIOError, Code::kNoSpace}) {
        SCOPED_TRACE("op " + std::to_string(k) + " call " + std::to_string(nth) + " code " +
                     std::to_string(static_cast<int>(code)));
        FaultInjectionEnv env;
        std::unique_ptr<Pool> p = Prepare(&env, trigger);
        ASSERT_NE(p, nullptr);
        env.FailAt(kOps[k], nth, code);
        Status s = Churn(p.get(), trigger);
        ASSERT_FALSE(s.ok()) << "the checkpoint did not run into the fault";
        EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
        EXPECT_EQ(p->CreateLun("y", kAu, kBs).status().code(), Code::kIOError);
        auto l = p->OpenLun("a");
        if (l.ok()) {
          std::vector<uint8_t> got(kBs);
          EXPECT_EQ((*l)->Read(0, 1, got.data()).code(), Code::kIOError);
        }
        l = Status(Code::kIOError, "");
        (void)p->Close();
        p.reset();
        env.ClearFaults();
        // From the page cache, then after a power cut.
        for (int cut = 0; cut < 2; cut++) {
          if (cut) env.PowerLoss(FaultInjectionEnv::Loss::kTear, nth * 7 + k);
          auto r = Pool::Open(&env, "p");
          ASSERT_TRUE(r.ok()) << r.status().ToString();
          ASSERT_NO_FATAL_FAILURE(ExpectA(r->get()));
          EXPECT_TRUE((*r)->Check().clean);
          ASSERT_TRUE((*r)->Close().ok());
          r->reset();
          ASSERT_NO_FATAL_FAILURE(ExpectCheckClean(&env));
        }
        cases++;
      }
    }
  }
  EXPECT_GT(cases, 10);
}

}  // namespace
}  // namespace cowstore::store
