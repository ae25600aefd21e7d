// SPDX-License-Identifier: Apache-2.0
#include "handler/store/extent_map.h"

#include <algorithm>
#include <iterator>

namespace cowstore::store {

// ------------------------------------------------------------ iteration

ExtentMap::Entry ExtentMap::Runs::const_iterator::operator*() const {
  if (is_wide_) return *wide_;
  Run r = *packed_;
  return {r.lba, Extent{r.phys, r.len}};
}

ExtentMap::Runs::const_iterator& ExtentMap::Runs::const_iterator::operator++() {
  if (is_wide_)
    ++wide_;
  else
    ++packed_;
  return *this;
}

ExtentMap::Runs::const_iterator ExtentMap::Runs::begin() const {
  const_iterator it;
  it.is_wide_ = m_->wide_;
  if (m_->wide_)
    it.wide_ = m_->wide_map_.begin();
  else
    it.packed_ = m_->tree_.begin();
  return it;
}

ExtentMap::Runs::const_iterator ExtentMap::Runs::end() const {
  const_iterator it;
  it.is_wide_ = m_->wide_;
  if (m_->wide_)
    it.wide_ = m_->wide_map_.end();
  else
    it.packed_ = m_->tree_.end();
  return it;
}

// ------------------------------------------------------------ operations

void ExtentMap::Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const {
  if (n == 0) return;
  uint64_t end = a + n;
  auto clip = [&](uint64_t lba, uint64_t phys, uint64_t len) {
    uint64_t s = std::max(a, lba);
    uint64_t e = std::min(end, lba + len);
    out->push_back({s, phys + (s - lba), e - s});
  };
  if (!wide_) {
    for (auto it = tree_.FirstEndingAfter(a); it != tree_.end(); ++it) {
      Run r = *it;
      if (r.lba >= end) break;
      clip(r.lba, r.phys, r.len);
    }
    return;
  }
  auto it = wide_map_.upper_bound(a);
  if (it != wide_map_.begin()) {
    auto p = std::prev(it);
    if (p->first + p->second.len > a) it = p;
  }
  for (; it != wide_map_.end() && it->first < end; ++it) clip(it->first, it->second.phys, it->second.len);
}

uint64_t ExtentMap::Find(uint64_t a) const {
  if (!wide_) {
    Run r;
    return tree_.Covering(a, &r) ? r.phys + (a - r.lba) : kUnmapped;
  }
  auto it = wide_map_.upper_bound(a);
  if (it == wide_map_.begin()) return kUnmapped;
  --it;
  if (it->first + it->second.len <= a) return kUnmapped;
  return it->second.phys + (a - it->first);
}

void ExtentMap::Remove(uint64_t a, uint64_t n, std::vector<Run>* removed) {
  if (n == 0) return;
  uint64_t end = a + n;
  if (!wide_) {
    std::vector<Run> scratch;
    std::vector<Run>* out = removed ? removed : &scratch;
    const size_t from = out->size();
    tree_.SplitAt(a);
    tree_.SplitAt(end);
    tree_.EraseStarting(a, end, out);
    for (size_t k = from; k < out->size(); k++) mapped_ -= (*out)[k].len;
    return;
  }
  WideSplitAt(a);
  WideSplitAt(end);
  auto it = wide_map_.lower_bound(a);
  while (it != wide_map_.end() && it->first < end) {
    if (removed) removed->push_back({it->first, it->second.phys, it->second.len});
    mapped_ -= it->second.len;
    it = wide_map_.erase(it);
  }
}

void ExtentMap::Insert(uint64_t lba, uint64_t phys, uint64_t len) {
  if (len == 0) return;
  mapped_ += len;
  if (!wide_) {
    if (tree_.Insert(lba, phys, len)) return;
    GoWide();
  }
  WideInsert(lba, phys, len);
}

void ExtentMap::Clear() {
  tree_.Clear();
  wide_map_.clear();
  wide_ = false;
  mapped_ = 0;
}

// ------------------------------------------------------------ the std::map form

void ExtentMap::GoWide() {
  for (Run r : tree_) wide_map_.emplace_hint(wide_map_.end(), r.lba, Extent{r.phys, r.len});
  tree_.Clear();
  wide_ = true;
}

void ExtentMap::WideSplitAt(uint64_t a) {
  auto it = wide_map_.upper_bound(a);
  if (it == wide_map_.begin()) return;
  --it;
  uint64_t start = it->first;
  Extent e = it->second;
  if (start == a || start + e.len <= a) return;
  it->second.len = a - start;
  wide_map_.emplace_hint(std::next(it), a, Extent{e.phys + (a - start), start + e.len - a});
}

void ExtentMap::WideInsert(uint64_t lba, uint64_t phys, uint64_t len) {
  auto next = wide_map_.lower_bound(lba);
  if (next != wide_map_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.len == lba && prev->second.phys + prev->second.len == phys) {
      prev->second.len += len;
      if (next != wide_map_.end() && next->first == lba + len && next->second.phys == phys + len) {
        prev->second.len += next->second.len;
        wide_map_.erase(next);
      }
      return;
    }
  }
  if (next != wide_map_.end() && next->first == lba + len && next->second.phys == phys + len) {
    Extent e{phys, len + next->second.len};
    auto hint = wide_map_.erase(next);
    wide_map_.emplace_hint(hint, lba, e);
    return;
  }
  wide_map_.emplace_hint(next, lba, Extent{phys, len});
}

}  // namespace cowstore::store
