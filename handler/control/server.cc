// SPDX-License-Identifier: Apache-2.0
#include "handler/control/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "handler/control/image.h"
#include "handler/control/messages.h"
#include "handler/control/protocol.h"
#include "handler/control/scrub.h"

namespace cowstore::control {
namespace {

using store::Code;
using store::Status;

std::string Line(const Record& r) { return FormatRecord(r) + "\n"; }

std::string ErrorReply(const Status& s) {
  Record e("error");
  e.Set("code", store::CodeName(s.code()));
  e.Set("message", s.message());
  return Line(e) + "end\n";
}

std::string ErrorReply(Code c, const std::string& msg) { return ErrorReply(Status(c, msg)); }

// The peer closed the connection or shut down its sending side.
bool PeerHungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Progress of one long request. Update() may run on any thread, possibly
// while the store holds its locks, so it never blocks: a line goes out with
// MSG_DONTWAIT, what the socket did not take stays pending (a line is never
// split across a dropped one), and while something is pending newer lines
// are dropped (progress is lossy; only the last line matters). Lines are sent
// when the per-mille changes, so at most ~1000 per request. Take() returns
// the unsent rest plus, on success, a last line with done == total, which
// Serve() sends in front of the status line.
class ProgressStream {
 public:
  explicit ProgressStream(int fd) : fd_(fd) {}
  static void Thunk(void* ctx, uint64_t done, uint64_t total) {
    static_cast<ProgressStream*>(ctx)->Update(done, total);
  }
  void Update(uint64_t done, uint64_t total) {
    std::lock_guard<std::mutex> lock(mu_);
    if (total == 0) return;
    if (done > total) done = total;
    total_ = total;
    int permille = static_cast<int>(static_cast<long double>(done) * 1000 / static_cast<long double>(total));
    if (permille == sent_permille_ && done != total) return;
    if (done == sent_done_ && total == sent_total_) return;
    Flush();
    if (!pending_.empty() && fd_ >= 0) return;  // the client is slow: drop this one
    pending_ += Line(Record("progress").Set("done", done).Set("total", total));
    sent_permille_ = permille;
    sent_done_ = done;
    sent_total_ = total;
    Flush();
  }
  std::string Take(bool success) {
    std::lock_guard<std::mutex> lock(mu_);
    if (success && total_ != 0 && !(sent_done_ == total_ && sent_total_ == total_)) {
      pending_ += Line(Record("progress").Set("done", total_).Set("total", total_));
    }
    return std::move(pending_);
  }

 private:
  void Flush() {
    while (fd_ >= 0 && !pending_.empty()) {
      ssize_t n = ::send(fd_, pending_.data(), pending_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // full (or broken: the final send will notice)
      pending_.erase(0, static_cast<size_t>(n));
    }
  }
  std::mutex mu_;
  int fd_;
  std::string pending_;
  uint64_t total_ = 0;
  int sent_permille_ = -1;
  uint64_t sent_done_ = 0, sent_total_ = 0;
};

}  // namespace

struct Server::Impl {
  std::thread acceptor;
  // One per connection thread. A thread sets `done` last thing; the accept
  // loop joins finished ones (Reap) and ~Server joins the rest.
  struct Conn {
    std::thread thread;
    bool done = false;  // guarded by mu
  };
  std::mutex mu;
  std::list<Conn> conns;  // guarded by mu
  int active = 0;         // conns not done; guarded by mu

  // Joins the threads that have finished (they are about to return).
  void Reap() {
    std::list<Conn> finished;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto it = conns.begin(); it != conns.end();) {
        auto next = std::next(it);
        if (it->done) finished.splice(finished.end(), conns, it);
        it = next;
      }
    }
    for (Conn& c : finished) {
      if (c.thread.joinable()) c.thread.join();
    }
  }
  // Joins every thread; no new one may be started (the acceptor is gone).
  void JoinAll() {
    std::list<Conn> all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all.swap(conns);
    }
    for (Conn& c : all) {
      if (c.thread.joinable()) c.thread.join();
    }
  }
};

