// SPDX-License-Identifier: Apache-2.0
// Format v3's superblock (docs/design/store-v3.md 3.4, 3.6-3.8, plan step 5)
// and the choice between its two copies. FormatV3 (format_v3.h) writes and
// chooses with it when Core creates and opens a v3 pool; no upgrade from
// v1/v2 writes it yet (plan step 8).
//
// Each of the two 4 KiB slots at bytes 0 and 4096 holds one copy. Little-
// endian; a record of 448 bytes, then zeros to the end of the slot:
//   0   magic(8) "COWSTORE"      8   format version(4) = 3
//   12  incompat flags(4): bits this build does not know -> kUnsupported
//       (kIncompatKnown)
//   16  pool uuid(16)            32  superblock sequence(8)
//   40  AU bytes(4)              44  grain bytes(4)
//   48  data offset(8): byte of AU 0      56  pool size in AUs(8)
//   64  soft threshold %(4)      68  write unit bytes(4)   72  origin format(4)
//   76  journal extent count(4)
//   80  index root: page address(8)  88 its checkpoint sequence(8)
//   96  index root level(1): the root page's level (IndexRoot::level),
//       0 .. kIndexMaxLevel          97  zeros to 104
//   104 envelope crc32c(4) of bytes [0, 104)
//   108 crc32c(4) of the whole slot but these four bytes
//   112 LUN table root: page address(8)   120 its checkpoint sequence(8)
//   128 journal replay start: offset in the journal(8)   136 its LSN(8)
//   144 index root key range: first lun(4)  148 end lun(4)
//       152 first lba(8)  160 end lba(8)
//   168 zeros to 192
//   192 journal extents[32], 8 bytes each: first AU | (AUs - 1) << 48
//   448 zeros to 4096 (reserved; checked)
//
// Envelope. Bytes [0, 12) and the CRC at 104 are the layout every format
// from version 1 on shares: v1/v2 builds (Superblock::Decode) check magic and
// this CRC, then the version, so they refuse a v3 pool with kUnsupported
// "pool format version 3" instead of calling it corrupt (store-v3.md 3.7); a
// future format must keep the envelope so this build does the same. The
// second CRC covers everything else, the envelope CRC and the zero tail
// included, so any damage to the slot is seen.
//
// The record fits in 448 bytes, below 512, the smallest write unit 3.8's
// table lists (RBD): on every Env a torn slot write leaves either the old
// record or the new one, never a mix of fields.
//
// The index root fields are exactly ckpt_index.h's IndexRoot, the whole of
// what ReadIndex checks the root page against (pool aside): its address, its
// exact sequence, its level and its key range, so a stale root page (an
// older sequence at a reused address), a misdirected one (another page's
// bytes there: other level, range or sequence) and a root the superblock
// names with a wrong level or range are all refused. The level's bound is
// the index codec's kIndexMaxLevel: one constant.
//
// Addresses are byte offsets in the pool's file or device. Pages are 4 KiB
// (kLeafPageBytes) at 4 KiB-aligned addresses inside the data area
// [data_offset, data_offset + units * AU). kNoPage (~0) says "none", for the
// index only (kNoIndex: a pool whose LUNs map nothing, or without LUNs). The
// LUN table root is always a page: a pool without LUNs has a LUN table of no
// records (lun_table_page.h), which carries the next LUN id; "none" there
// could not, so the ids of deleted LUNs would be given out again, and "no
// LUNs" would have two spellings.
//
// The journal is a ring of `capacity()` bytes made of AU-sized segments, the
// concatenation of the extents (runs of consecutive AUs) in list order:
// journal offset x lies in the extent whose cumulative range holds it.
// Segments are listed here, at most kMaxJournalExtents runs, rather than
// chained through headers in the segments themselves, because:
//  * replay and issue 16's rule ("a CRC-valid record after the point where
//    replay stopped refuses the open") must reach every segment even when one
//    is damaged: a chain loses every segment after a damaged link, and with
//    them the very records that rule looks for. The list sits in both slots,
//    under two CRCs.
//  * segments change only when the journal grows, at a checkpoint, which
//    writes a superblock anyway: no extra write, no link rewritten in place.
//  * the bound costs nothing real: an extent holds up to 65,536 AUs (4 GiB
//    at 64 KiB AUs), so one extent already reaches the 1 GiB cap; 32 allow a
//    fragmented pool to grow the journal 31 times from scattered free runs.
//    When free space is too fragmented the journal simply stays smaller
//    (more frequent checkpoints), and since a checkpoint empties it, growth
//    may replace the whole list with fewer, longer runs.
//
// Upgrade state (3.7): `origin_format` (3: created as v3; 1 or 2: upgraded).
// An upgrade commits by its superblock write (into both slots before it
// reports success; the first durable one decides), so no "in progress"
// state is stored. Env traits (3.8): only `write_unit` is the format's (journal
// appends and page headers are laid out for it); discard_zeroes, ownership,
// can_truncate and sync are properties of where the pool sits now, declared
// by Env at each open, and a pool copied from a file to a block device must
// not carry the file's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "handler/store/ckpt_index.h"  // IndexRoot, IndexRootRule, kIndexMaxLevel, IndexPageExpect
#include "handler/store/meta.h"        // kSuperblockSlot, the shared envelope
#include "handler/store/names.h"       // Uuid, GrainRule, ValidAllocationUnit
#include "handler/store/status.h"

