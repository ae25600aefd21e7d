// SPDX-License-Identifier: Apache-2.0
// The public contract of the copy-on-write extent store.
//
// A Pool lives in one regular file (sparse, growable up to a declared size)
// or block device and holds many named LUNs. A LUN maps its logical blocks,
// in grains (the unit of sharing: the allocation unit, AU, at formats 1 and
// 2), onto reference-counted physical grains of the pool.
// Cloning, zeroing and unmapping are metadata operations whose cost grows
// with the number of extents touched, not with the bytes.
//
// Thread safety: Pool and Lun are safe for concurrent use from many threads.
// Operations on disjoint ranges proceed in parallel. Every write-class
// operation (Write, CompareAndWrite, ZeroRange, Unmap, CloneRange destination)
// is atomic with respect to every other operation on overlapping blocks.
//
// Durability: an operation called with Durability::kDurable returns only when
// its data and metadata are on stable storage. A kBuffered one becomes
// durable at the next Flush() (or at any later durable operation's commit).
// After power loss the pool opens without manual repair, with every durable
// operation present and nothing visible that was never written. An operation
// not yet durable (buffered, or cut short by the power loss or an I/O error)
// may be present in part: each 512-byte sector then holds its old or its new
// contents. LUN-table changes (create, delete, resize, clone LUN) are always
// durable when they return, and all-or-nothing.
//
// Lifetimes: a Lun handle keeps the pool's file open (and locked) until it is
// released; Lun::pool() is valid only while the Pool object lives. A pool
// file can be open once per process (a second Open gets kBusy): share one
// Pool between every LUN of the process.
//
// Cancellation: store calls are not cancellation points and must not be
// cancelled midway (a commit holds internal locks). A caller whose threads may
// be pthread_cancel()ed disables cancellation around every call.
//
// Errors: no exception escapes. Out of memory reports kNoSpace when the
// operation changed nothing; one that strikes a metadata update part way
// fails the pool instead (kIOError on every later call: reopen it), as
// status.h's StatusFromCurrentException says.
//
// This header knows nothing of SCSI: LBAs are in the LUN's logical blocks.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "handler/store/names.h"  // Uuid; the rules for names, block sizes, allocation units
#include "handler/store/status.h"

