// SPDX-License-Identifier: Apache-2.0
// The SCSI layer's VAAI figures, each against a baseline measured in the same
// run, all driven through LogicalUnit::Execute with CDB bytes:
//
//   1. XCOPY clone of a 20 GiB VMDK (4 MiB segments, one per EXTENDED COPY,
//      as ESXi sends them) vs the same copy by READ(16)+WRITE(16) of 1 MiB;
//      at queue depth 32 both with blocking callers and through a
//      CommandPipeline (the plugin's asynchronous completion).
//   2. Eager-zeroing 100 GiB by 1 MiB WRITE SAME(16) vs WRITE(16) of zeros.
//   3. 1-block COMPARE AND WRITE latency vs 1-block durable WRITE(16), and
//      its p99 while 32 16 MiB XCOPYs run on another LUN of the same pool.
//
// XCOPY runs at queue depths 1, 8 and 32 and prints fdatasyncs per command
// (the Env's sync counter); a run stops issuing after
// COWSTORE_BENCH_RUN_SECONDS (default 8) and its 20 GiB time is then
// extrapolated from the commands it did.
//
//   scsi_bench [--benchmark_filter=...]   (pool files in $COWSTORE_BENCH_DIR or .)
//
// WCE=0 throughout (every GOOD durable, what ESXi gets). The XCOPY and WRITE
// SAME sides run in full; the READ+WRITE copy and the WRITE-of-zeros sides
// move real data and are measured on a sample (COWSTORE_BENCH_SAMPLE_MIB,
// default 1024) and extrapolated linearly: the summary says so.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_env.h"
#include "handler/scsi/cdb.h"
#include "handler/scsi/command_pipeline.h"
#include "handler/scsi/deferred_commit.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/lun_directory.h"
#include "handler/scsi/opcodes.h"
#include "handler/store/env.h"
#include "handler/store/pool.h"

using namespace cowstore;
using namespace cowstore::scsi;

namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;
constexpr uint32_t kBs = 512;
std::map<std::string, double> g_total;  // name -> seconds for the whole job (or per op)
std::map<std::string, double> g_syncs;  // name -> fdatasyncs per command
std::map<std::string, double> g_cpu;    // name -> the process's CPU seconds per command

// CPU seconds the whole process has used (every thread: callers, pipeline,
// the store's own).
double ProcessCpu() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

double RunBudget() {
  const char* s = std::getenv("COWSTORE_BENCH_RUN_SECONDS");
  return s ? std::strtod(s, nullptr) : 8.0;
}

using cowstore::bench::Dir;
using cowstore::bench::Now;
using cowstore::bench::SampleBytes;
[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "scsi_bench: %s\n", what);
  std::exit(1);
}
void Check(const CommandResult& r, const char* what) {
  if (!r.good()) {
    std::fprintf(stderr, "scsi_bench: %s: status 0x%x sense %x/%02x/%02x\n", what,
                 static_cast<unsigned>(r.status), static_cast<unsigned>(r.sense_key()),
                 r.additional_sense().asc, r.additional_sense().ascq);
    std::exit(1);
  }
}

std::vector<uint8_t> Cdb16(uint8_t op, uint64_t lba, uint32_t n, uint8_t b1 = 0) {
  std::vector<uint8_t> c(16, 0);
  c[0] = op;
  c[1] = b1;
  PutBe64(&c[2], lba);
  PutBe32(&c[10], n);
  return c;
}

CommandResult Exec(LogicalUnit& lu, const std::vector<uint8_t>& cdb, void* data, size_t len) {
  iovec v{data, len};
  return lu.Execute(cdb, std::span<const iovec>(&v, len ? 1 : 0));
}

// A pool file with LUs registered in one directory (copy group "bench").
struct BenchPool {
  std::string path;
  std::unique_ptr<store::Pool> pool;
  LunDirectory dir;
  std::vector<std::shared_ptr<LogicalUnit>> lus;

