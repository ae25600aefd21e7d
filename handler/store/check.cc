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
  // Reads what the live Core reads: its open dropped the cache already.
  Status DropCache() override { return Status::Ok(); }
  Result<uint64_t> Size() override { return f->Size(); }
  Status Truncate(uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
  Status PunchHole(uint64_t, uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
  bool IsBlockDevice() const override { return f->IsBlockDevice(); }
};

struct LunCopy {
  uint32_t id = 0, bs = 0;
  std::string name;
  Uuid uuid{};
  uint64_t size = 0, mod_lsn = 0;
  std::vector<Run> runs;
};


// A GrainSpace's figures, copied under the locks for the recount by runs.
struct GrainCounts {
  bool by_runs = false;               // the space is a GrainSpace
  std::vector<SharedRecord> shared;   // its shared records, in order
  uint64_t mapped = 0, quarantined = 0;
};

// "grains [p, p+n)"
std::string Grains(uint64_t p, uint64_t n) {
  return "grains [" + std::to_string(p) + ", " + std::to_string(p + n) + ")";
}

// Recounts a GrainSpace from the maps' runs (every one inside the pool), by
// one sweep (O(E log E) for E runs, nothing per grain): the grains with two
// owners or more must be exactly its shared records, those with one or more
// its mapped count; no free run, mapped grain or checkpoint AU may overlap
// another; and what is free, mapped, metadata, reserved, pending (releasing
// included) or quarantined must add up to the pool (a shortfall is leaked).
template <class Problem>
void CheckGrains(std::vector<Run> runs, const GrainCounts& g, uint64_t units, uint64_t grains_per_au,
                 const std::vector<std::pair<uint64_t, uint64_t>>& free_runs, uint64_t free_count,
                 const std::vector<uint64_t>& ckpt_now, const std::vector<uint64_t>& format_meta,
                 uint64_t meta_units, uint64_t reserved, uint64_t pending, CheckReport* rep, Problem&& problem) {
  // Owners by range: +1 at each run's start, -1 at its end.
  std::vector<std::pair<uint64_t, int>> ev;
  ev.reserve(2 * runs.size());
  for (const Run& r : runs) {
    ev.push_back({r.phys, 1});
    ev.push_back({r.phys + r.len, -1});
  }
  runs.clear();
  runs.shrink_to_fit();
  std::sort(ev.begin(), ev.end());
  std::vector<SharedRecord> shared;            // maximal runs of equal count >= 2
  std::vector<std::pair<uint64_t, uint64_t>> mapped;  // merged runs of count >= 1
  uint64_t owners = 0, nmapped = 0;
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
    if (!shared.empty() && shared.back().phys + shared.back().len == at && shared.back().refs == owners)
      shared.back().len += len;
    else
      shared.push_back({at, len, owners});
  }
  if (shared != g.shared) {
    size_t k = 0;
    while (k < shared.size() && k < g.shared.size() && shared[k] == g.shared[k]) k++;
    if (k < g.shared.size())
      problem(Grains(g.shared[k].phys, g.shared[k].len) + ": reference count " + std::to_string(g.shared[k].refs) +
              (k < shared.size() ? ", maps say " + Grains(shared[k].phys, shared[k].len) + " have " +
                                       std::to_string(shared[k].refs)
                                 : ", maps share no more grains"));
    else
      problem(Grains(shared[k].phys, shared[k].len) + ": maps say " + std::to_string(shared[k].refs) +
              " references, the space map counts fewer than 2");
  }
  if (nmapped != g.mapped)
    problem("the space map counts " + std::to_string(g.mapped) + " mapped grains, maps say " + std::to_string(nmapped));
  rep->allocated_units += nmapped;

  // Overlaps: mapped grains, free runs and checkpoint AUs, each sorted.
  std::vector<std::pair<uint64_t, uint64_t>> meta;
  for (uint64_t au : ckpt_now) {
    if (au >= units / grains_per_au) problem("checkpoint AU " + std::to_string(au) + " is outside the pool");
    else meta.push_back({au * grains_per_au, grains_per_au});
  }
  std::sort(meta.begin(), meta.end());
  auto overlap = [&](const std::vector<std::pair<uint64_t, uint64_t>>& a,
                     const std::vector<std::pair<uint64_t, uint64_t>>& b, const std::string& what) {
    for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
      const uint64_t s = std::max(a[i].first, b[j].first);
      const uint64_t e = std::min(a[i].first + a[i].second, b[j].first + b[j].second);
      if (s < e) {
        problem(Grains(s, e - s) + " " + what);
        return;
      }
      (a[i].first + a[i].second <= b[j].first + b[j].second) ? i++ : j++;
    }
  };
  overlap(mapped, free_runs, "are mapped and also free");
  overlap(mapped, meta, "are mapped and also checkpoint metadata");
  overlap(free_runs, meta, "are free and also checkpoint metadata");
  for (size_t i = 1; i < meta.size(); i++)
    if (meta[i].first == meta[i - 1].first) problem("checkpoint AU " + std::to_string(meta[i].first / grains_per_au) + " is named twice");

  uint64_t runs_total = 0;
  for (const auto& [p, n] : free_runs) {
    runs_total += n;
    if (p + n > units) problem(Grains(p, n) + " on the free list are outside the pool");
  }
  if (runs_total != free_count) problem("free-space runs do not add up");
  if (meta_units != ckpt_now.size() * grains_per_au) problem("checkpoint AU count mismatch");
  if (format_meta != ckpt_now)
    problem("the space map's checkpoint AUs differ from the format's (" + std::to_string(ckpt_now.size()) +
            " AUs, the format names " + std::to_string(format_meta.size()) + ")");
  rep->allocated_units += meta_units;
  // Every grain is in exactly one place.
  const uint64_t placed = free_count + g.mapped + meta_units + reserved + pending + g.quarantined;
  if (placed > units) {
    problem("the space map places " + std::to_string(placed) + " grains in a pool of " + std::to_string(units));
  } else if (placed < units) {
    rep->leaked_units += units - placed;
    problem(std::to_string(units - placed) + " grains are leaked (neither mapped, free, metadata nor in flight)");
  }
}

}  // namespace

