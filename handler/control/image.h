// Raw images in and out of a pool: the copy loops behind `cowctl lun import`
// and `lun export`, shared by cowctl (pool opened directly) and the control
// server (pool held by the handler), so both behave the same.
//
// Import makes a new LUN and writes only the non-zero parts of the source:
// a new LUN reads zeros, so zero runs stay unmapped. Export writes a file
// sparse (holes where the LUN is unmapped or zero) or a block device in
// full. Errors are store Status values whose messages name the file.
#pragma once

#include <cstdint>
#include <string>

#include "handler/store/pool.h"

namespace cowstore::control {

struct CopyStats {
  uint64_t written = 0;  // bytes written to the destination
  uint64_t skipped = 0;  // bytes left unmapped / as holes
};

// Creates LUN `name` from the raw image or block device at `path`. `size` 0:
// the source's size rounded up to a block. On failure the LUN is deleted.
store::Result<store::LunInfo> ImportImage(store::Pool& pool, const std::string& name, const std::string& path,
                                          uint32_t block_size, uint64_t size, CopyStats* stats,
                                          store::ProgressFn progress = nullptr, void* ctx = nullptr);

// Writes LUN `name` to `path` (a new or, with `force`, replaced regular
// file; or a block device at least as large as the LUN).
store::Status ExportImage(store::Pool& pool, const std::string& name, const std::string& path, bool force,
                          CopyStats* stats, store::ProgressFn progress = nullptr, void* ctx = nullptr);

}  // namespace cowstore::control
