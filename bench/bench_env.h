// SPDX-License-Identifier: Apache-2.0
// What every benchmark program reads from its environment, and its clock.
// COWSTORE_BENCH_DIR: where pools and baseline files go (default ".": put it
// on the file system you want measured). COWSTORE_BENCH_SAMPLE_MIB: how many
// MiB a data-path baseline actually copies (default 1024) before it is
// extrapolated to the full size. COWSTORE_BENCH_GRAIN: a sharing unit in
// bytes (e.g. 4096) below the pools' allocation unit makes them format 3
// pools at that grain (cowctl pool create --grain); unset: format 2.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "handler/store/pool.h"

namespace cowstore::bench {

inline std::string Dir() {
  const char* d = std::getenv("COWSTORE_BENCH_DIR");
  return d ? d : ".";
}

inline uint64_t SampleBytes() {
  const char* s = std::getenv("COWSTORE_BENCH_SAMPLE_MIB");
  return (s ? std::strtoull(s, nullptr, 10) : 1024) * (1ull << 20);
}

// COWSTORE_BENCH_GRAIN applied to a pool about to be made (its AU set).
inline void SetGrain(store::PoolOptions* o) {
  const char* s = std::getenv("COWSTORE_BENCH_GRAIN");
  const uint64_t grain = s ? std::strtoull(s, nullptr, 10) : 0;
  if (grain == 0 || grain >= o->allocation_unit) return;
  o->format = 3;
  o->grain = static_cast<uint32_t>(grain);
}

// Prints the format SetGrain gives the pools, for a benchmark's summary.
inline void PrintPoolFormat() {
  store::PoolOptions o;  // a 1 MiB AU: every grain SetGrain takes is below it
  SetGrain(&o);
  const std::string text = o.format == 3 ? "format 3, grain " + std::to_string(o.grain) + " bytes" : "format 2";
  std::printf("pools: %s (COWSTORE_BENCH_GRAIN)\n", text.c_str());
}

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace cowstore::bench
