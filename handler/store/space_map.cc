// SPDX-License-Identifier: Apache-2.0
#include "handler/store/space_map.h"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <new>
#include <string>

#include "handler/store/meta_turnover.h"
#include "handler/store/soft_threshold.h"

namespace cowstore::store {

// All or nothing under std::bad_alloc: the one allocation (a new run's node)
// comes before any change, and a run that grows downwards keeps its node.
void FreeRuns::Add(uint64_t p, uint64_t n, Spare* spare) {
  if (n == 0) return;
  auto next = runs_.lower_bound(p);
  if (next != runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == p) {
      prev->second += n;
      if (next != runs_.end() && next->first == p + n) {
        prev->second += next->second;
        runs_.erase(next);
      }
      count_ += n;
      return;
    }
  }
  if (next != runs_.end() && next->first == p + n) {
    auto hint = std::next(next);
    auto node = runs_.extract(next);
    node.key() = p;
    node.mapped() += n;
    runs_.insert(hint, std::move(node));
    count_ += n;
    return;
  }
  if (spare != nullptr && !spare->empty()) {
    auto node = spare->extract(spare->begin());
    node.key() = p;
    node.mapped() = n;
    runs_.insert(next, std::move(node));
  } else {
    runs_.emplace_hint(next, p, n);
  }
  count_ += n;
}

uint64_t FreeRuns::Longest(uint64_t max, uint64_t* first) const {
  uint64_t best = 0;
  for (const auto& [p, n] : runs_)
    if (n > best) {
      best = n;
      *first = p;
    }
  return std::min(best, max);
}

void FreeRuns::TakeFront(uint64_t p, uint64_t n) {
  auto it = runs_.find(p);
  const uint64_t len = it->second;
  if (n < len) {
    auto next = std::next(it);
    auto node = runs_.extract(it);
    node.key() = p + n;
    node.mapped() = len - n;
    runs_.insert(next, std::move(node));
  } else {
    runs_.erase(it);
  }
  count_ -= n;
}

bool FreeRuns::Remove(uint64_t p, uint64_t n) {
  if (n == 0) return true;
  auto it = runs_.upper_bound(p);
  if (it == runs_.begin()) return false;
  --it;
  const uint64_t start = it->first, len = it->second;
  if (p + n < p || p + n > start + len) return false;
  if (p == start) {
    TakeFront(p, n);
    return true;
  }
  if (p + n < start + len) runs_.emplace_hint(std::next(it), p + n, start + len - (p + n));  // may throw: first
  it->second = p - start;
  count_ -= n;
  return true;
}

bool FreeRuns::Take(uint64_t n, std::vector<uint64_t>* out) {
  if (n > count_) return false;
  if (n == 0) return true;
  // All or nothing under std::bad_alloc: `out` is sized first, and a run cut
  // short keeps its node, so nothing after that allocates.
  out->reserve(out->size() + n);
  // Prefer one run that holds all n at or after the cursor, else take pieces.
  auto it = runs_.lower_bound(cursor_);
  for (auto j = it; j != runs_.end(); ++j) {
    if (j->second >= n) { it = j; break; }
  }
  if (it == runs_.end()) it = runs_.begin();
  while (n > 0) {
    if (it == runs_.end()) it = runs_.begin();
    uint64_t start = it->first, len = it->second;
    uint64_t k = std::min(n, len);
    for (uint64_t i = 0; i < k; i++) out->push_back(start + i);
    if (k < len) {
      auto next = std::next(it);
      auto node = runs_.extract(it);
      node.key() = start + k;
      node.mapped() = len - k;
      it = runs_.insert(next, std::move(node));
    } else {
      it = runs_.erase(it);
    }
    count_ -= k;
    n -= k;
    cursor_ = start + k;
  }
  return true;
}

// ---------------------------------------------------------------- SpaceMap

