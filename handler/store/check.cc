// SPDX-License-Identifier: Apache-2.0
// Check: recounts every reference and AU state from the maps and, on request,
// compares the durable metadata with memory. Reports; never repairs.

#include "handler/store/pool_impl.h"

#include <algorithm>

#include "handler/store/names.h"

namespace cowstore::store {

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
  CommitQueue::ExclusiveGuard leader(&queue_);  // no batch while the disk is compared
  MutexLock g(&meta_mu_);
  if (Status f = queue_.failed(); !f.ok()) problem("pool is in the failed state: " + f.ToString());
  const uint64_t total_units = space_.total_units();
  std::vector<uint32_t> refs(total_units, 0);
  rep.luns = st_.luns.size();
  uint64_t done = 0;
  for (const auto& [id, l] : st_.luns) {
    if (!ValidBlockSize(l->bs)) problem("LUN " + l->name + ": bad block size");
    if (l->size % l->bs) problem("LUN " + l->name + ": size not a multiple of the block size");
    uint64_t units = DivUp(l->size, au_), prev_end = 0;
    for (const auto& [lba, e] : l->map.runs()) {
      rep.extents++;
      if (e.len == 0) problem("LUN " + l->name + ": empty extent at AU " + std::to_string(lba));
      if (lba < prev_end) problem("LUN " + l->name + ": overlapping extents at AU " + std::to_string(lba));
      prev_end = lba + e.len;
      if (lba + e.len > units) problem("LUN " + l->name + ": extent beyond the LUN's end at AU " + std::to_string(lba));
      if (e.phys + e.len > total_units || e.phys + e.len < e.phys) {
        problem("LUN " + l->name + ": extent outside the pool at AU " + std::to_string(lba));
        continue;
      }
      for (uint64_t p = e.phys; p < e.phys + e.len; p++) refs[p]++;
    }
    if (progress) progress(ctx, ++done, st_.luns.size());
  }
  uint64_t nfree = 0, nmeta = 0, nres = 0, npend = 0;
  for (uint64_t p = 0; p < total_units; p++) {
    if (refs[p] != space_.refs(p))
      problem("AU " + std::to_string(p) + ": reference count " + std::to_string(space_.refs(p)) +
              ", maps say " + std::to_string(refs[p]));
    AuState s = space_.state(p);
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
  if (nfree != space_.free_units()) problem("free-space map counts " + std::to_string(space_.free_units()) + " units, states say " + std::to_string(nfree));
  uint64_t runs_total = 0;
  for (const auto& [p, n] : space_.free().runs()) {
    runs_total += n;
    for (uint64_t q = p; q < p + n && q < total_units; q++)
      if (space_.state(q) != AuState::kFree) { problem("AU " + std::to_string(q) + " on the free list but not free"); break; }
  }
  if (runs_total != space_.free_units()) problem("free-space runs do not add up");
  if (nmeta != space_.meta_aus().size() || nmeta != space_.meta_units())
    problem("checkpoint AU count mismatch");
  for (uint64_t p : space_.meta_aus())
    if (p >= total_units || space_.state(p) != AuState::kMeta) problem("checkpoint AU " + std::to_string(p) + " not marked as metadata");
  if (nres != space_.reserved_units()) problem("reserved AU count mismatch");
  if (space_.pending_units() != npend) problem("pending-free AU count mismatch");

  if (compare_disk && jbuf_.empty()) {
    // The durable metadata must describe exactly the in-memory state.
    Core disk(env_, nullptr, true);
    struct Borrow final : File {
      File* f;
      explicit Borrow(File* x) : f(x) {}
      Status Read(uint64_t o, size_t n, void* b) override { return f->Read(o, n, b); }
      Status Write(uint64_t, size_t, const void*) override { return Status(Code::kInvalidArgument, "read-only"); }
      Status Sync() override { return Status::Ok(); }
      Result<uint64_t> Size() override { return f->Size(); }
      Status Truncate(uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
      Status PunchHole(uint64_t, uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
      bool IsBlockDevice() const override { return f->IsBlockDevice(); }
    };
    disk.file_ = std::make_unique<Borrow>(file_.get());
    CommitQueue::ExclusiveGuard dc(&disk.queue_);  // `disk` is ours alone: for the analysis
    Status s = disk.LoadLocked();
    MutexLock dm(&disk.meta_mu_);
    if (!s.ok()) {
      problem("on-disk metadata does not load: " + s.ToString());
    } else {
      if (disk.st_.luns.size() != st_.luns.size()) problem("on-disk LUN table differs from memory");
      for (const auto& [id, l] : st_.luns) {
        LunState* d = disk.st_.Find(id);
        if (!d) { problem("LUN " + l->name + " missing on disk"); continue; }
        if (d->name != l->name || d->size != l->size || d->bs != l->bs || d->uuid != l->uuid)
          problem("LUN " + l->name + ": on-disk attributes differ");
        if (d->map.runs().size() != l->map.runs().size() ||
            !std::equal(d->map.runs().begin(), d->map.runs().end(), l->map.runs().begin(),
                        [](const auto& x, const auto& y) {
                          return x.first == y.first && x.second.phys == y.second.phys && x.second.len == y.second.len;
                        }))
          problem("LUN " + l->name + ": on-disk extent map differs from memory");
      }
      if (disk.space_.meta_aus() != space_.meta_aus()) problem("on-disk checkpoint chain differs from memory");
    }
  }
  return rep;
}

}  // namespace cowstore::store
