// SPDX-License-Identifier: Apache-2.0
// Reads a journal region the way recovery must (docs/design/store.md,
// "Recovery rules"): the records to replay, and whether replay stopped at a
// power-cut tear (normal: those records were never acknowledged) or at damage
// to records that were durable (which must never be dropped silently).
//
// Bytes in, verdict out: this file decides which records replay and why. The
// caller applies them, handed over one by one as they are read (RecordSink):
// so on an error, or before the verdict is acted on, the caller's state holds
// a prefix of them and must be thrown away unless the verdict accepts it.
#pragma once

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

struct JournalReplay {
  // Consecutive LSNs from the start LSN, to apply in order: kept here only
  // when ScanJournal was given no RecordSink.
  std::vector<Record> records;
  uint64_t replayed = 0;        // how many, kept or handed to the sink
  uint64_t end = 0;             // journal bytes holding them (where the next record goes)
  uint64_t next_lsn = 0;        // the LSN replay expected at `end`

  // Replay stopped at `end`, but a CRC-valid record further on vouches (its
  // `proven` LSN) that the record expected at `end` had been durable: that
  // record is damaged on the media and everything after it would be lost.
  bool damaged = false;
  // Replay stopped at `end` at a kMapChecked record no later record vouches
  // for whose grains do not hold the data its CRCs name (the CRC rule
  // below): like a torn tail, clean unless a record after it proves it was
  // durable (then `damaged`). Explain says so either way: the record itself
  // was read whole, only its data was not the data it names.
  bool data_mismatch = false;
  // Journal bytes the CRC rule read again: below three times the journal's
  // size, whatever the records' `proven` (below).
  uint64_t reread_bytes = 0;
  // The record at `end` is CRC-valid but carries a later LSN than expected:
  // the journal belongs to a newer superblock than the one being used.
  bool newer_generation = false;
  // With damaged or newer_generation: what opening anyway gives up, one line
  // per record, the unreadable one first (with data_mismatch, the record
  // read, named, and that its data did not match); past kMaxLostLines, one
  // last line counts the rest. A damaged ring of small records may hold
  // millions: their lines would cost the daemon gigabytes.
  std::vector<std::string> lost;
  uint64_t lost_operations = 0;  // every one, listed or not
  static constexpr size_t kMaxLostLines = 1000;

  // The scan for later records tries ParseRecord wherever a header looks
  // plausible, and a failed try costs up to its declared length: crafted or
  // badly damaged bytes with a plausible header every few bytes would make
  // that quadratic (hours for a 1 GiB ring, inside the daemon). The bytes
  // failed tries declared are counted; past LaterScanBudget (far more than a
  // torn batch, at most the journal, plus a few stray headers, can declare)
  // the scan stops and replay reports damage it cannot judge: the open is
  // refused, and a repair gives up what follows, knowingly.
  uint64_t failed_record_bytes = 0;
  bool unjudged = false;  // the budget ran out: set with `damaged`
  static constexpr uint64_t LaterScanBudget(uint64_t journal_bytes) {
    return 4 * journal_bytes + 8 * kMaxRecordBytes;
  }
  // Why replay stopped where it did, one line: the error message when
  // damaged or newer_generation; with data_mismatch alone, the torn data
  // write that ended it (nothing committed was lost); else "journal intact".
  std::string Explain() const;
};

