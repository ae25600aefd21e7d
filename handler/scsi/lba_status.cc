// SPDX-License-Identifier: Apache-2.0
// GET LBA STATUS (16) from the store's allocation runs: one descriptor per
// run starting at the requested LBA, as many as the allocation length holds.
#include <algorithm>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult GetLbaStatus(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const uint64_t lba = Be64(c + 2);
  const uint32_t alloc_len = Be32(c + 10);
  const uint64_t blocks = cmd.block_count();
  if (lba >= blocks) return LbaOutOfRange();
  if (alloc_len == 0) return Good();
  // Enough descriptors for the allocation length (at least one), and a
  // bounded query window so a huge LUN does not cost a full scan.
  const uint64_t max_desc = std::max<uint64_t>(1, (alloc_len > 8 ? alloc_len - 8 : 0) / 16);
  const uint64_t window = std::min<uint64_t>(blocks - lba, uint64_t{1} << 30);
  auto runs = cmd.lu.lun().GetAllocationStatus(lba, window);
  if (!runs.ok()) return FromStoreStatus(cmd.lu, runs.status(), false);
  std::vector<uint8_t> d(8, 0);
  uint64_t emitted = 0;
  for (const store::AllocationRun& run : runs.value()) {
    uint64_t start = std::max(run.lba, lba);
    uint64_t end = run.lba + run.count;
    while (start < end && emitted < max_desc) {
      const uint64_t n = std::min<uint64_t>(end - start, 0xFFFFFFFFu);
      uint8_t desc[16] = {};
      PutBe64(desc, start);
      PutBe32(desc + 8, static_cast<uint32_t>(n));
      desc[12] = run.mapped ? 0x00 : 0x01;  // mapped / deallocated
      d.insert(d.end(), desc, desc + sizeof(desc));
      start += n;
      ++emitted;
    }
    if (emitted == max_desc) break;
  }
  PutBe32(d.data(), static_cast<uint32_t>(d.size() - 4));
  return cmd.ReturnData(d.data(), d.size(), alloc_len);
}

}  // namespace cowstore::scsi
