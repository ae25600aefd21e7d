// SPDX-License-Identifier: Apache-2.0
// Group commit: many durable operations share one journal write and one
// fdatasync.
//
// An operation appends its record to the store's in-memory journal buffer and
// gets a *ticket* (tickets grow in append order). To be durable it calls
// Wait(ticket). One caller at a time is the *leader*: it runs the commit
// function, which seals everything appended so far into one batch, makes it
// durable (data sync if the batch carries data, journal write, sync; or a
// checkpoint when the journal is full) and returns the newest ticket now
// durable. While that batch's sync is in flight, new operations append and
// wait: they form the next batch.
//
// Why not a mutex around the commit (as the store had): callers blocked on a
// std::mutex are woken one at a time and in no order, so 32 callers shared a
// sync only about two at a time, and a small operation could lose the mutex to
// later arrivals for hundreds of milliseconds. Here:
//   * a caller whose ticket is already durable returns at once, taking no lock;
//   * every other caller sleeps (a Waiter on its own stack, linked into the
//     queue in ticket order: no allocation per wait) and is woken when its
//     ticket is durable (or the queue fails). All sleep on the queue's one
//     futex word, each under its own bit of the wait's mask (bits given in
//     queue order, mod 32), so one FUTEX_WAKE_BITSET wakes exactly the
//     waiters a batch made durable, with no lock on either side; a waiter
//     whose bit a woken one shares (32 more queued after it) looks at its
//     state and sleeps again. (A heap-allocated waiter with its own mutex
//     and condition variable came first; then a futex word per waiter, at
//     queue depth 32 callers' CPU per command from 28.9 to 25.7 us for
//     4 MiB clones and from 32.0 to 28.9 us for 16 MiB ones, medians of
//     24-25 runs alternating with the old code on a loaded shared machine,
//     with the same syncs and sleeps per command; then one wake per batch,
//     see the next point. bench/store/commit_bench.cc.)
//   * when a batch ends, the leader wakes the waiters the batch covered,
//     holding no lock (a woken waiter never queues on the queue's lock behind
//     the others), all at once, then hands leadership on (to an Exclusive()
//     request, else the waiter with the oldest ticket still not durable): nobody waits for a
//     sync its ticket does not need, and nobody is overtaken. Waking first
//     lets the callers just woken issue their next operations into the next
//     batch: with callers in a closed loop (a queue depth), handing on first
//     splits them into two half-size batches that alternate. Waking by a
//     chain (each woken waiter wakes the next) or a binary tree of waiters
//     was measured too: it cut involuntary context switches from ~0.7 to
//     ~0.1 per command, but the later wakes missed the next batch (syncs
//     per command 0.035 -> 0.045-0.05) and the CPU per command did not drop
//     below this. Leaving leadership open for a caller already awake to
//     take (no wake to start the next sync) split the batches the same way
//     (0.035 -> 0.064 syncs per command), and so did waking the next leader
//     alone before the batch (0.045 -> 0.059, and 6-14 % slower a command,
//     2026-12-06). A thread of the queue's own that leads while callers
//     wait (so no batch waits for a woken waiter to be scheduled) gained
//     ~5 % on 4 MiB clones and nothing on 1 MiB zeroes in eight alternating
//     runs, at the cost of a second leader path: not kept (store-v3.md,
//     step 12, session 33). Where the time at queue depth 32
//     goes (perf sched/trace of clone4MiB/qd32, 2026-12-02): the futex
//     waits on locks (meta_mu_, range locks) are ~0.015 per command, so
//     there is no mutex convoy to remove (an adaptive mutex did not help:
//     branch h-qd-adaptive); a batch cycle is ~0.8-1 ms, of which the wake
//     phase is ~250 us for 12-14 wakes: each FUTEX_WAKE lets the woken caller
//     preempt the leader on its CPU, run its next operation and sleep again
//     before the next wake is issued. So a batch's waiters are woken by one
//     FUTEX_WAKE_BITSET (above): at queue depth 32, 1 MiB zeroes and
//     unmaps over a mapped LUN went from 0.52-0.70 involuntary context
//     switches per command to 0.06-0.10, and callers' CPU per command from
//     16.6-19.2 us to 11.7-16.0 us (format 3, 4 KiB grain) and from
//     19.0-23.3 us to 11.0-14.7 us (format 2), with the same syncs per
//     command (2026-12-06, 4-6 alternating runs each on a shared, loaded
//     2-CPU VM; perf had put ~28% of their CPU in the per-waiter wakes and
//     the preemptions they caused);
//   * at most one batch is in flight, so the commit function needs no lock of
//     its own against itself.
//
// A failed commit is sticky: every waiter, and every later Wait() for a ticket
// that is not durable, gets the error (the pool must be reopened). A commit
// the commit function *refuses* (RefuseBatch: it wrote nothing and changed
// nothing, e.g. a checkpoint with no room) is not: every waiter of that batch
// gets its error, and the next Wait() leads a new batch (a retry).
//
// The after-durable hook (freeing AUs whose freeing record is now durable:
// hole punches, which on a file system mounted with `discard` cost
// milliseconds) runs on the old leader's thread *after* it handed leadership
// on, so it overlaps the next batch instead of delaying it. Hooks of
// successive batches may therefore overlap each other and later batches
// (each is handed the ticket its batch made durable); an Exclusive() section
// starts only once every hook has finished, and DrainHooks() waits for the
// hooks already started. Every successful batch runs its hook: its entry in
// the list of running hooks is a node on the old leader's stack, so no
// shortage of memory can skip it (Core::ReclaimPending drains exactly that
// batch's hook to get the space it freed).
//
// Nothing on a leader's path allocates (a throw there would leave the queue
// led by nobody, or a chosen next leader never signalled): the commit
// function's exceptions are caught (RunCommit), a failed batch's status is
// moved, never copied, into the queue, and the failure a caller gets back is
// copied only after the hand-on, by a copy that cannot throw (CopyStatus).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "handler/store/status.h"
#include "handler/store/thread_annotations.h"

