// SPDX-License-Identifier: Apache-2.0
#include "handler/store/free_space.h"

#include <algorithm>
#include <cassert>
#include <bit>
#include <iterator>
#include <new>
#include <string>
#include <unordered_set>

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

std::vector<GrainRun> FreeRunIndex::runs() const {
  std::vector<GrainRun> v;
  v.reserve(by_offset_.size());
  for (const Run& r : by_offset_) v.push_back(Grain(r));
  return v;
}

size_t FreeRunIndex::MemoryBytes() const {
  size_t b = by_offset_.MemoryBytes();
  for (const RunTree& t : by_class_) b += t.MemoryBytes();
  return b;
}

// Runs fit the trees: the pool is < 2^48 grains (FitsCounted holds).
//
// Insert and Remove are all-or-nothing under std::bad_alloc: a run dropped
// from one index and not added back would lose free grains (or, from one
// index only, make the two disagree). Of the trees' operations only Insert
// allocates (all-or-nothing itself); Replace and EraseStarting never do. So
// each change turns a dropped run into a new one in place (Replace) where
// the tree allows it: always in by_offset_ (the new run covers the old or
// lies inside it), and in a class tree when the new run keeps the class.
// Every other new run is inserted first, before anything is dropped, each
// undone by erasing it again if a later insert throws; the drops come last.
// A run inserted early never merges: a free run touches no other free run,
// and the runs it will replace are in other trees (another class) or it is
// inserted at the one point where by_offset_ has room for it.

void FreeRunIndex::AddToClass(const GrainRun& r) {
  const int c = ClassOf(r.len);
  [[maybe_unused]] bool ok = by_class_[c].Insert(r.start, 0, r.len);
  assert(ok);
  class_mask_ |= uint64_t{1} << c;
}

void FreeRunIndex::DropFromClass(const GrainRun& r) {
  const int c = ClassOf(r.len);
  by_class_[c].EraseStarting(r.start, r.start + 1, nullptr);
  if (by_class_[c].empty()) class_mask_ &= ~(uint64_t{1} << c);
}

void FreeRunIndex::ReplaceInClass(const GrainRun& old, const GrainRun& r) {
  assert(ClassOf(old.len) == ClassOf(r.len));
  by_class_[ClassOf(r.len)].Replace(old.start, {r.start, 0, r.len});
}

std::string FreeRunIndex::Check() const {
  uint64_t grains = 0, mask = 0;
  std::array<size_t, 64> per_class{};
  uint64_t prev_end = UINT64_MAX;
  for (const Run& r : by_offset_) {
    if (r.lba == prev_end) return "free runs touch at " + std::to_string(r.lba);
    prev_end = r.lba + r.len;
    const int c = ClassOf(r.len);
    Run x;
    if (!by_class_[c].Covering(r.lba, &x) || x.lba != r.lba || x.len != r.len)
      return "run " + std::to_string(r.lba) + "+" + std::to_string(r.len) + " missing from class " +
             std::to_string(c);
    per_class[c]++;
    mask |= uint64_t{1} << c;
    grains += r.len;
  }
  for (int c = 0; c < 64; c++)
    if (by_class_[c].size() != per_class[c]) return "class " + std::to_string(c) + " holds stray runs";
  if (mask != class_mask_) return "class mask out of step";
  if (grains != grains_) return "grain count out of step";
  return {};
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
  std::optional<GrainRun> prev, next;
  if (auto it = by_offset_.lower_bound(start); it != by_offset_.end() && (*it).lba == start + len)
    next = Grain(*it);
  if (auto b = Before(by_offset_, start); b && b->end() == start) prev = b;
  const uint64_t s = prev ? prev->start : start;
  const GrainRun m{s, (next ? next->end() : start + len) - s};
  const int cm = ClassOf(m.len);
  const bool prev_keeps = prev && ClassOf(prev->len) == cm;
  const bool next_keeps = !prev_keeps && next && ClassOf(next->len) == cm;
  // Allocating steps (at most two, the second undone if it throws).
  if (!prev_keeps && !next_keeps) AddToClass(m);
  if (!prev && !next) {
    try {
      [[maybe_unused]] bool ok = by_offset_.Insert(m.start, 0, m.len);
      assert(ok);
    } catch (...) {
      DropFromClass(m);
      throw;
    }
  }
  // Nothing below allocates.
  if (prev && next) by_offset_.EraseStarting(next->start, next->start + 1, nullptr);
  if (prev || next) by_offset_.Replace(prev ? prev->start : next->start, {m.start, 0, m.len});
  if (prev_keeps) {
    if (next) DropFromClass(*next);
    ReplaceInClass(*prev, m);
  } else if (next_keeps) {
    if (prev) DropFromClass(*prev);
    ReplaceInClass(*next, m);
  } else {
    if (prev) DropFromClass(*prev);
    if (next) DropFromClass(*next);
  }
  grains_ += len;
  return true;
}

