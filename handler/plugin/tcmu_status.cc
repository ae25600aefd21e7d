// SPDX-License-Identifier: Apache-2.0
#include "handler/plugin/tcmu_status.h"

#include <algorithm>
#include <cstring>

namespace cowstore::plugin {

namespace {

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

}  // namespace

size_t CdbLength(const uint8_t* cdb) {
  static constexpr uint8_t kByGroup[8] = {6, 10, 10, 12, 16, 12, 10, 10};
  if (cdb[0] == 0x7f) return size_t{8} + cdb[7];
  return kByGroup[cdb[0] >> 5];
}

void SetInternalFailure(uint8_t* sense) {
  std::memset(sense, 0, tcmu::kSenseBufferSize);
  sense[0] = 0x70;
  sense[2] = 0x04;
  sense[7] = 10;
  sense[12] = 0x44;
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

}  // namespace cowstore::plugin
