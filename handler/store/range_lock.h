// SPDX-License-Identifier: Apache-2.0
// Per-LUN range locks over allocation units: shared for reads (and clone
// sources), exclusive for write-class operations. A caller holding one range
// lock never waits for another except in the fixed order (LUN id, lba) that
// CloneRange uses, so there is no deadlock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace cowstore::store {

class RangeLock {
 public:
  struct Held {
    uint64_t begin, end;
    bool exclusive;
    uint64_t token;
  };
  // Blocks until [begin, end) can be held; returns a token for Unlock.
  uint64_t Lock(uint64_t begin, uint64_t end, bool exclusive) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] { return !Conflicts(begin, end, exclusive); });
    uint64_t t = ++next_token_;
    held_.push_back({begin, end, exclusive, t});
    return t;
  }
  void Unlock(uint64_t token) {
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < held_.size(); i++) {
        if (held_[i].token == token) {
          held_[i] = held_.back();
          held_.pop_back();
          break;
        }
      }
    }
    cv_.notify_all();
  }

 private:
  bool Conflicts(uint64_t b, uint64_t e, bool x) const {
    for (const Held& h : held_)
      if (h.begin < e && b < h.end && (x || h.exclusive)) return true;
    return false;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Held> held_;
  uint64_t next_token_ = 0;
};

// RAII holder.
class RangeGuard {
 public:
  RangeGuard() = default;
  RangeGuard(RangeLock* l, uint64_t b, uint64_t e, bool x) : l_(l), t_(l->Lock(b, e, x)) {}
  RangeGuard(RangeGuard&& o) noexcept : l_(o.l_), t_(o.t_) { o.l_ = nullptr; }
  RangeGuard& operator=(RangeGuard&& o) noexcept {
    Release();
    l_ = o.l_;
    t_ = o.t_;
    o.l_ = nullptr;
    return *this;
  }
  ~RangeGuard() { Release(); }
  void Release() {
    if (l_) l_->Unlock(t_);
    l_ = nullptr;
  }

 private:
  RangeLock* l_ = nullptr;
  uint64_t t_ = 0;
};

}  // namespace cowstore::store