namespace cowstore::store {

class Env;
class Lun;


enum class Durability : uint8_t {
  kBuffered,  // write cache on: durable at the next Flush()
  kDurable,   // write cache off: durable when the call returns
};

// backing_check_interval_ms: the thin-on-thin signal is off.
constexpr uint32_t kBackingSignalOff = ~uint32_t{0};
// The default backing_check_interval_ms. A statvfs costs microseconds and is
// made only by an allocation that finds the interval over; a host filesystem
// filled by others at 1 GiB/s moves 1 GiB in that time, far less than the
// pool's remaining growth at which the signal is meant to warn.
constexpr uint32_t kDefaultBackingCheckIntervalMs = 1000;

struct PoolOptions {
  // Declared maximum size of the pool. A regular file starts small and sparse
  // and grows up to this; for a block device 0 means "the whole device".
  uint64_t size_bytes = 0;
  // Power of two, 64 KiB .. 1 MiB, so it always divides 1 MiB (ESXi aligns
  // XCOPY and UNMAP to 1 MiB and requires the advertised optimal unmap
  // granularity to divide it).
  uint32_t allocation_unit = 1u << 20;
  // Percentage of the pool's data units; crossing it upward bumps
  // Pool::soft_threshold_generation(). 0 disables the signal.
  uint32_t soft_threshold_percent = 80;
  // Bytes of the journal region (4 KiB multiple, 64 KiB .. 1 GiB); 0 = 16 MiB.
  // A full journal triggers a checkpoint; small values exercise that in tests.
  uint64_t journal_bytes = 0;
  // Not stored: as OpenOptions::backing_check_interval_ms, for the pool
  // Create returns open.
  uint32_t backing_check_interval_ms = kDefaultBackingCheckIntervalMs;
  // The pool format: 2 (this struct's default: data is shared and copied in
  // whole allocation units) or 3 (shared at `grain`, below the AU: a clone
  // then owns only the grains written since; docs/design/store-v3.md).
  // cowctl makes format 3 unless told a grain equal to the AU (`pool create`
  // defaults to a 64 KiB AU and a 4 KiB grain). kInvalidArgument otherwise.
  uint32_t format = 2;
  // The unit of sharing (store-v3.md 3.1), in bytes: 0 = the allocation
  // unit. Format 2 has no other (kInvalidArgument); format 3 takes any
  // grain GrainRule allows.
  uint32_t grain = 0;
};

// The smallest size_bytes Pool::Create accepts for `options` (its format,
// allocation unit and journal size; size_bytes itself is not looked at):
// the format's metadata, the journal and kMinPoolUnits AUs of data. A
// caller that makes more than the pool (cowctl: a directory, a link) checks
// a size against it before making anything.
uint64_t MinPoolBytes(const PoolOptions& options);
// The journal Create makes for `options`: journal_bytes, or 16 MiB for 0.
uint64_t JournalBytesOf(const PoolOptions& options);

struct OpenOptions {
  bool read_only = false;  // for offline inspection (check, show)
  // How often, at most, an allocation asks the Env how much its backing
  // store has free (thin on thin: Pool::backing_short_generation()).
  // Others fill the host filesystem too, so it is asked again over time;
  // 0 asks at every allocation (tests). kBackingSignalOff: never; the
  // shortfall is then only shown (Space(): pool show/list). Whether a LUN
  // reports the signal to its initiators is the SCSI layer's per-LUN choice
  // (scsi::LunConfig::thin_on_thin_signal; cfgstring thin_on_thin=0|1).
  uint32_t backing_check_interval_ms = kDefaultBackingCheckIntervalMs;
  // The documented recovery for a journal whose *committed* records are
  // damaged (docs/design/store.md, "Recovery"): replay stops at the damage and
  // the damaged record and every record after it are given up. Without it
  // such a pool is refused with kCorruption. Prefer Pool::RepairJournal,
  // which says what is given up.
  bool accept_journal_loss = false;
};

// What repairing a damaged journal gives up (Pool::RepairJournal).
struct JournalLoss {
  bool damaged = false;              // false: the journal is intact, nothing to do
  uint64_t offset = 0;               // journal byte offset of the first damaged record
  uint64_t lsn = 0;                  // the LSN replay expected there
  // One line per operation given up, in LSN order: the first 1,000, then
  // one line counting the rest (a damaged ring may hold millions).
  std::vector<std::string> dropped;
  uint64_t dropped_operations = 0;  // every one, listed or not
};

struct LunInfo {
  std::string name;
  Uuid id{};                     // unique 128-bit identity (clones get a fresh one)
  uint64_t size_bytes = 0;
  uint32_t block_size = 512;     // 512 or 4096
  uint64_t mapped_bytes = 0;     // bytes backed by a grain (whole grains: AUs at formats 1, 2)
  uint64_t exclusive_bytes = 0;  // mapped grains referenced by this LUN only
  uint64_t shared_bytes = 0;     // mapped grains also referenced elsewhere (or twice by it)
  // Snapshot attributes (format v2; a LUN of a v1 pool has the defaults).
  bool read_only = false;        // every write-class call gets kReadOnly
  Uuid origin{};                 // the LUN it was snapshotted from (all zero: none)
  uint64_t created_unix = 0;     // creation time, seconds since the epoch (0: unknown)
};

// Every *_units figure counts units of `unit_bytes`: the pool's grain, the
// unit space is counted in, which is the AU for formats 1 and 2 (and a
// format 3 pool at grain == AU); below the AU the counts are grains, so that
// they are exact (scattered free grains make no whole AU). Bytes() converts;
// consumers must not multiply by allocation_unit.
struct SpaceInfo {
  uint64_t pool_size_bytes = 0;    // declared size
  uint32_t allocation_unit = 0;    // the AU (data alignment, checkpoint chunks)
  uint32_t unit_bytes = 0;         // what the *_units below count (the grain)
  uint64_t total_units = 0;        // data units the pool can ever hold
  uint64_t allocated_units = 0;    // units with refcount > 0 (data + metadata)
  uint64_t metadata_units = 0;     // units holding metadata (checkpoints: whole AUs)
  uint64_t shared_units = 0;       // units with refcount > 1
  uint64_t free_units = 0;         // allocatable (including thinning_units)
  uint64_t thinning_units = 0;     // freed durably, still being punched: allocatable soon
  uint64_t mapped_bytes = 0;       // sum of every LUN's mapped_bytes
  uint64_t saved_bytes = 0;        // mapped_bytes - bytes of distinct data units
  uint64_t soft_threshold_units = 0;
  uint64_t provisioned_bytes = 0;  // sum of every LUN's size
  // Thin on thin: what holds the pool (env.h BackingSpace), as the Env
  // tells it (backing_known false, and the figures 0, when it cannot).
  bool backing_known = false;
  bool backing_grows = false;       // a file taking space as it fills; false: a device
  uint64_t backing_size_bytes = 0;  // the filesystem's or the device's size
  uint64_t backing_free_bytes = 0;  // what the pool may still take (the device's size for a device)
  // The backing store would not hold the pool's remaining growth (its free
  // units, holes in its file until written): the pool can run out of space
  // before it is full. OutgrowsBacking() is the rule.
  bool backing_short = false;
  std::vector<LunInfo> luns;
  // No unit named: a handler older than unit_bytes, which came with counting
  // in grains, so it counted AUs (not so for CheckReport's: it came later).
  uint64_t Bytes(uint64_t units) const { return units * (unit_bytes ? unit_bytes : allocation_unit); }
};

// Thin on thin, the one rule: a pool that grows into its backing store
// (`b.grows`) and may still take `remaining_growth_bytes` outgrows it when
// the store has less free. A device never: the pool is inside it already.
inline bool OutgrowsBacking(bool grows, uint64_t backing_free_bytes, uint64_t remaining_growth_bytes) {
  return grows && backing_free_bytes < remaining_growth_bytes;
}

// One run of GetAllocationStatus: [lba, lba+count) all mapped or all not.
struct AllocationRun {
  uint64_t lba = 0;
  uint64_t count = 0;
  bool mapped = false;
};

struct CheckReport {
  bool clean = true;
  std::vector<std::string> problems;  // one human-readable line each
  uint64_t luns = 0, extents = 0, allocated_units = 0, leaked_units = 0;
  // What allocated_units and leaked_units count (the grain; the AU at formats 1
  // and 2); 0 from an older handler: unknown (it may count grains unsaid).
  uint32_t unit_bytes = 0;
  // The longest the check held the store's locks at once: the most any I/O
  // waited for it (online check only).
  uint64_t longest_lock_hold_us = 0;
};

// What Pool::Upgrade did.
struct UpgradeReport {
  uint32_t from_format = 0;  // the pool's format before: 1, 2 (or 3: nothing to do)
  bool already = false;      // it was format 3 already; nothing was written
  uint32_t allocation_unit = 0;
  uint32_t grain = 0;        // the pool's grain afterwards
  uint64_t luns = 0;         // LUNs carried over (the check after the upgrade)
  uint64_t extents = 0;      // their runs at the new grain
  uint64_t journal_bytes = 0;  // the format 3 journal (AUs of the data area)
  uint64_t metadata_pages = 0;  // 4 KiB pages of the format 3 checkpoint written
};

// Progress callback for long operations (check, grow): done/total in units.
using ProgressFn = void (*)(void* ctx, uint64_t done, uint64_t total);

class Pool {
 public:
  // Creates a new pool at `path` (fails with kAlreadyExists if a pool is
  // there) and returns it open. `env` must outlive the pool.
  static Result<std::unique_ptr<Pool>> Create(Env* env, const std::string& path,
                                              const PoolOptions& options);
  // Opens an existing pool, replaying its journal (automatic recovery).
  // kBusy if another process holds it; kCorruption / kUnsupported on bad or
  // unknown metadata, without modifying anything. A writable open of a pool
  // too full for its checkpoint succeeds and serves reads, overwrites in
  // place and flushes of them; what needs a record (writes that allocate,
  // unmaps, LUN changes) gets kNoSpace saying so, until Grow (or frees) make
  // room.
  //
  // kNoSpace: refused for room, nothing changed (but for the earlier parts
  // of a write too long for one reservation, which SBC allows a failed
  // write). kNotDurable (any durable write, Flush, Close, LUN change):
  // done in memory, reads see it, but its commit was refused for room
  // (the store's checkpoint bound fell short, or the open could not
  // checkpoint); it becomes durable with the first checkpoint that finds
  // room (Grow, or frees), and is lost if the pool is closed or cut first.
  // A CreateLun/CloneLun/SnapshotLun told kNotDurable made the LUN: GetLun
  // finds it.
  static Result<std::unique_ptr<Pool>> Open(Env* env, const std::string& path,
                                            const OpenOptions& options = {});
  // Full offline invariant check of a pool that is not open anywhere.
  static Result<CheckReport> CheckOffline(Env* env, const std::string& path,
                                          ProgressFn progress = nullptr, void* ctx = nullptr);
  // Converts a format 1 or 2 pool, not open anywhere, to format 3 in place
  // (docs/design/store-v3.md 3.7): clones then share at `grain` bytes (4 KiB
  // by default) instead of the allocation unit. No data moves: the pool is
  // opened (its journal replayed), checked (any problem refuses, kCorruption,
  // nothing written), closed; then the format 3 checkpoint and journal are
  // written into AUs free in the old state and a format 3 superblock
  // replaces the old one in each slot in turn. A power cut at any instant
  // leaves the old pool exactly (run it again) or the upgraded one (the
  // next open finishes the second slot); an older cowstore refuses the
  // upgraded pool (kUnsupported) and never writes to it. Refused with the
  // pool still in its old format (its own open may have checkpointed it,
  // as any writable open does, but nothing of format 3 is written): kBusy
  // when another process holds the pool; kNoSpace when the free AUs cannot
  // hold the journal and the checkpoint; kInvalidArgument for a grain off
  // GrainRule at the pool's AU, or one a LUN's blocks do not fit (a
  // LunGeometryRule the translated maps break). A format 3 pool is only opened
  // and closed, which completes an upgrade a power cut stopped between its
  // two superblock writes (report.already). The upgraded pool is opened and
  // checked before success is reported. Progress, if given, in
  // thousandths of three steps (check the old pool, by its LUNs; write;
  // check the new one), out of 3000.
  static Result<UpgradeReport> Upgrade(Env* env, const std::string& path, uint32_t grain = 4096,
                                       ProgressFn progress = nullptr, void* ctx = nullptr);
  // The documented recovery for committed journal records that are damaged:
  // with apply = false only reports what opening with accept_journal_loss
  // would give up (nothing written); with apply = true does it: the pool is
  // opened, the surviving prefix checkpointed and the pool closed again.
  static Result<JournalLoss> RepairJournal(Env* env, const std::string& path, bool apply);

