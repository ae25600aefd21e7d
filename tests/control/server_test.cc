// SPDX-License-Identifier: Apache-2.0
// The control server (handler/control/server.h) over its socket: requests
// and replies, several clients at once, progress, and the import/export
// requests that run inside the daemon (so must never block or outlive their
// client).
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <future>
#include <thread>

#include "handler/control/client.h"
#include "handler/control/image.h"
#include "tests/control/served_pool.h"

namespace cowstore::control_test {
namespace {

TEST_F(ServedPool, ProtocolEdges) {
  Serve();
  EXPECT_EQ(server->Handle("hello"), "ok version=2 pool=tank features=progress,safe-images,scrub,snapshots\nend\n");
  EXPECT_EQ(server->Handle("nonsense"), "error code=InvalidArgument message=unknown%20request%20%27nonsense%27\nend\n");
  EXPECT_EQ(server->Handle("lun-create name=x"),
            "error code=InvalidArgument message=lun-create%20needs%20name%3D%20size%3D%20block_size%3D\nend\n");
  EXPECT_EQ(server->Handle("lun-get name"), "error code=InvalidArgument message=malformed%20request%20line\nend\n");
  EXPECT_EQ(server->Handle("lun-get name=nope").rfind("error code=NotFound", 0), 0u);
  EXPECT_EQ(server->Handle("lun-create name=a size=99999999999999999999999 block_size=512").rfind("error", 0), 0u);
  EXPECT_EQ(Head(server->Handle("lun-export name=a path=/tmp/x mode=9")).Get("code"), "InvalidArgument");
  auto c = control::Client::Connect(sock);
  ASSERT_TRUE(c.ok());
  auto r = c.value()->Call(control::Record("lun-create").Set("name", "a b").Set("size", 1048576).Set("block_size", 512));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->ok());
  EXPECT_EQ(r->status().code(), store::Code::kInvalidArgument);
  // Several requests on one connection.
  for (int i = 0; i < 3; ++i) {
    auto s = c.value()->Call(control::Record("space"));
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(s->ok());
  }
}

TEST_F(ServedPool, TheSocketIsForRootOnly) {
  Serve();
  struct stat st;
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(run.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// ------------------------------------------------- several clients at once

TEST_F(ServedPool, AnIdleConnectionDoesNotHoldUpAnother) {
  Serve();
  Conn idle(sock);  // connected, sends nothing
  ASSERT_TRUE(idle.ok());
  // Answered while the idle connection is open: a server of one connection at
  // a time answered only once it had dropped the idle one (60 s), past this
  // client's timeout.
  auto c = control::Client::Connect(sock, 20000);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = c.value()->Call(control::Record("space"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->head.Get("message");
  // And the idle connection is still served.
  ASSERT_TRUE(idle.Send("hello"));
  EXPECT_EQ(Head(idle.Reply()).type, "ok");
}

// A long import (minutes of zeros to read) runs while other clients are
// served; its client shuts down its side (what cowctl does on Ctrl-C), and
// the import stops, says so and leaves nothing behind.
TEST_F(ServedPool, ALongImportDoesNotHoldUpAnotherAndItsClientCanCancelIt) {
  Serve();
  std::string img = HugeSparseImage(dir.path());
  Conn import(sock);
  ASSERT_TRUE(import.Send(control::FormatRecord(
      control::Record("lun-import").Set("name", "vm1").Set("path", img).Set("block_size", 512).Set("size", 0).Set(
          "progress", "1"))));
  // Under way: its first progress line (1 MiB of 256 GiB) has arrived.
  EXPECT_EQ(import.Line().rfind("progress done=", 0), 0u);
  EXPECT_TRUE(HasLun(control::ImportTempName("vm1")));
  auto c = control::Client::Connect(sock, 20000);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = c.value()->Call(control::Record("space"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->head.Get("message");
  ASSERT_EQ(::shutdown(import.fd(), SHUT_WR), 0);
  std::string reply = import.Reply();
  while (reply.rfind("progress", 0) == 0) reply = reply.substr(reply.find('\n') + 1);
  EXPECT_EQ(Head(reply).type, "error") << reply;
  EXPECT_NE(Head(reply).Get("message").find("cancelled"), std::string::npos) << reply;
  EXPECT_NE(Head(reply).Get("message").find("nothing was kept"), std::string::npos) << reply;
  EXPECT_FALSE(HasLun("vm1"));
  EXPECT_FALSE(HasLun(control::ImportTempName("vm1")));
}

TEST_F(ServedPool, ConnectionsBeyondTheBoundAreRefusedAtOnce) {
  Serve();
  std::vector<std::unique_ptr<Conn>> held;
  for (int i = 0; i < control::kMaxConnections; ++i) {
    held.push_back(std::make_unique<Conn>(sock));
    ASSERT_TRUE(held.back()->Send("hello"));
    ASSERT_EQ(Head(held.back()->Reply()).type, "ok") << i;  // served: it holds a slot
  }
  // One more gets the error without asking anything, and is closed.
  Conn extra(sock);
  std::string reply = extra.Reply();
  control::Record head = Head(reply);
  EXPECT_EQ(head.type, "error") << reply;
  EXPECT_EQ(head.Get("code"), "Busy") << reply;
  EXPECT_EQ(head.Get("message"), "control socket busy: 8 connections being served, try again");
  EXPECT_EQ(reply.substr(reply.find('\n') + 1), "end\n");
  EXPECT_TRUE(extra.Closed());
  // The client reads that reply whether or not its request got in first.
  auto c = control::Client::Connect(sock, 20000);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = c.value()->Call(control::Record("space"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status().code(), store::Code::kBusy);
  // The held ones are still served.
  ASSERT_TRUE(held[0]->Send("hello"));
  EXPECT_EQ(Head(held[0]->Reply()).type, "ok");
  // Once they are gone, their slots are free again (as soon as their threads
  // see the end of file).
  held.clear();
  bool served = false;
  for (int i = 0; i < 300 && !served; ++i) {
    auto again = control::Client::Connect(sock, 20000);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    auto a = again.value()->Call(control::Record("hello"));
    served = a.ok() && a->ok();
    if (!served) ::usleep(100000);
  }
  EXPECT_TRUE(served);
}

TEST_F(ServedPool, StoppingWithIdleConnectionsReturnsPromptly) {
  Serve();
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<Conn>(sock));
    ASSERT_TRUE(idle.back()->Send("hello"));
    ASSERT_EQ(Head(idle.back()->Reply()).type, "ok");
  }
  idle.push_back(std::make_unique<Conn>(sock));  // never says anything
  auto start = std::chrono::steady_clock::now();
  server.reset();
  // Woken, not dropped after the 60 s idle limit.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  for (auto& c : idle) EXPECT_TRUE(c->Closed());
  EXPECT_FALSE(Exists(sock));
}

// ------------------------------------------------- import and export in the daemon

// Runs `line` through Handle() on another thread. A request that blocks
// (a FIFO's open() waits for a writer) is released by opening `fifo` for
// writing after 20 s, so that the test fails instead of hanging.
std::string HandleOrRelease(control::Server& server, const std::string& line, const std::string& fifo,
                            bool* blocked) {
  auto done = std::async(std::launch::async, [&] { return server.Handle(line); });
  *blocked = done.wait_for(std::chrono::seconds(20)) != std::future_status::ready;
  if (*blocked) {
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    std::string out = done.get();
    if (w >= 0) ::close(w);
    return out;
  }
  return done.get();
}

// The handler runs imports inside tcmu-runner: an open() that waits for a
// FIFO's writer would hold a connection, then the pool's close, for ever.
TEST_F(ServedPool, AnImportFromAFifoIsRefusedAtOnce) {
  Serve();
  std::string fifo = dir.path() + "/img.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  bool blocked = false;
  std::string r = HandleOrRelease(*server, "lun-import name=x path=" + control::Encode(fifo) + " block_size=512 size=0",
                                  fifo, &blocked);
  EXPECT_FALSE(blocked) << "the import waited in open() for a writer";
  EXPECT_EQ(Head(r).Get("code"), "InvalidArgument") << r;
  EXPECT_NE(Head(r).Get("message").find("is a FIFO"), std::string::npos) << r;
  EXPECT_FALSE(HasLun("x"));
  // Nor written as an export.
  ASSERT_EQ(Head(server->Handle("lun-create name=y size=1048576 block_size=512")).type, "ok");
  r = HandleOrRelease(*server, "lun-export force=1 name=y path=" + control::Encode(fifo), fifo, &blocked);
  EXPECT_FALSE(blocked);
  EXPECT_NE(Head(r).Get("message").find("is a FIFO"), std::string::npos) << r;
}

// A socket pair whose other end is closed: the client of a request has gone.
struct HungUpPeer {
  int fd[2] = {-1, -1};
  HungUpPeer() {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0);
    ::close(fd[1]);
  }
  ~HungUpPeer() { ::close(fd[0]); }
};

TEST_F(ServedPool, AnImportWhoseClientHungUpStopsAndLeavesNothing) {
  Serve();
  std::string img = dir.path() + "/small.img";
  WriteText(img, std::string(4 << 20, 'x'));
  HungUpPeer gone;
  std::string r =
      server->Handle("lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0", gone.fd[0]);
  EXPECT_EQ(Head(r).type, "error") << r;
  EXPECT_NE(Head(r).Get("message").find("cancelled"), std::string::npos) << r;
  EXPECT_FALSE(HasLun("x"));
  EXPECT_FALSE(HasLun(control::ImportTempName("x")));
  // The name is free: the same import, asked by a client that stays, works.
  r = server->Handle("lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0");
  EXPECT_EQ(Head(r).type, "ok") << r;
  EXPECT_TRUE(HasLun("x"));
}

TEST_F(ServedPool, AnExportWhoseClientHungUpKeepsTheOldFile) {
  Serve();
  ASSERT_EQ(Head(server->Handle("lun-create name=x size=4194304 block_size=512")).type, "ok");
  std::string out = dir.path() + "/out.img";
  WriteText(out, "old contents");
  HungUpPeer gone;
  std::string r = server->Handle("lun-export force=1 name=x path=" + control::Encode(out), gone.fd[0]);
  EXPECT_NE(Head(r).Get("message").find("cancelled"), std::string::npos) << r;
  EXPECT_EQ(ReadText(out), "old contents");
  EXPECT_EQ(TemporaryFiles(dir.path()), "");
}

TEST_F(ServedPool, ThePoolsOwnFileIsNoImage) {
  Serve();
  ASSERT_EQ(Head(server->Handle("lun-create name=x size=1048576 block_size=512")).type, "ok");
  std::string link = dir.path() + "/hardlink";
  ASSERT_EQ(::link(pool_path.c_str(), link.c_str()), 0);
  for (const std::string& p : {pool_path, link}) {
    std::string r = server->Handle("lun-export force=1 name=x path=" + control::Encode(p));
    EXPECT_NE(Head(r).Get("message").find("this pool's own file"), std::string::npos) << p << ": " << r;
    r = server->Handle("lun-import name=y block_size=512 size=0 path=" + control::Encode(p));
    EXPECT_NE(Head(r).Get("message").find("this pool's own file"), std::string::npos) << p << ": " << r;
  }
  EXPECT_FALSE(HasLun("y"));
  auto check = pool->Check();
  EXPECT_TRUE(check.clean);
}

TEST_F(ServedPool, ExportWritesTheModeAsked) {
  Serve();
  ASSERT_EQ(Head(server->Handle("lun-create name=x size=1048576 block_size=512")).type, "ok");
  mode_t old = ::umask(0);
  std::string a = dir.path() + "/a.img", b = dir.path() + "/b.img";
  std::string ra = server->Handle("lun-export name=x path=" + control::Encode(a));
  std::string rb = server->Handle("lun-export name=x mode=0640 path=" + control::Encode(b));
  ::umask(old);
  ASSERT_EQ(Head(ra).type, "ok") << ra;
  ASSERT_EQ(Head(rb).type, "ok") << rb;
  struct stat st;
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(::stat(b.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

// ------------------------------------------------- progress over the socket

class Progressed : public ServedPool {
 protected:
  std::string img = dir.path() + "/big.img";
  void SetUp() override {
    // 8 MiB, every other MiB data: 8 copy chunks, so several progress lines.
    std::string data;
    for (int i = 0; i < 8; ++i) data += std::string(1 << 20, i % 2 ? '\0' : static_cast<char>('a' + i));
    WriteText(img, data);
  }
  // Calls with progress=1 and checks the lines: in order, one total, the
  // last at total. Returns how many arrived.
  size_t CallWithProgress(control::Record req) {
    auto c = control::Client::Connect(sock);
    EXPECT_TRUE(c.ok());
    if (!c.ok()) return 0;
    std::vector<std::pair<uint64_t, uint64_t>> seen;
    auto r = c.value()->Call(req.Set("progress", "1"), [&](uint64_t d, uint64_t t) { seen.emplace_back(d, t); });
    EXPECT_TRUE(r.ok() && r->ok()) << FormatRecord(req) << ": " << (r.ok() ? r->head.Get("message") : "");
    EXPECT_FALSE(seen.empty()) << FormatRecord(req);
    for (size_t i = 1; i < seen.size(); ++i) {
      EXPECT_LT(seen[i - 1].first, seen[i].first) << "line " << i;
      EXPECT_EQ(seen[i - 1].second, seen[i].second) << "line " << i;
    }
    if (!seen.empty()) {
      EXPECT_EQ(seen.back().first, seen.back().second);
    }
    return seen.size();
  }
};

TEST_F(Progressed, ImportExportCheckStreamProgressInOrderToTotal) {
  Serve();
  EXPECT_GE(CallWithProgress(control::Record("lun-import").Set("name", "x").Set("path", img).Set("block_size", 512).Set(
                "size", 0)),
            4u);
  EXPECT_TRUE(HasLun("x"));
  std::string back = dir.path() + "/back.img";
  EXPECT_GE(CallWithProgress(control::Record("lun-export").Set("name", "x").Set("path", back)), 2u);
  EXPECT_EQ(ReadText(back), ReadText(img));
  EXPECT_GE(CallWithProgress(control::Record("check")), 1u);
}

TEST_F(Progressed, ProgressLinesComeBeforeTheStatusLine) {
  Serve();
  std::string r = server->Handle("lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0 progress=1");
  ASSERT_EQ(r.rfind("progress done=", 0), 0u) << r;
  size_t ok = r.find("\nok written=");
  ASSERT_NE(ok, std::string::npos) << r;
  EXPECT_EQ(r.substr(0, ok + 1).rfind("progress done=8388608 total=8388608\n"), ok + 1 - 36) << r;
  EXPECT_EQ(r.substr(r.size() - 4), "end\n");
  // A failed request ends with its error, without a made-up last line.
  std::string e = server->Handle("lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0 progress=1");
  EXPECT_EQ(e.rfind("error code=AlreadyExists", 0), 0u) << e;
}

TEST_F(Progressed, OldClientsGetTheRepliesTheyAlwaysDid) {
  Serve();
  std::string r = RawCall(sock, "lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0");
  EXPECT_EQ(r.rfind("ok written=4194304 skipped=4194304\nlun name=x ", 0), 0u) << r;
  EXPECT_EQ(r.find("progress"), std::string::npos) << r;
  r = RawCall(sock, "check");
  EXPECT_EQ(r.rfind("ok clean=1 ", 0), 0u) << r;
  EXPECT_EQ(r.find("progress"), std::string::npos) << r;
  // A new client skips progress lines it did not ask a callback for.
  auto c = control::Client::Connect(sock);
  ASSERT_TRUE(c.ok());
  auto rep = c.value()->Call(control::Record("check").Set("progress", "1"));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->ok());
  EXPECT_EQ(rep->head.Get("clean"), "1");
}

TEST_F(Progressed, AClientThatDoesNotReadDoesNotStallTheServer) {
  Serve();
  ASSERT_EQ(Head(server->Handle("lun-import name=x path=" + control::Encode(img) + " block_size=512 size=0")).type,
            "ok");
  {
    // Asks for progress on long requests, never reads, and hangs up.
    Conn c(sock);
    ASSERT_TRUE(c.ok());
    int small = 1;  // the smallest buffer the kernel allows
    ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    std::string req;
    for (int i = 0; i < 20; ++i) req += "check progress=1\n";
    ASSERT_EQ(::send(c.fd(), req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    ::usleep(200 * 1000);
  }
  // The server is free again and serves everyone.
  auto c = control::Client::Connect(sock, 20000);
  ASSERT_TRUE(c.ok());
  auto r = c.value()->Call(control::Record("check"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->head.Get("clean"), "1");
}

}  // namespace
}  // namespace cowstore::control_test
