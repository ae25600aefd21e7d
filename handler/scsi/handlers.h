// SPDX-License-Identifier: Apache-2.0
// Entry points of the command implementations, one file per command family.
// Each receives a Command whose CDB already has the opcode's full length and
// whose NACA bit has been checked; each returns a CommandResult and never
// throws on purpose (Execute still catches).
#pragma once

#include "handler/scsi/command.h"

namespace cowstore::scsi {

// unit_control.cc
CommandResult TestUnitReady(Command& cmd);
CommandResult RequestSense(Command& cmd);
CommandResult StartStopUnit(Command& cmd);
CommandResult PreventAllowMediumRemoval(Command& cmd);
// inquiry.cc (standard data) and vpd_pages.cc
CommandResult Inquiry(Command& cmd);
CommandResult InquiryVpd(Command& cmd, uint8_t page, uint32_t alloc_len);
// report_opcodes.cc
CommandResult ReportSupportedOperationCodes(Command& cmd);
// mode_pages.cc
CommandResult ModeSense(Command& cmd);   // 6 and 10
CommandResult ModeSelect(Command& cmd);  // 6 and 10
// read_capacity.cc
CommandResult ReadCapacity10(Command& cmd);
CommandResult ReadCapacity16(Command& cmd);
// read_write.cc
CommandResult ReadBlocks(Command& cmd);   // READ 6/10/12/16
CommandResult WriteBlocks(Command& cmd);  // WRITE 6/10/12/16
// verify.cc
CommandResult Verify(Command& cmd);          // VERIFY 10/16
CommandResult WriteAndVerify(Command& cmd);  // WRITE AND VERIFY 10/16
// synchronize_cache.cc
CommandResult SynchronizeCache(Command& cmd);  // 10/16
// compare_and_write.cc
CommandResult CompareAndWrite(Command& cmd);
// write_same.cc
CommandResult WriteSame(Command& cmd);  // 10/16
// unmap.cc
CommandResult Unmap(Command& cmd);
// lba_status.cc
CommandResult GetLbaStatus(Command& cmd);
// extended_copy.cc
CommandResult ExtendedCopy(Command& cmd);
// receive_copy_results.cc
CommandResult ReceiveCopyResults(Command& cmd);

}  // namespace cowstore::scsi
