// SPDX-License-Identifier: Apache-2.0
// Unit tests of format v3's checkpoint index page codec (ckpt_index.h): round
// trips up to the format's limits, every invalid page refused by the
// encoder, every damage refused by the decoder with kCorruption naming it, a
// sweep flipping each bit of an encoded page, lookups at the edges, and the
// builder and reader over a 40,000-leaf index.
#include "handler/store/ckpt_index.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "handler/store/crc32c.h"
#include "tests/store/patch_bytes.h"
#include "handler/store/meta.h"  // Encoder: writes the test's damage in the page's own byte order

namespace cowstore::store {
namespace {

constexpr uint64_t k48 = uint64_t{1} << 48;
constexpr uint64_t kPage = 4096;
// Header and entry field offsets (ckpt_index.h's layout, restated: the test
// checks the on-disk format, not the codec's idea of it).
constexpr size_t kOffVersion = 8, kOffUuid = 16, kOffLevel = 32, kOffCount = 36, kOffSeq = 40,
                 kOffFirstLun = 48, kOffFirstLba = 56, kOffEndLba = 64;
constexpr size_t kEntFirstLun = 0, kEntEndLun = 4, kEntFirstLba = 8, kEntEndLba = 16, kEntAddr = 24,
                 kEntSeq = 32;
// The pool's page area in these tests: [1 MiB, 1 GiB).
constexpr uint64_t kAreaBegin = 1 << 20, kAreaEnd = uint64_t{1} << 30;

Uuid PoolId(uint8_t x) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(x + 17 * i);
  return u;
}

IndexEntry Leaf(uint32_t lun, uint64_t first, uint64_t end, uint64_t addr, uint64_t seq) {
  return IndexEntry{{lun, first}, {lun, end}, addr, seq};
}

// `n` leaf entries over a few LUNs, adjacent and gapped, sorted, addresses
// inside the test area, sequences <= 42.
std::vector<IndexEntry> SomeLeaves(size_t n, uint32_t luns = 3) {
  std::vector<IndexEntry> v;
  const size_t per_lun = (n + luns - 1) / luns;
  for (size_t i = 0; i < n; i++) {
    const uint32_t lun = static_cast<uint32_t>(1 + 2 * (i / per_lun));
    const uint64_t j = i % per_lun;
    const uint64_t first = j * 1000 + (j % 3 == 2 ? 7 : 0);  // some gaps
    v.push_back(Leaf(lun, first, (j + 1) * 1000, kAreaBegin + i * kPage, 1 + i % 42));
  }
  return v;
}

IndexPage PageOf(std::vector<IndexEntry> entries, uint32_t level = 0, uint64_t seq = 42) {
  IndexPage p;
  p.pool = PoolId(0x5a);
  p.seq = seq;
  p.level = level;
  p.entries = std::move(entries);
  if (!p.entries.empty()) {
    p.first = p.entries.front().first;
    p.end = p.entries.back().end;
  }
  return p;
}

IndexPageExpect ExpectFor(const IndexPage& p, uint64_t begin = kAreaBegin, uint64_t end = kAreaEnd) {
  IndexPageExpect e;
  e.pool = p.pool;
  e.seq = p.seq;
  e.level = p.level;
  e.first = p.first;
  e.end = p.end;
  e.addr_begin = begin;
  e.addr_end = end;
  return e;
}

std::string Encode(const IndexPage& p) {
  std::string out;
  Status s = EncodeIndexPage(p, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.size(), kIndexPageBytes);
  return out;
}

Status Decode(const std::string& bytes, const IndexPageExpect& e, IndexPage* out) {
  return DecodeIndexPage(bytes.data(), bytes.size(), e, out);
}

size_t EntryOff(size_t i) { return kIndexPageHeader + i * kIndexEntryBytes; }
void PutEntry(std::string* page, size_t i, const IndexEntry& e) {
  Put32(page, EntryOff(i) + kEntFirstLun, e.first.lun);
  Put32(page, EntryOff(i) + kEntEndLun, e.end.lun);
  Put64(page, EntryOff(i) + kEntFirstLba, e.first.lba);
  Put64(page, EntryOff(i) + kEntEndLba, e.end.lba);
  Put64(page, EntryOff(i) + kEntAddr, e.addr);
  Put64(page, EntryOff(i) + kEntSeq, e.seq);
}
void Reseal(std::string* page) { ResealCrc(page, kIndexPageCrcOffset); }

void ExpectRoundTrip(const IndexPage& p, uint64_t begin = kAreaBegin, uint64_t end = kAreaEnd) {
  std::string bytes = Encode(p);
  IndexPage back;
  Status s = Decode(bytes, ExpectFor(p, begin, end), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back.pool, p.pool);
  EXPECT_EQ(back.seq, p.seq);
  EXPECT_EQ(back.level, p.level);
  EXPECT_EQ(back.first, p.first);
  EXPECT_EQ(back.end, p.end);
  EXPECT_EQ(back.entries, p.entries);
}

TEST(CkptIndexPage, CapacityIsWhatFitsAfterTheHeader) {
  EXPECT_EQ(kIndexPageEntries, 100u);
  EXPECT_LE(kIndexPageHeader + kIndexPageEntries * kIndexEntryBytes, kIndexPageBytes);
  EXPECT_GT(kIndexPageHeader + (kIndexPageEntries + 1) * kIndexEntryBytes, kIndexPageBytes);
}

TEST(CkptIndexPage, RoundTripsEmptyOneFullAndManyLunPages) {
  ExpectRoundTrip(PageOf({}));  // an empty index: its root names nothing
  ExpectRoundTrip(PageOf({Leaf(7, 1000, 2000, kAreaBegin, 42)}));
  ExpectRoundTrip(PageOf(SomeLeaves(kIndexPageEntries)));
  ExpectRoundTrip(PageOf(SomeLeaves(kIndexPageEntries, 50)));  // 50 LUNs, 2 leaves each
  // Upper levels name index pages whose key ranges span LUNs.
  ExpectRoundTrip(PageOf({IndexEntry{{1, 0}, {3, 500}, kAreaBegin, 40},
                          IndexEntry{{3, 500}, {9, 1}, kAreaBegin + kPage, 42}},
                         1));
  ExpectRoundTrip(PageOf({IndexEntry{{1, 0}, {3, 500}, kAreaBegin, 40}}, kIndexMaxLevel));
}

TEST(CkptIndexPage, RoundTripsValuesAtTheFormatsLimits) {
  const uint32_t max_lun = ~uint32_t{0};
  const uint64_t last_page = (~uint64_t{0} / kPage - 1) * kPage;  // the last whole page below 2^64
  IndexPage p = PageOf({
                           Leaf(0, 0, 1, kIndexMinAddress, 1),  // lowest address and sequence a page may have
                           Leaf(0, 1, k48, kIndexMinAddress + kPage, 5),
                           Leaf(max_lun, 0, k48 - 1, last_page - kPage, ~uint64_t{0}),
                           Leaf(max_lun, k48 - 1, k48, last_page, ~uint64_t{0}),  // last grain of the last LUN
                       },
                       0, ~uint64_t{0});
  ExpectRoundTrip(p, 0, ~uint64_t{0});
  // An entry ending exactly at the area's end is inside it.
  p = PageOf({Leaf(1, 0, 10, kAreaEnd - kPage, 1)});
  ExpectRoundTrip(p);
}

void ExpectEncodeRefuses(const IndexPage& p, const std::string& what) {
  std::string out = "untouched";
  Status s = EncodeIndexPage(p, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
  EXPECT_EQ(out, "untouched");
}

TEST(CkptIndexPage, EncoderRefusesInvalidPages) {
  ExpectEncodeRefuses(PageOf({Leaf(1, 2000, 3000, kAreaBegin, 1), Leaf(1, 1000, 1500, kAreaBegin + kPage, 1)}),
                      "unsorted");
  ExpectEncodeRefuses(PageOf({Leaf(1, 1000, 3000, kAreaBegin, 1), Leaf(1, 2999, 4000, kAreaBegin + kPage, 1)}),
                      "overlaps");
  ExpectEncodeRefuses(PageOf({Leaf(1, 1000, 1000, kAreaBegin, 1)}), "empty key range");
  ExpectEncodeRefuses(PageOf({Leaf(1, 1000, k48 + 1, kAreaBegin, 1)}), "past 2^48");
  ExpectEncodeRefuses(PageOf({Leaf(1, k48, k48 + 1, kAreaBegin, 1)}), "past 2^48");
  ExpectEncodeRefuses(PageOf({IndexEntry{{1, 0}, {2, 10}, kAreaBegin, 1}}), "spanning LUNs");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, 0, 1)}), "address 0 below 8192");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kPage, 1)}), "address 4096 below 8192");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kAreaBegin + 1, 1)}), "not a multiple of 4096");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kAreaBegin, 1), Leaf(1, 10, 20, kAreaBegin, 1)}),
                      "entries 0 and 1 name one address");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kAreaBegin, 43)}), "newer than its index page's seq 42");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kAreaBegin, 0)}), "has sequence 0");
  std::vector<IndexEntry> many = SomeLeaves(kIndexPageEntries + 1);
  ExpectEncodeRefuses(PageOf(many), "101 entries do not fit");
  ExpectEncodeRefuses(PageOf({Leaf(1, 0, 10, kAreaBegin, 1)}, kIndexMaxLevel + 1), "level 5 past 4");
  IndexPage p = PageOf({Leaf(1, 0, 10, kAreaBegin, 1)});
  p.end.lba = 11;
  ExpectEncodeRefuses(p, "key range [1:0, 1:11) is not its entries' [1:0, 1:10)");
  p = PageOf({});
  p.end = {0, 1};
  ExpectEncodeRefuses(p, "is not its entries' [0:0, 0:0)");
  ExpectEncodeRefuses(PageOf({}, 1), "empty page at level 1");
}

