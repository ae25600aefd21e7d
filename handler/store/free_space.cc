// SPDX-License-Identifier: Apache-2.0
#include "handler/store/free_space.h"

#include <algorithm>
#include <cassert>
#include <bit>
#include <iterator>
#include <string>

namespace cowstore::store {

namespace {

// How far a new chunk looks past the previous one for a run that holds it
// whole, before asking the size index (which may answer farther away).
constexpr int kNextFitSteps = 16;

uint64_t Distance(const GrainRun& r, uint64_t goal) {
  if (goal < r.start) return r.start - goal;
  if (goal >= r.end()) return goal - r.end() + 1;
  return 0;
}

// Where n grains go in run r: at the goal when it lies in r with n grains
// after it (locality), else at the run's start.
uint64_t Place(const GrainRun& r, uint64_t goal, uint64_t n) {
  return goal >= r.start && goal < r.end() && r.end() - goal >= n ? goal : r.start;
}

}  // namespace

// ---------------------------------------------------------- FreeRunIndex

int FreeRunIndex::ClassOf(uint64_t len) { return std::bit_width(len) - 1; }

std::array<RunTree, 64> FreeRunIndex::MakeClasses() {
  std::array<RunTree, 64> c;
  for (RunTree& t : c) t = RunTree(RunKind::kCounted);
  return c;
}

static GrainRun Grain(const Run& r) { return {r.lba, r.len}; }

std::optional<GrainRun> FreeRunIndex::Before(const RunTree& t, uint64_t key) {
  Run r;
  if (key == 0 || !t.Floor(key - 1, &r)) return std::nullopt;
  return Grain(r);
}

std::map<uint64_t, uint64_t> FreeRunIndex::by_offset() const {
  std::map<uint64_t, uint64_t> m;
  for (const Run& r : by_offset_) m.emplace_hint(m.end(), r.lba, r.len);
  return m;
}

size_t FreeRunIndex::MemoryBytes() const {
  size_t b = by_offset_.MemoryBytes();
  for (const RunTree& t : by_class_) b += t.MemoryBytes();
  return b;
}

// Runs fit the trees: the pool is < 2^48 grains (FitsCounted holds), and a
// free run never touches another, so Insert adds exactly one entry.
void FreeRunIndex::AddRun(uint64_t start, uint64_t len) {
  int c = ClassOf(len);
  [[maybe_unused]] bool ok = by_offset_.Insert(start, 0, len);
  assert(ok);
  ok = by_class_[c].Insert(start, 0, len);
  assert(ok);
  class_mask_ |= uint64_t{1} << c;
  grains_ += len;
}

void FreeRunIndex::DropRun(uint64_t start, uint64_t len) {
  int c = ClassOf(len);
  by_class_[c].EraseStarting(start, start + 1, nullptr);
  if (by_class_[c].empty()) class_mask_ &= ~(uint64_t{1} << c);
  grains_ -= len;
  by_offset_.EraseStarting(start, start + 1, nullptr);
}

bool FreeRunIndex::Overlaps(uint64_t start, uint64_t len) const {
  if (len == 0) return false;
  auto it = by_offset_.FirstEndingAfter(start);
  return it != by_offset_.end() && (*it).lba < start + len;
}

std::optional<GrainRun> FreeRunIndex::RunHolding(uint64_t g) const {
  Run r;
  if (!by_offset_.Covering(g, &r)) return std::nullopt;
  return Grain(r);
}

bool FreeRunIndex::Insert(uint64_t start, uint64_t len) {
  if (len == 0) return true;
  if (Overlaps(start, len)) return false;
  uint64_t s = start, e = start + len;
  auto next = by_offset_.lower_bound(start);
  if (next != by_offset_.end() && (*next).lba == e) {
    const Run n = *next;
    e += n.len;
    DropRun(n.lba, n.len);
  }
  if (auto prev = Before(by_offset_, start); prev && prev->end() == s) {
    s = prev->start;
    DropRun(prev->start, prev->len);
  }
  AddRun(s, e - s);
  return true;
}

void FreeRunIndex::Remove(uint64_t start, uint64_t len) {
  if (len == 0) return;
  Run r;
  [[maybe_unused]] bool found = by_offset_.Floor(start, &r);
  assert(found);
  uint64_t s = r.lba, e = r.lba + r.len;
  DropRun(s, r.len);
  if (s < start) AddRun(s, start - s);
  if (start + len < e) AddRun(start + len, e - start - len);
}

GrainRun FreeRunIndex::NearestInClass(int cls, uint64_t goal) const {
  const RunTree& runs = by_class_[cls];
  auto lb = runs.lower_bound(goal);
  std::optional<GrainRun> before = Before(runs, goal);
  if (lb == runs.end()) return *before;
  GrainRun after = Grain(*lb);
  if (!before) return after;
  return Distance(*before, goal) <= Distance(after, goal) ? *before : after;
}

std::optional<GrainRun> FreeRunIndex::BestFit(uint64_t len, uint64_t goal) const {
  if (len == 0 || class_mask_ == 0) return std::nullopt;
  int c0 = ClassOf(len);
  // Class c0 holds runs of 2^c0 .. 2^(c0+1)-1 grains: some may be shorter
  // than len, so look at its runs nearest the goal first (a bounded walk).
  if (class_mask_ & (uint64_t{1} << c0)) {
    if (std::has_single_bit(len)) return NearestInClass(c0, goal);
    const RunTree& runs = by_class_[c0];
    auto fwd = runs.lower_bound(goal);
    std::optional<GrainRun> back = Before(runs, goal);
    std::optional<GrainRun> best;
    for (int step = 0; step < 32 && (fwd != runs.end() || back); step++) {
      if (fwd != runs.end()) {
        GrainRun r = Grain(*fwd);
        if (r.len >= len && (!best || Distance(r, goal) < Distance(*best, goal))) best = r;
        ++fwd;
      }
      if (back) {
        GrainRun r = *back;
        if (r.len >= len && (!best || Distance(r, goal) < Distance(*best, goal))) best = r;
        back = Before(runs, r.start);
      }
      if (best) break;
    }
    if (best) return best;
  }
  uint64_t above = c0 >= 63 ? 0 : class_mask_ & ~((uint64_t{2} << c0) - 1);
  if (above == 0) {
    // Only class c0 might still hold one: walk it all (rare: a nearly full pool).
    if (class_mask_ & (uint64_t{1} << c0))
      for (const Run& r : by_class_[c0])
        if (r.len >= len) return Grain(r);
    return std::nullopt;
  }
  return NearestInClass(std::countr_zero(above), goal);
}

std::optional<GrainRun> FreeRunIndex::NextFit(uint64_t goal, uint64_t len, int max_steps) const {
  auto it = by_offset_.FirstEndingAfter(goal);
  for (int step = 0; step < max_steps && it != by_offset_.end(); step++, ++it) {
    GrainRun r = Grain(*it);
    if (r.end() - std::max(goal, r.start) >= len) return r;
  }
  return std::nullopt;
}

std::optional<GrainRun> FreeRunIndex::FromLargestClass(uint64_t goal) const {
  if (class_mask_ == 0) return std::nullopt;
  return NearestInClass(63 - std::countl_zero(class_mask_), goal);
}

void FreeRunIndex::Clear() {
  by_offset_.Clear();
  for (auto& c : by_class_) c.Clear();
  class_mask_ = 0;
  grains_ = 0;
}

// ------------------------------------------------------------- FreeSpace

FreeSpace::FreeSpace(uint64_t chunk_grains) : chunk_grains_(std::max<uint64_t>(chunk_grains, 1)) {}

Status FreeSpace::Rebuild(uint64_t total, std::vector<GrainRun> allocated) {
  for (const GrainRun& r : allocated)
    if (r.start > total || r.len > total - r.start)
      return Status(Code::kCorruption, "allocated grains " + std::to_string(r.start) + "+" +
                                           std::to_string(r.len) + " beyond the pool's " +
                                           std::to_string(total));
  std::sort(allocated.begin(), allocated.end(),
            [](const GrainRun& a, const GrainRun& b) { return a.start < b.start; });
  index_.Clear();
  uint64_t cursor = 0;
  for (const GrainRun& r : allocated) {
    if (r.len == 0) continue;
    if (r.start > cursor) (void)index_.Insert(cursor, r.start - cursor);
    cursor = std::max(cursor, r.end());
  }
  if (total > cursor) (void)index_.Insert(cursor, total - cursor);
  total_ = total;
  chunks_.clear();
  pending_.clear();
  chunk_held_ = reserved_ = releasing_ = quarantined_ = pending_count_ = 0;
  return Status::Ok();
}

void FreeSpace::Grow(uint64_t total) {
  if (total <= total_) return;
  (void)index_.Insert(total_, total - total_);  // beyond the old end: nothing there yet
  total_ = total;
}

void FreeSpace::Append(std::vector<GrainRun>* out, uint64_t start, uint64_t len) {
  if (len == 0) return;
  if (!out->empty() && out->back().end() == start)
    out->back().len += len;
  else
    out->push_back({start, len});
}

void FreeSpace::ReclaimChunks() {
  for (auto& [lun, c] : chunks_) {
    (void)index_.Insert(c.cursor, c.end - c.cursor);  // held by this chunk alone
    chunk_held_ -= c.end - c.cursor;
    c.cursor = c.end;
  }
}

void FreeSpace::CloseChunk(uint32_t lun) {
  auto it = chunks_.find(lun);
  if (it == chunks_.end()) return;
  (void)index_.Insert(it->second.cursor, it->second.end - it->second.cursor);
  chunk_held_ -= it->second.end - it->second.cursor;
  chunks_.erase(it);
}

std::optional<GrainRun> FreeSpace::open_chunk(uint32_t lun) const {
  auto it = chunks_.find(lun);
  if (it == chunks_.end() || it->second.cursor == it->second.end) return std::nullopt;
  return GrainRun{it->second.cursor, it->second.end - it->second.cursor};
}

std::optional<GrainRun> FreeSpace::FindRun(uint64_t n, uint64_t goal) const {
  if (goal != AllocHint::kNoGoal)
    if (auto r = index_.NextFit(goal, n, kNextFitSteps)) return r;
  return index_.BestFit(n, goal == AllocHint::kNoGoal ? 0 : goal);
}

void FreeSpace::TakeFromIndex(uint64_t n, uint64_t goal, std::vector<GrainRun>* out) {
  if (index_.grains() < n) ReclaimChunks();  // the caller checked free_grains() >= n
  while (n > 0) {
    uint64_t start, len;
    if (auto r = FindRun(n, goal)) {
      start = Place(*r, goal, n);
      len = n;
    } else {
      // No run holds them all: the pool is fragmented. Take the longest
      // runs whole, each near the end of the last.
      GrainRun big = *index_.FromLargestClass(goal == AllocHint::kNoGoal ? 0 : goal);
      start = big.start;
      len = big.len;
    }
    index_.Remove(start, len);
    Append(out, start, len);
    n -= len;
    goal = start + len;
  }
}

void FreeSpace::OpenChunk(Chunk* c, uint64_t goal) {
  if (index_.grains() == 0) ReclaimChunks();  // c itself is used up: nothing of it returns
  if (c->has_last) goal = c->last_end;        // next to the previous chunk
  uint64_t start, len = chunk_grains_;
  if (auto r = FindRun(len, goal)) {
    start = Place(*r, goal, len);
  } else {
    // Shorter than a chunk: the pool is fragmented.
    GrainRun big = *index_.FromLargestClass(goal == AllocHint::kNoGoal ? 0 : goal);
    start = big.start;
    len = big.len;
  }
  index_.Remove(start, len);
  chunk_held_ += len;
  c->cursor = start;
  c->end = c->last_end = start + len;
  c->has_last = true;
}

Status FreeSpace::Allocate(uint64_t n, const AllocHint& hint, std::vector<GrainRun>* out) {
  if (n == 0) return Status::Ok();
  if (n > free_grains())
    return Status(Code::kNoSpace, std::to_string(n) + " grains wanted, " +
                                      std::to_string(free_grains()) + " free");
  uint64_t goal = hint.goal < total_ ? hint.goal : AllocHint::kNoGoal;
  reserved_ += n;
  if (hint.lun == AllocHint::kNoLun || n >= chunk_grains_) {
    TakeFromIndex(n, goal, out);
    return Status::Ok();
  }
  Chunk& c = chunks_[hint.lun];
  // The goal, when free and not simply this chunk's next grain: a chunk that
  // is used up is reopened there; otherwise the grains come from there.
  if (goal != AllocHint::kNoGoal && goal != c.cursor) {
    if (auto r = index_.RunHolding(goal)) {
      if (c.cursor == c.end) {
        uint64_t len = std::min(chunk_grains_, r->end() - goal);
        index_.Remove(goal, len);
        chunk_held_ += len;
        c.cursor = goal;
        c.end = c.last_end = goal + len;
        c.has_last = true;
      } else {
        uint64_t k = std::min(n, r->end() - goal);
        index_.Remove(goal, k);
        Append(out, goal, k);
        n -= k;
      }
    }
  }
  while (n > 0) {
    if (c.cursor == c.end) OpenChunk(&c, goal);
    uint64_t k = std::min(n, c.end - c.cursor);
    Append(out, c.cursor, k);
    c.cursor += k;
    chunk_held_ -= k;
    n -= k;
  }
  return Status::Ok();
}

void FreeSpace::Mapped(uint64_t n) { reserved_ -= std::min(n, reserved_); }

Status FreeSpace::CheckNotFree(const GrainRun& r, const char* what) const {
  auto bad = [&](const char* why) {
    return Status(Code::kInvalidArgument, std::string(what) + " of grains " +
                                              std::to_string(r.start) + "+" +
                                              std::to_string(r.len) + ": " + why);
  };
  if (r.start > total_ || r.len > total_ - r.start) return bad("beyond the pool");
  if (index_.Overlaps(r.start, r.len)) return bad("some are free");
  auto next = pending_.lower_bound(r.start);
  if (next != pending_.end() && next->first < r.end()) return bad("some are pending");
  if (next != pending_.begin()) {
    const PendingRun& before = std::prev(next)->second;
    if (before.phys + before.n > r.start) return bad("some are pending");
  }
  for (const auto& [lun, c] : chunks_)
    if (c.cursor < c.end && r.start < c.end && c.cursor < r.end())
      return bad("some are in a LUN's open chunk");
  return Status::Ok();
}

Status FreeSpace::Unreserve(const GrainRun& r, bool zeroed) {
  if (Status s = CheckNotFree(r, "unreserve"); !s.ok()) return s;
  if (r.len > reserved_)
    return Status(Code::kInvalidArgument, "unreserve of grains never reserved");
  reserved_ -= r.len;
  if (zeroed)
    (void)index_.Insert(r.start, r.len);  // checked above: none of it is free
  else
    quarantined_ += r.len;
  return Status::Ok();
}

Status FreeSpace::Free(const GrainRun& r, uint64_t ticket) {
  if (r.len == 0) return Status::Ok();
  if (Status s = CheckNotFree(r, "free"); !s.ok()) return s;
  auto next = pending_.lower_bound(r.start);
  auto prev = next == pending_.begin() ? pending_.end() : std::prev(next);
  if (prev != pending_.end() && prev->second.tag == ticket &&
      prev->second.phys + prev->second.n == r.start)
    prev->second.n += r.len;
  else
    pending_.emplace_hint(next, r.start, PendingRun{r.start, r.len, ticket});
  pending_count_ += r.len;
  return Status::Ok();
}

std::vector<PendingRun> FreeSpace::TakeReleasable(uint64_t durable_ticket) {
  // In grain order (the map's), merged where contiguous: one punch per
  // physical run, however the records that freed them were interleaved.
  std::vector<PendingRun> ready;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.tag > durable_ticket) {
      ++it;
      continue;
    }
    const PendingRun& p = it->second;
    if (!ready.empty() && ready.back().phys + ready.back().n == p.phys) {
      ready.back().n += p.n;
      ready.back().tag = std::max(ready.back().tag, p.tag);
    } else {
      ready.push_back(p);
    }
    releasing_ += p.n;
    pending_count_ -= p.n;
    it = pending_.erase(it);
  }
  return ready;
}

Status FreeSpace::Release(const PendingRun& r, bool zeroed) {
  if (Status s = CheckNotFree({r.phys, r.n}, "release"); !s.ok()) return s;
  if (r.n > releasing_) return Status(Code::kInvalidArgument, "release of grains never taken");
  releasing_ -= r.n;
  if (zeroed)
    (void)index_.Insert(r.phys, r.n);  // checked above: none of it is free
  else
    quarantined_ += r.n;
  return Status::Ok();
}


}  // namespace cowstore::store
