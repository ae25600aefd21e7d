// SPDX-License-Identifier: Apache-2.0
// One command in flight: the LU, the CDB and its data buffers, plus helpers
// every command implementation needs (data-out gathering, data-in scatter,
// LBA range checks, store status -> sense). Internal to handler/scsi.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/scsi/deferred_commit.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/sense.h"
#include "handler/store/pool.h"

namespace cowstore::scsi {

struct Command {
  LogicalUnit& lu;
  std::span<const uint8_t> cdb;  // exactly the opcode's CDB length
  std::span<const iovec> iov;
  uint64_t data_length = 0;      // total bytes of iov
  // Non-null: the caller commits (deferred_commit.h), so what must be
  // durable before the status goes in buffered and is recorded here.
  DeferredCommit* deferred = nullptr;

  Command(LogicalUnit& l, std::span<const uint8_t> c, std::span<const iovec> v,
          DeferredCommit* d = nullptr);

  // The durability a write to `target` asks of the store: kDurable with its
  // write cache off or FUA set (LogicalUnit::write_durability), unless the
  // caller commits: then kBuffered, with `target` recorded for the commit.
  store::Durability WriteDurability(bool fua, LogicalUnit& target);
  store::Durability WriteDurability(bool fua) { return WriteDurability(fua, lu); }
  // Makes `target`'s buffered writes durable before the status goes back:
  // its Flush now, or recorded for the caller's commit.
  store::Status FlushBeforeStatus(LogicalUnit& target);

  // Copies up to `len` data-out bytes starting at `offset`; returns the count.
  size_t Gather(uint64_t offset, void* dst, size_t len) const;
  // Data-out bytes [0, len) as one vector (len clamped to data_length).
  std::vector<uint8_t> GatherAll(size_t len) const;
  // Writes data-in from offset 0, at most min(len, alloc_len, data_length);
  // returns GOOD with the bytes written as data_in_length.
  CommandResult ReturnData(const void* src, size_t len, uint64_t alloc_len) const;
  // The iovecs covering data bytes [offset, offset+len) (len must fit).
  std::vector<iovec> Slice(uint64_t offset, uint64_t len) const;

  uint32_t block_size() const { return lu.lun().block_size(); }
  uint64_t block_count() const { return lu.lun().block_count(); }
  // True if [lba, lba+count) lies inside the LUN (overflow-safe).
  bool InRange(uint64_t lba, uint64_t count) const {
    uint64_t n = block_count();
    return lba <= n && count <= n - lba;
  }
};

// CHECK CONDITION / UNIT ATTENTION with the code of `ua`.
CommandResult UnitAttentionResult(UnitAttention ua);

// Maps a failed store Status to a result. `writing` picks WRITE ERROR over
// UNRECOVERED READ ERROR for kIOError. kOk maps to GOOD.
CommandResult FromStoreStatus(LogicalUnit& lu, const store::Status& status, bool writing);

}  // namespace cowstore::scsi
