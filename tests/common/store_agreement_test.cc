// SPDX-License-Identifier: Apache-2.0
// The store itself applies the rules of handler/store/names.h: it makes a
// LUN exactly when the name is one cowctl and the handler accept, and takes
// exactly the block sizes and allocation units the rules allow.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/names.h"
#include "handler/store/pool.h"
#include "tools/cowctl/util.h"

namespace cowstore::store {
namespace {

PoolOptions Opts(uint32_t au = 64u << 10) {
  PoolOptions o;
  o.allocation_unit = au;
  o.journal_bytes = 64 * 1024;
  o.size_bytes = (4u << 20) + 64ull * au;
  return o;
}

TEST(StoreAgreement, CreatesLunsExactlyForTheNamesCowctlAccepts) {
  FaultInjectionEnv env;
  auto pool = Pool::Create(&env, "pool", Opts());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const std::vector<std::string> names = {
      "a", "tank", "vm_1.disk-0", std::string(64, 'a'), std::string(65, 'a'), "", ".", "..",
      ".hidden", "-opt", "a..b", "a...b", "ab..", "a.b", "a/b", "a b", "a:b", "a;b", "a,b",
      "caf\xc3\xa9", std::string("a\0b", 3), "a\n"};
  int made = 0;
  for (const std::string& n : names) {
    const bool valid = cowctl::ValidName(n);
    ASSERT_EQ(valid, ValidName(n));
    auto lun = pool.value()->CreateLun(n, 64 * 1024, 512);
    EXPECT_EQ(lun.ok(), valid) << "'" << n << "': " << lun.status().ToString();
    if (!valid) continue;
    ++made;
    // A clone's name follows the same rule.
    auto bad_clone = pool.value()->CloneLun(n, "x..y");
    EXPECT_FALSE(bad_clone.ok()) << "clone of '" << n << "' named x..y";
  }
  EXPECT_EQ(static_cast<size_t>(made), pool.value()->ListLuns().size());
}

TEST(StoreAgreement, TakesExactlyTheRulesBlockSizes) {
  FaultInjectionEnv env;
  auto pool = Pool::Create(&env, "pool", Opts());
  ASSERT_TRUE(pool.ok());
  int i = 0;
  for (uint32_t bs : {0u, 256u, 511u, 512u, 1024u, 2048u, 4096u, 8192u}) {
    auto lun = pool.value()->CreateLun("l" + std::to_string(i++), 64 * 1024, bs);
    EXPECT_EQ(lun.ok(), ValidBlockSize(bs)) << bs << ": " << lun.status().ToString();
  }
}

TEST(StoreAgreement, TakesExactlyTheRulesAllocationUnits) {
  for (uint32_t au : {0u, 4096u, 32768u, 65536u, 98304u, 131072u, 262144u, 524288u, 1048576u,
                      2097152u}) {
    FaultInjectionEnv env;
    auto pool = Pool::Create(&env, "pool", Opts(au ? au : 1));
    EXPECT_EQ(pool.ok(), ValidAllocationUnit(au)) << au << ": " << pool.status().ToString();
  }
}

}  // namespace
}  // namespace cowstore::store
