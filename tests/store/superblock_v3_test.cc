// SPDX-License-Identifier: Apache-2.0
// Unit tests of format v3's superblock codec (superblock_v3.h): round trips,
// the encoder refusing what the decoder would, each damaged field refused by
// name, every single-bit flip refused, v2/v3 cross-refusal, and the choice
// between the two slots.
#include "handler/store/superblock_v3.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "handler/store/crc32c.h"
#include "handler/store/fault_env.h"
#include "handler/store/meta.h"  // Encoder, Superblock (v1/v2), kSuperblockSlot
#include "handler/store/meta_format.h"  // ChooseMetaFormat
#include "handler/store/pool.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::store {
namespace {

// Field offsets (superblock_v3.h's layout, restated: the test checks the
// on-disk format, not the codec's idea of it).
constexpr size_t kOffVersion = 8, kOffIncompat = 12, kOffSeq = 32, kOffAu = 40, kOffGrain = 44,
                 kOffDataOffset = 48, kOffUnits = 56, kOffSoft = 64, kOffWriteUnit = 68, kOffOrigin = 72,
                 kOffExtentCount = 76, kOffIndexAddr = 80, kOffIndexSeq = 88, kOffIndexLevel = 96,
                 kOffEnvelopeCrc = 104, kOffCrc = 108, kOffLunAddr = 112, kOffLunSeq = 120,
                 kOffJournalStart = 128, kOffLsn = 136, kOffIndexFirstLun = 144, kOffIndexEndLun = 148,
                 kOffIndexFirstLba = 152, kOffIndexEndLba = 160, kOffExtents = 192;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kDevice = 8ull << 30;  // 8 GiB

Uuid PoolId(uint8_t x) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(x + 31 * i);
  return u;
}

// A 4 GiB pool of 1 MiB AUs sharing at 4 KiB, with an index, a LUN table and
// a 16 MiB journal in two extents.
SuperblockV3 Base() {
  SuperblockV3 sb;
  sb.uuid = PoolId(3);
  sb.seq = 41;
  sb.au = kMiB;
  sb.grain = 4096;
  sb.data_offset = kMiB;
  sb.units = 4096;
  sb.soft_threshold_percent = 80;
  sb.write_unit = 4096;
  sb.origin_format = 3;
  sb.index = {IndexEntry{{1, 0}, {7, 5000}, kMiB + 100 * kMiB + 8192, 40}, 1};
  sb.lun_table = {kMiB + 100 * kMiB, 41};
  sb.journal = {{200, 10}, {500, 6}};
  sb.journal_start = 12 * kMiB + 4096;
  sb.journal_start_lsn = 123456789;
  return sb;
}

std::string Encode(const SuperblockV3& sb) {
  std::string out;
  Status s = EncodeSuperblockV3(sb, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.size(), kSuperblockSlot);
  return out;
}

Status Decode(const std::string& b, SuperblockV3* out, uint64_t device = kDevice) {
  return DecodeSuperblockV3(b.data(), b.size(), device, out);
}

// Makes both CRCs match the (damaged) contents again, as a writer with a bug
// or a misdirected write would leave them: envelope first, the slot CRC
// covers it.
void Reseal(std::string* b) {
  Put32(b, kOffEnvelopeCrc, Crc32c(0, b->data(), kOffEnvelopeCrc));
  ResealCrc(b, kOffCrc);
}

TEST(SuperblockV3, RoundTrips) {
  SuperblockV3 sb = Base();
  SuperblockV3 back;
  ASSERT_TRUE(Decode(Encode(sb), &back).ok());
  EXPECT_EQ(back, sb);
  EXPECT_EQ(back.capacity(), 16 * kMiB);
  EXPECT_EQ(back.grains(), 4096u * 256);

  // A pool without LUNs: no index, a LUN table of no records (it still
  // carries the next LUN id); one extent; upgraded from v2.
  sb.index = kNoIndex;
  sb.lun_table = {64 << 10, 41};
  sb.journal = {{7, 1}};  // the last AU: 64 KiB, the smallest journal
  sb.journal_start = 0;
  sb.origin_format = 2;
  sb.au = 64 << 10;
  sb.grain = 512;
  sb.write_unit = 512;
  sb.data_offset = 64 << 10;
  sb.units = 8;
  back = {};
  ASSERT_TRUE(Decode(Encode(sb), &back, (64 << 10) * 9).ok());
  EXPECT_EQ(back, sb);
}

TEST(SuperblockV3, RoundTripsAtTheLimits) {
  SuperblockV3 sb = Base();
  sb.uuid = PoolId(0xff);
  sb.seq = ~uint64_t{0};
  sb.grain = kMiB;  // grain == AU, as a v2 pool's
  sb.units = (uint64_t{1} << 42) - 1;  // 4 PiB of 1 MiB AUs
  sb.journal_start_lsn = (~uint64_t{0} >> 2);
  sb.index.level = kIndexMaxLevel;
  sb.index.entry.seq = sb.seq;
  sb.index.entry.first = {0, 0};
  sb.index.entry.end = {~uint32_t{0}, uint64_t{1} << 48};
  sb.journal.clear();
  // 32 one-AU extents = 32 MiB, the last one at the pool's last AU.
  for (uint64_t i = 0; i < kMaxJournalExtents; i++) sb.journal.push_back({1000 + 3 * i, 1});
  sb.journal.back().first_au = sb.units - 1;
  sb.journal_start = 32 * kMiB - 4096;
  SuperblockV3 back;
  ASSERT_TRUE(Decode(Encode(sb), &back, ~uint64_t{0}).ok());
  EXPECT_EQ(back, sb);
  // One extent of 1,024 AUs of 1 MiB: the 1 GiB cap.
  sb.journal = {{1000, 1024}};
  sb.journal_start = 0;
  ASSERT_TRUE(Decode(Encode(sb), &back, ~uint64_t{0}).ok());
  EXPECT_EQ(back.journal, sb.journal);
  // The cap in 64 KiB AUs: 16,384 of them in one extent (an extent holds up
  // to 2^16, so one always reaches the cap).
  sb.au = 64 << 10;
  sb.grain = 4096;
  sb.data_offset = 64 << 10;
  sb.units = 1 << 16;
  sb.index = kNoIndex;
  sb.lun_table = {(64 << 10) + (20000ull << 16), sb.seq};
  sb.journal = {{0, 16384}};  // exactly 1 GiB
  ASSERT_TRUE(Decode(Encode(sb), &back).ok());
  EXPECT_EQ(back.capacity(), 1ull << 30);
}

