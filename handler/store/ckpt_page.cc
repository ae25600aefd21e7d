// SPDX-License-Identifier: Apache-2.0
#include "handler/store/ckpt_page.h"

#include <cstring>
#include <utility>

#include "handler/store/crc32c.h"
#include "handler/store/meta.h"  // Encoder, Decoder: the store's one little-endian codec
#include "handler/store/page_version.h"

namespace cowstore::store {
namespace {

constexpr char kLeafMagic[8] = {'C', 'O', 'W', 'L', 'E', 'A', 'F', '3'};
constexpr uint64_t kLenLowMask = 0xffff;

// The CRC of a page: every byte but the CRC's own four.
uint32_t PageCrc(const uint8_t* p) { return Crc32cAroundField(p, kLeafPageBytes, kLeafPageCrcOffset); }

std::string Range(uint64_t first, uint64_t end) {
  return "[" + std::to_string(first) + ", " + std::to_string(end) + ")";
}

std::string RunText(size_t i, const Run& r) {
  return "run " + std::to_string(i) + " (lba " + std::to_string(r.lba) + ", phys " +
         std::to_string(r.phys) + ", " + std::to_string(r.len) + " grains)";
}

// The rules a page's key range and runs obey, written once for both sides:
// the encoder refuses with kInvalidArgument, the decoder with kCorruption.
// The encoder has no physical bound beyond the packing's: it passes 2^48.
Status CheckRange(Code code, uint64_t first, uint64_t end) {
  if (first >= end) return Status(code, "empty key range " + Range(first, end));
  if (end > RunTree::kMaxKey) return Status(code, "key range " + Range(first, end) + " ends past 2^48");
  return Status::Ok();
}

Status CheckRun(Code code, size_t i, const Run& r, const Run* prev, uint64_t first, uint64_t end,
                uint64_t phys_grains) {
  if (r.len == 0) return Status(code, RunText(i, r) + " has length 0");
  if (!RunTree::Fits(r.lba, r.phys, r.len))
    return Status(code, RunText(i, r) + " does not fit 48-bit addresses and a 32-bit length");
  if (prev && r.lba < prev->lba)
    return Status(code, RunText(i, r) + " is unsorted: before run " + std::to_string(i - 1) +
                            " at lba " + std::to_string(prev->lba));
  if (prev && r.lba < prev->lba + prev->len)
    return Status(code, RunText(i, r) + " overlaps run " + std::to_string(i - 1) + ", which ends at lba " +
                            std::to_string(prev->lba + prev->len));
  if (prev && LeafRunsJoin(*prev, r))
    return Status(code, RunText(i, r) + " continues run " + std::to_string(i - 1) +
                            ": the map holds the two as one run");
  if (r.lba < first || r.lba >= end || r.len > end - r.lba)  // end - r.lba cannot wrap
    return Status(code, RunText(i, r) + " is outside the key range " + Range(first, end));
  if (r.phys >= phys_grains || r.len > phys_grains - r.phys)
    return Status(code, RunText(i, r) + " ends beyond the pool's " + std::to_string(phys_grains) +
                            " physical grains");
  return Status::Ok();
}

}  // namespace

Status EncodeLeafPage(const LeafPage& page, std::string* out) {
  const Code bad = Code::kInvalidArgument;
  if (Status s = CheckRange(bad, page.first_lba, page.end_lba); !s.ok()) return s;
  if (page.runs.size() > kLeafPageRuns)
    return Status(bad, std::to_string(page.runs.size()) + " runs do not fit a leaf page (at most " +
                           std::to_string(kLeafPageRuns) + ")");
  for (size_t i = 0; i < page.runs.size(); i++) {
    const Run* prev = i ? &page.runs[i - 1] : nullptr;
    if (Status s = CheckRun(bad, i, page.runs[i], prev, page.first_lba, page.end_lba, RunTree::kMaxKey);
        !s.ok())
      return s;
  }

  std::string s;
  s.reserve(kLeafPageBytes);
  Encoder e(&s);
  e.Bytes(kLeafMagic, sizeof kLeafMagic);
  e.U32(kLeafPageVersion);
  e.U32(0);  // the CRC, set below
  e.Bytes(page.pool.data(), page.pool.size());
  e.U32(page.lun);
  e.U32(static_cast<uint32_t>(page.runs.size()));
  e.U64(page.first_lba);
  e.U64(page.end_lba);
  e.U64(page.seq);
  for (const Run& r : page.runs) {
    const uint64_t m = r.len - 1;  // < 2^32: CheckRun
    e.U64(r.lba | (m & kLenLowMask) << 48);
    e.U64(r.phys | (m >> 16) << 48);
  }
  s.resize(kLeafPageBytes, '\0');
  std::string crc;
  Encoder(&crc).U32(PageCrc(reinterpret_cast<const uint8_t*>(s.data())));
  s.replace(kLeafPageCrcOffset, crc.size(), crc);
  *out = std::move(s);
  return Status::Ok();
}

Status DecodeLeafPage(const void* p, size_t n, const LeafPageExpect& expect, LeafPage* out) {
  if (n != kLeafPageBytes)
    return Status(Code::kInvalidArgument, "a leaf page is " + std::to_string(kLeafPageBytes) +
                                              " bytes, not " + std::to_string(n));
  const uint8_t* b = static_cast<const uint8_t*>(p);
  auto corrupt = [](const std::string& what) {
    return Status(Code::kCorruption, "checkpoint leaf page: " + what);
  };

  // Every read below stays inside b[0..kLeafPageBytes): the header and the
  // run slots are fixed positions, and the Decoder checks its bounds anyway.
  Decoder d(b, n);
  char magic[sizeof kLeafMagic];
  uint32_t version = 0, stored_crc = 0, lun = 0, count = 0;
  LeafPage page;
  if (!d.Bytes(magic, sizeof magic) || std::memcmp(magic, kLeafMagic, sizeof magic) != 0)
    return corrupt("bad magic (not a leaf page)");
  bool ok = d.U32(&version) && d.U32(&stored_crc) && d.Bytes(page.pool.data(), page.pool.size()) &&
            d.U32(&lun) && d.U32(&count) && d.U64(&page.first_lba) && d.U64(&page.end_lba) &&
            d.U64(&page.seq);
  if (!ok) return corrupt("truncated header");  // cannot happen: n is a whole page
  const uint32_t crc = PageCrc(b);
  if (stored_crc != crc)
    return corrupt("CRC mismatch (stored " + std::to_string(stored_crc) + ", computed " + std::to_string(crc) + ")");
  // CRC-valid from here on: what follows is a page some cowstore wrote, so a
  // mismatch is a misdirected or lost write, or a writer's bug.
  if (Status s = PageVersionRule("checkpoint leaf page", version, kLeafPageVersion); !s.ok()) return s;
  if (page.pool != expect.pool)
    return corrupt("foreign pool UUID " + UuidText(page.pool) + " (this pool is " + UuidText(expect.pool) + ")");
  page.lun = lun;
  if (lun != expect.lun)
    return corrupt("wrong LUN " + std::to_string(lun) + " (expected LUN " + std::to_string(expect.lun) + ")");
  if (page.seq != expect.seq)
    return corrupt(std::string(page.seq < expect.seq ? "stale" : "future") + " checkpoint sequence " +
                   std::to_string(page.seq) + " (the index expects " + std::to_string(expect.seq) + ")");
  if (count > kLeafPageRuns)
    return corrupt("run count " + std::to_string(count) + " too large (at most " +
                   std::to_string(kLeafPageRuns) + ")");
  if (Status s = CheckRange(Code::kCorruption, page.first_lba, page.end_lba); !s.ok())
    return corrupt(s.message());
  if (page.first_lba != expect.first_lba)
    return corrupt("misplaced page: its key range starts at lba " + std::to_string(page.first_lba) +
                   ", the index names it for lba " + std::to_string(expect.first_lba));
  if (page.end_lba != expect.end_lba)
    return corrupt("misplaced page: its key range ends at lba " + std::to_string(page.end_lba) +
                   ", the index names it up to lba " + std::to_string(expect.end_lba));

  page.runs.reserve(count);  // <= kLeafPageRuns: checked above
  for (uint32_t i = 0; i < count; i++) {
    uint64_t lo = 0, hi = 0;
    if (!d.U64(&lo) || !d.U64(&hi)) return corrupt("truncated run");  // cannot happen: count checked
    Run r;
    r.lba = lo & (RunTree::kMaxKey - 1);
    r.phys = hi & (RunTree::kMaxKey - 1);
    r.len = ((lo >> 48) | (hi >> 48) << 16) + 1;
    const Run* prev = i ? &page.runs.back() : nullptr;
    if (Status s = CheckRun(Code::kCorruption, i, r, prev, page.first_lba, page.end_lba, expect.phys_grains);
        !s.ok())
      return corrupt(s.message());
    page.runs.push_back(r);
  }
  for (size_t off = n - d.left(); off < n; off++)
    if (b[off] != 0) return corrupt("non-zero byte at offset " + std::to_string(off) + " after the last run");
  *out = std::move(page);
  return Status::Ok();
}

}  // namespace cowstore::store
