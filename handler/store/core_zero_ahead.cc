// SPDX-License-Identifier: Apache-2.0
// Core's side of zeroing ahead (zero_ahead.h says why): what a round takes,
// writes and gives back, when one is asked for, and the stock's end at Close.
#include <algorithm>
#include <vector>

#include "handler/store/grain_space.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store {

size_t Core::WarmTargetLocked() const {
  const uint64_t aus = space_->total_units() / grain_space_->grains_per_au();
  return static_cast<size_t>(std::clamp<uint64_t>(aus / kAusPerWarmRun, 1, kWarmRuns));
}

void Core::MaybeZeroAheadLocked() {
  if (!zero_ahead_on_ || 2 * grain_space_->free_space().warm_runs() >= WarmTargetLocked()) return;
  if (zero_ahead_backoff_ > 0) {
    zero_ahead_backoff_--;
    return;
  }
  zero_ahead_.Poke();
}

bool Core::ZeroAheadRound() {
  std::vector<uint64_t> grains;
  uint64_t piece = 0;
  std::function<void()> hook;
  {
    MutexLock g(&meta_mu_);
    if (closed_.load() || meta_failed_.load() || !zero_ahead_on_) return false;
    const size_t have = grain_space_->free_space().warm_runs(), target = WarmTargetLocked();
    if (have >= target) return false;
    const uint64_t per_au = grain_space_->grains_per_au();
    piece = std::clamp<uint64_t>(kWarmRunBytes / grain_, 1, per_au);
    const uint64_t n = (target - have) * piece;
    // Room to spare, or nothing: these grains are out of free space while
    // the round runs, and a pool short of whole AUs needs them for data and
    // its checkpoint. Spare: what keeps chunks open (GrainSpace rule 7)
    // with twice the round's AUs taken.
    const uint64_t ckpt = CkptReserveLocked(0);
    const uint64_t spare = 2 * ckpt + GrainSpace::kChunkSlackAus + 2 * DivUp(n, per_au);
    // The soft threshold is no bar: the round's grains count as free for
    // it while the round holds them (ReserveLocked), as Space() shows them.
    if (grain_space_->free_whole_aus(spare) < spare ||
        !space_->ReserveKeepingAus(n, ckpt, &grains, AllocHint{AllocHint::kNoLun, warm_goal_, 0})) {
      zero_ahead_backoff_ = kZeroAheadBackoff;
      return false;
    }
    zeroing_grains_ = grains.size();
    hook = zero_ahead_hook_;
  }
  if (hook) hook();
  // The grains are reserved: nothing else writes them until they are given
  // back. Zeros over free space change nothing a reader or a recovery sees.
  static const std::vector<uint8_t> kZeros(1 << 20);
  const std::vector<GrainRun> runs = GrainSpace::ToRuns(grains);
  bool ok = true;
  for (const GrainRun& r : runs) {
    for (uint64_t off = 0, bytes = r.len * grain_; ok && off < bytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - off, kZeros.size()));
      ok = file_->Write(GrainOffset(r.start) + off, n, kZeros.data()).ok();
      off += n;
    }
  }
  // Synced, so that the file system's allocation is committed here and not
  // in some writer's sync. A failed sync fails the pool, as a failed commit
  // does (CommitBatch): it may have been some writer's buffered data the OS
  // could not write and marked clean. Through a handle of its own, so that
  // the writer's sync still sees that error (recovery.cc, NewSpaceLocked).
  if (ok && !zero_ahead_sync_->Sync().ok()) {
    FailPool();
    ok = false;
  }
  MutexLock g(&meta_mu_);
  zeroing_grains_ = 0;
  // Not zeroed for sure after a failed write: quarantine (until the next
  // open punches them), as any grain that could not be zeroed.
  space_->Unreserve(grains, ok ? std::vector<uint64_t>{} : grains);
  if (!ok) return false;
  for (const GrainRun& r : runs)
    for (uint64_t at = r.start; at < r.end(); at += piece)
      grain_space_->AddWarm({at, std::min(piece, r.end() - at)});
  warm_goal_ = runs.empty() ? AllocHint::kNoGoal : runs.back().end();
  return false;  // the stock is full again; the next low stock pokes
}

void Core::PunchWarmRuns() {
  std::vector<PendingRun> taken;
  {
    MutexLock g(&meta_mu_);
    if (grain_space_ == nullptr) return;
    // Out of free space while they are punched (as the thinner's runs), in
    // case an operation still allocates beside Close.
    for (const GrainRun& r : grain_space_->free_space().warm()) {
      const PendingRun p{r.start, r.len, 0};
      if (space_->Withhold(p).ok()) taken.push_back(p);
    }
  }
  for (const PendingRun& r : taken) (void)PunchRun(r);
  // A failed punch leaves written zeros: free grains that read as zeros all
  // the same, so they go back as zeroed (the next open punches them).
  MutexLock g(&meta_mu_);
  for (const PendingRun& r : taken) space_->Release(r, /*zeroed=*/true);
}

}  // namespace cowstore::store
