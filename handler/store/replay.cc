// SPDX-License-Identifier: Apache-2.0
#include "handler/store/replay.h"

#include <endian.h>

#include <cstring>

namespace cowstore::store {
namespace {

// LSNs of records that could belong to this pool after `lsn`: each open jumps
// by 2^32 and a fallback is at most one superblock behind, so anything
// further is noise (and bounding it keeps the byte-by-byte scan cheap).
constexpr uint64_t kLsnHorizon = 1ull << 40;

}  // namespace

JournalReplay ScanJournal(const uint8_t* j, size_t n, uint64_t start_lsn, uint32_t version) {
  JournalReplay out;
  uint64_t off = 0, lsn = start_lsn;
  const bool v1 = version < 2;
  for (;;) {
    Record r;
    size_t k = v1 ? ParseRecordV1(j + off, n - off, lsn, &r) : ParseRecord(j + off, n - off, lsn, &r);
    if (k == 0) break;
    out.records.push_back(std::move(r));
    off += k;
    lsn++;
  }
  out.end = off;
  out.next_lsn = lsn;
  if (v1) {
    // No record vouches for another: only a newer generation is detectable.
    Record r;
    uint64_t found = 0;
    out.newer_generation = ParseRecordV1(j + off, n - off, kNone, &r, &found) && found > lsn;
    return out;
  }

  // Replay stopped at `off`. A power cut can only tear the last commit, and
  // every record framed while that commit was in flight carries proven < lsn;
  // so a later CRC-valid record with proven >= lsn exists only if the record
  // expected here was durable. Scan every byte offset after the stop for one.
  struct Found {
    uint64_t off;
    RecordFrame f;
    Record r;
  };
  std::vector<Found> later;
  bool proof = false;
  auto u64 = [&](uint64_t at) {
    uint64_t v;
    std::memcpy(&v, j + at, 8);
    return le64toh(v);
  };
  for (uint64_t p = off; p + kRecordHeader <= n;) {
    // A record's LSN field is never zero: skip zeroed stretches (a cleared
    // journal) a word at a time, so an intact open does not pay per byte.
    if (u64(p + 8) == 0) {
      uint64_t q = p + 8;
      while (q + 8 <= n && u64(q) == 0) q += 8;
      p = q > p + 15 ? q - 15 : p + 1;
      continue;
    }
    // Cheap filters before the CRC: the LSN must be later than the stop
    // point and within reach; older generations fail at once.
    uint64_t l = u64(p + 8), pr = u64(p + 16);
    if (l <= lsn || l - lsn > kLsnHorizon || pr >= l) {
      p++;
      continue;
    }
    Found x{p, {}, {}};
    size_t k = ParseRecord(j + p, n - p, kNone, &x.r, &x.f);
    if (k == 0) {
      p++;
      continue;
    }
    if (p == off) out.newer_generation = true;  // a valid record where ours should be
    if (x.f.proven >= lsn) proof = true;
    later.push_back(std::move(x));
    p += k;
  }
  out.damaged = proof && !out.newer_generation;
  if (!out.damaged && !out.newer_generation) return out;  // a torn tail: nothing was committed
  if (out.damaged)
    out.lost.push_back("LSN " + std::to_string(lsn) + " at journal offset " + std::to_string(off) +
                       ": damaged, contents unknown");
  for (const Found& x : later)
    if (x.r.type != RecType::kSeal)  // not an operation: nothing is lost with it
      out.lost.push_back("LSN " + std::to_string(x.f.lsn) + ": " + DescribeRecord(x.r));
  return out;
}

std::string JournalReplay::Explain() const {
  if (newer_generation)
    return "the journal is newer than every readable superblock (newest superblock damaged)";
  if (!damaged) return "journal intact";
  return "journal record LSN " + std::to_string(next_lsn) + " at journal offset " +
         std::to_string(end) + " is damaged although later records prove it was committed: " +
         "opening would drop it and the " + std::to_string(lost.size() - 1) +
         " operation(s) after it (see 'cowctl pool check --repair')";
}

}  // namespace cowstore::store
