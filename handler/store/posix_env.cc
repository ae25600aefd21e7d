// SPDX-License-Identifier: Apache-2.0
// POSIX implementation of Env for regular files and block devices.
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/names.h"  // kSuperblockSlot

namespace cowstore::store {
namespace {

Status Errno(const char* what, const std::string& path, int err) {
  Code code = (err == ENOSPC || err == EDQUOT) ? Code::kNoSpace : Code::kIOError;
  return Status(code, std::string(what) + " " + path + ": " + std::strerror(err));
}

BackingSpace FromStatvfs(const struct statvfs& v) {
  BackingSpace b;
  b.grows = true;
  b.size_bytes = static_cast<uint64_t>(v.f_blocks) * v.f_frsize;
  b.free_bytes = static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
  return b;
}

BackingSpace OfDevice(uint64_t size) {
  BackingSpace b;
  b.grows = false;
  b.size_bytes = size;
  b.free_bytes = size;
  return b;
}

class PosixEnv;
void CountSyncOf(PosixEnv* env);

// fdatasync of `fd`, counted as every sync of `env` is.
Status DataSync(PosixEnv* env, int fd, const std::string& path) {
  CountSyncOf(env);
  if (::fdatasync(fd) != 0) return Errno("fdatasync", path, errno);
  return Status::Ok();
}

// A second open, read-only, of the file behind `fd` (-1 and errno if it
// fails). Through the descriptor, not the path: it is the same file even if
// the path was replaced since, and reopening a regular file or a block
// device already open does not block. Its read-ahead state and its record
// of write-back errors are its own.
int ReopenReadOnly(int fd) { return ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDONLY | O_CLOEXEC); }

// A block device's unit of atomic writes (File::AtomicWriteBytes): its
// physical block size, below which a write is the drive's read-modify-write
// of the whole block (a 512e disk reports 512 logical, 4096 physical), as
// DeviceAtomicWriteBytes (env.h) bounds it.
uint32_t DeviceAtomicBytes(int fd) {
  unsigned int physical = 0;
  if (::ioctl(fd, BLKPBSZGET, &physical) != 0) physical = 0;
  int logical = 0;
  if (::ioctl(fd, BLKSSZGET, &logical) != 0 || logical < 0) logical = 0;
  return DeviceAtomicWriteBytes(physical, static_cast<uint32_t>(logical));
}

// Whether fd's file system reports holes exactly through SEEK_DATA: data
// wherever a read could return anything but zeros, dirty cached pages
// included. The ones the store is run on and whose SEEK_DATA is built on
// their extent maps and page cache (ext4, XFS, tmpfs); elsewhere PunchHole
// punches without asking.
bool HolesExact(int fd) {
  struct statfs fs;
  if (::fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:
    case XFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
      return true;
    default:
      return false;
  }
}

class PosixFile final : public File {
 public:
  // `aside_fd`: a second open of the same file for ReadAside and Prefetch
  // (its own readahead state), or `fd` itself.
  PosixFile(PosixEnv* env, int fd, int aside_fd, std::string path, bool blockdev)
      : env_(env), fd_(fd), aside_fd_(aside_fd), path_(std::move(path)), blockdev_(blockdev),
        holes_exact_(!blockdev && HolesExact(fd)), atomic_bytes_(blockdev ? DeviceAtomicBytes(fd) : 4096) {}
  ~PosixFile() override {
    if (aside_fd_ != fd_) ::close(aside_fd_);  // holds no lock: flock's is fd_'s open file
    ::close(fd_);                              // also drops the flock
  }

