// SPDX-License-Identifier: Apache-2.0
// Decoding of the LBA / transfer length / flag fields shared by the READ,
// WRITE, VERIFY, WRITE AND VERIFY, SYNCHRONIZE CACHE and WRITE SAME CDBs.
#pragma once

#include <cstdint>
#include <span>

namespace cowstore::scsi {

struct BlockRange {
  uint64_t lba = 0;
  uint64_t count = 0;
  uint8_t flags = 0;        // CDB byte 1 (0 for 6-byte CDBs)
  uint16_t lba_offset = 0;  // where the fields sit, for field pointers
  uint16_t count_offset = 0;
};

// Valid for the opcodes listed above; 6-byte READ/WRITE: count 0 means 256.
BlockRange DecodeBlockRange(std::span<const uint8_t> cdb);

}  // namespace cowstore::scsi
