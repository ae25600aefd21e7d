// SPDX-License-Identifier: Apache-2.0
// Format v3's space map (docs/design/store-v3.md 3.2-3.5): a PoolSpace
// (pool_space.h) like the flat SpaceMap (space_map.h), kept in grains over
// FreeSpace (free grains as runs; reserve/pending/releasing/quarantine counts)
// and SharedRefs (counts of grains with two owners or more). Nothing here is
// per grain or per AU: RAM follows what is free, shared or in flight, never
// the pool's size (store_grain_space_test measures it).
//
// Units. Every count, grain number and run is in grains, except the
// checkpoint's chunks: TakeMeta, InstallMeta, meta_aus and Rebuild's
// `ckpt_aus` name whole AUs (AU a is grains [a*g, (a+1)*g), g =
// grains_per_au()), because that is what the checkpoint chain writes and the
// superblock names. At grain == AU (the differential test) the two coincide.
//
// Where it differs from SpaceMap, and why (each rule is tested):
// 1. A mapped grain with one owner is recorded nowhere: it is the grain that
//    is neither free (FreeSpace's index), reserved, pending, releasing,
//    quarantined nor metadata, and has no SharedRefs record. So refs(p) and
//    WritableInPlace(p) answer only for grains a LUN maps (and reserved
//    ones): the only grains Core asks about (data_path.cc, lun_table.cc).
//    SpaceMap answers 0 / false for any other unit; telling a releasing or
//    quarantined grain from a mapped one would need the per-grain state
//    v3 removes.
// 2. There is no per-unit state: state(), all_states(), all_refs() and
//    free() (FreeRuns) have no equivalent. The check compares shared() with
//    SharedRefs::Rebuild of the maps and the counts with a recount instead;
//    recovery punches free_runs().
// 3. Metadata chunks are whole, AU-aligned AUs carved out of the grain space
//    (3.4 "Where pages go"): TakeMeta takes only AUs all of whose grains are
//    free, from the longest free runs first (so chunks are sequential), and
//    never grains past the last whole AU. So TakeMeta(n) may refuse while
//    free_units() >= n * grains_per_au() (free grains scattered); at
//    grain == AU it refuses exactly when SpaceMap does.
// 4. Which free grains Reserve and TakeMeta pick differs (FreeSpace's
//    goal/best-fit policy, not SpaceMap's next-fit cursor); counts, success
//    and every per-grain answer agree.
// 5. Grow cannot be made infallible by ReserveIndex: FreeRunIndex::Insert of
//    the new grains may need a tree node (a new run, or the merged last run
//    moving to a higher size class), and RunTree has no public way to hold one
//    ahead. What ReserveIndex allocates ahead is the only structure that
//    grows with the pool, SharedRefs' region counters (4 bytes per 16 MiB).
//    So Core's Grow, which calls Grow after the superblock names the new
//    size, must treat a throw there as it treats a failed superblock write
//    (fail the pool: reopening indexes the new size), or the lead's wiring
//    gives RunTree a spare-node reserve (the one change that makes Grow
//    infallible).
// 6. max_refs must be >= 2 (a count of 1 is an unshared grain: SharedRefs
//    records start at 2). Inc and CanInc check range bounds (kInvalidArgument
//    beyond the pool) where SpaceMap indexes out of bounds; Rebuild refuses
//    checkpoint AUs outside the pool or named twice, and leaves the previous
//    state whole when it refuses.
// 7. Reserve with a hint naming a LUN serves requests smaller than an AU
//    from that (LUN, region)'s chunk (FreeSpace, store-v3.md 3.5): a chunk
//    holds up to an AU of free grains out of the index, so it may split the
//    whole AUs a checkpoint needs. Those grains count as free; whenever
//    whole AUs fall short (HasRoomFor, TakeMeta, TakeMetaRun) the chunks
//    give them back first (ReturnHeld), so no answer depends on what chunks
//    hold. And ReserveKeepingAus uses the hint only while at least
//    2 x keep_aus + kChunkSlackAus whole AUs are free: in a pool short of
//    them, the chunks give their grains back and data fills the free runs
//    best-fit (split AUs first) instead of breaking whole AUs up for
//    locality. Without a LUN, requests come from the index like metadata.
// 8. std::bad_alloc. Reserve, Mapped, TakeMeta, ReserveIndex, Grow and
//    Rebuild are all-or-nothing: output room and reservation nodes are
//    allocated before anything changes, and TakeMeta/Reserve give back what
//    they took from FreeSpace if a later step throws. Two windows remain:
//    - that give-back re-inserts runs into the free index, which may itself
//      need a node; if it throws too, those grains stay counted reserved and
//      in no reservation: lost to allocation until the next open's Rebuild,
//      never handed out twice. ReserveKeepingAus gives nothing back when
//      Reserve's own plan avoids the AUs it keeps (the usual case); only a
//      plan that would split them takes them out of the index for the call
//      and keeps this window.
//    - Unreserve gives back run by run (each whole): a throw leaves the
//      runs before it free and the rest reserved, every grain in exactly one
//      place; the rest stay reserved (counted) until the next open.
//    Inc, Dec and InstallMeta change several structures run by run and are
//    not all-or-nothing (SharedRefs' Inc/Dec and FreeSpace's Free each are,
//    per run). Core calls Inc/Dec only inside ApplyRecord, whose catch fails
//    the pool (pool_impl.cc, Core::AppendLocked: meta_failed_, queue_.Fail),
//    and reopening rebuilds everything from the maps; InstallMeta gets the
//    same treatment (checkpoint.cc, Core::CheckpointLocked: any failed
//    checkpoint fails the pool).
// 9. For Core's wiring: at grain < AU, data reservations can leave no whole
//    free AU while many grains are free, so TakeMeta can fail where
//    free_units() promised room. Core's affordability (AffordableLocked,
//    AffordableToFreeLocked) therefore asks HasRoomFor (pool_space.h): the
//    checkpoint's share in whole free AUs (free_whole_aus(k) >= k for
//    k = CkptUnits(...)) and only the data's in free_units() less those
//    AUs' grains; and Core reserves data with ReserveKeepingAus(n, k), which
//    sets k whole AUs aside (the longest runs' last ones), so no data grain
//    splits them (a plain Reserve may: FreeSpace prefers one run that holds
//    all n).
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "handler/store/free_space.h"
#include "handler/store/meta.h"
#include "handler/store/pending_run.h"
#include "handler/store/pool_space.h"
#include "handler/store/range_values.h"
#include "handler/store/shared_refs.h"
#include "handler/store/soft_threshold.h"
#include "handler/store/status.h"

