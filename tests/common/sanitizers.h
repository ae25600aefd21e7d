// SPDX-License-Identifier: Apache-2.0
// Which sanitizer a test is built with, decided once for every test. Written
// out in each test, the check drifted: GCC says so with __SANITIZE_ADDRESS__
// and __SANITIZE_THREAD__, Clang with __has_feature(...), and a test that
// asks only one of them (or forgets TSan) silently does the wrong thing under
// the other compiler or sanitizer.
//
// Tests need to know for three reasons:
// - a sanitizer replaces malloc, so mallinfo2 no longer counts the heap
//   (a RAM figure is not measured, rather than measured wrong);
// - every access and allocation costs several times more (long randomised
//   tests run fewer iterations);
// - TSan's runtime defines the global operator new in a static library, so
//   a test binary that replaces it does not link there (MSan, which no
//   preset builds, is kept out too until someone tries it). ASan's can be
//   replaced: the plain and ASan/UBSan builds run those tests.
// UBSan changes none of these, so nothing here names it.
//
// Function-like macros (0 or 1) for leaving code out with #if, and constexpr
// bools of the same meaning for ordinary code. Function-like so that a test
// which forgets this include does not compile, where `#if NAME` would
// silently read an undefined NAME as 0.
#pragma once

#if defined(__has_feature)
#define COWSTORE_HAS_FEATURE_(x) __has_feature(x)
#else
#define COWSTORE_HAS_FEATURE_(x) 0
#endif

#if defined(__SANITIZE_ADDRESS__) || COWSTORE_HAS_FEATURE_(address_sanitizer)
#define COWSTORE_ASAN() 1
#else
#define COWSTORE_ASAN() 0
#endif

#if defined(__SANITIZE_THREAD__) || COWSTORE_HAS_FEATURE_(thread_sanitizer)
#define COWSTORE_TSAN() 1
#else
#define COWSTORE_TSAN() 0
#endif

#if COWSTORE_HAS_FEATURE_(memory_sanitizer)
#define COWSTORE_MSAN() 1
#else
#define COWSTORE_MSAN() 0
#endif

// Any sanitizer that replaces the allocator and instruments memory accesses.
#define COWSTORE_SANITIZED() (COWSTORE_ASAN() || COWSTORE_TSAN() || COWSTORE_MSAN())
// Whether this binary may define its own global operator new.
#define COWSTORE_CAN_REPLACE_NEW() (!COWSTORE_TSAN() && !COWSTORE_MSAN())

namespace cowstore::sanitizer {

inline constexpr bool kAsan = COWSTORE_ASAN();
inline constexpr bool kTsan = COWSTORE_TSAN();
inline constexpr bool kMsan = COWSTORE_MSAN();
inline constexpr bool kSanitized = COWSTORE_SANITIZED();
inline constexpr bool kCanReplaceNew = COWSTORE_CAN_REPLACE_NEW();

}  // namespace cowstore::sanitizer
