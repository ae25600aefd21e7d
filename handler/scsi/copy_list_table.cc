// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/copy_list_table.h"

#include <algorithm>
#include <utility>

#include "handler/scsi/sense.h"

namespace cowstore::scsi {

namespace {
bool Running(const CopyRecord& r) { return r.state == CopyRecord::State::kInProgress; }
}  // namespace

CopyListTable::CopyListTable(std::function<Clock::time_point()> now) : now_(std::move(now)) {}

void CopyListTable::ExpireLocked(Clock::time_point now) {
  std::erase_if(entries_, [now](const Entry& e) {
    return !Running(e.record) && now - e.finished_at >= kHeldFor;
  });
}

// The entry reported for `list_id`: the newest running one if any (a
// running copy must never be reported finished or failed because another
// initiator's copy with the same list ID ended), else the finished one
// (Finish keeps at most one per list ID: the last to finish).
std::vector<CopyListTable::Entry>::iterator CopyListTable::SelectLocked(uint8_t list_id) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const CopyRecord& r = it->record;
    if (r.list_id != list_id) continue;
    if (best == entries_.end()) {
      best = it;
      continue;
    }
    const CopyRecord& b = best->record;
    if (Running(r) != Running(b)) {
      if (Running(r)) best = it;
    } else if (Running(r) ? r.id > b.id : it->finished_at > best->finished_at) {
      best = it;
    }
  }
  return best;
}

std::optional<CopyId> CopyListTable::Begin(uint8_t list_id) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  if (running_ >= kMaxRunning) return std::nullopt;
  Entry e;
  e.record.id = next_id_;
  e.record.list_id = list_id;
  entries_.push_back(e);  // may throw bad_alloc: nothing changed then
  ++next_id_;
  ++running_;
  return e.record.id;
}

void CopyListTable::Progress(CopyId id, uint16_t segments, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) {
    if (e.record.id == id && Running(e.record)) {
      e.record.segments_processed = segments;
      e.record.bytes_transferred = bytes;
      return;
    }
  }
}

void CopyListTable::Finish(CopyId id, const CommandResult& result) noexcept {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [id](const Entry& e) { return e.record.id == id; });
  if (it == entries_.end() || !Running(it->record)) return;
  it->record.state = result.good() ? CopyRecord::State::kCompleted : CopyRecord::State::kFailed;
  it->record.result = result;
  it->finished_at = now;
  --running_;
  // The last copy to finish with a list ID replaces the held results of
  // earlier ones (moving elements of a vector of trivially copyable
  // entries does not throw).
  const uint8_t list_id = it->record.list_id;
  std::erase_if(entries_, [id, list_id](const Entry& e) {
    return e.record.list_id == list_id && e.record.id != id && !Running(e.record);
  });
  ExpireLocked(now);
}

std::optional<CopyRecord> CopyListTable::Status(uint8_t list_id) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = SelectLocked(list_id);
  if (it == entries_.end()) return std::nullopt;
  return it->record;
}

std::optional<CopyRecord> CopyListTable::Take(uint8_t list_id) {
  const Clock::time_point now = now_();
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(now);
  auto it = SelectLocked(list_id);
  if (it == entries_.end()) return std::nullopt;
  CopyRecord r = it->record;
  if (!Running(r)) entries_.erase(it);
  return r;
}

size_t CopyListTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

HeldCopy::HeldCopy(CopyListTable* table, uint8_t list_id)
    : table_(table), id_(table ? table->Begin(list_id) : std::nullopt) {}

HeldCopy::~HeldCopy() {
  if (!finished_) Finish(CheckCondition(SenseKey::kHardwareError, asc::kInternalTargetFailure));
}

void HeldCopy::Progress(uint16_t segments, uint64_t bytes) {
  if (id_) table_->Progress(*id_, segments, bytes);
}

void HeldCopy::Finish(const CommandResult& result) noexcept {
  if (finished_) return;
  finished_ = true;
  if (id_) table_->Finish(*id_, result);
}

}  // namespace cowstore::scsi
