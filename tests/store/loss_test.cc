// SPDX-License-Identifier: Apache-2.0
// No silent loss: damaged or impossible metadata is refused (kCorruption,
// nothing written) or opens to exactly the state that was committed. One test
// per way the store used to lose committed data without a word (issue 16).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/journal.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"
#include "tests/store/corrupt_image.h"
#include "tests/store/pattern.h"

namespace cowstore::store {
namespace {

using D = Durability;
constexpr uint64_t kMiB = 1ull << 20;

using testing::Pattern;

// A new env holding `img` as file "p" (durable), as if copied elsewhere.
void Install(FaultInjectionEnv* env, const std::vector<uint8_t>& img) {
  auto f = env->OpenLocked("p", Env::Mode::kCreate);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write(0, img.size(), img.data()).ok());
  ASSERT_TRUE((*f)->Sync().ok());
}

std::vector<uint8_t> ReadLun(Pool& p, const std::string& name) {
  auto l = p.OpenLun(name);
  EXPECT_TRUE(l.ok()) << name;
  if (!l.ok()) return {};
  std::vector<uint8_t> v((*l)->block_count() * (*l)->block_size());
  EXPECT_TRUE((*l)->Read(0, (*l)->block_count(), v.data()).ok());
  return v;
}

// The reproduction: pool 64 MiB, journal 256 KiB; LUN a written
// durably, LUN b written durably; the file copied while open (a power-cut
// image).
std::vector<uint8_t> TwoLunPowerCutImage() {
  FaultInjectionEnv env;
  PoolOptions o;
  o.size_bytes = 64 * kMiB;
  o.journal_bytes = 256 * 1024;
  auto p = Pool::Create(&env, "p", o);
  EXPECT_TRUE(p.ok());
  auto data = Pattern(kMiB, 1);
  for (const char* name : {"a", "b"}) {
    EXPECT_TRUE((*p)->CreateLun(name, 4 * kMiB, 512).ok());
    auto l = (*p)->OpenLun(name).value();
    EXPECT_TRUE(l->Write(0, kMiB / 512, data.data(), D::kDurable).ok());
  }
  return env.Snapshot("p");  // still open: nothing after the last commit
}

// The documented recovery of a damaged journal, checked alike at every
// format: the dry run lists the damaged record first and writes nothing,
// the repair drops what it listed, and the pool then opens. Returns the
// reopened pool (null on a failure already reported); *loss: the list.
std::unique_ptr<Pool> RepairAndReopen(FaultInjectionEnv* env, const std::vector<uint8_t>& img, JournalLoss* loss) {
  auto dry = Pool::RepairJournal(env, "p", false);
  EXPECT_TRUE(dry.ok()) << dry.status().ToString();
  if (!dry.ok()) return nullptr;
  *loss = *dry;
  EXPECT_TRUE(dry->damaged);
  EXPECT_FALSE(dry->dropped.empty());
  if (!dry->dropped.empty()) {
    EXPECT_NE(dry->dropped[0].find("damaged"), std::string::npos) << dry->dropped[0];
  }
  EXPECT_EQ(env->Snapshot("p"), img) << "a dry run writes nothing";
  auto done = Pool::RepairJournal(env, "p", true);
  EXPECT_TRUE(done.ok()) << done.status().ToString();
  if (!done.ok()) return nullptr;
  EXPECT_EQ(done->dropped, dry->dropped);
  auto q = Pool::Open(env, "p");
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  if (!q.ok()) return nullptr;
  return std::move(q.value());
}

TEST(NoSilentLoss, FlippedJournalBitBeforeCommittedRecordsIsRefused) {
  std::vector<uint8_t> img = TwoLunPowerCutImage();
  img[65539] ^= 1 << 5;  // the CRC of the first journal record (LUN a's creation)
  FaultInjectionEnv env;
  Install(&env, img);

  auto p = Pool::Open(&env, "p");
  ASSERT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
  EXPECT_NE(p.status().message().find("journal"), std::string::npos) << p.status().ToString();
  EXPECT_EQ(env.Snapshot("p"), img) << "a refused open must write nothing";
  EXPECT_EQ(Pool::Open(&env, "p", {.read_only = true}).status().code(), Code::kCorruption);

  auto rep = Pool::CheckOffline(&env, "p");
  ASSERT_TRUE(rep.ok());
  EXPECT_FALSE(rep->clean);
  ASSERT_FALSE(rep->problems.empty());
  EXPECT_NE(rep->problems[0].find("journal"), std::string::npos) << rep->problems[0];

  // The documented recovery: it says exactly what it drops, then the pool
  // opens with the prefix before the damage (empty).
  JournalLoss dry;
  std::unique_ptr<Pool> q = RepairAndReopen(&env, img, &dry);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(dry.offset, 0u);
  ASSERT_EQ(dry.dropped.size(), 4u);  // the damaged record and the three after it
  EXPECT_NE(dry.dropped[2].find("'b'"), std::string::npos) << dry.dropped[2];
  EXPECT_TRUE(q->ListLuns().empty());
  EXPECT_TRUE(q->Check().clean);
  q.reset();
  auto again = Pool::RepairJournal(&env, "p", false);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->damaged);
}

