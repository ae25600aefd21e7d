#include "handler/store/pool_impl.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "handler/store/crc32c.h"
#include "handler/store/iovec_slice.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kLsnGapAfterOpen = 1ull << 32;  // skips LSNs a torn tail may hold
constexpr uint64_t kMaxWriteChunkUnits = 256;       // bounds one kMap record
constexpr char kChunkMagic[8] = {'C', 'O', 'W', 'C', 'K', 'P', 'T', '1'};

uint64_t DivUp(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64 || n[0] == '.' || n[0] == '-') return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  return true;
}

Uuid NewUuid() {
  std::random_device rd;
  Uuid u;
  for (auto& b : u) b = static_cast<uint8_t>(rd());
  u[6] = (u[6] & 0x0f) | 0x40;  // RFC 4122 version 4
  u[8] = (u[8] & 0x3f) | 0x80;
  return u;
}

Status ReadOnly() { return Status(Code::kInvalidArgument, "pool is open read-only"); }

// Gathers/scatters between an iovec list and a contiguous buffer.
size_t IovBytes(std::span<const iovec> iov) {
  size_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

}  // namespace

// ---------------------------------------------------------------- FreeSpace

void FreeSpace::Add(uint64_t p, uint64_t n) {
  if (n == 0) return;
  count_ += n;
  auto next = runs_.lower_bound(p);
  if (next != runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == p) {
      prev->second += n;
      if (next != runs_.end() && next->first == p + n) {
        prev->second += next->second;
        runs_.erase(next);
      }
      return;
    }
  }
  if (next != runs_.end() && next->first == p + n) {
    uint64_t len = n + next->second;
    auto hint = runs_.erase(next);
    runs_.emplace_hint(hint, p, len);
    return;
  }
  runs_.emplace_hint(next, p, n);
}

bool FreeSpace::Take(uint64_t n, std::vector<uint64_t>* out) {
  if (n > count_) return false;
  if (n == 0) return true;
  // Prefer one run that holds all n at or after the cursor, else take pieces.
  auto it = runs_.lower_bound(cursor_);
  for (auto j = it; j != runs_.end(); ++j) {
    if (j->second >= n) { it = j; break; }
  }
  if (it == runs_.end()) it = runs_.begin();
  while (n > 0) {
    if (it == runs_.end()) it = runs_.begin();
    uint64_t start = it->first, len = it->second;
    uint64_t k = std::min(n, len);
    for (uint64_t i = 0; i < k; i++) out->push_back(start + i);
    it = runs_.erase(it);
    if (k < len) it = runs_.emplace_hint(it, start + k, len - k);
    count_ -= k;
    n -= k;
    cursor_ = start + k;
  }
  return true;
}

// --------------------------------------------------------------- refcounts

void Core::Inc(uint64_t phys, uint64_t n) {
  for (uint64_t p = phys; p < phys + n; p++)
    if (refs_[p]++ == 0) mapped_units_++;
}

void Core::Dec(uint64_t phys, uint64_t n) {
  uint64_t tag = seq_ + 1;  // the ticket AppendLocked is about to hand out
  for (uint64_t p = phys; p < phys + n; p++) {
    if (--refs_[p] == 1) unshared_[p] = tag;  // on disk it is still shared until `tag`
    if (refs_[p] != 0) continue;
    mapped_units_--;
    state_[p] = AuState::kPending;
    if (!pending_.empty() && pending_.back().tag == tag &&
        pending_.back().phys + pending_.back().n == p)
      pending_.back().n++;
    else
      pending_.push_back({p, 1, tag});
  }
}

void Core::SetStateLocked(uint64_t p, uint64_t n, AuState s) {
  for (uint64_t i = p; i < p + n; i++) state_[i] = s;
}

uint64_t Core::AppendLocked(const Record& r) {
  Status s = ApplyRecord(&st_, r, this);
  (void)s;  // records built at run time always fit the state
  FrameRecord(r, next_lsn_++, &jbuf_);
  return ++seq_;
}

uint64_t Core::CkptUnits(uint64_t extents) const {
  uint64_t bytes = 64 + st_.luns.size() * 128 + extents * 24;
  return DivUp(bytes, au_ - kChunkHeader) + 1;
}

bool Core::AffordableLocked(uint64_t need, uint64_t extra_extents) const {
  return free_.count() >= need + CkptUnits(st_.extents() + extra_extents);
}

Status Core::ReserveLocked(uint64_t need, uint64_t extra_extents, std::vector<uint64_t>* out) {
  if (!AffordableLocked(need, extra_extents))
    return Status(Code::kNoSpace, "pool is full: " + std::to_string(need) +
                                      " allocation units needed, " +
                                      std::to_string(free_.count()) + " free");
  uint64_t before = out->size();
  free_.Take(need, out);
  for (size_t i = before; i < out->size(); i++) state_[(*out)[i]] = AuState::kReserved;
  reserved_ += need;
  NoteAllocationLocked(free_.count() + need);
  return Status::Ok();
}

void Core::NoteAllocationLocked(uint64_t free_before) {
  if (soft_percent_ == 0) return;
  uint64_t limit = total_units_ * soft_percent_ / 100;
  uint64_t used_before = total_units_ - free_before, used_now = total_units_ - free_.count();
  if (used_before < limit && used_now >= limit) soft_gen_++;
}

void Core::Unreserve(const std::vector<uint64_t>& aus, bool dirty) {
  std::vector<uint64_t> bad;
  if (dirty) {
    for (uint64_t p : aus)
      if (!file_->PunchHole(AuOffset(p), au_).ok()) bad.push_back(p);
  }
  std::lock_guard<std::mutex> g(meta_mu_);
  reserved_ -= aus.size();
  for (uint64_t p : aus) {
    if (std::find(bad.begin(), bad.end(), p) != bad.end()) {
      state_[p] = AuState::kQuarantine;
      quarantined_++;
    } else {
      state_[p] = AuState::kFree;
      free_.Add(p, 1);
    }
  }
}

// ------------------------------------------------------------------ commit

Status Core::WriteSuperblockLocked(const Superblock& sb) {
  std::string img = sb.Encode();
  return file_->Write((sb.seq % 2) * kSuperblockSlot, img.size(), img.data());
}

Status Core::Commit(uint64_t ticket) {
  if (durable_seq_.load() >= ticket) return Status::Ok();
  std::lock_guard<std::mutex> cg(commit_mu_);
  if (durable_seq_.load() >= ticket) return Status::Ok();
  if (!failed_.ok()) return failed_;
  std::string buf;
  uint64_t target = 0;
  bool dirty = false, ckpt = false;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    if (jtail_ + jbuf_.size() > journal_bytes_) {
      ckpt = true;
    } else {
      buf.swap(jbuf_);
      target = seq_;
      dirty = data_dirty_;
      data_dirty_ = false;
    }
  }
  Status s;
  if (ckpt) {
    s = CheckpointLocked(&target);
  } else {
    // Data first: everything the buffered records point at is on disk before
    // the records themselves. Metadata-only commits (clone, unmap) skip it.
    if (dirty) s = file_->Sync();
    if (s.ok() && !buf.empty()) {
      s = file_->Write(kJournalOffset + jtail_, buf.size(), buf.data());
      if (s.ok()) s = file_->Sync();
      if (s.ok()) jtail_ += buf.size();
    }
  }
  if (!s.ok()) {
    failed_ = Status(s.code(), "commit failed, pool must be reopened: " + s.message());
    return failed_;
  }
  durable_seq_.store(target);
  ReleasePending(target);
  return Status::Ok();
}

