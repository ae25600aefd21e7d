// SPDX-License-Identifier: Apache-2.0
#include "handler/store/ckpt_index.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "handler/store/crc32c.h"
#include "handler/store/meta.h"  // Encoder, Decoder: the store's one little-endian codec
#include "handler/store/page_version.h"
#include "handler/store/run_tree.h"  // RunTree::kMaxKey: the 48-bit LBA bound

namespace cowstore::store {
namespace {

constexpr char kIndexMagic[8] = {'C', 'O', 'W', 'I', 'N', 'D', 'X', '3'};
constexpr uint64_t kMaxLba = RunTree::kMaxKey;

uint32_t PageCrc(const uint8_t* p) { return Crc32cAroundField(p, kIndexPageBytes, kIndexPageCrcOffset); }

std::string KeyText(const IndexKey& k) { return std::to_string(k.lun) + ":" + std::to_string(k.lba); }
std::string Range(const IndexKey& first, const IndexKey& end) {
  return "[" + KeyText(first) + ", " + KeyText(end) + ")";
}
std::string EntryText(size_t i, const IndexEntry& e) {
  return "entry " + std::to_string(i) + " (" + Range(e.first, e.end) + " at " + std::to_string(e.addr) +
         ", seq " + std::to_string(e.seq) + ")";
}


// The rules an entry obeys, written once for both sides: the encoder refuses
// with kInvalidArgument, the decoder with kCorruption. The encoder knows no
// pool, so its address bound is only the format's.
Status CheckEntry(Code code, size_t i, const IndexEntry& e, const IndexEntry* prev, uint32_t level,
                  uint64_t page_seq, uint64_t addr_begin, uint64_t addr_end) {
  if (e.first.lba >= kMaxLba || e.end.lba > kMaxLba)
    return Status(code, EntryText(i, e) + " has an LBA past 2^48");
  if (e.first >= e.end) return Status(code, EntryText(i, e) + " has an empty key range");
  if (level == 0 && e.end.lun != e.first.lun)
    return Status(code, EntryText(i, e) + " names a leaf spanning LUNs");
  if (prev && e.first < prev->first)
    return Status(code, EntryText(i, e) + " is unsorted: before entry " + std::to_string(i - 1) + " at " +
                            KeyText(prev->first));
  if (prev && e.first < prev->end)
    return Status(code, EntryText(i, e) + " overlaps entry " + std::to_string(i - 1) + ", which ends at " +
                            KeyText(prev->end));
  if (Status s = CheckPageAddress(code, e.addr, addr_begin, addr_end); !s.ok())
    return Status(code, EntryText(i, e) + ": " + s.message());
  if (e.seq == 0) return Status(code, EntryText(i, e) + " has sequence 0, which no checkpoint writes");
  if (e.seq > page_seq)
    return Status(code, EntryText(i, e) + " is newer than its index page's seq " + std::to_string(page_seq));
  return Status::Ok();
}

// The key range a page's header must hold for its entries.
std::pair<IndexKey, IndexKey> EntriesRange(const std::vector<IndexEntry>& entries) {
  if (entries.empty()) return {IndexKey{}, IndexKey{}};
  return {entries.front().first, entries.back().end};
}

// Two entries naming one address: a page can hold only one thing.
Status CheckDistinctAddresses(Code code, const std::vector<IndexEntry>& entries) {
  std::vector<std::pair<uint64_t, size_t>> a;
  a.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); i++) a.push_back({entries[i].addr, i});
  std::sort(a.begin(), a.end());
  for (size_t i = 1; i < a.size(); i++)
    if (a[i].first == a[i - 1].first)
      return Status(code, "entries " + std::to_string(std::min(a[i - 1].second, a[i].second)) + " and " +
                              std::to_string(std::max(a[i - 1].second, a[i].second)) + " name one address " +
                              std::to_string(a[i].first));
  return Status::Ok();
}

