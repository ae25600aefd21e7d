// SPDX-License-Identifier: Apache-2.0
// A failed sync under Linux ("fsyncgate") semantics: the pages an fdatasync
// could not write are marked clean while the cache keeps their new bytes, so
// reads return what never reached the disk and a later fdatasync does not
// write them. FaultInjectionEnv models it (SetFailedSync(kForget)); the
// store's remedy is File::DropCache before an open reads anything
// (recovery.cc, Core::Open). Here: the Env's model, PosixEnv's DropCache on
// a real file, and the store end to end: a sync failing at every sync of a
// workload, the pool reopened from the same cache, run on, power cut.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <linux/magic.h>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::store {
namespace {

using Op = FaultInjectionEnv::Op;
using FailedSync = FaultInjectionEnv::FailedSync;
using D = Durability;

std::vector<uint8_t> Bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

std::vector<uint8_t> ReadAll(File* f, size_t n) {
  std::vector<uint8_t> v(n);
  EXPECT_TRUE(f->Read(0, n, v.data()).ok());
  return v;
}

// ------------------------------------------------------- the Env's model

// A file with 1 KiB of 'a' durable, then 'b' written over its second sector.
std::unique_ptr<File> Prepared(FaultInjectionEnv* env) {
  auto f = env->OpenLocked("f", Env::Mode::kCreate).value();
  EXPECT_TRUE(f->Write(0, 1024, Bytes(1024, 'a').data()).ok());
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_TRUE(f->Write(512, 512, Bytes(512, 'b').data()).ok());
  return f;
}

std::vector<uint8_t> AB() {
  auto v = Bytes(1024, 'a');
  std::memset(v.data() + 512, 'b', 512);
  return v;
}

TEST(FailedSyncEnv, ByDefaultAFailedSyncKeepsTheSectorsForTheNext) {
  FaultInjectionEnv env;
  auto f = Prepared(&env);
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_EQ(f->Sync().code(), Code::kIOError);
  EXPECT_EQ(env.unsynced_sectors("f"), 1u);
  EXPECT_EQ(env.forgotten_sectors("f"), 0u);
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_EQ(env.DurableSnapshot("f"), AB());
}

TEST(FailedSyncEnv, InForgetModeAFailedSyncLeavesNewBytesReadableButNeverDurable) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  auto f = Prepared(&env);
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_EQ(f->Sync().code(), Code::kIOError);
  EXPECT_EQ(env.unsynced_sectors("f"), 0u) << "the failed sector is clean now";
  EXPECT_EQ(env.forgotten_sectors("f"), 1u);
  EXPECT_EQ(ReadAll(f.get(), 1024), AB()) << "the cache keeps the new bytes";
  EXPECT_EQ(env.DurableSnapshot("f"), Bytes(1024, 'a'));
  ASSERT_TRUE(f->Sync().ok()) << "a later sync reports success...";
  EXPECT_EQ(env.DurableSnapshot("f"), Bytes(1024, 'a')) << "...without writing the sector";
  EXPECT_EQ(ReadAll(f.get(), 1024), AB());
  f.reset();
  env.PowerLoss(FaultInjectionEnv::Loss::kKeepAll, 1);
  f = env.OpenLocked("f", Env::Mode::kReadWrite).value();
  EXPECT_EQ(ReadAll(f.get(), 1024), Bytes(1024, 'a')) << "a power cut takes it back";
}

TEST(FailedSyncEnv, ASyncFailingOnADeadDiskForgetsToo) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  auto f = Prepared(&env);
  env.CrashAfter(0);
  EXPECT_FALSE(f->Sync().ok());
  EXPECT_EQ(env.forgotten_sectors("f"), 1u);
  env.ClearFaults();  // the machine stays up: the cache is what it was
  EXPECT_EQ(ReadAll(f.get(), 1024), AB());
}

