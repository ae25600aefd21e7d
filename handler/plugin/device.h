// SPDX-License-Identifier: Apache-2.0
// One open cowstore LUN behind one tcmu device: what open() builds, what
// handle_cmd() runs commands against and what close() tears down.
//
// This file knows the store and the SCSI layer, not tcmu-runner: handler.cc
// reads the device's attributes through libtcmu and passes them in.
//
// Lifetime: the LogicalUnit holds its store::Lun through a shared_ptr that
// also keeps a reference to the pool (PoolRegistry), so a LUN that another
// LUN's EXTENDED COPY still uses stays usable after its own close() and the
// pool is closed only when nothing uses any of its LUNs.
//
// Identity: the unit serial (configfs wwn/vpd_unit_serial) is what VPD 0x80
// and 0x83 report and what EXTENDED COPY CSCDs name. rtslib (targetcli) and
// cowctl write it only after enabling the backstore, i.e. after open(); the
// kernel refuses changes once the backstore is exported, and commands only
// arrive once it is. So open() uses the serial configfs shows then (or, if
// none, one derived from the store LUN's UUID) and the first command reads
// it again: if it changed, the LogicalUnit is rebuilt with the final one
// before any command runs.
//
// Thread safety: Execute(), Resize() and SetWriteCache() may run
// concurrently from any threads; Open() and the destructor are called once
// each by the runner.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "handler/common/cfgstring.h"
#include "handler/scsi/command_result.h"
#include "handler/scsi/deferred_commit.h"
#include "handler/scsi/logical_unit.h"

namespace cowstore::plugin {

// What open() learns from the runner about the device.
struct DeviceParams {
  std::string cfgstring;        // tcmu_dev_get_cfgstring
  uint32_t block_size = 0;      // tcmu_dev_get_block_size (hw_block_size)
  uint64_t num_lbas = 0;        // tcmu_dev_get_num_lbas (configfs dev_size)
  uint32_t max_xfer_blocks = 0; // tcmu_dev_get_max_xfer_len (hw_max_sectors)
  std::string unit_serial;      // tcmu_cfgfs_dev_get_wwn (vpd_unit_serial)
  // Reads the unit serial again (at the first command); "" if none.
  std::function<std::string()> read_unit_serial;
};

// Marks a LUN as served by a backstore of this daemon while held, so a
// second backstore naming the same pool and LUN is refused: two backstores
// over one LUN would show initiators two disks (two serials) with one data.
class LunClaim {
 public:
  LunClaim() = default;
  // False if another claim on `key` is held.
  bool Acquire(const std::string& key);
  ~LunClaim();
  LunClaim(LunClaim&& other) noexcept : key_(std::move(other.key_)) { other.key_.clear(); }
  LunClaim& operator=(LunClaim&&) = delete;
  LunClaim(const LunClaim&) = delete;

 private:
  std::string key_;  // empty: nothing held
};

class Device {
 public:
  // Parses the cfgstring, opens (or shares) the pool, creates the LUN with
  // the configfs size and block size if the pool has no LUN of that name,
  // grows it if configfs says it is bigger, opens it and wraps it in a
  // LogicalUnit. On failure returns null and sets *reason to a sentence
  // for the daemon's log and *err to a negative errno for the runner.
  static std::unique_ptr<Device> Open(const DeviceParams& params, std::string* reason, int* err);

  // Flushes buffered writes (wce=1) and drops this device's references.
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  scsi::CommandResult Execute(std::span<const uint8_t> cdb, std::span<const iovec> data) {
    return Execute(cdb, data, nullptr);
  }
  // The same with what must be durable before GOOD deferred to *deferred
  // (null: not deferred), for a caller that commits (scsi::CommandPipeline).
  scsi::CommandResult Execute(std::span<const uint8_t> cdb, std::span<const iovec> data,
                              scsi::DeferredCommit* deferred) {
    std::call_once(identity_confirmed_, [this] { ConfirmIdentity(); });
    return lu_->Execute(cdb, data, deferred);  // lu_ no longer changes (call_once orders it)
  }
  // What a GOOD command whose deferred commit failed with `status` answers.
  scsi::CommandResult CommitFailure(const store::Status& status) {
    return scsi::CommitFailure(*logical_unit(), status);
  }
  // reconfig: a new configfs dev_size. Queues CAPACITY DATA HAS CHANGED.
  bool Resize(uint64_t new_size_bytes, std::string* reason, int* err);
  // reconfig: the kernel's write cache attribute changed.
  void SetWriteCache(bool enabled);

  const common::LunSpec& spec() const { return spec_; }
  const std::string& pool_path() const { return pool_path_; }
  const std::string& cfgstring() const { return cfgstring_; }
  std::string unit_serial() const;

 private:
  Device(LunClaim claim, common::LunSpec spec, std::string pool_path, std::string cfgstring,
         std::shared_ptr<store::Lun> lun, uint32_t max_transfer_bytes,
         std::function<std::string()> read_unit_serial)
      : claim_(std::move(claim)),
        spec_(std::move(spec)),
        pool_path_(std::move(pool_path)),
        cfgstring_(std::move(cfgstring)),
        lun_(std::move(lun)),
        max_transfer_bytes_(max_transfer_bytes),
        read_unit_serial_(std::move(read_unit_serial)) {}

  // Builds lu_ for `serial` ("" : the fallback from the LUN's UUID).
  store::Status MakeLogicalUnit(const std::string& serial, bool wce);
  void ConfirmIdentity();
  std::shared_ptr<scsi::LogicalUnit> logical_unit() const;

  const LunClaim claim_;
  const common::LunSpec spec_;
  const std::string pool_path_;  // as resolved at open
  const std::string cfgstring_;
  const std::shared_ptr<store::Lun> lun_;  // keeps the pool referenced
  const uint32_t max_transfer_bytes_;
  const std::function<std::string()> read_unit_serial_;
  std::once_flag identity_confirmed_;
  std::mutex reconfig_mu_;  // serialises Resize, SetWriteCache, ConfirmIdentity
  mutable std::mutex mu_;   // guards lu_ and serial_
  std::shared_ptr<scsi::LogicalUnit> lu_;
  std::string serial_;
};

// Negative errno for a store error (open/reconfig return values).
int ErrnoFor(const store::Status& status);

// What the log says of a store kNotDurable answer beside its text (status.h:
// the change is made in memory, its commit refused for room), since ENOSPC
// alone reads as "nothing changed": why it is not durable and what the admin
// does. The caller says what the change was and what becomes of it.
std::string NotDurableAdvice();

}  // namespace cowstore::plugin
