// SPDX-License-Identifier: Apache-2.0
// Fuzz target for format v3's on-disk codecs (superblock slot and chooser,
// checkpoint leaf page, checkpoint index page, LUN table page;
// docs/design/store-v3.md plan steps 5 and 10), before they are wired into
// the open path.
//
// Random bytes almost never pass a CRC, so the target builds a valid record
// from the input's first bytes, encodes it, then damages the encoding with
// (offset, xor) pairs from the rest, optionally resealing the CRCs as a buggy
// writer or a misdirected write would. Every input must then satisfy:
//  * no crash, no read outside the buffer, no unbounded allocation (ASan,
//    run_fuzzer.sh's memory limits);
//  * changed bytes whose CRC was not resealed are refused: every byte of a
//    slot or page is under a CRC;
//  * whatever decodes re-encodes to exactly the bytes it was decoded from:
//    a decoder that ignored a byte (or accepted two spellings of one value)
//    would let damage there pass silently;
//  * the chooser, given the intact copy and the damaged one, returns a copy
//    that decodes from the slot it names, and never an older sequence than a
//    valid copy beside it.
// Input layout: [codec][flags: bit 0 reseals; bit 1 (superblock) several
// journal extents][the record's parameters]
// [up to 16 (u16 offset, u8 xor) pairs].
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "handler/store/ckpt_index.h"
#include "handler/store/ckpt_page.h"
#include "handler/store/crc32c.h"
#include "handler/store/lun_table_page.h"
#include "handler/store/meta.h"
#include "handler/store/superblock_v3.h"
#include "tests/store/patch_bytes.h"  // Put32, ResealCrc

namespace cowstore::store {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// Reads the input front to back; past its end every value is 0.
class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t U8() { return at_ < n_ ? p_[at_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | U8() << 8); }
  uint32_t U32() { return U16() | static_cast<uint32_t>(U16()) << 16; }
  bool done() const { return at_ >= n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_v3_pages: %s\n", what);
    std::abort();
  }
}

// Applies the input's (offset, xor) pairs to *bytes.
void Damage(Input* in, std::string* bytes) {
  for (int i = 0; i < 16 && !in->done(); i++) {
    size_t off = in->U16() % bytes->size();
    uint8_t x = in->U8();
    (*bytes)[off] = static_cast<char>((*bytes)[off] ^ x);
  }
}

Uuid PoolId(uint8_t salt) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(0x40 + i + salt);
  return u;
}

// ---- superblock slot and chooser ----

void ResealSuperblock(std::string* slot) {
  Put32(slot, kSuperblockV3EnvelopeCrc, Crc32c(0, slot->data(), kSuperblockV3EnvelopeCrc));
  ResealCrc(slot, kSuperblockV3Crc);  // the slot CRC covers the envelope's
}

uint32_t Get32(const std::string& b, size_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | static_cast<uint8_t>(b[off + i]);
  return v;
}
uint64_t Get64(const std::string& b, size_t off) { return Get32(b, off) | uint64_t{Get32(b, off + 4)} << 32; }
uint64_t RawSeq(const std::string& slot) { return Get64(slot, kSuperblockV3Seq); }  // decoded or not
// Both CRCs match and the envelope says format 3: written whole by a v3 writer.
bool crc_valid(const std::string& slot) {
  auto* b = reinterpret_cast<const uint8_t*>(slot.data());
  return SuperblockEnvelopeVersion(b, slot.size()) == kFormatVersionV3 &&
         Get32(slot, kSuperblockV3Crc) == Crc32cAroundField(b, kSuperblockSlot, kSuperblockV3Crc);
}