TEST(NoSilentLoss, AcceptJournalLossOpensThePrefix) {
  std::vector<uint8_t> img = TwoLunPowerCutImage();
  // Damage LUN b's creation record (the third): LUN a with its data survives.
  uint64_t off = kJournalOffset;
  Record r;
  for (int i = 0; i < 2; i++) {
    size_t n = ParseRecord(img.data() + off, 256 * 1024, kNone, &r);
    ASSERT_GT(n, 0u);
    off += n;
  }
  img[off + kRecordHeader] ^= 0x10;
  FaultInjectionEnv env;
  Install(&env, img);
  EXPECT_EQ(Pool::Open(&env, "p").status().code(), Code::kCorruption);
  auto p = Pool::Open(&env, "p", {.accept_journal_loss = true});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto luns = (*p)->ListLuns();
  ASSERT_EQ(luns.size(), 1u);
  EXPECT_EQ(luns[0].name, "a");
  auto a = ReadLun(**p, "a");
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + kMiB, Pattern(kMiB, 1).begin()));
  EXPECT_TRUE((*p)->Check().clean);
}

// Format 3 keeps the same rule: a committed record damaged in its journal
// (a ring in extents the superblock lists) is refused, and RepairJournal
// says what it would drop, then opens the prefix before the damage.
TEST(NoSilentLoss, FormatThreeJournalDamageIsRefusedThenRepairedToThePrefix) {
  std::vector<uint8_t> img;
  {
    FaultInjectionEnv env;
    PoolOptions o;
    o.size_bytes = 64 * kMiB;
    o.journal_bytes = 256 * 1024;
    o.allocation_unit = 64 * 1024;
    o.format = 3;
    o.grain = 4096;
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto data = Pattern(kMiB, 1);
    for (const char* name : {"a", "b"}) {
      ASSERT_TRUE((*p)->CreateLun(name, 4 * kMiB, 512).ok());
      auto l = (*p)->OpenLun(name).value();
      ASSERT_TRUE(l->Write(0, kMiB / 512, data.data(), D::kDurable).ok());
    }
    img = env.Snapshot("p");  // still open: a power-cut image
  }
  // Replay's first record (LUN a's creation) and the two after it; the
  // third is LUN b's creation. One extent here: its bytes are the ring's.
  SuperblockV3 sb;
  ASSERT_TRUE(testing::NewestSuperblockV3(img, &sb));
  ASSERT_EQ(sb.journal.size(), 1u);
  const uint64_t ring = sb.data_offset + sb.journal[0].first_au * sb.au;
  uint64_t off = ring + sb.journal_start;
  Record r;
  for (int i = 0; i < 2; i++) {
    size_t n = ParseRecord(img.data() + off, ring + sb.capacity() - off, kNone, &r);
    ASSERT_GT(n, 0u) << "record " << i;
    off += n;
  }
  ASSERT_GT(ParseRecord(img.data() + off, ring + sb.capacity() - off, kNone, &r), 0u);
  img[off + kRecordHeader] ^= 0x10;
  FaultInjectionEnv env;
  Install(&env, img);

  auto p = Pool::Open(&env, "p");
  ASSERT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
  EXPECT_EQ(env.Snapshot("p"), img) << "a refused open must write nothing";
  JournalLoss dry;
  std::unique_ptr<Pool> q = RepairAndReopen(&env, img, &dry);
  ASSERT_NE(q, nullptr);
  EXPECT_GE(dry.dropped.size(), 2u);  // the damaged record and LUN b's write after it
  auto luns = q->ListLuns();
  ASSERT_EQ(luns.size(), 1u);
  EXPECT_EQ(luns[0].name, "a");
  auto a = ReadLun(*q, "a");
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + kMiB, Pattern(kMiB, 1).begin()));
  EXPECT_TRUE(q->Check().clean);
}

