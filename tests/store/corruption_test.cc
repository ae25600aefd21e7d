// SPDX-License-Identifier: Apache-2.0
// Damaged metadata (superblocks, journal, checkpoint) is refused or opens to
// exactly the state its operations left (tests/store/corrupt_image.h): never a
// crash, never a pool that opens with something missing.
#include <gtest/gtest.h>

#include <random>

#include "tests/store/corrupt_image.h"

namespace cowstore::store::testing {
namespace {

TEST(Corruption, UndamagedImagesOpenExactly) {
  std::string why;
  EXPECT_EQ(OpenImage(BaseImage().image, BaseImage().model, nullptr, &why), Outcome::kExact) << why;
}

TEST(Corruption, RandomMetadataDamageIsRefusedOrHarmless) {
  std::mt19937_64 rng(7);
  int count[4] = {};
  for (int iter = 0; iter < 1500; iter++) {
    std::vector<uint8_t> d(3 * (1 + rng() % 4));
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    std::string why;
    Outcome o;
    ASSERT_TRUE(OpenDamaged(d.data(), d.size(), &why, &o)) << "iteration " << iter << ": " << why;
    count[static_cast<int>(o)]++;
  }
  std::printf("damaged images: %d refused, %d exact\n", count[0], count[1]);
  EXPECT_GT(count[0], 0);
  EXPECT_GT(count[1], 0);
}

// The bytes of each metadata region that the workload wrote (up to the last
// non-zero byte).
std::vector<uint64_t> WrittenMetadataBytes(const std::vector<uint8_t>& img) {
  std::vector<uint64_t> out;
  for (auto [start, len] : MetadataRegions(img)) {
    uint64_t end = start;
    for (uint64_t o = start; o < start + len && o < img.size(); o++)
      if (img[o]) end = o + 1;
    for (uint64_t o = start; o < end; o++) out.push_back(o);
  }
  return out;
}

// One flipped bit in every metadata byte the workload wrote (the bit rotates
// with the offset): zero silent losses.
void Sweep(const std::vector<uint8_t>& img, const ImageModel& want, const ImageModel* previous,
           uint64_t last_lo, uint64_t last_hi) {
  int count[4] = {};
  auto bytes = WrittenMetadataBytes(img);
  for (uint64_t off : bytes) {
    std::vector<uint8_t> d = img;
    d[off] ^= uint8_t(1u << (off % 8));
    bool in_last = off >= last_lo && off < last_hi;
    std::string why;
    Outcome o = OpenImage(d, want, in_last ? previous : nullptr, &why);
    ASSERT_NE(o, Outcome::kBad) << "flip of bit " << off % 8 << " at byte " << off << ": " << why;
    count[static_cast<int>(o)]++;
  }
  std::printf("single-bit flips over %zu metadata bytes: %d refused, %d exact, %d torn-last-commit, 0 silent\n",
              bytes.size(), count[0], count[1], count[2]);
}

TEST(Corruption, EveryMetadataBitFlipOfACleanPoolIsRefusedOrHarmless) {
  Sweep(BaseImage().image, BaseImage().model, nullptr, 0, 0);
}

TEST(Corruption, EveryMetadataBitFlipOfAPowerCutImageIsRefusedOrHarmless) {
  // The workload, small: LUN a written durably, LUN b written
  // durably, the file copied while open.
  ImageBuilder b(16);
  b.Create("a", 4 * kImgAu, 512);
  b.Write("a", 0, kImgAu, 0x11);
  b.Create("b", 4 * kImgAu, 512);
  ImageModel previous = b.model();
  std::vector<uint8_t> before = b.Snapshot();
  b.Write("b", 0, kImgAu, 0x22);
  std::vector<uint8_t> img = b.Snapshot();
  ASSERT_TRUE(b.ok());
  // The last commit's journal bytes: the only place where damage cannot be
  // told from a power cut tearing that commit.
  uint64_t lo = ~uint64_t{0}, hi = 0;
  for (uint64_t o = 64 * 1024; o < kImgData; o++)
    if (img[o] != before[o]) lo = std::min(lo, o), hi = o + 1;
  ASSERT_LT(lo, hi);
  Sweep(img, b.model(), &previous, lo, hi);
}

}  // namespace
}  // namespace cowstore::store::testing
