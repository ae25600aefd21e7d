// The plugin serves each open pool's control socket (handler/control), so
// cowctl can manage a pool tcmu-runner holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "handler/control/client.h"
#include "handler/control/protocol.h"
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

}  // namespace
}  // namespace cowstore::plugin_test