// A valid page with three leaf entries, to damage.
struct CkptIndexPageDamage : ::testing::Test {
  void SetUp() override {
    page = PageOf({Leaf(3, 0, 1000, kAreaBegin, 40), Leaf(3, 1000, 2000, kAreaBegin + kPage, 42),
                   Leaf(5, 100, 200, kAreaBegin + 7 * kPage, 12)});
    bytes = Encode(page);
    expect = ExpectFor(page);
  }
  void ExpectRefused(const std::string& damaged, const IndexPageExpect& e, const std::string& what,
                     Code code = Code::kCorruption) {
    IndexPage out;
    out.level = 12345;  // a refusal leaves *out as it was
    Status s = Decode(damaged, e, &out);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
    EXPECT_EQ(out.level, 12345u);
    EXPECT_TRUE(out.entries.empty());
  }
  // Rewrites entry i and the header's key range to stay consistent with it,
  // then reseals: only the entry rule under test is broken.
  std::string WithEntry(size_t i, const IndexEntry& x) {
    std::string d = bytes;
    PutEntry(&d, i, x);
    Reseal(&d);
    return d;
  }
  IndexPage page;
  std::string bytes;
  IndexPageExpect expect;
};

TEST_F(CkptIndexPageDamage, UndamagedDecodes) {
  IndexPage out;
  ASSERT_TRUE(Decode(bytes, expect, &out).ok());
  EXPECT_EQ(out.entries, page.entries);
}

TEST_F(CkptIndexPageDamage, BadMagic) {
  std::string d = bytes;
  d[6] ^= 0x20;
  ExpectRefused(d, expect, "bad magic");
  ExpectRefused(std::string(kIndexPageBytes, '\0'), expect, "bad magic");  // a never-written page
  // A leaf page where an index page should be.
  LeafPage leaf;
  leaf.pool = page.pool;
  leaf.first_lba = 0;
  leaf.end_lba = 10;
  std::string leaf_bytes;
  ASSERT_TRUE(EncodeLeafPage(leaf, &leaf_bytes).ok());
  ExpectRefused(leaf_bytes, expect, "bad magic (not an index page)");
}