void Core::ReleasePending(uint64_t target) {
  std::vector<Pending> ready;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    auto keep = pending_.begin();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->tag <= target) {
        if (!ready.empty() && ready.back().phys + ready.back().n == it->phys)
          ready.back().n += it->n;
        else
          ready.push_back(*it);
      } else {
        *keep++ = *it;
      }
    }
    pending_.erase(keep, pending_.end());
    for (auto it = unshared_.begin(); it != unshared_.end();)
      it = it->second <= target ? unshared_.erase(it) : std::next(it);
  }
  if (ready.empty()) return;
  // The freeing records are durable: no recovered state can map these AUs,
  // so they may be zeroed (punched, keeping the file thin) and reused.
  std::vector<bool> ok(ready.size());
  for (size_t i = 0; i < ready.size(); i++)
    ok[i] = file_->PunchHole(AuOffset(ready[i].phys), ready[i].n * au_).ok();
  std::lock_guard<std::mutex> g(meta_mu_);
  for (size_t i = 0; i < ready.size(); i++) {
    if (ok[i]) {
      SetStateLocked(ready[i].phys, ready[i].n, AuState::kFree);
      free_.Add(ready[i].phys, ready[i].n);
    } else {
      SetStateLocked(ready[i].phys, ready[i].n, AuState::kQuarantine);
      quarantined_ += ready[i].n;
    }
  }
}

Status Core::CheckpointLocked(uint64_t* target) {
  std::string payload;
  std::vector<uint64_t> aus, old;
  uint64_t start_lsn;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    EncodeState(st_, &payload);
    uint64_t n = std::max<uint64_t>(1, DivUp(payload.size(), au_ - kChunkHeader));
    if (!free_.Take(n, &aus))
      return Status(Code::kNoSpace, "no room for a metadata checkpoint");
    for (uint64_t p : aus) state_[p] = AuState::kMeta;
    meta_units_ += n;
    *target = seq_;
    start_lsn = next_lsn_;
    jbuf_.clear();  // every buffered record is in the snapshot
    data_dirty_ = false;
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
  jtail_ = 0;
  // The old journal is now garbage; clear it so no stale record can ever be
  // mistaken for a new one (made durable by the next commit's sync).
  (void)file_->PunchHole(kJournalOffset, journal_bytes_);
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    old.swap(ckpt_aus_);
    ckpt_aus_ = aus;
    meta_units_ -= old.size();
    for (uint64_t p : old) state_[p] = AuState::kPending;
    // The old checkpoint is unreachable now: free it through the pending path.
    for (uint64_t p : old) pending_.push_back({p, 1, *target});
  }
  return Status::Ok();
}

// ------------------------------------------------------------ create/open

Result<std::shared_ptr<Core>> Core::Create(Env* env, const std::string& path,
                                           const PoolOptions& o) {
  uint32_t au = o.allocation_unit;
  if (au < (64u << 10) || au > (1u << 20) || (au & (au - 1)) != 0)
    return Status(Code::kInvalidArgument,
                  "allocation unit must be a power of two from 64 KiB to 1 MiB");
  if (o.soft_threshold_percent > 100)
    return Status(Code::kInvalidArgument, "soft threshold is a percentage");
  uint64_t jbytes = o.journal_bytes ? o.journal_bytes : kDefaultJournalBytes;
  if (jbytes < kMinJournalBytes || jbytes > (1ull << 30) || jbytes % 4096)
    return Status(Code::kInvalidArgument, "journal size must be 64 KiB..1 GiB, 4 KiB aligned");
  bool existed = env->Exists(path);
  auto f = env->OpenLocked(path, existed ? Env::Mode::kReadWrite : Env::Mode::kCreate);
  if (!f.ok()) return f.status();
  std::unique_ptr<File> file = std::move(f.value());
  auto fsize = file->Size();
  if (!fsize.ok()) return fsize.status();
  if (existed) {
    char buf[kSuperblockSlot];
    for (int slot = 0; slot < 2; slot++) {
      Status s = file->Read(slot * kSuperblockSlot, sizeof buf, buf);
      if (!s.ok()) return s;
      if (std::memcmp(buf, "COWSTORE", 8) == 0)
        return Status(Code::kAlreadyExists, "a pool already exists at " + path);
    }
    if (!file->IsBlockDevice() && *fsize > 0)
      return Status(Code::kAlreadyExists, path + " exists and is not an empty file");
  }
  uint64_t size = o.size_bytes;
  if (file->IsBlockDevice()) {
    if (size == 0) size = *fsize;
    if (size > *fsize) return Status(Code::kInvalidArgument, "size exceeds the device");
  }
  Superblock sb;
  sb.uuid = NewUuid();
  sb.au = au;
  sb.size_bytes = size;
  sb.journal_bytes = jbytes;
  sb.data_offset = DivUp(kJournalOffset + jbytes, au) * au;
  sb.soft_threshold_percent = o.soft_threshold_percent;
  if (size < sb.data_offset + 8ull * au)
    return Status(Code::kInvalidArgument, "pool too small: needs at least " +
                                              std::to_string(sb.data_offset + 8ull * au) +
                                              " bytes");
  std::mt19937_64 rng(std::random_device{}());
  sb.journal_start_lsn = (rng() >> 24) + 1;  // never the LSNs of an older pool here
  Status s;
  if (!file->IsBlockDevice()) s = file->Truncate(size);
  if (s.ok()) s = file->PunchHole(kJournalOffset, jbytes);
  for (uint64_t seq = 0; seq < 2 && s.ok(); seq++) {
    sb.seq = seq;
    std::string img = sb.Encode();
    s = file->Write(seq * kSuperblockSlot, img.size(), img.data());
  }
  if (s.ok()) s = file->Sync();
  if (!s.ok()) return s;
  auto core = std::make_shared<Core>(env, std::move(file), false);
  s = core->Load();
  if (!s.ok()) return s;
  return core;
}

Result<std::shared_ptr<Core>> Core::Open(Env* env, const std::string& path, bool read_only) {
  auto f = env->OpenLocked(path, read_only ? Env::Mode::kReadOnly : Env::Mode::kReadWrite);
  if (!f.ok()) return f.status();
  auto core = std::make_shared<Core>(env, std::move(f.value()), read_only);
  Status s = core->Load();
  if (!s.ok()) return s;
  return core;
}

