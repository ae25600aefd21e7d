// SPDX-License-Identifier: Apache-2.0
// Free space by runs (format v3, design store-v3.md 3.3 and 3.5): the pool's
// free grains kept as runs in two indexes, by offset and by size class (as
// XFS's bnobt/cntbt), and the allocator that carves them into per-LUN chunks.
//
// Nothing here is per grain: the indexes hold one entry per free run, and free
// runs are the gaps between allocated runs, so RAM is O(allocated runs) and
// not O(pool size). Reference counts are not kept here (SharedRefs and the
// LUN maps know them); this component only knows which grains are free.
//
// A grain moves free -> reserved (Allocate; its operation writes the data)
// -> mapped (Mapped; a record maps it) -> pending (Free; its last reference
// went in the record with that ticket) -> releasing (TakeReleasable, once that
// ticket is durable; the caller punches it) -> free again (Release, after the
// punch), exactly as the flat SpaceMap does per AU. A grain that could not be
// zeroed goes to quarantine instead and stays out until the next open (which
// derives everything again with Rebuild).
//
// Not thread-safe: the pool guards it with its metadata lock.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "handler/store/alloc_hint.h"
#include "handler/store/grain_run.h"
#include "handler/store/run_tree.h"
#include "handler/store/pending_run.h"
#include "handler/store/status.h"

namespace cowstore::store {

// The two indexes over the same free runs: by offset (merging neighbours) and
// by size class (class k holds the runs of 2^k <= len < 2^(k+1) grains, each
// class ordered by start so the run nearest a goal is one lookup away).
class FreeRunIndex {
 public:
  // Adds [start, start+len), merging with free runs on either side. False,
  // changing nothing, if any of those grains is already free (a double free).
  bool Insert(uint64_t start, uint64_t len);
  // Removes [start, start+len). REQUIRES: it lies inside one free run.
  // Both are all-or-nothing: if std::bad_alloc escapes, nothing changed.
  void Remove(uint64_t start, uint64_t len);
  // The free run holding grain g, if g is free.
  std::optional<GrainRun> RunHolding(uint64_t g) const;
  // True if any grain of [start, start+len) is free.
  bool Overlaps(uint64_t start, uint64_t len) const;
  // A run of at least `len` grains from the smallest size class that can hold
  // it, the one nearest `goal` within that class; nullopt if none is that long.
  std::optional<GrainRun> BestFit(uint64_t len, uint64_t goal) const;
  // The nearest run of at least `len` grains that starts at or after `goal`
  // (or holds it), looking at no more than `max_steps` runs; else nullopt.
  std::optional<GrainRun> NextFit(uint64_t goal, uint64_t len, int max_steps) const;
  // A run from the highest non-empty size class (so within 2x of the longest),
  // the one nearest `goal` there; nullopt if nothing is free.
  std::optional<GrainRun> FromLargestClass(uint64_t goal) const;
  // Calls f(run) for the free runs, the highest size class first (within a
  // class in start order from `goal`, wrapping round), until f returns false.
  template <typename F>
  void VisitLongestFirst(uint64_t goal, F f) const;
  void Clear();

  uint64_t grains() const { return grains_; }
  uint64_t run_count() const { return by_offset_.size(); }
  // Every free run, start -> length (tests, checks: a copy).
  std::map<uint64_t, uint64_t> by_offset() const;
  // The same in start order as a vector (the check's copy under the lock).
  std::vector<GrainRun> runs() const;
  // Bytes both indexes hold (tree nodes, without malloc headers).
  size_t MemoryBytes() const;
  // Empty if the two indexes hold the same runs (each in its class, the
  // class mask and grain count in step, no two runs touching), else what is
  // wrong (tests).
  std::string Check() const;

 private:
  static int ClassOf(uint64_t len);
  static std::array<RunTree, 64> MakeClasses();
  // The run of `cls` nearest `goal`. REQUIRES: the class is not empty.
  GrainRun NearestInClass(int cls, uint64_t goal) const;
  // A run into / out of its size class's tree (and class_mask_); the
  // replacement of one run of a class by another of the same class in place.
  // Only AddToClass allocates.
  void AddToClass(const GrainRun& r);
  void DropFromClass(const GrainRun& r);
  void ReplaceInClass(const GrainRun& old, const GrainRun& r);
  // The last run of t starting before key, if any.
  static std::optional<GrainRun> Before(const RunTree& t, uint64_t key);

