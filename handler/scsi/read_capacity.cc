// SPDX-License-Identifier: Apache-2.0
// READ CAPACITY (10) and (16): LBPME=1 (thin), LBPRZ=1 (unmapped reads zero).
#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult ReadCapacity10(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  if (!(c[8] & 0x01) && Be32(c + 2) != 0) return InvalidFieldInCdb(2);  // LBA without PMI
  const uint64_t last = cmd.block_count() == 0 ? 0 : cmd.block_count() - 1;
  uint8_t d[8];
  PutBe32(d, last > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(last));
  PutBe32(d + 4, cmd.block_size());
  return cmd.ReturnData(d, sizeof(d), sizeof(d));
}

CommandResult ReadCapacity16(Command& cmd) {
  const uint32_t alloc_len = Be32(cmd.cdb.data() + 10);
  const uint64_t last = cmd.block_count() == 0 ? 0 : cmd.block_count() - 1;
  uint8_t d[32] = {};
  PutBe64(d, last);
  PutBe32(d + 8, cmd.block_size());
  d[12] = 0;         // no protection information
  d[13] = 0;         // one logical block per physical block
  d[14] = 0x80 | 0x40;  // LBPME, LBPRZ; LOWEST ALIGNED LBA 0
  return cmd.ReturnData(d, sizeof(d), alloc_len);
}

}  // namespace cowstore::scsi
