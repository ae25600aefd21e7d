// SPDX-License-Identifier: Apache-2.0
// Decoding and validation of an EXTENDED COPY (LID1) parameter list
// (SPC-4 6.4): header, identification CSCDs (0xE4) and block-to-block
// segment descriptors (0x02). Pure function of the bytes and the limits, so
// it is fuzzed on its own; resolving CSCDs and copying is extended_copy.cc.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/naa.h"

namespace cowstore::scsi {

struct XcopyCscd {
  uint16_t offset = 0;       // in the parameter list
  bool naa_designator = false;  // binary NAA type 6, LU association, 16 bytes
  Naa naa{};
  uint32_t disk_block_length = 0;
};

struct XcopySegment {
  uint16_t offset = 0;  // in the parameter list
  uint16_t source = 0;  // CSCD indexes
  uint16_t destination = 0;
  uint32_t blocks = 0;
  uint64_t source_lba = 0;
  uint64_t destination_lba = 0;
};

struct XcopyParameters {
  uint8_t list_id = 0;
  uint8_t list_id_usage = 0;  // 00b hold, 10b no hold, 11b no list ID
  std::vector<XcopyCscd> cscds;
  std::vector<XcopySegment> segments;
};

// GOOD and *out filled, or the ILLEGAL REQUEST result for a malformed list
// (PARAMETER LIST LENGTH ERROR, TOO MANY ... DESCRIPTORS, UNSUPPORTED ...
// DESCRIPTOR TYPE CODE, INVALID FIELD IN PARAMETER LIST with a pointer).
CommandResult ParseXcopyParameters(std::span<const uint8_t> p, const Limits& limits,
                                   XcopyParameters* out);

}  // namespace cowstore::scsi
