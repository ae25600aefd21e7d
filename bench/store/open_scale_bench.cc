// SPDX-License-Identifier: Apache-2.0
// Issue 10's scale figures for opening a format 3 pool (design store-v3.md,
// plan step 7): Pool::Open of a pool holding N extents after a clean close
// and after a crash, against 10 s, and the open's RAM against 128 MiB per
// 1 M extents (the issue: 1 M extents of a 16 TiB pool in <= 128 MiB).
// Figures within one run; not a test.
//
//   open_scale_bench [--extents N] [--dir DIR] [--keep]
//       (default 10,000,000; DIR default $TMPDIR, else /var/tmp; --keep
//       leaves the pools, left clean, for profiling one open by hand:
//       open_scale_bench --measure POOL ro|rw|load)
//
// Two pools are measured, N/10 and N extents, each a 16 TiB sparse file
// (one AU less where the file system refuses 16 TiB: ext4 stops at 16 TiB
// - 4 KiB).
//
// How a pool is built, through the public API only (a real pool, written
// by the engine as a user's operations would): five LUNs with a 4 KiB
// block (one block = one grain). In each round vm-0..vm-3 each Allocate
// one grain at the next even LBA, so every grain is its own run (the odd
// LBA between stays a hole) and the four LUNs' grains interleave
// physically, as concurrent first writes of four VMs do. Allocate maps
// fresh, punched grains without writing data: the maps, journal and
// checkpoints are exactly those of first writes, without writing 40 GiB
// of data this machine has no room or time for. Every 8th round a
// "scratch" LUN takes one grain too; it is deleted at the end, so free
// space is fragmented (one free run per grain it held) as a deleted VM
// leaves it. snap-0 is a snapshot of vm-0: its runs are shared (the
// open's SharedRefs rebuild has one record per run, none of them merging,
// since vm-0's grains are four apart). That makes 60 % of N extents; the
// last 40 % are the crash batch below, as many records as keep the
// journal below full: the journal is sized at a checkpoint to 48 bytes
// per extent of the maps (journal_segments.h), a one-run kMap record
// takes 57, so 0.4 N records fill ~80 % of a journal sized for 0.6 N
// extents. A crash just before a journal-full checkpoint is the longest
// replay an open meets; this is close to it.
//
// The crash: a child process opens the pool (writable, so it checkpoints
// first), Allocates the remaining 0.4 N extents one grain per call (one
// kMap record each, the journal's least compact case) into odd LBAs of
// vm-3, makes them durable with Flush, and _exits without Close: a
// process death after its last commit. At the crash open the journal
// holds exactly those 0.4 N records (its byte count is printed; were a
// checkpoint taken during the batch, it would show as fewer bytes).
//
// Each open is timed in a fresh process (this program run again with
// --measure), so its RSS before the open is that of an empty process and
// its peak (VmHWM) is the open's. Each open reads cold: Pool::Open drops
// the file's page cache first (File::DropCache); the "load" phase does the
// same. Three opens per state, in this order, since only the last
// changes the file:
//   load  the format's LoadState alone: superblock, checkpoint tree
//         (index, leaves), journal replay into the maps;
//   ro    Pool::Open read-only: load + rebuild of SharedRefs and the free
//         space from the maps;
//   rw    Pool::Open writable (what a server does): ro + punching every
//         free run + the open's checkpoint. This is the headline figure.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_env.h"
#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/meta_format.h"
#include "handler/store/pool.h"

using namespace cowstore::store;
using cowstore::bench::Now;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint32_t kGrain = 4096;
constexpr uint64_t kPoolBytes = 16ull << 40;  // the RAM figure names 16 TiB
constexpr int kOwnLuns = 4;                   // vm-0..vm-3
constexpr uint64_t kScratchEvery = 8;         // rounds per grain of the deleted LUN
uint64_t g_pool_bytes = 0;
bool g_keep = false;  // --keep: leave the pools (to profile an open of one by hand)                    // the size Build made (kPoolBytes, or one AU less)

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// A field of /proc/self/status in KiB (VmRSS, VmHWM).
uint64_t StatusKiB(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':')
      return std::strtoull(line.c_str() + n + 1, nullptr, 10);
  return 0;
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) {
    std::perror("readlink /proc/self/exe");
    std::exit(1);
  }
  buf[n] = 0;
  return buf;
}

