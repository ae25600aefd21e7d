// SPDX-License-Identifier: Apache-2.0
// A gate for tests that hold a thread at a known point: while the gate is
// closed, Pass() waits; Open() lets every waiter through. Test Envs put a
// Pass() in the File call they want to hold (a read, a hole punch), the test
// closes the gate, starts the work, waits until WaitForWaiting() sees it
// parked, does what must happen meanwhile, then opens the gate.
// Header-only: the store, scsi and control tests all use it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace cowstore::testing {

class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Returns at once while the gate is open, else when it opens.
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    if (open_) return;
    ++waiting_;
    cv_.notify_all();  // wakes WaitForWaiting
    cv_.wait(lock, [&] { return open_; });
    --waiting_;
  }
  // How many threads wait at the closed gate now.
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }
  // True once at least `n` threads wait at the closed gate; false if that
  // has not happened within `limit` (the test fails rather than hangs).
  bool WaitForWaiting(int n, std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return waiting_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;  // guarded by mu_
  int waiting_ = 0;   // guarded by mu_
};

}  // namespace cowstore::testing
