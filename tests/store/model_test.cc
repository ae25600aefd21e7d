// SPDX-License-Identifier: Apache-2.0
// Randomized model-based test: random sequences of every operation over
// several LUNs, checked against the in-memory model after every step, with a
// full verification and Check() every few steps. Over the suite's formats
// (suite_formats.h: format 2, format 3 at grain = AU and at a 4 KiB grain),
// six seeds each (two AU sizes, two journal sizes). The model knows the
// grain: an unmap deallocates whole grains only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>

#include "tests/common/sanitizers.h"
#include "tests/store/driver.h"
#include "tests/store/suite_formats.h"

namespace cowstore::store::testing {
namespace {

// COWSTORE_MODEL_STEPS, or 1500; in sanitizer builds a third of that for
// format 3's twelve cases (a TSan step costs ~30 plain ones: all 18 cases
// at 1500 steps took 81 s of a TSan stage CI cannot spare).
int Steps(const SuiteFormat& f) {
  const char* e = std::getenv("COWSTORE_MODEL_STEPS");
  if (e) return std::atoi(e);
#if COWSTORE_SANITIZED()
  if (f.format == 3) return 500;
#endif
  (void)f;
  return 1500;
}

// Recounts what the LUNs say they own (from their maps) against the space
// map's reference counts, two independent tallies (plan step 4): exclusive
// grains (one reference) plus shared units (refs > 1) are every mapped unit,
// and every shared unit is counted by at least two references. (A LUN's
// mapped = exclusive + shared holds by construction of LunInfo, so it is not
// asserted here.) LunInfo is in bytes of whole grains, SpaceInfo in units
// of unit_bytes (the grain).
void ExpectOwnershipAddsUp(Pool* pool) {
  SpaceInfo si = pool->Space();
  uint64_t excl = 0, shared = 0;
  for (const LunInfo& l : pool->ListLuns()) {
    EXPECT_EQ(l.exclusive_bytes % si.unit_bytes, 0u);
    EXPECT_EQ(l.shared_bytes % si.unit_bytes, 0u);
    excl += l.exclusive_bytes / si.unit_bytes;
    shared += l.shared_bytes / si.unit_bytes;
  }
  EXPECT_EQ(excl + si.shared_units, si.allocated_units - si.metadata_units);
  EXPECT_GE(shared, 2 * si.shared_units);
  EXPECT_EQ(shared == 0, si.shared_units == 0);
}

class ModelTest : public ::testing::TestWithParam<std::tuple<SuiteFormat, uint64_t>> {};

TEST_P(ModelTest, RandomOperationsMatchModel) {
  const auto& [format, seed] = GetParam();
  FaultInjectionEnv env;
  DriverOptions o;
  if (seed % 2) o.au = 128 * 1024;  // two AU sizes
  if (seed % 3 == 0) o.journal = 256 * 1024;
  o.format = format.format;
  o.grain = format.grain;
  // Format 3: the data keeps format 2's room. Even seeds offer its journal
  // nothing (1 % soft threshold: a checkpoint every few hundred records);
  // odd ones let it grow into room of its own.
  if (seed % 2 == 0 && format.format == 3) o.soft_threshold = 1;
  else o.pool_units += format.JournalRoomBytes(o.au) / o.au;
  Driver d(&env, seed, o);
  ASSERT_TRUE(d.Create());
  EXPECT_EQ(d.pool()->Space().unit_bytes, format.Unit(o.au));
  for (int i = 0; i < Steps(format); i++) {
    ASSERT_TRUE(d.Step()) << "step " << i << " seed " << seed;
    if (i % 50 == 49) {
      ASSERT_TRUE(d.VerifyAll(false, false)) << "step " << i;
      CheckReport rep = d.pool()->Check();
      ASSERT_TRUE(rep.clean) << rep.problems[0];
      ExpectOwnershipAddsUp(d.pool());
      ASSERT_FALSE(::testing::Test::HasFailure()) << "step " << i;
    }
  }
  // A clean reopen keeps everything.
  ASSERT_TRUE(d.pool()->Flush().ok());
  d.model().MakeDurable();
  d.Drop();
  ASSERT_TRUE(d.Reopen());
  ASSERT_TRUE(d.VerifyAll(false, false));
  auto rep = Pool::CheckOffline(&env, "pool");
  EXPECT_EQ(rep.status().code(), Code::kBusy);  // still open here
  d.Drop();
  rep = Pool::CheckOffline(&env, "pool");
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->clean) << rep->problems[0];
}

std::string Name(const ::testing::TestParamInfo<ModelTest::ParamType>& i) {
  return std::string(std::get<0>(i.param).name) + "_" + std::to_string(std::get<1>(i.param));
}
INSTANTIATE_TEST_SUITE_P(Seeds, ModelTest, ::testing::Combine(AllFormats(), ::testing::Range<uint64_t>(1, 7)), Name);

}  // namespace
}  // namespace cowstore::store::testing
