// SPDX-License-Identifier: Apache-2.0
#include "handler/store/run_tree.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>
#include <utility>

namespace cowstore::store {

// A leaf's runs follow its header in the same allocation: cap of them, 255
// (4 KiB) except in a tree's only leaf, which starts at kFirstLeafRuns and
// doubles, so that a map of a few runs costs a few dozen bytes, not 4 KiB.
struct RunTree::Leaf {
  uint32_t count;
  uint16_t cap;
  uint16_t counted;  // the tree's kind, for iterators (RunKind::kCounted)
  Leaf* next;  // in key order; null for the last leaf
  Packed* e() { return reinterpret_cast<Packed*>(this + 1); }
  const Packed* e() const { return reinterpret_cast<const Packed*>(this + 1); }
};

// An inner node's keys (first lba of each child's subtree), then its
// children, follow its header: cap of each (the tree's fan-out).
struct RunTree::Inner {
  uint32_t count;
  uint32_t cap;
  uint64_t* keys() { return reinterpret_cast<uint64_t*>(this + 1); }
  const uint64_t* keys() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  void** child() { return reinterpret_cast<void**>(keys() + cap); }
  void* const* child() const { return reinterpret_cast<void* const*>(keys() + cap); }
};

// A root-to-leaf walk: node[d] is the inner node at depth d (0 = root) and
// idx[d] the child taken there. Any change to the tree's shape invalidates it.
struct RunTree::Path {
  static constexpr int kMaxDepth = 64;  // fan-out >= 2 a level: 2^64 leaves
  Inner* node[kMaxDepth];
  uint32_t idx[kMaxDepth];
  int depth = 0;  // == height_
  Leaf* leaf = nullptr;
};

// Test-only failure injection (FailAllocationForTest): allocations left
// before the one that throws, or < 0 for none.
static thread_local int64_t fail_countdown = -1;

int64_t RunTree::FailAllocationForTest(int64_t n) {
  const int64_t left = fail_countdown;
  fail_countdown = n;
  return left;
}

void* RunTree::AllocNode(size_t bytes) {
  if (fail_countdown >= 0 && fail_countdown-- == 0) throw std::bad_alloc();
  return ::operator new(bytes);
}

// Inner nodes allocated before a change that may need them, so that the
// change itself cannot fail halfway; any left over are freed.
class RunTree::Spare {
 public:
  Spare(const RunTree& t, uint32_t n) {
    try {
      for (; count_ < n; count_++) nodes_[count_] = t.NewInner();
    } catch (...) {  // no destructor runs for a constructor that throws
      while (count_ > 0) FreeInner(nodes_[--count_]);
      throw;
    }
  }
  ~Spare() {
    while (count_ > 0) FreeInner(nodes_[--count_]);
  }
  Spare(const Spare&) = delete;
  Spare& operator=(const Spare&) = delete;
  Inner* Take() {
    assert(count_ > 0);
    return nodes_[--count_];
  }

