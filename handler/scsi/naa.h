// SPDX-License-Identifier: Apache-2.0
// The LUN's NAA type 6 designator (VPD 0x83), derived from the unit serial
// number (the WWN as configfs shows it in wwn/vpd_unit_serial) with the same
// scheme as the Linux target and tcmu-runner's own VPD 0x83 emulation, so an
// initiator sees one identity whichever component answers:
//
//   byte 0      0x60   NAA 6 (IEEE Registered Extended), COMPANY_ID bits
//   bytes 1-2   0x01 0x40
//   byte 3      0x50 | first hex digit       COMPANY_ID 0x001405 (OpenFabrics)
//   bytes 4-15  the next 24 hex digits, two per byte, high nibble first
//
// Only hexadecimal digits of the serial are used (dashes and other characters
// are skipped; case-insensitive); missing digits leave zeros. A UUID-shaped
// serial "f3b0c2a4-1d2e-..." therefore yields 60 01 40 5f 3b 0c 2a 41 d2 e...
// Two serials that agree in their first 25 hex digits give the same NAA:
// clones must get fresh serials (LunDirectory refuses ambiguous NAAs).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace cowstore::scsi {

using Naa = std::array<uint8_t, 16>;

Naa NaaFromUnitSerial(std::string_view unit_serial);

}  // namespace cowstore::scsi
