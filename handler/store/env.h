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
#include <cstdint>
#include <memory>
#include <string>

#include "handler/store/status.h"

namespace cowstore::store {

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
  // Writes exactly n bytes at off, extending the file if needed. Not durable
  // until Sync(). ENOSPC -> kNoSpace, other errors -> kIOError.
  virtual Status Write(uint64_t off, size_t n, const void* buf) = 0;
  // fdatasync: every completed Write is on stable storage when it returns.
  virtual Status Sync() = 0;
  virtual Result<uint64_t> Size() = 0;
  // Sets the size of a regular file (grow sparse or shrink). kUnsupported on
  // block devices.
  virtual Status Truncate(uint64_t size) = 0;
  // Deallocates [off, off+n); it reads as zeros afterwards and the file keeps
  // its size. Falls back to writing zeros where the file system cannot punch.
  virtual Status PunchHole(uint64_t off, uint64_t n) = 0;
  virtual bool IsBlockDevice() const = 0;
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

  // File::Sync calls made so far by the files this Env opened (every call,
  // failed ones too). Benchmarks and tests read the difference over a run to
  // see how many operations shared one fdatasync.
  uint64_t sync_calls() const { return sync_calls_.load(std::memory_order_relaxed); }

 protected:
  // Each implementation's File::Sync calls this once per call.
  void CountSync() { sync_calls_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> sync_calls_{0};
};

// The process-wide POSIX Env (pread/pwrite/fdatasync/fallocate/flock).
Env* DefaultEnv();

}  // namespace cowstore::store
