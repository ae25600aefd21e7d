// SPDX-License-Identifier: Apache-2.0
// Unit tests of format v3's checkpoint leaf page codec (ckpt_page.h): round
// trips up to the packing's limits, every invalid page refused by the
// encoder, every damage refused by the decoder with kCorruption naming it,
// and a sweep flipping each bit of an encoded page.
#include "handler/store/ckpt_page.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "handler/store/crc32c.h"
#include "tests/store/patch_bytes.h"
#include "handler/store/meta.h"  // Encoder: writes the test's damage in the page's own byte order

namespace cowstore::store {
namespace {

constexpr uint64_t k48 = uint64_t{1} << 48;
constexpr uint64_t k32 = uint64_t{1} << 32;
// Header field offsets (ckpt_page.h's layout, restated: the test checks the
// on-disk format, not the codec's idea of it).
constexpr size_t kOffVersion = 8, kOffUuid = 16, kOffLun = 32, kOffCount = 36, kOffFirst = 40,
                 kOffSeq = 56;

Uuid PoolId(uint8_t x) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(x + 17 * i);
  return u;
}

LeafPage BasePage() {
  LeafPage p;
  p.pool = PoolId(0x5a);
  p.lun = 7;
  p.first_lba = 1000;
  p.end_lba = 1000000;
  p.seq = 42;
  return p;
}

LeafPageExpect ExpectFor(const LeafPage& p, uint64_t phys_grains = 1u << 30) {
  LeafPageExpect e;
  e.pool = p.pool;
  e.lun = p.lun;
  e.seq = p.seq;
  e.first_lba = p.first_lba;
  e.end_lba = p.end_lba;
  e.phys_grains = phys_grains;
  return e;
}

// `n` runs of varied lengths with gaps, sorted, inside BasePage's range.
std::vector<Run> SomeRuns(size_t n) {
  std::vector<Run> runs;
  uint64_t lba = 1000;
  for (size_t i = 0; i < n; i++) {
    const uint64_t len = 1 + (i * 37) % 300;
    runs.push_back({lba, 5000 + i * 977, len});
    lba += len + (i % 3);  // adjacent and gapped neighbours
  }
  return runs;
}

std::string Encode(const LeafPage& p) {
  std::string out;
  Status s = EncodeLeafPage(p, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.size(), kLeafPageBytes);
  return out;
}

Status Decode(const std::string& bytes, const LeafPageExpect& e, LeafPage* out) {
  return DecodeLeafPage(bytes.data(), bytes.size(), e, out);
}

// Writes run slot i in the page's packing: lba | (len-1) low 16 << 48, then
// phys | (len-1) high 16 << 48.
void PutRun(std::string* page, size_t i, const Run& r) {
  const uint64_t m = r.len - 1;
  Put64(page, kLeafPageHeader + i * kLeafPageRunBytes, r.lba | (m & 0xffff) << 48);
  Put64(page, kLeafPageHeader + i * kLeafPageRunBytes + 8, r.phys | (m >> 16) << 48);
}
void Reseal(std::string* page) { ResealCrc(page, kLeafPageCrcOffset); }

void ExpectRoundTrip(const LeafPage& p, uint64_t phys_grains = 1u << 30) {
  std::string bytes = Encode(p);
  LeafPage back;
  Status s = Decode(bytes, ExpectFor(p, phys_grains), &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back.pool, p.pool);
  EXPECT_EQ(back.lun, p.lun);
  EXPECT_EQ(back.first_lba, p.first_lba);
  EXPECT_EQ(back.end_lba, p.end_lba);
  EXPECT_EQ(back.seq, p.seq);
  EXPECT_EQ(back.runs, p.runs);
}

TEST(CkptLeafPage, CapacityIsWhatFitsAfterTheHeader) {
  EXPECT_EQ(kLeafPageRuns, 252u);
  EXPECT_EQ(kLeafPageHeader + kLeafPageRuns * kLeafPageRunBytes, kLeafPageBytes);
}

TEST(CkptLeafPage, RoundTripsEmptyOneAndFullPages) {
  LeafPage p = BasePage();
  ExpectRoundTrip(p);  // no runs: a range whose map is all holes
  p.runs = {{1000, 0, 1}};
  ExpectRoundTrip(p);
  p.runs = {{999999, 77, 1}};  // the last grain of the range
  ExpectRoundTrip(p);
  p.runs = SomeRuns(kLeafPageRuns);
  ASSERT_LE(p.runs.back().lba + p.runs.back().len, p.end_lba);
  ExpectRoundTrip(p);
}

TEST(CkptLeafPage, RoundTripsRunsAtThe48And32BitLimits) {
  LeafPage p = BasePage();
  p.first_lba = 0;
  p.end_lba = k48;
  p.seq = ~uint64_t{0};
  p.lun = ~uint32_t{0};
  p.runs = {
      {0, 0, k32},                    // longest run: len - 1 = 2^32 - 1, every length bit set
      {k32, k48 - 1, 1},              // last physical grain
      {k32 + 1, 12345, 0x10000},      // length bits straddle the lo/hi split
      {k32 + 0x10001, 1, 0xffff},
      {k32 + 0x20000, 2, 0x10001},
      {k48 - k32 - 1, k48 - k32, k32 - 1},  // longest length field that is not all ones
      {k48 - 1, 3, 1},                // last logical grain
  };
  ExpectRoundTrip(p, k48);
  // A run ending exactly at the physical bound is inside it.
  p.runs = {{5, 100, 28}};
  ExpectRoundTrip(p, 128);
}

void ExpectEncodeRefuses(const LeafPage& p, const std::string& what) {
  std::string out = "untouched";
  Status s = EncodeLeafPage(p, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
  EXPECT_EQ(out, "untouched");
}

// Neighbours the map keeps apart are two runs on the page too: contiguous in
// lba only, in phys only, or both but longer together than a run holds
// (RunTree::kMaxLen: Insert does not merge them either).
TEST(CkptLeafPage, RoundTripsNeighboursTheMapKeepsApart) {
  LeafPage p = BasePage();
  p.runs = {{2000, 100, 1}, {2001, 102, 1}, {2003, 103, 1}};
  ExpectRoundTrip(p);
  p.end_lba = k48;
  p.runs = {{2000, 100, k32}, {2000 + k32, 100 + k32, 1}};
  ExpectRoundTrip(p, k48);
}

TEST(CkptLeafPage, EncoderRefusesInvalidPages) {
  LeafPage p = BasePage();
  p.runs = {{2000, 1, 10}, {1500, 2, 10}};
  ExpectEncodeRefuses(p, "unsorted");
  p.runs = {{2000, 1, 10}, {2009, 2, 10}};
  ExpectEncodeRefuses(p, "overlaps");
  p.runs = {{2000, 1, 10}, {2000, 2, 10}};
  ExpectEncodeRefuses(p, "overlaps");
  p.runs = {{999, 1, 10}};
  ExpectEncodeRefuses(p, "outside the key range");
  p.runs = {{999995, 1, 10}};
  ExpectEncodeRefuses(p, "outside the key range");
  p.runs = {{1000000, 1, 1}};  // starts at end_lba
  ExpectEncodeRefuses(p, "outside the key range");
  p.runs = {{2000000, 1, 1}};  // starts past it: end - lba must not wrap
  ExpectEncodeRefuses(p, "outside the key range");
  p.runs = {{2000, 1, 0}};
  ExpectEncodeRefuses(p, "length 0");
  p.runs = {{2000, 1, k32 + 1}};
  ExpectEncodeRefuses(p, "does not fit");
  p.runs = {{2000, k48 - 1, 2}};
  ExpectEncodeRefuses(p, "does not fit");
  p.runs = SomeRuns(kLeafPageRuns + 1);
  p.end_lba = k48;
  ExpectEncodeRefuses(p, "do not fit a leaf page");
  // Two runs ExtentMap::Insert would merge: one run has one spelling.
  p = BasePage();
  p.runs = {{2000, 100, 1}, {2001, 101, 1}};
  ExpectEncodeRefuses(p, "run 1 (lba 2001, phys 101, 1 grains) continues run 0");
  p.runs = {{2000, 100, k32 - 1}, {2000 + k32 - 1, 100 + k32 - 1, 1}};  // together exactly 2^32
  p.end_lba = k48;
  ExpectEncodeRefuses(p, "continues run 0");
  p = BasePage();
  p.end_lba = p.first_lba;
  ExpectEncodeRefuses(p, "empty key range");
  p.end_lba = k48 + 1;
  ExpectEncodeRefuses(p, "past 2^48");
}

// A valid page with three runs, to damage.
struct CkptLeafPageDamage : ::testing::Test {
  void SetUp() override {
    page = BasePage();
    page.runs = {{2000, 100, 10}, {2010, 300, 5}, {3000, 50, 20}};
    bytes = Encode(page);
    expect = ExpectFor(page, 1000);
  }
  void ExpectRefused(const std::string& damaged, const LeafPageExpect& e, const std::string& what,
                     Code code = Code::kCorruption) {
    LeafPage out;
    out.lun = 12345;  // a refusal leaves *out as it was
    Status s = Decode(damaged, e, &out);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
    EXPECT_EQ(out.lun, 12345u);
    EXPECT_TRUE(out.runs.empty());
  }
  LeafPage page;
  std::string bytes;
  LeafPageExpect expect;
};

TEST_F(CkptLeafPageDamage, UndamagedDecodes) {
  LeafPage out;
  ASSERT_TRUE(Decode(bytes, expect, &out).ok());
  EXPECT_EQ(out.runs, page.runs);
}

TEST_F(CkptLeafPageDamage, BadMagic) {
  std::string d = bytes;
  d[3] ^= 0x20;
  ExpectRefused(d, expect, "bad magic");
  ExpectRefused(std::string(kLeafPageBytes, '\0'), expect, "bad magic");  // a never-written page
}

TEST_F(CkptLeafPageDamage, CrcMismatch) {
  std::string d = bytes;
  d[kLeafPageHeader + 5] ^= 1;
  ExpectRefused(d, expect, "CRC mismatch");
  d = bytes;
  d[kLeafPageBytes - 1] = 1;  // in the unused tail: covered too
  ExpectRefused(d, expect, "CRC mismatch");
}

TEST_F(CkptLeafPageDamage, ForeignPool) {
  LeafPageExpect e = expect;
  e.pool[15] ^= 1;
  ExpectRefused(bytes, e, "foreign pool UUID");
}

TEST_F(CkptLeafPageDamage, WrongLun) {
  LeafPageExpect e = expect;
  e.lun = 8;
  ExpectRefused(bytes, e, "wrong LUN 7");
}

TEST_F(CkptLeafPageDamage, StaleAndFutureSequence) {
  LeafPageExpect e = expect;
  e.seq = page.seq + 1;  // the index names a newer write of this address: it was lost
  ExpectRefused(bytes, e, "stale checkpoint sequence 42");
  e.seq = page.seq - 1;
  ExpectRefused(bytes, e, "future checkpoint sequence 42");
}

// Two leaves of one checkpoint share pool, LUN and sequence: only the key
// range the index names tells a misdirected write of one onto the other.
TEST_F(CkptLeafPageDamage, APageForAnotherKeyRangeIsRefused) {
  LeafPageExpect e = expect;
  e.first_lba = page.first_lba + 1;
  ExpectRefused(bytes, e, "misplaced page: its key range starts at lba " + std::to_string(page.first_lba));
  e.first_lba = page.end_lba;  // the next leaf's entry
  ExpectRefused(bytes, e, "misplaced page");
}

// The index entry's end too: a page reaching past it would overlap the next
// leaf, whose entry was checked against this one's end, not the page's.
TEST_F(CkptLeafPageDamage, APageEndingElsewhereThanItsEntryIsRefused) {
  LeafPageExpect e = expect;
  e.end_lba = page.end_lba - 1;
  ExpectRefused(bytes, e, "misplaced page: its key range ends at lba " + std::to_string(page.end_lba) +
                              ", the index names it up to lba " + std::to_string(page.end_lba - 1));
  e.end_lba = page.end_lba + 1;
  ExpectRefused(bytes, e, "misplaced page: its key range ends at lba");
}

TEST_F(CkptLeafPageDamage, RunCountTooLarge) {
  for (uint32_t count : {kLeafPageRuns + 1, ~uint32_t{0}}) {
    std::string d = bytes;
    Put32(&d, kOffCount, count);
    Reseal(&d);
    ExpectRefused(d, expect, "run count " + std::to_string(count) + " too large");
  }
}

TEST_F(CkptLeafPageDamage, RunsUnsorted) {
  std::string d = bytes;
  PutRun(&d, 0, page.runs[1]);
  PutRun(&d, 1, page.runs[0]);
  Reseal(&d);
  ExpectRefused(d, expect, "run 1 (lba 2000, phys 100, 10 grains) is unsorted");
}

TEST_F(CkptLeafPageDamage, RunsOverlapping) {
  std::string d = bytes;
  PutRun(&d, 1, {2009, 300, 5});
  Reseal(&d);
  ExpectRefused(d, expect, "run 1 (lba 2009, phys 300, 5 grains) overlaps run 0");
}

TEST_F(CkptLeafPageDamage, RunOutsideKeyRange) {
  std::string d = bytes;
  Put64(&d, kOffFirst, 2001);  // the first run now starts before the range
  Reseal(&d);
  LeafPageExpect moved = expect;
  moved.first_lba = 2001;  // and the index names it there, so the runs are checked
  ExpectRefused(d, moved, "run 0 (lba 2000, phys 100, 10 grains) is outside the key range [2001, 1000000)");
  d = bytes;
  PutRun(&d, 2, {999990, 50, 20});  // ends past end_lba
  Reseal(&d);
  ExpectRefused(d, expect, "run 2 (lba 999990, phys 50, 20 grains) is outside the key range");
  d = bytes;
  PutRun(&d, 2, {1064625, 50, 20});  // starts past end_lba (found by the resealed sweep)
  Reseal(&d);
  ExpectRefused(d, expect, "run 2 (lba 1064625, phys 50, 20 grains) is outside the key range");
}

TEST_F(CkptLeafPageDamage, EmptyOrOversizedKeyRange) {
  std::string d = bytes;
  Put64(&d, kOffFirst, page.end_lba);
  Reseal(&d);
  ExpectRefused(d, expect, "empty key range");
  d = bytes;
  Put64(&d, kOffFirst + 8, k48 + 1);
  Reseal(&d);
  ExpectRefused(d, expect, "past 2^48");
}

// A zero-length run cannot be written: the field holds len - 1, so its
// all-zero value is a run of one grain, never of none.
TEST_F(CkptLeafPageDamage, ZeroLengthIsUnrepresentable) {
  std::string d = bytes;
  Put64(&d, kLeafPageHeader, 2000);  // lo: lba 2000, low length bits 0
  Put64(&d, kLeafPageHeader + 8, 100);  // hi: phys 100, high length bits 0
  Reseal(&d);
  LeafPage out;
  ASSERT_TRUE(Decode(d, expect, &out).ok());
  EXPECT_EQ(out.runs[0], (store::Run{2000, 100, 1}));
}

TEST_F(CkptLeafPageDamage, RunBeyondPhysicalBound) {
  // Runs 0-2 occupy physical [100, 110), [300, 305), [50, 70).
  LeafPageExpect e = expect;
  e.phys_grains = 304;
  ExpectRefused(bytes, e, "run 1 (lba 2010, phys 300, 5 grains) ends beyond the pool's 304 physical grains");
  e.phys_grains = 300;  // starts at the bound
  ExpectRefused(bytes, e, "run 1 (lba 2010, phys 300, 5 grains) ends beyond the pool's 300 physical grains");
  e.phys_grains = 305;
  LeafPage out;
  EXPECT_TRUE(Decode(bytes, e, &out).ok());
  e.phys_grains = 0;
  ExpectRefused(bytes, e, "beyond the pool's 0 physical grains");
}

TEST_F(CkptLeafPageDamage, NonZeroTail) {
  std::string d = bytes;
  const size_t off = kLeafPageHeader + 3 * kLeafPageRunBytes + 1;  // a byte of the first unused slot
  d[off] = 1;
  Reseal(&d);
  ExpectRefused(d, expect, "non-zero byte at offset " + std::to_string(off));
}

TEST_F(CkptLeafPageDamage, UnknownVersionIsUnsupported) {
  std::string d = bytes;
  Put32(&d, kOffVersion, kLeafPageVersion + 1);
  Reseal(&d);
  ExpectRefused(d, expect, "format version 2", Code::kUnsupported);
}

// Version 0 is no format any cowstore wrote: damage or a writer's bug, not
// a later format (only a version above this build's is kUnsupported).
TEST_F(CkptLeafPageDamage, VersionZeroIsCorruption) {
  std::string d = bytes;
  Put32(&d, kOffVersion, 0);
  Reseal(&d);
  ExpectRefused(d, expect, "format version 0");
}

// Run 1 made to continue run 0 in both lba and phys: the map holds them as
// one run (ExtentMap::Insert merges them), so the page is a second spelling.
TEST_F(CkptLeafPageDamage, RunsTheMapWouldMergeAreRefused) {
  std::string d = bytes;
  PutRun(&d, 1, {2010, 110, 5});
  Reseal(&d);
  ExpectRefused(d, expect, "run 1 (lba 2010, phys 110, 5 grains) continues run 0");
}

TEST_F(CkptLeafPageDamage, HeaderFieldsResealedAreStillCaught) {
  // A misdirected write of another pool's or LUN's page carries a valid CRC.
  std::string d = bytes;
  d[kOffUuid] ^= 0x80;
  Reseal(&d);
  ExpectRefused(d, expect, "foreign pool UUID");
  d = bytes;
  Put32(&d, kOffLun, 9);
  Reseal(&d);
  ExpectRefused(d, expect, "wrong LUN 9");
  d = bytes;
  Put64(&d, kOffSeq, 41);
  Reseal(&d);
  ExpectRefused(d, expect, "stale checkpoint sequence 41");
}

TEST_F(CkptLeafPageDamage, WrongSizeIsACallerError) {
  LeafPage out;
  EXPECT_EQ(DecodeLeafPage(bytes.data(), kLeafPageBytes - 1, expect, &out).code(), Code::kInvalidArgument);
  std::string longer = bytes + '\0';
  EXPECT_EQ(Decode(longer, expect, &out).code(), Code::kInvalidArgument);
}

// Every single-bit flip anywhere in the page is refused (CRC32C detects all
// of them; flips in the magic are reported as such), never accepted.
void SweepEveryBit(const LeafPage& p) {
  const std::string bytes = Encode(p);
  const LeafPageExpect e = ExpectFor(p);
  size_t refused = 0;
  for (size_t bit = 0; bit < kLeafPageBytes * 8; bit++) {
    std::string d = bytes;
    d[bit / 8] = static_cast<char>(d[bit / 8] ^ (1 << (bit % 8)));
    LeafPage out;
    Status s = Decode(d, e, &out);
    ASSERT_EQ(s.code(), Code::kCorruption) << "bit " << bit << ": " << s.ToString();
    const bool named = s.message().find(bit < 64 ? "bad magic" : "CRC mismatch") != std::string::npos;
    ASSERT_TRUE(named) << "bit " << bit << ": " << s.message();
    refused++;
  }
  EXPECT_EQ(refused, kLeafPageBytes * 8);
}

TEST(CkptLeafPageSweep, EveryBitFlipRefusedFullPage) {
  LeafPage p = BasePage();
  p.runs = SomeRuns(kLeafPageRuns);
  SweepEveryBit(p);
}

TEST(CkptLeafPageSweep, EveryBitFlipRefusedPartlyFilledPage) {
  LeafPage p = BasePage();
  p.runs = SomeRuns(100);  // so flips land in the zero tail too
  SweepEveryBit(p);
}

// The checks behind the CRC, on their own: each bit flipped and the CRC made
// valid again. Whatever the decoder accepts must still be a well-formed page.
TEST(CkptLeafPageSweep, ResealedBitFlipsNeverYieldAnInvalidPage) {
  LeafPage p = BasePage();
  p.runs = SomeRuns(100);
  const std::string bytes = Encode(p);
  const LeafPageExpect e = ExpectFor(p);
  size_t accepted = 0;
  for (size_t bit = 0; bit < kLeafPageBytes * 8; bit++) {
    if (bit / 8 >= kLeafPageCrcOffset && bit / 8 < kLeafPageCrcOffset + 4) continue;  // Reseal overwrites it
    std::string d = bytes;
    d[bit / 8] = static_cast<char>(d[bit / 8] ^ (1 << (bit % 8)));
    Reseal(&d);
    LeafPage out;
    Status s = Decode(d, e, &out);
    if (!s.ok()) {
      ASSERT_TRUE(s.code() == Code::kCorruption || s.code() == Code::kUnsupported) << s.ToString();
      continue;
    }
    // Accepted: a run's lba/phys/len bits changed to values that still obey
    // every rule (or a key-range bound moved without excluding a run).
    accepted++;
    ASSERT_EQ(out.runs.size(), p.runs.size());
    for (size_t i = 0; i < out.runs.size(); i++) {
      const store::Run& r = out.runs[i];
      ASSERT_GE(r.len, 1u);
      ASSERT_GE(r.lba, out.first_lba);
      ASSERT_LE(r.lba + r.len, out.end_lba);
      ASSERT_LE(r.phys + r.len, e.phys_grains);
      if (i) {
        ASSERT_GE(r.lba, out.runs[i - 1].lba + out.runs[i - 1].len);
      }
    }
    std::string again;
    ASSERT_TRUE(EncodeLeafPage(out, &again).ok());
    ASSERT_EQ(again, d);  // and it is the canonical encoding of what it decoded to
  }
  RecordProperty("accepted_resealed_flips", static_cast<int>(accepted));
}

}  // namespace
}  // namespace cowstore::store
