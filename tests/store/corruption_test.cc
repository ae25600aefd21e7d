// SPDX-License-Identifier: Apache-2.0
// Damaged metadata (superblocks, journal, checkpoint) is refused or opens to
// exactly the state its operations left (tests/store/corrupt_image.h): never a
// crash, never a pool that opens with something missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "handler/store/crc32c.h"
#include "handler/store/meta.h"
#include "handler/store/replay.h"
#include "tests/common/sanitizers.h"
#include "tests/store/corrupt_image.h"

namespace cowstore::store::testing {
namespace {

// Under a sanitizer an open costs tens of times more (every image copy and
// read buffer is a fresh mapping): the random test runs a fifth of its
// inputs and the format 3 sweeps flip a fifth as many bytes, with strides
// still odd (every bit position is flipped) and still below the width of a
// header.
constexpr int kSlower = sanitizer::kSanitized ? 5 : 1;

TEST(Corruption, UndamagedImagesOpenExactly) {
  for (ImageKind k : kImageKinds) {
    std::string why;
    EXPECT_EQ(OpenImage(BaseImage(k).image, BaseImage(k).model, nullptr, &why), Outcome::kExact)
        << NameOf(k) << ": " << why;
  }
}

// The format 3 images hold what the damage is meant to reach: both
// superblock records, a journal, and index, leaf and LUN table pages.
TEST(Corruption, FormatThreeImagesHoldEveryKindOfMetadata) {
  for (ImageKind k : {ImageKind::kV3Grain4K, ImageKind::kV3GrainAu}) {
    SCOPED_TRACE(NameOf(k));
    const std::vector<uint8_t>& img = BaseImage(k).image;
    SuperblockV3 sb;
    ASSERT_TRUE(NewestSuperblockV3(img, &sb));
    EXPECT_EQ(sb.grain, GrainOf(k));
    EXPECT_NE(sb.index.entry.addr, kNoPage);
    for (const char* magic : {"COWINDX3", "COWLEAF3", "COWLUNT3"}) {
      bool found = false;
      for (auto [start, len] : MetadataRegions(img))
        found = found || (len == 4096 && std::memcmp(img.data() + start, magic, 8) == 0);
      EXPECT_TRUE(found) << magic;
    }
  }
}

TEST(Corruption, RandomMetadataDamageIsRefusedOrHarmless) {
  std::mt19937_64 rng(7);
  int count[3][4] = {};
  for (int iter = 0; iter < 1500 / kSlower; iter++) {
    // A first byte choosing the image (OpenDamaged), then 1 to 4 triples.
    std::vector<uint8_t> d(1 + 3 * (1 + rng() % 4));
    for (auto& b : d) b = static_cast<uint8_t>(rng());
    d[0] = static_cast<uint8_t>(iter % 3);
    std::string why;
    Outcome o;
    ASSERT_TRUE(OpenDamaged(d.data(), d.size(), &why, &o)) << "iteration " << iter << ": " << why;
    count[iter % 3][static_cast<int>(o)]++;
  }
  for (ImageKind k : kImageKinds) {
    const int* c = count[static_cast<int>(k)];
    std::printf("%s: damaged images: %d refused, %d exact\n", NameOf(k), c[0], c[1]);
    EXPECT_GT(c[0], 0) << NameOf(k);
    EXPECT_GT(c[1], 0) << NameOf(k);
  }
}

// The bytes of each metadata region that the workload wrote (up to the last
// non-zero byte).
std::vector<uint64_t> WrittenMetadataBytes(const std::vector<uint8_t>& img) {
  std::vector<uint64_t> out;
  for (auto [start, len] : MetadataRegions(img)) {
    uint64_t end = start;
    for (uint64_t o = start; o < start + len && o < img.size(); o++)
      if (img[o]) end = o + 1;
    for (uint64_t o = start; o < end; o++) out.push_back(o);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The bytes in [lo, hi) the last operation changed (`before`: the file
// before it).
std::vector<uint64_t> Changed(const std::vector<uint8_t>& before, const std::vector<uint8_t>& img,
                              uint64_t lo = 0, uint64_t hi = ~uint64_t{0}) {
  std::vector<uint64_t> out;
  for (uint64_t o = lo; o < std::min<uint64_t>(hi, img.size()); o++)
    if (o >= before.size() || img[o] != before[o]) out.push_back(o);
  return out;
}

// The bytes of the one record framed at `at` (meta.h: its payload length
// at +4), the unchanged ones among them too (a zero field the record
// shares with what was there before is its byte all the same).
std::vector<uint64_t> RecordBytes(const std::vector<uint8_t>& img, uint64_t at) {
  uint32_t len = 0;
  std::memcpy(&len, img.data() + at + 4, 4);
  std::vector<uint64_t> out;
  for (uint64_t o = at; o < at + kRecordHeader + len; o++) out.push_back(o);
  return out;
}

Superblock NewestSuperblock(const std::vector<uint8_t>& img) {
  Superblock best, sb;
  for (int slot = 0; slot < 2; slot++)
    if (Superblock::Decode(img.data() + slot * kSuperblockSlot, kSuperblockSlot, &sb).ok() &&
        sb.seq >= best.seq)
      best = sb;
  return best;
}

// The bytes of the last record of the chain replay reads from journal byte
// `at` of [.., end): the record of LSN `lsn` there, each next one right
// after it with the next LSN. Empty if there is none.
// Found as replay finds it, not from a diff with the file before the last
// commit: an open skips a random number of LSNs, so a record's bytes (its
// LSN, its CRC) change from run to run, and its first byte may equal the
// one that lay there before. The diff then began inside the record and
// read a length from the wrong bytes (a few runs in a hundred: a flip of
// the record taken for silent loss, or a length of gigabytes).
std::vector<uint64_t> LastRecordBytes(const std::vector<uint8_t>& img, uint64_t at, uint64_t end, uint64_t lsn) {
  uint64_t last = end;
  for (;;) {
    Record r;
    RecordFrame f;
    const size_t k = ParseRecord(img.data() + at, end - at, lsn, &r, &f);
    if (k == 0) break;
    last = at;
    at += k;
    lsn++;
  }
  return last == end ? std::vector<uint64_t>{} : RecordBytes(img, last);
}

// One flipped bit in every `stride`-th byte of `bytes` (the bit rotates with
// the offset): zero silent losses. `last` (sorted) are the bytes of the last
// commit, where `previous` is accepted too.
void Sweep(const std::vector<uint8_t>& img, const std::vector<uint64_t>& bytes, uint64_t stride,
           const ImageModel& want, const ImageModel* previous, const std::vector<uint64_t>& last,
           int* count) {
  for (uint64_t i = 0; i < bytes.size(); i += stride) {
    const uint64_t off = bytes[i];
    std::vector<uint8_t> d = img;
    d[off] ^= uint8_t(1u << (off % 8));
    bool in_last = std::binary_search(last.begin(), last.end(), off);
    std::string why;
    Outcome o = OpenImage(d, want, in_last ? previous : nullptr, &why);
    ASSERT_NE(o, Outcome::kBad) << "flip of bit " << off % 8 << " at byte " << off << ": " << why;
    count[static_cast<int>(o)]++;
  }
}
void Sweep(const std::vector<uint8_t>& img, const ImageModel& want, const ImageModel* previous,
           const std::vector<uint64_t>& last, uint64_t stride = 1) {
  int count[4] = {};
  auto bytes = WrittenMetadataBytes(img);
  Sweep(img, bytes, stride, want, previous, last, count);
  std::printf("single-bit flips over %zu metadata bytes (every %llu): %d refused, %d exact, %d torn-last-commit, 0 silent\n",
              bytes.size(), static_cast<unsigned long long>(stride), count[0], count[1], count[2]);
}

TEST(Corruption, EveryMetadataBitFlipOfACleanPoolIsRefusedOrHarmless) {
  Sweep(BaseImage().image, BaseImage().model, nullptr, {});
}

TEST(Corruption, EveryMetadataBitFlipOfAPowerCutImageIsRefusedOrHarmless) {
  // The workload, small: LUN a written durably, LUN b written
  // durably, the file copied while open.
  ImageBuilder b(16);
  b.Create("a", 4 * kImgAu, 512);
  b.Write("a", 0, kImgAu, 0x11);
  b.Create("b", 4 * kImgAu, 512);
  ImageModel previous = b.model();
  std::vector<uint8_t> before = b.Snapshot();
  b.Write("b", 0, kImgAu, 0x22);
  std::vector<uint8_t> img = b.Snapshot();
  ASSERT_TRUE(b.ok());
  // The last commit's journal bytes: the only place where damage cannot be
  // told from a power cut tearing that commit. Every journal byte that
  // commit changed is its record's.
  const Superblock sb = NewestSuperblock(img);
  const std::vector<uint64_t> last =
      LastRecordBytes(img, kJournalOffset, kJournalOffset + sb.journal_bytes, sb.journal_start_lsn);
  ASSERT_FALSE(last.empty());
  const std::vector<uint64_t> changed = Changed(before, img, kJournalOffset, kImgData);
  ASSERT_FALSE(changed.empty());
  for (uint64_t o : changed) ASSERT_TRUE(std::binary_search(last.begin(), last.end(), o)) << "journal byte " << o;
  Sweep(img, b.model(), &previous, last);
}

// Format 3, closed cleanly (BaseImage): every kV3Stride-th metadata byte at
// grain 4 KiB, and at grain = AU too, each bit flip refused or harmless.
// The stride keeps the test to seconds (a format 3 image has thousands of
// metadata bytes: pages, and the journal's earlier records); being odd, it
// still flips every bit position, and it reaches every field of a page
// header or record wider than it.
constexpr uint64_t kV3Stride = 7 * kSlower;
class CorruptionV3 : public ::testing::TestWithParam<ImageKind> {};

TEST_P(CorruptionV3, EveryMetadataBitFlipOfACleanPoolIsRefusedOrHarmless) {
  Sweep(BaseImage(GetParam()).image, BaseImage(GetParam()).model, nullptr, {}, kV3Stride);
}

// Format 3, cut while open: a checkpoint, then records after it (a clone,
// unshares and unmaps at the grain), the last operation a one-sync first
// write (a kMapChecked record no later record vouches for). Every byte of
// the live records is flipped (every third under a sanitizer), every 61st
// (kSlower times that) of the other metadata, and 16
// bytes spread over that write's grains: damage to its record or to its data must give the state
// before it (the header's exception), and nowhere else.
TEST_P(CorruptionV3, EveryMetadataBitFlipOfAPowerCutImageIsRefusedOrHarmless) {
  const uint64_t g = GrainOf(GetParam());
  ImageBuilder b(24, 64 * 1024, GetParam());
  b.Create("a", 8 * kImgAu, 512);
  b.Write("a", 0, 2 * kImgAu, 0x11);
  b.CloneLun("a", "c");
  b.Checkpoint();
  b.Write("c", 4096, 4096, 0x33);  // one-sync into shared data
  b.CloneRange("a", 0, "c", 4 * kImgAu, g);
  b.Unmap("a", kImgAu, g);
  b.Create("b", 4 * kImgAu, 512);
  ImageModel previous = b.model();
  std::vector<uint8_t> before = b.Snapshot();
  b.Write("b", kImgAu + 8192, 4096, 0x22);  // one-sync, fresh space: the last commit
  std::vector<uint8_t> img = b.Snapshot();
  ASSERT_TRUE(b.ok());
  SuperblockV3 sb;
  ASSERT_TRUE(NewestSuperblockV3(img, &sb));
  ASSERT_EQ(sb.journal.size(), 1u);  // one extent: the record is contiguous in the file
  const uint64_t journal_lo = sb.data_offset + sb.journal[0].first_au * sb.au;
  const uint64_t journal_hi = journal_lo + sb.journal[0].aus * sb.au;
  // The last commit (nothing else changed: a commit writes no superblock
  // and no page): its record in the journal, and the grains of its data
  // (the grain's zeros too: the record's CRC covers the whole grain).
  const std::vector<uint64_t> changed = Changed(before, img, sb.data_offset);
  const uint64_t live_lo = journal_lo + sb.journal_start;
  std::vector<uint64_t> last = LastRecordBytes(img, live_lo, journal_hi, sb.journal_start_lsn), data;
  ASSERT_FALSE(last.empty());
  for (uint64_t o : changed) {
    if (o < journal_lo || o >= journal_hi) {
      data.push_back(o);
      continue;
    }
    ASSERT_TRUE(std::binary_search(last.begin(), last.end(), o)) << "journal byte " << o;
  }
  ASSERT_EQ(data.size(), 4096u);  // the write's bytes, all non-zero
  // The live records: from the replay start to the end of the last one.
  const uint64_t live_hi = last.back() + 1;
  ASSERT_LT(live_lo, live_hi);
  const uint64_t first = sb.data_offset + (data.front() - sb.data_offset) / g * g;
  const uint64_t end = sb.data_offset + (data.back() - sb.data_offset + g) / g * g;
  for (uint64_t o = first; o < end; o++) last.push_back(o);
  std::sort(last.begin(), last.end());
  // Every byte of the live records, every 61st of the rest (the pages, and
  // the journal's earlier records): an open of this image replays and
  // checkpoints, ten times the cost of a clean one.
  std::vector<uint64_t> live, rest;
  for (uint64_t o : WrittenMetadataBytes(img)) (o >= live_lo && o < live_hi ? live : rest).push_back(o);
  int flips[4] = {};
  Sweep(img, live, kSlower == 1 ? 1 : 3, b.model(), &previous, last, flips);
  Sweep(img, rest, 61 * kSlower, b.model(), &previous, last, flips);
  std::printf("single-bit flips over %zu live journal bytes and %zu other metadata bytes (strides %d, %d): "
              "%d refused, %d exact, %d torn-last-commit, 0 silent\n",
              live.size(), rest.size(), kSlower == 1 ? 1 : 3, 61 * kSlower, flips[0], flips[1], flips[2]);
  // Its data damaged (16 bytes spread over the grains): replay's check drops
  // the record. Without that check the damage would open as the exact
  // metadata with other bytes: silent loss, which Sweep reports.
  std::vector<uint64_t> grains;
  for (uint64_t o = first; o < end; o++) grains.push_back(o);
  int count[4] = {};
  const uint64_t stride = (end - first) / 16 + 1;  // odd: every bit position
  Sweep(img, grains, stride, b.model(), &previous, last, count);
  EXPECT_EQ(count[static_cast<int>(Outcome::kPrevious)], 16);
  std::printf("single-bit flips over %llu bytes of the last write's grains (every %llu): %d torn-last-commit\n",
              static_cast<unsigned long long>(end - first), static_cast<unsigned long long>(stride), count[2]);
}

INSTANTIATE_TEST_SUITE_P(Formats, CorruptionV3,
                         ::testing::Values(ImageKind::kV3Grain4K, ImageKind::kV3GrainAu),
                         [](const auto& i) { return i.param == ImageKind::kV3Grain4K ? "Grain4K" : "GrainAu"; });

// ------------------------------------------------ extents the map cannot hold
// A CRC-valid record or checkpoint (a bug elsewhere, or damage the checksums
// miss) carrying an extent outside ExtentMap's rule (extent_map.h) is refused
// at open with kCorruption naming the bound, before it reaches a map, and the
// open changes nothing.

// The records of `img`'s journal after its checkpoint (none, and a failure
// of the calling test, if the scan fails).
JournalReplay ScanImageJournal(const std::vector<uint8_t>& img, const Superblock& sb) {
  Result<JournalReplay> scanned =
      ScanJournal(img.data() + kJournalOffset, sb.journal_bytes, sb.journal_start_lsn, sb.version);
  if (scanned.ok()) return std::move(scanned).value();
  ADD_FAILURE() << "journal scan: " << scanned.status().ToString();
  return JournalReplay();
}

// Every refusal of `img`, read-only and read-write: its message, and that
// the image is unchanged (OpenImage checks the code and the bytes).
std::string RefusalOf(const std::vector<uint8_t>& img) {
  std::string why;
  Outcome o = OpenImage(img, ImageModel(), nullptr, &why);
  if (o != Outcome::kRefused) return "not refused: " + why;
  FaultInjectionEnv env;
  env.Install("p", img.data(), img.size());
  auto p = Pool::Open(&env, "p", {});
  if (p.ok()) return "opened";
  if (env.Snapshot("p") != img) return "the refused open wrote";
  return p.status().ToString();
}

struct BadRun {
  Run run;
  const char* why;
};
const BadRun kBadRuns[] = {
    {{ExtentMap::kMaxLba - 1, 1, 2}, "logical end beyond 2^48 units"},
    {{uint64_t{1} << 60, 1, 1}, "logical end beyond 2^48 units"},
    {{0, ExtentMap::kMaxPhys, 1}, "physical end beyond 2^32 units"},
    {{0, 1, uint64_t{1} << 33}, "physical end beyond 2^32 units"},
};

// A closed pool whose journal holds a record after the last checkpoint.
std::vector<uint8_t> WithJournal() {
  ImageBuilder b;
  b.Create("a", 512 * 1024, 512);
  b.Write("a", 0, kImgAu, 0x42);
  std::vector<uint8_t> img = b.Close();
  if (!b.ok()) std::abort();
  return img;
}

TEST(Corruption, AJournalRecordWithAnExtentTheMapCannotHoldIsRefused) {
  const std::vector<uint8_t> img = WithJournal();
  const Superblock sb = NewestSuperblock(img);
  const JournalReplay jr = ScanImageJournal(img, sb);
  ASSERT_FALSE(jr.records.empty());
  ASSERT_EQ(jr.records[0].type, RecType::kCreateLun);
  for (const BadRun& bad : kBadRuns) {
    Record r;
    r.type = RecType::kMap;
    r.lun = jr.records[0].lun;
    r.runs = {{1, 20, 1}, bad.run};  // a good run first: nothing of it may stick
    std::string frame;
    FrameRecord(r, jr.next_lsn, jr.next_lsn - 1, &frame);
    std::vector<uint8_t> d = img;
    ASSERT_LE(kJournalOffset + jr.end + frame.size(), kImgData);
    std::memcpy(d.data() + kJournalOffset + jr.end, frame.data(), frame.size());
    std::string got = RefusalOf(d);
    EXPECT_NE(got.find("Corruption: "), std::string::npos) << got;
    EXPECT_NE(got.find(bad.why), std::string::npos) << got;
    EXPECT_NE(got.find("extent at AU " + std::to_string(bad.run.lba)), std::string::npos) << got;
  }
  // The same record with a good extent instead replays (the frame is right).
  Record r;
  r.type = RecType::kMap;
  r.lun = jr.records[0].lun;
  r.runs = {{1, 20, 1}};
  std::string frame;
  FrameRecord(r, jr.next_lsn, jr.next_lsn - 1, &frame);
  std::vector<uint8_t> d = img;
  std::memcpy(d.data() + kJournalOffset + jr.end, frame.data(), frame.size());
  FaultInjectionEnv env;
  env.Install("p", d.data(), d.size());
  auto p = Pool::Open(&env, "p", {.read_only = true});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->GetLun("a")->mapped_bytes, 2u * kImgAu);
}

// `img` (WithJournal's) with `r` framed as the next journal record: CRC-valid,
// so only the LUN rule (meta.h, LunRecordRule) can refuse it.
std::vector<uint8_t> WithRecord(const std::vector<uint8_t>& img, const JournalReplay& jr, const Record& r) {
  std::string frame;
  FrameRecord(r, jr.next_lsn, jr.next_lsn - 1, &frame);
  std::vector<uint8_t> d = img;
  EXPECT_LE(kJournalOffset + jr.end + frame.size(), kImgData);
  std::memcpy(d.data() + kJournalOffset + jr.end, frame.data(), frame.size());
  return d;
}

// A record making or resizing a LUN off the one LUN rule is refused at open
// as corruption, nothing written: otherwise a pool would hold a LUN the v3
// LUN table page refuses, and every v3 checkpoint of it would fail.
TEST(Corruption, AJournalRecordMakingALunOffTheRuleIsRefused) {
  const std::vector<uint8_t> img = WithJournal();
  const Superblock sb = NewestSuperblock(img);
  const JournalReplay jr = ScanImageJournal(img, sb);
  ASSERT_FALSE(jr.records.empty());
  const uint32_t a = jr.records[0].lun;  // LUN "a", 512 KiB of 512-byte blocks
  auto create = [](uint32_t id, std::string name, uint64_t size, uint32_t bs) {
    Record r;
    r.type = RecType::kCreateLun;
    r.lun = id;
    r.name = std::move(name);
    r.a = size;
    r.bs = bs;
    return r;
  };
  auto copy = [&](RecType t, uint32_t id, std::string name) {
    Record r;
    r.type = t;
    r.lun = a;
    r.lun2 = id;
    r.name = std::move(name);
    return r;
  };
  auto resize = [&](uint64_t size) {
    Record r;
    r.type = RecType::kResizeLun;
    r.lun = a;
    r.a = size;
    return r;
  };
  const struct {
    Record r;
    const char* why;
  } kOffTheRule[] = {
      {create(0, "b", 1 << 20, 512), "LUN id 0"},
      {create(UINT32_MAX, "b", 1 << 20, 512), "leaves no next LUN id"},
      {create(9, "b/c", 1 << 20, 512), "contains '/'"},
      {create(9, "-b", 1 << 20, 512), "must not start with '.' or '-'"},
      {create(9, "b", 1 << 20, 1024), "block size 1024"},
      {create(9, "b", 0, 512), "size 0 not a positive multiple"},
      {create(9, "b", 1000, 512), "size 1000 not a positive multiple"},
      {copy(RecType::kCloneLun, 0, "b"), "LUN id 0"},
      {copy(RecType::kCloneLun, 9, "b c"), "contains ' '"},
      {copy(RecType::kSnapshotLun, 0, "b"), "LUN id 0"},
      {copy(RecType::kSnapshotLun, UINT32_MAX, "b"), "leaves no next LUN id"},
      {copy(RecType::kSnapshotLun, 9, ".b"), "must not start with '.' or '-'"},
      {resize(0), "size 0 not a positive multiple"},
      {resize(1000), "size 1000 not a positive multiple"},
  };
  for (const auto& bad : kOffTheRule) {
    SCOPED_TRACE(bad.why);
    std::string got = RefusalOf(WithRecord(img, jr, bad.r));
    EXPECT_NE(got.find("Corruption: journal replay: LUN"), std::string::npos) << got;
    EXPECT_NE(got.find(bad.why), std::string::npos) << got;
  }
  // Records the rule accepts replay (the frames are right), among them what
  // an older build may have written: a name with "..", a LUN of more than
  // 2^48 blocks (formats 1 and 2 do not bound it; a pool of 128 TiB held one).
  for (const Record& good : {create(9, "b", 1 << 20, 512), create(9, "b..c", 1 << 20, 512),
                             create(9, "b", (kMaxLunBlocks + 1) * 512, 512),
                             copy(RecType::kSnapshotLun, 9, "b"), resize(1024)}) {
    SCOPED_TRACE(good.name);
    std::vector<uint8_t> d = WithRecord(img, jr, good);
    FaultInjectionEnv env;
    env.Install("p", d.data(), d.size());
    auto p = Pool::Open(&env, "p", {.read_only = true});
    EXPECT_TRUE(p.ok()) << p.status().ToString();
  }
}

// A pool whose LUN ids run out (a journal record made LUN 2^32-3, so
// next_lun_id is near the top) makes one more LUN, then refuses create,
// clone and snapshot with kNoSpace, nothing changed, and still opens.
TEST(Corruption, APoolWhoseLunIdsRunOutRefusesNewLunsWithNoSpace) {
  const std::vector<uint8_t> img = WithJournal();
  const Superblock sb = NewestSuperblock(img);
  const JournalReplay jr = ScanImageJournal(img, sb);
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = UINT32_MAX - 2;
  r.name = "b";
  r.a = 1 << 20;
  r.bs = 512;
  std::vector<uint8_t> d = WithRecord(img, jr, r);
  FaultInjectionEnv env;
  env.Install("p", d.data(), d.size());
  auto expect_no_ids_left = [](Pool* p) {
    for (Status s : {p->CreateLun("d", 1 << 20, 512).status(), p->CloneLun("a", "d").status(),
                     p->SnapshotLun("a", "d").status()}) {
      EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
      EXPECT_NE(s.message().find("no LUN ids left"), std::string::npos) << s.ToString();
    }
    EXPECT_EQ(p->ListLuns().size(), 3u);
  };
  {
    auto p = Pool::Open(&env, "p", {});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->CreateLun("c", 1 << 20, 512).ok());  // id 2^32-2, the last
    expect_no_ids_left(p->get());
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto p = Pool::Open(&env, "p", {});  // its checkpoint holds next_lun_id 2^32-1
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  expect_no_ids_left(p->get());
  ASSERT_TRUE((*p)->DeleteLun("c").ok());  // deleting frees no id: ids are never reused
  EXPECT_EQ((*p)->CreateLun("d", 1 << 20, 512).status().code(), Code::kNoSpace);
}

TEST(Corruption, ACheckpointWithAnExtentTheMapCannotHoldIsRefused) {
  // Reopened and closed: the checkpoint now holds LUN a's extent.
  std::vector<uint8_t> img;
  {
    FaultInjectionEnv env;
    std::vector<uint8_t> j = WithJournal();
    env.Install("p", j.data(), j.size());
    auto p = Pool::Open(&env, "p", {});
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Close().ok());
    p.value().reset();
    img = env.Snapshot("p");
  }
  const Superblock sb = NewestSuperblock(img);
  ASSERT_NE(sb.ckpt_first, kNone);
  const uint64_t at = sb.data_offset + sb.ckpt_first * sb.au;
  ChunkHeader h;
  ASSERT_TRUE(DecodeChunk(img.data() + at, sb.au, &h));
  ASSERT_EQ(h.len, sb.ckpt_bytes);  // one chunk
  std::string payload(reinterpret_cast<const char*>(img.data() + at + kChunkHeader), h.len);
  MetaState st;
  ASSERT_TRUE(DecodeState(payload, &st, sb.version).ok());
  ASSERT_EQ(st.luns().size(), 1u);
  const auto& [lba, e] = *st.luns().begin()->second->map.runs().begin();
  // The extent's bytes in the payload: lba | phys | len, little-endian.
  std::string triple;
  Encoder enc(&triple);
  enc.U64(lba);
  enc.U64(e.phys);
  enc.U64(e.len);
  const size_t pos = payload.find(triple);
  ASSERT_NE(pos, std::string::npos);
  for (const BadRun& bad : kBadRuns) {
    std::string changed = payload, t;
    Encoder be(&t);
    be.U64(bad.run.lba);
    be.U64(bad.run.phys);
    be.U64(bad.run.len);
    changed.replace(pos, 24, t);
    // CRC-valid everywhere: the chunk, and the superblocks naming it.
    std::vector<uint8_t> d = img;
    std::string chunk;
    EncodeChunk(h, changed.data(), &chunk);
    std::memcpy(d.data() + at, chunk.data(), chunk.size());
    Superblock nsb = sb;
    nsb.ckpt_crc = Crc32c(0, changed.data(), changed.size());
    std::string sbi = nsb.Encode();
    for (int slot = 0; slot < 2; slot++) std::memcpy(d.data() + slot * kSuperblockSlot, sbi.data(), sbi.size());
    std::string got = RefusalOf(d);
    EXPECT_NE(got.find("Corruption: "), std::string::npos) << got;
    EXPECT_NE(got.find("checkpoint: LUN a extent at AU " + std::to_string(bad.run.lba)),
              std::string::npos) << got;
    EXPECT_NE(got.find(bad.why), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace cowstore::store::testing
