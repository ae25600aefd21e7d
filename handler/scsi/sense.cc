// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/sense.h"

namespace cowstore::scsi {

Sense::Sense(SenseKey key, Asc code) {
  r_.status = ScsiStatus::kCheckCondition;
  r_.sense_length = CommandResult::kSenseLength;
  r_.sense[0] = 0x70;  // current error, fixed format
  r_.sense[2] = static_cast<uint8_t>(key);
  r_.sense[7] = CommandResult::kSenseLength - 8;  // additional sense length
  r_.sense[12] = code.asc;
  r_.sense[13] = code.ascq;
}

Sense& Sense::Information(uint64_t value) {
  if (value > 0xFFFFFFFFu) return *this;
  r_.sense[0] |= 0x80;
  for (int i = 0; i < 4; ++i) r_.sense[3 + i] = static_cast<uint8_t>(value >> (24 - 8 * i));
  return *this;
}

Sense& Sense::CommandSpecific(uint32_t value) {
  for (int i = 0; i < 4; ++i) r_.sense[8 + i] = static_cast<uint8_t>(value >> (24 - 8 * i));
  return *this;
}

Sense& Sense::FieldPointer(bool in_cdb, uint16_t byte, int bit) {
  uint8_t b = 0x80;  // SKSV
  if (in_cdb) b |= 0x40;  // C/D
  if (bit >= 0 && bit <= 7) b |= 0x08 | static_cast<uint8_t>(bit);  // BPV, bit pointer
  r_.sense[15] = b;
  r_.sense[16] = static_cast<uint8_t>(byte >> 8);
  r_.sense[17] = static_cast<uint8_t>(byte);
  return *this;
}

Sense& Sense::SegmentPointer(bool relative_to_segment, uint16_t byte, int bit) {
  uint8_t b = 0x80;
  if (relative_to_segment) b |= 0x20;  // SD
  if (bit >= 0 && bit <= 7) b |= 0x08 | static_cast<uint8_t>(bit);
  r_.sense[15] = b;
  r_.sense[16] = static_cast<uint8_t>(byte >> 8);
  r_.sense[17] = static_cast<uint8_t>(byte);
  return *this;
}

CommandResult Good(uint32_t data_in_length) {
  CommandResult r;
  r.data_in_length = data_in_length;
  return r;
}

CommandResult CheckCondition(SenseKey key, Asc code) { return Sense(key, code); }

CommandResult InvalidFieldInCdb(uint16_t byte, int bit) {
  return Sense(SenseKey::kIllegalRequest, asc::kInvalidFieldInCdb).FieldPointer(true, byte, bit);
}

CommandResult InvalidFieldInParameterList(uint16_t byte, int bit) {
  return Sense(SenseKey::kIllegalRequest, asc::kInvalidFieldInParameterList)
      .FieldPointer(false, byte, bit);
}

CommandResult ParameterListError(Asc code, uint16_t byte, int bit) {
  return Sense(SenseKey::kIllegalRequest, code).FieldPointer(false, byte, bit);
}

CommandResult ParameterListLengthError() {
  return Sense(SenseKey::kIllegalRequest, asc::kParameterListLengthError);
}

CommandResult LbaOutOfRange() { return Sense(SenseKey::kIllegalRequest, asc::kLbaOutOfRange); }

CommandResult InvalidOpcode() {
  return Sense(SenseKey::kIllegalRequest, asc::kInvalidCommandOperationCode)
      .FieldPointer(true, 0, 7);
}

}  // namespace cowstore::scsi
