// SPDX-License-Identifier: Apache-2.0
// INQUIRY vital product data pages: 00 supported pages, 80 unit serial,
// 83 device identification (NAA type 6 + T10 vendor ID), 8F third-party
// copy, B0 block limits, B1 block device characteristics, B2 logical block
// provisioning (thin).
#include <algorithm>
#include <cstring>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

constexpr uint8_t kPages[] = {0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2};

// Page header: device type, page code, 16-bit page length (set by Finish).
std::vector<uint8_t> Start(uint8_t page) { return std::vector<uint8_t>{0x00, page, 0, 0}; }
void Finish(std::vector<uint8_t>& d) { PutBe16(d.data() + 2, static_cast<uint16_t>(d.size() - 4)); }

void Append(std::vector<uint8_t>& d, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  d.insert(d.end(), b, b + n);
}
void Append16(std::vector<uint8_t>& d, uint16_t v) {
  uint8_t b[2];
  PutBe16(b, v);
  Append(d, b, 2);
}
void Append32(std::vector<uint8_t>& d, uint32_t v) {
  uint8_t b[4];
  PutBe32(b, v);
  Append(d, b, 4);
}
void PadTo4(std::vector<uint8_t>& d, size_t from) {
  while ((d.size() - from) % 4) d.push_back(0);
}

std::vector<uint8_t> SupportedPages() {
  auto d = Start(0x00);
  Append(d, kPages, sizeof(kPages));
  Finish(d);
  return d;
}

std::vector<uint8_t> UnitSerial(const LogicalUnit& lu) {
  auto d = Start(0x80);
  const std::string& s = lu.config().unit_serial;
  for (char c : s.substr(0, 250)) d.push_back((c >= 0x20 && c <= 0x7E) ? c : '_');
  Finish(d);
  return d;
}

std::vector<uint8_t> DeviceIdentification(const LogicalUnit& lu) {
  auto d = Start(0x83);
  // NAA type 6, binary, associated with the logical unit.
  d.insert(d.end(), {0x01, 0x03, 0x00, 0x10});
  Append(d, lu.naa().data(), lu.naa().size());
  // T10 vendor ID based: vendor (8 bytes) + unit serial, ASCII.
  std::string id(8, ' ');
  const std::string& vendor = lu.config().vendor;
  std::copy_n(vendor.begin(), std::min<size_t>(8, vendor.size()), id.begin());
  id += lu.config().unit_serial.substr(0, 200);
  for (char& ch : id) {
    if (ch < 0x20 || ch > 0x7E) ch = '_';
  }
  d.insert(d.end(), {0x02, 0x01, 0x00, static_cast<uint8_t>(id.size())});
  Append(d, id.data(), id.size());
  Finish(d);
  return d;
}

