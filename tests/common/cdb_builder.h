// SPDX-License-Identifier: Apache-2.0
// The one place tests build CDBs and SCSI parameter lists (the scsi, plugin
// and fuzz tests all use it): big-endian fields as SBC-3/SPC-4 define them,
// every other byte zero. Header-only and independent of handler/scsi, so the
// plugin tests (which drive the built .so) can use it without linking the
// SCSI layer.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace cowstore::testing::cdb {

using Bytes = std::vector<uint8_t>;

inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
inline void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// Generic shapes: opcode, LBA, transfer length and byte 1 (flags or service
// action) in the places the 6/10/12/16-byte READ/WRITE family puts them.
inline Bytes Cdb6(uint8_t op, uint32_t lba, uint8_t len, uint8_t byte1 = 0) {
  Bytes c(6, 0);
  c[0] = op;
  c[1] = static_cast<uint8_t>(byte1 | ((lba >> 16) & 0x1F));
  c[2] = static_cast<uint8_t>(lba >> 8);
  c[3] = static_cast<uint8_t>(lba);
  c[4] = len;
  return c;
}
inline Bytes Cdb10(uint8_t op, uint32_t lba, uint16_t len, uint8_t byte1 = 0) {
  Bytes c(10, 0);
  c[0] = op;
  c[1] = byte1;
  Put32(&c[2], lba);
  Put16(&c[7], len);
  return c;
}
inline Bytes Cdb12(uint8_t op, uint32_t lba, uint32_t len, uint8_t byte1 = 0) {
  Bytes c(12, 0);
  c[0] = op;
  c[1] = byte1;
  Put32(&c[2], lba);
  Put32(&c[6], len);
  return c;
}
inline Bytes Cdb16(uint8_t op, uint64_t lba, uint32_t len, uint8_t byte1 = 0) {
  Bytes c(16, 0);
  c[0] = op;
  c[1] = byte1;
  Put64(&c[2], lba);
  Put32(&c[10], len);
  return c;
}

// Reads and writes (flags = byte 1: DPO/FUA/protection bits).
inline Bytes Read6(uint32_t lba, uint8_t blocks) { return Cdb6(0x08, lba, blocks); }
inline Bytes Write6(uint32_t lba, uint8_t blocks) { return Cdb6(0x0A, lba, blocks); }
inline Bytes Read10(uint32_t lba, uint16_t blocks, uint8_t flags = 0) { return Cdb10(0x28, lba, blocks, flags); }
inline Bytes Write10(uint32_t lba, uint16_t blocks, uint8_t flags = 0) { return Cdb10(0x2A, lba, blocks, flags); }
inline Bytes Read12(uint32_t lba, uint32_t blocks) { return Cdb12(0xA8, lba, blocks); }
inline Bytes Write12(uint32_t lba, uint32_t blocks) { return Cdb12(0xAA, lba, blocks); }
inline Bytes Read16(uint64_t lba, uint32_t blocks, uint8_t flags = 0) { return Cdb16(0x88, lba, blocks, flags); }
inline Bytes Write16(uint64_t lba, uint32_t blocks, uint8_t flags = 0) { return Cdb16(0x8A, lba, blocks, flags); }
inline Bytes Verify16(uint64_t lba, uint32_t blocks, uint8_t bytchk) {
  return Cdb16(0x8F, lba, blocks, static_cast<uint8_t>((bytchk & 3) << 1));
}
inline Bytes WriteAndVerify16(uint64_t lba, uint32_t blocks) { return Cdb16(0x8E, lba, blocks, 0x02); }
// flags: 0x08 UNMAP, 0x01 NDOB (SBC-4).
inline Bytes WriteSame10(uint32_t lba, uint16_t blocks, uint8_t flags = 0) { return Cdb10(0x41, lba, blocks, flags); }
inline Bytes WriteSame16(uint64_t lba, uint32_t blocks, uint8_t flags = 0) { return Cdb16(0x93, lba, blocks, flags); }
inline Bytes SyncCache10() { return Cdb10(0x35, 0, 0); }
inline Bytes SyncCache16() { return Cdb16(0x91, 0, 0); }

// COMPARE AND WRITE: NUMBER OF LOGICAL BLOCKS is byte 13.
inline Bytes CompareAndWrite(uint64_t lba, uint8_t blocks, uint8_t flags = 0) {
  Bytes c = Cdb16(0x89, lba, 0, flags);
  c[13] = blocks;
  return c;
}

// UNMAP and its parameter list: {lba, blocks} block descriptors.
inline Bytes Unmap(uint16_t param_len, bool anchor = false) {
  Bytes c = Cdb10(0x42, 0, param_len);
  c[1] = anchor ? 1 : 0;
  return c;
}
inline Bytes UnmapParams(const std::vector<std::pair<uint64_t, uint32_t>>& ranges) {
  Bytes p(8 + 16 * ranges.size(), 0);
  Put16(&p[0], static_cast<uint16_t>(p.size() - 2));
  Put16(&p[2], static_cast<uint16_t>(16 * ranges.size()));
  for (size_t i = 0; i < ranges.size(); ++i) {
    Put64(&p[8 + 16 * i], ranges[i].first);
    Put32(&p[8 + 16 * i + 8], ranges[i].second);
  }
  return p;
}

