// SPDX-License-Identifier: Apache-2.0
// Format v3's checkpoint leaf page (docs/design/store-v3.md 3.4): one 4 KiB
// page holding a sorted slice [first_lba, end_lba) of one LUN's map as packed
// runs. The checkpoint tree (ckpt_tree.h) writes and reads these pages for
// FormatV3 (format_v3.h), under the index (ckpt_index.h).
//
// On disk, little-endian, exactly kLeafPageBytes:
//   0  magic(8) "COWLEAF3"     8  page format version(4)   12 crc32c(4)
//   16 pool uuid(16)           32 LUN id(4)                36 run count(4)
//   40 first lba(8)            48 end lba(8)               56 checkpoint seq(8)
//   64 runs[count], 16 bytes each, then zeros to the end of the page.
// A run is two u64: lo = lba | (len - 1) low 16 bits << 48, hi = phys |
// (len - 1) high 16 bits << 48: 48-bit LBA, 48-bit physical grain, 32-bit
// length as 3.1 says, the very packing and limits of RunTree (RunTree::Fits),
// so every run the in-RAM map holds is written as it is, never split. Storing
// len - 1 lets a run of 2^32 grains fit and makes a zero-length run
// impossible to express on disk (there is nothing to refuse: an all-zero
// field means one grain).
//
// One spelling per map: two runs next to each other on one page never join
// (LeafRunsJoin), since the map itself would hold them as one
// (ExtentMap::Insert merges them) and a rewrite would give other bytes. The
// rule is per page: a run split by a page boundary (a leaf's key range ends
// inside it) is two pieces on two pages, and the reader's inserts join them.
// The CRC covers the whole page with its own four
// bytes left out (bytes [0, 12) then [16, 4096)), so damage anywhere,
// unused tail included, is seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "handler/store/names.h"  // Uuid
#include "handler/store/run_tree.h"  // Run, RunTree::Fits
#include "handler/store/status.h"

namespace cowstore::store {

constexpr size_t kLeafPageBytes = 4096;
constexpr size_t kLeafPageHeader = 64;
constexpr size_t kLeafPageRunBytes = 16;
constexpr size_t kLeafPageCrcOffset = 12;  // where the CRC sits (tests re-seal damaged pages)
constexpr uint32_t kLeafPageVersion = 1;
// Runs per page: as many as fit after the header. 3.4 budgets "<= 250"; the
// page holds 252, a little more than the design counted on.
constexpr uint32_t kLeafPageRuns = (kLeafPageBytes - kLeafPageHeader) / kLeafPageRunBytes;
static_assert(kLeafPageRuns == 252);
static_assert(kLeafPageRuns >= 250, "3.4's page budget assumes >= 250 runs a leaf");
static_assert(kLeafPageHeader + kLeafPageRuns * kLeafPageRunBytes <= kLeafPageBytes);

struct LeafPage {
  Uuid pool{};
  uint32_t lun = 0;
  uint64_t first_lba = 0;  // the key range the page covers: [first_lba, end_lba)
  uint64_t end_lba = 0;
  uint64_t seq = 0;        // the checkpoint sequence that wrote the page
  std::vector<Run> runs;   // in grains, sorted, disjoint, inside the key range
};

// Whether run b, right after run a, is one run with it in a map: b
// continues a in both lba and phys and the two together are at most
// RunTree::kMaxLen long, exactly when RunTree::Insert (a kMapping tree, so
// ExtentMap::Insert) merges two neighbours. Longer neighbours stay apart in
// the map, so they are two runs on the page too.
inline bool LeafRunsJoin(const Run& a, const Run& b) {
  return a.lba + a.len == b.lba && a.phys + a.len == b.phys && a.len + b.len <= RunTree::kMaxLen;
}

// Replaces *out with the page's kLeafPageBytes bytes. kInvalidArgument
// (nothing written) if the key range is empty or reaches past 2^48, there are
// more than kLeafPageRuns runs, or a run has length 0, does not fit the
// packing (RunTree::Fits), lies outside the key range, is not after the
// run before it (unsorted or overlapping) or joins it (LeafRunsJoin).
Status EncodeLeafPage(const LeafPage& page, std::string* out);

// What the reader knows before it reads a page, from the superblock and the
// index entry that names it.
struct LeafPageExpect {
  Uuid pool{};
  uint32_t lun = 0;
  // The exact sequence of the checkpoint that wrote this page, as the index
  // entry records it (ZFS's birth time in a block pointer). Shadowing names
  // an unchanged page again from a later checkpoint's index, so the
  // superblock's sequence is only an upper bound; but an upper bound would
  // accept an older, CRC-valid page still at the address when the write that
  // reused the address (pages are freed after each checkpoint, then reused)
  // was lost, and the map would silently go back in time. Exact equality
  // refuses both that stale page and one from a future (unnamed) checkpoint.
  uint64_t seq = 0;
  // The first LBA of the key range the index entry names the page for. The
  // sequence alone cannot tell two leaves written by one checkpoint apart: a
  // misdirected write of leaf B onto leaf A's new address would pass every
  // other check, and the map would lose A's runs and hold B's twice.
  uint64_t first_lba = 0;
  // And its end: the neighbouring entries were checked against the entry's
  // range, so a page whose range (and so its runs) reached past it would
  // overlap the next leaf unseen.
  uint64_t end_lba = 0;
  // Physical grains in the pool: every run must end at or before it.
  uint64_t phys_grains = 0;
};

// Decodes the page at p[0..n). kInvalidArgument if n != kLeafPageBytes.
// kCorruption, its message naming the first fault found, for: bad magic, CRC
// mismatch, a foreign pool UUID, a wrong LUN, a stale or future sequence, a
// run count above kLeafPageRuns, an empty or out-of-bounds key range, a key
// range other than the one the index entry names, a run
// unsorted, overlapping, joining the run before it (LeafRunsJoin), outside
// the key range or beyond phys_grains, and
// non-zero bytes after the last run, a page format version that is not this
// build's and not a later one (0). kUnsupported for a later page format
// version (page_version.h). Reads nothing outside p[0..n), reserves runs only
// after their count is checked, and leaves *out unchanged unless it succeeds.
Status DecodeLeafPage(const void* p, size_t n, const LeafPageExpect& expect, LeafPage* out);

}  // namespace cowstore::store
