// SPDX-License-Identifier: Apache-2.0
#include "tests/plugin/fake_runner.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace fake {

Runner& Runner::Get() {
  static Runner runner;
  return runner;
}

std::string PluginPath() {
  const char* env = std::getenv("COWSTORE_TEST_PLUGIN");
  return env && *env ? env : COWSTORE_PLUGIN_PATH;
}

bool Runner::Load(const std::string& path, std::string* error) {
  if (handler_) return true;
  if (!dl_) {
    // Exactly tcmu-runner's load_our_module().
    dl_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!dl_) {
      *error = std::string("dlopen: ") + dlerror();
      return false;
    }
    dlerror();
    init_ = reinterpret_cast<int (*)(void)>(dlsym(dl_, "handler_init"));
    if (const char* e = dlerror()) {
      *error = std::string("dlsym(handler_init): ") + e;
      return false;
    }
  }
  const int rc = init_();
  if (rc != 0) {
    *error = "handler_init returned " + std::to_string(rc);
    return false;
  }
  if (!handler_) {
    *error = "handler_init did not call tcmur_register_handler";
    return false;
  }
  return true;
}

int Runner::InitAgain() { return init_ ? init_() : -1; }

void Runner::Register(tcmu::Handler* h) {
  handler_ = h;
  ++registrations_;
}

int Runner::Open(tcmu_device* dev) { return handler_->open(dev, false); }

void Runner::Close(tcmu_device* dev) { handler_->close(dev); }

Outcome Runner::Execute(tcmu_device* dev, const std::vector<uint8_t>& cdb,
                        std::vector<uint8_t>* data) {
  iovec iov{};
  size_t cnt = 0;
  if (data && !data->empty()) {
    iov = {data->data(), data->size()};
    cnt = 1;
  }
  return ExecuteIov(dev, cdb, cnt ? &iov : nullptr, cnt);
}

Outcome Runner::ExecuteIov(tcmu_device* dev, const std::vector<uint8_t>& cdb, iovec* iov,
                           size_t iov_cnt) {
  return Finish(Start(dev, cdb, iov, iov_cnt));
}

namespace {

// libtcmu's tcmu_sts_to_scsi() for the codes a handler may return.
Outcome Translate(int sts, const uint8_t* sense_buf) {
  Outcome out;
  out.tcmu_status = sts;
  switch (sts) {
    case tcmu::kStsOk:
      out.scsi_status = 0x00;
      return out;
    case tcmu::kStsNoResource:
      out.scsi_status = 0x28;
      return out;
    case tcmu::kStsBusy:
    case tcmu::kStsTimeout:
      out.scsi_status = 0x08;
      return out;
    case tcmu::kStsPassthroughErr:
      std::memcpy(out.sense.data(), sense_buf, out.sense.size());
      break;
    case tcmu::kStsHwErr:
      out.sense[0] = 0x70;
      out.sense[2] = 0x04;
      out.sense[7] = 0x0a;
      out.sense[12] = 0x44;
      break;
    default:
      // ASYNC_HANDLED and friends: not acceptable as a final status.
      out.scsi_status = 0xFF;
      return out;
  }
  out.scsi_status = 0x02;
  return out;
}

}  // namespace

std::shared_ptr<InFlight> Runner::Start(tcmu_device* dev, const std::vector<uint8_t>& cdb, iovec* iov,
                                        size_t iov_cnt, const std::function<void(tcmu::LibCmd*)>& tweak) {
  // libtcmu hands out one malloc()ed block: the tcmulib_cmd, then the
  // runner's tcmur_cmd (hm_private); its CDB points into the ring; the
  // sense buffer is not cleared. tcmulib_command_complete frees the block.
  auto c = std::make_shared<InFlight>();
  c->ring_cdb = cdb;
  c->ring_cdb.resize(std::max<size_t>(cdb.size(), 16) + 256, 0xEE);
  void* block = std::malloc(sizeof(tcmu::LibCmd) + sizeof(tcmu::RunnerCmd));
  if (!block) std::abort();
  auto* cmd = new (block) tcmu::LibCmd{};
  auto* rcmd = new (static_cast<char*>(block) + sizeof(tcmu::LibCmd)) tcmu::RunnerCmd{};
  cmd->cmd_id = 1;
  cmd->cdb = c->ring_cdb.data();
  cmd->iovec = iov;
  cmd->iov_cnt = iov_cnt;
  std::memset(cmd->sense_buf, 0xCC, sizeof cmd->sense_buf);
  rcmd->lib_cmd = cmd;
  cmd->hm_private = rcmd;
  c->cmd = cmd;
  if (tweak) tweak(cmd);
  const bool async = handler_->nr_threads == 0;
  if (async) {
    std::lock_guard<std::mutex> g(done_mu_);
    in_flight_[cmd] = c;
  }
  c->returned = handler_->handle_cmd(dev, rcmd);
  if (!async) {
    // The runner's worker completes the command with what handle_cmd returned.
    c->outcome = Translate(c->returned, cmd->sense_buf);
    c->done = true;
    std::free(block);
    c->cmd = nullptr;
  } else if (c->returned != tcmu::kStsAsyncHandled) {
    // tcmu-runner would complete it now, racing the handler's own completion.
    std::lock_guard<std::mutex> g(done_mu_);
    c->outcome.tcmu_status = c->returned;
    c->outcome.scsi_status = 0xFF;
    c->done = true;
  }
  return c;
}

