// SPDX-License-Identifier: Apache-2.0
#include "handler/store/zero_ahead.h"

#include <system_error>

namespace cowstore::store {

ZeroAhead::ZeroAhead(RoundFn round) : round_(std::move(round)) {}

ZeroAhead::~ZeroAhead() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ZeroAhead::Poke() {
  std::lock_guard<std::mutex> g(mu_);
  if (stop_) return;
  if (!started_) {
    started_ = true;
    try {
      worker_ = std::thread([this] { Work(); });
    } catch (const std::system_error&) {
      // No thread: nothing is zeroed ahead (see Poke's comment).
    }
  }
  if (!worker_.joinable()) return;  // never poked_: Drain must not wait for it
  poked_ = true;
  work_.notify_one();
}

void ZeroAhead::Drain() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [this] { return !running_ && !poked_; });
}

uint64_t ZeroAhead::rounds() const {
  std::lock_guard<std::mutex> g(mu_);
  return rounds_;
}

void ZeroAhead::Work() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_.wait(lk, [this] { return stop_ || poked_; });
    if (stop_) {
      poked_ = false;
      idle_.notify_all();
      return;
    }
    poked_ = false;
    running_ = true;
    bool more = true;
    while (more && !stop_) {
      lk.unlock();
      try {
        more = round_();
      } catch (...) {
        more = false;  // RoundFn must not throw; if it does, wait for a Poke
      }
      lk.lock();
      rounds_++;
    }
    running_ = false;
    idle_.notify_all();
  }
}

}  // namespace cowstore::store
