// SPDX-License-Identifier: Apache-2.0
#include "handler/store/shared_refs.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <iterator>
#include <queue>

namespace cowstore::store {

static_assert(SharedRefs::kRegionGrains <= UINT32_MAX, "a region's counter holds its grain count");

SharedRefs::SharedRefs(uint64_t pool_grains, uint64_t max_refs, uint32_t inner_fanout)
    : pool_grains_(pool_grains), max_refs_(std::min(max_refs, kMaxRefs)),
      m_(RunKind::kCounted, inner_fanout), regions_((pool_grains + kRegionGrains - 1) / kRegionGrains, 0) {
  assert(pool_grains <= kMaxPoolGrains && max_refs >= 2);
}

bool MappedRuns::AddLun(const ExtentMap& map, uint64_t pool_grains) {
  // Every run checked before anything is added, in place or copied.
  bool ascending = true;
  uint64_t last = 0;
  for (const auto& [lba, e] : map.runs()) {
    if (e.phys >= pool_grains || e.len > pool_grains - e.phys) return false;
    ascending = ascending && e.phys >= last;
    last = e.phys;
  }
  if (map.extents() == 0) return true;
  if (ascending) {
    in_place_.push_back(&map);
    return true;
  }
  std::vector<GrainRun> runs;
  runs.reserve(map.extents());
  for (const auto& [lba, e] : map.runs()) runs.push_back({e.phys, e.len});
  std::sort(runs.begin(), runs.end(), [](const GrainRun& a, const GrainRun& b) { return a.start < b.start; });
  sorted_.push_back(std::move(runs));
  return true;
}

bool MappedRuns::AddLun(const std::vector<Run>& lun, uint64_t pool_grains) {
  std::vector<GrainRun> runs;
  runs.reserve(lun.size());
  for (const Run& r : lun) {
    if (r.len == 0) continue;
    if (r.phys >= pool_grains || r.len > pool_grains - r.phys) return false;
    runs.push_back({r.phys, r.len});
  }
  std::sort(runs.begin(), runs.end(), [](const GrainRun& a, const GrainRun& b) { return a.start < b.start; });
  if (!runs.empty()) sorted_.push_back(std::move(runs));
  return true;
}

Status SharedRefs::PoolBound(uint64_t pool_grains) {
  if (pool_grains > kMaxPoolGrains) return Status(Code::kInvalidArgument, "pool larger than 2^48 grains");
  return Status::Ok();
}

Result<SharedRefs> SharedRefs::Rebuild(uint64_t pool_grains,
                                       const std::vector<std::vector<Run>>& luns,
                                       uint64_t max_refs) {
  if (Status s = PoolBound(pool_grains); !s.ok()) return s;
  MappedRuns runs;
  for (const auto& lun : luns)
    if (!runs.AddLun(lun, pool_grains)) return Status(Code::kCorruption, "a map run leaves the pool");
  return RebuildFrom(pool_grains, runs, max_refs);
}

namespace {

// One of MappedRuns' sequences, by phys, at its run `head`.
struct Cursor {
  GrainRun head;
  ExtentMap::Runs::const_iterator it, stop;  // a map read in place
  const GrainRun* p = nullptr;               // or a copy: [p, end)
  const GrainRun* end = nullptr;
  bool in_place = false;
  // Moves to the next run; false past the last.
  bool Next() {
    if (in_place) {
      if (++it == stop) return false;
      const ExtentMap::Extent e = (*it).second;
      head = {e.phys, e.len};
      return true;
    }
    if (++p == end) return false;
    head = *p;
    return true;
  }
  // Heap order: the smallest head on top.
  static bool Later(const Cursor& a, const Cursor& b) { return a.head.start > b.head.start; }
};

}  // namespace

Result<SharedRefs> SharedRefs::RebuildFrom(uint64_t pool_grains, const MappedRuns& runs, uint64_t max_refs,
                                           std::vector<GrainRun>* mapped) {
  if (Status s = PoolBound(pool_grains); !s.ok()) return s;
  // The runs in phys order: a heap of the sequences by their next run,
  // O(log L) comparisons a run for L sequences (usually a handful), where
  // sorting every run cost O(log E).
  std::vector<Cursor> next;
  next.reserve(runs.in_place_.size() + runs.sorted_.size());
  for (const ExtentMap* m : runs.in_place_) {  // never empty
    Cursor c;
    c.in_place = true;
    c.it = m->runs().begin();
    c.stop = m->runs().end();
    const ExtentMap::Extent e = (*c.it).second;
    c.head = {e.phys, e.len};
    next.push_back(c);
  }
  for (const std::vector<GrainRun>& v : runs.sorted_) {  // never empty
    Cursor c;
    c.p = v.data();
    c.end = v.data() + v.size();
    c.head = *c.p;
    next.push_back(c);
  }
  std::make_heap(next.begin(), next.end(), Cursor::Later);
  // The overlap depth changes only where a run starts or ends: the starts
  // come in order from the heap above, the ends of the runs open at the
  // sweep's position from a second heap (as many as the depth).
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> ends;
  SharedRefs refs(pool_grains, max_refs);
  // Records come out in order: collected, then bulk-loaded (leaves ~90 % full).
  std::vector<Run> records;
  std::vector<GrainRun> covered;
  uint64_t depth = 0, at = 0;
  while (!next.empty() || !ends.empty()) {
    const uint64_t point = next.empty()   ? ends.top()
                           : ends.empty() ? next.front().head.start
                                          : std::min(next.front().head.start, ends.top());
    if (mapped && depth >= 1 && point > at) {
      if (!covered.empty() && covered.back().end() == at)
        covered.back().len += point - at;
      else
        covered.push_back({at, point - at});
    }
    if (depth >= 2 && point > at) {
      // Equal depth on both sides of a point never emits twice: records merge.
      if (!records.empty() && records.back().lba + records.back().len == at && records.back().phys == depth)
        records.back().len += point - at;
      else
        records.push_back({at, depth, point - at});
      refs.AddToRegions(at, point - at, 1);
      refs.shared_grains_ += point - at;
    }
    at = point;
    while (!ends.empty() && ends.top() == at) {
      ends.pop();
      depth--;
    }
    while (!next.empty() && next.front().head.start == at) {
      ends.push(at + next.front().head.len);  // len >= 1: after `at`
      depth++;
      std::pop_heap(next.begin(), next.end(), Cursor::Later);
      if (next.back().Next())
        std::push_heap(next.begin(), next.end(), Cursor::Later);
      else
        next.pop_back();
    }
    if (depth > refs.max_refs_) return Status(Code::kCorruption, "a grain has more owners than the count can hold");
    refs.count_bound_ = std::max(refs.count_bound_, depth);
  }
  refs.m_.BulkLoad(records);
  if (mapped) *mapped = std::move(covered);
  return refs;
}

void SharedRefs::Grow(uint64_t pool_grains) {
  if (pool_grains <= pool_grains_) return;
  assert(pool_grains <= kMaxPoolGrains);
  regions_.resize((pool_grains + kRegionGrains - 1) / kRegionGrains, 0);  // strong guarantee
  pool_grains_ = pool_grains;
}

void SharedRefs::ReserveRegions(uint64_t pool_grains) {
  regions_.reserve((std::min(pool_grains, kMaxPoolGrains) + kRegionGrains - 1) / kRegionGrains);
}

// Inc and Dec: one pass. Touch reads the records from the one covering
// p - 1 (or the first after it) to the one starting at end: every record the
// range changes, and the neighbours a changed record may join. PlanSpan
// walks them once and writes that span's records as they will be, merged
// where equal counts meet, so records stay maximal (outside the span nothing
// changes, and the span's first and last records keep their outer parts'
// counts). TryReplaceInLeaf then swaps them in where they stand, in the
// leaf Touch found: one descent in all, where splitting at both edges,
// filling gaps and joining again took about ten (store-v3.md step 12:
// format 3's clone CPU).
//
// When the new records do not fit in the leaf (or the span crosses leaves),
// the splitting path does the same in O(log n) steps. It is all-or-nothing
// under std::bad_alloc: a lost record would let a write go in place over a
// clone's data. Of the tree's operations only SplitAt and Insert allocate,
// and each of them is all-or-nothing itself, so they all come first, each
// undone by non-allocating steps if a later one throws:
//   1. SplitAt(p), SplitAt(end): undone by JoinAt (the halves of a split
//      have equal counts, and records were maximal, so JoinAt joins exactly
//      what a split cut).
//   2. (Inc) each gap inserted with the placeholder count 0, which no record
//      has, so it merges with nothing: undone by erasing it by its key.
// What follows cannot fail: Replace (new counts), EraseStarting (records
// that reach one owner) and JoinAt at the edges never allocate, and Dec's
// output has its room reserved before step 1. The one-pass path allocates
// only its scratch, before anything changes.

void SharedRefs::Touch(uint64_t p, uint64_t end) {
  touched_.clear();
  touched_at_ = m_.FirstEndingAfter(p > 0 ? p - 1 : 0);
  for (auto it = touched_at_; it != m_.end() && (*it).lba <= end; ++it) touched_.push_back(*it);
}

bool SharedRefs::PlanSpan(uint64_t p, uint64_t end, int delta) {
  now_.clear();
  gaps_.clear();
  gone_.clear();
  auto emit = [&](uint64_t s, uint64_t e, uint64_t refs) {  // [s, e) at refs, if shared
    if (s >= e || refs < 2) return;
    if (!now_.empty() && now_.back().lba + now_.back().len == s && now_.back().phys == refs)
      now_.back().len += e - s;
    else
      now_.push_back({s, refs, e - s});
  };
  // Touched records end at or after p and start at or before end, so every
  // gap between them lies inside [p, end).
  uint64_t at = p;
  for (const Run& r : touched_) {
    const uint64_t r_end = r.lba + r.len;
    if (r.lba > at) {
      gaps_.push_back({at, r.lba - at});
      if (delta > 0) emit(at, r.lba, 2);  // one owner until now
    }
    emit(r.lba, std::min(p, r_end), r.phys);  // its part before p
    const uint64_t in = std::max(r.lba, p), in_end = std::min(r_end, end);
    if (in < in_end) {
      if (delta > 0 && r.phys >= max_refs_) return false;
      const uint64_t refs = delta > 0 ? r.phys + 1 : r.phys - 1;  // counts are >= 2
      if (refs < 2) gone_.push_back({in, in_end - in});
      emit(in, in_end, refs);
    }
    emit(std::max(end, r.lba), r_end, r.phys);  // its part from end on
    at = std::max(at, r_end);
  }
  if (at < end) {
    gaps_.push_back({at, end - at});
    if (delta > 0) emit(at, end, 2);
  }
  return true;
}

void SharedRefs::JoinAt(uint64_t x) {
  Run a, b;
  if (x == 0 || !m_.Covering(x - 1, &a) || !m_.Covering(x, &b) || b.lba != x || a.phys != b.phys) return;
  m_.EraseStarting(x, x + 1, nullptr);
  m_.Replace(a.lba, {a.lba, a.phys, a.len + b.len});  // <= the pool: fits a kCounted run
}

void SharedRefs::SplitEdges(uint64_t p, uint64_t end) {
  m_.SplitAt(p);
  try {
    m_.SplitAt(end);
  } catch (...) {
    JoinAt(p);
    throw;
  }
}

Status SharedRefs::Inc(uint64_t p, uint64_t n) {
  if (n == 0) return Status::Ok();
  if (p >= pool_grains_ || n > pool_grains_ - p)
    return Status(Code::kInvalidArgument, "grain range leaves the pool");
  const uint64_t end = p + n;
  Touch(p, end);
  if (!PlanSpan(p, end, +1))
    return Status(Code::kInvalidArgument, "a grain would have more owners than the count can hold");
  if (!m_.TryReplaceInLeaf(touched_at_, SpanStart(p), end + 1, now_.data(), now_.size())) {
    IncSplitting(p, end, gaps_);
  } else {
    for (const GrainRun& g : gaps_) {  // one owner until now
      AddToRegions(g.start, g.len, 1);
      shared_grains_ += g.len;
    }
  }
  for (const Run& r : now_) count_bound_ = std::max(count_bound_, r.phys);
  return Status::Ok();
}

void SharedRefs::IncSplitting(uint64_t p, uint64_t end, const std::vector<GrainRun>& gaps) {
  SplitEdges(p, end);
  size_t filled = 0;
  try {
    for (; filled < gaps.size(); filled++) {
      [[maybe_unused]] bool ok = m_.Insert(gaps[filled].start, 0, gaps[filled].len);
      assert(ok);  // inside the pool (<= 2^48)
    }
  } catch (...) {
    for (size_t i = 0; i < filled; i++) m_.EraseStarting(gaps[i].start, gaps[i].start + 1, nullptr);
    JoinAt(end);
    JoinAt(p);
    throw;
  }
  // Nothing below allocates. [p, end) is now covered by records (gaps at 0).
  for (uint64_t at = p; at < end;) {
    Run r;
    [[maybe_unused]] bool found = m_.Covering(at, &r);
    assert(found && r.lba == at);
    if (r.phys == 0) {  // a gap: one owner until now
      AddToRegions(r.lba, r.len, 1);
      shared_grains_ += r.len;
    }
    m_.Replace(r.lba, {r.lba, r.phys == 0 ? 2 : r.phys + 1, r.len});  // <= max_refs_ <= 2^32 - 1
    at = r.lba + r.len;
  }
  JoinAt(end);
  JoinAt(p);
}

void SharedRefs::Dec(uint64_t p, uint64_t n, std::vector<GrainRun>* freed) {
  if (n == 0) return;
  assert(p < pool_grains_ && n <= pool_grains_ - p);
  const uint64_t end = p + n;
  Touch(p, end);
  (void)PlanSpan(p, end, -1);  // gaps_: free now (a Dec is never refused)
  if (freed) freed->reserve(freed->size() + gaps_.size());
  // Nothing below allocates but DecSplitting's splits, which come before
  // anything changes (freed has room for every gap).
  if (m_.TryReplaceInLeaf(touched_at_, SpanStart(p), end + 1, now_.data(), now_.size())) {
    for (const GrainRun& g : gone_) {  // one owner left: no record
      AddToRegions(g.start, g.len, -1);
      shared_grains_ -= g.len;
    }
  } else {
    DecSplitting(p, end);
  }
  if (!freed) return;
  for (const GrainRun& g : gaps_) {
    if (!freed->empty() && freed->back().end() == g.start)
      freed->back().len += g.len;
    else
      freed->push_back(g);
  }
}

void SharedRefs::DecSplitting(uint64_t p, uint64_t end) {
  SplitEdges(p, end);
  for (uint64_t at = p;;) {
    auto it = m_.lower_bound(at);
    if (it == m_.end() || (*it).lba >= end) break;
    const Run r = *it;
    if (r.phys == 2) {  // one owner left: no record
      m_.EraseStarting(r.lba, r.lba + 1, nullptr);
      AddToRegions(r.lba, r.len, -1);
      shared_grains_ -= r.len;
    } else {
      m_.Replace(r.lba, {r.lba, r.phys - 1, r.len});
    }
    at = r.lba + r.len;
  }
  JoinAt(end);
  JoinAt(p);
}

uint64_t SharedRefs::SharedCount(uint64_t p) const {
  Run r;
  return m_.Covering(p, &r) ? r.phys : 0;
}

bool SharedRefs::AnyShared(uint64_t p, uint64_t n) const {
  if (p >= pool_grains_) return false;
  n = std::min(n, pool_grains_ - p);  // no record lies beyond the pool
  if (n == 0) return false;
  bool region_shares = false;
  for (uint64_t r = p / kRegionGrains; r <= (p + n - 1) / kRegionGrains && r < regions_.size(); r++)
    if (regions_[r]) { region_shares = true; break; }
  if (!region_shares) return false;
  auto it = m_.FirstEndingAfter(p);
  return it != m_.end() && (*it).lba < p + n;
}

void SharedRefs::Lookup(uint64_t p, uint64_t n, std::vector<SharedRecord>* out) const {
  if (p >= pool_grains_) return;
  const uint64_t end = p + std::min(n, pool_grains_ - p);
  for (auto it = m_.FirstEndingAfter(p); it != m_.end() && (*it).lba < end; ++it) {
    const SharedRecord r = Rec(*it);
    uint64_t s = std::max(p, r.phys);
    uint64_t e = std::min(end, r.phys + r.len);
    out->push_back({s, e - s, r.refs});
  }
}

LunShare SharedRefs::Usage(const std::vector<Run>& lun) const {
  LunShare u;
  for (const Run& r : lun) {
    uint64_t shared = 0;
    if (AnyShared(r.phys, r.len)) {
      const uint64_t end = r.phys + std::min(r.len, pool_grains_ - r.phys);
      for (auto it = m_.FirstEndingAfter(r.phys); it != m_.end() && (*it).lba < end; ++it) {
        const Run x = *it;
        shared += std::min(end, x.lba + x.len) - std::max(r.phys, x.lba);
      }
    }
    u.shared += shared;
    u.exclusive += r.len - shared;
  }
  return u;
}

std::vector<SharedRecord> SharedRefs::All() const {
  std::vector<SharedRecord> out;
  out.reserve(m_.size());
  for (const Run& r : m_) out.push_back(Rec(r));
  return out;
}

bool SharedRefs::operator==(const SharedRefs& o) const {
  return pool_grains_ == o.pool_grains_ && regions_ == o.regions_ && m_.size() == o.m_.size() &&
         std::equal(m_.begin(), m_.end(), o.m_.begin());
}

void SharedRefs::AddToRegions(uint64_t p, uint64_t n, int64_t delta) {
  while (n > 0) {
    const uint64_t r = p / kRegionGrains;
    const uint64_t take = std::min(n, (r + 1) * kRegionGrains - p);
    regions_[r] = static_cast<uint32_t>(static_cast<int64_t>(regions_[r]) + delta * static_cast<int64_t>(take));
    p += take;
    n -= take;
  }
}

}  // namespace cowstore::store
