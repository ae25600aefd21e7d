// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/deferred_commit.h"

#include <utility>

#include "handler/scsi/command.h"

namespace cowstore::scsi {

void DeferredCommit::Need(const std::shared_ptr<store::Lun>& lun) {
  if (lun && IndexOfPool(*lun) < 0) luns_.push_back(lun);
}

void DeferredCommit::Merge(const DeferredCommit& other) {
  for (const auto& lun : other.luns_) Need(lun);
}

int DeferredCommit::IndexOfPool(store::Lun& lun) const {
  const store::Pool* pool = &lun.pool();
  for (size_t i = 0; i < luns_.size(); ++i)
    if (&luns_[i]->pool() == pool) return static_cast<int>(i);
  return -1;
}

std::vector<store::Status> DeferredCommit::CommitEach() const {
  std::vector<store::Status> outcomes;
  outcomes.reserve(luns_.size());
  // The pool's flush, not the LUN's: the same commit, and still possible
  // if the LUN's own handle was closed meanwhile (the shared_ptr keeps the
  // pool open).
  for (const auto& lun : luns_) outcomes.push_back(lun->pool().Flush());
  return outcomes;
}

store::Status DeferredCommit::Commit() const {
  for (store::Status& s : CommitEach())
    if (!s.ok()) return std::move(s);
  return store::Status::Ok();
}

CommandResult CommitFailure(LogicalUnit& lu, const store::Status& status) {
  return FromStoreStatus(lu, status, /*writing=*/true);
}

}  // namespace cowstore::scsi
