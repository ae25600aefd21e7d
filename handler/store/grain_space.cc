// SPDX-License-Identifier: Apache-2.0
#include "handler/store/grain_space.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <new>
#include <optional>
#include <string>

#include "handler/store/meta_turnover.h"
#include "handler/store/names.h"

namespace cowstore::store {

GrainSpace::GrainSpace(uint64_t grain_bytes, uint64_t au_bytes)
    : grain_bytes_(grain_bytes), au_bytes_(au_bytes), grains_per_au_(au_bytes / grain_bytes),
      free_(grains_per_au_), shared_(0) {
  assert(GrainRule(grain_bytes, au_bytes).empty());
}

Status GrainSpace::Rebuild(uint64_t grains, const MetaState& st, std::vector<uint64_t> ckpt_aus) {
  if (grains > kMaxGrains) return Status(Code::kCorruption, "a pool of more than 2^48 grains");
  const uint64_t g = grains_per_au_;
  // Every LUN's runs, read in place where they ascend in phys (MappedRuns).
  MappedRuns runs;
  for (const auto& [id, l] : st.luns())
    if (!runs.AddLun(l->map, grains))
      return Status(Code::kCorruption, "LUN " + l->name + " maps grains outside the pool");
  // One sweep gives SharedRefs and the union of the maps, what is mapped (a
  // shared grain counts once), in which no checkpoint AU may lie.
  // SharedRefs keeps the count field's own bound, so a later set_max_refs
  // may raise ours; a lower one (tests) is checked below.
  std::vector<GrainRun> allocated;  // the union of the maps, then the checkpoint's AUs
  Result<SharedRefs> shared = SharedRefs::RebuildFrom(grains, runs, SharedRefs::kMaxRefs, &allocated);
  if (!shared.ok()) return shared.status();
  uint64_t mapped_grains = 0;
  for (const GrainRun& r : allocated) mapped_grains += r.len;
  std::vector<uint64_t> sorted_aus = ckpt_aus;
  std::sort(sorted_aus.begin(), sorted_aus.end());
  size_t next_mapped = 0;  // the first union run that may reach the AU being checked
  for (size_t i = 0; i < sorted_aus.size(); i++) {
    const uint64_t a = sorted_aus[i];
    if (a >= grains / g) return Status(Code::kCorruption, "checkpoint AU " + std::to_string(a) + " outside the pool");
    if (i > 0 && sorted_aus[i - 1] == a) return Status(Code::kCorruption, "checkpoint AU " + std::to_string(a) + " named twice");
    while (next_mapped < allocated.size() && allocated[next_mapped].end() <= a * g) next_mapped++;
    if (next_mapped < allocated.size() && allocated[next_mapped].start < (a + 1) * g)
      return Status(Code::kCorruption, "a checkpoint AU is mapped by a LUN: AU " + std::to_string(a));
  }
  if (max_refs_ < kMaxRefs)
    for (const SharedRecord& r : shared->All())
      if (r.refs > max_refs_) return Status(Code::kCorruption, "a grain has more owners than the count can hold");
  // Both parts in order, and apart (an AU mapped was refused above): merged,
  // FreeSpace finds them sorted.
  const size_t union_runs = allocated.size();
  allocated.reserve(union_runs + sorted_aus.size());
  for (uint64_t a : sorted_aus) allocated.push_back({a * g, g});
  std::inplace_merge(allocated.begin(), allocated.begin() + union_runs, allocated.end(),
                     [](const GrainRun& a, const GrainRun& b) { return a.start < b.start; });
  FreeSpace free(g);
  if (Status s = free.Rebuild(grains, std::move(allocated)); !s.ok()) return s;
  // Nothing below fails: the new state replaces the old whole.
  total_ = grains;
  free_ = std::move(free);
  shared_ = std::move(*shared);
  reserved_.Clear();
  unshared_.Clear();
  meta_aus_ = std::move(ckpt_aus);
  handed_over_.clear();
  mapped_ = mapped_grains;
  return Status::Ok();
}

Status GrainSpace::ReserveIndex(uint64_t grains) {
  if (grains > kMaxGrains)
    return Status(Code::kInvalidArgument, "a pool holds at most 2^48 grains, not " + std::to_string(grains));
  try {
    shared_.ReserveRegions(grains);
  } catch (const std::bad_alloc&) {
    return IndexOutOfMemory(grains);
  }
  return Status::Ok();
}

void GrainSpace::Grow(uint64_t grains) {
  if (grains <= total_) return;
  assert(grains <= kMaxGrains);  // ReserveIndex refused more
  free_.Grow(grains);    // all-or-nothing: first, so a throw changes nothing
  shared_.Grow(grains);  // within ReserveIndex's capacity: cannot throw
  total_ = grains;
}

Status GrainSpace::CheckRange(uint64_t phys, uint64_t n) const {
  if (phys > total_ || n > total_ - phys)
    return Status(Code::kInvalidArgument, "grains " + std::to_string(phys) + "+" + std::to_string(n) +
                                              " lie outside the pool's " + std::to_string(total_));
  return Status::Ok();
}

Status GrainSpace::Overflow(uint64_t p, uint64_t refs) const {
  return Status(Code::kInvalidArgument,
                "grain " + std::to_string(p) + " already has " + std::to_string(refs) +
                    " references, as many as its count can hold: nothing was changed");
}

// A grain's count before the runs: a record's, else 0 if it is reserved and
// no record maps it yet, else 1 (rule 1: Inc's REQUIRES). The runs' edges cut
// the pool into pieces each run covers whole or not at all, so a piece's
// depth is the gain of each of its grains; only pieces whose highest count
// plus depth can pass the bound are looked at grain range by grain range.
Status GrainSpace::CanInc(std::span<const Run> runs) const {
  // No grain gains more than one reference per run: where even that many
  // over the highest count stays within the bound (always, in a pool, whose
  // bound is 2^32 - 1), only the ranges need checking: no edges, no sort.
  const uint64_t highest = shared_.count_bound();
  if (highest <= max_refs_ && runs.size() <= max_refs_ - highest) {
    for (const Run& r : runs)
      if (Status s = CheckRange(r.phys, r.len); !s.ok()) return s;
    return Status::Ok();
  }
  std::vector<std::pair<uint64_t, int>> edges;  // (grain, +1 start / -1 end)
  edges.reserve(2 * runs.size());
  for (const Run& r : runs) {
    if (r.len == 0) continue;
    if (Status s = CheckRange(r.phys, r.len); !s.ok()) return s;
    edges.push_back({r.phys, +1});
    edges.push_back({r.phys + r.len, -1});
  }
  std::sort(edges.begin(), edges.end());
  uint64_t depth = 0;
  for (size_t i = 0; i < edges.size();) {
    const uint64_t at = edges[i].first;
    for (; i < edges.size() && edges[i].first == at; i++) depth += edges[i].second;
    if (depth == 0 || i == edges.size()) continue;
    const uint64_t end = edges[i].first, n = end - at;
    if (depth > max_refs_) return Overflow(at, refs(at));  // even a grain with no owner yet
    if (shared_.count_bound() + depth <= max_refs_) continue;  // no count is near the bound: no lookup
    // The highest count in [at, end): 1 (unrecorded mapped grains) unless
    // records say more; reserved grains count 0.
    if (depth + 1 <= max_refs_ && !shared_.AnyShared(at, n)) continue;  // common case: nothing shared here
    std::vector<SharedRecord> recs;
    shared_.Lookup(at, n, &recs);
    for (const SharedRecord& r : recs)
      if (r.refs + depth > max_refs_) return Overflow(r.phys, r.refs);
    if (depth + 1 <= max_refs_) continue;
    // The bound is within `depth` of one owner: an unrecorded grain that is
    // not a reserved one with no owner yet passes it too.
    uint64_t pos = at;
    auto unrecorded_mapped = [&](uint64_t s, uint64_t e) -> uint64_t {  // first such grain in [s, e), or e
      uint64_t first = e;
      uint64_t q = s;
      reserved_.Visit(s, e - s, [&](uint64_t rs, uint64_t rn, uint64_t owners) {
        if (first != e) return;
        if (rs > q) first = q;                     // a gap before this reservation: mapped
        else if (owners > 0) first = rs;           // reserved and already mapped once
        q = rs + rn;
      });
      if (first == e && q < e) first = q;
      return first;
    };
    for (const SharedRecord& r : recs) {
      if (r.phys > pos) {
        uint64_t p = unrecorded_mapped(pos, r.phys);
        if (p != r.phys) return Overflow(p, 1);
      }
      pos = r.phys + r.len;
    }
    if (pos < end) {
      uint64_t p = unrecorded_mapped(pos, end);
      if (p != end) return Overflow(p, 1);
    }
  }
  return Status::Ok();
}

Status GrainSpace::Inc(uint64_t phys, uint64_t n) {
  if (n == 0) return Status::Ok();
  if (Status s = CheckRange(phys, n); !s.ok()) return s;
  if (shared_.count_bound() >= max_refs_) {  // else no count is at the bound: no lookup
    std::vector<SharedRecord> recs;
    shared_.Lookup(phys, n, &recs);
    for (const SharedRecord& r : recs)
      if (r.refs >= max_refs_) return Overflow(r.phys, r.refs);  // max_refs_ >= 2: one owner always passes
  }
  // Reserved grains with no owner yet get their first; every other grain of
  // the range (mapped, or reserved and mapped once) one more, in SharedRefs.
  std::vector<GrainRun> fresh, more;
  uint64_t pos = phys;
  reserved_.Visit(phys, n, [&](uint64_t s, uint64_t len, uint64_t owners) {
    if (owners != 0) return;  // counted as mapped below
    if (s > pos) more.push_back({pos, s - pos});
    fresh.push_back({s, len});
    pos = s + len;
  });
  if (pos < phys + n) more.push_back({pos, phys + n - pos});
  RangeValues::Spare spare(RangeValues::kAssignNodes * fresh.size());  // so the fresh grains' step cannot throw
  for (const GrainRun& r : more) {
    Status s = shared_.Inc(r.start, r.len);
    assert(s.ok());  // range and bound checked above
    (void)s;
  }
  for (const GrainRun& r : fresh) {
    reserved_.Assign(r.start, r.len, 1, &spare);
    mapped_ += r.len;
  }
  return Status::Ok();
}

void GrainSpace::Dec(uint64_t phys, uint64_t n, uint64_t tag) {
  if (n == 0) return;
  assert(CheckRange(phys, n).ok());
  // Records at 2 leave one owner: on disk the grain is still shared until
  // `tag` is durable.
  std::vector<SharedRecord> recs;
  shared_.Lookup(phys, n, &recs);
  for (const SharedRecord& r : recs)
    if (r.refs == 2) unshared_.Assign(r.phys, r.len, tag);
  std::vector<GrainRun> freed;
  shared_.Dec(phys, n, &freed);
  for (const GrainRun& f : freed) {
    Status s = free_.Free(f, tag);
    assert(s.ok());  // REQUIRES: mapped, so neither free nor pending
    (void)s;
    mapped_ -= f.len;
  }
}

bool GrainSpace::WritableInPlace(uint64_t p, uint64_t durable_ticket) const {
  if (refs(p) != 1) return false;
  uint64_t tag;
  return !unshared_.Find(p, &tag) || tag <= durable_ticket;
}

std::vector<GrainRun> GrainSpace::ToRuns(std::vector<uint64_t> grains) {
  std::sort(grains.begin(), grains.end());
  std::vector<GrainRun> runs;
  for (uint64_t p : grains) {
    if (!runs.empty() && runs.back().end() == p)
      runs.back().len++;
    else
      runs.push_back({p, 1});
  }
  return runs;
}

// All-or-nothing: the output's room first; then FreeSpace's Allocate (which
// is); then the reservation nodes, giving the grains back if those throw.
bool GrainSpace::Reserve(uint64_t n, std::vector<uint64_t>* out, const AllocHint& hint) {
  if (n > free_.free_grains()) return false;
  out->reserve(out->size() + n);
  std::vector<GrainRun> runs;
  if (!free_.Allocate(n, hint, &runs).ok()) return false;  // kNoSpace: nothing taken
  std::optional<RangeValues::Spare> spare;
  try {
    // Taken grains were free, so in no reservation: each Assign only adds.
    spare.emplace(RangeValues::kAssignNodes * runs.size());
  } catch (...) {
    GiveBack(runs);
    throw;
  }
  // Nothing below allocates.
  for (const GrainRun& r : runs) {
    reserved_.Assign(r.start, r.len, 0, &*spare);
    for (uint64_t p = r.start; p < r.end(); p++) out->push_back(p);
  }
  return true;
}

bool GrainSpace::ReserveKeepingAus(uint64_t n, uint64_t keep_aus, std::vector<uint64_t>* out,
                                   const AllocHint& hint) {
  if (!HasRoomFor(*this, n, keep_aus)) return false;
  if (keep_aus == 0) return Reserve(n, out, hint);
  const uint64_t g = grains_per_au_;
  // Chunks only while whole AUs are plentiful (rule 7): a chunk takes up to
  // a whole AU for a few grains. Short of them, locality gives way to room:
  // the chunks' grains (in AUs they split) go back for data to fill first.
  const uint64_t roomy_aus = 2 * keep_aus + kChunkSlackAus;
  const bool roomy = PlanMeta(roomy_aus, nullptr) >= roomy_aus;
  if (!roomy) ReturnHeld();
  const AllocHint use = roomy ? hint : AllocHint{};
  // The AUs set aside are the longest runs' last ones, not the first ones
  // TakeMeta would take: any keep_aus whole AUs left serve the checkpoint,
  // and at a run's start they would sit where best fit puts data, pushing
  // each new piece of a sequential write one AU further (a hole per MiB).
  std::vector<GrainRun> plan;  // in AUs
  if (PlanMeta(keep_aus, &plan, /*from_end=*/true) < keep_aus) return false;
  // Usually the grains Reserve would take lie outside the AUs set aside
  // (a chunk's grains are out of the index; best fit takes the shortest run
  // that holds them; PlanMeta the longest runs): then take exactly those,
  // with the reservation's nodes and the output's room allocated first, so
  // nothing is ever given back. Else the same without the hint (best fit
  // from the index) may still miss them.
  // The set-aside AUs (in AUs) a plan takes grains of, if any.
  auto touched = [&](const FreeSpace::AllocPlan& p) -> std::optional<GrainRun> {
    for (const GrainRun& t : p.take)
      for (const GrainRun& a : plan)
        if (t.start < a.end() * g && a.start * g < t.end()) return a;
    return std::nullopt;
  };
  std::optional<FreeSpace::AllocPlan> p = free_.PlanAllocation(n, use);
  std::optional<GrainRun> hit = p ? touched(*p) : std::nullopt;
  if (p && hit && p->chunked) {
    // Both like the longest run's start (best fit in a young pool, which
    // is one run): the chunk goes just past the set-aside AUs instead.
    AllocHint past = use;
    past.goal = hit->end() * g;
    p = free_.PlanAllocation(n, past);
    hit = p ? touched(*p) : std::nullopt;
  }
  if (p && hit) {
    p = free_.PlanAllocation(n);
    hit = p ? touched(*p) : std::nullopt;
  }
  if (p && !hit) {
    out->reserve(out->size() + n);
    // A chunked plan's grains may come in one more run than it takes from
    // the index (the chunk's own).
    RangeValues::Spare spare(RangeValues::kAssignNodes * (p->take.size() + 1));
    std::vector<GrainRun> runs;
    runs.reserve(p->take.size() + 1);
    free_.TakePlanned(*p, &runs);  // all-or-nothing; nothing below allocates
    for (const GrainRun& r : runs) {
      reserved_.Assign(r.start, r.len, 0, &spare);  // were free: in no reservation
      for (uint64_t q = r.start; q < r.end(); q++) out->push_back(q);
    }
    return true;
  }
  // Else the AUs go out of the index for the call, and back after: rule 8's
  // give-back window (a give-back that throws leaves grains reserved).
  std::vector<GrainRun> kept;  // in grains, out of the index for the call
  kept.reserve(plan.size());
  bool ok = false;
  try {
    for (const GrainRun& a : plan) {
      const GrainRun r{a.start * g, a.len * g};
      if (!free_.TakeRun(r).ok()) break;  // cannot happen: the plan's AUs are free
      kept.push_back(r);
    }
    // FreeSpace counts the set-aside grains reserved meanwhile: Reserve's
    // own count check sees only the rest.
    ok = kept.size() == plan.size() && Reserve(n, out);  // short of room: no chunk
  } catch (...) {
    GiveBack(kept);
    throw;
  }
  GiveBack(kept);
  return ok;
}

void GrainSpace::Mapped(const std::vector<uint64_t>& grains) {
  const std::vector<GrainRun> runs = ToRuns(grains);
  RangeValues::Spare spare(RangeValues::kEraseNodes * runs.size());
  // Nothing below allocates: all-or-nothing.
  for (const GrainRun& r : runs) reserved_.Erase(r.start, r.len, &spare);
  free_.Mapped(grains.size());
}

void GrainSpace::Unreserve(const std::vector<uint64_t>& grains, const std::vector<uint64_t>& unzeroed) {
  std::vector<uint64_t> bad = unzeroed;
  std::sort(bad.begin(), bad.end());
  std::vector<uint64_t> good, quarantine;
  for (uint64_t p : grains) (std::binary_search(bad.begin(), bad.end(), p) ? quarantine : good).push_back(p);
  const std::vector<GrainRun> runs[2] = {ToRuns(std::move(good)), ToRuns(std::move(quarantine))};
  RangeValues::Spare spare(RangeValues::kEraseNodes * (runs[0].size() + runs[1].size()));
  // Run by run, each whole: FreeSpace's Unreserve (all-or-nothing, may
  // throw), then the reservation's erase (cannot). A throw leaves the runs
  // before it given back and the rest reserved: every grain still tracked.
  for (int i = 0; i < 2; i++) {
    for (const GrainRun& r : runs[i]) {
      Status s = free_.Unreserve(r, /*zeroed=*/i == 0);
      assert(s.ok());  // REQUIRES: reserved
      (void)s;
      reserved_.Erase(r.start, r.len, &spare);
    }
  }
}

void GrainSpace::GiveBack(const std::vector<GrainRun>& taken) {
  for (const GrainRun& r : taken) {
    Status s = free_.Unreserve(r, /*zeroed=*/true);  // never written: as free as before
    assert(s.ok());
    (void)s;
  }
}

std::vector<PendingRun> GrainSpace::TakeReleasable(uint64_t durable_ticket) {
  std::vector<PendingRun> ready = free_.TakeReleasable(durable_ticket);
  unshared_.EraseIf([&](uint64_t tag) { return tag <= durable_ticket; });
  return ready;
}

void GrainSpace::Release(const PendingRun& r, bool zeroed) {
  Status s = free_.Release(r, zeroed);
  assert(s.ok());  // REQUIRES: r was taken by TakeReleasable
  (void)s;
}

// The whole AUs inside free runs, longest runs first (so chunks are
// sequential), up to n. A run of a class whose longest member is shorter
// than an AU holds none, and neither does any later (shorter) class.
uint64_t GrainSpace::PlanMeta(uint64_t n, std::vector<GrainRun>* plan, bool from_end) const {
  const uint64_t g = grains_per_au_;
  uint64_t found = 0;
  if (n == 0) return 0;
  free_.index().VisitLongestFirst(0, [&](const GrainRun& r) {
    const uint64_t class_max = (uint64_t{2} << (std::bit_width(r.len) - 1)) - 1;
    if (class_max < g) return false;
    const uint64_t first = (r.start + g - 1) / g, last = r.end() / g;  // AUs [first, last)
    if (last > first) {
      const uint64_t k = std::min(n - found, last - first);
      if (plan) plan->push_back({from_end ? last - k : first, k});
      found += k;
    }
    return found < n;
  });
  return found;
}

bool GrainSpace::TakeMeta(uint64_t n, std::vector<uint64_t>* out) {
  if (n == 0) return true;
  const uint64_t g = grains_per_au_;
  std::vector<GrainRun> plan;  // in AUs; planning changes nothing
  if (PlanMeta(n, nullptr) < n) ReturnHeld();  // chunks may split whole AUs (rule 7)
  if (PlanMeta(n, &plan) < n) return false;
  // Exactly the planned AUs, each checked (in every build) to be free still.
  // The plan's pieces lie in distinct free runs, so taking one leaves the
  // others free: a refusal means the plan is wrong. The output's room and
  // the list of what was taken come first; a piece that is refused or
  // throws (a split run's new node) changes nothing itself, and the pieces
  // before it go back.
  out->reserve(out->size() + n);
  handed_over_.reserve(handed_over_.size() + n);
  std::vector<GrainRun> taken;  // in grains
  taken.reserve(plan.size());
  try {
    for (const GrainRun& a : plan) {
      const GrainRun r{a.start * g, a.len * g};
      if (!free_.TakeRun(r).ok()) {
        GiveBack(taken);
        return false;
      }
      taken.push_back(r);
    }
  } catch (...) {
    GiveBack(taken);
    throw;
  }
  // Nothing below allocates.
  free_.Mapped(n * g);  // allocated for good, like mapped grains
  for (const GrainRun& a : plan)
    for (uint64_t au = a.start; au < a.end(); au++) {
      out->push_back(au);
      handed_over_.push_back(au);
    }
  return true;
}

uint64_t GrainSpace::TakeMetaRun(uint64_t max_aus, uint64_t* first_au) {
  const uint64_t g = grains_per_au_;
  uint64_t best = 0, best_first = 0;
  if (max_aus == 0) return 0;
  if (PlanMeta(max_aus, nullptr) < max_aus) ReturnHeld();  // chunks may split whole AUs (rule 7)
  // Longest classes first: once a class's longest run holds no more whole
  // AUs than the best found, no later (shorter) class can beat it.
  free_.index().VisitLongestFirst(0, [&](const GrainRun& r) {
    const uint64_t class_max = (uint64_t{2} << (std::bit_width(r.len) - 1)) - 1;
    if (best >= max_aus || class_max / g <= best) return false;
    const uint64_t first = (r.start + g - 1) / g, last = r.end() / g;  // AUs [first, last)
    if (last > first && last - first > best) {
      best = last - first;
      best_first = first;
    }
    return true;
  });
  const uint64_t n = std::min(best, max_aus);
  if (n == 0) return 0;
  handed_over_.reserve(handed_over_.size() + n);
  if (!free_.TakeRun({best_first * g, n * g}).ok()) return 0;  // all or nothing; found in the index
  free_.Mapped(n * g);  // allocated for good, like TakeMeta's
  for (uint64_t au = best_first; au < best_first + n; au++) handed_over_.push_back(au);
  *first_au = best_first;
  return n;
}

void GrainSpace::GiveMetaRun(uint64_t first_au, uint64_t aus) noexcept {
  if (!RunHandedOver(handed_over_, first_au, aus)) return;
  try {
    if (!free_.Unallocate({first_au * grains_per_au_, aus * grains_per_au_}).ok()) return;
  } catch (...) {
    return;  // still handed over: the next InstallMeta frees it
  }
  ForgetHandedOver(&handed_over_, first_au, aus);
}

Status GrainSpace::InstallMeta(std::vector<uint64_t> new_set, uint64_t tag) {
  MetaTurnover t;
  if (Status s = SplitMetaTurnover(meta_aus_, handed_over_, new_set, &t); !s.ok()) return s;
  const uint64_t g = grains_per_au_;
  const std::vector<GrainRun> retired = ToRuns(std::move(t.retired)), unused = ToRuns(std::move(t.unused));
  // Not all-or-nothing past here (rule 8): Core fails the pool on a throw.
  // The previous checkpoint is unreachable once the new superblock is
  // durable: its AUs the new set does not keep free through the pending path.
  for (const GrainRun& a : retired) {
    Status s = free_.Free({a.start * g, a.len * g}, tag);
    assert(s.ok());  // metadata grains are neither free nor pending
    (void)s;
  }
  for (const GrainRun& a : unused) {
    Status s = free_.Unallocate({a.start * g, a.len * g});
    assert(s.ok());
    (void)s;
  }
  meta_aus_ = std::move(new_set);
  handed_over_.clear();
  return Status::Ok();
}

uint32_t GrainSpace::refs(uint64_t p) const {
  if (const uint64_t c = shared_.SharedCount(p); c != 0) return static_cast<uint32_t>(c);
  uint64_t owners;
  if (reserved_.Find(p, &owners)) return static_cast<uint32_t>(owners);
  return 1;
}

void GrainSpace::set_max_refs(uint32_t m) {
  assert(m >= 2);
  max_refs_ = std::max<uint32_t>(m, 2);
}

GrainCensus GrainSpace::Census() const {
  GrainCensus c;
  c.total = total_;
  c.grains_per_au = grains_per_au_;
  c.shared = shared_.All();
  c.shared_grains = shared_.shared_grains();
  c.region_shared = shared_.region_counters();
  c.mapped = mapped_;
  c.free_runs = free_.index().runs();
  c.chunk_runs = free_.chunk_runs();
  c.free = free_.free_grains();
  c.meta_aus = meta_aus_;
  c.handed_over = handed_over_;
  c.meta = meta_units();
  reserved_.Visit(0, total_, [&](uint64_t s, uint64_t n, uint64_t owners) {
    c.reserved_runs.push_back({{s, n}, owners});
  });
  c.reserved = free_.reserved_grains();
  c.pending_runs = free_.pending_runs();
  c.pending = free_.waiting_grains();
  c.releasing = free_.releasing_grains();
  c.quarantined = free_.quarantined_grains();
  c.releasing_runs = free_.releasing_runs();
  c.quarantined_runs = free_.quarantined_runs();
  // O(free runs) more under the lock: allocation reads the size classes,
  // which the copy above (by offset) does not show.
  c.index_problem = free_.index().Check();
  return c;
}

size_t GrainSpace::MemoryBytes() const {
  return free_.index().MemoryBytes() + shared_.MemoryBytes() + shared_.regions() * sizeof(uint32_t);
}

}  // namespace cowstore::store
