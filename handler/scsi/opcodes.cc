// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/opcodes.h"

#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

constexpr uint8_t F = 0xFF;

// Keep sorted by opcode, then service action (REPORT SUPPORTED OPERATION
// CODES lists them in this order).
constexpr OpcodeInfo kTable[] = {
    {0x00, false, 0, 6, 0, "TEST UNIT READY", TestUnitReady, {0x00, 0, 0, 0, 0, 0}, 10},
    {0x03, false, 0, 6, kNoUnitAttention, "REQUEST SENSE", RequestSense,
     {0x03, 0, 0, 0, F, 0}, 10},
    {0x08, false, 0, 6, 0, "READ(6)", ReadBlocks, {0x08, 0x1F, F, F, F, 0}, 30},
    {0x0A, false, 0, 6, kWritesMedium, "WRITE(6)", WriteBlocks, {0x0A, 0x1F, F, F, F, 0}, 30},
    {0x12, false, 0, 6, kNoUnitAttention, "INQUIRY", Inquiry, {0x12, 0x01, F, F, F, 0}, 10},
    {0x15, false, 0, 6, 0, "MODE SELECT(6)", ModeSelect, {0x15, 0x10, 0, 0, F, 0}, 10},
    {0x1A, false, 0, 6, 0, "MODE SENSE(6)", ModeSense, {0x1A, 0x08, F, F, F, 0}, 10},
    {0x1B, false, 0, 6, 0, "START STOP UNIT", StartStopUnit, {0x1B, 0x01, 0, 0, 0x05, 0}, 10},
    {0x1E, false, 0, 6, 0, "PREVENT ALLOW MEDIUM REMOVAL", PreventAllowMediumRemoval,
     {0x1E, 0, 0, 0, 0x01, 0}, 10},
    {0x25, false, 0, 10, 0, "READ CAPACITY(10)", ReadCapacity10,
     {0x25, 0, F, F, F, F, 0, 0, 0x01, 0}, 10},
    {0x28, false, 0, 10, 0, "READ(10)", ReadBlocks, {0x28, 0x18, F, F, F, F, 0, F, F, 0}, 30},
    {0x2A, false, 0, 10, kWritesMedium, "WRITE(10)", WriteBlocks,
     {0x2A, 0x18, F, F, F, F, 0, F, F, 0}, 30},
    {0x2E, false, 0, 10, kWritesMedium, "WRITE AND VERIFY(10)", WriteAndVerify,
     {0x2E, 0x12, F, F, F, F, 0, F, F, 0}, 30},
    {0x2F, false, 0, 10, 0, "VERIFY(10)", Verify, {0x2F, 0x16, F, F, F, F, 0, F, F, 0}, 30},
    {0x35, false, 0, 10, 0, "SYNCHRONIZE CACHE(10)", SynchronizeCache,
     {0x35, 0x02, F, F, F, F, 0, F, F, 0}, 60},
    {0x41, false, 0, 10, kWritesMedium | kPoolMetadataWork, "WRITE SAME(10)", WriteSame,
     {0x41, 0x08, F, F, F, F, 0, F, F, 0}, 60},
    {0x42, false, 0, 10, kWritesMedium | kPoolMetadataWork, "UNMAP", Unmap, {0x42, 0, 0, 0, 0, 0, 0, F, F, 0}, 60},
    {0x55, false, 0, 10, 0, "MODE SELECT(10)", ModeSelect,
     {0x55, 0x10, 0, 0, 0, 0, 0, F, F, 0}, 10},
    {0x5A, false, 0, 10, 0, "MODE SENSE(10)", ModeSense,
     {0x5A, 0x18, F, F, 0, 0, 0, F, F, 0}, 10},
    {0x83, true, 0x00, 16, kPoolMetadataWork, "EXTENDED COPY(LID1)", ExtendedCopy,
     {0x83, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, F, F, F, F, 0, 0}, 120},
    {0x84, true, 0x00, 16, 0, "RECEIVE COPY RESULTS(COPY STATUS)", ReceiveCopyResults,
     {0x84, 0x00, F, 0, 0, 0, 0, 0, 0, 0, F, F, F, F, 0, 0}, 10},
    {0x84, true, 0x03, 16, 0, "RECEIVE COPY RESULTS(OPERATING PARAMETERS)", ReceiveCopyResults,
     {0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, F, F, F, F, 0, 0}, 10},
    {0x84, true, 0x04, 16, 0, "RECEIVE COPY RESULTS(FAILED SEGMENT DETAILS)", ReceiveCopyResults,
     {0x84, 0x04, F, 0, 0, 0, 0, 0, 0, 0, F, F, F, F, 0, 0}, 10},
    {0x88, false, 0, 16, 0, "READ(16)", ReadBlocks,
     {0x88, 0x18, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 30},
    {0x89, false, 0, 16, kWritesMedium, "COMPARE AND WRITE", CompareAndWrite,
     {0x89, 0x18, F, F, F, F, F, F, F, F, 0, 0, 0, F, 0, 0}, 30},
    {0x8A, false, 0, 16, kWritesMedium, "WRITE(16)", WriteBlocks,
     {0x8A, 0x18, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 30},
    {0x8E, false, 0, 16, kWritesMedium, "WRITE AND VERIFY(16)", WriteAndVerify,
     {0x8E, 0x12, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 30},
    {0x8F, false, 0, 16, 0, "VERIFY(16)", Verify,
     {0x8F, 0x16, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 30},
    {0x91, false, 0, 16, 0, "SYNCHRONIZE CACHE(16)", SynchronizeCache,
     {0x91, 0x02, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 60},
    {0x93, false, 0, 16, kWritesMedium | kPoolMetadataWork, "WRITE SAME(16)", WriteSame,
     {0x93, 0x09, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 60},
    {0x9E, true, 0x10, 16, 0, "READ CAPACITY(16)", ReadCapacity16,
     {0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, F, F, F, F, 0, 0}, 10},
    {0x9E, true, 0x12, 16, 0, "GET LBA STATUS", GetLbaStatus,
     {0x9E, 0x12, F, F, F, F, F, F, F, F, F, F, F, F, 0, 0}, 10},
    {0xA3, true, 0x0C, 12, 0, "REPORT SUPPORTED OPERATION CODES", ReportSupportedOperationCodes,
     {0xA3, 0x0C, 0x87, F, F, F, F, F, F, F, 0, 0}, 10},
    {0xA8, false, 0, 12, 0, "READ(12)", ReadBlocks, {0xA8, 0x18, F, F, F, F, F, F, F, F, 0, 0}, 30},
    {0xAA, false, 0, 12, kWritesMedium, "WRITE(12)", WriteBlocks,
     {0xAA, 0x18, F, F, F, F, F, F, F, F, 0, 0}, 30},
};

}  // namespace

std::span<const OpcodeInfo> OpcodeTable() { return kTable; }

const OpcodeInfo* FindOpcode(uint8_t opcode, uint16_t service_action, bool* opcode_known) {
  bool known = false;
  const OpcodeInfo* found = nullptr;
  for (const OpcodeInfo& e : kTable) {
    if (e.opcode != opcode) continue;
    known = true;
    if (!e.has_service_action || e.service_action == service_action) {
      found = &e;
      break;
    }
  }
  if (opcode_known) *opcode_known = known;
  return found;
}

bool IsPoolMetadataWork(std::span<const uint8_t> cdb) {
  if (cdb.empty()) return false;
  // Dispatch's lookup (LogicalUnit::Execute): the entry that would run it.
  const OpcodeInfo* e = FindOpcode(cdb[0], ServiceActionOf(cdb), nullptr);
  return e != nullptr && (e->flags & kPoolMetadataWork) != 0;
}

bool OpcodeHasServiceActions(uint8_t opcode) {
  for (const OpcodeInfo& e : kTable) {
    if (e.opcode == opcode) return e.has_service_action;
  }
  return false;
}

}  // namespace cowstore::scsi
