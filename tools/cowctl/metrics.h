// SPDX-License-Identifier: Apache-2.0
// `cowctl metrics`: the pools' space and the handler's per-LUN counters in
// the Prometheus text exposition format (version 0.0.4), for
// node_exporter's textfile collector: HELP and TYPE before each family's
// samples, base units (bytes, not blocks), counters named *_total.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "handler/control/server.h"  // LunCounters
#include "handler/store/pool.h"

namespace cowstore::cowctl {

// What one pool gives the exporter.
struct PoolSample {
  std::string pool;
  std::optional<store::SpaceInfo> space;  // nullopt: it could not be read (cowstore_pool_up 0)
  bool served = false;                    // by a running handler
  // The handler's totals since each LUN was opened; nullopt when not served.
  std::optional<std::vector<control::LunCounters>> counters;
};

std::string PrometheusText(const std::vector<PoolSample>& pools);

// Writes `text` to `path` so that a reader sees the old file or the new one,
// never a part: a temporary file beside it, fsync, rename. Mode 0644 (the
// collector runs as another user). Throws UserError.
void WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode = 0644);

}  // namespace cowstore::cowctl
