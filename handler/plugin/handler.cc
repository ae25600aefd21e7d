// SPDX-License-Identifier: Apache-2.0
// handler_cowstore.so's entry points: the tcmu::Handler the daemon calls.
//
// Mode (docs/design/plugin.md): handle_cmd only (no read/write/flush
// callouts, so the runner emulates nothing) with nr_threads worker threads
// per device. tcmu-runner 1.5.4 then runs handle_cmd on those threads, and
// handle_cmd executes the command to completion and returns its status; the
// runner completes it. Returning TCMU_STS_ASYNC_HANDLED is not an option in
// this mode: the worker completes the command with whatever handle_cmd
// returned, so a later tcmur_cmd_complete would complete it twice.
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

#include "handler/common/cfgstring.h"
#include "handler/plugin/device.h"
#include "handler/plugin/log.h"
#include "handler/plugin/tcmu.h"
#include "handler/store/env.h"

namespace cowstore::plugin {
namespace {

// ESXi keeps up to 32 EXTENDED COPYs in flight per device, and a synchronous
// handle_cmd holds its worker through the commit's fdatasync, so this is the
// largest group commit one LUN can form (docs/design/plugin.md, "How many
// worker threads"; measured with bench/e2e/side-by-side.sh --only qd).
constexpr int kDefaultThreadsPerLun = 32;
constexpr const char* kThreadsEnv = "COWSTORE_THREADS_PER_LUN";

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

// The CDB length the kernel copied into the ring (its scsi_command_size):
// by group code, variable-length CDBs by their ADDITIONAL CDB LENGTH.
size_t CdbLength(const uint8_t* cdb) {
  static constexpr uint8_t kByGroup[8] = {6, 10, 10, 12, 16, 12, 10, 10};
  if (cdb[0] == 0x7f) return size_t{8} + cdb[7];
  return kByGroup[cdb[0] >> 5];
}

// CHECK CONDITION / HARDWARE ERROR / INTERNAL TARGET FAILURE, fixed format.
void SetInternalFailure(uint8_t* sense) {
  std::memset(sense, 0, tcmu::kSenseBufferSize);
  sense[0] = 0x70;
  sense[2] = 0x04;
  sense[7] = 10;
  sense[12] = 0x44;
}

// Zeroes data-in bytes the command did not fill: tcmu-runner 1.5.4 cannot
// report a residual, so the kernel returns the whole buffer, and its pages
// may hold another command's data.
void ZeroTail(const iovec* iov, size_t cnt, size_t filled) {
  for (size_t i = 0; i < cnt; ++i) {
    const size_t len = iov[i].iov_len;
    if (filled >= len) {
      filled -= len;
      continue;
    }
    std::memset(static_cast<uint8_t*>(iov[i].iov_base) + filled, 0, len - filled);
    filled = 0;
  }
}

int ToTcmuStatus(const scsi::CommandResult& r, tcmu::LibCmd* cmd) {
  switch (r.status) {
    case scsi::ScsiStatus::kGood: {
      if (r.data_in_length > 0) ZeroTail(cmd->iovec, cmd->iov_cnt, r.data_in_length);
      return tcmu::kStsOk;
    }
    case scsi::ScsiStatus::kCheckCondition: {
      std::memset(cmd->sense_buf, 0, tcmu::kSenseBufferSize);
      const size_t n = std::min<size_t>(r.sense_length, tcmu::kSenseBufferSize);
      if (n == 0) {
        SetInternalFailure(cmd->sense_buf);
      } else {
        std::memcpy(cmd->sense_buf, r.sense.data(), n);
      }
      return tcmu::kStsPassthroughErr;  // "the handler has set up the sense"
    }
    case scsi::ScsiStatus::kTaskSetFull:
      return tcmu::kStsNoResource;  // libtcmu: TASK SET FULL
    case scsi::ScsiStatus::kBusy:
    case scsi::ScsiStatus::kReservationConflict:  // the kernel owns reservations
      return tcmu::kStsBusy;
  }
  SetInternalFailure(cmd->sense_buf);
  return tcmu::kStsPassthroughErr;
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

Device* DeviceOf(tcmu_device* dev) { return static_cast<Device*>(tcmur_dev_get_private(dev)); }

bool CheckConfig(const char* cfgstring, char** reason) {
  NoCancel no_cancel;
  try {
    common::LunSpec spec;
    std::string why;
    if (!cfgstring) {
      why = "no cfgstring given";
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
    COWSTORE_LOG_INFO(dev, std::string(reopen ? "reopened " : "opened ") + common::FormatCfgstring(device->spec()) +
                               " (pool " + device->pool_path() + ", " +
                               std::to_string(p.num_lbas) + " blocks of " +
                               std::to_string(p.block_size) + " bytes, unit serial " +
                               (p.unit_serial.empty() ? "not set yet" : p.unit_serial) + ")");
    tcmur_dev_set_private(dev, device.release());
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
    std::unique_ptr<Device> device(DeviceOf(dev));
    tcmur_dev_set_private(dev, nullptr);
    if (device) COWSTORE_LOG_INFO(dev, "closing " + common::FormatCfgstring(device->spec()));
    device.reset();
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    COWSTORE_LOG_ERROR(dev, "close: internal error");
  }
}

int Reconfig(tcmu_device* dev, tcmu::CfgInfo* cfg) {
  NoCancel no_cancel;
  try {
    Device* device = DeviceOf(dev);
    if (!device || !cfg) return -EINVAL;
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
  if (!cmd) return tcmu::kStsHwErr;  // nothing to put sense into
  try {
    Device* device = DeviceOf(dev);
    if (!device || !cmd->cdb || (cmd->iov_cnt > 0 && !cmd->iovec)) {
      COWSTORE_LOG_ERROR(dev, "command without device, CDB or buffers");
      SetInternalFailure(cmd->sense_buf);
      return tcmu::kStsPassthroughErr;
    }
    const std::span<const uint8_t> cdb(cmd->cdb, CdbLength(cmd->cdb));
    const std::span<const iovec> data(cmd->iovec, cmd->iov_cnt);
    const scsi::CommandResult result = device->Execute(cdb, data);
    if (!result.good() && tcmu_get_log_level() >= tcmu::kLogDebug) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "CDB 0x%02x: status 0x%02x sense %x/%02x/%02x", cdb[0],
                    static_cast<unsigned>(result.status), result.sense[2] & 0x0f,
                    result.sense[12], result.sense[13]);
      COWSTORE_LOG_DEBUG(dev, buf);
    }
    return ToTcmuStatus(result, cmd);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    SetInternalFailure(cmd->sense_buf);
    return tcmu::kStsPassthroughErr;
  }
}

int ThreadsPerLun() {
  const char* env = std::getenv(kThreadsEnv);
  if (!env || !*env) return kDefaultThreadsPerLun;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 256) {
    COWSTORE_LOG_WARN(nullptr, std::string(kThreadsEnv) + "='" + env +
                                   "' is not a number from 1 to 256; using " +
                                   std::to_string(kDefaultThreadsPerLun));
    return kDefaultThreadsPerLun;
  }
  return static_cast<int>(n);
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
  h.nr_threads = kDefaultThreadsPerLun;
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
    g_handler.nr_threads = ThreadsPerLun();
    return tcmur_register_handler(&g_handler);
  } catch (abi::__forced_unwind&) {
    throw;
  } catch (...) {
    return -1;
  }
}
