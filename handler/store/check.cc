// SPDX-License-Identifier: Apache-2.0
// Check: recounts every reference and AU state from the maps and, on request,
// compares the durable metadata with memory. Reports; never repairs.
//
// Three phases, so that I/O never waits on a check for longer than it takes
// to copy the in-memory metadata (memcpy speed): the durable metadata is
// loaded with no lock held, the in-memory state is copied in one short hold
// of the locks, and everything is verified on the copies.

#include "handler/store/pool_impl.h"

#include <algorithm>
#include <chrono>

#include "handler/store/grain_check.h"
#include "handler/store/names.h"

namespace cowstore::store {
namespace {

// Reads through another Core's file without owning it or writing.
struct BorrowedFile final : File {
  File* f;
  explicit BorrowedFile(File* x) : f(x) {}
  Status Read(uint64_t o, size_t n, void* b) override { return f->Read(o, n, b); }
  Status Write(uint64_t, size_t, const void*) override { return Status(Code::kInvalidArgument, "read-only"); }
  Status Sync() override { return Status::Ok(); }
  // It writes nothing, so zeroes nothing ahead.
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return NoSyncHandle(); }
  // Reads what the live Core reads: its open dropped the cache already.
  Status DropCache() override { return Status::Ok(); }
  Result<uint64_t> Size() override { return f->Size(); }
  Status Truncate(uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
  Status PunchHole(uint64_t, uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
  bool CanTruncate() const override { return f->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return f->AtomicWriteBytes(); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f->ReadAside(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { f->Prefetch(off, n); }
  bool WritesAllocate() const override { return f->WritesAllocate(); }
  bool DiscardZeroes() const override { return f->DiscardZeroes(); }
};

struct LunCopy {
  uint32_t id = 0, bs = 0;
  std::string name;
  Uuid uuid{};
  uint64_t size = 0, mod_lsn = 0;
  std::vector<Run> runs;
};


// "grains [p, p+n)"
std::string Grains(uint64_t p, uint64_t n) {
  return "grains [" + std::to_string(p) + ", " + std::to_string(p + n) + ")";
}

// The places a grain can be, in the order overlaps name them.
enum class Place : uint8_t { kMapped, kFree, kChunk, kMeta, kHandedOver, kReserved, kReservedMapped, kPending, kReleasing,
                         kQuarantined, kCount };

const char* PlaceName(Place p) {
  switch (p) {
    case Place::kMapped: return "mapped";
    case Place::kFree: return "free";
    case Place::kChunk: return "free in a LUN's chunk";
    case Place::kMeta: return "checkpoint metadata";
    case Place::kHandedOver: return "metadata handed over";
    case Place::kReserved: return "reserved";
    case Place::kReservedMapped: return "reserved and mapped by a record";
    case Place::kPending: return "pending free";
    case Place::kReleasing: return "releasing (being punched)";
    case Place::kQuarantined: return "quarantined";
    case Place::kCount: break;
  }
  return "?";
}

struct Placed {
  uint64_t start, end;
  Place place;
};

}  // namespace

// Recounts a GrainSpace from the maps' runs (every one inside the pool), by
// sweeps (O(E log E) for E runs, nothing per grain); grain_check.h.
void CheckGrainCensus(std::vector<Run> runs, const GrainCensus& c, const std::vector<uint64_t>& format_meta,
                      CheckReport* rep, const std::function<void(std::string)>& problem) {
  const uint64_t units = c.total, grains_per_au = c.grains_per_au;
  // Owners by range: +1 at each run's start, -1 at its end.
  std::vector<std::pair<uint64_t, int>> ev;
  ev.reserve(2 * runs.size());
  for (const Run& r : runs) {
    if (r.len == 0 || r.phys > units || r.len > units - r.phys) continue;  // reported by the caller
    ev.push_back({r.phys, 1});
    ev.push_back({r.phys + r.len, -1});
  }
  runs.clear();
  runs.shrink_to_fit();
  std::sort(ev.begin(), ev.end());
  std::vector<SharedRecord> shared;                   // maximal runs of equal count >= 2
  std::vector<std::pair<uint64_t, uint64_t>> mapped;  // merged runs of count >= 1
  uint64_t owners = 0, nmapped = 0, nshared = 0;
  for (size_t i = 0; i < ev.size();) {
    const uint64_t at = ev[i].first;
    for (; i < ev.size() && ev[i].first == at; i++) owners += static_cast<uint64_t>(static_cast<int64_t>(ev[i].second));
    if (i == ev.size()) break;
    const uint64_t next = ev[i].first, len = next - at;
    if (owners == 0 || len == 0) continue;
    nmapped += len;
    if (!mapped.empty() && mapped.back().first + mapped.back().second == at) mapped.back().second += len;
    else mapped.push_back({at, len});
    if (owners < 2) continue;
    nshared += len;
    if (!shared.empty() && shared.back().phys + shared.back().len == at && shared.back().refs == owners)
      shared.back().len += len;
    else
      shared.push_back({at, len, owners});
  }
  ev.clear();
  ev.shrink_to_fit();
  if (shared != c.shared) {
    size_t k = 0;
    while (k < shared.size() && k < c.shared.size() && shared[k] == c.shared[k]) k++;
    if (k < c.shared.size())
      problem(Grains(c.shared[k].phys, c.shared[k].len) + ": reference count " + std::to_string(c.shared[k].refs) +
              (k < shared.size() ? ", maps say " + Grains(shared[k].phys, shared[k].len) + " have " +
                                       std::to_string(shared[k].refs)
                                 : ", maps share no more grains"));
    else
      problem(Grains(shared[k].phys, shared[k].len) + ": maps say " + std::to_string(shared[k].refs) +
              " references, the space map counts fewer than 2");
  }
  // SharedRefs' totals: the one over the pool and one per region (what
  // AnyShared trusts to skip the records).
  if (c.shared_grains != nshared)
    problem("the space map counts " + std::to_string(c.shared_grains) + " shared grains, maps say " +
            std::to_string(nshared));
  {
    constexpr uint64_t kRegion = SharedRefs::kRegionGrains;
    std::vector<uint64_t> regions((units + kRegion - 1) / kRegion, 0);
    for (const SharedRecord& r : shared)
      for (uint64_t p = r.phys; p < r.phys + r.len;) {
        const uint64_t e = std::min(r.phys + r.len, (p / kRegion + 1) * kRegion);
        regions[p / kRegion] += e - p;
        p = e;
      }
    if (c.region_shared.size() != regions.size()) {
      problem("the space map keeps " + std::to_string(c.region_shared.size()) + " shared-grain region counters, a pool of " +
              std::to_string(units) + " grains has " + std::to_string(regions.size()));
    } else {
      for (size_t r = 0; r < regions.size(); r++)
        if (c.region_shared[r] != regions[r]) {
          problem("the shared-grain counter of region " + std::to_string(r) + " (" +
                  Grains(r * kRegion, std::min(kRegion, units - r * kRegion)) + ") says " +
                  std::to_string(c.region_shared[r]) + ", maps say " + std::to_string(regions[r]));
          break;
        }
    }
  }
  if (nmapped != c.mapped)
    problem("the space map counts " + std::to_string(c.mapped) + " mapped grains, maps say " + std::to_string(nmapped));
  rep->allocated_units += nmapped;

  // Every place's runs, each inside the pool (clipped for the sweep).
  std::vector<Placed> placed;
  placed.reserve(mapped.size() + c.free_runs.size() + c.chunk_runs.size() + c.meta_aus.size() +
                 c.handed_over.size() + c.reserved_runs.size() + c.pending_runs.size() +
                 c.releasing_runs.size() + c.quarantined_runs.size());
  auto add = [&](uint64_t p, uint64_t n, Place where, uint64_t* total) {
    *total += n;
    if (n == 0) return;
    if (p >= units || n > units - p) {
      problem(Grains(p, n) + (where == Place::kFree ? " on the free list" : std::string(" ") + PlaceName(where)) +
              " are outside the pool");
      if (p >= units) return;
      n = units - p;
    }
    placed.push_back({p, p + n, where});
  };
  uint64_t sink = 0, nfree = 0, nchunk = 0, nres = 0, nres_mapped = 0, npend = 0, nrel = 0, nquar = 0;
  for (const auto& [p, n] : mapped) add(p, n, Place::kMapped, &sink);
  for (const GrainRun& r : c.free_runs) add(r.start, r.len, Place::kFree, &nfree);
  for (const GrainRun& r : c.chunk_runs) add(r.start, r.len, Place::kChunk, &nchunk);
  auto add_aus = [&](const std::vector<uint64_t>& aus, Place where) {
    for (uint64_t au : aus) {
      if (au >= units / grains_per_au)
        problem((where == Place::kMeta ? "checkpoint AU " : "handed-over metadata AU ") + std::to_string(au) +
                " is outside the pool");
      else
        placed.push_back({au * grains_per_au, (au + 1) * grains_per_au, where});
    }
  };
  add_aus(c.meta_aus, Place::kMeta);
  add_aus(c.handed_over, Place::kHandedOver);
  for (const GrainCensus::Reserved& r : c.reserved_runs) {
    add(r.run.start, r.run.len, r.owners == 0 ? Place::kReserved : Place::kReservedMapped, &nres);
    if (r.owners != 0) nres_mapped += r.run.len;
  }
  for (const PendingRun& r : c.pending_runs) add(r.phys, r.n, Place::kPending, &npend);
  for (const PendingRun& r : c.releasing_runs) add(r.phys, r.n, Place::kReleasing, &nrel);
  for (const PendingRun& r : c.quarantined_runs) add(r.phys, r.n, Place::kQuarantined, &nquar);
  std::vector<uint64_t> sorted_meta = c.meta_aus;
  sorted_meta.insert(sorted_meta.end(), c.handed_over.begin(), c.handed_over.end());
  std::sort(sorted_meta.begin(), sorted_meta.end());
  for (size_t i = 1; i < sorted_meta.size(); i++)
    if (sorted_meta[i] == sorted_meta[i - 1]) problem("checkpoint AU " + std::to_string(sorted_meta[i]) + " is named twice");

  // One sweep in start order: a run starting before the farthest end so far
  // overlaps the run that reached there. The first overlap of each pair of
  // places is reported; a reserved grain a record mapped must be mapped (and
  // nothing else). What no run covers is counted, and its first runs kept.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.start != b.start ? a.start < b.start : a.place < b.place;
  });
  constexpr size_t kPlaces = static_cast<size_t>(Place::kCount);
  bool seen[kPlaces][kPlaces] = {};
  uint64_t covered = 0, reach = 0;
  Place reach_place = Place::kMapped;
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // the first few unplaced runs
  auto gap = [&](uint64_t s, uint64_t e) {
    if (s < e && gaps.size() < 4) gaps.push_back({s, e - s});
  };
  size_t mi = 0;  // the first merged mapped run that may hold a reserved-and-mapped run
  for (const Placed& r : placed) {
    if (r.place == Place::kReservedMapped) {
      while (mi < mapped.size() && mapped[mi].first + mapped[mi].second <= r.start) mi++;
      if (mi == mapped.size() || mapped[mi].first > r.start || mapped[mi].first + mapped[mi].second < r.end)
        problem(Grains(r.start, r.end - r.start) + " are reserved and mapped by a record, but no map names them all");
    }
    if (r.start < reach && r.place != reach_place) {
      const bool allowed = (reach_place == Place::kMapped && r.place == Place::kReservedMapped) ||
                           (reach_place == Place::kReservedMapped && r.place == Place::kMapped);
      const Place a = std::min(reach_place, r.place), b = std::max(reach_place, r.place);
      if (!allowed && !seen[static_cast<size_t>(a)][static_cast<size_t>(b)]) {
        seen[static_cast<size_t>(a)][static_cast<size_t>(b)] = true;
        problem(Grains(r.start, std::min(reach, r.end) - r.start) + " are " + PlaceName(a) + " and also " + PlaceName(b));
      }
    }
    gap(reach, r.start);
    if (r.end > reach) {
      covered += r.end - std::max(reach, r.start);
      reach = r.end;
      reach_place = r.place;
    }
  }
  gap(reach, units);

  // Each place's runs against its count.
  if (nfree + nchunk != c.free)
    problem("free-space runs do not add up: " + std::to_string(nfree) + " grains in the index and " +
            std::to_string(nchunk) + " in LUN chunks, the count says " + std::to_string(c.free));
  if (nres != c.reserved)
    problem("reserved grain count mismatch: " + std::to_string(nres) + " grains in reservations, the count says " +
            std::to_string(c.reserved));
  if (npend != c.pending)
    problem("pending-free grain count mismatch: " + std::to_string(npend) + " grains in pending runs, the count says " +
            std::to_string(c.pending));
  if (nrel != c.releasing)
    problem("releasing grain count mismatch: " + std::to_string(nrel) + " grains in releasing runs, the count says " +
            std::to_string(c.releasing));
  if (nquar != c.quarantined)
    problem("quarantined grain count mismatch: " + std::to_string(nquar) +
            " grains in quarantined runs, the count says " + std::to_string(c.quarantined));
  if (c.meta != (c.meta_aus.size() + c.handed_over.size()) * grains_per_au) problem("checkpoint AU count mismatch");
  // Only a checkpoint takes AUs (TakeMeta) and installs them, as queue
  // leader, and the check leads the queue: AUs still handed over now were
  // taken by a checkpoint that never finished.
  if (!c.handed_over.empty())
    problem(std::to_string(c.handed_over.size()) +
            " metadata AUs are handed over to a checkpoint that never installed them (first: AU " +
            std::to_string(c.handed_over.front()) + ")");
  if (!c.index_problem.empty())
    problem("the free index's size classes disagree with its runs by offset: " + c.index_problem);
  if (format_meta != c.meta_aus)
    problem("the space map's checkpoint AUs differ from the format's (" + std::to_string(c.meta_aus.size()) +
            " AUs, the format names " + std::to_string(format_meta.size()) + ")");
  rep->allocated_units += c.meta;

  // Every grain in exactly one place: the counts add up to the pool, and
  // every grain is in some place (releasing and quarantined ones have runs
  // too, so a grain in none is leaked, named by its grains).
  const uint64_t counted =
      c.free + c.mapped + c.meta + (c.reserved - std::min(c.reserved, nres_mapped)) + c.pending + c.releasing + c.quarantined;
  if (counted > units)
    problem("the space map places " + std::to_string(counted) + " grains in a pool of " + std::to_string(units));
  const uint64_t unplaced = units - std::min(units, covered);
  if (unplaced != 0) {
    std::string where;
    for (const auto& [p, n] : gaps) where += (where.empty() ? "" : ", ") + Grains(p, n);
    rep->leaked_units += unplaced;
    problem(std::to_string(unplaced) + " grains are leaked (neither mapped, free, metadata nor in flight): leaked: " +
            where + (gaps.size() == 4 ? ", ..." : ""));
  }
}

CheckReport Core::Check(ProgressFn progress, void* ctx, bool compare_disk) {
  CheckReport rep;
  rep.unit_bytes = grain_;
  auto problem = [&](std::string p) {
    rep.clean = false;
    if (rep.problems.size() < 100) rep.problems.push_back(std::move(p));
  };
  if (!read_only_ && !closed_.load()) {
    Status s = Commit(CurrentSeq());
    if (!s.ok()) problem("flush before check failed: " + s.ToString());
  }

  // 1. The durable metadata, with no lock held. A commit or checkpoint racing
  // these reads can make them inconsistent (a chain freed under us, a tail
  // read half-written): if loading fails while commits moved on, load again.
  std::unique_ptr<Core> disk;
  Status disk_status;
  if (compare_disk) {
    for (int attempt = 0; attempt < 8; attempt++) {
      uint64_t before = queue_.durable();
      auto d = std::make_unique<Core>(env_, std::make_unique<BorrowedFile>(file_.get()), true);
      disk_status = d->Load();
      if (disk_status.ok()) {
        disk = std::move(d);
        break;
      }
      if (queue_.durable() == before) break;
    }
  }

  // 2. The in-memory state, copied in one hold (leading the commit queue
  // too, so no checkpoint swaps the chain or the superblock mid-copy).
  std::vector<LunCopy> luns;
  std::vector<uint32_t> refs_now;
  std::vector<AuState> state_now;
  std::vector<std::pair<uint64_t, uint64_t>> free_runs;
  std::vector<uint64_t> ckpt_now, format_meta;
  GrainCensus census;
  bool by_runs = false;  // the space is a GrainSpace: recounted from `census`
  uint64_t units, free_count, meta_units, reserved, pending, table_lsn, sb_seq;
  {
    CommitQueue::ExclusiveGuard leader(&queue_);
    MutexLock g(&meta_mu_);
    auto t0 = std::chrono::steady_clock::now();
    struct Timer {
      std::chrono::steady_clock::time_point t0;
      uint64_t* out;
      ~Timer() {
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
        *out = static_cast<uint64_t>(us.count());
      }
    } timer{t0, &rep.longest_lock_hold_us};
    if (Status f = queue_.failed(); !f.ok()) problem("pool is in the failed state: " + f.ToString());
    sb_seq = format_->superblock_seq();
    format_meta = format_->meta_units();
    units = space_->total_units();
    luns.reserve(st_.luns().size());
    uint64_t copied = 0;  // extents
    for (const auto& [id, l] : st_.luns()) {
      LunCopy c{l->id, l->bs, l->name, l->uuid, l->size, l->mod_lsn, {}};
      c.runs.reserve(l->map.extents());
      for (const auto& [lba, e] : l->map.runs()) c.runs.push_back({lba, e.phys, e.len});
      copied += c.runs.size();
      luns.push_back(std::move(c));
    }
    // The count the checkpoint's room is sized by (MetaState::extents),
    // against the maps it counts, summed in the copy (no second walk
    // under the lock).
    if (const uint64_t kept = st_.extents(); kept != copied)
      problem("the pool counts " + std::to_string(kept) + " extents, but its LUNs' maps hold " +
              std::to_string(copied) + " (the room kept for the next checkpoint is sized by the count)");
    // The recount below is per AU against the flat map's own states, or by
    // runs against a GrainSpace's shared records and counts.
    if (flat_space_) {
      refs_now.assign(flat_space_->all_refs().begin(), flat_space_->all_refs().begin() + static_cast<long>(units));
      state_now.assign(flat_space_->all_states().begin(), flat_space_->all_states().begin() + static_cast<long>(units));
      free_runs.assign(flat_space_->free().runs().begin(), flat_space_->free().runs().end());
    } else if (grain_space_) {
      by_runs = true;
      census = grain_space_->Census();
    } else {
      problem("the check cannot read this pool's space map");
      return rep;
    }
    free_count = space_->free_units();
    ckpt_now = space_->meta_aus();
    meta_units = space_->meta_units();
    reserved = space_->reserved_units();
    pending = space_->pending_units();
    table_lsn = st_.table_lsn;
  }

  // 3. Verify the copy: the maps' own rules, then the recount (per AU for
  // the flat map, by runs for a GrainSpace).
  const bool flat = !by_runs;
  std::vector<uint32_t> refs(flat ? units : 0, 0);
  std::vector<Run> in_pool;  // GrainSpace: every run inside the pool
  rep.luns = luns.size();
  uint64_t done = 0;
  for (const LunCopy& l : luns) {
    // The loaders' LUN rule (meta.h): held since load, so only a bug in
    // memory breaks it.
    if (std::string why = LunRecordRule(l.id, l.name, l.size, l.bs); !why.empty())
      problem("LUN " + std::to_string(l.id) + " (" + Quoted(l.name) + "): " + why);
    uint64_t lun_units = DivUp(l.size, grain_), prev_end = 0;
    for (const Run& e : l.runs) {
      rep.extents++;
      if (e.len == 0) problem("LUN " + l.name + ": empty extent at AU " + std::to_string(e.lba));
      if (e.lba < prev_end) problem("LUN " + l.name + ": overlapping extents at AU " + std::to_string(e.lba));
      prev_end = e.lba + e.len;
      if (e.lba + e.len > lun_units) problem("LUN " + l.name + ": extent beyond the LUN's end at AU " + std::to_string(e.lba));
      if (e.phys + e.len > units || e.phys + e.len < e.phys) {
        problem("LUN " + l.name + ": extent outside the pool at AU " + std::to_string(e.lba));
        continue;
      }
      if (flat) {
        for (uint64_t p = e.phys; p < e.phys + e.len; p++) refs[p]++;
      } else if (e.len > 0) {
        in_pool.push_back(e);
      }
    }
    if (progress) progress(ctx, ++done, luns.size());
  }
  if (!flat) {
    CheckGrainCensus(std::move(in_pool), census, format_meta, &rep, problem);
  } else {
    uint64_t nfree = 0, nmeta = 0, nres = 0, npend = 0;
    for (uint64_t p = 0; p < units; p++) {
      if (refs[p] != refs_now[p])
        problem("AU " + std::to_string(p) + ": reference count " + std::to_string(refs_now[p]) +
                ", maps say " + std::to_string(refs[p]));
      AuState s = state_now[p];
      if (refs[p] > 0 && s != AuState::kNone)
        problem("AU " + std::to_string(p) + " is mapped and also " +
                (s == AuState::kFree ? "free" : s == AuState::kMeta ? "checkpoint metadata" : "not allocatable"));
      if (refs[p] == 0 && s == AuState::kNone) {
        rep.leaked_units++;
        problem("AU " + std::to_string(p) + " is leaked (neither mapped nor free)");
      }
      if (refs[p] > 0) rep.allocated_units++;
      nfree += s == AuState::kFree;
      nmeta += s == AuState::kMeta;
      nres += s == AuState::kReserved;
      npend += s == AuState::kPending;
    }
    rep.allocated_units += nmeta;
    if (nfree != free_count) problem("free-space map counts " + std::to_string(free_count) + " units, states say " + std::to_string(nfree));
    uint64_t runs_total = 0;
    for (const auto& [p, n] : free_runs) {
      runs_total += n;
      for (uint64_t q = p; q < p + n && q < units; q++)
        if (state_now[q] != AuState::kFree) { problem("AU " + std::to_string(q) + " on the free list but not free"); break; }
    }
    if (runs_total != free_count) problem("free-space runs do not add up");
    if (nmeta != ckpt_now.size() || nmeta != meta_units) problem("checkpoint AU count mismatch");
    for (uint64_t p : ckpt_now)
      if (p >= units || state_now[p] != AuState::kMeta) problem("checkpoint AU " + std::to_string(p) + " not marked as metadata");
    // In order: the space holds exactly what the open and each checkpoint
    // installed from the format (FormatV2's chain order included).
    if (format_meta != ckpt_now)
      problem("the space map's checkpoint AUs differ from the format's (" + std::to_string(ckpt_now.size()) +
              " AUs, the format names " + std::to_string(format_meta.size()) + ")");
    if (nres != reserved) problem("reserved AU count mismatch");
    if (pending != npend) problem("pending-free AU count mismatch");
  }

  // 4. The durable metadata must describe the in-memory state exactly, for
  // everything no record since the disk was read has changed: LUNs last
  // changed before the LSN where the disk's replay ended.
  if (!compare_disk) return rep;
  if (!disk) {
    problem("on-disk metadata does not load: " + disk_status.ToString());
    return rep;
  }
  // `disk` is this function's alone; its locks are taken for the analysis.
  CommitQueue::ExclusiveGuard disk_leader(&disk->queue_);
  MutexLock disk_meta(&disk->meta_mu_);
  const uint64_t end = disk->jbuf_.next_lsn();
  for (const LunCopy& l : luns) {
    if (l.mod_lsn >= end) continue;  // changed after the disk was read
    LunState* d = disk->st_.Find(l.id);
    if (!d) { problem("LUN " + l.name + " missing on disk"); continue; }
    if (d->name != l.name || d->size != l.size || d->bs != l.bs || d->uuid != l.uuid)
      problem("LUN " + l.name + ": on-disk attributes differ");
    bool same = d->map.runs().size() == l.runs.size();
    auto it = d->map.runs().begin();
    for (size_t k = 0; same && k < l.runs.size(); k++, ++it)
      same = it->first == l.runs[k].lba && it->second.phys == l.runs[k].phys && it->second.len == l.runs[k].len;
    if (!same) problem("LUN " + l.name + ": on-disk extent map differs from memory");
  }
  if (table_lsn < end && disk->st_.luns().size() != luns.size())
    problem("on-disk LUN table differs from memory");
  if (disk->format_->superblock_seq() == sb_seq && disk->space_->meta_aus() != ckpt_now)
    problem("on-disk checkpoint chain differs from memory");
  return rep;
}

}  // namespace cowstore::store
