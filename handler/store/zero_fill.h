// SPDX-License-Identifier: Apache-2.0
// Making a range of a File read as zeros, whatever its discard does.
#pragma once

#include <cstdint>

#include "handler/store/env.h"
#include "handler/store/status.h"

namespace cowstore::store {

// [off, off + n) reads as zeros once this returns ok (durable at the next
// File::Sync): a hole punch where the File's discard zeroes
// (File::DiscardZeroes), else zeros written over it, 1 MiB a call. For what
// must read as zeros, not merely be freed: a journal's space before records
// go there (stale bytes may frame as records), never a grain freed for
// reuse (the data path trusts no freed grain on such a File).
Status ZeroFill(File* file, uint64_t off, uint64_t n);

}  // namespace cowstore::store
