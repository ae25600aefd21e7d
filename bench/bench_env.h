// SPDX-License-Identifier: Apache-2.0
// What every benchmark program reads from its environment, and its clock.
// COWSTORE_BENCH_DIR: where pools and baseline files go (default ".": put it
// on the file system you want measured). COWSTORE_BENCH_SAMPLE_MIB: how many
// MiB a data-path baseline actually copies (default 1024) before it is
// extrapolated to the full size.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace cowstore::bench {

inline std::string Dir() {
  const char* d = std::getenv("COWSTORE_BENCH_DIR");
  return d ? d : ".";
}

inline uint64_t SampleBytes() {
  const char* s = std::getenv("COWSTORE_BENCH_SAMPLE_MIB");
  return (s ? std::strtoull(s, nullptr, 10) : 1024) * (1ull << 20);
}

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace cowstore::bench