  // Both indexes are packed run trees of kCounted runs (start, len, value
  // 0): 16 bytes a run in 4 KiB leaves. Free runs are never adjacent (they
  // merge), so no two entries of either index merge by themselves.
  RunTree by_offset_{RunKind::kCounted};
  std::array<RunTree, 64> by_class_ = MakeClasses();  // each class's runs, by start
  uint64_t class_mask_ = 0;                         // bit k: class k not empty
  uint64_t grains_ = 0;
};

template <typename F>
void FreeRunIndex::VisitLongestFirst(uint64_t goal, F f) const {
  for (uint64_t mask = class_mask_; mask != 0;) {
    const int c = 63 - std::countl_zero(mask);
    mask &= ~(uint64_t{1} << c);
    const RunTree& runs = by_class_[c];
    const RunTree::const_iterator from = runs.lower_bound(goal);
    for (auto it = from; it != runs.end(); ++it)
      if (!f(GrainRun{(*it).lba, (*it).len})) return;
    for (auto it = runs.begin(); it != from; ++it)
      if (!f(GrainRun{(*it).lba, (*it).len})) return;
  }
}

class FreeSpace {
 public:
  // chunk_grains: a chunk (one AU's worth of grains, >= 1). max_chunks: how
  // many (LUN, region) chunks stay open at once (>= 1); opening one more
  // closes the least recently used, its unused grains back to the index
  // (where a goal can still find them). It bounds the RAM (an entry each)
  // and the free grains chunks hold.
  // The bound is also at most one chunk per kAusPerOpenChunk AUs of the
  // pool (but never below kMinOpenChunks), so that open chunks never hold
  // more than a small share of its whole AUs (which the checkpoint needs).
  static constexpr size_t kMaxOpenChunks = 512;
  static constexpr size_t kMinOpenChunks = 4;
  static constexpr uint64_t kAusPerOpenChunk = 16;
  explicit FreeSpace(uint64_t chunk_grains, size_t max_chunks = kMaxOpenChunks);

  // Derives the free runs of a pool of `total` grains from the allocated runs
  // (mapped, metadata; in any order, overlapping allowed: shared extents).
  // Drops every chunk, reservation, pending and quarantine count.
  // kCorruption if a run reaches beyond `total` (nothing changed then).
  // Like Allocate, Unreserve, Release, CloseChunk and Grow, all-or-nothing
  // under std::bad_alloc.
  Status Rebuild(uint64_t total, std::vector<GrainRun> allocated);
  // The pool grew to `total` grains; the new ones are free (a smaller
  // `total` changes nothing: the pool never shrinks).
  void Grow(uint64_t total);

