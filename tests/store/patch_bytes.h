// SPDX-License-Identifier: Apache-2.0
// Overwrites a little-endian field of an encoded on-disk block in place, as
// damage (or a writer with a bug) would: the codec tests change one field of
// a valid page or superblock and check that the decoder names it. ResealCrc
// then makes a CRC match the damaged contents again, as a writer with a bug
// or a misdirected write would leave it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "handler/store/crc32c.h"
#include "handler/store/meta.h"  // Encoder: the encoding every codec writes with

namespace cowstore::store {

inline void Put32(std::string* block, size_t off, uint32_t v) {
  std::string b;
  Encoder(&b).U32(v);
  block->replace(off, 4, b);
}

inline void Put64(std::string* block, size_t off, uint64_t v) {
  std::string b;
  Encoder(&b).U64(v);
  block->replace(off, 8, b);
}

// Rewrites the CRC at `crc_offset` over the whole block but itself.
inline void ResealCrc(std::string* block, size_t crc_offset) {
  Put32(block, crc_offset, Crc32cAroundField(block->data(), block->size(), crc_offset));
}

}  // namespace cowstore::store
