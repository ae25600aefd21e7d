// SPDX-License-Identifier: Apache-2.0
#include "handler/control/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace cowstore::control {

using store::Code;
using store::Status;

store::Status Reply::status() const {
  if (ok()) return Status::Ok();
  std::string code = head.Get("code");
  for (int c = 1; c <= static_cast<int>(store::kLastCode); ++c) {
    if (code == store::CodeName(static_cast<Code>(c))) return Status(static_cast<Code>(c), head.Get("message"));
  }
  return Status(Code::kIOError, head.Get("message"));
}

store::Result<std::unique_ptr<Client>> Client::Connect(const std::string& path, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return Status(Code::kInvalidArgument, "socket path too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(Code::kIOError, std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    if (err == ENOENT) return Status(Code::kNotFound, path + " does not exist");
    if (err == ECONNREFUSED) return Status(Code::kBusy, "nobody serves " + path);
    return Status(Code::kIOError, path + ": " + std::strerror(err));
  }
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return std::unique_ptr<Client>(new Client(fd));
}

Client::~Client() { ::close(fd_); }

void Client::CheckInterrupt() {
  if (!shut_down_ && interrupted_ && interrupted_()) {
    ::shutdown(fd_, SHUT_WR);
    shut_down_ = true;
  }
}

void Client::SetTimeout(int timeout_ms) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

store::Result<Reply> Client::Call(const Record& request, const ProgressCallback& on_progress) {
  std::string line = FormatRecord(request) + "\n";
  size_t off = 0;
  std::optional<Status> send_error;
  while (off < line.size()) {
    ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      send_error = Status(Code::kIOError, std::string("control socket: ") + std::strerror(err));
      // A server that refuses the connection (busy) replies and closes it
      // without reading: its reply may be waiting for us. Anything else
      // (a timeout) is the error.
      if (n == 0 || (err != EPIPE && err != ECONNRESET)) return *send_error;
      break;
    }
    off += static_cast<size_t>(n);
  }
  Reply reply;
  bool have_head = false;
  char chunk[4096];
  for (;;) {
    size_t nl;
    while ((nl = buf_.find('\n')) != std::string::npos) {
      std::string l = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (l == "end") {
        if (!have_head) return Status(Code::kIOError, "control socket: reply without status");
        return reply;
      }
      auto r = ParseRecord(l);
      if (!r) return Status(Code::kIOError, "control socket: malformed reply line");
      if (!have_head && r->type == "progress") {
        auto done = r->GetU64("done");
        auto total = r->GetU64("total");
        if (on_progress && done && total) on_progress(*done, *total);
        continue;
      }
      if (!have_head) {
        reply.head = std::move(*r);
        have_head = true;
      } else {
        reply.records.push_back(std::move(*r));
      }
    }
    CheckInterrupt();
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 && send_error) return *send_error;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Status(Code::kIOError, "control socket: no reply (timed out)");
    }
    if (n <= 0) return Status(Code::kIOError, "control socket: connection closed");
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace cowstore::control