namespace cowstore::store {

// Leadership of the queue is a capability for Clang's analysis: state only
// the leader may touch is GUARDED_BY the queue.
class CAPABILITY("commit leadership") CommitQueue {
 public:
  // Makes everything appended so far durable; returns the newest ticket that
  // is now durable. Called by one leader at a time.
  using CommitFn = std::function<Result<uint64_t>()>;
  // Runs after a successful batch made `durable` durable, outside the
  // leadership (see above): may run concurrently with itself and with
  // later batches, never with an Exclusive() section.
  using AfterFn = std::function<void(uint64_t durable)>;

  explicit CommitQueue(CommitFn commit, AfterFn after = nullptr, uint64_t durable = 0);
  CommitQueue(const CommitQueue&) = delete;
  CommitQueue& operator=(const CommitQueue&) = delete;

  // Returns once `ticket` is durable, leading batches when it is this
  // caller's turn; the error if the queue has failed first.
  Status Wait(uint64_t ticket);

  // Runs fn while no batch or after-hook is in flight and none can start
  // (superblock changes, consistent checks). Waits for the batch in flight
  // and the hooks running, goes before any waiting batch. Returns fn's
  // status; a failure of fn is not sticky unless the caller passes it to
  // Fail().
  Status Exclusive(const std::function<Status()>& fn);

  // The same as a scope: the constructor waits as Exclusive() does, the
  // destructor ends it (for callers with many exits).
  class SCOPED_CAPABILITY ExclusiveGuard {
   public:
    explicit ExclusiveGuard(CommitQueue* q) ACQUIRE(q) : q_(q) { q_->BeginExclusive(); }
    ~ExclusiveGuard() RELEASE() { q_->EndExclusive(); }
    ExclusiveGuard(const ExclusiveGuard&) = delete;
    ExclusiveGuard& operator=(const ExclusiveGuard&) = delete;

   private:
    CommitQueue* q_;
  };

  // Tells the analysis that the caller leads the queue: for the commit
  // function, which the queue calls only from its leader.
  void AssertLeader() const ASSERT_CAPABILITY(this) {}

  // Returns once every after-hook that had started when it was called has
  // finished (e.g. before retrying an allocation that needs the AUs those
  // hooks are freeing). A caller that has seen its ticket durable finds that
  // batch's hook among them: it counts as started from the moment the
  // batch's tickets are durable, and it is never skipped.
  void DrainHooks();

  // For the commit function, from the leader, just before it returns an
  // error: the batch is refused, not failed. It wrote nothing and changed
  // nothing the next batch depends on, so the queue does not fail: every
  // waiter (none of their tickets is durable) gets the batch's error, no
  // hook runs, and a later Wait() leads a new batch, which may succeed. A
  // leader that returns Ok after calling it is not refused.
  void RefuseBatch() REQUIRES(this) { refused_ = true; }

  // For an Exclusive() fn that made tickets durable by itself (a checkpoint
  // written outside a batch): raises the durable ticket to `durable`.
  void Publish(uint64_t durable);

  // Puts the queue in the failed state (if it is not already) and wakes every
  // waiter with `why`. Never throws (callable from a catch block): out of
  // memory for the message, the failure keeps only why's code.
  void Fail(const Status& why) noexcept;

  // The newest durable ticket (never goes back).
  uint64_t durable() const { return durable_.load(std::memory_order_acquire); }
  Status failed() const;

  struct Stats {
    uint64_t batches = 0;       // commit function runs
    uint64_t waits = 0;         // Wait() calls
    uint64_t fast_returns = 0;  // ... that returned without any lock
    uint64_t slept = 0;         // ... that slept at least once
    uint64_t wake_calls = 0;    // FUTEX_WAKE system calls made (one per delivery)
  };
  Stats stats() const;

