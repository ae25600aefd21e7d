// SPDX-License-Identifier: Apache-2.0
#include "handler/store/checkpoint.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "handler/store/crc32c.h"
#include "handler/store/pool_impl.h"

namespace cowstore::store {

uint64_t CheckpointUnits(uint64_t bytes, uint32_t au) {
  return std::max<uint64_t>(1, DivUp(bytes, au - kChunkHeader));
}

Status WriteCheckpointChain(File* file, uint64_t data_offset, uint32_t au,
                            const std::vector<uint64_t>& aus, const std::string& payload,
                            uint64_t seq, const Uuid& uuid) {
  std::string chunk;
  const size_t per = au - kChunkHeader;
  for (size_t i = 0; i < aus.size(); i++) {
    size_t off = std::min(i * per, payload.size());
    ChunkHeader h;
    h.seq = seq;
    h.index = static_cast<uint32_t>(i);
    h.len = static_cast<uint32_t>(std::min(per, payload.size() - off));
    h.next = i + 1 < aus.size() ? aus[i + 1] : kNone;
    h.uuid = uuid;
    EncodeChunk(h, payload.data() + off, &chunk);
    Status s = file->Write(data_offset + aus[i] * au, chunk.size(), chunk.data());
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status ReadCheckpointChain(File* file, const Superblock& sb, uint64_t units, std::string* payload,
                           std::vector<uint64_t>* aus) {
  payload->clear();
  aus->clear();
  std::vector<char> chunk(sb.au);
  uint64_t p = sb.ckpt_first;
  for (uint32_t i = 0; payload->size() < sb.ckpt_bytes || i == 0; i++) {
    if (p >= units || aus->size() > units)
      return Status(Code::kCorruption, "checkpoint chain leaves the pool");
    Status s = file->Read(sb.data_offset + p * sb.au, sb.au, chunk.data());
    if (!s.ok()) return s;
    ChunkHeader h;
    bool ok = DecodeChunk(chunk.data(), chunk.size(), &h) && h.seq == sb.ckpt_seq &&
              h.index == i && h.uuid == sb.uuid;
    if (!ok)
      return Status(Code::kCorruption, "checkpoint chunk " + std::to_string(i) + " at AU " +
                                           std::to_string(p) + " is damaged");
    aus->push_back(p);
    payload->append(chunk.data() + kChunkHeader, h.len);
    if (payload->size() >= sb.ckpt_bytes) break;
    p = h.next;
  }
  if (payload->size() != sb.ckpt_bytes || Crc32c(0, payload->data(), payload->size()) != sb.ckpt_crc)
    return Status(Code::kCorruption, "checkpoint checksum mismatch");
  return Status::Ok();
}

namespace {

Status CheckpointFailed(Status s, bool threw) {
  if (!threw) return s;
  // An exception's status says what it was ("out of memory", also for
  // Open's checkpoint, whose caller discards the Core), with the code of a
  // failed pool: kIOError, as MetaFailed(); kNoSpace would promise that
  // nothing changed. (This may throw, outside any catch: the commit queue
  // and the API edge catch it.)
  return Status(Code::kIOError, s.message() + "; the pool must be reopened");
}

}  // namespace

// Freezes the state under the metadata lock and takes the AUs the format
// needs for it, then has the format write it outside the lock (checkpoint,
// superblock, journal restart: MetaFormat::WriteCheckpoint); then installs
// the AUs the format says the new checkpoint occupies (its meta_units(),
// not the AUs taken: a format may keep some of the previous checkpoint's
// and leave some taken unused): the previous checkpoint's others are freed
// once nothing can read them, the unused ones at once (PoolSpace::InstallMeta).
//
// A checkpoint that fails, at any step, whether it threw or returned an
// error, fails the pool (meta_failed_, set under meta_mu_ as AppendLocked
// and Grow set it, so nothing passes CheckUsable or AppendLocked in
// between):
// - once the buffered records are dropped (they are in the snapshot), even a
//   failure that wrote nothing leaves changes in memory that no later commit
//   can make durable;
// - a failure may come after the superblock that names the new checkpoint is
//   durable (the second slot, its sync, the journal restart: Core cannot
//   tell before from after), and the space map taking the new checkpoint and
//   freeing the old one (InstallMeta) may stop half done, or refuse a set
//   that disagrees with the AUs it handed over (an engine bug);
// - a failure before anything changed (no room for the checkpoint, no memory
//   to encode it) fails the commit, and the commit queue's failure is sticky:
//   the pool can make nothing durable any more either way, and one rule is
//   simpler to trust than two.
// The commit queue fails too (the error is the commit's), but that alone
// would let reads and LUN changes in memory go on from metadata that
// disagrees with the disk. Reopening rebuilds everything from the durable
// state.
Status Core::CheckpointLocked(uint64_t* target) {
  constexpr std::string_view kWhere = "checkpoint failed";
  Status s;
  bool threw = false;
  FrozenCheckpoint frozen;
  DirtyRanges taken;  // what `frozen` changed (dirty_ranges.h's hand-over)
  std::vector<uint64_t> aus;
  uint64_t start_lsn = 0;
  {
    MutexLock g(&meta_mu_);
    if (meta_failed_.load()) return MetaFailed();  // st_ may be half-changed
    try {
      // track_dirty_ is a copy (AppendLocked may not read format_). Were it
      // ever false for a format that tracks, every Freeze would get an empty
      // set and reuse every leaf: each change since the open silently lost.
      // Refusing costs one virtual call a checkpoint.
      if (track_dirty_ != format_->tracks_dirty()) {
        s = Status(Code::kIOError,
                   "checkpoint refused: the engine's dirty tracking disagrees with the metadata "
                   "format's (a bug); the pool must be reopened");
      } else if (space_->meta_units() != space_->meta_aus().size() * space_->units_per_au()) {
        // Nothing handed over may outlive a checkpoint: InstallMeta frees the
        // AUs handed over but not named at once, without a punch (meta_turnover.h),
        // which is sound only for AUs this checkpoint was handed. An AU left
        // from elsewhere could hold bytes a LUN would then read. A refusal,
        // not an assert, since release builds drop those.
        s = Status(Code::kIOError,
                   "checkpoint refused: metadata AUs were handed over outside a checkpoint (a "
                   "bug); the pool must be reopened");
      } else {
        frozen = format_->Freeze(st_, dirty_);
        if (space_->TakeMeta(frozen.meta_units, &aus)) {
          *target = jbuf_.last_ticket();
          start_lsn = jbuf_.DropForCheckpoint();  // every buffered record is in the snapshot
          taken = dirty_.Take();  // with the copy: later marks are the next checkpoint's
        } else {
          s = Status(Code::kNoSpace, "no room for a metadata checkpoint");
        }
      }
    } catch (...) {
      s = StatusFromCurrentException(kWhere);  // never throws
      threw = true;
    }
    if (!s.ok()) {
      meta_failed_.store(true);
      return CheckpointFailed(std::move(s), threw);
    }
  }
  try {
    s = format_->WriteCheckpoint(file_.get(), frozen, aus, start_lsn);
  } catch (...) {
    s = StatusFromCurrentException(kWhere);
    threw = true;
  }
  MutexLock g(&meta_mu_);
  if (s.ok()) {
    try {
      s = space_->InstallMeta(format_->meta_units(), *target);
      if (s.ok()) return Status::Ok();
    } catch (...) {
      s = StatusFromCurrentException(kWhere);
      threw = true;
    }
  }
  try {
    dirty_.Merge(taken);  // the hand-over's contract, though the pool fails
  } catch (...) {
    // No memory: marks lost only matter to a checkpoint, and a failed pool
    // writes none.
  }
  meta_failed_.store(true);
  return CheckpointFailed(std::move(s), threw);
}

}  // namespace cowstore::store