TEST(SuperblockV3, LayoutIsTheDocumentedOne) {
  const std::string b = Encode(Base());
  EXPECT_EQ(b.substr(0, 8), "COWSTORE");
  const auto* p = reinterpret_cast<const uint8_t*>(b.data());
  auto u32 = [&](size_t off) { return uint32_t(p[off]) | p[off + 1] << 8 | p[off + 2] << 16 | uint32_t(p[off + 3]) << 24; };
  EXPECT_EQ(u32(kOffVersion), 3u);
  EXPECT_EQ(u32(kOffAu), kMiB);
  EXPECT_EQ(u32(kOffGrain), 4096u);
  EXPECT_EQ(u32(kOffExtentCount), 2u);
  EXPECT_EQ(p[kOffIndexLevel], 1);  // the root page's level
  EXPECT_EQ(u32(kOffIndexFirstLun), 1u);
  EXPECT_EQ(u32(kOffIndexEndLun), 7u);
  EXPECT_EQ(u32(kOffIndexFirstLba), 0u);
  EXPECT_EQ(u32(kOffIndexEndLba), 5000u);
  EXPECT_EQ(u32(kOffEnvelopeCrc), Crc32c(0, p, kOffEnvelopeCrc));
  // Extent 1: AU 500, 6 AUs stored as 5 in the top 16 bits.
  EXPECT_EQ(u32(kOffExtents + 8), 500u);
  EXPECT_EQ(u32(kOffExtents + 12), 5u << 16);
  for (size_t off = kSuperblockV3Extents + 16; off < kSuperblockSlot; off++) ASSERT_EQ(p[off], 0) << off;
  for (size_t off = 168; off < kOffExtents; off++) ASSERT_EQ(p[off], 0) << off;
  EXPECT_EQ(SuperblockEnvelopeVersion(b.data(), b.size()), 3u);
}

