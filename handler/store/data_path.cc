// SPDX-License-Identifier: Apache-2.0
// The data path: Read, Write, CompareAndWrite, ZeroRange/Unmap, Allocate,
// AllocationStatus and CloneRange, under the callers' range locks.
//
// Units: the grain (Core::grain_, pool_impl.h) is the unit of sharing. LUN
// maps, range locks, copy-on-write, the in-place rule, unshared marks,
// reservations and punches all count grains; physical grain p lives at
// GrainOffset(p). The AU appears here only as an I/O size.

#include "handler/store/pool_impl.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "handler/store/all_zero.h"
#include "handler/store/crc32c.h"
#include "handler/store/iovec_slice.h"
#include "handler/store/read_spans.h"
#include "handler/store/zero_fill.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kMaxWriteChunkUnits = 256;  // grains: bounds one kMap record
static_assert(kMaxWriteChunkUnits <= kMaxMapRuns, "a write chunk's kMap record must parse");

// Gathers/scatters between an iovec list and a contiguous buffer.
size_t IovBytes(std::span<const iovec> iov) {
  size_t n = 0;
  for (const iovec& v : iov) n += v.iov_len;
  return n;
}

// Extends `crc` over `n` zero bytes (the unwritten parts of a fresh grain,
// which reads as zeros: store-v3.md 3.6 item 4).
uint32_t Crc32cZeros(uint32_t crc, uint64_t n) {
  static constexpr std::array<uint8_t, 4096> kZeros{};
  for (; n > 0;) {
    const size_t k = std::min<uint64_t>(n, kZeros.size());
    crc = Crc32c(crc, kZeros.data(), k);
    n -= k;
  }
  return crc;
}

}  // namespace

// The mapped pieces of [off, off + len) as file reads, in LBA order, and
// the holes between them (and after), which read as zeros.
Status Core::MappedPieces(LunState* l, uint64_t off, uint64_t len, std::vector<ReadPiece>* out,
                          std::vector<ReadHole>* holes) {
  std::vector<Run> runs;
  {
    MutexLock g(&meta_mu_);
    if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
    l->map.Lookup(off / grain_, DivUp(off + len, grain_) - off / grain_, &runs);
  }
  uint64_t pos = off, end = off + len;
  for (const Run& r : runs) {
    uint64_t s = std::max(off, r.lba * grain_), e = std::min(end, (r.lba + r.len) * grain_);
    if (s > pos) holes->push_back({pos - off, s - pos});
    out->push_back({GrainOffset(r.phys) + (s - r.lba * grain_), s - off, e - s});
    pos = e;
  }
  if (pos < end) holes->push_back({pos - off, end - pos});
  return Status::Ok();
}

