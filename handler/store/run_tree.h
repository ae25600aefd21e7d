// SPDX-License-Identifier: Apache-2.0
// An ordered set of non-overlapping runs lba -> (phys, len), packed 16 bytes
// a run in 4 KiB leaves (docs/design/store-v3.md 3.1): the in-RAM form of a
// LUN's extent map, ~16 bytes per run when full and <= 24 at 2/3 fill, where
// a std::map node costs 64.
//
// Shape: a B+tree of height two. Leaves hold up to kLeafRuns packed runs in
// key order; above them one sorted index of (first lba, leaf), 16 bytes per
// leaf (1/255 of the leaves' size), binary-searched. Splitting a leaf inserts
// into that index: a move of at most 16 bytes x leaves (640 KB at 10 M runs),
// amortised over the >= 85 inserts that fill a leaf between splits.
//
// A tree's only leaf starts with room for kFirstLeafRuns and doubles as it
// fills, so a LUN with a handful of extents costs bytes, not a 4 KiB leaf.
//
// Fill: a full leaf first lends runs to a neighbour with room; when both are
// full, two leaves become three of 2/3 each (a B*-tree split). Appending past
// the last run starts a new leaf, so runs inserted in key order (a checkpoint
// being read, a clone being copied) pack leaves full. Erasing merges a leaf
// below 1/3 with a neighbour, or evens the two out. Every leaf but the last
// holds >= kLeafRuns / 3 runs.
//
// Packing limits (Fits): lba + len <= 2^48, phys + len <= 2^48,
// 1 <= len <= 2^32. A v1 pool's AU numbers satisfy them (AU >= 64 KiB,
// at most 2^32 AUs); so do v3's grains. The caller decides what to do with a
// run that does not fit (ExtentMap keeps such maps in a std::map, so that a
// corrupt record reaches the bound checks of recovery unchanged).
//
// Not thread-safe. Iterators are invalidated by every change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

namespace cowstore::store {

struct Run {
  uint64_t lba = 0;   // first logical unit
  uint64_t phys = 0;  // first physical unit
  uint64_t len = 0;   // units
  bool operator==(const Run&) const = default;
};

class RunTree {
  struct Packed {
    uint64_t lo;  // lba | low 16 bits of (len - 1) << 48
    uint64_t hi;  // phys | high 16 bits of (len - 1) << 48
  };
  static_assert(sizeof(Packed) == 16);
  struct Leaf;
  struct Slot {
    uint64_t first;  // lba of the leaf's first run
    Leaf* leaf;
  };

 public:
  static constexpr uint64_t kMaxKey = uint64_t{1} << 48;  // lba/phys + len bound
  static constexpr uint64_t kMaxLen = uint64_t{1} << 32;
  static constexpr size_t kLeafBytes = 4096;
  static constexpr uint32_t kLeafRuns = (kLeafBytes - 8) / sizeof(Packed);  // 255
  static constexpr uint32_t kMinLeafRuns = kLeafRuns / 3;
  static constexpr uint32_t kFirstLeafRuns = 4;  // a new tree's leaf; doubles up to kLeafRuns

  // Whether the run can be stored.
  static bool Fits(uint64_t lba, uint64_t phys, uint64_t len) {
    return len >= 1 && len <= kMaxLen && lba < kMaxKey && phys < kMaxKey && len <= kMaxKey - lba &&
           len <= kMaxKey - phys;
  }

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Run;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = Run;
    const_iterator() = default;
    Run operator*() const;
    const_iterator& operator++();
    const_iterator operator++(int) { const_iterator t = *this; ++*this; return t; }
    bool operator==(const const_iterator& o) const { return leaf_ == o.leaf_ && i_ == o.i_; }

   private:
    friend class RunTree;
    const_iterator(const RunTree* t, size_t leaf, uint32_t i) : t_(t), leaf_(leaf), i_(i) {}
    const RunTree* t_ = nullptr;
    size_t leaf_ = 0;  // index into the tree's leaf index; == leaves() at end
    uint32_t i_ = 0;
  };

  RunTree() = default;
  RunTree(const RunTree& o);
  RunTree& operator=(const RunTree& o);
  RunTree(RunTree&& o) noexcept;
  RunTree& operator=(RunTree&& o) noexcept;
  ~RunTree() { Clear(); }

  const_iterator begin() const { return {this, 0, 0}; }
  const_iterator end() const { return {this, index_.size(), 0}; }
  // The run containing a, or else the first run after a.
  const_iterator FirstEndingAfter(uint64_t a) const;
  // The first run starting at or after a.
  const_iterator lower_bound(uint64_t a) const;
  // The run containing a, if any (true and *out set).
  bool Covering(uint64_t a, Run* out) const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void Clear();

  // Maps [lba, lba+len) -> [phys, ...), merging with the run just before
  // and/or just after when both lba and phys continue each other. Returns
  // false and changes nothing when the run, or what it would merge into,
  // does not fit. REQUIRES: [lba, lba+len) unmapped.
  bool Insert(uint64_t lba, uint64_t phys, uint64_t len);
  // Splits the run containing a, if one starts before a, so one starts at a.
  // The two halves are not merged again by anything but Insert.
  void SplitAt(uint64_t a);
  // Removes every run starting in [a, end), appending each to *removed
  // (may be null) in key order. Runs are not clipped: SplitAt first.
  void EraseStarting(uint64_t a, uint64_t end, std::vector<Run>* removed);
  // Replaces the contents with runs. REQUIRES: sorted, non-overlapping, Fits.
  // Leaves are filled to ~90 % (room for later inserts without splitting).
  void BulkLoad(const std::vector<Run>& runs);

  // For tests and benchmarks.
  size_t leaves() const { return index_.size(); }
  size_t MemoryBytes() const;  // leaves plus the index, without malloc headers
  // Empty if every invariant above holds, else what is broken.
  std::string Check() const;

 private:
  static Leaf* NewLeaf(uint32_t cap);
  static void FreeLeaf(Leaf* l);
  static Leaf* CopyLeaf(const Leaf* o, uint32_t cap);
  static Run Unpack(const Packed& p);
  static Packed Pack(uint64_t lba, uint64_t phys, uint64_t len);
  static uint64_t Key(const Packed& p) { return p.lo & (kMaxKey - 1); }
  static uint32_t LowerBoundIn(const Leaf* l, uint64_t a);  // first run with lba >= a
  static uint32_t UpperBoundIn(const Leaf* l, uint64_t a);  // first run with lba > a
  // Index of the leaf a key belongs in (0 when it is before every leaf).
  size_t LeafFor(uint64_t a) const;
  Run At(size_t leaf, uint32_t i) const;
  void Set(size_t leaf, uint32_t i, const Run& r);
  // Inserts r as the i-th run of leaf li, making room first if needed.
  void InsertAt(size_t li, uint32_t i, const Run& r);
  // Makes room in full leaf li for a run with key a (may add a leaf).
  void MakeRoom(size_t li, uint64_t a);
  // Merges or evens out leaf li (below kMinLeafRuns) with a neighbour.
  void Rebalance(size_t li);
  void EraseIn(size_t li, uint32_t i, uint32_t n);

  std::vector<Slot> index_;
  size_t size_ = 0;
};

}  // namespace cowstore::store
