// SPDX-License-Identifier: Apache-2.0
#include "handler/store/sparse_bytes.h"

#include <algorithm>
#include <cstring>

#include "handler/store/all_zero.h"

namespace cowstore::store {

template <typename Fn>
void SparseBytes::ForEachPiece(uint64_t off, uint64_t n, Fn&& fn) {
  uint64_t done = 0;
  while (done < n) {
    const uint64_t pos = off + done;
    const uint64_t in_page = pos % kPage;
    const uint64_t len = std::min(n - done, kPage - in_page);
    fn(static_cast<size_t>(pos / kPage), in_page, len, done);
    done += len;
  }
}

uint8_t* SparseBytes::PageFor(uint64_t off) {
  Page& p = pages_[off / kPage];
  if (!p) p = std::make_unique<uint8_t[]>(kPage);  // value-initialised: zeros
  return p.get();
}

void SparseBytes::Resize(uint64_t size) {
  if (size < size_ && size % kPage != 0) {
    // The cut page keeps its head; its tail must read as zeros if the file
    // grows again.
    if (uint8_t* p = pages_[size / kPage].get()) std::memset(p + size % kPage, 0, kPage - size % kPage);
  }
  pages_.resize(static_cast<size_t>((size + kPage - 1) / kPage));
  size_ = size;
}

void SparseBytes::Read(uint64_t off, uint64_t n, uint8_t* out) const {
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t done) {
    const uint8_t* p = pages_[i].get();
    if (p) std::memcpy(out + done, p + at, len);
    else std::memset(out + done, 0, len);
  });
}

void SparseBytes::Write(uint64_t off, uint64_t n, const uint8_t* in) {
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t done) {
    if (!pages_[i] && AllZero(in + done, len)) return;  // a hole stays a hole
    std::memcpy(PageFor(i * kPage) + at, in + done, len);
  });
}

bool SparseBytes::IsZero(uint64_t off, uint64_t n) const {
  bool zero = true;
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t) {
    const uint8_t* p = pages_[i].get();
    if (zero && p) zero = AllZero(p + at, len);
  });
  return zero;
}

void SparseBytes::Zero(uint64_t off, uint64_t n) {
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t) {
    if (!pages_[i]) return;
    if (len == kPage) pages_[i].reset();
    else std::memset(pages_[i].get() + at, 0, len);
  });
}

void SparseBytes::CopyFrom(const SparseBytes& from, uint64_t off, uint64_t n) {
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t) {
    const uint8_t* src = from.pages_[i].get();
    if (!src) {
      Zero(i * kPage + at, len);
      return;
    }
    if (!pages_[i] && AllZero(src + at, len)) return;
    std::memcpy(PageFor(i * kPage) + at, src + at, len);
  });
}

void SparseBytes::Xor(uint64_t off, uint64_t n, uint8_t mask) {
  ForEachPiece(off, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t) {
    uint8_t* p = PageFor(i * kPage) + at;
    for (uint64_t k = 0; k < len; k++) p[k] ^= mask;
  });
}

void SparseBytes::Assign(const uint8_t* data, size_t n) {
  pages_.resize(static_cast<size_t>((n + kPage - 1) / kPage));
  size_ = n;
  ForEachPiece(0, n, [&](size_t i, uint64_t at, uint64_t len, uint64_t done) {
    if (!pages_[i] && AllZero(data + done, len)) return;
    uint8_t* p = PageFor(i * kPage);
    std::memcpy(p + at, data + done, len);
    if (len < kPage) std::memset(p + len, 0, kPage - len);  // the last page's tail
  });
}

std::vector<uint8_t> SparseBytes::ToVector() const {
  std::vector<uint8_t> v(size_);
  Read(0, size_, v.data());
  return v;
}

size_t SparseBytes::pages_held() const {
  return static_cast<size_t>(std::count_if(pages_.begin(), pages_.end(), [](const Page& p) { return p != nullptr; }));
}

}  // namespace cowstore::store