namespace {

// Reads the pieces, read-around (read_spans.h), and zeroes the holes. The
// request InPlaceSpan picks goes first, straight into the destination
// (`direct` of the request as one piece); then the holes (`zero`), over
// whatever its gaps put there; then the rest: a request of one piece
// straight to its destination, a request of several into a scratch
// buffer, each piece copied out (`copy`), which also covers what the first
// request's gaps put on their bytes. If a request of several fails, its
// pieces are read one by one: an unreadable gap no one asked for must not
// fail the read.
//
// The longest request is the read's place in a sequential stream through
// the file (the source's data in place, or the LUN's own); every other one
// is read aside (File::ReadAside), so the OS's readahead keeps following
// that stream. `direct(piece, aside)`.
template <typename Direct, typename Copy, typename Zero>
Status ReadAround(std::vector<ReadPiece> pieces, const std::vector<ReadHole>& holes, File* file,
                  Direct direct, Copy copy, Zero zero) {
  const std::vector<ReadSpan> spans = PlanReadSpans(&pieces);
  size_t main = 0;
  for (size_t k = 1; k < spans.size(); k++)
    if (spans[k].len > spans[main].len) main = k;
  auto one_by_one = [&](size_t k) {
    for (size_t i = spans[k].first; i < spans[k].last; i++) {
      Status st = direct(pieces[i], k != main);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  };
  const size_t first = InPlaceSpan(spans, pieces);
  if (first < spans.size()) {
    const ReadSpan& sp = spans[first];
    if (!direct(ReadPiece{sp.file_off, pieces[sp.first].at, sp.len}, first != main).ok()) {
      Status st = one_by_one(first);
      if (!st.ok()) return st;
    }
  }
  for (const ReadHole& h : holes) zero(h.at, h.n);
  std::unique_ptr<uint8_t[]> scratch;  // not zeroed: every byte is read into first
  uint64_t room = 0;
  for (size_t k = 0; k < spans.size(); k++) {
    const ReadSpan& sp = spans[k];
    if (k == first) continue;
    if (sp.last - sp.first > 1) {
      if (room < sp.len) {
        scratch = std::make_unique_for_overwrite<uint8_t[]>(sp.len);
        room = sp.len;
      }
      const iovec into{scratch.get(), sp.len};
      if ((k == main ? file->Read(sp.file_off, sp.len, scratch.get()) : file->ReadAside(sp.file_off, &into, 1)).ok()) {
        for (size_t i = sp.first; i < sp.last; i++)
          copy(pieces[i], scratch.get() + (pieces[i].file_off - sp.file_off));
        continue;
      }
    }
    Status st = one_by_one(k);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace

Status Core::ReadBytes(LunState* l, uint64_t off, uint64_t len, uint8_t* dst) {
  std::vector<ReadPiece> pieces;
  std::vector<ReadHole> holes;
  Status s = MappedPieces(l, off, len, &pieces, &holes);
  if (!s.ok()) return s;
  return ReadAround(
      std::move(pieces), holes, file_.get(),
      [&](const ReadPiece& p, bool aside) {
        if (!aside) return file_->Read(p.file_off, p.n, dst + p.at);
        const iovec into{dst + p.at, p.n};
        return file_->ReadAside(p.file_off, &into, 1);
      },
      [&](const ReadPiece& p, const uint8_t* src) { std::memcpy(dst + p.at, src, p.n); },
      [&](uint64_t at, uint64_t n) { std::memset(dst + at, 0, n); });
}

AllocHint Core::HintLocked(const LunState& l, uint64_t first_grain) const {
  AllocHint h;
  if (grain_ >= au_) return h;  // a grain is an AU: nothing to keep together (SpaceMap)
  const uint64_t per_region = std::max<uint64_t>(kAllocRegionBytes / grain_, 1);
  h.lun = l.id;
  h.region = first_grain / per_region;
  const uint64_t start = h.region * per_region;
  if (first_grain == start) return h;
  // The region's runs below the write, nearest first: a few at most are
  // looked at (a shared run is the source's data, not the region's own).
  std::vector<Run> below;
  l.map.Lookup(start, first_grain - start, &below);
  int looked = 0;
  for (auto it = below.rbegin(); it != below.rend() && looked < kHintRunsLooked; ++it, ++looked) {
    const uint64_t last = it->phys + it->len - 1;
    if (space_->refs(last) == 1) {
      h.goal = last + 1;
      break;
    }
  }
  return h;
}

Status Core::WriteBytes(LunState* l, uint64_t off, uint64_t len, const uint8_t* src,
                        uint64_t* ticket) {
  uint64_t chunk = kMaxWriteChunkUnits * grain_;
  if (len > chunk) {
    // Chunks reserve space one at a time; refuse up front a write that cannot
    // fit as a whole, so kNoSpace leaves it untouched (barring a concurrent
    // allocation by another LUN between chunks).
    MutexLock g(&meta_mu_);
    uint64_t a0 = off / grain_, a1 = DivUp(off + len, grain_), need = a1 - a0;
    std::vector<Run> pieces;
    l->map.Lookup(a0, a1 - a0, &pieces);
    for (const Run& r : pieces)
      for (uint64_t p = r.phys; p < r.phys + r.len; p++) need -= space_->refs(p) == 1;
    if (!AffordableLocked(need, need) && !SpaceComingBackLocked())
      return PoolFullLocked(need);
  }
  while (len > 0) {
    uint64_t n = std::min(len, chunk - off % grain_);
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
  const uint64_t a0 = off / grain_, a1 = DivUp(off + len, grain_);
  struct Plan {
    uint64_t old, target;
    bool inplace;
  };
  std::vector<Plan> plan(a1 - a0);
  std::vector<uint64_t> fresh;
  bool one_sync = false;
  for (int attempt = 0;; attempt++) {
    MutexLock g(&meta_mu_);
    if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
    one_sync = one_sync_;
    for (Plan& p : plan) p = {kNone, kNone, false};
    std::vector<Run> pieces;
    l->map.Lookup(a0, a1 - a0, &pieces);
    for (const Run& r : pieces)
      for (uint64_t i = 0; i < r.len; i++) plan[r.lba + i - a0].old = r.phys + i;
    uint64_t need = 0;
    for (Plan& p : plan) {
      // In place only if no durable state can still share the grain: its last
      // other reference may have gone in a record that is not durable yet.
      // Nor while a checked record mapping it is not vouched for: replay
      // would check its data, find this write's, and drop that acknowledged
      // record, this write and everything after (checked_grains.h).
      p.inplace = p.old != kNone && space_->WritableInPlace(p.old, queue_.durable()) &&
                  !checked_.Unvouched(p.old);
      if (!p.inplace) need++;
    }
    fresh.clear();
    Status s = ReserveLocked(need, need, &fresh, need > 0 ? HintLocked(*l, a0) : AllocHint{});
    if (s.ok()) break;
    if (attempt > 0 || !SpaceComingBackLocked()) return s;
    g.Unlock();  // frees under way (commit, punch): wait for them, retry
    Status c = ReclaimPending();
    if (!c.ok()) return c;
  }
  if (!fresh.empty()) PollBacking();  // the pool grew: does its backing store keep up?
  size_t k = 0;
  for (Plan& p : plan) p.target = p.inplace ? p.old : fresh[k++];

  // The one-sync path (store-v3.md 3.6 item 1, format 3 only: one_sync_):
  // the record of a small write that maps new grains carries the CRC32C of
  // each run's grains' full contents (kMapChecked), so its data needs no
  // sync of its own before the record: the batch's one sync covers both,
  // and replay checks the data of the records nothing vouches for yet. The
  // CRCs are taken from the bytes written, grain by grain in LBA order as
  // they are written: run_crc[i] is the CRC of grain i's run up to and
  // including it (a run as the record below merges them).
  // Not when the chunk also writes a grain in place: no CRC covers that
  // data, and a later record of the batch must not outlive it (recovery
  // yields a prefix in ticket order, JournalBuffer::Add), so such a chunk
  // takes the plain record and its data sync.
  bool checked = one_sync && len <= kOneSyncWriteBytes &&
                 std::none_of(plan.begin(), plan.end(), [](const Plan& p) { return p.inplace; });
  std::vector<uint32_t> run_crc(checked ? plan.size() : 0);
  std::vector<uint8_t> run_zero(checked ? plan.size() : 0);  // grain i's run so far holds only zeros
  // Extends grain i's run over the grain's full contents: the `n` bytes at
  // `d` from byte `at`, zeros around them (only a fresh grain is written in
  // part: a shared one is copied whole, below).
  auto crc_grain = [&](size_t i, uint64_t at, const uint8_t* d, uint64_t n) {
    const bool continues =
        i > 0 && !plan[i - 1].inplace && plan[i].target == plan[i - 1].target + 1;
    uint32_t c = continues ? run_crc[i - 1] : 0;
    c = Crc32cZeros(c, at);
    c = Crc32c(c, d, n);
    run_crc[i] = Crc32cZeros(c, grain_ - at - n);
    run_zero[i] = (!continues || run_zero[i - 1]) && AllZero(d, n);
  };

  // Data I/O, outside the metadata lock. A write into part of a shared
  // grain copies the rest of the old grain. Into part of a fresh grain it
  // writes only its own bytes where a freed grain reads as zeros
  // (File::DiscardZeroes); elsewhere it writes the whole grain, zeros around
  // its bytes: a freed grain there may hold anything.
  const bool fresh_reads_zero = file_->DiscardZeroes();
  auto written_whole = [&](size_t k) {  // grain k's new contents built in `cow`
    const uint64_t g0 = (a0 + k) * grain_;
    const bool partial = std::min(off + len, g0 + grain_) - std::max(off, g0) != grain_;
    return !plan[k].inplace && partial && (plan[k].old != kNone || !fresh_reads_zero);
  };
  Status s;
  std::vector<uint8_t> cow;
  for (size_t i = 0; i < plan.size() && s.ok();) {
    uint64_t a = a0 + i;
    uint64_t ss = std::max(off, a * grain_), se = std::min(off + len, (a + 1) * grain_);
    if (written_whole(i)) {
      cow.resize(grain_);
      if (plan[i].old != kNone) {
        s = file_->Read(GrainOffset(plan[i].old), grain_, cow.data());
        if (!s.ok()) break;
      } else {
        std::fill(cow.begin(), cow.end(), uint8_t{0});
      }
      std::memcpy(cow.data() + (ss - a * grain_), src + (ss - off), se - ss);
      s = file_->Write(GrainOffset(plan[i].target), grain_, cow.data());
      if (checked) crc_grain(i, 0, cow.data(), grain_);
      i++;
      continue;
    }
    // Merge a stretch of physically contiguous targets into one write.
    size_t j = i + 1;
    while (j < plan.size() && plan[j].target == plan[j - 1].target + 1 && !written_whole(j)) j++;
    uint64_t we = std::min(off + len, (a0 + j) * grain_);
    s = file_->Write(GrainOffset(plan[i].target) + (ss - a * grain_), we - ss, src + (ss - off));
    for (size_t k = i; checked && k < j; k++) {
      if (plan[k].inplace) continue;
      const uint64_t g0 = (a0 + k) * grain_;
      const uint64_t gs = std::max(off, g0), ge = std::min(off + len, g0 + grain_);
      crc_grain(k, gs - g0, src + (gs - off), ge - gs);
    }
    i = j;
  }
  if (!s.ok()) {
    Unreserve(fresh, true);
    return s;
  }

  Record rec;
  rec.lun = l->id;
  for (size_t i = 0; i < plan.size(); i++) {
    if (plan[i].inplace) continue;
    if (!rec.runs.empty() && rec.runs.back().lba + rec.runs.back().len == a0 + i &&
        rec.runs.back().phys + rec.runs.back().len == plan[i].target)
      rec.runs.back().len++;
    else
      rec.runs.push_back({a0 + i, plan[i].target, 1});
  }
  // A run whose grains hold nothing but zeros is not checked: its CRC is
  // what those grains read once punched, so it cannot tell its data from
  // their absence. If replay dropped such a record as torn and the open
  // punched its grains, a power cut before that open's checkpoint would let
  // the next open find the CRC matching and apply the record, and the ones
  // after it that the first open had dropped, over grains it had punched.
  // Such a write takes the plain record and its data sync instead.
  if (checked)
    for (const Run& r : rec.runs)
      if (run_zero[r.lba + r.len - 1 - a0]) checked = false;
  rec.type = checked ? RecType::kMapChecked : RecType::kMap;
  if (checked)  // each run's CRC is its last grain's run_crc
    for (const Run& r : rec.runs) rec.crcs.push_back(run_crc[r.lba + r.len - 1 - a0]);

  MutexLock g(&meta_mu_);
  uint64_t t;
  if (rec.runs.empty()) {
    t = jbuf_.TicketWithoutRecord();  // in place only: the journal's sync covers it
  } else {
    // Allocated before the append: marks that could not be made after it
    // would leave the record's grains writable in place.
    RangeValues::Spare spare = CheckedGrains::SpareFor(checked ? rec.runs.size() : 0);
    // A plain map points at data no CRC covers: the commit syncs it first.
    // A checked one does not ask it (replay checks its data instead), but
    // the batch still syncs data first if anything else in it asks: a plain
    // map, or in-place data with an earlier ticket (JournalBuffer::Add).
    if (!checked) jbuf_.NoteDataWritten();
    Result<uint64_t> a = AppendLocked(rec);
    if (!a.ok()) {  // not for fresh grains (nothing references them), but never ignored
      g.Unlock();
      Unreserve(fresh, true);
      return a.status();
    }
    t = *a;
    if (checked) checked_.Mark(rec.runs, jbuf_.next_lsn() - 1, &spare);
  }
  space_->Mapped(fresh);
  *ticket = std::max(*ticket, t);
  return Status::Ok();
}

Status Core::UnmapGrains(LunState* l, uint64_t w0, uint64_t w1, uint64_t* ticket,
                         const BlocksToCheck* check) {
  for (int attempt = 0;; attempt++) {
    MutexLock g(&meta_mu_);
    if (check && attempt == 0) {
      Status s = CheckRangeLocked(l, check->lba, check->count);
      if (!s.ok()) return s;
    }
    if (!l->map.AnyMapped(w0, w1 - w0)) {
      // Nothing to unmap, maybe thanks to a record not durable yet: a
      // durable caller must wait for what it saw.
      *ticket = std::max(*ticket, jbuf_.last_ticket());
      return Status::Ok();
    }
    // Splitting an extent adds one; keep the checkpoint's room guaranteed.
    // A free: it may use the room growth leaves it.
    if (!AffordableToFreeLocked(2)) {
      if (attempt > 0 || !SpaceComingBackLocked())
        return Status(Code::kNoSpace, "no room for metadata to unmap");
      g.Unlock();
      Status c = ReclaimPending();
      if (!c.ok()) return c;
      continue;
    }
    Record rec;
    rec.type = RecType::kUnmap;
    rec.lun = l->id;
    rec.a = w0;
    rec.n = w1 - w0;
    Result<uint64_t> t = AppendLocked(rec);
    if (!t.ok()) return t.status();
    *ticket = std::max(*ticket, *t);
    return Status::Ok();
  }
}

Status Core::ZeroBytes(LunState* l, uint64_t off, uint64_t len, uint64_t* ticket) {
  const uint64_t w0 = DivUp(off, grain_), w1 = (off + len) / grain_;
  if (w0 < w1) {
    Status s = UnmapGrains(l, w0, w1, ticket);
    if (!s.ok()) return s;
  }
  // Partial grains at the edges: write zeros where something is mapped.
  uint64_t edges[2] = {off / grain_, (off + len - 1) / grain_};
  for (int e = 0; e < 2; e++) {
    uint64_t a = edges[e];
    if (e == 1 && a == edges[0]) break;
    uint64_t s = std::max(off, a * grain_), t = std::min(off + len, (a + 1) * grain_);
    if (t - s == grain_) continue;  // whole, handled above
    bool mapped;
    {
      MutexLock g(&meta_mu_);
      mapped = l->map.Find(a) != kNone;
      *ticket = std::max(*ticket, jbuf_.last_ticket());  // what it saw
    }
    if (!mapped) continue;
    std::vector<uint8_t> zeros(t - s, 0);
    Status st = WriteBytes(l, s, t - s, zeros.data(), ticket);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status Core::CheckRange(LunState* l, uint64_t lba, uint64_t count) {
  MutexLock g(&meta_mu_);
  return CheckRangeLocked(l, lba, count);
}

Status Core::CheckRangeLocked(LunState* l, uint64_t lba, uint64_t count) {
  if (l->deleted) return Status(Code::kNotFound, "LUN was deleted");
  uint64_t blocks = l->size / l->bs;
  if (lba > blocks || count > blocks - lba)
    return Status(Code::kOutOfRange, "blocks [" + std::to_string(lba) + ", +" +
                                         std::to_string(count) + ") beyond the end of LUN " +
                                         l->name + " (" + std::to_string(blocks) + " blocks)");
  return Status::Ok();
}

uint64_t Core::BlockCount(LunState* l) {
  MutexLock g(&meta_mu_);
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
  ReadAheadOf(l, off, len);  // before this read's own requests, so they overlap
  RangeGuard rg(&l->lock, off / grain_, DivUp(off + len, grain_), false);
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  if (iov[0].iov_len >= len) return ReadBytes(l, off, len, static_cast<uint8_t*>(iov[0].iov_base));
  return ReadBytesV(l, off, len, iov);  // scattered buffers: no bounce copy
}

// No range lock: the map may change under the lookup, and then a wrong
// range is fetched, which costs a read and changes nothing (a hint).
void Core::ReadAheadOf(LunState* l, uint64_t off, uint64_t len) {
  ReadAhead::Range r = l->read_ahead.Next(off, len);
  if (r.len == 0) return;
  {
    MutexLock g(&meta_mu_);
    if (r.off >= l->size) return;
    r.len = std::min(r.len, l->size - r.off);
  }
  std::vector<ReadPiece> pieces;
  std::vector<ReadHole> holes;
  if (!MappedPieces(l, r.off, r.len, &pieces, &holes).ok()) return;
  for (const ReadSpan& sp : PlanReadSpans(&pieces))
    if (sp.len < kReadAheadSpanMax) file_->Prefetch(sp.file_off, sp.len);
}

Status Core::ReadBytesV(LunState* l, uint64_t off, uint64_t len, std::span<const iovec> iov) {
  std::vector<iovec> part;
  std::vector<ReadPiece> pieces;
  std::vector<ReadHole> holes;
  Status s = MappedPieces(l, off, len, &pieces, &holes);
  if (!s.ok()) return s;
  return ReadAround(
      std::move(pieces), holes, file_.get(),
      [&](const ReadPiece& p, bool aside) {
        SliceIovec(iov, p.at, p.n, &part);
        return aside ? file_->ReadAside(p.file_off, part.data(), part.size())
                     : file_->ReadV(p.file_off, part.data(), part.size());
      },
      [&](const ReadPiece& p, const uint8_t* src) {
        SliceIovec(iov, p.at, p.n, &part);
        for (const iovec& v : part) {
          std::memcpy(v.iov_base, src, v.iov_len);
          src += v.iov_len;
        }
      },
      [&](uint64_t at, uint64_t n) {
        SliceIovec(iov, at, n, &part);
        for (const iovec& v : part) std::memset(v.iov_base, 0, v.iov_len);
      });
}

Status Core::Write(LunState* l, uint64_t lba, uint64_t count, std::span<const iovec> iov,
                   Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  s = CheckWritable(*l);
  if (!s.ok()) return s;
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  Gather gb;
  s = PrepareIov(iov, len, &gb, true);
  if (!s.ok()) return s;
  uint64_t ticket = 0;
  if (count > 0) {
    RangeGuard rg(&l->lock, off / grain_, DivUp(off + len, grain_), true);
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
    s = WriteBytes(l, off, len, gb.p, &ticket);
    if (!s.ok()) return s;
  } else {
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? CommitOwn(ticket) : Status::Ok();
}

Status Core::CompareAndWrite(LunState* l, uint64_t lba, uint64_t count, const void* cmp,
                             const void* data, Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  s = CheckWritable(*l);
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  uint64_t ticket = 0;
  {
    // Held across read, compare and write: atomic against every write.
    RangeGuard rg(&l->lock, off / grain_, DivUp(off + len, grain_), true);
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
    s = WriteBytes(l, off, len, static_cast<const uint8_t*>(data), &ticket);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? CommitOwn(ticket) : Status::Ok();
}

Status Core::ZeroRange(LunState* l, uint64_t lba, uint64_t count, Durability d, bool unmap_only) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  s = CheckWritable(*l);
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  uint64_t ticket = 0;
  if (count > 0) {
    RangeGuard rg(&l->lock, off / grain_, DivUp(off + len, grain_), true);
    const uint64_t w0 = DivUp(off, grain_), w1 = (off + len) / grain_;
    if (off % grain_ == 0 && len % grain_ == 0) {
      // Whole grains (ESXi's 1 MiB WRITE SAME and UNMAP): zeroing is
      // unmapping, and the range is checked in the hold that unmaps it, as
      // CloneRange does (one hold of meta_mu_ a command, not two).
      const BlocksToCheck check{lba, count};
      s = UnmapGrains(l, w0, w1, &ticket, &check);
      if (!s.ok()) return s;
    } else {
      s = CheckRange(l, lba, count);
      if (!s.ok()) return s;
      // Partial grains: an unmap leaves them (only whole grains can be
      // freed); a zeroing writes zeros into the mapped ones.
      s = unmap_only ? (w0 < w1 ? UnmapGrains(l, w0, w1, &ticket) : Status::Ok())
                     : ZeroBytes(l, off, len, &ticket);
      if (!s.ok()) return s;
    }
  } else {
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
  }
  return d == Durability::kDurable ? CommitOwn(ticket) : Status::Ok();
}

Status Core::Allocate(LunState* l, uint64_t lba, uint64_t count, Durability d) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  if (read_only_) return ReadOnly();
  s = CheckWritable(*l);
  if (!s.ok()) return s;
  uint64_t off = lba * l->bs, len = count * l->bs;
  uint64_t ticket = 0;
  bool grew = false;
  if (count > 0) {
    uint64_t a0 = off / grain_, a1 = DivUp(off + len, grain_);
    RangeGuard rg(&l->lock, a0, a1, true);
    s = CheckRange(l, lba, count);
    if (!s.ok()) return s;
    std::vector<Run> holes;
    std::vector<uint64_t> fresh;
    MutexLock g(&meta_mu_);
    for (int attempt = 0;; attempt++) {
      std::vector<Run> pieces;
      holes.clear();
      l->map.Lookup(a0, a1 - a0, &pieces);
      uint64_t pos = a0, need = 0;
      for (const Run& r : pieces) {
        if (r.lba > pos) holes.push_back({pos, 0, r.lba - pos});
        pos = r.lba + r.len;
      }
      if (pos < a1) holes.push_back({pos, 0, a1 - pos});
      for (const Run& h : holes) need += h.len;
      // Fragmented free space maps a hole with several runs: room for one
      // extent per grain, as the write path reserves.
      s = ReserveLocked(need, need + 8, &fresh, need > 0 ? HintLocked(*l, holes[0].lba) : AllocHint{});
      if (s.ok()) break;
      if (attempt > 0 || !SpaceComingBackLocked()) return s;
      g.Unlock();  // frees under way (commit, punch): wait for them, retry
      s = ReclaimPending();
      if (!s.ok()) return s;
      g.Lock();
    }
    grew = !fresh.empty();
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
    // A freed grain reads as zeros only where the File's discard zeroes
    // (File::DiscardZeroes); elsewhere zeros are written into the runs the
    // record maps before it is appended. Outside the metadata lock, as any
    // data: the range lock keeps [a0, a1) of the map as it is, as for a write.
    if (!rec.runs.empty() && !file_->DiscardZeroes()) {
      g.Unlock();
      for (const Run& r : rec.runs) {
        s = ZeroFill(file_.get(), GrainOffset(r.phys), r.len * grain_);
        if (!s.ok()) break;
      }
      if (!s.ok()) {
        Unreserve(fresh, true);
        return s;
      }
      g.Lock();
    }
    // These grains read as zeros only because they were punched (or zeros
    // written, above), and that may not be durable yet: like data, it must
    // reach the disk before the record mapping them (else a surviving record
    // could expose old data).
    if (!rec.runs.empty()) jbuf_.NoteDataWritten();
    // A record names at most kMaxMapRuns runs (replay refuses longer ones):
    // a fragmented range takes several, each mapping the next grains of
    // `fresh` in order. A power cut between them leaves the range partly
    // backed, which reads the same (zeros); nothing was acknowledged.
    size_t mapped = 0;  // grains of `fresh` the appended records map
    for (size_t i = 0; i < rec.runs.size(); i += kMaxMapRuns) {
      Record part;
      part.type = RecType::kMap;
      part.lun = rec.lun;
      part.runs.assign(rec.runs.begin() + i,
                       rec.runs.begin() + std::min<size_t>(rec.runs.size(), i + kMaxMapRuns));
      Result<uint64_t> a = AppendLocked(part);
      if (!a.ok()) {  // not for fresh grains (nothing references them), but never ignored
        space_->Mapped({fresh.begin(), fresh.begin() + mapped});
        g.Unlock();
        Unreserve({fresh.begin() + mapped, fresh.end()}, false);
        return a.status();
      }
      for (const Run& r : part.runs) mapped += r.len;
    }
    space_->Mapped(fresh);
    ticket = jbuf_.last_ticket();  // ours, or the newest the mapping it saw may rest on
  }
  if (grew) PollBacking();
  return d == Durability::kDurable ? CommitOwn(ticket) : Status::Ok();
}

Result<std::vector<AllocationRun>> Core::AllocationStatus(LunState* l, uint64_t lba,
                                                          uint64_t count) {
  Status s = CheckUsable();
  if (!s.ok()) return s;
  s = CheckRange(l, lba, count);
  if (!s.ok()) return s;
  std::vector<AllocationRun> out;
  if (count == 0) return out;
  uint64_t bpa = grain_ / l->bs;  // blocks per grain
  std::vector<Run> pieces;
  {
    MutexLock g(&meta_mu_);
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
  s = CheckWritable(*dst);
  if (!s.ok()) return s;
  if (src->bs != dst->bs)
    return Status(Code::kInvalidArgument, "clone between LUNs of different block sizes");
  const uint64_t bs = src->bs, soff = src_lba * bs, doff = dst_lba * bs, len = count * bs;
  uint64_t ticket = 0;
  if (count > 0) {
    uint64_t sa0 = soff / grain_, sa1 = DivUp(soff + len, grain_);
    uint64_t da0 = doff / grain_, da1 = DivUp(doff + len, grain_);
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
    const bool same_phase = soff % grain_ == doff % grain_;
    // Same phase: whole grains by reference, the partial edges by copying.
    const uint64_t w0 = DivUp(doff, grain_), w1 = (doff + len) / grain_;
    const uint64_t head = w0 < w1 ? w0 * grain_ - doff : len;  // bytes before the whole grains
    const uint64_t tail_off = w0 < w1 ? w1 * grain_ : doff + len;
    const uint64_t tail = doff + len - tail_off;
    // Whole grains only (an XCOPY segment of a VMFS clone): both ranges are
    // checked in the one hold of meta_mu_ that clones them. 32 callers
    // taking it three times a clone queued on it (a third of their futex
    // calls were CheckRange's waits and wakes at queue depth 32).
    const bool one_hold = same_phase && head == 0 && tail == 0;
    if (!one_hold) {
      s = CheckRange(src, src_lba, count);
      if (s.ok()) s = CheckRange(dst, dst_lba, count);
      if (!s.ok()) return s;
    }
    if (same_phase) {
      std::vector<uint8_t> hb(head), tb(tail);
      if (head) s = ReadBytes(src, soff, head, hb.data());
      if (s.ok() && tail) s = ReadBytes(src, soff + (tail_off - doff), tail, tb.data());
      if (!s.ok()) return s;
      if (w0 < w1) {
        MutexLock g(&meta_mu_);
        if (one_hold) {
          s = CheckRangeLocked(src, src_lba, count);
          if (s.ok()) s = CheckRangeLocked(dst, dst_lba, count);
          if (!s.ok()) return s;
        }
        uint64_t sw0 = (soff + head) / grain_;
        // The source's pieces, handed to the record's ApplyRecord (one lookup
        // under this hold); whether the destination has anything to drop
        // matters only where the source has nothing to map.
        std::vector<Run>& sp = clone_pieces_;
        bool changes = false, affordable = true;
        for (bool retried = false;; retried = true) {
          sp.clear();
          src->map.Lookup(sw0, w1 - w0, &sp);
          changes = !sp.empty() || dst->map.AnyMapped(w0, w1 - w0);
          affordable = !changes || AffordableLocked(0, sp.size() + 2);
          if (affordable || retried || !SpaceComingBackLocked()) break;
          g.Unlock();  // frees under way (commit, punch): wait for them, look again
          s = ReclaimPending();
          if (!s.ok()) return s;
          g.Lock();
        }
        if (changes) {
          if (!affordable) return Status(Code::kNoSpace, "no room for the clone's metadata");
          Record rec;
          rec.type = RecType::kClone;
          rec.lun = src->id;
          rec.lun2 = dst->id;
          rec.a = sw0;
          rec.b = w0;
          rec.n = w1 - w0;
          // Refused (nothing changed) if a grain's reference count would
          // overflow; the initiator can still copy the data.
          Result<uint64_t> t = AppendLocked(rec, &sp);
          if (!t.ok()) return t.status();
          ticket = *t;
        }
        ticket = std::max(ticket, jbuf_.last_ticket());  // what it saw, if it appended nothing
      }
      if (head) s = WriteBytes(dst, doff, head, hb.data(), &ticket);
      if (s.ok() && tail) s = WriteBytes(dst, tail_off, tail, tb.data(), &ticket);
      if (!s.ok()) return s;
    } else {
      // Different phase: copy data, back to front if it overlaps forward.
      const uint64_t step = 4ull * au_;  // an I/O size: the allocation chunk
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
  return d == Durability::kDurable ? CommitOwn(ticket) : Status::Ok();
}

}  // namespace cowstore::store
