// SPDX-License-Identifier: Apache-2.0
// Background thinning: freed AUs go back to the free list off the command path.
//
// An AU whose last reference went in a record becomes reusable only once that
// record is durable *and* the AU is punched, because a fresh allocation relies
// on it reading as zeros (docs/design/store.md). The punch is the expensive
// part: ~0.7 ms per MiB on ext4 mounted with `discard`, so punching on the
// thread of the command that made the record durable cost a 1 MiB UNMAP at
// queue depth 32 forty times its share of the sync. Instead the commit queue's
// after-hook hands the runs whose freeing record is durable to Add() (cheap),
// and one worker thread punches them, merging runs that touch, and reports
// each through the done function, which puts it on the free list (or in
// quarantine when it could not be zeroed).
//
// Until then the AUs are "thinning": not allocatable, counted as free space
// that comes back later (SpaceInfo::thinning_units). An allocation that finds
// too little free calls Drain(), which punches what is queued on the caller's
// thread too and returns once everything added before it is done.
//
// A crash before a punch exposes nothing: open punches every free AU before
// the pool takes any write (recovery.cc). So the destructor stops the worker
// after the runs in hand and drops the queued ones.
//
// Thread safety: every member may be called concurrently; the functions given
// to the constructor are called without the Thinner's lock held, possibly from
// two threads at once (the worker and a Drain()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "handler/store/space_map.h"

namespace cowstore::store {

class Thinner {
 public:
  // Zeroes a run (a hole punch); true if it now reads as zeros.
  using PunchFn = std::function<bool(const PendingRun&)>;
  // The runs of one pass and whether each was zeroed, in the same order.
  using DoneFn = std::function<void(const std::vector<PendingRun>&, const std::vector<bool>&)>;

  Thinner(PunchFn punch, DoneFn done);
  ~Thinner();
  Thinner(const Thinner&) = delete;
  Thinner& operator=(const Thinner&) = delete;

  // Queues runs whose freeing record is durable. Starts the worker the first
  // time (if no thread can be started, punches them here).
  void Add(std::vector<PendingRun> runs);
  // Returns once every run added before the call is done, punching queued
  // runs on this thread meanwhile.
  void Drain();
  // AUs added and not yet done.
  uint64_t backlog_units() const;

 private:
  // Takes everything queued (sorted, contiguous runs merged) as pass `*first`;
  // false if nothing is queued. REQUIRES mu_.
  bool TakeLocked(std::vector<PendingRun>* runs, uint64_t* first);
  // Punches and reports one pass (releasing *lk meanwhile), then marks it done.
  void RunPass(std::vector<PendingRun>* runs, uint64_t first, std::unique_lock<std::mutex>* lk);
  void Work();

  const PunchFn punch_;
  const DoneFn done_;

  mutable std::mutex mu_;
  std::condition_variable work_;  // runs queued, or stopping
  std::condition_variable done_cv_;  // a pass finished
  std::vector<PendingRun> queue_;
  uint64_t added_ = 0;     // runs added so far (sequence numbers 0..added_-1)
  uint64_t taken_ = 0;     // runs taken into passes so far
  std::set<uint64_t> in_flight_;  // first sequence number of each pass running
  uint64_t backlog_ = 0;   // AUs added, not yet done
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace cowstore::store
