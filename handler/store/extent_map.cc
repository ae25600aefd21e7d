// SPDX-License-Identifier: Apache-2.0
#include "handler/store/extent_map.h"

#include <algorithm>
#include <iterator>

namespace cowstore::store {

void ExtentMap::Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const {
  if (n == 0) return;
  uint64_t end = a + n;
  auto it = m_.upper_bound(a);
  if (it != m_.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.len > a) it = p;
  }
  for (; it != m_.end() && it->first < end; ++it) {
    uint64_t s = std::max(a, it->first);
    uint64_t e = std::min(end, it->first + it->second.len);
    out->push_back({s, it->second.phys + (s - it->first), e - s});
  }
}

uint64_t ExtentMap::Find(uint64_t a) const {
  auto it = m_.upper_bound(a);
  if (it == m_.begin()) return kUnmapped;
  --it;
  if (it->first + it->second.len <= a) return kUnmapped;
  return it->second.phys + (a - it->first);
}

void ExtentMap::SplitAt(uint64_t a) {
  auto it = m_.upper_bound(a);
  if (it == m_.begin()) return;
  --it;
  uint64_t start = it->first;
  Extent e = it->second;
  if (start == a || start + e.len <= a) return;
  it->second.len = a - start;
  m_.emplace_hint(std::next(it), a, Extent{e.phys + (a - start), start + e.len - a});
}

void ExtentMap::Remove(uint64_t a, uint64_t n, std::vector<Run>* removed) {
  if (n == 0) return;
  uint64_t end = a + n;
  SplitAt(a);
  SplitAt(end);
  auto it = m_.lower_bound(a);
  while (it != m_.end() && it->first < end) {
    if (removed) removed->push_back({it->first, it->second.phys, it->second.len});
    mapped_ -= it->second.len;
    it = m_.erase(it);
  }
}

void ExtentMap::Insert(uint64_t lba, uint64_t phys, uint64_t len) {
  if (len == 0) return;
  mapped_ += len;
  auto next = m_.lower_bound(lba);
  if (next != m_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.len == lba && prev->second.phys + prev->second.len == phys) {
      prev->second.len += len;
      if (next != m_.end() && next->first == lba + len && next->second.phys == phys + len) {
        prev->second.len += next->second.len;
        m_.erase(next);
      }
      return;
    }
  }
  if (next != m_.end() && next->first == lba + len && next->second.phys == phys + len) {
    Extent e{phys, len + next->second.len};
    auto hint = m_.erase(next);
    m_.emplace_hint(hint, lba, e);
    return;
  }
  m_.emplace_hint(next, lba, Extent{phys, len});
}

}  // namespace cowstore::store
