// SPDX-License-Identifier: Apache-2.0
// A LUN's map from logical allocation units to physical ones, kept as
// non-overlapping runs (extents): lba_au -> {phys_au, len}. Adjacent runs
// that are also physically contiguous are merged, so a sequentially written
// or cloned range stays one extent and range operations cost O(extents).
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "handler/store/run_tree.h"  // Run

namespace cowstore::store {

class ExtentMap {
 public:
  struct Extent {
    uint64_t phys;
    uint64_t len;
  };

  // Appends the mapped parts of [a, a+n) to *out, clipped, in order.
  void Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const;
  // Unmaps [a, a+n); appends what was mapped there to *removed (may be null).
  void Remove(uint64_t a, uint64_t n, std::vector<Run>* removed);
  // Maps [lba, lba+len) -> [phys, ...). REQUIRES: that range is unmapped.
  void Insert(uint64_t lba, uint64_t phys, uint64_t len);
  // Physical AU of logical AU a, or kUnmapped.
  uint64_t Find(uint64_t a) const;
  size_t extents() const { return m_.size(); }
  uint64_t mapped_units() const { return mapped_; }
  const std::map<uint64_t, Extent>& runs() const { return m_; }
  void Clear() { m_.clear(); mapped_ = 0; }

  static constexpr uint64_t kUnmapped = ~uint64_t{0};
  // Approximate heap bytes per extent (std::map node), for space reporting.
  static constexpr size_t kBytesPerExtent = 32 + sizeof(std::pair<const uint64_t, Extent>);

 private:
  // Splits the run containing a (if any starts before a) so a run starts at a.
  void SplitAt(uint64_t a);
  std::map<uint64_t, Extent> m_;
  uint64_t mapped_ = 0;
};

}  // namespace cowstore::store