void ExpectEncodeRefuses(const SuperblockV3& sb, const std::string& what) {
  std::string out = "untouched";
  Status s = EncodeSuperblockV3(sb, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
  EXPECT_EQ(out, "untouched");
}

TEST(SuperblockV3, EncoderRefusesWhatDecodeWould) {
  SuperblockV3 sb = Base();
  sb.au = 3 * kMiB;
  ExpectEncodeRefuses(sb, "AU of");
  sb = Base();
  sb.grain = 256;
  ExpectEncodeRefuses(sb, "below the smallest LUN block size");  // GrainRule's words
  sb = Base();
  sb.journal.clear();
  ExpectEncodeRefuses(sb, "journal extent count 0");
  sb.journal.assign(kMaxJournalExtents + 1, {1, 1});
  ExpectEncodeRefuses(sb, "journal extent count 33");
  sb = Base();
  sb.journal[1] = {205, 6};
  ExpectEncodeRefuses(sb, "journal extent 1 (AUs [205, +6)) overlaps journal extent 0");
  sb = Base();
  sb.incompat = kIncompatCheckedMaps | 2;  // the unknown one named
  ExpectEncodeRefuses(sb, "incompat flags 2 are not defined");
  sb = Base();
  sb.journal[0].aus = 0;
  ExpectEncodeRefuses(sb, "journal extent 0 (AUs [200, +0)) is not 1 .. 65536 AUs long");
  sb.journal[0].aus = kMaxJournalExtentAus + 1;
  ExpectEncodeRefuses(sb, "is not 1 .. 65536 AUs long");
  sb = Base();
  sb.units = ~uint64_t{0} / 2;
  ExpectEncodeRefuses(sb, "passes 2^48 grains");
  sb = Base();
  sb.journal = {{200, 10}, {210, 6}};  // [200, +16) spelled in two
  ExpectEncodeRefuses(sb, "journal extent 1 (AUs [210, +6)) continues journal extent 0");
  // No LUN table: refused with or without an index (an empty table is a page).
  sb = Base();
  sb.lun_table = {};
  ExpectEncodeRefuses(sb, "LUN table root is none");
  sb.index = kNoIndex;
  ExpectEncodeRefuses(sb, "LUN table root is none");
}

// A valid superblock to damage. Every damage is resealed (both CRCs valid),
// so the field rule itself, not the CRC, must catch it.
struct SuperblockV3Damage : ::testing::Test {
  void SetUp() override { bytes = Encode(Base()); }
  void ExpectRefused(std::string d, const std::string& what, Code code = Code::kCorruption,
                     uint64_t device = kDevice, bool reseal = true) {
    if (reseal) Reseal(&d);
    SuperblockV3 out;
    out.seq = 12345;  // a refusal leaves *out as it was
    Status s = Decode(d, &out, device);
    EXPECT_EQ(s.code(), code) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
    EXPECT_EQ(out.seq, 12345u);
    EXPECT_TRUE(out.journal.empty());
  }
  std::string With32(size_t off, uint32_t v) {
    std::string d = bytes;
    Put32(&d, off, v);
    return d;
  }
  std::string With64(size_t off, uint64_t v) {
    std::string d = bytes;
    Put64(&d, off, v);
    return d;
  }
  std::string bytes;
};

TEST_F(SuperblockV3Damage, UndamagedDecodes) {
  SuperblockV3 out;
  ASSERT_TRUE(Decode(bytes, &out).ok());
  EXPECT_EQ(out, Base());
}

TEST_F(SuperblockV3Damage, MagicAndCrcs) {
  std::string d = bytes;
  d[2] ^= 4;
  ExpectRefused(d, "bad magic", Code::kCorruption, kDevice, false);
  ExpectRefused(std::string(kSuperblockSlot, '\0'), "bad magic", Code::kCorruption, kDevice, false);
  d = bytes;
  d[20] ^= 1;  // in the envelope
  ExpectRefused(d, "envelope CRC mismatch", Code::kCorruption, kDevice, false);
  d = bytes;
  d[kOffLsn] ^= 1;  // past it
  ExpectRefused(d, "superblock v3: CRC mismatch", Code::kCorruption, kDevice, false);
  d = bytes;
  d[kSuperblockSlot - 1] = 1;  // the zero tail is covered too
  ExpectRefused(d, "superblock v3: CRC mismatch", Code::kCorruption, kDevice, false);
}

TEST_F(SuperblockV3Damage, VersionsAndFlags) {
  ExpectRefused(With32(kOffVersion, 4), "pool format version 4 (this build reads up to 3)", Code::kUnsupported);
  ExpectRefused(With32(kOffVersion, 2), "pool format version 2 is read by the v1/v2 superblock codec",
                Code::kUnsupported);
  ExpectRefused(With32(kOffIncompat, 0x80), "incompat flags 128", Code::kUnsupported);
  ExpectRefused(With32(kOffIncompat, kIncompatCheckedMaps | 4), "incompat flags 4 this build does not know",
                Code::kUnsupported);
}

// The one incompat bit this build knows (the journal may hold kMapChecked
// records): encoded at offset 12, decoded back, accepted by the chooser.
TEST(SuperblockV3, TheCheckedMapsIncompatBitRoundTrips) {
  EXPECT_EQ(kIncompatKnown, kIncompatCheckedMaps);
  SuperblockV3 sb = Base();
  sb.incompat = kIncompatCheckedMaps;
  std::string b;
  ASSERT_TRUE(EncodeSuperblockV3(sb, &b).ok());
  EXPECT_EQ(b.substr(kOffIncompat, 4), std::string("\x01\0\0\0", 4));
  SuperblockV3 back;
  Status s = DecodeSuperblockV3(b.data(), b.size(), kDevice, &back);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(back, sb);
  SuperblockChoice c;
  s = ChooseSuperblockV3(b.data(), b.data(), kDevice, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.sb.incompat, kIncompatCheckedMaps);
}

TEST_F(SuperblockV3Damage, GeometryFields) {
  ExpectRefused(With32(kOffAu, 3 << 19), "AU of 1572864 bytes is not a power of two from 64 KiB to 1 MiB");
  ExpectRefused(With32(kOffAu, 32 << 10), "AU of 32768 bytes");
  ExpectRefused(With32(kOffGrain, 3072), "grain of 3072 bytes is not a power of two");
  ExpectRefused(With32(kOffGrain, 2 * kMiB), "grain of 2097152 bytes is larger than the allocation unit");
  ExpectRefused(With32(kOffGrain, 0), "grain of 0 bytes");
  ExpectRefused(With32(kOffWriteUnit, 8192), "write unit of 8192 bytes");
  ExpectRefused(With32(kOffWriteUnit, 1000), "write unit of 1000 bytes");
  ExpectRefused(With32(kOffOrigin, 0), "origin format 0");
  ExpectRefused(With32(kOffOrigin, 4), "origin format 4");
  ExpectRefused(With32(kOffSoft, 101), "soft threshold 101");
  ExpectRefused(With64(kOffDataOffset, 4096), "data offset 4096 is inside the superblock slots");
  ExpectRefused(With64(kOffDataOffset, kMiB + 4096), "not a multiple of the AU");
  ExpectRefused(With64(kOffUnits, 7), "pool size of 7 AUs is below 8");
  ExpectRefused(With64(kOffUnits, (uint64_t{1} << 40) + 1), "passes 2^48 grains");  // 256 grains an AU
  ExpectRefused(With64(kOffUnits, ~uint64_t{0}), "passes 2^48 grains");
}

// Issue 16: a CRC-valid size the device cannot hold is refused before
// anything is sized from it.
TEST_F(SuperblockV3Damage, DataAreaBeyondTheDevice) {
  // 4,096 AUs from 1 MiB end at 4,097 MiB.
  ExpectRefused(bytes, "pool size of 4096 AUs from byte 1048576 ends beyond the device's 4296015871 bytes",
                Code::kCorruption, 4097 * kMiB - 1, false);
  SuperblockV3 out;
  EXPECT_TRUE(Decode(bytes, &out, 4097 * kMiB).ok());
  ExpectRefused(bytes, "ends beyond the device's 0 bytes", Code::kCorruption, 0, false);
  ExpectRefused(With64(kOffDataOffset, uint64_t{1} << 63), "ends beyond the device");
  ExpectRefused(With64(kOffUnits, 8192), "pool size of 8192 AUs from byte 1048576 ends beyond the device");
}

TEST_F(SuperblockV3Damage, PageRoots) {
  const uint64_t end = kMiB + 4096 * kMiB;
  ExpectRefused(With64(kOffIndexAddr, kMiB + 100), "index root page address 1048676 is not a 4 KiB page");
  ExpectRefused(With64(kOffIndexAddr, 8192), "index root page address 8192 is not a 4 KiB page inside the data area");
  ExpectRefused(With64(kOffIndexAddr, end), "index root page address");
  ExpectRefused(With64(kOffIndexAddr, end - 4096 + 4096 * 16), "index root page address");
  ExpectRefused(With64(kOffIndexSeq, 42), "index root sequence 42 is not in 1 .. the superblock's 41");
  ExpectRefused(With64(kOffIndexSeq, 0), "index root sequence 0");
  // A superblock older than the pages it names.
  ExpectRefused(With64(kOffSeq, 39), "index root sequence 40 is not in 1 .. the superblock's 39");
  ExpectRefused(With64(kOffLunAddr, kNoPage - 4095), "LUN table root page address");
  ExpectRefused(With64(kOffLunSeq, 1000), "LUN table root sequence 1000");
  ExpectRefused(With64(kOffLunAddr, kMiB + 100 * kMiB + 8192), "index root and LUN table root overlap");
  // Every v3 superblock names a LUN table: "no LUNs" is a page of no
  // records, which carries the next LUN id (kNoPage could not, and the ids
  // of deleted LUNs would be given out again).
  std::string d = With64(kOffLunAddr, kNoPage);
  ExpectRefused(d, "LUN table root is none");
  Put64(&d, kOffLunSeq, 0);
  ExpectRefused(d, "LUN table root is none");
  SuperblockV3 out;
  // "None" for the index is kNoIndex: no sequence, level or key range.
  d = With64(kOffIndexAddr, kNoPage);
  Put64(&d, kOffIndexSeq, 0);
  ExpectRefused(d, "index root is none but has level 1 or a key range");
  d[kOffIndexLevel] = 0;
  ExpectRefused(d, "index root is none but has level 0 or a key range");
  for (size_t off : {kOffIndexFirstLun, kOffIndexEndLun, kOffIndexFirstLba, kOffIndexEndLba}) Put64(&d, off, 0);
  Reseal(&d);
  EXPECT_TRUE(Decode(d, &out).ok());
  EXPECT_EQ(out.index, kNoIndex);
}

// The root's level and key range are the index codec's (IndexRootRule): a
// level the index cannot have, an empty or out-of-bound range, is refused.
TEST_F(SuperblockV3Damage, IndexRootLevelAndKeyRange) {
  std::string e = bytes;
  e[kOffIndexLevel] = kIndexMaxLevel;
  SuperblockV3 out;
  Reseal(&e);
  ASSERT_TRUE(Decode(e, &out).ok());  // the deepest index the codec builds
  EXPECT_EQ(out.index.level, kIndexMaxLevel);
  e[kOffIndexLevel] = kIndexMaxLevel + 1;
  ExpectRefused(e, "index root level 5 past 4");
  e[kOffIndexLevel] = 0xff;
  ExpectRefused(e, "index root level 255 past 4");
  ExpectRefused(With32(kOffIndexEndLun, 0), "index root key range [1:0, 0:5000) is empty");
  ExpectRefused(With64(kOffIndexEndLba, (uint64_t{1} << 48) + 1), "has an LBA past 2^48");
  // [0:0, 0:0), the empty level-0 root page, is refused at every level: the
  // empty index is kNoIndex, so a superblock that decodes never names a
  // tree the reader refuses.
  std::string z = With32(kOffIndexFirstLun, 0);
  Put32(&z, kOffIndexEndLun, 0);
  Put64(&z, kOffIndexEndLba, 0);
  ExpectRefused(z, "index root key range [0:0, 0:0) is empty");
  z[kOffIndexLevel] = 0;
  Reseal(&z);
  ExpectRefused(z, "index root key range [0:0, 0:0) is empty");
}

TEST_F(SuperblockV3Damage, JournalExtents) {
  ExpectRefused(With32(kOffExtentCount, 0), "journal extent count 0");
  // A count past the cap is refused before anything is sized from it.
  ExpectRefused(With32(kOffExtentCount, 33), "journal extent count 33");
  ExpectRefused(With32(kOffExtentCount, ~uint32_t{0}), "journal extent count 4294967295");
  // The extent after the last one counted is reserved space.
  ExpectRefused(With32(kOffExtentCount, 1), "reserved byte 200 is not zero");
  auto extent = [](uint64_t au, uint64_t n) { return au | (n - 1) << 48; };
  ExpectRefused(With64(kOffExtents, extent(4090, 10)), "journal extent 0 (AUs [4090, +10)) ends beyond the pool's 4096 AUs");
  ExpectRefused(With64(kOffExtents, extent((uint64_t{1} << 48) - 1, 1)), "ends beyond the pool's");
  ExpectRefused(With64(kOffExtents + 8, extent(195, 6)), "journal extent 1 (AUs [195, +6)) overlaps journal extent 0");
  ExpectRefused(With64(kOffExtents + 8, extent(0, 1000)), "overlaps journal extent 0");
  // AU 100 holds both roots (a metadata chunk): the index's is found first.
  ExpectRefused(With64(kOffExtents + 8, extent(100, 1)), "overlaps the index root page at byte 105914368");
  ExpectRefused(With64(kOffExtents + 8, extent(99, 3)), "overlaps the index root page");
  std::string d = With64(kOffExtents + 8, extent(100, 1));
  Put64(&d, kOffIndexAddr, kNoPage);
  Put64(&d, kOffIndexSeq, 0);
  d[kOffIndexLevel] = 0;
  for (size_t off : {kOffIndexFirstLun, kOffIndexEndLun, kOffIndexFirstLba, kOffIndexEndLba}) Put64(&d, off, 0);
  ExpectRefused(d, "journal extent 1 (AUs [100, +1)) overlaps the LUN table root page at byte 105906176");
  // [200, +10) then [210, +6) is the journal [200, +16): one list per
  // journal, so an extent never continues the one before it in the list.
  ExpectRefused(With64(kOffExtents + 8, extent(210, 6)),
                "journal extent 1 (AUs [210, +6)) continues journal extent 0");
  // Next to each other in the other order is another ring: accepted.
  std::string other = With64(kOffExtents + 8, extent(194, 6));
  Reseal(&other);
  SuperblockV3 out;
  ASSERT_TRUE(Decode(other, &out).ok());
  EXPECT_EQ(out.journal, (std::vector<JournalExtent>{{200, 10}, {194, 6}}));
  // 10 + 1,024 AUs of 1 MiB: past the 1 GiB cap.
  ExpectRefused(With64(kOffExtents + 8, extent(1000, 1024)), "journal of 1084227584 bytes is not 64 KiB .. 1 GiB");
}

TEST_F(SuperblockV3Damage, ReplayStart) {
  ExpectRefused(With64(kOffJournalStart, 16 * kMiB),
                "journal replay start 16777216 is not a 4096-byte write-unit boundary inside");
  ExpectRefused(With64(kOffJournalStart, 100), "journal replay start 100");
  // The boundary is the pool's own write unit, not the smallest one: 512
  // bytes past a 4096-byte unit is inside a unit, and fine at 512.
  ExpectRefused(With64(kOffJournalStart, 12 * kMiB + 512), "journal replay start 12583424 is not a 4096-byte");
  std::string d = With64(kOffJournalStart, 12 * kMiB + 512);
  Put32(&d, kOffWriteUnit, 512);
  Reseal(&d);
  SuperblockV3 out;
  EXPECT_TRUE(Decode(d, &out).ok());
  Put32(&d, kOffWriteUnit, 1024);
  ExpectRefused(d, "is not a 1024-byte write-unit boundary");
  ExpectRefused(With64(kOffJournalStart, ~uint64_t{0}), "journal replay start");
  ExpectRefused(With64(kOffLsn, 0), "journal start LSN 0");
  ExpectRefused(With64(kOffLsn, uint64_t{1} << 62), "journal start LSN");
}

TEST_F(SuperblockV3Damage, ReservedBytes) {
  for (size_t off : {size_t{97}, size_t{103}, size_t{168}, size_t{191}, size_t{208}, size_t{447}, size_t{448},
                     size_t{4095}}) {
    std::string d = bytes;
    d[off] = 0x10;
    ExpectRefused(d, "reserved byte " + std::to_string(off) + " is not zero");
  }
}

TEST_F(SuperblockV3Damage, WrongSizeIsACallerError) {
  SuperblockV3 out;
  EXPECT_EQ(DecodeSuperblockV3(bytes.data(), kSuperblockSlot - 1, kDevice, &out).code(), Code::kInvalidArgument);
}

// Every single-bit flip anywhere in the slot is refused: CRC32C sees them all.
TEST(SuperblockV3, EverySingleBitFlipIsRefused) {
  const std::string bytes = Encode(Base());
  for (size_t bit = 0; bit < kSuperblockSlot * 8; bit++) {
    std::string d = bytes;
    d[bit / 8] = static_cast<char>(d[bit / 8] ^ (1 << (bit % 8)));
    SuperblockV3 out;
    Status s = Decode(d, &out);
    ASSERT_EQ(s.code(), Code::kCorruption) << "bit " << bit << ": " << s.ToString();
    const char* want = bit < 64 ? "bad magic" : bit < 8 * (kOffEnvelopeCrc + 4) ? "envelope CRC mismatch" : "CRC mismatch";
    ASSERT_NE(s.message().find(want), std::string::npos) << "bit " << bit << ": " << s.message();
  }
}

// The encoding is canonical: whatever decodes re-encodes to the very same
// bytes, so no bit of the slot goes unchecked (a field the decoder ignored,
// or a reserved byte it did not look at, would differ). Random byte changes
// in the record, resealed so the field rules must judge them.
TEST(SuperblockV3, AnythingThatDecodesReencodesToTheSameBytes) {
  const std::string base = Encode(Base());
  std::mt19937_64 rng(20261202);
  int decoded = 0;
  for (int iter = 0; iter < 40000; iter++) {
    std::string d = base;
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < changes; k++) {
      // Mostly the record, sometimes the tail; never the CRCs (resealed).
      size_t off = rng() % 8 ? 8 + rng() % (kSuperblockV3Record - 8) : rng() % kSuperblockSlot;
      if (off >= kOffEnvelopeCrc && off < kOffCrc + 4) off = kOffLunAddr;
      d[off] = static_cast<char>(rng() % 3 ? rng() : (rng() % 2 ? 0 : 0xff));
    }
    Reseal(&d);
    SuperblockV3 out;
    Status s = Decode(d, &out, ~uint64_t{0});
    if (!s.ok()) {
      ASSERT_TRUE(s.code() == Code::kCorruption || s.code() == Code::kUnsupported) << s.ToString();
      continue;
    }
    decoded++;
    std::string again;
    ASSERT_TRUE(EncodeSuperblockV3(out, &again).ok()) << "iteration " << iter;
    ASSERT_EQ(again, d) << "iteration " << iter;
  }
  EXPECT_GT(decoded, 4000);  // the property was tested, not just refusals
}

