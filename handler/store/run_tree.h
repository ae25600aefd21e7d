// SPDX-License-Identifier: Apache-2.0
// An ordered set of non-overlapping runs lba -> (phys, len), packed 16 bytes
// a run in 4 KiB leaves (docs/design/store-v3.md 3.1): the in-RAM form of a
// LUN's extent map, ~16 bytes per run when full and <= 24 at 2/3 fill, where
// a std::map node costs 64.
//
// Shape: a B+tree. Leaves hold up to kLeafRuns packed runs in key order and
// link to the next leaf (iteration). Inner nodes hold up to kInnerFanout
// (first lba of the child's subtree, child) pairs in one 4 KiB block (1/255
// of the leaves' size); every inner node but the root has >= fanout / 3
// children, the root >= 2. A lookup, insert, split, merge or erase costs
// O(log n): nothing moves more than one node's worth of entries per level.
//
// A tree's only leaf starts with room for kFirstLeafRuns and doubles as it
// fills, so a LUN with a handful of extents costs bytes, not a 4 KiB leaf.
//
// Fill: a full leaf first lends runs to a sibling (same parent) with room;
// when both are full, two leaves become three of 2/3 each (a B*-tree split).
// Appending past the last run starts a new leaf, so runs inserted in key
// order (a checkpoint being read: ExtentMap::Insert of sorted runs; a clone
// being copied) pack leaves full and only touch the tree's right edge.
// Erasing merges a leaf below 1/3 with a sibling, or evens the two out.
// Every leaf but the last holds >= kLeafRuns / 3 runs. Inner nodes split in
// halves when full and merge or even out below 1/3; a root left with one
// child gives way to it.
//
// Packing limits (Fits): lba + len <= 2^48, phys + len <= 2^48,
// 1 <= len <= 2^32. A v1 pool's AU numbers satisfy them (AU >= 64 KiB,
// at most 2^32 AUs); so do v3's grains. Callers never hand it a run that
// does not fit: ExtentMap refuses one (kInvalidArgument), and recovery and
// the checkpoint decoder refuse a record or chunk holding one (kCorruption)
// before any map changes.
//
// Two kinds of run, the same 16 bytes (RunKind), chosen at construction:
// kMapping (the default, ExtentMap's): lba -> phys continuing along the
// run; two runs merge when both lba and phys continue each other and the
// merged run is at most kMaxLen long (longer neighbours stay apart: so the
// runs of a map above 2^32 units are not always maximal); packing as above.
// kCounted (SharedRefs', FreeSpace's): key -> one value for the
// whole run (Run::phys holds it); two adjacent runs merge when their values
// are equal; packing: key + len <= 2^48, 1 <= len <= 2^48, value < 2^32
// (FitsCounted). Everything else (splits, erase, order, fill) is shared.
//
// Allocation failure: every operation is all-or-nothing. Insert and SplitAt
// allocate every node they need (a leaf, one inner node per full level the
// split climbs, a new root) before changing anything, so a std::bad_alloc
// leaves the tree as it was: a checkpoint never writes a half-split tree.
// BulkLoad and copies build aside and free what they built if one throws.
// Erasure and Replace never allocate.
//
// Not thread-safe. Iterators are invalidated by every change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

namespace cowstore::store {

enum class RunKind : uint8_t { kMapping, kCounted };

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
  struct Inner;
  struct Path;

