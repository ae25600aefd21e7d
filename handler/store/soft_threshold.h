// SPDX-License-Identifier: Apache-2.0
// The soft threshold rule (the pool's "almost full" signal), written once for
// the flat SpaceMap and format v3's GrainSpace: both count in their own units
// (AUs, grains) and pass their counts in.
#pragma once

#include <cstdint>

namespace cowstore::store {

// The used count at which the threshold lies: `percent` of `total` (0: none).
// Pools hold at most 2^48 units, so total * percent cannot overflow.
constexpr uint64_t SoftThresholdUnits(uint64_t total, uint32_t percent) { return total * percent / 100; }

// True if taking units brought the used count from below the threshold (with
// `free_before` free) to at or above it (with `free_now` free). Units out of
// free space but not used (`not_used`) count as free: those being punched
// (free by every durable record) and those zeroing ahead holds for a while.
// Space() shows both as free, so a large delete must not make a later small
// write look like a crossing, nor a round of zeroing ahead an earlier one.
constexpr bool SoftThresholdCrossed(uint64_t total, uint32_t percent, uint64_t free_before, uint64_t free_now,
                                    uint64_t not_used) {
  if (percent == 0) return false;
  const uint64_t limit = SoftThresholdUnits(total, percent);
  const uint64_t used_before = total - free_before - not_used;
  const uint64_t used_now = total - free_now - not_used;
  return used_before < limit && used_now >= limit;
}

}  // namespace cowstore::store
