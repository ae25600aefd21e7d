// SPDX-License-Identifier: Apache-2.0
// Thin on thin, as cowctl shows and enforces it. A pool promises its LUNs'
// sizes (provisioned) out of its own size; a pool file promises its size out
// of the free space of the filesystem under it (a device pool is inside its
// device already). cowctl shows both layers in `pool show`/`pool list`, and
// one overcommit rule guards every command that makes a promise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "tools/cowctl/output.h"

namespace cowstore::cowctl {

// What the pool can really hold: its size, less the part of its remaining
// growth that its backing store has no room for (store::OutgrowsBacking).
uint64_t HoldableBytes(const store::SpaceInfo& s);
// Provisioned size over pool size (0 for a pool of size 0).
double OvercommitRatio(const store::SpaceInfo& s);

// A promise of space a command is about to make, and what would hold it.
struct Promise {
  std::string subject;   // "LUNs of pool 'tank'", "pool 'tank'"
  uint64_t promised = 0;  // bytes after the command
  uint64_t holdable = 0;  // bytes that can hold them
  std::string holder;    // what holds them, for the message
  std::string remedy;    // what else the user can do than --overcommit
};
// The LUNs of pool `pool` (space `s`) after `added` more bytes of LUN
// (lun create, lun import: the new LUN's size; lun resize: the growth).
Promise LunPromise(const std::string& pool, const store::SpaceInfo& s, uint64_t added);
// A new pool of `size` bytes on backing store `b` (pool create --size).
Promise PoolPromise(const std::string& pool, uint64_t size, const store::BackingSpace& b);

// The one overcommit rule: a command may promise more than what holds it
// only when asked (--overcommit). Throws UserError saying by how much and
// what to do; prints a warning on stderr when allowed to overcommit.
void ApplyOvercommitRule(const Promise& p, bool overcommit);

// For pool show/list (text and --json): provisioned, ratio, the backing
// store, and the warning when the pool can outgrow it (nullopt if not).
std::optional<std::string> OutgrowWarning(const store::SpaceInfo& s);
void AddCapacityJson(const store::SpaceInfo& s, Json& j);
std::vector<std::pair<std::string, std::string>> CapacityKeyValues(const store::SpaceInfo& s);
// "1.50x" style.
std::string FormatRatio(double r);

// The soft threshold as the percentage a pool was made with, for pool show
// and save alike. The store keeps only the unit count,
// floor(total * percent / 100) (store::SoftThresholdUnits); this inverts
// that rule: the smallest percentage giving the count. With 100 units or
// more, which tell every percentage apart, that is the one given at create
// (rounding down shows 80 % as 79 %, and so does rounding to nearest at 101
// units); with fewer it is one that gives the same threshold. Either way a
// pool made again with it (restore --create-missing) warns where it did.
uint32_t SoftThresholdPercent(const store::SpaceInfo& s);

}  // namespace cowstore::cowctl
