// SPDX-License-Identifier: Apache-2.0
// Unpredictable bytes, for what must differ between pools and between
// opens: pool and LUN UUIDs, a new pool's first journal LSN, the LSN gap
// after an open. Never for anything the store must reproduce.
//
// Why one place: the kernel's CSPRNG (getrandom(2)) gives any number of
// bytes in one call without opening a device; a std::random_device built
// per value opened or queried it once per 32 bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cowstore::store {

// Fills [p, p + n) from the kernel's random source. Blocks only until that
// source is first seeded after boot (getrandom(2) without GRND_NONBLOCK),
// which a pool's identity must wait for: an unseeded value could repeat.
void RandomBytes(void* p, size_t n);

uint64_t RandomU64();

}  // namespace cowstore::store