Status Core::Load() {
  // 1. The newest valid superblock copy.
  Superblock best;
  bool have = false;
  Status why;
  for (int slot = 0; slot < 2; slot++) {
    std::vector<char> buf(kSuperblockSlot);
    Status s = file_->Read(slot * kSuperblockSlot, buf.size(), buf.data());
    if (!s.ok()) return s;
    Superblock sb;
    s = Superblock::Decode(buf.data(), buf.size(), &sb);
    if (!s.ok()) {
      if (why.ok() || s.code() == Code::kUnsupported) why = s;
      continue;
    }
    if (sb.seq % 2 != static_cast<uint64_t>(slot)) continue;
    if (!have || sb.seq > best.seq) best = sb;
    have = true;
  }
  if (!have) return why.ok() ? Status(Code::kCorruption, "no valid superblock") : why;
  sb_ = best;
  sb_uuid_ = best.uuid;
  au_ = best.au;
  data_offset_ = best.data_offset;
  journal_bytes_ = best.journal_bytes;
  total_units_ = (best.size_bytes - data_offset_) / au_;
  size_bytes_ = best.size_bytes;
  soft_percent_ = best.soft_threshold_percent;
  auto fsize = file_->Size();
  if (!fsize.ok()) return fsize.status();
  if (file_->IsBlockDevice() && *fsize < best.size_bytes)
    return Status(Code::kCorruption, "device is smaller than the pool's declared size");
  st_ = MetaState();
  st_.au = au_;

  // 2. The checkpoint chain.
  ckpt_aus_.clear();
  if (best.ckpt_first != kNone) {
    std::string payload;
    std::vector<char> chunk(au_);
    uint64_t p = best.ckpt_first;
    for (uint32_t i = 0; payload.size() < best.ckpt_bytes || i == 0; i++) {
      if (p >= total_units_ || ckpt_aus_.size() > total_units_)
        return Status(Code::kCorruption, "checkpoint chain leaves the pool");
      Status s = file_->Read(AuOffset(p), au_, chunk.data());
      if (!s.ok()) return s;
      Decoder d(chunk.data(), kChunkHeader);
      char magic[8];
      uint64_t seq, next;
      uint32_t idx, len, crc;
      Uuid u;
      d.Bytes(magic, 8);
      d.U64(&seq);
      d.U32(&idx);
      d.U32(&len);
      d.U64(&next);
      d.Bytes(u.data(), 16);
      Decoder(chunk.data() + kChunkHeader - 4, 4).U32(&crc);
      bool ok = std::memcmp(magic, kChunkMagic, 8) == 0 && seq == best.ckpt_seq && idx == i &&
                u == sb_uuid_ && len <= au_ - kChunkHeader;
      if (ok) {
        uint32_t c = Crc32c(0, chunk.data(), kChunkHeader - 4);
        c = Crc32c(c, chunk.data() + kChunkHeader, len);
        ok = c == crc;
      }
      if (!ok) return Status(Code::kCorruption, "checkpoint chunk " + std::to_string(i) + " at AU " +
                                                    std::to_string(p) + " is damaged");
      ckpt_aus_.push_back(p);
      payload.append(chunk.data() + kChunkHeader, len);
      if (payload.size() >= best.ckpt_bytes) break;
      p = next;
    }
    if (payload.size() != best.ckpt_bytes ||
        Crc32c(0, payload.data(), payload.size()) != best.ckpt_crc)
      return Status(Code::kCorruption, "checkpoint checksum mismatch");
    Status s = DecodeState(payload, &st_);
    if (!s.ok()) return s;
    st_.au = au_;
  }

  // 3. Journal replay: records with consecutive LSNs from journal_start_lsn;
  // the first bad or stale record ends it.
  std::vector<uint8_t> j(journal_bytes_);
  Status s = file_->Read(kJournalOffset, j.size(), j.data());
  if (!s.ok()) return s;
  uint64_t off = 0, lsn = best.journal_start_lsn;
  for (;;) {
    Record r;
    size_t n = ParseRecord(j.data() + off, j.size() - off, lsn, &r);
    if (n == 0) break;
    s = ApplyRecord(&st_, r, nullptr);
    if (!s.ok()) return s;
    off += n;
    lsn++;
  }
  jtail_ = off;
  next_lsn_ = lsn;
  {
    // A valid record with a *later* LSN where replay stopped means the journal
    // belongs to a newer superblock than the one we could read: the newest
    // superblock is damaged. Refuse rather than roll the pool back silently.
    Record r;
    uint64_t found = 0;
    if (ParseRecord(j.data() + off, j.size() - off, kNone, &r, &found) && found > lsn)
      return Status(Code::kCorruption,
                    "the journal is newer than every readable superblock (newest superblock "
                    "damaged)");
  }

  // 4. Rebuild reference counts, AU states and free space from the maps.
  refs_.assign(total_units_, 0);
  state_.assign(total_units_, AuState::kNone);
  mapped_units_ = 0;
  for (uint64_t p : ckpt_aus_) state_[p] = AuState::kMeta;
  meta_units_ = ckpt_aus_.size();
  for (const auto& [id, l] : st_.luns) {
    if ((l->bs != 512 && l->bs != 4096) || l->size % l->bs || l->name.empty())
      return Status(Code::kCorruption, "LUN " + l->name + " has a bad geometry");
    uint64_t units = DivUp(l->size, au_);
    for (const auto& [lba, e] : l->map.runs()) {
      if (e.phys + e.len > total_units_ || lba + e.len > units)
        return Status(Code::kCorruption, "LUN " + l->name + " maps outside its bounds");
      for (uint64_t q = e.phys; q < e.phys + e.len; q++) {
        if (state_[q] == AuState::kMeta)
          return Status(Code::kCorruption, "a checkpoint AU is mapped by LUN " + l->name);
        if (refs_[q] == UINT32_MAX) return Status(Code::kCorruption, "reference count overflow");
        if (refs_[q]++ == 0) mapped_units_++;
      }
    }
  }
  free_.Clear();
  for (uint64_t p = 0; p < total_units_;) {
    if (refs_[p] || state_[p] != AuState::kNone) { p++; continue; }
    uint64_t q = p;
    while (q < total_units_ && !refs_[q] && state_[q] == AuState::kNone) state_[q++] = AuState::kFree;
    free_.Add(p, q - p);
    p = q;
  }
  if (read_only_) return Status::Ok();

  // 5. Writable: zero every free AU (a crash may have left data in AUs whose
  // mapping never became durable), then checkpoint with a fresh LSN range so
  // a torn journal tail can never be mistaken for new records.
  if (!file_->IsBlockDevice() && *fsize < best.size_bytes) {
    s = file_->Truncate(best.size_bytes);
    if (!s.ok()) return s;
  }
  for (const auto& [p, n] : free_.runs()) {
    s = file_->PunchHole(AuOffset(p), n * au_);
    if (!s.ok()) return s;
  }
  // Jump LSNs by 2^32 plus a random amount, so neither a torn tail nor the
  // records of a generation we fell back from can pass for new records.
  next_lsn_ += kLsnGapAfterOpen + (std::random_device{}() & 0xffffff);
  uint64_t target;
  s = CheckpointLocked(&target);
  if (!s.ok()) return s;
  ReleasePending(target);
  return Status::Ok();
}

Status Core::CheckUsable() const {
  if (closed_.load()) return Status(Code::kClosed, "pool is closed");
  return Status::Ok();
}