bool Runner::Completed(const std::shared_ptr<InFlight>& c) {
  std::lock_guard<std::mutex> g(done_mu_);
  return c->done;
}

Outcome Runner::Finish(const std::shared_ptr<InFlight>& c) {
  std::unique_lock<std::mutex> lk(done_mu_);
  if (!done_cv_.wait_for(lk, std::chrono::seconds(120), [&] { return c->done; })) {
    Outcome never;
    never.tcmu_status = c->returned;
    never.scsi_status = 0xFE;
    return never;
  }
  return c->outcome;
}

void Runner::LibComplete(tcmu_device* dev, tcmu::LibCmd* cmd, int result) {
  ++lib_completions;
  if (dev->completing.fetch_add(1) != 0) ++overlapping_completions;
  std::shared_ptr<InFlight> c;
  {
    std::lock_guard<std::mutex> g(done_mu_);
    auto it = in_flight_.find(cmd);
    if (it == in_flight_.end()) {
      ++bad_completions;
      dev->completing.fetch_sub(1);
      return;  // not ours to free: freeing it again would be the double free libtcmu does
    }
    c = it->second;
    in_flight_.erase(it);
  }
  Outcome out = Translate(result, cmd->sense_buf);
  std::free(cmd);  // as libtcmu: the handler must not touch it any more
  dev->completing.fetch_sub(1);
  {
    std::lock_guard<std::mutex> g(done_mu_);
    c->cmd = nullptr;
    c->outcome = out;
    c->done = true;
  }
  done_cv_.notify_all();
}

void Runner::AddLog(int level, const tcmu_device* dev, std::string text) {
  if (std::getenv("COWSTORE_TEST_VERBOSE")) std::fprintf(stderr, "[log %d] %s", level, text.c_str());
  std::lock_guard<std::mutex> lock(log_mu_);
  logs_.push_back({level, dev, std::move(text)});
}

std::vector<LogLine> Runner::logs() const {
  std::lock_guard<std::mutex> lock(log_mu_);
  return logs_;
}

void Runner::ClearLogs() {
  std::lock_guard<std::mutex> lock(log_mu_);
  logs_.clear();
}

bool Runner::LogContains(const std::string& needle) const {
  std::lock_guard<std::mutex> lock(log_mu_);
  for (const LogLine& l : logs_) {
    if (l.text.find(needle) != std::string::npos) return true;
  }
  return false;
}

}  // namespace fake

// ---- The symbols the daemon exports to handlers (tcmu-runner + libtcmu) ----

namespace {
void VLog(int level, tcmu_device* dev, const char* fmt, va_list ap) {
  char buf[4096];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  fake::Runner::Get().AddLog(level, dev, buf);
}
}  // namespace

#define FAKE_LOG_FN(name, level)                                                     \
  extern "C" void name(struct tcmu_device* dev, const char*, int, const char* fmt, ...) { \
    va_list ap;                                                                      \
    va_start(ap, fmt);                                                               \
    VLog(level, dev, fmt, ap);                                                       \
    va_end(ap);                                                                      \
  }
FAKE_LOG_FN(tcmu_crit_message, tcmu::kLogCrit)
FAKE_LOG_FN(tcmu_err_message, tcmu::kLogError)
FAKE_LOG_FN(tcmu_warn_message, tcmu::kLogWarn)
FAKE_LOG_FN(tcmu_info_message, tcmu::kLogInfo)
FAKE_LOG_FN(tcmu_dbg_message, tcmu::kLogDebug)
FAKE_LOG_FN(tcmu_dbg_scsi_cmd_message, tcmu::kLogDebugScsiCmd)

extern "C" {

unsigned int tcmu_get_log_level(void) { return tcmu::kLogDebug; }

int tcmur_register_handler(tcmu::Handler* handler) {
  fake::Runner::Get().Register(handler);
  return 0;
}

void tcmur_cmd_complete(struct tcmu_device*, void*, int) { ++fake::Runner::Get().async_completions; }

void tcmulib_command_complete(struct tcmu_device* dev, tcmu::LibCmd* cmd, int result) {
  fake::Runner::Get().LibComplete(dev, cmd, result);
}
void tcmulib_processing_complete(struct tcmu_device*) { ++fake::Runner::Get().processing_completes; }

void tcmur_dev_set_private(struct tcmu_device* dev, void* priv) { dev->tcmur_private = priv; }
void* tcmur_dev_get_private(struct tcmu_device* dev) { return dev->tcmur_private; }

int tcmur_dev_update_size(struct tcmu_device* dev, uint64_t new_size) {
  if (!new_size) return -22;
  dev->num_lbas = new_size / dev->block_size;
  ++dev->size_updates;
  return 0;
}

void tcmu_notify_lock_lost(struct tcmu_device*) { ++fake::Runner::Get().notifications; }
void tcmu_notify_conn_lost(struct tcmu_device*) { ++fake::Runner::Get().notifications; }

char* tcmu_dev_get_cfgstring(struct tcmu_device* dev) { return dev->cfgstring.data(); }
uint32_t tcmu_dev_get_block_size(struct tcmu_device* dev) { return dev->block_size; }
uint64_t tcmu_dev_get_num_lbas(struct tcmu_device* dev) { return dev->num_lbas; }
uint32_t tcmu_dev_get_max_xfer_len(struct tcmu_device* dev) { return dev->max_xfer_len; }

char* tcmu_cfgfs_dev_get_wwn(struct tcmu_device* dev) {
  return dev->wwn ? strdup(dev->wwn->c_str()) : nullptr;
}

}  // extern "C"
