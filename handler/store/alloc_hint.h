// SPDX-License-Identifier: Apache-2.0
// Where an allocation would like to land (store-v3.md 3.5): which LUN and
// which of its LBA regions the grains are for, and a preferred first grain.
// FreeSpace keeps one chunk per (LUN, region), so a region's new grains lie
// together and a sequential read of it reads few places; the flat SpaceMap
// ignores the hint.
#pragma once

#include <cstdint>

namespace cowstore::store {

struct AllocHint {
  static constexpr uint32_t kNoLun = 0;  // metadata: no chunk, straight from the index
  uint32_t lun = kNoLun;
  // The preferred first grain (e.g. the one after the region's nearest own
  // grain below the write); honoured if it is free. kNoGoal: no preference.
  static constexpr uint64_t kNoGoal = UINT64_MAX;
  uint64_t goal = kNoGoal;
  // Which of the LUN's chunks (the caller's unit: the data path numbers
  // 1 MiB of LBAs, kAllocRegionBytes). Ignored without a LUN.
  uint64_t region = 0;
};

// The data path's region: ESXi's and Windows' I/O and UNMAP alignment, and
// the read size the sequential-read goal is measured with.
constexpr uint64_t kAllocRegionBytes = uint64_t{1} << 20;

}  // namespace cowstore::store