Status CheckPage(Code code, const IndexPage& page, uint64_t addr_begin, uint64_t addr_end) {
  if (page.level > kIndexMaxLevel)
    return Status(code, "level " + std::to_string(page.level) + " past " + std::to_string(kIndexMaxLevel));
  if (page.entries.size() > kIndexPageEntries)
    return Status(code, std::to_string(page.entries.size()) + " entries do not fit an index page (at most " +
                            std::to_string(kIndexPageEntries) + ")");
  // Only an empty index has an empty page, its level-0 root: no parent can
  // name a page without keys, and an empty upper root would hide that.
  if (page.entries.empty() && page.level != 0)
    return Status(code, "empty page at level " + std::to_string(page.level) +
                            " (only a level-0 root may be empty)");
  for (size_t i = 0; i < page.entries.size(); i++) {
    const IndexEntry* prev = i ? &page.entries[i - 1] : nullptr;
    if (Status s = CheckEntry(code, i, page.entries[i], prev, page.level, page.seq, addr_begin, addr_end);
        !s.ok())
      return s;
  }
  if (Status s = CheckDistinctAddresses(code, page.entries); !s.ok()) return s;
  const auto [first, end] = EntriesRange(page.entries);
  if (page.first != first || page.end != end)
    return Status(code, "key range " + Range(page.first, page.end) + " is not its entries' " + Range(first, end));
  return Status::Ok();
}

}  // namespace

Status CheckPageAddress(Code code, uint64_t addr, uint64_t begin, uint64_t end) {
  if (addr % kIndexPageBytes != 0)
    return Status(code, "address " + std::to_string(addr) + " not a multiple of " + std::to_string(kIndexPageBytes));
  const uint64_t lowest = std::max(begin, kIndexMinAddress);
  if (addr < lowest)
    return Status(code, "address " + std::to_string(addr) + " below " + std::to_string(lowest) +
                            " (the superblocks, or before the pages' area)");
  if (addr >= end || end - addr < kIndexPageBytes)
    return Status(code, "address " + std::to_string(addr) + " past the end of the pages' area " +
                            std::to_string(end));
  return Status::Ok();
}

Status EncodeIndexPage(const IndexPage& page, std::string* out) {
  if (Status s = CheckPage(Code::kInvalidArgument, page, kIndexMinAddress, ~uint64_t{0}); !s.ok()) return s;
  std::string s;
  s.reserve(kIndexPageBytes);
  Encoder e(&s);
  e.Bytes(kIndexMagic, sizeof kIndexMagic);
  e.U32(kIndexPageVersion);
  e.U32(0);  // the CRC, set below
  e.Bytes(page.pool.data(), page.pool.size());
  e.U32(page.level);
  e.U32(static_cast<uint32_t>(page.entries.size()));
  e.U64(page.seq);
  e.U32(page.first.lun);
  e.U32(page.end.lun);
  e.U64(page.first.lba);
  e.U64(page.end.lba);
  for (const IndexEntry& x : page.entries) {
    e.U32(x.first.lun);
    e.U32(x.end.lun);
    e.U64(x.first.lba);
    e.U64(x.end.lba);
    e.U64(x.addr);
    e.U64(x.seq);
  }
  s.resize(kIndexPageBytes, '\0');
  std::string crc;
  Encoder(&crc).U32(PageCrc(reinterpret_cast<const uint8_t*>(s.data())));
  s.replace(kIndexPageCrcOffset, crc.size(), crc);
  *out = std::move(s);
  return Status::Ok();
}

