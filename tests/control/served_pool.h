// SPDX-License-Identifier: Apache-2.0
// Plays tcmu-runner for the control tests: a real pool in a temporary
// directory, held open, served by a control::Server on a socket there; and
// a raw connection to talk to it byte by byte.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/control/protocol.h"
#include "handler/control/server.h"
#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "tests/common/gate.h"
#include "tests/cowctl/fake_tree.h"

namespace cowstore::control_test {

using cowctl::testing::Exists;
using cowctl::testing::ReadText;
using cowctl::testing::TempDir;
using cowctl::testing::WriteText;

// The process's POSIX Env, with hole punches (the pool's background
// thinning) held while Hold() is in force: freed space stays "thinning" for
// as long as a test wants to look at it. Release() before the pool closes
// (Close waits for the punches).
class PunchGateEnv final : public store::Env {
 public:
  void Hold() { gate_.Close(); }
  void Release() { gate_.Open(); }
  store::Result<std::unique_ptr<store::File>> OpenLocked(const std::string& path, Mode mode) override {
    auto f = store::DefaultEnv()->OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<store::File>(new GatedFile(std::move(f.value()), this));
  }
  bool Exists(const std::string& path) override { return store::DefaultEnv()->Exists(path); }
  store::Result<store::BackingSpace> BackingOf(const std::string& path) override {
    return store::DefaultEnv()->BackingOf(path);
  }

 private:
  class GatedFile final : public store::File {
   public:
    GatedFile(std::unique_ptr<store::File> f, PunchGateEnv* env) : f_(std::move(f)), env_(env) {}
    store::Status Read(uint64_t o, size_t n, void* b) override { return f_->Read(o, n, b); }
    store::Status ReadV(uint64_t o, const iovec* iov, size_t n) override { return f_->ReadV(o, iov, n); }
    store::Status Write(uint64_t o, size_t n, const void* b) override { return f_->Write(o, n, b); }
    store::Status DropCache() override { return f_->DropCache(); }
    store::Status Sync() override {
      env_->CountSync();
      return f_->Sync();
    }
    // Forwarded, so that the pool zeroes ahead as in service; a round's
    // syncs are not the counted ones (the commits').
    store::Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
    store::Result<uint64_t> Size() override { return f_->Size(); }
    store::Status Truncate(uint64_t s) override { return f_->Truncate(s); }
    store::Status PunchHole(uint64_t o, uint64_t n) override {
      env_->gate_.Pass();
      return f_->PunchHole(o, n);
    }
    bool CanTruncate() const override { return f_->CanTruncate(); }
    uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
    store::Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
    void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
    bool WritesAllocate() const override { return f_->WritesAllocate(); }
    bool DiscardZeroes() const override { return f_->DiscardZeroes(); }
    store::Result<store::BackingSpace> Backing() override { return f_->Backing(); }

   private:
    std::unique_ptr<store::File> f_;
    PunchGateEnv* env_;
  };
  ::cowstore::testing::Gate gate_;
};

// The pool every control test uses: 1 GiB of 64 KiB units at `path`, open.
inline std::unique_ptr<store::Pool> CreateTestPool(const std::string& path) {
  store::PoolOptions po;
  po.size_bytes = 1ull << 30;
  po.allocation_unit = 64 << 10;
  auto c = store::Pool::Create(store::DefaultEnv(), path, po);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c.value()) : nullptr;
}

// Serves `pool` as tcmu-runner would, as pool `name` with a socket in
// `run_dir`, reporting fixed counters for LUN vm1 (10 commands, 3 ATS, 1
// miscompare). `pool_path` non-empty: the server guards that file.
// `rollback`: what the handler does for lun-rollback (empty: the pool's).
inline std::unique_ptr<control::Server> StartTestServer(store::Pool& pool, const std::string& run_dir,
                                                        const std::string& name,
                                                        const std::string& pool_path = "",
                                                        control::RollbackFn rollback = {}) {
  control::ServerOptions o;
  o.rollback = std::move(rollback);
  o.run_dir = run_dir;
  o.pool_name = name;
  o.pool_path = pool_path;
  o.counters = [] {
    return std::vector<control::LunCounters>{{"vm1", {{"commands", 10}, {"ats", 3}, {"ats_miscompares", 1}}}};
  };
  auto s = control::Server::Start(pool, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s.value()) : nullptr;
}

