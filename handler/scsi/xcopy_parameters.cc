// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/xcopy_parameters.h"

#include <algorithm>

#include "handler/scsi/cdb.h"
#include "handler/scsi/sense.h"

namespace cowstore::scsi {

namespace {
constexpr size_t kHeader = 16;
constexpr size_t kCscdLength = 32;
constexpr size_t kSegment02Length = 28;
}  // namespace

CommandResult ParseXcopyParameters(std::span<const uint8_t> p, const Limits& limits,
                                   XcopyParameters* out) {
  if (p.size() < kHeader) return ParameterListLengthError();
  XcopyParameters x;
  x.list_id = p[0];
  x.list_id_usage = (p[1] >> 3) & 0x03;
  if (x.list_id_usage == 0x01) return InvalidFieldInParameterList(1, 4);
  const uint64_t cscd_len = Be16(&p[2]);
  const uint64_t seg_len = Be32(&p[8]);
  const uint64_t inline_len = Be32(&p[12]);
  if (cscd_len + seg_len > limits.max_descriptor_list_length) return ParameterListLengthError();
  if (kHeader + cscd_len + seg_len + inline_len > p.size()) return ParameterListLengthError();
  if (inline_len != 0) return InvalidFieldInParameterList(12);  // MAXIMUM INLINE DATA LENGTH 0
  if (cscd_len % kCscdLength != 0) return InvalidFieldInParameterList(2);
  if (cscd_len / kCscdLength > limits.max_cscd_descriptors) {
    return ParameterListError(asc::kTooManyTargetDescriptors, 2);
  }

  for (size_t off = kHeader; off < kHeader + cscd_len; off += kCscdLength) {
    const uint8_t* d = &p[off];
    const auto o = static_cast<uint16_t>(off);
    if (d[0] != 0xE4) return ParameterListError(asc::kUnsupportedTargetDescriptorTypeCode, o);
    // Byte 1: LU ID TYPE (ignored, SPC-4), NUL (obsolete), PERIPHERAL DEVICE TYPE.
    if ((d[1] & 0x1F) != 0x00) return InvalidFieldInParameterList(static_cast<uint16_t>(o + 1), 4);
    const uint8_t designator_length = d[7];
    if (designator_length > 20) return InvalidFieldInParameterList(static_cast<uint16_t>(o + 7));
    XcopyCscd c;
    c.offset = o;
    c.naa_designator = (d[4] & 0x0F) == 0x01 && ((d[5] >> 4) & 0x03) == 0 &&
                       (d[5] & 0x0F) == 0x03 && designator_length == 16 && (d[8] >> 4) == 0x6;
    std::copy_n(d + 8, c.naa.size(), c.naa.begin());
    c.disk_block_length = Be24(d + 29);
    x.cscds.push_back(c);
  }

  const size_t seg_begin = kHeader + cscd_len;
  const size_t seg_end = seg_begin + seg_len;
  for (size_t off = seg_begin; off < seg_end;) {
    const auto o = static_cast<uint16_t>(off);
    if (seg_end - off < 4) return ParameterListLengthError();
    const uint8_t* d = &p[off];
    const size_t total = 4 + size_t{Be16(d + 2)};
    if (d[0] != 0x02) return ParameterListError(asc::kUnsupportedSegmentDescriptorTypeCode, o);
    if (total != kSegment02Length) return InvalidFieldInParameterList(static_cast<uint16_t>(o + 2));
    if (off + total > seg_end) return ParameterListLengthError();
    if (x.segments.size() == limits.max_segment_descriptors) {
      return ParameterListError(asc::kTooManySegmentDescriptors, 8);
    }
    XcopySegment s;
    s.offset = o;
    s.source = Be16(d + 4);
    s.destination = Be16(d + 6);
    s.blocks = Be16(d + 10);
    s.source_lba = Be64(d + 12);
    s.destination_lba = Be64(d + 20);
    x.segments.push_back(s);
    off += total;
  }
  *out = std::move(x);
  return Good();
}

}  // namespace cowstore::scsi
