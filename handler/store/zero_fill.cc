// SPDX-License-Identifier: Apache-2.0
#include "handler/store/zero_fill.h"

#include <algorithm>
#include <vector>

namespace cowstore::store {

Status ZeroFill(File* file, uint64_t off, uint64_t n) {
  if (file->DiscardZeroes()) return file->PunchHole(off, n);
  constexpr uint64_t kPiece = 1 << 20;
  const std::vector<uint8_t> zeros(static_cast<size_t>(std::min(n, kPiece)));
  while (n > 0) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, zeros.size()));
    if (Status s = file->Write(off, k, zeros.data()); !s.ok()) return s;
    off += k;
    n -= k;
  }
  return Status::Ok();
}

}  // namespace cowstore::store