std::vector<uint8_t> ThirdPartyCopy(const LogicalUnit& lu) {
  const Limits l = lu.limits();
  auto d = Start(0x8F);
  // Supported Commands descriptor (0x0001).
  {
    size_t at = d.size();
    Append16(d, 0x0001);
    Append16(d, 0);
    const uint8_t list[] = {0x83, 1, 0x00,               // EXTENDED COPY (LID1)
                            0x84, 3, 0x00, 0x03, 0x04};  // RECEIVE COPY RESULTS
    d.push_back(sizeof(list));
    Append(d, list, sizeof(list));
    PadTo4(d, at);
    PutBe16(d.data() + at + 2, static_cast<uint16_t>(d.size() - at - 4));
  }
  // Parameter Data descriptor (0x0004).
  {
    size_t at = d.size();
    Append16(d, 0x0004);
    Append16(d, 0x001C);
    Append32(d, 0);  // reserved (SPC-4: bytes 4..7)
    Append16(d, l.max_cscd_descriptors);
    Append16(d, l.max_segment_descriptors);
    Append32(d, l.max_descriptor_list_length);
    Append32(d, 0);  // MAXIMUM INLINE DATA LENGTH
    d.resize(at + 4 + 0x1C, 0);
  }
  // Supported Descriptors descriptor (0x0008): block->block, identification.
  {
    size_t at = d.size();
    Append16(d, 0x0008);
    Append16(d, 0);
    const uint8_t list[] = {0x02, 0xE4};
    d.push_back(sizeof(list));
    Append(d, list, sizeof(list));
    PadTo4(d, at);
    PutBe16(d.data() + at + 2, static_cast<uint16_t>(d.size() - at - 4));
  }
  // Supported CSCD Descriptor IDs descriptor (0x000C): none.
  {
    Append16(d, 0x000C);
    Append16(d, 4);
    Append16(d, 0);
    Append16(d, 0);
  }
  // General Copy Operations descriptor (0x8001).
  {
    size_t at = d.size();
    Append16(d, 0x8001);
    Append16(d, 0x0020);
    Append32(d, 0xFFFF);  // TOTAL CONCURRENT COPIES
    Append32(d, 0xFF);    // MAXIMUM IDENTIFIED CONCURRENT COPIES
    Append32(d, l.max_segment_bytes);
    d.push_back(static_cast<uint8_t>(__builtin_ctz(l.block_size)));  // DATA SEGMENT GRANULARITY
    d.push_back(0);  // INLINE DATA GRANULARITY
    d.resize(at + 4 + 0x20, 0);
  }
  Finish(d);
  return d;
}

std::vector<uint8_t> BlockLimits(const LogicalUnit& lu) {
  const Limits l = lu.limits();
  std::vector<uint8_t> d(64, 0);
  d[1] = 0xB0;
  PutBe16(&d[2], 0x3C);
  d[4] = 0x01;  // WSNZ: WRITE SAME with 0 blocks is rejected
  d[5] = static_cast<uint8_t>(l.max_compare_and_write_blocks);
  PutBe16(&d[6], 1);  // OPTIMAL TRANSFER LENGTH GRANULARITY
  PutBe32(&d[8], l.max_transfer_blocks);
  PutBe32(&d[12], std::min(l.optimal_transfer_blocks, l.max_transfer_blocks));
  PutBe32(&d[20], l.max_unmap_blocks);
  PutBe32(&d[24], l.max_unmap_descriptors);
  PutBe32(&d[28], l.unmap_granularity_blocks);
  PutBe32(&d[32], 0x80000000u);  // UGAVALID, alignment 0
  PutBe64(&d[36], l.max_write_same_blocks);
  return d;
}

std::vector<uint8_t> BlockDeviceCharacteristics() {
  std::vector<uint8_t> d(64, 0);
  d[1] = 0xB1;
  PutBe16(&d[2], 0x3C);
  PutBe16(&d[4], 0x0001);  // MEDIUM ROTATION RATE: non-rotating
  return d;
}

std::vector<uint8_t> LogicalBlockProvisioning() {
  std::vector<uint8_t> d(8, 0);
  d[1] = 0xB2;
  PutBe16(&d[2], 4);
  d[4] = 0;     // THRESHOLD EXPONENT: no threshold sets reported
  d[5] = 0x80 | 0x40 | 0x20 | 0x04;  // LBPU, LBPWS, LBPWS10, LBPRZ (001b)
  d[6] = 0x02;  // PROVISIONING TYPE: thin
  return d;
}

}  // namespace

CommandResult InquiryVpd(Command& cmd, uint8_t page, uint32_t alloc_len) {
  std::vector<uint8_t> d;
  switch (page) {
    case 0x00: d = SupportedPages(); break;
    case 0x80: d = UnitSerial(cmd.lu); break;
    case 0x83: d = DeviceIdentification(cmd.lu); break;
    case 0x8F: d = ThirdPartyCopy(cmd.lu); break;
    case 0xB0: d = BlockLimits(cmd.lu); break;
    case 0xB1: d = BlockDeviceCharacteristics(); break;
    case 0xB2: d = LogicalBlockProvisioning(); break;
    default: return InvalidFieldInCdb(2);
  }
  return cmd.ReturnData(d.data(), d.size(), alloc_len);
}

}  // namespace cowstore::scsi