Status Core::Close() {
  if (closed_.exchange(true)) return Status::Ok();
  if (read_only_) return Status::Ok();
  return Commit(~uint64_t{0} >> 1);  // everything buffered so far
}

// -------------------------------------------------------------- data paths

Status Core::ReadBytes(LunState* l, uint64_t off, uint64_t len, uint8_t* dst) {
  std::vector<Run> pieces;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
    l->map.Lookup(off / au_, DivUp(off + len, au_) - off / au_, &pieces);
  }
  uint64_t pos = off, end = off + len;
  for (const Run& r : pieces) {
    uint64_t s = std::max(off, r.lba * au_), e = std::min(end, (r.lba + r.len) * au_);
    if (s > pos) std::memset(dst + (pos - off), 0, s - pos);
    Status st = file_->Read(AuOffset(r.phys) + (s - r.lba * au_), e - s, dst + (s - off));
    if (!st.ok()) return st;
    pos = e;
  }
  if (pos < end) std::memset(dst + (pos - off), 0, end - pos);
  return Status::Ok();
}

Status Core::WriteBytes(LunState* l, uint64_t off, uint64_t len, const uint8_t* src,
                        uint64_t* ticket) {
  uint64_t chunk = kMaxWriteChunkUnits * au_;
  if (len > chunk) {
    // Chunks reserve space one at a time; refuse up front a write that cannot
    // fit as a whole, so kNoSpace leaves it untouched (barring a concurrent
    // allocation by another LUN between chunks).
    std::lock_guard<std::mutex> g(meta_mu_);
    uint64_t a0 = off / au_, a1 = DivUp(off + len, au_), need = a1 - a0;
    std::vector<Run> pieces;
    l->map.Lookup(a0, a1 - a0, &pieces);
    for (const Run& r : pieces)
      for (uint64_t p = r.phys; p < r.phys + r.len; p++) need -= refs_[p] == 1;
    if (!AffordableLocked(need, need) && pending_.empty())
      return Status(Code::kNoSpace, "pool is full: " + std::to_string(need) +
                                        " allocation units needed, " +
                                        std::to_string(free_.count()) + " free");
  }
  while (len > 0) {
    uint64_t n = std::min(len, chunk - off % au_);
    Status s = WriteBytesChunk(l, off, n, src, ticket);
    if (!s.ok()) return s;
    off += n;
    src += n;
    len -= n;
  }
  return Status::Ok();
}

Status Core::WriteBytesChunk(LunState* l, uint64_t off, uint64_t len, const uint8_t* src,
                             uint64_t* ticket) {
  const uint64_t a0 = off / au_, a1 = DivUp(off + len, au_);
  struct Plan {
    uint64_t old, target;
    bool inplace;
  };
  std::vector<Plan> plan(a1 - a0);
  std::vector<uint64_t> fresh;
  for (int attempt = 0;; attempt++) {
    std::unique_lock<std::mutex> g(meta_mu_);
    if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
    for (Plan& p : plan) p = {kNone, kNone, false};
    std::vector<Run> pieces;
    l->map.Lookup(a0, a1 - a0, &pieces);
    for (const Run& r : pieces)
      for (uint64_t i = 0; i < r.len; i++) plan[r.lba + i - a0].old = r.phys + i;
    uint64_t need = 0;
    for (Plan& p : plan) {
      // In place only if no durable state can still share the AU: its last
      // other reference may have gone in a record that is not durable yet.
      p.inplace = p.old != kNone && refs_[p.old] == 1;
      if (p.inplace) {
        auto u = unshared_.find(p.old);
        if (u != unshared_.end() && u->second > durable_seq_.load()) p.inplace = false;
      }
      if (!p.inplace) need++;
    }
    fresh.clear();
    Status s = ReserveLocked(need, need, &fresh);
    if (s.ok()) break;
    if (attempt > 0 || pending_.empty()) return s;
    g.unlock();  // frees are waiting for a commit: make them durable, retry
    Status c = Commit(CurrentSeq());
    if (!c.ok()) return c;
  }
  size_t k = 0;
  for (Plan& p : plan) p.target = p.inplace ? p.old : fresh[k++];

  // Data I/O, outside the metadata lock. Partial writes into a shared AU copy
  // the rest of the old AU; a fresh AU already reads as zeros.
  Status s;
  std::vector<uint8_t> cow;
  for (size_t i = 0; i < plan.size() && s.ok();) {
    uint64_t a = a0 + i;
    uint64_t ss = std::max(off, a * au_), se = std::min(off + len, (a + 1) * au_);
    bool partial = se - ss != au_;
    if (!plan[i].inplace && plan[i].old != kNone && partial) {
      cow.resize(au_);
      s = file_->Read(AuOffset(plan[i].old), au_, cow.data());
      if (!s.ok()) break;
      std::memcpy(cow.data() + (ss - a * au_), src + (ss - off), se - ss);
      s = file_->Write(AuOffset(plan[i].target), au_, cow.data());
      i++;
      continue;
    }
    // Merge a stretch of physically contiguous targets into one write.
    size_t j = i + 1;
    while (j < plan.size() && plan[j].target == plan[j - 1].target + 1 &&
           !(!plan[j].inplace && plan[j].old != kNone &&
             std::min(off + len, (a0 + j + 1) * au_) - (a0 + j) * au_ != au_))
      j++;
    uint64_t we = std::min(off + len, (a0 + j) * au_);
    s = file_->Write(AuOffset(plan[i].target) + (ss - a * au_), we - ss, src + (ss - off));
    i = j;
  }
  if (!s.ok()) {
    Unreserve(fresh, true);
    return s;
  }

  std::lock_guard<std::mutex> g(meta_mu_);
  Record rec;
  rec.type = RecType::kMap;
  rec.lun = l->id;
  for (size_t i = 0; i < plan.size(); i++) {
    if (plan[i].inplace) continue;
    if (!rec.runs.empty() && rec.runs.back().lba + rec.runs.back().len == a0 + i &&
        rec.runs.back().phys + rec.runs.back().len == plan[i].target)
      rec.runs.back().len++;
    else
      rec.runs.push_back({a0 + i, plan[i].target, 1});
  }
  reserved_ -= fresh.size();
  for (uint64_t p : fresh) state_[p] = AuState::kNone;
  data_dirty_ = true;
  uint64_t t = rec.runs.empty() ? ++seq_ : AppendLocked(rec);
  *ticket = std::max(*ticket, t);
  return Status::Ok();
}

Status Core::UnmapAus(LunState* l, uint64_t w0, uint64_t w1, uint64_t* ticket) {
  for (int attempt = 0;; attempt++) {
    std::unique_lock<std::mutex> g(meta_mu_);
    std::vector<Run> pieces;
    l->map.Lookup(w0, w1 - w0, &pieces);
    if (pieces.empty()) return Status::Ok();
    // Splitting an extent adds one; keep the checkpoint's room guaranteed.
    if (!AffordableLocked(0, 2)) {
      if (attempt > 0 || pending_.empty())
        return Status(Code::kNoSpace, "no room for metadata to unmap");
      g.unlock();
      Status c = Commit(CurrentSeq());
      if (!c.ok()) return c;
      continue;
    }
    Record rec;
    rec.type = RecType::kUnmap;
    rec.lun = l->id;
    rec.a = w0;
    rec.n = w1 - w0;
    *ticket = std::max(*ticket, AppendLocked(rec));
    return Status::Ok();
  }
}