TEST(NoSilentLoss, TornTailStillRecoversWithoutAsking) {
  // The last commit's records never synced and some of their sectors were
  // lost (earlier records of the batch gone, later ones kept): that is a
  // power cut, not damage, and must open on its own.
  auto data = Pattern(kMiB, 3);
  for (uint64_t seed = 0; seed < 24; seed++) {
    FaultInjectionEnv env;
    PoolOptions o;
    o.size_bytes = 4 * kMiB;
    o.journal_bytes = 256 * 1024;
    o.allocation_unit = 64 * 1024;
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->CreateLun("a", 2 * kMiB, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    ASSERT_TRUE(a->Write(0, kMiB / 512, data.data(), D::kDurable).ok());
    for (int i = 0; i < 15; i++)  // fifteen records (one per AU) in one commit that never syncs
      ASSERT_TRUE(a->Write(2048 + i * 128, 8, data.data(), D::kBuffered).ok());
    env.CrashAfter(2);  // data sync, journal write, then the disk dies
    EXPECT_FALSE(a->Flush().ok());
    a.reset();
    p->reset();
    env.PowerLoss(seed % 2 ? FaultInjectionEnv::Loss::kRandom : FaultInjectionEnv::Loss::kTear, seed);
    auto q = Pool::Open(&env, "p");
    ASSERT_TRUE(q.ok()) << "seed " << seed << ": " << q.status().ToString();
    auto v = ReadLun(**q, "a");
    EXPECT_TRUE(std::equal(data.begin(), data.end(), v.begin())) << "seed " << seed;
  }
}

TEST(NoSilentLoss, PoolFileShorterThanDeclaredIsRefused) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.size_bytes = 98 * kMiB;
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->CreateLun("a", 80 * kMiB, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    auto data = Pattern(kMiB, 5);
    for (uint64_t i = 0; i < 70; i++)  // 70 of the 81 AUs
      ASSERT_TRUE(a->Write(i * 2048, 2048, data.data(), D::kBuffered).ok());
  }
  {
    auto f = env.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE((*f)->Truncate(49 * kMiB).ok());
  }
  std::vector<uint8_t> img = env.Snapshot("p");
  auto p = Pool::Open(&env, "p");
  ASSERT_EQ(p.status().code(), Code::kCorruption) << p.status().ToString();
  EXPECT_NE(p.status().message().find("shorter"), std::string::npos) << p.status().ToString();
  EXPECT_EQ(env.Snapshot("p"), img) << "the cut file must not be re-extended";
  auto rep = Pool::CheckOffline(&env, "p");
  ASSERT_TRUE(rep.ok());
  EXPECT_FALSE(rep->clean);
}

// An Env whose files accept any size without holding it in memory (a sparse
// file on a file system that takes huge sizes).
class HugeFileEnv final : public Env {
 public:
  explicit HugeFileEnv(FaultInjectionEnv* inner) : inner_(inner) {}
  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override {
    auto f = inner_->OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<File>(new HugeFile(std::move(f.value()), &sizes_[path]));
  }
  bool Exists(const std::string& path) override { return inner_->Exists(path); }

