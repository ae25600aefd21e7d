// SPDX-License-Identifier: Apache-2.0
#include "handler/store/shared_refs.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace cowstore::store {

static_assert(SharedRefs::kRegionGrains <= UINT32_MAX, "a region's counter holds its grain count");

SharedRefs::SharedRefs(uint64_t pool_grains, uint64_t max_refs)
    : pool_grains_(pool_grains), max_refs_(max_refs),
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
  size_t si = 0, ei = 0;
  uint64_t depth = 0, at = 0;
  while (ei < ends.size()) {
    uint64_t next = si < starts.size() ? std::min(starts[si], ends[ei]) : ends[ei];
    if (depth >= 2 && next > at) {
      // Equal depth on both sides of a point never emits twice: records merge.
      auto last = refs.m_.empty() ? refs.m_.end() : std::prev(refs.m_.end());
      if (last != refs.m_.end() && last->first + last->second.len == at && last->second.refs == depth)
        last->second.len += next - at;
      else
        refs.m_.emplace_hint(refs.m_.end(), at, Span{next - at, depth});
      refs.AddToRegions(at, next - at, 1);
      refs.shared_grains_ += next - at;
    }
    at = next;
    while (si < starts.size() && starts[si] == at) { depth++; si++; }
    while (ei < ends.size() && ends[ei] == at) { depth--; ei++; }
    if (depth > max_refs) return Status(Code::kCorruption, "a grain has more owners than the count can hold");
  }
  return refs;
}

Status SharedRefs::Inc(uint64_t p, uint64_t n) {
  if (n == 0) return Status::Ok();
  if (p >= pool_grains_ || n > pool_grains_ - p)
    return Status(Code::kInvalidArgument, "grain range leaves the pool");
  const uint64_t end = p + n;
  for (auto it = FirstEndingAfter(p); it != m_.end() && it->first < end; ++it)
    if (it->second.refs >= max_refs_)
      return Status(Code::kInvalidArgument, "a grain would have more owners than the count can hold");
  SplitAt(p);
  SplitAt(end);
  uint64_t at = p;
  auto it = m_.lower_bound(p);
  while (at < end) {
    if (it != m_.end() && it->first == at) {
      it->second.refs++;
      at += it->second.len;
      ++it;
      continue;
    }
    uint64_t gap_end = (it != m_.end() && it->first < end) ? it->first : end;
    m_.emplace_hint(it, at, Span{gap_end - at, 2});
    AddToRegions(at, gap_end - at, 1);
    shared_grains_ += gap_end - at;
    at = gap_end;
  }
  // Inside the range, neighbours differed before and still do (records went
  // up by one; new records hold 2 and sit next to records now >= 3): only
  // the edges can merge.
  MergeAt(p);
  MergeAt(end);
  return Status::Ok();
}

void SharedRefs::Dec(uint64_t p, uint64_t n, std::vector<GrainRun>* freed) {
  if (n == 0) return;
  assert(p < pool_grains_ && n <= pool_grains_ - p);
  const uint64_t end = p + n;
  SplitAt(p);
  SplitAt(end);
  auto free_gap = [&](uint64_t s, uint64_t e) {
    if (!freed || s == e) return;
    if (!freed->empty() && freed->back().phys + freed->back().len == s)
      freed->back().len += e - s;
    else
      freed->push_back({s, e - s});
  };
  uint64_t at = p;
  auto it = m_.lower_bound(p);
  while (at < end) {
    if (it != m_.end() && it->first == at) {
      at += it->second.len;
      if (it->second.refs == 2) {
        AddToRegions(it->first, it->second.len, -1);
        shared_grains_ -= it->second.len;
        it = m_.erase(it);
      } else {
        it->second.refs--;
        ++it;
      }
      continue;
    }
    uint64_t gap_end = (it != m_.end() && it->first < end) ? it->first : end;
    free_gap(at, gap_end);
    at = gap_end;
  }
  // Records that stayed went down by one together; erased ones left gaps.
  MergeAt(p);
  MergeAt(end);
}

uint64_t SharedRefs::SharedCount(uint64_t p) const {
  auto it = FirstEndingAfter(p);
  return it != m_.end() && it->first <= p ? it->second.refs : 0;
}

bool SharedRefs::AnyShared(uint64_t p, uint64_t n) const {
  if (p >= pool_grains_) return false;
  n = std::min(n, pool_grains_ - p);  // no record lies beyond the pool
  if (n == 0) return false;
  bool region_shares = false;
  for (uint64_t r = p / kRegionGrains; r <= (p + n - 1) / kRegionGrains && r < regions_.size(); r++)
    if (regions_[r]) { region_shares = true; break; }
  if (!region_shares) return false;
  auto it = FirstEndingAfter(p);
  return it != m_.end() && it->first < p + n;
}

void SharedRefs::Lookup(uint64_t p, uint64_t n, std::vector<SharedRecord>* out) const {
  if (p >= pool_grains_) return;
  const uint64_t end = p + std::min(n, pool_grains_ - p);
  for (auto it = FirstEndingAfter(p); it != m_.end() && it->first < end; ++it) {
    uint64_t s = std::max(p, it->first);
    uint64_t e = std::min(end, it->first + it->second.len);
    out->push_back({s, e - s, it->second.refs});
  }
}

LunShare SharedRefs::Usage(const std::vector<Run>& lun) const {
  LunShare u;
  for (const Run& r : lun) {
    uint64_t shared = 0;
    if (AnyShared(r.phys, r.len)) {
      const uint64_t end = r.phys + std::min(r.len, pool_grains_ - r.phys);
      for (auto it = FirstEndingAfter(r.phys); it != m_.end() && it->first < end; ++it)
        shared += std::min(end, it->first + it->second.len) - std::max(r.phys, it->first);
    }
    u.shared += shared;
    u.exclusive += r.len - shared;
  }
  return u;
}

std::vector<SharedRecord> SharedRefs::All() const {
  std::vector<SharedRecord> out;
  out.reserve(m_.size());
  for (const auto& [p, s] : m_) out.push_back({p, s.len, s.refs});
  return out;
}

SharedRefs::Map::const_iterator SharedRefs::FirstEndingAfter(uint64_t p) const {
  auto it = m_.upper_bound(p);
  if (it != m_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.len > p) return prev;
  }
  return it;
}

void SharedRefs::SplitAt(uint64_t x) {
  auto it = m_.upper_bound(x);
  if (it == m_.begin()) return;
  --it;
  const uint64_t start = it->first;
  const Span s = it->second;
  if (start == x || start + s.len <= x) return;
  it->second.len = x - start;
  m_.emplace_hint(std::next(it), x, Span{start + s.len - x, s.refs});
}

void SharedRefs::MergeAt(uint64_t x) {
  auto right = m_.find(x);
  if (right == m_.end() || right == m_.begin()) return;
  auto left = std::prev(right);
  if (left->first + left->second.len != x || left->second.refs != right->second.refs) return;
  left->second.len += right->second.len;
  m_.erase(right);
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
