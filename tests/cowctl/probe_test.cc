// SPDX-License-Identifier: Apache-2.0
// ProbePool (tools/cowctl/pools.h) on real pool files: what each format's
// superblock says, and a format this cowctl does not know refused, never
// read as one it knows.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "tests/cowctl/fake_tree.h"
#include "tests/cowctl/superblock_patch.h"
#include "tools/cowctl/pools.h"

namespace cowstore::cowctl {
namespace {

using testing::SetSuperblockFormat;

struct Probe : ::testing::Test {
  testing::TempDir dir;
  store::Uuid uuid{};
  // A new pool file of `format` (2, or 3 at a 4 KiB grain), 64 KiB AUs.
  std::string Make(uint32_t format) {
    const std::string path = dir.path() + "/f" + std::to_string(format) + ".pool";
    std::remove(path.c_str());
    store::PoolOptions po;
    po.size_bytes = 64ull << 20;
    po.allocation_unit = 64u << 10;
    if (format == 3) {
      po.format = 3;
      po.grain = 4096;
    }
    auto r = store::Pool::Create(store::DefaultEnv(), path, po);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) {
      uuid = r.value()->uuid();
      EXPECT_TRUE(r.value()->Close().ok());
    }
    return path;
  }
};

TEST_F(Probe, SaysEachFormatsUuidAllocationUnitAndGrain) {
  for (uint32_t format : {2u, 3u}) {
    PoolProbe p = ProbePool(Make(format));
    ASSERT_EQ(p.kind, PoolProbe::kPool) << p.detail;
    EXPECT_EQ(p.uuid, uuid);
    EXPECT_EQ(p.format, format);
    EXPECT_EQ(p.au, 64u << 10);
    EXPECT_EQ(p.grain, format == 3 ? 4096u : 64u << 10);
  }
}

// A newer format shares only the envelope: nothing else is read from it,
// the UUID least of all. A copy of it in either slot refuses the pool, as
// the store refuses to open it, though the other copy is one it knows.
TEST_F(Probe, AFormatItDoesNotKnowIsRefusedNotMisread) {
  for (uint32_t format : {2u, 3u}) {
    for (uint64_t slot : {0, 1}) {
      const std::string path = Make(format);
      SetSuperblockFormat(path, slot, 4, /*reseal=*/true);
      PoolProbe p = ProbePool(path);
      EXPECT_EQ(p.kind, PoolProbe::kUnknownFormat) << format << " slot " << slot << ": " << p.detail;
      EXPECT_EQ(p.uuid, store::Uuid{}) << "no UUID guessed";
      EXPECT_EQ(p.detail, path + " has a cowstore superblock of format 4; this cowctl knows formats 1 to 3 "
                                 "(made by a newer cowstore: upgrade cowctl)");
    }
  }
}

// The version changed without its envelope CRC is damage: that copy fails
// its CRC and the other one names the pool; both so, the pool is damaged.
// Never read at a format it does not have. Version 0 with its CRC (no
// cowstore writes it) is damage too.
TEST_F(Probe, AVersionChangedWithoutItsCrcOrToZeroIsDamage) {
  for (uint32_t format : {2u, 3u}) {
    const std::string path = Make(format);
    SetSuperblockFormat(path, 0, 4, /*reseal=*/false);
    PoolProbe p = ProbePool(path);
    ASSERT_EQ(p.kind, PoolProbe::kPool) << p.detail;
    EXPECT_EQ(p.uuid, uuid);
    EXPECT_EQ(p.format, format);
    SetSuperblockFormat(path, 1, 4, /*reseal=*/false);
    p = ProbePool(path);
    EXPECT_EQ(p.kind, PoolProbe::kDamaged) << p.detail;
    EXPECT_EQ(p.uuid, store::Uuid{});
    EXPECT_EQ(p.detail.rfind(path + " has a damaged cowstore superblock (", 0), 0u) << p.detail;
  }
  const std::string path = Make(2);
  SetSuperblockFormat(path, 0, 0, /*reseal=*/true);
  SetSuperblockFormat(path, 1, 0, /*reseal=*/true);
  PoolProbe p = ProbePool(path);
  EXPECT_EQ(p.kind, PoolProbe::kDamaged) << p.detail;
  EXPECT_EQ(p.uuid, store::Uuid{});
  EXPECT_NE(p.detail.find("pool format version 0"), std::string::npos) << p.detail;
}

}  // namespace
}  // namespace cowstore::cowctl
