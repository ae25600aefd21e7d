// SPDX-License-Identifier: Apache-2.0
// Unit tests of format v3's superblock codec (superblock_v3.h): round trips,
// the encoder refusing what the decoder would, each damaged field refused by
// name, every single-bit flip refused, v2/v3 cross-refusal, and the choice
// between the two slots.
#include "handler/store/superblock_v3.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "handler/store/crc32c.h"
#include "handler/store/fault_env.h"
#include "handler/store/meta.h"  // Encoder, Superblock (v1/v2), kSuperblockSlot
#include "handler/store/pool.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::store {
namespace {

// Field offsets (superblock_v3.h's layout, restated: the test checks the
// on-disk format, not the codec's idea of it).
constexpr size_t kOffVersion = 8, kOffIncompat = 12, kOffSeq = 32, kOffAu = 40, kOffGrain = 44,
                 kOffDataOffset = 48, kOffUnits = 56, kOffSoft = 64, kOffWriteUnit = 68, kOffOrigin = 72,
                 kOffExtentCount = 76, kOffIndexAddr = 80, kOffIndexSeq = 88, kOffLevels = 96,
                 kOffEnvelopeCrc = 104, kOffCrc = 108, kOffLunAddr = 112, kOffLunSeq = 120,
                 kOffJournalStart = 128, kOffLsn = 136, kOffExtents = 192;
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
  sb.index = {kMiB + 100 * kMiB + 8192, 40};
  sb.index_levels = 2;
  sb.lun_table = {kMiB + 100 * kMiB, 41};
  sb.journal = {{200, 10}, {500, 6}};
  sb.journal_start = 12 * kMiB + 512;
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
  const auto* p = reinterpret_cast<const uint8_t*>(b->data());
  Put32(b, kOffEnvelopeCrc, Crc32c(0, p, kOffEnvelopeCrc));
  uint32_t c = Crc32c(0, p, kOffCrc);
  Put32(b, kOffCrc, Crc32c(c, p + kOffCrc + 4, kSuperblockSlot - kOffCrc - 4));
}

TEST(SuperblockV3, RoundTrips) {
  SuperblockV3 sb = Base();
  SuperblockV3 back;
  ASSERT_TRUE(Decode(Encode(sb), &back).ok());
  EXPECT_EQ(back, sb);
  EXPECT_EQ(back.capacity(), 16 * kMiB);
  EXPECT_EQ(back.grains(), 4096u * 256);

  // A pool without LUNs: no index, no LUN table; one extent; upgraded from v2.
  sb.index = {};
  sb.index_levels = 0;
  sb.lun_table = {};
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
  sb.index_levels = kMaxIndexLevels;
  sb.index.seq = sb.seq;
  sb.journal.clear();
  // 32 one-AU extents = 32 MiB, the last one at the pool's last AU.
  for (uint64_t i = 0; i < kMaxJournalExtents; i++) sb.journal.push_back({1000 + 3 * i, 1});
  sb.journal.back().first_au = sb.units - 1;
  sb.journal_start = 32 * kMiB - 512;
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
  sb.index.addr = sb.lun_table.addr = kNoPage;
  sb.index.seq = sb.lun_table.seq = 0;
  sb.index_levels = 0;
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
  EXPECT_EQ(p[kOffLevels], 2);
  EXPECT_EQ(u32(kOffEnvelopeCrc), Crc32c(0, p, kOffEnvelopeCrc));
  // Extent 1: AU 500, 6 AUs stored as 5 in the top 16 bits.
  EXPECT_EQ(u32(kOffExtents + 8), 500u);
  EXPECT_EQ(u32(kOffExtents + 12), 5u << 16);
  for (size_t off = kSuperblockV3Extents + 16; off < kSuperblockSlot; off++) ASSERT_EQ(p[off], 0) << off;
  for (size_t off = 144; off < kOffExtents; off++) ASSERT_EQ(p[off], 0) << off;
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
  sb.incompat = 1;
  ExpectEncodeRefuses(sb, "incompat flags 1");
  sb = Base();
  sb.journal[0].aus = 0;
  ExpectEncodeRefuses(sb, "journal extent 0 (AUs [200, +0)) is not 1 .. 65536 AUs long");
  sb.journal[0].aus = kMaxJournalExtentAus + 1;
  ExpectEncodeRefuses(sb, "is not 1 .. 65536 AUs long");
  sb = Base();
  sb.units = ~uint64_t{0} / 2;
  ExpectEncodeRefuses(sb, "passes 2^48 grains");
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
  // "None" carries no sequence, and an index without a root has no levels.
  std::string d = With64(kOffLunAddr, kNoPage);
  ExpectRefused(d, "LUN table root is none but has sequence 41");
  Put64(&d, kOffLunSeq, 0);
  SuperblockV3 out;
  Reseal(&d);
  EXPECT_TRUE(Decode(d, &out).ok());
  d = With64(kOffIndexAddr, kNoPage);
  Put64(&d, kOffIndexSeq, 0);
  ExpectRefused(d, "index levels 2");
  d[kOffLevels] = 0;
  Reseal(&d);
  EXPECT_TRUE(Decode(d, &out).ok());
  std::string e = bytes;
  e[kOffLevels] = 0;
  ExpectRefused(e, "index levels 0");
  e[kOffLevels] = kMaxIndexLevels + 1;
  ExpectRefused(e, "index levels 9");
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
  d[kOffLevels] = 0;
  ExpectRefused(d, "journal extent 1 (AUs [100, +1)) overlaps the LUN table root page at byte 105906176");
  // 10 + 1,024 AUs of 1 MiB: past the 1 GiB cap.
  ExpectRefused(With64(kOffExtents + 8, extent(1000, 1024)), "journal of 1084227584 bytes is not 64 KiB .. 1 GiB");
}