// The layout's sizes for N extents: 5 extents a round (vm-0..3, snap-0),
// 60 % of N before the crash batch, the rest in it.
struct Layout {
  uint64_t extents = 0;
  uint64_t rounds = 0;
  uint64_t crash_batch = 0;
  explicit Layout(uint64_t n) : extents(n), rounds(n * 6 / 10 / (kOwnLuns + 1)), crash_batch(n - rounds * (kOwnLuns + 1)) {}
  // LBAs (grains): every even one up to 2 * rounds, and the crash batch's odd ones in vm-3.
  uint64_t lun_bytes() const { return (2 * std::max(rounds, crash_batch) + 2) * kGrain; }
};

// ---- the measuring child (--measure PATH MODE) ----

// CPU seconds of this process so far, all threads: beside the wall time,
// since the 2 cores here are shared and a loaded machine stretches only
// the latter.
double CpuSecs() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// One open in this fresh process: prints "secs cpu_secs base_kib hwm_kib
// rss_kib extra" on stdout for the parent. `extra`: the journal bytes replayed
// (load) or the extents Check counted (rw with check).
int Measure(const std::string& path, const std::string& mode) {
  const uint64_t base = StatusKiB("VmRSS");
  double secs = 0, cpu = 0;
  uint64_t extra = 0;
  const double cpu0 = CpuSecs();
  if (mode == "load") {
    double t0 = Now();
    auto f = DefaultEnv()->OpenLocked(path, Env::Mode::kReadOnly);
    Die(f.status(), "open file");
    Die((*f)->DropCache(), "drop cache");  // cold, as Pool::Open reads
    SuperblockSlots slots;
    auto fmt = ChooseMetaFormat(f->get(), &slots, ServedFormats::kV1ToV3);
    Die(fmt.status(), "choose format");
    PoolGeometry g;
    Die((*fmt)->ChooseSuperblock(slots, &g), "superblock");
    MetaState st;
    st.au = g.grain;
    LoadedMeta meta;
    Die((*fmt)->LoadState(f->get(), &st, &meta), "load state");
    secs = Now() - t0;
    cpu = CpuSecs() - cpu0;
    extra = meta.end.tail;
  } else {
    const bool ro = mode == "ro";
    double t0 = Now();
    auto p = Pool::Open(DefaultEnv(), path, {.read_only = ro});
    Die(p.status(), "open pool");
    secs = Now() - t0;
    cpu = CpuSecs() - cpu0;
    if (mode == "rw-check") {
      CheckReport r = (*p)->Check();
      if (!r.clean) {
        std::fprintf(stderr, "check: %s\n", r.problems.empty() ? "?" : r.problems[0].c_str());
        return 1;
      }
      extra = r.extents;
    }
    // Peak and steady RSS with the pool open (before Close frees it).
    const uint64_t hwm = StatusKiB("VmHWM"), rss = StatusKiB("VmRSS");
    Die((*p)->Close(), "close");
    std::printf("%.3f %.3f %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", secs, cpu, base, hwm, rss, extra);
    return 0;
  }
  std::printf("%.3f %.3f %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", secs, cpu, base, StatusKiB("VmHWM"),
              StatusKiB("VmRSS"), extra);
  return 0;
}

struct OpenFigure {
  double secs = 0;
  double cpu = 0;         // CPU seconds (user + system, all threads)
  double peak_mib = 0;    // VmHWM - the empty process's RSS
  double steady_mib = 0;  // VmRSS with the pool open - the same
  uint64_t extra = 0;
};

OpenFigure RunMeasure(const std::string& exe, const std::string& path, const std::string& mode) {
  std::string cmd = "'" + exe + "' --measure '" + path + "' " + mode;
  FILE* f = ::popen(cmd.c_str(), "r");
  OpenFigure o;
  uint64_t base = 0, hwm = 0, rss = 0;
  if (f == nullptr || std::fscanf(f, "%lf %lf %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &o.secs, &o.cpu, &base, &hwm,
                                  &rss, &o.extra) != 6) {
    std::fprintf(stderr, "measure %s failed\n", mode.c_str());
    std::exit(1);
  }
  if (::pclose(f) != 0) {
    std::fprintf(stderr, "measure %s failed\n", mode.c_str());
    std::exit(1);
  }
  o.peak_mib = (static_cast<double>(hwm) - static_cast<double>(base)) / 1024;
  o.steady_mib = (static_cast<double>(rss) - static_cast<double>(base)) / 1024;
  return o;
}