 private:
  Inner* nodes_[Path::kMaxDepth + 1];
  uint32_t count_ = 0;
};

RunTree::Leaf* RunTree::NewLeaf(uint32_t cap) const {
  static_assert(sizeof(Leaf) == 16 && sizeof(Leaf) + kLeafRuns * sizeof(Packed) == kLeafBytes);
  Leaf* l = new (AllocNode(sizeof(Leaf) + cap * sizeof(Packed))) Leaf;
  l->count = 0;
  l->cap = static_cast<uint16_t>(cap);
  l->counted = counted_;
  l->next = nullptr;
  return l;
}

void RunTree::FreeLeaf(Leaf* l) { ::operator delete(l); }

RunTree::Leaf* RunTree::CopyLeaf(const Leaf* o, uint32_t cap) {
  Leaf* l = new (AllocNode(sizeof(Leaf) + cap * sizeof(Packed))) Leaf;
  l->cap = static_cast<uint16_t>(cap);
  l->counted = o->counted;
  l->next = nullptr;
  std::memcpy(l->e(), o->e(), o->count * sizeof(Packed));
  l->count = o->count;
  return l;
}

RunTree::Inner* RunTree::NewInner() const {
  static_assert(sizeof(Inner) + kInnerFanout * 16 <= kLeafBytes);
  Inner* n = new (AllocNode(sizeof(Inner) + fan_ * (sizeof(uint64_t) + sizeof(void*)))) Inner;
  n->count = 0;
  n->cap = fan_;
  return n;
}

void RunTree::FreeInner(Inner* n) { ::operator delete(n); }

// ------------------------------------------------------------ packing

// kMapping: lo = lba | (len-1) bits 0-15 << 48, hi = phys | (len-1) bits 16-31 << 48.
// kCounted: lo = key | (len-1) bits 0-15 << 48, hi = (len-1) bits 16-47 | value << 32.
RunTree::Packed RunTree::Pack(uint64_t lba, uint64_t phys, uint64_t len) const {
  const uint64_t l = len - 1;
  if (counted_) return {lba | (l & 0xffff) << 48, (l >> 16) | phys << 32};
  return {lba | (l & 0xffff) << 48, phys | (l >> 16) << 48};
}

Run RunTree::Unpack(const Packed& p, bool counted) {
  if (counted) return {p.lo & (kMaxKey - 1), p.hi >> 32, ((p.lo >> 48) | (p.hi & 0xffffffff) << 16) + 1};
  return {p.lo & (kMaxKey - 1), p.hi & (kMaxKey - 1), ((p.lo >> 48) | (p.hi >> 48) << 16) + 1};
}

// ------------------------------------------------------------ copy and move

RunTree::RunTree(uint32_t inner_fanout)
    : fan_(std::clamp(inner_fanout, kMinInnerFanout, kInnerFanout)) {}

RunTree::RunTree(RunKind kind, uint32_t inner_fanout)
    : fan_(std::clamp(inner_fanout, kMinInnerFanout, kInnerFanout)), counted_(kind == RunKind::kCounted) {}

void* RunTree::CopySubtree(const void* node, uint32_t height, Leaf** prev_leaf) {
  if (height == 0) {
    const Leaf* o = static_cast<const Leaf*>(node);
    Leaf* l = CopyLeaf(o, o->cap);
    if (*prev_leaf)
      (*prev_leaf)->next = l;
    else
      first_ = l;
    *prev_leaf = l;
    last_ = l;
    return l;
  }
  const Inner* o = static_cast<const Inner*>(node);
  Inner* n = NewInner();
  n->count = 0;
  std::memcpy(n->keys(), o->keys(), o->count * sizeof(uint64_t));
  try {
    for (; n->count < o->count; n->count++)
      n->child()[n->count] = CopySubtree(o->child()[n->count], height - 1, prev_leaf);
  } catch (...) {
    FreeSubtree(n, height);  // the children copied so far (their leaf links are dropped with them)
    throw;
  }
  return n;
}

RunTree::RunTree(const RunTree& o) : height_(o.height_), fan_(o.fan_), counted_(o.counted_), size_(o.size_) {
  Leaf* prev = nullptr;
  if (o.root_) root_ = CopySubtree(o.root_, o.height_, &prev);
}

RunTree& RunTree::operator=(const RunTree& o) {
  if (this != &o) {
    RunTree t(o);
    *this = std::move(t);
  }
  return *this;
}

RunTree::RunTree(RunTree&& o) noexcept
    : root_(o.root_), height_(o.height_), fan_(o.fan_), counted_(o.counted_), first_(o.first_), last_(o.last_),
      size_(o.size_) {
  o.root_ = nullptr;
  o.height_ = 0;
  o.first_ = o.last_ = nullptr;
  o.size_ = 0;
}

RunTree& RunTree::operator=(RunTree&& o) noexcept {
  if (this != &o) {
    Clear();
    root_ = o.root_;
    height_ = o.height_;
    fan_ = o.fan_;
    counted_ = o.counted_;
    first_ = o.first_;
    last_ = o.last_;
    size_ = o.size_;
    o.root_ = nullptr;
    o.height_ = 0;
    o.first_ = o.last_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void RunTree::FreeSubtree(void* node, uint32_t height) {
  if (height == 0) {
    FreeLeaf(static_cast<Leaf*>(node));
    return;
  }
  Inner* n = static_cast<Inner*>(node);
  for (uint32_t k = 0; k < n->count; k++) FreeSubtree(n->child()[k], height - 1);
  FreeInner(n);
}

void RunTree::Clear() {
  if (root_) FreeSubtree(root_, height_);
  root_ = nullptr;
  height_ = 0;
  first_ = last_ = nullptr;
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

// The child of n a key belongs in.
static inline uint32_t ChildFor(const uint64_t* keys, uint32_t count, uint64_t a) {
  const uint64_t* k = std::partition_point(keys + 1, keys + count, [a](uint64_t x) { return x <= a; });
  return static_cast<uint32_t>(k - keys) - 1;
}

void RunTree::Descend(uint64_t a, Path* p) const {
  void* node = root_;
  p->depth = static_cast<int>(height_);
  for (int d = 0; d < p->depth; d++) {
    Inner* n = static_cast<Inner*>(node);
    uint32_t k = ChildFor(n->keys(), n->count, a);
    p->node[d] = n;
    p->idx[d] = k;
    node = n->child()[k];
  }
  p->leaf = static_cast<Leaf*>(node);
}

const RunTree::Leaf* RunTree::LeafFor(uint64_t a) const {
  const void* node = root_;
  for (uint32_t d = 0; d < height_; d++) {
    const Inner* n = static_cast<const Inner*>(node);
    node = n->child()[ChildFor(n->keys(), n->count, a)];
  }
  return static_cast<const Leaf*>(node);
}

RunTree::Leaf* RunTree::PrevLeaf(const Path& p) const {
  int d = p.depth - 1;
  while (d >= 0 && p.idx[d] == 0) d--;
  if (d < 0) return nullptr;
  void* node = p.node[d]->child()[p.idx[d] - 1];
  for (int e = d + 1; e < p.depth; e++) {
    Inner* n = static_cast<Inner*>(node);
    node = n->child()[n->count - 1];
  }
  return static_cast<Leaf*>(node);
}

bool RunTree::Covering(uint64_t a, Run* out) const {
  if (!root_) return false;
  const Leaf* l = LeafFor(a);
  uint32_t j = UpperBoundIn(l, a);
  if (j == 0) return false;  // a precedes every run
  Run r = Unpack(l->e()[j - 1], counted_);
  if (a - r.lba >= r.len) return false;
  *out = r;
  return true;
}

bool RunTree::Floor(uint64_t a, Run* out) const {
  if (!root_) return false;
  const Leaf* l = LeafFor(a);  // later leaves start after a
  uint32_t j = UpperBoundIn(l, a);
  if (j == 0) return false;  // a precedes every run
  *out = Unpack(l->e()[j - 1], counted_);
  return true;
}

RunTree::const_iterator RunTree::lower_bound(uint64_t a) const {
  if (!root_) return end();
  const Leaf* l = LeafFor(a);
  uint32_t j = LowerBoundIn(l, a);
  if (j == l->count) return {l->next, 0};
  return {l, j};
}

RunTree::const_iterator RunTree::FirstEndingAfter(uint64_t a) const {
  if (!root_) return end();
  const Leaf* l = LeafFor(a);
  uint32_t j = UpperBoundIn(l, a);
  if (j == 0) return begin();  // a precedes every run
  Run r = Unpack(l->e()[j - 1], counted_);
  if (a - r.lba < r.len) return {l, j - 1};
  if (j == l->count) return {l->next, 0};
  return {l, j};
}

Run RunTree::const_iterator::operator*() const { return Unpack(leaf_->e()[i_], leaf_->counted); }

RunTree::const_iterator& RunTree::const_iterator::operator++() {
  if (++i_ == leaf_->count) {
    leaf_ = leaf_->next;
    i_ = 0;
  }
  return *this;
}

// ------------------------------------------------------------ keys

void RunTree::FixKeys(const Path& p, int d, uint64_t key) {
  for (; d >= 0; d--) {
    p.node[d]->keys()[p.idx[d]] = key;
    if (p.idx[d] != 0) return;
  }
}

void RunTree::Set(Path& p, uint32_t i, const Run& r) {
  p.leaf->e()[i] = Pack(r.lba, r.phys, r.len);
  if (i == 0) FixKeys(p, p.depth - 1, r.lba);
}

// ------------------------------------------------------------ insertion

bool RunTree::Insert(uint64_t lba, uint64_t phys, uint64_t len) {
  if (len == 0) return true;
  if (!Accepts(lba, phys, len)) return false;
  if (!root_) {
    Leaf* l = NewLeaf(kFirstLeafRuns);
    l->e()[0] = Pack(lba, phys, len);
    l->count = 1;
    root_ = first_ = last_ = l;
    height_ = 0;
    size_ = 1;
    return true;
  }
  // The run before lba (if any) is in the leaf found: it starts at or before
  // lba unless lba precedes every run (then j == 0, no prev). The run after
  // it is there too or first in the next leaf.
  Path p;
  Descend(lba, &p);
  Leaf* l = p.leaf;
  const uint32_t j = LowerBoundIn(l, lba);  // insertion point
  const bool has_prev = j > 0;
  const Leaf* nl = j < l->count ? l : l->next;
  const uint32_t ni = j < l->count ? j : 0;
  const bool has_next = nl != nullptr;
  Run prev = has_prev ? Unpack(l->e()[j - 1], counted_) : Run{};
  Run next = has_next ? Unpack(nl->e()[ni], counted_) : Run{};
  const Run run{lba, phys, len};
  bool join_prev = has_prev && Continues(prev, run);
  bool join_next = has_next && Continues(run, next);
  // A merge past the longest run a packed run holds (kMapping: 2^32, only
  // above a 2^32 physical bound) is not made: the run stays apart from that
  // neighbour (with the previous one if both would not fit, else the next),
  // so a run that fits always inserts.
  if (join_prev && join_next && prev.len + len + next.len > MaxLen()) {
    if (prev.len + len <= MaxLen())
      join_next = false;
    else
      join_prev = false;
  }
  if (join_prev && prev.len + len > MaxLen()) join_prev = false;
  if (join_next && len + next.len > MaxLen()) join_next = false;
  if (join_prev) {
    prev.len += len + (join_next ? next.len : 0);
    Set(p, j - 1, prev);
    if (join_next) {
      if (nl != l) Descend(next.lba, &p);  // the next leaf: its first run
      EraseIn(p, ni, 1);
    }
    return true;
  }
  if (join_next) {
    // Same position in key order: the run just starts earlier.
    if (nl != l) Descend(next.lba, &p);
    Set(p, ni, {lba, phys, len + next.len});
    return true;
  }
  InsertAt(p, j, {lba, phys, len});
  return true;
}

void RunTree::SplitAt(uint64_t a) {
  if (!root_) return;
  Path p;
  Descend(a, &p);
  uint32_t j = UpperBoundIn(p.leaf, a);
  if (j == 0) return;
  Run r = Unpack(p.leaf->e()[j - 1], counted_);
  if (r.lba == a || a - r.lba >= r.len) return;
  // The tail goes in first: InsertAt may allocate (and throw, changing
  // nothing); the head is shortened after, which cannot fail. In between the
  // two overlap, unseen.
  InsertAt(p, j, {a, counted_ ? r.phys : r.phys + (a - r.lba), r.lba + r.len - a});
  Descend(r.lba, &p);
  Set(p, LowerBoundIn(p.leaf, r.lba), {r.lba, r.phys, a - r.lba});
}

void RunTree::InsertAt(Path& p, uint32_t i, const Run& r) {
  while (p.leaf->count == p.leaf->cap) {
    MakeRoom(p, r.lba);
    Descend(r.lba, &p);
    i = LowerBoundIn(p.leaf, r.lba);
  }
  Leaf* l = p.leaf;
  std::memmove(l->e() + i + 1, l->e() + i, (l->count - i) * sizeof(Packed));
  l->count++;
  Set(p, i, r);
  size_++;
}

void RunTree::NewRoot(void* left, uint64_t left_key, void* right, uint64_t right_key, Spare& spare) {
  Inner* n = spare.Take();
  n->count = 2;
  n->keys()[0] = left_key;
  n->keys()[1] = right_key;
  n->child()[0] = left;
  n->child()[1] = right;
  root_ = n;
  height_++;
}

void RunTree::InsertChild(Path& p, int d, uint32_t pos, uint64_t key, void* child, Spare& spare) {
  Inner* n = p.node[d];
  if (n->count < n->cap) {
    std::memmove(n->keys() + pos + 1, n->keys() + pos, (n->count - pos) * sizeof(uint64_t));
    std::memmove(n->child() + pos + 1, n->child() + pos, (n->count - pos) * sizeof(void*));
    n->keys()[pos] = key;
    n->child()[pos] = child;
    n->count++;
    return;
  }
  // Full: cap + 1 entries become two nodes of about half each.
  uint64_t keys[kInnerFanout + 1];
  void* kids[kInnerFanout + 1];
  const uint32_t t = n->count + 1;
  std::memcpy(keys, n->keys(), pos * sizeof(uint64_t));
  std::memcpy(kids, n->child(), pos * sizeof(void*));
  keys[pos] = key;
  kids[pos] = child;
  std::memcpy(keys + pos + 1, n->keys() + pos, (n->count - pos) * sizeof(uint64_t));
  std::memcpy(kids + pos + 1, n->child() + pos, (n->count - pos) * sizeof(void*));
  const uint32_t left = t / 2;
  Inner* r = spare.Take();
  n->count = left;
  std::memcpy(n->keys(), keys, left * sizeof(uint64_t));
  std::memcpy(n->child(), kids, left * sizeof(void*));
  r->count = t - left;
  std::memcpy(r->keys(), keys + left, r->count * sizeof(uint64_t));
  std::memcpy(r->child(), kids + left, r->count * sizeof(void*));
  if (d == 0)
    NewRoot(n, n->keys()[0], r, r->keys()[0], spare);
  else
    InsertChild(p, d - 1, p.idx[d - 1] + 1, r->keys()[0], r, spare);
}

uint32_t RunTree::InnerNodesToAdd(const Path& p, int d) const {
  uint32_t need = 0;
  for (; d >= 0; d--, need++)
    if (p.node[d]->count < p.node[d]->cap) return need;
  return need + 1;  // every level splits, the root too: a new root above it
}

void RunTree::MakeRoom(Path& p, uint64_t a) {
  Leaf* l = p.leaf;
  // The only leaf grows before anything splits.
  if (height_ == 0 && l->cap < kLeafRuns) {
    Leaf* g = CopyLeaf(l, std::min<uint32_t>(2 * l->cap, kLeafRuns));
    FreeLeaf(l);
    root_ = first_ = last_ = g;
    return;
  }
  // Lend runs to a sibling with room for at least two (so that after the
  // move both sides have room, wherever the new run goes). Not when
  // appending past the last run: that starts a new leaf (below).
  const bool append = l == last_ && a > Key(l->e()[l->count - 1]);
  if (height_ > 0 && !append) {
    Inner* parent = p.node[p.depth - 1];
    const uint32_t li = p.idx[p.depth - 1];
    if (li > 0 && static_cast<Leaf*>(parent->child()[li - 1])->count + 2 <= kLeafRuns) {
      Leaf* left = static_cast<Leaf*>(parent->child()[li - 1]);
      uint32_t m = (kLeafRuns - left->count) / 2;
      std::memcpy(left->e() + left->count, l->e(), m * sizeof(Packed));
      left->count += m;
      std::memmove(l->e(), l->e() + m, (l->count - m) * sizeof(Packed));
      l->count -= m;
      parent->keys()[li] = Key(l->e()[0]);
      return;
    }
    if (li + 1 < parent->count && static_cast<Leaf*>(parent->child()[li + 1])->count + 2 <= kLeafRuns) {
      Leaf* right = static_cast<Leaf*>(parent->child()[li + 1]);
      uint32_t m = (kLeafRuns - right->count) / 2;
      std::memmove(right->e() + m, right->e(), right->count * sizeof(Packed));
      std::memcpy(right->e(), l->e() + l->count - m, m * sizeof(Packed));
      right->count += m;
      l->count -= m;
      parent->keys()[li + 1] = Key(right->e()[0]);
      return;
    }
  }
  // Every way on adds one leaf. Allocate it, and the inner nodes the splits
  // above it take, before changing anything: a std::bad_alloc leaves the
  // tree as it was (the Spare frees what was made).
  Spare spare(*this, InnerNodesToAdd(p, p.depth - 1));
  Leaf* nl = NewLeaf(kLeafRuns);
  // From here on nothing allocates or throws.
  if (append) {  // a new last leaf, this one stays full
    l->next = nl;
    last_ = nl;
    if (height_ == 0)
      NewRoot(l, Key(l->e()[0]), nl, a, spare);
    else
      InsertChild(p, p.depth - 1, p.idx[p.depth - 1] + 1, a, nl, spare);
    return;
  }
  if (height_ == 0) {  // the only leaf: halve it
    uint32_t keep = l->count / 2;
    nl->count = l->count - keep;
    std::memcpy(nl->e(), l->e() + keep, nl->count * sizeof(Packed));
    l->count = keep;
    l->next = nl;
    last_ = nl;
    NewRoot(l, Key(l->e()[0]), nl, Key(nl->e()[0]), spare);
    return;
  }
  // This leaf and a full sibling become three leaves of 2/3 each.
  Inner* parent = p.node[p.depth - 1];
  const uint32_t li = p.idx[p.depth - 1];
  const uint32_t a0 = li + 1 < parent->count ? li : li - 1;
  Leaf* x = static_cast<Leaf*>(parent->child()[a0]);
  Leaf* y = static_cast<Leaf*>(parent->child()[a0 + 1]);
  Packed all[2 * kLeafRuns];
  const uint32_t t = x->count + y->count;
  std::memcpy(all, x->e(), x->count * sizeof(Packed));
  std::memcpy(all + x->count, y->e(), y->count * sizeof(Packed));
  const uint32_t s0 = t / 3, s1 = t / 3, s2 = t - s0 - s1;
  Leaf* z = nl;
  x->count = s0;
  std::memcpy(x->e(), all, s0 * sizeof(Packed));
  y->count = s1;
  std::memcpy(y->e(), all + s0, s1 * sizeof(Packed));
  z->count = s2;
  std::memcpy(z->e(), all + s0 + s1, s2 * sizeof(Packed));
  z->next = y->next;
  y->next = z;
  if (last_ == y) last_ = z;
  parent->keys()[a0 + 1] = Key(y->e()[0]);
  InsertChild(p, p.depth - 1, a0 + 2, Key(z->e()[0]), z, spare);
}

// ------------------------------------------------------------ erasure

void RunTree::EraseIn(Path& p, uint32_t i, uint32_t n) {
  Leaf* l = p.leaf;
  std::memmove(l->e() + i, l->e() + i + n, (l->count - i - n) * sizeof(Packed));
  l->count -= n;
  size_ -= n;
  if (l->count == 0) {
    if (height_ == 0) {
      FreeLeaf(l);
      root_ = first_ = last_ = nullptr;
      return;
    }
    Leaf* prev = PrevLeaf(p);
    if (prev)
      prev->next = l->next;
    else
      first_ = l->next;
    if (last_ == l) last_ = prev;
    FreeLeaf(l);
    RemoveChild(p, p.depth - 1, p.idx[p.depth - 1]);
    return;
  }
  if (i == 0) FixKeys(p, p.depth - 1, Key(l->e()[0]));
  if (l->count < kMinLeafRuns) Rebalance(p);
}

void RunTree::RemoveChild(Path& p, int d, uint32_t pos) {
  Inner* n = p.node[d];
  std::memmove(n->keys() + pos, n->keys() + pos + 1, (n->count - pos - 1) * sizeof(uint64_t));
  std::memmove(n->child() + pos, n->child() + pos + 1, (n->count - pos - 1) * sizeof(void*));
  n->count--;
  if (pos == 0 && d > 0) FixKeys(p, d - 1, n->keys()[0]);
  if (d == 0) {
    // A root with one child gives way to it.
    while (height_ > 0 && static_cast<Inner*>(root_)->count == 1) {
      Inner* r = static_cast<Inner*>(root_);
      root_ = r->child()[0];
      FreeInner(r);
      height_--;
    }
    return;
  }
  if (n->count < MinInner()) RebalanceInner(p, d);
}

void RunTree::RebalanceInner(Path& p, int d) {
  Inner* parent = p.node[d - 1];
  const uint32_t ni = p.idx[d - 1];
  const uint32_t a0 = ni > 0 ? ni - 1 : ni;  // the pair (a0, a0 + 1)
  Inner* x = static_cast<Inner*>(parent->child()[a0]);
  Inner* y = static_cast<Inner*>(parent->child()[a0 + 1]);
  if (x->count + y->count <= x->cap) {
    std::memcpy(x->keys() + x->count, y->keys(), y->count * sizeof(uint64_t));
    std::memcpy(x->child() + x->count, y->child(), y->count * sizeof(void*));
    x->count += y->count;
    FreeInner(y);
    RemoveChild(p, d - 1, a0 + 1);
    return;
  }
  const uint32_t t = x->count + y->count, want = t / 2;
  if (x->count < want) {  // move y's first children to x's end
    uint32_t m = want - x->count;
    std::memcpy(x->keys() + x->count, y->keys(), m * sizeof(uint64_t));
    std::memcpy(x->child() + x->count, y->child(), m * sizeof(void*));
    std::memmove(y->keys(), y->keys() + m, (y->count - m) * sizeof(uint64_t));
    std::memmove(y->child(), y->child() + m, (y->count - m) * sizeof(void*));
    x->count += m;
    y->count -= m;
  } else {  // move x's last children to y's front
    uint32_t m = x->count - want;
    std::memmove(y->keys() + m, y->keys(), y->count * sizeof(uint64_t));
    std::memmove(y->child() + m, y->child(), y->count * sizeof(void*));
    std::memcpy(y->keys(), x->keys() + want, m * sizeof(uint64_t));
    std::memcpy(y->child(), x->child() + want, m * sizeof(void*));
    x->count -= m;
    y->count += m;
  }
  parent->keys()[a0 + 1] = y->keys()[0];
}

void RunTree::Rebalance(Path& p) {
  if (height_ == 0) return;
  Inner* parent = p.node[p.depth - 1];
  const uint32_t li = p.idx[p.depth - 1];
  const uint32_t a0 = li > 0 ? li - 1 : li;  // the pair (a0, a0 + 1)
  Leaf* x = static_cast<Leaf*>(parent->child()[a0]);
  Leaf* y = static_cast<Leaf*>(parent->child()[a0 + 1]);
  if (x->count + y->count <= kLeafRuns) {
    std::memcpy(x->e() + x->count, y->e(), y->count * sizeof(Packed));
    x->count += y->count;
    x->next = y->next;
    if (last_ == y) last_ = x;
    FreeLeaf(y);
    RemoveChild(p, p.depth - 1, a0 + 1);
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
  parent->keys()[a0 + 1] = Key(y->e()[0]);
}

void RunTree::EraseStarting(uint64_t a, uint64_t end, std::vector<Run>* removed) {
  Path p;
  while (root_ && a < end) {
    Descend(a, &p);
    uint32_t j = LowerBoundIn(p.leaf, a);
    if (j == p.leaf->count) {  // starts in the next leaf, if any
      if (!p.leaf->next) return;
      const uint64_t f = Key(p.leaf->next->e()[0]);
      if (f >= end) return;
      Descend(f, &p);
      j = 0;
    }
    const Leaf* l = p.leaf;
    uint32_t k = j;
    for (; k < l->count && Key(l->e()[k]) < end; k++)
      if (removed) removed->push_back(Unpack(l->e()[k], counted_));
    if (k == j) return;
    const bool to_leaf_end = k == l->count;
    EraseIn(p, j, k - j);
    if (!to_leaf_end) return;
  }
}

void RunTree::Replace(uint64_t key, const Run& r) {
  assert(Accepts(r.lba, r.phys, r.len));
  Path p;
  Descend(key, &p);  // the leaf holding the run that starts at key
  const uint32_t j = LowerBoundIn(p.leaf, key);
  assert(j < p.leaf->count && Key(p.leaf->e()[j]) == key);
  Set(p, j, r);
}

void RunTree::Splice(Leaf* l, uint32_t j, uint32_t k, const Run* runs, size_t n) {
  for (size_t i = 0; i < n; i++) assert(Accepts(runs[i].lba, runs[i].phys, runs[i].len));
  assert(l->count - (k - j) + n <= l->cap);
  std::memmove(l->e() + j + n, l->e() + k, (l->count - k) * sizeof(Packed));
  for (size_t i = 0; i < n; i++) l->e()[j + i] = Pack(runs[i].lba, runs[i].phys, runs[i].len);
  size_ = size_ - (k - j) + n;
  l->count = static_cast<uint32_t>(l->count - (k - j) + n);
}

RunTree::Edit RunTree::ReplaceFrom(Leaf* l, uint32_t j, uint64_t b, const Run* runs, size_t n, Path* p) {
  uint32_t k = j;
  while (k < l->count && Key(l->e()[k]) < b) k++;
  // The runs replaced may go on in the next leaf; the result may not fit,
  // or leave the leaf empty (a shape change): those are Insert's and
  // EraseStarting's.
  if (k == l->count && l->next && Key(l->next->e()[0]) < b) return Edit::kRefused;
  const size_t count = l->count - (k - j) + n;
  if (count > l->cap || count == 0) return Edit::kRefused;
  const bool shrinks = count < l->count;
  // Without the path from the root, nothing above the leaf can follow.
  if (p == nullptr && (j == 0 || (shrinks && count < kMinLeafRuns))) return Edit::kNeedsPath;
  // From here on nothing allocates or throws.
  Splice(l, j, k, runs, n);
  if (p == nullptr) return Edit::kDone;
  // A new first run: the separators above follow it, as after EraseIn (it
  // starts at or after a, and Descend found this leaf's separator at or
  // before a, or this is the first leaf).
  if (j == 0) FixKeys(*p, p->depth - 1, Key(l->e()[0]));
  // As after EraseIn; a leaf that grew or kept its count is left as it is
  // (the last leaf of a tree built in key order fills from one run).
  if (shrinks && l->count < kMinLeafRuns) Rebalance(*p);
  return Edit::kDone;
}

bool RunTree::TryReplaceInLeaf(const_iterator first, uint64_t a, uint64_t b, const Run* runs, size_t n) {
  Leaf* l = const_cast<Leaf*>(first.leaf_);  // this tree's own leaf: the tree is not const here
  const uint32_t j = first.i_;
  // `first` must be where a belongs: at or after a, its predecessor before.
  if (l != nullptr && Key(l->e()[j]) >= a && (j == 0 || Key(l->e()[j - 1]) < a)) {
    const Edit e = ReplaceFrom(l, j, b, runs, n, nullptr);
    if (e != Edit::kNeedsPath) return e == Edit::kDone;
  }
  return TryReplaceInLeaf(a, b, runs, n);
}

bool RunTree::TryReplaceInLeaf(uint64_t a, uint64_t b, const Run* runs, size_t n) {
  if (!root_) return false;
  Path p;
  Descend(a, &p);
  return ReplaceFrom(p.leaf, LowerBoundIn(p.leaf, a), b, runs, n, &p) == Edit::kDone;
}

// ------------------------------------------------------------ bulk load

void RunTree::BulkLoad(const std::vector<Run>& runs) {
  constexpr uint32_t kFill = kLeafRuns * 9 / 10;
  const size_t n = runs.size();
  if (n == 0) {
    Clear();
    return;
  }
  // Built aside and swapped in at the end: if an allocation throws, what was
  // built is freed and the tree keeps its old contents.
  const size_t leaves = (n + kFill - 1) / kFill;
  Leaf* first = nullptr;
  Leaf* prev = nullptr;
  std::vector<Inner*> inners;  // every inner node made, to free on failure
  std::vector<void*> level;
  std::vector<uint64_t> keys;
  uint32_t height = 0;
  try {
    inners.reserve(leaves);  // a tree has fewer inner nodes than leaves (fan-out >= 3)
    level.reserve(leaves);
    keys.reserve(leaves);
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
      if (prev)
        prev->next = l;
      else
        first = l;
      prev = l;
      level.push_back(l);
      keys.push_back(runs[done].lba);
      done += take;
    }
    // Inner levels, bottom up, each node as full as the fan-out allows and
    // the children spread evenly (so every node has more than fan-out / 2).
    while (level.size() > 1) {
      const size_t c = level.size(), nodes = (c + fan_ - 1) / fan_;
      std::vector<void*> up;
      std::vector<uint64_t> up_keys;
      up.reserve(nodes);
      up_keys.reserve(nodes);
      size_t at = 0;
      for (size_t k = 0; k < nodes; k++) {
        size_t take = (c - at) / (nodes - k);
        Inner* in = NewInner();
        inners.push_back(in);  // reserved: cannot throw
        in->count = static_cast<uint32_t>(take);
        std::memcpy(in->keys(), keys.data() + at, take * sizeof(uint64_t));
        std::memcpy(in->child(), level.data() + at, take * sizeof(void*));
        up.push_back(in);
        up_keys.push_back(keys[at]);
        at += take;
      }
      level.swap(up);
      keys.swap(up_keys);
      height++;
    }
  } catch (...) {
    for (Inner* in : inners) FreeInner(in);
    while (first) {
      Leaf* next = first->next;
      FreeLeaf(first);
      first = next;
    }
    throw;
  }
  Clear();
  root_ = level[0];
  height_ = height;
  first_ = first;
  last_ = prev;
  size_ = n;
}

// ------------------------------------------------------------ checks

size_t RunTree::leaves() const {
  size_t n = 0;
  for (const Leaf* l = first_; l; l = l->next) n++;
  return n;
}

size_t RunTree::MemoryBytes() const {
  size_t b = 0;
  std::vector<std::pair<const void*, uint32_t>> todo;
  if (root_) todo.push_back({root_, height_});
  while (!todo.empty()) {
    auto [node, h] = todo.back();
    todo.pop_back();
    if (h == 0) {
      b += sizeof(Leaf) + static_cast<const Leaf*>(node)->cap * sizeof(Packed);
      continue;
    }
    const Inner* n = static_cast<const Inner*>(node);
    b += sizeof(Inner) + n->cap * (sizeof(uint64_t) + sizeof(void*));
    for (uint32_t k = 0; k < n->count; k++) todo.push_back({n->child()[k], h - 1});
  }
  return b;
}

std::string RunTree::CheckSubtree(const void* node, uint32_t height, bool is_root, uint64_t* first,
                                  const Leaf** prev_leaf, size_t* count, uint64_t* prev_end, bool* any) const {
  if (height == 0) {
    const Leaf* l = static_cast<const Leaf*>(node);
    const bool only = is_root;
    std::string at = "leaf " + std::to_string(*count) + "+: ";
    if ((*prev_leaf ? (*prev_leaf)->next : first_) != l) return at + "leaf list out of order";
    *prev_leaf = l;
    if (l->count == 0 || l->count > l->cap) return at + "count " + std::to_string(l->count);
    if (l->cap > kLeafRuns || (!only && l->cap != kLeafRuns)) return at + "capacity " + std::to_string(l->cap);
    if (!only && l != last_ && l->count < kMinLeafRuns) return at + "underfull (" + std::to_string(l->count) + ")";
    for (uint32_t i = 0; i < l->count; i++) {
      Run r = Unpack(l->e()[i], counted_);
      if (l->counted != counted_ || r.len == 0 || !Accepts(r.lba, r.phys, r.len)) return at + "bad run";
      if (*any && r.lba < *prev_end) return at + "runs overlap or out of order";
      *any = true;
      *prev_end = r.lba + r.len;
    }
    *count += l->count;
    *first = Key(l->e()[0]);
    return {};
  }
  const Inner* n = static_cast<const Inner*>(node);
  std::string at = "inner at height " + std::to_string(height) + ": ";
  if (n->cap != fan_ || n->count > n->cap || n->count < (is_root ? 2u : MinInner()))
    return at + "count " + std::to_string(n->count) + " of " + std::to_string(n->cap);
  for (uint32_t k = 0; k < n->count; k++) {
    uint64_t f = 0;
    std::string e = CheckSubtree(n->child()[k], height - 1, false, &f, prev_leaf, count, prev_end, any);
    if (!e.empty()) return e;
    if (n->keys()[k] != f) return at + "key " + std::to_string(k) + " is not its subtree's first run";
    if (k == 0) *first = f;
  }
  return {};
}

std::string RunTree::Check() const {
  if (!root_) {
    if (size_ || first_ || last_ || height_) return "empty tree with leaves or size";
    return {};
  }
  const Leaf* prev = nullptr;
  size_t count = 0;
  uint64_t first = 0, prev_end = 0;
  bool any = false;
  std::string e = CheckSubtree(root_, height_, true, &first, &prev, &count, &prev_end, &any);
  if (!e.empty()) return e;
  if (prev != last_ || last_->next) return "last leaf is not the list's end";
  if (count != size_) return "size " + std::to_string(size_) + " but " + std::to_string(count) + " runs";
  return {};
}

}  // namespace cowstore::store
