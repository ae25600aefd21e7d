// SPDX-License-Identifier: Apache-2.0
// Randomized model-based test: random sequences of every operation over
// several LUNs, checked against the in-memory model after every step, with a
// full verification and Check() every few steps.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/store/driver.h"

namespace cowstore::store::testing {
namespace {

int Steps() {
  const char* e = std::getenv("COWSTORE_MODEL_STEPS");
  return e ? std::atoi(e) : 1500;
}

// Recounts what the LUNs say they own (from their maps) against the space
// map's reference counts, two independent tallies (plan step 4): exclusive
// grains (one reference) plus shared units (refs > 1) are every mapped unit,
// and every shared unit is counted by at least two references. (A LUN's
// mapped = exclusive + shared holds by construction of LunInfo, so it is not
// asserted here.) LunInfo is in grain bytes, SpaceInfo in AUs: one unit
// while grain == AU.
void ExpectOwnershipAddsUp(Pool* pool) {
  SpaceInfo si = pool->Space();
  uint64_t excl = 0, shared = 0;
  for (const LunInfo& l : pool->ListLuns()) {
    excl += l.exclusive_bytes / si.allocation_unit;
    shared += l.shared_bytes / si.allocation_unit;
  }
  EXPECT_EQ(excl + si.shared_units, si.allocated_units - si.metadata_units);
  EXPECT_GE(shared, 2 * si.shared_units);
  EXPECT_EQ(shared == 0, si.shared_units == 0);
}

class ModelTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(ModelTest, RandomOperationsMatchModel) {
  FaultInjectionEnv env;
  DriverOptions o;
  if (GetParam() % 2) o.au = 128 * 1024;  // two AU sizes
  if (GetParam() % 3 == 0) o.journal = 256 * 1024;
  Driver d(&env, GetParam(), o);
  ASSERT_TRUE(d.Create());
  for (int i = 0; i < Steps(); i++) {
    ASSERT_TRUE(d.Step()) << "step " << i << " seed " << GetParam();
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

INSTANTIATE_TEST_SUITE_P(Seeds, ModelTest, ::testing::Range<uint64_t>(1, 7));

}  // namespace
}  // namespace cowstore::store::testing
