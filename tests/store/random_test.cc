// SPDX-License-Identifier: Apache-2.0
// The store's random source (random.h) and the identities made from it.

#include "handler/store/random.h"

#include <gtest/gtest.h>

#include <array>
#include <set>
#include <vector>

#include "handler/store/pool_impl.h"

namespace cowstore::store {
namespace {

// More than the 256 bytes getrandom(2) returns whole even when a signal
// arrives: a read cut short above that is finished by RandomBytes' loop.
constexpr size_t kLarge = 1 << 20;

TEST(RandomBytes, FillsEveryByteOfALargeBuffer) {
  // Every byte starts at 0 in one buffer and 0xff in another: a byte left
  // unwritten in both calls reads 0 and 0xff, which written bytes match
  // only by chance.
  std::vector<uint8_t> a(kLarge, 0), b(kLarge, 0xff);
  RandomBytes(a.data(), a.size());
  RandomBytes(b.data(), b.size());
  size_t unwritten = 0;
  for (size_t i = 0; i < kLarge; i++) unwritten += a[i] == 0 && b[i] == 0xff;
  // Each byte is 0 in a and 0xff in b with probability 1/65536 when both
  // were written: about 16 of the 1 MiB, and far below 200.
  EXPECT_LT(unwritten, 200u);
  // Every byte value turns up about kLarge / 256 = 4096 times.
  std::array<size_t, 256> seen{};
  for (uint8_t v : a) seen[v]++;
  for (size_t v = 0; v < 256; v++) {
    EXPECT_GT(seen[v], 3500u) << v;
    EXPECT_LT(seen[v], 4700u) << v;
  }
}

TEST(RandomBytes, OddLengthsTouchNothingPastTheirEnd) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{255}, size_t{257}}) {
    std::vector<uint8_t> buf(n + 16, 0xa5);
    RandomBytes(buf.data(), n);
    for (size_t i = n; i < buf.size(); i++) ASSERT_EQ(buf[i], 0xa5) << "n " << n << " byte " << i;
  }
}

TEST(RandomU64, DrawsDiffer) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; i++) seen.insert(RandomU64());
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(NewUuid, IsARandomVersion4UuidAndNeverRepeats) {
  std::set<Uuid> seen;
  for (int i = 0; i < 10000; i++) {
    Uuid u = NewUuid();
    EXPECT_EQ(u[6] >> 4, 4) << "RFC 4122 version";
    EXPECT_EQ(u[8] >> 6, 2) << "RFC 4122 variant";
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 10000u);
}

}  // namespace
}  // namespace cowstore::store
