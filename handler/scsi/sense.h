// SPDX-License-Identifier: Apache-2.0
// Building CHECK CONDITION results with fixed-format sense data (SPC-4
// 4.5.3): sense key, ASC/ASCQ, INFORMATION with VALID, COMMAND-SPECIFIC
// INFORMATION, and the sense-key-specific field pointer (SKSV, C/D, BPV, bit
// pointer, field pointer). The layer never reports descriptor-format sense
// (the control page's D_SENSE is 0 and not changeable).
#pragma once

#include <cstdint>

#include "handler/scsi/command_result.h"

namespace cowstore::scsi {

class Sense {
 public:
  Sense(SenseKey key, Asc code);

  // INFORMATION (bytes 3-6) and the VALID bit. Values above 32 bits do not
  // fit fixed format: VALID then stays 0 (SPC-4 4.5.3).
  Sense& Information(uint64_t value);
  // COMMAND-SPECIFIC INFORMATION (bytes 8-11).
  Sense& CommandSpecific(uint32_t value);
  // Field pointer into the CDB (C/D=1) or the parameter list (C/D=0).
  // bit < 0: no bit pointer (BPV=0).
  Sense& FieldPointer(bool in_cdb, uint16_t byte, int bit = -1);
  // COPY ABORTED segment pointer (SPC-4 4.5.2.4.5): SD=1 means `byte` is
  // relative to the start of the segment descriptor being processed.
  Sense& SegmentPointer(bool relative_to_segment, uint16_t byte, int bit = -1);

  CommandResult Result() const { return r_; }
  operator CommandResult() const { return r_; }  // NOLINT(implicit)

 private:
  CommandResult r_;
};

// Shorthands for the most common results.
CommandResult Good(uint32_t data_in_length = 0);
CommandResult CheckCondition(SenseKey key, Asc code);
// ILLEGAL REQUEST / INVALID FIELD IN CDB with a field pointer.
CommandResult InvalidFieldInCdb(uint16_t byte, int bit = -1);
// ILLEGAL REQUEST / INVALID FIELD IN PARAMETER LIST with a field pointer.
CommandResult InvalidFieldInParameterList(uint16_t byte, int bit = -1);
// ILLEGAL REQUEST with another 0x26/xx code and a parameter-list pointer.
CommandResult ParameterListError(Asc code, uint16_t byte, int bit = -1);
CommandResult ParameterListLengthError();
CommandResult LbaOutOfRange();
CommandResult InvalidOpcode();

}  // namespace cowstore::scsi
