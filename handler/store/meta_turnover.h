// SPDX-License-Identifier: Apache-2.0
// MetaTurnover: what a checkpoint does to the metadata AUs, as one rule for
// every PoolSpace (pool_space.h, InstallMeta). The format says which AUs
// its new checkpoint occupies (MetaFormat::meta_units()); the space knows
// the AUs the previous checkpoint occupied (current) and those it handed
// over since (TakeMeta, and the journal's runs). The new set may keep AUs
// of the current one (format 3's chunks and journal survive a checkpoint
// that reuses them) and need not use every AU handed over; format 2's is
// exactly the AUs handed over, so all of the current set retires. This is
// the only place metadata AUs are freed: a journal extent a checkpoint
// drops (JournalGrowth::freed, a report) is in the current set and not in
// the new one, so it retires here, and nobody else frees it.
//
// `unused` AUs are freed without a punch. That is sound only because the
// handed-over list is empty when a checkpoint starts taking AUs: every
// checkpoint ends with InstallMeta (which clears it) or a failed pool
// (whose reopen rebuilds the space), so what is handed over was taken by
// this checkpoint, free and zeroed, and what it wrote is in the new set
// (a run FormatV3 gives back while planning is never written). Core asserts
// it before TakeMeta; a later rule that lets a pool live on after a failed
// checkpoint must send the failed attempt's AUs through pending instead.
#pragma once

#include <cstdint>
#include <vector>

#include "handler/store/status.h"

namespace cowstore::store {

struct MetaTurnover {
  // In the current set and the new one: metadata before and after.
  std::vector<uint64_t> kept;
  // In the current set, not in the new one: they held the previous
  // checkpoint, which an open may still read until the superblock naming
  // the new one is durable, so they free through the pending path under
  // the checkpoint's ticket.
  std::vector<uint64_t> retired;
  // Handed over, not in the new one: nothing durable names them (the only
  // superblock that could is the new checkpoint's, which does not) and
  // nothing wrote them (header comment), so they are free at once.
  std::vector<uint64_t> unused;
};

// Splits the AUs (each list sorted here, so any order in) into *out, sorted.
// Refuses with kIOError ("...; the pool must be reopened": it is an engine
// bug at a checkpoint, and a failed checkpoint fails the pool), leaving *out
// untouched, a new set naming an AU twice or one neither current nor
// handed over, and current and handed-over sets that overlap or name an
// AU twice (TakeMeta hands over free AUs only, so that would be a space
// map bug).
Status SplitMetaTurnover(const std::vector<uint64_t>& current, const std::vector<uint64_t>& handed_over,
                         const std::vector<uint64_t>& next, MetaTurnover* out);

// A run given back before any install (PoolSpace::GiveMetaRun): true if
// every AU of [first, first + n) is handed over; ForgetHandedOver drops
// them. Neither allocates.
bool RunHandedOver(const std::vector<uint64_t>& handed_over, uint64_t first, uint64_t n);
void ForgetHandedOver(std::vector<uint64_t>* handed_over, uint64_t first, uint64_t n);

}  // namespace cowstore::store