Status Core::ZeroBytes(LunState* l, uint64_t off, uint64_t len, uint64_t* ticket) {
  const uint64_t w0 = DivUp(off, au_), w1 = (off + len) / au_;
  if (w0 < w1) {
    Status s = UnmapAus(l, w0, w1, ticket);
    if (!s.ok()) return s;
  }
  // Partial AUs at the edges: write zeros where something is mapped.
  uint64_t edges[2] = {off / au_, (off + len - 1) / au_};
  for (int e = 0; e < 2; e++) {
    uint64_t a = edges[e];
    if (e == 1 && a == edges[0]) break;
    uint64_t s = std::max(off, a * au_), t = std::min(off + len, (a + 1) * au_);
    if (t - s == au_) continue;  // whole, handled above
    bool mapped;
    {
      std::lock_guard<std::mutex> g(meta_mu_);
      mapped = l->map.Find(a) != kNone;
    }
    if (!mapped) continue;
    std::vector<uint8_t> zeros(t - s, 0);
    Status st = WriteBytes(l, s, t - s, zeros.data(), ticket);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

// ------------------------------------------------------------ LUN ops

Status Core::CheckRange(LunState* l, uint64_t lba, uint64_t count) {
  std::lock_guard<std::mutex> g(meta_mu_);
  if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
  uint64_t blocks = l->size / l->bs;
  if (lba > blocks || count > blocks - lba)
    return Status(Code::kOutOfRange, "blocks [" + std::to_string(lba) + ", +" +
                                         std::to_string(count) + ") beyond the end of LUN " +
                                         l->name + " (" + std::to_string(blocks) + " blocks)");
  return Status::Ok();
}

uint64_t Core::BlockCount(LunState* l) {
  std::lock_guard<std::mutex> g(meta_mu_);
  return l->size / l->bs;
}

namespace {
// A contiguous view of an iovec list: the first element if it suffices, else
// a bounce buffer.
struct Gather {
  std::vector<uint8_t> bounce;
  uint8_t* p = nullptr;
};
Status PrepareIov(std::span<const iovec> iov, uint64_t bytes, Gather* g, bool copy_in) {
  if (IovBytes(iov) < bytes)
    return Status(Code::kInvalidArgument, "buffer smaller than count * block size");
  if (!iov.empty() && iov[0].iov_len >= bytes) {
    g->p = static_cast<uint8_t*>(iov[0].iov_base);
    return Status::Ok();
  }
  g->bounce.resize(bytes);
  g->p = g->bounce.data();
  if (copy_in) {
    uint64_t pos = 0;
    for (const iovec& v : iov) {
      uint64_t k = std::min<uint64_t>(v.iov_len, bytes - pos);
      std::memcpy(g->p + pos, v.iov_base, k);
      pos += k;
      if (pos == bytes) break;
    }
  }
  return Status::Ok();
}
}  // namespace

Status Core::Read(LunState* l, uint64_t lba, uint64_t count, std::span<const iovec> iov) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  s = CheckRange(l, lba, count);  // the precise error first; again under the lock
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  if (IovBytes(iov) < len)
    return Status(Code::kInvalidArgument, "buffer smaller than count * block size");
  if (count == 0) return s;
  RangeGuard rg(&l->lock, off / au_, DivUp(off + len, au_), false);
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  if (iov[0].iov_len >= len) return ReadBytes(l, off, len, static_cast<uint8_t*>(iov[0].iov_base));
  return ReadBytesV(l, off, len, iov);  // scattered buffers: no bounce copy
}


Status Core::ReadBytesV(LunState* l, uint64_t off, uint64_t len, std::span<const iovec> iov) {
  std::vector<Run> pieces;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
    l->map.Lookup(off / au_, DivUp(off + len, au_) - off / au_, &pieces);
  }
  std::vector<iovec> part;
  auto zero = [&](uint64_t s, uint64_t e) {
    SliceIovec(iov, s - off, e - s, &part);
    for (const iovec& v : part) std::memset(v.iov_base, 0, v.iov_len);
  };
  uint64_t pos = off, end = off + len;
  for (const Run& r : pieces) {
    uint64_t s = std::max(off, r.lba * au_), e = std::min(end, (r.lba + r.len) * au_);
    if (s > pos) zero(pos, s);
    SliceIovec(iov, s - off, e - s, &part);
    Status st = file_->ReadV(AuOffset(r.phys) + (s - r.lba * au_), part.data(), part.size());
    if (!st.ok()) return st;
    pos = e;
  }
  if (pos < end) zero(pos, end);
  return Status::Ok();
}

