// SPDX-License-Identifier: Apache-2.0
// A value per range of grains, kept as disjoint ranges: what GrainSpace
// (grain_space.h) knows of the few grains that are in neither FreeSpace nor
// SharedRefs: the reserved ones (value: references so far, 0 or 1) and the
// unshared-but-not-yet-durably marks (value: the ticket). Both sets are
// short-lived (operations in flight, records not yet durable), so a std::map
// of ranges is enough; nothing here is per grain.
//
// Touching ranges with equal values merge, so the set stays as small as the
// ranges it describes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>

namespace cowstore::store {

class RangeValues {
 public:
  // Gives every grain of [start, start+len) the value v (replacing any).
  void Assign(uint64_t start, uint64_t len, uint64_t v) {
    if (len == 0) return;
    Erase(start, len);
    auto next = m_.lower_bound(start);
    if (next != m_.begin()) {
      auto prev = std::prev(next);
      if (prev->second.end == start && prev->second.value == v) {
        prev->second.end = start + len;
        if (next != m_.end() && next->first == start + len && next->second.value == v) {
          prev->second.end = next->second.end;
          m_.erase(next);
        }
        return;
      }
    }
    if (next != m_.end() && next->first == start + len && next->second.value == v) {
      const uint64_t end = next->second.end;
      auto hint = m_.erase(next);
      m_.emplace_hint(hint, start, Piece{end, v});
      return;
    }
    m_.emplace_hint(next, start, Piece{start + len, v});
  }

  // Forgets [start, start+len), splitting the ranges at its edges.
  void Erase(uint64_t start, uint64_t len) {
    if (len == 0) return;
    const uint64_t end = start + len;
    auto it = m_.lower_bound(start);
    if (it != m_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > start) {
        const Piece p = prev->second;
        prev->second.end = start;
        if (p.end > end) {
          m_.emplace_hint(it, end, Piece{p.end, p.value});
          return;
        }
      }
    }
    while (it != m_.end() && it->first < end) {
      if (it->second.end > end) {
        const Piece p = it->second;
        it = m_.erase(it);
        m_.emplace_hint(it, end, p);
        return;
      }
      it = m_.erase(it);
    }
  }

  // Calls f(start, len, value) for the pieces of [start, start+len) that
  // have a value, clipped to it, in order.
  template <typename F>
  void Visit(uint64_t start, uint64_t len, F f) const {
    const uint64_t end = start + len;
    auto it = m_.upper_bound(start);
    if (it != m_.begin() && std::prev(it)->second.end > start) --it;
    for (; it != m_.end() && it->first < end; ++it) {
      const uint64_t s = std::max(start, it->first), e = std::min(end, it->second.end);
      f(s, e - s, it->second.value);
    }
  }

  // The value of grain g, if it has one.
  bool Find(uint64_t g, uint64_t* v) const {
    auto it = m_.upper_bound(g);
    if (it == m_.begin() || std::prev(it)->second.end <= g) return false;
    *v = std::prev(it)->second.value;
    return true;
  }

  // Forgets every range whose value satisfies pred.
  template <typename P>
  void EraseIf(P pred) {
    for (auto it = m_.begin(); it != m_.end();) it = pred(it->second.value) ? m_.erase(it) : std::next(it);
  }

  // Grains with a value.
  uint64_t grains() const {
    uint64_t n = 0;
    for (const auto& [s, p] : m_) n += p.end - s;
    return n;
  }
  size_t ranges() const { return m_.size(); }
  bool empty() const { return m_.empty(); }
  void Clear() { m_.clear(); }

 private:
  struct Piece {
    uint64_t end;
    uint64_t value;
  };
  std::map<uint64_t, Piece> m_;  // start -> [start, end) has value
};

}  // namespace cowstore::store
