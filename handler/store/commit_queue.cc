// SPDX-License-Identifier: Apache-2.0
#include "handler/store/commit_queue.h"

#include <algorithm>
#include <utility>

namespace cowstore::store {

CommitQueue::CommitQueue(CommitFn commit, AfterFn after, uint64_t durable)
    : commit_(std::move(commit)), after_(std::move(after)), durable_(durable) {}

Status CommitQueue::failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return failed_;
}

CommitQueue::Stats CommitQueue::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  Stats s = stats_;
  s.waits = waits_.load(std::memory_order_relaxed);
  s.fast_returns = fast_.load(std::memory_order_relaxed);
  return s;
}

void CommitQueue::WakeSatisfiedLocked() {
  const uint64_t d = durable_.load(std::memory_order_relaxed);
  const bool failed = !failed_.ok();
  // Waiters are ordered by ticket, Exclusive() requests last: stop at the
  // first one still needing a batch.
  for (auto it = waiters_.begin(); it != waiters_.end() && it->first != kExclusive;) {
    if (it->first > d && !failed) break;
    it->second->done = true;
    it->second->cv.notify_one();
    it = waiters_.erase(it);
  }
}

void CommitQueue::PassLeadershipLocked() {
  auto next = waiters_.lower_bound(kExclusive);  // the oldest Exclusive() request first
  if (next == waiters_.end() && failed_.ok()) next = waiters_.begin();
  if (next == waiters_.end()) {
    leading_ = false;
    return;
  }
  next->second->lead = true;
  next->second->cv.notify_one();
  waiters_.erase(next);
}

Status CommitQueue::Wait(uint64_t ticket) {
  waits_.fetch_add(1, std::memory_order_relaxed);
  if (durable_.load(std::memory_order_acquire) >= ticket) {
    fast_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (durable_.load(std::memory_order_relaxed) >= ticket) return Status::Ok();
  if (!failed_.ok()) return failed_;
  if (leading_) {
    Waiter w;
    w.ticket = ticket;
    waiters_.emplace(ticket, &w);
    stats_.slept++;
    w.cv.wait(lk, [&] { return w.lead || w.done; });
    if (w.done) {
      if (durable_.load(std::memory_order_relaxed) >= ticket) return Status::Ok();
      return failed_;
    }
    // w.lead: the previous leader handed us the queue (leading_ stays true).
  } else {
    leading_ = true;
  }
  // The leader: run batches until our own ticket is durable. Each batch takes
  // everything appended so far, so one is enough unless the commit function
  // returns early (which it may, e.g. after a checkpoint).
  for (;;) {
    if (!failed_.ok()) {  // Fail() was called while we waited for our turn
      PassLeadershipLocked();
      return failed_;
    }
    stats_.batches++;
    lk.unlock();
    Result<uint64_t> r = commit_();
    lk.lock();
    if (!r.ok()) {
      if (failed_.ok()) failed_ = r.status();
      WakeSatisfiedLocked();
      PassLeadershipLocked();
      return failed_;
    }
    uint64_t d = std::max(durable_.load(std::memory_order_relaxed), r.value());
    durable_.store(d, std::memory_order_release);
    WakeSatisfiedLocked();
    if (after_) {
      // Still the leader: no batch starts until the hook is done, so what it
      // frees is never handed out under a batch that could still fail.
      lk.unlock();
      after_(d);
      lk.lock();
    }
    if (d >= ticket || !failed_.ok()) {
      PassLeadershipLocked();
      return d >= ticket ? Status::Ok() : failed_;
    }
  }
}

void CommitQueue::BeginExclusive() {
  std::unique_lock<std::mutex> lk(mu_);
  if (!leading_) {
    leading_ = true;
    return;
  }
  Waiter w;
  w.ticket = kExclusive;
  waiters_.emplace(kExclusive, &w);
  w.cv.wait(lk, [&] { return w.lead; });
}

void CommitQueue::EndExclusive() {
  std::lock_guard<std::mutex> g(mu_);
  WakeSatisfiedLocked();  // the exclusive part may have published tickets
  PassLeadershipLocked();
}

Status CommitQueue::Exclusive(const std::function<Status()>& fn) {
  ExclusiveGuard g(this);
  return fn();
}

void CommitQueue::Publish(uint64_t durable) {
  uint64_t d = durable_.load(std::memory_order_relaxed);
  while (d < durable &&
         !durable_.compare_exchange_weak(d, durable, std::memory_order_release,
                                         std::memory_order_relaxed)) {
  }
}

void CommitQueue::Fail(const Status& why) {
  std::lock_guard<std::mutex> g(mu_);
  if (failed_.ok()) failed_ = why.ok() ? Status(Code::kIOError, "commit queue failed") : why;
  WakeSatisfiedLocked();
}

}  // namespace cowstore::store
