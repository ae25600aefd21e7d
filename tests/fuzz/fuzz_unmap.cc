// SPDX-License-Identifier: Apache-2.0
// Fuzzes the UNMAP parameter list (and its PARAMETER LIST LENGTH / ANCHOR
// fields from the first bytes of the input).
#include <vector>

#include "handler/scsi/cdb.h"
#include "tests/common/cdb_builder.h"
#include "tests/fuzz/fuzz_lu.h"

using namespace cowstore::scsi;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  auto& w = fuzz::World();
  std::vector<uint8_t> p(data + 3, data + size);
  // With bit 2, fold every descriptor into the LUN so ranges get unmapped,
  // not just rejected as out of range.
  if ((data[0] & 0x04) && p.size() >= 8) {
    const uint64_t blocks = w.lu->lun().block_count();
    for (size_t off = 8; off + 16 <= p.size(); off += 16) {
      const uint64_t lba = Be64(&p[off]) % blocks;
      const uint32_t n = static_cast<uint32_t>(Be32(&p[off + 8]) % (blocks - lba + 1));
      PutBe64(&p[off], lba);
      PutBe32(&p[off + 8], n);
    }
  }
  // ANCHOR from bit 0. Usually the true length; sometimes a lying one.
  uint16_t pll = (data[0] & 0x02) ? static_cast<uint16_t>(data[1] << 8 | data[2])
                                  : static_cast<uint16_t>(p.size());
  const auto cdb = cowstore::testing::cdb::Unmap(pll, data[0] & 0x01);
  fuzz::Run(*w.lu, cdb, p.data(), p.size());
  return 0;
}
