// SPDX-License-Identifier: Apache-2.0
#include "handler/store/journal.h"

#include <algorithm>

#include "handler/store/replay.h"
#include "handler/store/zero_fill.h"

namespace cowstore::store {

JournalBuffer::Framed JournalBuffer::Frame(const Record& r, uint64_t proven) {
  // Every allocation of an append happens here, before anything changes: a
  // frame built in place would leave half a record (and a gap in the LSNs)
  // in the buffer when an allocation failed, and every later record framed
  // after it would be committed behind damage replay refuses.
  Framed f;
  f.lsn = next_lsn_;
  f.proven = proven;
  FrameRecord(r, f.lsn, proven, &f.bytes);
  buf_.reserve(buf_.size() + f.bytes.size());  // grows geometrically (libstdc++)
  return f;
}

uint64_t JournalBuffer::Add(Framed&& f) {
  // Recovery yields a prefix of the operations in ticket order: a record must
  // not outlive in-place data with an earlier ticket, so that data now needs
  // the sync before the records.
  if (inplace_dirty_) {
    data_dirty_ = true;
    inplace_dirty_ = false;
  }
  buf_.append(f.bytes);  // within the capacity Frame reserved: no allocation
  next_lsn_ = f.lsn + 1;
  proven_ = std::max(proven_, f.proven);
  return ++last_ticket_;
}

void JournalBuffer::TakeBatch(JournalBatch* b) {
  b->bytes.clear();
  b->bytes.swap(buf_);
  b->last_ticket = last_ticket_;
  b->last_lsn = next_lsn_ - 1;
  b->data_dirty = data_dirty_;
  b->inplace_dirty = inplace_dirty_;
  b->proven = proven_;
  data_dirty_ = inplace_dirty_ = false;
  proven_ = 0;
}

uint64_t JournalBuffer::DropForCheckpoint() {
  buf_.clear();
  data_dirty_ = inplace_dirty_ = false;  // the checkpoint syncs before its superblock
  proven_ = 0;
  return next_lsn_;
}

Status CommitJournalBatch(File* file, const JournalBatch& b, const std::function<Status()>& append) {
  // Data first: everything the records rest on is on disk before the
  // records themselves. Metadata-only batches (clone, unmap) skip it, and so
  // do in-place overwrites written after the batch's last record: the one
  // sync after the journal write covers them.
  Status s;
  if (b.data_dirty) s = file->Sync();
  if (s.ok() && !b.bytes.empty()) s = append();
  if (s.ok() && (!b.bytes.empty() || b.inplace_dirty)) s = file->Sync();
  return s;
}

Status JournalWriter::WriteBatch(File* file, const JournalBatch& b) {
  Status s = CommitJournalBatch(file, b, [&] {
    return file->Write(kJournalOffset + tail_, b.bytes.size(), b.bytes.data());
  });
  if (s.ok()) tail_ += b.bytes.size();
  // Only now, after the sync: a record framed from here on vouches for this
  // batch (its `proven`), so replay can tell damage to it from a tear.
  if (s.ok()) durable_lsn_.store(b.last_lsn);
  return s;
}

void JournalWriter::Restart(File* file) {
  tail_ = 0;
  // The old journal is garbage. What keeps a stale record from being taken
  // for a new one is the LSN rule (a record of the lap before has a lower
  // LSN and ends replay), so a failed clear is harmless; clearing spares
  // replay reading past the new tail into old records, and inspection
  // tools a journal of two laps (made durable by the next commit's sync).
  (void)ZeroFill(file, kJournalOffset, capacity_);
}

Status ReplayJournal(const uint8_t* j, size_t n, uint64_t start_lsn, MetaState* st,
                     ReplayEnd* end, uint32_t version) {
  MemoryJournalSource src(j, n);
  return ReplayJournal(&src, start_lsn, st, end, version);
}

Status ReplayJournal(JournalSource* j, uint64_t start_lsn, MetaState* st, ReplayEnd* end,
                     uint32_t version) {
  // Applied as they are read, so memory does not grow with the journal.
  Result<JournalReplay> scanned =
      ScanJournal(j, start_lsn, version, kJournalWindowBytes,
                  [st](Record&& r) {
                    // No marks: FormatV3 marks every LUN after a replay that applied records.
                    return ApplyRecord(st, r, nullptr, nullptr);
                  });
  if (!scanned.ok()) return scanned.status();
  *end = ReplayEndOf(std::move(scanned).value());
  return Status::Ok();
}

ReplayEnd ReplayEndOf(JournalReplay&& jr) {
  ReplayEnd end;
  end.tail = jr.end;
  end.next_lsn = jr.next_lsn;
  end.newer_record_follows = jr.newer_generation;
  end.damaged = jr.damaged;
  end.data_mismatch = jr.data_mismatch;
  end.explain = jr.Explain();
  end.lost = std::move(jr.lost);
  end.lost_operations = jr.lost_operations;
  return end;
}

}  // namespace cowstore::store
