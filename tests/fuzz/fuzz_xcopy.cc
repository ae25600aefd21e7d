// SPDX-License-Identifier: Apache-2.0
// Fuzzes the EXTENDED COPY parameter list: the pure parser, then the whole
// command (CSCD resolution through the directory, segment checks, copies
// between two LUs of one copy group) with the input as parameter list.
// Byte 0 of the input picks whether the real NAAs are patched into the
// first CSCDs, so the fuzzer reaches the copy paths quickly.
#include <algorithm>
#include <cstring>
#include <vector>

#include "handler/scsi/xcopy_parameters.h"
#include "tests/common/cdb_builder.h"
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
      // The identification CSCD's first 24 bytes (type, designator, NAA);
      // the device type specific tail stays the fuzzer's.
      const auto cscd = cowstore::testing::cdb::IdentCscd((i == 0 ? w.lu : w.peer)->naa());
      std::copy_n(cscd.begin(), 24, p.begin() + off);
    }
  }
  const auto cdb = cowstore::testing::cdb::ExtendedCopy(static_cast<uint32_t>(p.size()));
  fuzz::Run(*w.lu, cdb, p.data(), p.size());
  return 0;
}
