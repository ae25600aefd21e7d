// SPDX-License-Identifier: Apache-2.0
// Dirty tracking for format v3's incremental checkpoint (docs/design/
// store-v3.md 3.4): the (LUN, LBA range)s whose map changed since the last
// checkpoint. The engine marks what each applied record touches (a write,
// unmap, clone destination, rollback: the range it remaps; a LUN created,
// deleted or replaced: the whole LUN); the checkpoint rewrites exactly the
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
// Ranges are kept coalesced per LUN (touching ranges merge), so the memory is
// O(separate ranges), at most one per applied record between checkpoints.
//
// Not thread-safe: the engine guards it with its metadata lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace cowstore::store {

class DirtyRanges {
 public:
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
  // Every marked range, leaving this set empty (see the hand-over above).
  DirtyRanges Take();
  // Marks every range of `taken` too: gives back a failed checkpoint's set.
  void Merge(const DirtyRanges& taken);

 private:
  std::map<uint32_t, std::map<uint64_t, uint64_t>> luns_;  // lun -> first -> end, disjoint, not touching
};

}  // namespace cowstore::store
