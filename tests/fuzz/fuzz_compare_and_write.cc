// SPDX-License-Identifier: Apache-2.0
// Fuzzes COMPARE AND WRITE: byte 0 = flags (byte 1 of the CDB, and bits
// 2/6 steer the harness), byte 1 =
// NUMBER OF LOGICAL BLOCKS, bytes 2-3 = LBA (small, so it lands inside the
// LUN), the rest is the verify+write buffer. Checks that a GOOD result really
// wrote the write half, and that a MISCOMPARE's INFORMATION points at a
// differing byte.
#include <cstring>
#include <vector>

#include "tests/common/cdb_builder.h"
#include "tests/fuzz/fuzz_lu.h"

using namespace cowstore::scsi;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  auto& w = fuzz::World();
  namespace cdb = cowstore::testing::cdb;
  const uint8_t blocks = data[1] % 8;
  const uint64_t lba = (uint64_t{data[2]} << 8 | data[3]) % 20000;
  const auto caw = cdb::CompareAndWrite(lba, blocks, data[0]);
  std::vector<uint8_t> buf(data + 4, data + size);
  const size_t half = size_t{blocks} * 512;
  // Mostly give the buffer the size the CDB implies (pattern repeated), so
  // the compare/write paths run; with bit 6 keep the raw (usually wrong) size.
  if (!(data[0] & 0x40) && !buf.empty()) {
    std::vector<uint8_t> sized(2 * half);
    for (size_t i = 0; i < sized.size(); ++i) sized[i] = buf[i % buf.size()];
    buf.swap(sized);
  }
  // Half the time, make the compare half match what is on the LUN.
  if ((data[0] & 0x04) && buf.size() == 2 * half && half) {
    iovec v{buf.data(), half};
    const auto rd = cdb::Read16(lba, blocks);
    if (!w.lu->Execute(rd, std::span<const iovec>(&v, 1)).good()) return 0;
  }
  std::vector<uint8_t> copy = buf;
  CommandResult r = fuzz::Run(*w.lu, caw, buf.data(), buf.size());
  if (r.good() && half && buf.size() == 2 * half) {
    std::vector<uint8_t> now(half);
    iovec v{now.data(), half};
    const auto rd = cdb::Read16(lba, blocks);
    if (w.lu->Execute(rd, std::span<const iovec>(&v, 1)).good() &&
        std::memcmp(now.data(), copy.data() + half, half) != 0) {
      std::abort();  // GOOD but the write half is not there
    }
  }
  if (r.sense_key() == SenseKey::kMiscompare && r.status == ScsiStatus::kCheckCondition) {
    if (!r.information_valid() || r.information() >= half) std::abort();
  }
  return 0;
}
