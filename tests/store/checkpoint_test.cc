// SPDX-License-Identifier: Apache-2.0
// Unit tests of the checkpoint chain (checkpoint.h) and its chunk format
// (meta.h): round trips of every size class, and each way a chain can be
// damaged or stale, which must be refused, never half-read; and FormatV2's
// chain as MetaFormat::meta_units() reports it.
#include "handler/store/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/crc32c.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v2.h"
#include "handler/store/journal_source.h"
#include "tests/store/counting_file.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 * 1024;
constexpr uint64_t kDataOffset = 128 * 1024;
constexpr uint64_t kUnits = 32;
constexpr size_t kPer = kAu - kChunkHeader;  // payload bytes per chunk

std::string Payload(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>(i * 131 + (i >> 11));
  return s;
}

TEST(CheckpointChunk, RoundTripsAndRefusesAnyFlippedByte) {
  ChunkHeader h;
  h.seq = 9;
  h.index = 2;
  h.next = 17;
  h.uuid[0] = 0xab;
  std::string payload = Payload(300);
  h.len = static_cast<uint32_t>(payload.size());
  std::string c;
  EncodeChunk(h, payload.data(), &c);
  ASSERT_EQ(c.size(), kChunkHeader + payload.size());
  ChunkHeader back;
  ASSERT_TRUE(DecodeChunk(c.data(), c.size(), &back));
  EXPECT_EQ(back.seq, 9u);
  EXPECT_EQ(back.index, 2u);
  EXPECT_EQ(back.len, 300u);
  EXPECT_EQ(back.next, 17u);
  EXPECT_EQ(back.uuid, h.uuid);
  EXPECT_EQ(c.substr(kChunkHeader), payload);
  for (size_t i = 0; i < c.size(); i++) {
    std::string bad = c;
    bad[i] ^= 0x01;
    EXPECT_FALSE(DecodeChunk(bad.data(), bad.size(), &back)) << "byte " << i;
  }
  // A length beyond the buffer is refused, not read past.
  EXPECT_FALSE(DecodeChunk(c.data(), c.size() - 1, &back));
  EXPECT_FALSE(DecodeChunk(c.data(), kChunkHeader - 1, &back));
}

class CheckpointChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = env_.OpenLocked("pool", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    file_ = std::move(f.value());
    ASSERT_TRUE(file_->Truncate(kDataOffset + kUnits * kAu).ok());
    sb_.uuid[3] = 0x5a;
    sb_.au = kAu;
    sb_.data_offset = kDataOffset;
    sb_.seq = 4;
  }
  // Writes `payload` into `aus` and points sb_ at it.
  void Write(const std::string& payload, const std::vector<uint64_t>& aus) {
    ASSERT_EQ(aus.size(), CheckpointUnits(payload.size(), kAu));
    ASSERT_TRUE(
        WriteCheckpointChain(file_.get(), kDataOffset, kAu, aus, payload, sb_.seq, sb_.uuid).ok());
    sb_.ckpt_first = aus[0];
    sb_.ckpt_seq = sb_.seq;
    sb_.ckpt_bytes = payload.size();
    sb_.ckpt_crc = Crc32c(0, payload.data(), payload.size());
  }
  Status Read(std::string* payload, std::vector<uint64_t>* aus) {
    return ReadCheckpointChain(file_.get(), sb_, kUnits, payload, aus);
  }
  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  Superblock sb_;
};

TEST_F(CheckpointChainTest, RoundTripsEverySizeClass) {
  // Empty, small, exactly one chunk, one byte over, several chunks.
  for (size_t n : {size_t{0}, size_t{100}, kPer, kPer + 1, 3 * kPer + 17}) {
    std::string payload = Payload(n);
    std::vector<uint64_t> aus;
    for (uint64_t i = 0; i < CheckpointUnits(n, kAu); i++) aus.push_back(20 - 3 * i);  // any order
    Write(payload, aus);
    std::string got;
    std::vector<uint64_t> got_aus;
    ASSERT_TRUE(Read(&got, &got_aus).ok()) << n;
    EXPECT_EQ(got, payload) << n;
    EXPECT_EQ(got_aus, aus) << n;
  }
  EXPECT_EQ(CheckpointUnits(0, kAu), 1u);
  EXPECT_EQ(CheckpointUnits(kPer, kAu), 1u);
  EXPECT_EQ(CheckpointUnits(kPer + 1, kAu), 2u);
}

TEST_F(CheckpointChainTest, DamagedChunkIsRefused) {
  Write(Payload(2 * kPer + 5), {3, 7, 5});
  env_.Corrupt("pool", kDataOffset + 7 * kAu + kChunkHeader + 10, 1);  // payload of chunk 1
  std::string got;
  std::vector<uint64_t> aus;
  Status s = Read(&got, &aus);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_NE(s.message().find("chunk 1 at AU 7"), std::string::npos) << s.ToString();
}

