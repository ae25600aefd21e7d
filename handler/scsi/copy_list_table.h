// SPDX-License-Identifier: Apache-2.0
// The copy manager's memory of EXTENDED COPY (LID1) list identifiers for one
// LU: the copies begun with LIST ID USAGE 00b (hold) while they run, and
// their results afterwards, for RECEIVE COPY RESULTS (COPY STATUS, FAILED
// SEGMENT DETAILS).
//
// SPC-4 keys list identifiers by I_T nexus; TCMU tells the handler nothing
// about the nexus, so several initiators (an ESXi cluster, a Proxmox
// cluster) share this table and may all use the same list ID at once. The
// rules (docs/design/scsi.md, "List IDs without an I_T nexus"):
// - A list ID never refuses a copy: Begin() always succeeds in the sense
//   that the copy runs; every copy gets its own entry, addressed by the
//   CopyId it returns, never by list ID (so one copy's progress and result
//   cannot land in another's entry).
// - Status() and Take() answer for a list ID: while any held copy with that
//   ID runs, the running one (newest first) — never another copy's
//   completion or failure while the asker's own copy may still be running;
//   otherwise the copy that finished last (a later copy with the same ID
//   replaces the held results, as SPC-4 says for one nexus).
// - Bounded: at most one finished entry per list ID (256), kept at most
//   kHeldFor; at most kMaxRunning running entries (beyond that a copy runs
//   without held results, which is what HELD DATA LIMIT 0 allows).
// Thread-safe: one short mutex, never held across a copy or a clock call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "handler/scsi/command_result.h"

namespace cowstore::scsi {

// Names one copy's entry in a CopyListTable (unique per table, never reused).
using CopyId = uint64_t;

struct CopyRecord {
  enum class State : uint8_t { kInProgress, kCompleted, kFailed };
  CopyId id = 0;
  uint8_t list_id = 0;
  State state = State::kInProgress;
  uint16_t segments_processed = 0;
  uint64_t bytes_transferred = 0;
  CommandResult result;  // the EXTENDED COPY's final status and sense
};

class CopyListTable {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a finished copy's results are held. Long enough for an
  // initiator to ask right after its copy (or after an abort), short enough
  // that a stale answer is unlikely to be read by someone else; FreeBSD
  // CTL's copy manager keeps finished lists as long.
  static constexpr std::chrono::seconds kHeldFor{60};
  // Copies with held results running at once on one LU. tcmu-runner's
  // command ring bounds real concurrency far below this; it caps memory.
  static constexpr size_t kMaxRunning = 1024;

  // `now` is the clock (tests pass a fake one).
  explicit CopyListTable(std::function<Clock::time_point()> now = Clock::now);

  // Registers a running copy with LIST ID USAGE 00b. Nothing else is looked
  // at: another copy with the same list ID, running or finished, does not
  // stop it. nullopt (the copy runs unrecorded) only at kMaxRunning.
  std::optional<CopyId> Begin(uint8_t list_id);
  void Progress(CopyId id, uint16_t segments_processed, uint64_t bytes_transferred);
  // Ends the copy: its entry holds `result` from now on and replaces any
  // finished entry with the same list ID. Idempotent; does not allocate.
  void Finish(CopyId id, const CommandResult& result) noexcept;

  // What COPY STATUS reports for `list_id` (see the file comment).
  std::optional<CopyRecord> Status(uint8_t list_id);
  // The same entry for FAILED SEGMENT DETAILS; a finished entry is handed
  // over once (removed), a running one stays.
  std::optional<CopyRecord> Take(uint8_t list_id);

  // Entries held now, running and finished (for tests and bounds checks).
  size_t size() const;

 private:
  struct Entry {
    CopyRecord record;
    Clock::time_point finished_at{};
  };
  void ExpireLocked(Clock::time_point now);
  std::vector<Entry>::iterator SelectLocked(uint8_t list_id);

  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  CopyId next_id_ = 1;          // guarded by mu_
  size_t running_ = 0;          // guarded by mu_
  std::vector<Entry> entries_;  // guarded by mu_
};

// One held copy's entry, finished exactly once: by Finish(), or, if the copy
// unwinds first (an exception), with HARDWARE ERROR / INTERNAL TARGET
// FAILURE, so no entry stays "in progress" forever. A null table or a full
// one (Begin() gave nothing) makes every call a no-op.
class HeldCopy {
 public:
  HeldCopy(CopyListTable* table, uint8_t list_id);
  ~HeldCopy();
  HeldCopy(const HeldCopy&) = delete;
  HeldCopy& operator=(const HeldCopy&) = delete;

  void Progress(uint16_t segments_processed, uint64_t bytes_transferred);
  void Finish(const CommandResult& result) noexcept;

 private:
  CopyListTable* table_;
  std::optional<CopyId> id_;
  bool finished_ = false;
};

}  // namespace cowstore::scsi
