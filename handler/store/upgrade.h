// SPDX-License-Identifier: Apache-2.0
// The in-place upgrade of a format 1 or 2 pool to format 3
// (docs/design/store-v3.md 3.7; Pool::Upgrade runs it between a check of the
// old pool and one of the new).
//
// No data moves. The old state's maps, counted in AUs, become maps in grains
// (an AU of k grains: lba, phys and length times k), and the format 3
// checkpoint and journal go into AUs the old state leaves free, so until the
// first format 3 superblock is durable the old pool is whole and every build
// opens it; from then on the v3 chooser takes the new copy beside the old
// (superblock_v3.h) and a v1/v2 build refuses the pool. The old journal
// region, before the data area, is unused afterwards; it needs no punch:
// the old format's last checkpoint (the open Pool::Upgrade makes first)
// cleared it (JournalWriter::Restart: holes on a file, zeros on a device;
// should that clear have failed, its bytes are still never read again).
#pragma once

#include <cstdint>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"

namespace cowstore::store {

// Where the format 3 metadata goes: the checkpoint's page AUs, then the
// journal's runs, all outside `used` (the old state's runs of AUs: mapped,
// or its checkpoint's; in any order, overlapping where maps share) and
// below `units`. The pages take the lowest free AUs
// (next to the superblocks, where an open reads first, as FormatV3::Create
// lays a pool out); the journal the first free run that holds it whole,
// else the free runs in address order, at most kMaxJournalExtents of them.
// kNoSpace naming what is short when the free AUs cannot hold both.
struct UsedRun {
  uint64_t first = 0, len = 0;  // AUs
};
struct UpgradeLayout {
  std::vector<uint64_t> page_aus;
  std::vector<JournalExtent> journal;
};
Result<UpgradeLayout> PlanUpgradeLayout(uint64_t units, std::vector<UsedRun> used, uint64_t page_aus,
                                        uint64_t journal_aus);

// `from` (maps in units of from.au bytes) with every map in units of
// `grain` bytes, bounded by `max_phys` grains; the LUN table as it was.
// Runs are cut at each LUN's end (an old map covers the LUN's last AU
// whole). kInvalidArgument unless from.au is a multiple of grain, or when a
// LUN breaks LunGeometryRule at the new grain (a block larger than it); a
// run the new bound refuses is kCorruption (no pool of the old format
// holds one).
Status TranslateMaps(const MetaState& from, uint32_t grain, uint64_t max_phys, MetaState* to);

// The format of the pool in `file` as an open would choose its superblock:
// 1, 2 or 3 (what the chooser refuses, as it refuses it). Reads only.
Result<uint32_t> PoolFormatOf(File* file);

// The upgrade of the pool in `file` (opened locked, read-write, by the
// caller; nothing else may use it): its state loaded by the old format,
// whose journal must replay clean, then the layout above and
// FormatV3::WriteUpgrade. A format 3 pool: report->already, nothing written.
// *report gets from_format, the AU, the grain, the journal and page counts.
Status UpgradeFile(File* file, uint32_t grain, UpgradeReport* report);

}  // namespace cowstore::store
