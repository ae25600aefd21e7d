// SPDX-License-Identifier: Apache-2.0
// Checkpoints: the whole metadata state (EncodeState) written as a chain of
// chunks into free AUs, one chunk per AU, each naming the next. A superblock
// written after the chain (and a sync) makes it current; the superblock
// carries the payload's size and CRC, so a chain is only ever read whole.
//
// The chunk format is in meta.h; FormatV2 (format_v2.h) writes and reads
// chains; Core::CheckpointLocked (checkpoint.cc) decides when to write one
// and frees what it replaces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/status.h"

namespace cowstore::store {

// AUs a checkpoint payload of `bytes` needs (at least one: an empty pool
// still has a chain).
uint64_t CheckpointUnits(uint64_t bytes, uint32_t au);

// Writes `payload` as a chain into `aus` (in order, CheckpointUnits of them),
// stamped with the superblock `seq` and pool `uuid`. Does not sync.
Status WriteCheckpointChain(File* file, uint64_t data_offset, uint32_t au,
                            const std::vector<uint64_t>& aus, const std::string& payload,
                            uint64_t seq, const Uuid& uuid);

// Reads the chain superblock `sb` points at (sb.ckpt_first must not be kNone)
// from a pool of `units` AUs: the payload and the AUs holding it.
// kCorruption if the chain leaves the pool, a chunk is damaged or stale, or
// the payload's size or CRC differ from the superblock's.
Status ReadCheckpointChain(File* file, const Superblock& sb, uint64_t units, std::string* payload,
                           std::vector<uint64_t>* aus);

}  // namespace cowstore::store
