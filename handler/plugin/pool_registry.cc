// SPDX-License-Identifier: Apache-2.0
#include "handler/plugin/pool_registry.h"

#include <exception>
#include <utility>
#include <vector>

#include "handler/control/server.h"
#include "handler/plugin/device.h"
#include "handler/plugin/log.h"
#include "handler/scsi/logical_unit.h"

namespace cowstore::plugin {

// The LogicalUnits of one pool served by this process, for the control
// socket's counters. Raw pointers, on purpose: a Device unregisters its
// LogicalUnit (under `mu`) before it drops its reference, so a pointer read
// under `mu` is alive; and the server's threads never hold a reference, so
// none can be the one that drops the last reference to a LUN, and with it
// the pool and this very server. Counters() may run on several connection
// threads at once: `mu` and the atomic counters make that safe.
struct PoolRegistry::PoolLuns {
  std::mutex mu;
  std::map<std::string, scsi::LogicalUnit*> luns;  // guarded by mu

  // The control socket's `lun-rollback`. Under `mu` throughout: the LU
  // cannot go away meanwhile, and a LUN not served now cannot start being
  // served (Device registers before its first command) until the swap is
  // done, so no initiator sees the change without the unit attention.
  store::Status Rollback(store::Pool& pool, const std::string& lun, const std::string& snapshot) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = luns.find(lun);
    if (it != luns.end()) return it->second->Rollback(snapshot);
    return pool.RollbackLun(lun, snapshot);
  }

  // The control socket's `counters`: totals since each LUN was opened.
  std::vector<control::LunCounters> Counters() {
    std::vector<control::LunCounters> out;
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [name, lu] : luns) {
      const scsi::LuCounters& c = lu->counters();
      const uint64_t bs = lu->lun().block_size();
      auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
      out.push_back({name,
                     {{"commands", get(c.commands)},
                      {"read_bytes", get(c.read_blocks) * bs},
                      {"write_bytes", get(c.written_blocks) * bs},
                      {"ats", get(c.compare_and_writes)},
                      {"ats_miscompares", get(c.miscompares)},
                      {"xcopy", get(c.xcopy_commands)},
                      {"clone_blocks", get(c.xcopy_cloned_blocks)},
                      {"copy_blocks", get(c.xcopy_copied_blocks)},
                      {"write_same_blocks", get(c.write_same_blocks)},
                      {"unmap_blocks", get(c.unmapped_blocks)},
                      {"check_conditions", get(c.check_conditions)},
                      {"no_space_errors", get(c.no_space_errors)},
                      {"internal_errors", get(c.internal_errors)}}});
    }
    return out;
  }
};

PoolRegistry::PoolRegistry(store::Env* env, bool control) : env_(env), control_(control) {}
PoolRegistry::~PoolRegistry() = default;

PoolRegistry& PoolRegistry::Global() {
  static PoolRegistry* const registry = new PoolRegistry(store::DefaultEnv());
  return *registry;
}

store::Result<std::shared_ptr<store::Pool>> PoolRegistry::Acquire(const std::string& path,
                                                                  const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = pools_.find(path);
  // A close of this pool is under way (its server finishing a request): the
  // file lock is released only when it is done, so wait for it and open the
  // pool anew. Other pools are not held up meanwhile.
  while (it != pools_.end() && it->second.closing) {
    closed_.wait(lock);
    it = pools_.find(path);
  }
  if (it == pools_.end()) {
    auto opened = store::Pool::Open(env_, path);
    if (!opened.ok()) return opened.status();
    Entry entry;
    entry.pool = std::move(opened).value();
    entry.luns = std::make_shared<PoolLuns>();
    if (control_) {
      control::ServerOptions options;
      options.run_dir = control::DefaultRunDir();
      options.pool_name = name;
      options.pool_path = path;
      options.counters = [luns = entry.luns] { return luns->Counters(); };
      options.rollback = [luns = entry.luns, pool = entry.pool.get()](const std::string& lun,
                                                                      const std::string& snap) {
        return luns->Rollback(*pool, lun, snap);
      };
      auto server = control::Server::Start(*entry.pool, std::move(options));
      if (server.ok()) {
        entry.server = std::move(server).value();
        COWSTORE_LOG_INFO(nullptr, "pool " + path + ": control socket " + entry.server->path());
      } else {
        COWSTORE_LOG_WARN(nullptr, "pool " + path + ": no control socket (cowctl cannot manage "
                                   "it while it is served): " + server.status().ToString());
      }
    }
    it = pools_.emplace(path, std::move(entry)).first;
  }
  ++it->second.refs;
  // Each reference gets its own control block whose deleter drops one count;
  // the Pool object itself is owned by the entry.
  return std::shared_ptr<store::Pool>(it->second.pool.get(),
                                      [this, path](store::Pool*) { Release(path); });
}

void PoolRegistry::SetLogicalUnit(const std::string& path, const std::string& lun,
                                  scsi::LogicalUnit* lu) {
  std::shared_ptr<PoolLuns> luns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(path);
    if (it == pools_.end()) return;
    luns = it->second.luns;
  }
  std::lock_guard<std::mutex> lock(luns->mu);
  if (lu) {
    luns->luns[lun] = lu;
  } else {
    luns->luns.erase(lun);
  }
}

void PoolRegistry::Release(const std::string& path) {
  std::unique_ptr<control::Server> server;
  store::Pool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(path);
    if (it == pools_.end() || --it->second.refs > 0) return;
    it->second.closing = true;
    server = std::move(it->second.server);
    pool = it->second.pool.get();
  }
  // Stop serving cowctl before the pool goes, without the registry's mutex:
  // stopping waits for the requests running (an import runs to its end, a
  // reply may wait kSendTimeoutMs for a client), and meanwhile other pools'
  // LUNs must open and close. The entry stays, marked closing, so that an
  // Acquire of this path waits until the file lock is released instead of
  // failing with kBusy.
  server.reset();
  store::Status st = pool->Close();
  // Release runs in a shared_ptr's deleter (noexcept): a message without
  // memory is dropped, the entry below must go regardless.
  try {
    if (st.code() == store::Code::kNotDurable) {
      // The pool goes all the same (its last LUN closed; nothing could
      // grow it while this process holds its lock with no control socket):
      // what was buffered is lost with it, and the admin must know what to
      // fix.
      COWSTORE_LOG_ERROR(nullptr, "closing pool " + path +
                                      ": changes were applied in memory (acknowledged buffered "
                                      "writes, LUN changes) but are " + NotDurableAdvice() +
                                      ". The pool is closed now, so they are lost: it reopens at "
                                      "its last durable state; make room before serving it again (" +
                                      st.ToString() + ")");
    } else if (!st.ok()) {
      COWSTORE_LOG_ERROR(nullptr, "closing pool " + path + ": " + st.ToString());
    }
  } catch (const std::exception&) {
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pools_.erase(path);
  }
  closed_.notify_all();
}

size_t PoolRegistry::open_pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pools_.size();
}

}  // namespace cowstore::plugin
