// SPDX-License-Identifier: Apache-2.0
#include "handler/store/thinner.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace cowstore::store {

Thinner::Thinner(PunchFn punch, DoneFn done, ActivityFn activity, Pacing pacing)
    : punch_(std::move(punch)), done_(std::move(done)), activity_(std::move(activity)),
      pacing_(pacing) {}

Thinner::~Thinner() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t Thinner::backlog_units() const {
  std::lock_guard<std::mutex> g(mu_);
  return backlog_;
}

void Thinner::set_units(uint64_t slice_units, uint64_t urgent_units) {
  std::lock_guard<std::mutex> g(mu_);
  pacing_.slice_units = slice_units;
  pacing_.urgent_units = urgent_units;
}

void Thinner::Add(std::vector<PendingRun> runs) {
  if (runs.empty()) return;
  std::unique_lock<std::mutex> lk(mu_);
  const bool was_empty = queue_.empty();
  if (was_empty) queued_since_ = std::chrono::steady_clock::now();
  const uint64_t slice = pacing_.slice_units;
  for (const PendingRun& r : runs) {
    backlog_ += r.n;
    // Slices, so that no punch is longer than Pacing allows.
    for (uint64_t off = 0; off < r.n;) {
      const uint64_t n = slice == 0 ? r.n - off : std::min(slice, r.n - off);
      queue_.push_back({r.phys + off, n, r.tag});
      added_++;
      off += n;
    }
  }
  if (!worker_.joinable() && !stop_) {
    try {
      worker_ = std::thread([this] { Work(); });
    } catch (const std::system_error&) {
      // No thread: do it here, as the command path did before.
      std::vector<PendingRun> mine;
      uint64_t first;
      while (TakeLocked(slice, &mine, &first)) RunPass(&mine, first, &lk);
      return;
    }
  }
  lk.unlock();
  // Only a worker waiting for work needs waking; one pacing itself wakes on
  // its own deadline (a wake per batch would cost the committing thread).
  if (was_empty) work_.notify_one();
}

bool Thinner::TakeLocked(uint64_t limit, std::vector<PendingRun>* runs, uint64_t* first) {
  if (queue_.empty()) return false;
  size_t take = 0;
  uint64_t units = 0;
  while (take < queue_.size() &&
         (take == 0 || limit == 0 || units + queue_[take].n <= limit))
    units += queue_[take++].n;
  *first = taken_;
  taken_ += take;
  in_flight_.insert(*first);
  runs->assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  // One punch per physical run, however the records that freed them were
  // interleaved: punching 32 MiB at once costs about half of 32 x 1 MiB.
  std::sort(runs->begin(), runs->end(),
            [](const PendingRun& a, const PendingRun& b) { return a.phys < b.phys; });
  size_t k = 0;
  for (size_t i = 0; i < runs->size(); i++) {
    PendingRun& r = (*runs)[i];
    if (k > 0 && (*runs)[k - 1].phys + (*runs)[k - 1].n == r.phys) {
      (*runs)[k - 1].n += r.n;
      (*runs)[k - 1].tag = std::max((*runs)[k - 1].tag, r.tag);
    } else {
      (*runs)[k++] = r;
    }
  }
  runs->resize(k);
  return true;
}

void Thinner::RunPass(std::vector<PendingRun>* runs, uint64_t first,
                      std::unique_lock<std::mutex>* lk) {
  lk->unlock();
  std::vector<bool> ok(runs->size());
  uint64_t units = 0;
  for (size_t i = 0; i < runs->size(); i++) {
    ok[i] = punch_((*runs)[i]);
    units += (*runs)[i].n;
  }
  done_(*runs, ok);
  runs->clear();
  lk->lock();
  backlog_ -= units;
  in_flight_.erase(first);
  done_cv_.notify_all();
}

bool Thinner::AwaitTurn(std::unique_lock<std::mutex>* lk) {
  using Clock = std::chrono::steady_clock;
  if (!activity_) return !stop_ && !queue_.empty();
  for (;;) {
    if (stop_ || queue_.empty()) return false;
    const Clock::time_point now = Clock::now();
    if (backlog_ > pacing_.urgent_units) return true;
    const uint64_t a = activity_();
    if (a != seen_activity_ || (a & 1) != 0) {  // a commit started or ended, or is in flight
      seen_activity_ = a;
      seen_at_ = now;
    }
    const Clock::time_point quiet_at = seen_at_ + pacing_.quiet;
    const Clock::time_point overdue_at = std::max(last_punch_, queued_since_) + pacing_.overdue;
    if (now >= quiet_at || now >= overdue_at) return true;
    // Add's wake-ups do not cut this short: only the deadline or Stop does.
    work_.wait_until(*lk, std::min(quiet_at, overdue_at), [&] { return stop_; });
  }
}

void Thinner::Work() {
  std::unique_lock<std::mutex> lk(mu_);
  std::vector<PendingRun> runs;
  seen_at_ = last_punch_ = std::chrono::steady_clock::now();
  if (activity_) seen_activity_ = activity_();
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (!AwaitTurn(&lk)) {
      if (stop_) return;
      continue;  // a Drain took the queue
    }
    uint64_t first;
    if (TakeLocked(pacing_.slice_units, &runs, &first)) {
      RunPass(&runs, first, &lk);
      last_punch_ = std::chrono::steady_clock::now();
    }
  }
}

void Thinner::Drain() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t target = added_;
  std::vector<PendingRun> runs;
  uint64_t first;
  // Help: what is still queued is punched here, beside the worker's pass, a
  // slice at a time like the worker's (a sync waits behind one slice only).
  while (taken_ < target && TakeLocked(pacing_.slice_units, &runs, &first))
    RunPass(&runs, first, &lk);
  done_cv_.wait(lk, [&] {
    return taken_ >= target && (in_flight_.empty() || *in_flight_.begin() >= target);
  });
}

}  // namespace cowstore::store
