// SPDX-License-Identifier: Apache-2.0
// run_tree_bench: building a LUN's extent map of 1 M and 10 M extents in key
// order (what opening a pool does: checkpoints hold runs sorted) and in random
// order (a clone diverging at random), ns per insert and the whole build, plus
// lookups and a full walk at that size. Issue 10 asks for a pool of 10 M
// extents to open in <= 10 s: this is the in-RAM share of that. Then
// SharedRefs' Inc and Dec in the shape of commit_bench's XCOPY clones at
// format 3 (what its queue-depth clone rows spend CPU on). Times are the
// thread's CPU time. Not a test: run by hand.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <ctime>
#include <vector>

#include "handler/store/run_tree.h"
#include "handler/store/shared_refs.h"

namespace cowstore::store {
namespace {

// Thread CPU time: the machine running this is shared, and wall time would
// count other processes' turns.
struct Clock {
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<Clock, duration>;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(duration(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec));
  }
};

// Keys 2i (nothing merges: every insert is one more run), in the given order.
std::vector<uint64_t> Order(uint64_t n, bool random) {
  std::vector<uint64_t> v(n);
  for (uint64_t i = 0; i < n; i++) v[i] = i;
  if (random) std::shuffle(v.begin(), v.end(), std::mt19937_64(1));
  return v;
}

void BM_RunTreeBuild(benchmark::State& st) {
  const uint64_t n = static_cast<uint64_t>(st.range(0));
  const bool random = st.range(1) != 0;
  const std::vector<uint64_t> order = Order(n, random);
  for (auto _ : st) {
    RunTree t;
    auto t0 = Clock::now();
    for (uint64_t i : order)
      if (!t.Insert(2 * i, 3 * i, 1)) st.SkipWithError("insert refused");
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    st.counters["build_s"] = s;
    st.counters["ns_per_insert"] = s * 1e9 / static_cast<double>(n);
    st.counters["bytes_per_run"] = static_cast<double>(t.MemoryBytes()) / static_cast<double>(n);
    // Lookups at random keys, and one walk of every run in order.
    std::mt19937_64 rng(2);
    Run r;
    uint64_t hits = 0;
    const uint64_t lookups = 1000000;
    t0 = Clock::now();
    for (uint64_t k = 0; k < lookups; k++) hits += t.Covering(rng() % (2 * n), &r);
    st.counters["ns_per_lookup"] = std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / lookups;
    t0 = Clock::now();
    uint64_t sum = 0;
    for (Run x : t) sum += x.len;
    st.counters["ns_per_run_walked"] =
        std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / static_cast<double>(n);
    benchmark::DoNotOptimize(hits);
    benchmark::DoNotOptimize(sum);
    if (sum != n) st.SkipWithError("walk lost runs");
  }
}
// {extents, random order?}
BENCHMARK(BM_RunTreeBuild)
    ->Args({1000000, 0})
    ->Args({1000000, 1})
    ->Args({10000000, 0})
    ->Args({10000000, 1})
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

// Random erase down to a tenth and back: leaves merge and split across the
// whole tree (the index moves of a flat leaf index show here).
void BM_RunTreeChurn(benchmark::State& st) {
  const uint64_t n = static_cast<uint64_t>(st.range(0));
  const std::vector<uint64_t> order = Order(n, true);
  RunTree t;
  for (uint64_t i : order) t.Insert(2 * i, 3 * i, 1);
  std::vector<Run> removed;
  for (auto _ : st) {
    auto t0 = Clock::now();
    for (uint64_t k = 0; k < n * 9 / 10; k++) {
      removed.clear();
      t.EraseStarting(2 * order[k], 2 * order[k] + 1, &removed);
    }
    for (uint64_t k = 0; k < n * 9 / 10; k++) t.Insert(2 * order[k], 3 * order[k], 1);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    st.counters["ns_per_op"] = s * 1e9 / static_cast<double>(2 * (n * 9 / 10));
  }
  if (t.size() != n) st.SkipWithError("size changed");
}
BENCHMARK(BM_RunTreeChurn)->Arg(10000000)->Iterations(1)->Unit(benchmark::kSecond);

// commit_bench's clone source at format 3: 1 GiB of 1 MiB pieces (256
// grains) written in shuffled order and mapped 20 times, so one record of
// count 20 covers it. Each "clone" of 4 MiB then adds an owner to 4 of
// those pieces (Inc, as into a fresh LUN); with dec, it also drops one from
// 4 others (Dec: cloning over a LUN that maps data already; each piece
// gains and loses one owner a pass, so no count reaches one). The records
// fragment as counts diverge, as they do in the bench.
void BM_SharedRefsClone(benchmark::State& st) {
  const bool dec = st.range(0) != 0;
  constexpr uint64_t kPiece = 256, kPieces = 1024, kReplicas = 20, kClones = 5120;
  std::vector<std::vector<Run>> luns(kReplicas);
  const std::vector<uint64_t> order = Order(kPieces, true);
  for (auto& l : luns)
    for (uint64_t i = 0; i < kPieces; i++) l.push_back({i * kPiece, order[i] * kPiece, kPiece});
  auto built = SharedRefs::Rebuild(4 * kPieces * kPiece, luns);
  if (!built.ok()) {
    st.SkipWithError("rebuild failed");
    return;
  }
  SharedRefs refs = std::move(built).value();
  std::vector<GrainRun> freed;
  for (auto _ : st) {
    auto t0 = Clock::now();
    for (uint64_t c = 0; c < kClones; c++)
      for (int k = 0; k < 4; k++) {
        const uint64_t at = order[(4 * c + k) % kPieces] * kPiece;
        if (!refs.Inc(at, kPiece).ok()) st.SkipWithError("inc refused");
        if (dec) refs.Dec(order[(4 * c + k + kPieces / 2) % kPieces] * kPiece, kPiece, &freed);
      }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    st.counters["us_per_4MiB_clone"] = s * 1e6 / kClones;
    st.counters["records"] = static_cast<double>(refs.records());
  }
  if (!freed.empty()) st.SkipWithError("a shared grain was freed");
}
BENCHMARK(BM_SharedRefsClone)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cowstore::store

BENCHMARK_MAIN();
