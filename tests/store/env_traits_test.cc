// SPDX-License-Identifier: Apache-2.0
// What the store takes from Env's declared traits (env.h; store-v3.md 3.8)
// instead of assuming a local file:
//   CanTruncate       a medium of fixed size (a block device, later an RBD
//                     image) is never truncated: Create takes its size or
//                     less, Grow only what its administrator added, and a
//                     power cut in such a Grow opens at the old size or the
//                     new one;
//   AtomicWriteBytes  a new pool lays its journal out in the medium's unit,
//                     a pool moved to a larger unit adopts it, and a medium
//                     above a superblock slot is refused for writing.
// Each on FaultInjectionEnv, which declares what a test sets, and in every
// pool format (suite_formats.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/common/sanitizers.h"
#include "tests/store/pattern.h"
#include "tests/store/suite_formats.h"

namespace cowstore::store {
namespace {

using testing::AllFormats;
using testing::FormatName;
using testing::SuiteFormat;
using D = Durability;
using Loss = FaultInjectionEnv::Loss;
using Op = FaultInjectionEnv::Op;
constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint32_t kAu = 64 * kKiB;
constexpr uint64_t kMedium = 16 * kMiB;
constexpr uint64_t kGrownMedium = 24 * kMiB;
constexpr uint64_t kLunBytes = 2 * kMiB;

using testing::Pattern;

// A pool of `size` bytes (0: the whole medium) at 64 KiB AUs.
PoolOptions SmallPool(uint32_t format, uint32_t grain, uint64_t size) {
  PoolOptions o;
  o.format = format;
  o.grain = grain;
  o.allocation_unit = kAu;
  o.size_bytes = size;
  o.journal_bytes = 64 * kKiB;  // small: checkpoints come often
  return o;
}

// A closed pool at "p" holding an empty LUN "a".
void CreateWithLun(FaultInjectionEnv& env, const PoolOptions& o) {
  auto p = Pool::Create(&env, "p", o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_TRUE((*p)->CreateLun("a", kLunBytes, 512).ok());
  ASSERT_TRUE((*p)->Close().ok());
}

class EnvTraits : public ::testing::TestWithParam<SuiteFormat> {
 protected:
  PoolOptions Options(uint64_t size) const { return SmallPool(GetParam().format, GetParam().grain, size); }
  // A LUN "a" written whole with Pattern(kLunBytes, seed), durably.
  static void Fill(Pool& pool, uint8_t seed) {
    if (!pool.GetLun("a").ok()) {
      ASSERT_TRUE(pool.CreateLun("a", kLunBytes, 512).ok());
    }
    auto l = pool.OpenLun("a");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto data = Pattern(kLunBytes, seed);
    ASSERT_TRUE((*l)->Write(0, kLunBytes / 512, data.data(), D::kDurable).ok());
  }
  static void ExpectFilled(Pool& pool, uint8_t seed) {
    auto l = pool.OpenLun("a");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    std::vector<uint8_t> got(kLunBytes);
    ASSERT_TRUE((*l)->Read(0, kLunBytes / 512, got.data()).ok());
    EXPECT_TRUE(got == Pattern(kLunBytes, seed)) << "the LUN's bytes changed";
  }
  static uint64_t DataBytes(const Pool& pool) {
    const SpaceInfo sp = pool.Space();
    return sp.total_units * sp.unit_bytes;
  }
  FaultInjectionEnv env_;
};

// ------------------------------------------------------------ CanTruncate

// A medium of fixed size is the pool's whole: size 0 takes all of it, a
// Grow past it is refused, and once its administrator grows it, Grow takes
// the new size, which the next open keeps. Truncate is never asked for.
TEST_P(EnvTraits, AFixedSizeMediumIsTakenWholeAndGrowsOnlyWhenItDoes) {
  env_.ResizeMedium("p", kMedium);
  env_.SetCanTruncate(false);
  auto p = Pool::Create(&env_, "p", Options(0));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Pool& pool = **p;
  ASSERT_NO_FATAL_FAILURE(Fill(pool, 1));
  const uint64_t before = DataBytes(pool);
  EXPECT_GT(before, kMedium - 4 * kMiB) << "the medium's size, less the metadata";

  Status s = pool.Grow(kGrownMedium);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_EQ(DataBytes(pool), before);
  EXPECT_TRUE(pool.Grow(0).ok()) << "the medium's own size: nothing to do";
  EXPECT_EQ(DataBytes(pool), before);

  env_.ResizeMedium("p", kGrownMedium);
  s = pool.Grow(0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(DataBytes(pool), before + (kGrownMedium - kMedium));
  EXPECT_EQ(env_.calls(Op::kTruncate), 0u);
  // The new space serves: a second LUN as large as the first fits only
  // with it (format 3 may also have grown its journal into it).
  ASSERT_TRUE(pool.CreateLun("b", kLunBytes, 512).ok());
  {
    auto l = pool.OpenLun("b").value();
    auto data = Pattern(kLunBytes, 2);
    ASSERT_TRUE(l->Write(0, kLunBytes / 512, data.data(), D::kDurable).ok());
  }
  ASSERT_TRUE(pool.Close().ok());
  p->reset();

  auto q = Pool::Open(&env_, "p");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(DataBytes(**q), before + (kGrownMedium - kMedium));
  ASSERT_NO_FATAL_FAILURE(ExpectFilled(**q, 1));
  EXPECT_TRUE((*q)->Check().clean);
  EXPECT_EQ(env_.calls(Op::kTruncate), 0u);
}

// Create refuses a size above the medium, writing nothing; a medium holds
// bytes of its own before any pool (a disk's), where a file the store
// sizes must be empty.
TEST_P(EnvTraits, CreateOnAFixedSizeMediumTakesWhatItHoldsButNoMoreThanItsSize) {
  env_.ResizeMedium("p", kMedium);
  {
    auto f = env_.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    const auto junk = Pattern(64 * kKiB, 9);
    ASSERT_TRUE((*f)->Write(kMedium / 2, junk.size(), junk.data()).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  const std::vector<uint8_t> medium = env_.Snapshot("p");
  EXPECT_EQ(Pool::Create(&env_, "p", Options(0)).status().code(), Code::kAlreadyExists)
      << "a file the store sizes must be empty";
  env_.SetCanTruncate(false);
  EXPECT_EQ(Pool::Create(&env_, "p", Options(kGrownMedium)).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(env_.Snapshot("p") == medium) << "a refused create wrote";
  auto p = Pool::Create(&env_, "p", Options(kMedium - kMiB));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_LE(DataBytes(**p), kMedium - kMiB);
  ASSERT_NO_FATAL_FAILURE(Fill(**p, 3));
}

// A medium smaller than the pool it holds (a device replaced by a smaller
// one, an image copied short) is refused, not read as zeros past its end.
TEST_P(EnvTraits, AMediumSmallerThanItsPoolIsRefused) {
  env_.ResizeMedium("p", kMedium);
  env_.SetCanTruncate(false);
  {
    auto p = Pool::Create(&env_, "p", Options(0));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Fill(**p, 4));
    ASSERT_TRUE((*p)->Close().ok());
  }
  std::vector<uint8_t> img = env_.DurableSnapshot("p");
  img.resize(kMedium - kMiB);
  env_.Install("p", img.data(), img.size());
  auto q = Pool::Open(&env_, "p");
  EXPECT_EQ(q.status().code(), Code::kCorruption) << q.status().ToString();
  // Format 2 says so at the size check, format 3 when it has chosen its
  // superblock copy (ChooseSuperblockV3), with the size the pool needs.
  EXPECT_NE(q.status().message().find("device"), std::string::npos) << q.status().ToString();
  if (GetParam().format == 3) {
    EXPECT_NE(q.status().message().find("it was made smaller"), std::string::npos) << q.status().ToString();
  }
}

// A power cut at any call of a Grow on a fixed medium, in every loss mode,
// opens at the old size or the new one, checks clean and reads its data.
TEST_P(EnvTraits, APowerCutInAGrowOfAFixedMediumOpensAtTheOldSizeOrTheNew) {
  env_.ResizeMedium("p", kMedium);
  env_.SetCanTruncate(false);
  uint64_t old_bytes = 0;
  {
    auto p = Pool::Create(&env_, "p", Options(0));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Fill(**p, 5));
    old_bytes = DataBytes(**p);
    ASSERT_TRUE((*p)->Close().ok());
  }
  const std::vector<uint8_t> base = env_.DurableSnapshot("p");
  const Loss kModes[] = {Loss::kDropAll, Loss::kKeepAll, Loss::kRandom, Loss::kTear};
  const int modes = sanitizer::kSanitized ? 2 : 4;
  int at_old = 0, at_new = 0, completed = 0;
  for (int64_t cut = 0; cut < 24; cut++) {
    for (int m = 0; m < modes; m++) {
      SCOPED_TRACE("cut after " + std::to_string(cut) + " calls, loss mode " + std::to_string(m));
      FaultInjectionEnv env;
      env.Install("p", base.data(), base.size());
      env.SetCanTruncate(false);
      env.ResizeMedium("p", kGrownMedium);
      {
        auto p = Pool::Open(&env, "p");
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        env.CrashAfter(cut);
        (void)(*p)->Grow(0);  // fails once the disk is dead
        if (!env.Disarm()) completed++;
      }
      env.PowerLoss(kModes[m], static_cast<uint64_t>(cut * 31 + m));
      auto q = Pool::Open(&env, "p");
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      const uint64_t bytes = DataBytes(**q);
      if (bytes == old_bytes) {
        at_old++;
      } else {
        EXPECT_EQ(bytes, old_bytes + (kGrownMedium - kMedium));
        at_new++;
      }
      ASSERT_NO_FATAL_FAILURE(ExpectFilled(**q, 5));
      EXPECT_TRUE((*q)->Check().clean);
      ASSERT_TRUE((*q)->Grow(0).ok()) << "a Grow completes after the cut";
      EXPECT_EQ(DataBytes(**q), old_bytes + (kGrownMedium - kMedium));
    }
  }
  EXPECT_GT(at_old, 0);
  EXPECT_GT(at_new, 0);
  EXPECT_GT(completed, 0) << "some cuts came after the Grow's last call";
}

// ------------------------------------------------------- AtomicWriteBytes

// The chosen superblock of a format 3 pool's durable image.
SuperblockV3 DurableSuperblock(FaultInjectionEnv& env) {
  const std::vector<uint8_t> img = env.DurableSnapshot("p");
  SuperblockV3 a, b;
  Status sa = DecodeSuperblockV3(img.data(), kSuperblockSlot, img.size(), &a);
  Status sb = DecodeSuperblockV3(img.data() + kSuperblockSlot, kSuperblockSlot, img.size(), &b);
  EXPECT_TRUE(sa.ok() || sb.ok()) << sa.ToString() << " / " << sb.ToString();
  if (!sb.ok()) return a;
  if (!sa.ok()) return b;
  return a.seq > b.seq ? a : b;
}

// Where each reopen of a format 3 pool started its journal, over `rounds`
// rounds of a write and a close: the superblocks' journal_start.
std::vector<uint64_t> JournalStarts(FaultInjectionEnv& env, int rounds, uint32_t* write_unit) {
  std::vector<uint64_t> starts;
  for (int r = 0; r < rounds; r++) {
    auto p = Pool::Open(&env, "p");
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    if (!p.ok()) return starts;
    auto l = (*p)->OpenLun("a").value();
    // Writes of several sizes, so the journal's tail lands anywhere.
    for (int i = 0; i <= r; i++) {
      auto data = Pattern(512 * (1 + (r * 5 + i) % 9), static_cast<uint8_t>(r));
      EXPECT_TRUE(l->Write(8 * (i + 1) + r, data.size() / 512, data.data(), D::kDurable).ok());
    }
    l.reset();
    EXPECT_TRUE((*p)->Close().ok());
    const SuperblockV3 sb = DurableSuperblock(env);
    starts.push_back(sb.journal_start);
    *write_unit = sb.write_unit;
  }
  return starts;
}

// A format 3 pool on a medium of 512-byte atomic writes says so, and starts
// its journal on 512-byte boundaries, not only on 4096-byte ones; moved to
// a medium of 4096 it lays its journal out in 4096 from then on.
TEST(EnvTraitsV3, TheWriteUnitIsTheMediumsAndOnlyGrows) {
  FaultInjectionEnv env;
  env.SetAtomicWriteBytes(512);
  ASSERT_NO_FATAL_FAILURE(CreateWithLun(env, SmallPool(3, 4096, kMedium)));
  EXPECT_EQ(DurableSuperblock(env).write_unit, 512u);
  uint32_t unit = 0;
  std::vector<uint64_t> starts = JournalStarts(env, 8, &unit);
  EXPECT_EQ(unit, 512u);
  bool off_4k = false;
  for (uint64_t s : starts) {
    EXPECT_EQ(s % 512, 0u);
    off_4k |= s % 4096 != 0;
  }
  EXPECT_TRUE(off_4k) << "every start fell on 4096: the medium's unit was not used";

  env.SetAtomicWriteBytes(4096);
  starts = JournalStarts(env, 8, &unit);
  EXPECT_EQ(unit, 4096u);
  for (uint64_t s : starts) EXPECT_EQ(s % 4096, 0u) << "journal start " << s;
  env.SetAtomicWriteBytes(512);  // back on the small unit: it stays 4096
  starts = JournalStarts(env, 2, &unit);
  EXPECT_EQ(unit, 4096u);
  for (uint64_t s : starts) EXPECT_EQ(s % 4096, 0u) << "journal start " << s;
}

// A medium whose atomic unit holds both superblock slots is refused for
// writing, by Create (writing nothing), a writable open and an upgrade;
// a read-only open writes nothing and reads the pool.
TEST_P(EnvTraits, AMediumAboveASuperblockSlotIsRefusedForWriting) {
  {
    auto p = Pool::Create(&env_, "p", Options(kMedium));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Fill(**p, 6));
    ASSERT_TRUE((*p)->Close().ok());
  }
  const std::vector<uint8_t> img = env_.Snapshot("p");
  env_.SetAtomicWriteBytes(8192);
  auto c = Pool::Create(&env_, "q", Options(kMedium));
  EXPECT_EQ(c.status().code(), Code::kUnsupported) << c.status().ToString();
  EXPECT_TRUE(env_.Snapshot("q").empty()) << "a refused create wrote";
  auto w = Pool::Open(&env_, "p");
  EXPECT_EQ(w.status().code(), Code::kUnsupported) << w.status().ToString();
  EXPECT_NE(w.status().message().find("8192"), std::string::npos) << w.status().ToString();
  auto u = Pool::Upgrade(&env_, "p");  // format 3 too: its upgrade opens it writable
  EXPECT_EQ(u.status().code(), Code::kUnsupported) << u.status().ToString();
  EXPECT_TRUE(env_.Snapshot("p") == img) << "a refused open or upgrade wrote";
  auto r = Pool::Open(&env_, "p", OpenOptions{.read_only = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectFilled(**r, 6));
  r->reset();
  EXPECT_TRUE(env_.Snapshot("p") == img) << "a read-only open wrote";
}

// An upgrade on a medium of 512-byte atomic writes gives the format 3 pool
// that unit, as a Create there would.
TEST(EnvTraitsUpgrade, AnUpgradedPoolTakesTheMediumsWriteUnit) {
  FaultInjectionEnv env;
  ASSERT_NO_FATAL_FAILURE(CreateWithLun(env, SmallPool(2, 0, kMedium)));
  env.SetAtomicWriteBytes(512);
  auto u = Pool::Upgrade(&env, "p");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->from_format, 2u);
  EXPECT_EQ(DurableSuperblock(env).write_unit, 512u);
}

INSTANTIATE_TEST_SUITE_P(Formats, EnvTraits, AllFormats(), FormatName());

}  // namespace
}  // namespace cowstore::store
