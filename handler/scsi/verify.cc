// SPDX-License-Identifier: Apache-2.0
// VERIFY (10)/(16) with BYTCHK 00b (medium readable), 01b (compare with the
// data-out buffer) and 11b (compare every block with one data-out block),
// and WRITE AND VERIFY (10)/(16), whose write is always durable (the verify
// is meant to check the medium, so the data must be there).
#include <algorithm>
#include <cstring>
#include <vector>

#include "handler/scsi/block_range.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

constexpr uint64_t kChunkBytes = 1u << 20;

CommandResult Miscompare(uint64_t offset) {
  return Sense(SenseKey::kMiscompare, asc::kMiscompareDuringVerify).Information(offset);
}

// Reads [lba, lba+count) in chunks; compares against `expect` (the whole
// range, or one block repeated when `one_block`), or only reads when null.
CommandResult ReadAndCompare(Command& cmd, uint64_t lba, uint64_t count, const uint8_t* expect,
                             bool one_block) {
  const uint32_t bs = cmd.block_size();
  const uint64_t chunk_blocks = std::max<uint64_t>(1, kChunkBytes / bs);
  std::vector<uint8_t> buf(std::min(count, chunk_blocks) * bs);
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(chunk_blocks, count - done);
    store::Status s = cmd.lu.lun().Read(lba + done, n, buf.data());
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, false);
    if (expect) {
      for (uint64_t b = 0; b < n; ++b) {
        const uint8_t* want = one_block ? expect : expect + (done + b) * bs;
        const uint8_t* got = buf.data() + b * bs;
        if (std::memcmp(want, got, bs) != 0) {
          uint32_t i = 0;
          while (want[i] == got[i]) ++i;
          return Miscompare((done + b) * bs + i);
        }
      }
    }
    done += n;
  }
  return Good();
}

}  // namespace

CommandResult Verify(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  if (r.flags & 0xE0) return InvalidFieldInCdb(1, 7);  // VRPROTECT
  const uint8_t bytchk = (r.flags >> 1) & 0x03;
  if (bytchk == 0x02) return InvalidFieldInCdb(1, 2);
  if (bytchk == 0x01 && r.count > cmd.lu.limits().max_transfer_blocks) {
    return InvalidFieldInCdb(r.count_offset);
  }
  if (!cmd.InRange(r.lba, r.count)) return LbaOutOfRange();
  if (r.count == 0) return Good();
  const uint32_t bs = cmd.block_size();
  if (bytchk == 0) return ReadAndCompare(cmd, r.lba, r.count, nullptr, false);
  const uint64_t need = bytchk == 0x01 ? r.count * bs : bs;
  if (cmd.data_length < need) return InvalidFieldInCdb(r.count_offset);
  std::vector<uint8_t> expect = cmd.GatherAll(need);
  return ReadAndCompare(cmd, r.lba, r.count, expect.data(), bytchk == 0x03);
}

CommandResult WriteAndVerify(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  if (r.flags & 0xE0) return InvalidFieldInCdb(1, 7);  // WRPROTECT
  const uint8_t bytchk = (r.flags >> 1) & 0x03;
  if (bytchk > 1) return InvalidFieldInCdb(1, 2);
  if (r.count > cmd.lu.limits().max_transfer_blocks) return InvalidFieldInCdb(r.count_offset);
  if (!cmd.InRange(r.lba, r.count)) return LbaOutOfRange();
  if (r.count == 0) return Good();
  const uint32_t bs = cmd.block_size();
  const uint64_t bytes = r.count * bs;
  if (cmd.data_length < bytes) return InvalidFieldInCdb(r.count_offset);
  std::vector<iovec> iov = cmd.Slice(0, bytes);
  store::Status s = cmd.lu.lun().Write(r.lba, r.count, std::span<const iovec>(iov),
                                       cmd.WriteDurability(/*fua=*/true));
  if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  cmd.lu.mutable_counters().written_blocks.fetch_add(r.count, std::memory_order_relaxed);
  if (bytchk == 0) return Good();
  std::vector<uint8_t> expect = cmd.GatherAll(bytes);
  return ReadAndCompare(cmd, r.lba, r.count, expect.data(), false);
}

}  // namespace cowstore::scsi
