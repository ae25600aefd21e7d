// SPDX-License-Identifier: Apache-2.0
// handler_cowstore.so's entry points: the tcmu::Handler the daemon calls.
//
// Mode (docs/design/plugin.md): handle_cmd only (no read/write/flush
// callouts, so the runner emulates nothing). Two ways to answer commands
// (device_server.h), chosen once per daemon by COWSTORE_COMPLETION:
//   - async (default): nr_threads = 0, so the runner calls handle_cmd on the
//     device's command thread; handle_cmd queues the command and returns
//     TCMU_STS_ASYNC_HANDLED, and DeviceServer completes it through libtcmu
//     once it is executed and durable (many commands share one commit);
//   - sync: nr_threads workers per device call handle_cmd, which executes
//     the command to completion and returns its status; the runner
//     completes it. TCMU_STS_ASYNC_HANDLED is not an option there: the
//     worker completes the command with whatever handle_cmd returned.
//
// Every entry point: no exception escapes (catch-all; abi::__forced_unwind
// is re-thrown, as unwinding must finish), and thread cancellation is
// disabled while it runs, because the runner pthread_cancel()s its worker
// threads on device removal and a cancel inside a store commit must not
// happen. A cancel that arrives meanwhile takes effect after we return.
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "handler/common/cfgstring.h"
#include "handler/plugin/device.h"
#include "handler/plugin/device_server.h"
#include "handler/plugin/log.h"
#include "handler/plugin/tcmu.h"
#include "handler/plugin/tcmu_status.h"
#include "handler/store/env.h"

namespace cowstore::plugin {
namespace {

// Synchronous: ESXi keeps up to 32 EXTENDED COPYs in flight per device, and
// a synchronous handle_cmd holds its worker through the commit's fdatasync,
// so this is the largest group commit one LUN can form (docs/design/plugin.md,
// "How many worker threads"; measured with bench/e2e/side-by-side.sh --only qd).
constexpr int kDefaultThreadsPerLun = 32;
// Asynchronous: no worker waits for a commit, so a few keep the CPUs busy;
// more only let reads that miss the page cache wait on the disk side by side.
// Clones, unmaps and zeroings have a worker of their own besides (the
// pipeline's serial lane, command_pipeline.h).
constexpr int kDefaultAsyncWorkersPerLun = 8;
constexpr const char* kThreadsEnv = "COWSTORE_THREADS_PER_LUN";
constexpr const char* kCompletionEnv = "COWSTORE_COMPLETION";

// Set by handler_init, before any device opens: pipeline workers per device
// in asynchronous mode, 0 in synchronous mode.
int g_async_workers = kDefaultAsyncWorkersPerLun;

class NoCancel {
 public:
  NoCancel() { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_); }
  ~NoCancel() { pthread_setcancelstate(old_, nullptr); }
  NoCancel(const NoCancel&) = delete;
  NoCancel& operator=(const NoCancel&) = delete;