CheckReport Core::Check(ProgressFn progress, void* ctx, bool compare_disk) {
  CheckReport rep;
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
  GrainCounts grains;
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
    luns.reserve(st_.luns.size());
    for (const auto& [id, l] : st_.luns) {
      LunCopy c{l->id, l->bs, l->name, l->uuid, l->size, l->mod_lsn, {}};
      c.runs.reserve(l->map.extents());
      for (const auto& [lba, e] : l->map.runs()) c.runs.push_back({lba, e.phys, e.len});
      luns.push_back(std::move(c));
    }
    // The recount below is per AU against the flat map's own states, or by
    // runs against a GrainSpace's shared records and counts.
    if (flat_space_) {
      refs_now.assign(flat_space_->all_refs().begin(), flat_space_->all_refs().begin() + static_cast<long>(units));
      state_now.assign(flat_space_->all_states().begin(), flat_space_->all_states().begin() + static_cast<long>(units));
      free_runs.assign(flat_space_->free().runs().begin(), flat_space_->free().runs().end());
    } else if (grain_space_) {
      grains.by_runs = true;
      grains.shared = grain_space_->shared().All();
      grains.mapped = space_->mapped_units();
      grains.quarantined = space_->quarantined_units();
      const std::map<uint64_t, uint64_t> fr = space_->free_runs();
      free_runs.assign(fr.begin(), fr.end());
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
  const bool flat = !grains.by_runs;
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
    CheckGrains(in_pool, grains, units, au_ / grain_, free_runs, free_count, ckpt_now, format_meta, meta_units,
                reserved, pending, &rep, problem);
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
  if (table_lsn < end && disk->st_.luns.size() != luns.size())
    problem("on-disk LUN table differs from memory");
  if (disk->format_->superblock_seq() == sb_seq && disk->space_->meta_aus() != ckpt_now)
    problem("on-disk checkpoint chain differs from memory");
  return rep;
}

}  // namespace cowstore::store
