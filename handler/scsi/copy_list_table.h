// EXTENDED COPY (LID1) list identifiers of one LU: which are in progress
// (LIST ID USAGE 00b and 10b must be unique among those) and the results
// held for RECEIVE COPY RESULTS (00b only). TCMU gives no I_T nexus, so the
// table is per LU rather than per nexus. Thread-safe; its lock is never held
// across a copy.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "handler/scsi/command_result.h"

namespace cowstore::scsi {

struct CopyRecord {
  enum class State : uint8_t { kInProgress, kCompleted, kFailed };
  uint8_t list_id = 0;
  bool hold = false;  // LIST ID USAGE 00b: results kept for RECEIVE COPY RESULTS
  State state = State::kInProgress;
  uint16_t segments_processed = 0;
  uint64_t bytes_transferred = 0;
  CommandResult result;  // the EXTENDED COPY's final status and sense
};

class CopyListTable {
 public:
  // Completed records kept at most (oldest dropped first).
  static constexpr size_t kMaxHeld = 256;

  // Starts an operation; false (nothing changed) if `list_id` belongs to an
  // operation still in progress. Replaces any held record with that id.
  bool Begin(uint8_t list_id, bool hold);
  void Progress(uint8_t list_id, uint16_t segments_processed, uint64_t bytes_transferred);
  // Ends the operation; keeps the record only if it was begun with hold.
  void Finish(uint8_t list_id, const CommandResult& result);
  std::optional<CopyRecord> Get(uint8_t list_id) const;
  // Returns the record and discards it if it is no longer in progress
  // (FAILED SEGMENT DETAILS hands the held data over once).
  std::optional<CopyRecord> Take(uint8_t list_id);

 private:
  CopyRecord* FindLocked(uint8_t list_id);
  mutable std::mutex mu_;
  std::deque<CopyRecord> records_;  // guarded by mu_
};

}  // namespace cowstore::scsi
