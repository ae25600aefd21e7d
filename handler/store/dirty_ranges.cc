// SPDX-License-Identifier: Apache-2.0
#include "handler/store/dirty_ranges.h"

#include <algorithm>
#include <iterator>

#include "handler/store/run_tree.h"  // RunTree::kMaxKey: the 48-bit LBA bound

namespace cowstore::store {

namespace {
constexpr uint32_t kKeyBits = 48;
static_assert(RunTree::kMaxKey == uint64_t{1} << kKeyBits);
constexpr uint32_t kShiftStep = 4;  // each widening: spans of 16x the keys
}  // namespace

void DirtyRanges::Insert(Lun* l, uint64_t first, uint64_t end) {
  if (l->shift > 0) {  // widen to the LUN's aligned spans (end <= 2^48: no overflow)
    const uint64_t span = uint64_t{1} << l->shift;
    first &= ~(span - 1);
    end = std::min<uint64_t>(RunTree::kMaxKey, (end + span - 1) & ~(span - 1));
  }
  std::map<uint64_t, uint64_t>& r = l->ranges;
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

// Widens until at most half the bound is left, so the next widening is
// kMaxRangesPerLun / 2 separate marks away; at 2^48 one range is the LUN.
void DirtyRanges::Coarsen(Lun* l) {
  while (l->ranges.size() > kMaxRangesPerLun / 2 && l->shift < kKeyBits) {
    l->shift = std::min(l->shift + kShiftStep, kKeyBits);
    std::map<uint64_t, uint64_t> old;
    old.swap(l->ranges);
    for (const auto& [first, end] : old) Insert(l, first, end);
  }
}

void DirtyRanges::Mark(uint32_t lun, uint64_t lba, uint64_t len) {
  if (len == 0 || lba >= RunTree::kMaxKey) return;
  const uint64_t end = len > RunTree::kMaxKey - lba ? RunTree::kMaxKey : lba + len;
  Lun& l = luns_[lun];
  Insert(&l, lba, end);
  if (l.ranges.size() > kMaxRangesPerLun) Coarsen(&l);
}

void DirtyRanges::MarkLun(uint32_t lun) { Mark(lun, 0, RunTree::kMaxKey); }

bool DirtyRanges::Touches(uint32_t lun, uint64_t first, uint64_t end) const {
  auto l = luns_.find(lun);
  if (l == luns_.end() || first >= end) return false;
  // The last range starting before `end` is the only candidate: ranges are
  // disjoint and sorted, so any earlier one ends before it starts.
  const std::map<uint64_t, uint64_t>& r = l->second.ranges;
  auto it = r.lower_bound(end);
  if (it == r.begin()) return false;
  return std::prev(it)->second > first;
}

DirtyRanges DirtyRanges::Take() {
  DirtyRanges taken;
  taken.luns_.swap(luns_);
  return taken;
}

void DirtyRanges::Merge(const DirtyRanges& taken) {
  for (const auto& [lun, l] : taken.luns_)
    for (const auto& [first, end] : l.ranges) Mark(lun, first, end - first);
}

size_t DirtyRanges::ranges() const {
  size_t n = 0;
  for (const auto& [lun, l] : luns_) n += l.ranges.size();
  return n;
}

size_t DirtyRanges::ranges(uint32_t lun) const {
  auto l = luns_.find(lun);
  return l == luns_.end() ? 0 : l->second.ranges.size();
}

}  // namespace cowstore::store
