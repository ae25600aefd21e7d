// SPDX-License-Identifier: Apache-2.0
#include "handler/store/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace cowstore::store {

void RandomBytes(void* p, size_t n) {
  auto* out = static_cast<unsigned char*>(p);
  while (n > 0) {
    ssize_t got = ::getrandom(out, n, 0);
    if (got > 0) {
      out += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    // ENOSYS (a kernel before 3.17) and nothing else: the C++ library's
    // source, which reads /dev/urandom there.
    std::random_device rd;
    while (n > 0) {
      const unsigned int v = rd();
      const size_t k = n < sizeof v ? n : sizeof v;
      std::memcpy(out, &v, k);
      out += k;
      n -= k;
    }
  }
}

uint64_t RandomU64() {
  uint64_t v;
  RandomBytes(&v, sizeof v);
  return v;
}

}  // namespace cowstore::store
