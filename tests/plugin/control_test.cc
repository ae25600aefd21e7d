// SPDX-License-Identifier: Apache-2.0
// The plugin serves each open pool's control socket (handler/control), so
// cowctl can manage a pool tcmu-runner holds.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "handler/control/client.h"
#include "handler/control/protocol.h"
#include "handler/store/env.h"
#include "handler/store/pool.h"
#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

class ControlTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank");
  }
  std::string Socket() const { return control::SocketPath(dir_ + "/run", "tank"); }
  control::Reply Call(const control::Record& request) {
    auto client = control::Client::Connect(Socket(), 5000);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    if (!client.ok()) return {};
    auto reply = client.value()->Call(request);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply.value() : control::Reply{};
  }
};

TEST_F(ControlTest, SocketServedFromFirstOpenUntilLastClose) {
  EXPECT_NE(access(Socket().c_str(), F_OK), 0);
  tcmu_device* a = OpenDevice("cowstore/tank/a");
  tcmu_device* b = OpenDevice("cowstore/tank/b");
  control::Reply hello = Call(control::Record("hello"));
  EXPECT_TRUE(hello.ok());
  EXPECT_EQ(hello.head.Get("pool"), "tank");
  CloseDevice(a);
  EXPECT_TRUE(Call(control::Record("hello")).ok());  // b still holds the pool
  CloseDevice(b);
  EXPECT_NE(access(Socket().c_str(), F_OK), 0);
}

TEST_F(ControlTest, CountersOfTheOpenLuns) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1");
  Bytes data(8 * 512, 0x11);
  ASSERT_EQ(Run(dev, Write16(0, 8), &data).scsi_status, 0);
  control::Reply r = Call(control::Record("counters"));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].Get("lun"), "vm1");
  EXPECT_EQ(r.records[0].GetU64("write_bytes"), 8u * 512);
  EXPECT_GE(r.records[0].GetU64("commands").value_or(0), 1u);
}

TEST_F(ControlTest, DeletingAServedLunIsRefused) {
  OpenDevice("cowstore/tank/vm1");
  control::Record del("lun-delete");
  del.Set("name", "vm1");
  control::Reply r = Call(del);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), store::Code::kBusy);
}

// Several cowctl clients at once (the server serves each connection on its
// own thread) read the counters while the LUN is written: run under TSan.
TEST_F(ControlTest, CountersFromSeveralConnectionsAtOnce) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1");
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      auto client = control::Client::Connect(Socket(), 30000);
      if (!client.ok()) {
        ++failures;
        return;
      }
      for (int i = 0; i < 20; ++i) {
        auto r = client.value()->Call(control::Record("counters"));
        if (!r.ok() || !r->ok() || r->records.size() != 1) ++failures;
      }
    });
  }
  Bytes data(8 * 512, 0x22);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Run(dev, Write16(8 * i, 8), &data).scsi_status, 0);
  for (auto& c : clients) c.join();
  EXPECT_EQ(failures.load(), 0);
  control::Reply r = Call(control::Record("counters"));
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_EQ(r.records[0].GetU64("write_bytes"), 20u * 8 * 512);
}

// The control server runs imports inside tcmu-runner: opening a FIFO would
// wait for a writer for ever, and with it the pool's last close (which
// waits for the request) and, through the registry, every LUN open.
TEST_F(ControlTest, AnImportFromAFifoIsRefusedAndThePoolStillCloses) {
  tcmu_device* dev = OpenDevice("cowstore/tank/a");
  std::string fifo = dir_ + "/img.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto client = control::Client::Connect(Socket(), 20000);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto r = client.value()->Call(
      control::Record("lun-import").Set("name", "x").Set("path", fifo).Set("block_size", 512).Set("size", 0));
  if (!r.ok()) {
    // No answer in 20 s: the import waits in open(). A writer lets it go,
    // so that the test fails instead of hanging in the close below.
    int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    ADD_FAILURE() << "the import waited in open() for a writer: " << r.status().ToString();
    client.value().reset();
    CloseDevice(dev);
    if (w >= 0) ::close(w);
    return;
  }
  EXPECT_EQ(r->status().code(), store::Code::kInvalidArgument);
  EXPECT_NE(r->head.Get("message").find("is a FIFO"), std::string::npos) << r->head.Get("message");
  CloseDevice(dev);
  EXPECT_NE(access(Socket().c_str(), F_OK), 0);
}