  // Takes n free grains for an operation (they become reserved), appending
  // them to *out as runs, merged where contiguous.
  // - A LUN's requests of less than a chunk: from the goal if n grains are
  //   free there (a used-up chunk reopens there), else from the open chunk of
  //   the hint's (LUN, region) in order; a used-up chunk is followed by one
  //   next to it (or best-fit, or in a fragmented pool the longest runs
  //   whole). A region without a chunk opens one (closing the least recently
  //   used past max_chunks).
  // - Requests of a chunk or more, and metadata (kNoLun): straight from the
  //   index, at the goal if n grains are free there or a few runs on, else
  //   from the best-fitting run nearest it, else the longest runs whole.
  // kNoSpace, taking nothing, if fewer than n grains are free; other LUNs'
  // unused chunk grains count as free and are taken back before that.
  // All-or-nothing under std::bad_alloc (*out too), except that the other
  // LUNs' chunks may stay given back: that moves free grains from a chunk
  // to the index and changes no count.
  Status Allocate(uint64_t n, const AllocHint& hint, std::vector<GrainRun>* out);
  // What Allocate(n, hint) would do, planned without changing anything:
  // `take` holds the pieces it would take from the index (the rest comes
  // from the hint's open chunk). nullopt if the index, with that chunk,
  // holds fewer than n grains (Allocate would reclaim other chunks first).
  // TakePlanned then does exactly it (the grains become reserved, appended
  // to *out as Allocate appends), all-or-nothing under std::bad_alloc like
  // Allocate. REQUIRES (TakePlanned): `plan` came from PlanAllocation with
  // nothing changed since. For a caller that must vet the plan before
  // anything changes (GrainSpace::ReserveKeepingAus).
  struct AllocPlan {
    uint64_t n = 0;
    AllocHint hint;            // the goal kNoGoal if it lies past the pool
    bool chunked = false;      // through the hint's chunk (a LUN's small request)
    bool from_goal = false;    // chunked, but the grains come from the goal
    std::vector<GrainRun> take;  // from the index, in the order handed out
  };
  std::optional<AllocPlan> PlanAllocation(uint64_t n, const AllocHint& hint = {}) const;
  void TakePlanned(const AllocPlan& plan, std::vector<GrainRun>* out);
  // Takes exactly the grains of r (they become reserved, as Allocate's):
  // for a caller that chose them itself (GrainSpace's AU-aligned metadata).
  // kInvalidArgument, changing nothing, unless r lies wholly inside one free
  // run of the index (grains held in LUN chunks are not taken this way).
  // All-or-nothing under std::bad_alloc.
  Status TakeRun(const GrainRun& r);
  // n reserved grains are now mapped by a record.
  void Mapped(uint64_t n);
  // Gives back reserved grains an operation did not use; `zeroed` false if
  // they could not be zeroed (quarantine). kInvalidArgument if any is free
  // or pending.
  Status Unreserve(const GrainRun& r, bool zeroed);
  // Gives back mapped grains that nothing durable names and that read as
  // zeros (metadata AUs handed over and not used by the checkpoint:
  // GrainSpace::InstallMeta): free at once, without the pending path.
  // kInvalidArgument, changing nothing, if r is out of the pool or any of it
  // is free, pending or in a LUN's open chunk. All-or-nothing under
  // std::bad_alloc.
  Status Unallocate(const GrainRun& r);
  // Returns a LUN's unused chunk grains, every region's, to the index (LUN
  // deleted or closed), and forgets its chunks.
  void CloseChunk(uint32_t lun);
  // Returns every chunk's unused grains to the index, keeping where each
  // ended (the next chunk's goal): changes no count. For a caller short of
  // whole free runs (the checkpoint's AUs) that chunks may be breaking up.
  void ReturnChunkGrains() { ReclaimChunks(); }

  // Pending frees. Free: the record with ticket `ticket` dropped the last
  // reference to r; its grains are pending until that ticket is durable
  // (kInvalidArgument, changing nothing, if r is out of the pool or any of it
  // is free or pending already). TakeReleasable removes and returns the runs
  // freed by records up to `durable_ticket`, in grain order, merged where
  // contiguous; they stay out of the index (releasing) until Release puts
  // each back after its punch, or into quarantine if it could not be zeroed.
  Status Free(const GrainRun& r, uint64_t ticket);
  std::vector<PendingRun> TakeReleasable(uint64_t durable_ticket);
  // kInvalidArgument, changing nothing, if any of r is free or still pending.
  Status Release(const PendingRun& r, bool zeroed);
  // Takes r out of the index as releasing (PoolSpace::Withhold): Release
  // gives it back. kInvalidArgument, changing nothing, unless r lies wholly
  // inside one free run of the index. All-or-nothing under std::bad_alloc.
  Status Withhold(const PendingRun& r);
  bool has_pending() const { return !pending_.empty() || releasing_ != 0; }

