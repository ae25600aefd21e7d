// SPDX-License-Identifier: Apache-2.0
// TEST UNIT READY, REQUEST SENSE, START STOP UNIT, PREVENT ALLOW MEDIUM
// REMOVAL. The LU is a non-removable disk that is always ready.
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult TestUnitReady(Command&) { return Good(); }

CommandResult RequestSense(Command& cmd) {
  if (cmd.cdb[1] & 0x01) return InvalidFieldInCdb(1, 0);  // DESC: descriptor format unsupported
  const uint8_t alloc_len = cmd.cdb[4];
  CommandResult sense = CheckCondition(SenseKey::kNoSense, asc::kNoAdditionalSense);
  UnitAttention ua;
  if (cmd.lu.TakeUnitAttention(&ua)) sense = UnitAttentionResult(ua);
  return cmd.ReturnData(sense.sense.data(), sense.sense_length, alloc_len);
}

CommandResult StartStopUnit(Command& cmd) {
  const uint8_t b4 = cmd.cdb[4];
  if (b4 & 0xF0) return InvalidFieldInCdb(4, 7);  // POWER CONDITION: none supported
  if (cmd.cdb[3] & 0x0F) return InvalidFieldInCdb(3, 3);  // POWER CONDITION MODIFIER
  if (b4 & 0x02) return InvalidFieldInCdb(4, 1);  // LOEJ: no removable medium
  // START=0 is accepted and changes nothing: a virtual disk never spins
  // down, and refusing media access after a guest's shutdown STOP would
  // only break the next boot.
  return Good();
}

CommandResult PreventAllowMediumRemoval(Command& cmd) {
  const uint8_t prevent = cmd.cdb[4] & 0x03;
  if (prevent > 1) return InvalidFieldInCdb(4, 1);  // 10b/11b: obsolete/reserved in SBC
  cmd.lu.set_prevent_removal(prevent == 1);
  return Good();
}

}  // namespace cowstore::scsi