// `j` is the journal region, from replay's start (journal_source.h: read
// through a bounded window unless it is in memory already); `start_lsn` the
// superblock's; `version` its format version. Version 1 records carry no
// `proven`, so a version-1 journal can only be told torn or newer, never
// proven damaged (the window closes at the upgrade: docs/design/store.md,
// "Format versions"). Version 1 records have no size bound either, so a
// version-1 journal must be in memory (kInvalidArgument otherwise). Fails
// only as the source's reads do. `window` (tests: smaller, to cross more
// window edges) must hold kMaxRecordBytes.
// With `sink`, each record is handed to it as it is read, in order, and not
// kept: replay's memory is then the window's, however many records a ring
// holds (a 1 GiB ring of small records would otherwise be gigabytes inside
// the daemon). The sink sees every record before the verdict is known, as
// applying them in order always did; a sink's failure ends the scan and is
// returned.
//
// The CRC rule (format 3; store-v3.md 3.6 item 1). A kMapChecked record's
// data and the record reach the disk under one sync, so a record may be
// durable while its data is not. A record that a later record of the chain
// vouches for (LSN <= that record's `proven`) is not checked: its batch's
// sync had returned before the later record was framed, and its grains may
// since have been overwritten in place (allowed once a vouching record is
// durable). The kMapChecked records above every `proven` of the chain (the
// unvouched tail: the last batches, whose syncs may not have returned) are
// checked through `check`, in order, and the first whose data does not
// match ends replay there, as a torn record would (data_mismatch): it and
// everything after it are dropped, and the scan for later records judges
// the stop as it judges a tear, so the rest of that tail (proven below the
// stop) never reads as damage, while a later record vouching for the
// dropped one does. Since the chain's end is known only once it is read, a
// kMapChecked record not yet vouched for holds the records from it on back
// from the sink until a later one vouches (they are then read again and
// handed over) or the chain ends (read again, checked); once the bytes read
// again pass the journal's size, every later held stretch waits for the
// chain's end (one more reading at most). Formats 1 and 2
// never hold a kMapChecked record: `version` below 3 refuses one in the
// chain (kCorruption: this build's rule for what those formats may hold,
// and an older build cannot read it). At version 3, a kMapChecked record
// to check without a `check` is kInvalidArgument; `check`'s error ends the
// scan and is returned.
using RecordSink = std::function<Status(Record&&)>;
// Whether the grains a kMapChecked record maps hold the data its CRCs name
// (CheckMappedData for a pool file).
using DataCheck = std::function<Result<bool>(const Record&)>;
Result<JournalReplay> ScanJournal(JournalSource* j, uint64_t start_lsn,
                                  uint32_t version = kFormatVersion,
                                  size_t window = kJournalWindowBytes,
                                  const RecordSink& sink = nullptr,
                                  const DataCheck& check = nullptr);
// A format 3 pool's DataCheck: CheckedRecordRule (meta.h) for its `grains`
// grains of `grain` bytes from byte `data_offset` of `file` (kCorruption if
// `r` breaks it: no data read), then each run's grains read in pieces of
// kOneSyncWriteBytes and CRC'd, `*budget` (the bytes one replay may still
// check: MaxCheckedDataBytes) reduced by what it reads; a record needing
// more than is left is kCorruption, no data read. Fails as the file's reads
// do.
Result<bool> CheckMappedData(File* file, uint64_t data_offset, uint32_t grain, uint64_t grains,
                             const Record& r, uint64_t* budget);
// The most data one replay of a pool of `grains` grains of `grain` bytes
// checks: its grains, once. A writer never leaves two kMapChecked records
// naming one grain unvouched together (checked_grains.h: a marked grain is
// neither written in place nor, once freed, punched or reused before the
// vouch, and the open holds the replayed ones until its checkpoint), and
// every grain they name lies in the pool, so no tail a pool's writer left
// reads more; a crafted or damaged journal naming the same grains again
// and again is refused (kCorruption) rather than read: a 1 GiB ring of
// one-run records at grain 4 KiB would otherwise read 1.1 TiB. The ring
// bounds it too (a kMapChecked record is at least 61 bytes and reads at
// most CheckedRecordRule's grains), but no tighter than the scan can
// read anyway. Below 2^62: PoolUnitsRuleV3.
constexpr uint64_t MaxCheckedDataBytes(uint32_t grain, uint64_t grains) { return grains * grain; }
// The journal region in memory (a version 1 region, tests): fails as the
// scan does over any source (a kMapChecked record in a format 1 or 2
// journal, or one to check without a DataCheck), never by a read.
Result<JournalReplay> ScanJournal(const uint8_t* j, size_t n, uint64_t start_lsn,
                                  uint32_t version = kFormatVersion);

}  // namespace cowstore::store