TEST_F(CheckpointChainTest, StaleChainIsRefused) {
  Write(Payload(2 * kPer), {3, 4});
  // A chunk of another checkpoint (older seq) where the chain leads.
  Superblock newer = sb_;
  newer.seq = sb_.seq + 1;
  std::string p2 = Payload(2 * kPer);
  p2[0] ^= 1;
  ASSERT_TRUE(WriteCheckpointChain(file_.get(), kDataOffset, kAu, {9, 4}, p2, newer.seq,
                                   newer.uuid)
                  .ok());  // overwrote AU 4 with chunk 1 of seq 5
  std::string got;
  std::vector<uint64_t> aus;
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);

  // Another pool's chunk (same seq, other uuid).
  Write(Payload(100), {6});
  Superblock other = sb_;
  other.uuid[0] ^= 0xff;
  ASSERT_TRUE(WriteCheckpointChain(file_.get(), kDataOffset, kAu, {6}, Payload(100), other.seq,
                                   other.uuid)
                  .ok());
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);
}

TEST_F(CheckpointChainTest, ChainLeavingThePoolIsRefused) {
  Write(Payload(100), {2});
  sb_.ckpt_first = kUnits;  // one past the last AU
  std::string got;
  std::vector<uint64_t> aus;
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);
  // A chain whose next pointer leaves the pool: the superblock claims more
  // bytes than the single chunk (whose next is kNone) holds.
  sb_.ckpt_first = 2;
  sb_.ckpt_bytes = kPer + 1;
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);
}

TEST_F(CheckpointChainTest, PayloadThatDisagreesWithTheSuperblockIsRefused) {
  Write(Payload(1000), {2});
  sb_.ckpt_crc ^= 1;
  std::string got;
  std::vector<uint64_t> aus;
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);
  sb_.ckpt_crc ^= 1;
  sb_.ckpt_bytes = 999;  // shorter than the chunk holds
  EXPECT_EQ(Read(&got, &aus).code(), Code::kCorruption);
}

// ------------------------------------------------ FormatV2's chain

// A FormatV2 pool on `file`, chosen and loaded as an open does.
std::unique_ptr<MetaFormat> LoadV2(File* file, MetaState* st, LoadedMeta* loaded) {
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(file, &slots);
  EXPECT_TRUE(chosen.ok()) << chosen.status().ToString();
  if (!chosen.ok()) return nullptr;
  std::unique_ptr<MetaFormat> f = std::move(chosen).value();
  PoolGeometry g;
  EXPECT_TRUE(f->ChooseSuperblock(slots, &g).ok());
  st->au = g.grain;
  Status s = f->LoadState(file, st, loaded);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return f;
}

// A state whose encoding takes several AUs: one LUN of many one-AU runs,
// none contiguous with the next.
MetaState BigState(uint32_t au, uint64_t runs) {
  MetaState st;
  st.au = au;
  auto l = std::make_shared<LunState>();
  l->id = 1;
  l->name = "big";
  for (uint64_t i = 0; i < runs; i++)
    if (!l->map.Insert(i, 2 * i, 1).ok()) std::abort();
  l->size = runs * au;
  st.AddLun(l);
  st.next_lun_id = 2;
  return st;
}

