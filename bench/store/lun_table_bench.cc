// SPDX-License-Identifier: Apache-2.0
// The LUN table at scale: opening a pool with many LUNs, what an
// allocating write costs beside many LUNs, and how long I/O waits while an
// online check runs. Figures within one run; not a test.
//
//   lun_table_bench [LUNS]     (default 40000; pools in $COWSTORE_BENCH_DIR or .)
//
// Open is timed at LUNS and at LUNS/10: near-linear decoding gives a ratio
// near 10 (a quadratic one gives 100; a fixed cost, such as reading the
// journal, shows as a ratio below 10). The check figure is the longest a
// 4 KiB read (page-cached, so it waits only for the store's metadata lock)
// took while Check ran, beside the longest one without a check: that is the
// longest the check stalls I/O. A durable write adds the disk's sync time,
// noisy here, on top. The first-write figure is a buffered 4 KiB write into
// an unmapped block of one LUN (each allocates a grain) in both pools: equal
// if nothing an allocation does walks the LUNs (until session 41 the
// checkpoint room's extent count did, 12.2 us against 3.9 at 40,000).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_env.h"
#include "handler/store/env.h"
#include "handler/store/pool.h"

using namespace cowstore::store;
using cowstore::bench::Dir;
using cowstore::bench::Now;

namespace {

constexpr uint64_t kMiB = 1ull << 20;
uint64_t g_hold_us = 0;  // the check's own account of its longest lock hold

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

std::string MakePool(const std::string& name, int luns) {
  std::string path = Dir() + "/" + name;
  ::unlink(path.c_str());
  PoolOptions o;
  o.size_bytes = 64ull << 30;
  o.soft_threshold_percent = 0;
  auto p = Pool::Create(DefaultEnv(), path, o);
  Die(p.status(), "create pool");
  for (int i = 0; i < luns; i++)
    Die((*p)->CreateLun("vm-" + std::to_string(i), 16 * kMiB, 512).status(), "create LUN");
  return path;
}

double TimeOpen(const std::string& path) {
  double best = 1e9;
  for (int k = 0; k < 3; k++) {
    double t0 = Now();
    auto p = Pool::Open(DefaultEnv(), path, {.read_only = true});
    Die(p.status(), "open");
    best = std::min(best, Now() - t0);
  }
  return best;
}

// The longest 4 KiB read latency over at least `n` reads, with a Check
// running in another thread (if asked) for the whole time it takes.
double LongestRead(Pool& pool, int n, bool with_check, double* check_secs) {
  auto lun = pool.OpenLun("vm-0").value();
  std::vector<uint8_t> buf(4096, 0x5a);
  Die(lun->Write(0, 2048, std::vector<uint8_t>(kMiB, 1).data(), Durability::kDurable), "write");
  std::atomic<bool> running{with_check};
  std::thread checker;
  if (with_check) {
    checker = std::thread([&] {
      double t0 = Now();
      CheckReport r = pool.Check();
      *check_secs = Now() - t0;
      g_hold_us = r.longest_lock_hold_us;
      if (!r.clean) std::fprintf(stderr, "check: %s\n", r.problems[0].c_str());
      running = false;
    });
  }
  double worst = 0;
  for (int i = 0; (with_check && running) || i < n; i++) {
    double t0 = Now();
    Die(lun->Read((i % 256) * 8, 8, buf.data()), "read");
    worst = std::max(worst, Now() - t0);
  }
  if (checker.joinable()) checker.join();
  return worst;
}

// Mean seconds per first 4 KiB write (each allocates a grain) into LUN
// vm-1, buffered: the store's own cost per allocation, no disk wait.
double FirstWrite(const std::string& path, int n) {
  auto p = Pool::Open(DefaultEnv(), path);
  Die(p.status(), "open");
  auto lun = (*p)->OpenLun("vm-1").value();
  std::vector<uint8_t> buf(4096, 0x5a);
  double t0 = Now();
  for (int i = 0; i < n; i++) Die(lun->Write(static_cast<uint64_t>(i) * 8, 8, buf.data(), Durability::kBuffered), "write");
  return (Now() - t0) / n;
}

}  // namespace

int main(int argc, char** argv) {
  int luns = argc > 1 ? std::atoi(argv[1]) : 40000;
  std::printf("building pools with %d and %d LUNs (one durable create each)...\n", luns / 10, luns);
  std::string small = MakePool("bench-luns-small.pool", luns / 10);
  std::string big = MakePool("bench-luns.pool", luns);
  double t_small = TimeOpen(small), t_big = TimeOpen(big);
  std::printf("open, %6d LUNs: %8.1f ms\n", luns / 10, t_small * 1e3);
  std::printf("open, %6d LUNs: %8.1f ms = %.1fx the smaller pool (near-linear: ~10x; quadratic: ~100x)\n",
              luns, t_big * 1e3, t_big / t_small);

  const double w_small = FirstWrite(small, 4000), w_big = FirstWrite(big, 4000);
  std::printf("first 4 KiB write, buffered: %.1f us at %d LUNs, %.1f us at %d LUNs = %.2fx (flat: ~1x)\n",
              w_small * 1e6, luns / 10, w_big * 1e6, luns, w_big / w_small);
  auto p = Pool::Open(DefaultEnv(), big);
  Die(p.status(), "open");
  double check_secs = 0;
  double base = LongestRead(**p, 200000, false, nullptr);
  double during = LongestRead(**p, 200000, true, &check_secs);
  std::printf("online check, %d LUNs: %.1f ms; longest lock hold %.3f ms; longest 4 KiB read "
              "during it %.3f ms (without a check: %.3f ms; the difference is the stall, the rest "
              "is this machine's scheduling)\n",
              luns, check_secs * 1e3, g_hold_us / 1e3, during * 1e3, base * 1e3);
  p->reset();
  ::unlink(small.c_str());
  ::unlink(big.c_str());
  return 0;
}
