// SPDX-License-Identifier: Apache-2.0
// SYNCHRONIZE CACHE (10)/(16): makes every buffered write of the LUN
// durable. The range is checked but the flush covers the whole LUN (the
// store's unit of durability); IMMED is honoured by finishing first.
#include "handler/scsi/block_range.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult SynchronizeCache(Command& cmd) {
  const BlockRange r = DecodeBlockRange(cmd.cdb);
  const uint64_t count = r.count == 0 ? (r.lba <= cmd.block_count() ? cmd.block_count() - r.lba : 0)
                                      : r.count;
  if (!cmd.InRange(r.lba, count)) return LbaOutOfRange();
  store::Status s = cmd.FlushBeforeStatus(cmd.lu);
  if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  return Good();
}

}  // namespace cowstore::scsi
