// One store::Pool per pool path in the daemon, shared by every LUN of that
// pool that is open (a pool file admits one opener: its lock is exclusive).
//
// Acquire() opens the pool on first use and hands out references; the pool
// is flushed and closed when the last reference goes, whichever thread drops
// it (a device close, or another LUN's EXTENDED COPY that still held it).
//
// Thread safety: all methods are safe for concurrent use. Opening and
// closing happen under the registry's mutex, so a close never races a
// re-open of the same path.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "handler/store/env.h"
#include "handler/store/pool.h"

namespace cowstore::plugin {

class PoolRegistry {
 public:
  // `env` must outlive the registry.
  explicit PoolRegistry(store::Env* env) : env_(env) {}
  PoolRegistry(const PoolRegistry&) = delete;
  PoolRegistry& operator=(const PoolRegistry&) = delete;

  // The registry of the process (never destroyed: the daemon may exit with
  // LUNs open, and closing pools from a static destructor while command
  // threads still run would be worse than the journal replay at next open).
  static PoolRegistry& Global();

  // A reference to the open pool at `path`, opening it if needed. Errors are
  // the store's (kNotFound when there is no pool file, kBusy when another
  // process holds it, ...).
  store::Result<std::shared_ptr<store::Pool>> Acquire(const std::string& path);

  // Number of distinct pools open (tests).
  size_t open_pools() const;

 private:
  struct Entry {
    std::unique_ptr<store::Pool> pool;
    size_t refs = 0;
  };
  void Release(const std::string& path);

  store::Env* const env_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> pools_;  // guarded by mu_
};

}  // namespace cowstore::plugin
