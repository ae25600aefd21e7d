// SPDX-License-Identifier: Apache-2.0
#include "handler/store/replay.h"

#include <endian.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "handler/store/crc32c.h"
#include "handler/store/superblock_v3.h"  // kFormatVersionV3

namespace cowstore::store {
namespace {

// LSNs of records that could belong to this pool after `lsn`: each open jumps
// by 2^32 and a fallback is at most one superblock behind, so anything
// further is noise (and bounding it keeps the byte-by-byte scan cheap).
constexpr uint64_t kLsnHorizon = 1ull << 40;

uint64_t U64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return le64toh(v);
}
uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return le32toh(v);
}

// Where a CRC-valid record of this generation later than `lsn` may start in
// [p, end) (each position's header readable): the first position whose
// header passes the LSN filter and ParseRecord's header rules, or `end`.
// Every position it passes over would fail ParseRecord or the filter, so the
// verdicts are those of trying ParseRecord at every byte. The header rules
// matter for speed: payload fields of older records (small numbers) pass
// the LSN filter at ~6 % of byte offsets.
const uint8_t* NextCandidate(const uint8_t* p, const uint8_t* end, uint64_t lsn) {
  while (p < end) {
    const uint64_t l = U64(p + 8);
    // One unsigned compare rejects most stale bytes: l - lsn - 1 < horizon
    // holds for l in (lsn, lsn + horizon], and also for a wrapped l <= lsn,
    // which the exact test below then refuses.
    if (l - lsn - 1 < kLsnHorizon) {
      if (l > lsn && PlausibleRecordHeader(U32(p + 4), l, U64(p + 16), p[24])) return p;
      p++;
      continue;
    }
    // A record's LSN field is never zero: skip zeroed stretches (a cleared
    // journal) a word at a time, so an intact open does not pay per byte.
    if (l == 0) {
      const uint8_t* q = p + 8;
      while (q + 8 <= end + kRecordHeader - 1 && U64(q) == 0) q += 8;
      p = q > p + 15 ? q - 15 : p + 1;
      continue;
    }
    p++;
  }
  return end;
}

}  // namespace

