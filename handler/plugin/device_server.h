// SPDX-License-Identifier: Apache-2.0
// One tcmu device being served: its Device, and how its commands are
// answered (docs/design/plugin.md, "Completing commands").
//
// Asynchronous (the default; tcmu-runner's nr_threads = 0): handle_cmd runs
// on the device's one command thread and must not block it, so it only
// queues the command in a scsi::CommandPipeline and returns
// TCMU_STS_ASYNC_HANDLED. The pipeline's workers execute it, its committer
// makes many commands durable with one commit, and every command is then
// completed here with libtcmu's tcmulib_command_complete. In this mode the
// runner completes nothing itself (tcmur_cmd_passthrough_handler, the same
// in 1.5.2 to main), so:
//   - every command is answered here, exactly once, and after its answer
//     nothing touches it (libtcmu frees it);
//   - handle_cmd never returns anything but ASYNC_HANDLED (the runner would
//     complete that one itself, unserialised against ours);
//   - completions of one device never overlap (they move the ring's tail):
//     one lock;
//   - the destructor (the runner's close(), called while the ring is still
//     mapped) completes every queued command before the Device closes;
//   - the runner's per-device `tcmur_cmd_time_out` option, which links each
//     command into a list inside the memory libtcmu frees on completion,
//     is refused at check_config (handler.cc).
//
// Synchronous (COWSTORE_COMPLETION=sync): the runner's nr_threads workers
// call handle_cmd, which executes the command to completion and returns its
// status for the worker to complete (each worker sleeps through its
// command's commit).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>

#include "handler/plugin/device.h"
#include "handler/plugin/tcmu_abi.h"
#include "handler/scsi/command_pipeline.h"

namespace cowstore::plugin {

class DeviceServer {
 public:
  // workers > 0: asynchronous, with that many pipeline workers; 0: synchronous.
  // Throws (std::system_error, std::bad_alloc) if the threads cannot start.
  DeviceServer(tcmu_device* dev, std::unique_ptr<Device> device, int workers);
  // Asynchronous: every command submitted is completed first.
  ~DeviceServer();
  DeviceServer(const DeviceServer&) = delete;
  DeviceServer& operator=(const DeviceServer&) = delete;

  Device& device() { return *device_; }
  bool asynchronous() const { return pipeline_ != nullptr; }

  // Synchronous mode: executes the command and returns its TCMU_STS_*
  // (sense in cmd->sense_buf).
  int Run(tcmu::LibCmd* cmd);
  // Asynchronous mode: queues the command; it is completed later, from
  // another thread (or at once, TASK SET FULL, if it cannot be queued).
  void Submit(tcmu::LibCmd* cmd) noexcept;

  // The command's result: its CDB and buffers checked, then Device::Execute.
  scsi::CommandResult Execute(tcmu::LibCmd* cmd, scsi::DeferredCommit* deferred);

 private:
  void Complete(std::span<const scsi::CommandPipeline::Finished> done) noexcept;

  tcmu_device* const dev_;
  const std::unique_ptr<Device> device_;
  std::mutex complete_mu_;  // one device's completions never overlap
  // Last: destroyed first, so every command completes before device_ goes.
  std::unique_ptr<scsi::CommandPipeline> pipeline_;
};

}  // namespace cowstore::plugin
