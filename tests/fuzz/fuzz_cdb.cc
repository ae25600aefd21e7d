// SPDX-License-Identifier: Apache-2.0
// Fuzzes CDB decoding of every command: byte 0 picks the CDB length
// (6..16), the next bytes are the CDB, the rest is the data buffer (data-out,
// or space for data-in). The opcode is mapped onto the implemented ones most
// of the time so the decoders, not the opcode table, get the attention.
// Byte 0's top bit runs the command with its commit deferred, as the
// plugin's asynchronous mode does.
#include <cstring>
#include <vector>

#include "handler/scsi/opcodes.h"
#include "tests/fuzz/fuzz_lu.h"

using namespace cowstore::scsi;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  auto& w = fuzz::World();
  const size_t cdb_len = 6 + data[0] % 11;
  if (size < 1 + cdb_len) return 0;
  std::vector<uint8_t> cdb(data + 1, data + 1 + cdb_len);
  auto table = OpcodeTable();
  if (cdb[0] & 0x80) cdb[0] = table[cdb[0] % table.size()].opcode;
  std::vector<uint8_t> buf(data + 1 + cdb_len, data + size);
  if (buf.size() > (1u << 20)) buf.resize(1u << 20);
  fuzz::Run(*w.lu, cdb, buf.data(), buf.size(), /*deferred=*/(data[0] & 0x80) != 0);
  return 0;
}
