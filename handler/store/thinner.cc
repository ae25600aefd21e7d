// SPDX-License-Identifier: Apache-2.0
#include "handler/store/thinner.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace cowstore::store {

Thinner::Thinner(PunchFn punch, DoneFn done) : punch_(std::move(punch)), done_(std::move(done)) {}

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

void Thinner::Add(std::vector<PendingRun> runs) {
  if (runs.empty()) return;
  std::unique_lock<std::mutex> lk(mu_);
  for (const PendingRun& r : runs) backlog_ += r.n;
  added_ += runs.size();
  if (queue_.empty()) queue_ = std::move(runs);
  else queue_.insert(queue_.end(), runs.begin(), runs.end());
  if (!worker_.joinable() && !stop_) {
    try {
      worker_ = std::thread([this] { Work(); });
    } catch (const std::system_error&) {
      // No thread: do it here, as the command path did before.
      std::vector<PendingRun> mine;
      uint64_t first;
      if (TakeLocked(&mine, &first)) RunPass(&mine, first, &lk);
      return;
    }
  }
  lk.unlock();
  work_.notify_one();
}

bool Thinner::TakeLocked(std::vector<PendingRun>* runs, uint64_t* first) {
  if (queue_.empty()) return false;
  *first = taken_;
  taken_ += queue_.size();
  in_flight_.insert(*first);
  runs->swap(queue_);
  queue_.clear();
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

void Thinner::Work() {
  std::unique_lock<std::mutex> lk(mu_);
  std::vector<PendingRun> runs;
  for (;;) {
    work_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    uint64_t first;
    if (TakeLocked(&runs, &first)) RunPass(&runs, first, &lk);
  }
}

void Thinner::Drain() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t target = added_;
  std::vector<PendingRun> runs;
  uint64_t first;
  // Help: what is still queued is punched here, beside the worker's pass.
  if (TakeLocked(&runs, &first)) RunPass(&runs, first, &lk);
  done_cv_.wait(lk, [&] {
    return taken_ >= target && (in_flight_.empty() || *in_flight_.begin() >= target);
  });
}

}  // namespace cowstore::store