Result<JournalReplay> ScanJournal(JournalSource* src, uint64_t start_lsn, uint32_t version,
                                  size_t window, const RecordSink& sink, const DataCheck& check) {
  const bool v1 = version < 2;
  if (v1 && !src->Contiguous())
    return Status(Code::kInvalidArgument, "a version-1 journal is replayed from memory");
  if (window < kMaxRecordBytes)
    return Status(Code::kInvalidArgument, "a journal window must hold the longest record");
  JournalWindow w(src, window);
  const uint64_t n = w.size();
  const uint8_t* p;
  size_t avail;
  JournalReplay out;
  uint64_t off = 0, lsn = start_lsn;
  // The CRC rule (replay.h): the highest `proven` read so far; the first
  // kMapChecked record read above it, whose records wait for a vouch
  // (held); and whether the chain has ended above every `proven`, so the
  // records from the held one on are read again with their data checked.
  const bool checked_records = version >= kFormatVersionV3;
  uint64_t vouched = 0;
  bool holding = false, checking = false;
  uint64_t held_off = 0, held_lsn = 0;
  std::string mismatched;  // the record whose data did not match, described
  for (;;) {
    // kMaxRecordBytes from `off`: enough for ParseRecord's verdict (meta.h).
    Status s = w.At(off, kMaxRecordBytes, &p, &avail);
    if (!s.ok()) return s;
    Record r;
    RecordFrame f;  // v1: no `proven`, and no kMapChecked record either
    size_t k = v1 ? ParseRecordV1(p, avail, lsn, &r) : ParseRecord(p, avail, lsn, &r, &f);
    if (k == 0) {
      if (!holding) break;
      // Nothing vouches for the held record (or the stretch was read on to
      // the end): read again from it, checking what is still unvouched.
      out.reread_bytes += off - held_off;
      holding = false;
      checking = true;
      off = held_off;
      lsn = held_lsn;
      continue;
    }
    if (r.type == RecType::kMapChecked && !checked_records)
      return Status(Code::kCorruption, "journal record LSN " + std::to_string(lsn) + " at journal offset " +
                                           std::to_string(off) + " is a data-checked map, which a format " +
                                           std::to_string(version) + " pool never holds");
    vouched = std::max(vouched, f.proven);
    if (holding) {
      // Vouched for: read again from it, handing over. Once the bytes read
      // again pass the journal's size, a held stretch is read on to the
      // chain's end instead and read again once, checked where still
      // unvouched: a crafted journal whose `proven` trails each record by
      // a long stretch would otherwise make this quadratic.
      if (vouched >= held_lsn && out.reread_bytes < n) {
        out.reread_bytes += off + k - held_off;
        holding = false;
        off = held_off;
        lsn = held_lsn;
      } else {
        off += k;
        lsn++;
      }
      continue;
    }
    if (r.type == RecType::kMapChecked && lsn > vouched) {
      if (!checking) {
        holding = true;
        held_off = off;
        held_lsn = lsn;
        off += k;
        lsn++;
        continue;
      }
      if (!check) return Status(Code::kInvalidArgument, "a data-checked map record to replay without a data check");
      Result<bool> same = check(r);
      if (!same.ok()) return same.status();
      if (!*same) {
        out.data_mismatch = true;  // ends replay here, as a tear would
        mismatched = DescribeRecord(r);
        break;
      }
    }
    if (sink) {
      Status applied = sink(std::move(r));
      if (!applied.ok()) return applied;
    } else {
      out.records.push_back(std::move(r));
    }
    out.replayed++;
    off += k;
    lsn++;
  }
  out.end = off;
  out.next_lsn = lsn;
  if (v1) {
    // No record vouches for another: only a newer generation is detectable.
    Record r;
    uint64_t found = 0;
    out.newer_generation = ParseRecordV1(p, avail, kNone, &r, &found) && found > lsn;
    return out;
  }

  // Replay stopped at `off`. A power cut can only tear the last commit, and
  // every record framed while that commit was in flight carries proven < lsn;
  // so a later CRC-valid record with proven >= lsn exists only if the record
  // expected here was durable. Scan every byte offset after the stop for one.
  // Only a line for each of the first records found is kept (JournalReplay::
  // lost), not the records: a damaged ring may hold millions of them.
  std::vector<std::string> later;
  uint64_t later_ops = 0;
  bool proof = false;
  for (uint64_t at = off; at + kRecordHeader <= n;) {
    // The headers the window holds, filtered without a call per byte.
    Status s = w.At(at, kRecordHeader, &p, &avail);
    if (!s.ok()) return s;
    const uint8_t* end = p + (avail - kRecordHeader + 1);
    const uint8_t* c = NextCandidate(p, end, lsn);
    at += c - p;
    if (c == end) continue;
    s = w.At(at, kMaxRecordBytes, &p, &avail);
    if (!s.ok()) return s;
    Record r;
    RecordFrame f;
    size_t k = ParseRecord(p, avail, kNone, &r, &f);
    if (k == 0) {
      out.failed_record_bytes += kRecordHeader + std::min<uint64_t>(U32(p + 4), avail - kRecordHeader);
      if (out.failed_record_bytes > JournalReplay::LaterScanBudget(n)) {
        out.unjudged = true;
        break;
      }
      at++;
      continue;
    }
    if (at == off) out.newer_generation = true;  // a valid record where ours should be
    if (f.proven >= lsn) proof = true;
    if (r.type != RecType::kSeal) {  // not an operation: nothing is lost with it
      if (later.size() < JournalReplay::kMaxLostLines)
        later.push_back("LSN " + std::to_string(f.lsn) + ": " + DescribeRecord(r));
      later_ops++;
    }
    at += k;
  }
  out.damaged = (proof || out.unjudged) && !out.newer_generation;
  if (!out.damaged && !out.newer_generation) return out;  // a torn tail: nothing was committed
  // The record at the stop: unreadable, or read whole with data that does
  // not match its CRCs (then what it was is known).
  if (out.damaged)
    out.lost.push_back("LSN " + std::to_string(lsn) + " at journal offset " + std::to_string(off) +
                       (out.data_mismatch ? ": " + mismatched + ", its data does not match its CRCs"
                                          : ": damaged, contents unknown"));
  out.lost_operations = (out.damaged ? 1 : 0) + later_ops;
  for (std::string& line : later) out.lost.push_back(std::move(line));
  if (later_ops > later.size())
    out.lost.push_back("... and " + std::to_string(later_ops - later.size()) +
                       " more operations after these (not listed)");
  if (out.damaged && out.unjudged)
    out.lost.push_back("journal offsets up to " + std::to_string(n) +
                       ": more damaged record headers than a power cut leaves, contents unknown");
  return out;
}

