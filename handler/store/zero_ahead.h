// SPDX-License-Identifier: Apache-2.0
// Zeroing ahead (store-v3.md 3.5, "Zeroing ahead"): a worker thread that
// writes zeros over free space before the allocator hands it out.
//
// Why: a free grain is a hole in the pool's file (free grains must read as
// zeros, and the thinner punches them). The first write into a hole makes
// the file system allocate the block, and on ext4 that allocation is a
// journal commit which the writer's fdatasync waits for: measured, a
// durable 4 KiB first write into a clone cost 1.53-1.63x an overwrite in
// place, and 0.97-0.98x when the same space had been written with zeros
// beforehand (divergence_bench). So the pool keeps a small stock of free
// runs whose blocks are written and synced ("warm", FreeSpace::AddWarm),
// and new chunks open on them. Written zeros are free space that still
// reads as zeros, so nothing on disk changes meaning and a power cut at
// any point is harmless; the cost is a bounded amount of free space that
// is not thin (the open punches all free space, and Close punches the
// stock).
//
// This class is only the thread: the round (what to zero, the writes, the
// sync, the hand-back) is the pool's (Core::ZeroAheadRound). Poke asks for
// rounds; the worker runs them one after another until one says there is
// nothing more to do. Drain waits until the rounds asked for have run, so
// a caller short of free space sees what they had taken back.
//
// Thread safety: every member may be called concurrently. The round is
// called without this class's lock held; Poke may be called with the
// pool's metadata lock held (the round takes that lock, never this one).
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace cowstore::store {

class ZeroAhead {
 public:
  // One round; true if another should follow at once. Must not throw (a
  // throw ends the rounds until the next Poke).
  using RoundFn = std::function<bool()>;
  explicit ZeroAhead(RoundFn round);
  // Stops the worker after the round in hand.
  ~ZeroAhead();
  ZeroAhead(const ZeroAhead&) = delete;
  ZeroAhead& operator=(const ZeroAhead&) = delete;

  // Wants rounds: wakes the worker, starting it the first time (if no
  // thread can be started, nothing is zeroed ahead: first writes cost what
  // they cost without it).
  void Poke();
  // Returns once no round is running or asked for (a round asked for
  // before the call has run). Not to be called from a round.
  void Drain();
  // Rounds run so far (tests).
  uint64_t rounds() const;

 private:
  void Work();

  const RoundFn round_;
  mutable std::mutex mu_;
  std::condition_variable work_;  // poked, or stopping
  std::condition_variable idle_;  // a round ended
  bool poked_ = false, running_ = false, stop_ = false, started_ = false;
  uint64_t rounds_ = 0;
  std::thread worker_;
};

}  // namespace cowstore::store
