// SPDX-License-Identifier: Apache-2.0
// A LUN's map from logical grains to physical ones (allocation units at
// formats 1 and 2), kept as non-overlapping runs (extents): lba -> {phys,
// len}, in grains. Adjacent runs that are also physically contiguous are
// merged, so a sequentially written or cloned range stays one extent and
// range operations cost O(extents).
//
// Held in a packed run tree (run_tree.h, ~16-24 bytes an extent). Every run
// of a map obeys one rule (Valid), with the map's physical bound max_phys:
//   1 <= len,  lba + len <= kMaxLba (2^48),  phys + len <= max_phys.
// The bound is a parameter of the map, set when it is made and only ever
// raised (RaiseBound): kMaxPhys (2^32 AUs, v1/v2's kMaxPoolUnits) by
// default; a v3 pool's maps count grains and are bounded by the pool's
// grains (MetaState::max_phys, raised when the pool grows), up to RunTree's
// limits (kMaxPhysLimit = 2^48, runs of at most RunTree::kMaxLen = 2^32
// units). Recovery checks the same rule before a decoded run reaches a map,
// and Insert checks it again.
//
// With max_phys <= 2^32 (every v1/v2 map) a valid run packs, and so does any
// merge of two of them: a merged run covers one contiguous physical range
// below max_phys, so its length is at most 2^32 (RunTree::kMaxLen), and one
// contiguous logical range below kMaxLba. So Insert of a valid run into a map
// of valid runs cannot fail. Above 2^32 the rule also bounds each run to
// 2^32 units, and a merge of two such runs could exceed it: RunTree then
// keeps the neighbours apart (two runs where one would not pack), so Insert
// of a valid run still cannot fail.
//
// Why every run is valid: at run time a LUN maps units (AUs; grains at
// format 3) below its size onto units of the pool below max_phys. CreateLun
// and ResizeLun bound the size by the pool's (LUN units <= 1024 x pool
// units, lun_table.cc): below 2^42 at formats 1 and 2, whose pools hold at
// most kMaxPoolUnits = 2^32 (meta.h); format 3 also by LunBlocksRule (at
// most 2^48 blocks, so no more grains), and its max_phys is the pool's
// grains. A run built from other runs (clone, snapshot, rollback) covers a
// subrange of them, shifted to a destination the caller checked. Recovery
// refuses with kCorruption any decoded run that breaks the rule, before it
// reaches a map (ApplyRecord, DecodeState; format 3's replay checks
// LunBlocksRule first, RecordLunBlocksRule). Insert checks the rule anyway
// and refuses, changing nothing: the handler runs inside tcmu-runner and
// must never abort on what it was given.
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/run_tree.h"  // Run
#include "handler/store/status.h"

namespace cowstore::store {

class ExtentMap {
 public:
  struct Extent {
    uint64_t phys;
    uint64_t len;
  };
  using Entry = std::pair<uint64_t, Extent>;  // lba -> extent

  static constexpr uint64_t kMaxLba = RunTree::kMaxKey;  // lba + len bound
  // v1/v2's physical bound (AUs; meta.h's kMaxPoolUnits), the default.
  static constexpr uint64_t kMaxPhys = uint64_t{1} << 32;
  // The largest bound a map can be given: RunTree's packing limit.
  static constexpr uint64_t kMaxPhysLimit = RunTree::kMaxKey;
  static_assert(kMaxPhys <= RunTree::kMaxLen && kMaxPhys <= RunTree::kMaxKey,
                "a merge of valid v1/v2 runs must pack");

  // A bound as a map takes it: clamped into [1, kMaxPhysLimit].
  static constexpr uint64_t ClampedBound(uint64_t max_phys) {
    return max_phys == 0 ? 1 : max_phys > kMaxPhysLimit ? kMaxPhysLimit : max_phys;
  }
  // A map whose runs end at or below max_phys physical units (ClampedBound).
  explicit ExtentMap(uint64_t max_phys = kMaxPhys) : max_phys_(ClampedBound(max_phys)) {}

