// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: open pool images with fuzzer-chosen metadata damage.
// The input is OpenDamaged's (corrupt_image.h): 3k + 1 bytes choose the
// image's format (2, or 3 at grain 4 KiB or = AU) by the first byte; seeds
// in tests/fuzz/corpus/store_open.
#include <cstdio>
#include <cstdlib>

#include "tests/store/corrupt_image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string why;
  if (!cowstore::store::testing::OpenDamaged(data, size, &why)) {
    std::fprintf(stderr, "store misbehaved: %s\n", why.c_str());
    std::abort();
  }
  return 0;
}
