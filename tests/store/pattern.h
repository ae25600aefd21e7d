// SPDX-License-Identifier: Apache-2.0
// Test data for the store's tests: `Pattern(n, seed)` fills n bytes so
// that every 8-byte word depends on the seed and on its place in the
// buffer. A read that returns the right bytes from the wrong place (a
// block from elsewhere in the same write, or another seed's) never
// compares equal.
//
// Why one helper: eight test files had their own formulas (seed + 7i +
// i/512 and the like), each of which repeats every 128 or 256 KiB, so data
// misplaced by a multiple of that inside a large write read back "right".
// A pattern of whole 4 KiB zero blocks never occurs either (a run of 512
// zero words has probability 2^-32768): all-zero writes are mapped as
// holes (all_zero.h), and a pattern that made one would test another path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace cowstore::store::testing {

// SplitMix64's finalizer: a bijection of 64-bit words, each output bit
// depending on every input bit.
inline uint64_t MixWord(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline std::vector<uint8_t> Pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  const uint64_t base = MixWord(seed + 0x9e3779b97f4a7c15ULL);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = MixWord(base + i / 8);
    std::memcpy(v.data() + i, &w, n - i < 8 ? n - i : 8);
  }
  return v;
}

}  // namespace cowstore::store::testing