  BenchPool(const std::string& name, uint64_t size) {
    path = Dir() + "/" + name + "." + std::to_string(getpid());
    ::unlink(path.c_str());
    store::PoolOptions o;
    o.size_bytes = size;
    o.allocation_unit = 1u << 20;
    // Costs, not signals: a 128 GiB pool file on a disk with less free
    // space would otherwise raise THIN PROVISIONING SOFT THRESHOLD REACHED
    // (thin on thin) at its first allocation, and the bench stop there.
    o.soft_threshold_percent = 0;
    o.backing_check_interval_ms = store::kBackingSignalOff;
    bench::SetGrain(&o);
    auto p = store::Pool::Create(store::DefaultEnv(), path, o);
    if (!p.ok()) Die(p.status().message().c_str());
    pool = std::move(p.value());
  }
  ~BenchPool() {
    lus.clear();
    (void)pool->Close();
    pool.reset();
    ::unlink(path.c_str());
  }
  LogicalUnit& Lu(const std::string& name, uint64_t bytes) {
    if (!pool->CreateLun(name, bytes, kBs).ok()) Die("create lun");
    auto lun = pool->OpenLun(name);
    if (!lun.ok()) Die("open lun");
    LunConfig c;
    // Distinct in the first hex digits: the NAA uses 25 of them.
    char serial[64];
    std::snprintf(serial, sizeof(serial), "%08zx-b3c4-4d5e-8f60-0000000000%02zx",
                  0xbe000000 + lus.size(), lus.size());
    c.unit_serial = serial;
    c.copy_group = "bench";
    auto lu = LogicalUnit::Create(c, lun.value(), &dir);
    if (!lu.ok()) Die("logical unit");
    lus.push_back(lu.value());
    return *lus.back();
  }
};

// ---- 1. XCOPY clone vs READ+WRITE copy --------------------------------------

constexpr uint64_t kVmdk = 20 * kGiB;
BenchPool* g_copy = nullptr;
LogicalUnit* g_src = nullptr;

// The source VMDK: 1 GiB written for real in 1 MiB writes in shuffled order
// (so its extents are fragmented), then replicated to fill all 20 GiB with
// CloneRange, giving a fully mapped 20 GiB LUN of 20480 AU references.
void SetupCopySource() {
  if (g_copy) return;
  g_copy = new BenchPool("scsi-bench-copy", 64 * kGiB);
  g_src = &g_copy->Lu("vmdk", kVmdk);
  std::vector<uint64_t> order(kGiB / kMiB);
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  std::vector<uint8_t> buf(kMiB);
  std::mt19937_64 rng(7);
  for (uint64_t i : order) {
    for (size_t j = 0; j < buf.size(); j += 8) *reinterpret_cast<uint64_t*>(&buf[j]) = rng();
    Check(Exec(*g_src, Cdb16(0x8A, i * kMiB / kBs, kMiB / kBs), buf.data(), buf.size()), "fill");
  }
  for (uint64_t g = 1; g < kVmdk / kGiB; ++g) {
    auto s = g_copy->pool->CloneRange(g_src->lun(), 0, g_src->lun(), g * kGiB / kBs, kGiB / kBs,
                                      store::Durability::kDurable);
    if (!s.ok()) Die("replicate source");
  }
}

// One EXTENDED COPY parameter list: `segments` block->block segments of
// `blocks` each, starting at lba (same LBA on both sides).
std::vector<uint8_t> XcopyParams(const Naa& src, const Naa& dst, uint64_t lba, uint32_t blocks,
                                 uint32_t segments = 1) {
  std::vector<uint8_t> p(16 + 64 + 28 * segments, 0);
  p[1] = 3 << 3;  // LIST ID USAGE 11b
  PutBe16(&p[2], 64);
  PutBe32(&p[8], 28 * segments);
  for (int i = 0; i < 2; ++i) {
    uint8_t* d = &p[16 + 32 * i];
    d[0] = 0xE4;
    d[4] = 0x01;
    d[5] = 0x03;
    d[7] = 16;
    std::copy_n((i == 0 ? src : dst).data(), 16, d + 8);
    d[30] = kBs >> 8;
  }
  for (uint32_t i = 0; i < segments; ++i) {
    uint8_t* s = &p[80 + 28 * i];
    s[0] = 0x02;
    PutBe16(s + 2, 0x18);
    PutBe16(s + 4, 0);
    PutBe16(s + 6, 1);
    PutBe16(s + 10, static_cast<uint16_t>(blocks));
    PutBe64(s + 12, lba + uint64_t{i} * blocks);
    PutBe64(s + 20, lba + uint64_t{i} * blocks);
  }
  return p;
}

