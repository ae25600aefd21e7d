// SPDX-License-Identifier: Apache-2.0
// The one door to tcmu-runner: only handler/plugin (and its tests) include
// this file. The types are our own declaration (tcmu_abi.h); here are the C
// functions the daemon gives a handler, with the prototypes they have had
// unchanged since tcmu-runner 1.5.2 (docs/design/plugin.md):
//   - the runner executable: tcmur_register_handler, tcmur_dev_set/get_private;
//   - libtcmu.so.2 (loaded by the runner): device getters, tcmu_cfgfs_dev_get_wwn,
//     logging (tcmu_*_message, tcmu_get_log_level), and the two calls that
//     complete a command (tcmulib_command_complete, tcmulib_processing_complete)
//     for asynchronous completion (handler/plugin/async_device.h).
// The .so has no DT_NEEDED on either: like Debian's own handlers it binds to
// them in the daemon's global scope when dlopen()ed. Declare nothing here
// that the oldest runner we support (1.5.2) lacks: tcmu_notify_cmd_timed_out
// (1.5.3+) is deliberately absent. tests/plugin/check_undefined_symbols.sh
// checks the built .so against the runners' exports.
#pragma once

#include <cstdint>

#include "handler/plugin/tcmu_abi.h"

extern "C" {

// tcmu-runner (its dynamic list).
int tcmur_register_handler(cowstore::plugin::tcmu::Handler* handler);
void tcmur_dev_set_private(tcmu_device* dev, void* priv);
void* tcmur_dev_get_private(tcmu_device* dev);

// libtcmu.so.2.
char* tcmu_dev_get_cfgstring(tcmu_device* dev);
uint32_t tcmu_dev_get_block_size(tcmu_device* dev);
uint64_t tcmu_dev_get_num_lbas(tcmu_device* dev);
uint32_t tcmu_dev_get_max_xfer_len(tcmu_device* dev);
char* tcmu_cfgfs_dev_get_wwn(tcmu_device* dev);  // malloc()ed, or NULL
unsigned int tcmu_get_log_level(void);
// Writes `cmd`'s status (a TCMU_STS_* value, with its sense_buf for
// PASSTHROUGH_ERR) into the ring and frees `cmd`: nothing of it may be
// touched afterwards. Calls for one device must not overlap.
void tcmulib_command_complete(tcmu_device* dev, cowstore::plugin::tcmu::LibCmd* cmd, int result);
// Tells the kernel that completions were written (one call after a batch).
void tcmulib_processing_complete(tcmu_device* dev);
void tcmu_crit_message(tcmu_device* dev, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcmu_err_message(tcmu_device* dev, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcmu_warn_message(tcmu_device* dev, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcmu_info_message(tcmu_device* dev, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcmu_dbg_message(tcmu_device* dev, const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

// The one symbol handler_cowstore.so exports (version script).
__attribute__((visibility("default"))) int handler_init(void);
}
