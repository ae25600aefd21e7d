// SPDX-License-Identifier: Apache-2.0
// Shared fixture of the plugin tests: a scratch pool directory (exported to
// the plugin as COWSTORE_POOL_DIR), pools made with the store API, fake tcmu
// devices, and CDB builders. Every test drives the built handler_cowstore.so
// through fake::Runner.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/plugin/fake_runner.h"

namespace cowstore::plugin_test {

using Bytes = std::vector<uint8_t>;

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

// CDB builders (big-endian fields as SBC-3/SPC-4 define them).
Bytes Tur();
Bytes Inquiry(bool evpd, uint8_t page, uint16_t alloc);
Bytes RequestSense(uint8_t alloc);
Bytes ReadCapacity10();
Bytes ReadCapacity16(uint32_t alloc = 32);
Bytes Read6(uint32_t lba, uint8_t blocks);
Bytes Write6(uint32_t lba, uint8_t blocks);
Bytes Read10(uint32_t lba, uint16_t blocks, uint8_t flags = 0);
Bytes Write10(uint32_t lba, uint16_t blocks, uint8_t flags = 0);
Bytes Read12(uint32_t lba, uint32_t blocks);
Bytes Write12(uint32_t lba, uint32_t blocks);
Bytes Read16(uint64_t lba, uint32_t blocks, uint8_t flags = 0);
Bytes Write16(uint64_t lba, uint32_t blocks, uint8_t flags = 0);
Bytes Verify16(uint64_t lba, uint32_t blocks, uint8_t bytchk);
Bytes WriteAndVerify16(uint64_t lba, uint32_t blocks);
Bytes SyncCache10();
Bytes SyncCache16();
Bytes WriteSame16(uint64_t lba, uint32_t blocks, uint8_t flags = 0);
Bytes Unmap(uint16_t param_len);
Bytes UnmapParams(const std::vector<std::pair<uint64_t, uint32_t>>& ranges);
Bytes CompareAndWrite(uint64_t lba, uint8_t blocks);
Bytes GetLbaStatus(uint64_t lba, uint32_t alloc);
Bytes ModeSense6(uint8_t page, uint8_t alloc);
Bytes ModeSense10(uint8_t page, uint16_t alloc);
Bytes StartStopUnit(bool start);
Bytes PreventAllow(bool prevent);
Bytes ReportOpcodes(uint32_t alloc);
Bytes ExtendedCopy(uint32_t param_len);
Bytes ReceiveCopyResults(uint8_t service_action, uint8_t list_id, uint32_t alloc);
// LID1 EXTENDED COPY parameter list: identification CSCDs (0xE4, NAA) and
// block-to-block (0x02) segments {src cscd, dst cscd, blocks, src lba, dst lba}.
struct XcopySegment {
  uint16_t src, dst;
  uint16_t blocks;
  uint64_t src_lba, dst_lba;
};
Bytes XcopyParams(uint8_t list_id, uint8_t list_id_usage, const std::vector<Bytes>& naas,
                  const std::vector<XcopySegment>& segments, uint32_t block_size);

}  // namespace cowstore::plugin_test
