// SPDX-License-Identifier: Apache-2.0
#include "handler/store/lun_table_page.h"

#include <cstring>
#include <set>

#include "handler/store/crc32c.h"
#include "handler/store/page_version.h"

namespace cowstore::store {
namespace {

constexpr char kMagic[8] = {'C', 'O', 'W', 'L', 'U', 'N', 'T', '3'};

Status Corrupt(uint32_t page_no, const std::string& what) {
  return Status(Code::kCorruption, "LUN table page " + std::to_string(page_no) + ": " + what);
}

// The record rules encode and decode share: what a LUN may be (one rule
// with every loader's, meta.h), and no more blocks than the maps can key.
std::string RecordRule(const LunRecord& r) {
  if (std::string why = LunRecordRule(r.id, r.name, r.size, r.bs); !why.empty()) return why;
  return LunBlocksRule(r.size, r.bs);  // after LunRecordRule: the block size is valid
}

std::string AddressRule(uint64_t a, const LunTableExpect& e) {
  if (a % kLunPageBytes != 0) return "address " + std::to_string(a) + " unaligned";
  if (a < e.min_address || a >= e.end_address || e.end_address - a < kLunPageBytes)
    return "address " + std::to_string(a) + " outside the pool";
  return "";
}

// The packing rule, written once for the writer and the reader: records
// fill a page in id order and a page ends only where the next record does
// not fit after the `used` bytes it holds (header included). So a table has
// one split into pages, the greedy one, and a chain split anywhere else (a
// page ending with room for the next page's first record) is refused.
bool StartsNewPage(size_t used, const LunRecord& next) { return used + LunRecordBytes(next) > kLunPageBytes; }

void EncodeRecord(const LunRecord& r, Encoder* e) {
  e->U32(r.id);
  e->U32(r.bs);
  e->U64(r.size);
  e->Bytes(r.uuid.data(), r.uuid.size());
  e->Str(r.name);
  EncodeLunAttrs(r.attrs, e);
}

}  // namespace

bool LunRecord::operator==(const LunRecord& o) const {
  return id == o.id && name == o.name && uuid == o.uuid && size == o.size && bs == o.bs &&
         attrs.read_only == o.attrs.read_only && attrs.origin == o.attrs.origin &&
         attrs.created == o.attrs.created;
}

size_t LunRecordBytes(const LunRecord& r) {
  std::string s;
  Encoder e(&s);
  EncodeRecord(r, &e);
  return s.size();
}

Status EncodeLunTablePage(const LunTablePage& page, std::string* out) {
  auto bad = [](const std::string& why) {
    return Status(Code::kInvalidArgument, "LUN table page: " + why);
  };
  if (page.seq == 0) return bad("sequence 0");
  if (page.page_no != 0 && (page.next_lun_id != 0 || page.total_luns != 0))
    return bad("page-0 fields on a later page");
  if (page.page_no == 0 && page.next_lun_id == 0) return bad("next LUN id 0");
  std::string s;
  Encoder e(&s);
  e.Bytes(kMagic, sizeof kMagic);
  e.U32(kLunPageVersion);
  e.U32(0);  // the CRC, filled in last
  e.Bytes(page.pool.data(), page.pool.size());
  e.U64(page.seq);
  e.U32(page.page_no);
  e.U32(static_cast<uint32_t>(page.luns.size()));
  e.U64(page.next);
  e.U32(page.next_lun_id);
  e.U32(page.total_luns);
  for (size_t i = 0; i < page.luns.size(); i++) {
    const LunRecord& r = page.luns[i];
    if (std::string why = RecordRule(r); !why.empty()) return bad(why);
    if (i > 0 && page.luns[i - 1].id >= r.id) return bad("records out of id order");
    EncodeRecord(r, &e);
    if (s.size() > kLunPageBytes) return bad("records do not fit one page");
  }
  s.resize(kLunPageBytes, '\0');
  PutLittleEndian(s.data() + kLunPageCrcOffset, Crc32cAroundField(s.data(), s.size(), kLunPageCrcOffset), 4);
  *out = std::move(s);
  return Status::Ok();
}

Status DecodeLunTablePage(const void* p, size_t n, uint32_t page_no, const LunTableExpect& expect,
                          LunTablePage* out) {
  if (n != kLunPageBytes) return Status(Code::kInvalidArgument, "a LUN table page is 4096 bytes");
  const uint8_t* b = static_cast<const uint8_t*>(p);
  if (std::memcmp(b, kMagic, sizeof kMagic) != 0) return Corrupt(page_no, "bad magic");
  Decoder d(b + sizeof kMagic, n - sizeof kMagic);
  uint32_t version = 0, crc = 0, count = 0;
  LunTablePage pg;
  d.U32(&version);
  d.U32(&crc);
  if (crc != Crc32cAroundField(b, n, kLunPageCrcOffset)) return Corrupt(page_no, "CRC mismatch");
  // The CRC covers the version: it is what a writer wrote.
  if (Status s = PageVersionRule("LUN table page " + std::to_string(page_no), version, kLunPageVersion); !s.ok())
    return s;
  d.Bytes(pg.pool.data(), pg.pool.size());
  d.U64(&pg.seq);
  d.U32(&pg.page_no);
  d.U32(&count);
  d.U64(&pg.next);
  d.U32(&pg.next_lun_id);
  d.U32(&pg.total_luns);  // the header fits the page: none of these can fail
  if (pg.pool != expect.pool) return Corrupt(page_no, "belongs to another pool");
  if (pg.seq != expect.seq)
    return Corrupt(page_no, "sequence " + std::to_string(pg.seq) + " where the superblock names " +
                                std::to_string(expect.seq));
  if (pg.page_no != page_no)
    return Corrupt(page_no, "says it is page " + std::to_string(pg.page_no));
  if (page_no != 0 && (pg.next_lun_id != 0 || pg.total_luns != 0))
    return Corrupt(page_no, "page-0 fields on a later page");
  if (page_no == 0 && pg.next_lun_id == 0) return Corrupt(page_no, "next LUN id 0");
  if (pg.next != 0) {
    if (std::string why = AddressRule(pg.next, expect); !why.empty())
      return Corrupt(page_no, "next page " + why);
  }
  // A record takes at least 41 bytes (a one-letter name, no attributes), so
  // the count is bounded before anything is sized from it.
  if (count > (kLunPageBytes - kLunPageHeader) / 41)
    return Corrupt(page_no, "record count " + std::to_string(count));
  pg.luns.resize(count);
  for (uint32_t i = 0; i < count; i++) {
    LunRecord& r = pg.luns[i];
    if (!d.U32(&r.id) || !d.U32(&r.bs) || !d.U64(&r.size) || !d.Bytes(r.uuid.data(), 16) ||
        !d.Str(&r.name, kMaxNameLength) || !DecodeLunAttrs(&d, &r.attrs))
      return Corrupt(page_no, "record " + std::to_string(i) + " does not decode");
    if (r.attrs.unknown_tag)
      return Status(Code::kUnsupported, "LUN '" + r.name + "' has attribute " +
                                            std::to_string(r.attrs.unknown_tag) +
                                            ", which needs a newer cowstore");
    if (std::string why = RecordRule(r); !why.empty())
      return Corrupt(page_no, "record " + std::to_string(i) + ": " + why);
    if (i > 0 && pg.luns[i - 1].id >= r.id) return Corrupt(page_no, "records out of id order");
  }
  for (const uint8_t* t = d.here(); t < b + n; t++)
    if (*t != 0) return Corrupt(page_no, "nonzero bytes after the records");
  *out = std::move(pg);
  return Status::Ok();
}

size_t LunTablePageCount(const std::vector<LunRecord>& luns) {
  size_t pages = 1, used = kLunPageHeader;
  for (const LunRecord& r : luns) {
    if (StartsNewPage(used, r)) {
      pages++;
      used = kLunPageHeader;
    }
    used += LunRecordBytes(r);
  }
  return pages;
}

Status WriteLunTable(File* file, const Uuid& pool, uint64_t seq, uint32_t next_lun_id,
                     const std::vector<LunRecord>& luns, const LunPageAllocator& alloc,
                     uint64_t* root, std::vector<uint64_t>* written) {
  written->clear();
  std::set<std::string> names;
  for (size_t i = 0; i < luns.size(); i++) {
    const LunRecord& r = luns[i];
    // ReadLunTable's whole-table rules: a table it would refuse is never written.
    if (i > 0 && luns[i - 1].id >= r.id)
      return Status(Code::kInvalidArgument, "LUN records out of id order");
    if (r.id >= next_lun_id)
      return Status(Code::kInvalidArgument, "LUN id " + std::to_string(r.id) +
                                                " is not below the next LUN id");
    if (!names.insert(r.name).second)
      return Status(Code::kInvalidArgument, "LUN name " + r.name + " twice");
  }
  // Pack first: a page names the next one's address, so all are allocated
  // before any is encoded.
  std::vector<LunTablePage> pages(1);
  size_t used = kLunPageHeader;
  for (const LunRecord& r : luns) {
    if (StartsNewPage(used, r)) {
      pages.emplace_back();
      used = kLunPageHeader;
    }
    pages.back().luns.push_back(r);
    used += LunRecordBytes(r);
  }
  // Every address taken is reported in *written, written or not, so the
  // caller can give all of them back after a failure.
  std::vector<uint64_t> addrs;
  for (size_t i = 0; i < pages.size(); i++) {
    Result<uint64_t> a = alloc();
    if (!a.ok()) return a.status();
    addrs.push_back(*a);
    written->push_back(*a);
  }
  for (size_t i = 0; i < pages.size(); i++) {
    LunTablePage& pg = pages[i];
    pg.pool = pool;
    pg.seq = seq;
    pg.page_no = static_cast<uint32_t>(i);
    pg.next = i + 1 < pages.size() ? addrs[i + 1] : 0;
    if (i == 0) {
      pg.next_lun_id = next_lun_id;
      pg.total_luns = static_cast<uint32_t>(luns.size());
    }
    std::string img;
    Status s = EncodeLunTablePage(pg, &img);
    if (!s.ok()) return s;
    s = file->Write(addrs[i], img.size(), img.data());
    if (!s.ok()) return s;
  }
  *root = addrs[0];
  return Status::Ok();
}

Status ReadLunTable(File* file, uint64_t root, const LunTableExpect& expect, LunTable* out) {
  if (std::string why = AddressRule(root, expect); !why.empty())
    return Status(Code::kCorruption, "LUN table root " + why);
  LunTable t;
  std::set<uint64_t> seen;
  std::set<std::string> names;
  uint32_t total = 0;
  size_t used = 0;  // bytes the page before this one holds, header included
  std::string buf(kLunPageBytes, '\0');
  for (uint64_t addr = root, page_no = 0; addr != 0; page_no++) {
    if (!seen.insert(addr).second) return Corrupt(static_cast<uint32_t>(page_no), "chain loops");
    // Every page but an empty table's holds a record, so a chain longer than
    // the declared count is damage (and the loop is bounded by it).
    if (page_no > 0 && page_no >= total) return Corrupt(static_cast<uint32_t>(page_no), "chain longer than its LUNs");
    Status s = file->Read(addr, buf.size(), buf.data());
    if (!s.ok()) return s;
    LunTablePage pg;
    s = DecodeLunTablePage(buf.data(), buf.size(), static_cast<uint32_t>(page_no), expect, &pg);
    if (!s.ok()) return s;
    if (page_no == 0) {
      t.next_lun_id = pg.next_lun_id;
      total = pg.total_luns;
    }
    if (pg.luns.empty() && total != 0) return Corrupt(static_cast<uint32_t>(page_no), "no records");
    // The page before ended only if this page's first record did not fit on it.
    if (page_no > 0 && !StartsNewPage(used, pg.luns.front()))
      return Corrupt(static_cast<uint32_t>(page_no - 1),
                     "ends with room for LUN " + std::to_string(pg.luns.front().id) +
                         ", the next page's first record (the writer fills each page before the next)");
    used = kLunPageHeader;
    for (LunRecord& r : pg.luns) {
      if (!t.luns.empty() && t.luns.back().id >= r.id)
        return Corrupt(static_cast<uint32_t>(page_no), "records out of id order");
      if (r.id >= t.next_lun_id)
        return Corrupt(static_cast<uint32_t>(page_no), "LUN id " + std::to_string(r.id) +
                                                           " not below the next LUN id");
      if (!names.insert(r.name).second)
        return Corrupt(static_cast<uint32_t>(page_no), "LUN name " + r.name + " twice");
      if (t.luns.size() == total)
        return Corrupt(static_cast<uint32_t>(page_no), "more LUNs than page 0 declares");
      used += LunRecordBytes(r);
      t.luns.push_back(std::move(r));
    }
    t.pages.push_back(addr);
    addr = pg.next;
  }
  if (t.luns.size() != total)
    return Status(Code::kCorruption, "LUN table: " + std::to_string(t.luns.size()) + " LUNs where page 0 declares " +
                                         std::to_string(total));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace cowstore::store
