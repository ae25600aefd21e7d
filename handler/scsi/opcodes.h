// SPDX-License-Identifier: Apache-2.0
// The table of implemented commands: the single source for dispatch and for
// REPORT SUPPORTED OPERATION CODES (so the report is exactly what runs).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "handler/scsi/command.h"

namespace cowstore::scsi {

using CommandHandler = CommandResult (*)(Command&);

enum OpcodeFlags : uint8_t {
  kNoUnitAttention = 1 << 1,  // INQUIRY, REQUEST SENSE: pending UAs not reported
  // Changes the medium: a read-only LU answers DATA PROTECT / WRITE
  // PROTECTED before looking at the rest of the CDB (as the kernel target
  // does for a read-only LUN mapping). EXTENDED COPY checks its destinations.
  kWritesMedium = 1 << 2,
  // Its work is mostly the pool's metadata, done under the pool's lock:
  // a clone (EXTENDED COPY inside a pool), a zeroing, an unmap. Two such
  // commands at once only wait for each other (CommandPipeline's serial
  // lane runs them one at a time, command_pipeline.h).
  kPoolMetadataWork = 1 << 3,
};

struct OpcodeInfo {
  uint8_t opcode;
  bool has_service_action;
  uint16_t service_action;
  uint8_t cdb_length;
  uint8_t flags;
  const char* name;
  CommandHandler handler;
  // CDB USAGE DATA (SPC-4 6.35.3): 1 = the bit is evaluated and non-zero
  // values are supported; byte 0 is the opcode, the service action field
  // holds the service action.
  std::array<uint8_t, 16> usage;
  uint32_t recommended_timeout_s;
};

std::span<const OpcodeInfo> OpcodeTable();

// The entry for opcode/service action, or null. *opcode_known tells whether
// the opcode exists at all (for INVALID FIELD IN CDB vs INVALID OPERATION).
const OpcodeInfo* FindOpcode(uint8_t opcode, uint16_t service_action, bool* opcode_known);
bool OpcodeHasServiceActions(uint8_t opcode);
// Whether `cdb` is a command of the table flagged kPoolMetadataWork (false
// for anything else, an empty or unknown CDB too).
bool IsPoolMetadataWork(std::span<const uint8_t> cdb);
// Service action of a CDB for an opcode that has them (byte 1 bits 4-0).
inline uint16_t ServiceActionOf(std::span<const uint8_t> cdb) {
  return cdb.size() > 1 ? (cdb[1] & 0x1F) : 0;
}

}  // namespace cowstore::scsi