// flags bit 1: a journal of several extents.
void FuzzSuperblock(Input* in, bool reseal, bool several_extents) {
  SuperblockV3 sb;
  sb.uuid = PoolId(in->U8());
  sb.seq = 2 + in->U16();
  sb.au = in->U8() & 1 ? kMiB : 64 * 1024;
  sb.grain = in->U8() & 1 ? sb.au : 4096;
  sb.data_offset = sb.au >= 8192 ? sb.au : 8192;
  sb.units = 64 + in->U16();
  sb.soft_threshold_percent = in->U8() % 101;
  sb.write_unit = 512u << (in->U8() % 4);
  sb.origin_format = 1 + in->U8() % 3;
  uint64_t journal_aus = 0, journal_end = 0;  // AUs in the journal; the first AU past its extents
  if (several_extents) {
    // 2-4 extents from AU 0 up, each after a gap of 0-2 AUs, listed in
    // device order or the reverse (another ring).
    const uint32_t n = 2 + in->U8() % 3;
    const bool reversed = in->U8() & 1;
    for (uint32_t i = 0; i < n; i++) {
      journal_end += in->U8() % 3;
      const uint64_t aus = 1 + in->U8() % (sb.au == kMiB ? 4 : 16);
      sb.journal.push_back({journal_end, aus});
      journal_end += aus;
      journal_aus += aus;
    }
    if (reversed) std::reverse(sb.journal.begin(), sb.journal.end());
    // An extent that continues the one before it (no gap, device order) is
    // the longer extent spelled in two: refused; its one spelling goes on.
    std::vector<JournalExtent> one;
    for (const JournalExtent& x : sb.journal) {
      if (!one.empty() && JournalExtentsJoin(one.back(), x))
        one.back().aus += x.aus;
      else
        one.push_back(x);
    }
    if (one != sb.journal) {
      // Only the spelling may be wrong: if the list's one spelling is refused
      // too (an extent past the pool's AUs, the LUN table page outside it),
      // the split list may be refused for that first.
      SuperblockV3 joined = sb;
      joined.journal = one;
      joined.lun_table = {sb.data_offset + (journal_end + 2) * sb.au, sb.seq};
      SuperblockV3 split = joined;
      split.journal = sb.journal;
      std::string ignored;
      if (EncodeSuperblockV3(joined, &ignored).ok()) {
        const Status st = EncodeSuperblockV3(split, &ignored);
        Check(st.code() == Code::kInvalidArgument &&
                  st.message().find("continues journal extent") != std::string::npos,
              "a journal extent continuing the one before it was encoded, or refused for another reason");
      }
      sb.journal = one;
    }
  } else {
    journal_aus = journal_end = sb.au == kMiB ? 1 + in->U8() % 8 : 1 + in->U8() % 64;
    sb.journal = {{0, journal_aus}};
  }
  sb.journal_start = (in->U16() % (journal_aus * sb.au / sb.write_unit)) * sb.write_unit;
  sb.journal_start_lsn = 1 + in->U32();
  // Every v3 superblock names a LUN table (an empty one is a page); the
  // index is optional.
  sb.lun_table = {sb.data_offset + (journal_end + 2) * sb.au, sb.seq};
  if (in->U8() & 1) {
    sb.index.entry.first = {in->U8(), in->U16()};
    sb.index.entry.end = {sb.index.entry.first.lun + in->U8() % 3, uint64_t{1} + in->U32()};
    sb.index.entry.addr = sb.data_offset + (journal_end + 1) * sb.au;
    sb.index.entry.seq = sb.seq - (in->U8() & 1);
    sb.index.level = in->U8() % (kIndexMaxLevel + 1);
  }
  std::string good;
  if (!EncodeSuperblockV3(sb, &good).ok()) return;  // a parameter choice the rules refuse
  const uint64_t device = sb.data_offset + sb.units * sb.au + (in->U8() & 1 ? 0 : kMiB);

  SuperblockV3 back;
  Check(DecodeSuperblockV3(good.data(), good.size(), device, &back).ok(), "a fresh encoding is refused");
  Check(back == sb, "a fresh encoding decodes to another superblock");
  // Sealed as a writer would, one sequence older than the LUN table it
  // names: a superblock never names a page of a later checkpoint.
  std::string older = good;
  Put64(&older, kSuperblockV3Seq, sb.lun_table.seq - 1);
  ResealSuperblock(&older);
  Check(DecodeSuperblockV3(older.data(), older.size(), device, &back).code() == Code::kCorruption,
        "a superblock older than its LUN table was accepted");

  std::string bad = good;
  Damage(in, &bad);
  if (reseal) ResealSuperblock(&bad);
  const bool differs = bad != good;
  SuperblockV3 got;
  Status s = DecodeSuperblockV3(bad.data(), bad.size(), device, &got);
  if (differs && !reseal) Check(!s.ok(), "a damaged slot without a matching CRC was accepted");
  if (s.ok()) {
    std::string again;
    Check(EncodeSuperblockV3(got, &again).ok(), "a decoded superblock does not encode");
    Check(again == bad, "a decoded superblock re-encodes to other bytes");
  }

  // The chooser, both orders.
  for (int order = 0; order < 2; order++) {
    const std::string& s0 = order ? bad : good;
    const std::string& s1 = order ? good : bad;
    SuperblockChoice c;
    Status cs = ChooseSuperblockV3(s0.data(), s1.data(), device, &c);
    if (!cs.ok()) continue;
    Check(c.slot == 0 || c.slot == 1, "the chooser names no slot");
    const std::string& from = c.slot == 0 ? s0 : s1;
    SuperblockV3 named;
    Check(DecodeSuperblockV3(from.data(), from.size(), device, &named).ok() && named == c.sb,
          "the chooser's copy is not the one in the slot it names");
    Check(c.sb.seq >= sb.seq, "the chooser took an older copy than a valid one beside it");
    if (s.ok() && got.seq > sb.seq) Check(c.sb == got, "the chooser did not take the newest valid copy");
    // A copy that passes both CRCs was written whole: refused by a field
    // while at least as new as the valid one, it must refuse the open, not
    // give way to the older copy (that would roll back acknowledged state).
    if (!s.ok() && s.code() == Code::kCorruption && crc_valid(bad) && RawSeq(bad) >= sb.seq)
      Check(false, "the chooser fell back past a CRC-valid copy at least as new");
  }
}

