// SPDX-License-Identifier: Apache-2.0
// CRC32C (Castagnoli), the checksum of every on-disk metadata structure.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cowstore::store {

// Extends `crc` (0 to start) over `n` bytes.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The CRC of a block that stores its own CRC inside it: all `n` bytes but
// the four at `crc_offset` (so damage anywhere else, padding included, shows).
uint32_t Crc32cAroundField(const void* data, size_t n, size_t crc_offset);

}  // namespace cowstore::store
