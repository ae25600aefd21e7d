// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/capacity.h"

#include <cstdio>
#include <iostream>

#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

uint64_t RemainingGrowth(const store::SpaceInfo& s) { return s.Bytes(s.free_units); }

std::string BackingName(const store::SpaceInfo& s) { return s.backing_grows ? "its filesystem" : "its device"; }

}  // namespace

uint64_t HoldableBytes(const store::SpaceInfo& s) {
  const uint64_t growth = RemainingGrowth(s);
  if (!s.backing_known || !store::OutgrowsBacking(s.backing_grows, s.backing_free_bytes, growth)) {
    return s.pool_size_bytes;
  }
  return s.pool_size_bytes - (growth - s.backing_free_bytes);
}

double OvercommitRatio(const store::SpaceInfo& s) {
  return s.pool_size_bytes ? static_cast<double>(s.provisioned_bytes) / static_cast<double>(s.pool_size_bytes) : 0.0;
}

uint32_t SoftThresholdPercent(const store::SpaceInfo& s) {
  if (s.total_units == 0) return 0;
  // Pools hold at most 2^48 units: no overflow.
  return static_cast<uint32_t>((s.soft_threshold_units * 100 + s.total_units - 1) / s.total_units);
}

std::string FormatRatio(double r) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", r);
  return b;
}

Promise LunPromise(const std::string& pool, const store::SpaceInfo& s, uint64_t added) {
  Promise p;
  p.subject = "the LUNs of pool '" + pool + "'";
  p.promised = s.provisioned_bytes + added;
  if (p.promised < added) p.promised = UINT64_MAX;  // saturate
  // The pool's own size: thin on thin (a backing store short of the pool's
  // growth) is the pool's promise, warned about when it is made (pool create)
  // and shown by pool show/list and the soft threshold, not refused again at
  // every LUN.
  p.holdable = s.pool_size_bytes;
  p.holder = "the pool (" + FormatSize(s.pool_size_bytes) + ")";
  p.remedy = "grow the pool";
  return p;
}

Promise PoolPromise(const std::string& pool, uint64_t size, const store::BackingSpace& b) {
  Promise p;
  p.subject = "pool '" + pool + "'";
  p.promised = size;
  // A new pool's remaining growth is its size; a device holds it whole
  // (the store refuses a size beyond the device).
  p.holdable = store::OutgrowsBacking(b.grows, b.free_bytes, size) ? b.free_bytes : size;
  p.holder = std::string(b.grows ? "its filesystem" : "its device") + " (" + FormatSize(b.free_bytes) + " free)";
  p.remedy = "give a smaller --size";
  return p;
}

void ApplyOvercommitRule(const Promise& p, bool overcommit) {
  if (p.promised <= p.holdable) return;
  std::string what = p.subject + " would promise " + FormatSize(p.promised) + ", more than " + p.holder;
  if (!overcommit) throw UserError(what + ": " + p.remedy + " or pass --overcommit");
  std::cerr << "cowctl: warning: " << what << " (--overcommit): writes fail once it is full\n";
}

std::optional<std::string> OutgrowWarning(const store::SpaceInfo& s) {
  if (!s.backing_known || !s.backing_short) return std::nullopt;
  return "the pool can still grow by " + FormatSize(RemainingGrowth(s)) + " but " + BackingName(s) + " has " +
         FormatSize(s.backing_free_bytes) + " free: writes will fail before the pool is full";
}

void AddCapacityJson(const store::SpaceInfo& s, Json& j) {
  j["provisioned"] = s.provisioned_bytes;
  j["overcommit_ratio"] = OvercommitRatio(s);
  j["can_hold"] = HoldableBytes(s);
  if (s.backing_known) {
    Json b = Json::object();
    b["kind"] = s.backing_grows ? "filesystem" : "device";
    b["size"] = s.backing_size_bytes;
    b["free"] = s.backing_free_bytes;
    j["backing"] = b;
    j["backing_free"] = s.backing_free_bytes;
  } else {
    j["backing"] = nullptr;
    j["backing_free"] = nullptr;
  }
  j["outgrows_backing"] = s.backing_known && s.backing_short;
  Json w = Json::array();
  if (auto warning = OutgrowWarning(s)) w.push_back(*warning);
  j["warnings"] = w;
}

std::vector<std::pair<std::string, std::string>> CapacityKeyValues(const store::SpaceInfo& s) {
  std::vector<std::pair<std::string, std::string>> kv;
  kv.emplace_back("provisioned", FormatSize(s.provisioned_bytes) + " (" + FormatRatio(OvercommitRatio(s)) +
                                     " of the pool" + (s.provisioned_bytes > s.pool_size_bytes ? ": overcommitted" : "") +
                                     ")");
  if (!s.backing_known) {
    kv.emplace_back("backing store", "unknown");
  } else if (s.backing_grows) {
    kv.emplace_back("backing free", FormatSize(s.backing_free_bytes) + " of " + FormatSize(s.backing_size_bytes) +
                                        " (filesystem)");
  } else {
    kv.emplace_back("backing free", FormatSize(s.backing_free_bytes) + " (block device: the pool cannot outgrow it)");
  }
  if (auto warning = OutgrowWarning(s)) kv.emplace_back("WARNING", *warning);
  return kv;
}

}  // namespace cowstore::cowctl
