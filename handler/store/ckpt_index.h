// SPDX-License-Identifier: Apache-2.0
// Format v3's checkpoint index page (docs/design/store-v3.md 3.4): the pages
// that name every checkpoint leaf page (ckpt_page.h) by its key range, its
// address and the exact checkpoint sequence that wrote it. The codec, builder
// and reader; the checkpoint tree (ckpt_tree.h) writes and reads these pages
// for FormatV3 (format_v3.h), whose superblock names the root.
//
// On disk, little-endian, exactly kIndexPageBytes:
//   0  magic(8) "COWINDX3"     8  page format version(4)   12 crc32c(4)
//   16 pool uuid(16)           32 level(4)                 36 entry count(4)
//   40 checkpoint seq(8)       48 first lun(4)             52 end lun(4)
//   56 first lba(8)            64 end lba(8)
//   72 entries[count], 40 bytes each, then zeros to the end of the page:
//      0 first lun(4)  4 end lun(4)  8 first lba(8)  16 end lba(8)
//      24 page address(8)  32 page checkpoint seq(8)
// A key is (lun, lba), ordered by LUN then LBA; every range is [first, end).
// A level-0 entry names a leaf page: one LUN (end lun == first lun), exactly
// the leaf's key range, so the entry alone gives everything the leaf decoder
// checks (LeafExpectFor). A level-n entry (n >= 1) names a level n-1 index
// page by that page's header key range, which may span LUNs. Entries are
// sorted and disjoint (entry i's end <= entry i+1's first); gaps are allowed
// and are holes (no leaf: nothing mapped there). The header's key range is
// the first entry's first key to the last entry's end key ([0:0, 0:0) for an
// empty page, which the page codec still spells but no index has: the empty
// index is kNoIndex, and IndexRootRule refuses an empty root). Addresses are byte offsets of
// 4096-byte pages in the pool, so 0 and the two superblock slots below
// kIndexMinAddress can never be a page. An entry's sequence is never newer
// than its page's: shadowing rewrites a parent whenever a child changes.
// The CRC covers the whole page with its own four bytes left out (bytes
// [0, 12) then [16, 4096)), as the leaf page's does.
//
// Why 40-byte entries and several levels. 3.4 counted 16 bytes an entry, then
// 24 with the sequence; an entry here also carries its end key (so a gap, an
// overlap and a leaf's extent are checked from the index alone) and a second
// LUN (so upper levels use the same entry): 40 bytes, 100 a page. 1 M
// extents = 4,000-6,000 leaves (252 runs full, 2/3 full after random
// splits) = 40-60 level-0 pages + 1 root = 164-244 KiB, against 3.4's
// 144 KiB: still ~1 % of the 16-24 MiB of leaves. 10 M extents (16 TiB) =
// 40,000-60,000 leaves = 400-600 level-0 pages, 4-6 level-1 pages, 1 level-2
// root: a root naming index pages is needed as soon as there are more than
// 100 leaves, and a third level past 10,000. kIndexMaxLevel = 4 (100^5 =
// 10^10 leaves, 2.5 * 10^12 runs) is deeper than any pool can need.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/ckpt_page.h"  // LeafPageExpect, kLeafPageBytes
#include "handler/store/names.h"      // Uuid
#include "handler/store/status.h"