 private:
  class HugeFile final : public File {
   public:
    HugeFile(std::unique_ptr<File> f, uint64_t* size) : f_(std::move(f)), size_(size) {}
    Status Read(uint64_t o, size_t n, void* b) override { return f_->Read(o, n, b); }
    Status Write(uint64_t o, size_t n, const void* b) override { return f_->Write(o, n, b); }
    Status Sync() override { return f_->Sync(); }
    Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
    Status DropCache() override { return f_->DropCache(); }
    Result<uint64_t> Size() override {
      auto s = f_->Size();
      if (!s.ok()) return s;
      return std::max(*s, *size_);
    }
    Status Truncate(uint64_t size) override {
      if (size > (1ull << 30)) {
        *size_ = size;
        return Status::Ok();
      }
      return f_->Truncate(size);
    }
    Status PunchHole(uint64_t o, uint64_t n) override { return f_->PunchHole(o, n); }
    bool CanTruncate() const override { return true; }
    uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
    Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return f_->ReadAside(off, iov, n); }
    void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
    bool WritesAllocate() const override { return false; }
    bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

   private:
    std::unique_ptr<File> f_;
    uint64_t* size_;
  };
  FaultInjectionEnv* inner_;
  std::map<std::string, uint64_t> sizes_;
};

TEST(NoSilentLoss, GrowThatCannotBeIndexedLeavesThePoolOpenable) {
  FaultInjectionEnv fenv;
  HugeFileEnv env(&fenv);
  PoolOptions o;
  o.size_bytes = 24 * kMiB;
  o.journal_bytes = 256 * 1024;
  auto data = Pattern(kMiB, 9);
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->CreateLun("a", 8 * kMiB, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    ASSERT_TRUE(a->Write(0, 2048, data.data(), D::kDurable).ok());
    Status s = (*p)->Grow(1ull << 60);  // 2^40 AUs: 5 TiB of in-memory index
    EXPECT_FALSE(s.ok());
    EXPECT_EQ((*p)->Space().pool_size_bytes, 24 * kMiB);
    ASSERT_TRUE(a->Write(2048, 2048, data.data(), D::kDurable).ok()) << "the pool keeps working";
  }
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)->Space().pool_size_bytes, 24 * kMiB);
  auto v = ReadLun(**p, "a");
  EXPECT_TRUE(std::equal(data.begin(), data.end(), v.begin()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), v.begin() + kMiB));
}

// A power cut at any write of a grow (and with any loss of what was not
// synced) leaves the pool openable at its old or its new size, with its data.
// Before the size was synced ahead of the superblock, a cut that kept the new
// superblock but not the file's new size left a pool open refused as short.
TEST(NoSilentLoss, PowerCutDuringGrowLeavesTheOldOrTheNewSize) {
  auto data = Pattern(kMiB, 11);
  for (int64_t cut = 0;; cut++) {
    bool finished = false;
    // Drop all, keep all, then random survivals with several seeds (the bad
    // case is the superblock surviving while the new size does not).
    for (int mode = 0; mode < 10; mode++) {
      auto loss = mode == 0   ? FaultInjectionEnv::Loss::kDropAll
                  : mode == 1 ? FaultInjectionEnv::Loss::kKeepAll
                              : FaultInjectionEnv::Loss::kRandom;
      FaultInjectionEnv env;
      PoolOptions o;
      o.size_bytes = 16 * kMiB;
      o.journal_bytes = 256 * 1024;
      {
        auto p = Pool::Create(&env, "p", o);
        ASSERT_TRUE(p.ok());
        ASSERT_TRUE((*p)->CreateLun("a", 4 * kMiB, 512).ok());
        auto a = (*p)->OpenLun("a").value();
        ASSERT_TRUE(a->Write(0, 2048, data.data(), D::kDurable).ok());
        env.CrashAfter(cut);
        finished = (*p)->Grow(32 * kMiB).ok();
      }
      env.PowerLoss(loss, static_cast<uint64_t>(cut * 16 + mode));
      auto p = Pool::Open(&env, "p");
      ASSERT_TRUE(p.ok()) << "cut " << cut << " mode " << mode << ": " << p.status().ToString();
      uint64_t size = (*p)->Space().pool_size_bytes;
      EXPECT_TRUE(size == 16 * kMiB || size == 32 * kMiB) << "cut " << cut << ": " << size;
      if (finished) {
        EXPECT_EQ(size, 32 * kMiB) << "a grow that returned ok is durable";
      }
      auto v = ReadLun(**p, "a");
      EXPECT_TRUE(std::equal(data.begin(), data.end(), v.begin())) << "cut " << cut;
      EXPECT_TRUE((*p)->Check().clean) << "cut " << cut;
    }
    if (finished) break;
    ASSERT_LT(cut, 100) << "the grow never finished";
  }
}

