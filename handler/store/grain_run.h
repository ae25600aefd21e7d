// SPDX-License-Identifier: Apache-2.0
// A range of physical grains, the unit SharedRefs reports freed and
// FreeSpace keeps free. One definition for both: two structs of one name in
// one namespace would break the one-definition rule as soon as they met.
#pragma once

#include <cstdint>

namespace cowstore::store {

// Physical grains [start, start + len).
struct GrainRun {
  uint64_t start = 0, len = 0;
  uint64_t end() const { return start + len; }
  bool operator==(const GrainRun&) const = default;
};

}  // namespace cowstore::store
