// SPDX-License-Identifier: Apache-2.0
// A LUN's map from logical allocation units to physical ones, kept as
// non-overlapping runs (extents): lba_au -> {phys_au, len}. Adjacent runs
// that are also physically contiguous are merged, so a sequentially written
// or cloned range stays one extent and range operations cost O(extents).
//
// Held in a packed run tree (run_tree.h, ~16-24 bytes an extent). A map that
// is given a run the tree cannot pack (lba or phys + len beyond 2^48, or a
// run longer than 2^32: no valid pool has one, only a corrupt checkpoint or
// record) moves to a std::map for the rest of its life, so recovery's bound
// checks see exactly the values that were read.
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "handler/store/run_tree.h"  // Run

namespace cowstore::store {

class ExtentMap {
 public:
  struct Extent {
    uint64_t phys;
    uint64_t len;
  };
  using Entry = std::pair<uint64_t, Extent>;  // lba -> extent

  // The runs in lba order, as (lba, extent) values.
  class Runs {
   public:
    class const_iterator {
     public:
      using iterator_category = std::forward_iterator_tag;
      using value_type = Entry;
      using difference_type = std::ptrdiff_t;
      using reference = Entry;
      struct pointer {
        Entry e;
        const Entry* operator->() const { return &e; }
      };
      Entry operator*() const;
      pointer operator->() const { return {**this}; }
      const_iterator& operator++();
      bool operator==(const const_iterator& o) const { return packed_ == o.packed_ && wide_ == o.wide_; }

     private:
      friend class Runs;
      RunTree::const_iterator packed_;
      std::map<uint64_t, Extent>::const_iterator wide_{};
      bool is_wide_ = false;
    };
    const_iterator begin() const;
    const_iterator end() const;
    size_t size() const { return m_->extents(); }
    bool empty() const { return size() == 0; }

   private:
    friend class ExtentMap;
    explicit Runs(const ExtentMap* m) : m_(m) {}
    const ExtentMap* m_;
  };

  // Appends the mapped parts of [a, a+n) to *out, clipped, in order.
  void Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const;
  // Unmaps [a, a+n); appends what was mapped there to *removed (may be null).
  void Remove(uint64_t a, uint64_t n, std::vector<Run>* removed);
  // Maps [lba, lba+len) -> [phys, ...). REQUIRES: that range is unmapped.
  void Insert(uint64_t lba, uint64_t phys, uint64_t len);
  // Physical AU of logical AU a, or kUnmapped.
  uint64_t Find(uint64_t a) const;
  size_t extents() const { return wide_ ? wide_map_.size() : tree_.size(); }
  uint64_t mapped_units() const { return mapped_; }
  Runs runs() const { return Runs(this); }
  void Clear();

  static constexpr uint64_t kUnmapped = ~uint64_t{0};
  // Heap bytes per extent at the tree's lowest fill after inserts (2/3 of a
  // leaf), for space reporting. Loads in key order pack ~16.
  static constexpr size_t kBytesPerExtent = RunTree::kLeafBytes * 3 / (2 * RunTree::kLeafRuns);

 private:
  // Moves every run from the tree into wide_map_ (see the header comment).
  void GoWide();
  void WideSplitAt(uint64_t a);
  void WideInsert(uint64_t lba, uint64_t phys, uint64_t len);

  RunTree tree_;
  bool wide_ = false;
  std::map<uint64_t, Extent> wide_map_;  // only when wide_
  uint64_t mapped_ = 0;
};

}  // namespace cowstore::store
