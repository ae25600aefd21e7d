// SPDX-License-Identifier: Apache-2.0
// The space map: what each allocation unit (AU) of the pool is, how many LUN
// extents reference it, and which free AUs can be handed out.
//
// An AU moves kFree -> kReserved (an operation writes its data) -> mapped
// (refs > 0, state kNone) -> kPending (its last reference went in a record
// that is not durable yet) -> kFree again once that record is durable. A
// checkpoint's AUs are kMeta until the next checkpoint retires them through
// kPending. An AU that could not be zeroed is kQuarantine until the next open.
//
// Every number here is derived: open rebuilds it from the LUN maps and the
// checkpoint chain (Rebuild), so none of it is on disk.
//
// Its unit is the pool's grain, the unit of sharing (Core::grain_,
// pool_impl.h): reference counts, the in-place rule, unshared marks,
// reservations and pending frees are per grain. It also hands out the
// checkpoint's AU-sized chunks (TakeMeta), so for now a unit is both, and
// Core runs every pool at grain == AU; "AU" below means that unit.
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "handler/store/meta.h"
#include "handler/store/status.h"

namespace cowstore::store {

// Free AUs as runs {first AU -> length}; every free AU reads as zeros.
class FreeRuns {
 public:
  // Adds [p, p+n), merging with the runs on either side.
  void Add(uint64_t p, uint64_t n);
  // Takes n AUs (next-fit from a cursor, preferring one run that holds all
  // of them); false if fewer than n are free (then nothing is taken).
  bool Take(uint64_t n, std::vector<uint64_t>* out);
  uint64_t count() const { return count_; }
  const std::map<uint64_t, uint64_t>& runs() const { return runs_; }
  void Clear() { runs_.clear(); count_ = 0; cursor_ = 0; }

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

// AUs [phys, phys+n) freed by the record with ticket `tag`.
struct PendingRun {
  uint64_t phys, n, tag;
};

class SpaceMap {
 public:
  // Rebuilds everything from the LUN maps of `st` and the checkpoint's AUs,
  // over `units` AUs: AUs neither mapped nor metadata become free.
  // kCorruption if a map points at a checkpoint AU or a count overflows.
  // REQUIRES: every extent of `st` lies below `units`.
  Status Rebuild(uint64_t units, const MetaState& st, std::vector<uint64_t> ckpt_aus);
  // Allocates the index for `units` AUs without changing anything, so that a
  // Grow to that size cannot fail (throws std::bad_alloc if memory cannot).
  void ReserveIndex(uint64_t units);
  // The pool grew to `units` AUs; the new ones are free.
  void Grow(uint64_t units);

  // Reference counts, as records are applied. `tag` is the ticket of the
  // record that drops the references: AUs it frees stay kPending, and AUs it
  // leaves with one reference stay "shared on disk", until it is durable.
  //
  // A count is 32 bits, and nothing else bounds it (XCOPY may copy one AU to
  // every AU of a LUN, and LUNs may be clones of clones): Inc refuses with
  // kInvalidArgument, changing nothing, an increment that would take an AU
  // past max_refs(); CanInc answers the same for several runs at once, an AU
  // gaining one reference per run that names it (so a record that increments
  // run by run can be refused before any of it is applied). Rebuild refuses
  // maps that pass the bound.
  static constexpr uint32_t kMaxRefs = UINT32_MAX;
  Status CanInc(const std::vector<Run>& runs) const;
  Status Inc(uint64_t phys, uint64_t n);
  void Dec(uint64_t phys, uint64_t n, uint64_t tag);
  // True if AU p may be overwritten in place: one reference, and no state
  // newer than `durable_ticket` on disk still shares it.
  bool WritableInPlace(uint64_t p, uint64_t durable_ticket) const;

