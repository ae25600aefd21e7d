// SPDX-License-Identifier: Apache-2.0
// The journal: records of metadata changes since the last checkpoint, in
// the fixed region [kJournalOffset, kJournalOffset + capacity) of the pool.
//
// Three parts, each guarded by the lock of the one who uses it:
//   JournalBuffer  records framed in memory, not yet written; hands out the
//                  tickets that order operations (the pool's metadata lock).
//   JournalWriter  the journal's tail on disk and the commit step that
//                  appends a batch durably (the pool's commit lock).
//   ReplayJournal  at open, applies the records that follow a checkpoint.
// The record framing itself (FrameRecord/ParseRecord) is in meta.h, beside
// the other on-disk formats.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/journal_source.h"
#include "handler/store/meta.h"
#include "handler/store/status.h"

namespace cowstore::store {

// What one commit writes: the buffered records, the ticket of the last of
// them, whether the data sync must come first (a record points at data
// written since the last commit, or follows in-place data in ticket order),
// and whether in-place data alone needs the final sync.
struct JournalBatch {
  std::string bytes;
  uint64_t last_ticket = 0;
  uint64_t last_lsn = 0;  // of the last record framed so far (durable with this batch)
  // The highest `proven` its records carry (0 without records): once the
  // batch is durable, every record up to it is vouched for (replay.h), so
  // replay no longer checks those kMapChecked records' data.
  uint64_t proven = 0;
  bool data_dirty = false;
  bool inplace_dirty = false;
};

class JournalBuffer {
 public:
  // A record framed with the next LSN, not yet in the buffer.
  struct Framed {
    std::string bytes;
    uint64_t lsn = 0;
    uint64_t proven = 0;
  };
  // The half of an append that may fail (std::bad_alloc), changing nothing:
  // frames `r` with the next LSN and makes room for it in the buffer.
  // `proven` is JournalWriter::durable_lsn(): the record vouches that
  // everything up to it reached stable storage (0, for tests: it vouches for
  // nothing).
  Framed Frame(const Record& r, uint64_t proven = 0);
  // The other half, which allocates nothing: buffers `f` (framed by the
  // latest Frame, with nothing appended since) and returns its ticket
  // (durable once a commit covering that ticket returns).
  uint64_t Add(Framed&& f);
  // Both: either the whole frame is buffered with its LSN and ticket, or
  // (an exception) nothing changed.
  uint64_t Append(const Record& r, uint64_t proven = 0) { return Add(Frame(r, proven)); }
  // A ticket for an in-place write (no record points at its data: the AU is
  // durably mapped already): durable once a commit covering the ticket has
  // synced. No data sync has to precede the batch's records for it, unless
  // a record is appended after it (see Append).
  uint64_t TicketWithoutRecord() {
    inplace_dirty_ = true;
    return ++last_ticket_;
  }
  // The LSN the next Append frames.
  uint64_t next_lsn() const { return next_lsn_; }
  // The ticket the next Append (or TicketWithoutRecord) will hand out.
  uint64_t next_ticket() const { return last_ticket_ + 1; }
  uint64_t last_ticket() const { return last_ticket_; }
  // Data was written that buffered records will point at: the commit that
  // writes them must sync the data first.
  void NoteDataWritten() { data_dirty_ = true; }

  size_t bytes() const { return buf_.size(); }
  bool empty() const { return buf_.empty(); }
  // Moves everything buffered into *b.
  void TakeBatch(JournalBatch* b);
  // A checkpoint captured every buffered record: drops them. Returns the
  // LSN the new journal starts at.
  uint64_t DropForCheckpoint();

  // Where LSNs continue after replay, and the gap that keeps a torn tail or a
  // fallen-back generation from passing for new records.
  void set_next_lsn(uint64_t lsn) { next_lsn_ = lsn; }
  void SkipLsns(uint64_t n) { next_lsn_ += n; }

