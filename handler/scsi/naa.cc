// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/naa.h"

namespace cowstore::scsi {

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Naa NaaFromUnitSerial(std::string_view unit_serial) {
  Naa naa{};
  naa[0] = 0x60;  // NAA 6, COMPANY_ID 0x001405 follows
  naa[1] = 0x01;
  naa[2] = 0x40;
  naa[3] = 0x50;
  // 25 nibbles: the low nibble of byte 3, then bytes 4..15.
  size_t nibble = 7;  // index in nibbles from the start of naa
  for (char c : unit_serial) {
    if (nibble >= 32) break;
    int v = HexValue(c);
    if (v < 0) continue;
    uint8_t& byte = naa[nibble / 2];
    if (nibble % 2 == 0) {
      byte = static_cast<uint8_t>(v << 4);
    } else {
      byte = static_cast<uint8_t>(byte | v);
    }
    ++nibble;
  }
  return naa;
}

}  // namespace cowstore::scsi