// ---- checkpoint leaf page ----

void FuzzLeaf(Input* in, bool reseal) {
  LeafPage page;
  page.pool = PoolId(in->U8());
  page.lun = in->U16();
  page.seq = 1 + in->U16();
  page.first_lba = uint64_t{in->U32()} << (in->U8() % 17);
  const uint32_t runs = in->U8() % (kLeafPageRuns + 1);
  uint64_t lba = page.first_lba, phys = in->U16();
  for (uint32_t i = 0; i < runs; i++) {
    const uint64_t hole = in->U8() % 4;  // a hole, or none
    // Runs that continue each other in both lba and phys are one run to the
    // map, and the page refuses them (LeafRunsJoin): keep a gap in one.
    if (i > 0 && hole == 0 && phys == page.runs.back().phys + page.runs.back().len) phys++;
    lba += hole;
    const uint64_t len = 1 + in->U16();
    page.runs.push_back({lba, phys, len});
    lba += len;
    phys += len + in->U8();
  }
  page.end_lba = lba + 1 + in->U8();
  std::string good;
  if (!EncodeLeafPage(page, &good).ok()) return;
  LeafPageExpect expect;
  expect.pool = page.pool;
  expect.lun = page.lun;
  expect.seq = page.seq;
  expect.first_lba = page.first_lba;
  expect.end_lba = page.end_lba;
  expect.phys_grains = phys + (in->U8() & 1 ? 0 : 1000);

  LeafPage back;
  Check(DecodeLeafPage(good.data(), good.size(), expect, &back).ok(), "a fresh leaf is refused");
  // The same mapping with its first long run split in two is a second
  // spelling: the encoder refuses it, and so does the decoder (the split
  // page is built as a valid one with the second piece one grain further,
  // then moved back and resealed).
  for (size_t i = 0; i < page.runs.size(); i++) {
    const Run r = page.runs[i];
    if (r.len < 2 || page.runs.size() == kLeafPageRuns) continue;
    const uint64_t head = r.len / 2;
    LeafPage split = page;
    split.runs[i].len = head;
    split.runs.insert(split.runs.begin() + i + 1, Run{r.lba + head, r.phys + head, r.len - head});
    std::string bytes;
    Check(EncodeLeafPage(split, &bytes).code() == Code::kInvalidArgument, "a leaf with a run split in two encodes");
    split.runs[i + 1].phys++;
    if (EncodeLeafPage(split, &bytes).ok()) {  // the gap may make it join the next run
      const size_t hi = kLeafPageHeader + (i + 1) * kLeafPageRunBytes + 8;
      Put64(&bytes, hi, Get64(bytes, hi) - 1);
      ResealCrc(&bytes, kLeafPageCrcOffset);
      Check(DecodeLeafPage(bytes.data(), bytes.size(), expect, &back).code() == Code::kCorruption,
            "a leaf with a run split in two decodes");
    }
    break;
  }
  LeafPageExpect other = expect;
  other.seq = expect.seq + 1;  // the index names a later write: this page is stale
  Check(!DecodeLeafPage(good.data(), good.size(), other, &back).ok(), "a stale leaf was accepted");
  other.seq = expect.seq - 1;  // the index names an earlier write: this page is from the future
  Check(!DecodeLeafPage(good.data(), good.size(), other, &back).ok(), "a leaf of a later sequence was accepted");
  // A leaf of another LUN or key range (a misdirected write) is refused.
  other = expect;
  other.lun = expect.lun + 1;
  Check(!DecodeLeafPage(good.data(), good.size(), other, &back).ok(), "a leaf of another LUN was accepted");
  other = expect;
  other.first_lba = expect.first_lba + 1;
  Check(!DecodeLeafPage(good.data(), good.size(), other, &back).ok(), "a leaf of another first LBA was accepted");
  other = expect;
  other.end_lba = expect.end_lba + 1;
  Check(!DecodeLeafPage(good.data(), good.size(), other, &back).ok(), "a leaf of another end LBA was accepted");

  std::string bad = good;
  Damage(in, &bad);
  if (reseal) ResealCrc(&bad, kLeafPageCrcOffset);
  LeafPage got;
  Status s = DecodeLeafPage(bad.data(), bad.size(), expect, &got);
  if (bad != good && !reseal) Check(!s.ok(), "a damaged leaf without a matching CRC was accepted");
  if (s.ok()) {
    std::string again;
    Check(EncodeLeafPage(got, &again).ok() && again == bad, "a decoded leaf re-encodes to other bytes");
    Check(got.pool == expect.pool && got.lun == expect.lun && got.seq == expect.seq &&
              got.first_lba == expect.first_lba && got.end_lba == expect.end_lba,
          "a leaf other than the one the index names was accepted");
    for (const Run& r : got.runs) Check(r.phys + r.len <= expect.phys_grains, "a run past the pool was accepted");
  }
}

