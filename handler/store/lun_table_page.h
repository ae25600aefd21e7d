// SPDX-License-Identifier: Apache-2.0
// Format v3's LUN table (docs/design/store-v3.md 3.4, "one more page chain";
// plan step 5, wiring order a): the LUNs' names, sizes and identities,
// without their maps (those are the checkpoint tree's leaves, keyed by LUN
// id). FormatV3 (format_v3.h) writes the table at each checkpoint and reads
// it at open.
//
// A chain of 4 KiB pages written whole by one checkpoint; the superblock's
// LUN table root names the first page's address and the checkpoint's
// sequence. On disk, little-endian, exactly kLunPageBytes:
//   0  magic(8) "COWLUNT3"      8  page format version(4)   12 crc32c(4)
//   16 pool uuid(16)            32 checkpoint seq(8)        40 page number(4)
//   44 record count(4)          48 next page address(8)     56 next LUN id(4)
//   60 LUNs in the table(4)
//   64 records, then zeros to the end of the page.
// A record: id(4) block size(4) size in bytes(8) uuid(16) name(4 + length)
// and its attributes as a checkpoint writes them (EncodeLunAttrs). Records
// sit in id order, whole on one page, packed greedily: a page ends only where
// the next record does not fit on it, so a table has exactly one split into
// pages (one spelling) and the reader refuses any other. Only page 0 carries the next LUN id and
// the table's LUN count (later pages hold zeros there), so a chain cut short
// or a page dropped is seen; the CRC covers the page but its own four bytes.
//
// Why each check: the sequence must *equal* the root's (an older page left at
// a reused address after a lost write must not pass, as for leaves); the page
// number must equal the page's place in the chain (two pages of one
// checkpoint share pool and sequence, so only it refuses one written onto the
// other's address); next addresses are bounded and never repeat (a damaged
// chain must not loop or leave the pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/meta.h"   // LunAttrs, Encoder/Decoder
#include "handler/store/names.h"  // Uuid
#include "handler/store/status.h"

namespace cowstore::store {

constexpr size_t kLunPageBytes = 4096;
constexpr size_t kLunPageHeader = 64;
constexpr size_t kLunPageCrcOffset = 12;  // where the CRC sits (tests re-seal damaged pages)
constexpr uint32_t kLunPageVersion = 1;

struct LunRecord {
  uint32_t id = 0;
  std::string name;
  Uuid uuid{};
  uint64_t size = 0;  // bytes
  uint32_t bs = 512;
  LunAttrs attrs;
  bool operator==(const LunRecord& o) const;
};

// Bytes `r` takes on a page.
size_t LunRecordBytes(const LunRecord& r);

struct LunTablePage {
  Uuid pool{};
  uint64_t seq = 0;
  uint32_t page_no = 0;
  uint64_t next = 0;          // address of the next page; 0: the last
  uint32_t next_lun_id = 0;   // page 0 only
  uint32_t total_luns = 0;    // page 0 only
  std::vector<LunRecord> luns;
};

// kInvalidArgument (nothing written to *out) for a page the decoder would
// refuse: records that do not fit, out of id order, an invalid name or block
// size, a nonzero page-0 field on a later page, sequence 0.
Status EncodeLunTablePage(const LunTablePage& page, std::string* out);

struct LunTableExpect {
  Uuid pool{};
  uint64_t seq = 0;          // the superblock root's, exactly
  uint64_t min_address = 0;  // pages sit in [min_address, end_address), 4 KiB aligned
  uint64_t end_address = 0;
};

// Decodes page `page_no` of a chain. kInvalidArgument if n != kLunPageBytes;
// kUnsupported for a newer page version or an attribute this build does not
// know (any other version but this build's is kCorruption: page_version.h); otherwise kCorruption naming the first fault: magic, CRC, pool,
// sequence, page number, count, a record that does not decode or is out of
// order, an invalid name or block size, a next address unaligned or outside
// the bounds, page-0 fields on a later page, a nonzero tail.
Status DecodeLunTablePage(const void* p, size_t n, uint32_t page_no, const LunTableExpect& expect,
                          LunTablePage* out);

// Pages WriteLunTable writes for `luns` (its greedy packing; at least 1):
// what a checkpoint asks metadata space for before it writes.
size_t LunTablePageCount(const std::vector<LunRecord>& luns);

// Gives a fresh page address for each page, or fails (nothing then used).
using LunPageAllocator = std::function<Result<uint64_t>()>;

// Writes the table (records in id order, unique names) as a chain at fresh
// addresses; returns the first page's address in *root and in *written
// every address it took from `alloc` (also on failure, written or not, for
// the caller to give back). An empty
// table is one page with no records. Does not sync: the caller syncs before
// the superblock that names *root.
Status WriteLunTable(File* file, const Uuid& pool, uint64_t seq, uint32_t next_lun_id,
                     const std::vector<LunRecord>& luns, const LunPageAllocator& alloc,
                     uint64_t* root, std::vector<uint64_t>* written);

struct LunTable {
  uint32_t next_lun_id = 0;
  std::vector<LunRecord> luns;  // id order
  std::vector<uint64_t> pages;  // the chain's addresses, first to last
};

// Reads the chain at `root`, checking every page against `expect` and the
// whole: ids strictly increasing and below the next LUN id, names unique,
// the count page 0 declares, no page with no records but an empty table's,
// no page but the last with room for the next page's first record (the
// writer's greedy packing, one rule for both), no address twice.
Status ReadLunTable(File* file, uint64_t root, const LunTableExpect& expect, LunTable* out);

}  // namespace cowstore::store