namespace cowstore::store {

constexpr uint32_t kFormatVersionV3 = 3;
constexpr size_t kSuperblockV3Record = 448;  // meaningful bytes; zeros after
constexpr size_t kSuperblockV3Seq = 32;           // the sequence, read raw by the chooser
constexpr size_t kSuperblockV3EnvelopeCrc = kSuperblockEnvelopeCrc;  // meta.h: every format's
constexpr size_t kSuperblockV3Crc = 108;          // crc32c of the slot but [108, 112)
constexpr size_t kSuperblockV3Extents = 192;      // where the journal extents start
constexpr uint32_t kMaxJournalExtents = 32;
constexpr uint64_t kMaxJournalExtentAus = uint64_t{1} << 16;
constexpr uint64_t kNoPage = ~uint64_t{0};
// The index root level is one byte on disk; its bound is the index codec's.
static_assert(kIndexMaxLevel <= 0xff);
// "No index": what a pool without LUNs records.
inline constexpr IndexRoot kNoIndex{IndexEntry{IndexKey{}, IndexKey{}, kNoPage, 0}, 0};
static_assert(kSuperblockV3Extents + kMaxJournalExtents * 8 == kSuperblockV3Record);
static_assert(kSuperblockV3Record <= 512, "a torn slot write must not mix two records");
// Incompat flags: a set bit says the pool holds something a build that does
// not know the bit must not open (it refuses with kUnsupported rather than
// misread it). Bit 0: the journal may hold kMapChecked records (meta.h),
// which a v3 build from before them reads as a tear, dropping the record
// and every acknowledged one after it. FormatV3::Create sets it (format 3
// always may write them); an upgrade to format 3 (plan step 8) must too.
constexpr uint32_t kIncompatCheckedMaps = 1u << 0;
constexpr uint32_t kIncompatKnown = kIncompatCheckedMaps;

struct JournalExtent {
  uint64_t first_au = 0;  // AU index in the data area
  uint64_t aus = 0;       // 1 .. kMaxJournalExtentAus
  bool operator==(const JournalExtent&) const = default;
};

// A page named by the superblock, and the exact checkpoint sequence that
// wrote it (the check ckpt_page.h makes: an older page left at a reused
// address must never be taken for the current one).
struct PageRef {
  uint64_t addr = kNoPage;  // byte offset, 4 KiB aligned, in the data area
  uint64_t seq = 0;         // 0 when addr == kNoPage
  bool operator==(const PageRef&) const = default;
};

struct SuperblockV3 {
  uint32_t incompat = 0;  // kIncompat* bits; any other set bit is kUnsupported
  Uuid uuid{};
  uint64_t seq = 0;       // higher wins; written to slot seq % 2 first
  uint32_t au = 0;        // allocation unit, bytes (ValidAllocationUnit)
  uint32_t grain = 0;     // sharing unit, bytes (GrainRule)
  uint64_t data_offset = 0;  // byte of AU 0: AU-aligned, past both slots
  uint64_t units = 0;        // pool size in AUs
  uint32_t soft_threshold_percent = 0;
  uint32_t write_unit = 4096;  // File::AtomicWriteBytes at creation (512..4096, power of two); only grows
  uint32_t origin_format = kFormatVersionV3;  // 1, 2 (upgraded) or 3
  // Root of the checkpoint index as BuildIndex gives it and ReadIndex takes
  // it. kNoIndex (address kNoPage, all else zero) when there is none.
  IndexRoot index = kNoIndex;
  PageRef lun_table;           // first page of the LUN table's chain: never kNoPage
  std::vector<JournalExtent> journal;  // 1 .. kMaxJournalExtents runs, in journal order
  uint64_t journal_start = 0;      // replay starts at this journal offset ...
  uint64_t journal_start_lsn = 1;  // ... with the record of this LSN