TEST_F(CkptIndexPageDamage, CrcMismatch) {
  std::string d = bytes;
  d[EntryOff(1) + 3] ^= 1;
  ExpectRefused(d, expect, "CRC mismatch");
  d = bytes;
  d[kIndexPageBytes - 1] = 1;  // in the unused tail: covered too
  ExpectRefused(d, expect, "CRC mismatch");
}

TEST_F(CkptIndexPageDamage, UnknownVersionIsUnsupported) {
  std::string d = bytes;
  Put32(&d, kOffVersion, kIndexPageVersion + 1);
  Reseal(&d);
  ExpectRefused(d, expect, "format version 2", Code::kUnsupported);
}

// Version 0 is no format any cowstore wrote: damage, not a later format.
TEST_F(CkptIndexPageDamage, VersionZeroIsCorruption) {
  std::string d = bytes;
  Put32(&d, kOffVersion, 0);
  Reseal(&d);
  ExpectRefused(d, expect, "format version 0");
}

TEST_F(CkptIndexPageDamage, ForeignPool) {
  IndexPageExpect e = expect;
  e.pool[15] ^= 1;
  ExpectRefused(bytes, e, "foreign pool UUID");
  std::string d = bytes;
  d[kOffUuid] ^= 0x80;  // a misdirected write of another pool's page carries a valid CRC
  Reseal(&d);
  ExpectRefused(d, expect, "foreign pool UUID");
}

TEST_F(CkptIndexPageDamage, StaleAndFutureSequence) {
  IndexPageExpect e = expect;
  e.seq = page.seq + 1;  // the parent names a newer write of this address: it was lost
  ExpectRefused(bytes, e, "stale checkpoint sequence 42 (the parent expects 43)");
  e.seq = page.seq - 1;
  ExpectRefused(bytes, e, "future checkpoint sequence 42");
  std::string d = bytes;
  Put64(&d, kOffSeq, 41);
  Reseal(&d);
  ExpectRefused(d, expect, "stale checkpoint sequence 41");
}

TEST_F(CkptIndexPageDamage, WrongLevel) {
  IndexPageExpect e = expect;
  e.level = 1;  // the parent expects an index page of level 1, finds level 0
  ExpectRefused(bytes, e, "wrong level 0 (the parent expects level 1)");
  std::string d = bytes;
  Put32(&d, kOffLevel, kIndexMaxLevel + 1);
  Reseal(&d);
  e.level = kIndexMaxLevel + 1;  // even if a parent asks for it
  ExpectRefused(d, e, "level 5 past 4");
}

// A root whose entries were cut to none: the index would read as empty.
TEST_F(CkptIndexPageDamage, EmptyPageAboveLevelZero) {
  std::string d = Encode(PageOf({}));
  Put32(&d, kOffLevel, 2);
  Reseal(&d);
  IndexPageExpect e = ExpectFor(PageOf({}));
  e.level = 2;
  ExpectRefused(d, e, "empty page at level 2");
}

TEST_F(CkptIndexPageDamage, EntryCountTooLarge) {
  for (uint32_t count : {kIndexPageEntries + 1, ~uint32_t{0}}) {
    std::string d = bytes;
    Put32(&d, kOffCount, count);
    Reseal(&d);
    ExpectRefused(d, expect, "entry count " + std::to_string(count) + " too large");
  }
}

TEST_F(CkptIndexPageDamage, KeyRangeOtherThanTheParentNames) {
  IndexPageExpect e = expect;
  e.first.lba = 1;
  ExpectRefused(bytes, e, "misplaced page: key range [3:0, 5:200), the parent names it for [3:1, 5:200)");
  e = expect;
  e.end = {5, 300};
  ExpectRefused(bytes, e, "misplaced page");
  e = expect;
  e.first.lun = 2;
  ExpectRefused(bytes, e, "misplaced page");
}

TEST_F(CkptIndexPageDamage, KeyRangeNotTheEntries) {
  // Header and parent agree, but the entries say otherwise.
  std::string d = bytes;
  Put64(&d, kOffEndLba, 300);
  Reseal(&d);
  IndexPageExpect e = expect;
  e.end = {5, 300};
  ExpectRefused(d, e, "key range [3:0, 5:300) is not its entries' [3:0, 5:200)");
  d = bytes;
  Put32(&d, kOffFirstLun, 2);
  Put64(&d, kOffFirstLba, 0);
  Reseal(&d);
  e = expect;
  e.first = {2, 0};
  ExpectRefused(d, e, "is not its entries'");
  // Count cut to two: the last entry dropped, its slot now a non-zero tail;
  // the header's range still names the third.
  d = bytes;
  Put32(&d, kOffCount, 2);
  Reseal(&d);
  ExpectRefused(d, expect, "key range [3:0, 5:200) is not its entries' [3:0, 3:2000)");
}

TEST_F(CkptIndexPageDamage, EntriesUnsortedOrOverlapping) {
  std::string d = bytes;
  PutEntry(&d, 0, page.entries[1]);
  PutEntry(&d, 1, page.entries[0]);
  Reseal(&d);
  ExpectRefused(d, expect, "entry 1 ([3:0, 3:1000) at 1048576, seq 40) is unsorted");
  IndexEntry x = page.entries[1];
  x.first.lba = 999;
  ExpectRefused(WithEntry(1, x), expect, "entry 1 ([3:999, 3:2000) at 1052672, seq 42) overlaps entry 0");
  x = page.entries[2];
  x.first = {3, 1999};
  ExpectRefused(WithEntry(2, x), expect, "spanning LUNs");
  x.end = {3, 2500};  // the same LUN as its neighbour and overlapping it, header to match
  Put64(&bytes, kOffEndLba, 2500);
  Put32(&bytes, kOffFirstLun + 4, 3);
  IndexPageExpect e = expect;
  e.end = {3, 2500};
  ExpectRefused(WithEntry(2, x), e, "overlaps entry 1, which ends at 3:2000");
}

