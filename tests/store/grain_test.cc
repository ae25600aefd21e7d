// SPDX-License-Identifier: Apache-2.0
// The grain, Core's unit of sharing (pool_impl.h; store-v3.md 3.1 and plan
// step 4): its rule, and that v1/v2 pools share at grain == AU, so a first
// write into a clone copies one grain and makes exactly that much exclusive.
#include <gtest/gtest.h>

#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store {
namespace {

TEST(GrainRule, PowersOfTwoFromTheSmallestBlockToTheAu) {
  const uint32_t au = 1u << 20;
  for (uint64_t g = 512; g <= au; g *= 2) EXPECT_EQ(GrainRule(g, au), "") << g;
  EXPECT_NE(GrainRule(0, au).find("not a power of two"), std::string::npos);
  EXPECT_NE(GrainRule(3072, au).find("not a power of two"), std::string::npos);
  EXPECT_NE(GrainRule(256, au).find("below the smallest LUN block size"), std::string::npos);
  EXPECT_NE(GrainRule(2 * uint64_t{au}, au).find("larger than the allocation unit"),
            std::string::npos);
  EXPECT_NE(GrainRule(2048, 3072).find("does not divide"), std::string::npos);
}

// v1/v2: the grain is the AU. A one-block write into a fresh clone copies one
// grain; the clone owns that grain and still shares the rest.
TEST(GrainAtTheAu, AFirstWriteIntoACloneUnsharesOneGrain) {
  constexpr uint32_t kAu = 64 * 1024;
  FaultInjectionEnv env;
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.size_bytes = 128 * 1024 + 64 * uint64_t{kAu};
  auto p = Pool::Create(&env, "pool", o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::unique_ptr<Pool> pool = std::move(p.value());
  constexpr uint64_t kLun = 8 * kAu;
  ASSERT_TRUE(pool->CreateLun("a", kLun, 4096).ok());
  {
    auto a = pool->OpenLun("a").value();
    std::vector<uint8_t> data(kLun, 0x5a);
    ASSERT_TRUE(a->Write(0, kLun / 4096, data.data(), Durability::kDurable).ok());
  }
  ASSERT_TRUE(pool->CloneLun("a", "b").ok());
  auto b = pool->OpenLun("b").value();
  std::vector<uint8_t> block(4096, 0xc3);
  ASSERT_TRUE(b->Write(17, 1, block.data(), Durability::kDurable).ok());  // inside AU 1
  LunInfo bi = pool->GetLun("b").value();
  EXPECT_EQ(bi.exclusive_bytes, kAu);
  EXPECT_EQ(bi.shared_bytes, kLun - kAu);
  LunInfo ai = pool->GetLun("a").value();
  EXPECT_EQ(ai.exclusive_bytes, kAu);
  // The copy kept the rest of the grain.
  std::vector<uint8_t> got(kAu);
  ASSERT_TRUE(b->Read(16, kAu / 4096, got.data()).ok());
  for (size_t i = 0; i < got.size(); i++)
    ASSERT_EQ(got[i], i / 4096 == 1 ? 0xc3 : 0x5a) << i;
  CheckReport r = pool->Check();
  EXPECT_TRUE(r.clean) << (r.problems.empty() ? "" : r.problems[0]);
}

}  // namespace
}  // namespace cowstore::store
