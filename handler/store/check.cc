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
    // The recount below is per AU, against the flat map's own states.
    if (!flat_space_) {
      problem("the check cannot read this pool's space map (not the flat, per-AU one)");
      return rep;
    }
    refs_now.assign(flat_space_->all_refs().begin(), flat_space_->all_refs().begin() + static_cast<long>(units));
    state_now.assign(flat_space_->all_states().begin(), flat_space_->all_states().begin() + static_cast<long>(units));
    free_runs.assign(flat_space_->free().runs().begin(), flat_space_->free().runs().end());
    free_count = space_->free_units();
    ckpt_now = space_->meta_aus();
    meta_units = space_->meta_units();
    reserved = space_->reserved_units();
    pending = space_->pending_units();
    table_lsn = st_.table_lsn;
  }

  // 3. Verify the copy.
  std::vector<uint32_t> refs(units, 0);
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
      for (uint64_t p = e.phys; p < e.phys + e.len; p++) refs[p]++;
    }
    if (progress) progress(ctx, ++done, luns.size());
  }
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
