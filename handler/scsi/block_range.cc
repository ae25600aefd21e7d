// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/block_range.h"

#include "handler/scsi/cdb.h"

namespace cowstore::scsi {

BlockRange DecodeBlockRange(std::span<const uint8_t> cdb) {
  const uint8_t* c = cdb.data();
  BlockRange r;
  switch (cdb.size()) {
    case 6:
      r.lba = Be24(c + 1) & 0x1FFFFF;
      r.count = c[4] == 0 ? 256 : c[4];
      r.lba_offset = 1;
      r.count_offset = 4;
      break;
    case 10:
      r.flags = c[1];
      r.lba = Be32(c + 2);
      r.count = Be16(c + 7);
      r.lba_offset = 2;
      r.count_offset = 7;
      break;
    case 12:
      r.flags = c[1];
      r.lba = Be32(c + 2);
      r.count = Be32(c + 6);
      r.lba_offset = 2;
      r.count_offset = 6;
      break;
    case 16:
      r.flags = c[1];
      r.lba = Be64(c + 2);
      r.count = Be32(c + 10);
      r.lba_offset = 2;
      r.count_offset = 10;
      break;
    default:
      break;
  }
  return r;
}

}  // namespace cowstore::scsi