namespace cowstore::store {

// Where a GrainSpace says each grain is, copied for the check (check.cc,
// grain_check.h) under the pool's locks: every located state as runs, and
// every count. Releasing and quarantined grains are counts only (FreeSpace
// keeps no runs of them). All in grains, but the checkpoint's AUs.
struct GrainCensus {
  uint64_t total = 0, grains_per_au = 1;
  std::vector<SharedRecord> shared;     // SharedRefs' records, in order
  uint64_t shared_grains = 0;           // SharedRefs::shared_grains()
  std::vector<uint32_t> region_shared;  // SharedRefs' region counters
  uint64_t mapped = 0;                  // mapped_units()
  std::vector<GrainRun> free_runs;      // the free index, in order
  std::vector<GrainRun> chunk_runs;     // free grains held in LUN chunks, in order
  uint64_t free = 0;                    // free_units(): both of the above
  std::vector<uint64_t> meta_aus;       // the current checkpoint's AUs
  std::vector<uint64_t> handed_over;    // AUs TakeMeta handed over since
  uint64_t meta = 0;                    // meta_units()
  // Reserved grains with their owners so far (0; 1 once a record mapped
  // them, before Mapped), in order.
  struct Reserved {
    GrainRun run;
    uint64_t owners = 0;
    bool operator==(const Reserved&) const = default;
  };
  std::vector<Reserved> reserved_runs;
  uint64_t reserved = 0;                // reserved_units()
  std::vector<PendingRun> pending_runs; // waiting for their ticket, in order
  uint64_t pending = 0;                 // of those (pending_units() less releasing)
  std::vector<PendingRun> releasing_runs;    // being punched, in order
  std::vector<PendingRun> quarantined_runs;  // failed to zero, in order
  uint64_t releasing = 0, quarantined = 0;
  // FreeRunIndex::Check() of the free index (its size classes, which
  // allocation reads, against by offset): empty when they agree.
  std::string index_problem;
};

class GrainSpace final : public PoolSpace {
 public:
  // REQUIRES: GrainRule(grain_bytes, au_bytes) holds (names.h).
  GrainSpace(uint64_t grain_bytes, uint64_t au_bytes);