 public:
  static constexpr uint64_t kMaxKey = uint64_t{1} << 48;  // lba/phys + len bound
  static constexpr uint64_t kMaxLen = uint64_t{1} << 32;
  static constexpr size_t kLeafBytes = 4096;
  static constexpr uint32_t kLeafRuns = (kLeafBytes - 16) / sizeof(Packed);  // 255 (16-byte header)
  static constexpr uint32_t kMinLeafRuns = kLeafRuns / 3;
  static constexpr uint32_t kFirstLeafRuns = 4;  // a new tree's leaf; doubles up to kLeafRuns
  // Children of an inner node: (4096 - 8) / (8-byte key + 8-byte pointer).
  static constexpr uint32_t kInnerFanout = 255;
  static constexpr uint32_t kMinInnerFanout = 3;

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
    const_iterator(const Leaf* leaf, uint32_t i) : leaf_(leaf), i_(i) {}
    const Leaf* leaf_ = nullptr;  // null at end
    uint32_t i_ = 0;
  };

  static constexpr uint64_t kMaxCountedValue = UINT32_MAX;
  // Whether a kCounted run can be stored.
  static bool FitsCounted(uint64_t key, uint64_t len, uint64_t value) {
    return len >= 1 && key < kMaxKey && len <= kMaxKey - key && value <= kMaxCountedValue;
  }

  RunTree() = default;
  // A tree of the given kind (the fan-out as below).
  explicit RunTree(RunKind kind, uint32_t inner_fanout = kInnerFanout);
  // For tests: inner nodes of at most `inner_fanout` children (clamped to
  // [kMinInnerFanout, kInnerFanout]), so that small trees grow several levels.
  explicit RunTree(uint32_t inner_fanout);
  RunTree(const RunTree& o);
  RunTree& operator=(const RunTree& o);
  RunTree(RunTree&& o) noexcept;
  RunTree& operator=(RunTree&& o) noexcept;
  ~RunTree() { Clear(); }

  const_iterator begin() const { return {first_, 0}; }
  const_iterator end() const { return {}; }
  // The run containing a, or else the first run after a.
  const_iterator FirstEndingAfter(uint64_t a) const;
  // The first run starting at or after a.
  const_iterator lower_bound(uint64_t a) const;
  // The run containing a, if any (true and *out set).
  bool Covering(uint64_t a, Run* out) const;
  // The last run starting at or before a, if any (true and *out set).
  bool Floor(uint64_t a, Run* out) const;

  RunKind kind() const { return counted_ ? RunKind::kCounted : RunKind::kMapping; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void Clear();

  // Maps [lba, lba+len) -> [phys, ...), merging with the run just before
  // and/or just after when both lba and phys continue each other (kCounted:
  // when their values equal phys), unless the merged run would be longer
  // than a run holds (kMapping: kMaxLen): then it stays apart from that
  // neighbour. Returns false and changes nothing when the run itself does
  // not fit. REQUIRES: [lba, lba+len) unmapped.
  bool Insert(uint64_t lba, uint64_t phys, uint64_t len);
  // Splits the run containing a, if one starts before a, so one starts at a.
  // The two halves are not merged again by anything but Insert.
  void SplitAt(uint64_t a);
  // Removes every run starting in [a, end), appending each to *removed
  // (may be null) in key order. Runs are not clipped: SplitAt first.
  void EraseStarting(uint64_t a, uint64_t end, std::vector<Run>* removed);
  // Replaces the run starting at key with r where it stands: never allocates,
  // never merges (the building block of callers' all-or-nothing changes).
  // REQUIRES: a run starts at key; r is accepted and lies after the run
  // before it and before the run after it.
  void Replace(uint64_t key, const Run& r);
  // Replaces the runs starting in [a, b) with runs[0, n) where they stand,
  // if that can be done inside one leaf without allocating (the common case
  // of a small edit: SharedRefs' Inc and Dec); else returns false and
  // changes nothing. Never allocates, never merges (the runs are final).
  // REQUIRES: runs sorted, non-overlapping, accepted, each starting at or
  // after a and after the end of the run before a, and ending at or before
  // the first run starting at or after b.
  bool TryReplaceInLeaf(uint64_t a, uint64_t b, const Run* runs, size_t n);
  // The same, given `first`: the first run starting at or after a, found by
  // the caller since the tree last changed (SharedRefs reads the span it
  // edits first). Where the edit leaves the leaf's first run and fill as
  // they were enough not to touch the levels above, it needs no descent.
  bool TryReplaceInLeaf(const_iterator first, uint64_t a, uint64_t b, const Run* runs, size_t n);
  // Replaces the contents with runs. REQUIRES: sorted, non-overlapping, Fits.
  // Leaves are filled to ~90 % (room for later inserts without splitting).
  void BulkLoad(const std::vector<Run>& runs);

  // For tests and benchmarks.
  size_t leaves() const;      // walks the leaf list
  size_t height() const { return root_ ? height_ + 1 : 0; }  // levels, leaves included
  size_t MemoryBytes() const;  // leaves plus inner nodes, without malloc headers
  // Empty if every invariant above holds, else what is broken.
  std::string Check() const;
  // Allocation failure injection for tests: the n-th node allocation from
  // now on this thread (0 = the next) throws std::bad_alloc, once; n < 0
  // turns it off. Returns how many allocations were left before the failure
  // (n itself if none happened), so a test can tell whether it fired.
  static int64_t FailAllocationForTest(int64_t n);

 private:
  class Spare;  // inner nodes allocated ahead of a change (run_tree.cc)
  static void* AllocNode(size_t bytes);
  Leaf* NewLeaf(uint32_t cap) const;
  static void FreeLeaf(Leaf* l);
  static Leaf* CopyLeaf(const Leaf* o, uint32_t cap);
  Inner* NewInner() const;
  static void FreeInner(Inner* n);
  void FreeSubtree(void* node, uint32_t height);
  void* CopySubtree(const void* node, uint32_t height, Leaf** prev_leaf);
  static Run Unpack(const Packed& p, bool counted);
  Packed Pack(uint64_t lba, uint64_t phys, uint64_t len) const;
  bool Accepts(uint64_t lba, uint64_t phys, uint64_t len) const {
    return counted_ ? FitsCounted(lba, len, phys) : Fits(lba, phys, len);
  }
  // Whether b continues a (b starts where a ends and the values follow).
  bool Continues(const Run& a, const Run& b) const {
    return a.lba + a.len == b.lba && (counted_ ? a.phys == b.phys : a.phys + a.len == b.phys);
  }
  // Longest run one merge may make.
  uint64_t MaxLen() const { return counted_ ? kMaxKey : kMaxLen; }
  static uint64_t Key(const Packed& p) { return p.lo & (kMaxKey - 1); }
  static uint32_t LowerBoundIn(const Leaf* l, uint64_t a);  // first run with lba >= a
  static uint32_t UpperBoundIn(const Leaf* l, uint64_t a);  // first run with lba > a
  uint32_t MinInner() const { return fan_ / 3 < 2 ? 2 : fan_ / 3; }
  // From the root to the leaf a key belongs in: the last child whose first
  // key is <= a at every level (the first child when a precedes them all).
  void Descend(uint64_t a, Path* p) const;
  const Leaf* LeafFor(uint64_t a) const;
  // The leaf before p's leaf, or null.
  Leaf* PrevLeaf(const Path& p) const;
  // Sets the i-th run of p's leaf (its parents' keys follow a new first run).
  void Set(Path& p, uint32_t i, const Run& r);
  // The first key below inner level d changed to key: update the ancestors.
  void FixKeys(const Path& p, int d, uint64_t key);
  // Inserts r as the i-th run of p's leaf, making room first if needed.
  void InsertAt(Path& p, uint32_t i, const Run& r);
  // Makes room in p's full leaf for a run with key a (may add a leaf).
  void MakeRoom(Path& p, uint64_t a);
  // Adds (key, child) at pos >= 1 of inner level d, splitting upwards.
  // Takes the nodes it needs from spare (InnerNodesToAdd of the same call).
  void InsertChild(Path& p, int d, uint32_t pos, uint64_t key, void* child, Spare& spare);
  // Inner nodes adding one child at inner level d takes: one per full level
  // from d up, and a new root if every level up to the root is full
  // (d < 0: adding a leaf beside the only leaf, i.e. a new root).
  uint32_t InnerNodesToAdd(const Path& p, int d) const;
  // Removes the child at pos of inner level d, merging upwards.
  void RemoveChild(Path& p, int d, uint32_t pos);
  void NewRoot(void* left, uint64_t left_key, void* right, uint64_t right_key, Spare& spare);
  // Merges or evens out p's leaf (below kMinLeafRuns) with a sibling.
  void Rebalance(Path& p);
  // Merges or evens out inner level d (below MinInner) with a sibling.
  void RebalanceInner(Path& p, int d);
  void EraseIn(Path& p, uint32_t i, uint32_t n);
  // Replaces runs [j, k) of leaf l with runs[0, n) (TryReplaceInLeaf, which
  // checked that they fit). Never allocates.
  void Splice(Leaf* l, uint32_t j, uint32_t k, const Run* runs, size_t n);
  // TryReplaceInLeaf's body for the runs from index j of leaf l: p is the
  // path to l, or null when the caller found l without one (then an edit
  // that would change l's first run or leave it below a third, which the
  // levels above must follow, is kNeedsPath, nothing changed).
  enum class Edit : uint8_t { kDone, kRefused, kNeedsPath };
  Edit ReplaceFrom(Leaf* l, uint32_t j, uint64_t b, const Run* runs, size_t n, Path* p);
  std::string CheckSubtree(const void* node, uint32_t height, bool is_root, uint64_t* first,
                           const Leaf** prev_leaf, size_t* count, uint64_t* prev_end, bool* any) const;

  void* root_ = nullptr;  // a Leaf when height_ == 0, else an Inner
  uint32_t height_ = 0;   // inner levels above the leaves
  uint32_t fan_ = kInnerFanout;
  bool counted_ = false;  // RunKind::kCounted
  Leaf* first_ = nullptr;  // the leaf list's ends
  Leaf* last_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cowstore::store
