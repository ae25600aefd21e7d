// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/deferred_commit.h"

#include <algorithm>

#include "handler/scsi/command.h"

namespace cowstore::scsi {

void DeferredCommit::Need(const std::shared_ptr<store::Lun>& lun) {
  if (!lun) return;
  store::Pool* pool = &lun->pool();
  const bool known = std::any_of(luns_.begin(), luns_.end(),
                                 [&](const std::shared_ptr<store::Lun>& l) { return &l->pool() == pool; });
  if (!known) luns_.push_back(lun);
}

store::Status DeferredCommit::Commit() const {
  store::Status first;
  for (const auto& lun : luns_) {
    // The pool's flush, not the LUN's: the same commit, and still possible
    // if the LUN's own handle was closed meanwhile (the shared_ptr keeps
    // the pool open).
    store::Status s = lun->pool().Flush();
    if (!s.ok() && first.ok()) first = std::move(s);
  }
  return first;
}

CommandResult CommitFailure(LogicalUnit& lu, const store::Status& status) {
  return FromStoreStatus(lu, status, /*writing=*/true);
}

}  // namespace cowstore::scsi