  uint64_t capacity() const;  // journal bytes: the extents' AUs times the AU
  uint64_t grains() const { return grain ? units * (au / grain) : 0; }
  bool operator==(const SuperblockV3&) const = default;
};

// Replaces *out with the slot's kSuperblockSlot (4096) bytes. kInvalidArgument
// (nothing written) for any value Decode would refuse with kCorruption, the
// device bound aside (the data area must still not overflow 64 bits), and
// for an incompat flag outside kIncompatKnown.
Status EncodeSuperblockV3(const SuperblockV3& sb, std::string* out);

// Decodes one slot, p[0..n) with n == kSuperblockSlot (else
// kInvalidArgument), for a pool on a file or device of `device_bytes`.
// kCorruption, its message naming the field, for: bad magic; an envelope or
// slot CRC mismatch; a non-zero reserved byte; an AU, grain, write unit,
// origin format or soft threshold out of its rule; an index root that
// IndexRootRule refuses, or "none" with a sequence, level or key range; a data
// area that starts inside the slots or off an AU boundary, holds fewer than
// 8 AUs, more than 2^48 grains or 2^62 bytes, or ends beyond device_bytes; a
// page address unaligned or outside the data area; "none" with a sequence;
// a page sequence 0 or after the superblock's; no journal extent, more
// than kMaxJournalExtents, an extent empty, too long, outside the data
// area or continuing the one before it (JournalExtentsJoin); a LUN table
// root of kNoPage; two regions overlapping (journal extents, the index root, the LUN
// table root); a journal outside 64 KiB .. 1 GiB; a replay start outside the
// journal or off a write-unit boundary (journal appends are laid out in
// write units); LSN 0 or past 2^62. kUnsupported for a
// format version other than 3 (v1/v2 superblocks are Superblock::Decode's:
// this codec does not route, SuperblockEnvelopeVersion and
// ChooseSuperblockV3 do) or an incompat flag outside kIncompatKnown. Decodes no field before both
// CRCs check (except the version, which the envelope CRC covers), allocates
// only after the extent count is bounded, and leaves *out unchanged unless it
// succeeds.
Status DecodeSuperblockV3(const void* p, size_t n, uint64_t device_bytes, SuperblockV3* out);

// Whether `b`, listed right after `a`, is one extent with it: b starts
// where a ends and the two fit one extent. A list never holds such a pair
// (JournalExtentsRule): [A, +n)[A + n, +m) is the journal [A, +n + m), one
// ring spelled two ways. The writer (GrowJournal) lengthens the last extent
// instead. Under the 1 GiB cap two extents always fit one (2^14 AUs of
// 64 KiB at most, an extent holds 2^16), so every list has one spelling.
// Extents next to each other on the device in the other order (b before a)
// are another ring, and allowed.
inline bool JournalExtentsJoin(const JournalExtent& a, const JournalExtent& b) {
  return a.first_au + a.aus == b.first_au && a.aus + b.aus <= kMaxJournalExtentAus;
}

// The rule for a journal's extent list, written once for the superblock's
// codec and the ring's layout (journal_segments.h): 1 .. kMaxJournalExtents
// extents of 1 .. kMaxJournalExtentAus AUs each, inside the pool's `units`
// AUs, none overlapping another, none joining the one before it
// (JournalExtentsJoin), kMinJournalBytes .. kMaxJournalBytes in all at `au`
// bytes an AU (which the caller has checked). "" if it holds, else the
// first fault, naming the extent.
std::string JournalExtentsRule(const std::vector<JournalExtent>& extents, uint64_t units, uint32_t au);

// Why a format 3 pool may not have `units` AUs of `au` bytes shared at
// `grain` ("" if it may): at least 8 AUs (kMinPoolUnits, as v2), at most
// 2^48 grains (RunTree's physical grain) and 2^62 bytes (so offsets in the
// data area never wrap). No 2^32-AU cap: v2's PoolUnitsRule bounds the AU
// space map's RAM, which format 3's grain space (grain_space.h) does not
// have. The codec refuses a superblock that breaks it, and FormatV3::Create
// a pool. `au` and `grain` must already pass their rules.
std::string PoolUnitsRuleV3(uint64_t units, uint32_t au, uint32_t grain);

// What ReadIndex needs beside sb.index: the pool and the address bound (the
// data area). ReadIndex(sb.index, IndexReadBound(sb), ...) reads the index a
// decoded superblock names, unless sb.index == kNoIndex: then there is no
// index and no leaf, and ReadIndex (which refuses kNoIndex's sequence 0) is
// not called. kNoIndex is the one spelling of an empty index (ckpt_tree.h
// says why): BuildIndex refuses no leaves, and IndexRootRule, so this codec
// and ReadIndex, refuses an empty root.
IndexPageExpect IndexReadBound(const SuperblockV3& sb);

// The format version of a slot, read through the envelope every format
// shares: 0 unless the magic and the envelope CRC check.
uint32_t SuperblockEnvelopeVersion(const void* p, size_t n);

// Which copy an open of a v3 pool uses, and what the other slot holds.
struct SuperblockChoice {
  SuperblockV3 sb;
  int slot = -1;        // the slot it was read from (0 when both hold it)
  bool redundant = false;  // both slots hold it, byte for byte
  // When not redundant: the slot that open must rewrite with `sb` before its
  // first write, and what that slot holds now (for messages: "damaged: ...",
  // "stale: sequence N", "format 2, sequence N").
  int other = -1;
  std::string other_state;
};

// Chooses between the two slots s0, s1 (each kSuperblockSlot bytes). The
// rule, for the writer rule below:
//  * a slot whose envelope is CRC-valid with a version above 3 refuses the
//    open (kUnsupported): an older copy beside a newer format is never opened.
//  * two valid copies of different pool UUIDs are refused (kCorruption).
//  * the newest valid v3 copy wins. Two v3 copies with one sequence must be
//    equal, byte for byte (else kCorruption: two writers, or a misdirected
//    write).
//  * the fallback rule. A damaged slot (a CRC fails: a torn or lost write,
//    media damage) does not stop the open when the other slot is valid: the
//    choice is marked not redundant, names the damaged slot and why, and
//    open rewrites it. A slot that passes both CRCs but is refused by a
//    field check is not a torn write: a writer wrote it whole (a bug, a
//    misdirected write). Unless the other slot holds a valid copy with a
//    strictly higher sequence, it refuses the open (kCorruption naming the
//    slot, its sequence, read raw, and the field): falling back to an older
//    copy would silently roll back acknowledged state. Beside a newer valid
//    copy it is named and rewritten as a damaged slot is.
//  * beside a v1/v2 copy, a v3 copy wins if its sequence is higher (an
//    upgrade writes sequence + 1 and was cut before its second slot) and
//    both describe one pool: UUID, AU, data offset and size in AUs equal (an
//    upgrade moves nothing, 3.7), else kCorruption. A v1/v2 copy with a
//    sequence as high is refused (kCorruption): both formats wrote after
//    each other, which no crash explains.
//  * no valid v3 copy: kUnsupported "format N" when a v1/v2 copy is valid
//    (the v1/v2 open reads it) and the other slot is not a format 3 slot;
//    a refused format 3 slot (its envelope says 3) beside a v1/v2 copy is
//    kCorruption, since the v1/v2 open refuses any format 3 slot (which it
//    does not serve) or newer (ChooseMetaFormat, meta_format.cc); no valid
//    copy at all is kCorruption naming both slots'
//    faults.
//  * the medium's size (`device_bytes`) is held against the chosen copy
//    only, after the choice: a pool beyond it is kCorruption saying the
//    medium was made smaller (or the superblock is damaged) and the size
//    the pool needs. A medium cut short leaves both copies beyond it, so
//    this is no reason to choose the other copy.
// Writer rule (superblock_slots.h, for formats 2 and 3): a
// superblock goes to slot seq % 2, sync, then to the other slot, sync, before
// any operation after it is acknowledged and before anything the previous
// superblock names (pages, journal space) is reused; open rewrites a slot not
// holding its choice before its first write. So a lone valid copy is either
// the newest or the predecessor of a write that never completed, whose
// pages and journal are intact. Only a double fault (the second slot's write
// silently lost, then the first slot damaged) leaves an older copy whose
// pages may have been reused; ckpt_page.h refuses such pages by their exact
// sequence, and the caller adds other_state to that message. Tested by
// DoubleFault.AnOlderSuperblockLeftAloneIsRefusedOrReadsExactlyItsOwnState
// (pool_test.cc): an old copy put back alone after 1-13 later checkpoints is
// refused, or reads its own state or the newest (the journal after it
// intact), in every case it builds; no test can build every case.
Status ChooseSuperblockV3(const void* s0, const void* s1, uint64_t device_bytes,
                          SuperblockChoice* out);

}  // namespace cowstore::store