CommandResult SendXcopy(LogicalUnit& lu, std::vector<uint8_t>& p) {
  std::vector<uint8_t> cdb(16, 0);
  cdb[0] = 0x83;
  PutBe32(&cdb[10], static_cast<uint32_t>(p.size()));
  return Exec(lu, cdb, p.data(), p.size());
}

// ESXi-shaped: one segment of range(0) MiB per EXTENDED COPY, range(1)
// commands outstanding (ESXi keeps several in flight; the store's group
// commit lets concurrent durable commits share one fsync).
void BM_XcopyClone20GiB(benchmark::State& state) {
  SetupCopySource();
  const uint64_t seg = static_cast<uint64_t>(state.range(0)) * kMiB;
  const int queue = static_cast<int>(state.range(1));
  static int round = 0;
  for (auto _ : state) {
    LogicalUnit& dst = g_copy->Lu("clone" + std::to_string(round++), kVmdk);
    const uint64_t n = kVmdk / seg;
    std::atomic<uint64_t> next{0}, done{0};
    const uint64_t s0 = store::DefaultEnv()->sync_calls();
    const double c0 = ProcessCpu();
    const double t0 = Now(), stop = t0 + RunBudget();
    std::vector<std::thread> threads;
    for (int q = 0; q < queue; ++q) {
      threads.emplace_back([&] {
        for (uint64_t i; (i = next.fetch_add(1)) < n;) {
          auto p = XcopyParams(g_src->naa(), dst.naa(), i * seg / kBs, static_cast<uint32_t>(seg / kBs));
          Check(SendXcopy(*g_src, p), "xcopy");
          done++;
          if (Now() > stop) break;
        }
      });
    }
    for (auto& t : threads) t.join();
    const double t = Now() - t0;
    state.SetIterationTime(t);
    const std::string key =
        "xcopy_clone_" + std::to_string(state.range(0)) + "MiB_qd" + std::to_string(queue);
    g_total[key] = t * static_cast<double>(n) / static_cast<double>(done.load());  // all 20 GiB
    g_syncs[key] = static_cast<double>(store::DefaultEnv()->sync_calls() - s0) /
                   static_cast<double>(done.load());
    g_cpu[key] = (ProcessCpu() - c0) / static_cast<double>(done.load());
    state.counters["commands"] = static_cast<double>(done.load());
    state.counters["syncs_per_cmd"] = g_syncs[key];
  }
}
BENCHMARK(BM_XcopyClone20GiB)
    ->Args({4, 1})->Args({4, 8})->Args({4, 32})->Args({16, 1})->Args({16, 8})->Args({16, 32})
    ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// The same ESXi-shaped copy answered the way handler_cowstore.so answers it
