// SPDX-License-Identifier: Apache-2.0
// Our own declaration of the part of tcmu-runner's handler ABI that
// handler_cowstore.so uses, written from the documented layout
// (docs/design/plugin.md, "The ABI we rely on"). No tcmu-runner header is
// needed to build: no distribution ships usable ones, and upstream installs
// none.
//
// Why one binary serves every runner from 1.5.2 to upstream main:
//   - struct tcmur_handler is identical in every version from `name` to
//     `unmap` (offsets 0-111); only the fields after `unmap` moved (1.5.2:
//     sizeof 160, 1.5.3: 184, 1.5.4 on: 200). We fill name..handle_cmd and
//     leave the whole rest zero, over 200 bytes, so every runner reads
//     NULL/false in every slot after handle_cmd, whatever its layout;
//   - tcmulib_cmd, tcmur_cmd's lib_cmd and done, tcmulib_cfg_info, the
//     TCMU_STS_* values and the functions declared in tcmu.h are unchanged
//     from 1.5.2 to main.
// tests/plugin/abi_vs_tcmu_runner_1_5_4.cc pins every declaration here
// against the real 1.5.4 headers where Debian's source package can be had.
//
// Names are ours (namespace cowstore::plugin::tcmu); only the bytes and the
// exported C symbols (tcmu.h) have to match. x86_64 and other LP64 targets.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

// libtcmu's device: opaque to handlers (the fake runner in tests/plugin
// defines it for itself).
struct tcmu_device;

namespace cowstore::plugin::tcmu {

// The sense buffer the runner hands over with every command.
inline constexpr size_t kSenseBufferSize = 96;

// What a handler returns from handle_cmd (libtcmu turns it into SAM status
// and sense). Values are fixed since 1.5.2.
enum Status : int {
  kStsAsyncHandled = -2,
  kStsNotHandled = -1,
  kStsOk = 0,
  kStsNoResource = 1,     // TASK SET FULL
  kStsPassthroughErr = 2,  // CHECK CONDITION with the handler's sense_buf
  kStsBusy = 3,
  kStsWrErr = 4,
  kStsRdErr = 5,
  kStsMiscompare = 6,
  kStsInvalidCmd = 7,
  kStsInvalidCdb = 8,
  kStsInvalidParamList = 9,
  kStsInvalidParamListLen = 10,
  kStsTimeout = 11,
  kStsFenced = 12,
  kStsHwErr = 13,  // HARDWARE ERROR / INTERNAL TARGET FAILURE
};

// tcmu_get_log_level() and the tcmu_*_message levels: syslog's priorities,
// plus one above LOG_DEBUG for per-command traces.
inline constexpr unsigned kLogCrit = 2;
inline constexpr unsigned kLogError = 3;
inline constexpr unsigned kLogWarn = 4;
inline constexpr unsigned kLogInfo = 6;
inline constexpr unsigned kLogDebug = 7;
inline constexpr unsigned kLogDebugScsiCmd = 8;

// libtcmu's per-command record (struct tcmulib_cmd).
struct LibCmd {
  uint16_t cmd_id;
  uint8_t* cdb;  // points into the ring; its length follows from the opcode
  struct iovec* iovec;
  size_t iov_cnt;
  uint8_t sense_buf[kSenseBufferSize];
  void* hm_private;
};

// The runner's wrapper around it (struct tcmur_cmd), which handle_cmd gets.
// Only lib_cmd is ours to read; the runner zeroes the rest before each
// command and keeps its own state in it.
struct RunnerCmd {
  LibCmd* lib_cmd;
  unsigned char runner_state[80];
  void (*done)(tcmu_device* dev, RunnerCmd* cmd, int status);  // unused in handle_cmd-only mode
};

// reconfig's argument (struct tcmulib_cfg_info).
enum CfgType : unsigned {
  kCfgDevCfgstring = 0,
  kCfgDevSize = 1,
  kCfgWriteCache = 2,
};
struct CfgInfo {
  CfgType type;
  union {
    uint64_t dev_size;
    char* dev_cfgstring;
    bool write_cache;
  } data;
};

// The object handler_init registers (struct tcmur_handler), as far as a
// handle_cmd-only handler fills it.
inline constexpr size_t kLargestRunnerHandlerSize = 200;  // 1.5.4 to main
inline constexpr size_t kZeroTailOffset = 80;             // first byte after handle_cmd

struct Handler {
  const char* name;      // free text for logs
  const char* subtype;   // D-Bus object name and cfgstring prefix
  const char* cfg_desc;  // shown by targetcli
  void* opaque;
  bool (*check_config)(const char* cfgstring, char** reason);  // reason: malloc()ed
  int (*reconfig)(tcmu_device* dev, CfgInfo* cfg);
  int (*open)(tcmu_device* dev, bool reopen);
  void (*close)(tcmu_device* dev);
  int nr_threads;  // > 0: handle_cmd runs on that many workers per device
  int (*handle_cmd)(tcmu_device* dev, RunnerCmd* cmd);
  // Every runner reads callouts here (read/write/flush per command, unmap,
  // init, destroy, update_logdir, _is_dbus_handler ...), at offsets that
  // differ by version. All zero means "none" to each of them; keep it so.
  const void* must_stay_zero[(kLargestRunnerHandlerSize - kZeroTailOffset) / sizeof(void*)];
};

// The layout every runner from 1.5.2 on expects (LP64).
static_assert(sizeof(void*) == 8, "the tcmu-runner ABI is declared for LP64 targets");
static_assert(offsetof(Handler, name) == 0);
static_assert(offsetof(Handler, subtype) == 8);
static_assert(offsetof(Handler, cfg_desc) == 16);
static_assert(offsetof(Handler, opaque) == 24);
static_assert(offsetof(Handler, check_config) == 32);
static_assert(offsetof(Handler, reconfig) == 40);
static_assert(offsetof(Handler, open) == 48);
static_assert(offsetof(Handler, close) == 56);
static_assert(offsetof(Handler, nr_threads) == 64);
static_assert(offsetof(Handler, handle_cmd) == 72);
static_assert(offsetof(Handler, must_stay_zero) == kZeroTailOffset);
static_assert(sizeof(Handler) >= kLargestRunnerHandlerSize);
static_assert(offsetof(RunnerCmd, lib_cmd) == 0);
static_assert(offsetof(RunnerCmd, done) == 88);
static_assert(sizeof(RunnerCmd) == 96);
static_assert(offsetof(LibCmd, cdb) == 8);
static_assert(offsetof(LibCmd, iovec) == 16);
static_assert(offsetof(LibCmd, iov_cnt) == 24);
static_assert(offsetof(LibCmd, sense_buf) == 32);
static_assert(offsetof(LibCmd, hm_private) == 128);
static_assert(sizeof(LibCmd) == 136);
static_assert(offsetof(CfgInfo, data) == 8);
static_assert(sizeof(CfgInfo) == 16);

}  // namespace cowstore::plugin::tcmu
