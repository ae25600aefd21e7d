// SPDX-License-Identifier: Apache-2.0
// Fuzzes the EXTENDED COPY parameter list: the pure parser, then the whole
// command (CSCD resolution through the directory, segment checks, copies
// between two LUs of one copy group) with the input as parameter list.
// Byte 0 of the input picks whether the real NAAs are patched into the
// first CSCDs, so the fuzzer reaches the copy paths quickly.
#include <cstring>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/xcopy_parameters.h"
#include "tests/fuzz/fuzz_lu.h"

using namespace cowstore::scsi;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto& w = fuzz::World();
  std::vector<uint8_t> p(data + 1, data + size);
  XcopyParameters x;
  CommandResult parsed = ParseXcopyParameters(p, w.lu->limits(), &x);
  fuzz::CheckResult(parsed, 0);
  if (parsed.good()) {
    for (const XcopySegment& s : x.segments) {
      if (s.offset + 28u > p.size()) std::abort();
    }
  }
  if (data[0] & 1) {
    // Name the real LUs in up to two CSCDs.
    for (size_t i = 0; i < 2; ++i) {
      size_t off = 16 + 32 * i;
      if (p.size() < off + 24) break;
      const Naa& naa = (i == 0 ? w.lu : w.peer)->naa();
      p[off] = 0xE4;
      p[off + 4] = 0x01;
      p[off + 5] = 0x03;
      p[off + 7] = 16;
      std::memcpy(&p[off + 8], naa.data(), naa.size());
    }
  }
  uint8_t cdb[16] = {0x83};
  PutBe32(cdb + 10, static_cast<uint32_t>(p.size()));
  fuzz::Run(*w.lu, cdb, p.data(), p.size());
  return 0;
}