  // Rebuilds everything from the LUN maps of `st` (runs in grains) and the
  // checkpoint's AUs, over `grains` grains: grains neither mapped nor
  // metadata become free. kCorruption, changing nothing, if a map run leaves
  // the pool or covers a checkpoint AU, a checkpoint AU is outside the pool
  // or named twice, or a count passes max_refs().
  Status Rebuild(uint64_t grains, const MetaState& st, std::vector<uint64_t> ckpt_aus) override;
  // The most grains a pool may have (the packed record's 48-bit grain):
  // Rebuild refuses more, so ReserveIndex refuses to grow past it.
  static constexpr uint64_t kMaxGrains = SharedRefs::kMaxPoolGrains;
  // Whole free AUs beyond twice the checkpoint's below which no new chunk
  // opens (rule 7).
  static constexpr uint64_t kChunkSlackAus = 4;
  // Allocates ahead what a Grow to `grains` grains needs that scales with
  // the pool (the region counters; see rule 5 above), changing nothing
  // visible. kInvalidArgument, changing nothing, past kMaxGrains: a pool
  // must never be grown to a size it cannot reopen. kNoSpace
  // (IndexOutOfMemory), changing nothing, if memory cannot hold the counters.
  Status ReserveIndex(uint64_t grains) override;
  // The pool grew to `grains` grains; the new ones are free.
  // REQUIRES: ReserveIndex(grains) succeeded.
  void Grow(uint64_t grains) override;

  // Reference counts, as records are applied; `tag` as in SpaceMap. Inc of a
  // reserved grain takes it from 0 to 1 owner (a fresh grain mapped by its
  // record), of a mapped grain from k to k+1 (clone, XCOPY). Inc refuses
  // with kInvalidArgument, changing nothing, a range leaving the pool or an
  // increment past max_refs(); CanInc answers the same for several runs at
  // once (a grain gains one reference per run naming it).
  // REQUIRES (Inc): every grain is mapped or reserved. (Dec): mapped, not
  // reserved (Core calls Mapped right after the record that maps them).
  Status CanInc(std::span<const Run> runs) const override;
  Status Inc(uint64_t phys, uint64_t n) override;
  void Dec(uint64_t phys, uint64_t n, uint64_t tag) override;
  // True if grain p may be overwritten in place: one owner, and no state
  // newer than `durable_ticket` on disk still shares it.
  // REQUIRES: p is mapped (rule 1 above).
  bool WritableInPlace(uint64_t p, uint64_t durable_ticket) const override;

  // Reservations, as SpaceMap's (grain numbers in, grain numbers out).
  bool Reserve(uint64_t n, std::vector<uint64_t>* out, const AllocHint& hint = {}) override;
  // Sets keep_aus whole free AUs aside (the longest runs' last ones, where
  // data does not go first), reserves from the rest. When the grains Reserve would pick lie outside those AUs (the
  // usual case: best fit against PlanMeta's longest runs) it takes exactly
  // them, all or nothing under std::bad_alloc with nothing to give back;
  // else the AUs leave the free index for the call and are given back
  // after, which keeps rule 8's give-back window.
  bool ReserveKeepingAus(uint64_t n, uint64_t keep_aus, std::vector<uint64_t>* out,
                         const AllocHint& hint = {}) override;
  void ReturnHeld() override { free_.ReturnChunkGrains(); }
  void ForgetLun(uint32_t lun) override { free_.CloseChunk(lun); }
  void Mapped(const std::vector<uint64_t>& grains) override;
  void Unreserve(const std::vector<uint64_t>& grains, const std::vector<uint64_t>& unzeroed) override;

  // Pending frees, as SpaceMap's: runs of grains, in grain order, merged
  // where contiguous.
  bool has_pending() const override { return free_.has_pending(); }
  std::vector<PendingRun> TakeReleasable(uint64_t durable_ticket) override;
  void Release(const PendingRun& r, bool zeroed) override;
  Status Withhold(const PendingRun& r) override { return free_.Withhold(r); }
  uint64_t releasing_units() const override { return free_.releasing_grains(); }

  // Checkpoint chunks, in AUs (rule 3 above), as PoolSpace's: TakeMeta
  // takes n whole free AUs (false, taking nothing, if fewer are) and hands
  // them over; InstallMeta keeps, retires (pending under `tag`) and frees
  // at once by meta_turnover.h's rule.
  bool TakeMeta(uint64_t n, std::vector<uint64_t>* out) override;
  Status InstallMeta(std::vector<uint64_t> new_set, uint64_t tag) override;
  const std::vector<uint64_t>& meta_aus() const override { return meta_aus_; }
  // The longest whole free AUs of one free run (rule 3: AU-aligned).
  uint64_t TakeMetaRun(uint64_t max_aus, uint64_t* first_au) override;
  void GiveMetaRun(uint64_t first_au, uint64_t aus) noexcept override;
  // PoolSpace::free_whole_aus (rule 9). O(free runs visited):
  // longest first, so usually a few.
  uint64_t free_whole_aus(uint64_t limit) const override { return PlanMeta(limit, nullptr); }

