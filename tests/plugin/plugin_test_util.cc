// SPDX-License-Identifier: Apache-2.0
#include "tests/plugin/plugin_test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "handler/store/env.h"
#include "handler/store/pool.h"

namespace cowstore::plugin_test {

std::string NewSerial() {
  // UUID-shaped and unique per process run, like rtslib's generate_wwn.
  static std::atomic<unsigned> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-8%03x-%012x", static_cast<unsigned>(getpid()),
                counter.fetch_add(1) & 0xffff, 0xabc, 0xdef, 0x123456 + counter.load());
  return buf;
}

void PluginTest::SetUp() {
  char tmpl[] = "/tmp/cowstore-plugin-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  dir_ = tmpl;
  setenv("COWSTORE_POOL_DIR", dir_.c_str(), 1);
  setenv("COWSTORE_RUN_DIR", (dir_ + "/run").c_str(), 1);  // control sockets
  std::string error;
  ASSERT_TRUE(runner().Load(fake::PluginPath(), &error)) << error;
  runner().ClearLogs();
}

void PluginTest::TearDown() {
  for (auto& d : open_) {
    if (d && d->tcmur_private) runner().Close(d.get());
  }
  open_.clear();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void PluginTest::MakePool(const std::string& name, uint64_t size) {
  store::PoolOptions opts;
  opts.size_bytes = size;
  auto pool = store::Pool::Create(store::DefaultEnv(), PoolPath(name), opts);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE(pool.value()->Close().ok());
}

std::unique_ptr<tcmu_device> PluginTest::MakeDevice(const std::string& cfgstring,
                                                    uint64_t size_bytes, uint32_t block_size,
                                                    const std::string& serial) {
  auto dev = std::make_unique<tcmu_device>();
  dev->cfgstring = cfgstring;
  dev->block_size = block_size;
  dev->num_lbas = size_bytes / block_size;
  // What cowctl configures (hw_max_sectors of 16 MiB), not the kernel's 128.
  dev->max_xfer_len = (16u << 20) / block_size;
  dev->wwn = serial.empty() ? NewSerial() : serial;
  return dev;
}

tcmu_device* PluginTest::OpenDevice(const std::string& cfgstring, uint64_t size_bytes,
                                    uint32_t block_size, const std::string& serial) {
  auto dev = MakeDevice(cfgstring, size_bytes, block_size, serial);
  const int rc = runner().Open(dev.get());
  EXPECT_EQ(rc, 0) << cfgstring;
  if (rc != 0) {
    for (const auto& l : runner().logs()) ADD_FAILURE() << l.text;
  }
  open_.push_back(std::move(dev));
  return open_.back().get();
}

void PluginTest::CloseDevice(tcmu_device* dev) {
  runner().Close(dev);
  EXPECT_EQ(dev->tcmur_private, nullptr);
}

bool PluginTest::CheckConfig(const std::string& cfgstring, std::string* reason) {
  char* why = nullptr;
  const bool ok = handler().check_config(cfgstring.c_str(), &why);
  *reason = why ? why : "";
  std::free(why);
  return ok;
}

Bytes PluginTest::RunIn(tcmu_device* dev, const Bytes& cdb, size_t len, fake::Outcome* out) {
  Bytes buf(len, 0);
  fake::Outcome o = Run(dev, cdb, &buf);
  if (out) *out = o;
  return buf;
}

Bytes PluginTest::NaaOf(tcmu_device* dev) {
  fake::Outcome o;
  Bytes page = RunIn(dev, Inquiry(true, 0x83, 512), 512, &o);
  EXPECT_EQ(o.scsi_status, 0);
  const size_t end = std::min<size_t>(4 + (size_t{page[2]} << 8 | page[3]), page.size());
  for (size_t off = 4; off + 4 <= end; off += 4 + page[off + 3]) {
    const uint8_t type = page[off + 1] & 0x0f, assoc = (page[off + 1] >> 4) & 3;
    if (type == 3 && assoc == 0 && page[off + 3] == 16) {
      return Bytes(page.begin() + off + 4, page.begin() + off + 20);
    }
  }
  ADD_FAILURE() << "no NAA designator in VPD 0x83";
  return Bytes(16, 0);
}

}  // namespace cowstore::plugin_test
