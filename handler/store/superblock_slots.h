// SPDX-License-Identifier: Apache-2.0
// The writer rule for the two superblock slots, one for formats 2 and 3.
//
// A superblock replacing a copy an open may still choose goes to slot
// seq % 2 first, synced, then to the other, synced. A cut during the first
// write leaves the other slot's older copy whole; a cut during the second
// leaves the first slot's new copy whole; no cut finds both slots in
// flight. Once both are written either copy alone opens the pool exactly
// (an older copy could name a checkpoint that has since been freed).
// Create writes both with no sync between: no older copy exists there.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "handler/store/env.h"
#include "handler/store/meta.h"  // kSuperblockSlot

namespace cowstore::store {

// `before(slot)` runs before each slot's write (format 3 marks the slot it
// may leave torn); returns with both copies on stable storage.
template <typename Before>
Status WriteSlotsInOrder(File* file, const std::string& img, uint64_t seq, Before before) {
  const uint64_t first = seq % 2;
  for (const uint64_t slot : {first, 1 - first}) {
    before(slot);
    Status s = file->Write(slot * kSuperblockSlot, img.size(), img.data());
    if (s.ok()) s = file->Sync();
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

inline Status WriteSlotsInOrder(File* file, const std::string& img, uint64_t seq) {
  return WriteSlotsInOrder(file, img, seq, [](uint64_t) {});
}

}  // namespace cowstore::store
