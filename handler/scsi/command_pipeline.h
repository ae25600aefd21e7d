// SPDX-License-Identifier: Apache-2.0
// Commands completed asynchronously: many durable commands, one commit.
//
// A caller that must hold a thread per command until the command is durable
// pays a sleep and a wake per command (at queue depth 32 on two CPUs that
// costs more than the store's work: bench/store/commit_bench's blocking rows
// against its asynchronous ones). Here a few worker threads execute the
// commands with their durability deferred (deferred_commit.h): what must be
// durable before GOOD goes in buffered. One committer thread then commits
// the pools those commands recorded, once each for every command that
// finished meanwhile (store::Pool::Flush; the store's own group commit joins
// committers of other devices on the same pool), and hands the batch's
// results back together. A command with nothing to commit (a read, an
// INQUIRY, a write with the cache on) is handed back by its worker at once.
//
// Serial lane: commands the caller calls serial (Callbacks::serial: a
// clone, an unmap, a zeroing, whose work is the pool's metadata under the
// pool's lock) run one at a time on a worker of their own, the others on
// the `workers` threads. More threads on such commands only wait for that
// lock, and on two CPUs the sleeps and wakes cost more than the work: 20 GiB
// as 4 MiB EXTENDED COPYs at queue depth 32 (bench/scsi/scsi_bench, four
// alternating runs, 8 workers) took 62-84 ms through the serial lane against
// 101-126 ms on the workers, and the 16 MiB ones 19-21 against 31-41. A read
// waiting for the disk never queues behind them, nor they behind it.
//
// Nothing here knows tcmu-runner: a command is an opaque tag; the caller
// says how to execute one and where results go (Callbacks).
//
// GOOD still means durable: a command's result goes back only after a
// commit that began after its buffered work had finished. If that commit
// fails, a GOOD command answers Callbacks::commit_failure's result instead
// (a failed command keeps its own answer, deferred_commit.h).
//
// Lifetime: the destructor stops taking commands and returns only once
// every command submitted has been handed back and the threads have ended,
// so the caller may tear down what the tags point into right after.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/scsi/deferred_commit.h"
#include "handler/store/status.h"

namespace cowstore::scsi {

class CommandPipeline {
 public:
  struct Finished {
    void* tag = nullptr;
    CommandResult result;
  };
  // Called from the pipeline's threads; none may throw (an exception is
  // caught and the command answered INTERNAL TARGET FAILURE, or for
  // `complete` dropped: the caller's side must not throw).
  struct Callbacks {
    // Executes the command `tag` names with its durability deferred to
    // *deferred (LogicalUnit::Execute(cdb, data, deferred)).
    std::function<CommandResult(void* tag, DeferredCommit* deferred)> execute;
    // Hands results back: one batch at a time from each thread, possibly
    // from several threads at once (the caller serialises its side).
    std::function<void(std::span<const Finished>)> complete;
    // The answer of a GOOD command whose commit failed with `status`
    // (CommitFailure on the command's LogicalUnit).
    std::function<CommandResult(const store::Status& status)> commit_failure;
    // True for a command that runs in the serial lane (above); null: no
    // serial lane. Called on the submitting thread; must not throw (a
    // throw counts as false).
    std::function<bool(void* tag)> serial;
  };

  struct Stats {
    uint64_t submitted = 0;
    uint64_t completed_at_once = 0;  // nothing to commit: handed back by a worker
    uint64_t committed = 0;          // handed back after a commit
    uint64_t commits = 0;            // batches the committer ran
    uint64_t commit_failures = 0;    // batches with a failed commit
    uint64_t serial = 0;             // submitted to the serial lane
    uint64_t queued = 0;             // now: submitted, not yet taken by a worker (either lane)
    uint64_t awaiting_commit = 0;    // now: executed, waiting for the next commit
  };

  // `workers` threads (at least 1) execute commands, one more the serial
  // lane's (with Callbacks::serial), and one more commits.
  CommandPipeline(int workers, Callbacks callbacks);
  ~CommandPipeline();
  CommandPipeline(const CommandPipeline&) = delete;
  CommandPipeline& operator=(const CommandPipeline&) = delete;

  // Queues the command `tag`. False (nothing queued) when it cannot be
  // taken: out of memory, or the pipeline is being destroyed; the caller
  // then answers the command itself.
  bool Submit(void* tag) noexcept;

  Stats stats() const;

 private:
  struct Pending {
    void* tag = nullptr;
    CommandResult result;
    DeferredCommit deferred;
  };

  // Stops taking commands, lets the workers run what is queued, then the
  // committer commit and hand back what they left; joins every thread.
  void StopThreads();
  // One worker: takes commands from `lane` (queue_ or serial_queue_),
  // waking on `cv`, until stopping and the lane is empty.
  void WorkerLoop(std::deque<void*>* lane, std::condition_variable* cv);
  void CommitterLoop();
  // Commits every pool `batch` recorded (once each) and sets each command's
  // final result; then hands the batch back.
  void CommitAndComplete(std::vector<Pending>* batch);
  void Complete(std::span<const Finished> done) noexcept;

  const Callbacks cb_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;    // queue_ gained a command, or stopping_
  std::condition_variable commit_cv_;  // to_commit_ gained one, or the workers ended
  std::condition_variable serial_cv_;  // serial_queue_ gained a command, or stopping_
  std::deque<void*> queue_;            // submitted, not yet taken by a worker
  std::deque<void*> serial_queue_;     // the same, for the serial lane's worker
  std::vector<Pending> to_commit_;     // executed, waiting for the next commit
  bool stopping_ = false;
  bool workers_done_ = false;
  Stats stats_;
  std::vector<std::thread> workers_;
  std::thread committer_;
};

}  // namespace cowstore::scsi
