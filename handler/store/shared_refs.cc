// SPDX-License-Identifier: Apache-2.0
#include "handler/store/shared_refs.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace cowstore::store {

static_assert(SharedRefs::kRegionGrains <= UINT32_MAX, "a region's counter holds its grain count");

SharedRefs::SharedRefs(uint64_t pool_grains, uint64_t max_refs)
    : pool_grains_(pool_grains), max_refs_(std::min(max_refs, kMaxRefs)),
      regions_((pool_grains + kRegionGrains - 1) / kRegionGrains, 0) {
  assert(pool_grains <= kMaxPoolGrains && max_refs >= 2);
}

Result<SharedRefs> SharedRefs::Rebuild(uint64_t pool_grains,
                                       const std::vector<std::vector<Run>>& luns,
                                       uint64_t max_refs) {
  if (pool_grains > kMaxPoolGrains) return Status(Code::kInvalidArgument, "pool larger than 2^48 grains");
  // The overlap depth changes only where a run starts or ends: sort both
  // sets of points and sweep them in order.
  std::vector<uint64_t> starts, ends;
  for (const auto& lun : luns) {
    for (const Run& r : lun) {
      if (r.len == 0) continue;
      if (r.phys >= pool_grains || r.len > pool_grains - r.phys)
        return Status(Code::kCorruption, "a map run leaves the pool");
      starts.push_back(r.phys);
      ends.push_back(r.phys + r.len);
    }
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  SharedRefs refs(pool_grains, max_refs);
  // Records come out in order: collected, then bulk-loaded (leaves ~90 % full).
  std::vector<Run> records;
  size_t si = 0, ei = 0;
  uint64_t depth = 0, at = 0;
  while (ei < ends.size()) {
    uint64_t next = si < starts.size() ? std::min(starts[si], ends[ei]) : ends[ei];
    if (depth >= 2 && next > at) {
      // Equal depth on both sides of a point never emits twice: records merge.
      if (!records.empty() && records.back().lba + records.back().len == at && records.back().phys == depth)
        records.back().len += next - at;
      else
        records.push_back({at, depth, next - at});
      refs.AddToRegions(at, next - at, 1);
      refs.shared_grains_ += next - at;
    }
    at = next;
    while (si < starts.size() && starts[si] == at) { depth++; si++; }
    while (ei < ends.size() && ends[ei] == at) { depth--; ei++; }
    if (depth > refs.max_refs_) return Status(Code::kCorruption, "a grain has more owners than the count can hold");
  }
  refs.m_.BulkLoad(records);
  return refs;
}

// Inc and Dec: split the records at the range's edges, take out those inside
// (each goes back with its new count) and fill or report the gaps between
// them. The tree's Insert merges a record with an equal neighbour, so only
// the edges can merge (inside, neighbours differed before and still do) and
// the records stay maximal.
Status SharedRefs::Inc(uint64_t p, uint64_t n) {
  if (n == 0) return Status::Ok();
  if (p >= pool_grains_ || n > pool_grains_ - p)
    return Status(Code::kInvalidArgument, "grain range leaves the pool");
  const uint64_t end = p + n;
  for (auto it = m_.FirstEndingAfter(p); it != m_.end() && (*it).lba < end; ++it)
    if ((*it).phys >= max_refs_)
      return Status(Code::kInvalidArgument, "a grain would have more owners than the count can hold");
  m_.SplitAt(p);
  m_.SplitAt(end);
  std::vector<Run> inside;
  m_.EraseStarting(p, end, &inside);
  uint64_t at = p;
  auto put = [&](uint64_t s, uint64_t len, uint64_t refs) {
    [[maybe_unused]] bool ok = m_.Insert(s, refs, len);
    assert(ok);  // inside the pool (<= 2^48) and refs <= max_refs_ <= 2^32 - 1
  };
  for (const Run& r : inside) {
    if (r.lba > at) {  // a gap: one owner until now
      put(at, r.lba - at, 2);
      AddToRegions(at, r.lba - at, 1);
      shared_grains_ += r.lba - at;
    }
    put(r.lba, r.len, r.phys + 1);
    at = r.lba + r.len;
  }
  if (at < end) {
    put(at, end - at, 2);
    AddToRegions(at, end - at, 1);
    shared_grains_ += end - at;
  }
  return Status::Ok();
}

void SharedRefs::Dec(uint64_t p, uint64_t n, std::vector<GrainRun>* freed) {
  if (n == 0) return;
  assert(p < pool_grains_ && n <= pool_grains_ - p);
  const uint64_t end = p + n;
  auto free_gap = [&](uint64_t s, uint64_t e) {
    if (!freed || s == e) return;
    if (!freed->empty() && freed->back().end() == s)
      freed->back().len += e - s;
    else
      freed->push_back({s, e - s});
  };
  m_.SplitAt(p);
  m_.SplitAt(end);
  std::vector<Run> inside;
  m_.EraseStarting(p, end, &inside);
  uint64_t at = p;
  for (const Run& r : inside) {
    free_gap(at, r.lba);
    if (r.phys == 2) {  // one owner left: no record
      AddToRegions(r.lba, r.len, -1);
      shared_grains_ -= r.len;
    } else {
      [[maybe_unused]] bool ok = m_.Insert(r.lba, r.phys - 1, r.len);
      assert(ok);
    }
    at = r.lba + r.len;
  }
  free_gap(at, end);
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
