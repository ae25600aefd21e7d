// SPDX-License-Identifier: Apache-2.0
// COMPARE AND WRITE (SBC-3 5.2): the store's CompareAndWrite makes it atomic
// against every write to the range (not only other CAWs). The data-out
// buffer holds the verify data then the write data, NUMBER OF LOGICAL BLOCKS
// each; never-written blocks compare as zeros. MISCOMPARE carries the byte
// offset of the first difference in INFORMATION.
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult CompareAndWrite(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  if (c[1] & 0xE0) return InvalidFieldInCdb(1, 7);  // WRPROTECT
  const uint64_t lba = Be64(c + 2);
  const uint32_t nlb = c[13];
  if (nlb > cmd.lu.limits().max_compare_and_write_blocks) return InvalidFieldInCdb(13);
  if (!cmd.InRange(lba, nlb)) return LbaOutOfRange();
  const uint64_t half = uint64_t{nlb} * cmd.block_size();
  // The data-out length is fixed by the CDB; anything else is a malformed command.
  if (cmd.data_length != 2 * half) return InvalidFieldInCdb(13);
  if (nlb == 0) return Good();
  std::vector<uint8_t> buf = cmd.GatherAll(2 * half);
  const bool fua = c[1] & 0x08;
  store::Status s = cmd.lu.lun().CompareAndWrite(lba, nlb, buf.data(), buf.data() + half,
                                                 cmd.WriteDurability(fua));
  auto& counters = cmd.lu.mutable_counters();
  counters.compare_and_writes.fetch_add(1, std::memory_order_relaxed);
  if (s.code() == store::Code::kMiscompare) {
    counters.miscompares.fetch_add(1, std::memory_order_relaxed);
  }
  if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  counters.written_blocks.fetch_add(nlb, std::memory_order_relaxed);
  return Good();
}

}  // namespace cowstore::scsi
