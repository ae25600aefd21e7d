#include "handler/plugin/pool_registry.h"

#include <utility>

#include "handler/plugin/log.h"

namespace cowstore::plugin {

PoolRegistry& PoolRegistry::Global() {
  static PoolRegistry* const registry = new PoolRegistry(store::DefaultEnv());
  return *registry;
}

store::Result<std::shared_ptr<store::Pool>> PoolRegistry::Acquire(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(path);
  if (it == pools_.end()) {
    auto opened = store::Pool::Open(env_, path);
    if (!opened.ok()) return opened.status();
    it = pools_.emplace(path, Entry{std::move(opened).value(), 0}).first;
  }
  ++it->second.refs;
  // Each reference gets its own control block whose deleter drops one count;
  // the Pool object itself is owned by the entry.
  return std::shared_ptr<store::Pool>(it->second.pool.get(),
                                      [this, path](store::Pool*) { Release(path); });
}

void PoolRegistry::Release(const std::string& path) {
  std::unique_ptr<store::Pool> closing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pools_.find(path);
    if (it == pools_.end() || --it->second.refs > 0) return;
    closing = std::move(it->second.pool);
    // Close under the lock: a concurrent Acquire of the same path must wait
    // until the file lock is released, or its Open would fail with kBusy.
    store::Status st = closing->Close();
    if (!st.ok()) COWSTORE_LOG_ERROR(nullptr, "closing pool " + path + ": " + st.ToString());
    pools_.erase(it);
  }
}

size_t PoolRegistry::open_pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pools_.size();
}

}  // namespace cowstore::plugin
