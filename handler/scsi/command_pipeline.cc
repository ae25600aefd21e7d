// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/command_pipeline.h"

#include <algorithm>
#include <utility>

#include "handler/scsi/sense.h"

namespace cowstore::scsi {

namespace {

CommandResult InternalFailure() {
  return CheckCondition(SenseKey::kHardwareError, asc::kInternalTargetFailure);
}

}  // namespace

CommandPipeline::CommandPipeline(int workers, Callbacks callbacks) : cb_(std::move(callbacks)) {
  try {
    committer_ = std::thread([this] { CommitterLoop(); });
    for (int i = 0; i < std::max(1, workers); ++i) workers_.emplace_back([this] { WorkerLoop(&queue_, &work_cv_); });
    if (cb_.serial) workers_.emplace_back([this] { WorkerLoop(&serial_queue_, &serial_cv_); });
  } catch (...) {
    StopThreads();  // a thread could not start: end those that did, then fail the caller
    throw;
  }
}

CommandPipeline::~CommandPipeline() { StopThreads(); }

void CommandPipeline::StopThreads() {
  // Workers take every command still queued before they end; the committer
  // then commits and hands back what they left it.
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  serial_cv_.notify_all();
  for (auto& t : workers_) t.join();
  {
    std::lock_guard<std::mutex> g(mu_);
    workers_done_ = true;
  }
  commit_cv_.notify_all();
  if (committer_.joinable()) committer_.join();
}

bool CommandPipeline::Submit(void* tag) noexcept {
  bool serial = false;
  try {
    serial = cb_.serial && cb_.serial(tag);
  } catch (...) {
    serial = false;  // the caller promised not to throw: the other lane is always right
  }
  try {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stopping_) return false;
      (serial ? serial_queue_ : queue_).push_back(tag);
      stats_.submitted++;
      if (serial) stats_.serial++;
    }
    (serial ? serial_cv_ : work_cv_).notify_one();
    return true;
  } catch (...) {
    return false;  // push_back found no memory: nothing was queued
  }
}

CommandPipeline::Stats CommandPipeline::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  Stats s = stats_;
  s.queued = queue_.size() + serial_queue_.size();
  s.awaiting_commit = to_commit_.size();
  return s;
}

void CommandPipeline::Complete(std::span<const Finished> done) noexcept {
  try {
    cb_.complete(done);
  } catch (...) {
    // The caller's side promised not to throw; nothing sensible is left to
    // do with these commands here.
  }
}

void CommandPipeline::WorkerLoop(std::deque<void*>* lane, std::condition_variable* cv) {
  for (;;) {
    void* tag = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv->wait(lk, [&] { return stopping_ || !lane->empty(); });
      if (lane->empty()) return;  // stopping, and nothing left to run
      tag = lane->front();
      lane->pop_front();
    }
    Pending p;
    p.tag = tag;
    try {
      p.result = cb_.execute(tag, &p.deferred);
    } catch (...) {  // (these threads are never cancelled: no forced unwind to pass on)
      p.result = InternalFailure();
      // What it recorded may still have buffered work to commit: kept.
    }
    if (p.deferred.empty()) {
      const Finished f{p.tag, p.result};
      {
        std::lock_guard<std::mutex> g(mu_);
        stats_.completed_at_once++;
      }
      Complete(std::span<const Finished>(&f, 1));
      continue;
    }
    bool queued = false;
    try {
      std::lock_guard<std::mutex> g(mu_);
      to_commit_.push_back(std::move(p));
      queued = true;
    } catch (...) {
    }
    if (queued) {
      commit_cv_.notify_one();
      continue;
    }
    // No memory to queue it for the committer: commit it here, alone.
    std::vector<Pending> alone;
    try {
      alone.push_back(std::move(p));
    } catch (...) {
      const Finished f{tag, InternalFailure()};
      Complete(std::span<const Finished>(&f, 1));
      continue;
    }
    CommitAndComplete(&alone);
  }
}

void CommandPipeline::CommitterLoop() {
  std::vector<Pending> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      commit_cv_.wait(lk, [&] { return workers_done_ || !to_commit_.empty(); });
      if (to_commit_.empty()) return;  // the workers ended and left nothing
      batch.swap(to_commit_);          // everything executed so far: one commit
    }
    CommitAndComplete(&batch);
    batch.clear();
  }
}

void CommandPipeline::CommitAndComplete(std::vector<Pending>* batch) {
  // One commit per pool for the whole batch: every command in it finished
  // its buffered work before this began, so the commit covers it.
  DeferredCommit all;
  std::vector<store::Status> outcomes;  // all.luns()'s, in order
  bool failed = false;
  try {
    for (const Pending& p : *batch) all.Merge(p.deferred);
    outcomes = all.CommitEach();
    failed = std::any_of(outcomes.begin(), outcomes.end(), [](const store::Status& s) { return !s.ok(); });
  } catch (...) {
    // Out of memory while committing: nothing of the batch is known durable.
    failed = true;
    outcomes.clear();
  }
  std::vector<Finished> done;
  try {
    done.reserve(batch->size());
    for (Pending& p : *batch) {
      CommandResult r = p.result;
      if (r.good()) {
        for (const auto& lun : p.deferred.luns()) {
          const int i = all.IndexOfPool(*lun);
          if (i < 0 || static_cast<size_t>(i) >= outcomes.size()) {
            r = InternalFailure();  // its commit never ran (no memory above)
            break;
          }
          if (!outcomes[static_cast<size_t>(i)].ok()) {
            r = cb_.commit_failure(outcomes[static_cast<size_t>(i)]);
            break;
          }
        }
      }
      done.push_back({p.tag, r});
    }
  } catch (...) {
    // No memory for the results: each command is still answered, one at a
    // time, as a failure (its commit's outcome cannot be told apart here).
    for (size_t i = done.size(); i < batch->size(); ++i) {
      const Finished f{(*batch)[i].tag, InternalFailure()};
      Complete(std::span<const Finished>(&f, 1));
    }
  }
  {
    std::lock_guard<std::mutex> g(mu_);
    stats_.commits++;
    if (failed) stats_.commit_failures++;
    stats_.committed += batch->size();
  }
  Complete(done);
}

}  // namespace cowstore::scsi