TEST_F(CkptIndexPageDamage, EntryWithEmptyOrOversizedKeyRange) {
  IndexEntry x = page.entries[1];
  x.end.lba = x.first.lba;
  ExpectRefused(WithEntry(1, x), expect, "entry 1 ([3:1000, 3:1000) at 1052672, seq 42) has an empty key range");
  x = page.entries[1];
  x.end.lba = 999;
  ExpectRefused(WithEntry(1, x), expect, "has an empty key range");
  x = page.entries[1];
  x.end.lba = k48 + 1;
  ExpectRefused(WithEntry(1, x), expect, "has an LBA past 2^48");
}

TEST_F(CkptIndexPageDamage, AddressOutsideTheBound) {
  IndexEntry x = page.entries[1];
  for (uint64_t addr : {uint64_t{0}, kPage, kIndexMinAddress - 1}) {
    x.addr = addr;
    ExpectRefused(WithEntry(1, x), expect, "address " + std::to_string(addr));
  }
  x.addr = 0;
  ExpectRefused(WithEntry(1, x), expect, "address 0 below 1048576");
  IndexPageExpect low = expect;
  low.addr_begin = 0;  // even a caller without a bound never accepts the superblocks
  ExpectRefused(WithEntry(1, x), low, "address 0 below 8192");
  x.addr = kPage;
  ExpectRefused(WithEntry(1, x), low, "address 4096 below 8192 (the superblocks");
  x.addr = kAreaBegin - kPage;
  ExpectRefused(WithEntry(1, x), expect, "address 1044480 below 1048576");
  x.addr = kAreaBegin + 512;
  ExpectRefused(WithEntry(1, x), expect, "address 1049088 not a multiple of 4096");
  x.addr = kAreaEnd;
  ExpectRefused(WithEntry(1, x), expect, "address 1073741824 past the end of the pages' area 1073741824");
  x.addr = ~uint64_t{0} - kPage + 1;  // aligned, and adding a page would wrap
  ExpectRefused(WithEntry(1, x), expect, "past the end");
  IndexPageExpect tight = expect;
  tight.addr_end = kAreaBegin + 7 * kPage + kPage - 1;  // entry 2's page would end one byte past
  ExpectRefused(bytes, tight, "entry 2 ([5:100, 5:200) at 1077248, seq 12): address 1077248 past the end");
  tight.addr_end += 1;
  IndexPage out;
  EXPECT_TRUE(Decode(bytes, tight, &out).ok());
}

TEST_F(CkptIndexPageDamage, TwoEntriesNameOneAddress) {
  IndexEntry x = page.entries[2];
  x.addr = page.entries[0].addr;
  ExpectRefused(WithEntry(2, x), expect, "entries 0 and 2 name one address 1048576");
}

TEST_F(CkptIndexPageDamage, EntryNewerThanItsPage) {
  IndexEntry x = page.entries[0];
  x.seq = page.seq + 1;
  ExpectRefused(WithEntry(0, x), expect,
                "entry 0 ([3:0, 3:1000) at 1048576, seq 43) is newer than its index page's seq 42");
}

// Sequence 0 is no checkpoint's: an entry carrying it names a page nothing
// wrote (a zeroed entry resealed, or a writer's bug).
TEST_F(CkptIndexPageDamage, EntrySequenceZero) {
  IndexEntry x = page.entries[1];
  x.seq = 0;
  ExpectRefused(WithEntry(1, x), expect, "seq 0) has sequence 0, which no checkpoint writes");
}

TEST_F(CkptIndexPageDamage, NonZeroTail) {
  std::string d = bytes;
  const size_t off = EntryOff(3) + 1;  // a byte of the first unused slot
  d[off] = 1;
  Reseal(&d);
  ExpectRefused(d, expect, "non-zero byte at offset " + std::to_string(off));
  d = bytes;
  d[kIndexPageBytes - 1] = 1;  // past the last slot
  Reseal(&d);
  ExpectRefused(d, expect, "non-zero byte at offset 4095");
}

TEST_F(CkptIndexPageDamage, WrongSizeIsACallerError) {
  IndexPage out;
  EXPECT_EQ(DecodeIndexPage(bytes.data(), kIndexPageBytes - 1, expect, &out).code(), Code::kInvalidArgument);
  EXPECT_EQ(Decode(bytes + '\0', expect, &out).code(), Code::kInvalidArgument);
  EXPECT_EQ(DecodeIndexPage(nullptr, 0, expect, &out).code(), Code::kInvalidArgument);
}

// Every single-bit flip anywhere in the page is refused (CRC32C detects all
// of them; flips in the magic are reported as such), never accepted.
void SweepEveryBit(const IndexPage& p) {
  const std::string bytes = Encode(p);
  const IndexPageExpect e = ExpectFor(p);
  for (size_t bit = 0; bit < kIndexPageBytes * 8; bit++) {
    std::string d = bytes;
    d[bit / 8] = static_cast<char>(d[bit / 8] ^ (1 << (bit % 8)));
    IndexPage out;
    Status s = Decode(d, e, &out);
    ASSERT_EQ(s.code(), Code::kCorruption) << "bit " << bit << ": " << s.ToString();
    const bool named = s.message().find(bit < 64 ? "bad magic" : "CRC mismatch") != std::string::npos;
    ASSERT_TRUE(named) << "bit " << bit << ": " << s.message();
  }
}

TEST(CkptIndexPageSweep, EveryBitFlipRefusedFullPage) { SweepEveryBit(PageOf(SomeLeaves(kIndexPageEntries))); }

TEST(CkptIndexPageSweep, EveryBitFlipRefusedPartlyFilledAndEmptyPages) {
  SweepEveryBit(PageOf(SomeLeaves(30)));  // so flips land in the zero tail too
  SweepEveryBit(PageOf({}));
}

