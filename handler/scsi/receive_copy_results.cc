// SPDX-License-Identifier: Apache-2.0
// RECEIVE COPY RESULTS (LID1 service actions): COPY STATUS and FAILED
// SEGMENT DETAILS for list IDs held with LIST ID USAGE 00b, and OPERATING
// PARAMETERS that state exactly the limits ParseXcopyParameters enforces.
// Which copy answers for a list ID when several initiators used it (no I_T
// nexus in TCMU) is CopyListTable's rule: a running one before any finished
// one, else the last to finish.
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

CommandResult CopyStatus(Command& cmd, uint8_t list_id, uint32_t alloc_len) {
  auto rec = cmd.lu.copy_lists().Status(list_id);
  if (!rec) return InvalidFieldInCdb(2);
  uint8_t d[12] = {};
  PutBe32(d, 8);
  switch (rec->state) {
    case CopyRecord::State::kInProgress: d[4] = 0x00; break;
    case CopyRecord::State::kCompleted: d[4] = 0x01; break;
    case CopyRecord::State::kFailed: d[4] = 0x02; break;
  }
  PutBe16(d + 5, rec->segments_processed);
  uint64_t count = rec->bytes_transferred;
  uint8_t units = 0;  // bytes, then KiB, MiB, ...
  while (count > 0xFFFFFFFFull) {
    count >>= 10;
    ++units;
  }
  d[7] = units;
  PutBe32(d + 8, static_cast<uint32_t>(count));
  return cmd.ReturnData(d, sizeof(d), alloc_len);
}

CommandResult FailedSegmentDetails(Command& cmd, uint8_t list_id, uint32_t alloc_len) {
  auto rec = cmd.lu.copy_lists().Take(list_id);
  if (!rec) return InvalidFieldInCdb(2);
  std::vector<uint8_t> d(60, 0);
  if (rec->state == CopyRecord::State::kFailed) {
    d[56] = static_cast<uint8_t>(rec->result.status);
    PutBe16(&d[58], rec->result.sense_length);
    d.insert(d.end(), rec->result.sense.begin(), rec->result.sense.begin() + rec->result.sense_length);
    PutBe32(d.data(), static_cast<uint32_t>(d.size() - 4));
  } else {
    // In progress or completed without errors: no failed segment.
    d.resize(4);
    PutBe32(d.data(), 0);
  }
  return cmd.ReturnData(d.data(), d.size(), alloc_len);
}

CommandResult OperatingParameters(Command& cmd, uint32_t alloc_len) {
  const Limits l = cmd.lu.limits();
  uint8_t d[46] = {};
  PutBe32(d, sizeof(d) - 4);
  d[4] = 0x01;  // SNLID: LIST ID USAGE 11b supported
  PutBe16(d + 8, l.max_cscd_descriptors);
  PutBe16(d + 10, l.max_segment_descriptors);
  PutBe32(d + 12, l.max_descriptor_list_length);
  PutBe32(d + 16, l.max_segment_bytes);
  PutBe32(d + 20, 0);  // MAXIMUM INLINE DATA LENGTH
  PutBe32(d + 24, 0);  // HELD DATA LIMIT
  PutBe32(d + 28, 0);  // MAXIMUM STREAM DEVICE TRANSFER SIZE
  PutBe16(d + 34, 0xFFFF);  // TOTAL CONCURRENT COPIES
  d[36] = 0xFF;             // MAXIMUM CONCURRENT COPIES
  d[37] = static_cast<uint8_t>(__builtin_ctz(l.block_size));  // DATA SEGMENT GRANULARITY
  d[38] = 0;                // INLINE DATA GRANULARITY
  d[39] = 0;                // HELD DATA GRANULARITY
  d[43] = 2;                // IMPLEMENTED DESCRIPTOR LIST LENGTH
  d[44] = 0x02;             // block -> block segment
  d[45] = 0xE4;             // identification CSCD
  return cmd.ReturnData(d, sizeof(d), alloc_len);
}

}  // namespace

CommandResult ReceiveCopyResults(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const uint8_t list_id = c[2];
  const uint32_t alloc_len = Be32(c + 10);
  switch (c[1] & 0x1F) {
    case 0x00: return CopyStatus(cmd, list_id, alloc_len);
    case 0x03: return OperatingParameters(cmd, alloc_len);
    case 0x04: return FailedSegmentDetails(cmd, list_id, alloc_len);
    default: return InvalidFieldInCdb(1, 4);
  }
}

}  // namespace cowstore::scsi