 private:
  // One sleeping caller, on the caller's stack (no allocation per wait), in
  // an intrusive list under mu_. Its state says why it was woken; it sleeps
  // on the queue's one futex word (wake_word_) under its own bit of the
  // wake mask, so one FUTEX_WAKE_BITSET wakes a whole batch's waiters and
  // no other (commit_queue.cc, Deliver). The signaller reads what it needs
  // of the waiter before the store that releases it (the waiter may
  // return, and its frame be reused, right after).
  struct Waiter {
    enum State : uint32_t { kWaiting, kLead, kDone };
    uint64_t ticket = 0;  // kExclusive for Exclusive()
    Waiter* prev = nullptr;  // guarded by mu_ while listed; `next` then
    Waiter* next = nullptr;  // links a detached chain of waiters to wake
    uint32_t bit = 0;        // its bit of the wake mask, set under mu_ when queued
    std::atomic<uint32_t> state{kWaiting};
  };
  // Signals decided under mu_ and delivered after releasing it.
  struct Wakeups {
    Waiter* lead = nullptr;  // the next leader (signalled first)
    Waiter* done = nullptr;  // chain (by next) of waiters whose ticket is durable, or all on failure
    Waiter* done_tail = nullptr;
  };
  static constexpr uint64_t kExclusive = ~uint64_t{0};
  // A batch's after-hook while it runs: a node on the old leader's stack
  // (no allocation, so no hook is ever skipped for memory), in a list under
  // mu_ in start order (numbers increase), so the head is the oldest.
  struct RunningHook {
    uint64_t seq = 0;
    RunningHook* prev = nullptr;
    RunningHook* next = nullptr;
  };

  void BeginExclusive() ACQUIRE();
  void EndExclusive() RELEASE();
  // REQUIRES mu_. Queues a waiter: ticket order (after equal tickets), or
  // the Exclusive() requests' own FIFO.
  void EnqueueLocked(Waiter* w);
  // REQUIRES mu_. Takes every waiter the durable ticket (or the failure)
  // satisfies; every waiter if `all` (a refused batch).
  void CollectSatisfiedLocked(Wakeups* w, bool all = false);
  // REQUIRES mu_, called by the leader. Hands leadership to the oldest
  // Exclusive() request, else the waiter with the oldest ticket, else ends it.
  void PassLeadershipLocked(Wakeups* w);
  // Without mu_: signals the new leader and the satisfied waiters, all
  // with one wake.
  void Deliver(Wakeups* w);
  // REQUIRES mu_. Adds a started hook at the tail / takes a finished one out.
  void LinkHookLocked(RunningHook* h);
  void UnlinkHookLocked(RunningHook* h);
  // For a leader that saw failed_ set under mu_ and has handed on: the
  // failure for its caller (failed_ never changes once set), without throwing.
  Status FailedCopy() const noexcept;
  // REQUIRES mu_. For a waiter woken with its ticket not durable: the
  // failure if the queue failed, else the refusal that woke it.
  Status NotDurableLocked() const noexcept;
  // Sets w's state and returns its bit, read before the store releases w.
  static uint32_t Release(Waiter* w, Waiter::State st);
  // Wakes the sleepers under the bits of `mask` (once their states are set).
  void WakeBits(uint32_t mask);
  // Sleeps until signalled; returns the state it was signalled with.
  Waiter::State Sleep(Waiter* w);
  // commit_ and after_, with any exception caught: a leader that unwound
  // out of Wait() would leave the queue led by nobody, and every waiter,
  // later caller and Exclusive() section asleep for ever.
  Result<uint64_t> RunCommit() noexcept;
  void RunAfter(uint64_t durable) noexcept;

  const CommitFn commit_;
  const AfterFn after_;
  std::atomic<uint64_t> durable_;

  mutable std::mutex mu_;
  bool leading_ = false;                     // a leader exists (batch or exclusive)
  Status failed_;                            // sticky
  // The last refused batch's error (RefuseBatch), for its waiters: replaced
  // by each refusal, read under mu_ by the waiters it woke.
  Status refusal_;
  // Set by the commit function (RefuseBatch) on the leader's thread, read
  // and cleared by the same leader once the function returns.
  bool refused_ = false;
  Waiter* head_ = nullptr;                   // sleeping Wait() callers, oldest ticket first
  Waiter* tail_ = nullptr;
  Waiter* ex_head_ = nullptr;                // Exclusive() requests, oldest first
  Waiter* ex_tail_ = nullptr;
  // Where every waiter sleeps: raised before each wake, so a waiter about
  // to sleep that missed the wake finds it changed and looks again.
  std::atomic<uint32_t> wake_word_{0};
  // The next waiter's bit number (mod 32): consecutive waiters get
  // different bits, so a wake reaches a waiter it is not for only when 32
  // more have queued since that one (it then looks and sleeps again).
  uint32_t next_bit_ = 0;
  uint64_t hook_seq_ = 0;                       // after-hooks started so far
  RunningHook* hooks_head_ = nullptr;           // those running, oldest first
  RunningHook* hooks_tail_ = nullptr;
  std::condition_variable hooks_done_;          // a hook finished (with mu_)
  Stats stats_;
  std::atomic<uint64_t> waits_{0}, fast_{0}, wake_calls_{0};
};

}  // namespace cowstore::store
