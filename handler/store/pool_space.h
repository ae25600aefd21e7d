// SPDX-License-Identifier: Apache-2.0
// PoolSpace: the space map as the engine (Core, pool_impl.h) uses it, so that
// formats can count space their own way (store-v3.md, plan step 5c). Two
// implementations, with the same meanings (store_grain_space_test drives
// both through this interface and compares every answer):
//   SpaceMap (space_map.h)     formats 1 and 2: flat, per AU (grain == AU)
//   GrainSpace (grain_space.h) format v3: in grains over free runs and
//                              shared-grain records
// Each class's header says where its answers differ beyond this contract.
//
// Units. Every count, unit number and run is in the space's unit (the pool's
// grain), except the checkpoint's chunks: TakeMeta, InstallMeta, meta_aus,
// TakeMetaRun, GiveMetaRun, free_whole_aus and Rebuild's `ckpt_aus` name
// whole AUs, because that is what the checkpoint chain writes and the
// superblock names. units_per_au() converts (1 for SpaceMap). meta_units()
// counts units.
//
// What only one implementation has (the flat map's per-unit states, and
// GrainSpace's shared records, for the check) is not here: a caller that
// needs it holds the concrete class (Core keeps typed pointers beside this
// one).
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "handler/store/alloc_hint.h"
#include "handler/store/meta.h"
#include "handler/store/pending_run.h"
#include "handler/store/shared_refs.h"
#include "handler/store/status.h"

namespace cowstore::store {

class PoolSpace {
 public:
  virtual ~PoolSpace() = default;

  // Rebuilds everything from the LUN maps of `st` (runs in units) and the
  // checkpoint's AUs, over `units` units: units neither mapped nor metadata
  // become free. kCorruption if a map points at a checkpoint AU or a count
  // passes max_refs() (and what else each class's header names).
  virtual Status Rebuild(uint64_t units, const MetaState& st, std::vector<uint64_t> ckpt_aus) = 0;
  // Allocates ahead what a Grow to `units` units needs that scales with the
  // pool, changing nothing visible, so that a size memory cannot index is
  // refused before a superblock names it: kNoSpace (IndexOutOfMemory) if
  // memory cannot hold it; GrainSpace also refuses more grains than a Rebuild
  // accepts (kInvalidArgument; SpaceMap's bound, kMaxPoolUnits, is Core's to
  // check). Grow may still throw std::bad_alloc after it (each class's
  // header says what that leaves); Core then fails the pool.
  virtual Status ReserveIndex(uint64_t units) = 0;
  // The pool grew to `units` units; the new ones are free.
  // REQUIRES: ReserveIndex(units) succeeded.
  virtual void Grow(uint64_t units) = 0;

  // Reference counts, as records are applied. `tag` is the ticket of the
  // record that drops the references: units it frees stay pending, and units
  // it leaves with one reference stay "shared on disk", until it is durable.
  // A count is 32 bits, and nothing else bounds it (XCOPY may copy one unit
  // to every unit of a LUN, and LUNs may be clones of clones): Inc refuses
  // with kInvalidArgument, changing nothing, an increment that would take a
  // unit past max_refs(); CanInc answers the same for several runs at once,
  // a unit gaining one reference per run that names it (so a record that
  // increments run by run can be refused before any of it is applied).
  static constexpr uint32_t kMaxRefs = UINT32_MAX;
  virtual Status CanInc(std::span<const Run> runs) const = 0;
  virtual Status Inc(uint64_t phys, uint64_t n) = 0;
  virtual void Dec(uint64_t phys, uint64_t n, uint64_t tag) = 0;
  // True if unit p may be overwritten in place: one reference, and no state
  // newer than `durable_ticket` on disk still shares it. Asked only for units
  // a LUN maps.
  virtual bool WritableInPlace(uint64_t p, uint64_t durable_ticket) const = 0;

