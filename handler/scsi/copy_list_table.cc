#include "handler/scsi/copy_list_table.h"

#include <algorithm>

namespace cowstore::scsi {

CopyRecord* CopyListTable::FindLocked(uint8_t list_id) {
  for (CopyRecord& r : records_) {
    if (r.list_id == list_id) return &r;
  }
  return nullptr;
}

bool CopyListTable::Begin(uint8_t list_id, bool hold) {
  std::lock_guard<std::mutex> lock(mu_);
  if (CopyRecord* r = FindLocked(list_id)) {
    if (r->state == CopyRecord::State::kInProgress) return false;
    std::erase_if(records_, [list_id](const CopyRecord& x) { return x.list_id == list_id; });
  }
  CopyRecord rec;
  rec.list_id = list_id;
  rec.hold = hold;
  records_.push_back(rec);
  // Drop the oldest completed records beyond the cap.
  size_t done = 0;
  for (const CopyRecord& x : records_) done += x.state != CopyRecord::State::kInProgress;
  for (auto it = records_.begin(); done > kMaxHeld && it != records_.end();) {
    if (it->state != CopyRecord::State::kInProgress) {
      it = records_.erase(it);
      --done;
    } else {
      ++it;
    }
  }
  return true;
}

void CopyListTable::Progress(uint8_t list_id, uint16_t segments, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (CopyRecord* r = FindLocked(list_id)) {
    r->segments_processed = segments;
    r->bytes_transferred = bytes;
  }
}

void CopyListTable::Finish(uint8_t list_id, const CommandResult& result) {
  std::lock_guard<std::mutex> lock(mu_);
  CopyRecord* r = FindLocked(list_id);
  if (!r) return;
  if (!r->hold) {
    std::erase_if(records_, [list_id](const CopyRecord& x) { return x.list_id == list_id; });
    return;
  }
  r->state = result.good() ? CopyRecord::State::kCompleted : CopyRecord::State::kFailed;
  r->result = result;
}

std::optional<CopyRecord> CopyListTable::Get(uint8_t list_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const CopyRecord& r : records_) {
    if (r.list_id == list_id && r.hold) return r;
  }
  return std::nullopt;
}

std::optional<CopyRecord> CopyListTable::Take(uint8_t list_id) {
  std::lock_guard<std::mutex> lock(mu_);
  CopyRecord* r = FindLocked(list_id);
  if (!r || !r->hold) return std::nullopt;
  CopyRecord copy = *r;
  if (copy.state != CopyRecord::State::kInProgress) {
    std::erase_if(records_, [list_id](const CopyRecord& x) { return x.list_id == list_id; });
  }
  return copy;
}

}  // namespace cowstore::scsi