void FreeRunIndex::Remove(uint64_t start, uint64_t len) {
  if (len == 0) return;
  Run found;
  [[maybe_unused]] bool ok = by_offset_.Floor(start, &found);
  assert(ok);
  const GrainRun r = Grain(found);
  assert(start >= r.start && start + len <= r.end());
  std::optional<GrainRun> left, right;
  if (r.start < start) left = GrainRun{r.start, start - r.start};
  if (start + len < r.end()) right = GrainRun{start + len, r.end() - start - len};
  const int cr = ClassOf(r.len);
  const bool left_keeps = left && ClassOf(left->len) == cr;
  const bool right_keeps = !left_keeps && right && ClassOf(right->len) == cr;
  // Allocating steps (at most three, each undone if a later one throws).
  const bool add_left = left && !left_keeps, add_right = right && !right_keeps;
  if (add_left) AddToClass(*left);
  try {
    if (add_right) AddToClass(*right);
  } catch (...) {
    if (add_left) DropFromClass(*left);
    throw;
  }
  if (left && right) {
    by_offset_.Replace(r.start, {left->start, 0, left->len});
    try {
      [[maybe_unused]] bool ok2 = by_offset_.Insert(right->start, 0, right->len);
      assert(ok2);
    } catch (...) {
      by_offset_.Replace(r.start, {r.start, 0, r.len});
      if (add_right) DropFromClass(*right);
      if (add_left) DropFromClass(*left);
      throw;
    }
  } else if (left || right) {
    const GrainRun& piece = left ? *left : *right;
    by_offset_.Replace(r.start, {piece.start, 0, piece.len});
  } else {
    by_offset_.EraseStarting(r.start, r.start + 1, nullptr);
  }
  // Nothing below allocates.
  if (left_keeps)
    ReplaceInClass(r, *left);
  else if (right_keeps)
    ReplaceInClass(r, *right);
  else
    DropFromClass(r);
  grains_ -= len;
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

FreeSpace::FreeSpace(uint64_t chunk_grains, size_t max_chunks)
    : chunk_grains_(std::max<uint64_t>(chunk_grains, 1)), max_chunks_(std::max<size_t>(max_chunks, 1)) {}

Status FreeSpace::Rebuild(uint64_t total, std::vector<GrainRun> allocated) {
  for (const GrainRun& r : allocated)
    if (r.start > total || r.len > total - r.start)
      return Status(Code::kCorruption, "allocated grains " + std::to_string(r.start) + "+" +
                                           std::to_string(r.len) + " beyond the pool's " +
                                           std::to_string(total));
  auto by_start = [](const GrainRun& a, const GrainRun& b) { return a.start < b.start; };
  // GrainSpace passes them in order: a check instead of a sort.
  if (!std::is_sorted(allocated.begin(), allocated.end(), by_start))
    std::sort(allocated.begin(), allocated.end(), by_start);
  // Built aside and moved in (moves never allocate): a std::bad_alloc on the
  // way leaves everything as it was.
  FreeRunIndex index;
  uint64_t cursor = 0;
  for (const GrainRun& r : allocated) {
    if (r.len == 0) continue;
    if (r.start > cursor) (void)index.Insert(cursor, r.start - cursor);
    cursor = std::max(cursor, r.end());
  }
  if (total > cursor) (void)index.Insert(cursor, total - cursor);
  index_ = std::move(index);
  total_ = total;
  chunks_.clear();
  lru_.clear();
  held_.clear();
  pending_.clear();
  releasing_runs_.clear();
  quarantine_runs_.clear();
  warm_.clear();
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

void FreeSpace::AddWarm(const GrainRun& r) noexcept {
  if (r.len == 0 || warm_.size() >= kMaxWarmRuns) return;
  std::optional<GrainRun> holder = index_.RunHolding(r.start);
  if (!holder || r.len > holder->end() - r.start) return;
  // Warm runs never overlap: one that shares a grain with r is replaced.
  ForgetWarm(r.start, r.len);
  try {
    warm_.emplace(r.start, r.len);
  } catch (const std::bad_alloc&) {
    // A hint: without it a first write there costs a block allocation.
  }
}

void FreeSpace::ForgetWarm(uint64_t start, uint64_t len) noexcept {
  if (warm_.empty() || len == 0) return;
  auto it = warm_.upper_bound(start);
  if (it != warm_.begin() && std::prev(it)->first + std::prev(it)->second > start) --it;
  while (it != warm_.end() && it->first < start + len) it = warm_.erase(it);
}

std::vector<GrainRun> FreeSpace::warm() const {
  std::vector<GrainRun> v;
  v.reserve(warm_.size());
  for (const auto& [start, len] : warm_) v.push_back({start, len});
  return v;
}

void FreeSpace::Unhold(Chunk* c) {
  if (c->cursor == c->end) return;
  (void)index_.Insert(c->cursor, c->end - c->cursor);  // held by this chunk alone; may throw first
  chunk_held_ -= c->end - c->cursor;
  c->cursor = c->end;
  SetHeldCursor(c->end, c->end);
}

void FreeSpace::EnsureSpareHeld() {
  if (!spare_held_.empty()) return;
  HeldRanges one;
  spare_held_ = one.extract(one.emplace(0, 0).first);
}

void FreeSpace::Hold(uint64_t cursor, uint64_t end) noexcept {
  assert(!spare_held_.empty() && cursor < end);
  spare_held_.key() = end;
  spare_held_.mapped() = cursor;
  const auto inserted = held_.insert(std::move(spare_held_));
  assert(inserted.inserted);  // chunks are disjoint: no other range ends there
  (void)inserted;
}

void FreeSpace::SetHeldCursor(uint64_t end, uint64_t cursor) noexcept {
  auto it = held_.find(end);
  assert(it != held_.end());
  if (it == held_.end()) return;
  if (cursor < end) {
    it->second = cursor;
  } else if (spare_held_.empty()) {
    spare_held_ = held_.extract(it);
  } else {
    held_.erase(it);
  }
}

void FreeSpace::ReclaimChunks(const ChunkKey* keep) {
  if (chunk_held_ == 0) return;  // nothing held: no need to visit every entry
  for (auto& [key, c] : chunks_)
    if (!keep || !(key == *keep)) Unhold(&c);
}

void FreeSpace::CloseChunk(uint32_t lun) {
  for (auto it = chunks_.begin(); it != chunks_.end();) {
    if (it->first.lun != lun) {
      ++it;
      continue;
    }
    Unhold(&it->second);
    lru_.erase(it->second.lru);
    it = chunks_.erase(it);
  }
}

void FreeSpace::EvictBeyondBound(const ChunkKey& keep) noexcept {
  const size_t bound = static_cast<size_t>(
      std::clamp<uint64_t>(total_ / chunk_grains_ / kAusPerOpenChunk, std::min(kMinOpenChunks, max_chunks_),
                           max_chunks_));
  while (chunks_.size() > bound) {
    auto victim = lru_.begin();
    if (victim != lru_.end() && *victim == keep) ++victim;
    if (victim == lru_.end()) return;
    auto oldest = chunks_.find(*victim);
    assert(oldest != chunks_.end());
    try {
      Unhold(&oldest->second);
    } catch (const std::bad_alloc&) {
      return;  // stays open, one over the bound: no grain is lost
    }
    lru_.erase(victim);
    chunks_.erase(oldest);
  }
}

std::optional<GrainRun> FreeSpace::open_chunk(uint32_t lun, uint64_t region) const {
  auto it = chunks_.find(ChunkKey{lun, region});
  if (it == chunks_.end() || it->second.cursor == it->second.end) return std::nullopt;
  return GrainRun{it->second.cursor, it->second.end - it->second.cursor};
}

std::vector<GrainRun> FreeSpace::chunk_runs() const {
  std::vector<GrainRun> v;
  v.reserve(held_.size());
  for (const auto& [end, cursor] : held_) v.push_back({cursor, end - cursor});
  return v;
}

namespace {

// A copy of a by-first-grain map of runs, in that order (the check's copy).
std::vector<PendingRun> RunsOf(const std::map<uint64_t, PendingRun>& m) {
  std::vector<PendingRun> v;
  v.reserve(m.size());
  for (const auto& [start, r] : m) v.push_back(r);
  return v;
}

}  // namespace

std::vector<PendingRun> FreeSpace::pending_runs() const { return RunsOf(pending_); }
std::vector<PendingRun> FreeSpace::releasing_runs() const { return RunsOf(releasing_runs_); }
std::vector<PendingRun> FreeSpace::quarantined_runs() const { return RunsOf(quarantine_runs_); }

std::optional<GrainRun> FreeSpace::FindRun(uint64_t n, uint64_t goal) const {
  if (goal != AllocHint::kNoGoal)
    if (auto r = index_.NextFit(goal, n, kNextFitSteps)) return r;
  return index_.BestFit(n, goal == AllocHint::kNoGoal ? 0 : goal);
}

void FreeSpace::PlanFromIndex(uint64_t n, uint64_t goal, bool chunk,
                              std::vector<GrainRun>* take) const {
  if (chunk) {
    // Next to where the last chunk ended when a whole chunk fits there (a
    // region's data continues); else the smallest run that holds half a
    // chunk, up to a chunk of it: a tail a closed chunk gave back is used
    // before a whole AU is split, so small writers (many LUNs, many
    // regions) pack together instead of each splitting an AU of its own.
    if (goal != AllocHint::kNoGoal)
      if (auto r = index_.NextFit(goal, chunk_grains_, kNextFitSteps)) {
        take->push_back({Place(*r, goal, chunk_grains_), chunk_grains_});
        return;
      }
    // Else on the lowest zeroed-ahead run, if a chunk's first n grains fit
    // from its start: written blocks (AddWarm says why).
    if (!warm_.empty()) {
      const uint64_t ws = warm_.begin()->first;
      std::optional<GrainRun> r = index_.RunHolding(ws);
      assert(r);  // a warm run lies in the index
      if (r && r->end() - ws >= n) {
        take->push_back({ws, std::min(chunk_grains_, r->end() - ws)});
        return;
      }
    }
    if (auto r = index_.BestFit(std::max(n, (chunk_grains_ + 1) / 2), goal == AllocHint::kNoGoal ? 0 : goal)) {
      const uint64_t len = std::min(r->len, chunk_grains_);
      take->push_back({Place(*r, goal, len), len});
      return;
    }
  } else if (auto r = FindRun(n, goal)) {
    take->push_back({Place(*r, goal, n), n});
    return;
  }
  // No run holds them: the pool is fragmented. The longest runs whole; for
  // an allocation (not a chunk), once the rest fits in one run, from the run
  // FindRun gives near the end of the last (unless it is one taken whole
  // already), else from the next longest.
  std::unordered_set<uint64_t> whole;  // starts of the runs planned whole
  uint64_t rest = n;
  index_.VisitLongestFirst(goal == AllocHint::kNoGoal ? 0 : goal, [&](const GrainRun& r) {
    if (!chunk && r.len >= rest) {
      take->push_back({Place(r, goal, rest), rest});
      rest = 0;
      return false;
    }
    take->push_back(r);  // a chunk keeps what it does not use
    rest -= std::min(rest, r.len);
    if (rest == 0) return false;
    if (!chunk) {
      whole.insert(r.start);
      goal = r.end();
      if (auto f = FindRun(rest, goal); f && !whole.contains(f->start)) {
        take->push_back({Place(*f, goal, rest), rest});
        rest = 0;
        return false;
      }
    }
    return true;
  });
  assert(rest == 0);  // the caller checked index_.grains() >= n
}

void FreeSpace::RemovePlanned(const std::vector<GrainRun>& take) {
  // The piece that is not a whole free run, if any, first: only it may
  // split a run and so allocate, and nothing has changed yet if it throws.
  size_t split = take.size();
  for (size_t i = 0; i < take.size() && split == take.size(); i++) {
    std::optional<GrainRun> r = index_.RunHolding(take[i].start);
    assert(r && take[i].end() <= r->end());
    if (r->start != take[i].start || r->len != take[i].len) split = i;
  }
  if (split < take.size()) index_.Remove(take[split].start, take[split].len);
  for (size_t i = 0; i < take.size(); i++) {
    if (i == split) continue;
    assert(index_.RunHolding(take[i].start) == take[i]);  // whole: never allocates
    index_.Remove(take[i].start, take[i].len);
  }
  for (const GrainRun& t : take) {
    if (warm_.contains(t.start)) warm_opened_++;
    ForgetWarm(t.start, t.len);
  }
}

// The plan changes nothing: the chunk the hint names is only read (a missing
// one is an empty chunk that never ended anywhere).
std::optional<FreeSpace::AllocPlan> FreeSpace::PlanAllocation(uint64_t n, const AllocHint& hint) const {
  AllocPlan p;
  p.n = n;
  p.hint = hint;
  if (p.hint.goal >= total_) p.hint.goal = AllocHint::kNoGoal;
  const uint64_t goal = p.hint.goal;
  if (n == 0) return p;
  if (hint.lun == AllocHint::kNoLun || n >= chunk_grains_) {
    if (index_.grains() < n) return std::nullopt;
    PlanFromIndex(n, goal, /*chunk=*/false, &p.take);
    return p;
  }
  p.chunked = true;
  Chunk c;
  if (auto it = chunks_.find(KeyOf(hint)); it != chunks_.end()) c = it->second;
  if (index_.grains() + (c.end - c.cursor) < n) return std::nullopt;
  // The goal, when n grains are free there and it is not simply this
  // chunk's next grain: a chunk that is used up is reopened there; otherwise
  // the grains come from there.
  if (goal != AllocHint::kNoGoal && goal != c.cursor) {
    if (auto r = index_.RunHolding(goal); r && r->end() - goal >= n) {
      p.from_goal = c.cursor != c.end;
      p.take.push_back({goal, p.from_goal ? n : std::min(chunk_grains_, r->end() - goal)});
      return p;
    }
  }
  // Else from the chunk, then from new ones (next to the last, or best-fit).
  const uint64_t here = std::min(n, c.end - c.cursor);
  if (here < n) PlanFromIndex(n - here, c.has_last ? c.last_end : goal, /*chunk=*/true, &p.take);
  return p;
}

// All-or-nothing under std::bad_alloc, although an allocation may take
// several runs: everything that may allocate comes before anything changes
// (the plan, made by queries that change nothing; the room in *out for every
// run it appends; the chunk's entry and its LRU node, no change while the
// chunk is empty; the held-range index's spare node), then
// the one index change that may allocate (a plan splits at most one run),
// then only steps that cannot fail (removing whole runs, the chunk cursor,
// the counts). Undoing the runs already taken instead would mean inserting
// them back into the index, which may itself need a node and fail. Closing
// the least recently used chunk past the bound comes last and is best
// effort (it changes no count).
void FreeSpace::TakePlanned(const AllocPlan& p, std::vector<GrainRun>* out) {
  if (p.n == 0) return;
  if (!p.chunked) {
    out->reserve(out->size() + p.take.size());
    RemovePlanned(p.take);  // all-or-nothing: the one piece that may split goes first
    // Nothing below allocates.
    for (const GrainRun& r : p.take) Append(out, r.start, r.len);
    reserved_ += p.n;
    return;
  }
  const ChunkKey key = KeyOf(p.hint);
  EnsureSpareHeld();
  auto [entry, added] = chunks_.try_emplace(key);
  if (added) {
    try {
      entry->second.lru = lru_.insert(lru_.begin(), key);  // least recent until used below
    } catch (...) {
      chunks_.erase(entry);
      throw;
    }
  }
  Chunk& c = entry->second;
  out->reserve(out->size() + 1 + p.take.size());
  RemovePlanned(p.take);
  // Nothing below allocates.
  reserved_ += p.n;
  lru_.splice(lru_.end(), lru_, c.lru);
  uint64_t n = p.n;
  if (p.from_goal) {
    Append(out, p.hint.goal, n);
  } else {
    auto next = p.take.begin();
    while (n > 0) {
      if (c.cursor == c.end) {
        assert(next != p.take.end());
        chunk_held_ += next->len;
        c.cursor = next->start;
        c.end = c.last_end = next->end();
        c.has_last = true;
        Hold(c.cursor, c.end);  // the spare: the last one gave its node back
        ++next;
      }
      uint64_t k = std::min(n, c.end - c.cursor);
      Append(out, c.cursor, k);
      c.cursor += k;
      SetHeldCursor(c.end, c.cursor);
      chunk_held_ -= k;
      n -= k;
    }
  }
  EvictBeyondBound(key);
}

// Other chunks given back first (ReclaimChunks) change no count: they may
// stay given back. The rest is PlanAllocation then TakePlanned.
Status FreeSpace::Allocate(uint64_t n, const AllocHint& hint, std::vector<GrainRun>* out) {
  if (n == 0) return Status::Ok();
  if (n > free_grains())
    return Status(Code::kNoSpace, std::to_string(n) + " grains wanted, " +
                                      std::to_string(free_grains()) + " free");
  std::optional<AllocPlan> p = PlanAllocation(n, hint);
  if (!p) {
    // free_grains() >= n, checked above: the others' chunks hold the rest.
    const bool chunked = hint.lun != AllocHint::kNoLun && n < chunk_grains_;
    const ChunkKey own = KeyOf(hint);
    ReclaimChunks(chunked ? &own : nullptr);
    p = PlanAllocation(n, hint);
    assert(p);
  }
  TakePlanned(*p, out);
  return Status::Ok();
}

Status FreeSpace::TakeRun(const GrainRun& r) { return TakeFromIndex({r.start, r.len, 0}, Taken::kReserved, "taking"); }

Status FreeSpace::TakeFromIndex(const PendingRun& r, Taken to, const char* what) {
  if (r.n == 0) return Status::Ok();
  std::optional<GrainRun> holder = index_.RunHolding(r.phys);
  if (!holder || r.n > holder->end() - r.phys)
    return Status(Code::kInvalidArgument, std::string(what) + " grains " + std::to_string(r.phys) + "+" +
                                              std::to_string(r.n) + ": not all free in one run");
  // A releasing run's node is allocated first: nothing changed if it throws.
  std::map<uint64_t, PendingRun> node;
  if (to == Taken::kReleasing) node.emplace(r.phys, r);
  index_.Remove(r.phys, r.n);  // all-or-nothing
  // Nothing below allocates.
  ForgetWarm(r.phys, r.n);
  if (to == Taken::kReserved) {
    reserved_ += r.n;
  } else {
    releasing_runs_.insert(node.extract(node.begin()));  // a node move
    releasing_ += r.n;
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
  // The one held range that can share a grain with r: the first ending after r.start.
  if (auto h = held_.upper_bound(r.start); h != held_.end() && h->second < r.end())
    return bad("some are in a LUN's open chunk");
  return Status::Ok();
}

Status FreeSpace::Unreserve(const GrainRun& r, bool zeroed) {
  if (Status s = CheckNotFree(r, "unreserve"); !s.ok()) return s;
  if (r.len > reserved_)
    return Status(Code::kInvalidArgument, "unreserve of grains never reserved");
  // The index first: if it throws (std::bad_alloc), nothing changed.
  if (zeroed) {
    (void)index_.Insert(r.start, r.len);  // checked above: none of it is free
  } else {
    auto [it, added] = quarantine_runs_.try_emplace(r.start, PendingRun{r.start, r.len, 0});
    if (!added) return Status(Code::kInvalidArgument, "unreserve of grains quarantined already");
    quarantined_ += r.len;
  }
  reserved_ -= r.len;
  return Status::Ok();
}

Status FreeSpace::Unallocate(const GrainRun& r) {
  if (r.len == 0) return Status::Ok();
  if (Status s = CheckNotFree(r, "unallocate"); !s.ok()) return s;
  (void)index_.Insert(r.start, r.len);  // checked above: none of it is free
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
  // Room for every run first, so nothing below allocates: a push_back
  // throwing half way would lose the runs already erased from pending_
  // (counted as releasing, never released).
  std::vector<PendingRun> ready;
  ready.reserve(pending_.size());
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
    releasing_runs_.insert(pending_.extract(it++));  // a node move: allocates nothing
  }
  return ready;
}

Status FreeSpace::Withhold(const PendingRun& r) { return TakeFromIndex(r, Taken::kReleasing, "withholding"); }

Status FreeSpace::Release(const PendingRun& r, bool zeroed) {
  if (r.n == 0) return Status::Ok();
  if (Status s = CheckNotFree({r.phys, r.n}, "release"); !s.ok()) return s;
  // r is (a slice of) what TakeReleasable returned: releasing runs laid end
  // to end over it, the first and last perhaps reaching beyond.
  auto first = releasing_runs_.upper_bound(r.phys);
  if (first == releasing_runs_.begin()) return Status(Code::kInvalidArgument, "release of grains never taken");
  --first;
  auto last = first;  // one past the last run covering r
  uint64_t at = r.phys;
  if (first->second.phys + first->second.n <= r.phys) return Status(Code::kInvalidArgument, "release of grains never taken");
  while (at < r.phys + r.n) {
    if (last == releasing_runs_.end() || (last != first && last->first != at))
      return Status(Code::kInvalidArgument, "release of grains never taken");
    at = last->second.phys + last->second.n;
    ++last;
  }
  const auto final_run = std::prev(last);
  const uint64_t head = r.phys - first->second.phys, tail_end = at, tail = tail_end - (r.phys + r.n);
  // Everything that allocates first (nothing changed if it throws): a node
  // for a tail cut from the run that keeps its head, the quarantine's node,
  // the index's insert.
  std::map<uint64_t, PendingRun> spare;
  if (head != 0 && tail != 0 && final_run == first)
    spare.emplace(r.phys + r.n, PendingRun{r.phys + r.n, tail, first->second.tag});
  std::map<uint64_t, PendingRun> quarantine;
  if (!zeroed) quarantine.emplace(r.phys, PendingRun{r.phys, r.n, final_run->second.tag});
  if (zeroed) (void)index_.Insert(r.phys, r.n);  // checked above: none of it is free
  // Then node moves only.
  const uint64_t final_tag = final_run->second.tag;
  if (head != 0) first->second.n = head;
  // The runs wholly inside r but the last go; the last keeps its tail (cut
  // from the first run, a spare node holds it).
  const auto erase_from = head != 0 ? std::next(first) : first;
  if (erase_from != last && erase_from != final_run) releasing_runs_.erase(erase_from, final_run);
  if (final_run == first && head != 0) {
    if (!spare.empty()) releasing_runs_.insert(spare.extract(spare.begin()));
  } else if (tail != 0) {
    auto node = releasing_runs_.extract(final_run);
    node.key() = r.phys + r.n;
    node.mapped() = PendingRun{r.phys + r.n, tail, final_tag};
    releasing_runs_.insert(std::move(node));
  } else {
    releasing_runs_.erase(final_run);
  }
  if (!zeroed) {
    quarantine_runs_.insert(quarantine.extract(quarantine.begin()));
    quarantined_ += r.n;
  }
  releasing_ -= r.n;
  return Status::Ok();
}


}  // namespace cowstore::store