  // Reservations. Reserve takes n free units for an operation (false, taking
  // nothing, if fewer are free); Mapped says a record now maps them;
  // Unreserve gives back those the operation did not use, `unzeroed` being
  // the ones that could not be zeroed (they go to quarantine). `hint` says
  // which LUN and LBA region the units are for (alloc_hint.h): GrainSpace
  // keeps each region's new grains together; SpaceMap ignores it.
  virtual bool Reserve(uint64_t n, std::vector<uint64_t>* out, const AllocHint& hint = {}) = 0;
  // Reserve, leaving `keep_aus` whole free AUs untouched for the next
  // checkpoint (any whole AUs serve it: GrainSpace sets aside the longest
  // runs' last ones, away from where data goes): false, taking nothing, if fewer
  // than keep_aus whole AUs and n units beside them are free (HasRoomFor's
  // answer). Core reserves data this way, so the room HasRoomFor counted for
  // the checkpoint is still there when it runs (at grain < AU a plain
  // Reserve may split a whole AU). SpaceMap: every free AU is whole, so it
  // is Reserve once HasRoomFor holds.
  virtual bool ReserveKeepingAus(uint64_t n, uint64_t keep_aus, std::vector<uint64_t>* out,
                                 const AllocHint& hint = {}) = 0;
  // Free units held back for locality (GrainSpace's open chunks, which take
  // a whole AU each and so may split the whole AUs a checkpoint needs):
  // ReturnHeld gives them all back to the free index (changing no count);
  // ForgetLun drops a deleted LUN's. SpaceMap holds none.
  virtual void ReturnHeld() = 0;
  virtual void ForgetLun(uint32_t lun) = 0;
  virtual void Mapped(const std::vector<uint64_t>& units) = 0;
  virtual void Unreserve(const std::vector<uint64_t>& units, const std::vector<uint64_t>& unzeroed) = 0;

  // Pending frees. TakeReleasable removes and returns the runs freed by
  // records up to ticket `durable_ticket` (in unit order, merged where
  // contiguous), and forgets the shared-on-disk marks that ticket resolves;
  // the units stay pending (counted as releasing) until Release returns each
  // run to the free list, or to quarantine if it could not be zeroed.
  // has_pending: some units will become free without any new record.
  virtual bool has_pending() const = 0;
  virtual std::vector<PendingRun> TakeReleasable(uint64_t durable_ticket) = 0;
  virtual void Release(const PendingRun& r, bool zeroed) = 0;
  virtual uint64_t releasing_units() const = 0;
  // Takes the free run r out of free space as releasing, as if a record
  // had freed it and TakeReleasable returned it, for a caller that must
  // keep its bytes until some later event and then hands it to Release
  // (the open holds the free grains of replayed one-sync writes so:
  // recovery.cc: format 3 at any grain, so SpaceMap (grain = AU) too).
  // kInvalidArgument, changing nothing, unless r lies wholly inside one
  // free run. All-or-nothing under std::bad_alloc.
  virtual Status Withhold(const PendingRun& r) = 0;

  // Checkpoint chunks, in AUs. TakeMeta takes n whole free AUs for a new
  // checkpoint (false, taking nothing, if fewer are) and hands them over:
  // the space remembers them until the next InstallMeta. InstallMeta makes
  // `new_set` (the format's meta_units() after a successful checkpoint, in
  // its order) the current checkpoint, by one rule (meta_turnover.h): AUs
  // of the previous set it keeps stay metadata, the others retire through
  // the pending path, reusable once ticket `tag` is durable, and AUs handed
  // over that it does not name are free at once. kIOError ("...; the pool
  // must be reopened"), changing nothing, for a new set naming an AU twice
  // or one neither current nor handed over, or current and handed-over
  // sets that overlap or repeat an AU (an engine bug: Core fails the pool,
  // as after any failed checkpoint). A std::bad_alloc changes nothing in
  // SpaceMap (it allocates first); GrainSpace's may leave it part way (some
  // AUs retired or freed, the rest and the sets as they were), harmless
  // only because Core fails the pool on any throw and the reopen rebuilds
  // the space: nothing may retry an install after a throw. meta_aus: the
  // current set.
  virtual bool TakeMeta(uint64_t n, std::vector<uint64_t>* out) = 0;
  virtual Status InstallMeta(std::vector<uint64_t> new_set, uint64_t tag) = 0;
  virtual const std::vector<uint64_t>& meta_aus() const = 0;
  // The journal's runs (PoolJournalSpace, pool_journal_space.h), handed over
  // as TakeMeta's AUs are, so InstallMeta keeps or frees them by the same
  // rule. TakeMetaRun takes the longest run of whole free AUs, cut to
  // max_aus from its start: returns its length (0, taking nothing, if no
  // whole AU is free or max_aus is 0) and its first AU in *first_au.
  // GiveMetaRun gives back a run TakeMetaRun handed over and no InstallMeta
  // has seen since: free at once; if memory for that fails, it stays handed
  // over, for the next InstallMeta to free (a run not wholly handed over is
  // ignored, changing nothing). Never throws. Only for a run nothing wrote
  // and no superblock names: PoolJournalSpace does not call it, since
  // FormatV3 gives runs back after a failed checkpoint too.
  virtual uint64_t TakeMetaRun(uint64_t max_aus, uint64_t* first_au) = 0;
  virtual void GiveMetaRun(uint64_t first_au, uint64_t aus) noexcept = 0;
  // Whole free AUs, counting no further than `limit`: TakeMeta(n) succeeds
  // exactly when free_whole_aus(n) == n. Free units can outnumber them many
  // times over when units are smaller than an AU (free grains scattered), so
  // whether a checkpoint fits is asked here, not of free_units()
  // (HasRoomFor below).
  virtual uint64_t free_whole_aus(uint64_t limit) const = 0;