TEST(FailedSyncEnv, DropCacheRereadsTheDiskAndSyncsWhatIsDirty) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  auto f = Prepared(&env);
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(f->Sync().ok());
  ASSERT_TRUE(f->Write(0, 512, Bytes(512, 'c').data()).ok());  // dirty, not forgotten
  uint64_t syncs = env.sync_calls();
  ASSERT_TRUE(f->DropCache().ok());
  EXPECT_EQ(env.sync_calls(), syncs + 1) << "DropCache's sync is counted as Sync's is";
  auto want = Bytes(1024, 'a');
  std::memset(want.data(), 'c', 512);
  EXPECT_EQ(ReadAll(f.get(), 1024), want) << "forgotten: the disk's bytes; dirty: synced";
  EXPECT_EQ(env.DurableSnapshot("f"), want);
  EXPECT_EQ(env.forgotten_sectors("f"), 0u);
  EXPECT_EQ(env.unsynced_sectors("f"), 0u);
  EXPECT_EQ(env.calls(Op::kDropCache), 1u);
  // A failed DropCache changes nothing (and the open that called it fails).
  env.FailAt(Op::kDropCache, 0, Code::kIOError);
  EXPECT_EQ(f->DropCache().code(), Code::kIOError);
}

TEST(FailedSyncEnv, AForgottenSectorWrittenAgainIsSyncedAgain) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  auto f = Prepared(&env);
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(f->Sync().ok());
  ASSERT_TRUE(f->Write(512, 512, Bytes(512, 'd').data()).ok());
  ASSERT_TRUE(f->Sync().ok());
  auto want = Bytes(1024, 'a');
  std::memset(want.data() + 512, 'd', 512);
  EXPECT_EQ(env.DurableSnapshot("f"), want);
  EXPECT_EQ(env.forgotten_sectors("f"), 0u);
}

// Linux reports a write-back error once to each open of the file (errseq):
// the sync that failed, then the next sync through every other open, though
// that one wrote all it had. So two syncs that may overlap go through
// different opens (File::NewSyncHandle), or one could return success for a
// page the other's failure forgot.
TEST(FailedSyncEnv, InForgetModeEveryOtherOpenReportsTheFailureOnceAtItsNextSync) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  auto f = Prepared(&env);
  auto a = f->NewSyncHandle();
  auto b = f->NewSyncHandle();
  ASSERT_TRUE(a.ok() && b.ok());
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_EQ(a.value()->Sync().code(), Code::kIOError) << "the failing sync itself";
  EXPECT_TRUE(a.value()->Sync().ok()) << "reported once to that open";
  EXPECT_EQ(f->Sync().code(), Code::kIOError) << "the file's own open, which wrote the page";
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_EQ(b.value()->Sync().code(), Code::kIOError) << "and every other open";
  EXPECT_TRUE(b.value()->Sync().ok());
  EXPECT_EQ(env.DurableSnapshot("f"), Bytes(1024, 'a')) << "the forgotten sector stays lost";
  // An open made after the failure has nothing to report.
  auto c = f->NewSyncHandle();
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c.value()->Sync().ok());
  // A failure through the file is reported through a handle just the same.
  ASSERT_TRUE(f->Write(0, 512, Bytes(512, 'e').data()).ok());
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(f->Sync().ok());
  EXPECT_EQ(c.value()->Sync().code(), Code::kIOError);
}

TEST(FailedSyncEnv, ByDefaultAFailedSyncIsNotReportedThroughOtherOpens) {
  FaultInjectionEnv env;  // kRetain: the failure forgot nothing
  auto f = Prepared(&env);
  auto a = f->NewSyncHandle();
  ASSERT_TRUE(a.ok());
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(a.value()->Sync().ok());
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_EQ(env.DurableSnapshot("f"), AB()) << "the next sync wrote the sector the failure kept";
}

// -------------------------------------------------- PosixEnv on a real file

