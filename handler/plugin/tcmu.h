// The one door to tcmu-runner 1.5.4's headers: only handler/plugin includes
// this file, and nothing else in the repository includes tcmu-runner headers.
//
// What the daemon gives a handler, and from where (docs/design/plugin.md):
//   - the runner executable: tcmur_register_handler, tcmur_cmd_complete,
//     tcmur_dev_set/get_private, tcmur_dev_update_size, tcmu_notify_*;
//   - libtcmu.so.2 (loaded by the runner): device getters, tcmu_cfgfs_*,
//     logging (tcmu_*_message), sense and iovec helpers.
// The .so has no DT_NEEDED on either: like Debian's own handlers it binds to
// them in the daemon's global scope when dlopen()ed.
#pragma once

#include <cstddef>

// libtcmu_log.h, alua.h and scsi_defs.h lack extern "C"; tcmu-runner.h pulls
// them in, so the whole set is wrapped here.
extern "C" {
#include "libtcmu.h"
#include "libtcmu_common.h"
#include "libtcmu_log.h"
#include "tcmu-runner.h"

// tcmur_device.h (which declares these) names a parameter `private`, which is
// not valid C++; tcmur_cmd_handler.h drags in runner internals. Both are
// exported by /usr/bin/tcmu-runner (its dynamic list, main-syms.txt).
void tcmur_dev_set_private(struct tcmu_device* dev, void* priv);
void* tcmur_dev_get_private(struct tcmu_device* dev);
int tcmur_dev_update_size(struct tcmu_device* dev, uint64_t new_size);
void tcmu_notify_conn_lost(struct tcmu_device* dev);
void tcmu_notify_lock_lost(struct tcmu_device* dev);
void tcmu_notify_cmd_timed_out(struct tcmu_device* dev);

// The one symbol handler_cowstore.so exports (version script).
__attribute__((visibility("default"))) int handler_init(void);
}

// libtcmu_common.h defines function-like min/max/round_up/round_down macros,
// which break the C++ standard library headers included after it.
#undef min
#undef max
#undef round_up
#undef round_down

// There is no ABI handshake between the daemon and its handlers, and the
// layout changed in 1.5.3 and again in 1.5.4: a handler built against other
// headers is called through the wrong slots. Pin the x86_64 layout of 1.5.4.
#if defined(__x86_64__)
static_assert(offsetof(tcmur_handler, name) == 0);
static_assert(offsetof(tcmur_handler, subtype) == 8);
static_assert(offsetof(tcmur_handler, cfg_desc) == 16);
static_assert(offsetof(tcmur_handler, opaque) == 24);
static_assert(offsetof(tcmur_handler, check_config) == 32);
static_assert(offsetof(tcmur_handler, reconfig) == 40);
static_assert(offsetof(tcmur_handler, open) == 48);
static_assert(offsetof(tcmur_handler, close) == 56);
static_assert(offsetof(tcmur_handler, nr_threads) == 64);
static_assert(offsetof(tcmur_handler, handle_cmd) == 72);
static_assert(offsetof(tcmur_handler, read) == 80);
static_assert(offsetof(tcmur_handler, write) == 88);
static_assert(offsetof(tcmur_handler, flush) == 96);
static_assert(offsetof(tcmur_handler, unmap) == 104);
static_assert(offsetof(tcmur_handler, writesame) == 112);
static_assert(offsetof(tcmur_handler, caw) == 120);
static_assert(offsetof(tcmur_handler, report_event) == 128);
static_assert(offsetof(tcmur_handler, lock) == 136);
static_assert(offsetof(tcmur_handler, unlock) == 144);
static_assert(offsetof(tcmur_handler, get_lock_tag) == 152);
static_assert(offsetof(tcmur_handler, get_lock_state) == 160);
static_assert(offsetof(tcmur_handler, _is_dbus_handler) == 168);
static_assert(offsetof(tcmur_handler, update_logdir) == 176);
static_assert(offsetof(tcmur_handler, init) == 184);
static_assert(offsetof(tcmur_handler, destroy) == 192);
static_assert(sizeof(tcmur_handler) == 200);
static_assert(offsetof(tcmur_cmd, lib_cmd) == 0);
static_assert(offsetof(tcmur_cmd, done) == 88);
static_assert(sizeof(tcmur_cmd) == 96);
static_assert(offsetof(tcmulib_cmd, sense_buf) == 32);
static_assert(SENSE_BUFFERSIZE == 96);
#else
#error "handler_cowstore.so is built for x86_64 only (the tcmu-runner ABI is pinned for it)"
#endif
