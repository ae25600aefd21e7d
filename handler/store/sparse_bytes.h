// SPDX-License-Identifier: Apache-2.0
// A byte array of a given size, held sparsely: FaultInjectionEnv's model of
// a file's bytes.
//
// Test pools are mostly holes (a 40 MiB pool holding a few MiB of data), and
// the in-memory Env keeps two images of each file. Held as flat vectors,
// every pool a test made meant zero-filling, and page-faulting, twice its
// size: on a virtual machine whose page faults are dear that was most of a
// small test's time (0.45 s of an INQUIRY test, session 25). Here the bytes
// live in 4 KiB pages and a page that was never written, or was zeroed
// whole, is absent and reads as zeros.
//
// Writing zeros where no page is allocates nothing, so copying sectors from
// one image to the other (a sync, a power cut) keeps holes holes.
//
// Not thread-safe: FaultInjectionEnv holds its lock around every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace cowstore::store {

class SparseBytes {
 public:
  static constexpr uint64_t kPage = 4096;

  uint64_t size() const { return size_; }
  // Bytes past the new size are gone; growing adds zeros.
  void Resize(uint64_t size);
  // Reads [off, off + n), which must lie inside size().
  void Read(uint64_t off, uint64_t n, uint8_t* out) const;
  // Writes [off, off + n), which must lie inside size().
  void Write(uint64_t off, uint64_t n, const uint8_t* in);
  // Whether [off, off + n) (inside size()) holds zeros only.
  bool IsZero(uint64_t off, uint64_t n) const;
  // Zeroes [off, off + n) (inside size()), giving whole pages back.
  void Zero(uint64_t off, uint64_t n);
  // Makes [off, off + n) of this equal that of `from` (both hold it).
  void CopyFrom(const SparseBytes& from, uint64_t off, uint64_t n);
  // XORs every byte of [off, off + n) (inside size()) with `mask`.
  void Xor(uint64_t off, uint64_t n, uint8_t mask);
  // Replaces the whole content with the n bytes at `data`, reusing the
  // pages already held (a fuzzer installs an image per input).
  void Assign(const uint8_t* data, size_t n);
  std::vector<uint8_t> ToVector() const;
  // Pages held (for tests of the sparseness itself).
  size_t pages_held() const;

 private:
  using Page = std::unique_ptr<uint8_t[]>;
  // The page holding byte `off`, allocated (zeroed) if absent.
  uint8_t* PageFor(uint64_t off);
  // Calls fn(page index, offset in page, length, position in the range) for
  // each page piece of [off, off + n).
  template <typename Fn>
  static void ForEachPiece(uint64_t off, uint64_t n, Fn&& fn);

  uint64_t size_ = 0;
  std::vector<Page> pages_;  // index = byte offset / kPage; null = zeros
};

}  // namespace cowstore::store
