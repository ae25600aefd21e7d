// SPDX-License-Identifier: Apache-2.0
#include "handler/store/dirty_ranges.h"

#include <algorithm>
#include <iterator>

#include "handler/store/run_tree.h"  // RunTree::kMaxKey: the 48-bit LBA bound

namespace cowstore::store {

void DirtyRanges::Mark(uint32_t lun, uint64_t lba, uint64_t len) {
  if (len == 0 || lba >= RunTree::kMaxKey) return;
  uint64_t first = lba;
  uint64_t end = len > RunTree::kMaxKey - lba ? RunTree::kMaxKey : lba + len;
  std::map<uint64_t, uint64_t>& r = luns_[lun];
  // Absorb every range that overlaps or touches [first, end).
  auto it = r.upper_bound(first);
  if (it != r.begin() && std::prev(it)->second >= first) --it;
  while (it != r.end() && it->first <= end) {
    first = std::min(first, it->first);
    end = std::max(end, it->second);
    it = r.erase(it);
  }
  r.emplace(first, end);
}

void DirtyRanges::MarkLun(uint32_t lun) { Mark(lun, 0, RunTree::kMaxKey); }

bool DirtyRanges::Touches(uint32_t lun, uint64_t first, uint64_t end) const {
  auto l = luns_.find(lun);
  if (l == luns_.end() || first >= end) return false;
  // The last range starting before `end` is the only candidate: ranges are
  // disjoint and sorted, so any earlier one ends before it starts.
  auto it = l->second.lower_bound(end);
  if (it == l->second.begin()) return false;
  return std::prev(it)->second > first;
}

DirtyRanges DirtyRanges::Take() {
  DirtyRanges taken;
  taken.luns_.swap(luns_);
  return taken;
}

void DirtyRanges::Merge(const DirtyRanges& taken) {
  for (const auto& [lun, ranges] : taken.luns_)
    for (const auto& [first, end] : ranges) Mark(lun, first, end - first);
}

size_t DirtyRanges::ranges() const {
  size_t n = 0;
  for (const auto& [lun, r] : luns_) n += r.size();
  return n;
}

}  // namespace cowstore::store