class ServedPool : public ::testing::Test {
 protected:
  TempDir dir;
  std::string pool_path = dir.path() + "/tank";
  std::string run = dir.path() + "/run";
  std::string sock = run + "/tank.sock";
  std::unique_ptr<store::Pool> pool;
  std::unique_ptr<control::Server> server;
  control::RollbackFn rollback;  // what the handler does for lun-rollback (empty: the pool's)

  // A 1 GiB pool of 64 KiB units, open, and (unless told not to) served.
  void Serve(bool guard_pool_file = true) {
    pool = CreateTestPool(pool_path);
    ASSERT_TRUE(pool);
    server = StartTestServer(*pool, run, "tank", guard_pool_file ? pool_path : "",
                             [this](const std::string& lun, const std::string& snap) {
                               return rollback ? rollback(lun, snap) : pool->RollbackLun(lun, snap);
                             });
    ASSERT_TRUE(server);
  }
  void TearDown() override {
    server.reset();
    if (pool) (void)pool->Close();
  }
  bool HasLun(const std::string& name) { return pool->GetLun(name).ok(); }
};

// A raw connection to a control socket, open as long as the object lives.
class Conn {
 public:
  explicit Conn(const std::string& sock) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    // A bound for a broken server, not a timing under test.
    timeval tv{30, 0};
    if (fd_ >= 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Conn() { Close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  int fd() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(const std::string& line) {
    std::string l = line + "\n";
    return fd_ >= 0 && ::send(fd_, l.data(), l.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(l.size());
  }
  // One reply up to and including "end\n" (less on EOF or the timeout).
  std::string Reply() {
    char buf[4096];
    for (;;) {
      size_t end = buf_.find("\nend\n");
      if (end != std::string::npos) {
        std::string out = buf_.substr(0, end + 5);
        buf_.erase(0, end + 5);
        return out;
      }
      ssize_t n = fd_ >= 0 ? ::recv(fd_, buf, sizeof buf, 0) : -1;
      if (n <= 0) return std::exchange(buf_, "");
      buf_.append(buf, static_cast<size_t>(n));
    }
  }
  // Whether anything is waiting to be read right now.
  bool Readable() {
    pollfd p{fd_, POLLIN, 0};
    return !buf_.empty() || ::poll(&p, 1, 0) > 0;
  }
  // Reads until a whole line has arrived; returns it (without "\n").
  std::string Line() {
    char buf[4096];
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string out = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return out;
      }
      ssize_t n = fd_ >= 0 ? ::recv(fd_, buf, sizeof buf, 0) : -1;
      if (n <= 0) return std::exchange(buf_, "");
      buf_.append(buf, static_cast<size_t>(n));
    }
  }
  // The server closed the connection (or never took it: reset).
  bool Closed() {
    char c;
    ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

 private:
  int fd_;
  std::string buf_;
};

// The head record of a raw reply.
inline control::Record Head(const std::string& reply) {
  auto r = control::ParseRecord(reply.substr(0, reply.find('\n')));
  return r ? *r : control::Record("unparsable");
}

// A client of protocol version 1: one raw request line, the raw reply up to
// and including "end\n".
inline std::string RawCall(const std::string& sock, const std::string& line) {
  Conn c(sock);
  if (!c.ok()) return "connect failed";
  if (!c.Send(line)) return "send failed";
  return c.Reply();
}

// Names in `dir` that look like export's temporary files ("" if none).
inline std::string TemporaryFiles(const std::string& dir) {
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (n.find(".cowctl-") != std::string::npos) out += n + " ";
  }
  return out;
}

// A sparse image so large that importing it (reading its zeros) takes
// minutes: a request that runs for as long as a test wants, ended by
// cancelling it (a client shutting down its side of the connection).
inline std::string HugeSparseImage(const std::string& dir) {
  std::string p = dir + "/huge.img";
  WriteText(p, "header");
  EXPECT_EQ(::truncate(p.c_str(), 256ll << 30), 0);
  return p;
}

}  // namespace cowstore::control_test