// Pages of [0, n) of `fd` in the page cache.
size_t Resident(int fd, size_t n) {
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return ~size_t{0};
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((n + page - 1) / page);
  size_t r = 0;
  if (::mincore(m, n, vec.data()) == 0)
    for (unsigned char c : vec) r += c & 1;
  else
    r = ~size_t{0};
  ::munmap(m, n);
  return r;
}

TEST(FailedSyncPosix, DropCacheLeavesNoPageOfTheFileCached) {
  std::string path = ::testing::TempDir() + "/cowstore-dropcache-" + std::to_string(::getpid());
  std::filesystem::remove(path);
  constexpr size_t kN = 1 << 20;
  auto f = DefaultEnv()->OpenLocked(path, Env::Mode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Write(0, kN, Bytes(kN, 'x').data()).ok());  // dirty: cached
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  struct statfs sfs;
  ASSERT_EQ(::fstatfs(fd, &sfs), 0);
  ASSERT_GT(Resident(fd, kN), 0u);
  uint64_t syncs = DefaultEnv()->sync_calls();
  ASSERT_TRUE((*f)->DropCache().ok());
  EXPECT_EQ(DefaultEnv()->sync_calls(), syncs + 1) << "DropCache's fdatasync is counted";
  // tmpfs has no disk to reread from: its pages are the file.
  if (sfs.f_type != TMPFS_MAGIC) {
    EXPECT_EQ(Resident(fd, kN), 0u) << "every page was written and dropped";
  }
  EXPECT_EQ(ReadAll(f->get(), kN), Bytes(kN, 'x'));
  ::close(fd);
  f->reset();
  std::filesystem::remove(path);
}

// --------------------------------------------------------- the store, end to end

constexpr uint32_t kAu = 64 * 1024;
constexpr uint32_t kBs = 512;
constexpr uint64_t kBlocks = 2048;  // per LUN: 1 MiB, 16 AUs
constexpr uint64_t kPerAu = kAu / kBs;

PoolOptions Opts() {
  PoolOptions o;
  o.allocation_unit = kAu;
  o.journal_bytes = 64 * 1024;
  o.size_bytes = 128 * 1024 + 48 * uint64_t{kAu};
  return o;
}

// A block's bytes for `tag` (0: zeros).
std::vector<uint8_t> Block(uint64_t tag) {
  std::vector<uint8_t> v(kBs, 0);
  if (tag == 0) return v;
  for (size_t i = 0; i < kBs; i += 8) std::memcpy(v.data() + i, &tag, 8);
  return v;
}

// What the two LUNs must hold: per block, its tag, and the tags it may hold
// after a failure (every tag since the last acknowledged point).
struct Model {
  std::vector<uint64_t> cur[2];
  std::vector<std::set<uint64_t>> cand[2];
  uint64_t next_tag = 1;
  Model() {
    for (int l = 0; l < 2; l++) {
      cur[l].assign(kBlocks, 0);
      cand[l].assign(kBlocks, {0});
    }
  }
  void Set(int l, uint64_t b, uint64_t tag) {
    cur[l][b] = tag;
    cand[l][b].insert(tag);
  }
  void Ack() {
    for (int l = 0; l < 2; l++)
      for (uint64_t b = 0; b < kBlocks; b++) cand[l][b] = {cur[l][b]};
  }
};

class Workload {
 public:
  explicit Workload(FaultInjectionEnv* env) : env_(env) {}

  ::testing::AssertionResult Create() {
    auto p = Pool::Create(env_, "pool", Opts());
    if (!p.ok()) return ::testing::AssertionFailure() << p.status().ToString();
    pool_ = std::move(p.value());
    for (const char* n : {"a", "b"})
      if (auto c = pool_->CreateLun(n, kBlocks * kBs, kBs); !c.ok())
        return ::testing::AssertionFailure() << c.status().ToString();
    return Handles();
  }
  ::testing::AssertionResult Open() {
    auto p = Pool::Open(env_, "pool");
    if (!p.ok()) return ::testing::AssertionFailure() << "open: " << p.status().ToString();
    pool_ = std::move(p.value());
    return Handles();
  }
  Status Close() {
    lun_[0].reset();
    lun_[1].reset();
    Status s = pool_->Close();
    pool_.reset();
    return s;
  }

