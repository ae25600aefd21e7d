// SPDX-License-Identifier: Apache-2.0
#include "handler/store/run_tree.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <utility>

namespace cowstore::store {

// A leaf's runs follow its header in the same allocation: cap of them, 255
// (4 KiB) except in a tree's only leaf, which starts at kFirstLeafRuns and
// doubles, so that a map of a few runs costs a few dozen bytes, not 4 KiB.
struct RunTree::Leaf {
  uint32_t count;
  uint32_t cap;
  Packed* e() { return reinterpret_cast<Packed*>(this + 1); }
  const Packed* e() const { return reinterpret_cast<const Packed*>(this + 1); }
};

RunTree::Leaf* RunTree::NewLeaf(uint32_t cap) {
  Leaf* l = new (::operator new(sizeof(Leaf) + cap * sizeof(Packed))) Leaf;
  l->count = 0;
  l->cap = cap;
  return l;
}

void RunTree::FreeLeaf(Leaf* l) { ::operator delete(l); }

RunTree::Leaf* RunTree::CopyLeaf(const Leaf* o, uint32_t cap) {
  Leaf* l = NewLeaf(cap);
  std::memcpy(l->e(), o->e(), o->count * sizeof(Packed));
  l->count = o->count;
  return l;
}


// ------------------------------------------------------------ packing

RunTree::Packed RunTree::Pack(uint64_t lba, uint64_t phys, uint64_t len) {
  const uint64_t l = len - 1;
  return {lba | (l & 0xffff) << 48, phys | (l >> 16) << 48};
}

Run RunTree::Unpack(const Packed& p) {
  return {p.lo & (kMaxKey - 1), p.hi & (kMaxKey - 1), ((p.lo >> 48) | (p.hi >> 48) << 16) + 1};
}

// ------------------------------------------------------------ copy and move

RunTree::RunTree(const RunTree& o) : size_(o.size_) {
  index_.reserve(o.index_.size());
  for (const Slot& s : o.index_) index_.push_back({s.first, CopyLeaf(s.leaf, s.leaf->cap)});
}

RunTree& RunTree::operator=(const RunTree& o) {
  if (this != &o) {
    RunTree t(o);
    *this = std::move(t);
  }
  return *this;
}

RunTree::RunTree(RunTree&& o) noexcept : index_(std::move(o.index_)), size_(o.size_) {
  o.index_.clear();
  o.size_ = 0;
}

RunTree& RunTree::operator=(RunTree&& o) noexcept {
  if (this != &o) {
    Clear();
    index_ = std::move(o.index_);
    size_ = o.size_;
    o.index_.clear();
    o.size_ = 0;
  }
  return *this;
}

void RunTree::Clear() {
  for (Slot& s : index_) FreeLeaf(s.leaf);
  index_.clear();
  index_.shrink_to_fit();
  size_ = 0;
}

// ------------------------------------------------------------ search

uint32_t RunTree::LowerBoundIn(const Leaf* l, uint64_t a) {
  const Packed* p = std::partition_point(l->e(), l->e() + l->count, [a](const Packed& x) { return Key(x) < a; });
  return static_cast<uint32_t>(p - l->e());
}

uint32_t RunTree::UpperBoundIn(const Leaf* l, uint64_t a) {
  const Packed* p = std::partition_point(l->e(), l->e() + l->count, [a](const Packed& x) { return Key(x) <= a; });
  return static_cast<uint32_t>(p - l->e());
}

size_t RunTree::LeafFor(uint64_t a) const {
  auto it = std::partition_point(index_.begin(), index_.end(), [a](const Slot& s) { return s.first <= a; });
  return it == index_.begin() ? 0 : static_cast<size_t>(it - index_.begin()) - 1;
}

Run RunTree::At(size_t leaf, uint32_t i) const { return Unpack(index_[leaf].leaf->e()[i]); }

void RunTree::Set(size_t leaf, uint32_t i, const Run& r) {
  index_[leaf].leaf->e()[i] = Pack(r.lba, r.phys, r.len);
  if (i == 0) index_[leaf].first = r.lba;
}

bool RunTree::Covering(uint64_t a, Run* out) const {
  if (index_.empty() || a < index_[0].first) return false;
  size_t li = LeafFor(a);
  uint32_t j = UpperBoundIn(index_[li].leaf, a);  // >= 1: the leaf's first run starts <= a
  Run r = At(li, j - 1);
  if (a - r.lba >= r.len) return false;
  *out = r;
  return true;
}

RunTree::const_iterator RunTree::lower_bound(uint64_t a) const {
  if (index_.empty()) return end();
  size_t li = LeafFor(a);
  uint32_t j = LowerBoundIn(index_[li].leaf, a);
  if (j == index_[li].leaf->count) return {this, li + 1, 0};
  return {this, li, j};
}

RunTree::const_iterator RunTree::FirstEndingAfter(uint64_t a) const {
  if (index_.empty() || a < index_[0].first) return begin();
  size_t li = LeafFor(a);
  const Leaf* l = index_[li].leaf;
  uint32_t j = UpperBoundIn(l, a);
  Run r = At(li, j - 1);
  if (a - r.lba < r.len) return {this, li, j - 1};
  if (j == l->count) return {this, li + 1, 0};
  return {this, li, j};
}

Run RunTree::const_iterator::operator*() const { return t_->At(leaf_, i_); }

RunTree::const_iterator& RunTree::const_iterator::operator++() {
  if (++i_ == t_->index_[leaf_].leaf->count) {
    leaf_++;
    i_ = 0;
  }
  return *this;
}

// ------------------------------------------------------------ insertion

bool RunTree::Insert(uint64_t lba, uint64_t phys, uint64_t len) {
  if (len == 0) return true;
  if (!Fits(lba, phys, len)) return false;
  if (index_.empty()) {
    index_.push_back({lba, NewLeaf(kFirstLeafRuns)});
    Set(0, 0, {lba, phys, len});
    index_[0].leaf->count = 1;
    size_ = 1;
    return true;
  }
  // The run before lba (if any) and the one after it. The leaf found starts
  // at or before lba unless lba precedes every run (then j == 0, no prev).
  size_t li = LeafFor(lba);
  uint32_t j = LowerBoundIn(index_[li].leaf, lba);  // insertion point in leaf li
  const bool has_prev = j > 0;
  const size_t pl = li;
  const uint32_t pi = j > 0 ? j - 1 : 0;
  size_t nl = li;
  uint32_t ni = j;
  if (ni == index_[li].leaf->count) {
    nl = li + 1;
    ni = 0;
  }
  const bool has_next = nl < index_.size();
  Run prev = has_prev ? At(pl, pi) : Run{};
  Run next = has_next ? At(nl, ni) : Run{};
  bool join_prev = has_prev && prev.lba + prev.len == lba && prev.phys + prev.len == phys;
  bool join_next = has_next && next.lba == lba + len && next.phys == phys + len;
  if (join_prev) {
    uint64_t total = prev.len + len + (join_next ? next.len : 0);
    if (total > kMaxLen) return false;
    prev.len = total;
    Set(pl, pi, prev);
    if (join_next) EraseIn(nl, ni, 1);
    return true;
  }
  if (join_next) {
    if (len + next.len > kMaxLen) return false;
    // Same position in key order: the run just starts earlier.
    Set(nl, ni, {lba, phys, len + next.len});
    return true;
  }
  InsertAt(li, j, {lba, phys, len});
  return true;
}

void RunTree::SplitAt(uint64_t a) {
  Run r;
  if (!Covering(a, &r) || r.lba == a) return;
  size_t li = LeafFor(a);
  uint32_t j = UpperBoundIn(index_[li].leaf, a);
  Set(li, j - 1, {r.lba, r.phys, a - r.lba});
  InsertAt(li, j, {a, r.phys + (a - r.lba), r.lba + r.len - a});
}

void RunTree::InsertAt(size_t li, uint32_t i, const Run& r) {
  while (index_[li].leaf->count == index_[li].leaf->cap) {
    MakeRoom(li, r.lba);
    li = LeafFor(r.lba);
    i = LowerBoundIn(index_[li].leaf, r.lba);
  }
  Leaf* l = index_[li].leaf;
  std::memmove(l->e() + i + 1, l->e() + i, (l->count - i) * sizeof(Packed));
  l->count++;
  Set(li, i, r);
  size_++;
}

void RunTree::MakeRoom(size_t li, uint64_t a) {
  Leaf* l = index_[li].leaf;
  const size_t n = index_.size();
  // The only leaf grows before anything splits.
  if (n == 1 && l->cap < kLeafRuns) {
    index_[0].leaf = CopyLeaf(l, std::min(2 * l->cap, kLeafRuns));
    FreeLeaf(l);
    return;
  }
  // Appending past the last run: a new last leaf, this one stays full.
  if (li + 1 == n && a > Key(l->e()[l->count - 1])) {
    Leaf* nl = NewLeaf(kLeafRuns);
    index_.push_back({a, nl});
    return;
  }
  // Lend runs to a neighbour with room for at least two (so that after the
  // move both sides have room, wherever the new run goes).
  if (li > 0 && index_[li - 1].leaf->count + 2 <= kLeafRuns) {
    Leaf* left = index_[li - 1].leaf;
    uint32_t m = (kLeafRuns - left->count) / 2;
    std::memcpy(left->e() + left->count, l->e(), m * sizeof(Packed));
    left->count += m;
    std::memmove(l->e(), l->e() + m, (l->count - m) * sizeof(Packed));
    l->count -= m;
    index_[li].first = Key(l->e()[0]);
    return;
  }
  if (li + 1 < n && index_[li + 1].leaf->count + 2 <= kLeafRuns) {
    Leaf* right = index_[li + 1].leaf;
    uint32_t m = (kLeafRuns - right->count) / 2;
    std::memmove(right->e() + m, right->e(), right->count * sizeof(Packed));
    std::memcpy(right->e(), l->e() + l->count - m, m * sizeof(Packed));
    right->count += m;
    l->count -= m;
    index_[li + 1].first = Key(right->e()[0]);
    return;
  }
  if (n == 1) {  // the only leaf: halve it
    Leaf* nl = NewLeaf(kLeafRuns);
    uint32_t keep = l->count / 2;
    nl->count = l->count - keep;
    std::memcpy(nl->e(), l->e() + keep, nl->count * sizeof(Packed));
    l->count = keep;
    index_.insert(index_.begin() + 1, Slot{Key(nl->e()[0]), nl});
    return;
  }
  // This leaf and a full neighbour become three leaves of 2/3 each.
  const size_t a0 = li + 1 < n ? li : li - 1;
  Leaf* x = index_[a0].leaf;
  Leaf* y = index_[a0 + 1].leaf;
  Packed all[2 * kLeafRuns];
  const uint32_t t = x->count + y->count;
  std::memcpy(all, x->e(), x->count * sizeof(Packed));
  std::memcpy(all + x->count, y->e(), y->count * sizeof(Packed));
  const uint32_t s0 = t / 3, s1 = t / 3, s2 = t - s0 - s1;
  Leaf* z = NewLeaf(kLeafRuns);
  x->count = s0;
  std::memcpy(x->e(), all, s0 * sizeof(Packed));
  y->count = s1;
  std::memcpy(y->e(), all + s0, s1 * sizeof(Packed));
  z->count = s2;
  std::memcpy(z->e(), all + s0 + s1, s2 * sizeof(Packed));
  index_[a0 + 1].first = Key(y->e()[0]);
  index_.insert(index_.begin() + static_cast<std::ptrdiff_t>(a0 + 2), Slot{Key(z->e()[0]), z});
}

// ------------------------------------------------------------ erasure

void RunTree::EraseIn(size_t li, uint32_t i, uint32_t n) {
  Leaf* l = index_[li].leaf;
  std::memmove(l->e() + i, l->e() + i + n, (l->count - i - n) * sizeof(Packed));
  l->count -= n;
  size_ -= n;
  if (l->count == 0) {
    FreeLeaf(l);
    index_.erase(index_.begin() + static_cast<std::ptrdiff_t>(li));
    return;
  }
  if (i == 0) index_[li].first = Key(l->e()[0]);
  if (l->count < kMinLeafRuns) Rebalance(li);
}

void RunTree::Rebalance(size_t li) {
  if (index_.size() < 2) return;
  const size_t a0 = li > 0 ? li - 1 : li;  // the pair (a0, a0 + 1)
  Leaf* x = index_[a0].leaf;
  Leaf* y = index_[a0 + 1].leaf;
  if (x->count + y->count <= kLeafRuns) {
    std::memcpy(x->e() + x->count, y->e(), y->count * sizeof(Packed));
    x->count += y->count;
    FreeLeaf(y);
    index_.erase(index_.begin() + static_cast<std::ptrdiff_t>(a0 + 1));
    return;
  }
  const uint32_t t = x->count + y->count, want = t / 2;
  if (x->count < want) {  // move y's first runs to x's end
    uint32_t m = want - x->count;
    std::memcpy(x->e() + x->count, y->e(), m * sizeof(Packed));
    std::memmove(y->e(), y->e() + m, (y->count - m) * sizeof(Packed));
    x->count += m;
    y->count -= m;
  } else {  // move x's last runs to y's front
    uint32_t m = x->count - want;
    std::memmove(y->e() + m, y->e(), y->count * sizeof(Packed));
    std::memcpy(y->e(), x->e() + want, m * sizeof(Packed));
    x->count -= m;
    y->count += m;
  }
  index_[a0 + 1].first = Key(y->e()[0]);
}

void RunTree::EraseStarting(uint64_t a, uint64_t end, std::vector<Run>* removed) {
  while (!index_.empty() && a < end) {
    const_iterator it = lower_bound(a);
    if (it == this->end()) return;
    const size_t li = it.leaf_;
    const Leaf* l = index_[li].leaf;
    uint32_t k = it.i_;
    for (; k < l->count && Key(l->e()[k]) < end; k++)
      if (removed) removed->push_back(Unpack(l->e()[k]));
    if (k == it.i_) return;
    const bool to_leaf_end = k == l->count;
    EraseIn(li, it.i_, k - it.i_);
    if (!to_leaf_end) return;
  }
}

// ------------------------------------------------------------ bulk load

void RunTree::BulkLoad(const std::vector<Run>& runs) {
  Clear();
  constexpr uint32_t kFill = kLeafRuns * 9 / 10;
  const size_t n = runs.size();
  if (n == 0) return;
  size_t leaves = (n + kFill - 1) / kFill;
  index_.reserve(leaves);
  // Spread evenly: every leaf gets ~90 %, none below 1/3.
  size_t done = 0;
  for (size_t k = 0; k < leaves; k++) {
    size_t take = (n - done) / (leaves - k);
    Leaf* l = NewLeaf(leaves == 1 ? std::max<uint32_t>(kFirstLeafRuns, static_cast<uint32_t>(take)) : kLeafRuns);
    for (size_t i = 0; i < take; i++) {
      const Run& r = runs[done + i];
      l->e()[i] = Pack(r.lba, r.phys, r.len);
    }
    l->count = static_cast<uint32_t>(take);
    index_.push_back({runs[done].lba, l});
    done += take;
  }
  size_ = n;
}

// ------------------------------------------------------------ checks

size_t RunTree::MemoryBytes() const {
  size_t b = index_.capacity() * sizeof(Slot);
  for (const Slot& s : index_) b += sizeof(Leaf) + s.leaf->cap * sizeof(Packed);
  return b;
}

std::string RunTree::Check() const {
  size_t count = 0;
  bool any = false;
  uint64_t prev_end = 0;
  for (size_t li = 0; li < index_.size(); li++) {
    const Leaf* l = index_[li].leaf;
    std::string at = "leaf " + std::to_string(li) + ": ";
    if (l->count == 0 || l->count > l->cap) return at + "count " + std::to_string(l->count);
    if (l->cap > kLeafRuns || (index_.size() > 1 && l->cap != kLeafRuns)) return at + "capacity " + std::to_string(l->cap);
    if (index_.size() > 1 && li + 1 < index_.size() && l->count < kMinLeafRuns)
      return at + "underfull (" + std::to_string(l->count) + ")";
    if (index_[li].first != Key(l->e()[0])) return at + "index key is not its first run";
    for (uint32_t i = 0; i < l->count; i++) {
      Run r = Unpack(l->e()[i]);
      if (r.len == 0 || !Fits(r.lba, r.phys, r.len)) return at + "bad run";
      if (any && r.lba < prev_end) return at + "runs overlap or out of order";
      any = true;
      prev_end = r.lba + r.len;
    }
    count += l->count;
  }
  if (count != size_) return "size " + std::to_string(size_) + " but " + std::to_string(count) + " runs";
  return {};
}

}  // namespace cowstore::store