Status Core::Write(LunState* l, uint64_t lba, uint64_t count, std::span<const iovec> iov,
                   Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  Gather gb;
  s = PrepareIov(iov, len, &gb, true);
  if (!s.ok()) return s;
  uint64_t ticket = 0;
  if (count > 0) {
    RangeGuard rg(&l->lock, off / au_, DivUp(off + len, au_), true);
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
    s = WriteBytes(l, off, len, gb.p, &ticket);
    if (!s.ok()) return s;
  } else {
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? Commit(CurrentSeq()) : Status::Ok();
}

Status Core::CompareAndWrite(LunState* l, uint64_t lba, uint64_t count, const void* cmp,
                             const void* data, Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  uint64_t off = lba * l->bs, len = count * l->bs;
  {
    // Held across read, compare and write: atomic against every write.
    RangeGuard rg(&l->lock, off / au_, DivUp(off + len, au_), true);
    s = CheckRange(l, lba, count);
    if (!s.ok() || count == 0) return s;
    std::vector<uint8_t> cur(len);
    s = ReadBytes(l, off, len, cur.data());
    if (!s.ok()) return s;
    const auto* c = static_cast<const uint8_t*>(cmp);
    if (std::memcmp(cur.data(), c, len) != 0) {
      uint64_t i = 0;
      while (cur[i] == c[i]) i++;
      return Status(Code::kMiscompare, "compare_and_write: data differ").with_miscompare_offset(i);
    }
    uint64_t ticket = 0;
    s = WriteBytes(l, off, len, static_cast<const uint8_t*>(data), &ticket);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? Commit(CurrentSeq()) : Status::Ok();
}

Status Core::ZeroRange(LunState* l, uint64_t lba, uint64_t count, Durability d, bool unmap_only) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  uint64_t off = lba * l->bs, len = count * l->bs;
  if (count > 0) {
    RangeGuard rg(&l->lock, off / au_, DivUp(off + len, au_), true);
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
    uint64_t ticket = 0;
    if (unmap_only) {
      uint64_t w0 = DivUp(off, au_), w1 = (off + len) / au_;
      if (w0 < w1) s = UnmapAus(l, w0, w1, &ticket);
      if (!s.ok()) return s;
    } else {
      s = ZeroBytes(l, off, len, &ticket);
      if (!s.ok()) return s;
    }
  } else {
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? Commit(CurrentSeq()) : Status::Ok();
}

Status Core::Allocate(LunState* l, uint64_t lba, uint64_t count, Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  uint64_t off = lba * l->bs, len = count * l->bs;
  if (count > 0) {
    uint64_t a0 = off / au_, a1 = DivUp(off + len, au_);
    RangeGuard rg(&l->lock, a0, a1, true);
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> g(meta_mu_);
    std::vector<Run> pieces, holes;
    l->map.Lookup(a0, a1 - a0, &pieces);
    uint64_t pos = a0, need = 0;
    for (const Run& r : pieces) {
      if (r.lba > pos) holes.push_back({pos, 0, r.lba - pos});
      pos = r.lba + r.len;
    }
    if (pos < a1) holes.push_back({pos, 0, a1 - pos});
    for (const Run& h : holes) need += h.len;
    std::vector<uint64_t> fresh;
    s = ReserveLocked(need, holes.size() + 8, &fresh);
    if (!s.ok()) return s;
    Record rec;
    rec.type = RecType::kMap;
    rec.lun = l->id;
    size_t k = 0;
    for (const Run& h : holes)
      for (uint64_t i = 0; i < h.len; i++, k++) {
        uint64_t p = fresh[k];
        if (!rec.runs.empty() && rec.runs.back().lba + rec.runs.back().len == h.lba + i &&
            rec.runs.back().phys + rec.runs.back().len == p)
          rec.runs.back().len++;
        else
          rec.runs.push_back({h.lba + i, p, 1});
      }
    reserved_ -= fresh.size();
    for (uint64_t p : fresh) state_[p] = AuState::kNone;
    // These AUs read as zeros only because they were punched, and that punch
    // may not be durable yet: like data, it must reach the disk before the
    // record mapping them (else a surviving record could expose old data).
    if (!rec.runs.empty()) {
      data_dirty_ = true;
      AppendLocked(rec);
    }
  }
  return d == Durability::kDurable ? Commit(CurrentSeq()) : Status::Ok();
}

Result<std::vector<AllocationRun>> Core::AllocationStatus(LunState* l, uint64_t lba,
                                                          uint64_t count) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  std::vector<AllocationRun> out;
  if (count == 0) return out;
  uint64_t bpa = au_ / l->bs;  // blocks per AU
  std::vector<Run> pieces;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    l->map.Lookup(lba / bpa, DivUp(lba + count, bpa) - lba / bpa, &pieces);
  }
  auto add = [&](uint64_t b, uint64_t e, bool m) {
    b = std::max(b, lba);
    e = std::min(e, lba + count);
    if (b >= e) return;
    if (!out.empty() && out.back().mapped == m && out.back().lba + out.back().count == b)
      out.back().count += e - b;
    else
      out.push_back({b, e - b, m});
  };
  uint64_t pos = lba;
  for (const Run& r : pieces) {
    add(pos, r.lba * bpa, false);
    add(r.lba * bpa, (r.lba + r.len) * bpa, true);
    pos = std::max(pos, (r.lba + r.len) * bpa);
  }
  add(pos, lba + count, false);
  return out;
}

Status Core::CloneRange(LunState* src, uint64_t src_lba, LunState* dst, uint64_t dst_lba,
                        uint64_t count, Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  if (src->bs != dst->bs)
    return Status(Code::kInvalidArgument, "clone between LUNs of different block sizes");
  const uint64_t bs = src->bs, soff = src_lba * bs, doff = dst_lba * bs, len = count * bs;
  if (count > 0) {
    uint64_t sa0 = soff / au_, sa1 = DivUp(soff + len, au_);
    uint64_t da0 = doff / au_, da1 = DivUp(doff + len, au_);
    RangeGuard g1, g2;
    if (src == dst) {
      g1 = RangeGuard(&src->lock, std::min(sa0, da0), std::max(sa1, da1), true);
    } else if (src->id < dst->id) {
      g1 = RangeGuard(&src->lock, sa0, sa1, false);
      g2 = RangeGuard(&dst->lock, da0, da1, true);
    } else {
      g1 = RangeGuard(&dst->lock, da0, da1, true);
      g2 = RangeGuard(&src->lock, sa0, sa1, false);
    }
    s = CheckRange(src, src_lba, count);
    if (s.ok()) s = CheckRange(dst, dst_lba, count);
    if (!s.ok()) return s;
    uint64_t ticket = 0;
    if (soff % au_ == doff % au_) {
      // Same phase: whole AUs by reference, the partial edges by copying.
      uint64_t w0 = DivUp(doff, au_), w1 = (doff + len) / au_;
      uint64_t head = w0 < w1 ? w0 * au_ - doff : len;  // bytes before the whole AUs
      uint64_t tail_off = w0 < w1 ? w1 * au_ : doff + len;
      uint64_t tail = doff + len - tail_off;
      std::vector<uint8_t> hb(head), tb(tail);
      if (head) s = ReadBytes(src, soff, head, hb.data());
      if (s.ok() && tail) s = ReadBytes(src, soff + (tail_off - doff), tail, tb.data());
      if (!s.ok()) return s;
      if (w0 < w1) {
        std::lock_guard<std::mutex> g(meta_mu_);
        uint64_t sw0 = (soff + head) / au_;
        std::vector<Run> sp, dp;
        src->map.Lookup(sw0, w1 - w0, &sp);
        dst->map.Lookup(w0, w1 - w0, &dp);
        if (!sp.empty() || !dp.empty()) {
          if (!AffordableLocked(0, sp.size() + 2))
            return Status(Code::kNoSpace, "no room for the clone's metadata");
          Record rec;
          rec.type = RecType::kClone;
          rec.lun = src->id;
          rec.lun2 = dst->id;
          rec.a = sw0;
          rec.b = w0;
          rec.n = w1 - w0;
          ticket = AppendLocked(rec);
        }
      }
      if (head) s = WriteBytes(dst, doff, head, hb.data(), &ticket);
      if (s.ok() && tail) s = WriteBytes(dst, tail_off, tail, tb.data(), &ticket);
      if (!s.ok()) return s;
    } else {
      // Different phase: copy data, back to front if it overlaps forward.
      const uint64_t step = 4ull * au_;
      std::vector<uint8_t> buf(std::min(step, len));
      bool backward = src == dst && doff > soff && doff < soff + len;
      for (uint64_t done = 0; done < len;) {
        uint64_t n = std::min(step, len - done);
        uint64_t rel = backward ? len - done - n : done;
        s = ReadBytes(src, soff + rel, n, buf.data());
        if (s.ok()) s = WriteBytes(dst, doff + rel, n, buf.data(), &ticket);
        if (!s.ok()) return s;
        done += n;
      }
    }
  } else {
    s = CheckRange(src, src_lba, 0);
    if (s.ok()) s = CheckRange(dst, dst_lba, 0);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? Commit(CurrentSeq()) : Status::Ok();
}

Status Core::Flush() {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return Status::Ok();
  return Commit(CurrentSeq());
}

// ------------------------------------------------------------ pool ops

LunInfo Core::InfoLocked(const LunState& l) const {
  LunInfo i;
  i.name = l.name;
  i.id = l.uuid;
  i.size_bytes = l.size;
  i.block_size = l.bs;
  uint64_t excl = 0, shared = 0;
  for (const auto& [lba, e] : l.map.runs())
    for (uint64_t p = e.phys; p < e.phys + e.len; p++) (refs_[p] > 1 ? shared : excl)++;
  i.mapped_bytes = (excl + shared) * au_;
  i.exclusive_bytes = excl * au_;
  i.shared_bytes = shared * au_;
  return i;
}

Result<LunInfo> Core::CreateLun(const std::string& name, uint64_t size, uint32_t bs) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  if (!ValidName(name))
    return Status(Code::kInvalidArgument, "bad LUN name '" + name +
                                              "': 1..64 of [A-Za-z0-9_.-], not starting with . or -");
  if (bs != 512 && bs != 4096) return Status(Code::kInvalidArgument, "block size must be 512 or 4096");
  if (size == 0 || size % bs) return Status(Code::kInvalidArgument, "size must be a positive multiple of the block size");
  LunInfo info;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    if (size / au_ > total_units_ * 1024)
      return Status(Code::kInvalidArgument, "LUN size is absurdly larger than the pool");
    if (st_.FindName(name)) return Status(Code::kAlreadyExists, "LUN " + name + " exists");
    if (!AffordableLocked(0, 8)) return Status(Code::kNoSpace, "no room for another LUN");
    Record r;
    r.type = RecType::kCreateLun;
    r.lun = st_.next_lun_id;
    r.uuid = NewUuid();
    r.a = size;
    r.bs = bs;
    r.name = name;
    AppendLocked(r);
    info = InfoLocked(*st_.Find(r.lun));
  }
  s = Commit(CurrentSeq());
  if (!s.ok()) return s;
  return info;
}