  // Soft threshold (a percentage of the pool's units; 0: none; the rule is
  // soft_threshold.h's). CrossedSoftThreshold: taking units brought the
  // used count from below the threshold (with `free_before` free) to at or
  // above it; units being punched (releasing) are not used, nor the `lent`
  // ones out of free space for a while (zeroing ahead's round).
  virtual void set_soft_percent(uint32_t percent) = 0;
  virtual uint64_t soft_threshold_units() const = 0;
  virtual bool CrossedSoftThreshold(uint64_t free_before, uint64_t lent) const = 0;

  // Units per AU: 1 when the unit is the AU (formats 1 and 2).
  virtual uint64_t units_per_au() const = 0;
  virtual uint64_t total_units() const = 0;
  // References to unit p (0 for a reserved unit no record maps yet). Asked
  // only for units a LUN maps, and reserved ones.
  virtual uint32_t refs(uint64_t p) const = 0;
  // A LUN's mapped runs (lba, phys, len in units) split into units with
  // other owners (refs > 1; a unit the runs name twice counts as shared) and
  // the rest: LunInfo's exclusive/shared figures. SpaceMap asks refs per
  // unit; GrainSpace intersects the runs with its shared records
  // (O(runs x log records)). REQUIRES: the runs are mapped, inside the pool.
  virtual LunShare Usage(const std::vector<Run>& runs) const = 0;
  virtual uint32_t max_refs() const = 0;
  // Tests lower the bound to reach it (default kMaxRefs; GrainSpace
  // REQUIRES m >= 2).
  virtual void set_max_refs(uint32_t m) = 0;
  virtual uint64_t free_units() const = 0;
  virtual uint64_t mapped_units() const = 0;   // one reference or more
  virtual uint64_t shared_units() const = 0;   // two references or more
  virtual uint64_t meta_units() const = 0;     // the checkpoint's AUs and those handed over since
  virtual uint64_t reserved_units() const = 0;
  virtual uint64_t pending_units() const = 0;  // freed by records not yet durable
  virtual uint64_t quarantined_units() const = 0;
  // Every free run, start -> length (a copy: recovery punches them).
  virtual std::map<uint64_t, uint64_t> free_runs() const = 0;
};

// What ReserveIndex returns when memory cannot hold the index for `units`.
inline Status IndexOutOfMemory(uint64_t units) {
  return Status(Code::kNoSpace, "not enough memory to index " + std::to_string(units) + " units");
}

// True if `s` has room for `data_units` more units and a checkpoint of
// `ckpt_aus` AUs at once: the checkpoint in whole free AUs (all TakeMeta can
// use), the data in the free units left beside them. When a unit is an AU
// this is free_units() >= data_units + ckpt_aus. Short of whole AUs, it
// first gives back the units held for locality (ReturnHeld), which may be
// what splits them: the only change it makes, and it changes no count.
inline bool HasRoomFor(PoolSpace& s, uint64_t data_units, uint64_t ckpt_aus) {
  if (s.free_whole_aus(ckpt_aus) < ckpt_aus) {
    s.ReturnHeld();
    if (s.free_whole_aus(ckpt_aus) < ckpt_aus) return false;
  }
  // ckpt_aus whole free AUs are that many times units_per_au() free units.
  return s.free_units() - ckpt_aus * s.units_per_au() >= data_units;
}

}  // namespace cowstore::store