// by default (COWSTORE_COMPLETION=async): `queue` commands in flight through
// a CommandPipeline with the plugin's 8 workers per LUN, each completed once
// a commit shared with the others made it durable, instead of `queue`
// threads each sleeping through its own command's commit (above).
// handler.cc's kDefaultAsyncWorkersPerLun; COWSTORE_BENCH_PIPELINE_WORKERS
// to try another count. As the plugin's, the pipeline runs commands
// IsPoolMetadataWork calls so (these clones) in its serial lane;
// COWSTORE_BENCH_PIPELINE_SERIAL=0 runs them on the workers instead.
int PipelineWorkers() {
  const char* s = std::getenv("COWSTORE_BENCH_PIPELINE_WORKERS");
  return s && std::atoi(s) > 0 ? std::atoi(s) : 8;
}
bool PipelineSerialLane() {
  const char* s = std::getenv("COWSTORE_BENCH_PIPELINE_SERIAL");
  return !(s && std::string(s) == "0");
}
void BM_XcopyClone20GiBPipeline(benchmark::State& state) {
  SetupCopySource();
  const uint64_t seg = static_cast<uint64_t>(state.range(0)) * kMiB;
  const int queue = static_cast<int>(state.range(1));
  static int round = 0;
  struct Slot {
    std::vector<uint8_t> cdb, params;
    iovec iov{};
  };
  for (auto _ : state) {
    LogicalUnit& dst = g_copy->Lu("pclone" + std::to_string(round++), kVmdk);
    const uint64_t n = kVmdk / seg;
    std::vector<Slot> slots(static_cast<size_t>(queue));
    std::vector<Slot*> free_slots;
    for (Slot& sl : slots) free_slots.push_back(&sl);
    std::mutex mu;
    std::condition_variable cv;
    uint64_t issued = 0, done = 0;
    CommandPipeline::Callbacks cb;
    cb.execute = [](void* tag, DeferredCommit* deferred) {
      auto* sl = static_cast<Slot*>(tag);
      return g_src->Execute(sl->cdb, std::span<const iovec>(&sl->iov, 1), deferred);
    };
    cb.complete = [&](std::span<const CommandPipeline::Finished> finished) {
      std::lock_guard<std::mutex> g(mu);
      for (const auto& f : finished) {
        Check(f.result, "xcopy (pipeline)");
        free_slots.push_back(static_cast<Slot*>(f.tag));
        done++;
      }
      cv.notify_one();
    };
    cb.commit_failure = [](const store::Status& st) { return CommitFailure(*g_src, st); };
    if (PipelineSerialLane())
      cb.serial = [](void* tag) { return IsPoolMetadataWork(static_cast<Slot*>(tag)->cdb); };
    const uint64_t s0 = store::DefaultEnv()->sync_calls();
    const double c0 = ProcessCpu();
    const double t0 = Now(), stop = t0 + RunBudget();
    {
      CommandPipeline pipeline(PipelineWorkers(), std::move(cb));
      for (;;) {
        Slot* sl = nullptr;
        uint64_t i = 0;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return !free_slots.empty(); });
          if (issued >= n || Now() > stop) break;
          sl = free_slots.back();
          free_slots.pop_back();
          i = issued++;
        }
        sl->params = XcopyParams(g_src->naa(), dst.naa(), i * seg / kBs, static_cast<uint32_t>(seg / kBs));
        sl->cdb.assign(16, 0);
        sl->cdb[0] = 0x83;
        PutBe32(&sl->cdb[10], static_cast<uint32_t>(sl->params.size()));
        sl->iov = {sl->params.data(), sl->params.size()};
        if (!pipeline.Submit(sl)) Die("pipeline refused a command");
      }
    }  // the destructor returns once every command issued was answered
    const double t = Now() - t0;
    state.SetIterationTime(t);
    const std::string key = "xcopy_clone_" + std::to_string(state.range(0)) + "MiB_qd" +
                            std::to_string(queue) + "_pipeline";
    g_total[key] = t * static_cast<double>(n) / static_cast<double>(done);
    g_syncs[key] = static_cast<double>(store::DefaultEnv()->sync_calls() - s0) / static_cast<double>(done);
    g_cpu[key] = (ProcessCpu() - c0) / static_cast<double>(done);
    state.counters["commands"] = static_cast<double>(done);
    state.counters["syncs_per_cmd"] = g_syncs[key];
  }
}
BENCHMARK(BM_XcopyClone20GiBPipeline)
    ->Args({4, 32})->Args({16, 32})
    ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// Many segments per command (sg_xcopy/ddpt style): 128 x 16 MiB segments.
