// SPDX-License-Identifier: Apache-2.0
// A command's durability, taken over by its caller.
//
// Executed the ordinary way, a write-class command that must be durable
// before GOOD (write cache off, FUA, SYNCHRONIZE CACHE, EXTENDED COPY's
// destinations, WRITE AND VERIFY) waits in the store for its commit, holding
// its thread through the fdatasync. A caller that completes commands
// asynchronously (CommandPipeline) passes a DeferredCommit instead: those
// writes then go in buffered, and the command records here which LUNs'
// pools must commit before its status may go back. The caller commits them,
// once for many commands (store::Pool::Flush makes everything the pool
// buffered durable), and only then returns the status: so GOOD still means
// durable, as the blocking form does.
//
// The rule for the status after the commit (CommitFailure): a GOOD command
// whose commit failed answers what a durable write whose commit failed
// answers (the blocking form of every command but EXTENDED COPY, which
// reports a failed flush of its destinations as COPY ABORTED at its last
// segment); a command that failed by itself keeps its own answer (its
// blocking form commits what it did and reports its own failure, as
// EXTENDED COPY does for the segments it completed).
#pragma once

#include <memory>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/store/pool.h"

namespace cowstore::scsi {

class LogicalUnit;

class DeferredCommit {
 public:
  // Records that `lun`'s pool must commit before the status goes back.
  // One entry per pool: a LUN of a pool already recorded adds nothing. The
  // shared_ptr keeps the LUN (and so its pool) open until the commit, even
  // if its own device closes meanwhile (an EXTENDED COPY destination).
  void Need(const std::shared_ptr<store::Lun>& lun);

  bool empty() const { return luns_.empty(); }
  // One LUN of each pool to commit, in the order first recorded.
  const std::vector<std::shared_ptr<store::Lun>>& luns() const { return luns_; }
  // Records every pool `other` recorded (each pool still once): many
  // commands' needs, for one commit of the lot.
  void Merge(const DeferredCommit& other);
  // Makes every recorded pool durable (Pool::Flush each); the first
  // failure, after trying them all.
  store::Status Commit() const;
  // The same, with each pool's own outcome, in luns() order.
  std::vector<store::Status> CommitEach() const;
  // The entry of luns() that holds `lun`'s pool, or -1 if none does.
  int IndexOfPool(store::Lun& lun) const;

 private:
  std::vector<std::shared_ptr<store::Lun>> luns_;
};

// What a command that was GOOD answers when its deferred commit failed with
// `status`: what a durable write whose commit failed answers, counted on
// `lu` as that would be.
CommandResult CommitFailure(LogicalUnit& lu, const store::Status& status);

}  // namespace cowstore::scsi
