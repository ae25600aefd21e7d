// SPDX-License-Identifier: Apache-2.0
// Journal bytes for replay, read with bounded memory. A journal is up to
// 1 GiB (kMaxJournalBytes: a v3 ring, or a v2 region of that size) and
// replay runs inside tcmu-runner at pool open, so ScanJournal (replay.h)
// reads it through a window of kJournalWindowBytes instead of one buffer of
// the whole journal.
//
// Why a window suffices: ParseRecord's verdict at an offset depends on at
// most kMaxRecordBytes bytes from there (meta.h: every record's size is
// bounded by its type, refused before the CRC). So the window guarantees
// that much from every offset it is asked about (or everything to the end);
// then every verdict is the one the whole journal in memory would give, a
// record straddling two reads included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/status.h"

namespace cowstore::store {

// A journal region's bytes: `size()` of them, offsets from replay's start.
class JournalSource {
 public:
  virtual ~JournalSource() = default;
  virtual uint64_t size() const = 0;
  // Reads [offset, offset + n), within size().
  virtual Status Read(uint64_t offset, size_t n, uint8_t* buf) = 0;
  // All the bytes, if they are in memory already (no copy needed), else null.
  virtual const uint8_t* Contiguous() const { return nullptr; }
};

// The version 1 fixed region, read whole at open (and tests): the window hands
// out pointers into it, so their replay is what it always was.
class MemoryJournalSource : public JournalSource {
 public:
  MemoryJournalSource(const uint8_t* bytes, size_t n) : bytes_(bytes), n_(n) {}
  uint64_t size() const override { return n_; }
  Status Read(uint64_t offset, size_t n, uint8_t* buf) override;
  const uint8_t* Contiguous() const override { return bytes_; }

 private:
  const uint8_t* bytes_;
  size_t n_;
};

// A fixed region of a file, read on demand: the version 2 journal at open
// (kJournalOffset, the superblock's journal size).
class FileRegionJournalSource : public JournalSource {
 public:
  FileRegionJournalSource(File* file, uint64_t offset, uint64_t size)
      : file_(file), offset_(offset), size_(size) {}
  uint64_t size() const override { return size_; }
  Status Read(uint64_t offset, size_t n, uint8_t* buf) override;

 private:
  File* file_;
  uint64_t offset_, size_;
};

// 4 MiB: the most a replay holds of the journal's bytes. Each read is at most
// this, and a slide rereads at most kMaxRecordBytes of what it held.
constexpr size_t kJournalWindowBytes = size_t{4} << 20;
static_assert(kJournalWindowBytes >= 2 * kMaxRecordBytes, "a window must hold a record and move on");

// A sliding view of a source, for a forward pass that may step back (the
// CRC rule's second reading, replay.h): a position before the window is
// read again from the source.
class JournalWindow {
 public:
  explicit JournalWindow(JournalSource* src, size_t window = kJournalWindowBytes);
  uint64_t size() const { return size_; }
  // Points at `pos` with at least min(`need`, size() - pos) bytes readable
  // there (*avail says how many: possibly more), sliding the window forward
  // if needed (back too). `need` <= the window; pos <= size().
  Status At(uint64_t pos, size_t need, const uint8_t** p, size_t* avail);

 private:
  JournalSource* src_;
  uint64_t size_;
  const uint8_t* whole_;  // the source's bytes when in memory, else null
  size_t window_;
  std::unique_ptr<uint8_t[]> buf_;
  uint64_t base_ = 0;  // journal offset of buf_[0]
  size_t len_ = 0;     // bytes of buf_ holding journal bytes
};

}  // namespace cowstore::store
