// SPDX-License-Identifier: Apache-2.0
// The check's recount of a GrainSpace (check.cc defines it; Core::Check
// calls it on a census copied under the pool's locks, tests call it on one
// they damaged). Nothing here is per grain: O(E log E) for E runs of the
// maps, the census's runs and SharedRefs' region counters.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "handler/store/extent_map.h"
#include "handler/store/grain_space.h"
#include "handler/store/pool.h"

namespace cowstore::store {

// Recounts `c` from the maps' runs `runs` (each inside the pool, lba
// ignored) and the checkpoint AUs the format names (`format_meta`, in its
// order), calling problem(text) for each thing that disagrees:
// - the grains with two owners or more must be exactly c.shared, and
//   c.shared_grains and c.region_shared their totals; the grains with one
//   or more c.mapped;
// - every grain is in at most one place: mapped, free (index or a LUN's
//   chunk), checkpoint metadata (current or handed over), reserved or
//   pending (a reserved grain a record mapped already must be mapped);
//   an overlap is reported as the grains and the two places;
// - each place's runs add up to its count (pending, releasing and
//   quarantined grains are places with runs too), so any
//   grain in no place is leaked, reported by grain; counts above the pool:
//   the counts are wrong;
// - no AU is left handed over (a checkpoint that never installed them), and
//   the free index's size classes agree with its runs (c.index_problem).
// Adds the mapped and metadata grains to rep->allocated_units and the
// leaked ones to rep->leaked_units.
void CheckGrainCensus(std::vector<Run> runs, const GrainCensus& c, const std::vector<uint64_t>& format_meta,
                      CheckReport* rep, const std::function<void(std::string)>& problem);

}  // namespace cowstore::store
