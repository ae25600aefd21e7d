// SPDX-License-Identifier: Apache-2.0
#include "handler/store/extent_map.h"

#include <algorithm>

namespace cowstore::store {

namespace {

// "2^k" for a power of two, else the number.
std::string Bound(uint64_t b) {
  if (b != 0 && (b & (b - 1)) == 0) return "2^" + std::to_string(__builtin_ctzll(b));
  return std::to_string(b);
}

}  // namespace

std::string ExtentMap::OutOfRange(uint64_t lba, uint64_t phys, uint64_t len, uint64_t max_phys) {
  if (len == 0) return "empty extent";
  if (lba > kMaxLba || len > kMaxLba - lba) return "logical end beyond 2^48 units";
  if (phys > max_phys || len > max_phys - phys)
    return "physical end beyond " + Bound(max_phys) + " units";
  if (len > RunTree::kMaxLen) return "longer than 2^32 units";
  return "";
}

void ExtentMap::Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const {
  Visit(a, n, [out](const Run& r) {
    out->push_back(r);
    return true;
  });
}

uint64_t ExtentMap::Find(uint64_t a) const {
  Run r;
  return tree_.Covering(a, &r) ? r.phys + (a - r.lba) : kUnmapped;
}

void ExtentMap::Remove(uint64_t a, uint64_t n, std::vector<Run>* removed) {
  if (n == 0) return;
  const uint64_t end = a + n;
  std::vector<Run> scratch;
  std::vector<Run>* out = removed ? removed : &scratch;
  const size_t from = out->size();
  tree_.SplitAt(a);
  tree_.SplitAt(end);
  tree_.EraseStarting(a, end, out);
  for (size_t k = from; k < out->size(); k++) mapped_ -= (*out)[k].len;
}

Status ExtentMap::Insert(uint64_t lba, uint64_t phys, uint64_t len) {
  if (len == 0) return Status::Ok();  // nothing to map
  if (!Holds(lba, phys, len))
    return Status(Code::kInvalidArgument, "extent of " + std::to_string(len) + " units at " +
                                              std::to_string(lba) + " -> " +
                                              std::to_string(phys) + ": " +
                                              Refusal(lba, phys, len));
  // Cannot fail for a valid run (header comment: a merge that would not pack
  // is not made); refused all the same rather than trusted.
  if (!tree_.Insert(lba, phys, len))
    return Status(Code::kInvalidArgument, "extent at " + std::to_string(lba) +
                                              " merges into a run the map cannot hold");
  mapped_ += len;
  return Status::Ok();
}

void ExtentMap::Clear() {
  tree_.Clear();
  mapped_ = 0;
}

}  // namespace cowstore::store