 private:
  std::string buf_;
  uint64_t next_lsn_ = 1;
  uint64_t last_ticket_ = 0;
  uint64_t proven_ = 0;  // the highest `proven` buffered (JournalBatch::proven)
  bool data_dirty_ = false;
  bool inplace_dirty_ = false;
};

// Test-only fault injection, inert unless a test sets it (per thread): when
// positive, each Core::AppendLocked counts it down once ApplyRecord has
// changed the in-memory state, and the one that brings it to zero throws
// std::bad_alloc there, as an allocation failing inside ApplyRecord would.
inline thread_local int fail_after_apply_for_test = 0;

// The commit step's order, written once for v1/v2's fixed region
// (JournalWriter) and v3's ring (JournalRing): sync the data the batch's
// records rest on (if any), `append` the records (only when there are any),
// sync again (also for in-place data alone). The caller moves its tail and
// durable LSN only when this succeeds.
Status CommitJournalBatch(File* file, const JournalBatch& b, const std::function<Status()>& append);

class JournalWriter {
 public:
  void set_capacity(uint64_t bytes) { capacity_ = bytes; }
  uint64_t capacity() const { return capacity_; }
  uint64_t tail() const { return tail_; }
  void set_tail(uint64_t tail) { tail_ = tail; }
  // False if `bytes` more do not fit: the pool must checkpoint instead.
  bool Fits(size_t bytes) const { return tail_ + bytes <= capacity_; }

  // The commit step: sync the data the batch's records rest on (if any),
  // append the batch at the tail, sync again (also for in-place data alone). On success the batch is durable and the
  // tail moves past it; on failure the tail stays and the pool must be
  // reopened (what reached the disk is only a torn, unreplayable tail).
  Status WriteBatch(File* file, const JournalBatch& b);

  // After a checkpoint made every record obsolete: empties the journal
  // (zeroes the region, ZeroFill, so no stale record can pass for a new one).
  void Restart(File* file);

  // The highest LSN known durable: set only after a batch's sync returned,
  // or once a checkpoint's superblock holds every earlier record. Atomic: it
  // is read by whoever frames records (Core::DurableLsn) without leading
  // the commit queue.
  uint64_t durable_lsn() const { return durable_lsn_.load(); }
  void set_durable_lsn(uint64_t lsn) { durable_lsn_.store(lsn); }

 private:
  uint64_t capacity_ = 0;
  uint64_t tail_ = 0;
  std::atomic<uint64_t> durable_lsn_{0};
};

// Where replay stopped.
struct ReplayEnd {
  uint64_t tail = 0;      // bytes of valid records
  uint64_t next_lsn = 0;  // the LSN after the last valid record
  // A CRC-valid record with a later LSN lies where replay stopped: the
  // journal belongs to a newer superblock than the one replay started from.
  bool newer_record_follows = false;
  // Replay stopped at a record that later records prove was durable: it is
  // damaged, not torn (replay.h). `lost` names what opening anyway gives up.
  bool damaged = false;
  // Replay stopped at a data-checked map whose data does not match its CRCs
  // (JournalReplay::data_mismatch): a torn data write unless `damaged`.
  bool data_mismatch = false;
  std::vector<std::string> lost;  // JournalReplay::lost: capped, then a count
  uint64_t lost_operations = 0;
  // JournalReplay::Explain: the error when damaged or newer; with
  // data_mismatch alone, why the tail was dropped.
  std::string explain;
};

// The verdict of a scan (replay.h) as open reports it.
struct JournalReplay;
ReplayEnd ReplayEndOf(JournalReplay&& jr);

// Applies the records of j[0..n) with consecutive LSNs from start_lsn to
// *st; the first bad, torn or stale record ends replay, and *end says whether
// that was a torn tail or something Open must refuse (replay.h). kCorruption
// if a valid record does not fit the state.
Status ReplayJournal(const uint8_t* j, size_t n, uint64_t start_lsn, MetaState* st,
                     ReplayEnd* end, uint32_t version = kFormatVersion);
// The same over a journal read through a bounded window (v3's ring,
// journal_segments.h); also fails as the source's reads do.
Status ReplayJournal(JournalSource* j, uint64_t start_lsn, MetaState* st, ReplayEnd* end,
                     uint32_t version = kFormatVersion);

}  // namespace cowstore::store