// The checks behind the CRC, on their own: each bit flipped and the CRC made
// valid again. Whatever the decoder accepts must still be a well-formed page
// and the canonical encoding of what it decoded to.
TEST(CkptIndexPageSweep, ResealedBitFlipsNeverYieldAnInvalidPage) {
  const IndexPage p = PageOf(SomeLeaves(30));
  const std::string bytes = Encode(p);
  const IndexPageExpect e = ExpectFor(p);
  size_t accepted = 0;
  for (size_t bit = 0; bit < kIndexPageBytes * 8; bit++) {
    if (bit / 8 >= kIndexPageCrcOffset && bit / 8 < kIndexPageCrcOffset + 4) continue;  // Reseal overwrites it
    std::string d = bytes;
    d[bit / 8] = static_cast<char>(d[bit / 8] ^ (1 << (bit % 8)));
    Reseal(&d);
    IndexPage out;
    Status s = Decode(d, e, &out);
    if (!s.ok()) {
      ASSERT_TRUE(s.code() == Code::kCorruption || s.code() == Code::kUnsupported) << s.ToString();
      continue;
    }
    // Accepted: an address, a sequence or an inner key moved to values that
    // still obey every rule.
    accepted++;
    ASSERT_EQ(out.entries.size(), p.entries.size());
    EXPECT_EQ(out.first, e.first);
    EXPECT_EQ(out.end, e.end);
    for (size_t i = 0; i < out.entries.size(); i++) {
      const IndexEntry& x = out.entries[i];
      ASSERT_LT(x.first, x.end);
      ASSERT_EQ(x.first.lun, x.end.lun);
      ASSERT_LE(x.seq, out.seq);
      ASSERT_EQ(x.addr % kPage, 0u);
      ASSERT_GE(x.addr, kAreaBegin);
      ASSERT_LE(x.addr + kPage, kAreaEnd);
      if (i) {
        ASSERT_LE(out.entries[i - 1].end, x.first);
      }
    }
    std::string again;
    ASSERT_TRUE(EncodeIndexPage(out, &again).ok());
    ASSERT_EQ(again, d);
  }
  RecordProperty("accepted_resealed_flips", static_cast<int>(accepted));
}

TEST(CkptIndexLookup, FindsTheEntryHoldingAKeyAndNothingInHoles) {
  const IndexPage p = PageOf({Leaf(3, 0, 1000, kAreaBegin, 1), Leaf(3, 1000, 2000, kAreaBegin + kPage, 1),
                              Leaf(3, 2500, 3000, kAreaBegin + 2 * kPage, 1),
                              Leaf(5, 100, k48, kAreaBegin + 3 * kPage, 1)});
  auto at = [&](uint32_t lun, uint64_t lba) -> int {
    const IndexEntry* e = FindIndexEntry(p, lun, lba);
    return e ? static_cast<int>(e - p.entries.data()) : -1;
  };
  EXPECT_EQ(at(3, 0), 0);
  EXPECT_EQ(at(3, 999), 0);
  EXPECT_EQ(at(3, 1000), 1);  // the first grain of a range, adjacent to the one before
  EXPECT_EQ(at(3, 1999), 1);
  EXPECT_EQ(at(3, 2000), -1);  // a gap between entries is a hole
  EXPECT_EQ(at(3, 2499), -1);
  EXPECT_EQ(at(3, 2500), 2);
  EXPECT_EQ(at(3, 2999), 2);
  EXPECT_EQ(at(3, 3000), -1);  // past the LUN's last entry
  EXPECT_EQ(at(3, k48 - 1), -1);
  EXPECT_EQ(at(2, 500), -1);   // a LUN before the first
  EXPECT_EQ(at(4, 0), -1);     // a LUN between two
  EXPECT_EQ(at(5, 99), -1);
  EXPECT_EQ(at(5, 100), 3);
  EXPECT_EQ(at(5, k48 - 1), 3);  // the last grain there is
  EXPECT_EQ(at(6, 0), -1);
  EXPECT_EQ(at(~uint32_t{0}, k48 - 1), -1);
  EXPECT_EQ(FindIndexEntry(PageOf({}), 0, 0), nullptr);
  // An upper level's entries span LUNs.
  const IndexPage up = PageOf(
      {IndexEntry{{1, 0}, {3, 500}, kAreaBegin, 1}, IndexEntry{{3, 500}, {9, 1}, kAreaBegin + kPage, 1}}, 1);
  EXPECT_EQ(FindIndexEntry(up, 2, 12345), &up.entries[0]);
  EXPECT_EQ(FindIndexEntry(up, 3, 499), &up.entries[0]);
  EXPECT_EQ(FindIndexEntry(up, 3, 500), &up.entries[1]);
  EXPECT_EQ(FindIndexEntry(up, 9, 0), &up.entries[1]);
  EXPECT_EQ(FindIndexEntry(up, 9, 1), nullptr);
}

