// SPDX-License-Identifier: Apache-2.0
// A process-wide LogicalUnit on an in-memory pool for the fuzz targets, plus
// a second LU in the same copy group (so EXTENDED COPY can reach another LU)
// and the invariants every CommandResult must satisfy.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "handler/scsi/deferred_commit.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/lun_directory.h"
#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::scsi::fuzz {

struct FuzzWorld {
  store::FaultInjectionEnv env;
  std::unique_ptr<store::Pool> pool;
  LunDirectory directory;
  std::shared_ptr<LogicalUnit> lu;
  std::shared_ptr<LogicalUnit> peer;
};

inline FuzzWorld& World() {
  static FuzzWorld* w = [] {
    auto* world = new FuzzWorld();
    store::PoolOptions o;
    o.size_bytes = 40ull << 20;
    o.allocation_unit = 1u << 20;
    auto pool = store::Pool::Create(&world->env, "/fuzz", o);
    if (!pool.ok()) std::abort();
    world->pool = std::move(pool.value());
    auto make = [&](const char* name, const char* serial) {
      if (!world->pool->CreateLun(name, 8ull << 20, 512).ok()) std::abort();
      auto lun = world->pool->OpenLun(name);
      if (!lun.ok()) std::abort();
      LunConfig c;
      c.unit_serial = serial;
      c.copy_group = "fuzz";
      c.max_transfer_bytes = 1u << 20;
      auto lu = LogicalUnit::Create(c, lun.value(), &world->directory);
      if (!lu.ok()) std::abort();
      return lu.value();
    };
    world->lu = make("a", "a0a0a0a0-0000-4000-8000-000000000001");
    world->peer = make("b", "b0b0b0b0-0000-4000-8000-000000000002");
    return world;
  }();
  return *w;
}

// Invariants of any result; aborts (a crash the fuzzer reports) if broken.
inline void CheckResult(const CommandResult& r, size_t buffer_len) {
  if (r.data_in_length > buffer_len) std::abort();
  if (r.status == ScsiStatus::kCheckCondition) {
    if (r.sense_length != CommandResult::kSenseLength) std::abort();
    if ((r.sense[0] & 0x7F) != 0x70) std::abort();
  } else if (r.sense_length != 0) {
    std::abort();
  }
}

// Runs one command; `deferred`: as the plugin's asynchronous mode does
// (deferred_commit.h), executed with its commit deferred, then committed.
inline CommandResult Run(LogicalUnit& lu, std::span<const uint8_t> cdb, uint8_t* data, size_t len,
                         bool deferred = false) {
  iovec v{data, len};
  const std::span<const iovec> iov(&v, len ? 1 : 0);
  CommandResult r;
  if (deferred) {
    DeferredCommit commit;
    r = lu.Execute(cdb, iov, &commit);
    const store::Status s = commit.Commit();
    if (r.good() && !s.ok()) r = CommitFailure(lu, s);
  } else {
    r = lu.Execute(cdb, iov);
  }
  CheckResult(r, len);
  return r;
}

}  // namespace cowstore::scsi::fuzz
