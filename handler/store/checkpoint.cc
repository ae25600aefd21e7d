// Writing a checkpoint: the whole metadata state into fresh AUs, then a new
// superblock pointing at it, which empties the journal.

#include "handler/store/pool_impl.h"

#include <algorithm>

#include "handler/store/crc32c.h"

namespace cowstore::store {

Status Core::CheckpointLocked(uint64_t* target) {
  std::string payload;
  std::vector<uint64_t> aus;
  uint64_t start_lsn;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    EncodeState(st_, &payload);
    uint64_t n = std::max<uint64_t>(1, DivUp(payload.size(), au_ - kChunkHeader));
    if (!space_.TakeMeta(n, &aus))
      return Status(Code::kNoSpace, "no room for a metadata checkpoint");
    *target = jbuf_.last_ticket();
    start_lsn = jbuf_.DropForCheckpoint();  // every buffered record is in the snapshot
  }
  Superblock nsb = sb_;
  nsb.seq = sb_.seq + 1;
  nsb.ckpt_first = aus[0];
  nsb.ckpt_seq = nsb.seq;
  nsb.ckpt_bytes = payload.size();
  nsb.ckpt_crc = Crc32c(0, payload.data(), payload.size());
  nsb.journal_start_lsn = start_lsn;
  Status s;
  std::string chunk;
  size_t per = au_ - kChunkHeader;
  for (size_t i = 0; i < aus.size() && s.ok(); i++) {
    size_t off = i * per;
    size_t len = std::min(per, payload.size() - std::min(off, payload.size()));
    chunk.clear();
    Encoder e(&chunk);
    e.Bytes(kChunkMagic, 8);
    e.U64(nsb.seq);
    e.U32(static_cast<uint32_t>(i));
    e.U32(static_cast<uint32_t>(len));
    e.U64(i + 1 < aus.size() ? aus[i + 1] : kNone);
    e.Bytes(sb_uuid_.data(), 16);
    chunk.resize(kChunkHeader - 4, '\0');
    chunk.append(payload, off, len);
    uint32_t crc = Crc32c(0, chunk.data(), chunk.size());
    std::string c4;
    Encoder(&c4).U32(crc);
    chunk.insert(kChunkHeader - 4, c4);
    s = file_->Write(AuOffset(aus[i]), chunk.size(), chunk.data());
  }
  if (s.ok()) s = file_->Sync();  // data and checkpoint before the superblock
  if (s.ok()) s = WriteSuperblockLocked(nsb);
  if (s.ok()) s = file_->Sync();
  if (!s.ok()) return s;  // caller marks the pool failed; reopen recovers
  sb_ = nsb;
  journal_.Restart(file_.get());
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    space_.InstallMeta(std::move(aus), *target);
  }
  return Status::Ok();
}

}  // namespace cowstore::store
