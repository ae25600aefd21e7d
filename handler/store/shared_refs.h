// SPDX-License-Identifier: Apache-2.0
// Reference counts of shared physical grains, and only those
// (docs/design/store-v3.md, 3.2): an interval map phys -> (len, refs) whose
// records all have refs >= 2. A mapped grain with no record has one owner; an
// unmapped grain is free; SharedRefs cannot tell those two apart, the maps
// can. Unshared data, most of a pool, costs nothing here.
//
// Records are maximal: two adjacent records never have the same count (they
// would be one), so the state is canonical and the incremental result of any
// Inc/Dec sequence equals Rebuild from the maps that sequence produced.
//
// A counter per region of kRegionGrains (16 MiB of 4 KiB grains) says how
// many shared grains the region holds, so "may I write in place?" skips the
// tree when the region shares nothing (ZFS BRT's trick).
//
// Bound on counts: a grain's count is the number of logical grains, over all
// LUNs, that map it. Nothing else in the store bounds that below 2^32 (a LUN
// may be larger than the pool, and XCOPY may copy one grain to every LBA of
// it), so the bound is enforced here: at most max_refs (default kMaxRefs, the
// 32-bit count field of the packed record). Inc refuses what would pass it
// and changes nothing; Rebuild refuses maps that pass it.
//
// Storage: the packed B+tree of plan step 1 (run_tree.h) with kCounted runs
// (key phys, len, value refs): 16 bytes a record in 4 KiB leaves, ~16-25
// heap bytes a record measured by store_shared_refs_test (std::map took 64;
// the design's budget is 24). The tree merges equal neighbours on insert,
// which is what keeps the records maximal.
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "handler/store/extent_map.h"
#include "handler/store/grain_run.h"
#include "handler/store/run_tree.h"
#include "handler/store/status.h"

namespace cowstore::store {

// Grains [phys, phys+len) each have `refs` owners (>= 2).
struct SharedRecord {
  uint64_t phys = 0;
  uint64_t len = 0;
  uint64_t refs = 0;
  bool operator==(const SharedRecord&) const = default;
};

// A LUN's mapped logical grains split by whether their physical grain has
// other owners (v1's rule, LunInfo::exclusive_bytes/shared_bytes, per grain).
// A grain the LUN itself maps twice (XCOPY inside it) counts as shared.
struct LunShare {
  uint64_t exclusive = 0;
  uint64_t shared = 0;
  bool operator==(const LunShare&) const = default;
};

// The mapped runs SharedRefs::RebuildFrom sweeps, gathered LUN by LUN without
// copying what is in order already. The sweep needs every run by phys; a
// map keeps its runs by LBA, and in most LUNs those ascend in phys too
// (first writes take ascending grains), so such a map is read in place
// and only a LUN whose runs do not (overwrites, clones into it) has its
// runs copied as (phys, len) and sorted: at most 16 bytes a run of those
// LUNs, where one copy of every run, sorted whole, cost a page-faulting
// temporary the size of the maps (docs/design/store-v3.md step 7).
// RebuildFrom merges the LUNs' sequences. Holds pointers to the maps it is given: they
// must outlive it, unchanged.
class MappedRuns {
 public:
  // Adds a LUN's runs (lba -> phys, len in grains). False, adding nothing,
  // if one leaves a pool of pool_grains grains (the caller names the LUN).
  // Runs of no grains are skipped.
  bool AddLun(const ExtentMap& map, uint64_t pool_grains);
  bool AddLun(const std::vector<Run>& runs, uint64_t pool_grains);

 private:
  friend class SharedRefs;
  std::vector<const ExtentMap*> in_place_;    // maps whose runs ascend in phys
  std::vector<std::vector<GrainRun>> sorted_;  // the other LUNs' runs, sorted by phys
};

class SharedRefs {
 public:
  static constexpr uint64_t kRegionGrains = 4096;        // 16 MiB at 4 KiB
  static constexpr uint64_t kMaxPoolGrains = 1ull << 48;  // the packed 48-bit grain
  static constexpr uint64_t kMaxRefs = UINT32_MAX;        // the packed 32-bit count

  // A pool of pool_grains data grains (REQUIRES <= kMaxPoolGrains; max_refs
  // >= 2). Tests pass a small max_refs to reach the bound, and a small
  // inner_fanout (RunTree's) to grow the tree several levels.
  explicit SharedRefs(uint64_t pool_grains, uint64_t max_refs = kMaxRefs,
                      uint32_t inner_fanout = RunTree::kInnerFanout);

  // Rebuilds from every LUN's map (runs lba -> phys, len in grains) by one
  // sweep (RebuildFrom, every LUN's runs copied and sorted): O(E log E) for E runs. kCorruption if a run leaves the pool or a
  // grain would pass max_refs (the engine never produces either).
  static Result<SharedRefs> Rebuild(uint64_t pool_grains, const std::vector<std::vector<Run>>& luns,
                                    uint64_t max_refs = kMaxRefs);
  // The same from runs gathered by MappedRuns (each checked against
  // pool_grains there), merged by phys: O(E (log L + log D)) for E runs
  // in L sequences shared at most D deep (the heap of run ends holds D),
  // plus the sort of the LUNs MappedRuns copied. If `mapped` is
  // not null, it becomes the union of the runs (the mapped grains), in
  // order, touching runs merged, on success.
  static Result<SharedRefs> RebuildFrom(uint64_t pool_grains, const MappedRuns& runs, uint64_t max_refs = kMaxRefs,
                                        std::vector<GrainRun>* mapped = nullptr);
  // The pool grew to pool_grains grains (REQUIRES <= kMaxPoolGrains; a
  // smaller size changes nothing): the new grains share nothing. Only the
  // region counters grow; all-or-nothing under std::bad_alloc.
  void Grow(uint64_t pool_grains);
  // Allocates ahead the region counters a Grow to pool_grains needs, so that
  // Grow cannot throw; changes nothing visible (operator==, pool_grains(),
  // regions() stay as they were). std::bad_alloc if memory cannot.
  void ReserveRegions(uint64_t pool_grains);