// ---- the crashing child (--crash PATH N) ----

int CrashBatch(const std::string& path, uint64_t n) {
  Layout lay(n);
  auto p = Pool::Open(DefaultEnv(), path);
  Die(p.status(), "open for the crash batch");
  auto lun = (*p)->OpenLun("vm-3").value();
  for (uint64_t i = 0; i < lay.crash_batch; i++)
    Die(lun->Allocate(2 * i + 1, 1, Durability::kBuffered), "allocate (crash batch)");
  Die((*p)->Flush(), "flush");  // the batch is durable in the journal
  std::fflush(nullptr);
  ::_exit(0);  // no Close, no destructor: the process dies here
}

// ---- the parent ----

void Build(const std::string& path, const Layout& lay) {
  ::unlink(path.c_str());
  PoolOptions o;
  o.size_bytes = kPoolBytes;
  o.soft_threshold_percent = 0;
  o.format = 3;
  o.grain = kGrain;
  auto p = Pool::Create(DefaultEnv(), path, o);
  if (!p.ok()) {
    // ext4 (4 KiB blocks) caps a file at 16 TiB - 4 KiB: one AU less.
    ::unlink(path.c_str());
    o.size_bytes = kPoolBytes - o.allocation_unit;
    p = Pool::Create(DefaultEnv(), path, o);
  }
  Die(p.status(), "create pool");
  g_pool_bytes = o.size_bytes;
  Pool& pool = **p;
  std::vector<std::shared_ptr<Lun>> own;
  for (int k = 0; k < kOwnLuns; k++) {
    std::string name = "vm-" + std::to_string(k);
    Die(pool.CreateLun(name, lay.lun_bytes(), kGrain).status(), "create LUN");
    own.push_back(pool.OpenLun(name).value());
  }
  Die(pool.CreateLun("scratch", lay.lun_bytes(), kGrain).status(), "create LUN");
  auto scratch = pool.OpenLun("scratch").value();
  double t0 = Now(), last = t0;
  for (uint64_t i = 0; i < lay.rounds; i++) {
    for (auto& l : own) Die(l->Allocate(2 * i, 1, Durability::kBuffered), "allocate");
    if (i % kScratchEvery == 0) Die(scratch->Allocate(2 * (i / kScratchEvery), 1, Durability::kBuffered), "allocate");
    if (Now() - last > 30) {
      last = Now();
      std::printf("  ... %" PRIu64 " of %" PRIu64 " rounds, %.0f s\n", i, lay.rounds, last - t0);
      std::fflush(stdout);
    }
  }
  scratch.reset();
  Die(pool.DeleteLun("scratch"), "delete scratch");
  Die(pool.SnapshotLun("vm-0", "snap-0").status(), "snapshot");
  own.clear();
  Die(pool.Close(), "close");
}

uint64_t DiskMiB(const std::string& path) {
  std::string cmd = "du -k '" + path + "' 2>/dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  uint64_t kib = 0;
  if (f) {
    if (std::fscanf(f, "%" SCNu64, &kib) != 1) kib = 0;
    ::pclose(f);
  }
  return kib / 1024;
}

struct Row {
  uint64_t extents = 0, counted = 0;
  double build_s = 0;
  OpenFigure clean_load, clean_ro, clean_rw, crash_load, crash_ro, crash_rw;
  uint64_t journal_bytes = 0, disk_mib = 0;
};