Status DecodeIndexPage(const void* p, size_t n, const IndexPageExpect& expect, IndexPage* out) {
  if (n != kIndexPageBytes)
    return Status(Code::kInvalidArgument, "an index page is " + std::to_string(kIndexPageBytes) +
                                              " bytes, not " + std::to_string(n));
  const uint8_t* b = static_cast<const uint8_t*>(p);
  auto corrupt = [](const std::string& what) {
    return Status(Code::kCorruption, "checkpoint index page: " + what);
  };

  // Every read below stays inside b[0..kIndexPageBytes): the header and the
  // entry slots are fixed positions, and the Decoder checks its bounds anyway.
  Decoder d(b, n);
  char magic[sizeof kIndexMagic];
  uint32_t version = 0, stored_crc = 0, count = 0;
  IndexPage page;
  if (!d.Bytes(magic, sizeof magic) || std::memcmp(magic, kIndexMagic, sizeof magic) != 0)
    return corrupt("bad magic (not an index page)");
  bool ok = d.U32(&version) && d.U32(&stored_crc) && d.Bytes(page.pool.data(), page.pool.size()) &&
            d.U32(&page.level) && d.U32(&count) && d.U64(&page.seq) && d.U32(&page.first.lun) &&
            d.U32(&page.end.lun) && d.U64(&page.first.lba) && d.U64(&page.end.lba);
  if (!ok) return corrupt("truncated header");  // cannot happen: n is a whole page
  const uint32_t crc = PageCrc(b);
  if (stored_crc != crc)
    return corrupt("CRC mismatch (stored " + std::to_string(stored_crc) + ", computed " + std::to_string(crc) + ")");
  // CRC-valid from here on: a mismatch is a misdirected or lost write, or a
  // writer's bug.
  if (Status s = PageVersionRule("checkpoint index page", version, kIndexPageVersion); !s.ok()) return s;
  if (page.pool != expect.pool)
    return corrupt("foreign pool UUID " + UuidText(page.pool) + " (this pool is " + UuidText(expect.pool) + ")");
  if (page.seq != expect.seq)
    return corrupt(std::string(page.seq < expect.seq ? "stale" : "future") + " checkpoint sequence " +
                   std::to_string(page.seq) + " (the parent expects " + std::to_string(expect.seq) + ")");
  if (page.level != expect.level)
    return corrupt("wrong level " + std::to_string(page.level) + " (the parent expects level " +
                   std::to_string(expect.level) + ")");
  if (count > kIndexPageEntries)
    return corrupt("entry count " + std::to_string(count) + " too large (at most " +
                   std::to_string(kIndexPageEntries) + ")");
  if (page.first != expect.first || page.end != expect.end)
    return corrupt("misplaced page: key range " + Range(page.first, page.end) + ", the parent names it for " +
                   Range(expect.first, expect.end));

  page.entries.reserve(count);  // <= kIndexPageEntries: checked above
  for (uint32_t i = 0; i < count; i++) {
    IndexEntry x;
    if (!d.U32(&x.first.lun) || !d.U32(&x.end.lun) || !d.U64(&x.first.lba) || !d.U64(&x.end.lba) ||
        !d.U64(&x.addr) || !d.U64(&x.seq))
      return corrupt("truncated entry");  // cannot happen: count checked
    page.entries.push_back(x);
  }
  if (Status s = CheckPage(Code::kCorruption, page, expect.addr_begin, expect.addr_end); !s.ok())
    return corrupt(s.message());
  for (size_t off = n - d.left(); off < n; off++)
    if (b[off] != 0) return corrupt("non-zero byte at offset " + std::to_string(off) + " after the last entry");
  *out = std::move(page);
  return Status::Ok();
}

std::string IndexRootRule(const IndexRoot& root) {
  const IndexEntry& e = root.entry;
  if (e.seq == 0) return "root sequence 0, which no checkpoint writes";
  if (root.level > kIndexMaxLevel)
    return "root level " + std::to_string(root.level) + " past " + std::to_string(kIndexMaxLevel);
  if (e.first.lba >= kMaxLba || e.end.lba > kMaxLba)
    return "root key range " + Range(e.first, e.end) + " has an LBA past 2^48";
  // The empty index is kNoIndex, never a page (superblock_v3.h): one state,
  // one spelling, so a root always names at least one leaf.
  if (e.first >= e.end)
    return "root key range " + Range(e.first, e.end) + " is empty (the empty index is kNoIndex, never a page)";
  return "";
}

