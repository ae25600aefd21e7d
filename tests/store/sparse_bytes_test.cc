// SPDX-License-Identifier: Apache-2.0
// SparseBytes against a flat vector doing the same operations, and the
// sparseness itself (holes allocate nothing).
#include "handler/store/sparse_bytes.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace cowstore::store {
namespace {

constexpr uint64_t P = SparseBytes::kPage;

TEST(SparseBytes, AFreshArrayReadsZerosAndHoldsNoPage) {
  SparseBytes b;
  b.Resize(10 * P + 17);
  EXPECT_EQ(b.size(), 10 * P + 17);
  EXPECT_TRUE(b.IsZero(0, b.size()));
  EXPECT_EQ(b.pages_held(), 0u);
  std::vector<uint8_t> v = b.ToVector();
  EXPECT_EQ(v, std::vector<uint8_t>(10 * P + 17, 0));
}

TEST(SparseBytes, ZerosWrittenIntoAHoleAllocateNothing) {
  SparseBytes b;
  b.Resize(4 * P);
  std::vector<uint8_t> zeros(2 * P, 0);
  b.Write(P / 2, zeros.size(), zeros.data());
  EXPECT_EQ(b.pages_held(), 0u);
  SparseBytes other;
  other.Resize(4 * P);
  b.CopyFrom(other, 0, 4 * P);
  EXPECT_EQ(b.pages_held(), 0u);
}

TEST(SparseBytes, ZeroingAWholePageGivesItBackAndAPartOfOneKeepsIt) {
  SparseBytes b;
  b.Resize(3 * P);
  std::vector<uint8_t> ones(3 * P, 1);
  b.Write(0, ones.size(), ones.data());
  EXPECT_EQ(b.pages_held(), 3u);
  b.Zero(P - 1, P + 2);  // the last byte of page 0, all of page 1, the first of page 2
  EXPECT_EQ(b.pages_held(), 2u);
  std::vector<uint8_t> v = b.ToVector();
  for (uint64_t i = 0; i < v.size(); i++) ASSERT_EQ(v[i], (i >= P - 1 && i < 2 * P + 1) ? 0 : 1) << i;
}

TEST(SparseBytes, ACutPageReadsZerosPastTheCutWhenTheArrayGrowsAgain) {
  SparseBytes b;
  b.Resize(2 * P);
  std::vector<uint8_t> ones(2 * P, 0xff);
  b.Write(0, ones.size(), ones.data());
  b.Resize(P + 100);
  b.Resize(3 * P);
  std::vector<uint8_t> v = b.ToVector();
  for (uint64_t i = 0; i < v.size(); i++) ASSERT_EQ(v[i], i < P + 100 ? 0xff : 0) << i;
}

TEST(SparseBytes, AssignReplacesEverythingAndKeepsHolesOfZeros) {
  SparseBytes b;
  b.Resize(8 * P);
  std::vector<uint8_t> ones(8 * P, 1);
  b.Write(0, ones.size(), ones.data());
  std::vector<uint8_t> img(3 * P + 5, 0);
  img[P + 7] = 9;
  img[3 * P + 4] = 3;
  b.Assign(img.data(), img.size());
  EXPECT_EQ(b.size(), img.size());
  EXPECT_EQ(b.ToVector(), img);
  b.Resize(4 * P);  // the last page's old bytes past the image must not come back
  std::vector<uint8_t> grown = img;
  grown.resize(4 * P, 0);
  EXPECT_EQ(b.ToVector(), grown);
}

// Random operations on both, compared after each.
TEST(SparseBytes, MatchesAFlatArrayUnderRandomOperations) {
  std::mt19937_64 rng(25);
  SparseBytes a, b;
  std::vector<uint8_t> va, vb;
  auto resize = [](SparseBytes& s, std::vector<uint8_t>& v, uint64_t n) {
    s.Resize(n);
    v.resize(n, 0);
  };
  resize(a, va, 6 * P);
  resize(b, vb, 6 * P);
  for (int step = 0; step < 3000; step++) {
    const uint64_t size = va.size();
    const uint64_t off = size ? rng() % size : 0;
    const uint64_t n = size ? rng() % (std::min<uint64_t>(size - off, 3 * P) + 1) : 0;
    switch (rng() % 7) {
      case 0: {
        std::vector<uint8_t> d(n);
        const bool zeros = rng() % 3 == 0;
        for (auto& x : d) x = zeros ? 0 : static_cast<uint8_t>(rng());
        a.Write(off, n, d.data());
        std::copy(d.begin(), d.end(), va.begin() + static_cast<long>(off));
        break;
      }
      case 1:
        a.Zero(off, n);
        std::fill_n(va.begin() + static_cast<long>(off), n, 0);
        break;
      case 2:
        // Both arrays hold [off, off + n) only while their sizes agree.
        if (vb.size() == size) {
          a.CopyFrom(b, off, n);
          std::copy_n(vb.begin() + static_cast<long>(off), n, va.begin() + static_cast<long>(off));
        }
        break;
      case 3:
        a.Xor(off, n, 0x5a);
        for (uint64_t i = off; i < off + n; i++) va[i] ^= 0x5a;
        break;
      case 4: {
        const uint64_t to = rng() % (8 * P);
        resize(a, va, to);
        resize(b, vb, to);
        break;
      }
      case 5: {
        std::vector<uint8_t> d(n);
        for (auto& x : d) x = static_cast<uint8_t>(rng() % 2 ? rng() : 0);
        b.Write(off < vb.size() ? off : 0, std::min<uint64_t>(n, vb.size() - (off < vb.size() ? off : 0)), d.data());
        std::copy_n(d.begin(), std::min<uint64_t>(n, vb.size() - (off < vb.size() ? off : 0)),
                    vb.begin() + static_cast<long>(off < vb.size() ? off : 0));
        break;
      }
      default: {
        std::vector<uint8_t> got(n);
        a.Read(off, n, got.data());
        ASSERT_TRUE(std::equal(got.begin(), got.end(), va.begin() + static_cast<long>(off))) << step;
        const bool zero = std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0; });
        ASSERT_EQ(a.IsZero(off, n), zero) << step;
      }
    }
    ASSERT_EQ(a.size(), va.size()) << step;
    ASSERT_EQ(a.ToVector(), va) << step;
    ASSERT_EQ(b.ToVector(), vb) << step;
  }
}

}  // namespace
}  // namespace cowstore::store
