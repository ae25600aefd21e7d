// SPDX-License-Identifier: Apache-2.0
// Scrub (handler/control/scrub.h): every mapped block is read, unreadable
// ranges are named with their LUN, progress runs to the total; and the
// control server's `scrub` request.
#include "handler/control/scrub.h"

#include "handler/store/fault_env.h"
#include "tests/control/served_pool.h"

namespace cowstore::control_test {
namespace {

using store::FaultInjectionEnv;

class ScrubTest : public ::testing::Test {
 protected:
  FaultInjectionEnv env;
  std::unique_ptr<store::Pool> pool;
  void SetUp() override {
    store::PoolOptions po;
    po.size_bytes = 64ull << 20;
    po.allocation_unit = 64 << 10;
    auto c = store::Pool::Create(&env, "/pool", po);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    pool = std::move(c.value());
  }
  void TearDown() override {
    if (pool) (void)pool->Close();
  }
  // `lun` of 4 MiB with `blocks` written at each LBA of `at`.
  void Lun(const std::string& name, std::vector<uint64_t> at, uint64_t blocks = 8) {
    ASSERT_TRUE(pool->CreateLun(name, 4 << 20, 512).ok());
    auto l = pool->OpenLun(name);
    ASSERT_TRUE(l.ok());
    std::vector<char> data(blocks * 512, 'd');
    for (uint64_t lba : at) ASSERT_TRUE(l.value()->Write(lba, blocks, data.data(), store::Durability::kDurable).ok());
  }
};

TEST_F(ScrubTest, ReadsEveryMappedBlockWithProgressToTheTotal) {
  Lun("a", {0, 4096});  // two AUs
  Lun("b", {8000});     // one AU
  ASSERT_TRUE(pool->CreateLun("empty", 1 << 20, 512).ok());
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  auto r = control::Scrub(
      *pool, [](void* c, uint64_t d, uint64_t t) { static_cast<decltype(seen)*>(c)->emplace_back(d, t); }, &seen);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->clean());
  EXPECT_EQ(r->luns, 3u);
  EXPECT_EQ(r->mapped_bytes, 3u * (64 << 10));
  EXPECT_EQ(r->read_bytes, 3u * (64 << 10));
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), std::make_pair(r->mapped_bytes, r->mapped_bytes));
}

TEST_F(ScrubTest, AnUnreadableRangeIsNamedWithItsLun) {
  Lun("a", {0});
  Lun("b", {2048});
  // The LUNs are read in name order: the first read is a's only AU, and it
  // fails, as does the retry that narrows it down.
  env.FailAt(FaultInjectionEnv::Op::kRead, 0, store::Code::kIOError);
  env.FailAt(FaultInjectionEnv::Op::kRead, 1, store::Code::kIOError);
  auto r = control::Scrub(*pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->clean());
  ASSERT_EQ(r->unreadable.size(), 1u);
  EXPECT_EQ(r->unreadable[0].lun, "a");
  EXPECT_EQ(r->unreadable[0].lba, 0u);
  EXPECT_EQ(r->unreadable[0].count, 128u);  // the 64 KiB allocation unit
  EXPECT_NE(r->unreadable[0].error.find("IOError"), std::string::npos) << r->unreadable[0].error;
  EXPECT_EQ(r->read_bytes, 64u << 10);  // b's
}

TEST_F(ScrubTest, StopsWhenCancelled) {
  Lun("a", {0, 4096});
  auto r = control::Scrub(*pool, nullptr, nullptr, [] { return true; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "scrub cancelled");
}

TEST_F(ServedPool, ScrubOverTheSocket) {
  Serve();
  std::string img = dir.path() + "/img";
  WriteText(img, std::string(1 << 20, 'x'));
  ASSERT_EQ(Head(server->Handle("lun-import name=x block_size=512 size=0 path=" + control::Encode(img))).type, "ok");
  std::string r = server->Handle("scrub progress=1");
  EXPECT_EQ(r, "progress done=1048576 total=1048576\nok clean=1 luns=1 mapped_bytes=1048576 read_bytes=1048576\nend\n");
}

}  // namespace
}  // namespace cowstore::control_test
