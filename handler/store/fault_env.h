// SPDX-License-Identifier: Apache-2.0
// An in-memory Env for tests that models a disk with a volatile write cache.
//
// Every file keeps two images: what the OS would return now (`current`) and
// what is on stable storage (`durable`). Write/PunchHole change `current` and
// mark the 512-byte sectors they change as unsynced; Sync() makes them durable.
// PowerLoss() then decides, per unsynced sector, whether it reached the media
// (kept), did not (dropped), or was torn inside the sector. A file that
// Truncate() extends keeps its old durable size until the next Sync() (on a
// real file system the new size is inode metadata that fdatasync commits):
// PowerLoss() then drops the extension unless it keeps everything. Shrinking
// and locks take effect at once.
//
// Faults: Crash-after-N makes the N+1-th mutating call (and all later ones)
// fail with kIOError and change nothing, as if the machine had died there;
// FailAt injects one error (EIO or ENOSPC) at a chosen call.
//
// A failed Sync (injected, or on a dead disk) changes nothing by default: the
// unsynced sectors stay unsynced and a later Sync writes them. With
// SetFailedSync(kForget) it behaves as Linux does ("fsyncgate"): every sector
// unsynced at that moment becomes clean without reaching `durable` (it is
// "forgotten"): reads keep returning its new bytes, a later Sync does not
// write it, and a power cut takes it back to its durable bytes. Only
// File::DropCache (or PowerLoss) makes `current` equal `durable` again for
// forgotten sectors; a new write to one makes it unsynced as any other.
// Such a failure is then reported once more through every other open of the
// file (each File and File::SyncHandle), by its next Sync, as Linux reports
// a write-back error to each open file description (errseq).
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/sparse_bytes.h"

namespace cowstore::store {

class FaultInjectionEnv final : public Env {
 public:
  static constexpr uint64_t kSector = 512;
  enum class Loss : uint8_t {
    kDropAll,   // no unsynced sector survives
    kKeepAll,   // every unsynced sector survives (the OS flushed it just in time)
    kRandom,    // each unsynced sector independently survives or not
    kTear,      // kRandom, and some sectors survive only in part
  };
  enum class Op : uint8_t { kWrite, kSync, kPunch, kTruncate, kRead, kDropCache };
  // What a failed Sync does to the unsynced sectors (see above).
  enum class FailedSync : uint8_t { kRetain, kForget };

  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override;
  bool Exists(const std::string& path) override;
  // Every file's backing store is the one SetBacking() describes (default:
  // a filesystem with 1 PiB free, which no test pool outgrows).
  Result<BackingSpace> BackingOf(const std::string& path) override;
  void SetBacking(const BackingSpace& b);
  BackingSpace backing() const;
  // What its files answer to File::WritesAllocate (default false: a pool
  // here is not zeroed ahead, so a background thread's writes and syncs do
  // not shift the calls tests count and fail; tests of zeroing ahead, and
  // the crash test, turn it on). Set before the pool opens.
  void SetWritesAllocate(bool on) { writes_allocate_.store(on); }
  bool writes_allocate() const { return writes_allocate_.load(); }
  // What its files answer to File::DiscardZeroes (default true). False
  // models a discard that only frees (an RBD image's, a device's plain
  // BLKDISCARD): PunchHole then fills the range with a nonzero pattern
  // (kDiscardedByte, a write as any other for the power-cut model), so that
  // any read of freed space the store trusted to be zeros shows. Set before
  // the pool opens.
  static constexpr uint8_t kDiscardedByte = 0xd5;
  void SetDiscardZeroes(bool on) { discard_zeroes_.store(on); }
  bool discard_zeroes() const { return discard_zeroes_.load(); }
  // What its files answer to File::CanTruncate (default true: a pool file
  // the store sizes). False models a medium of fixed size, as a block
  // device: Truncate is refused (kUnsupported, changing nothing, no call
  // counted), and only ResizeMedium changes a file's size.
  void SetCanTruncate(bool on) { can_truncate_.store(on); }
  bool can_truncate() const { return can_truncate_.load(); }
  // What its files answer to File::AtomicWriteBytes (default 4096). Power
  // loss still tears at kSector, whatever this says: more than any medium.
  void SetAtomicWriteBytes(uint32_t bytes) { atomic_write_bytes_.store(bytes); }
  uint32_t atomic_write_bytes() const { return atomic_write_bytes_.load(); }
  // The administrator grows the medium at `path` (made if absent) to `size`
  // bytes, open or not (lvextend, a larger LUN): the new bytes read as
  // zeros and the size is durable at once. Never shrinks it.
  void ResizeMedium(const std::string& path, uint64_t size);