// A v1/v2 build (Superblock::Decode) meeting a v3 pool: the shared envelope
// brings it to its version check, so it refuses with kUnsupported naming
// format 3 (store-v3.md 3.7), not "corrupt".
TEST(SuperblockV3CrossFormat, TheV2DecoderRefusesAV3SuperblockAsUnsupported) {
  const std::string b = Encode(Base());
  Superblock old;
  Status s = Superblock::Decode(b.data(), b.size(), &old);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("pool format version 3"), std::string::npos) << s.message();
  // Damage in the envelope is corruption to it, as to the v3 decoder.
  std::string d = b;
  d[40] ^= 1;
  EXPECT_EQ(Superblock::Decode(d.data(), d.size(), &old).code(), Code::kCorruption);
}

std::vector<char> FileBytes(FaultInjectionEnv* env) {
  auto f = env->OpenLocked("p", Env::Mode::kReadOnly);
  EXPECT_TRUE(f.ok());
  auto n = (*f)->Size();
  std::vector<char> b(*n);
  EXPECT_TRUE((*f)->Read(0, b.size(), b.data()).ok());
  return b;
}
void WriteSlot(FaultInjectionEnv* env, int slot, const std::string& img) {
  auto f = env->OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write(slot * kSuperblockSlot, img.size(), img.data()).ok());
}
PoolOptions SmallPool() {
  PoolOptions o;
  o.allocation_unit = 64 << 10;
  o.journal_bytes = 64 << 10;
  o.size_bytes = 2 << 20;
  return o;
}

