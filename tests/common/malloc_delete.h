// SPDX-License-Identifier: Apache-2.0
// The global operator delete pair that matches a test binary's own global
// operator new when that takes its memory from malloc() (tests that count or
// fail allocations). Include it once per binary, in the file that replaces
// operator new, inside its `#if COWSTORE_CAN_REPLACE_NEW()` (sanitizers.h).
#pragma once

#include <cstdlib>
#include <new>

// GCC pairs the free() here with the `new` it inlined a call into, not with
// the replacement, which took the memory from malloc().
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too: the standard's default one calls the replaced
// operator new, but a sanitizer's runtime (ASan) defines its own, whose
// memory our operator delete must not free(). std::inplace_merge and
// std::stable_sort take their buffers from it (get_temporary_buffer) and
// give them back through the plain delete above.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);  // the binary's own: its failure injection counts it
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