Status Core::DeleteLun(const std::string& name) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    LunState* l = st_.FindName(name);
    if (!l) return Status(Code::kNotFound, "no LUN " + name);
    if (l->open_handles > 0) return Status(Code::kBusy, "LUN " + name + " is open");
    Record r;
    r.type = RecType::kDeleteLun;
    r.lun = l->id;
    AppendLocked(r);
  }
  return Commit(CurrentSeq());
}

Status Core::ResizeLun(const std::string& name, uint64_t size) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  std::shared_ptr<LunState> l;
  {
    std::lock_guard<std::mutex> g(meta_mu_);
    LunState* p = st_.FindName(name);
    if (!p) return Status(Code::kNotFound, "no LUN " + name);
    l = st_.luns[p->id];
  }
  if (size == 0 || size % l->bs)
    return Status(Code::kInvalidArgument, "size must be a positive multiple of the block size");
  {
    RangeGuard rg(&l->lock, 0, kNone, true);
    uint64_t old;
    {
      std::lock_guard<std::mutex> g(meta_mu_);
      if (size / au_ > total_units_ * 1024)
        return Status(Code::kInvalidArgument, "LUN size is absurdly larger than the pool");
      if (l->deleted) return Status(Code::kNotFound, "no LUN " + name);
      old = l->size;
    }
    uint64_t ticket = 0;
    if (size < old && size % au_) {
      // Zero the cut-off tail of the last AU so growing later exposes zeros.
      uint64_t end = std::min(old, DivUp(size, au_) * au_);
      s = ZeroBytes(l.get(), size, end - size, &ticket);
      if (!s.ok()) return s;
    }
    std::lock_guard<std::mutex> g(meta_mu_);
    Record r;
    r.type = RecType::kResizeLun;
    r.lun = l->id;
    r.a = size;
    AppendLocked(r);
  }
  return Commit(CurrentSeq());
}

Result<LunInfo> Core::CloneLun(const std::string& src, const std::string& dst) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  if (!ValidName(dst)) return Status(Code::kInvalidArgument, "bad LUN name '" + dst + "'");
  auto h = Acquire(src);
  if (!h.ok()) return h.status();
  std::shared_ptr<LunState> l = h.value();
  LunInfo info;
  {
    RangeGuard rg(&l->lock, 0, kNone, false);  // no in-place write may race the copy
    std::lock_guard<std::mutex> g(meta_mu_);
    if (st_.FindName(dst)) s = Status(Code::kAlreadyExists, "LUN " + dst + " exists");
    else if (!AffordableLocked(0, l->map.extents() + 8)) s = Status(Code::kNoSpace, "no room for the clone's metadata");
    if (s.ok()) {
      Record r;
      r.type = RecType::kCloneLun;
      r.lun = l->id;
      r.lun2 = st_.next_lun_id;
      r.uuid = NewUuid();
      r.name = dst;
      AppendLocked(r);
      info = InfoLocked(*st_.Find(r.lun2));
    }
  }
  ReleaseHandle(l.get());
  if (!s.ok()) return s;
  s = Commit(CurrentSeq());
  if (!s.ok()) return s;
  return info;
}

std::vector<LunInfo> Core::ListLuns() {
  std::lock_guard<std::mutex> g(meta_mu_);
  std::vector<LunInfo> v;
  for (const auto& [id, l] : st_.luns) v.push_back(InfoLocked(*l));
  std::sort(v.begin(), v.end(), [](const LunInfo& a, const LunInfo& b) { return a.name < b.name; });
  return v;
}

Result<LunInfo> Core::GetLun(const std::string& name) {
  std::lock_guard<std::mutex> g(meta_mu_);
  LunState* l = st_.FindName(name);
  if (!l) return Status(Code::kNotFound, "no LUN " + name);
  return InfoLocked(*l);
}

Result<std::shared_ptr<LunState>> Core::Acquire(const std::string& name) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> g(meta_mu_);
  LunState* l = st_.FindName(name);
  if (!l) return Status(Code::kNotFound, "no LUN " + name);
  l->open_handles++;
  return st_.luns[l->id];
}

void Core::ReleaseHandle(LunState* l) {
  std::lock_guard<std::mutex> g(meta_mu_);
  l->open_handles--;
}

Status Core::Grow(uint64_t new_size) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  std::lock_guard<std::mutex> cg(commit_mu_);
  if (!failed_.ok()) return failed_;
  if (file_->IsBlockDevice()) {
    auto dsz = file_->Size();
    if (!dsz.ok()) return dsz.status();
    if (new_size == 0) new_size = *dsz;
    if (new_size > *dsz) return Status(Code::kInvalidArgument, "size exceeds the device");
  }
  if (new_size < sb_.size_bytes) return Status(Code::kInvalidArgument, "a pool cannot shrink");
  if (new_size == sb_.size_bytes) return Status::Ok();
  if (!file_->IsBlockDevice()) {
    s = file_->Truncate(new_size);
    if (!s.ok()) return s;
  }
  Superblock nsb = sb_;
  nsb.seq++;
  nsb.size_bytes = new_size;
  s = WriteSuperblockLocked(nsb);
  if (s.ok()) s = file_->Sync();
  if (!s.ok()) {
    failed_ = s;
    return s;
  }
  sb_ = nsb;
  std::lock_guard<std::mutex> g(meta_mu_);
  uint64_t nt = (new_size - data_offset_) / au_;
  refs_.resize(nt, 0);
  state_.resize(nt, AuState::kFree);
  free_.Add(total_units_, nt - total_units_);
  total_units_ = nt;
  size_bytes_ = new_size;
  return Status::Ok();
}

