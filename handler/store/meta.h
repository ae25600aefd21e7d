// SPDX-License-Identifier: Apache-2.0
// The store's metadata, its on-disk encodings and the one function that
// changes it.
//
// On disk, formats 1 and 2 (see docs/design/store.md; format 3's layout is
// format_v3.h's):
//   [0, 4K)      superblock copy 0      [4K, 8K)  superblock copy 1
//   [64K, 64K+J) journal: records {crc32c, len, lsn, proven, type, payload}
//                (format 1: without proven; FrameRecord, ParseRecordV1)
//   [data_offset + i*AU) allocation unit i (data, or a checkpoint chunk)
//
// ApplyRecord is used both at run time and by journal replay, so replay
// reproduces exactly what the running pool did.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "handler/store/dirty_ranges.h"
#include "handler/store/extent_map.h"
#include "handler/store/names.h"  // kMaxNameLength, ValidStoredName, kSuperblockSlot
#include "handler/store/pool.h"
#include "handler/store/range_lock.h"
#include "handler/store/read_ahead.h"
#include "handler/store/status.h"

namespace cowstore::store {

// The format this build writes. Version 2 added the `proven` LSN to every
// journal record (see FrameRecord) and an attribute tail to each LUN of a
// checkpoint (EncodeState). Version 1 pools are read as they are and become
// version 2 at their first checkpoint, which a writable open always writes:
// the superblock that names the version-2 checkpoint and journal is the
// only one that says version 2 (docs/design/store.md, "Format versions").
constexpr uint32_t kFormatVersion = 2;
constexpr uint32_t kOldestFormatVersion = 1;
// The envelope every superblock format shares (superblock_v3.h): the magic
// at 0, the format version at 8, and a CRC32C of [0, kSuperblockEnvelopeCrc)
// stored at kSuperblockEnvelopeCrc. v1/v2 superblocks end their fields there,
// so any build can read any format's version and refuse a newer one.
inline constexpr char kSuperblockMagic[8] = {'C', 'O', 'W', 'S', 'T', 'O', 'R', 'E'};
constexpr size_t kSuperblockEnvelopeCrc = 104;
constexpr uint64_t kJournalOffset = 64 * 1024;
constexpr uint64_t kDefaultJournalBytes = 16ull << 20;
constexpr uint64_t kMinJournalBytes = 64 * 1024;
constexpr uint64_t kMaxJournalBytes = 1ull << 30;
// The most AUs a pool may have: its in-memory index costs 5 bytes per AU, so
// this (4 Gi AUs, 4 PiB at 1 MiB) already needs 20 GiB of RAM.
constexpr uint64_t kMaxPoolUnits = 1ull << 32;
// The fewest AUs a pool may have.
constexpr uint64_t kMinPoolUnits = 8;
// Formats 1 and 2 put the data area at the first AU boundary past the
// journal; Create lays it out so and Decode refuses any other.
constexpr uint64_t DataOffsetV2(uint32_t au, uint64_t journal_bytes) {
  return (kJournalOffset + journal_bytes + au - 1) / au * au;
}
// Why a pool may not have `units` AUs ("" if it may): Create and Grow refuse
// with it, Decode refuses a superblock that breaks it.
std::string PoolUnitsRule(uint64_t units);
// Why a journal of `bytes` may not be asked for ("" if it may): 64 KiB to
// 1 GiB, 4 KiB aligned. Core::Create and FormatV3::Create refuse with it
// (format 3 then rounds it up to whole AUs: its journal is AU segments).
std::string JournalBytesRule(uint64_t bytes);
// The most blocks a LUN may have: format 3's maps key LBAs in 48 bits
// (RunTree, the checkpoint's leaves). CreateLun and ResizeLun refuse more
// and the LUN table page codec refuses a record with more; formats 1 and 2
// do not (a v1/v2 pool of 128 TiB or more may hold such a LUN: an older
// build made it).
constexpr uint64_t kMaxLunBlocks = uint64_t{1} << 48;
// Why a LUN of `size` bytes in blocks of `bs` (a valid block size) breaks
// kMaxLunBlocks ("" if it does not): the one comparison, for the API and
// the LUN table page codec.
std::string LunBlocksRule(uint64_t size, uint32_t bs);
// Why a LUN may not have this id, name, size (bytes) and block size ("" if
// it may): id neither 0 nor UINT32_MAX (next_lun_id is the highest id plus
// one and never 0), a name ValidStoredName accepts, a valid block size, a
// size a positive multiple of it. What every build let into a pool, so every
// loader and codec refuses (kCorruption) what breaks it: ApplyRecord for the
// records that make or resize a LUN, DecodeState, recovery's geometry check
// and the LUN table page codec. The Pool API refuses all of it first (ids:
// CreateLun and CopyLun refuse with kNoSpace once next_lun_id is UINT32_MAX).
std::string LunRecordRule(uint32_t id, std::string_view name, uint64_t size, uint32_t bs);
// Why LUN `l` cannot be served from a pool of `grain`-byte grains, `units`
// of them ("" if it can): LunRecordRule, a block within one grain (as
// CreateLun requires), and every run of its map inside the LUN (its size in
// grains, rounded up) and inside the pool. Core's load applies it to every
// LUN (kCorruption); the upgrade to format 3 to every map it translates,
// before anything is written (upgrade.h).
struct LunState;
std::string LunGeometryRule(const LunState& l, uint32_t grain, uint64_t units);
// The LSN a new pool's journal starts at: random, so that no record an
// older pool left on the same file or device can pass for one of this
// pool's (every format's Create).
uint64_t NewPoolJournalStartLsn();
// How far an open moves the journal's LSNs past the replayed ones before
// its checkpoint (the one rule: Core jumps by it, FormatV3 refuses less):
// a torn tail may leave stale, CRC-valid records of the LSNs after it in
// the journal, and a record written under one of those LSNs could let a
// later replay chain a stale record after it. No batch holds 2^32 records.
constexpr uint64_t kLsnGapAfterOpen = 1ull << 32;
constexpr uint64_t kNone = ~uint64_t{0};

// Stores v's low n bytes at p, little-endian (every integer the store
// writes): for Encoder and for fields written in place (FrameRecord).
inline void PutLittleEndian(char* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = static_cast<char>(v >> (8 * i));
}

// Little-endian encoder/decoder with bounds checks.
class Encoder {
 public:
  explicit Encoder(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  // Little-endian, built in a local array and appended once: a push_back per
  // byte re-checked the capacity eight times (a tenth of a clone's metadata
  // CPU went to encoding its 57-byte record).
  void U32(uint32_t v) { LittleEndian<4>(v); }
  void U64(uint64_t v) { LittleEndian<8>(v); }
  void Bytes(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  void Str(const std::string& s) { U32(static_cast<uint32_t>(s.size())); Bytes(s.data(), s.size()); }

 private:
  template <int N>
  void LittleEndian(uint64_t v) {
    char b[N];
    PutLittleEndian(b, v, N);
    out_->append(b, N);
  }
  std::string* out_;
};

class Decoder {
 public:
  Decoder(const void* p, size_t n) : p_(static_cast<const uint8_t*>(p)), n_(n) {}
  bool U8(uint8_t* v) { if (n_ < 1) return false; *v = *p_++; n_--; return true; }
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  bool Bytes(void* out, size_t n);
  bool Str(std::string* s, size_t max);
  bool Skip(size_t n) { if (n_ < n) return false; p_ += n; n_ -= n; return true; }
  const uint8_t* here() const { return p_; }
  size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

struct Superblock {
  uint32_t version = kFormatVersion;
  Uuid uuid{};
  uint32_t au = 0;
  uint64_t size_bytes = 0;       // declared size
  uint64_t journal_bytes = 0;
  uint64_t data_offset = 0;
  uint64_t seq = 0;              // higher wins; copies alternate slots seq % 2
  uint64_t ckpt_first = kNone;   // first AU of the checkpoint chain (kNone: empty pool)
  uint64_t ckpt_seq = 0;         // superblock seq that wrote it; stamped in every chunk
  uint64_t ckpt_bytes = 0;
  uint32_t ckpt_crc = 0;
  uint64_t journal_start_lsn = 1;
  uint32_t soft_threshold_percent = 0;

  std::string Encode() const;  // exactly kSuperblockSlot bytes
  // kCorruption (bad magic/crc, or fields no pool we create can hold: every
  // size is bounded and derived offsets cannot overflow), kUnsupported
  // (version), or ok.
  static Status Decode(const void* p, size_t n, Superblock* sb);
  uint64_t total_units() const { return (size_bytes - data_offset) / au; }
};

// Checkpoint chunk, one per AU of the chain:
//   magic(8) | seq(8) | index(4) | len(4) | next AU(8) | pool uuid(16) |
//   zeros to 60 | crc32c(4) | payload[len]
// The CRC covers the first 60 header bytes and the payload.
constexpr size_t kChunkHeader = 64;
struct ChunkHeader {
  uint64_t seq = 0;     // the superblock seq that wrote the checkpoint
  uint32_t index = 0;   // position in the chain
  uint32_t len = 0;     // payload bytes in this chunk
  uint64_t next = kNone;  // AU of the next chunk
  Uuid uuid{};
};
// Replaces *out with the chunk holding payload[0..h.len).
void EncodeChunk(const ChunkHeader& h, const char* payload, std::string* out);
// Decodes the chunk at p[0..n); false unless its magic and CRC check and its
// payload fits in n. The caller checks seq, index and uuid against the chain.
bool DecodeChunk(const void* p, size_t n, ChunkHeader* h);

// A LUN's snapshot attributes, kept in a LUN's attribute list (the
// checkpoint's LUN entry and the kSnapshotLun record): attribute bytes(4),
// then tag(4) | length(4) | value per attribute that differs from its
// default, so an ordinary LUN's list is empty. Tags (docs/design/store.md):
constexpr uint32_t kAttrReadOnly = 1;  // length 0: writes get kReadOnly
constexpr uint32_t kAttrOrigin = 2;    // length 16: the origin LUN's UUID
constexpr uint32_t kAttrCreated = 3;   // length 8: creation time, seconds since the epoch
// A tag this build does not know is refused with kUnsupported (a property
// ignored, such as read-only, could lose data), never skipped. A LUN of a
// version 1 pool (no attribute list) has the defaults.
struct LunAttrs {
  bool read_only = false;
  Uuid origin{};         // the LUN it was snapshotted from; all zero: none
  uint64_t created = 0;  // seconds since the epoch; 0: unknown
  uint32_t unknown_tag = 0;  // decoding only: the first tag this build does not know
};
void EncodeLunAttrs(const LunAttrs& a, Encoder* e);
// The most one LUN's fields (not its map) take in a checkpoint of either
// format: ids, uuid, size, block size, a kMaxNameLength name and every
// attribute this build writes (an unknown one is refused on load, so none is
// carried): 160 bytes in format 2's state (EncodeState), 152 in a format 3
// LUN table page. Checkpoint bounds count LUNs by it (CheckpointCost); a
// test holds both encodings to it.
constexpr size_t kLunCheckpointBytesBound = 160;
// False if the list does not decode (kCorruption: a known tag with a wrong
// length or value, a repeated tag, a truncated entry). An unknown tag
// decodes, leaving its number in unknown_tag for the caller to refuse.
bool DecodeLunAttrs(Decoder* d, LunAttrs* out);

struct LunState {
  uint32_t id = 0;
  std::string name;
  Uuid uuid{};
  uint64_t size = 0;
  uint32_t bs = 512;
  LunAttrs attrs;  // never changes after the LUN is created
  ExtentMap map;
  // Run-time only.
  uint64_t mod_lsn = 0;  // LSN of the last record that changed it (0: none since open)
  RangeLock lock;
  ReadAhead read_ahead;  // its sequential readers (read_ahead.h)
  int open_handles = 0;
  bool deleted = false;
};

struct MetaState {
  uint32_t au = 0;
  // The physical bound of every LUN's map, which replayed records are
  // checked against too (ApplyRecord): 2^32 AUs at formats 1 and 2 (their
  // counts are 32-bit, and no pool of theirs is larger); the pool's grains
  // at format 3 (its LoadState sets it; Core::Grow raises it), so a damaged
  // record naming grains past the pool is refused.
  uint64_t max_phys = ExtentMap::kMaxPhys;
  // A new LUN whose map has this state's bound.
  std::shared_ptr<LunState> NewLun() const;
  // Raises the bound of the state and of every LUN's map (never lowers it):
  // a pool that grew maps its new units. Allocates nothing.
  void RaiseMapBound(uint64_t max_phys);
  uint32_t next_lun_id = 1;
  uint64_t table_lsn = 0;  // run time: LSN of the last LUN-table change since open
  // The LUNs by id. Added and removed only through AddLun and EraseLun
  // (ApplyRecord's and DecodeState's), which keep the name index and the
  // extent count in step; a LUN's own fields change in place.
  const std::map<uint32_t, std::shared_ptr<LunState>>& luns() const { return luns_; }
  LunState* Find(uint32_t id) const {
    auto it = luns_.find(id);
    return it == luns_.end() ? nullptr : it->second.get();
  }
  // The same LUN for a holder that outlives the state's lock (a handle);
  // null if there is none.
  std::shared_ptr<LunState> FindShared(uint32_t id) const {
    auto it = luns_.find(id);
    return it == luns_.end() ? nullptr : it->second;
  }
  LunState* FindName(const std::string& name) const;  // O(1): opening 40,000 LUNs is linear
  // The extents of every LUN's map, kept in step as they change (AddLun,
  // EraseLun, and ApplyRecord through MapResized): the room a checkpoint
  // needs is sized by it on every allocation and LUN create, where walking
  // 40,000 LUNs took most of the time (lun_table_bench, session 41).
  // Check compares it with the maps it copies.
  uint64_t extents() const { return extents_; }
  // One LUN's map went from `before` to `after` extents (ApplyRecord's
  // changes to a map of a LUN this state holds).
  void MapResized(uint64_t before, uint64_t after) { extents_ += after - before; }  // modulo 2^64
  void AddLun(std::shared_ptr<LunState> l);
  void EraseLun(uint32_t id);

 private:
  std::map<uint32_t, std::shared_ptr<LunState>> luns_;
  std::unordered_map<std::string, uint32_t> by_name_;
  uint64_t extents_ = 0;
};

enum class RecType : uint8_t {
  kCreateLun = 1, kDeleteLun, kResizeLun, kMap, kUnmap, kClone, kCloneLun,
  kSeal,  // no-op written by Close: its `proven` vouches for every record before it
  // Format v2 too (appended: the numbers above never change; ParseRecordV1
  // still stops at kCloneLun).
  kSnapshotLun,  // kCloneLun's payload, then the new LUN's attribute list
  kRollbackLun,  // lun's map and size become lun2's (one record: atomic)
  // Format 3 only (formats 1 and 2 refuse it at replay: builds before it
  // cannot read it). kMap's payload, then one CRC32C per run (`crcs`): a
  // one-sync first write (store-v3.md 3.6 item 1) writes its data and this
  // record with no sync between them, so replay checks the data of the
  // records no later record vouches for (replay.h) and ends replay at the
  // first that does not match. One CRC per run rather than per grain: a
  // write of at most kOneSyncWriteBytes is one run unless its grains are
  // scattered, and the verdict is per record anyway (a mismatch in any
  // grain drops the whole record), so per-grain CRCs would only cost 4
  // bytes a grain. ApplyRecord treats it exactly as kMap.
  kMapChecked,
};
constexpr uint8_t kLastRecType = static_cast<uint8_t>(RecType::kMapChecked);
// The most data a write may put behind one kMapChecked record: the
// one-sync path's bound (store-v3.md 3.6 item 1), the bound replay's data
// check reads per record by (CheckedRecordRule).
constexpr uint64_t kOneSyncWriteBytes = 64 * 1024;
// The most runs a kMapChecked record names: a kOneSyncWriteBytes write at
// the smallest grain (512 bytes, GrainRule) unaligned to it touches 129
// grains, each at most its own run.
constexpr uint32_t kMaxCheckedRuns = kOneSyncWriteBytes / 512 + 1;

struct Record {
  RecType type = RecType::kMap;
  // kClone: lun = src, lun2 = dst; kCloneLun, kSnapshotLun: lun = src,
  // lun2 = new; kRollbackLun: lun = target, lun2 = snapshot.
  uint32_t lun = 0, lun2 = 0;
  uint64_t a = 0, b = 0, n = 0;  // kUnmap [a,a+n); kClone src a, dst b, n AUs; kResize: a = size
  Uuid uuid{};
  std::string name;
  uint32_t bs = 0;
  std::vector<Run> runs;  // kMap, kMapChecked
  // kMapChecked: crcs[i] is Crc32c(0, ...) over the full contents of the
  // grains runs[i] maps, [phys, phys + len) in order.
  std::vector<uint32_t> crcs;
  LunAttrs attrs;         // kSnapshotLun

  void EncodePayload(std::string* out) const;
  static bool DecodePayload(RecType t, const void* p, size_t n, Record* r);
};
// Why a decoded kMapChecked record `r` cannot be one a writer made, in a
// pool of `grains` grains of `grain` bytes ("" if it can): a run of no
// grains or past the pool, or more grains in all than a kOneSyncWriteBytes
// write unaligned to the grain touches. Replay refuses such a record
// (kCorruption) before it reads any data, so its check reads at most
// kOneSyncWriteBytes + grain bytes per record.
std::string CheckedRecordRule(const Record& r, uint32_t grain, uint64_t grains);

// Journal framing: crc32c(4) | payload len(4) | lsn(8) | proven(8) | type(1)
// | payload. `proven` is the highest LSN that was durable (its commit's sync
// had returned) when the record was framed: a CRC-valid record proves that
// every record up to `proven` reached stable storage, so damage there is
// media corruption, never a write torn by a power cut (docs/design/store.md,
// "Recovery rules").
constexpr size_t kRecordHeader = 25;
// Every record's size is bounded by its type (MaxPayloadBytes, from the
// payload shapes EncodePayload writes), and ParseRecord refuses a longer
// one before its CRC: so whether a record starts at an offset is decided by
// the kMaxRecordBytes bytes from there, and replay can read a journal
// through a bounded window (journal_source.h). The bounds are format rules
// writers keep: a kMap record names at most kMaxMapRuns runs (Allocate
// splits longer ones), an attribute list holds at most kMaxLunAttrBytes.
constexpr uint32_t kMaxMapRuns = 1u << 16;
constexpr uint32_t kMaxLunAttrBytes = 4096;
constexpr size_t MaxPayloadBytes(RecType t) {
  constexpr size_t kLunHeader = 4 + 4 + 16 + 8 + 4 + 4 + kMaxNameLength;  // ids, uuid, size, bs, name
  switch (t) {
    case RecType::kCreateLun:
    case RecType::kCloneLun: return kLunHeader;
    case RecType::kSnapshotLun: return kLunHeader + 4 + kMaxLunAttrBytes;
    case RecType::kRollbackLun: return 4 + 4;
    case RecType::kDeleteLun: return 4;
    case RecType::kResizeLun: return 4 + 8;
    case RecType::kMap: return 4 + 4 + size_t{kMaxMapRuns} * 24;
    case RecType::kMapChecked: return 4 + 4 + size_t{kMaxCheckedRuns} * (24 + 4);
    case RecType::kUnmap: return 4 + 8 + 8;
    case RecType::kClone: return 4 + 4 + 8 + 8 + 8;
    case RecType::kSeal: return 0;
  }
  return 0;
}
constexpr size_t kMaxRecordBytes = [] {
  size_t m = 0;
  for (uint8_t t = 1; t <= kLastRecType; t++) m = std::max(m, MaxPayloadBytes(static_cast<RecType>(t)));
  return kRecordHeader + m;
}();
// Why applying `r` to `st` would make a LUN break LunBlocksRule ("" if it
// would not, or if ApplyRecord refuses the record anyway): a LUN created
// or resized above 2^48 blocks (a copy or rollback takes a size the rule
// already held for). Format 3's replay applies it before ApplyRecord, which
// does not know the format (formats 1 and 2 may hold such LUNs).
std::string RecordLunBlocksRule(const MetaState& st, const Record& r);

void FrameRecord(const Record& r, uint64_t lsn, uint64_t proven, std::string* out);
// ParseRecord's refusals from the header's fields alone, before it reads the
// payload or its CRC: a record vouches only for earlier LSNs, its type is
// known, its payload within its type's bound. Replay's scan for later
// records tries these at every byte before calling ParseRecord.
constexpr bool PlausibleRecordHeader(uint32_t plen, uint64_t lsn, uint64_t proven, uint8_t type) {
  return proven < lsn && type >= 1 && type <= kLastRecType &&
         plen <= MaxPayloadBytes(static_cast<RecType>(type));
}
struct RecordFrame {
  uint64_t lsn = 0;
  uint64_t proven = 0;
};
// Parses the record at p[0..n); returns its total size, or 0 if it is not a
// valid record with the expected lsn (which ends replay). expect_lsn = kNone
// accepts any LSN, reported through frame.
size_t ParseRecord(const uint8_t* p, size_t n, uint64_t expect_lsn, Record* r,
                   RecordFrame* frame = nullptr);
// Conveniences for tests and tools: a record that vouches for nothing
// (proven 0), and parsing that only reports the LSN.
inline void FrameRecord(const Record& r, uint64_t lsn, std::string* out) { FrameRecord(r, lsn, 0, out); }
inline size_t ParseRecord(const uint8_t* p, size_t n, uint64_t expect_lsn, Record* r, uint64_t* lsn_out) {
  RecordFrame f;
  size_t k = ParseRecord(p, n, expect_lsn, r, &f);
  if (k) *lsn_out = f.lsn;
  return k;
}
// Version 1 framing, read only (pools made before version 2): crc32c(4) |
// payload len(4) | lsn(8) | type(1) | payload. Records vouch for nothing.
constexpr size_t kRecordHeaderV1 = 17;
size_t ParseRecordV1(const uint8_t* p, size_t n, uint64_t expect_lsn, Record* r,
                     uint64_t* lsn_out = nullptr);
// One line naming a record for people ("Map LUN 2: 1 run at AU 0").
std::string DescribeRecord(const Record& r);

// Receives reference count changes from ApplyRecord (null during replay:
// counts are rebuilt from the maps afterwards).
class RefSink {
 public:
  virtual ~RefSink() = default;
  // Whether every AU of `runs` can gain one reference per run naming it (an
  // AU may appear in several); an error (nothing changed) if a count would
  // pass its bound. ApplyRecord asks before it changes anything.
  virtual Status CanInc(std::span<const Run> runs) const = 0;
  virtual Status Inc(uint64_t phys, uint64_t n) = 0;
  virtual void Dec(uint64_t phys, uint64_t n) = 0;
};

// Applies a record; kCorruption if it does not fit the state (replay of
// inconsistent metadata: an unknown LUN, an extent ExtentMap's rule refuses),
// or the sink's error if a reference count would overflow. Either way it
// checks before it changes anything, so a refused record leaves `st` and
// the sink as they were. At run time records are built to fit.
//
// `dirty` (null: not tracked; format 3's incremental checkpoint,
// dirty_ranges.h; no default, so no caller leaves the marks out unseen):
// the ranges whose map the record may change are marked there WHATEVER the
// status, since a status after a change (a sink's Inc or a MapInto failing
// after earlier runs applied: neither happens with records built to fit)
// would leave a changed map unmarked; marking a refused record only costs
// pages. The marks are in the map's key unit (the records' unit:
// the grain, AUs at formats 1 and 2), which is what the checkpoint tree's
// leaves tile [0, 2^48) of a LUN by (ckpt_tree.h), not the LUN's blocks.
// Per record kind (MarkRemapped in meta.cc): kMap each run's range;
// kUnmap [a, +n) of lun; kClone [b, +n) of lun2 (the destination; the
// source is only read); kResizeLun its map from the new end on (what a
// shrink removes; the size is in the LUN table, which every checkpoint
// rewrites); kCreateLun, kDeleteLun and kRollbackLun the whole of lun,
// kCloneLun and kSnapshotLun the whole of lun2 (the new LUN); kSeal
// nothing (it changes no map). A parameter, not a RefSink member: replay
// applies records without a sink (counts are rebuilt afterwards) but may
// want the marks, and marking is not a reference change. An exception
// (bad_alloc) may leave the marks short of what was changed, as it may
// leave the state half-changed: the caller treats both alike (Core fails
// the pool, a load fails).
//
// `clone_pieces` (kClone only, else ignored): the source pieces of r's range
// as ExtentMap::Lookup gives them, looked up by the caller under the same
// hold of the state (Core::CloneRange needs them first, to price the
// record), so the range is not looked up twice.
Status ApplyRecord(MetaState* st, const Record& r, RefSink* sink, DirtyRanges* dirty,
                   const std::vector<Run>* clone_pieces = nullptr);

// Checkpoint payload: the LUN table and every extent map, written in the
// current format. Per LUN (version 2): id(4) | uuid(16) | size(8) | bs(4) |
// name | attribute bytes(4) | attributes | extent count(8) | extents. The
// attributes are a sequence of tag(4) | length(4) | value, for LUN
// properties added later without a new format version (the kAttr* tags
// above; EncodeLunAttrs/DecodeLunAttrs); a tag this build does not know is
// refused (kUnsupported). Version 1 has no attribute field.
void EncodeState(const MetaState& st, std::string* out);
Status DecodeState(const std::string& in, MetaState* st, uint32_t version = kFormatVersion);

}  // namespace cowstore::store
