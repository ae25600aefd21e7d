// SPDX-License-Identifier: Apache-2.0
// READ and WRITE (6), (10), (12), (16). DPO is accepted and ignored (there
// is no read cache to bypass); FUA makes that one write durable even with
// WCE=1. RDPROTECT/WRPROTECT other than 0 are rejected: no protection
// information.
#include <algorithm>
#include <vector>

#include "handler/scsi/block_range.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

// Checks shared by READ and WRITE; returns GOOD to proceed.
CommandResult Validate(Command& cmd, const BlockRange& r) {
  if (cmd.cdb.size() > 6 && (r.flags & 0xE0)) return InvalidFieldInCdb(1, 7);  // PROTECT
  if (r.count > cmd.lu.limits().max_transfer_blocks) return InvalidFieldInCdb(r.count_offset);
  if (!cmd.InRange(r.lba, r.count)) return LbaOutOfRange();
  return Good();
}

}  // namespace

CommandResult ReadBlocks(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  CommandResult v = Validate(cmd, r);
  if (!v.good() || r.count == 0) return v;
  const uint64_t bytes = r.count * cmd.block_size();
  store::Status s;
  uint64_t filled = bytes;
  if (cmd.data_length >= bytes) {
    std::vector<iovec> iov = cmd.Slice(0, bytes);
    s = cmd.lu.lun().Read(r.lba, r.count, std::span<const iovec>(iov));
  } else {
    // The initiator expects less than the CDB asks for: read into a bounce
    // buffer and return what fits (the adapter reports the residual).
    std::vector<uint8_t> bounce(bytes);
    s = cmd.lu.lun().Read(r.lba, r.count, bounce.data());
    if (s.ok()) filled = cmd.ReturnData(bounce.data(), bounce.size(), bytes).data_in_length;
  }
  if (!s.ok()) return FromStoreStatus(cmd.lu, s, false);
  cmd.lu.mutable_counters().read_blocks.fetch_add(r.count, std::memory_order_relaxed);
  return Good(static_cast<uint32_t>(filled));
}

CommandResult WriteBlocks(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  CommandResult v = Validate(cmd, r);
  if (!v.good() || r.count == 0) return v;
  const uint64_t bytes = r.count * cmd.block_size();
  if (cmd.data_length < bytes) return InvalidFieldInCdb(r.count_offset);  // data-out too short
  const bool fua = cmd.cdb.size() > 6 && (r.flags & 0x08);
  std::vector<iovec> iov = cmd.Slice(0, bytes);
  store::Status s = cmd.lu.lun().Write(r.lba, r.count, std::span<const iovec>(iov),
                                       cmd.WriteDurability(fua));
  if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  cmd.lu.mutable_counters().written_blocks.fetch_add(r.count, std::memory_order_relaxed);
  return Good();
}

}  // namespace cowstore::scsi