  // Flushes and releases the pool. Open Lun handles become kClosed.
  virtual ~Pool() = default;
  virtual Status Close() = 0;

  virtual Uuid uuid() const = 0;
  virtual uint32_t allocation_unit() const = 0;
  // The unit of sharing (PoolOptions::grain): the AU at formats 1 and 2.
  // A write into shared data copies no more than this; UNMAP frees at it.
  virtual uint32_t grain() const = 0;

  // LUN names: 1..64 chars of [A-Za-z0-9_.-], not starting with '.' or '-',
  // without "..". The size is a positive multiple of the block size (512 or
  // 4096) and at most 2^48 blocks (128 TiB of 512-byte blocks, 1 PiB of
  // 4096-byte ones: format 3 keys blocks in 48 bits) and 1024 times the
  // pool's size; kInvalidArgument otherwise. kNoSpace once the pool's
  // 2^32-2 LUN ids are used up (CloneLun and SnapshotLun too).
  virtual Result<LunInfo> CreateLun(const std::string& name, uint64_t size_bytes,
                                    uint32_t block_size) = 0;
  // kBusy while a Lun handle to it is open.
  virtual Status DeleteLun(const std::string& name) = 0;
  // Growing exposes zeros; shrinking releases the grains beyond the new end.
  // Size must be a positive multiple of the block size, with CreateLun's
  // bounds (a LUN an older build made above 2^48 blocks can only shrink
  // below them).
  virtual Status ResizeLun(const std::string& name, uint64_t new_size_bytes) = 0;
  // A whole-LUN clone (also used as a snapshot): O(extents) metadata, fresh
  // identity, the source stays writable. Durable when it returns.
  virtual Result<LunInfo> CloneLun(const std::string& src, const std::string& dst) = 0;
  // A read-only snapshot: a CloneLun that records `src`'s identity as its
  // origin and the creation time, in one journal record. Writes to it get
  // kReadOnly. Durable when it returns.
  virtual Result<LunInfo> SnapshotLun(const std::string& src, const std::string& dst) = 0;
  // `lun`'s contents (and size) become `snapshot`'s, atomically (one journal
  // record); `lun` keeps its name, identity and attributes. Waits for I/O in
  // flight on `lun` (its range lock) and blocks new I/O until the swap is
  // done, so it may be called while `lun` is open: the caller (the SCSI
  // layer) then tells initiators their medium changed. Both LUNs need the
  // same block size; `lun` must be writable. Durable when it returns.
  virtual Status RollbackLun(const std::string& lun, const std::string& snapshot) = 0;
  virtual std::vector<LunInfo> ListLuns() const = 0;
  virtual Result<LunInfo> GetLun(const std::string& name) const = 0;
  virtual Result<std::shared_ptr<Lun>> OpenLun(const std::string& name) = 0;

