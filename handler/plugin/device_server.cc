// SPDX-License-Identifier: Apache-2.0
#include "handler/plugin/device_server.h"

#include <cstdio>
#include <utility>

#include "handler/plugin/log.h"
#include "handler/plugin/tcmu.h"
#include "handler/plugin/tcmu_status.h"
#include "handler/scsi/opcodes.h"
#include "handler/scsi/sense.h"

namespace cowstore::plugin {

DeviceServer::DeviceServer(tcmu_device* dev, std::unique_ptr<Device> device, int workers)
    : dev_(dev), device_(std::move(device)) {
  if (workers <= 0) return;
  scsi::CommandPipeline::Callbacks cb;
  cb.execute = [this](void* tag, scsi::DeferredCommit* deferred) {
    return Execute(static_cast<tcmu::LibCmd*>(tag), deferred);
  };
  cb.complete = [this](std::span<const scsi::CommandPipeline::Finished> done) { Complete(done); };
  cb.commit_failure = [this](const store::Status& s) { return device_->CommitFailure(s); };
  cb.serial = [](void* tag) {
    const auto* cmd = static_cast<const tcmu::LibCmd*>(tag);
    return cmd->cdb != nullptr && scsi::IsPoolMetadataWork({cmd->cdb, CdbLength(cmd->cdb)});
  };
  pipeline_ = std::make_unique<scsi::CommandPipeline>(workers, std::move(cb));
}

DeviceServer::~DeviceServer() { pipeline_.reset(); }

scsi::CommandResult DeviceServer::Execute(tcmu::LibCmd* cmd, scsi::DeferredCommit* deferred) {
  if (!cmd->cdb || (cmd->iov_cnt > 0 && !cmd->iovec)) {
    COWSTORE_LOG_ERROR(dev_, "command without CDB or buffers");
    return scsi::CheckCondition(scsi::SenseKey::kHardwareError, scsi::asc::kInternalTargetFailure);
  }
  const std::span<const uint8_t> cdb(cmd->cdb, CdbLength(cmd->cdb));
  const std::span<const iovec> data(cmd->iovec, cmd->iov_cnt);
  scsi::CommandResult result = device_->Execute(cdb, data, deferred);
  if (!result.good() && tcmu_get_log_level() >= tcmu::kLogDebug) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "CDB 0x%02x: status 0x%02x sense %x/%02x/%02x", cdb[0],
                  static_cast<unsigned>(result.status), result.sense[2] & 0x0f, result.sense[12],
                  result.sense[13]);
    COWSTORE_LOG_DEBUG(dev_, buf);
  }
  return result;
}

int DeviceServer::Run(tcmu::LibCmd* cmd) { return ToTcmuStatus(Execute(cmd, nullptr), cmd); }

void DeviceServer::Submit(tcmu::LibCmd* cmd) noexcept {
  if (pipeline_ && pipeline_->Submit(cmd)) return;
  // Not queued (no memory, or closing): answered now, so the initiator
  // retries instead of waiting for an answer that would never come.
  scsi::CommandResult full;
  full.status = scsi::ScsiStatus::kTaskSetFull;
  const scsi::CommandPipeline::Finished f{cmd, full};
  Complete(std::span<const scsi::CommandPipeline::Finished>(&f, 1));
}

void DeviceServer::Complete(std::span<const scsi::CommandPipeline::Finished> done) noexcept {
  if (done.empty()) return;
  std::lock_guard<std::mutex> g(complete_mu_);
  for (const auto& f : done) {
    auto* cmd = static_cast<tcmu::LibCmd*>(f.tag);
    // ToTcmuStatus writes into cmd (sense, data-in tail) before libtcmu
    // copies it to the ring and frees cmd.
    tcmulib_command_complete(dev_, cmd, ToTcmuStatus(f.result, cmd));
  }
  tcmulib_processing_complete(dev_);
}

}  // namespace cowstore::plugin
