// SPDX-License-Identifier: Apache-2.0
#include "handler/store/journal_source.h"

#include <algorithm>
#include <cstring>

namespace cowstore::store {

Status MemoryJournalSource::Read(uint64_t offset, size_t n, uint8_t* buf) {
  if (offset > n_ || n > n_ - offset)
    return Status(Code::kInvalidArgument, "journal read past its " + std::to_string(n_) + " bytes");
  std::memcpy(buf, bytes_ + offset, n);
  return Status::Ok();
}

Status FileRegionJournalSource::Read(uint64_t offset, size_t n, uint8_t* buf) {
  if (offset > size_ || n > size_ - offset)
    return Status(Code::kInvalidArgument, "journal read past its " + std::to_string(size_) + " bytes");
  return file_->Read(offset_ + offset, n, buf);
}

JournalWindow::JournalWindow(JournalSource* src, size_t window)
    : src_(src), size_(src->size()), whole_(src->Contiguous()), window_(window) {}

Status JournalWindow::At(uint64_t pos, size_t need, const uint8_t** p, size_t* avail) {
  if (whole_) {  // in memory: every byte is there
    *p = whole_ + pos;
    *avail = size_ - pos;
    return Status::Ok();
  }
  const uint64_t want = std::min<uint64_t>(need, size_ - pos);
  if (pos < base_ || pos + want > base_ + len_) {
    if (need > window_) return Status(Code::kInvalidArgument, "journal window asked past its size");
    if (!buf_) {
      try {
        buf_.reset(new uint8_t[window_]);
      } catch (...) {
        return StatusFromCurrentException("journal window");
      }
    }
    // Slide to `pos`, keeping what is already read from there on (nothing
    // when going back: read again).
    const size_t keep = pos >= base_ && pos < base_ + len_ ? static_cast<size_t>(base_ + len_ - pos) : 0;
    if (keep) std::memmove(buf_.get(), buf_.get() + (pos - base_), keep);
    const size_t fill = static_cast<size_t>(std::min<uint64_t>(window_, size_ - pos));
    base_ = pos;
    len_ = keep;
    if (fill > keep) {
      Status s = src_->Read(pos + keep, fill - keep, buf_.get() + keep);
      if (!s.ok()) {
        len_ = 0;
        return s;
      }
      len_ = fill;
    }
  }
  *p = buf_.get() + (pos - base_);
  *avail = static_cast<size_t>(base_ + len_ - pos);
  return Status::Ok();
}

}  // namespace cowstore::store