  // The rule above, for a map of bound max_phys (default: v1/v2's). Empty if
  // [lba, lba+len) -> [phys, ...) obeys it, else which bound it breaks, for
  // an error message.
  static std::string OutOfRange(uint64_t lba, uint64_t phys, uint64_t len,
                                uint64_t max_phys = kMaxPhys);
  static bool Valid(uint64_t lba, uint64_t phys, uint64_t len, uint64_t max_phys = kMaxPhys) {
    return len >= 1 && lba <= kMaxLba && len <= kMaxLba - lba && phys <= max_phys &&
           len <= max_phys - phys && len <= RunTree::kMaxLen;
  }
  // The same, with this map's bound.
  std::string Refusal(uint64_t lba, uint64_t phys, uint64_t len) const {
    return OutOfRange(lba, phys, len, max_phys_);
  }
  bool Holds(uint64_t lba, uint64_t phys, uint64_t len) const {
    return Valid(lba, phys, len, max_phys_);
  }
  uint64_t max_phys() const { return max_phys_; }
  // Raises the bound (never lowers it; ClampedBound): a map made under the
  // pool's grains of then maps whatever grains the pool grows to later.
  void RaiseBound(uint64_t max_phys) { max_phys_ = std::max(max_phys_, ClampedBound(max_phys)); }

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
      const_iterator() = default;
      Entry operator*() const {
        Run r = *it_;
        return {r.lba, Extent{r.phys, r.len}};
      }
      pointer operator->() const { return {**this}; }
      const_iterator& operator++() {
        ++it_;
        return *this;
      }
      bool operator==(const const_iterator& o) const { return it_ == o.it_; }

     private:
      friend class Runs;
      explicit const_iterator(RunTree::const_iterator it) : it_(it) {}
      RunTree::const_iterator it_;
    };
    const_iterator begin() const { return const_iterator(m_->tree_.begin()); }
    const_iterator end() const { return const_iterator(m_->tree_.end()); }
    size_t size() const { return m_->extents(); }
    bool empty() const { return size() == 0; }

   private:
    friend class ExtentMap;
    explicit Runs(const ExtentMap* m) : m_(m) {}
    const ExtentMap* m_;
  };

  // Appends the mapped parts of [a, a+n) to *out, clipped, in order.
  void Lookup(uint64_t a, uint64_t n, std::vector<Run>* out) const;
  // Calls fn(run) for the same parts, in order, until fn returns false:
  // Lookup without the copy, for callers that read many runs once (the
  // checkpoint's leaves).
  template <typename Fn>
  void Visit(uint64_t a, uint64_t n, Fn fn) const {
    if (n == 0) return;
    const uint64_t end = a + n;
    for (auto it = tree_.FirstEndingAfter(a); it != tree_.end(); ++it) {
      const Run r = *it;
      if (r.lba >= end) break;
      const uint64_t s = std::max(a, r.lba);
      const uint64_t e = std::min(end, r.lba + r.len);
      if (!fn(Run{s, r.phys + (s - r.lba), e - s})) return;
    }
  }
  // Whether any unit of [a, a+n) is mapped (one descent, no copy).
  bool AnyMapped(uint64_t a, uint64_t n) const {
    bool any = false;
    Visit(a, n, [&any](const Run&) { return !(any = true); });
    return any;
  }
  // Unmaps [a, a+n); appends what was mapped there to *removed (may be null).
  void Remove(uint64_t a, uint64_t n, std::vector<Run>* removed);
  // Maps [lba, lba+len) -> [phys, ...). REQUIRES: that range is unmapped.
  // kInvalidArgument, nothing changed, if the run breaks the rule above with
  // this map's bound (callers check first: recovery refuses such runs as
  // corruption).
  Status Insert(uint64_t lba, uint64_t phys, uint64_t len);
  // Physical unit of logical unit a, or kUnmapped.
  uint64_t Find(uint64_t a) const;
  size_t extents() const { return tree_.size(); }
  uint64_t mapped_units() const { return mapped_; }
  Runs runs() const { return Runs(this); }
  // Unmaps everything; the bound stays.
  void Clear();

  static constexpr uint64_t kUnmapped = ~uint64_t{0};
  // Heap bytes per extent at the tree's lowest fill after inserts (2/3 of a
  // leaf), for space reporting. Loads in key order pack ~16.
  static constexpr size_t kBytesPerExtent = RunTree::kLeafBytes * 3 / (2 * RunTree::kLeafRuns);

 private:
  RunTree tree_;
  uint64_t mapped_ = 0;
  uint64_t max_phys_;  // the rule's physical bound; copied with the map
};

}  // namespace cowstore::store
