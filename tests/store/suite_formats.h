// SPDX-License-Identifier: Apache-2.0
// The store suite's pool formats (store-v3.md, plan step 5d, step e): the
// same tests over format 2 (grain = AU), format 3 at grain = AU, and format
// 3 at a 4 KiB grain. Test names end in /F2, /F3AU, /F3G4K. Space figures
// count units of the grain (SpaceInfo::unit_bytes): expected values come
// from Unit() and UnitsPerAu(), never from a per-format constant.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>

#include "handler/store/journal_segments.h"
#include "handler/store/meta.h"  // kMaxPoolUnits
#include "handler/store/pool.h"

namespace cowstore::store::testing {

struct SuiteFormat {
  const char* name;
  uint32_t format;  // PoolOptions::format
  uint32_t grain;   // PoolOptions::grain (0 = the AU)

  // The unit space is counted and shared in, for a pool of AU `au`.
  uint32_t Unit(uint32_t au) const { return grain ? grain : au; }
  uint64_t UnitsPerAu(uint32_t au) const { return au / Unit(au); }
  void Apply(PoolOptions* o) const {
    o->format = format;
    o->grain = grain;
  }
  // Format 3 grows its journal at checkpoints into the data area, towards
  // JournalTargetAus (16 MiB for a small map, at most 1/16 of the pool),
  // while the pool's used units stay below the soft line (80 % when the
  // threshold is off). A test that sizes its pool for its data adds this
  // much, the most it can take whatever the pool's size, so that its data
  // has at least the room it has at format 2 (tests about a full pool
  // count what the journal took instead).
  uint64_t JournalRoomBytes(uint32_t au) const {
    return format == 3 ? JournalTargetAus(0, au, kMaxPoolUnits, 0) * au : 0;
  }
};

inline void PrintTo(const SuiteFormat& f, std::ostream* os) { *os << f.name; }

inline constexpr SuiteFormat kF2{"F2", 2, 0};
inline constexpr SuiteFormat kF3Au{"F3AU", 3, 0};
inline constexpr SuiteFormat kF3G4k{"F3G4K", 3, 4096};

inline auto AllFormats() { return ::testing::Values(kF2, kF3Au, kF3G4k); }

struct FormatName {
  std::string operator()(const ::testing::TestParamInfo<SuiteFormat>& i) const { return i.param.name; }
};

}  // namespace cowstore::store::testing
