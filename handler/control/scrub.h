// SPDX-License-Identifier: Apache-2.0
// Scrub: read every mapped block of every LUN of a pool and report the
// ranges that cannot be read, with the LUN they belong to. `pool check`
// verifies metadata only; this is its data counterpart, shared by cowctl
// (pool not served) and the control server (`scrub` request).
//
// What it can find: ranges whose read fails (EIO from the disk, a pool file
// cut short). What it cannot: data changed silently on the media, since the
// store keeps no data checksums; a read that succeeds is taken as good.
//
// Each LUN is read through the store, range by range of its mapped blocks,
// in 1 MiB reads; a failed read is retried allocation unit by allocation
// unit to narrow the unreadable range. An allocation unit shared by clones
// is read once per LUN that maps it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "handler/store/pool.h"

namespace cowstore::control {

struct UnreadableRange {
  std::string lun;
  uint64_t lba = 0;    // in the LUN's blocks
  uint64_t count = 0;  // blocks
  std::string error;   // the store's message for the first failed read
};

struct ScrubReport {
  uint64_t luns = 0;
  uint64_t mapped_bytes = 0;  // what there was to read
  uint64_t read_bytes = 0;    // what was read without error
  std::vector<UnreadableRange> unreadable;
  bool clean() const { return unreadable.empty(); }
};

// `progress` gets bytes read (or found unreadable) of the pool's mapped
// bytes; `cancelled` (may be empty) is polled between reads: the scrub then
// stops with an error. A LUN deleted or resized meanwhile is read as it is
// found.
store::Result<ScrubReport> Scrub(store::Pool& pool, store::ProgressFn progress = nullptr, void* ctx = nullptr,
                                 const std::function<bool()>& cancelled = nullptr);

}  // namespace cowstore::control