  // [p, p+n) gains one owner (clone, XCOPY): grains without a record enter
  // with 2, records go up by one. kInvalidArgument, nothing changed, if the
  // range leaves the pool or a grain of it already has max_refs owners.
  // REQUIRES: every grain of the range is mapped.
  Status Inc(uint64_t p, uint64_t n);
  // [p, p+n) loses one owner (overwrite, unmap, delete): records at 2
  // disappear (one owner left), grains without a record are free now and are
  // appended to *freed (may be null) in ascending, merged runs.
  // REQUIRES: every grain of the range is mapped (inside the pool).
  // Both are all-or-nothing: if std::bad_alloc escapes, nothing changed
  // (nor *freed).
  void Dec(uint64_t p, uint64_t n, std::vector<GrainRun>* freed);

  // Count of grain p if shared (>= 2), else 0 (one owner, or free).
  uint64_t SharedCount(uint64_t p) const;
  // Whether any grain of [p, p+n) is shared: the in-place test. (Ranges are
  // clipped to the pool here and below: nothing beyond it is shared.) The region
  // counters answer without the tree when the range's regions share nothing.
  bool AnyShared(uint64_t p, uint64_t n) const;
  // Appends the records overlapping [p, p+n), clipped to it, in order.
  void Lookup(uint64_t p, uint64_t n, std::vector<SharedRecord>* out) const;
  // A LUN's runs intersected with the records: O(runs x log records).
  LunShare Usage(const std::vector<Run>& lun) const;

  // Shared grains in region r (0 beyond the pool).
  uint32_t RegionShared(uint64_t r) const { return r < regions_.size() ? regions_[r] : 0; }
  // Every region's counter, in region order (the check recounts them).
  const std::vector<uint32_t>& region_counters() const { return regions_; }
  uint64_t regions() const { return regions_.size(); }
  uint64_t pool_grains() const { return pool_grains_; }
  uint64_t max_refs() const { return max_refs_; }
  size_t records() const { return m_.size(); }
  uint64_t shared_grains() const { return shared_grains_; }
  // No grain has more owners than this: an upper bound (Rebuild sets it to
  // the highest count, Inc raises it, Dec leaves it), so that a caller
  // checking a count bound far above it (the 32-bit field's, in a pool)
  // needs no lookup at all.
  uint64_t count_bound() const { return count_bound_; }
  // Every record, in order (tests, check).
  std::vector<SharedRecord> All() const;

  // Bytes the records' tree holds (leaves and inner nodes, without malloc
  // headers); the region counters are regions() x 4 on top.
  size_t MemoryBytes() const { return m_.MemoryBytes(); }

  bool operator==(const SharedRefs& o) const;

 private:
  // kInvalidArgument past kMaxPoolGrains: Rebuild's and RebuildFrom's first check.
  static Status PoolBound(uint64_t pool_grains);
  // A record as a run of the tree: lba = phys, phys = refs, len = len.
  static SharedRecord Rec(const Run& r) { return {r.lba, r.len, r.phys}; }
  // Inc's and Dec's one pass over the records (shared_refs.cc says why):
  // Touch collects into touched_ the records [p, end) changes or may join
  // at its edges; PlanSpan(delta = +1 or -1) makes from them now_, the same
  // span's records as they will be, gaps_, the grains of [p, end) with no
  // record, and (Dec) gone_, the grains of [p, end) left with one owner.
  // False (Inc: a grain of [p, end) already has max_refs_ owners) leaves
  // them unfinished; nothing is changed either way.
  void Touch(uint64_t p, uint64_t end);
  bool PlanSpan(uint64_t p, uint64_t end, int delta);
  // The first key TryReplaceInLeaf replaces from for [p, end); touched_at_
  // is the first run starting there or after.
  uint64_t SpanStart(uint64_t p) const { return touched_.empty() ? p : std::min(p, touched_.front().lba); }
  // Inc and Dec where the span's new records do not fit in one leaf: split,
  // insert and join (each an O(log n) descent). gaps as gaps_.
  void IncSplitting(uint64_t p, uint64_t end, const std::vector<GrainRun>& gaps);
  void DecSplitting(uint64_t p, uint64_t end);
  // Splits the records at p and end, both or neither (std::bad_alloc).
  void SplitEdges(uint64_t p, uint64_t end);
  // Joins the record ending at x with the one starting there if their
  // counts are equal. Never allocates.
  void JoinAt(uint64_t x);
  // Adds delta to the counters of the regions [p, p+n) overlaps.
  void AddToRegions(uint64_t p, uint64_t n, int64_t delta);

  uint64_t pool_grains_;
  uint64_t max_refs_;
  RunTree m_{RunKind::kCounted};
  std::vector<uint32_t> regions_;
  uint64_t shared_grains_ = 0;
  uint64_t count_bound_ = 1;  // count_bound(): one owner until a record exists
  // Inc's and Dec's scratch (Touch, PlanSpan): kept to spare an allocation
  // a call; their contents mean nothing between calls.
  std::vector<Run> touched_, now_;
  RunTree::const_iterator touched_at_;  // Touch's first record (or the one after): TryReplaceInLeaf's hint
  std::vector<GrainRun> gaps_, gone_;
};

}  // namespace cowstore::store