const IndexEntry* FindIndexEntry(const IndexPage& page, uint32_t lun, uint64_t lba) {
  const IndexKey k{lun, lba};
  // The first entry starting after k; the one before it is the only candidate.
  auto it = std::upper_bound(page.entries.begin(), page.entries.end(), k,
                             [](const IndexKey& key, const IndexEntry& e) { return key < e.first; });
  if (it == page.entries.begin()) return nullptr;
  --it;
  return k < it->end ? &*it : nullptr;
}

IndexPageExpect ExpectForChild(const IndexEntry& e, uint32_t child_level, const IndexPageExpect& parent) {
  IndexPageExpect x = parent;
  x.seq = e.seq;
  x.level = child_level;
  x.first = e.first;
  x.end = e.end;
  return x;
}

LeafPageExpect LeafExpectFor(const IndexEntry& e, const Uuid& pool, uint64_t phys_grains) {
  LeafPageExpect x;
  x.pool = pool;
  x.lun = e.first.lun;
  x.seq = e.seq;
  x.first_lba = e.first.lba;
  x.end_lba = e.end.lba;
  x.phys_grains = phys_grains;
  return x;
}

IndexEntry EntryFor(const IndexPage& page, uint64_t addr) {
  IndexEntry e;
  e.first = page.first;
  e.end = page.end;
  e.addr = addr;
  e.seq = page.seq;
  return e;
}

Status BuildIndexLevel(const Uuid& pool, uint64_t seq, uint32_t level, const std::vector<IndexEntry>& entries,
                       std::vector<IndexPage>* out) {
  if (entries.empty())
    return Status(Code::kInvalidArgument, "no entries: the empty index is kNoIndex, never a page");
  std::vector<IndexPage> pages;
  size_t i = 0;
  do {
    IndexPage page;
    page.pool = pool;
    page.seq = seq;
    page.level = level;
    const size_t n = std::min<size_t>(kIndexPageEntries, entries.size() - i);
    page.entries.assign(entries.begin() + static_cast<ptrdiff_t>(i), entries.begin() + static_cast<ptrdiff_t>(i + n));
    std::tie(page.first, page.end) = EntriesRange(page.entries);
    if (Status s = CheckPage(Code::kInvalidArgument, page, kIndexMinAddress, ~uint64_t{0}); !s.ok()) return s;
    // Across the page boundary too: the next page's first entry after this one's last.
    if (i > 0 && page.entries.front().first < entries[i - 1].end)
      return Status(Code::kInvalidArgument, EntryText(i, entries[i]) + " is not after entry " +
                                                std::to_string(i - 1) + ", which ends at " +
                                                KeyText(entries[i - 1].end));
    pages.push_back(std::move(page));
    i += n;
  } while (i < entries.size());
  *out = std::move(pages);
  return Status::Ok();
}

