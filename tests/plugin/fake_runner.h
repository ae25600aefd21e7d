// SPDX-License-Identifier: Apache-2.0
// A fake tcmu-runner for testing handler_cowstore.so without a kernel.
//
// The test executable exports (ENABLE_EXPORTS) what the real daemon gives a
// handler: the runner's own symbols (tcmur_register_handler,
// tcmur_cmd_complete, tcmur_dev_set/get_private, tcmur_dev_update_size,
// tcmu_notify_*) and the libtcmu functions the plugin calls (device getters,
// tcmu_cfgfs_dev_get_wwn, tcmu_*_message logging). It dlopen()s the built
// plugin with RTLD_NOW|RTLD_LOCAL and calls handler_init exactly as
// tcmu-runner 1.5.4's main.c does, then drives the registered handler the
// way the runner drives a handle_cmd-only handler: with nr_threads > 0,
// handle_cmd on a worker thread and the returned TCMU_STS turned into SAM
// status and sense the way libtcmu's tcmulib_command_complete does; with
// nr_threads == 0 (the plugin's asynchronous mode), handle_cmd must return
// TCMU_STS_ASYNC_HANDLED and the command's outcome is what the plugin later
// passes to tcmulib_command_complete, which frees the command as libtcmu's
// does (so ASan sees any use after completion).
//
// The real libtcmu.so.2 is not used: its device getters work on its private
// struct tcmu_device, which only the kernel netlink path fills in.
#pragma once

#include <sys/uio.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "handler/plugin/tcmu.h"

namespace tcmu = ::cowstore::plugin::tcmu;

// The fake's device: what libtcmu's opaque struct tcmu_device holds for the
// calls the plugin makes.
struct tcmu_device {
  std::string cfgstring;
  uint32_t block_size = 512;
  uint64_t num_lbas = 0;
  uint32_t max_xfer_len = 128;       // hw_max_sectors (kernel default)
  std::optional<std::string> wwn;    // vpd_unit_serial; nullopt: not readable
  void* tcmur_private = nullptr;     // tcmur_dev_set/get_private
  std::atomic<int> size_updates{0};  // tcmur_dev_update_size calls
  std::atomic<int> completing{0};    // tcmulib_command_complete calls running for it
};

namespace fake {

// One log line the plugin wrote through tcmu_*_message.
struct LogLine {
  int level;  // TCMU_LOG_*
  const tcmu_device* dev;
  std::string text;
};

// What the initiator would see.
struct Outcome {
  int tcmu_status = 0;  // what handle_cmd returned, or in asynchronous mode what it completed with
  uint8_t scsi_status = 0;
  std::array<uint8_t, tcmu::kSenseBufferSize> sense{};
  uint8_t sense_key() const { return sense[2] & 0x0f; }
  uint8_t asc() const { return sense[12]; }
  uint8_t ascq() const { return sense[13]; }
};

// A command handed to the handler and not yet seen completed.
struct InFlight {
  std::vector<uint8_t> ring_cdb;  // what cmd->cdb points into
  tcmu::LibCmd* cmd = nullptr;    // malloc()ed with its RunnerCmd; freed at completion
  int returned = 0;               // handle_cmd's return value
  bool done = false;              // guarded by the runner's completion mutex
  Outcome outcome;
};

class Runner {
 public:
  static Runner& Get();

  // dlopen(RTLD_NOW|RTLD_LOCAL) + dlsym("handler_init") + handler_init().
  // Idempotent per process. False with *error set on any failure.
  bool Load(const std::string& path, std::string* error);
  // Calls handler_init again (e.g. after changing the environment).
  int InitAgain();
  tcmu::Handler* handler() const { return handler_; }
  int registrations() const { return registrations_; }

  // tcmu-runner's dev_added/dev_removed around the handler's open/close.
  int Open(tcmu_device* dev);
  void Close(tcmu_device* dev);

  // Runs one command as the runner's worker thread does: handle_cmd, then
  // libtcmu's status translation. `data` is the command's data buffer
  // (data-out or data-in); may be empty.
  Outcome Execute(tcmu_device* dev, const std::vector<uint8_t>& cdb, std::vector<uint8_t>* data);
  Outcome ExecuteIov(tcmu_device* dev, const std::vector<uint8_t>& cdb, iovec* iov, size_t iov_cnt);
  // The same in two halves, so that several commands can be in flight from
  // one thread: Start hands the command to handle_cmd, Finish waits for its
  // completion (at most 120 s: scsi_status 0xFE if it never came).
  // `tweak`, if given, may change the command before handle_cmd sees it.
  std::shared_ptr<InFlight> Start(tcmu_device* dev, const std::vector<uint8_t>& cdb, iovec* iov,
                                  size_t iov_cnt,
                                  const std::function<void(tcmu::LibCmd*)>& tweak = nullptr);
  Outcome Finish(const std::shared_ptr<InFlight>& c);
  // Whether `c` has completed (without waiting).
  bool Completed(const std::shared_ptr<InFlight>& c);

  std::vector<LogLine> logs() const;
  void ClearLogs();
  bool LogContains(const std::string& needle) const;

  // Calls the runner made that a handle_cmd-only, synchronous handler never
  // causes (tests assert they stay zero).
  std::atomic<int> async_completions{0};  // tcmur_cmd_complete
  std::atomic<int> notifications{0};      // tcmu_notify_*
  // libtcmu's completion calls (asynchronous mode).
  std::atomic<int> lib_completions{0};       // tcmulib_command_complete
  std::atomic<int> bad_completions{0};       // ... of a command not in flight (twice, or never given)
  std::atomic<int> overlapping_completions{0};  // ... while another was running for the same device
  std::atomic<int> processing_completes{0};  // tcmulib_processing_complete
  // Internal: tcmulib_command_complete.
  void LibComplete(tcmu_device* dev, tcmu::LibCmd* cmd, int result);

  // Internal (the exported C functions).
  void Register(tcmu::Handler* h);
  void AddLog(int level, const tcmu_device* dev, std::string text);

 private:
  void* dl_ = nullptr;
  int (*init_)(void) = nullptr;
  tcmu::Handler* handler_ = nullptr;
  int registrations_ = 0;
  mutable std::mutex log_mu_;
  std::vector<LogLine> logs_;
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::map<tcmu::LibCmd*, std::shared_ptr<InFlight>> in_flight_;  // guarded by done_mu_
};

// Path of the plugin under test (compile definition from CMake).
std::string PluginPath();

}  // namespace fake
