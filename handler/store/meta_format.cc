// SPDX-License-Identifier: Apache-2.0
// Which MetaFormat opens a pool: the one that reads its superblocks' version.

#include "handler/store/meta_format.h"

#include "handler/store/format_v2.h"
#include "handler/store/superblock_v3.h"  // SuperblockEnvelopeVersion: every format's envelope

namespace cowstore::store {

Result<std::unique_ptr<MetaFormat>> ChooseMetaFormat(File* file, SuperblockSlots* slots) {
  for (int slot = 0; slot < 2; slot++) {
    std::vector<char>& buf = slots->slot[slot];
    buf.assign(kSuperblockSlot, 0);
    Status s = file->Read(slot * kSuperblockSlot, buf.size(), buf.data());
    if (!s.ok()) return s;
    // A newer format in either slot refuses the open, even beside a valid
    // copy of ours: it is no damaged slot but a newer build's write (an
    // upgrade, store-v3.md 3.7), and opening the other slot's older copy
    // would roll the pool back and, read-write, rewrite that slot and punch
    // the newer format's pages as free space. The envelope every format
    // shares (superblock_v3.h) tells a newer format from damage.
    if (const uint32_t v = SuperblockEnvelopeVersion(buf.data(), buf.size()); v > kFormatVersion)
      return Status(Code::kUnsupported, "superblock slot " + std::to_string(slot) + " holds pool format version " +
                                            std::to_string(v) + " (this build reads versions " +
                                            std::to_string(kOldestFormatVersion) + " to " +
                                            std::to_string(kFormatVersion) +
                                            "): a newer build wrote this pool, or an interrupted upgrade to "
                                            "it; open it with a build that reads that version (which completes "
                                            "the upgrade), and do not repair or recreate it with this one");
  }
  // Versions 1 and 2, and anything the envelope cannot tell (a damaged or
  // blank slot), which FormatV2 judges as its own.
  return std::unique_ptr<MetaFormat>(std::make_unique<FormatV2>());
}

}  // namespace cowstore::store