TEST_F(SuperblockV3Damage, ReplayStart) {
  ExpectRefused(With64(kOffJournalStart, 16 * kMiB), "journal replay start 16777216 is not a 512-byte boundary inside");
  ExpectRefused(With64(kOffJournalStart, 100), "journal replay start 100");
  ExpectRefused(With64(kOffJournalStart, ~uint64_t{0}), "journal replay start");
  ExpectRefused(With64(kOffLsn, 0), "journal start LSN 0");
  ExpectRefused(With64(kOffLsn, uint64_t{1} << 62), "journal start LSN");
}

TEST_F(SuperblockV3Damage, ReservedBytes) {
  for (size_t off : {size_t{97}, size_t{103}, size_t{144}, size_t{191}, size_t{208}, size_t{447}, size_t{448},
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

// The same through the v1/v2 open: a pool whose two slots hold v3 copies is
// refused with kUnsupported and not a byte of it changes.
TEST(SuperblockV3CrossFormat, TheV2OpenRefusesAV3PoolAndWritesNothing) {
  FaultInjectionEnv env;
  { ASSERT_TRUE(Pool::Create(&env, "p", SmallPool()).ok()); }
  const std::string v3 = Encode(Base());
  WriteSlot(&env, 0, v3);
  WriteSlot(&env, 1, v3);
  const std::vector<char> before = FileBytes(&env);
  for (bool read_only : {false, true}) {
    auto p = Pool::Open(&env, "p", {.read_only = read_only});
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::kUnsupported) << p.status().ToString();
    EXPECT_NE(p.status().message().find("pool format version 3"), std::string::npos) << p.status().ToString();
  }
  EXPECT_EQ(FileBytes(&env), before);
}

// An upgrade cut after its first superblock write (v3 in one slot, the
// v2 copy it started from in the other): the v1/v2 open takes the v2 copy,
// whose state the cut upgrade never changed (3.7: the v3 pages sit in AUs
// free in that state). ChooseSuperblockV3 takes the v3 copy of the same
// state instead (SuperblockV3Choice.AnUpgradeCutBeforeItsSecondWriteChoosesV3).
TEST(SuperblockV3CrossFormat, TheV2OpenOfAnUpgradeCutAfterOneSlotTakesTheV2Copy) {
  FaultInjectionEnv env;
  { ASSERT_TRUE(Pool::Create(&env, "p", SmallPool()).ok()); }
  WriteSlot(&env, 0, Encode(Base()));
  auto p = Pool::Open(&env, "p", {.read_only = true});
  EXPECT_TRUE(p.ok()) << p.status().ToString();
}

Superblock V2(uint64_t seq) {
  Superblock sb;
  sb.uuid = PoolId(3);
  sb.au = kMiB;
  sb.size_bytes = 64 * kMiB;
  sb.journal_bytes = 16 * kMiB;
  sb.data_offset = 17 * kMiB;
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
  // A CRC-valid copy refused by a field counts as damaged too, and says why.
  std::string refused = At(42);
  Put32(&refused, kOffGrain, 3072);
  Reseal(&refused);
  SuperblockChoice c;
  ASSERT_TRUE(Choose(refused, At(42), &c).ok());
  EXPECT_EQ(c.slot, 1);
  EXPECT_NE(c.other_state.find("grain of 3072 bytes"), std::string::npos) << c.other_state;
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
  ASSERT_TRUE(Choose(V2(40).Encode(), At(41), &c).ok());
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.other, 0);
  EXPECT_EQ(c.other_state, "format 2, sequence 40 (an upgrade cut before its second write)");
  // A v1/v2 copy as new as the v3 one: no crash explains it.
  Status s = Choose(At(41), V2(41).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("slot 1 holds format 2 sequence 41, not older than the format 3 copy in slot 0"),
            std::string::npos)
      << s.message();
}

TEST_F(SuperblockV3Choice, NoV3CopyIsRoutedToTheV2Open) {
  SuperblockChoice c;
  Status s = Choose(V2(7).Encode(), V2(7).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_EQ(s.message(), "pool format version 2 (slot 0): not a format 3 pool; the v1/v2 open reads it");
  // The v3 copy damaged beside a v2 one: the upgrade's first write is not
  // there to trust, and the v2 state it started from is intact.
  s = Choose(Damaged(At(41)), V2(40).Encode(), &c);
  EXPECT_EQ(s.code(), Code::kUnsupported);
  EXPECT_NE(s.message().find("(slot 1)"), std::string::npos) << s.message();
  // A v2 copy that fails its own decoder is damage, named in its words.
  Superblock bad = V2(7);
  bad.soft_threshold_percent = 200;
  s = Choose(bad.Encode(), Damaged(At(41)), &c);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("slot 0: superblock fields out of range"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace cowstore::store
