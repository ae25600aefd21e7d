// SPDX-License-Identifier: Apache-2.0
// Which MetaFormat opens a pool: the one that reads its superblocks' version.

#include "handler/store/meta_format.h"

#include "handler/store/format_v2.h"
#include "handler/store/format_v3.h"
#include "handler/store/superblock_v3.h"  // SuperblockEnvelopeVersion: every format's envelope

namespace cowstore::store {

Result<std::unique_ptr<MetaFormat>> ChooseMetaFormat(File* file, SuperblockSlots* slots, ServedFormats served) {
  uint32_t version[2] = {0, 0};
  for (int slot = 0; slot < 2; slot++) {
    std::vector<char>& buf = slots->slot[slot];
    buf.assign(kSuperblockSlot, 0);
    Status s = file->Read(slot * kSuperblockSlot, buf.size(), buf.data());
    if (!s.ok()) return s;
    version[slot] = SuperblockEnvelopeVersion(buf.data(), buf.size());
  }
  // A newer format in either slot refuses the open, even beside a valid
  // copy of ours: it is no damaged slot but a newer build's write (an
  // upgrade, store-v3.md 3.7), and opening the other slot's older copy
  // would roll the pool back and, read-write, rewrite that slot and punch
  // the newer format's pages as free space. The envelope every format
  // shares (superblock_v3.h) tells a newer format from damage.
  for (int slot = 0; slot < 2; slot++)
    if (version[slot] > kFormatVersionV3)
      return Status(Code::kUnsupported, "superblock slot " + std::to_string(slot) + " holds pool format version " +
                                            std::to_string(version[slot]) + " (this build reads versions " +
                                            std::to_string(kOldestFormatVersion) + " to " +
                                            std::to_string(served == ServedFormats::kV1V2 ? kFormatVersion
                                                                                          : kFormatVersionV3) +
                                            "): a newer build wrote this pool, or an interrupted upgrade to "
                                            "it; open it with a build that reads that version (which completes "
                                            "the upgrade), and do not repair or recreate it with this one");
  // Format 3 in either slot: a v3 pool, or an upgrade cut between its two
  // slot writes (a v2 copy beside the v3 one), which only the v3 chooser may
  // judge: the v2 open must never take the older copy (the same roll-back
  // as above). Asked for kV1V2, it is refused here, before any geometry
  // check or write, as a build serving formats 1 and 2 only refuses it.
  for (int slot = 0; slot < 2; slot++) {
    if (version[slot] != kFormatVersionV3) continue;
    if (served == ServedFormats::kV1V2)
      return Status(Code::kUnsupported,
                    "superblock slot " + std::to_string(slot) +
                        " holds pool format version 3, which this build does not serve yet; open it with a "
                        "build that serves "
                        "format 3, and do not repair or recreate it with this one");
    auto size = file->Size();
    if (!size.ok()) return size.status();
    return std::unique_ptr<MetaFormat>(std::make_unique<FormatV3>(*size));
  }
  // Versions 1 and 2, and anything the envelope cannot tell (a damaged or
  // blank slot), which FormatV2 judges as its own.
  return std::unique_ptr<MetaFormat>(std::make_unique<FormatV2>());
}

}  // namespace cowstore::store