// Slot holding the newest valid superblock.
int NewestSlot(const std::vector<uint8_t>& img) {
  Superblock a, b;
  bool va = Superblock::Decode(img.data(), kSuperblockSlot, &a).ok();
  bool vb = Superblock::Decode(img.data() + kSuperblockSlot, kSuperblockSlot, &b).ok();
  if (va && vb) return b.seq > a.seq ? 1 : 0;
  return vb ? 1 : 0;
}

TEST(NoSilentLoss, DamagedNewestSuperblockFallsBackToAnExactCopy) {
  FaultInjectionEnv env;
  PoolOptions o;
  o.size_bytes = 16 * kMiB;
  o.allocation_unit = 64 * 1024;
  o.journal_bytes = 64 * 1024;
  auto data = Pattern(kMiB, 11);
  {
    auto p = Pool::Create(&env, "p", o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->CreateLun("a", 8 * kMiB, 512).ok());
    auto a = (*p)->OpenLun("a").value();
    for (int i = 0; i < 400; i++)  // several journal wraps: several checkpoints
      ASSERT_TRUE(a->Write((i % 8) * 2048, 2048, data.data(), D::kDurable).ok());
  }
  { ASSERT_TRUE(Pool::Open(&env, "p").ok()); }  // one more checkpoint, old one freed
  std::vector<uint8_t> img = env.Snapshot("p");
  int slot = NewestSlot(img);
  env.Corrupt("p", slot * kSuperblockSlot + 40, 8);
  auto p = Pool::Open(&env, "p");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto v = ReadLun(**p, "a");
  for (int i = 0; i < 8; i++)
    EXPECT_TRUE(std::equal(data.begin(), data.end(), v.begin() + i * kMiB)) << i;
  EXPECT_TRUE((*p)->Check().clean);
}

