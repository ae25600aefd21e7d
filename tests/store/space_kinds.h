// SPDX-License-Identifier: Apache-2.0
// Every space class, through the interface Core holds (PoolSpace): the flat
// map, and GrainSpace at grain == AU and at 16 grains an AU (64 KiB AUs).
#pragma once

#include <memory>

#include "handler/store/grain_space.h"
#include "handler/store/pool_space.h"
#include "handler/store/space_map.h"

namespace cowstore::store::testing {

struct SpaceKind {
  const char* name;
  std::unique_ptr<PoolSpace> (*make)();
};
inline const SpaceKind kSpaceKinds[] = {
    {"SpaceMap", [] { return std::unique_ptr<PoolSpace>(new SpaceMap); }},
    {"GrainSpace, grain == AU", [] { return std::unique_ptr<PoolSpace>(new GrainSpace(64 * 1024, 64 * 1024)); }},
    {"GrainSpace, 16 grains an AU", [] { return std::unique_ptr<PoolSpace>(new GrainSpace(4 * 1024, 64 * 1024)); }},
};

}  // namespace cowstore::store::testing
