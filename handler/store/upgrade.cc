// SPDX-License-Identifier: Apache-2.0
#include "handler/store/upgrade.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "handler/store/format_v2.h"
#include "handler/store/format_v3.h"
#include "handler/store/grain_space.h"
#include "handler/store/journal.h"
#include "handler/store/run_tree.h"
#include "handler/store/space_map.h"

namespace cowstore::store {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

struct FreeRun {
  uint64_t first = 0, len = 0;
};

// The maximal runs of [0, units) outside `used` (runs, in any order, which
// may overlap: shared AUs are listed once per map that holds them).
std::vector<FreeRun> RunsOutside(uint64_t units, std::vector<UsedRun> used) {
  std::sort(used.begin(), used.end(), [](const UsedRun& a, const UsedRun& b) { return a.first < b.first; });
  std::vector<FreeRun> runs;
  uint64_t at = 0;
  for (const UsedRun& u : used) {
    if (u.first >= units) break;
    if (u.first > at) runs.push_back({at, u.first - at});
    at = std::max(at, u.first + u.len);
  }
  if (at < units) runs.push_back({at, units - at});
  return runs;
}

}  // namespace

Result<UpgradeLayout> PlanUpgradeLayout(uint64_t units, std::vector<UsedRun> used, uint64_t page_aus,
                                        uint64_t journal_aus) {
  std::vector<FreeRun> free = RunsOutside(units, std::move(used));
  uint64_t free_aus = 0;
  for (const FreeRun& r : free) free_aus += r.len;
  auto short_of = [&] {
    return Status(Code::kNoSpace, "the upgrade needs " + N(page_aus) + " free AUs for the format 3 checkpoint and " +
                                      N(journal_aus) + " for its journal; the pool has " + N(free_aus) +
                                      " free: free some space (or grow the pool) and run it again");
  };
  if (free_aus < page_aus || free_aus - page_aus < journal_aus) return short_of();

  UpgradeLayout out;
  // The pages: the lowest free AUs.
  size_t i = 0;
  while (out.page_aus.size() < page_aus) {
    FreeRun& r = free[i];
    out.page_aus.push_back(r.first);
    r.first++;
    if (--r.len == 0) i++;
  }
  free.erase(free.begin(), free.begin() + static_cast<std::ptrdiff_t>(i));
  // The journal: one run if any holds it (one extent, as a new pool's),
  // else the runs in address order. Runs never touch (each is maximal), so
  // no two listed extents continue each other (JournalExtentsJoin).
  auto whole = std::find_if(free.begin(), free.end(), [&](const FreeRun& r) { return r.len >= journal_aus; });
  if (whole != free.end()) {
    out.journal.push_back({whole->first, journal_aus});
    return out;
  }
  uint64_t left = journal_aus;
  for (const FreeRun& r : free) {
    if (left == 0) break;
    if (out.journal.size() == kMaxJournalExtents)
      return Status(Code::kNoSpace, "the pool's free space is too fragmented for the upgrade's journal (" +
                                        N(journal_aus) + " AUs in at most " + N(kMaxJournalExtents) +
                                        " runs): free some space and run it again");
    const uint64_t take = std::min({left, r.len, kMaxJournalExtentAus});
    out.journal.push_back({r.first, take});
    left -= take;
  }
  if (left != 0) return short_of();
  return out;
}

Status TranslateMaps(const MetaState& from, uint32_t grain, uint64_t max_phys, MetaState* to) {
  if (grain == 0 || from.au % grain != 0)
    return Status(Code::kInvalidArgument, "a grain of " + N(grain) + " bytes does not divide the allocation unit (" +
                                              N(from.au) + " bytes)");
  const uint64_t k = from.au / grain;
  MetaState out;
  out.au = grain;  // MetaState's unit is the map's
  out.max_phys = max_phys;
  out.next_lun_id = from.next_lun_id;
  for (const auto& [id, l] : from.luns()) {
    auto n = out.NewLun();
    n->id = l->id;
    n->name = l->name;
    n->uuid = l->uuid;
    n->size = l->size;
    n->bs = l->bs;
    n->attrs = l->attrs;
    // The LUN's grains: a format 1 or 2 map covers its last AU whole even
    // where the LUN ends inside it, and format 3 maps no grain past the end
    // (LunGeometryRule), so each run is cut there.
    const uint64_t lun_grains = (l->size + grain - 1) / grain;
    for (const auto& [lba, e] : l->map.runs()) {
      // A run of AUs is k times as many grains; a run tree holds at most
      // RunTree::kMaxLen units a run.
      if (lba * k >= lun_grains) continue;
      for (uint64_t done = 0, len = std::min(e.len * k, lun_grains - lba * k); done < len;) {
        const uint64_t piece = std::min(len - done, RunTree::kMaxLen);
        if (Status s = n->map.Insert(lba * k + done, e.phys * k + done, piece); !s.ok())
          return Status(Code::kCorruption, "LUN " + l->name + ": run at AU " + N(lba) + " does not fit format 3: " +
                                               s.message());
        done += piece;
      }
    }
    if (std::string why = LunGeometryRule(*n, grain, max_phys); !why.empty())
      return Status(Code::kInvalidArgument, "the pool cannot be format 3 at a grain of " + N(grain) + " bytes: " + why);
    out.AddLun(std::move(n));
  }
  *to = std::move(out);
  return Status::Ok();
}

