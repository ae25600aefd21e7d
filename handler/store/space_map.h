// SPDX-License-Identifier: Apache-2.0
// The space map: what each allocation unit (AU) of the pool is, how many LUN
// extents reference it, and which free AUs can be handed out.
//
// An AU moves kFree -> kReserved (an operation writes its data) -> mapped
// (refs > 0, state kNone) -> kPending (its last reference went in a record
// that is not durable yet) -> kFree again once that record is durable. A
// checkpoint's AUs are kMeta from TakeMeta or TakeMetaRun (handed over)
// until an InstallMeta: one whose set keeps them leaves them kMeta, a later
// one whose set drops them retires them through kPending, and one that
// does not use a handed-over AU makes it kFree at once (meta_turnover.h);
// GiveMetaRun also makes a handed-over run kFree at once. An AU that could
// not be zeroed is kQuarantine until the next open. Withhold moves a free
// run straight to kPending, releasing (the open's hold of a one-sync
// record's freed AUs), and Release makes it kFree as any other.
//
// Every number here is derived: open rebuilds it from the LUN maps and the
// checkpoint chain (Rebuild), so none of it is on disk.
//
// The engine sees it as a PoolSpace (pool_space.h, whose comments give each
// call's contract); what only this flat map has, the per-AU states, counts
// and free runs the check compares (state, all_states, all_refs, free), is
// below the overrides.
//
// Its unit is the pool's grain, the unit of sharing (Core::grain_,
// pool_impl.h): reference counts, the in-place rule, unshared marks,
// reservations and pending frees are per grain. It also hands out the
// checkpoint's AU-sized chunks (TakeMeta), so for now a unit is both, and
// Core runs every pool at grain == AU; "AU" below means that unit.
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "handler/store/meta.h"
#include "handler/store/pending_run.h"
#include "handler/store/pool_space.h"
#include "handler/store/soft_threshold.h"
#include "handler/store/status.h"

namespace cowstore::store {

// Free AUs as runs {first AU -> length}; every free AU reads as zeros.
class FreeRuns {
 public:
  // Adds [p, p+n), merging with the runs on either side. A new run's node
  // comes from `spare` if it holds one (then Add does not allocate), else
  // is allocated (which may throw, changing nothing).
  using Spare = std::map<uint64_t, uint64_t>;
  void Add(uint64_t p, uint64_t n, Spare* spare = nullptr);
  // Takes n AUs (next-fit from a cursor, preferring one run that holds all
  // of them); false if fewer than n are free (then nothing is taken).
  bool Take(uint64_t n, std::vector<uint64_t>* out);
  uint64_t count() const { return count_; }
  const std::map<uint64_t, uint64_t>& runs() const { return runs_; }
  void Clear() { runs_.clear(); count_ = 0; cursor_ = 0; }
  // The longest run (the lowest of equals): its first AU in *first and its
  // length cut to `max` (0 if nothing is free).
  uint64_t Longest(uint64_t max, uint64_t* first) const;
  // Takes the first n AUs of the run starting at p. REQUIRES: that run
  // holds n. Never allocates.
  void TakeFront(uint64_t p, uint64_t n);
  // Takes [p, p+n) out of the free runs: false, changing nothing, unless it
  // lies wholly inside one run. All-or-nothing under std::bad_alloc (the
  // node of a tail split off comes first).
  bool Remove(uint64_t p, uint64_t n);

 private:
  std::map<uint64_t, uint64_t> runs_;
  uint64_t count_ = 0;
  uint64_t cursor_ = 0;  // where the last Take ended: the next one starts here
};

// What each AU is, besides "mapped" (refs > 0).
enum class AuState : uint8_t {
  kNone = 0,     // mapped by some LUN (refs > 0), or leaked if refs == 0
  kFree,         // on the free list, reads as zeros
  kMeta,         // part of the current checkpoint
  kPending,      // unmapped; reusable once the freeing record is durable
  kReserved,     // allocated to an operation still writing its data
  kQuarantine,   // could not be zeroed; reclaimed at the next open
};

class SpaceMap final : public PoolSpace {
 public:
  // Rebuild's kCorruption: a map points at a checkpoint AU or a count
  // passes max_refs(). REQUIRES: every extent of `st` lies below `units`.
  Status Rebuild(uint64_t units, const MetaState& st, std::vector<uint64_t> ckpt_aus) override;
  // Reserves the per-AU vectors, so that Grow to `units` allocates at most
  // one free run's node (and, if that throws, changes nothing).
  Status ReserveIndex(uint64_t units) override;
  void Grow(uint64_t units) override;

  // Per AU: Inc and CanInc index the vectors (REQUIRES: runs within the pool).
  Status CanInc(std::span<const Run> runs) const override;
  // Per AU (REQUIRES: runs within the pool).
  LunShare Usage(const std::vector<Run>& runs) const override;
  Status Inc(uint64_t phys, uint64_t n) override;
  void Dec(uint64_t phys, uint64_t n, uint64_t tag) override;
  // Any AU may be asked: false for one that is not mapped.
  bool WritableInPlace(uint64_t p, uint64_t durable_ticket) const override;

