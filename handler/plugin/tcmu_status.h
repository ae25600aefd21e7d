// SPDX-License-Identifier: Apache-2.0
// A command's CommandResult in the form libtcmu completes it: a TCMU_STS_*
// value, with the sense in the command's sense_buf. Shared by the two ways
// a command is answered (handler.cc returns it from handle_cmd;
// async_device.cc passes it to tcmulib_command_complete).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

#include "handler/plugin/tcmu_abi.h"
#include "handler/scsi/command_result.h"

namespace cowstore::plugin {

// The CDB length the kernel copied into the ring (its scsi_command_size):
// by group code, variable-length CDBs by their ADDITIONAL CDB LENGTH.
size_t CdbLength(const uint8_t* cdb);

// CHECK CONDITION / HARDWARE ERROR / INTERNAL TARGET FAILURE, fixed format.
void SetInternalFailure(uint8_t* sense);

// The TCMU_STS_* value for `r`, with cmd's sense_buf set for a CHECK
// CONDITION and the data-in bytes a GOOD command did not fill zeroed.
int ToTcmuStatus(const scsi::CommandResult& r, tcmu::LibCmd* cmd);

}  // namespace cowstore::plugin