SpaceInfo Core::Space() {
  std::lock_guard<std::mutex> g(meta_mu_);
  SpaceInfo si;
  si.pool_size_bytes = size_bytes_;
  si.allocation_unit = au_;
  si.total_units = total_units_;
  uint64_t shared = 0;
  for (uint64_t p = 0; p < total_units_; p++) shared += refs_[p] > 1;
  si.allocated_units = mapped_units_ + meta_units_;
  si.metadata_units = meta_units_;
  si.shared_units = shared;
  si.free_units = free_.count();
  for (const auto& [id, l] : st_.luns) {
    si.luns.push_back(InfoLocked(*l));
    si.mapped_bytes += si.luns.back().mapped_bytes;
  }
  si.saved_bytes = si.mapped_bytes - mapped_units_ * au_;
  si.soft_threshold_units = total_units_ * soft_percent_ / 100;
  return si;
}

// ------------------------------------------------------------------ check

CheckReport Core::Check(ProgressFn progress, void* ctx, bool compare_disk) {
  CheckReport rep;
  auto problem = [&](std::string p) {
    rep.clean = false;
    if (rep.problems.size() < 100) rep.problems.push_back(std::move(p));
  };
  if (!read_only_ && !closed_.load()) {
    Status s = Commit(CurrentSeq());
    if (!s.ok()) problem("flush before check failed: " + s.ToString());
  }
  std::lock_guard<std::mutex> cg(commit_mu_);
  std::lock_guard<std::mutex> g(meta_mu_);
  if (!failed_.ok()) problem("pool is in the failed state: " + failed_.ToString());
  std::vector<uint32_t> refs(total_units_, 0);
  rep.luns = st_.luns.size();
  uint64_t done = 0;
  for (const auto& [id, l] : st_.luns) {
    if (l->bs != 512 && l->bs != 4096) problem("LUN " + l->name + ": bad block size");
    if (l->size % l->bs) problem("LUN " + l->name + ": size not a multiple of the block size");
    uint64_t units = DivUp(l->size, au_), prev_end = 0;
    for (const auto& [lba, e] : l->map.runs()) {
      rep.extents++;
      if (e.len == 0) problem("LUN " + l->name + ": empty extent at AU " + std::to_string(lba));
      if (lba < prev_end) problem("LUN " + l->name + ": overlapping extents at AU " + std::to_string(lba));
      prev_end = lba + e.len;
      if (lba + e.len > units) problem("LUN " + l->name + ": extent beyond the LUN's end at AU " + std::to_string(lba));
      if (e.phys + e.len > total_units_ || e.phys + e.len < e.phys) {
        problem("LUN " + l->name + ": extent outside the pool at AU " + std::to_string(lba));
        continue;
      }
      for (uint64_t p = e.phys; p < e.phys + e.len; p++) refs[p]++;
    }
    if (progress) progress(ctx, ++done, st_.luns.size());
  }
  uint64_t nfree = 0, nmeta = 0, nres = 0, npend = 0;
  for (uint64_t p = 0; p < total_units_; p++) {
    if (refs[p] != refs_[p])
      problem("AU " + std::to_string(p) + ": reference count " + std::to_string(refs_[p]) +
              ", maps say " + std::to_string(refs[p]));
    AuState s = state_[p];
    if (refs[p] > 0 && s != AuState::kNone)
      problem("AU " + std::to_string(p) + " is mapped and also " +
              (s == AuState::kFree ? "free" : s == AuState::kMeta ? "checkpoint metadata" : "not allocatable"));
    if (refs[p] == 0 && s == AuState::kNone) {
      rep.leaked_units++;
      problem("AU " + std::to_string(p) + " is leaked (neither mapped nor free)");
    }
    if (refs[p] > 0) rep.allocated_units++;
    nfree += s == AuState::kFree;
    nmeta += s == AuState::kMeta;
    nres += s == AuState::kReserved;
    npend += s == AuState::kPending;
  }
  rep.allocated_units += nmeta;
  if (nfree != free_.count()) problem("free-space map counts " + std::to_string(free_.count()) + " units, states say " + std::to_string(nfree));
  uint64_t runs_total = 0;
  for (const auto& [p, n] : free_.runs()) {
    runs_total += n;
    for (uint64_t q = p; q < p + n && q < total_units_; q++)
      if (state_[q] != AuState::kFree) { problem("AU " + std::to_string(q) + " on the free list but not free"); break; }
  }
  if (runs_total != free_.count()) problem("free-space runs do not add up");
  if (nmeta != ckpt_aus_.size() || nmeta != meta_units_) problem("checkpoint AU count mismatch");
  for (uint64_t p : ckpt_aus_)
    if (p >= total_units_ || state_[p] != AuState::kMeta) problem("checkpoint AU " + std::to_string(p) + " not marked as metadata");
  if (nres != reserved_) problem("reserved AU count mismatch");
  uint64_t pend = 0;
  for (const Pending& x : pending_) pend += x.n;
  if (pend != npend) problem("pending-free AU count mismatch");

  if (compare_disk && jbuf_.empty()) {
    // The durable metadata must describe exactly the in-memory state.
    Core disk(env_, nullptr, true);
    struct Borrow final : File {
      File* f;
      explicit Borrow(File* x) : f(x) {}
      Status Read(uint64_t o, size_t n, void* b) override { return f->Read(o, n, b); }
      Status Write(uint64_t, size_t, const void*) override { return Status(Code::kInvalidArgument, "read-only"); }
      Status Sync() override { return Status::Ok(); }
      Result<uint64_t> Size() override { return f->Size(); }
      Status Truncate(uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
      Status PunchHole(uint64_t, uint64_t) override { return Status(Code::kInvalidArgument, "read-only"); }
      bool IsBlockDevice() const override { return f->IsBlockDevice(); }
    };
    disk.file_ = std::make_unique<Borrow>(file_.get());
    Status s = disk.Load();
    if (!s.ok()) {
      problem("on-disk metadata does not load: " + s.ToString());
    } else {
      if (disk.st_.luns.size() != st_.luns.size()) problem("on-disk LUN table differs from memory");
      for (const auto& [id, l] : st_.luns) {
        LunState* d = disk.st_.Find(id);
        if (!d) { problem("LUN " + l->name + " missing on disk"); continue; }
        if (d->name != l->name || d->size != l->size || d->bs != l->bs || d->uuid != l->uuid)
          problem("LUN " + l->name + ": on-disk attributes differ");
        if (d->map.runs().size() != l->map.runs().size() ||
            !std::equal(d->map.runs().begin(), d->map.runs().end(), l->map.runs().begin(),
                        [](const auto& x, const auto& y) {
                          return x.first == y.first && x.second.phys == y.second.phys && x.second.len == y.second.len;
                        }))
          problem("LUN " + l->name + ": on-disk extent map differs from memory");
      }
      if (disk.ckpt_aus_ != ckpt_aus_) problem("on-disk checkpoint chain differs from memory");
    }
  }
  return rep;
}

}  // namespace cowstore::store
