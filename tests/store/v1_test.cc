// SPDX-License-Identifier: Apache-2.0
// Format version 1 pools (made before journal records carried `proven`) open,
// keep every byte, and become version 2 at their first checkpoint, so that a
// power cut anywhere in the upgrade leaves a valid version-1 or version-2 pool
// holding everything. The image is tests/store/data/v1_pool.img, made by the
// store of main 39ba3da (tests/store/data/make_v1_pool.cc says how).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/replay.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// make_v1_pool.cc's contents.
std::vector<uint8_t> Fill(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(i * 7 + seed + i / 4096);
  return v;
}

std::vector<uint8_t> ImageBytes() {
  std::ifstream in(COWSTORE_V1_IMAGE, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void Install(FaultInjectionEnv* env, const std::vector<uint8_t>& img) {
  auto f = env->OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write(0, img.size(), img.data()).ok());
  ASSERT_TRUE((*f)->Sync().ok());
}

// The version of the superblock Open would use (the valid copy with the
// higher sequence), or 0 if neither is valid.
uint32_t Version(FaultInjectionEnv* env) {
  std::vector<uint8_t> img = env->Snapshot("p");
  Superblock best;
  bool have = false;
  for (int slot = 0; slot < 2; slot++) {
    Superblock sb;
    if (!Superblock::Decode(img.data() + slot * kSuperblockSlot, kSuperblockSlot, &sb).ok()) continue;
    if (!have || sb.seq > best.seq) best = sb;
    have = true;
  }
  return have ? best.version : 0;
}

// The superblock Open would use.
Superblock Newest(const std::vector<uint8_t>& img) {
  Superblock best;
  for (int slot = 0; slot < 2; slot++) {
    Superblock sb;
    if (!Superblock::Decode(img.data() + slot * kSuperblockSlot, kSuperblockSlot, &sb).ok()) continue;
    if (sb.seq > best.seq) best = sb;
  }
  return best;
}

// Everything the version-1 pool holds, exactly.
void ExpectV1Contents(Pool& p) {
  auto luns = p.ListLuns();
  ASSERT_GE(luns.size(), 2u);
  auto a = p.OpenLun("a"), b = p.OpenLun("b");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<uint8_t> got(kMiB);
  ASSERT_TRUE((*a)->Read(0, kMiB / 512, got.data()).ok());
  std::vector<uint8_t> want_a = Fill(kMiB, 1);
  EXPECT_TRUE(got == want_a) << "LUN a differs";
  ASSERT_TRUE((*b)->Read(0, kMiB / 512, got.data()).ok());
  std::vector<uint8_t> want_b(kMiB, 0), own = Fill(kMiB / 2, 2);
  std::copy(own.begin(), own.end(), want_b.begin());
  std::copy(want_a.begin(), want_a.begin() + kMiB / 4, want_b.begin() + kMiB / 2);
  got.resize(kMiB * 3 / 4);  // the rest is checked by the callers that write it
  want_b.resize(kMiB * 3 / 4);
  ASSERT_TRUE((*b)->Read(0, got.size() / 512, got.data()).ok());
  EXPECT_TRUE(got == want_b) << "LUN b differs";
}

TEST(FormatV1, TheImageIsVersion1WithAJournal) {
  std::vector<uint8_t> img = ImageBytes();
  ASSERT_GT(img.size(), 1 * kMiB) << COWSTORE_V1_IMAGE;
  FaultInjectionEnv env;
  Install(&env, img);
  EXPECT_EQ(Version(&env), 1u);
  // Its journal holds records (LUN b's creation, write, clone) in the version
  // 1 framing: the first one parses as version 1 and not as version 2.
  Record r;
  uint64_t lsn = 0;
  EXPECT_GT(ParseRecordV1(img.data() + kJournalOffset, 64 * 1024, kNone, &r, &lsn), 0u);
  EXPECT_EQ(r.type, RecType::kCreateLun);
  EXPECT_EQ(ParseRecord(img.data() + kJournalOffset, 64 * 1024, kNone, &r), 0u);
}

TEST(FormatV1, ReadOnlyOpenReadsItAsItIsAndWritesNothing) {
  FaultInjectionEnv env;
  Install(&env, ImageBytes());
  std::vector<uint8_t> before = env.Snapshot("p");
  {
    auto p = Pool::Open(&env, "p", OpenOptions{.read_only = true});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ExpectV1Contents(**p);
  }
  EXPECT_TRUE(env.Snapshot("p") == before);
  auto rep = Pool::CheckOffline(&env, "p");
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->clean) << rep->problems[0];
  EXPECT_EQ(Version(&env), 1u);
}