// The entry gives every check the leaf decoder makes: a leaf decodes against
// its own entry, and neither the neighbour's entry nor a newer write's does.
TEST(CkptIndexLeaf, TheEntryCarriesWhatTheLeafDecoderChecks) {
  const Uuid pool = PoolId(0x5a);
  LeafPage a;
  a.pool = pool;
  a.lun = 3;
  a.first_lba = 0;
  a.end_lba = 1000;
  a.seq = 40;
  a.runs = {{10, 500, 20}};
  LeafPage b = a;
  b.first_lba = 1000;
  b.end_lba = 2000;
  b.runs = {{1000, 600, 5}};
  std::string a_bytes, b_bytes;
  ASSERT_TRUE(EncodeLeafPage(a, &a_bytes).ok());
  ASSERT_TRUE(EncodeLeafPage(b, &b_bytes).ok());
  const IndexEntry ea = Leaf(3, 0, 1000, kAreaBegin, 40), eb = Leaf(3, 1000, 2000, kAreaBegin + kPage, 40);
  LeafPage out;
  ASSERT_TRUE(DecodeLeafPage(a_bytes.data(), a_bytes.size(), LeafExpectFor(ea, pool, 1000), &out).ok());
  EXPECT_EQ(out.runs, a.runs);
  // b written onto a's address by a misdirected write: same pool, LUN, seq.
  Status s = DecodeLeafPage(b_bytes.data(), b_bytes.size(), LeafExpectFor(ea, pool, 1000), &out);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("misplaced page"), std::string::npos) << s.message();
  IndexEntry newer = ea;
  newer.seq = 41;  // the index names a later write of a that was lost
  s = DecodeLeafPage(a_bytes.data(), a_bytes.size(), LeafExpectFor(newer, pool, 1000), &out);
  EXPECT_NE(s.message().find("stale checkpoint sequence 40"), std::string::npos) << s.message();
  IndexEntry shorter = ea;
  shorter.end.lba = 999;  // the entry ends before the page does: its runs could reach the next leaf
  s = DecodeLeafPage(a_bytes.data(), a_bytes.size(), LeafExpectFor(shorter, pool, 1000), &out);
  EXPECT_NE(s.message().find("ends at lba 1000, the index names it up to lba 999"), std::string::npos)
      << s.message();
  IndexEntry other_lun = eb;
  other_lun.first.lun = other_lun.end.lun = 4;
  s = DecodeLeafPage(b_bytes.data(), b_bytes.size(), LeafExpectFor(other_lun, pool, 1000), &out);
  EXPECT_NE(s.message().find("wrong LUN 3"), std::string::npos) << s.message();
}

TEST(CkptIndexBuild, FillsPagesAndKeepsTheKeyRanges) {
  const Uuid pool = PoolId(0x5a);
  std::vector<IndexPage> pages;
  // No entries, no page: the empty index is kNoIndex (superblock_v3.h).
  EXPECT_EQ(BuildIndexLevel(pool, 42, 0, {}, &pages).code(), Code::kInvalidArgument);
  EXPECT_TRUE(pages.empty());
  for (size_t n : {size_t{1}, size_t{kIndexPageEntries}, size_t{kIndexPageEntries + 1}, size_t{1000}}) {
    const std::vector<IndexEntry> leaves = SomeLeaves(n);
    ASSERT_TRUE(BuildIndexLevel(pool, 42, 0, leaves, &pages).ok());
    ASSERT_EQ(pages.size(), (n + kIndexPageEntries - 1) / kIndexPageEntries) << n;
    std::vector<IndexEntry> back;
    for (const IndexPage& p : pages) {
      EXPECT_EQ(p.first, p.entries.front().first);
      EXPECT_EQ(p.end, p.entries.back().end);
      EXPECT_EQ(p.entries.size(), &p == &pages.back() ? n - (pages.size() - 1) * kIndexPageEntries
                                                       : kIndexPageEntries);
      back.insert(back.end(), p.entries.begin(), p.entries.end());
      ExpectRoundTrip(p);
    }
    EXPECT_EQ(back, leaves);
  }
  // Entries out of order across a page boundary are refused, out untouched.
  std::vector<IndexEntry> bad = SomeLeaves(kIndexPageEntries + 1);
  std::swap(bad[kIndexPageEntries - 1], bad[kIndexPageEntries]);
  pages.clear();
  Status s = BuildIndexLevel(pool, 42, 0, bad, &pages);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(pages.empty());
  bad = SomeLeaves(kIndexPageEntries + 1);
  bad[kIndexPageEntries].first = bad[kIndexPageEntries - 1].first;
  bad[kIndexPageEntries].end = bad[kIndexPageEntries - 1].end;
  s = BuildIndexLevel(pool, 42, 0, bad, &pages);
  EXPECT_NE(s.message().find("entry 100"), std::string::npos) << s.message();
}

// An in-memory pool area for BuildIndex/ReadIndex.
struct Disk {
  std::map<uint64_t, std::string> pages;
  uint64_t next = kAreaBegin;
  size_t reads = 0;
  std::function<Result<uint64_t>()> Alloc() {
    return [this]() -> Result<uint64_t> {
      const uint64_t a = next;
      next += kPage;
      return a;
    };
  }
  std::function<Status(uint64_t, std::string*)> Reader() {
    return [this](uint64_t addr, std::string* out) {
      reads++;
      auto it = pages.find(addr);
      if (it == pages.end()) return Status(Code::kIOError, "no page at " + std::to_string(addr));
      *out = it->second;
      return Status::Ok();
    };
  }
};

// `n` leaves over `luns` LUNs with addresses far from the index's own.
std::vector<IndexEntry> LeavesAt(size_t n, uint32_t luns, uint64_t seq) {
  std::vector<IndexEntry> v = SomeLeaves(n, luns);
  for (size_t i = 0; i < n; i++) {
    v[i].addr = kAreaEnd / 2 + i * kPage;
    v[i].seq = seq - i % 3;
  }
  return v;
}

IndexPageExpect Bound() {
  IndexPageExpect b;
  b.pool = PoolId(0x5a);
  b.addr_begin = kAreaBegin;
  b.addr_end = kAreaEnd;
  return b;
}

struct Built {
  Disk disk;
  std::vector<std::pair<uint64_t, std::string>> order;
  IndexRoot root;
};

void BuildOnto(const std::vector<IndexEntry>& leaves, uint64_t seq, Built* b) {
  Status s = BuildIndex(Bound(), seq, leaves, b->disk.Alloc(), &b->order, &b->root);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (const auto& [addr, bytes] : b->order) b->disk.pages[addr] = bytes;
}

