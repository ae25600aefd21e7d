// SPDX-License-Identifier: Apache-2.0
// A power cut at its worst for the superblock (format 3's two slots,
// superblock_v3.h): every slot whose bytes are in the cache only is torn,
// every other unsynced sector dropped. kTear does that to one slot for
// about one seed in eight, and to both at once rarely enough that a
// writer which let both slots be in flight together (no sync between
// them) passed sweeps of a few seeds: this cut tears both whenever both
// are in flight.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/superblock_v3.h"

namespace cowstore::store::testing {

// The loss mode's number after FaultInjectionEnv::Loss's four, for sweeps
// that count through them.
inline constexpr int kTearSlotsInFlight = 4;

// `path` must not be open (as FaultInjectionEnv::PowerLoss).
inline void CutTearingSlotsInFlight(FaultInjectionEnv* env, const std::string& path = "p") {
  const std::vector<uint8_t> cached = env->Snapshot(path);
  env->PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);
  const std::vector<uint8_t> durable = env->Snapshot(path);
  const uint64_t both = std::min(cached.size(), durable.size());
  for (uint64_t at = 0; at < 2 * kSuperblockSlot && at + kSuperblockSlot <= both; at += kSuperblockSlot)
    if (!std::equal(cached.begin() + at, cached.begin() + at + kSuperblockSlot, durable.begin() + at))
      env->Corrupt(path, at + 64, 16);
}

}  // namespace cowstore::store::testing