namespace {
// The reply to a connection that cannot be served now; the socket is new, so
// the few bytes fit and MSG_DONTWAIT never drops them in practice.
void RefuseBusy(int fd, const std::string& why) {
  std::string reply = ErrorReply(Code::kBusy, why);
  (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}
}  // namespace

std::string DefaultRunDir() {
  const char* e = std::getenv("COWSTORE_RUN_DIR");
  return e && *e ? e : "/run/cowstore";
}

store::Result<std::unique_ptr<Server>> Server::Start(store::Pool& pool, ServerOptions options) {
  if (options.pool_name.empty() || options.pool_name.find('/') != std::string::npos) {
    return Status(Code::kInvalidArgument, "control socket: bad pool name");
  }
  if (::mkdir(options.run_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status(Code::kIOError, "control socket: mkdir " + options.run_dir + ": " + std::strerror(errno));
  }
  std::string path = SocketPath(options.run_dir, options.pool_name);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status(Code::kInvalidArgument, "control socket path too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status(Code::kIOError, std::string("control socket: ") + std::strerror(errno));
  // We hold the pool's lock, so a socket already there is a dead server's.
  ::unlink(path.c_str());
  mode_t old = ::umask(0177);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (rc != 0 || ::listen(fd, 8) != 0) {
    Status s(Code::kIOError, "control socket: bind " + path + ": " + std::strerror(errno));
    ::close(fd);
    return s;
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    return Status(Code::kIOError, std::string("control socket: pipe: ") + std::strerror(errno));
  }
  PoolFile pool_file;
  if (!options.pool_path.empty()) {
    auto pf = PoolFileAt(options.pool_path);
    if (!pf.ok()) {
      ::close(fd);
      ::close(pipefd[0]);
      ::close(pipefd[1]);
      ::unlink(path.c_str());
      return pf.status();
    }
    pool_file = pf.value();
  }
  std::unique_ptr<Server> s(new Server(pool, std::move(options), path, fd, pipefd));
  s->pool_file_ = pool_file;
  try {
    s->impl_->acceptor = std::thread([srv = s.get()] { srv->Run(); });
  } catch (...) {
    return Status(Code::kIOError, "control socket: cannot start thread");
  }
  return s;
}

Server::Server(store::Pool& pool, ServerOptions options, std::string path, int listen_fd, int stop_fd[2])
    : pool_(pool),
      options_(std::move(options)),
      path_(std::move(path)),
      listen_fd_(listen_fd),
      stop_rd_(stop_fd[0]),
      stop_wr_(stop_fd[1]),
      impl_(std::make_unique<Impl>()) {}

Server::~Server() {
  // The byte is never read: stop_rd_ stays readable for the acceptor and for
  // every connection waiting in Serve()'s poll. A request that is running
  // finishes first (the store offers no way to cancel an import or a check).
  char c = 1;
  (void)!::write(stop_wr_, &c, 1);
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  impl_->JoinAll();
  ::close(listen_fd_);
  ::close(stop_rd_);
  ::close(stop_wr_);
  ::unlink(path_.c_str());
}

void Server::Run() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_rd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    impl_->Reap();
    ucred cred{};
    socklen_t len = sizeof cred;
    bool allowed = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
                   (cred.uid == 0 || cred.uid == ::geteuid());
    if (!allowed) {
      ::close(fd);
      continue;
    }
    try {
      Accepted(fd);  // owns fd from here
    } catch (...) {
      // Nothing may escape into the handler process.
    }
  }
}

// Serves `fd` on a thread of its own, or refuses it at once when
// kMaxConnections are being served or no thread can be started. Never blocks.
void Server::Accepted(int fd) {
  Impl::Conn* conn = nullptr;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->active < kMaxConnections) {
      conn = &impl_->conns.emplace_back();
      ++impl_->active;
    }
  }
  if (!conn) {
    RefuseBusy(fd, "control socket busy: " + std::to_string(kMaxConnections) +
                       " connections being served, try again");
    ::close(fd);
    return;
  }
  auto body = [this, fd, conn] {
    timeval tv{kSendTimeoutMs / 1000, (kSendTimeoutMs % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    try {
      Serve(fd);
    } catch (...) {
      // Nothing may escape into the handler process.
    }
    ::close(fd);
    std::lock_guard<std::mutex> lock(impl_->mu);
    conn->done = true;
    --impl_->active;
  };
  try {
    std::thread t(body);
    std::lock_guard<std::mutex> lock(impl_->mu);
    conn->thread = std::move(t);
  } catch (const std::exception& e) {  // std::system_error: no thread to be had
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      for (auto it = impl_->conns.begin(); it != impl_->conns.end(); ++it) {
        if (&*it == conn) {
          impl_->conns.erase(it);
          break;
        }
      }
      --impl_->active;
    }
    RefuseBusy(fd, std::string("control socket busy: cannot start a thread (") + e.what() + "), try again");
    ::close(fd);
  }
}