  // After `n` more mutating calls (Write, Sync, PunchHole, Truncate) the disk
  // is dead: later calls fail with kIOError and have no effect. A negative n
  // disarms it.
  void CrashAfter(int64_t n);
  bool crashed() const;
  // Disarms the countdown (as CrashAfter(-1)) and returns whether the disk
  // died before that, in one step: a pool's own thread (zeroing ahead,
  // zero_ahead.h) may take the last call the countdown allows at any time,
  // so checking crashed() and then disarming could miss a crash between.
  bool Disarm();
  // Number of mutating calls so far (to pick crash points).
  uint64_t mutating_calls() const;
  // The `nth` (0 = next) call of kind `op` fails with `code` (kIOError or
  // kNoSpace) without effect.
  void FailAt(Op op, uint64_t nth, Code code);
  void ClearFaults();
  // kRetain (the default) or kForget: from now on, for every file.
  void SetFailedSync(FailedSync mode);

  // Cuts power: unsynced sectors are dropped, kept or torn per `loss`, using
  // `seed`. Also clears the crashed state. Files must not be open.
  void PowerLoss(Loss loss, uint64_t seed);

  // Calls of kind `op` so far.
  uint64_t calls(Op op) const;
  // The ranges (offset, length) File::Prefetch was asked for since the last
  // call, in order, every file's together (at most kMaxPrefetchesKept);
  // clears them.
  static constexpr size_t kMaxPrefetchesKept = 1 << 16;
  std::vector<std::pair<uint64_t, uint64_t>> TakePrefetches();

  // Test helpers.
  void Delete(const std::string& path);
  // Flips bytes in the current and durable images (simulated media rot).
  void Corrupt(const std::string& path, uint64_t off, size_t n);
  uint64_t unsynced_sectors(const std::string& path) const;
  // Sectors a failed Sync forgot (clean, but `current` differs from `durable`).
  uint64_t forgotten_sectors(const std::string& path) const;
  // The durable image (what a power cut would leave of synced sectors).
  std::vector<uint8_t> DurableSnapshot(const std::string& path) const;
  // The current image (what a read returns now), bypassing locks.
  std::vector<uint8_t> Snapshot(const std::string& path) const;
  // Creates or replaces `path` with the n bytes at `data`, every one of them
  // durable (a disk image made elsewhere): no per-sector bookkeeping, and a
  // replaced file keeps its buffers, so a fuzzer installing megabytes per
  // input allocates (and page-faults) nothing after the first. The file must
  // not be open.
  void Install(const std::string& path, const uint8_t* data, size_t n);

 private:
  friend class FaultFile;
  struct Image {
    SparseBytes current, durable;  // sparse: test pools are mostly holes
    std::set<uint64_t> dirty;  // sector indexes written since the last sync
    std::set<uint64_t> forgotten;  // clean in the "cache", not durable (kForget)
    uint64_t durable_size = 0;  // the size a power cut leaves (<= current.size())
    uint64_t sync_errors = 0;   // failed syncs that forgot sectors (FaultFile::SyncAs)
    int shared_locks = 0;
    bool exclusive = false;
  };
  // Returns a status if this call must fail (consuming a fault), else ok.
  Status Gate(Op op);
  static void Resize(Image& im, uint64_t size);

  mutable std::mutex mu_;
  std::atomic<bool> writes_allocate_{false};
  std::atomic<bool> discard_zeroes_{true};
  std::atomic<bool> can_truncate_{true};
  std::atomic<uint32_t> atomic_write_bytes_{4096};
  std::map<std::string, std::shared_ptr<Image>> files_;
  int64_t crash_countdown_ = -1;
  bool crashed_ = false;
  uint64_t mutating_ = 0;
  struct Fault { Op op; uint64_t nth; Code code; };
  std::vector<Fault> faults_;
  uint64_t op_counts_[6] = {};
  std::vector<std::pair<uint64_t, uint64_t>> prefetches_;
  FailedSync failed_sync_ = FailedSync::kRetain;
  BackingSpace backing_{true, 1ull << 50, 1ull << 50};
};

}  // namespace cowstore::store