void BM_XcopyClone20GiBMultiSegment(benchmark::State& state) {
  SetupCopySource();
  const uint64_t seg = 16 * kMiB;
  const uint32_t per = 128;
  for (auto _ : state) {
    LogicalUnit& dst = g_copy->Lu("clone_multi", kVmdk);
    const double t0 = Now();
    for (uint64_t off = 0; off < kVmdk; off += seg * per) {
      auto p = XcopyParams(g_src->naa(), dst.naa(), off / kBs, static_cast<uint32_t>(seg / kBs), per);
      Check(SendXcopy(*g_src, p), "xcopy");
    }
    const double t = Now() - t0;
    state.SetIterationTime(t);
    g_total["xcopy_clone_128x16MiB_segments"] = t;
  }
  state.counters["commands"] = static_cast<double>(kVmdk / (seg * per));
}
BENCHMARK(BM_XcopyClone20GiBMultiSegment)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_ReadWriteCopySample(benchmark::State& state) {
  SetupCopySource();
  const uint64_t sample = std::min(SampleBytes(), kVmdk);
  for (auto _ : state) {
    LogicalUnit& dst = g_copy->Lu("rwcopy", kVmdk);
    std::vector<uint8_t> buf(kMiB);
    const double t0 = Now();
    // Spread the sample over the whole VMDK so it is not all one cached GiB.
    const uint64_t stride = kVmdk / sample * kMiB;
    for (uint64_t off = 0; off < kVmdk; off += stride) {
      Check(Exec(*g_src, Cdb16(0x88, off / kBs, kMiB / kBs), buf.data(), buf.size()), "read");
      Check(Exec(dst, Cdb16(0x8A, off / kBs, kMiB / kBs), buf.data(), buf.size()), "write");
    }
    const double t = Now() - t0;
    state.SetIterationTime(t);
    g_total["rw_copy_sample"] = t;
    g_total["rw_copy_sample_bytes"] = static_cast<double>(sample);
  }
}
BENCHMARK(BM_ReadWriteCopySample)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- 2. Eager-zero by WRITE SAME vs WRITE of zeros --------------------------

constexpr uint64_t kEagerZero = 100 * kGiB;

void BM_EagerZero100GiBWriteSame(benchmark::State& state) {
  for (auto _ : state) {
    BenchPool bp("scsi-bench-zero", 128 * kGiB);
    LogicalUnit& lu = bp.Lu("thick", kEagerZero);
    std::vector<uint8_t> zero(kBs, 0);
    const double t0 = Now();
    for (uint64_t off = 0; off < kEagerZero; off += kMiB) {
      Check(Exec(lu, Cdb16(0x93, off / kBs, kMiB / kBs), zero.data(), zero.size()), "write same");
    }
    const double t = Now() - t0;
    state.SetIterationTime(t);
    g_total["ws_zero_100GiB"] = t;
  }
  state.counters["commands"] = static_cast<double>(kEagerZero / kMiB);
}
BENCHMARK(BM_EagerZero100GiBWriteSame)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_EagerZeroWriteZerosSample(benchmark::State& state) {
  const uint64_t sample = std::min(SampleBytes(), kEagerZero);
  for (auto _ : state) {
    BenchPool bp("scsi-bench-wzero", 128 * kGiB);
    LogicalUnit& lu = bp.Lu("thick", kEagerZero);
    std::vector<uint8_t> zero(kMiB, 0);
    const double t0 = Now();
    const uint64_t stride = kEagerZero / sample * kMiB;
    for (uint64_t off = 0; off < kEagerZero; off += stride) {
      Check(Exec(lu, Cdb16(0x8A, off / kBs, kMiB / kBs), zero.data(), zero.size()), "write zeros");
    }
    const double t = Now() - t0;
    state.SetIterationTime(t);
    g_total["write_zero_sample"] = t;
    g_total["write_zero_sample_bytes"] = static_cast<double>(sample);
  }
}
BENCHMARK(BM_EagerZeroWriteZerosSample)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- 3. COMPARE AND WRITE vs durable WRITE, one block -----------------------

