// SPDX-License-Identifier: Apache-2.0
// Replay's scan for later records (replay.h) over a journal of stale bytes,
// the v3 ring's usual state: an older generation's records all round it,
// none of them later than the replay start, so the scan visits every byte.
// Also a cleared (all-zero) journal, and both through replay's window (the
// ring's path) beside in memory (v1/v2's). Figures within one run; not a test.
//
//   replay_bench [MIB]     (default 1024: the ring's cap, kMaxJournalBytes)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "handler/store/replay.h"

using namespace cowstore::store;

namespace {

// Bytes in memory handed out only by reads, as a ring's are.
class ReadOnlySource : public JournalSource {
 public:
  explicit ReadOnlySource(const std::vector<uint8_t>& b) : b_(b) {}
  uint64_t size() const override { return b_.size(); }
  Status Read(uint64_t off, size_t n, uint8_t* buf) override {
    std::memcpy(buf, b_.data() + off, n);
    largest = std::max(largest, n);
    return Status::Ok();
  }
  size_t largest = 0;

 private:
  const std::vector<uint8_t>& b_;
};

// Records as a pool writes them (small maps, some LUN creations), from LSN 1.
uint64_t FillStale(std::vector<uint8_t>* j) {
  std::string s;
  uint64_t lsn = 1;
  while (s.size() < j->size()) {
    Record r;
    if (lsn % 3 == 0) {
      r.type = RecType::kCreateLun;
      r.lun = lsn % 50 + 1;
      r.name = "lun-" + std::to_string(lsn);
      r.a = 1 << 20;
      r.bs = 512;
    } else {
      r.type = RecType::kMap;
      r.lun = 1;
      for (uint64_t k = 0; k <= lsn % 5; k++) r.runs.push_back({lsn * 8 + k, 100 + lsn * 8 + k, 1});
    }
    FrameRecord(r, lsn, lsn - 1, &s);
    lsn++;
  }
  std::copy(s.begin(), s.begin() + j->size(), j->begin());
  return lsn;
}

void Scan(const char* what, const std::vector<uint8_t>& j, uint64_t start, bool windowed) {
  const auto t0 = std::chrono::steady_clock::now();
  ReadOnlySource src(j);
  Result<JournalReplay> scanned = windowed ? ScanJournal(&src, start) : ScanJournal(j.data(), j.size(), start);
  const size_t largest = windowed ? src.largest : 0;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!scanned.ok()) {
    std::printf("%-8s %-10s failed: %s\n", what, windowed ? "windowed" : "in memory",
                scanned.status().ToString().c_str());
    return;
  }
  const JournalReplay& r = *scanned;
  const double gib = j.size() / double(1 << 30);
  std::printf("%-8s %-10s %7.3f s  %5.2f s/GiB  largest read %zu B  verdict %s\n", what,
              windowed ? "windowed" : "in memory", s, s / gib, largest,
              r.damaged ? "damaged" : r.newer_generation ? "newer" : "torn tail/clean");
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  std::vector<uint8_t> j(mib << 20, 0);
  const uint64_t start = FillStale(&j) + (uint64_t{1} << 32);  // the next open's LSNs
  std::printf("%zu MiB journal, window %zu B, longest record %zu B\n", mib, kJournalWindowBytes,
              kMaxRecordBytes);
  Scan("stale", j, start, false);
  Scan("stale", j, start, true);
  std::fill(j.begin(), j.end(), 0);
  Scan("cleared", j, start, false);
  Scan("cleared", j, start, true);
}