  // The hint is ignored: an AU is the unit, so there is nothing to keep together.
  bool Reserve(uint64_t n, std::vector<uint64_t>* out, const AllocHint& hint = {}) override;
  bool ReserveKeepingAus(uint64_t n, uint64_t keep_aus, std::vector<uint64_t>* out,
                         const AllocHint& hint = {}) override {
    return HasRoomFor(*this, n, keep_aus) && Reserve(n, out, hint);
  }
  void ReturnHeld() override {}
  void ForgetLun(uint32_t /*lun*/) override {}
  void Mapped(const std::vector<uint64_t>& aus) override;
  void Unreserve(const std::vector<uint64_t>& aus, const std::vector<uint64_t>& unzeroed) override;

  bool has_pending() const override { return !pending_.empty() || releasing_ != 0; }
  std::vector<PendingRun> TakeReleasable(uint64_t durable_ticket) override;
  // REQUIRES: TryRelease(r, zeroed) would succeed (asserted, as GrainSpace
  // asserts FreeSpace::Release's Status).
  void Release(const PendingRun& r, bool zeroed) override;
  // Release, checked as FreeSpace::Release is: kInvalidArgument, changing
  // nothing, unless every AU of r is kPending (releasing, or still waiting
  // for its record: not told apart, see the .cc) and no more than are
  // releasing. All-or-nothing under std::bad_alloc.
  Status TryRelease(const PendingRun& r, bool zeroed);
  Status Withhold(const PendingRun& r) override;
  uint64_t releasing_units() const override { return releasing_; }

  bool TakeMeta(uint64_t n, std::vector<uint64_t>* out) override;
  Status InstallMeta(std::vector<uint64_t> new_set, uint64_t tag) override;
  const std::vector<uint64_t>& meta_aus() const override { return meta_aus_; }
  uint64_t TakeMetaRun(uint64_t max_aus, uint64_t* first_au) override;
  void GiveMetaRun(uint64_t first_au, uint64_t aus) noexcept override;
  // A free unit is a whole free AU here.
  uint64_t free_whole_aus(uint64_t limit) const override { return std::min(free_units(), limit); }

  void set_soft_percent(uint32_t percent) override { soft_percent_ = percent; }
  uint64_t soft_threshold_units() const override { return SoftThresholdUnits(total_units_, soft_percent_); }
  bool CrossedSoftThreshold(uint64_t free_before, uint64_t lent) const override;

  uint64_t units_per_au() const override { return 1; }
  uint64_t total_units() const override { return total_units_; }
  // Any AU may be asked: 0 for one that is not mapped.
  uint32_t refs(uint64_t p) const override { return refs_[p]; }
  uint32_t max_refs() const override { return max_refs_; }
  void set_max_refs(uint32_t m) override { max_refs_ = m; }
  uint64_t free_units() const override { return free_.count(); }
  uint64_t mapped_units() const override { return mapped_units_; }
  uint64_t shared_units() const override;
  uint64_t meta_units() const override { return meta_aus_.size() + handed_over_.size(); }
  uint64_t reserved_units() const override { return reserved_; }
  uint64_t pending_units() const override;
  uint64_t quarantined_units() const override { return quarantined_; }
  std::map<uint64_t, uint64_t> free_runs() const override { return free_.runs(); }

  // The flat map's own: every AU's state, and its count and state at once,
  // and the free list itself (for copying, e.g. by the check).
  AuState state(uint64_t p) const { return state_[p]; }
  const std::vector<uint32_t>& all_refs() const { return refs_; }
  const std::vector<AuState>& all_states() const { return state_; }
  const FreeRuns& free() const { return free_; }

 private:
  // Takes n free AUs into state `as`, appending them to *out.
  bool TakeFree(uint64_t n, AuState as, std::vector<uint64_t>* out);
  // The opening check of Withhold and TryRelease: kInvalidArgument, as
  // "<what> AUs P+N: <why>", unless r lies in the pool and every AU of it
  // is in state `want` (else <why> is `not_want`).
  Status CheckRunState(const PendingRun& r, AuState want, const char* what, const char* not_want) const;

  uint64_t total_units_ = 0;
  std::vector<uint32_t> refs_;
  std::vector<AuState> state_;
  FreeRuns free_;
  std::vector<uint64_t> meta_aus_;     // the current checkpoint's AUs, in the format's order
  std::vector<uint64_t> handed_over_;  // kMeta AUs taken since the last InstallMeta
  std::vector<PendingRun> pending_;
  // AUs whose reference count fell to 1 in a record not yet durable, with
  // that record's ticket: they must not be overwritten in place before it.
  std::unordered_map<uint64_t, uint64_t> unshared_;
  uint64_t releasing_ = 0;  // taken by TakeReleasable or Withhold, not yet Released
  uint64_t reserved_ = 0, quarantined_ = 0, mapped_units_ = 0;
  uint32_t soft_percent_ = 0;
  uint32_t max_refs_ = kMaxRefs;
};

}  // namespace cowstore::store