Status SpaceMap::Rebuild(uint64_t units, const MetaState& st, std::vector<uint64_t> ckpt_aus) {
  total_units_ = units;
  refs_.assign(units, 0);
  state_.assign(units, AuState::kNone);
  pending_.clear();
  releasing_ = 0;
  unshared_.clear();
  reserved_ = quarantined_ = mapped_units_ = 0;
  meta_aus_ = std::move(ckpt_aus);
  handed_over_.clear();
  for (uint64_t p : meta_aus_) state_[p] = AuState::kMeta;
  for (const auto& [id, l] : st.luns()) {
    for (const auto& [lba, e] : l->map.runs()) {
      for (uint64_t q = e.phys; q < e.phys + e.len; q++) {
        if (state_[q] == AuState::kMeta)
          return Status(Code::kCorruption, "a checkpoint AU is mapped by LUN " + l->name);
        if (refs_[q] >= max_refs_) return Status(Code::kCorruption, "reference count overflow");
        if (refs_[q]++ == 0) mapped_units_++;
      }
    }
  }
  free_.Clear();
  for (uint64_t p = 0; p < units;) {
    if (refs_[p] || state_[p] != AuState::kNone) { p++; continue; }
    uint64_t q = p;
    while (q < units && !refs_[q] && state_[q] == AuState::kNone) state_[q++] = AuState::kFree;
    free_.Add(p, q - p);
    p = q;
  }
  return Status::Ok();
}

Status SpaceMap::ReserveIndex(uint64_t units) {
  try {
    refs_.reserve(units);
    state_.reserve(units);
  } catch (const std::bad_alloc&) {
    return IndexOutOfMemory(units);
  }
  return Status::Ok();
}

void SpaceMap::Grow(uint64_t units) {
  refs_.resize(units, 0);
  state_.resize(units, AuState::kFree);
  free_.Add(total_units_, units - total_units_);
  total_units_ = units;
}

namespace {
Status Overflow(uint64_t p, uint32_t refs) {
  return Status(Code::kInvalidArgument,
                "AU " + std::to_string(p) + " already has " + std::to_string(refs) +
                    " references, as many as its count can hold: nothing was changed");
}
// Withhold's and TryRelease's refusals: "<what> AUs P+N: <why>".
Status RefuseRun(const char* what, const PendingRun& r, const char* why) {
  return Status(Code::kInvalidArgument,
                std::string(what) + " AUs " + std::to_string(r.phys) + "+" + std::to_string(r.n) + ": " + why);
}
}  // namespace

Status SpaceMap::CanInc(std::span<const Run> runs) const {
  // An AU gains at most one reference per run, so only AUs within runs.size()
  // of the bound can pass it; count those exactly (rare), skip the rest.
  const uint64_t near = runs.size() >= max_refs_ ? 0 : max_refs_ - runs.size();
  std::unordered_map<uint64_t, uint64_t> gains;
  for (const Run& r : runs)
    for (uint64_t p = r.phys; p < r.phys + r.len; p++) {
      if (refs_[p] < near) continue;
      if (refs_[p] + ++gains[p] > max_refs_) return Overflow(p, refs_[p]);
    }
  return Status::Ok();
}

LunShare SpaceMap::Usage(const std::vector<Run>& runs) const {
  LunShare u;
  for (const Run& r : runs)
    for (uint64_t p = r.phys; p < r.phys + r.len; p++) (refs_[p] > 1 ? u.shared : u.exclusive)++;
  return u;
}

Status SpaceMap::Inc(uint64_t phys, uint64_t n) {
  for (uint64_t p = phys; p < phys + n; p++)
    if (refs_[p] >= max_refs_) return Overflow(p, refs_[p]);
  for (uint64_t p = phys; p < phys + n; p++)
    if (refs_[p]++ == 0) mapped_units_++;
  return Status::Ok();
}

void SpaceMap::Dec(uint64_t phys, uint64_t n, uint64_t tag) {
  for (uint64_t p = phys; p < phys + n; p++) {
    if (--refs_[p] == 1) unshared_[p] = tag;  // on disk it is still shared until `tag`
    if (refs_[p] != 0) continue;
    mapped_units_--;
    state_[p] = AuState::kPending;
    if (!pending_.empty() && pending_.back().tag == tag &&
        pending_.back().phys + pending_.back().n == p)
      pending_.back().n++;
    else
      pending_.push_back({p, 1, tag});
  }
}