 private:
  int old_ = PTHREAD_CANCEL_ENABLE;
};

// malloc()ed copy for the runner to free().
char* CString(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p) std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// configfs wwn/vpd_unit_serial; "" when unset or unreadable.
std::string UnitSerial(tcmu_device* dev) {
  std::string serial;
  if (char* wwn = tcmu_cfgfs_dev_get_wwn(dev)) {
    serial = wwn;
    std::free(wwn);
  }
  return serial;
}

DeviceServer* ServerOf(tcmu_device* dev) { return static_cast<DeviceServer*>(tcmur_dev_get_private(dev)); }

bool CheckConfig(const char* cfgstring, char** reason) {
  NoCancel no_cancel;
  try {
    common::LunSpec spec;
    std::string why;
    if (!cfgstring) {
      why = "no cfgstring given";
    } else if (g_async_workers > 0 && common::AsksRunnerCommandTimeout(cfgstring)) {
      // The runner would link every command into a list inside the memory
      // libtcmu frees when we complete it (device_server.h).
      why = "tcmur_cmd_time_out is not supported while cowstore completes commands asynchronously "
            "(the default): remove the option, or start tcmu-runner with COWSTORE_COMPLETION=sync";
    } else if (common::ParseCfgstring(cfgstring, &spec, &why)) {
      // Catch the commonest mistake now rather than at open: a pool that is
      // not there. (Whether it opens is up to open: it may be in use.)
      const std::string path = common::PoolPath(spec);
      if (!store::DefaultEnv()->Exists(path)) {
        why = "pool '" + spec.pool + "' does not exist: no file " + path +
              " (create the pool first; tcmu-runner's COWSTORE_POOL_DIR sets the directory)";
      } else {
        return true;
      }
    }
    if (reason) *reason = CString(why);
    return false;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    if (reason) *reason = CString("internal error while checking the cfgstring");
    return false;
  }
}

int Open(tcmu_device* dev, bool reopen) {
  NoCancel no_cancel;
  try {
    DeviceParams p;
    const char* cfg = tcmu_dev_get_cfgstring(dev);
    p.cfgstring = cfg ? cfg : "";
    p.block_size = tcmu_dev_get_block_size(dev);
    p.num_lbas = tcmu_dev_get_num_lbas(dev);
    p.max_xfer_blocks = tcmu_dev_get_max_xfer_len(dev);
    p.unit_serial = UnitSerial(dev);
    p.read_unit_serial = [dev] { return UnitSerial(dev); };
    std::string reason;
    int err = -EIO;
    std::unique_ptr<Device> device = Device::Open(p, &reason, &err);
    if (!device) {
      COWSTORE_LOG_ERROR(dev, "open failed: " + reason);
      return err ? err : -EIO;
    }
    const std::string opened = std::string(reopen ? "reopened " : "opened ") + common::FormatCfgstring(device->spec()) +
                               " (pool " + device->pool_path() + ", " + std::to_string(p.num_lbas) +
                               " blocks of " + std::to_string(p.block_size) + " bytes, unit serial " +
                               (p.unit_serial.empty() ? "not set yet" : p.unit_serial) + ", " +
                               (g_async_workers > 0
                                    ? "commands completed asynchronously by " + std::to_string(g_async_workers) +
                                          " workers and one for clones, unmaps and zeroings"
                                    : std::string("commands completed by the runner's workers")) +
                               ")";
    std::unique_ptr<DeviceServer> server;
    try {
      server = std::make_unique<DeviceServer>(dev, std::move(device), g_async_workers);
    } catch (const std::system_error& e) {
      // Threads are tasks: a systemd TasksMax or kernel.threads-max reached.
      COWSTORE_LOG_ERROR(dev, std::string("open failed: cannot start the LUN's worker threads (") + e.what() +
                                  "); raise TasksMax of tcmu-runner.service or lower COWSTORE_THREADS_PER_LUN");
      return -EAGAIN;
    }
    COWSTORE_LOG_INFO(dev, opened);
    tcmur_dev_set_private(dev, server.release());
    return 0;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (const std::bad_alloc&) {
    COWSTORE_LOG_ERROR(dev, "open failed: out of memory");
    return -ENOMEM;
  } catch (...) {
    COWSTORE_LOG_ERROR(dev, "open failed: internal error");
    return -EIO;
  }
}

void Close(tcmu_device* dev) {
  NoCancel no_cancel;
  try {
    std::unique_ptr<DeviceServer> server(ServerOf(dev));
    tcmur_dev_set_private(dev, nullptr);
    if (server) COWSTORE_LOG_INFO(dev, "closing " + common::FormatCfgstring(server->device().spec()));
    server.reset();  // completes every command still queued, then closes the LUN
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    COWSTORE_LOG_ERROR(dev, "close: internal error");
  }
}

int Reconfig(tcmu_device* dev, tcmu::CfgInfo* cfg) {
  NoCancel no_cancel;
  try {
    DeviceServer* server = ServerOf(dev);
    if (!server || !cfg) return -EINVAL;
    Device* device = &server->device();
    switch (cfg->type) {
      case tcmu::kCfgDevSize: {
        std::string reason;
        int err = 0;
        if (!device->Resize(cfg->data.dev_size, &reason, &err)) {
          COWSTORE_LOG_ERROR(dev, common::FormatCfgstring(device->spec()) + ": " + reason);
          return err ? err : -EIO;
        }
        COWSTORE_LOG_INFO(dev, common::FormatCfgstring(device->spec()) + ": resized to " +
                                   std::to_string(cfg->data.dev_size) + " bytes");
        return 0;
      }
      case tcmu::kCfgWriteCache:
        device->SetWriteCache(cfg->data.write_cache);
        COWSTORE_LOG_INFO(dev, common::FormatCfgstring(device->spec()) + ": write cache " +
                                   (cfg->data.write_cache ? "enabled" : "disabled"));
        return 0;
      case tcmu::kCfgDevCfgstring: {
        const char* s = cfg->data.dev_cfgstring;
        if (s && device->cfgstring() == s) return 0;
        COWSTORE_LOG_ERROR(dev, common::FormatCfgstring(device->spec()) + ": changing the cfgstring of an open "
                                "LUN (to '" + std::string(s ? s : "") + "') is not supported; "
                                "delete the backstore and create it with the new cfgstring");
        return -EOPNOTSUPP;
      }
    }
    return -EOPNOTSUPP;
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    COWSTORE_LOG_ERROR(dev, "reconfig: internal error");
    return -EIO;
  }
}

int HandleCmd(tcmu_device* dev, tcmu::RunnerCmd* rcmd) {
  NoCancel no_cancel;
  tcmu::LibCmd* cmd = rcmd ? rcmd->lib_cmd : nullptr;
  if (!cmd) return tcmu::kStsHwErr;  // nothing to put sense into (the runner never does this)
  DeviceServer* server = ServerOf(dev);
  if (server ? server->asynchronous() : g_async_workers > 0) {
    // Never anything but ASYNC_HANDLED here: the runner would complete any
    // other value itself, racing our completions (device_server.h).
    if (server) {
      server->Submit(cmd);  // noexcept; answers the command itself if it cannot queue it
    } else {
      // No device (never after a successful open): no completion of ours
      // can race this one.
      SetInternalFailure(cmd->sense_buf);
      tcmulib_command_complete(dev, cmd, tcmu::kStsPassthroughErr);
      tcmulib_processing_complete(dev);
    }
    return tcmu::kStsAsyncHandled;
  }
  try {
    if (!server) {
      COWSTORE_LOG_ERROR(dev, "command without device");
      SetInternalFailure(cmd->sense_buf);
      return tcmu::kStsPassthroughErr;
    }
    return server->Run(cmd);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    SetInternalFailure(cmd->sense_buf);
    return tcmu::kStsPassthroughErr;
  }
}

int ThreadsPerLun(int fallback) {
  const char* env = std::getenv(kThreadsEnv);
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 256) {
    COWSTORE_LOG_WARN(nullptr, std::string(kThreadsEnv) + "='" + env +
                                   "' is not a number from 1 to 256; using " + std::to_string(fallback));
    return fallback;
  }
  return static_cast<int>(n);
}

// COWSTORE_COMPLETION: "async" (or unset) or "sync".
bool AsynchronousCompletion() {
  const char* env = std::getenv(kCompletionEnv);
  if (!env || !*env || std::strcmp(env, "async") == 0) return true;
  if (std::strcmp(env, "sync") == 0) return false;
  COWSTORE_LOG_WARN(nullptr, std::string(kCompletionEnv) + "='" + env +
                                 "' is neither 'async' nor 'sync'; using async");
  return true;
}

constexpr const char kCfgDesc[] =
    "cowstore/<pool>/<lun>[;copy_group=<name>][;wce=0|1]. <pool> is a pool file in "
    "/var/lib/cowstore/pools (or $COWSTORE_POOL_DIR of tcmu-runner), <lun> a LUN in it, "
    "created with the backstore's size if missing. Names: 1-64 of A-Z a-z 0-9 _ . - . "
    "copy_group: EXTENDED COPY between LUNs of the same group. wce: write cache (default 0). "
    "':' and ',' may replace the first ';' and the others.";

tcmu::Handler g_handler = [] {
  tcmu::Handler h{};
  h.name = "cowstore: copy-on-write extent store with VAAI offloads";
  h.subtype = "cowstore";
  h.cfg_desc = kCfgDesc;
  h.check_config = CheckConfig;
  h.reconfig = Reconfig;
  h.open = Open;
  h.close = Close;
  h.nr_threads = 0;  // asynchronous completion; handler_init decides
  h.handle_cmd = HandleCmd;
  // read/write/flush and the other callouts stay null: handle_cmd-only mode.
  return h;
}();

}  // namespace
}  // namespace cowstore::plugin

extern "C" int handler_init(void) {
  using namespace cowstore::plugin;
  NoCancel no_cancel;
  try {
    if (AsynchronousCompletion()) {
      g_async_workers = ThreadsPerLun(kDefaultAsyncWorkersPerLun);
      g_handler.nr_threads = 0;
    } else {
      g_async_workers = 0;
      g_handler.nr_threads = ThreadsPerLun(kDefaultThreadsPerLun);
    }
    return tcmur_register_handler(&g_handler);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    return -1;
  }
}