void Server::Serve(int fd) {
  std::string buf;
  char chunk[4096];
  for (;;) {
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string reply = Handle(buf.substr(0, nl), fd);
      buf.erase(0, nl + 1);
      size_t off = 0;
      while (off < reply.size()) {
        ssize_t n = ::send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += static_cast<size_t>(n);
      }
    }
    if (buf.size() > kMaxLine) return;
    // An idle client is dropped after 60 s so it cannot hold one of the
    // kMaxConnections slots for ever; ~Server wakes it through stop_rd_.
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_rd_, POLLIN, 0}};
    int rc = ::poll(p, 2, 60000);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0 || p[1].revents) return;
    ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

std::string Server::Handle(const std::string& line, int progress_fd) {
  auto req = ParseRecord(line);
  if (!req) return ErrorReply(Code::kInvalidArgument, "malformed request line");
  // Only long requests stream progress, and only when asked (version 1
  // clients never ask, so they see the replies they always did).
  ProgressStream stream(progress_fd);
  bool want_progress = req->Get("progress") == "1";
  store::ProgressFn pfn = want_progress ? ProgressStream::Thunk : nullptr;
  void* pctx = want_progress ? &stream : nullptr;
  auto finish = [&](std::string reply, bool success) { return stream.Take(success) + reply; };
  const std::string& verb = req->type;
  auto need = [&](const char* key) -> std::optional<std::string> {
    if (!req->Has(key)) return std::nullopt;
    return req->Get(key);
  };
  auto need_u64 = [&](const char* key) { return req->GetU64(key); };
  // Import and export: the pool's own file is off limits, progress goes to
  // the client, and a client that hangs up (or shuts down its side: cowctl
  // on Ctrl-C) cancels the copy.
  auto image_options = [&] {
    ImageOptions o;
    o.pool_file = pool_file_;
    o.progress = pfn;
    o.progress_ctx = pctx;
    if (progress_fd >= 0) o.cancelled = [progress_fd] { return PeerHungUp(progress_fd); };
    return o;
  };

  if (verb == "hello") {
    Record ok("ok");
    ok.Set("version", kProtocolVersion).Set("pool", options_.pool_name).Set("features", kFeatures);
    return Line(ok) + "end\n";
  }
  if (verb == "space") {
    std::string out = Line(Record("ok"));
    for (const auto& r : EncodeSpace(options_.pool_name, pool_.Space())) out += Line(r);
    return out + "end\n";
  }
  if (verb == "lun-get") {
    auto name = need("name");
    if (!name) return ErrorReply(Code::kInvalidArgument, "lun-get needs name=");
    auto r = pool_.GetLun(*name);
    if (!r.ok()) return ErrorReply(r.status());
    return Line(Record("ok")) + Line(EncodeLun(r.value())) + "end\n";
  }
  if (verb == "lun-create") {
    auto name = need("name");
    auto size = need_u64("size");
    auto bs = need_u64("block_size");
    if (!name || !size || !bs || *bs > UINT32_MAX) {
      return ErrorReply(Code::kInvalidArgument, "lun-create needs name= size= block_size=");
    }
    auto r = pool_.CreateLun(*name, *size, static_cast<uint32_t>(*bs));
    if (!r.ok()) return ErrorReply(r.status());
    return Line(Record("ok")) + Line(EncodeLun(r.value())) + "end\n";
  }
  if (verb == "lun-delete") {
    auto name = need("name");
    if (!name) return ErrorReply(Code::kInvalidArgument, "lun-delete needs name=");
    Status s = pool_.DeleteLun(*name);
    if (!s.ok()) return ErrorReply(s);
    return Line(Record("ok")) + "end\n";
  }
  if (verb == "lun-resize") {
    auto name = need("name");
    auto size = need_u64("size");
    if (!name || !size) return ErrorReply(Code::kInvalidArgument, "lun-resize needs name= size=");
    Status s = pool_.ResizeLun(*name, *size);
    if (!s.ok()) return ErrorReply(s);
    auto r = pool_.GetLun(*name);
    if (!r.ok()) return ErrorReply(r.status());
    return Line(Record("ok")) + Line(EncodeLun(r.value())) + "end\n";
  }
  if (verb == "lun-clone" || verb == "lun-snapshot") {
    // One request, two kinds of copy: a writable clone or a read-only snapshot.
    auto copy = verb == "lun-clone" ? &store::Pool::CloneLun : &store::Pool::SnapshotLun;
    auto src = need("src");
    auto dst = need("dst");
    if (!src || !dst) return ErrorReply(Code::kInvalidArgument, verb + " needs src= dst=");
    auto r = (pool_.*copy)(*src, *dst);
    if (!r.ok()) return ErrorReply(r.status());
    return Line(Record("ok")) + Line(EncodeLun(r.value())) + "end\n";
  }
  if (verb == "lun-rollback") {
    auto name = need("name");
    auto snapshot = need("snapshot");
    if (!name || !snapshot) return ErrorReply(Code::kInvalidArgument, "lun-rollback needs name= snapshot=");
    Status s = options_.rollback ? options_.rollback(*name, *snapshot) : pool_.RollbackLun(*name, *snapshot);
    if (!s.ok()) return ErrorReply(s);
    auto r = pool_.GetLun(*name);
    if (!r.ok()) return ErrorReply(r.status());
    return Line(Record("ok")) + Line(EncodeLun(r.value())) + "end\n";
  }
  if (verb == "lun-import") {
    // The handler process reads the image itself (the client is root).
    auto name = need("name");
    auto path = need("path");
    auto bs = need_u64("block_size");
    auto size = need_u64("size");
    if (!name || !path || !bs || !size || *bs > UINT32_MAX || path->empty() || (*path)[0] != '/') {
      return ErrorReply(Code::kInvalidArgument, "lun-import needs name= path=<absolute> block_size= size=");
    }
    CopyStats st;
    auto r = ImportImage(pool_, *name, *path, static_cast<uint32_t>(*bs), *size, image_options(), &st);
    if (!r.ok()) return finish(ErrorReply(r.status()), false);
    Record ok("ok");
    EncodeCopyStats(st, &ok);
    return finish(Line(ok) + Line(EncodeLun(r.value())) + "end\n", true);
  }
  if (verb == "lun-export") {
    auto name = need("name");
    auto path = need("path");
    if (!name || !path || path->empty() || (*path)[0] != '/') {
      return ErrorReply(Code::kInvalidArgument, "lun-export needs name= path=<absolute> [force=1] [mode=<octal>]");
    }
    ImageOptions o = image_options();
    o.force = req->Get("force") == "1";
    if (req->Has("mode")) {
      auto mode = ParseMode(req->Get("mode"));
      if (!mode) return ErrorReply(Code::kInvalidArgument, "lun-export: mode= must be octal, at most 7777");
      o.mode = *mode;
    }
    CopyStats st;
    Status s = ExportImage(pool_, *name, *path, o, &st);
    if (!s.ok()) return finish(ErrorReply(s), false);
    Record ok("ok");
    EncodeCopyStats(st, &ok);
    return finish(Line(ok) + "end\n", true);
  }
  if (verb == "grow") {
    auto size = need_u64("size");
    if (!size) return ErrorReply(Code::kInvalidArgument, "grow needs size=");
    Status s = pool_.Grow(*size);
    if (!s.ok()) return ErrorReply(s);
    return Line(Record("ok")) + "end\n";
  }
  if (verb == "flush") {
    Status s = pool_.Flush();
    if (!s.ok()) return ErrorReply(s);
    return Line(Record("ok")) + "end\n";
  }
  if (verb == "check") {
    Record ok("ok");
    std::vector<Record> records;
    EncodeCheck(pool_.Check(pfn, pctx), &ok, &records);
    std::string out = Line(ok);
    for (const auto& r : records) out += Line(r);
    return finish(out + "end\n", true);
  }
  if (verb == "scrub") {
    // Reads every mapped block: as long as the data takes to read. A client
    // that hangs up stops it.
    std::function<bool()> cancelled;
    if (progress_fd >= 0) cancelled = [progress_fd] { return PeerHungUp(progress_fd); };
    auto r = Scrub(pool_, pfn, pctx, cancelled);
    if (!r.ok()) return finish(ErrorReply(r.status()), false);
    Record ok("ok");
    std::vector<Record> records;
    EncodeScrub(r.value(), &ok, &records);
    std::string out = Line(ok);
    for (const auto& rec : records) out += Line(rec);
    return finish(out + "end\n", true);
  }
  if (verb == "counters") {
    std::string out = Line(Record("ok"));
    if (options_.counters) {
      for (const auto& r : EncodeCounters(options_.counters())) out += Line(r);
    }
    return out + "end\n";
  }
  return ErrorReply(Code::kInvalidArgument, "unknown request '" + verb + "'");
}

}  // namespace cowstore::control