bool SpaceMap::WritableInPlace(uint64_t p, uint64_t durable_ticket) const {
  if (refs_[p] != 1) return false;
  auto u = unshared_.find(p);
  return u == unshared_.end() || u->second <= durable_ticket;
}

bool SpaceMap::TakeFree(uint64_t n, AuState as, std::vector<uint64_t>* out) {
  uint64_t before = out->size();
  if (!free_.Take(n, out)) return false;
  for (size_t i = before; i < out->size(); i++) state_[(*out)[i]] = as;
  return true;
}

bool SpaceMap::Reserve(uint64_t n, std::vector<uint64_t>* out, const AllocHint& /*hint*/) {
  if (!TakeFree(n, AuState::kReserved, out)) return false;
  reserved_ += n;
  return true;
}

void SpaceMap::Mapped(const std::vector<uint64_t>& aus) {
  reserved_ -= aus.size();
  for (uint64_t p : aus) state_[p] = AuState::kNone;
}

void SpaceMap::Unreserve(const std::vector<uint64_t>& aus, const std::vector<uint64_t>& unzeroed) {
  reserved_ -= aus.size();
  for (uint64_t p : aus) {
    if (std::find(unzeroed.begin(), unzeroed.end(), p) != unzeroed.end()) {
      state_[p] = AuState::kQuarantine;
      quarantined_++;
    } else {
      state_[p] = AuState::kFree;
      free_.Add(p, 1);
    }
  }
}

std::vector<PendingRun> SpaceMap::TakeReleasable(uint64_t durable_ticket) {
  // Room for every run first: the loop below moves runs out of pending_ as
  // it goes, so a push_back throwing half way would leave runs in both (or
  // in neither), and a run released twice is an AU handed out twice.
  std::vector<PendingRun> ready;
  ready.reserve(pending_.size());
  auto keep = pending_.begin();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->tag <= durable_ticket)
      ready.push_back(*it);
    else
      *keep++ = *it;
  }
  pending_.erase(keep, pending_.end());
  // In AU order, merged where contiguous: one punch per physical run, however
  // the records that freed them were interleaved (a punch costs the same
  // for 1 AU as for many on some file systems).
  std::sort(ready.begin(), ready.end(),
            [](const PendingRun& a, const PendingRun& b) { return a.phys < b.phys; });
  size_t k = 0;
  for (size_t i = 0; i < ready.size(); i++) {
    releasing_ += ready[i].n;
    if (k > 0 && ready[k - 1].phys + ready[k - 1].n == ready[i].phys) {
      ready[k - 1].n += ready[i].n;
      ready[k - 1].tag = std::max(ready[k - 1].tag, ready[i].tag);
    } else {
      ready[k++] = ready[i];
    }
  }
  ready.resize(k);
  for (auto it = unshared_.begin(); it != unshared_.end();)
    it = it->second <= durable_ticket ? unshared_.erase(it) : std::next(it);
  return ready;
}

Status SpaceMap::CheckRunState(const PendingRun& r, AuState want, const char* what, const char* not_want) const {
  if (r.phys > total_units_ || r.n > total_units_ - r.phys) return RefuseRun(what, r, "beyond the pool");
  for (uint64_t p = r.phys; p < r.phys + r.n; p++)
    if (state_[p] != want) return RefuseRun(what, r, not_want);
  return Status::Ok();
}

Status SpaceMap::Withhold(const PendingRun& r) {
  if (r.n == 0) return Status::Ok();
  if (Status s = CheckRunState(r, AuState::kFree, "withholding", "not all free"); !s.ok()) return s;
  if (!free_.Remove(r.phys, r.n)) return RefuseRun("withholding", r, "not all in one free run");  // all-or-nothing
  // As TakeReleasable leaves a run: pending, counted as releasing, until
  // Release puts it back.
  for (uint64_t p = r.phys; p < r.phys + r.n; p++) state_[p] = AuState::kPending;
  releasing_ += r.n;
  return Status::Ok();
}

void SpaceMap::Release(const PendingRun& r, bool zeroed) {
  Status s = TryRelease(r, zeroed);
  assert(s.ok());  // REQUIRES: r was taken by TakeReleasable or Withhold
  (void)s;
}