TEST(FormatV1, WritableOpenUpgradesToVersion2AndKeepsEverything) {
  FaultInjectionEnv env;
  Install(&env, ImageBytes());
  std::vector<uint8_t> c = Fill(256 * 1024, 3);
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(Version(&env), 2u);
    ExpectV1Contents(**p);
    auto b = (*p)->OpenLun("b");
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE((*b)->Write(1536, 512, c.data(), Durability::kDurable).ok());
    ASSERT_TRUE((*p)->CreateLun("new", kMiB, 512).ok());
  }
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(Version(&env), 2u);
  ExpectV1Contents(**p);
  EXPECT_TRUE((*p)->GetLun("new").ok());
  std::vector<uint8_t> got(c.size());
  auto b = (*p)->OpenLun("b");
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Read(1536, 512, got.data()).ok());
  EXPECT_TRUE(got == c);
  CheckReport rep = (*p)->Check();
  EXPECT_TRUE(rep.clean) << rep.problems[0];
}

// Pool::Upgrade takes a version 1 pool to format 3 in one run (its open
// makes it version 2 first), keeping everything, and says where it began.
TEST(FormatV1, PoolUpgradeTakesItToFormat3KeepingEverything) {
  FaultInjectionEnv env;
  Install(&env, ImageBytes());
  auto r = Pool::Upgrade(&env, "p");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->from_format, 1u);
  EXPECT_FALSE(r->already);
  EXPECT_EQ(r->grain, 4096u);
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->grain(), 4096u);
  ExpectV1Contents(**p);
  CheckReport rep = (*p)->Check();
  EXPECT_TRUE(rep.clean) << rep.problems[0];
}

TEST(FormatV1, PowerCutAtEveryWriteOfTheUpgradeLeavesVersion1OrVersion2WithEverything) {
  const std::vector<uint8_t> img = ImageBytes();
  uint64_t calls;
  {
    FaultInjectionEnv env;
    Install(&env, img);
    uint64_t before = env.mutating_calls();
    { ASSERT_TRUE(Pool::Open(&env, "p").ok()); }
    calls = env.mutating_calls() - before;
  }
  ASSERT_GT(calls, 3u);
  int v1 = 0, v2 = 0;
  const FaultInjectionEnv::Loss losses[] = {FaultInjectionEnv::Loss::kDropAll,
                                            FaultInjectionEnv::Loss::kKeepAll,
                                            FaultInjectionEnv::Loss::kTear};
  for (uint64_t k = 0; k <= calls; k++) {
    for (auto loss : losses) {
      SCOPED_TRACE("power cut after " + std::to_string(k) + " of " + std::to_string(calls) +
                   " writes, loss mode " + std::to_string(static_cast<int>(loss)));
      FaultInjectionEnv env;
      Install(&env, img);
      env.CrashAfter(static_cast<int64_t>(k));
      { auto p = Pool::Open(&env, "p"); }  // dies at the k-th write (or finishes)
      env.PowerLoss(loss, k * 7 + 1);
      env.ClearFaults();
      uint32_t v = Version(&env);
      ASSERT_TRUE(v == 1 || v == 2) << v;
      (v == 1 ? v1 : v2)++;
      {
        auto p = Pool::Open(&env, "p", OpenOptions{.read_only = true});
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        ExpectV1Contents(**p);
      }
      // And the interrupted upgrade completes on the next writable open.
      auto p = Pool::Open(&env, "p");
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(Version(&env), 2u);
      ExpectV1Contents(**p);
      CheckReport rep = (*p)->Check();
      ASSERT_TRUE(rep.clean) << rep.problems[0];
    }
  }
  std::printf("%llu cut points x 3 loss modes: %d ended version 1, %d version 2\n",
              static_cast<unsigned long long>(calls + 1), v1, v2);
  // Both outcomes happened: the cut points straddle the superblock write.
  EXPECT_GT(v1, 0);
  EXPECT_GT(v2, 0);
}