namespace {

// The format an open would read `file` with, its superblock chosen (*geo).
Result<std::unique_ptr<MetaFormat>> ChosenFormat(File* file, PoolGeometry* geo) {
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(file, &slots, ServedFormats::kV1ToV3);
  if (!chosen.ok()) return chosen.status();
  if (Status s = chosen.value()->ChooseSuperblock(slots, geo); !s.ok()) return s;
  return chosen;
}

}  // namespace

Result<uint32_t> PoolFormatOf(File* file) {
  PoolGeometry geo;
  auto chosen = ChosenFormat(file, &geo);
  if (!chosen.ok()) return chosen.status();
  if (const auto* old = dynamic_cast<const FormatV2*>(chosen.value().get())) return old->superblock().version;
  return kFormatVersionV3;
}

Status UpgradeFile(File* file, uint32_t grain, UpgradeReport* report) {
  // The disk's bytes, not a cache a failed sync may have left (as Open).
  if (Status s = file->DropCache(); !s.ok()) return s;
  PoolGeometry geo;
  auto chosen = ChosenFormat(file, &geo);
  if (!chosen.ok()) return chosen.status();
  std::unique_ptr<MetaFormat> format = std::move(chosen).value();
  report->allocation_unit = geo.au;
  auto* old = dynamic_cast<FormatV2*>(format.get());
  if (old == nullptr) {  // format 3 (an upgrade done, or cut after its first slot)
    report->already = true;
    report->from_format = kFormatVersionV3;
    report->grain = geo.grain;
    return Status::Ok();
  }
  if (std::string why = GrainRule(grain, geo.au); !why.empty()) return Status(Code::kInvalidArgument, why);
  if (std::string why = WriteUnitRule(file->AtomicWriteBytes()); !why.empty())
    return Status(Code::kUnsupported, why);

  MetaState st;
  st.au = geo.au;  // formats 1 and 2 count AUs
  LoadedMeta loaded;
  if (Status s = old->LoadState(file, &st, &loaded); !s.ok()) return s;
  if (loaded.end.damaged || loaded.end.newer_record_follows)
    return Status(Code::kCorruption, "the pool's journal is damaged (" + loaded.end.explain +
                                         "): repair it before the upgrade (cowctl pool check --repair)");
  // Both slots hold the chosen copy, durably, before one is overwritten:
  // the first format 3 slot write must never replace the only valid copy.
  if (Status s = old->PrepareWrites(file); !s.ok()) return s;
  const Superblock& v2 = old->superblock();

  SuperblockV3 sb;
  sb.incompat = kIncompatCheckedMaps;  // format 3 may write kMapChecked records (superblock_v3.h)
  sb.uuid = v2.uuid;
  sb.seq = v2.seq + 1;  // slot (seq + 1) % 2 first: the old copy stays whole in the other
  sb.au = v2.au;
  sb.grain = grain;
  sb.data_offset = v2.data_offset;  // AU-aligned in every format (DataOffsetV2)
  sb.units = v2.total_units();
  sb.soft_threshold_percent = v2.soft_threshold_percent;
  sb.write_unit = file->AtomicWriteBytes();  // the medium's (3.8)
  sb.origin_format = v2.version;
  if (std::string why = PoolUnitsRuleV3(sb.units, sb.au, grain); !why.empty())
    return Status(Code::kInvalidArgument, "the pool cannot be format 3 at a grain of " + N(grain) + " bytes: " + why);

  MetaState st3;
  if (Status s = TranslateMaps(st, grain, sb.grains(), &st3); !s.ok()) return s;
  // Runs, not AUs: a full 16 TiB pool of 64 KiB AUs maps 2^28 of them.
  std::vector<UsedRun> used;
  for (uint64_t u : loaded.meta_units) used.push_back({u, 1});
  for (const auto& [id, l] : st.luns())
    for (const auto& [lba, e] : l->map.runs()) used.push_back({e.phys, e.len});
  const uint64_t journal_aus = (v2.journal_bytes + v2.au - 1) / v2.au;
  auto layout = PlanUpgradeLayout(sb.units, std::move(used), FormatV3::UpgradePageAus(sb.au, st3.luns().size(), st3.extents()),
                                  journal_aus);
  if (!layout.ok()) return layout.status();
  // The rebuild of counts and free space the format 3 open makes (Core's
  // NewSpaceLocked chooses the same kind), made now over the new maps and
  // metadata AUs: what it would refuse (a count past the bound, a run over
  // a metadata AU) is refused before a byte is written, not after the
  // commit point, where it would leave a pool no open takes.
  {
    std::vector<uint64_t> meta = layout->page_aus;
    for (const JournalExtent& x : layout->journal)
      for (uint64_t u = x.first_au; u - x.first_au < x.aus; u++) meta.push_back(u);
    std::unique_ptr<PoolSpace> probe;
    if (grain < sb.au)
      probe = std::make_unique<GrainSpace>(grain, sb.au);
    else
      probe = std::make_unique<SpaceMap>();
    if (Status s = probe->Rebuild(sb.grains(), st3, std::move(meta)); !s.ok())
      return Status(Code::kInvalidArgument, "the pool cannot be format 3: " + s.message());
  }
  sb.journal = layout->journal;
  sb.journal_start = 0;
  sb.journal_start_lsn = NewPoolJournalStartLsn();

  uint64_t pages = 0;
  if (Status s = FormatV3::WriteUpgrade(file, sb, st3, layout->page_aus, &pages); !s.ok()) return s;
  report->from_format = v2.version;
  report->grain = grain;
  report->journal_bytes = journal_aus * sb.au;
  report->metadata_pages = pages;
  return Status::Ok();
}

}  // namespace cowstore::store
