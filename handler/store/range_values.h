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
#include <cassert>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>

namespace cowstore::store {

class RangeValues {
 private:
  struct Piece {
    uint64_t end;
    uint64_t value;
  };
  using Pieces = std::map<uint64_t, Piece>;  // start -> [start, end) has value

 public:
  // Nodes allocated ahead (std::bad_alloc here, before anything changes), so
  // that the calls given them never allocate: a caller that changes several
  // ranges in one step makes them all-or-nothing this way. Assign takes at
  // most kAssignNodes, Erase at most kEraseNodes.
  static constexpr size_t kAssignNodes = 2, kEraseNodes = 1;
  class Spare {
   public:
    explicit Spare(size_t nodes) {
      for (size_t i = 0; i < nodes; i++) nodes_.emplace_hint(nodes_.end(), i, Piece{0, 0});
    }

   private:
    friend class RangeValues;
    Pieces nodes_;
  };

  // Gives every grain of [start, start+len) the value v (replacing any).
  // Both are all-or-nothing under std::bad_alloc.
  void Assign(uint64_t start, uint64_t len, uint64_t v) {
    Spare spare(kAssignNodes);
    Assign(start, len, v, &spare);
  }
  // Forgets [start, start+len), splitting the ranges at its edges.
  void Erase(uint64_t start, uint64_t len) {
    Spare spare(kEraseNodes);
    Erase(start, len, &spare);
  }
  // The same with nodes from `spare`: never throws. REQUIRES: it holds
  // kAssignNodes (kEraseNodes) more than the calls before took.
  void Assign(uint64_t start, uint64_t len, uint64_t v, Spare* spare) {
    if (len == 0) return;
    Erase(start, len, spare);
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
      Put(hint, start, Piece{end, v}, spare);
      return;
    }
    Put(next, start, Piece{start + len, v}, spare);
  }
  void Erase(uint64_t start, uint64_t len, Spare* spare) {
    if (len == 0) return;
    const uint64_t end = start + len;
    auto it = m_.lower_bound(start);
    if (it != m_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > start) {
        const Piece p = prev->second;
        prev->second.end = start;
        if (p.end > end) {
          Put(it, end, Piece{p.end, p.value}, spare);
          return;
        }
      }
    }
    while (it != m_.end() && it->first < end) {
      if (it->second.end > end) {
        const Piece p = it->second;
        it = m_.erase(it);
        Put(it, end, p, spare);
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
  // Inserts (start, p) before `hint` with a node of `spare`: no allocation.
  void Put(Pieces::iterator hint, uint64_t start, const Piece& p, Spare* spare) {
    assert(!spare->nodes_.empty());
    auto node = spare->nodes_.extract(spare->nodes_.begin());
    node.key() = start;
    node.mapped() = p;
    m_.insert(hint, std::move(node));
  }

  Pieces m_;
};

}  // namespace cowstore::store