// ---- checkpoint index page ----

void FuzzIndex(Input* in, bool reseal) {
  IndexPage page;
  page.pool = PoolId(in->U8());
  page.seq = 2 + in->U16();
  page.level = in->U8() % (kIndexMaxLevel + 1);
  const uint32_t n = in->U8() % (kIndexPageEntries + 1);
  uint32_t lun = in->U8();
  uint64_t lba = in->U32();
  uint64_t addr = kIndexMinAddress + uint64_t{in->U16()} * 4096;
  for (uint32_t i = 0; i < n; i++) {
    if (in->U8() % 8 == 0) {
      lun += 1;
      lba = in->U16();
    }
    IndexEntry e;
    e.first = {lun, lba};
    lba += 1 + in->U16();
    e.end = {lun, lba};
    lba += in->U8() % 2;
    e.addr = addr;
    addr += 4096 * (1 + in->U8() % 4);
    e.seq = page.seq - in->U8() % 2;
    page.entries.push_back(e);
  }
  if (!page.entries.empty()) {
    page.first = page.entries.front().first;
    page.end = page.entries.back().end;
  }
  std::string good;
  if (!EncodeIndexPage(page, &good).ok()) return;
  IndexPageExpect expect;
  expect.pool = page.pool;
  expect.seq = page.seq;
  expect.level = page.level;
  expect.first = page.first;
  expect.end = page.end;
  expect.addr_end = addr + (in->U8() & 1 ? 0 : 4096);

  IndexPage back;
  Check(DecodeIndexPage(good.data(), good.size(), expect, &back).ok(), "a fresh index page is refused");
  IndexPageExpect other = expect;
  other.level = (expect.level + 1) % (kIndexMaxLevel + 1);
  Check(!DecodeIndexPage(good.data(), good.size(), other, &back).ok(),
        "an index page of another level was accepted");
  other = expect;
  other.seq = expect.seq + 1;  // the parent names a later write: this page is stale
  Check(!DecodeIndexPage(good.data(), good.size(), other, &back).ok(), "a stale index page was accepted");
  other.seq = expect.seq - 1;
  Check(!DecodeIndexPage(good.data(), good.size(), other, &back).ok(),
        "an index page of a later sequence was accepted");

  std::string bad = good;
  Damage(in, &bad);
  if (reseal) ResealCrc(&bad, kIndexPageCrcOffset);
  IndexPage got;
  Status s = DecodeIndexPage(bad.data(), bad.size(), expect, &got);
  if (bad != good && !reseal) Check(!s.ok(), "a damaged index page without a matching CRC was accepted");
  if (s.ok()) {
    std::string again;
    Check(EncodeIndexPage(got, &again).ok() && again == bad, "a decoded index page re-encodes to other bytes");
    for (const IndexEntry& e : got.entries)
      Check(e.addr >= expect.addr_begin && e.addr + kIndexPageBytes <= expect.addr_end && e.seq <= got.seq,
            "an index entry outside its bounds was accepted");
  }
}