// The daemon holds the pool open: an export over its file would destroy it.
TEST_F(ControlTest, TheServedPoolsOwnFileIsNoImage) {
  tcmu_device* dev = OpenDevice("cowstore/tank/vm1");
  control::Reply r = Call(control::Record("lun-export").Set("name", "vm1").Set("path", PoolPath("tank")).Set("force", "1"));
  EXPECT_EQ(r.status().code(), store::Code::kInvalidArgument);
  EXPECT_NE(r.head.Get("message").find("this pool's own file"), std::string::npos) << r.head.Get("message");
  Bytes data(8 * 512, 0x33);
  EXPECT_EQ(Run(dev, Write16(0, 8), &data).scsi_status, 0);
  CloseDevice(dev);
  auto pool = store::Pool::Open(store::DefaultEnv(), PoolPath("tank"));
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_TRUE(pool.value()->Check().clean);
  EXPECT_TRUE(pool.value()->Close().ok());
}

// A connection to `socket` whose requests are answered into a socket
// nobody reads: once the replies fill it, the server's connection thread
// waits in send() (up to kSendTimeoutMs), a request still running that
// stopping the server waits for. Closing the fd lets it go (EPIPE).
int StuckClient(const std::string& socket) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket.c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  std::string hellos;
  for (int i = 0; i < 1024; ++i) hellos += "hello\n";
  // Send until the server has stopped reading for half a second: it is
  // stuck sending the replies of what it read.
  for (;;) {
    ssize_t n = ::send(fd, hellos.data(), hellos.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno != EAGAIN) break;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, 500) == 0) return fd;
  }
  ::close(fd);
  return -1;
}

TEST_F(ControlTest, ClosingAPoolWhoseServerFinishesARequestHoldsUpNoOtherPool) {
  MakePool("other");
  tcmu_device* a = OpenDevice("cowstore/tank/a");
  int stuck = StuckClient(Socket());
  ASSERT_GE(stuck, 0);
  // The last LUN of tank closes: its server waits for the stuck request.
  auto a_owned = std::find_if(open_.begin(), open_.end(), [&](const auto& d) { return d.get() == a; });
  ASSERT_NE(a_owned, open_.end());
  std::unique_ptr<tcmu_device> a_dev = std::move(*a_owned);
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    runner().Close(a_dev.get());
    closed = true;
  });
  ::usleep(300 * 1000);  // for the close to reach the server (the test passes either way with the fix)
  // Another pool's LUN opens meanwhile: the registry is not held by the close.
  tcmu_device* b = OpenDevice("cowstore/other/b");
  EXPECT_FALSE(closed.load()) << "opening other/b waited for tank's close";
  // A LUN of tank itself waits for the close to finish (the pool's file
  // lock), then opens it anew, rather than failing as busy.
  auto c = MakeDevice("cowstore/tank/c");
  std::atomic<int> c_rc{-1};
  std::thread opener([&] { c_rc = runner().Open(c.get()); });
  ::usleep(300 * 1000);
  EXPECT_EQ(c_rc.load(), -1) << "tank/c opened while tank was still being closed";
  ::close(stuck);  // the stuck reply fails at once; the close completes
  closer.join();
  opener.join();
  EXPECT_TRUE(closed.load());
  EXPECT_EQ(c_rc.load(), 0);
  EXPECT_TRUE(Call(control::Record("hello")).ok());  // tank served again, by c
  runner().Close(c.get());
  CloseDevice(b);
}

}  // namespace
}  // namespace cowstore::plugin_test
