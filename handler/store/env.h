// SPDX-License-Identifier: Apache-2.0
// The store's only door to the disk, in the manner of LevelDB's Env: every
// read, write, sync, hole punch and lock goes through File, so tests can swap
// in FaultInjectionEnv (fault_env.h) to cut power, tear writes, or inject EIO
// and ENOSPC at chosen calls.
//
// Thread safety: a File is safe for concurrent use (positional I/O only).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <ctime>
#include <cstdint>
#include <memory>
#include <string>

#include "handler/store/status.h"

namespace cowstore::store {

// What holds a pool's bytes, for thin on thin: a sparse pool file takes
// space from its filesystem as AUs are first written, so the filesystem's
// free space bounds how far the pool can really grow; a block device is the
// pool's whole, already (the pool cannot outgrow it).
struct BackingSpace {
  bool grows = true;         // a file that allocates as it is written; false: a block device
  uint64_t size_bytes = 0;   // the filesystem's size, or the device's
  // What the pool may still take: the filesystem's free bytes available to
  // an unprivileged writer (statvfs f_bavail, so root's reserve is left to
  // the host), or for a device its size.
  uint64_t free_bytes = 0;
};

class File {
 public:
  virtual ~File() = default;
  // Reads exactly n bytes at off; bytes beyond the end of the file read as
  // zeros (a pool file is sparse and may be shorter than its declared size).
  virtual Status Read(uint64_t off, size_t n, void* buf) = 0;
  // Reads the bytes [off, off + total length) into the buffers, as Read.
  virtual Status ReadV(uint64_t off, const iovec* iov, size_t n) {
    for (size_t i = 0; i < n; i++) {
      Status s = Read(off, iov[i].iov_len, iov[i].iov_base);
      if (!s.ok()) return s;
      off += iov[i].iov_len;
    }
    return Status::Ok();
  }
  // Reads as ReadV, for a read that is not part of a sequential stream
  // through the file (a clone's own grains read between the source's data
  // in place). The OS keeps its readahead state per open file, and such
  // reads between a stream's reads make it lose the stream: a clone's
  // 1 MiB reads after 5 % divergence took 0.10 s per 256 MiB with its
  // scattered reads on the same descriptor, 0.09 s on a second one (raw:
  // 0.08 s). PosixFile serves them through a second descriptor of the same
  // file; a File that has none reads them as ReadV. Pure, as DropCache.
  virtual Status ReadAside(uint64_t off, const iovec* iov, size_t n) = 0;
  // A hint that [off, off + n) will be read soon: starts reading it into the
  // OS's cache and returns without waiting, through ReadAside's handle (it
  // is such a read, early). Errors are ignored (the read that follows meets
  // them). Pure, as DropCache, so that a File wrapping another cannot
  // forget to forward it (read-ahead, read_ahead.h, would quietly stop
  // behind such a wrapper).
  virtual void Prefetch(uint64_t off, uint64_t n) = 0;
  // Writes exactly n bytes at off, extending the file if needed. Not durable
  // until Sync(). ENOSPC -> kNoSpace, other errors -> kIOError.
  virtual Status Write(uint64_t off, size_t n, const void* buf) = 0;
  // fdatasync: every completed Write is on stable storage when it returns.
  virtual Status Sync() = 0;
  // A second way to Sync this file, through an open of its own, or
  // kUnsupported. Why: Linux reports a failed write-back once per open file
  // (errseq): of two fdatasyncs running at once on one descriptor, one may
  // take the error and the other return success for pages it needed. So a
  // sync that runs beside the commits' (zeroing ahead's: Core's
  // NewSpaceLocked) goes through a handle, and the commits' own sync still
  // sees every error since its last. Without one, the store does without
  // what would need it (zeroing ahead). Pure, so that a File wrapping
  // another decides: forward it, or answer NoSyncHandle() (its pool then
  // zeroes nothing ahead).
  class SyncHandle {
   public:
    virtual ~SyncHandle() = default;
    // As File::Sync: every Write completed before the call is durable.
    virtual Status Sync() = 0;
  };
  virtual Result<std::unique_ptr<SyncHandle>> NewSyncHandle() = 0;
  static Status NoSyncHandle() { return Status(Code::kUnsupported, "no second sync handle"); }
  // Makes later reads come from the device rather than from the OS's cache:
  // flushes what is dirty (as Sync), then drops the file's cached pages.
  // Why: when fdatasync fails (EIO), Linux marks the pages it could not
  // write clean yet keeps their new bytes cached ("fsyncgate"): reads return
  // bytes that never reached the disk, and a later fdatasync reports success
  // without writing them. Core::Open calls this before it reads anything, so
  // a pool whose sync failed is never reopened from such a cache
  // (docs/design/store.md, "Commit protocol"). An error: the open fails.
  // Pure, so that a File wrapping another cannot forget to forward it.
  virtual Status DropCache() = 0;
  virtual Result<uint64_t> Size() = 0;
  // Sets the size of a File that CanTruncate() (grow sparse or shrink).
  // kUnsupported on any other (a block device).
  virtual Status Truncate(uint64_t size) = 0;
  // Deallocates [off, off+n) (the file keeps its size). If DiscardZeroes(),
  // the range reads as zeros afterwards; else its bytes are undefined (the
  // old ones, zeros, anything) until written. The store frees space with it;
  // where it needs zeros it calls ZeroFill (zero_fill.h), which writes them
  // on a File whose discard does not zero.
  virtual Status PunchHole(uint64_t off, uint64_t n) = 0;
  // True if PunchHole leaves zeros (store-v3.md 3.8, the `discard_zeroes`
  // trait). PosixFile: true, on any file or device (it falls back to
  // FALLOC_FL_ZERO_RANGE, then to written zeros). False: a File that only
  // frees, as an RBD image's discard of part of an object, or a device's
  // plain BLKDISCARD; the store then trusts no freed grain to read as zeros
  // (it writes the rest of a fresh grain it writes in part, and zeros into
  // grains it maps without data). Pure, as DropCache, so that a File
  // wrapping another cannot forget to forward it.
  virtual bool DiscardZeroes() const = 0;
  // True if the store sizes this File itself (store-v3.md 3.8, the
  // `can_truncate` trait): a regular file, which Truncate grows and which a
  // pool's Create and Grow extend (and sync) before any superblock declares
  // the size, and which must be empty before a Create. False where the size
  // is the medium's own (a block device; later an RBD image): Create takes
  // the medium's size or less, Grow takes what its administrator added
  // (lvextend, a larger LUN), Truncate answers kUnsupported, and a medium
  // that holds no superblock may hold anything else. Pure, as DropCache.
  virtual bool CanTruncate() const = 0;
  // The largest aligned write the medium never tears into anything but old
  // and new whole units, and so never damages bytes outside the unit it
  // writes (store-v3.md 3.8, the `atomic_write_bytes` trait): a power of
  // two. PosixFile: a device's physical block size up to 4096 (a 512e
  // disk's 4096, whose 512-byte writes are read-modify-writes of 4096;
  // DeviceAtomicWriteBytes); 4096 on a regular file (its pages). The store
  // writes each superblock slot alone in its 4096 bytes and lays journal
  // restarts out in this unit, so a medium declaring more is refused for
  // writing (WriteUnitRule, names.h). Pure, as DropCache.
  virtual uint32_t AtomicWriteBytes() const = 0;
  // True if the first write into a range never written, or punched, makes
  // the storage allocate there at a cost a writer's sync pays (a sparse file
  // on a file system that journals its extents: ext4, XFS). The store then
  // zeroes free space ahead of its allocator (zero_ahead.h). False
  // for a block device. Pure, as DropCache, so that a File wrapping another
  // cannot forget to forward it (a pool behind such a wrapper would quietly
  // behave otherwise than behind the file it wraps).
  virtual bool WritesAllocate() const = 0;
  // The space behind this file (see BackingSpace). kUnsupported where the
  // Env cannot tell; the store then makes no thin-on-thin check.
  virtual Result<BackingSpace> Backing() {
    return Status(Code::kUnsupported, "backing space unknown");
  }
};

class Env {
 public:
  virtual ~Env() = default;
  enum class Mode : uint8_t { kReadOnly, kReadWrite, kCreate };
  // kCreate creates the file if it does not exist (never truncates).
  // The returned file holds an advisory lock on the path for its lifetime:
  // exclusive for kReadWrite/kCreate, shared for kReadOnly. kBusy if another
  // holder conflicts (another process, or another File in this process).
  virtual Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) = 0;
  virtual bool Exists(const std::string& path) = 0;
  // The space behind `path` before a pool is made there: a block device's
  // size, or the free space of the filesystem that holds (or would hold)
  // the file. Opens nothing that could block. kUnsupported where unknown.
  virtual Result<BackingSpace> BackingOf(const std::string& path) {
    (void)path;
    return Status(Code::kUnsupported, "backing space unknown");
  }
  // Wall-clock time, seconds since the epoch (a snapshot's creation time).
  // Tests may override it to get deterministic times.
  virtual uint64_t NowUnixSeconds() { return static_cast<uint64_t>(std::time(nullptr)); }

  // File::Sync and File::DropCache calls (each an fdatasync) made so far by
  // the files this Env opened (every call, failed ones too). Benchmarks and tests read the difference over a run to
  // see how many operations shared one fdatasync.
  uint64_t sync_calls() const { return sync_calls_.load(std::memory_order_relaxed); }

 protected:
  // Each implementation's File::Sync and DropCache call this once per call.
  void CountSync() { sync_calls_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> sync_calls_{0};
};

// The process-wide POSIX Env (pread/pwrite/fdatasync/fallocate/flock).
Env* DefaultEnv();

// What DefaultEnv's File::AtomicWriteBytes answers for a block device whose
// kernel reports these physical and logical block sizes (0: the ioctl did
// not answer): the physical size, else the logical one, else 4096, and at
// most 4096. The devices that report more are virtual ones whose
// read-modify-write is transactional, not a disk's that a cut can tear: a
// ZFS zvol reports its volblocksize (8 or 16 KiB), and refusing it would
// refuse the home NAS's usual place for a pool.
uint32_t DeviceAtomicWriteBytes(uint32_t physical, uint32_t logical);

}  // namespace cowstore::store