TEST(CkptIndexBuild, BuildsAndReadsEveryShape) {
  // leaves -> index pages written and the root's level.
  const std::vector<std::tuple<size_t, size_t, uint32_t>> shapes = {
      {1, 1, 0}, {100, 1, 0}, {101, 3, 1}, {10000, 101, 1}, {10001, 104, 2}};
  for (const auto& [n, npages, level] : shapes) {
    Built b;
    const std::vector<IndexEntry> leaves = LeavesAt(n, 7, 42);
    BuildOnto(leaves, 42, &b);
    EXPECT_EQ(b.order.size(), npages) << n;
    EXPECT_EQ(b.root.level, level) << n;
    EXPECT_EQ(b.root.entry.addr, b.order.back().first) << n;  // the root is written last
    EXPECT_EQ(b.root.entry.seq, 42u);
    std::vector<IndexEntry> back = {Leaf(1, 1, 2, kAreaBegin, 1)};
    Status s = ReadIndex(b.root, Bound(), b.disk.Reader(), &back);
    ASSERT_TRUE(s.ok()) << n << ": " << s.ToString();
    EXPECT_EQ(back, leaves) << n;
    EXPECT_EQ(b.disk.reads, npages) << n;
  }
}

// Walks from the root to the leaf entry holding (lun, lba) with
// FindIndexEntry at each level; nullptr for a hole.
const IndexEntry* Walk(Disk& disk, const IndexRoot& root, uint32_t lun, uint64_t lba, IndexPage* holder) {
  IndexEntry at = root.entry;
  for (uint32_t level = root.level;; level--) {
    std::string bytes;
    EXPECT_TRUE(disk.Reader()(at.addr, &bytes).ok());
    EXPECT_TRUE(Decode(bytes, ExpectForChild(at, level, Bound()), holder).ok());
    const IndexEntry* e = FindIndexEntry(*holder, lun, lba);
    if (!e || level == 0) return e;
    at = *e;
  }
}

// 10 M extents at 252 runs a leaf: ~40,000 leaves, the 16 TiB case of 3.4.
TEST(CkptIndexBuild, FortyThousandLeavesTakeThreeLevels) {
  constexpr size_t kLeaves = 40000;
  Built b;
  const std::vector<IndexEntry> leaves = LeavesAt(kLeaves, 37, 1000);
  BuildOnto(leaves, 1000, &b);
  EXPECT_EQ(b.root.level, 2u);
  EXPECT_EQ(b.order.size(), 400u + 4u + 1u);  // 400 level-0, 4 level-1, the root
  EXPECT_EQ(b.root.entry.first, leaves.front().first);
  EXPECT_EQ(b.root.entry.end, leaves.back().end);
  std::vector<IndexEntry> back;
  Status s = ReadIndex(b.root, Bound(), b.disk.Reader(), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back, leaves);
  // Lookups through the three levels, at each leaf's edges and in its gaps.
  for (size_t i = 0; i < kLeaves; i += 97) {
    const IndexEntry& x = leaves[i];
    IndexPage holder;
    const IndexEntry* e = Walk(b.disk, b.root, x.first.lun, x.first.lba, &holder);
    ASSERT_TRUE(e && *e == x) << i;
    e = Walk(b.disk, b.root, x.end.lun, x.end.lba - 1, &holder);
    ASSERT_TRUE(e && *e == x) << i;
    if (x.first.lba > 0 && (i == 0 || leaves[i - 1].end < x.first)) {
      EXPECT_EQ(Walk(b.disk, b.root, x.first.lun, x.first.lba - 1, &holder), nullptr) << i;
    }
  }
}

TEST(CkptIndexBuild, ReaderRefusesADamagedTree) {
  Built b;
  const std::vector<IndexEntry> leaves = LeavesAt(250, 5, 42);
  BuildOnto(leaves, 42, &b);  // three level-0 pages, a level-1 root
  ASSERT_EQ(b.root.level, 1u);
  ASSERT_EQ(b.order.size(), 4u);
  const uint64_t p0 = b.order[0].first, p1 = b.order[1].first;
  auto refused = [&](Disk& disk, const IndexRoot& root, const std::string& what) {
    std::vector<IndexEntry> out;
    Status s = ReadIndex(root, Bound(), disk.Reader(), &out);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
    EXPECT_TRUE(out.empty());
  };
  {  // Two level-0 pages swapped: each is at the other's address.
    Disk d = b.disk;
    std::swap(d.pages[p0], d.pages[p1]);
    refused(d, b.root, "misplaced page");
  }
  {  // A lost write: the page at p1 is the one an older checkpoint left there.
    Built old;
    BuildOnto(LeavesAt(250, 5, 41), 41, &old);
    Disk d = b.disk;
    d.pages[p1] = old.disk.pages[p1];
    refused(d, b.root, "stale checkpoint sequence 41 (the parent expects 42) (at address " + std::to_string(p1));
  }
  {  // The superblock names the root with the wrong level, or a wrong range.
    IndexRoot r = b.root;
    r.level = 0;
    refused(b.disk, r, "wrong level 1 (the parent expects level 0)");
    r = b.root;
    r.level = kIndexMaxLevel + 1;
    refused(b.disk, r, "root level 5 past 4");
    r = b.root;
    r.entry.end.lba++;
    refused(b.disk, r, "misplaced page");
  }
  {  // The root at an address the superblock area holds, or past the end.
    IndexRoot r = b.root;
    r.entry.addr = 0;
    refused(b.disk, r, "root address 0 below");
    r.entry.addr = kAreaEnd;
    refused(b.disk, r, "root address 1073741824 past the end");
  }
  {  // A leaf named at an index page's address (a valid, resealed page).
    Disk d = b.disk;
    std::vector<IndexEntry> first(leaves.begin(), leaves.begin() + kIndexPageEntries);
    first[5].addr = p1;
    IndexPage forged = PageOf(first, 0, 42);
    d.pages[p0] = Encode(forged);
    refused(d, b.root, "address " + std::to_string(p1) + " named twice");
  }
  {  // A read error is passed on as it is.
    Disk d = b.disk;
    d.pages.erase(p1);
    std::vector<IndexEntry> out;
    EXPECT_EQ(ReadIndex(b.root, Bound(), d.Reader(), &out).code(), Code::kIOError);
  }
}