// A metadata update that throws once ApplyRecord has changed the in-memory
// state (out of memory part way: the test hook fail_after_apply_for_test)
// fails the pool: the operation gets an error, so does every later durable
// one, nothing after the failure reaches the disk, and after a power cut the
// pool opens (no damaged journal) with exactly what was acknowledged before.
// Before, the operation got kNoSpace ("nothing changed") and the pool went
// on: an unmap's freed grains, pending under the ticket its record never
// got, were released by the next unrelated durable write while the durable
// map still pointed at them; a failure inside the framing left a half frame
// that every later acknowledged write was committed behind.
TEST(NoSilentLoss, MetadataUpdateFailingPartWayFailsThePool) {
  const auto a_data = Pattern(kMiB, 21), b_data = Pattern(kMiB, 22), more = Pattern(kMiB, 23);
  const std::vector<uint8_t> zeros(kMiB, 0);
  struct Case {
    const char* what;
    std::function<Status(Pool&, Lun& a, Lun& b)> op;
  };
  const std::vector<Case> cases = {
      {"unmap", [](Pool&, Lun& a, Lun&) { return a.Unmap(0, kMiB / 512, D::kDurable); }},
      {"write", [&](Pool&, Lun& a, Lun&) {
         return a.Write(kMiB / 512, kMiB / 512, more.data(), D::kDurable);
       }},
      {"clone range", [](Pool& p, Lun& a, Lun& b) {
         return p.CloneRange(a, 0, b, kMiB / 512, kMiB / 512, D::kDurable);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    FaultInjectionEnv env;
    PoolOptions o;
    o.size_bytes = 32 * kMiB;
    o.journal_bytes = 256 * 1024;
    {
      auto p = Pool::Create(&env, "p", o);
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE((*p)->CreateLun("a", 4 * kMiB, 512).ok());
      ASSERT_TRUE((*p)->CreateLun("b", 4 * kMiB, 512).ok());
      auto a = (*p)->OpenLun("a").value();
      auto b = (*p)->OpenLun("b").value();
      ASSERT_TRUE(a->Write(0, kMiB / 512, a_data.data(), D::kDurable).ok());
      ASSERT_TRUE(b->Write(0, kMiB / 512, b_data.data(), D::kDurable).ok());

      fail_after_apply_for_test = 1;
      Status s = c.op(**p, *a, *b);
      ASSERT_EQ(fail_after_apply_for_test, 0) << "the hook did not fire";
      EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
      EXPECT_NE(s.message().find("reopened"), std::string::npos) << s.ToString();

      // Unrelated durable writes after it (the second may reuse grains a
      // failed unmap freed) fail too, and so does a flush.
      EXPECT_FALSE(b->Write(2 * kMiB / 512, kMiB / 512, more.data(), D::kDurable).ok());
      EXPECT_FALSE(b->Write(3 * kMiB / 512, kMiB / 512, more.data(), D::kDurable).ok());
      EXPECT_FALSE((*p)->Flush().ok());
      EXPECT_FALSE((*p)->Check().clean) << "the pool reports its failed state";
    }
    env.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 1);

    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto a = ReadLun(**p, "a");
    auto b = ReadLun(**p, "b");
    ASSERT_EQ(a.size(), 4 * kMiB);
    ASSERT_EQ(b.size(), 4 * kMiB);
    EXPECT_TRUE(std::equal(a_data.begin(), a_data.end(), a.begin())) << "acknowledged data lost";
    EXPECT_TRUE(std::equal(b_data.begin(), b_data.end(), b.begin())) << "acknowledged data lost";
    for (int i = 1; i < 4; i++) {
      EXPECT_TRUE(std::equal(zeros.begin(), zeros.end(), a.begin() + i * kMiB)) << "a, MiB " << i;
      EXPECT_TRUE(std::equal(zeros.begin(), zeros.end(), b.begin() + i * kMiB)) << "b, MiB " << i;
    }
    CheckReport rep = (*p)->Check();
    EXPECT_TRUE(rep.clean) << (rep.problems.empty() ? "" : rep.problems[0]);
    // And the reopened pool works.
    auto a2 = (*p)->OpenLun("a").value();
    EXPECT_TRUE(a2->Write(kMiB / 512, kMiB / 512, more.data(), D::kDurable).ok());
  }
}

TEST(NoSilentLoss, OnlineCheckLetsWritesThrough) {
  // A write issued while Check runs completes before Check ends: the check
  // never holds the store's locks for the whole pass.
  FaultInjectionEnv env;
  PoolOptions o;
  o.size_bytes = 16 * kMiB;
  o.journal_bytes = 256 * 1024;
  auto p = Pool::Create(&env, "p", o);
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 2000; i++) ASSERT_TRUE((*p)->CreateLun("l" + std::to_string(i), kMiB, 512).ok());
  auto lun = (*p)->OpenLun("l0").value();
  auto data = Pattern(4096, 13);
  struct Ctx {
    Lun* lun;
    const uint8_t* data;
    std::atomic<int> calls{0};
    std::atomic<bool> completed_inside{false};
    std::future<Status> write;  // outlives the callback: a blocked write ends after Check
  } ctx{lun.get(), data.data(), {}, {}, {}};
  CheckReport rep = (*p)->Check(
      [](void* c, uint64_t done, uint64_t total) {
        auto* x = static_cast<Ctx*>(c);
        if (x->calls++ != 0 || done * 2 > total) return;  // once, early in the pass
        x->write = std::async(std::launch::async, [x] {
          return x->lun->Write(0, 8, x->data, Durability::kDurable);
        });
        if (x->write.wait_for(std::chrono::seconds(20)) == std::future_status::ready)
          x->completed_inside = true;
      },
      &ctx);
  ASSERT_TRUE(ctx.write.valid());
  EXPECT_TRUE(ctx.write.get().ok());
  EXPECT_TRUE(rep.clean) << (rep.problems.empty() ? "" : rep.problems[0]);
  EXPECT_GT(ctx.calls.load(), 0);
  EXPECT_TRUE(ctx.completed_inside.load()) << "a durable write waited for the whole check";
}

}  // namespace
}  // namespace cowstore::store
