// SPDX-License-Identifier: Apache-2.0
// A run of units freed by a record that is not durable yet: what the space
// maps (pool_space.h) hand the thinner (thinner.h) to punch once the record
// is, and take back, zeroed or not. Its own header because every space map
// and the thinner share it and nothing else of theirs.
#pragma once

#include <cstdint>

namespace cowstore::store {

// Units [phys, phys+n) freed by the record with ticket `tag`, in the space
// map's unit (AUs for the flat SpaceMap, grains for GrainSpace).
struct PendingRun {
  uint64_t phys, n, tag;
};

}  // namespace cowstore::store
