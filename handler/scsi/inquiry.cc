// SPDX-License-Identifier: Apache-2.0
// INQUIRY: standard data (SPC-4, 3PC set) and dispatch to the VPD pages.
#include <algorithm>
#include <cstring>
#include <string>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

void PutPadded(uint8_t* dst, const std::string& s, size_t width) {
  std::memset(dst, ' ', width);
  size_t n = 0;
  for (char c : s) {
    if (n == width) break;
    dst[n++] = (c >= 0x20 && c <= 0x7E) ? static_cast<uint8_t>(c) : '_';
  }
}

}  // namespace

CommandResult Inquiry(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const uint32_t alloc_len = Be16(c + 3);
  if (c[1] & 0x02) return InvalidFieldInCdb(1, 1);  // CMDDT (obsolete)
  if (c[1] & 0x01) return InquiryVpd(cmd, c[2], alloc_len);
  if (c[2] != 0) return InvalidFieldInCdb(2);  // PAGE CODE without EVPD

  uint8_t d[74] = {};
  d[0] = 0x00;         // peripheral qualifier 0, direct-access block device
  d[1] = 0x00;         // RMB=0
  d[2] = 0x06;         // VERSION: SPC-4
  d[3] = 0x10 | 0x02;  // HISUP, RESPONSE DATA FORMAT 2
  d[4] = sizeof(d) - 5;
  d[5] = 0x08;         // 3PC: EXTENDED COPY supported
  d[6] = 0x00;
  d[7] = 0x02;         // CMDQUE
  const LunConfig& cfg = cmd.lu.config();
  PutPadded(d + 8, cfg.vendor, 8);
  PutPadded(d + 16, cfg.product, 16);
  PutPadded(d + 32, cfg.revision, 4);
  // VERSION DESCRIPTORS: SAM-5, SPC-4, SBC-3.
  PutBe16(d + 58, 0x00A0);
  PutBe16(d + 60, 0x0460);
  PutBe16(d + 62, 0x04C0);
  return cmd.ReturnData(d, sizeof(d), alloc_len);
}

}  // namespace cowstore::scsi