  // The workload: durable single-block writes (in place, or copying a shared
  // AU), and bursts of buffered writes, unmaps and clones closed by a flush
  // that fill the journal into checkpoints. Stops at the first error (the
  // pool has failed); returns whether one happened.
  bool Work(uint64_t seed, int rounds, int burst = 120) {
    std::mt19937_64 rng(seed);
    for (int r = 0; r < rounds; r++) {
      int l = static_cast<int>(rng() % 2);
      uint64_t b = rng() % kBlocks, tag = m_.next_tag++;
      m_.Set(l, b, tag);
      if (!lun_[l]->Write(b, 1, Block(tag).data(), D::kDurable).ok()) return true;
      m_.Ack();
      for (int i = 0; i < burst; i++) {
        uint64_t x = rng() % kBlocks, t = m_.next_tag++;
        m_.Set(0, x, t);
        if (!lun_[0]->Write(x, 1, Block(t).data(), D::kBuffered).ok()) return true;
        uint64_t au = rng() % (kBlocks / kPerAu);
        for (uint64_t k = 0; k < kPerAu; k++) m_.Set(1, au * kPerAu + k, 0);
        if (!lun_[1]->Unmap(au * kPerAu, kPerAu, D::kBuffered).ok()) return true;
        uint64_t src = rng() % (kBlocks / kPerAu), dst = rng() % (kBlocks / kPerAu);
        for (uint64_t k = 0; k < kPerAu; k++) m_.Set(1, dst * kPerAu + k, m_.cur[0][src * kPerAu + k]);
        if (!pool_->CloneRange(*lun_[0], src * kPerAu, *lun_[1], dst * kPerAu, kPerAu, D::kBuffered).ok())
          return true;
      }
      if (!pool_->Flush().ok()) return true;
      m_.Ack();
    }
    return false;
  }

  // Every block holds one of its candidates; the model takes what it holds
  // as the truth (exact = only the current tag will do).
  ::testing::AssertionResult Verify(bool exact) {
    for (int l = 0; l < 2; l++) {
      std::vector<uint8_t> all(kBlocks * kBs);
      if (Status s = lun_[l]->Read(0, kBlocks, all.data()); !s.ok())
        return ::testing::AssertionFailure() << s.ToString();
      for (uint64_t b = 0; b < kBlocks; b++) {
        const uint8_t* p = all.data() + b * kBs;
        bool found = false;
        for (uint64_t t : exact ? std::set<uint64_t>{m_.cur[l][b]} : m_.cand[l][b]) {
          if (std::memcmp(p, Block(t).data(), kBs) == 0) {
            m_.cur[l][b] = t;
            found = true;
            break;
          }
        }
        if (!found) {
          uint64_t got;
          std::memcpy(&got, p, 8);
          return ::testing::AssertionFailure()
                 << "LUN " << l << " block " << b << " holds tag " << got << ", expected "
                 << m_.cur[l][b] << (exact ? "" : " or another candidate");
        }
      }
    }
    m_.Ack();
    return ::testing::AssertionSuccess();
  }

  Pool* pool() { return pool_.get(); }

 private:
  ::testing::AssertionResult Handles() {
    for (int l = 0; l < 2; l++) {
      auto h = pool_->OpenLun(l ? "b" : "a");
      if (!h.ok()) return ::testing::AssertionFailure() << h.status().ToString();
      lun_[l] = h.value();
    }
    return ::testing::AssertionSuccess();
  }
  FaultInjectionEnv* env_;
  std::unique_ptr<Pool> pool_;
  std::shared_ptr<Lun> lun_[2];
  Model m_;
};

constexpr uint64_t kSeed = 42;
constexpr int kRounds = 5;