// meta_units() is the chain in chain order (what an open's Rebuild and the
// check compare): after a checkpoint, after a reopen, and after a failed
// checkpoint (the previous chain). A units count other than Freeze asked
// for is refused with nothing written.
TEST(FormatV2Chain, MetaUnitsKeepTheChainOrderAndAWrongCountIsRefused) {
  FaultInjectionEnv env;
  auto opened = env.OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<File> file = std::move(opened.value());
  const Uuid uuid{7};
  ASSERT_TRUE(FormatV2::Create(file.get(), uuid, kAu, DataOffsetV2(kAu, kAu) + 64 * uint64_t{kAu}, kAu, 0).ok());
  MetaState st;
  LoadedMeta loaded;
  std::unique_ptr<MetaFormat> f = LoadV2(file.get(), &st, &loaded);
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->meta_units().empty());  // a new pool has no checkpoint yet

  const FrozenCheckpoint frozen = f->Freeze(BigState(kAu, 10000), DirtyRanges());
  ASSERT_GE(frozen.meta_units, 3u);
  ASSERT_LE(frozen.meta_units, 13u);  // the AUs below stay in the pool
  // Not sorted: the chain's order is the order given.
  std::vector<uint64_t> units;
  for (uint64_t i = 0; i < frozen.meta_units; i++) units.push_back(40 - 3 * i);
  std::swap(units[0], units[1]);
  const uint64_t start_lsn = loaded.end.next_lsn + kLsnGapAfterOpen;

  const std::vector<uint8_t> before = env.Snapshot("p");
  for (uint64_t n : {frozen.meta_units - 1, frozen.meta_units + 1}) {
    std::vector<uint64_t> wrong(units.begin(), units.begin() + static_cast<long>(std::min(n, frozen.meta_units)));
    if (n > frozen.meta_units) wrong.push_back(50);
    EXPECT_EQ(f->WriteCheckpoint(file.get(), frozen, wrong, start_lsn).code(), Code::kInvalidArgument) << n;
    EXPECT_TRUE(env.Snapshot("p") == before) << "a refused checkpoint wrote";
    EXPECT_TRUE(f->meta_units().empty());
  }
  // A checkpoint of no AUs (not one Freeze makes) has no chain to start.
  EXPECT_EQ(f->WriteCheckpoint(file.get(), FrozenCheckpoint(), {}, start_lsn).code(), Code::kInvalidArgument);
  EXPECT_TRUE(env.Snapshot("p") == before) << "a refused checkpoint wrote";

  ASSERT_TRUE(f->WriteCheckpoint(file.get(), frozen, units, start_lsn).ok());
  EXPECT_EQ(f->meta_units(), units);

  // A failed checkpoint leaves the chain it had.
  const FrozenCheckpoint again = f->Freeze(BigState(kAu, 10000), DirtyRanges());
  std::vector<uint64_t> other;
  for (uint64_t i = 0; i < again.meta_units; i++) other.push_back(2 + i);
  env.FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(f->WriteCheckpoint(file.get(), again, other, start_lsn + 10).ok());
  env.ClearFaults();
  EXPECT_EQ(f->meta_units(), units);

  // Reopened: the chain as written (the failed attempt never reached a
  // superblock: its sync before the superblock failed).
  MetaState st2;
  LoadedMeta loaded2;
  std::unique_ptr<MetaFormat> f2 = LoadV2(file.get(), &st2, &loaded2);
  ASSERT_TRUE(f2);
  EXPECT_EQ(loaded2.meta_units, units);
  EXPECT_EQ(f2->meta_units(), units);
  ASSERT_NE(st2.Find(1), nullptr);
  EXPECT_EQ(st2.Find(1)->map.extents(), 10000u);
}

// A format 2 open replays its journal through replay's window
// (kJournalWindowBytes), not a buffer of the whole region: the region may
// be 1 GiB, and the open runs inside tcmu-runner. 6 MiB of records in a
// 16 MiB journal (LUNs created and deleted, then one kept and mapped): no
// read is larger than the window, each byte is read about once, and every
// record is applied, those that straddle a window's end included.
TEST(FormatV2Replay, ReadsItsJournalThroughTheWindowNotWhole) {
  constexpr uint64_t kJournal = 16 << 20, kRecords = 6 << 20;
  FaultInjectionEnv env;
  auto opened = env.OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(opened.ok());
  std::unique_ptr<File> file = std::move(opened.value());
  ASSERT_TRUE(FormatV2::Create(file.get(), Uuid{9}, kAu, DataOffsetV2(kAu, kJournal) + 64 * uint64_t{kAu},
                               kJournal, 0).ok());
  Superblock sb;
  std::vector<uint8_t> slot(kSuperblockSlot);
  ASSERT_TRUE(file->Read(0, slot.size(), slot.data()).ok());
  ASSERT_TRUE(Superblock::Decode(slot.data(), slot.size(), &sb).ok());

  std::string j;
  uint64_t lsn = sb.journal_start_lsn;
  uint32_t id = 1;
  auto lun = [](uint32_t id, const std::string& name) {
    Record r;
    r.type = RecType::kCreateLun;
    r.lun = id;
    r.name = name;
    r.a = 64 * uint64_t{kAu};
    r.bs = 512;
    return r;
  };
  for (; j.size() < kRecords; id++) {
    FrameRecord(lun(id, "lun-" + std::to_string(id) + std::string(48, 'x')), lsn++, &j);
    Record del;
    del.type = RecType::kDeleteLun;
    del.lun = id;
    FrameRecord(del, lsn++, &j);
  }
  FrameRecord(lun(id, "kept"), lsn++, &j);
  Record map;
  map.type = RecType::kMap;
  map.lun = id;
  map.runs.push_back({3, 40, 2});
  FrameRecord(map, lsn++, &j);
  ASSERT_TRUE(file->Write(kJournalOffset, j.size(), j.data()).ok());

  CountingFile counted(file.get());
  MetaState st;
  LoadedMeta loaded;
  ASSERT_TRUE(LoadV2(&counted, &st, &loaded));
  EXPECT_LE(counted.largest_read(), kJournalWindowBytes);
  // Replay reads on past the last record (a newer superblock's records
  // there are damage to report), but each byte about once.
  EXPECT_LT(counted.bytes_read(), kJournal + 2 * kJournalWindowBytes);
  EXPECT_EQ(loaded.end.tail, j.size());
  ASSERT_EQ(st.luns().size(), 1u);
  const LunState* kept = st.FindName("kept");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->map.Find(4), 41u);
  EXPECT_EQ(st.next_lun_id, id + 1);
}

}  // namespace
}  // namespace cowstore::store
