// SPDX-License-Identifier: Apache-2.0
#include "handler/store/meta.h"

#include <cassert>
#include <cstring>

#include "handler/store/crc32c.h"
#include "handler/store/names.h"
#include "handler/store/random.h"

namespace cowstore::store {
namespace {
constexpr char kChunkMagic[8] = {'C', 'O', 'W', 'C', 'K', 'P', 'T', '1'};
constexpr uint32_t kStateMagic = 0x54534b43;  // "CKST"
}  // namespace

void EncodeLunAttrs(const LunAttrs& a, Encoder* e) {
  std::string t;
  Encoder te(&t);
  if (a.read_only) {
    te.U32(kAttrReadOnly);
    te.U32(0);
  }
  if (a.origin != Uuid{}) {
    te.U32(kAttrOrigin);
    te.U32(16);
    te.Bytes(a.origin.data(), a.origin.size());
  }
  if (a.created != 0) {
    te.U32(kAttrCreated);
    te.U32(8);
    te.U64(a.created);
  }
  e->U32(static_cast<uint32_t>(t.size()));
  e->Bytes(t.data(), t.size());
}

bool DecodeLunAttrs(Decoder* d, LunAttrs* out) {
  *out = LunAttrs{};
  uint32_t bytes;
  if (!d->U32(&bytes) || bytes > d->left() || bytes > kMaxLunAttrBytes) return false;
  Decoder a(d->here(), bytes);
  d->Skip(bytes);
  // Tags strictly ascending, as EncodeLunAttrs writes them: each at most
  // once, and one spelling per list (a reordered list is not another one).
  uint32_t last_tag = 0;
  while (a.left() > 0) {
    uint32_t tag, len;
    if (!a.U32(&tag) || !a.U32(&len) || len > a.left() || tag <= last_tag) return false;
    last_tag = tag;
    Decoder v(a.here(), len);
    a.Skip(len);
    switch (tag) {
      case kAttrReadOnly:
        out->read_only = true;
        break;
      case kAttrOrigin:
        if (len != 16 || !v.Bytes(out->origin.data(), 16) || out->origin == Uuid{}) return false;
        break;
      case kAttrCreated:
        if (len != 8 || !v.U64(&out->created) || out->created == 0) return false;
        break;
      default:
        // A later build's attribute: remember the first, the caller refuses
        // it (kUnsupported) rather than drop what may be a protection.
        if (out->unknown_tag == 0) out->unknown_tag = tag;
        continue;
    }
    if (v.left() != 0) return false;
  }
  return true;
}

namespace {
Status UnknownAttr(const std::string& lun, uint32_t tag) {
  return Status(Code::kUnsupported, "LUN '" + lun + "' has attribute " + std::to_string(tag) +
                                        ", which needs a newer cowstore");
}
}  // namespace

bool Decoder::U32(uint32_t* v) {
  if (n_ < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; i++) *v |= uint32_t(p_[i]) << (8 * i);
  p_ += 4; n_ -= 4;
  return true;
}
bool Decoder::U64(uint64_t* v) {
  if (n_ < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; i++) *v |= uint64_t(p_[i]) << (8 * i);
  p_ += 8; n_ -= 8;
  return true;
}
bool Decoder::Bytes(void* out, size_t n) {
  if (n_ < n) return false;
  std::memcpy(out, p_, n);
  p_ += n; n_ -= n;
  return true;
}
bool Decoder::Str(std::string* s, size_t max) {
  uint32_t len;
  if (!U32(&len) || len > max || n_ < len) return false;
  s->assign(reinterpret_cast<const char*>(p_), len);
  p_ += len; n_ -= len;
  return true;
}

std::string Superblock::Encode() const {
  std::string s;
  Encoder e(&s);
  e.Bytes(kSuperblockMagic, 8);
  e.U32(version);
  e.Bytes(uuid.data(), uuid.size());
  e.U32(au);
  e.U64(size_bytes);
  e.U64(journal_bytes);
  e.U64(data_offset);
  e.U64(seq);
  e.U64(ckpt_first);
  e.U64(ckpt_seq);
  e.U64(ckpt_bytes);
  e.U32(ckpt_crc);
  e.U64(journal_start_lsn);
  e.U32(soft_threshold_percent);
  // The fields end where the shared envelope's CRC sits (a field added here
  // must move the v1/v2 layout, not the envelope).
  assert(s.size() == kSuperblockEnvelopeCrc);
  e.U32(Crc32c(0, s.data(), s.size()));
  s.resize(kSuperblockSlot, '\0');
  return s;
}

std::string JournalBytesRule(uint64_t bytes) {
  if (bytes < kMinJournalBytes || bytes > kMaxJournalBytes || bytes % 4096)
    return "journal size must be 64 KiB..1 GiB, 4 KiB aligned";
  return "";
}

std::string LunRecordRule(uint32_t id, std::string_view name, uint64_t size, uint32_t bs) {
  std::string why;
  if (id == 0) return "LUN id 0";
  if (id == UINT32_MAX) return "LUN id " + std::to_string(id) + " leaves no next LUN id";
  if (!ValidStoredName(name, "LUN name", &why)) return why;
  if (!ValidBlockSize(bs)) return "block size " + std::to_string(bs);
  if (size == 0 || size % bs != 0) return "size " + std::to_string(size) + " not a positive multiple of the block size";
  return "";
}

std::string LunGeometryRule(const LunState& l, uint32_t grain, uint64_t units) {
  std::string why = LunRecordRule(l.id, l.name, l.size, l.bs);
  if (!why.empty()) return "LUN " + std::to_string(l.id) + " (" + Quoted(l.name) + ") has a bad geometry: " + why;
  if (l.bs > grain)
    return "LUN " + std::to_string(l.id) + " (" + Quoted(l.name) + ") has a bad geometry: block size " +
           std::to_string(l.bs) + " above the grain (" + std::to_string(grain) + ")";
  const uint64_t lun_units = (l.size + grain - 1) / grain;
  for (const auto& [lba, e] : l.map.runs())
    if (e.phys > units || e.len > units - e.phys || lba > lun_units || e.len > lun_units - lba)
      return "LUN " + l.name + " maps outside its bounds";
  return "";
}

std::string LunBlocksRule(uint64_t size, uint32_t bs) {
  if (size / bs <= kMaxLunBlocks) return "";
  return "a LUN holds at most 2^48 blocks (" + std::to_string(kMaxLunBlocks * bs) + " bytes at " +
         std::to_string(bs) + "-byte blocks)";
}

std::string RecordLunBlocksRule(const MetaState& st, const Record& r) {
  uint32_t bs = 0;
  if (r.type == RecType::kCreateLun) {
    bs = r.bs;
  } else if (r.type == RecType::kResizeLun) {
    if (const LunState* l = st.Find(r.lun)) bs = l->bs;
  }
  // ApplyRecord refuses a block size off the rule (and a LUN it cannot find).
  if (!ValidBlockSize(bs)) return "";
  if (std::string why = LunBlocksRule(r.a, bs); !why.empty())
    return "LUN " + std::to_string(r.lun) + (r.type == RecType::kCreateLun ? " created" : " resized") +
           " above the rule: " + why;
  return "";
}

uint64_t NewPoolJournalStartLsn() {
  return (RandomU64() >> 24) + 1;  // never 0, and far below 2^62 (the decoders' bound)
}

std::string PoolUnitsRule(uint64_t units) {
  if (units < kMinPoolUnits)
    return "a pool needs at least " + std::to_string(kMinPoolUnits) + " allocation units";
  if (units > kMaxPoolUnits)
    return "a pool holds at most " + std::to_string(kMaxPoolUnits) + " allocation units";
  return "";
}

Status Superblock::Decode(const void* p, size_t n, Superblock* sb) {
  Decoder d(p, n);
  char magic[8];
  if (!d.Bytes(magic, 8) || std::memcmp(magic, kSuperblockMagic, 8) != 0)
    return Status(Code::kCorruption, "no cowstore superblock (bad magic)");
  bool ok = d.U32(&sb->version) && d.Bytes(sb->uuid.data(), 16) && d.U32(&sb->au) &&
            d.U64(&sb->size_bytes) && d.U64(&sb->journal_bytes) && d.U64(&sb->data_offset) &&
            d.U64(&sb->seq) && d.U64(&sb->ckpt_first) && d.U64(&sb->ckpt_seq) && d.U64(&sb->ckpt_bytes) &&
            d.U32(&sb->ckpt_crc) && d.U64(&sb->journal_start_lsn) &&
            d.U32(&sb->soft_threshold_percent);
  size_t body = n - d.left();
  uint32_t crc;
  if (!ok || !d.U32(&crc) || crc != Crc32c(0, p, body))
    return Status(Code::kCorruption, "superblock checksum mismatch");
  if (sb->version < kOldestFormatVersion || sb->version > kFormatVersion)
    return Status(Code::kUnsupported, "pool format version " + std::to_string(sb->version) +
                                          " (this build reads versions " +
                                          std::to_string(kOldestFormatVersion) + " to " +
                                          std::to_string(kFormatVersion) + ")");
  // Every field is bounded by what Create and Grow can write, so nothing
  // derived from it (offsets, unit counts, buffer sizes) can overflow or ask
  // for more memory than a pool of that size legitimately needs.
  if (!ValidAllocationUnit(sb->au) || !JournalBytesRule(sb->journal_bytes).empty() ||
      sb->data_offset != DataOffsetV2(sb->au, sb->journal_bytes) ||
      sb->size_bytes < sb->data_offset || !PoolUnitsRule(sb->total_units()).empty())
    return Status(Code::kCorruption, "superblock geometry is inconsistent");
  uint64_t units = sb->total_units();
  if (sb->ckpt_first != kNone &&
      (sb->ckpt_first >= units || sb->ckpt_bytes == 0 || sb->ckpt_seq > sb->seq ||
       sb->ckpt_bytes > units * (sb->au - kChunkHeader)))
    return Status(Code::kCorruption, "superblock names a checkpoint outside the pool");
  if (sb->soft_threshold_percent > 100 || sb->journal_start_lsn == 0 ||
      sb->journal_start_lsn > (kNone >> 2))
    return Status(Code::kCorruption, "superblock fields out of range");
  return Status::Ok();
}

void EncodeChunk(const ChunkHeader& h, const char* payload, std::string* out) {
  out->clear();
  Encoder e(out);
  e.Bytes(kChunkMagic, 8);
  e.U64(h.seq);
  e.U32(h.index);
  e.U32(h.len);
  e.U64(h.next);
  e.Bytes(h.uuid.data(), 16);
  out->resize(kChunkHeader - 4, '\0');
  out->append(payload, h.len);
  uint32_t crc = Crc32c(0, out->data(), out->size());
  std::string c4;
  Encoder(&c4).U32(crc);
  out->insert(kChunkHeader - 4, c4);
}

bool DecodeChunk(const void* p, size_t n, ChunkHeader* h) {
  if (n < kChunkHeader) return false;
  const char* c = static_cast<const char*>(p);
  Decoder d(c, kChunkHeader);
  char magic[8];
  uint32_t crc;
  d.Bytes(magic, 8);
  d.U64(&h->seq);
  d.U32(&h->index);
  d.U32(&h->len);
  d.U64(&h->next);
  d.Bytes(h->uuid.data(), 16);
  Decoder(c + kChunkHeader - 4, 4).U32(&crc);
  if (std::memcmp(magic, kChunkMagic, 8) != 0 || h->len > n - kChunkHeader) return false;
  uint32_t sum = Crc32c(0, c, kChunkHeader - 4);
  return Crc32c(sum, c + kChunkHeader, h->len) == crc;
}

LunState* MetaState::FindName(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : Find(it->second);
}

std::shared_ptr<LunState> MetaState::NewLun() const {
  auto l = std::make_shared<LunState>();
  l->map.RaiseBound(max_phys);
  return l;
}

void MetaState::RaiseMapBound(uint64_t bound) {
  max_phys = std::max(max_phys, ExtentMap::ClampedBound(bound));
  for (auto& [id, l] : luns_) l->map.RaiseBound(max_phys);
}

void MetaState::AddLun(std::shared_ptr<LunState> l) {
  by_name_[l->name] = l->id;
  uint32_t id = l->id;
  const uint64_t n = l->map.extents();
  if (luns_.emplace(id, std::move(l)).second) extents_ += n;
}

void MetaState::EraseLun(uint32_t id) {
  auto it = luns_.find(id);
  if (it == luns_.end()) return;
  by_name_.erase(it->second->name);
  extents_ -= it->second->map.extents();
  luns_.erase(it);
}

void Record::EncodePayload(std::string* out) const {
  Encoder e(out);
  switch (type) {
    case RecType::kCreateLun:
    case RecType::kCloneLun:
    case RecType::kSnapshotLun:
      e.U32(lun);
      e.U32(lun2);
      e.Bytes(uuid.data(), 16);
      e.U64(a);
      e.U32(bs);
      e.Str(name);
      // Only a snapshot has attributes (read-only, origin, creation time).
      if (type == RecType::kSnapshotLun) EncodeLunAttrs(attrs, &e);
      break;
    case RecType::kRollbackLun:
      e.U32(lun);
      e.U32(lun2);
      break;
    case RecType::kDeleteLun:
      e.U32(lun);
      break;
    case RecType::kResizeLun:
      e.U32(lun);
      e.U64(a);
      break;
    case RecType::kMap:
    case RecType::kMapChecked:
      e.U32(lun);
      e.U32(static_cast<uint32_t>(runs.size()));
      for (const Run& r : runs) { e.U64(r.lba); e.U64(r.phys); e.U64(r.len); }
      // kMap's payload, then the runs' CRCs in run order (meta.h).
      if (type == RecType::kMapChecked)
        for (uint32_t c : crcs) e.U32(c);
      break;
    case RecType::kUnmap:
      e.U32(lun);
      e.U64(a);
      e.U64(n);
      break;
    case RecType::kClone:
      e.U32(lun);
      e.U32(lun2);
      e.U64(a);
      e.U64(b);
      e.U64(n);
      break;
    case RecType::kSeal:
      break;
  }
}

bool Record::DecodePayload(RecType t, const void* p, size_t len, Record* r) {
  Decoder d(p, len);
  r->type = t;
  bool ok = false;
  switch (t) {
    case RecType::kCreateLun:
    case RecType::kCloneLun:
    case RecType::kSnapshotLun:
      ok = d.U32(&r->lun) && d.U32(&r->lun2) && d.Bytes(r->uuid.data(), 16) && d.U64(&r->a) &&
           d.U32(&r->bs) && d.Str(&r->name, kMaxNameLength) &&
           (t != RecType::kSnapshotLun || DecodeLunAttrs(&d, &r->attrs));
      break;
    case RecType::kRollbackLun:
      ok = d.U32(&r->lun) && d.U32(&r->lun2);
      break;
    case RecType::kDeleteLun:
      ok = d.U32(&r->lun);
      break;
    case RecType::kResizeLun:
      ok = d.U32(&r->lun) && d.U64(&r->a);
      break;
    case RecType::kMap:
    case RecType::kMapChecked: {
      // The count is checked against the bytes (and a checked record's
      // against its bound) before anything is allocated for it.
      const bool checked = t == RecType::kMapChecked;
      uint32_t cnt;
      ok = d.U32(&r->lun) && d.U32(&cnt) && (!checked || cnt <= kMaxCheckedRuns) &&
           d.left() == size_t{cnt} * (checked ? 24 + 4 : 24);
      if (ok) {
        r->runs.resize(cnt);
        for (Run& x : r->runs) ok = ok && d.U64(&x.lba) && d.U64(&x.phys) && d.U64(&x.len);
        if (checked) {
          r->crcs.resize(cnt);
          for (uint32_t& c : r->crcs) ok = ok && d.U32(&c);
        }
      }
      break;
    }
    case RecType::kUnmap:
      ok = d.U32(&r->lun) && d.U64(&r->a) && d.U64(&r->n);
      break;
    case RecType::kClone:
      ok = d.U32(&r->lun) && d.U32(&r->lun2) && d.U64(&r->a) && d.U64(&r->b) && d.U64(&r->n);
      break;
    case RecType::kSeal:
      ok = true;
      break;
  }
  return ok && d.left() == 0;
}

void FrameRecord(const Record& r, uint64_t lsn, uint64_t proven, std::string* out) {
  size_t start = out->size();
  out->append(kRecordHeader, '\0');
  r.EncodePayload(out);
  uint32_t plen = static_cast<uint32_t>(out->size() - start - kRecordHeader);
  // The header in place (no string of its own: one allocation less per
  // record): crc(4, below) | plen(4) | lsn(8) | proven(8) | type(1).
  char* h = out->data() + start;
  static_assert(kRecordHeader == 4 + 4 + 8 + 8 + 1);
  PutLittleEndian(h + 4, plen, 4);
  PutLittleEndian(h + 8, lsn, 8);
  PutLittleEndian(h + 16, proven, 8);
  PutLittleEndian(h + 24, static_cast<uint8_t>(r.type), 1);
  PutLittleEndian(h, Crc32c(0, h + 4, out->size() - start - 4), 4);
}

size_t ParseRecord(const uint8_t* p, size_t n, uint64_t expect_lsn, Record* r, RecordFrame* frame) {
  Decoder d(p, n);
  uint32_t crc, plen;
  uint64_t lsn, proven;
  uint8_t type;
  if (!d.U32(&crc) || !d.U32(&plen) || !d.U64(&lsn) || !d.U64(&proven) || !d.U8(&type)) return 0;
  if ((expect_lsn != kNone && lsn != expect_lsn) || plen > n - kRecordHeader) return 0;
  // The header's rules, type and payload shape before the CRC: the same
  // verdicts, but stale bytes (a v3 journal ring holds older records all
  // round it) are refused without a CRC over their garbage length, which
  // made replay's scan for later records quadratic; and the payload bound
  // makes the verdict depend on kMaxRecordBytes bytes at most. *r is the
  // caller's only when this returns > 0.
  if (!PlausibleRecordHeader(plen, lsn, proven, type)) return 0;
  if (!Record::DecodePayload(static_cast<RecType>(type), p + kRecordHeader, plen, r)) return 0;
  if (Crc32c(0, p + 4, kRecordHeader - 4 + plen) != crc) return 0;
  if (frame) *frame = {lsn, proven};
  return kRecordHeader + plen;
}

size_t ParseRecordV1(const uint8_t* p, size_t n, uint64_t expect_lsn, Record* r,
                     uint64_t* lsn_out) {
  Decoder d(p, n);
  uint32_t crc, plen;
  uint64_t lsn;
  uint8_t type;
  if (!d.U32(&crc) || !d.U32(&plen) || !d.U64(&lsn) || !d.U8(&type)) return 0;
  if ((expect_lsn != kNone && lsn != expect_lsn) || plen > n - kRecordHeaderV1) return 0;
  if (Crc32c(0, p + 4, kRecordHeaderV1 - 4 + plen) != crc) return 0;
  // Version 1 knew the types up to CloneLun (Seal came with version 2).
  if (type < 1 || type > static_cast<uint8_t>(RecType::kCloneLun)) return 0;
  if (!Record::DecodePayload(static_cast<RecType>(type), p + kRecordHeaderV1, plen, r)) return 0;
  if (lsn_out) *lsn_out = lsn;
  return kRecordHeaderV1 + plen;
}

std::string DescribeRecord(const Record& r) {
  auto lun = [](uint32_t id) { return "LUN #" + std::to_string(id); };
  auto n = [](uint64_t v) { return std::to_string(v); };
  switch (r.type) {
    case RecType::kCreateLun:
      return "create " + lun(r.lun) + " '" + r.name + "' (" + n(r.a) + " bytes)";
    case RecType::kCloneLun:
      return "clone " + lun(r.lun) + " to new " + lun(r.lun2) + " '" + r.name + "'";
    case RecType::kDeleteLun:
      return "delete " + lun(r.lun);
    case RecType::kResizeLun:
      return "resize " + lun(r.lun) + " to " + n(r.a) + " bytes";
    case RecType::kMap:
    case RecType::kMapChecked: {
      uint64_t units = 0;
      for (const Run& x : r.runs) units += x.len;
      return "write " + lun(r.lun) + ": " + n(units) + " AUs mapped" +
             (r.runs.empty() ? "" : " from AU " + n(r.runs[0].lba)) +
             (r.type == RecType::kMapChecked ? " (data CRC-checked)" : "");
    }
    case RecType::kUnmap:
      return "unmap " + lun(r.lun) + " AUs [" + n(r.a) + ", +" + n(r.n) + ")";
    case RecType::kClone:
      return "clone " + lun(r.lun) + " AUs [" + n(r.a) + ", +" + n(r.n) + ") to " + lun(r.lun2) +
             " at AU " + n(r.b);
    case RecType::kSeal:
      return "clean-close mark";
    case RecType::kSnapshotLun:
      return "snapshot " + lun(r.lun) + " to new read-only " + lun(r.lun2) + " '" + r.name + "'";
    case RecType::kRollbackLun:
      return "roll back " + lun(r.lun) + " to its snapshot " + lun(r.lun2);
  }
  return "unknown record";
}

std::string CheckedRecordRule(const Record& r, uint32_t grain, uint64_t grains) {
  // Grains a kOneSyncWriteBytes write touches at most: every one but the
  // first starts inside it, and one more when it starts inside a grain.
  const uint64_t most = (kOneSyncWriteBytes + grain - 1) / grain + 1;
  uint64_t total = 0;
  for (const Run& x : r.runs) {
    if (x.len == 0 || x.phys >= grains || x.len > grains - x.phys)
      return "a run of grains [" + std::to_string(x.phys) + ", +" + std::to_string(x.len) +
             ") outside the pool's " + std::to_string(grains);
    total += std::min<uint64_t>(x.len, most + 1);  // no overflow: each term is bounded
  }
  if (total > most)
    return "more grains than a write of " + std::to_string(kOneSyncWriteBytes) + " bytes touches (" +
           std::to_string(most) + ")";
  return "";
}

namespace {
Status Bad(const std::string& what) { return Status(Code::kCorruption, "journal replay: " + what); }
uint64_t Units(uint64_t bytes, uint32_t au) { return (bytes + au - 1) / au; }

// Maps [lba, +len) -> phys in m. Callers check ExtentMap's rule first (every
// run of the record, or runs taken from maps that obey it), so this cannot
// fail; if it ever did, the record is refused rather than half applied.
Status MapInto(ExtentMap* m, uint64_t lba, uint64_t phys, uint64_t len) {
  Status s = m->Insert(lba, phys, len);
  return s.ok() ? s : Bad(s.message());
}

// The runs whose units gain a reference when `r` is applied to `st`: r's own
// runs, or those it names, looked up into *found (kClone's source pieces,
// which the clone then maps, so they are looked up once), or kClone's
// pieces as the caller looked them up (`given`: ApplyRecord's
// `clone_pieces`).
std::span<const Run> Increments(const MetaState& st, const Record& r, const std::vector<Run>* given,
                                std::vector<Run>* found) {
  auto whole = [&](uint32_t id) {
    if (const LunState* l = st.Find(id))
      for (const auto& [lba, e] : l->map.runs()) found->push_back({lba, e.phys, e.len});
  };
  switch (r.type) {
    case RecType::kCloneLun:
    case RecType::kSnapshotLun: whole(r.lun); break;
    case RecType::kRollbackLun: whole(r.lun2); break;
    case RecType::kMap:
    case RecType::kMapChecked: return r.runs;  // no copy
    case RecType::kClone:
      if (given) return *given;
      if (const LunState* src = st.Find(r.lun)) src->map.Lookup(r.a, r.n, found);
      break;
    default: break;
  }
  return *found;
}

// Marks in `dirty` what ApplyRecord's comment (meta.h) lists for r's kind,
// in the map's unit (`unit`: bytes per map key, for a resize's new end):
// what each kind may change, read off the record, applied or not.
void MarkRemapped(const Record& r, uint32_t unit, DirtyRanges* dirty) {
  switch (r.type) {
    case RecType::kMap:
    case RecType::kMapChecked:
      for (const Run& x : r.runs) dirty->Mark(r.lun, x.lba, x.len);
      return;
    case RecType::kUnmap: dirty->Mark(r.lun, r.a, r.n); return;
    case RecType::kClone: dirty->Mark(r.lun2, r.b, r.n); return;
    case RecType::kResizeLun:
      dirty->Mark(r.lun, Units(r.a, unit), kNone);  // to the end: Mark clips at the key bound
      return;
    case RecType::kCreateLun:
    case RecType::kDeleteLun:
    case RecType::kRollbackLun: dirty->MarkLun(r.lun); return;
    case RecType::kCloneLun:
    case RecType::kSnapshotLun: dirty->MarkLun(r.lun2); return;
    case RecType::kSeal: return;
  }
}

// ApplyRecord without the marks.
Status ApplyUnmarked(MetaState* st, const Record& r, RefSink* sink,
                     const std::vector<Run>* clone_pieces) {
  // Ranges are in AUs; anything near 2^64 can only come from damage. Every
  // check comes before the first change.
  constexpr uint64_t kMaxUnits = ExtentMap::kMaxLba;
  bool range = r.type == RecType::kUnmap || r.type == RecType::kClone;
  if (range && (r.a > kMaxUnits || r.b > kMaxUnits || r.n > kMaxUnits))
    return Bad("range out of bounds");
  if (r.type == RecType::kClone && r.n > kMaxUnits - r.b)  // the runs it maps at b
    return Bad("clone to LUN " + std::to_string(r.lun2) + " at AU " + std::to_string(r.b) +
               " +" + std::to_string(r.n) + ": logical end beyond 2^48 units");
  for (const Run& x : r.runs) {
    std::string why = ExtentMap::OutOfRange(x.lba, x.phys, x.len, st->max_phys);
    if (!why.empty())
      return Bad("LUN " + std::to_string(r.lun) + " extent at AU " + std::to_string(x.lba) +
                 " -> " + std::to_string(x.phys) + " +" + std::to_string(x.len) + ": " + why);
  }
  // kClone's source pieces (looked up once, here or by the caller); the
  // runs of a whole LUN a kCloneLun, kSnapshotLun or kRollbackLun adds.
  std::vector<Run> found;
  const std::vector<Run>* given = r.type == RecType::kClone ? clone_pieces : nullptr;
  if (sink) {
    Status s = sink->CanInc(Increments(*st, r, given, &found));
    if (!s.ok()) return s;
  }
  // A change to one LUN's map, told to the state's count however the case
  // returns (a refused run may leave part of the change made).
  struct MapChange {
    MetaState* st;
    const LunState* l;
    uint64_t before;
    MapChange(MetaState* s, const LunState* lun) : st(s), l(lun), before(lun->map.extents()) {}
    MapChange(const MapChange&) = delete;
    MapChange& operator=(const MapChange&) = delete;
    ~MapChange() { st->MapResized(before, l->map.extents()); }
  };
  switch (r.type) {
    case RecType::kCreateLun: {
      if (std::string why = LunRecordRule(r.lun, r.name, r.a, r.bs); !why.empty())
        return Bad("LUN " + std::to_string(r.lun) + " created with " + why);
      if (st->Find(r.lun) || st->FindName(r.name)) return Bad("LUN created twice");
      auto l = st->NewLun();
      l->id = r.lun;
      l->name = r.name;
      l->uuid = r.uuid;
      l->size = r.a;
      l->bs = r.bs;
      st->AddLun(std::move(l));
      st->next_lun_id = std::max(st->next_lun_id, r.lun + 1);
      return Status::Ok();
    }
    case RecType::kCloneLun:
    case RecType::kSnapshotLun: {
      LunState* src = st->Find(r.lun);
      if (r.type == RecType::kSnapshotLun && r.attrs.unknown_tag)
        return UnknownAttr(r.name, r.attrs.unknown_tag);
      if (!src || st->Find(r.lun2) || st->FindName(r.name)) return Bad("bad LUN clone");
      // The copy's own id and name; its size and block size are the source's.
      if (std::string why = LunRecordRule(r.lun2, r.name, src->size, src->bs); !why.empty())
        return Bad("LUN " + std::to_string(r.lun2) + " copied with " + why);
      auto l = st->NewLun();
      l->id = r.lun2;
      l->name = r.name;
      l->uuid = r.uuid;
      l->size = src->size;
      l->bs = src->bs;
      if (r.type == RecType::kSnapshotLun) l->attrs = r.attrs;
      for (const auto& [lba, e] : src->map.runs()) {
        Status s = MapInto(&l->map, lba, e.phys, e.len);
        if (s.ok() && sink) s = sink->Inc(e.phys, e.len);
        if (!s.ok()) return s;
      }
      st->AddLun(std::move(l));
      st->next_lun_id = std::max(st->next_lun_id, r.lun2 + 1);
      return Status::Ok();
    }
    case RecType::kRollbackLun: {
      LunState* t = st->Find(r.lun);
      LunState* snap = st->Find(r.lun2);
      if (!t || !snap || t == snap || t->bs != snap->bs) return Bad("bad LUN rollback");
      const MapChange change(st, t);
      if (sink)  // increments first: AUs the two share never hit zero
        for (const auto& [lba, e] : snap->map.runs()) {
          Status s = sink->Inc(e.phys, e.len);
          if (!s.ok()) return s;
        }
      std::vector<Run> removed;
      t->map.Remove(0, kNone, &removed);
      for (const auto& [lba, e] : snap->map.runs()) {
        Status s = MapInto(&t->map, lba, e.phys, e.len);
        if (!s.ok()) return s;
      }
      if (sink)
        for (const Run& y : removed) sink->Dec(y.phys, y.len);
      t->size = snap->size;
      return Status::Ok();
    }
    case RecType::kDeleteLun: {
      LunState* l = st->Find(r.lun);
      if (!l) return Bad("delete of unknown LUN");
      if (sink)
        for (const auto& [lba, e] : l->map.runs()) sink->Dec(e.phys, e.len);
      l->deleted = true;
      st->EraseLun(r.lun);
      return Status::Ok();
    }
    case RecType::kResizeLun: {
      LunState* l = st->Find(r.lun);
      if (!l) return Bad("resize of unknown LUN");
      if (std::string why = LunRecordRule(l->id, l->name, r.a, l->bs); !why.empty())
        return Bad("LUN " + std::to_string(l->id) + " resized to " + why);
      const MapChange change(st, l);
      uint64_t keep = Units(r.a, st->au);
      std::vector<Run> removed;
      l->map.Remove(keep, kNone - keep, &removed);
      if (sink)
        for (const Run& x : removed) sink->Dec(x.phys, x.len);
      l->size = r.a;
      return Status::Ok();
    }
    case RecType::kMap:
    case RecType::kMapChecked: {  // its CRCs are replay's (replay.h), not the state's
      LunState* l = st->Find(r.lun);
      if (!l) return Bad("map on unknown LUN");
      const MapChange change(st, l);
      std::vector<Run> removed;
      for (const Run& x : r.runs) {
        if (sink) {
          Status s = sink->Inc(x.phys, x.len);
          if (!s.ok()) return s;
        }
        removed.clear();
        l->map.Remove(x.lba, x.len, &removed);
        Status s = MapInto(&l->map, x.lba, x.phys, x.len);
        if (!s.ok()) return s;
        if (sink)
          for (const Run& y : removed) sink->Dec(y.phys, y.len);
      }
      return Status::Ok();
    }
    case RecType::kUnmap: {
      LunState* l = st->Find(r.lun);
      if (!l) return Bad("unmap on unknown LUN");
      const MapChange change(st, l);
      std::vector<Run> removed;
      l->map.Remove(r.a, r.n, &removed);
      if (sink)
        for (const Run& y : removed) sink->Dec(y.phys, y.len);
      return Status::Ok();
    }
    case RecType::kClone: {
      LunState* src = st->Find(r.lun);
      LunState* dst = st->Find(r.lun2);
      if (!src || !dst) return Bad("clone between unknown LUNs");
      const MapChange change(st, dst);
      if (!sink && !given) src->map.Lookup(r.a, r.n, &found);  // else Increments' lookup
      const std::span<const Run> pieces = given ? std::span<const Run>(*given) : found;
      std::vector<Run> removed;
      if (sink)  // increments first: an AU both dropped and re-added never hits zero
        for (const Run& x : pieces) {
          Status s = sink->Inc(x.phys, x.len);
          if (!s.ok()) return s;
        }
      dst->map.Remove(r.b, r.n, &removed);
      for (const Run& x : pieces) {
        Status s = MapInto(&dst->map, x.lba - r.a + r.b, x.phys, x.len);
        if (!s.ok()) return s;
      }
      if (sink)
        for (const Run& y : removed) sink->Dec(y.phys, y.len);
      return Status::Ok();
    }
    case RecType::kSeal:
      return Status::Ok();
  }
  return Bad("unknown record type");
}

}  // namespace

Status ApplyRecord(MetaState* st, const Record& r, RefSink* sink, DirtyRanges* dirty,
                   const std::vector<Run>* clone_pieces) {
#ifndef NDEBUG
  if (clone_pieces && r.type == RecType::kClone) {  // the caller's lookup is the one replay makes
    std::vector<Run> expect;
    if (const LunState* src = st->Find(r.lun)) src->map.Lookup(r.a, r.n, &expect);
    assert(expect == *clone_pieces);
  }
#endif
  Status s = ApplyUnmarked(st, r, sink, clone_pieces);
  if (dirty) MarkRemapped(r, st->au, dirty);  // whatever s: see meta.h
  return s;
}

void EncodeState(const MetaState& st, std::string* out) {
  Encoder e(out);
  e.U32(kStateMagic);
  e.U32(st.next_lun_id);
  e.U32(static_cast<uint32_t>(st.luns().size()));
  for (const auto& [id, l] : st.luns()) {
    e.U32(l->id);
    e.Bytes(l->uuid.data(), 16);
    e.U64(l->size);
    e.U32(l->bs);
    e.Str(l->name);
    EncodeLunAttrs(l->attrs, &e);  // empty (4 zero bytes) for an ordinary LUN
    e.U64(l->map.extents());
    for (const auto& [lba, x] : l->map.runs()) {
      e.U64(lba);
      e.U64(x.phys);
      e.U64(x.len);
    }
  }
}

Status DecodeState(const std::string& in, MetaState* st, uint32_t version) {
  Decoder d(in.data(), in.size());
  uint32_t magic, nluns;
  Status bad(Code::kCorruption, "checkpoint does not decode");
  if (!d.U32(&magic) || magic != kStateMagic || !d.U32(&st->next_lun_id) || !d.U32(&nluns))
    return bad;
  // Every build started it at 1 and kept it above every id (ApplyRecord);
  // the v3 LUN table page requires the same.
  if (st->next_lun_id == 0) return Status(Code::kCorruption, "checkpoint: next LUN id 0");
  for (uint32_t i = 0; i < nluns; i++) {
    auto l = st->NewLun();  // format 2's bound: DecodeState is its checkpoint
    uint64_t next;
    if (!d.U32(&l->id) || !d.Bytes(l->uuid.data(), 16) || !d.U64(&l->size) || !d.U32(&l->bs) ||
        !d.Str(&l->name, kMaxNameLength))
      return bad;
    if (std::string why = LunRecordRule(l->id, l->name, l->size, l->bs); !why.empty())
      return Status(Code::kCorruption, "checkpoint: LUN " + std::to_string(l->id) + ": " + why);
    if (l->id >= st->next_lun_id)
      return Status(Code::kCorruption, "checkpoint: LUN " + std::to_string(l->id) + " not below the next LUN id " +
                                           std::to_string(st->next_lun_id));
    if (version >= 2) {
      if (!DecodeLunAttrs(&d, &l->attrs)) return bad;
      if (l->attrs.unknown_tag) return UnknownAttr(l->name, l->attrs.unknown_tag);
    }
    if (!d.U64(&next) || next > d.left() / 24) return bad;
    uint64_t prev_end = 0;
    for (uint64_t k = 0; k < next; k++) {
      uint64_t lba, phys, len;
      if (!d.U64(&lba) || !d.U64(&phys) || !d.U64(&len)) return bad;
      // ExtentMap's rule first: what passes it cannot wrap, and packs.
      std::string why = ExtentMap::OutOfRange(lba, phys, len);
      if (!why.empty())
        return Status(Code::kCorruption, "checkpoint: LUN " + l->name + " extent at AU " +
                                             std::to_string(lba) + " -> " + std::to_string(phys) +
                                             " +" + std::to_string(len) + ": " + why);
      if (lba < prev_end) return Status(Code::kCorruption, "checkpoint: overlapping extent");
      prev_end = lba + len;
      Status s = l->map.Insert(lba, phys, len);
      if (!s.ok()) return Status(Code::kCorruption, "checkpoint: " + s.message());
    }
    if (st->luns().count(l->id) || st->FindName(l->name))
      return Status(Code::kCorruption, "checkpoint: duplicate LUN");
    st->AddLun(std::move(l));
  }
  if (d.left() != 0) return bad;
  return Status::Ok();
}

}  // namespace cowstore::store