Status BuildIndex(const IndexPageExpect& bound, uint64_t seq, const std::vector<IndexEntry>& leaves,
                  const std::function<Result<uint64_t>()>& alloc,
                  std::vector<std::pair<uint64_t, std::string>>* pages, IndexRoot* root) {
  // Nothing ReadIndex would refuse is written: it refuses a root of
  // sequence 0 (IndexRootRule), which no checkpoint writes.
  if (seq == 0) return Status(Code::kInvalidArgument, "index sequence 0, which no checkpoint writes");
  // Nor an empty root (IndexRootRule): no leaves is kNoIndex, no page.
  if (leaves.empty()) return Status(Code::kInvalidArgument, "no leaves: the empty index is kNoIndex, never a page");
  // Every address the index names, leaves and its own pages: each inside the
  // bound and used once, as ReadIndex demands.
  std::set<uint64_t> used;
  auto take = [&](uint64_t addr, const std::string& what) -> Status {
    if (Status s = CheckPageAddress(Code::kInvalidArgument, addr, bound.addr_begin, bound.addr_end); !s.ok())
      return Status(s.code(), what + ": " + s.message());
    if (!used.insert(addr).second)
      return Status(Code::kInvalidArgument, what + ": address " + std::to_string(addr) + " is used twice");
    return Status::Ok();
  };
  for (size_t i = 0; i < leaves.size(); i++)
    if (Status s = take(leaves[i].addr, "leaf " + EntryText(i, leaves[i])); !s.ok()) return s;

  std::vector<std::pair<uint64_t, std::string>> written;
  std::vector<IndexEntry> entries = leaves;
  for (uint32_t level = 0;; level++) {
    if (level > kIndexMaxLevel)
      return Status(Code::kInvalidArgument, std::to_string(leaves.size()) + " leaves need more than " +
                                                std::to_string(kIndexMaxLevel + 1) + " index levels");
    std::vector<IndexPage> built;
    if (Status s = BuildIndexLevel(bound.pool, seq, level, entries, &built); !s.ok()) return s;
    std::vector<IndexEntry> parents;
    parents.reserve(built.size());
    for (const IndexPage& page : built) {
      std::string bytes;
      if (Status s = EncodeIndexPage(page, &bytes); !s.ok()) return s;
      Result<uint64_t> addr = alloc();
      if (!addr.ok()) return addr.status();
      if (Status s = take(*addr, "the allocator's index page at level " + std::to_string(level)); !s.ok())
        return s;
      written.emplace_back(*addr, std::move(bytes));
      parents.push_back(EntryFor(page, *addr));
    }
    if (built.size() == 1) {
      pages->insert(pages->end(), std::make_move_iterator(written.begin()), std::make_move_iterator(written.end()));
      root->entry = parents.front();
      root->level = level;
      return Status::Ok();
    }
    entries = std::move(parents);
  }
}

Status ReadIndex(const IndexRoot& root, const IndexPageExpect& bound,
                 const std::function<Status(uint64_t addr, std::string* page)>& read,
                 std::vector<IndexEntry>* leaves) {
  auto corrupt = [](const std::string& what) {
    return Status(Code::kCorruption, "checkpoint index: " + what);
  };
  if (std::string why = IndexRootRule(root); !why.empty()) return corrupt(why);
  if (Status s = CheckPageAddress(Code::kCorruption, root.entry.addr, bound.addr_begin, bound.addr_end); !s.ok())
    return corrupt("root " + s.message());
  std::vector<IndexEntry> out;
  std::set<uint64_t> seen;  // every address named so far, pages and leaves
  // Depth first, entries in order, so leaves come out sorted; the depth is
  // bounded by the level, which falls by one a step.
  struct Pending {
    IndexEntry entry;
    uint32_t level;
  };
  std::vector<Pending> stack{{root.entry, root.level}};
  seen.insert(root.entry.addr);
  while (!stack.empty()) {
    const Pending at = stack.back();
    stack.pop_back();
    std::string bytes;
    if (Status s = read(at.entry.addr, &bytes); !s.ok()) return s;
    IndexPage page;
    const IndexPageExpect expect = ExpectForChild(at.entry, at.level, bound);
    if (Status s = DecodeIndexPage(bytes.data(), bytes.size(), expect, &page); !s.ok())
      return Status(s.code(), s.message() + " (at address " + std::to_string(at.entry.addr) + ")");
    for (const IndexEntry& e : page.entries)
      if (!seen.insert(e.addr).second)
        return corrupt("address " + std::to_string(e.addr) + " named twice (in the page at " +
                       std::to_string(at.entry.addr) + ")");
    if (page.level == 0) {
      out.insert(out.end(), page.entries.begin(), page.entries.end());
      continue;
    }
    for (auto it = page.entries.rbegin(); it != page.entries.rend(); ++it) stack.push_back({*it, page.level - 1});
  }
  *leaves = std::move(out);
  return Status::Ok();
}

}  // namespace cowstore::store
