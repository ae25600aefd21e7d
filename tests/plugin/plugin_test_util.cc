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
namespace {

void Put16(Bytes& b, size_t at, uint16_t v) {
  b[at] = v >> 8;
  b[at + 1] = v & 0xff;
}
void Put32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = (v >> (24 - 8 * i)) & 0xff;
}
void Put64(Bytes& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = (v >> (56 - 8 * i)) & 0xff;
}

}  // namespace

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

Bytes Tur() { return Bytes(6, 0); }

Bytes Inquiry(bool evpd, uint8_t page, uint16_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x12;
  c[1] = evpd ? 1 : 0;
  c[2] = page;
  Put16(c, 3, alloc);
  return c;
}

Bytes RequestSense(uint8_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x03;
  c[4] = alloc;
  return c;
}

Bytes ReadCapacity10() {
  Bytes c(10, 0);
  c[0] = 0x25;
  return c;
}

Bytes ReadCapacity16(uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x9e;
  c[1] = 0x10;
  Put32(c, 10, alloc);
  return c;
}

Bytes Read6(uint32_t lba, uint8_t blocks) {
  Bytes c(6, 0);
  c[0] = 0x08;
  c[1] = (lba >> 16) & 0x1f;
  Put16(c, 2, lba & 0xffff);
  c[4] = blocks;
  return c;
}

Bytes Write6(uint32_t lba, uint8_t blocks) {
  Bytes c = Read6(lba, blocks);
  c[0] = 0x0a;
  return c;
}

Bytes Read10(uint32_t lba, uint16_t blocks, uint8_t flags) {
  Bytes c(10, 0);
  c[0] = 0x28;
  c[1] = flags;
  Put32(c, 2, lba);
  Put16(c, 7, blocks);
  return c;
}

Bytes Write10(uint32_t lba, uint16_t blocks, uint8_t flags) {
  Bytes c = Read10(lba, blocks, flags);
  c[0] = 0x2a;
  return c;
}

Bytes Read12(uint32_t lba, uint32_t blocks) {
  Bytes c(12, 0);
  c[0] = 0xa8;
  Put32(c, 2, lba);
  Put32(c, 6, blocks);
  return c;
}

Bytes Write12(uint32_t lba, uint32_t blocks) {
  Bytes c = Read12(lba, blocks);
  c[0] = 0xaa;
  return c;
}

Bytes Read16(uint64_t lba, uint32_t blocks, uint8_t flags) {
  Bytes c(16, 0);
  c[0] = 0x88;
  c[1] = flags;
  Put64(c, 2, lba);
  Put32(c, 10, blocks);
  return c;
}

Bytes Write16(uint64_t lba, uint32_t blocks, uint8_t flags) {
  Bytes c = Read16(lba, blocks, flags);
  c[0] = 0x8a;
  return c;
}

Bytes Verify16(uint64_t lba, uint32_t blocks, uint8_t bytchk) {
  Bytes c = Read16(lba, blocks, static_cast<uint8_t>((bytchk & 3) << 1));
  c[0] = 0x8f;
  return c;
}

Bytes WriteAndVerify16(uint64_t lba, uint32_t blocks) {
  Bytes c = Read16(lba, blocks, 0x02);  // BYTCHK=1
  c[0] = 0x8e;
  return c;
}

Bytes SyncCache10() {
  Bytes c(10, 0);
  c[0] = 0x35;
  return c;
}

Bytes SyncCache16() {
  Bytes c(16, 0);
  c[0] = 0x91;
  return c;
}

Bytes WriteSame16(uint64_t lba, uint32_t blocks, uint8_t flags) {
  Bytes c = Read16(lba, blocks, flags);
  c[0] = 0x93;
  return c;
}

Bytes Unmap(uint16_t param_len) {
  Bytes c(10, 0);
  c[0] = 0x42;
  Put16(c, 7, param_len);
  return c;
}