  // Zeroed ahead (store-v3.md 3.5, "Zeroing ahead"): free runs of the index
  // whose blocks the file system has already written (with zeros), so that
  // a first write there costs it no block allocation, which on ext4 is a
  // journal commit inside the writer's sync. Only a preference: a chunk
  // that opens with no neighbour of its region to continue opens on the
  // lowest of them (at its start, up to a chunk). Each always lies wholly
  // inside one free run of the index: whatever takes a grain of one out of
  // the index drops it, and Rebuild drops them all. AddWarm keeps r if it
  // lies so (else, or past kMaxWarmRuns, or short of memory, it is ignored:
  // a hint lost costs a block allocation, nothing else).
  static constexpr size_t kMaxWarmRuns = 1024;
  void AddWarm(const GrainRun& r) noexcept;
  size_t warm_runs() const { return warm_.size(); }
  // Pieces taken from the index at a warm run's start so far (chunks
  // opened there; tests, benchmarks).
  uint64_t warm_opened() const { return warm_opened_; }
  // The warm runs, in start order (Close punches them; tests).
  std::vector<GrainRun> warm() const;

  uint64_t chunk_grains() const { return chunk_grains_; }
  uint64_t total_grains() const { return total_; }
  // Free grains: in the index plus those held unused in LUN chunks.
  uint64_t free_grains() const { return index_.grains() + chunk_held_; }
  uint64_t reserved_grains() const { return reserved_; }
  // Pending and releasing: out of the index until Release.
  uint64_t pending_grains() const { return pending_count_ + releasing_; }
  uint64_t releasing_grains() const { return releasing_; }
  uint64_t quarantined_grains() const { return quarantined_; }
  const FreeRunIndex& index() const { return index_; }
  // A (LUN, region)'s open chunk: its unused grains [cursor, end) (nullopt:
  // none open).
  std::optional<GrainRun> open_chunk(uint32_t lun, uint64_t region = 0) const;
  // Chunk entries kept (open or used up, with where they ended): <= max_chunks.
  size_t chunk_count() const { return chunks_.size(); }
  // Every open chunk's unused grains, in start order: free grains that are
  // not in the index (free_grains() counts them; the check places them).
  // Read from the index of held ranges that CheckNotFree consults, so the
  // check and the tests that place these grains verify that index too.
  std::vector<GrainRun> chunk_runs() const;
  // Pending grains whose ticket is not durable yet (pending_grains() less
  // the releasing ones), by first grain: the check places them.
  uint64_t waiting_grains() const { return pending_count_; }
  std::vector<PendingRun> pending_runs() const;
  // Releasing runs (taken by TakeReleasable, not yet Released: as each
  // record freed them, not merged) and quarantined runs (tag 0 when they
  // came from Unreserve), by first grain: the check places them too, so a
  // releasing or quarantined grain that is also free or mapped is seen.
  std::vector<PendingRun> releasing_runs() const;
  std::vector<PendingRun> quarantined_runs() const;

