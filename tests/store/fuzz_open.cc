// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: open pool images with fuzzer-chosen metadata damage.
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
