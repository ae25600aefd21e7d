// SPDX-License-Identifier: Apache-2.0
// Shared fixture and CDB builders for the SCSI layer tests: a real store pool
// on the store's in-memory FaultInjectionEnv, one or more LogicalUnits in a
// private LunDirectory, and helpers that drive LogicalUnit::Execute with raw
// CDB bytes.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/lun_directory.h"
#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::scsi::testing {

using Bytes = std::vector<uint8_t>;

// CDB builders (big-endian fields filled in, everything else zero).
Bytes Cdb6(uint8_t op, uint32_t lba, uint8_t len, uint8_t byte1 = 0);
Bytes Cdb10(uint8_t op, uint32_t lba, uint16_t len, uint8_t byte1 = 0);
Bytes Cdb12(uint8_t op, uint32_t lba, uint32_t len, uint8_t byte1 = 0);
Bytes Cdb16(uint8_t op, uint64_t lba, uint32_t len, uint8_t byte1 = 0);
Bytes CompareAndWriteCdb(uint64_t lba, uint8_t blocks, uint8_t byte1 = 0);
Bytes UnmapCdb(uint16_t param_len);
Bytes UnmapParams(const std::vector<std::pair<uint64_t, uint32_t>>& ranges);
Bytes GetLbaStatusCdb(uint64_t lba, uint32_t alloc);
Bytes ReadCapacity16Cdb(uint32_t alloc = 32);
Bytes InquiryCdb(bool evpd, uint8_t page, uint16_t alloc);
Bytes XcopyCdb(uint32_t param_len);
Bytes ReceiveCopyResultsCdb(uint8_t sa, uint8_t list_id, uint32_t alloc);

// EXTENDED COPY (LID1) parameter list builder.
struct XcopyList {
  uint8_t list_id = 0;
  uint8_t list_id_usage = 3;  // 11b: no list ID
  std::vector<Bytes> cscds;
  std::vector<Bytes> segments;
  Bytes Build() const;
};
Bytes IdentCscd(const Naa& naa, uint32_t block_length = 512);
Bytes BlockSegment(uint16_t src, uint16_t dst, uint16_t blocks, uint64_t src_lba, uint64_t dst_lba);

Bytes Pattern(size_t n, uint8_t seed);

struct Expect {
  SenseKey key;
  Asc asc;
};
::testing::AssertionResult IsGood(const CommandResult& r);
::testing::AssertionResult HasSense(const CommandResult& r, SenseKey key, Asc code);
// Field pointer checks (SKSV set, C/D, byte, optional bit).
::testing::AssertionResult HasFieldPointer(const CommandResult& r, bool in_cdb, uint16_t byte,
                                           int bit = -1);

class ScsiTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kLunBytes = 64ull << 20;
  static constexpr uint32_t kBlock = 512;

  void SetUp() override;
  void TearDown() override;

  // Opens (creates) a LUN in `pool` and wraps it in a LogicalUnit.
  std::shared_ptr<LogicalUnit> AddLu(store::Pool& pool, const std::string& name,
                                     uint64_t bytes, LunConfig config, uint32_t block = kBlock);
  LunConfig Config(const std::string& serial, const std::string& group = "") const;

  // Executes with a data-out buffer (or none).
  CommandResult Exec(const Bytes& cdb, const Bytes& data_out = {}) { return Exec(*lu_, cdb, data_out); }
  CommandResult Exec(LogicalUnit& lu, const Bytes& cdb, const Bytes& data_out = {});
  // Executes a data-in command with a buffer of `len` bytes; returns the
  // bytes filled in *out.
  CommandResult ExecIn(const Bytes& cdb, size_t len, Bytes* out) { return ExecIn(*lu_, cdb, len, out); }
  CommandResult ExecIn(LogicalUnit& lu, const Bytes& cdb, size_t len, Bytes* out);

  CommandResult Write(uint64_t lba, const Bytes& data) { return Write(*lu_, lba, data); }
  CommandResult Write(LogicalUnit& lu, uint64_t lba, const Bytes& data);
  Bytes Read(uint64_t lba, uint32_t blocks) { return Read(*lu_, lba, blocks); }
  Bytes Read(LogicalUnit& lu, uint64_t lba, uint32_t blocks);

  store::FaultInjectionEnv env_;
  std::unique_ptr<store::Pool> pool_;
  LunDirectory directory_;
  std::shared_ptr<LogicalUnit> lu_;
  std::vector<std::shared_ptr<LogicalUnit>> extra_;
};

}  // namespace cowstore::scsi::testing