  // Copies `count` blocks from src@src_lba to dst@dst_lba inside this pool.
  // Whole grains (AUs at formats 1 and 2) are shared by reference (metadata
  // only); partial grains at the edges (or misaligned source/destination) are
  // copied as data. src and dst may be the same LUN; overlapping ranges
  // behave like memmove. Both LUNs must have the same block size.
  virtual Status CloneRange(Lun& src, uint64_t src_lba, Lun& dst, uint64_t dst_lba,
                            uint64_t count, Durability durability) = 0;

  // Makes every buffered operation durable.
  virtual Status Flush() = 0;
  // Grows the declared size. A medium the store sizes (File::CanTruncate: a
  // regular file) is extended first; any other (a block device) only up to
  // its own size, which 0 means. kInvalidArgument below the current size or
  // above the medium's.
  virtual Status Grow(uint64_t new_size_bytes) = 0;
  virtual SpaceInfo Space() const = 0;
  // Increments each time allocation rises across soft_threshold_percent; a
  // caller remembers the last value it saw to signal each crossing once.
  virtual uint64_t soft_threshold_generation() const = 0;
  // Thin on thin: increments each time an allocation finds the backing store
  // newly short of the pool's remaining growth (SpaceInfo::backing_short;
  // asked at most every backing_check_interval_ms). A shortfall that lasts is
  // one crossing; room again, then short again, is the next. Kept apart from
  // soft_threshold_generation() so a LUN can report one and not the other.
  virtual uint64_t backing_short_generation() const = 0;
  // Online invariant check (takes the metadata lock; I/O may stall briefly).
  virtual CheckReport Check(ProgressFn progress = nullptr, void* ctx = nullptr) = 0;
};

class Lun {
 public:
  virtual ~Lun() = default;
  virtual const std::string& name() const = 0;
  virtual Uuid id() const = 0;
  virtual uint32_t block_size() const = 0;
  virtual uint64_t block_count() const = 0;  // current size, changes on resize
  virtual Pool& pool() = 0;
  // A read-only LUN (a snapshot): every write-class call gets kReadOnly.
  // Fixed when the LUN is created.
  virtual bool read_only() const = 0;