 private:
  struct ChunkKey {
    uint32_t lun = 0;
    uint64_t region = 0;
    bool operator==(const ChunkKey&) const = default;
  };
  struct ChunkKeyHash {
    size_t operator()(const ChunkKey& k) const {
      return std::hash<uint64_t>()(k.region * 0x9E3779B97F4A7C15ull ^ k.lun);
    }
  };
  struct Chunk {
    uint64_t cursor = 0, end = 0;  // unused grains [cursor, end)
    uint64_t last_end = 0;         // where the last chunk ended: the next goal
    bool has_last = false;
    std::list<ChunkKey>::iterator lru;  // its place in lru_
  };
  static ChunkKey KeyOf(const AllocHint& h) { return {h.lun, h.region}; }
  // A free run for n grains: one holding n at or just after the goal (a few
  // runs on), else the best fit nearest it; nullopt if no run holds n.
  std::optional<GrainRun> FindRun(uint64_t n, uint64_t goal) const;
  // Plans (changing nothing) where n grains come from in the index, near
  // `goal`: one run holding them, else the longest runs whole. Appends the
  // pieces to *take in the order they are handed out; all but at most one
  // are whole free runs. `chunk`: plan chunks for a LUN instead (each piece
  // a chunk's worth of grains when one run holds it, the last whole run
  // perhaps more than n).
  void PlanFromIndex(uint64_t n, uint64_t goal, bool chunk, std::vector<GrainRun>* take) const;
  // Removes the planned pieces from the index: the one that may split a run
  // (and so allocate) first, so a std::bad_alloc leaves the index as it was;
  // whole runs never allocate.
  void RemovePlanned(const std::vector<GrainRun>& take);
  // Gives every chunk's unused grains back to the index, but `keep`'s
  // (nullptr: none kept).
  void ReclaimChunks(const ChunkKey* keep = nullptr);
  // Gives c's unused grains back to the index. May throw std::bad_alloc
  // (the index's insert), changing nothing.
  void Unhold(Chunk* c);
  // The held-range index (held_) follows a chunk's unused grains: Hold
  // gives a chunk that holds none the range [cursor, end) with the spare
  // node, which EnsureSpareHeld provides before anything changes (the one
  // step that may throw); SetHeldCursor moves a held range's cursor, and
  // at its end gives the node back (kept spare, or freed). Neither throws.
  void EnsureSpareHeld();
  void Hold(uint64_t cursor, uint64_t end) noexcept;
  void SetHeldCursor(uint64_t end, uint64_t cursor) noexcept;
  // Past max_chunks_: closes the least recently used chunk but `keep`.
  // Best effort: a std::bad_alloc leaves it open (one entry over).
  void EvictBeyondBound(const ChunkKey& keep) noexcept;
  // kInvalidArgument unless r lies in the pool and none of it is free or pending.
  Status CheckNotFree(const GrainRun& r, const char* what) const;
  // Where TakeFromIndex puts the grains it takes: TakeRun's reserved, or
  // Withhold's releasing (as a run of its own, r's tag with it).
  enum class Taken { kReserved, kReleasing };
  // Takes r out of the index into `to`: kInvalidArgument naming `what`,
  // changing nothing, unless r lies wholly inside one free run of the index.
  // All-or-nothing under std::bad_alloc.
  Status TakeFromIndex(const PendingRun& r, Taken to, const char* what);
  static void Append(std::vector<GrainRun>* out, uint64_t start, uint64_t len);
  // Drops the warm runs that share a grain with [start, start+len): those
  // grains leave the index. Never throws (erasing from a map).
  void ForgetWarm(uint64_t start, uint64_t len) noexcept;

  uint64_t chunk_grains_;
  uint64_t total_ = 0;
  FreeRunIndex index_;
  std::unordered_map<ChunkKey, Chunk, ChunkKeyHash> chunks_;
  size_t max_chunks_;
  // Every chunk entry's key, least recently allocated from first: the
  // bound closes the front one without walking the chunks (a scan of 512
  // cost an allocation that opened a chunk 5x). A new entry goes in front,
  // then moves to the back once its allocation can no longer fail: node
  // splices, nothing allocated.
  std::list<ChunkKey> lru_;
  uint64_t chunk_held_ = 0;
  // The open chunks' unused grains, end -> cursor, for the chunks with
  // cursor < end only. Chunks never share a grain, so these ranges are
  // disjoint and the first one ending after a grain is the only one that
  // can hold it: CheckNotFree (every free, release and unreserve) looks up
  // one node instead of walking every chunk (at 512 open chunks the walk
  // made a single-grain free 6x dearer).
  using HeldRanges = std::map<uint64_t, uint64_t>;
  HeldRanges held_;
  HeldRanges::node_type spare_held_;
  // Pending frees by first grain (phys = first grain, n = grains, tag =
  // ticket): a double free is one lookup, and release comes out in order.
  std::map<uint64_t, PendingRun> pending_;
  uint64_t pending_count_ = 0;  // grains in pending_
  // The runs behind releasing_ and quarantined_. TakeReleasable moves
  // pending_'s nodes here and Release moves them on (to quarantine) or
  // erases them: node moves, nothing allocated. Only Unreserve's quarantine
  // allocates a node, before anything changes. Quarantine is bounded by the
  // grains that failed to zero since the open (Rebuild clears it).
  std::map<uint64_t, PendingRun> releasing_runs_, quarantine_runs_;
  uint64_t reserved_ = 0, releasing_ = 0, quarantined_ = 0;
  std::map<uint64_t, uint64_t> warm_;  // zeroed-ahead runs: start -> length (AddWarm)
  uint64_t warm_opened_ = 0;
};

}  // namespace cowstore::store
