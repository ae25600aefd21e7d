// SPDX-License-Identifier: Apache-2.0
// Shared fixture of the plugin tests: a scratch pool directory (exported to
// the plugin as COWSTORE_POOL_DIR), pools made with the store API and fake
// tcmu devices; CDBs come from tests/common/cdb_builder.h. Every test drives
// the built handler_cowstore.so through fake::Runner.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/cdb_builder.h"
#include "tests/plugin/fake_runner.h"

namespace cowstore::plugin_test {

using ::cowstore::testing::cdb::Bytes;

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  fake::Runner& runner() { return fake::Runner::Get(); }
  tcmu::Handler& handler() { return *runner().handler(); }

  // Creates pool `name` (a sparse file of `size` bytes) in the pool dir.
  void MakePool(const std::string& name, uint64_t size = 1ull << 30);
  std::string PoolPath(const std::string& name) const { return dir_ + "/" + name; }

  // A fake device as the kernel would present it.
  std::unique_ptr<tcmu_device> MakeDevice(const std::string& cfgstring,
                                          uint64_t size_bytes = 64ull << 20,
                                          uint32_t block_size = 512,
                                          const std::string& serial = "");
  // MakeDevice + open; asserts success. Closed in TearDown if still open.
  tcmu_device* OpenDevice(const std::string& cfgstring, uint64_t size_bytes = 64ull << 20,
                          uint32_t block_size = 512, const std::string& serial = "");
  void CloseDevice(tcmu_device* dev);

  // check_config through the handler; *reason gets the text (or "").
  bool CheckConfig(const std::string& cfgstring, std::string* reason);

  fake::Outcome Run(tcmu_device* dev, const Bytes& cdb, Bytes* data = nullptr) {
    return runner().Execute(dev, cdb, data);
  }
  // Runs a data-in command with a buffer of `len` bytes; returns the buffer.
  Bytes RunIn(tcmu_device* dev, const Bytes& cdb, size_t len, fake::Outcome* out = nullptr);
  // The NAA designator (16 bytes) VPD 0x83 reports for a device.
  Bytes NaaOf(tcmu_device* dev);

  std::string dir_;
  std::vector<std::unique_ptr<tcmu_device>> open_;
};

std::string NewSerial();

// CDBs and parameter lists come from the shared builder.
using namespace ::cowstore::testing::cdb;

// LID1 EXTENDED COPY parameter list naming `naas` (identification CSCDs)
// with block-to-block segments {src cscd, dst cscd, blocks, src lba, dst lba}.
struct XcopySegment {
  uint16_t src, dst;
  uint16_t blocks;
  uint64_t src_lba, dst_lba;
};
inline Bytes XcopyParams(uint8_t list_id, uint8_t list_id_usage, const std::vector<Bytes>& naas,
                         const std::vector<XcopySegment>& segments, uint32_t block_size) {
  XcopyList l;
  l.list_id = list_id;
  l.list_id_usage = list_id_usage;
  for (const Bytes& n : naas) l.cscds.push_back(IdentCscd(n, block_size));
  for (const XcopySegment& s : segments)
    l.segments.push_back(BlockSegment(s.src, s.dst, s.blocks, s.src_lba, s.dst_lba));
  return l.Build();
}

}  // namespace cowstore::plugin_test
