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
#include <random>
#include <string>
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
  st.luns.emplace(r.id, std::move(l));
  std::string enc;
  EncodeState(st, &enc);
  EXPECT_LE(enc.size() - 12, kLunCheckpointBytesBound);
  EXPECT_GE(enc.size() - 12, kLunCheckpointBytesBound - 8) << "the bound is no longer tight: say why";
  // Format 3: a LUN table record.
  EXPECT_LE(LunRecordBytes(r), kLunCheckpointBytesBound);
}

PoolOptions Options(const SuiteFormat& f) {
  PoolOptions o;
  f.Apply(&o);
  o.allocation_unit = kAu;
  o.size_bytes = 12 << 20;  // 1 % of it is one AU: format 3's journal stays at 64 KiB
  o.journal_bytes = 64 << 10;  // checkpoints every few dozen operations
  o.soft_threshold_percent = 1;  // format 3's journal stays at its 64 KiB
  o.backing_check_interval_ms = kBackingSignalOff;
  return o;
}

// Random LUN-table changes and writes and unmaps that split and join map
// runs, durable and buffered, so that checkpoints come often and find
// every kind of dirty state: no Freeze may ask more than the bound said.
TEST_P(CheckpointCostTest, NoCheckpointAsksMoreThanTheBound) {
  FaultInjectionEnv env;
  auto p = Pool::Create(&env, "p", Options(GetParam()));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  Core* core = CoreOfForTest(&pool);
  std::mt19937_64 rng(GetParam().grain + GetParam().format * 7919);
  const uint64_t unit_blocks = (GetParam().grain ? GetParam().grain : kAu) / kBs;
  std::vector<std::string> names;
  int made = 0, ok_io = 0, refused_io = 0;
  const std::vector<uint8_t> data(4 * kAu, 0x5a);
  for (int step = 0; step < 60000; step++) {
    const uint64_t op = rng() % 100;
    if (names.size() < 2 || op < 1) {
      std::string n = "l" + std::to_string(made++);
      if (pool.CreateLun(n, (1 + rng() % 4) << 18, kBs).ok()) names.push_back(n);
      continue;
    }
    const std::string& pick = names[rng() % names.size()];
    if (op < 4) {
      std::string n = "c" + std::to_string(made++);
      auto c = op < 3 ? pool.CloneLun(pick, n) : pool.SnapshotLun(pick, n);
      if (c.ok()) names.push_back(n);
      continue;
    }
    if (op < 7 && names.size() > 4) {
      size_t i = rng() % names.size();
      if (pool.DeleteLun(names[i]).ok()) names.erase(names.begin() + static_cast<ptrdiff_t>(i));
      continue;
    }
    if (op < 9) {
      ASSERT_TRUE(pool.Flush().ok());
      continue;
    }
    auto l = pool.OpenLun(pick);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    if ((*l)->read_only()) continue;
    const uint64_t units = (*l)->block_count() / unit_blocks;
    const uint64_t at = (rng() % units) * unit_blocks;
    const uint64_t len = std::min<uint64_t>((1 + rng() % 4) * unit_blocks, (*l)->block_count() - at);
    const Durability d = rng() % 4 == 0 ? Durability::kDurable : Durability::kBuffered;
    Status s;
    if (op < 60)
      s = (*l)->Write(at, len, data.data(), d);
    else
      s = (*l)->Unmap(at, len, d);
    ASSERT_TRUE(s.ok() || s.code() == Code::kNoSpace) << s.ToString();
    (s.ok() ? ok_io : refused_io)++;
  }
  EXPECT_GT(ok_io, 1000) << "the pool refused nearly everything: the workload tests little";
  EXPECT_GT(refused_io, 0) << "the pool never filled: the reserve line was never reached";
  ASSERT_TRUE(pool.Flush().ok());
  EXPECT_GT(core->FreezesForTest(), 8u) << "too few checkpoints to say anything";
  EXPECT_EQ(core->CkptBoundMissesForTest(), 0u);
  CheckReport rep = pool.Check();
  EXPECT_TRUE(rep.clean) << (rep.problems.empty() ? "" : rep.problems[0]);
}

INSTANTIATE_TEST_SUITE_P(Formats, CheckpointCostTest, AllFormats(), FormatName());

}  // namespace
}  // namespace cowstore::store
