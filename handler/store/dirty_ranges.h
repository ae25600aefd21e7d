// SPDX-License-Identifier: Apache-2.0
// Dirty tracking for format v3's incremental checkpoint (docs/design/
// store-v3.md 3.4): the (LUN, key range)s whose map changed since the last
// checkpoint, keys being the map's (grains at v3). ApplyRecord's comment
// (meta.h) says what each record marks. The checkpoint rewrites exactly the
// leaves whose key range a dirty range touches (ckpt_tree.h) and reuses
// every other leaf by address. So a range left unmarked is a map change the
// next checkpoint silently drops: marking too much costs pages, too little
// loses data.
//
// Hand-over. When the engine freezes the maps for a checkpoint (takes the
// copy, under its metadata lock) it Take()s the set in the same step: the
// taken set is exactly what that copy changed, and marks made while the
// checkpoint runs go into the now empty set for the next one. If the
// checkpoint fails it Merge()s the taken set back. Never clear the set after
// the superblock is durable: that would drop the marks of changes made while
// the checkpoint ran, which the copy did not hold.
//
// Ranges are kept coalesced per LUN (touching ranges merge), one per run of a
// record at most. Bound: past kMaxRangesPerLun separate ranges in a LUN, its
// ranges (and its later marks) widen to aligned spans of 16x the keys, as
// often as it takes to halve them, up to the whole LUN; so the memory is
// O(kMaxRangesPerLun) per marked LUN, and a mark costs O(log of that).
// Widening only marks more (the writer rewrites leaves, ~224 runs each,
// which much finer ranges do not spare): it costs pages, never data.
//
// Not thread-safe: the engine guards it with its metadata lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace cowstore::store {

class DirtyRanges {
 public:
  static constexpr size_t kMaxRangesPerLun = 4096;

  // Marks [lba, lba + len) of `lun`, clipped to the 48-bit LBA bound; len 0
  // marks nothing.
  void Mark(uint32_t lun, uint64_t lba, uint64_t len);
  // Marks every LBA of `lun`.
  void MarkLun(uint32_t lun);
  // Whether any marked range of `lun` overlaps [first, end).
  bool Touches(uint32_t lun, uint64_t first, uint64_t end) const;
  bool empty() const { return luns_.empty(); }
  // Separate ranges held, over all LUNs (for the memory bound above).
  size_t ranges() const;
  // Separate ranges held for `lun`.
  size_t ranges(uint32_t lun) const;
  // Every marked range, leaving this set empty (see the hand-over above).
  DirtyRanges Take();
  // Marks every range of `taken` too: gives back a failed checkpoint's set.
  void Merge(const DirtyRanges& taken);

 private:
  struct Lun {
    std::map<uint64_t, uint64_t> ranges;  // first -> end, disjoint, not touching
    uint32_t shift = 0;                   // marks widen to aligned spans of 2^shift keys
  };
  static void Insert(Lun* l, uint64_t first, uint64_t end);
  static void Coarsen(Lun* l);

  std::map<uint32_t, Lun> luns_;
};

}  // namespace cowstore::store
