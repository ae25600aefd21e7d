// SPDX-License-Identifier: Apache-2.0
// One store::Pool per pool path in the daemon, shared by every LUN of that
// pool that is open (a pool file admits one opener: its lock is exclusive),
// and with it the pool's control socket (handler/control), through which
// cowctl manages a pool the daemon holds.
//
// Acquire() opens the pool on first use, starts its control server and
// hands out references; when the last reference goes (whichever thread
// drops it: a device close, or another LUN's EXTENDED COPY that still held
// it) the server is stopped and the pool flushed and closed.
//
// Thread safety: all methods are safe for concurrent use. Opening happens
// under the registry's mutex; closing does not: stopping a control server
// waits for its running requests (an import, a reply to a slow client), so
// it runs outside the mutex and never holds up the LUNs of other pools. A
// pool being closed stays in the registry, marked closing, and an Acquire
// of its path waits for the close to finish (the pool's file lock) before
// opening it again. The control server's callbacks never take the
// registry's mutex.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "handler/store/env.h"
#include "handler/store/pool.h"

namespace cowstore::scsi {
class LogicalUnit;
}
namespace cowstore::control {
class Server;
}

namespace cowstore::plugin {

class PoolRegistry {
 public:
  // `env` must outlive the registry. With `control` false no control server
  // is started (tests of the registry itself).
  explicit PoolRegistry(store::Env* env, bool control = true);
  ~PoolRegistry();
  PoolRegistry(const PoolRegistry&) = delete;
  PoolRegistry& operator=(const PoolRegistry&) = delete;

  // The registry of the process (never destroyed: the daemon may exit with
  // LUNs open, and closing pools from a static destructor while command
  // threads still run would be worse than the journal replay at next open).
  static PoolRegistry& Global();

  // A reference to the open pool at `path` (named `name`: the control
  // socket is <run_dir>/<name>.sock), opening it if needed. Errors are the
  // store's (kNotFound when there is no pool file, kBusy when another
  // process holds it, ...). A control server that cannot start is logged,
  // not an error.
  store::Result<std::shared_ptr<store::Pool>> Acquire(const std::string& path,
                                                      const std::string& name);

  // The LogicalUnit serving `lun` of the pool at `path`, for the control
  // socket's counters (replaces an earlier one; null removes it). The
  // caller keeps `lu` alive until it has replaced or removed it.
  void SetLogicalUnit(const std::string& path, const std::string& lun,
                      scsi::LogicalUnit* lu);

  // Number of distinct pools open (tests).
  size_t open_pools() const;

 private:
  struct PoolLuns;
  struct Entry {
    std::unique_ptr<store::Pool> pool;
    std::shared_ptr<PoolLuns> luns;
    std::unique_ptr<control::Server> server;
    size_t refs = 0;
    bool closing = false;  // Release is stopping the server and closing the pool
  };
  void Release(const std::string& path);

  store::Env* const env_;
  const bool control_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> pools_;  // guarded by mu_
  std::condition_variable closed_;      // an entry marked closing was erased
};

}  // namespace cowstore::plugin