Row MeasureSize(const std::string& exe, const std::string& dir, uint64_t n) {
  Row r;
  r.extents = n;
  Layout lay(n);
  const std::string path = dir + "/open-scale-" + std::to_string(n) + ".pool";
  std::printf("building %" PRIu64 " extents (%" PRIu64 " rounds + a crash batch of %" PRIu64 ") in %s ...\n", n,
              lay.rounds, lay.crash_batch, path.c_str());
  std::fflush(stdout);
  double t0 = Now();
  Build(path, lay);
  r.build_s = Now() - t0;
  // The build's Close seals the journal without a checkpoint; this open
  // (writable) replays and checkpoints, so the crash batch starts from a
  // checkpointed pool, as after any open.
  (void)RunMeasure(exe, path, "rw");
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(exe.c_str(), exe.c_str(), "--crash", path.c_str(), std::to_string(n).c_str(), (char*)nullptr);
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "crash batch failed\n");
    std::exit(1);
  }
  r.crash_load = RunMeasure(exe, path, "load");
  r.journal_bytes = r.crash_load.extra;
  r.crash_ro = RunMeasure(exe, path, "ro");
  r.crash_rw = RunMeasure(exe, path, "rw");  // replays, checkpoints; its Close leaves nothing to replay
  r.clean_load = RunMeasure(exe, path, "load");
  r.clean_ro = RunMeasure(exe, path, "ro");
  r.clean_rw = RunMeasure(exe, path, "rw");
  OpenFigure chk = RunMeasure(exe, path, "rw-check");
  r.counted = chk.extra;
  r.disk_mib = DiskMiB(path);
  if (!g_keep) ::unlink(path.c_str());
  auto phase = [](const char* state, const OpenFigure& load, const OpenFigure& ro, const OpenFigure& rw) {
    std::printf("  %-6s load %6.2f s (cpu %6.2f)  ro open %6.2f s (cpu %6.2f)  rw open %6.2f s (cpu %6.2f)"
                "  peak %7.1f MiB  steady %7.1f MiB\n",
                state, load.secs, load.cpu, ro.secs, ro.cpu, rw.secs, rw.cpu, rw.peak_mib, rw.steady_mib);
  };
  std::printf("  built in %.0f s; %" PRIu64 " MiB on disk (a sparse file of %" PRIu64 " MiB); Check counts %" PRIu64
              " extents, clean; journal at the crash open: %" PRIu64 " bytes (%" PRIu64 " records)\n",
              r.build_s, r.disk_mib, g_pool_bytes / kMiB, r.counted, r.journal_bytes, lay.crash_batch);
  phase("crash", r.crash_load, r.crash_ro, r.crash_rw);
  phase("clean", r.clean_load, r.clean_ro, r.clean_rw);
  std::fflush(stdout);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--measure") == 0) return Measure(argv[2], argv[3]);
  if (argc == 4 && std::strcmp(argv[1], "--crash") == 0) return CrashBatch(argv[2], std::strtoull(argv[3], nullptr, 10));
  uint64_t n = 10'000'000;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/var/tmp";
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--extents") == 0 && i + 1 < argc) {
      n = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--keep") == 0) {
      g_keep = true;
    } else if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--extents N] [--dir DIR] [--keep]\n", argv[0]);
      return 2;
    }
  }
  if (n < 1000) {
    std::fprintf(stderr, "--extents: at least 1000\n");
    return 2;
  }
  const std::string exe = SelfExe();
  std::vector<Row> rows;
  for (uint64_t size : {n / 10, n}) rows.push_back(MeasureSize(exe, dir, size));

  std::printf("\n%12s %12s %14s %16s %10s %12s  %s\n", "extents", "counted", "open clean s", "open after crash s",
              "RAM MiB", "goal MiB", "10 s / RAM");
  for (const Row& r : rows) {
    // RAM: the writable open's peak over an empty process, the larger of
    // the two opens; the goal is 128 MiB per 1 M extents, scaled above 1 M.
    const double ram = std::max(r.clean_rw.peak_mib, r.crash_rw.peak_mib);
    // Below 1 M extents the 128 MiB itself is the bound (fewer
    // extents may not need more RAM; the pool's fixed costs dominate there).
    const double goal = 128.0 * std::max(1.0, static_cast<double>(r.extents) / 1e6);
    const bool time_ok = r.clean_rw.secs <= 10 && r.crash_rw.secs <= 10;
    std::printf("%12" PRIu64 " %12" PRIu64 " %14.2f %18.2f %10.1f %12.1f  %s / %s\n", r.extents, r.counted,
                r.clean_rw.secs, r.crash_rw.secs, ram, goal, time_ok ? "PASS" : "MISS", ram <= goal ? "PASS" : "MISS");
  }
  return 0;
}