  // All ranges are [lba, lba+count) in logical blocks; kOutOfRange past the
  // end (nothing done). Never-written and unmapped blocks read as zeros.
  virtual Status Read(uint64_t lba, uint64_t count, std::span<const iovec> iov) = 0;
  virtual Status Write(uint64_t lba, uint64_t count, std::span<const iovec> iov,
                       Durability durability) = 0;
  // Atomically: if the blocks equal `compare`, replace them with `write`.
  // On difference returns kMiscompare with miscompare_offset() = the byte
  // offset of the first differing byte, and writes nothing. Both buffers hold
  // count * block_size bytes.
  virtual Status CompareAndWrite(uint64_t lba, uint64_t count, const void* compare,
                                 const void* write, Durability durability) = 0;
  // Afterwards the range reads as zeros: whole grains (AUs at formats 1 and
  // 2) are deallocated, partial grains at the edges get zeros written.
  virtual Status ZeroRange(uint64_t lba, uint64_t count, Durability durability) = 0;
  // Deallocates the whole grains (AUs at formats 1 and 2) inside the range
  // (they then read as zeros); blocks of partially covered grains are left as
  // they are (SBC allows this).
  virtual Status Unmap(uint64_t lba, uint64_t count, Durability durability) = 0;
  virtual Status Flush() = 0;
  // Mapped/deallocated runs covering [lba, lba+count), in order, merged.
  virtual Result<std::vector<AllocationRun>> GetAllocationStatus(uint64_t lba,
                                                                 uint64_t count) = 0;
  // Thick provisioning: backs every unmapped grain (AU at formats 1 and 2)
  // touching the range with a fresh (zero) one, without changing what the
  // range reads. kNoSpace if the pool cannot hold them (nothing changed).
  virtual Status Allocate(uint64_t lba, uint64_t count, Durability durability) {
    (void)lba; (void)count; (void)durability;
    return Status(Code::kUnsupported, "Allocate not supported");
  }

  // Contiguous-buffer conveniences.
  Status Read(uint64_t lba, uint64_t count, void* buf) {
    iovec v{buf, count * block_size()};
    return Read(lba, count, std::span<const iovec>(&v, 1));
  }
  Status Write(uint64_t lba, uint64_t count, const void* buf, Durability d) {
    iovec v{const_cast<void*>(buf), count * block_size()};
    return Write(lba, count, std::span<const iovec>(&v, 1), d);
  }
};

}  // namespace cowstore::store
