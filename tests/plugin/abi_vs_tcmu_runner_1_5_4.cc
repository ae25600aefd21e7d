// SPDX-License-Identifier: Apache-2.0
// Compiled (never linked) against tcmu-runner 1.5.4's own headers, from
// Debian's source package, by check_abi_against_tcmu_headers.sh: pins our
// declaration (handler/plugin/tcmu_abi.h) field by field and value by value
// to the real one. A mismatch fails the compile, and so the test.
#include <cstddef>
#include <type_traits>

// The real headers are C; libtcmu_log.h, alua.h and scsi_defs.h lack
// extern "C".
extern "C" {
#include "libtcmu.h"
#include "libtcmu_common.h"
#include "libtcmu_log.h"
#include "tcmu-runner.h"
}
// libtcmu_common.h's function-like macros break the C++ library headers.
#undef min
#undef max
#undef round_up
#undef round_down

#include "handler/plugin/tcmu_abi.h"

namespace ours = cowstore::plugin::tcmu;

#define SAME_FIELD(Ours, ours_field, Theirs, their_field)                              \
  static_assert(offsetof(Ours, ours_field) == offsetof(Theirs, their_field),           \
                #Ours "::" #ours_field " is not at " #Theirs "::" #their_field);        \
  static_assert(sizeof(Ours::ours_field) == sizeof(Theirs::their_field),                 \
                #Ours "::" #ours_field " has not the size of " #Theirs "::" #their_field)

#define SAME_VALUE(ours_value, theirs) \
  static_assert(static_cast<long>(ours_value) == static_cast<long>(theirs), #theirs)

// struct tcmur_handler: name..handle_cmd, then our zero tail covers every
// byte of the rest (1.5.4's layout is the largest: 200 bytes).
SAME_FIELD(ours::Handler, name, tcmur_handler, name);
SAME_FIELD(ours::Handler, subtype, tcmur_handler, subtype);
SAME_FIELD(ours::Handler, cfg_desc, tcmur_handler, cfg_desc);
SAME_FIELD(ours::Handler, opaque, tcmur_handler, opaque);
SAME_FIELD(ours::Handler, check_config, tcmur_handler, check_config);
SAME_FIELD(ours::Handler, reconfig, tcmur_handler, reconfig);
SAME_FIELD(ours::Handler, open, tcmur_handler, open);
SAME_FIELD(ours::Handler, close, tcmur_handler, close);
SAME_FIELD(ours::Handler, nr_threads, tcmur_handler, nr_threads);
SAME_FIELD(ours::Handler, handle_cmd, tcmur_handler, handle_cmd);
static_assert(offsetof(ours::Handler, must_stay_zero) == offsetof(tcmur_handler, read),
              "the zero tail must start at the first callout after handle_cmd");
static_assert(sizeof(ours::Handler) >= sizeof(tcmur_handler),
              "the runner would read past the end of our handler object");
static_assert(ours::kLargestRunnerHandlerSize == sizeof(tcmur_handler));
static_assert(std::is_same_v<decltype(tcmur_handler::nr_threads), int>);

// struct tcmur_cmd and struct tcmulib_cmd.
SAME_FIELD(ours::RunnerCmd, lib_cmd, tcmur_cmd, lib_cmd);
SAME_FIELD(ours::RunnerCmd, done, tcmur_cmd, done);
static_assert(sizeof(ours::RunnerCmd) == sizeof(tcmur_cmd));
SAME_FIELD(ours::LibCmd, cmd_id, tcmulib_cmd, cmd_id);
SAME_FIELD(ours::LibCmd, cdb, tcmulib_cmd, cdb);
SAME_FIELD(ours::LibCmd, iovec, tcmulib_cmd, iovec);
SAME_FIELD(ours::LibCmd, iov_cnt, tcmulib_cmd, iov_cnt);
SAME_FIELD(ours::LibCmd, sense_buf, tcmulib_cmd, sense_buf);
SAME_FIELD(ours::LibCmd, hm_private, tcmulib_cmd, hm_private);
static_assert(sizeof(ours::LibCmd) == sizeof(tcmulib_cmd));
static_assert(ours::kSenseBufferSize == SENSE_BUFFERSIZE);

// struct tcmulib_cfg_info and enum tcmulib_cfg_type.
SAME_FIELD(ours::CfgInfo, type, tcmulib_cfg_info, type);
SAME_FIELD(ours::CfgInfo, data, tcmulib_cfg_info, data);
SAME_FIELD(ours::CfgInfo, data.dev_size, tcmulib_cfg_info, data.dev_size);
SAME_FIELD(ours::CfgInfo, data.dev_cfgstring, tcmulib_cfg_info, data.dev_cfgstring);
SAME_FIELD(ours::CfgInfo, data.write_cache, tcmulib_cfg_info, data.write_cache);
static_assert(sizeof(ours::CfgInfo) == sizeof(tcmulib_cfg_info));
SAME_VALUE(ours::kCfgDevCfgstring, TCMULIB_CFG_DEV_CFGSTR);
SAME_VALUE(ours::kCfgDevSize, TCMULIB_CFG_DEV_SIZE);
SAME_VALUE(ours::kCfgWriteCache, TCMULIB_CFG_WRITE_CACHE);

// TCMU_STS_* and TCMU_LOG_*.
SAME_VALUE(ours::kStsAsyncHandled, TCMU_STS_ASYNC_HANDLED);
SAME_VALUE(ours::kStsNotHandled, TCMU_STS_NOT_HANDLED);
SAME_VALUE(ours::kStsOk, TCMU_STS_OK);
SAME_VALUE(ours::kStsNoResource, TCMU_STS_NO_RESOURCE);
SAME_VALUE(ours::kStsPassthroughErr, TCMU_STS_PASSTHROUGH_ERR);
SAME_VALUE(ours::kStsBusy, TCMU_STS_BUSY);
SAME_VALUE(ours::kStsWrErr, TCMU_STS_WR_ERR);
SAME_VALUE(ours::kStsRdErr, TCMU_STS_RD_ERR);
SAME_VALUE(ours::kStsMiscompare, TCMU_STS_MISCOMPARE);
SAME_VALUE(ours::kStsInvalidCmd, TCMU_STS_INVALID_CMD);
SAME_VALUE(ours::kStsInvalidCdb, TCMU_STS_INVALID_CDB);
SAME_VALUE(ours::kStsInvalidParamList, TCMU_STS_INVALID_PARAM_LIST);
SAME_VALUE(ours::kStsInvalidParamListLen, TCMU_STS_INVALID_PARAM_LIST_LEN);
SAME_VALUE(ours::kStsTimeout, TCMU_STS_TIMEOUT);
SAME_VALUE(ours::kStsFenced, TCMU_STS_FENCED);
SAME_VALUE(ours::kStsHwErr, TCMU_STS_HW_ERR);
static_assert(ours::kLogCrit == TCMU_LOG_CRIT);
static_assert(ours::kLogError == TCMU_LOG_ERROR);
static_assert(ours::kLogWarn == TCMU_LOG_WARN);
static_assert(ours::kLogInfo == TCMU_LOG_INFO);
static_assert(ours::kLogDebug == TCMU_LOG_DEBUG);
static_assert(ours::kLogDebugScsiCmd == TCMU_LOG_DEBUG_SCSI_CMD);

// The functions handler/plugin/tcmu.h declares, with the prototypes they
// have in 1.5.4 (tcmu.h's own declarations cannot be in this file: same C
// names, different struct types).
// A function pointer initializes only from a function of exactly its type.
[[maybe_unused]] constexpr char* (*kGetCfgstring)(tcmu_device*) = &tcmu_dev_get_cfgstring;
[[maybe_unused]] constexpr uint32_t (*kGetBlockSize)(tcmu_device*) = &tcmu_dev_get_block_size;
[[maybe_unused]] constexpr uint64_t (*kGetNumLbas)(tcmu_device*) = &tcmu_dev_get_num_lbas;
[[maybe_unused]] constexpr uint32_t (*kGetMaxXferLen)(tcmu_device*) = &tcmu_dev_get_max_xfer_len;
[[maybe_unused]] constexpr char* (*kGetWwn)(tcmu_device*) = &tcmu_cfgfs_dev_get_wwn;
[[maybe_unused]] constexpr unsigned int (*kGetLogLevel)() = &tcmu_get_log_level;
using LogFn = void (*)(tcmu_device*, const char*, int, const char*, ...);
[[maybe_unused]] constexpr LogFn kLog[] = {&tcmu_crit_message, &tcmu_err_message,
                                           &tcmu_warn_message, &tcmu_info_message,
                                           &tcmu_dbg_message};
// tcmur_dev_set/get_private are declared in tcmur_device.h, which is not
// valid C++ (a parameter named `private`); their prototypes are documented
// in docs/design/plugin.md and the symbols checked by check_undefined_symbols.sh.
[[maybe_unused]] constexpr int (*kRegister)(tcmur_handler*) = &tcmur_register_handler;
// Asynchronous completion (handler/plugin/device_server.h).
[[maybe_unused]] constexpr void (*kComplete)(tcmu_device*, tcmulib_cmd*, int) = &tcmulib_command_complete;
[[maybe_unused]] constexpr void (*kProcessingComplete)(tcmu_device*) = &tcmulib_processing_complete;
