// SPDX-License-Identifier: Apache-2.0
// Whether a buffer holds nothing but zero bytes: a hole kept a hole
// (SparseBytes), a zero block skipped (cowctl image), a one-sync run that a
// punched grain would match (Core::WriteBytesChunk).
#pragma once

#include <cstddef>
#include <cstring>

namespace cowstore::store {

// memcmp against itself shifted by one: stops at the first byte that is
// not zero, so data that is not zeros costs about one comparison.
inline bool AllZero(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  return n == 0 || (p[0] == 0 && std::memcmp(p, p + 1, n - 1) == 0);
}

}  // namespace cowstore::store