TEST(FormatV2, AnUnknownLunAttributeIsRefusedNotIgnored) {
  // Version 2's LUN entries end in an attribute list (meta.h); a tag this
  // build does not know must stop the open, never be dropped.
  MetaState st;
  st.au = 64 * 1024;
  std::string enc;
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = 1;
  r.name = "attrtest";
  r.a = kMiB;
  r.bs = 512;
  ASSERT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
  EncodeState(st, &enc);
  MetaState back;
  ASSERT_TRUE(DecodeState(enc, &back).ok());
  ASSERT_NE(back.FindName("attrtest"), nullptr);
  // Splice one attribute (tag 7, 1 byte) into the entry: its length field
  // sits right after the name.
  size_t at = enc.find("attrtest") + 8;
  std::string attr = std::string("\x09\0\0\0", 4) + std::string("\x07\0\0\0\x01\0\0\0\x2a", 9);
  enc.replace(at, 4, attr);
  MetaState bad;
  EXPECT_EQ(DecodeState(enc, &bad).code(), Code::kUnsupported);
  // Version 1 has no such field: the same entry without it decodes as v1.
  std::string v1;
  EncodeState(st, &v1);
  v1.erase(v1.find("attrtest") + 8, 4);
  MetaState old;
  EXPECT_TRUE(DecodeState(v1, &old, 1).ok());
  EXPECT_EQ(DecodeState(v1, &old, 2).code(), Code::kCorruption);
}

TEST(FormatV2, SnapshotAttributesSurviveACheckpointAndReopen) {
  // A version 1 pool upgrades, gets a read-only snapshot, and checkpoints:
  // the snapshot's attributes then live only in its checkpoint entry's
  // attribute list (the journal no longer holds the snapshot record), and
  // come back from it on every later open.
  FaultInjectionEnv env;
  Install(&env, ImageBytes());
  LunInfo made;
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto s = (*p)->SnapshotLun("a", "a-snap");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    made = *s;
    ASSERT_TRUE((*p)->Close().ok());
  }
  EXPECT_TRUE(made.read_only);
  EXPECT_GT(made.created_unix, 0u);
  for (int round = 0; round < 3; round++) {
    // Round 0 replays the snapshot record and writes the checkpoint; 1 and 2
    // (one of them read-only) read the checkpoint.
    bool ro = round == 2;
    auto p = Pool::Open(&env, "p", OpenOptions{.read_only = ro});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(Version(&env), 2u);
    if (round > 0) {
      std::vector<uint8_t> img = env.Snapshot("p");
      Superblock sb = Newest(img);
      ASSERT_NE(sb.ckpt_first, kNone);
      Result<JournalReplay> jr = ScanJournal(img.data() + kJournalOffset, sb.journal_bytes,
                                             sb.journal_start_lsn);
      ASSERT_TRUE(jr.ok()) << jr.status().ToString();
      for (const Record& r : jr->records) EXPECT_NE(r.type, RecType::kSnapshotLun) << round;
      // The checkpoint holds the list: read-only, then the origin's UUID.
      std::vector<uint8_t> list(32, 0);
      list[0] = 1;   // tag read-only, length 0
      list[8] = 2;   // tag origin,
      list[12] = 16;  // length 16
      for (size_t i = 0; i < 16; i++) list[16 + i] = made.origin[i];
      auto at = std::search(img.begin() + sb.data_offset, img.end(), list.begin(), list.end());
      EXPECT_NE(at, img.end()) << "no attribute list in the checkpoint";
    }
    auto g = (*p)->GetLun("a-snap");
    ASSERT_TRUE(g.ok());
    EXPECT_TRUE(g->read_only);
    EXPECT_EQ(g->origin, (*p)->GetLun("a")->id);
    EXPECT_EQ(g->created_unix, made.created_unix);
    for (const char* plain : {"a", "b"}) {
      auto l = (*p)->GetLun(plain);
      EXPECT_FALSE(l->read_only);
      EXPECT_EQ(l->origin, Uuid{});
      EXPECT_EQ(l->created_unix, 0u);
    }
    ExpectV1Contents(**p);
    auto h = (*p)->OpenLun("a-snap");
    ASSERT_TRUE(h.ok());
    std::vector<uint8_t> got(kMiB);
    ASSERT_TRUE((*h)->Read(0, kMiB / 512, got.data()).ok());
    EXPECT_TRUE(got == Fill(kMiB, 1));
    std::vector<uint8_t> x(512, 0x5a);
    Status w = (*h)->Write(0, 1, x.data(), Durability::kDurable);
    if (ro) {
      EXPECT_FALSE(w.ok());  // the pool refuses before the LUN is asked
    } else {
      EXPECT_EQ(w.code(), Code::kReadOnly);
    }
    h->reset();
    if (!ro) {
      ASSERT_TRUE((*p)->Close().ok());
    }
  }
}

}  // namespace
}  // namespace cowstore::store