// SERVICE ACTION IN(16): READ CAPACITY(16) and GET LBA STATUS.
inline Bytes ReadCapacity16(uint32_t alloc = 32) { return Cdb16(0x9E, 0, alloc, 0x10); }
inline Bytes GetLbaStatus(uint64_t lba, uint32_t alloc) { return Cdb16(0x9E, lba, alloc, 0x12); }
inline Bytes ReadCapacity10() { return Cdb10(0x25, 0, 0); }

// SPC commands.
inline Bytes Tur() { return Bytes(6, 0); }
inline Bytes Inquiry(bool evpd, uint8_t page, uint16_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x12;
  c[1] = evpd ? 1 : 0;
  c[2] = page;
  Put16(&c[3], alloc);
  return c;
}
inline Bytes RequestSense(uint8_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x03;
  c[4] = alloc;
  return c;
}
inline Bytes ModeSense6(uint8_t page, uint8_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x1A;
  c[2] = page;
  c[4] = alloc;
  return c;
}
inline Bytes ModeSense10(uint8_t page, uint16_t alloc) {
  Bytes c(10, 0);
  c[0] = 0x5A;
  c[2] = page;
  Put16(&c[7], alloc);
  return c;
}
inline Bytes StartStopUnit(bool start) {
  Bytes c(6, 0);
  c[0] = 0x1B;
  c[4] = start ? 1 : 0;
  return c;
}
inline Bytes PreventAllow(bool prevent) {
  Bytes c(6, 0);
  c[0] = 0x1E;
  c[4] = prevent ? 1 : 0;
  return c;
}
// REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN, all commands).
inline Bytes ReportOpcodes(uint32_t alloc) {
  Bytes c(12, 0);
  c[0] = 0xA3;
  c[1] = 0x0C;
  Put32(&c[6], alloc);
  return c;
}

// EXTENDED COPY (LID1) and RECEIVE COPY RESULTS.
inline Bytes ExtendedCopy(uint32_t param_len) { return Cdb16(0x83, 0, param_len); }
inline Bytes ReceiveCopyResults(uint8_t service_action, uint8_t list_id, uint32_t alloc) {
  Bytes c = Cdb16(0x84, 0, alloc, service_action);
  c[2] = list_id;
  return c;
}

// Identification CSCD descriptor (0xE4) naming a LU by its 16-byte NAA
// designator, with the disk block length.
inline Bytes IdentCscd(std::span<const uint8_t> naa, uint32_t block_length = 512) {
  Bytes d(32, 0);
  d[0] = 0xE4;
  d[4] = 0x01;  // binary
  d[5] = 0x03;  // LU association, NAA
  d[7] = 16;
  std::copy_n(naa.begin(), std::min<size_t>(16, naa.size()), d.begin() + 8);
  d[29] = static_cast<uint8_t>(block_length >> 16);
  d[30] = static_cast<uint8_t>(block_length >> 8);
  d[31] = static_cast<uint8_t>(block_length);
  return d;
}
// Block-to-block segment descriptor (0x02).
inline Bytes BlockSegment(uint16_t src, uint16_t dst, uint16_t blocks, uint64_t src_lba,
                          uint64_t dst_lba) {
  Bytes d(28, 0);
  d[0] = 0x02;
  Put16(&d[2], 0x18);
  Put16(&d[4], src);
  Put16(&d[6], dst);
  Put16(&d[10], blocks);
  Put64(&d[12], src_lba);
  Put64(&d[20], dst_lba);
  return d;
}
// The LID1 parameter list: header, CSCD descriptors, segment descriptors.
struct XcopyList {
  uint8_t list_id = 0;
  uint8_t list_id_usage = 3;  // 11b: no list ID
  std::vector<Bytes> cscds;
  std::vector<Bytes> segments;
  Bytes Build() const {
    Bytes p(16, 0);
    p[0] = list_id;
    p[1] = static_cast<uint8_t>((list_id_usage & 3) << 3);
    size_t cl = 0, sl = 0;
    for (const Bytes& c : cscds) cl += c.size();
    for (const Bytes& s : segments) sl += s.size();
    Put16(&p[2], static_cast<uint16_t>(cl));
    Put32(&p[8], static_cast<uint32_t>(sl));
    for (const Bytes& c : cscds) p.insert(p.end(), c.begin(), c.end());
    for (const Bytes& s : segments) p.insert(p.end(), s.begin(), s.end());
    return p;
  }
};

}  // namespace cowstore::testing::cdb