// What the chooser answers an open of formats 1 and 2 only
// (ServedFormats::kV1V2: Core asked for it until it served format 3).
Status ChooseForV2Open(FaultInjectionEnv* env) {
  auto f = env->OpenLocked("p", Env::Mode::kReadOnly);
  if (!f.ok()) return f.status();
  SuperblockSlots slots;
  return ChooseMetaFormat(f->get(), &slots, ServedFormats::kV1V2).status();
}

// The same through the v1/v2 open: a pool whose two slots hold v3 copies is
// refused with kUnsupported and not a byte of it changes. Core's open
// (formats 1 to 3) refuses these copies too (their pool ends beyond the
// file), also writing nothing.
TEST(SuperblockV3CrossFormat, TheV2OpenRefusesAV3PoolAndWritesNothing) {
  FaultInjectionEnv env;
  { ASSERT_TRUE(Pool::Create(&env, "p", SmallPool()).ok()); }
  const std::string v3 = Encode(Base());
  WriteSlot(&env, 0, v3);
  WriteSlot(&env, 1, v3);
  const std::vector<char> before = FileBytes(&env);
  Status s = ChooseForV2Open(&env);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("pool format version 3"), std::string::npos) << s.ToString();
  for (bool read_only : {false, true}) {
    auto p = Pool::Open(&env, "p", {.read_only = read_only});
    ASSERT_FALSE(p.ok());
  }
  EXPECT_EQ(FileBytes(&env), before);
}

// The v3 superblock an upgrade of the pool `v2` describes writes (3.7):
// same UUID, AU, data offset and size, sequence + 1, origin format 2, an
// empty journal in the data area's first AU, no LUNs yet.
SuperblockV3 UpgradeOf(const Superblock& v2) {
  SuperblockV3 sb;
  sb.uuid = v2.uuid;
  sb.seq = v2.seq + 1;
  sb.au = v2.au;
  sb.grain = 4096;
  sb.data_offset = v2.data_offset;
  sb.units = v2.total_units();
  sb.soft_threshold_percent = v2.soft_threshold_percent;
  sb.origin_format = v2.version;
  sb.journal = {{0, 1}};
  sb.lun_table = {v2.data_offset + v2.au, sb.seq};  // AU 1: the upgrade's LUN table
  sb.journal_start_lsn = v2.journal_start_lsn + 1;
  return sb;
}