TEST(CkptIndexBuild, BuilderRefusesInvalidLeaves) {
  Disk d;
  std::vector<std::pair<uint64_t, std::string>> order;
  IndexRoot root;
  std::vector<IndexEntry> bad = LeavesAt(300, 3, 42);
  std::swap(bad[150], bad[151]);
  Status s = BuildIndex(Bound(), 42, bad, d.Alloc(), &order, &root);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("unsorted"), std::string::npos) << s.message();
  EXPECT_TRUE(order.empty());
  bad = LeavesAt(300, 3, 42);
  bad[10].seq = 43;  // written after the checkpoint that indexes it
  s = BuildIndex(Bound(), 42, bad, d.Alloc(), &order, &root);
  EXPECT_NE(s.message().find("newer than its index page's seq 42"), std::string::npos) << s.message();
  EXPECT_TRUE(order.empty());
}

// The builder writes only what ReadIndex accepts: every address it is
// handed, by the allocator or in a leaf, is checked against the bound and
// against every other, and an allocator's failure stops the build. Nothing
// is appended to the pages and the root is untouched on any refusal.
TEST(CkptIndexBuild, BuilderRefusesBadAddressesAndPassesOnAllocatorFailure) {
  const std::vector<IndexEntry> leaves = LeavesAt(250, 5, 42);  // three level-0 pages and a root
  const IndexRoot untouched{IndexEntry{{9, 9}, {9, 10}, 12345, 7}, 3};
  auto build = [&](const std::vector<IndexEntry>& l, const std::function<Result<uint64_t>()>& alloc) {
    std::vector<std::pair<uint64_t, std::string>> order;
    IndexRoot root = untouched;
    Status s = BuildIndex(Bound(), 42, l, alloc, &order, &root);
    EXPECT_TRUE(order.empty());
    EXPECT_EQ(root, untouched);
    return s;
  };
  // Hands out `addrs` in turn, then kAreaBegin + 100 pages onwards.
  auto from = [](std::vector<uint64_t> addrs) {
    auto next = std::make_shared<size_t>(0);
    return [addrs, next]() -> Result<uint64_t> {
      const size_t i = (*next)++;
      return i < addrs.size() ? addrs[i] : kAreaBegin + (100 + i) * kPage;
    };
  };
  auto refused = [&](const Status& s, const std::string& what) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
  };
  refused(build(leaves, from({kAreaBegin + 1})), "index page at level 0: address 1048577 not a multiple of 4096");
  refused(build(leaves, from({kAreaBegin - kPage})), "address 1044480 below 1048576");
  refused(build(leaves, from({kPage})), "address 4096 below 1048576");
  refused(build(leaves, from({kAreaEnd})), "address 1073741824 past the end");
  refused(build(leaves, from({kAreaBegin, kAreaBegin})), "address 1048576 is used twice");
  refused(build(leaves, from({kAreaBegin, kAreaBegin + kPage, kAreaBegin + 2 * kPage, kAreaBegin})),
          "index page at level 1: address 1048576 is used twice");  // the root over a child
  refused(build(leaves, from({leaves[17].addr})), "address " + std::to_string(leaves[17].addr) + " is used twice");
  // Leaves are held to the same bound, and two leaves at one address (on
  // two different level-0 pages) are refused before anything is written.
  std::vector<IndexEntry> bad = leaves;
  bad[200].addr = bad[3].addr;
  refused(build(bad, from({})), "leaf entry 200");
  bad = leaves;
  bad[5].addr = kAreaEnd;
  refused(build(bad, from({})), "leaf entry 5");
  // The allocator's failure is passed on as it is.
  size_t calls = 0;
  Status s = build(leaves, [&calls]() -> Result<uint64_t> {
    if (++calls == 3) return Status(Code::kNoSpace, "no free page");
    return kAreaBegin + calls * kPage;
  });
  EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
  EXPECT_EQ(calls, 3u);
}

// The empty index has one spelling, kNoIndex: no index is built over no
// leaves, and a root naming the empty level-0 page (which the page codec can
// still spell) is refused before any read.
TEST(CkptIndexBuild, TheEmptyIndexIsNeverAPage) {
  Disk d;
  std::vector<std::pair<uint64_t, std::string>> order;
  IndexRoot root;
  Status s = BuildIndex(Bound(), 42, {}, d.Alloc(), &order, &root);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(order.empty());

  d.pages[kAreaBegin] = Encode(PageOf({}));
  const IndexRoot empty{IndexEntry{{}, {}, kAreaBegin, 42}, 0};
  EXPECT_NE(IndexRootRule(empty), "");
  std::vector<IndexEntry> out;
  s = ReadIndex(empty, Bound(), d.Reader(), &out);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("kNoIndex"), std::string::npos) << s.message();
  EXPECT_EQ(d.reads, 0u);
}

// Nothing ReadIndex would refuse is built: an index of sequence 0.
TEST(CkptIndexBuild, BuilderRefusesSequenceZero) {
  for (size_t n : {size_t{0}, size_t{10}}) {
    Disk d;
    std::vector<std::pair<uint64_t, std::string>> order;
    IndexRoot root;
    Status s = BuildIndex(Bound(), 0, LeavesAt(n, 2, 1), d.Alloc(), &order, &root);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << n;
    EXPECT_TRUE(order.empty());
  }
}

// A root whose sequence is 0 names no checkpoint's page: refused before any read.
TEST(CkptIndexBuild, ARootOfSequenceZeroIsRefusedUnread) {
  Built b;
  BuildOnto(LeavesAt(10, 2, 42), 42, &b);
  IndexRoot r = b.root;
  r.entry.seq = 0;
  std::vector<IndexEntry> out;
  Status s = ReadIndex(r, Bound(), b.disk.Reader(), &out);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("root sequence 0"), std::string::npos) << s.message();
  EXPECT_EQ(b.disk.reads, 0u);
}

}  // namespace
}  // namespace cowstore::store
