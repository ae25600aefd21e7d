// SPDX-License-Identifier: Apache-2.0
#include "handler/store/superblock_v3.h"

#include <cstring>
#include <utility>

#include "handler/store/ckpt_page.h"  // kLeafPageBytes: the page size
#include "handler/store/crc32c.h"
#include "handler/store/meta.h"  // Encoder, Decoder, kSuperblockSlot, journal bounds, Superblock

namespace cowstore::store {
namespace {

constexpr uint64_t kMaxGrains = uint64_t{1} << 48;  // RunTree's 48-bit physical grain
constexpr uint64_t kMaxAreaBytes = uint64_t{1} << 62;  // so offsets in it never wrap
constexpr uint64_t kMaxLsn = ~uint64_t{0} >> 2;     // v2's bound
constexpr uint64_t kAuMask = (uint64_t{1} << 48) - 1;
// The reserved gaps of the layout (superblock_v3.h): [97, 104) after the
// index root level, [168, 192) after the index root's key range.
constexpr size_t kZeros1 = 97, kZeros2 = 168;
static_assert(kSuperblockSlot == 4096);

uint32_t EnvelopeCrc(const uint8_t* b) { return Crc32c(0, b, kSuperblockV3EnvelopeCrc); }
uint32_t SlotCrc(const uint8_t* b) { return Crc32cAroundField(b, kSuperblockSlot, kSuperblockV3Crc); }
uint32_t Le32(const uint8_t* b) {
  uint32_t v = 0;
  Decoder(b, 4).U32(&v);
  return v;
}

std::string N(uint64_t v) { return std::to_string(v); }
std::string ExtentName(size_t i, const JournalExtent& x) {
  return "journal extent " + N(i) + " (AUs [" + N(x.first_au) + ", +" + N(x.aus) + "))";
}

// The pool's area, as the superblock says it, inside a medium of
// `device_bytes`. REQUIRES: units and AU already checked (their product is
// at most 2^62).
bool InsideDevice(const SuperblockV3& sb, uint64_t device_bytes) {
  const uint64_t area = sb.units * sb.au;
  return sb.data_offset <= device_bytes && area <= device_bytes - sb.data_offset;
}

// The byte after the pool's area. REQUIRES: InsideDevice for some size (so
// the sum cannot overflow).
uint64_t DataAreaEnd(const SuperblockV3& sb) { return sb.data_offset + sb.units * sb.au; }

// The rules a superblock obeys, written once for both sides: the encoder
// refuses with kInvalidArgument, the decoder with kCorruption. The encoder
// knows no device, so it passes ~0 as device_bytes.
Status Check(Code code, const SuperblockV3& sb, uint64_t device_bytes) {
  auto bad = [code](const std::string& what) { return Status(code, "superblock v3: " + what); };
  if (!ValidAllocationUnit(sb.au))
    return bad("AU of " + N(sb.au) + " bytes is not " + std::string(kAllocationUnitRule));
  if (std::string why = GrainRule(sb.grain, sb.au); !why.empty()) return bad(why);
  if (sb.write_unit < 512 || sb.write_unit > 4096 || (sb.write_unit & (sb.write_unit - 1)))
    return bad("write unit of " + N(sb.write_unit) + " bytes is not a power of two from 512 to 4096");
  if (sb.origin_format < 1 || sb.origin_format > kFormatVersionV3)
    return bad("origin format " + N(sb.origin_format) + " is not 1, 2 or 3");
  if (sb.soft_threshold_percent > 100)
    return bad("soft threshold " + N(sb.soft_threshold_percent) + " % is above 100");

  // The data area: after both slots, AU-aligned, 8 AUs at least (as v2),
  // at most 2^48 grains, inside the device. Every product below is bounded
  // before it is formed.
  if (sb.data_offset < 2 * kSuperblockSlot || sb.data_offset % sb.au)
    return bad("data offset " + N(sb.data_offset) + " is inside the superblock slots or not a multiple of the AU");
  if (std::string why = PoolUnitsRuleV3(sb.units, sb.au, sb.grain); !why.empty()) return bad(why);
  if (!InsideDevice(sb, device_bytes))
    return bad("pool size of " + N(sb.units) + " AUs from byte " + N(sb.data_offset) +
               " ends beyond the device's " + N(device_bytes) + " bytes");
  const uint64_t end = DataAreaEnd(sb);

  auto page = [&](const char* name, const PageRef& r) -> Status {
    if (r.addr == kNoPage) {
      if (r.seq != 0) return bad(std::string(name) + " is none but has sequence " + N(r.seq));
      return Status::Ok();
    }
    if (r.addr % kLeafPageBytes || r.addr < sb.data_offset || r.addr >= end ||
        end - r.addr < kLeafPageBytes)
      return bad(std::string(name) + " page address " + N(r.addr) +
                 " is not a 4 KiB page inside the data area [" + N(sb.data_offset) + ", " + N(end) + ")");
    if (r.seq == 0 || r.seq > sb.seq)
      return bad(std::string(name) + " sequence " + N(r.seq) + " is not in 1 .. the superblock's " + N(sb.seq));
    return Status::Ok();
  };
  const PageRef index_page{sb.index.entry.addr, sb.index.entry.seq};
  if (Status s = page("index root", index_page); !s.ok()) return s;
  if (index_page.addr == kNoPage) {
    if (sb.index != kNoIndex)
      return bad("index root is none but has level " + N(sb.index.level) + " or a key range");
  } else if (std::string why = IndexRootRule(sb.index); !why.empty()) {
    return bad("index " + why);
  }
  // "No LUNs" has one spelling: a LUN table of no records, which still
  // carries the next LUN id (kNoPage could not: the ids of deleted LUNs would
  // be given out again).
  if (sb.lun_table.addr == kNoPage)
    return bad("LUN table root is none: a v3 superblock always names its LUN table "
               "(a pool without LUNs has a table of no records)");
  if (Status s = page("LUN table root", sb.lun_table); !s.ok()) return s;
  if (index_page.addr != kNoPage && index_page.addr == sb.lun_table.addr)
    return bad("index root and LUN table root overlap at byte " + N(index_page.addr));

  if (std::string why = JournalExtentsRule(sb.journal, sb.units, sb.au); !why.empty()) return bad(why);
  for (size_t i = 0; i < sb.journal.size(); i++) {
    const JournalExtent& x = sb.journal[i];
    for (const auto& [what, r] : {std::pair{"index root", index_page}, std::pair{"LUN table root", sb.lun_table}}) {
      if (r.addr == kNoPage) continue;  // no index
      const uint64_t au = (r.addr - sb.data_offset) / sb.au;
      if (au >= x.first_au && au - x.first_au < x.aus)
        return bad(ExtentName(i, x) + " overlaps the " + std::string(what) + " page at byte " + N(r.addr));
    }
  }
  const uint64_t capacity = sb.capacity();
  // Journal appends are laid out in the pool's write units (3.8), so a
  // record, and replay's start, begins on one.
  if (sb.journal_start >= capacity || sb.journal_start % sb.write_unit)
    return bad("journal replay start " + N(sb.journal_start) + " is not a " + N(sb.write_unit) +
               "-byte write-unit boundary inside the " + N(capacity) + "-byte journal");
  if (sb.journal_start_lsn == 0 || sb.journal_start_lsn > kMaxLsn)
    return bad("journal start LSN " + N(sb.journal_start_lsn) + " is not 1 .. 2^62 - 1");
  return Status::Ok();
}

}  // namespace

std::string JournalExtentsRule(const std::vector<JournalExtent>& extents, uint64_t units, uint32_t au) {
  if (extents.empty() || extents.size() > kMaxJournalExtents)
    return "journal extent count " + N(extents.size()) + " is not 1 .. " + N(kMaxJournalExtents);
  uint64_t aus = 0;
  for (size_t i = 0; i < extents.size(); i++) {
    const JournalExtent& x = extents[i];
    if (x.aus == 0 || x.aus > kMaxJournalExtentAus)
      return ExtentName(i, x) + " is not 1 .. " + N(kMaxJournalExtentAus) + " AUs long";
    if (x.first_au >= units || x.aus > units - x.first_au)
      return ExtentName(i, x) + " ends beyond the pool's " + N(units) + " AUs";
    for (size_t j = 0; j < i; j++) {
      const JournalExtent& y = extents[j];
      if (x.first_au < y.first_au + y.aus && y.first_au < x.first_au + x.aus)
        return ExtentName(i, x) + " overlaps journal extent " + N(j);
    }
    if (i > 0 && JournalExtentsJoin(extents[i - 1], x))
      return ExtentName(i, x) + " continues journal extent " + N(i - 1) + ": one extent spells the two";
    aus += x.aus;  // <= 32 * 2^16
  }
  const uint64_t capacity = aus * au;
  if (capacity < kMinJournalBytes || capacity > kMaxJournalBytes)
    return "journal of " + N(capacity) + " bytes is not 64 KiB .. 1 GiB";
  return "";
}

std::string PoolUnitsRuleV3(uint64_t units, uint32_t au, uint32_t grain) {
  if (units < kMinPoolUnits) return "pool size of " + N(units) + " AUs is below " + N(kMinPoolUnits);
  if (units > kMaxGrains / (au / grain) || units > kMaxAreaBytes / au)
    return "pool size of " + N(units) + " AUs passes 2^48 grains or 2^62 bytes";
  return "";
}

IndexPageExpect IndexReadBound(const SuperblockV3& sb) {
  IndexPageExpect b;
  b.pool = sb.uuid;
  b.addr_begin = sb.data_offset;
  b.addr_end = sb.data_offset + sb.units * sb.au;  // a decoded superblock's area: no overflow (Check)
  return b;
}

uint64_t SuperblockV3::capacity() const {
  uint64_t n = 0;
  for (const JournalExtent& x : journal) n += x.aus;
  return n * au;
}

Status EncodeSuperblockV3(const SuperblockV3& sb, std::string* out) {
  if (sb.incompat & ~kIncompatKnown)
    return Status(Code::kInvalidArgument,
                  "superblock v3: incompat flags " + N(sb.incompat & ~kIncompatKnown) + " are not defined");
  if (Status s = Check(Code::kInvalidArgument, sb, ~uint64_t{0}); !s.ok()) return s;
  std::string s;
  s.reserve(kSuperblockSlot);
  Encoder e(&s);
  e.Bytes(kSuperblockMagic, sizeof kSuperblockMagic);
  e.U32(kFormatVersionV3);
  e.U32(sb.incompat);
  e.Bytes(sb.uuid.data(), sb.uuid.size());
  e.U64(sb.seq);
  e.U32(sb.au);
  e.U32(sb.grain);
  e.U64(sb.data_offset);
  e.U64(sb.units);
  e.U32(sb.soft_threshold_percent);
  e.U32(sb.write_unit);
  e.U32(sb.origin_format);
  e.U32(static_cast<uint32_t>(sb.journal.size()));
  e.U64(sb.index.entry.addr);
  e.U64(sb.index.entry.seq);
  e.U8(static_cast<uint8_t>(sb.index.level));  // <= kIndexMaxLevel: Check
  s.resize(kSuperblockV3EnvelopeCrc, '\0');
  e.U32(0);  // both CRCs, set below
  e.U32(0);
  e.U64(sb.lun_table.addr);
  e.U64(sb.lun_table.seq);
  e.U64(sb.journal_start);
  e.U64(sb.journal_start_lsn);
  e.U32(sb.index.entry.first.lun);
  e.U32(sb.index.entry.end.lun);
  e.U64(sb.index.entry.first.lba);
  e.U64(sb.index.entry.end.lba);
  s.resize(kSuperblockV3Extents, '\0');
  for (const JournalExtent& x : sb.journal) e.U64(x.first_au | (x.aus - 1) << 48);
  s.resize(kSuperblockSlot, '\0');
  auto put = [&s](size_t off, uint32_t v) {
    std::string b;
    Encoder(&b).U32(v);
    s.replace(off, 4, b);
  };
  const auto* b = reinterpret_cast<const uint8_t*>(s.data());
  put(kSuperblockV3EnvelopeCrc, EnvelopeCrc(b));  // first: the slot CRC covers it
  put(kSuperblockV3Crc, SlotCrc(b));
  *out = std::move(s);
  return Status::Ok();
}

uint32_t SuperblockEnvelopeVersion(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (n < kSuperblockV3EnvelopeCrc + 4 || std::memcmp(b, kSuperblockMagic, sizeof kSuperblockMagic) != 0) return 0;
  if (Le32(b + kSuperblockV3EnvelopeCrc) != EnvelopeCrc(b)) return 0;
  return Le32(b + 8);
}

Status DecodeSuperblockV3(const void* p, size_t n, uint64_t device_bytes, SuperblockV3* out) {
  if (n != kSuperblockSlot)
    return Status(Code::kInvalidArgument, "a superblock slot is " + N(kSuperblockSlot) + " bytes, not " + N(n));
  const auto* b = static_cast<const uint8_t*>(p);
  auto corrupt = [](const std::string& what) { return Status(Code::kCorruption, "superblock v3: " + what); };
  if (std::memcmp(b, kSuperblockMagic, sizeof kSuperblockMagic) != 0) return corrupt("bad magic (no cowstore superblock)");
  if (Le32(b + kSuperblockV3EnvelopeCrc) != EnvelopeCrc(b)) return corrupt("envelope CRC mismatch");
  // The envelope CRC covers the version: it is what a writer wrote.
  const uint32_t version = Le32(b + 8);
  if (version != kFormatVersionV3)
    return Status(Code::kUnsupported,
                  "pool format version " + N(version) +
                      (version < kFormatVersionV3 ? " is read by the v1/v2 superblock codec, not format 3's"
                                                  : " (this build reads up to 3)"));
  if (Le32(b + kSuperblockV3Crc) != SlotCrc(b)) return corrupt("CRC mismatch");

  SuperblockV3 sb;
  Decoder d(b + 12, kSuperblockSlot - 12);
  uint32_t extents = 0;
  uint8_t index_level = 0;
  IndexEntry& root = sb.index.entry;
  bool ok = d.U32(&sb.incompat) && d.Bytes(sb.uuid.data(), sb.uuid.size()) && d.U64(&sb.seq) &&
            d.U32(&sb.au) && d.U32(&sb.grain) && d.U64(&sb.data_offset) && d.U64(&sb.units) &&
            d.U32(&sb.soft_threshold_percent) && d.U32(&sb.write_unit) && d.U32(&sb.origin_format) &&
            d.U32(&extents) && d.U64(&root.addr) && d.U64(&root.seq) && d.U8(&index_level) &&
            d.Skip(kSuperblockV3Crc + 4 - kZeros1) && d.U64(&sb.lun_table.addr) &&
            d.U64(&sb.lun_table.seq) && d.U64(&sb.journal_start) && d.U64(&sb.journal_start_lsn) &&
            d.U32(&root.first.lun) && d.U32(&root.end.lun) && d.U64(&root.first.lba) && d.U64(&root.end.lba);
  if (!ok) return corrupt("truncated");  // cannot happen: n is a whole slot
  sb.index.level = index_level;
  if (sb.incompat & ~kIncompatKnown)
    return Status(Code::kUnsupported, "superblock v3: incompat flags " + N(sb.incompat & ~kIncompatKnown) +
                                          " this build does not know");
  if (extents == 0 || extents > kMaxJournalExtents)
    return corrupt("journal extent count " + N(extents) + " is not 1 .. " + N(kMaxJournalExtents));
  // Reserved bytes: between the fields, and after the extents in use.
  const size_t used_end = kSuperblockV3Extents + size_t{extents} * 8;
  for (size_t off = 0; off < kSuperblockSlot; off++) {
    const bool reserved = (off >= kZeros1 && off < kSuperblockV3EnvelopeCrc) ||
                          (off >= kZeros2 && off < kSuperblockV3Extents) || off >= used_end;
    if (reserved && b[off] != 0) return corrupt("reserved byte " + N(off) + " is not zero");
  }
  sb.journal.reserve(extents);  // <= kMaxJournalExtents: checked above
  Decoder x(b + kSuperblockV3Extents, size_t{extents} * 8);
  for (uint32_t i = 0; i < extents; i++) {
    uint64_t v = 0;
    x.U64(&v);
    sb.journal.push_back({v & kAuMask, (v >> 48) + 1});
  }
  if (Status s = Check(Code::kCorruption, sb, device_bytes); !s.ok()) return s;
  *out = std::move(sb);
  return Status::Ok();
}

namespace {

// The choice between the slots, by their own bytes (no medium's size).
Status ChooseBySlots(const void* s0, const void* s1, SuperblockChoice* out) {
  constexpr uint64_t device_bytes = ~uint64_t{0};
  const void* slots[2] = {s0, s1};
  SuperblockV3 v3[2];
  Status st[2];       // slot i as a v3 copy
  Superblock old[2];  // slot i as a v1/v2 copy, when its envelope says 1 or 2
  bool is_old[2] = {false, false};
  bool v3_envelope[2] = {false, false};  // a format 3 writer's slot, valid or not
  // Slot i passes both CRCs but a field check refuses it: sealed_seq[i] is
  // its sequence (read raw: nothing else of it is trusted).
  bool sealed_refused[2] = {false, false};
  uint64_t sealed_seq[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    const auto* b = static_cast<const uint8_t*>(slots[i]);
    const uint32_t version = SuperblockEnvelopeVersion(b, kSuperblockSlot);
    if (version > kFormatVersionV3)
      return Status(Code::kUnsupported, "superblock slot " + N(i) + " holds pool format version " + N(version) +
                                            " (this build reads up to 3)");
    if (version == 0 || version == kFormatVersionV3) {
      v3_envelope[i] = version == kFormatVersionV3;
      st[i] = DecodeSuperblockV3(b, kSuperblockSlot, device_bytes, &v3[i]);
      // CRC-valid with incompat flags this build does not know: a newer build
      // wrote it, exactly like a newer version. Not damage: falling back to
      // the other copy would open an older state, and refusing both as
      // corrupt would invite a repair of a healthy pool.
      if (st[i].code() == Code::kUnsupported)
        return Status(Code::kUnsupported, "superblock slot " + N(i) + ": " + st[i].message());
      if (!st[i].ok() && v3_envelope[i] && Le32(b + kSuperblockV3Crc) == SlotCrc(b)) {
        sealed_refused[i] = true;
        Decoder(b + kSuperblockV3Seq, 8).U64(&sealed_seq[i]);
      }
    } else {
      st[i] = Superblock::Decode(b, kSuperblockSlot, &old[i]);
      is_old[i] = st[i].ok();
      if (is_old[i]) st[i] = Status(Code::kUnsupported, "format " + N(old[i].version));
    }
  }
  const bool valid[2] = {st[0].ok(), st[1].ok()};
  // The fallback rule: a copy that fails its CRCs is a torn or damaged write
  // and the other copy stands in for it; a copy that passes both CRCs but
  // fails a field check was written whole by a writer (a bug, a misdirected
  // write): if it is the newest, falling back would silently roll back
  // acknowledged state, so it refuses the open. It stands aside only for a
  // valid copy with a strictly higher sequence.
  for (int i = 0; i < 2; i++) {
    if (!sealed_refused[i]) continue;
    const int o = 1 - i;
    const bool other_newer = (valid[o] && v3[o].seq > sealed_seq[i]) || (is_old[o] && old[o].seq > sealed_seq[i]);
    if (other_newer) continue;
    const std::string other = valid[o] ? "the older copy in slot " + N(o) + " (sequence " + N(v3[o].seq) + ")"
                              : is_old[o] ? "the older format " + N(old[o].version) + " copy in slot " + N(o) +
                                                " (sequence " + N(old[o].seq) + ")"
                                          : "slot " + N(o) + " (" + st[o].message() + ")";
    return Status(Code::kCorruption, "superblock slot " + N(i) + " (sequence " + N(sealed_seq[i]) +
                                         ") passes its CRCs but is refused: " + st[i].message() +
                                         "; not a torn write, so " + other +
                                         " is not opened in its place (it would roll back acknowledged state)");
  }
  SuperblockChoice c;
  auto foreign = [](int a, const Uuid& ua, const Uuid& ub) {
    return Status(Code::kCorruption, "superblock slots hold two pools: slot " + N(a) + " " + UuidText(ua) +
                                         ", slot " + N(1 - a) + " " + UuidText(ub) + " (a misdirected write)");
  };
  if (valid[0] && valid[1]) {
    if (v3[0].uuid != v3[1].uuid) return foreign(0, v3[0].uuid, v3[1].uuid);
    if (v3[0].seq == v3[1].seq) {
      if (std::memcmp(s0, s1, kSuperblockSlot) != 0)
        return Status(Code::kCorruption, "superblock slots 0 and 1 both hold sequence " + N(v3[0].seq) +
                                             " but differ: two writers, or a misdirected write");
      c.slot = 0;
      c.redundant = true;
      c.sb = std::move(v3[0]);
    } else {
      const int w = v3[1].seq > v3[0].seq ? 1 : 0;
      c.slot = w;
      c.other = 1 - w;
      c.other_state = "stale: sequence " + N(v3[1 - w].seq);
      c.sb = std::move(v3[w]);
    }
    *out = std::move(c);
    return Status::Ok();
  }
  if (valid[0] || valid[1]) {
    const int w = valid[0] ? 0 : 1, o = 1 - w;
    if (is_old[o]) {
      const Superblock& v2 = old[o];
      const SuperblockV3& x = v3[w];
      if (v2.uuid != x.uuid) return foreign(w, x.uuid, v2.uuid);
      // Only an upgrade of this very copy's format leaves a v3 copy beside it.
      if (x.origin_format != v2.version)
        return Status(Code::kCorruption,
                      "superblock slot " + N(o) + " holds format " + N(v2.version) + " but the format 3 copy in slot " +
                          N(w) + " says it was " +
                          (x.origin_format == kFormatVersionV3 ? std::string("created as format 3")
                                                               : "upgraded from format " + N(x.origin_format)) +
                          ": not one pool's copies");
      // An upgrade keeps the pool where it is (store-v3.md 3.7: no data
      // moves): same AU, data offset and size. Anything else is not the
      // same pool's two copies, whatever the UUID says.
      if (v2.au != x.au || v2.data_offset != x.data_offset || v2.total_units() != x.units)
        return Status(Code::kCorruption,
                      "superblock slot " + N(o) + " holds format " + N(v2.version) + " of AU " + N(v2.au) +
                          ", data offset " + N(v2.data_offset) + ", " + N(v2.total_units()) +
                          " AUs; the format 3 copy in slot " + N(w) + " has AU " + N(x.au) + ", data offset " +
                          N(x.data_offset) + ", " + N(x.units) +
                          " AUs: an upgrade moves nothing, so these are not one pool's copies");
      if (v2.seq >= x.seq)
        return Status(Code::kCorruption,
                      "superblock slot " + N(o) + " holds format " + N(v2.version) + " sequence " +
                          N(v2.seq) + ", not older than the format 3 copy in slot " + N(w) +
                          " (sequence " + N(x.seq) + "): no crash leaves that, so neither copy is trusted");
      c.other_state = "format " + N(v2.version) + ", sequence " + N(v2.seq) +
                      " (an upgrade cut before its second write)";
    } else {
      c.other_state = "damaged: " + st[o].message();
    }
    c.slot = w;
    c.other = o;
    c.sb = std::move(v3[w]);
    *out = std::move(c);
    return Status::Ok();
  }
  for (int i = 0; i < 2; i++) {
    if (!is_old[i]) continue;
    // A format 3 writer's slot beside it (its envelope says 3, the rest is
    // refused): an upgrade cut between its two slot writes, then damaged.
    // The v1/v2 open refuses any format 3 slot or newer (ChooseMetaFormat,
    // meta_format.cc), so neither open takes the pool.
    if (v3_envelope[1 - i])
      return Status(Code::kCorruption, "superblock slot " + N(1 - i) + " holds a format 3 copy that is refused (" +
                                           st[1 - i].message() + ") beside format " + N(old[i].version) +
                                           " sequence " + N(old[i].seq) + " in slot " + N(i) +
                                           ": neither the v3 nor the v1/v2 open takes the pool");
    return Status(Code::kUnsupported, "pool format version " + N(old[i].version) + " (slot " + N(i) +
                                          "): not a format 3 pool; the v1/v2 open reads it");
  }
  return Status(Code::kCorruption, "no valid superblock: slot 0: " + st[0].message() + "; slot 1: " + st[1].message());
}

}  // namespace

// The medium's size is judged after the choice, not in it: a medium made
// smaller (a file cut, a volume shrunk) leaves both copies beyond it, and
// the fallback rule's message (a copy refused, the other not opened in its
// place) would hide that. The answer names the size the pool needs.
Status ChooseSuperblockV3(const void* s0, const void* s1, uint64_t device_bytes, SuperblockChoice* out) {
  SuperblockChoice c;
  if (Status s = ChooseBySlots(s0, s1, &c); !s.ok()) return s;
  if (!InsideDevice(c.sb, device_bytes)) {
    const uint64_t end = DataAreaEnd(c.sb);  // inside ~0 bytes (ChooseBySlots)
    return Status(Code::kCorruption,
                  "the pool ends at byte " + N(end) + " (superblock slot " + N(c.slot) + ", sequence " +
                      N(c.sb.seq) + ") but its device or file holds " + N(device_bytes) +
                      " bytes: it was made smaller (a file cut or copied short, a volume shrunk), or the "
                      "superblock is damaged. Nothing was changed; give it back at least " +
                      N(end) + " bytes and open the pool again");
  }
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace cowstore::store