BenchPool* g_lat = nullptr;
LogicalUnit* g_lat_lu = nullptr;
void SetupLatency() {
  if (g_lat) return;
  g_lat = new BenchPool("scsi-bench-lat", 2 * kGiB);
  g_lat_lu = &g_lat->Lu("vmfs", 1 * kGiB);
  std::vector<uint8_t> blk(kBs, 0);
  // Map the heartbeat region first, as on a formatted VMFS.
  Check(Exec(*g_lat_lu, Cdb16(0x8A, 0, 1), blk.data(), blk.size()), "init");
}

void BM_CompareAndWrite1Block(benchmark::State& state) {
  SetupLatency();
  std::vector<uint8_t> buf(2 * kBs, 0);
  uint64_t v = 0;
  std::vector<uint8_t> cdb(16, 0);
  cdb[0] = 0x89;
  cdb[13] = 1;
  // Start from a known block.
  std::vector<uint8_t> blk(kBs, 0);
  Check(Exec(*g_lat_lu, Cdb16(0x8A, 0, 1), blk.data(), blk.size()), "reset");
  double t0 = Now();
  for (auto _ : state) {
    PutBe64(&buf[0], v);        // compare: the current heartbeat
    PutBe64(&buf[kBs], v + 1);  // write: the next one
    Check(Exec(*g_lat_lu, cdb, buf.data(), buf.size()), "caw");
    ++v;
  }
  g_total["caw_1block"] = (Now() - t0) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_CompareAndWrite1Block)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_DurableWrite1Block(benchmark::State& state) {
  SetupLatency();
  std::vector<uint8_t> blk(kBs, 0x5A);
  uint64_t v = 0;
  double t0 = Now();
  for (auto _ : state) {
    PutBe64(&blk[0], v++);
    Check(Exec(*g_lat_lu, Cdb16(0x8A, 1, 1), blk.data(), blk.size()), "write");
  }
  g_total["write_1block"] = (Now() - t0) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_DurableWrite1Block)->MinTime(2.0)->UseRealTime()->Unit(benchmark::kMicrosecond);

// 1-block CAW latency on the latency LU while 32 threads send 16 MiB XCOPYs
// from the VMDK into another LU of the same pool (the VMFS heartbeat while
// ESXi clones a VMDK on the same datastore).
void BM_CompareAndWriteUnderXcopyLoad(benchmark::State& state) {
  SetupCopySource();
  LogicalUnit& hb = g_copy->Lu("heartbeat", kGiB);  // same pool as the copy
  for (auto _ : state) {
    LogicalUnit& dst = g_copy->Lu("load", kVmdk);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> next{0};
    const uint64_t seg = 16 * kMiB, n = kVmdk / seg;
    std::vector<std::thread> load;
    for (int q = 0; q < 32; ++q)
      load.emplace_back([&] {
        while (!stop) {
          uint64_t i = next.fetch_add(1) % n;
          auto p = XcopyParams(g_src->naa(), dst.naa(), i * seg / kBs, static_cast<uint32_t>(seg / kBs));
          Check(SendXcopy(*g_src, p), "xcopy");
        }
      });
    std::vector<uint8_t> buf(2 * kBs, 0), blk(kBs, 0);
    std::vector<uint8_t> cdb(16, 0);
    cdb[0] = 0x89;
    cdb[13] = 1;
    PutBe64(&cdb[2], 2);
    Check(Exec(hb, Cdb16(0x8A, 2, 1), blk.data(), blk.size()), "reset");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<double> lat;
    uint64_t v = 0;
    const double end = Now() + 5.0;
    while (Now() < end) {
      PutBe64(&buf[0], v);
      PutBe64(&buf[kBs], v + 1);
      const double t = Now();
      Check(Exec(hb, cdb, buf.data(), buf.size()), "caw");
      lat.push_back(Now() - t);
      ++v;
    }
    stop = true;
    for (auto& t : load) t.join();
    std::sort(lat.begin(), lat.end());
    g_total["caw_load_p50"] = lat[lat.size() / 2];
    g_total["caw_load_p99"] = lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
    g_total["caw_load_max"] = lat.back();
    g_total["caw_load_n"] = static_cast<double>(lat.size());
    g_total["load_xcopy_per_s"] = static_cast<double>(next.load()) / 5.1;
    state.counters["caw_p99_ms"] = g_total["caw_load_p99"] * 1e3;
  }
}
BENCHMARK(BM_CompareAndWriteUnderXcopyLoad)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

