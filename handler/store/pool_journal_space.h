// SPDX-License-Identifier: Apache-2.0
// PoolJournalSpace: the JournalSpace (journal_segments.h) FormatV3's
// journal growth takes its runs from, over the pool's space map. Each run
// it takes is handed over as TakeMeta's AUs are (PoolSpace::TakeMetaRun),
// so the InstallMeta after the checkpoint keeps the runs the journal then
// holds (they are in the format's meta_units()) and frees the rest at once
// (meta_turnover.h). A run given back is free again at once, so the
// planner may take it again.
//
// Core does not use it yet: it serves format 3 from a later wiring step
// (store-v3.md, step 5d), which must also decide who guards the space while
// the format plans (the checkpoint writes without Core's metadata lock).
#pragma once

#include <cstdint>
#include <optional>

#include "handler/store/journal_segments.h"
#include "handler/store/pool_space.h"

namespace cowstore::store {

class PoolJournalSpace final : public JournalSpace {
 public:
  explicit PoolJournalSpace(PoolSpace* space) : space_(space) {}
  // The longest run of whole free AUs, cut to max_aus; nullopt if none.
  std::optional<JournalExtent> Take(uint64_t max_aus) override {
    uint64_t first = 0;
    const uint64_t n = space_->TakeMetaRun(max_aus, &first);
    if (n == 0) return std::nullopt;
    return JournalExtent{first, n};
  }
  // Never throws (PoolSpace::GiveMetaRun).
  void Give(const JournalExtent& run) noexcept override { space_->GiveMetaRun(run.first_au, run.aus); }

 private:
  PoolSpace* space_;
};

}  // namespace cowstore::store