  // Soft threshold (a percentage of the pool's grains; 0: none), as
  // SpaceMap's: the rule is soft_threshold.h's.
  void set_soft_percent(uint32_t percent) override { soft_percent_ = percent; }
  uint64_t soft_threshold_units() const override { return SoftThresholdUnits(total_, soft_percent_); }
  bool CrossedSoftThreshold(uint64_t free_before, uint64_t lent) const override {
    return SoftThresholdCrossed(total_, soft_percent_, free_before, free_.free_grains(),
                                free_.releasing_grains() + lent);
  }

  uint64_t units_per_au() const override { return grains_per_au_; }
  uint64_t total_units() const override { return total_; }
  // Owners of grain p: 0 for a reserved grain no record maps yet.
  // REQUIRES: p is mapped or reserved (rule 1 above).
  uint32_t refs(uint64_t p) const override;
  uint32_t max_refs() const override { return max_refs_; }
  // Tests lower the bound to reach it (default kMaxRefs). REQUIRES: m >= 2.
  void set_max_refs(uint32_t m) override;
  // Grains of the mapped runs with other owners, and the rest (v3's answer
  // to the per-unit `refs(p) > 1` loops in Core: O(runs x log records)).
  LunShare Usage(const std::vector<Run>& runs) const override { return shared_.Usage(runs); }

  // Counts, all in grains. meta_units: the current checkpoint's AUs and
  // those handed over since, times grains_per_au().
  uint64_t free_units() const override { return free_.free_grains(); }
  uint64_t mapped_units() const override { return mapped_; }
  uint64_t shared_units() const override { return shared_.shared_grains(); }
  uint64_t meta_units() const override { return (meta_aus_.size() + handed_over_.size()) * grains_per_au_; }
  uint64_t reserved_units() const override { return free_.reserved_grains(); }
  uint64_t pending_units() const override { return free_.pending_grains(); }
  uint64_t quarantined_units() const override { return free_.quarantined_grains(); }
  // Every free run, start -> length (a copy: recovery punches them, the
  // check compares them).
  std::map<uint64_t, uint64_t> free_runs() const override { return free_.index().by_offset(); }

  uint64_t grain_bytes() const { return grain_bytes_; }
  uint64_t au_bytes() const { return au_bytes_; }
  uint64_t grains_per_au() const { return grains_per_au_; }
  const SharedRefs& shared() const { return shared_; }
  const FreeSpace& free_space() const { return free_; }
  // Zeroed-ahead free runs (FreeSpace::AddWarm): Core's zeroing ahead adds
  // them, new chunks open on them.
  void AddWarm(const GrainRun& r) noexcept { free_.AddWarm(r); }
  // Everything the check places grains by (a copy: O(runs + regions)).
  GrainCensus Census() const;
  // Heap bytes the structures hold that stay with the pool (the free
  // indexes, the shared records, the region counters); the in-flight sets
  // (reservations, marks, pending frees) are counted by a heap measure only.
  size_t MemoryBytes() const;
  // The grains (Reserve's output) in sorted, merged runs.
  static std::vector<GrainRun> ToRuns(std::vector<uint64_t> grains);

 private:
  // kInvalidArgument unless [phys, phys+n) lies in the pool.
  Status CheckRange(uint64_t phys, uint64_t n) const;
  Status Overflow(uint64_t p, uint64_t refs) const;
  // Plans (changing nothing) up to n whole free AUs for TakeMeta, appending
  // them as runs of AUs to *plan (may be null); returns how many it found.
  // from_end: each run's last whole AUs rather than its first.
  uint64_t PlanMeta(uint64_t n, std::vector<GrainRun>* plan, bool from_end = false) const;
  // Puts runs taken by FreeSpace::TakeRun and used for nothing back.
  void GiveBack(const std::vector<GrainRun>& taken);

  uint64_t grain_bytes_, au_bytes_, grains_per_au_;
  uint64_t total_ = 0;
  FreeSpace free_;
  SharedRefs shared_;
  // Reserved grains -> owners so far (0, or 1 once a record mapped them).
  RangeValues reserved_;
  // Grains whose count fell to 1 in a record not yet durable -> its ticket:
  // they must not be overwritten in place before it is (v1's rule, by range).
  RangeValues unshared_;
  std::vector<uint64_t> meta_aus_;     // the current checkpoint's AUs, in the format's order
  std::vector<uint64_t> handed_over_;  // AUs TakeMeta took since the last InstallMeta
  uint64_t mapped_ = 0;             // grains with one owner or more
  uint32_t soft_percent_ = 0;
  uint32_t max_refs_ = kMaxRefs;
};

}  // namespace cowstore::store