// The number of syncs the workload makes after Create (no fault).
uint64_t WorkloadSyncs() {
  FaultInjectionEnv env;
  Workload run(&env);
  EXPECT_TRUE(run.Create());
  uint64_t before = env.calls(Op::kSync);
  EXPECT_FALSE(run.Work(kSeed, kRounds));
  return env.calls(Op::kSync) - before;
}

// The n-th sync of the workload fails and forgets; the pool fails. Then,
// in the same boot (same cache, no power loss), the pool is reopened: it
// holds every acknowledged write (and the failed operations' effects or
// not), runs on, and a power cut afterwards takes back nothing it showed.
// *failed: whether the n-th sync came (a pool's LSNs start at a random
// point, so its records' sizes, and with them its syncs, vary a little).
::testing::AssertionResult FailSyncThenReopen(uint64_t nth, uint64_t* forgotten, bool* failed) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  Workload run(&env);
  if (auto r = run.Create(); !r) return r;
  uint64_t before = env.calls(Op::kSync);
  env.FailAt(Op::kSync, nth, Code::kIOError);
  *failed = run.Work(kSeed, kRounds);
  if (!*failed) {
    if (env.calls(Op::kSync) - before > nth) return ::testing::AssertionFailure() << "a failed sync went unnoticed";
    return ::testing::AssertionSuccess();
  }
  *forgotten += env.forgotten_sectors("pool");
  (void)run.Close();  // fails: the pool has failed
  if (auto r = run.Open(); !r) return r << " (reopen from the same cache)";
  if (CheckReport rep = run.pool()->Check(); !rep.clean)
    return ::testing::AssertionFailure() << "reopened: " << rep.problems[0];
  if (auto r = run.Verify(false); !r) return r << " (reopened from the same cache)";
  // A little (the open made a checkpoint already): running on must not heal
  // what the open got wrong, as copies of every AU would.
  if (run.Work(kSeed + 1, 2, 2)) return ::testing::AssertionFailure() << "the reopened pool failed";
  if (Status s = run.Close(); !s.ok()) return ::testing::AssertionFailure() << "close: " << s.ToString();
  env.PowerLoss(FaultInjectionEnv::Loss::kRandom, nth);
  if (auto r = run.Open(); !r) return r << " (after the power cut)";
  if (auto r = run.Verify(true); !r) return r << " (after the power cut)";
  if (Status s = run.Close(); !s.ok()) return ::testing::AssertionFailure() << "close: " << s.ToString();
  auto rep = Pool::CheckOffline(&env, "pool");
  if (!rep.ok()) return ::testing::AssertionFailure() << rep.status().ToString();
  if (!rep->clean) return ::testing::AssertionFailure() << "offline check: " << rep->problems[0];
  return ::testing::AssertionSuccess();
}

// PosixEnv's sync handle is an open of its own of the same file: it makes
// what the file wrote durable, and is counted as the file's syncs are.
TEST(FailedSyncPosix, ASyncHandleSyncsTheSameFileThroughAnOpenOfItsOwn) {
  std::string path = ::testing::TempDir() + "/cowstore-synchandle-" + std::to_string(::getpid());
  std::filesystem::remove(path);
  auto f = DefaultEnv()->OpenLocked(path, Env::Mode::kCreate);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::filesystem::path real = std::filesystem::canonical(path);
  auto h = f.value()->NewSyncHandle();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(f.value()->Write(0, 4096, Bytes(4096, 'x').data()).ok());
  const uint64_t before = DefaultEnv()->sync_calls();
  ASSERT_TRUE(h.value()->Sync().ok());
  EXPECT_EQ(DefaultEnv()->sync_calls(), before + 1);
  // Not the file's descriptor: its own, which closing the handle closes.
  auto opens = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      if (std::filesystem::read_symlink(e.path(), ec) == real) n++;
    }
    return n;
  };
  const int with_handle = opens();
  h.value().reset();
  EXPECT_EQ(with_handle, opens() + 1);
  f.value().reset();
  std::filesystem::remove(path);
}