  Status Read(uint64_t off, size_t n, void* buf) override {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("pread", path_, errno);
      }
      if (r == 0) {  // past EOF: a sparse tail reads as zeros
        std::memset(p, 0, n);
        return Status::Ok();
      }
      p += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<size_t>(r);
    }
    return Status::Ok();
  }

  Status ReadV(uint64_t off, const iovec* iov, size_t n) override { return ReadVFrom(fd_, off, iov, n); }
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override {
    return ReadVFrom(aside_fd_, off, iov, n);
  }

  Status Write(uint64_t off, size_t n, const void* buf) override {
    const auto* p = static_cast<const char*>(buf);
    while (n > 0) {
      ssize_t r = ::pwrite(fd_, p, n, static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("pwrite", path_, errno);
      }
      p += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<size_t>(r);
    }
    return Status::Ok();
  }

  // WILLNEED: the kernel queues reads of the range's uncached pages and
  // returns (it may wait for room in the device's queue, not for the data).
  void Prefetch(uint64_t off, uint64_t n) override {
    (void)::posix_fadvise(aside_fd_, static_cast<off_t>(off), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
  }

  Status Sync() override { return DataSync(env_, fd_, path_); }

  // A new open of the same file (ReopenReadOnly, as the aside one):
  // fdatasync needs no write access, and its errors are its own.
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override {
    struct Handle final : SyncHandle {
      Handle(PosixEnv* e, int f, std::string p) : env(e), fd(f), path(std::move(p)) {}
      ~Handle() override { ::close(fd); }
      Status Sync() override { return DataSync(env, fd, path); }
      PosixEnv* env;
      int fd;
      const std::string path;  // a copy: a handle needs nothing of its File to sync
    };
    const int fd = ReopenReadOnly(fd_);
    if (fd < 0) return Errno("open a sync handle of", path_, errno);
    try {
      return std::unique_ptr<SyncHandle>(new Handle(env_, fd, path_));
    } catch (...) {
      ::close(fd);
      throw;
    }
  }

  // fdatasync, then POSIX_FADV_DONTNEED over the whole file: the kernel
  // drops every clean cached page, so the next read of any of them comes
  // from the device. That includes pages a failed fdatasync (of any process
  // since boot) marked clean without writing. The sync first because dirty
  // pages are not dropped: they are written (or fail, and so does this).
  // A block device needs no BLKFLSBUF: fadvise works on the device's own
  // page cache (the bdev inode's mapping) just as on a file's, and
  // BLKFLSBUF would drop the same pages (invalidate_bdev) but needs
  // CAP_SYS_ADMIN. Neither drops a page someone has mapped or locked at
  // that instant; nothing but the store maps a pool.
  Status DropCache() override {
    CountSyncOf(env_);  // an fdatasync like Sync's: benchmarks count what an open costs
    if (::fdatasync(fd_) != 0) {
      int err = errno;
      // EINVAL: a file that does not support syncing (nothing of ours can
      // be dirty there). Not EROFS: a plain read-only mount syncs fine (0),
      // and EROFS is what ext4 and btrfs answer once they have aborted,
      // having lost writes, whose bytes may still be in the cache.
      if (err != EINVAL) return Errno("fdatasync", path_, err);
    }
    int rc = ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    if (rc != 0) return Errno("posix_fadvise(DONTNEED)", path_, rc);
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    if (blockdev_) {
      uint64_t sz = 0;
      if (::ioctl(fd_, BLKGETSIZE64, &sz) != 0) return Errno("BLKGETSIZE64", path_, errno);
      return sz;
    }
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Errno("fstat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  Status Truncate(uint64_t size) override {
    if (blockdev_) return Status(Code::kUnsupported, "cannot resize a block device");
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno("ftruncate", path_, errno);
    return Status::Ok();
  }

  Status PunchHole(uint64_t off, uint64_t n) override {
    if (n == 0 || HoldsNoData(off, n)) return Status::Ok();
    if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                    static_cast<off_t>(n)) == 0)
      return Status::Ok();
    int err = errno;
    if (err != EOPNOTSUPP && err != ENOSYS && err != EINVAL) return Errno("fallocate", path_, err);
    if (::fallocate(fd_, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                    static_cast<off_t>(n)) == 0)
      return Status::Ok();
    // Last resort: write zeros.
    std::vector<char> zeros(std::min<uint64_t>(n, 1u << 20));
    while (n > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, zeros.size()));
      Status s = Write(off, k, zeros.data());
      if (!s.ok()) return s;
      off += k;
      n -= k;
    }
    return Status::Ok();
  }

  // Whether [off, off + n) is a hole already, so it reads as zeros without
  // a punch. A punch, even of a hole, changes the inode, and the next
  // fdatasync then writes that metadata too: the background punches of
  // 1 MiB UNMAPs of mapped, never written space (commit_bench's zero and
  // unmap rows) made the pool's syncs ~0.45 ms on average instead of
  // ~0.30 ms (ext4), and cost the thinner ~4,500 fallocate calls a second.
  // Only where SEEK_DATA is known to count everything that does not read
  // as zeros (written, delayed or cached data) as data (holes_exact_): a
  // file system that reports a hole over dirty data (as OpenZFS did, issue
  // 15526) would keep stale bytes in a free grain.
  bool HoldsNoData(uint64_t off, uint64_t n) const {
    if (!holes_exact_) return false;
    const off_t data = ::lseek(fd_, static_cast<off_t>(off), SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // no data at or after off
    return static_cast<uint64_t>(data) >= off + n;
  }

  // A regular file: the store sizes it (env.h). A device: its own size.
  bool CanTruncate() const override { return !blockdev_; }
  uint32_t AtomicWriteBytes() const override { return atomic_bytes_; }
  // PunchHole zeroes on a file and on a device alike: a device's
  // FALLOC_FL_PUNCH_HOLE is a write-zeroes without fallback (it fails where
  // the device cannot, and then FALLOC_FL_ZERO_RANGE or written zeros do it).
  bool DiscardZeroes() const override { return true; }
  // A regular file: its free space is holes (PunchHole).
  bool WritesAllocate() const override { return !blockdev_; }

  Result<BackingSpace> Backing() override {
    if (blockdev_) {
      auto sz = Size();
      if (!sz.ok()) return sz.status();
      return OfDevice(*sz);
    }
    struct statvfs v;
    if (::fstatvfs(fd_, &v) != 0) return Errno("fstatvfs", path_, errno);
    return FromStatvfs(v);
  }

 private:
  Status ReadVFrom(int fd, uint64_t off, const iovec* iov, size_t n) {
    std::vector<iovec> v(iov, iov + n);
    size_t i = 0;
    while (i < v.size()) {
      int cnt = static_cast<int>(std::min<size_t>(v.size() - i, IOV_MAX));
      ssize_t r = ::preadv(fd, v.data() + i, cnt, static_cast<off_t>(off));
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno("preadv", path_, errno);
      }
      if (r == 0) {  // past EOF: zeros
        for (; i < v.size(); i++) std::memset(v[i].iov_base, 0, v[i].iov_len);
        return Status::Ok();
      }
      off += static_cast<uint64_t>(r);
      size_t left = static_cast<size_t>(r);
      while (i < v.size() && left >= v[i].iov_len) left -= v[i++].iov_len;
      if (left > 0) {
        v[i].iov_base = static_cast<char*>(v[i].iov_base) + left;
        v[i].iov_len -= left;
      }
    }
    return Status::Ok();
  }

  PosixEnv* env_;
  int fd_;
  int aside_fd_;
  std::string path_;
  bool blockdev_;
  bool holes_exact_;  // HoldsNoData may trust SEEK_DATA here (HolesExact)
  uint32_t atomic_bytes_;  // AtomicWriteBytes: a file's page, a device's physical block
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<File>> OpenLocked(const std::string& path, Mode mode) override {
    int flags = O_CLOEXEC | (mode == Mode::kReadOnly ? O_RDONLY : O_RDWR);
    if (mode == Mode::kCreate) flags |= O_CREAT;
    int fd = ::open(path.c_str(), flags, 0600);
    if (fd < 0) {
      int err = errno;
      if (err == ENOENT) return Status(Code::kNotFound, "no pool at " + path);
      return Errno("open", path, err);
    }
    if (::flock(fd, (mode == Mode::kReadOnly ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status(Code::kBusy, path + " is in use by another process");
      return Errno("flock", path, err);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return Errno("fstat", path, err);
    }
    // The second open (File::ReadAside): ReopenReadOnly. Without /proc (or
    // for any other kind of file) the one descriptor serves both: only
    // slower.
    int aside = -1;
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) aside = ReopenReadOnly(fd);
    if (aside < 0) aside = fd;
    return std::unique_ptr<File>(new PosixFile(this, fd, aside, path, S_ISBLK(st.st_mode)));
  }

  bool Exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  Result<BackingSpace> BackingOf(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISBLK(st.st_mode)) {
      // O_NONBLOCK: sizing a device must not wait on it.
      int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) return Errno("open", path, errno);
      uint64_t sz = 0;
      int rc = ::ioctl(fd, BLKGETSIZE64, &sz);
      int err = errno;
      ::close(fd);
      if (rc != 0) return Errno("BLKGETSIZE64", path, err);
      return OfDevice(sz);
    }
    // The file, or (not made yet) the directory that will hold it.
    std::string at = path;
    if (::stat(at.c_str(), &st) != 0) {
      size_t slash = at.rfind('/');
      at = slash == std::string::npos ? "." : (slash == 0 ? "/" : at.substr(0, slash));
    }
    struct statvfs v;
    if (::statvfs(at.c_str(), &v) != 0) return Errno("statvfs", at, errno);
    return FromStatvfs(v);
  }

 private:
  friend void CountSyncOf(PosixEnv* env);
};

void CountSyncOf(PosixEnv* env) { env->CountSync(); }

}  // namespace

uint32_t DeviceAtomicWriteBytes(uint32_t physical, uint32_t logical) {
  const uint32_t said = physical != 0 ? physical : logical;
  constexpr uint32_t kCap = kSuperblockSlot;  // what WriteUnitRule accepts
  return said == 0 ? 4096 : std::min<uint32_t>(said, kCap);
}

Env* DefaultEnv() {
  static PosixEnv env;
  return &env;
}

}  // namespace cowstore::store
