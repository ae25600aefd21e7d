// SPDX-License-Identifier: Apache-2.0
// Shared fixture for the SCSI layer tests: a real store pool
// on the store's in-memory FaultInjectionEnv, one or more LogicalUnits in a
// private LunDirectory, and helpers that drive LogicalUnit::Execute with raw
// CDB bytes (built by tests/common/cdb_builder.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handler/scsi/command_pipeline.h"
#include "handler/scsi/command_result.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/lun_directory.h"
#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "tests/common/cdb_builder.h"

namespace cowstore::scsi::testing {

namespace cdb = ::cowstore::testing::cdb;

// CDBs and parameter lists: the shared builder (named into this namespace,
// so the SCSI layer's own names cannot hide them).
using cdb::Bytes;
using cdb::Cdb6;
using cdb::Cdb10;
using cdb::Cdb12;
using cdb::Cdb16;
using cdb::Read6;
using cdb::Write6;
using cdb::Read10;
using cdb::Write10;
using cdb::Read12;
using cdb::Write12;
using cdb::Read16;
using cdb::Write16;
using cdb::WriteSame10;
using cdb::WriteSame16;
using cdb::CompareAndWrite;
using cdb::Unmap;
using cdb::UnmapParams;
using cdb::GetLbaStatus;
using cdb::ReadCapacity16;
using cdb::Inquiry;
using cdb::ExtendedCopy;
using cdb::ReceiveCopyResults;
using cdb::XcopyList;
using cdb::IdentCscd;
using cdb::BlockSegment;

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

// How the fixture's Exec/ExecIn run a command.
enum class Route {
  kBlocking,  // LogicalUnit::Execute: the command waits for its own commit
  kDeferred,  // Execute with a DeferredCommit, then its Commit (deferred_commit.h)
  kPipeline,  // through a CommandPipeline, answered once committed
};
const char* RouteName(Route r);

class ScsiTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kLunBytes = 64ull << 20;
  static constexpr uint32_t kBlock = 512;
  // The fixture pool's size, for SetUp. The open punches all free space
  // sector by sector, so the pool's size is part of each test's set-up
  // cost: at 96 MiB, when the in-memory Env still held each image as two
  // flat buffers, these ~180 tests took about 1,000 CPU s of session 23's
  // TSan stage (5 s an INQUIRY test; the Env is sparse since session 25).
  // 40 MiB holds what most tests write; a fixture that fills more sets it
  // larger in its constructor.
  uint64_t pool_bytes_ = 40ull << 20;

  void SetUp() override;
  void TearDown() override;

  // Power loss now: nothing more reaches the disk, unsynced sectors are
  // dropped; then /pool0 is reopened and lu_ wraps the reopened lun0 (the
  // LUs AddLu made beside it are dropped).
  void CrashAndReopen();

  // A second pool in env_, format 3: shared at a 4 KiB grain under a
  // 64 KiB AU (cowctl pool create --allocation-unit 64K --grain 4K).
  static constexpr uint32_t kGrain = 4096;
  std::unique_ptr<store::Pool> CreateGrainPool(const std::string& path);
  // Closes a pool a test made beside pool_ (expecting success) and drops it,
  // after letting go of the LUs AddLu keeps (extra_): the caller has reset
  // its own handles to that pool's LUs.
  void CloseExtraPool(std::unique_ptr<store::Pool>* pool);

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

  // Runs `cdb` on `lu` by route_ (data: the command's buffers).
  CommandResult Run(LogicalUnit& lu, const Bytes& cdb, std::span<const iovec> data);

  Route route_ = Route::kBlocking;
  std::unique_ptr<CommandPipeline> pipeline_;  // for Route::kPipeline, made on first use

  store::FaultInjectionEnv env_;
  std::unique_ptr<store::Pool> pool_;
  LunDirectory directory_;
  std::shared_ptr<LogicalUnit> lu_;
  std::vector<std::shared_ptr<LogicalUnit>> extra_;
};

}  // namespace cowstore::scsi::testing