Status SpaceMap::TryRelease(const PendingRun& r, bool zeroed) {
  if (r.n == 0) return Status::Ok();
  // Releasing AUs are kPending, as are those still waiting for their
  // record (pending_): the state rules out the rest, not those. Telling
  // them apart would take a walk of pending_, which may hold every free of
  // a long buffered discard, per run released under the metadata lock; the
  // caller's rule (TakeReleasable's runs, Withhold's) keeps them apart.
  if (Status s = CheckRunState(r, AuState::kPending, "release of", "some were never taken to be released"); !s.ok())
    return s;
  if (r.n > releasing_) return RefuseRun("release of", r, "more than are releasing");
  if (zeroed) free_.Add(r.phys, r.n);  // the one allocation: first, so a throw changes nothing
  releasing_ -= r.n;
  for (uint64_t p = r.phys; p < r.phys + r.n; p++)
    state_[p] = zeroed ? AuState::kFree : AuState::kQuarantine;
  if (!zeroed) quarantined_ += r.n;
  return Status::Ok();
}

bool SpaceMap::TakeMeta(uint64_t n, std::vector<uint64_t>* out) {
  handed_over_.reserve(handed_over_.size() + n);  // so nothing below throws
  const size_t before = out->size();
  if (!TakeFree(n, AuState::kMeta, out)) return false;
  handed_over_.insert(handed_over_.end(), out->begin() + static_cast<long>(before), out->end());
  return true;
}

uint64_t SpaceMap::TakeMetaRun(uint64_t max_aus, uint64_t* first_au) {
  uint64_t first = 0;
  const uint64_t n = free_.Longest(max_aus, &first);
  if (n == 0) return 0;
  handed_over_.reserve(handed_over_.size() + n);  // so nothing below throws
  free_.TakeFront(first, n);
  for (uint64_t p = first; p < first + n; p++) {
    state_[p] = AuState::kMeta;
    handed_over_.push_back(p);
  }
  *first_au = first;
  return n;
}

void SpaceMap::GiveMetaRun(uint64_t first_au, uint64_t aus) noexcept {
  if (!RunHandedOver(handed_over_, first_au, aus)) return;
  try {
    free_.Add(first_au, aus);  // all or nothing
  } catch (...) {
    return;  // still handed over: the next InstallMeta frees it
  }
  for (uint64_t p = first_au; p < first_au + aus; p++) state_[p] = AuState::kFree;
  ForgetHandedOver(&handed_over_, first_au, aus);
}

Status SpaceMap::InstallMeta(std::vector<uint64_t> new_set, uint64_t tag) {
  MetaTurnover t;
  if (Status s = SplitMetaTurnover(meta_aus_, handed_over_, new_set, &t); !s.ok()) return s;
  // All or nothing: what allocates comes first (pending's room, a free-run
  // node for each unused AU, which its Add uses if it starts a run), so a
  // std::bad_alloc changes nothing; nothing below allocates.
  pending_.reserve(pending_.size() + t.retired.size());
  FreeRuns::Spare spare;
  for (uint64_t p : t.unused) spare.emplace_hint(spare.end(), p, 1);
  // The previous checkpoint is unreachable once the new superblock is
  // durable: its AUs the new set does not keep free through the pending path.
  for (uint64_t p : t.retired) {
    state_[p] = AuState::kPending;
    pending_.push_back({p, 1, tag});
  }
  for (uint64_t p : t.unused) {
    free_.Add(p, 1, &spare);
    state_[p] = AuState::kFree;
  }
  meta_aus_ = std::move(new_set);
  handed_over_.clear();
  return Status::Ok();
}

bool SpaceMap::CrossedSoftThreshold(uint64_t free_before, uint64_t lent) const {
  return SoftThresholdCrossed(total_units_, soft_percent_, free_before, free_.count(), releasing_ + lent);
}

uint64_t SpaceMap::shared_units() const {
  uint64_t shared = 0;
  for (uint64_t p = 0; p < total_units_; p++) shared += refs_[p] > 1;
  return shared;
}

uint64_t SpaceMap::pending_units() const {
  uint64_t n = releasing_;
  for (const PendingRun& x : pending_) n += x.n;
  return n;
}

}  // namespace cowstore::store