// ---- LUN table page ----

void FuzzLunTable(Input* in, bool reseal) {
  LunTablePage page;
  page.pool = PoolId(in->U8());
  page.seq = 1 + in->U16();
  page.page_no = in->U8() % 3;
  if (in->U8() & 1) page.next = (2 + in->U8()) * kLunPageBytes;
  if (page.page_no == 0) {
    page.next_lun_id = 1 + in->U16();
    page.total_luns = in->U8();
  }
  const uint32_t n = in->U8() % 40;
  uint32_t id = 0;
  for (uint32_t i = 0; i < n; i++) {
    LunRecord r;
    id += 1 + in->U8() % 3;
    r.id = id;
    r.name = "lun" + std::to_string(in->U16()) + std::string(in->U8() % 40, 'x');
    r.bs = in->U8() & 1 ? 512 : 4096;
    r.size = uint64_t{in->U32()} * r.bs;
    r.uuid = PoolId(in->U8());
    const uint8_t a = in->U8();
    r.attrs.read_only = a & 1;
    if (a & 2) r.attrs.origin = PoolId(static_cast<uint8_t>(a));
    if (a & 4) r.attrs.created = 1 + in->U32();
    page.luns.push_back(r);
  }
  std::string good;
  if (!EncodeLunTablePage(page, &good).ok()) return;  // too many for a page
  const LunTableExpect expect{page.pool, page.seq, 2 * kLunPageBytes, 300 * kLunPageBytes};

  LunTablePage back;
  Check(DecodeLunTablePage(good.data(), good.size(), page.page_no, expect, &back).ok(),
        "a fresh LUN table page is refused");
  LunTableExpect later = expect;
  later.seq = expect.seq + 1;
  Check(!DecodeLunTablePage(good.data(), good.size(), page.page_no, later, &back).ok(),
        "a stale LUN table page was accepted");
  later.seq = expect.seq - 1;
  Check(!DecodeLunTablePage(good.data(), good.size(), page.page_no, later, &back).ok(),
        "a LUN table page of a later sequence was accepted");
  Check(!DecodeLunTablePage(good.data(), good.size(), page.page_no + 1, expect, &back).ok(),
        "a LUN table page of another place in the chain was accepted");

  std::string bad = good;
  Damage(in, &bad);
  if (reseal) ResealCrc(&bad, kLunPageCrcOffset);
  LunTablePage got;
  Status s = DecodeLunTablePage(bad.data(), bad.size(), page.page_no, expect, &got);
  if (bad != good && !reseal) Check(!s.ok(), "a damaged LUN table page without a matching CRC was accepted");
  if (s.ok()) {
    std::string again;
    Check(EncodeLunTablePage(got, &again).ok() && again == bad,
          "a decoded LUN table page re-encodes to other bytes");
    Check(got.pool == expect.pool && got.seq == expect.seq && got.page_no == page.page_no,
          "a LUN table page other than the one the chain names was accepted");
  }
}

}  // namespace
}  // namespace cowstore::store

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cowstore::store;
  Input in(data, size);
  const uint8_t codec = in.U8();
  const uint8_t flags = in.U8();
  const bool reseal = flags & 1;
  switch (codec % 4) {
    case 0: FuzzSuperblock(&in, reseal, flags & 2); break;
    case 1: FuzzLeaf(&in, reseal); break;
    case 2: FuzzIndex(&in, reseal); break;
    default: FuzzLunTable(&in, reseal); break;
  }
  return 0;
}
