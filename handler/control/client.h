// cowctl's side of the control socket (protocol.h).
#pragma once

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
  store::Result<Reply> Call(const Record& request);

 private:
  explicit Client(int fd) : fd_(fd) {}
  int fd_;
  std::string buf_;
};

}  // namespace cowstore::control
