// SPDX-License-Identifier: Apache-2.0
// WRITE SAME (10)/(16). A zero pattern (or NDOB) becomes the store's
// ZeroRange: whole allocation units are deallocated (LBPRZ: they read
// zeros), the partial units at unaligned edges get zeros written, so the
// whole range reads back as the pattern whether UNMAP is set or not. Any
// other pattern is written in chunks (UNMAP then cannot apply: deallocated
// blocks would read zeros, not the pattern). ANCHOR, PBDATA, LBDATA and
// WRPROTECT are not supported; WSNZ=1, so 0 blocks is rejected, and the
// length is bounded by MAXIMUM WRITE SAME LENGTH (VPD B0).
#include <algorithm>
#include <cstring>
#include <vector>

#include "handler/scsi/block_range.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {
constexpr uint64_t kChunkBytes = 1u << 20;
}

CommandResult WriteSame(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  const bool sixteen = cmd.cdb.size() == 16;
  if (r.flags & 0xE0) return InvalidFieldInCdb(1, 7);  // WRPROTECT
  if (r.flags & 0x10) return InvalidFieldInCdb(1, 4);  // ANCHOR (ANC_SUP=0)
  if (r.flags & 0x04) return InvalidFieldInCdb(1, 2);  // PBDATA
  if (r.flags & 0x02) return InvalidFieldInCdb(1, 1);  // LBDATA
  const bool ndob = sixteen && (r.flags & 0x01);
  if (!sixteen && (r.flags & 0x01)) return InvalidFieldInCdb(1, 0);  // reserved in (10)
  if (r.count == 0) return InvalidFieldInCdb(r.count_offset);  // WSNZ=1
  if (r.count > cmd.lu.limits().max_write_same_blocks) return InvalidFieldInCdb(r.count_offset);
  if (!cmd.InRange(r.lba, r.count)) return LbaOutOfRange();
  const uint32_t bs = cmd.block_size();
  std::vector<uint8_t> pattern(bs, 0);
  if (!ndob) {
    if (cmd.data_length != bs) return InvalidFieldInCdb(r.count_offset);  // one block of data-out
    cmd.Gather(0, pattern.data(), bs);
  }
  const bool zeros = std::all_of(pattern.begin(), pattern.end(), [](uint8_t b) { return b == 0; });
  const store::Durability d = cmd.WriteDurability(false);
  auto& counters = cmd.lu.mutable_counters();
  if (zeros) {
    store::Status s = cmd.lu.lun().ZeroRange(r.lba, r.count, d);
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
    counters.write_same_blocks.fetch_add(r.count, std::memory_order_relaxed);
    return Good();
  }
  const uint64_t chunk_blocks = std::max<uint64_t>(1, kChunkBytes / bs);
  std::vector<uint8_t> buf(std::min(chunk_blocks, r.count) * bs);
  for (size_t off = 0; off < buf.size(); off += bs) std::memcpy(&buf[off], pattern.data(), bs);
  // Chunks go in buffered; one flush makes the whole range durable (WCE=0).
  const store::Durability chunk_d = r.count > chunk_blocks ? store::Durability::kBuffered : d;
  for (uint64_t done = 0; done < r.count;) {
    const uint64_t n = std::min(chunk_blocks, r.count - done);
    store::Status s = cmd.lu.lun().Write(r.lba + done, n, buf.data(), chunk_d);
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
    done += n;
  }
  if (chunk_d != d) {
    store::Status s = cmd.lu.lun().Flush();
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  }
  counters.write_same_blocks.fetch_add(r.count, std::memory_order_relaxed);
  return Good();
}

}  // namespace cowstore::scsi
