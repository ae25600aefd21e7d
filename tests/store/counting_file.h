// SPDX-License-Identifier: Apache-2.0
// A File that passes every call to another and counts the writes and bytes
// written, and remembers which page-sized offsets were written: the
// counting-Env test of docs/design/store-v3.md plan step 5 measures a
// checkpoint's metadata writes with it, and the shadowing tests check that no
// page of the previous checkpoint was written, and the reader's order; the
// replay test, how much a format 2 open reads of its journal at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "handler/store/env.h"

namespace cowstore::store {

class CountingFile final : public File {
 public:
  explicit CountingFile(File* inner) : inner_(inner) {}

  Status Read(uint64_t off, size_t n, void* buf) override {
    reads_++;
    read_at_.push_back(off);
    bytes_read_ += n;
    largest_read_ = std::max<uint64_t>(largest_read_, n);
    return inner_->Read(off, n, buf);
  }
  Status Write(uint64_t off, size_t n, const void* buf) override {
    writes_++;
    bytes_written_ += n;
    written_at_.insert(off);
    return inner_->Write(off, n, buf);
  }
  Status Sync() override {
    syncs_++;
    return inner_->Sync();
  }
  // None: a handle's syncs (and zeroing ahead's writes) would not be the
  // counted ones of the store's own work.
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return NoSyncHandle(); }
  Status DropCache() override { return inner_->DropCache(); }
  Result<uint64_t> Size() override { return inner_->Size(); }
  Status Truncate(uint64_t size) override { return inner_->Truncate(size); }
  Status PunchHole(uint64_t off, uint64_t n) override { return inner_->PunchHole(off, n); }
  bool CanTruncate() const override { return inner_->CanTruncate(); }
  uint32_t AtomicWriteBytes() const override { return inner_->AtomicWriteBytes(); }
  // As this file's own reads (counted, gated, changed as they are).
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return ReadV(off, iov, n); }
  void Prefetch(uint64_t off, uint64_t n) override { inner_->Prefetch(off, n); }
  bool WritesAllocate() const override { return inner_->WritesAllocate(); }
  bool DiscardZeroes() const override { return inner_->DiscardZeroes(); }

  uint64_t reads() const { return reads_; }
  uint64_t writes() const { return writes_; }
  uint64_t bytes_written() const { return bytes_written_; }
  uint64_t syncs() const { return syncs_; }
  uint64_t bytes_read() const { return bytes_read_; }      // by Read
  uint64_t largest_read() const { return largest_read_; }  // by Read
  const std::set<uint64_t>& written_at() const { return written_at_; }
  const std::vector<uint64_t>& read_at() const { return read_at_; }  // in read order
  void Reset() {
    reads_ = writes_ = bytes_written_ = syncs_ = bytes_read_ = largest_read_ = 0;
    written_at_.clear();
    read_at_.clear();
  }

 private:
  File* inner_;
  uint64_t reads_ = 0, writes_ = 0, bytes_written_ = 0, syncs_ = 0, bytes_read_ = 0, largest_read_ = 0;
  std::set<uint64_t> written_at_;
  std::vector<uint64_t> read_at_;
};

}  // namespace cowstore::store