TEST(FailedSyncStore, APoolWhoseSyncFailedReopensFromTheDiskNotTheCache) {
  const uint64_t syncs = WorkloadSyncs();
  ASSERT_GT(syncs, 10u);
  uint64_t forgotten = 0, failures = 0;
  for (uint64_t nth = 0; nth < syncs + 2; nth++) {
    bool failed = false;
    ASSERT_TRUE(FailSyncThenReopen(nth, &forgotten, &failed)) << "sync " << nth << " of " << syncs << " failed";
    failures += failed;
  }
  EXPECT_GE(failures + 4, syncs) << "most syncs of the workload were failed";
  EXPECT_GT(forgotten, 0u) << "no failed sync left anything to forget";
  std::printf("failed-sync sweep: %llu syncs, %llu sectors forgotten in all\n",
              static_cast<unsigned long long>(syncs), static_cast<unsigned long long>(forgotten));
}

// Grow syncs the file's new size before a superblock names it. That sync
// failing (and forgetting the data of a buffered write made just before)
// must fail the pool: serving on, the next commit's sync would succeed
// without writing that data and acknowledge a write a power cut then loses.
TEST(FailedSyncStore, AFailedSyncInGrowFailsThePool) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  Workload run(&env);
  ASSERT_TRUE(run.Create());
  auto a = run.pool()->OpenLun("a").value();
  ASSERT_TRUE(a->Write(5, 1, Block(7).data(), D::kBuffered).ok());
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_EQ(run.pool()->Grow(Opts().size_bytes + 4 * kAu).code(), Code::kIOError);
  ASSERT_GT(env.forgotten_sectors("pool"), 0u) << "the failed sync forgot the write";
  Status flushed = run.pool()->Flush();
  EXPECT_FALSE(flushed.ok()) << "the pool serves on after a failed sync";
  a.reset();
  (void)run.Close();
  env.PowerLoss(FaultInjectionEnv::Loss::kKeepAll, 1);
  ASSERT_TRUE(run.Open());
  auto got = std::vector<uint8_t>(kBs);
  auto l = run.pool()->OpenLun("a").value();
  ASSERT_TRUE(l->Read(5, 1, got.data()).ok());
  if (flushed.ok()) {
    EXPECT_EQ(got, Block(7)) << "a write acknowledged by a successful flush is lost";
  }
}

// After a commit's failed sync the pool refuses reads, not only writes: the
// OS may evict the forgotten cache pages the maps in memory point at (the
// new copy of a copy-on-write, holding older acknowledged blocks too), and a
// read would then return what the disk holds there. FaultInjectionEnv never
// evicts, so the test asserts the refusal itself.
TEST(FailedSyncStore, AFailedCommitSyncStopsReadsToo) {
  FaultInjectionEnv env;
  env.SetFailedSync(FailedSync::kForget);
  Workload run(&env);
  ASSERT_TRUE(run.Create());
  auto a = run.pool()->OpenLun("a").value();
  ASSERT_TRUE(a->Write(5, 1, Block(7).data(), D::kDurable).ok());
  env.FailAt(Op::kSync, 0, Code::kIOError);
  EXPECT_FALSE(a->Write(6, 1, Block(8).data(), D::kDurable).ok());
  ASSERT_GT(env.forgotten_sectors("pool"), 0u) << "the failed sync forgot the write";
  std::vector<uint8_t> got(kBs);
  Status r = a->Read(5, 1, got.data());
  EXPECT_EQ(r.code(), Code::kIOError) << r.ToString();
  a.reset();
  (void)run.Close();
  ASSERT_TRUE(run.Open());
  auto l = run.pool()->OpenLun("a").value();
  ASSERT_TRUE(l->Read(5, 1, got.data()).ok());
  EXPECT_EQ(got, Block(7));
}

}  // namespace
}  // namespace cowstore::store