// An upgrade cut after its first superblock write: the v3 superblock in the
// slot it writes first, the v2 copy it started from in the other. The v1/v2
// open refuses it, read-write as well as read-only, and changes no byte:
// opening the v2 copy read-write would rewrite the v3 slot and punch the v3
// pages (in AUs free in the v2 state) as free space, undoing the upgrade.
// The v3 chooser takes the v3 copy of the same pool
// (SuperblockV3Choice.AnUpgradeCutBeforeItsSecondWriteChoosesV3).
TEST(SuperblockV3CrossFormat, TheV2OpenRefusesAnUpgradeCutAfterOneSlotAndWritesNothing) {
  for (int first = 0; first < 2; first++) {
    FaultInjectionEnv env;
    { ASSERT_TRUE(Pool::Create(&env, "p", SmallPool()).ok()); }
    std::vector<char> img = FileBytes(&env);
    Superblock v2;
    ASSERT_TRUE(Superblock::Decode(img.data() + (1 - first) * kSuperblockSlot, kSuperblockSlot, &v2).ok());
    const std::string v3 = Encode(UpgradeOf(v2));
    WriteSlot(&env, first, v3);
    img = FileBytes(&env);
    // Upgrade-shaped: the v3 chooser takes the v3 copy, naming the v2 one.
    SuperblockChoice c;
    Status s = ChooseSuperblockV3(img.data(), img.data() + kSuperblockSlot, img.size(), &c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(c.slot, first);
    EXPECT_NE(c.other_state.find("format 2"), std::string::npos) << c.other_state;
    s = ChooseForV2Open(&env);
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
    EXPECT_NE(s.message().find("superblock slot " + std::to_string(first) + " holds pool format version 3"),
              std::string::npos)
        << s.ToString();
    // Core's open (formats 1 to 3) takes the v3 copy, which names no LUN
    // table this test wrote: refused as damaged, before any write.
    for (bool read_only : {false, true}) {
      auto p = Pool::Open(&env, "p", {.read_only = read_only});
      ASSERT_FALSE(p.ok()) << first << read_only;
      EXPECT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
    }
    EXPECT_EQ(FileBytes(&env), img);
  }
}

Superblock V2(uint64_t seq) {
  Superblock sb;
  sb.uuid = PoolId(3);
  sb.au = kMiB;  // Base()'s pool in the v2 layout: what an upgrade keeps
  sb.journal_bytes = 64 << 10;
  sb.data_offset = kMiB;
  sb.size_bytes = kMiB + 4096 * kMiB;
  sb.seq = seq;
  return sb;
}

TEST(SuperblockV3CrossFormat, TheV3DecoderRefusesAV2SuperblockAsUnsupported) {
  const std::string b = V2(5).Encode();
  EXPECT_EQ(SuperblockEnvelopeVersion(b.data(), b.size()), 2u);
  SuperblockV3 out;
  Status s = Decode(b, &out);
  EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
  EXPECT_NE(s.message().find("pool format version 2 is read by the v1/v2 superblock codec"), std::string::npos);
  Superblock v1 = V2(5);
  v1.version = 1;
  const std::string b1 = v1.Encode();
  EXPECT_EQ(Decode(b1, &out).code(), Code::kUnsupported);
  EXPECT_EQ(SuperblockEnvelopeVersion(b1.data(), b1.size()), 1u);
}

// The choice between the two slots.
struct SuperblockV3Choice : ::testing::Test {
  std::string At(uint64_t seq) {
    SuperblockV3 sb = Base();
    sb.seq = seq;
    return Encode(sb);
  }
  // A copy written by an upgrade of a format 2 pool (Base() was created as v3).
  std::string UpgradedAt(uint64_t seq) {
    SuperblockV3 sb = Base();
    sb.seq = seq;
    sb.origin_format = 2;
    return Encode(sb);
  }
  Status Choose(const std::string& a, const std::string& b, SuperblockChoice* c) {
    return ChooseSuperblockV3(a.data(), b.data(), kDevice, c);
  }
  std::string Damaged(std::string s) {
    s[300] ^= 1;
    return s;
  }
};

TEST_F(SuperblockV3Choice, BothSlotsEqualIsRealRedundancy) {
  SuperblockChoice c;
  ASSERT_TRUE(Choose(At(41), At(41), &c).ok());
  EXPECT_TRUE(c.redundant);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.other, -1);
  EXPECT_EQ(c.sb, Base());
}

TEST_F(SuperblockV3Choice, TheNewestValidCopyWinsAndTheStaleSlotIsNamed) {
  for (int newer = 0; newer < 2; newer++) {
    SuperblockChoice c;
    const std::string a = At(42), b = At(41);
    ASSERT_TRUE((newer == 0 ? Choose(a, b, &c) : Choose(b, a, &c)).ok());
    EXPECT_EQ(c.sb.seq, 42u);
    EXPECT_EQ(c.slot, newer);
    EXPECT_FALSE(c.redundant);
    EXPECT_EQ(c.other, 1 - newer);
    EXPECT_EQ(c.other_state, "stale: sequence 41");
  }
}

// Issue 16: damage to the newest copy. Under the writer rule (header) the
// other copy is the same superblock (both slots written) or the predecessor
// of a write that never completed; either way it opens, and the damaged slot
// is named for open to rewrite and for any later refusal to cite.
TEST_F(SuperblockV3Choice, ADamagedNewestCopyFallsBackAndSaysSo) {
  for (int damaged = 0; damaged < 2; damaged++) {
    SuperblockChoice c;
    const std::string bad = Damaged(At(42)), good = At(41);
    ASSERT_TRUE((damaged == 0 ? Choose(bad, good, &c) : Choose(good, bad, &c)).ok());
    EXPECT_EQ(c.sb.seq, 41u);
    EXPECT_EQ(c.slot, 1 - damaged);
    EXPECT_FALSE(c.redundant);
    EXPECT_EQ(c.other, damaged);
    EXPECT_EQ(c.other_state, "damaged: superblock v3: CRC mismatch");
  }
}

// The fallback rule's other half: a copy that passes both CRCs was written
// whole, so a field it fails is no torn write. As the newest copy it refuses
// the open, naming slot, sequence and field: falling back would silently
// roll back acknowledged state.
TEST_F(SuperblockV3Choice, ACrcValidNewestCopyRefusedByAFieldRefusesTheOpen) {
  std::string refused = At(42);
  Put32(&refused, kOffGrain, 3072);
  Reseal(&refused);
  for (int slot = 0; slot < 2; slot++) {
    SuperblockChoice c;
    Status s = slot == 0 ? Choose(refused, At(41), &c) : Choose(At(41), refused, &c);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_EQ(s.message(), "superblock slot " + std::to_string(slot) +
                               " (sequence 42) passes its CRCs but is refused: superblock v3: grain of 3072 bytes "
                               "is not a power of two; not a torn write, so the older copy in slot " +
                               std::to_string(1 - slot) +
                               " (sequence 41) is not opened in its place (it would roll back acknowledged state)");
  }
  SuperblockChoice c;
  // As new as the other copy: still not the other's to stand in for.
  EXPECT_EQ(Choose(refused, At(42), &c).code(), Code::kCorruption);
  // Beside a damaged slot, or the v2 copy an upgrade started from.
  Status s = Choose(Damaged(At(43)), refused, &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("so slot 0 (superblock v3: CRC mismatch) is not opened"), std::string::npos)
      << s.message();
  s = Choose(refused, V2(41).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("so the older format 2 copy in slot 1 (sequence 41) is not opened"), std::string::npos)
      << s.message();
}

