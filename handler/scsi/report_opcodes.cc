// SPDX-License-Identifier: Apache-2.0
// REPORT SUPPORTED OPERATION CODES (SPC-4 6.35): generated from the opcode
// table, so it lists exactly the commands Execute() implements.
#include <cstring>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"
#include "handler/scsi/opcodes.h"

namespace cowstore::scsi {

namespace {

void AppendTimeouts(std::vector<uint8_t>& d, const OpcodeInfo& e) {
  uint8_t t[12] = {};
  PutBe16(t, 0x000A);
  PutBe32(t + 8, e.recommended_timeout_s);
  d.insert(d.end(), t, t + sizeof(t));
}

// One-command format (reporting options 001b..011b).
std::vector<uint8_t> OneCommand(const OpcodeInfo* e, bool rctd) {
  if (!e) {
    std::vector<uint8_t> d(4, 0);
    d[1] = 0x01;  // SUPPORT: not supported
    return d;
  }
  std::vector<uint8_t> d(4 + size_t{e->cdb_length}, 0);
  d[1] = 0x03 | (rctd ? 0x80 : 0);  // CTDP, SUPPORT: supported as in the standard
  PutBe16(d.data() + 2, e->cdb_length);
  std::memcpy(d.data() + 4, e->usage.data(), e->cdb_length);
  if (rctd) AppendTimeouts(d, *e);
  return d;
}

}  // namespace

CommandResult ReportSupportedOperationCodes(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const bool rctd = c[2] & 0x80;
  const uint8_t options = c[2] & 0x07;
  const uint8_t req_op = c[3];
  const uint16_t req_sa = Be16(c + 4);
  const uint32_t alloc_len = Be32(c + 6);
  std::vector<uint8_t> d;
  switch (options) {
    case 0: {  // all commands
      d.resize(4, 0);
      for (const OpcodeInfo& e : OpcodeTable()) {
        uint8_t desc[8] = {};
        desc[0] = e.opcode;
        PutBe16(desc + 2, e.has_service_action ? e.service_action : 0);
        desc[5] = (e.has_service_action ? 0x01 : 0) | (rctd ? 0x02 : 0);  // SERVACTV, CTDP
        PutBe16(desc + 6, e.cdb_length);
        d.insert(d.end(), desc, desc + sizeof(desc));
        if (rctd) AppendTimeouts(d, e);
      }
      PutBe32(d.data(), static_cast<uint32_t>(d.size() - 4));
      break;
    }
    case 1: {  // opcode without service action
      if (OpcodeHasServiceActions(req_op)) return InvalidFieldInCdb(2, 2);
      d = OneCommand(FindOpcode(req_op, 0, nullptr), rctd);
      break;
    }
    case 2: {  // opcode + service action
      bool known = false;
      const OpcodeInfo* e = FindOpcode(req_op, req_sa, &known);
      if (known && !OpcodeHasServiceActions(req_op)) return InvalidFieldInCdb(2, 2);
      d = OneCommand(e, rctd);
      break;
    }
    case 3: {  // opcode, with service action if it has one
      const OpcodeInfo* e =
          OpcodeHasServiceActions(req_op) ? FindOpcode(req_op, req_sa, nullptr)
                                          : FindOpcode(req_op, 0, nullptr);
      d = OneCommand(e, rctd);
      break;
    }
    default:
      return InvalidFieldInCdb(2, 2);
  }
  return cmd.ReturnData(d.data(), d.size(), alloc_len);
}

}  // namespace cowstore::scsi