namespace cowstore::store {

constexpr size_t kIndexPageBytes = 4096;
constexpr size_t kIndexPageHeader = 72;
constexpr size_t kIndexEntryBytes = 40;
constexpr size_t kIndexPageCrcOffset = 12;  // where the CRC sits (tests re-seal damaged pages)
constexpr uint32_t kIndexPageVersion = 1;
constexpr uint32_t kIndexPageEntries = (kIndexPageBytes - kIndexPageHeader) / kIndexEntryBytes;
static_assert(kIndexPageEntries == 100);
static_assert(kIndexPageBytes == kLeafPageBytes, "leaf and index pages share one page size and allocator");
constexpr uint32_t kIndexMaxLevel = 4;
// Below this byte offset lie the two superblock copies: never a page.
constexpr uint64_t kIndexMinAddress = 2 * 4096;

struct IndexKey {
  uint32_t lun = 0;
  uint64_t lba = 0;  // in grains, < 2^48 (an end key may be 2^48)
  auto operator<=>(const IndexKey&) const = default;
};

struct IndexEntry {
  IndexKey first;     // the named page's key range [first, end)
  IndexKey end;
  uint64_t addr = 0;  // byte offset of the named page in the pool
  uint64_t seq = 0;   // the checkpoint sequence that wrote the named page
  bool operator==(const IndexEntry&) const = default;
};

struct IndexPage {
  Uuid pool{};
  uint64_t seq = 0;    // the checkpoint sequence that wrote this page
  uint32_t level = 0;  // 0: entries name leaf pages; n: entries name level n-1 index pages
  IndexKey first;      // key range: entries.front().first .. entries.back().end
  IndexKey end;
  std::vector<IndexEntry> entries;  // sorted, disjoint
};

// Replaces *out with the page's kIndexPageBytes bytes. kInvalidArgument
// (nothing written) if the level passes kIndexMaxLevel, there are more than
// kIndexPageEntries entries, the page is empty above level 0, the header's
// key range is not the entries' (see the layout), or an entry has an empty key range, an LBA past 2^48, a
// level-0 entry spans two LUNs, an entry is not after the one before it, its
// address is not a 4096-aligned offset at or above kIndexMinAddress, or its
// sequence is 0 (no checkpoint has it) or newer than the page's.
Status EncodeIndexPage(const IndexPage& page, std::string* out);

// What the reader knows before it reads an index page: from the parent
// entry that names it (ExpectForChild) or, for the root, from the superblock.
struct IndexPageExpect {
  Uuid pool{};
  uint64_t seq = 0;    // exact, as for leaves (ckpt_page.h's LeafPageExpect says why)
  uint32_t level = 0;
  IndexKey first;      // the key range the parent names the page for
  IndexKey end;
  // Every address an entry names must be a whole page inside
  // [addr_begin, addr_end) (the pool's metadata-capable area, e.g. from the
  // data offset to the end of the pool) and at or above kIndexMinAddress.
  uint64_t addr_begin = kIndexMinAddress;
  uint64_t addr_end = 0;
};

// Where a page may be, the one rule for every page address (leaf or index,
// writer or reader): a whole kIndexPageBytes-aligned page inside
// [begin, end) and at or above kIndexMinAddress (never over the
// superblocks). Ok, or `code` naming the fault.
Status CheckPageAddress(Code code, uint64_t addr, uint64_t begin, uint64_t end);

// Decodes the page at p[0..n). kInvalidArgument if n != kIndexPageBytes.
// kCorruption, its message naming the first fault found, for: bad magic, CRC
// mismatch, a foreign pool UUID, a stale or future sequence, a wrong level
// (or one past kIndexMaxLevel), no entries above level 0, an entry count
// above kIndexPageEntries, a key range other than the expected one or than
// the entries', an entry with an empty or out-of-bounds key range, spanning
// LUNs at level 0, unsorted or overlapping, with an address outside the
// bound or not page-aligned, two entries naming one address, an entry
// sequence 0 or newer than the page's, non-zero bytes after the last entry,
// and a page format version that is not this build's and not a later one
// (0). kUnsupported for a later page format version (page_version.h). Reads nothing outside p[0..n), reserves entries
// only after their count is checked, and leaves *out unchanged unless it
// succeeds.
Status DecodeIndexPage(const void* p, size_t n, const IndexPageExpect& expect, IndexPage* out);

// The entry whose key range holds (lun, lba), or nullptr (a hole, or outside
// the page). O(log entries). For a decoded (so sorted, disjoint) page.
const IndexEntry* FindIndexEntry(const IndexPage& page, uint32_t lun, uint64_t lba);

// What the decoder of the page `e` names must find, for the child's level.
IndexPageExpect ExpectForChild(const IndexEntry& e, uint32_t child_level, const IndexPageExpect& parent);
// What the leaf decoder must find at a level-0 entry's address: every field
// of LeafPageExpect comes from the entry but the pool and its size.
LeafPageExpect LeafExpectFor(const IndexEntry& e, const Uuid& pool, uint64_t phys_grains);
// The entry a parent names `page` by, once the caller has given it an address.
IndexEntry EntryFor(const IndexPage& page, uint64_t addr);

// Splits sorted, disjoint `entries` into full pages of `level` (each
// kIndexPageEntries but the last), key ranges set. kInvalidArgument (out
// untouched) for no entries (the empty index is kNoIndex, never a page) and
// for what EncodeIndexPage refuses.
Status BuildIndexLevel(const Uuid& pool, uint64_t seq, uint32_t level, const std::vector<IndexEntry>& entries,
                       std::vector<IndexPage>* out);

// The root as the superblock names it (superblock_v3.h records every field:
// ReadIndex checks the root page against all of them).
struct IndexRoot {
  IndexEntry entry;  // key range, address and sequence of the root page
  uint32_t level = 0;  // the root page's level: the index has level + 1 levels
  bool operator==(const IndexRoot&) const = default;
};

// The rules a root obeys wherever it is recorded, the address aside (its
// bound is the recorder's): sequence not 0, level at most kIndexMaxLevel, a
// key range inside the 48-bit LBA bound and not empty. The empty index is
// not a root page but kNoIndex (superblock_v3.h), so no root is empty: a
// superblock that decodes never names a tree the reader refuses for it.
// Empty if so, else why not. ReadIndex and the v3 superblock codec both
// apply it.
std::string IndexRootRule(const IndexRoot& root);

// Builds the whole index over `leaves` (sorted, disjoint level-0 entries):
// level 0, then parents until one page is left. `alloc` gives each page its
// address, children before parents, or the status that stops the build
// (no space). Appends (address, encoded page) to *pages and sets *root only
// on success. kInvalidArgument if there are no leaves (the empty index is
// kNoIndex: nothing to write), the entries are invalid, need more than
// kIndexMaxLevel + 1 levels, or an address (a leaf's or one `alloc` gave) is
// outside `bound` (as ReadIndex would refuse it: unaligned, below
// bound.addr_begin or kIndexMinAddress, past bound.addr_end) or is used
// twice: an index ReadIndex would refuse is never written. `bound` gives the
// pool and the address bound; its seq, level and key range are ignored.
Status BuildIndex(const IndexPageExpect& bound, uint64_t seq, const std::vector<IndexEntry>& leaves,
                  const std::function<Result<uint64_t>()>& alloc,
                  std::vector<std::pair<uint64_t, std::string>>* pages, IndexRoot* root);

// Reads the index from `root` down, each page through `read` (which returns
// its kIndexPageBytes bytes) and checked against the entry naming it, and
// replaces *leaves with the level-0 entries in key order. Also refuses, with
// kCorruption, an address named twice anywhere in the index (a page or a
// leaf), and a root IndexRootRule refuses or whose page does not match it in
// every field (sequence, level, key range: a stale or misdirected root page
// is refused). `bound` gives the pool and the address bound; its seq, level
// and key range are ignored (they come from `root`). At most one read per
// page.
Status ReadIndex(const IndexRoot& root, const IndexPageExpect& bound,
                 const std::function<Status(uint64_t addr, std::string* page)>& read,
                 std::vector<IndexEntry>* leaves);

}  // namespace cowstore::store