// An older CRC-valid copy refused by a field beside a valid newer one
// threatens no acknowledged state: the newer copy wins and the refused slot
// is named for open to rewrite, as a damaged one is.
TEST_F(SuperblockV3Choice, ACrcValidOlderCopyRefusedByAFieldStandsAside) {
  std::string refused = At(41);
  Put32(&refused, kOffGrain, 3072);
  Reseal(&refused);
  for (int slot = 0; slot < 2; slot++) {
    SuperblockChoice c;
    Status s = slot == 0 ? Choose(refused, At(42), &c) : Choose(At(42), refused, &c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(c.sb.seq, 42u);
    EXPECT_EQ(c.slot, 1 - slot);
    EXPECT_EQ(c.other, slot);
    EXPECT_NE(c.other_state.find("damaged: superblock v3: grain of 3072 bytes"), std::string::npos) << c.other_state;
  }
}

// A medium smaller than the pool (a file cut, a volume shrunk) leaves every
// copy beyond it: the answer says so and names the size the pool needs,
// whichever copy the slots chose; it is not put as one copy refused and the
// other not opened in its place.
TEST_F(SuperblockV3Choice, AMediumSmallerThanThePoolIsNamedWhicheverCopyWins) {
  const SuperblockV3 base = Base();
  const uint64_t end = base.data_offset + base.units * base.au;
  const std::string need = std::to_string(end);
  SuperblockChoice c;
  ASSERT_TRUE(ChooseSuperblockV3(At(42).data(), At(41).data(), end, &c).ok());
  Status s = ChooseSuperblockV3(At(42).data(), At(41).data(), end - 1, &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(s.message(), "the pool ends at byte " + need +
                             " (superblock slot 0, sequence 42) but its device or file holds " + std::to_string(end - 1) +
                             " bytes: it was made smaller (a file cut or copied short, a volume shrunk), or the "
                             "superblock is damaged. Nothing was changed; give it back at least " +
                             need + " bytes and open the pool again");
  // The newest copy torn: the older one is chosen, and is beyond it too.
  s = ChooseSuperblockV3(At(41).data(), Damaged(At(42)).data(), 0, &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("(superblock slot 0, sequence 41) but its device or file holds 0 bytes"),
            std::string::npos)
      << s.message();
}

TEST_F(SuperblockV3Choice, BothDamagedNamesBoth) {
  SuperblockChoice c;
  Status s = Choose(Damaged(At(41)), std::string(kSuperblockSlot, '\0'), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(s.message(), "no valid superblock: slot 0: superblock v3: CRC mismatch; slot 1: superblock v3: bad "
                         "magic (no cowstore superblock)");
}

TEST_F(SuperblockV3Choice, OneSequenceTwoContentsIsRefused) {
  SuperblockV3 other = Base();
  other.journal_start_lsn++;
  SuperblockChoice c;
  Status s = Choose(At(41), Encode(other), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("both hold sequence 41 but differ"), std::string::npos) << s.message();
}

// A valid superblock of another pool in one slot (a misdirected write, or
// an image pieced together) is never taken by its sequence.
TEST_F(SuperblockV3Choice, TwoPoolsInTheSlotsAreRefused) {
  SuperblockV3 other = Base();
  other.uuid = PoolId(9);
  other.seq = 42;
  SuperblockChoice c;
  Status s = Choose(At(41), Encode(other), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("superblock slots hold two pools"), std::string::npos) << s.message();
  Superblock v2 = V2(40);
  v2.uuid = PoolId(9);
  s = Choose(v2.Encode(), At(41), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("superblock slots hold two pools: slot 1 "), std::string::npos) << s.message();
}

TEST_F(SuperblockV3Choice, ANewerFormatInEitherSlotRefusesEvenBesideAValidCopy) {
  std::string v4 = At(42);
  Put32(&v4, kOffVersion, 4);
  Reseal(&v4);
  for (int slot = 0; slot < 2; slot++) {
    SuperblockChoice c;
    Status s = slot == 0 ? Choose(v4, At(41), &c) : Choose(At(41), v4, &c);
    EXPECT_EQ(s.code(), Code::kUnsupported);
    EXPECT_EQ(s.message(), "superblock slot " + std::to_string(slot) +
                               " holds pool format version 4 (this build reads up to 3)");
  }
}

// Incompat flags this build does not know are a newer build's writing, as a
// newer version is: refused in either slot, never taken for damage (which
// would open the older copy, or call a healthy pool corrupt).
TEST_F(SuperblockV3Choice, UnknownIncompatFlagsInEitherSlotRefuseTheOpen) {
  std::string flagged = At(42);
  Put32(&flagged, kOffIncompat, 0x80);
  Reseal(&flagged);
  std::string flagged41 = At(41);
  Put32(&flagged41, kOffIncompat, 0x80);
  Reseal(&flagged41);
  for (int slot = 0; slot < 2; slot++) {
    SuperblockChoice c;
    Status s = slot == 0 ? Choose(flagged, At(41), &c) : Choose(At(41), flagged, &c);
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
    EXPECT_EQ(s.message(), "superblock slot " + std::to_string(slot) +
                               ": superblock v3: incompat flags 128 this build does not know");
  }
  SuperblockChoice c;
  EXPECT_EQ(Choose(flagged41, flagged, &c).code(), Code::kUnsupported);  // both: still not corrupt
  EXPECT_EQ(Choose(V2(40).Encode(), flagged, &c).code(), Code::kUnsupported);  // not routed to v2
}

// An upgrade writes the v3 superblock at the v2 one's sequence + 1 into one
// slot, then the other: cut between the two, the v3 copy wins.
TEST_F(SuperblockV3Choice, AnUpgradeCutBeforeItsSecondWriteChoosesV3) {
  SuperblockChoice c;
  ASSERT_TRUE(Choose(V2(40).Encode(), UpgradedAt(41), &c).ok());
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.other, 0);
  EXPECT_EQ(c.other_state, "format 2, sequence 40 (an upgrade cut before its second write)");
  // An upgrade moves nothing: a v2 copy of the same UUID but another data
  // offset or size is not the same pool's.
  Superblock moved = V2(40);
  moved.journal_bytes = 2 * kMiB;
  moved.data_offset = 3 * kMiB;
  moved.size_bytes = 3 * kMiB + 4096 * kMiB;
  Status s = Choose(moved.Encode(), UpgradedAt(41), &c);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("slot 0 holds format 2 of AU 1048576, data offset 3145728, 4096 AUs; the format 3 "
                             "copy in slot 1 has AU 1048576, data offset 1048576, 4096 AUs"),
            std::string::npos)
      << s.message();
  Superblock smaller = V2(40);
  smaller.size_bytes -= kMiB;
  s = Choose(UpgradedAt(41), smaller.Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("4095 AUs"), std::string::npos) << s.message();
  // A v1/v2 copy as new as the v3 one: no crash explains it.
  s = Choose(UpgradedAt(41), V2(41).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("slot 1 holds format 2 sequence 41, not older than the format 3 copy in slot 0"),
            std::string::npos)
      << s.message();
  // Only an upgrade of that very format leaves a v3 copy beside it: one
  // created as format 3, or upgraded from format 1, is another pool's copy
  // or a misdirected write.
  s = Choose(V2(40).Encode(), At(41), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("slot 0 holds format 2 but the format 3 copy in slot 1 says it was created as format 3"),
            std::string::npos)
      << s.message();
  SuperblockV3 from_v1 = Base();
  from_v1.seq = 41;
  from_v1.origin_format = 1;
  s = Choose(Encode(from_v1), V2(40).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("says it was upgraded from format 1"), std::string::npos) << s.message();
}

TEST_F(SuperblockV3Choice, NoV3CopyIsRoutedToTheV2Open) {
  SuperblockChoice c;
  Status s = Choose(V2(7).Encode(), V2(7).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_EQ(s.message(), "pool format version 2 (slot 0): not a format 3 pool; the v1/v2 open reads it");
  // A damaged v3 copy (its envelope intact) beside a v2 one: the v1/v2
  // open refuses a slot of a newer format (recovery.cc), so routing there
  // would be a dead end that calls the pool unsupported: it is refused as
  // corrupt, naming both slots.
  s = Choose(Damaged(At(41)), V2(40).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_EQ(s.message(), "superblock slot 0 holds a format 3 copy that is refused (superblock v3: CRC mismatch) "
                         "beside format 2 sequence 40 in slot 1: neither the v3 nor the v1/v2 open takes the pool");
  // Damage that reaches the envelope leaves no sign of format 3: the v2
  // copy is the pool's, as both opens agree.
  std::string no_envelope = At(41);
  no_envelope[40] ^= 1;
  s = Choose(no_envelope, V2(40).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("(slot 1)"), std::string::npos) << s.message();
  // A v2 copy that fails its own decoder is damage, named in its words.
  Superblock bad = V2(7);
  bad.soft_threshold_percent = 200;
  s = Choose(bad.Encode(), Damaged(At(41)), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("slot 0: superblock fields out of range"), std::string::npos) << s.message();
}

// The superblock records the IndexRoot BuildIndex gives whole, and what the
// decoded superblock says is enough for ReadIndex: the root with its level
// and key range, the pool and the address bound (IndexReadBound).
struct SuperblockV3Index : ::testing::Test {
  void SetUp() override {
    for (uint64_t i = 0; i < 250; i++) {  // three level-0 pages and a level-1 root
      const uint32_t lun = static_cast<uint32_t>(1 + i / 100);
      leaves.push_back({{lun, (i % 100) * 1000}, {lun, (i % 100) * 1000 + 700}, kLeaves + i * 4096, 1 + i % 40});
    }
    root = Build(Base().seq, &disk);
  }
  // Builds the index over `leaves` at checkpoint `seq`, its pages from kPages on.
  IndexRoot Build(uint64_t seq, std::map<uint64_t, std::string>* onto) {
    std::vector<std::pair<uint64_t, std::string>> pages;
    uint64_t next = kPages;
    IndexRoot r;
    Status s = BuildIndex(IndexReadBound(Base()), seq, leaves,
                          [&next]() -> Result<uint64_t> { return (next += 4096) - 4096; }, &pages, &r);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (auto& [addr, bytes] : pages) (*onto)[addr] = bytes;
    level0 = pages.front().first;
    return r;
  }
  // Records `r` in Base()'s superblock, encodes, decodes, and reads the
  // index the decoded superblock names from `from`.
  Status ReadThroughSuperblock(const IndexRoot& r, const std::map<uint64_t, std::string>& from,
                               std::vector<IndexEntry>* out) {
    SuperblockV3 sb = Base();
    sb.index = r;
    SuperblockV3 back;
    if (Status s = Decode(Encode(sb), &back); !s.ok()) return s;
    EXPECT_EQ(back.index, r);
    return ReadIndex(back.index, IndexReadBound(back),
                     [&from](uint64_t addr, std::string* page) {
                       auto it = from.find(addr);
                       if (it == from.end()) return Status(Code::kIOError, "no page at " + std::to_string(addr));
                       *page = it->second;
                       return Status::Ok();
                     },
                     out);
  }
  void ExpectRefused(const IndexRoot& r, const std::map<uint64_t, std::string>& from, const std::string& what) {
    std::vector<IndexEntry> out;
    Status s = ReadThroughSuperblock(r, from, &out);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message() << " should name: " << what;
    EXPECT_TRUE(out.empty());
  }
  // Base()'s data area starts at 1 MiB; its journal and LUN table lie below
  // AU 400.
  static constexpr uint64_t kLeaves = kMiB + 300 * kMiB, kPages = kMiB + 400 * kMiB;
  std::vector<IndexEntry> leaves;
  std::map<uint64_t, std::string> disk;
  IndexRoot root;
  uint64_t level0 = 0;
};

TEST_F(SuperblockV3Index, TheRecordedRootReadsTheIndexBack) {
  ASSERT_EQ(root.level, 1u);
  std::vector<IndexEntry> out;
  Status s = ReadThroughSuperblock(root, disk, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, leaves);
}

TEST_F(SuperblockV3Index, AStaleOrMisdirectedRootIsRefused) {
  // Stale: the previous checkpoint's root left at the address (the new one
  // lost), or the superblock naming the previous checkpoint's sequence.
  std::map<uint64_t, std::string> older;
  const IndexRoot old_root = Build(40, &older);
  ASSERT_EQ(old_root.entry.addr, root.entry.addr);
  std::map<uint64_t, std::string> lost = disk;
  lost[root.entry.addr] = older[root.entry.addr];
  ExpectRefused(root, lost, "stale checkpoint sequence 40 (the parent expects 41)");
  IndexRoot r = root;
  r.entry.seq = 40;
  ExpectRefused(r, disk, "future checkpoint sequence 41 (the parent expects 40)");
  // Misdirected: a level-0 page's bytes at the root's address, or the
  // superblock naming a level-0 page as the root.
  std::map<uint64_t, std::string> misdirected = disk;
  misdirected[root.entry.addr] = disk[level0];
  ExpectRefused(root, misdirected, "wrong level 0 (the parent expects level 1)");
  r = root;
  r.entry.addr = level0;
  ExpectRefused(r, disk, "wrong level 0 (the parent expects level 1)");
  r.level = 0;  // with the level it has, the recorded key range still tells
  ExpectRefused(r, disk, "misplaced page");
  // The recorded key range is checked against the root page's.
  r = root;
  r.entry.end.lba--;
  ExpectRefused(r, disk, "misplaced page");
}

}  // namespace
}  // namespace cowstore::store