Result<bool> CheckMappedData(File* file, uint64_t data_offset, uint32_t grain, uint64_t grains,
                             const Record& r, uint64_t* budget) {
  if (r.crcs.size() != r.runs.size())  // DecodePayload's shape: only a caller's bug breaks it
    return Status(Code::kInvalidArgument, "a data-checked map record without one CRC per run");
  if (std::string why = CheckedRecordRule(r, grain, grains); !why.empty())
    return Status(Code::kCorruption, "journal replay: data-checked map record of LUN " + std::to_string(r.lun) +
                                         " names " + why);
  uint64_t bytes = 0;  // at most CheckedRecordRule's grains: no overflow
  for (const Run& x : r.runs) bytes += x.len * grain;
  if (bytes > *budget)
    return Status(Code::kCorruption,
                  "journal replay: the data-checked map records no later record vouches for name more grains "
                  "than the pool holds (at the one of LUN " + std::to_string(r.lun) + " mapping " +
                      std::to_string(bytes) + " bytes, " + std::to_string(*budget) +
                      " bytes left of the pool's grains): a writer names each grain once at most, so this "
                      "journal is damaged, not torn");
  *budget -= bytes;
  // Read in pieces (the CRC extends over them): a run may span grains as
  // large as the AU, and replay's memory stays kOneSyncWriteBytes.
  const size_t piece = kOneSyncWriteBytes;
  std::string buf;
  try {
    buf.resize(piece);
  } catch (...) {
    return StatusFromCurrentException("replay's data check");
  }
  for (size_t i = 0; i < r.runs.size(); i++) {
    const Run& x = r.runs[i];
    uint32_t crc = 0;
    uint64_t at = data_offset + x.phys * grain;  // within the pool: CheckedRecordRule
    for (uint64_t left = x.len * grain; left > 0;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, piece));
      Status s = file->Read(at, n, buf.data());
      if (!s.ok()) return s;
      crc = Crc32c(crc, buf.data(), n);
      at += n;
      left -= n;
    }
    if (crc != r.crcs[i]) return false;
  }
  return true;
}

Result<JournalReplay> ScanJournal(const uint8_t* j, size_t n, uint64_t start_lsn, uint32_t version) {
  MemoryJournalSource src(j, n);
  return ScanJournal(&src, start_lsn, version);
}

std::string JournalReplay::Explain() const {
  if (newer_generation)
    return "the journal is newer than every readable superblock (newest superblock damaged)";
  const std::string at = "journal record LSN " + std::to_string(next_lsn) + " at journal offset " + std::to_string(end);
  if (!damaged) {
    if (!data_mismatch) return "journal intact";
    // Its record reached the disk, its data did not all (one sync covers
    // both: the CRC rule). Clean: nothing after it was acknowledged.
    return at + " is a data-checked map whose grains do not hold the data its CRCs name, and no later " +
           "record proves it committed: a torn write of its data (its batch's sync never returned), " +
           "so it and the records after it, none acknowledged, were dropped";
  }
  if (data_mismatch && !unjudged)
    return at + " is a data-checked map whose grains do not hold the data its CRCs name (the record " +
           "itself is intact), although later records prove it was committed: its data was damaged or " +
           "overwritten since; opening would drop it and the " + std::to_string(lost_operations - 1) +
           " operation(s) after it (see 'cowctl pool check --repair')";
  if (unjudged)
    return at + (data_mismatch ? " is a data-checked map whose grains do not hold the data its CRCs name"
                               : " cannot be read") +
           ", and the journal after it holds more damaged " +
           "record headers than a power cut leaves, so whether later operations were committed " +
           "cannot be judged: opening would drop them (see 'cowctl pool check --repair')";
  return at + " is damaged although later records prove it was committed: " +
         "opening would drop it and the " + std::to_string(lost_operations - 1) +
         " operation(s) after it (see 'cowctl pool check --repair')";
}

}  // namespace cowstore::store
