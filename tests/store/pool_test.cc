#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 * 1024;

PoolOptions SmallPool() {
  PoolOptions o;
  o.size_bytes = 64ull << 20;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  return o;
}

TEST(PoolSmoke, CreateWriteReadCloneReopen) {
  FaultInjectionEnv env;
  auto pool = Pool::Create(&env, "p", SmallPool());
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE((*pool)->CreateLun("a", 8 << 20, 512).ok());
  ASSERT_TRUE((*pool)->CreateLun("b", 8 << 20, 512).ok());
  auto a = (*pool)->OpenLun("a");
  auto b = (*pool)->OpenLun("b");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<uint8_t> buf(1 << 20, 0xab), out(1 << 20);
  ASSERT_TRUE((*a)->Write(0, 2048, buf.data(), Durability::kDurable).ok());
  ASSERT_TRUE((*pool)->CloneRange(**a, 0, **b, 4096, 2048, Durability::kDurable).ok());
  ASSERT_TRUE((*b)->Read(4096, 2048, out.data()).ok());
  EXPECT_EQ(buf, out);
  auto rep = (*pool)->Check();
  EXPECT_TRUE(rep.clean) << (rep.problems.empty() ? "" : rep.problems[0]);
  a->reset();
  b->reset();
  ASSERT_TRUE((*pool)->Close().ok());
  pool->reset();
  auto p2 = Pool::Open(&env, "p");
  ASSERT_TRUE(p2.ok()) << p2.status().ToString();
  auto b2 = (*p2)->OpenLun("b");
  ASSERT_TRUE(b2.ok());
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE((*b2)->Read(4096, 2048, out.data()).ok());
  EXPECT_EQ(buf, out);
  EXPECT_EQ((*p2)->Space().shared_units, 16u);
}

}  // namespace
}  // namespace cowstore::store
