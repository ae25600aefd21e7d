// SPDX-License-Identifier: Apache-2.0
// Test helpers for replay through a window (journal_source.h): a journal
// region handed out only by reads, which it counts, and a replay's whole
// verdict as comparable lines.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/journal_source.h"
#include "handler/store/replay.h"

namespace cowstore::store {

// Bytes the test knows whole, given to replay only through Read (never
// Contiguous), so it scans them through its window as it scans a ring.
class CountingSource : public JournalSource {
 public:
  explicit CountingSource(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  uint64_t size() const override { return bytes_.size(); }
  Status Read(uint64_t offset, size_t n, uint8_t* buf) override {
    EXPECT_LE(offset + n, bytes_.size());
    std::memcpy(buf, bytes_.data() + offset, n);
    reads.push_back({offset, n});
    largest_read = std::max(largest_read, n);
    return Status::Ok();
  }
  std::vector<std::pair<uint64_t, size_t>> reads;  // offset, length
  size_t largest_read = 0;

 private:
  std::vector<uint8_t> bytes_;
};

// Everything a replay decides: each record (type and payload bytes), where
// and why it stopped, and what it says is lost.
inline std::vector<std::string> ReplayVerdict(const JournalReplay& jr) {
  std::vector<std::string> v;
  for (const Record& r : jr.records) {
    std::string p = std::to_string(static_cast<int>(r.type)) + ":";
    r.EncodePayload(&p);
    v.push_back(std::move(p));
  }
  v.push_back("end " + std::to_string(jr.end) + " next " + std::to_string(jr.next_lsn) +
              (jr.damaged ? " damaged" : "") + (jr.newer_generation ? " newer" : ""));
  v.insert(v.end(), jr.lost.begin(), jr.lost.end());
  return v;
}

// `src` scanned through a window of `window` bytes (by default the
// smallest replay allows, so reads end inside records most often).
inline JournalReplay ScanWindowed(CountingSource* src, uint64_t start_lsn,
                                  size_t window = kMaxRecordBytes) {
  Result<JournalReplay> r = ScanJournal(src, start_lsn, kFormatVersion, window);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : JournalReplay{};
}

}  // namespace cowstore::store
