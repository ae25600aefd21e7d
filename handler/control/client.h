// SPDX-License-Identifier: Apache-2.0
// cowctl's side of the control socket (protocol.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "handler/control/protocol.h"
#include "handler/store/status.h"

namespace cowstore::control {

struct Reply {
  Record head;                  // "ok" or "error"
  std::vector<Record> records;  // in the order sent
  bool ok() const { return head.type == "ok"; }
  // For an error reply: the store code it names (kIOError if unknown).
  store::Status status() const;
};

class Client {
 public:
  // kNotFound if no socket, kBusy if nobody listens, kIOError otherwise.
  static store::Result<std::unique_ptr<Client>> Connect(const std::string& path, int timeout_ms = 30000);
  ~Client();
  // Reply timeout for the following calls (0: wait as long as it takes).
  void SetTimeout(int timeout_ms);
  // Sends one request and reads its reply; kIOError on a broken connection.
  // "progress" lines before the status line (sent for progress=1, protocol
  // version 2) go to `on_progress` in order, or are skipped without one.
  using ProgressCallback = std::function<void(uint64_t done, uint64_t total)>;
  store::Result<Reply> Call(const Record& request, const ProgressCallback& on_progress = nullptr);
  // Checked while waiting for a reply (a signal handler's flag: a signal
  // without SA_RESTART wakes the wait). Once it returns true, the sending
  // side of the connection is shut down, which cancels a running import or
  // export (the server rolls it back), and Call goes on reading its reply.
  void SetInterrupt(std::function<bool()> interrupted) { interrupted_ = std::move(interrupted); }

 private:
  explicit Client(int fd) : fd_(fd) {}
  void CheckInterrupt();
  int fd_;
  std::string buf_;
  std::function<bool()> interrupted_;
  bool shut_down_ = false;
};

}  // namespace cowstore::control