const char* Verdict(bool ok) { return ok ? "PASS" : "MISS"; }

void Summary() {
  auto has = [](const char* k) { return g_total.count(k) != 0; };
  std::printf("\n==== scsi_bench summary (same run; WCE=0, every GOOD durable; pool dir %s) ====\n",
              Dir().c_str());
  if (has("rw_copy_sample")) {
    const double rw = g_total["rw_copy_sample"] * (static_cast<double>(kVmdk) / g_total["rw_copy_sample_bytes"]);
    std::printf("READ+WRITE copy of 20 GiB: %.1f s (extrapolated from %.0f MiB in %.2f s)\n", rw,
                g_total["rw_copy_sample_bytes"] / kMiB, g_total["rw_copy_sample"]);
    for (const auto& [k, v] : g_total) {
      if (k.rfind("xcopy_clone_", 0) != 0) continue;
      const double r = v / rw;
      const bool multi = k.find("segments") != std::string::npos;
      const double goal = k.find("_16MiB_qd32") != std::string::npos ? 2000
                          : k.find("_4MiB_qd32") != std::string::npos ? 1000 : 0;
      std::printf("%s of 20 GiB: %.3f s -> ratio 1/%.0f", k.c_str(), v, 1.0 / r);
      if (!multi && g_syncs.count(k)) std::printf(", %.3f fdatasyncs per command", g_syncs[k]);
      if (!multi && g_cpu.count(k)) std::printf(", process CPU %.1f us per command", g_cpu[k] * 1e6);
      if (goal > 0) std::printf(" (goal <= 1/%.0f) %s", goal, Verdict(1.0 / r >= goal));
      std::printf("\n");
    }
  }
  if (has("write_zero_sample") && has("ws_zero_100GiB")) {
    const double wz = g_total["write_zero_sample"] * (static_cast<double>(kEagerZero) / g_total["write_zero_sample_bytes"]);
    const double r = g_total["ws_zero_100GiB"] / wz;
    std::printf("WRITE of zeros, 100 GiB: %.1f s (extrapolated from %.0f MiB in %.2f s)\n", wz,
                g_total["write_zero_sample_bytes"] / kMiB, g_total["write_zero_sample"]);
    std::printf("WRITE SAME 1 MiB x 102400 (100 GiB, thin LUN, one command at a time): %.3f s "
                "(measured in full) -> ratio 1/%.0f (the mapped-LUN, 32-in-flight goal is in "
                "bench/store/commit_bench)\n",
                g_total["ws_zero_100GiB"], 1.0 / r);
  }
  if (has("caw_1block") && has("write_1block")) {
    const double r = g_total["caw_1block"] / g_total["write_1block"];
    std::printf("1-block COMPARE AND WRITE %.1f us vs durable WRITE %.1f us -> %.2fx (goal <= 1.5x) %s\n",
                g_total["caw_1block"] * 1e6, g_total["write_1block"] * 1e6, r, Verdict(r <= 1.5));
  }
  if (has("caw_load_p99"))
    std::printf("1-block COMPARE AND WRITE while 32 16 MiB XCOPYs run on another LU (%.0f XCOPY/s): "
                "%.0f CAWs, p50 %.2f ms, p99 %.2f ms, max %.2f ms (goal p99 <= 10 ms) %s\n",
                g_total["load_xcopy_per_s"], g_total["caw_load_n"], g_total["caw_load_p50"] * 1e3,
                g_total["caw_load_p99"] * 1e3, g_total["caw_load_max"] * 1e3,
                Verdict(g_total["caw_load_p99"] <= 0.010));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  bench::PrintPoolFormat();
  Summary();
  delete g_copy;
  delete g_lat;
  benchmark::Shutdown();
  return 0;
}
