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
// Off the command's thread is not off its path: on ext4 (and any file system
// that journals the extent changes, more so with `-o discard`) an fdatasync
// waits for the journal commit that carries a concurrent punch. Measured with
// commit_bench's zero_data row (1 MiB WRITE SAME of zeros over written data,
// 32 in flight): punching as soon as each batch was durable held every batch's
// sync behind ~25 MiB of punching, 374 us a command, 41.6x the floor. So the
// worker paces itself (Pacing): it punches when no commit is in flight and
// none has started or ended for `quiet`, or when `overdue` has passed since
// its last punch or since runs arrived, whichever is later (space keeps coming
// back under a load that never pauses), or at once while more than
// `urgent_units` wait (a large delete must not keep a large share of the pool
// in limbo). Every punch, the worker's and Drain()'s, covers at most
// `slice_units`, so a sync waits behind at most one slice.
//
// A crash before a punch exposes nothing: open punches every free AU before
// the pool takes any write (recovery.cc; the few it holds for a one-sync
// record's vouch it hands back through this queue). So the destructor stops the worker
// after the runs in hand and drops the queued ones.
//
// Thread safety: every member may be called concurrently. The punch and done
// functions are called without the Thinner's lock held, possibly from two
// threads at once (the worker and a Drain()); the activity function is called
// with it held, so it must only read (an atomic load), never block or lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "handler/store/pending_run.h"

namespace cowstore::store {

// How Thinner's worker spaces its punches (the header comment says why).
struct ThinnerPacing {
  std::chrono::microseconds quiet{2000};     // a pause this long lets a punch start
  std::chrono::microseconds overdue{50000};  // a punch starts anyway this long after the last
  uint64_t slice_units = 0;                  // most units one punch covers; 0: no limit
  uint64_t urgent_units = UINT64_MAX;        // a backlog above this is punched without pause
};

class Thinner {
 public:
  // Zeroes a run (a hole punch); true if it now reads as zeros.
  using PunchFn = std::function<bool(const PendingRun&)>;
  // The runs of one pass and whether each was zeroed, in the same order.
  using DoneFn = std::function<void(const std::vector<PendingRun>&, const std::vector<bool>&)>;

  // The pool's commit counter: raised by one when a commit starts and by one
  // when it ends, so it is odd while a commit (a sync) is in flight and
  // changes whenever one starts or ends. Commits never overlap.
  using ActivityFn = std::function<uint64_t()>;
  using Pacing = ThinnerPacing;

  // Without an activity function the worker punches as soon as runs arrive.
  Thinner(PunchFn punch, DoneFn done, ActivityFn activity = nullptr, Pacing pacing = Pacing());
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
  // Sets Pacing::slice_units and urgent_units (the pool knows its unit and
  // size only once it is open).
  void set_units(uint64_t slice_units, uint64_t urgent_units);

 private:
  // Takes the oldest queued runs, up to `limit` units (0: no limit), as pass
  // `*first`, sorted with contiguous runs merged; false if nothing is queued.
  // REQUIRES mu_.
  bool TakeLocked(uint64_t limit, std::vector<PendingRun>* runs, uint64_t* first);
  // Waits until Pacing lets the worker punch; false if it is stopping or the
  // queue emptied meanwhile (a Drain took it). REQUIRES mu_ via *lk.
  bool AwaitTurn(std::unique_lock<std::mutex>* lk);
  // Punches and reports one pass (releasing *lk meanwhile), then marks it done.
  void RunPass(std::vector<PendingRun>* runs, uint64_t first, std::unique_lock<std::mutex>* lk);
  void Work();

  const PunchFn punch_;
  const DoneFn done_;
  const ActivityFn activity_;
  Pacing pacing_;  // slice_units set once, before the first Add

  mutable std::mutex mu_;
  std::condition_variable work_;  // runs queued, or stopping
  std::condition_variable done_cv_;  // a pass finished
  std::deque<PendingRun> queue_;  // runs of at most slice_units each, oldest first
  uint64_t added_ = 0;     // runs added so far (sequence numbers 0..added_-1)
  uint64_t taken_ = 0;     // runs taken into passes so far
  std::set<uint64_t> in_flight_;  // first sequence number of each pass running
  uint64_t backlog_ = 0;   // AUs added, not yet done
  bool stop_ = false;
  // The worker's view of the pool's activity: the last value seen and when it
  // was first seen, and when the worker's last punch ended.
  uint64_t seen_activity_ = 0;
  std::chrono::steady_clock::time_point seen_at_{}, last_punch_{};
  std::chrono::steady_clock::time_point queued_since_{};  // when the queue last became non-empty
  std::thread worker_;
};

}  // namespace cowstore::store
