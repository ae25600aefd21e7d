// SPDX-License-Identifier: Apache-2.0
// PoolJournalSpace: the JournalSpace (journal_segments.h) FormatV3's
// journal growth takes its runs from, over the pool's space map. Each run
// it takes is handed over as TakeMeta's AUs are (PoolSpace::TakeMetaRun),
// so the InstallMeta after the checkpoint keeps the runs the journal then
// holds (they are in the format's meta_units()) and frees the rest at once
// (meta_turnover.h).
//
// A run given back stays handed over: nothing in the space changes.
// FormatV3 gives runs back at two moments it does not tell apart: while
// planning (nothing written yet) and after a failed checkpoint, whose
// superblock may already be on disk naming them (format_v3.h: they must
// hold no data until a checkpoint succeeds or the pool is reopened).
// Freeing them then would let a data write land in a run an open may
// replay as journal records. So the adapter keeps them and Take hands them
// out again first (GrowJournal gives runs back and takes "the same runs
// again"). At the end of the attempt they are either unused at its
// successful InstallMeta, which frees them at once (sound: the format
// writes only the runs its plan kept, which the new set names), or
// forgotten by the reopen's Rebuild (a failed checkpoint fails the pool).
// Hence one adapter per checkpoint attempt: after the install its kept
// runs may be free, or someone else's.
//
// Core uses it behind its metadata lock (Core::CheckpointJournalSpace,
// checkpoint.cc: each Take and Give takes meta_mu_, since the format plans
// while the checkpoint writes without it), and decides how much to offer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "handler/store/journal_segments.h"
#include "handler/store/pool_space.h"

namespace cowstore::store {

class PoolJournalSpace final : public JournalSpace {
 public:
  explicit PoolJournalSpace(PoolSpace* space) : space_(space) {}
  // The longest run given back, else the longest run of whole free AUs,
  // cut to max_aus; nullopt if none.
  std::optional<JournalExtent> Take(uint64_t max_aus) override {
    if (max_aus == 0) return std::nullopt;
    auto best = std::max_element(given_.begin(), given_.end(),
                                 [](const JournalExtent& a, const JournalExtent& b) { return a.aus < b.aus; });
    if (best != given_.end()) {
      const JournalExtent run{best->first_au, std::min(best->aus, max_aus)};
      best->first_au += run.aus;
      best->aus -= run.aus;
      if (best->aus == 0) given_.erase(best);
      return run;
    }
    uint64_t first = 0;
    const uint64_t n = space_->TakeMetaRun(max_aus, &first);
    if (n == 0) return std::nullopt;
    return JournalExtent{first, n};
  }
  // Whether Take would hand out a run given back (not one of the space's).
  bool holds_given() const { return !given_.empty(); }
  // Keeps the run for Take, handed over (header comment). Never throws: a
  // run it has no memory to keep is only not taken again.
  void Give(const JournalExtent& run) noexcept override {
    try {
      if (run.aus != 0) given_.push_back(run);
    } catch (...) {
    }
  }

 private:
  PoolSpace* space_;
  std::vector<JournalExtent> given_;  // handed over in *space_, given back
};

}  // namespace cowstore::store