Bytes UnmapParams(const std::vector<std::pair<uint64_t, uint32_t>>& ranges) {
  Bytes p(8 + 16 * ranges.size(), 0);
  Put16(p, 0, static_cast<uint16_t>(p.size() - 2));
  Put16(p, 2, static_cast<uint16_t>(16 * ranges.size()));
  for (size_t i = 0; i < ranges.size(); ++i) {
    Put64(p, 8 + 16 * i, ranges[i].first);
    Put32(p, 8 + 16 * i + 8, ranges[i].second);
  }
  return p;
}

Bytes CompareAndWrite(uint64_t lba, uint8_t blocks) {
  Bytes c(16, 0);
  c[0] = 0x89;
  Put64(c, 2, lba);
  c[13] = blocks;
  return c;
}

Bytes GetLbaStatus(uint64_t lba, uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x9e;
  c[1] = 0x12;
  Put64(c, 2, lba);
  Put32(c, 10, alloc);
  return c;
}

Bytes ModeSense6(uint8_t page, uint8_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x1a;
  c[2] = page;
  c[4] = alloc;
  return c;
}

Bytes ModeSense10(uint8_t page, uint16_t alloc) {
  Bytes c(10, 0);
  c[0] = 0x5a;
  c[2] = page;
  Put16(c, 7, alloc);
  return c;
}

Bytes StartStopUnit(bool start) {
  Bytes c(6, 0);
  c[0] = 0x1b;
  c[4] = start ? 1 : 0;
  return c;
}

Bytes PreventAllow(bool prevent) {
  Bytes c(6, 0);
  c[0] = 0x1e;
  c[4] = prevent ? 1 : 0;
  return c;
}

Bytes ReportOpcodes(uint32_t alloc) {
  Bytes c(12, 0);
  c[0] = 0xa3;
  c[1] = 0x0c;
  Put32(c, 6, alloc);
  return c;
}

Bytes ExtendedCopy(uint32_t param_len) {
  Bytes c(16, 0);
  c[0] = 0x83;
  Put32(c, 10, param_len);
  return c;
}

Bytes ReceiveCopyResults(uint8_t service_action, uint8_t list_id, uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x84;
  c[1] = service_action;
  c[2] = list_id;
  Put32(c, 10, alloc);
  return c;
}

Bytes XcopyParams(uint8_t list_id, uint8_t list_id_usage, const std::vector<Bytes>& naas,
                  const std::vector<XcopySegment>& segments, uint32_t block_size) {
  const size_t cscd_len = 32 * naas.size(), seg_len = 28 * segments.size();
  Bytes p(16 + cscd_len + seg_len, 0);
  p[0] = list_id;
  p[1] = static_cast<uint8_t>((list_id_usage & 3) << 3);
  Put16(p, 2, static_cast<uint16_t>(cscd_len));
  Put32(p, 8, static_cast<uint32_t>(seg_len));
  for (size_t i = 0; i < naas.size(); ++i) {
    const size_t o = 16 + 32 * i;
    p[o] = 0xe4;
    p[o + 4] = 0x01;  // binary
    p[o + 5] = 0x03;  // LU association, NAA
    p[o + 7] = 16;
    std::memcpy(&p[o + 8], naas[i].data(), 16);
    p[o + 29] = (block_size >> 16) & 0xff;
    p[o + 30] = (block_size >> 8) & 0xff;
    p[o + 31] = block_size & 0xff;
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    const size_t o = 16 + cscd_len + 28 * i;
    const XcopySegment& s = segments[i];
    p[o] = 0x02;
    Put16(p, o + 2, 24);
    Put16(p, o + 4, s.src);
    Put16(p, o + 6, s.dst);
    Put16(p, o + 10, s.blocks);
    Put64(p, o + 12, s.src_lba);
    Put64(p, o + 20, s.dst_lba);
  }
  return p;
}

}  // namespace cowstore::plugin_test