  // Reservations. Reserve takes n free AUs for an operation (false, taking
  // nothing, if fewer are free); Mapped says a record now maps them;
  // Unreserve gives back those the operation did not use, `unzeroed` being
  // the ones that could not be zeroed (they go to quarantine).
  bool Reserve(uint64_t n, std::vector<uint64_t>* out);
  void Mapped(const std::vector<uint64_t>& aus);
  void Unreserve(const std::vector<uint64_t>& aus, const std::vector<uint64_t>& unzeroed);

  // Pending frees. TakeReleasable removes and returns the runs freed by
  // records up to ticket `durable_ticket` (in AU order, merged where
  // contiguous), and forgets the shared-on-disk marks that ticket resolves;
  // the AUs stay kPending (counted as releasing) until Release returns each
  // run to the free list, or to quarantine if it could not be zeroed.
  // has_pending: some AUs will become free without any new record.
  bool has_pending() const { return !pending_.empty() || releasing_ != 0; }
  std::vector<PendingRun> TakeReleasable(uint64_t durable_ticket);
  void Release(const PendingRun& r, bool zeroed);
  uint64_t releasing_units() const { return releasing_; }

  // Checkpoint AUs. TakeMeta takes n free AUs for a new checkpoint;
  // InstallMeta makes `aus` the current checkpoint and retires the previous
  // one through the pending path, reusable once ticket `tag` is durable.
  bool TakeMeta(uint64_t n, std::vector<uint64_t>* out);
  void InstallMeta(std::vector<uint64_t> aus, uint64_t tag);
  const std::vector<uint64_t>& meta_aus() const { return meta_aus_; }

  // Soft threshold (a percentage of the pool; 0: none).
  void set_soft_percent(uint32_t percent) { soft_percent_ = percent; }
  uint64_t soft_threshold_units() const { return total_units_ * soft_percent_ / 100; }
  // True if taking AUs brought the used count from below the threshold (with
  // `free_before` free) to at or above it. AUs being punched (releasing) are
  // not used: they are free by every durable record, and Space() shows them
  // as free, so a large delete must not make a later small write look like
  // a crossing of the threshold.
  bool CrossedSoftThreshold(uint64_t free_before) const;

  uint64_t total_units() const { return total_units_; }
  uint32_t refs(uint64_t p) const { return refs_[p]; }
  uint32_t max_refs() const { return max_refs_; }
  // Tests lower the bound to reach it (default kMaxRefs).
  void set_max_refs(uint32_t m) { max_refs_ = m; }
  AuState state(uint64_t p) const { return state_[p]; }
  // Every AU's count and state at once (for copying, e.g. by the check).
  const std::vector<uint32_t>& all_refs() const { return refs_; }
  const std::vector<AuState>& all_states() const { return state_; }
  const FreeRuns& free() const { return free_; }
  uint64_t free_units() const { return free_.count(); }
  uint64_t mapped_units() const { return mapped_units_; }
  uint64_t shared_units() const;
  uint64_t meta_units() const { return meta_units_; }
  uint64_t reserved_units() const { return reserved_; }
  uint64_t pending_units() const;

 private:
  // Takes n free AUs into state `as`, appending them to *out.
  bool TakeFree(uint64_t n, AuState as, std::vector<uint64_t>* out);

  uint64_t total_units_ = 0;
  std::vector<uint32_t> refs_;
  std::vector<AuState> state_;
  FreeRuns free_;
  std::vector<uint64_t> meta_aus_;  // the current checkpoint chain, in order
  std::vector<PendingRun> pending_;
  // AUs whose reference count fell to 1 in a record not yet durable, with
  // that record's ticket: they must not be overwritten in place before it.
  std::unordered_map<uint64_t, uint64_t> unshared_;
  uint64_t releasing_ = 0;  // taken by TakeReleasable, not yet Released
  uint64_t reserved_ = 0, quarantined_ = 0, meta_units_ = 0, mapped_units_ = 0;
  uint32_t soft_percent_ = 0;
  uint32_t max_refs_ = kMaxRefs;
};

}  // namespace cowstore::store
