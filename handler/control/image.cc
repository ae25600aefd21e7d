// SPDX-License-Identifier: Apache-2.0
#include "handler/control/image.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "handler/store/all_zero.h"
#include "handler/store/names.h"
#include "handler/store/random.h"

namespace cowstore::control {
namespace {

using store::AllZero;
using store::Code;
using store::Status;

constexpr size_t kChunk = 1u << 20;

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status Errno(const std::string& what, int e = errno) {
  return Status(e == ENOENT ? Code::kNotFound : Code::kIOError, what + ": " + std::strerror(e));
}

const char* KindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

Status NotAnImage(const std::string& path, mode_t m) {
  return Status(Code::kInvalidArgument,
                path + " is " + KindOf(m) + ", neither a regular file nor a block device");
}

Status SymlinkRefused(const std::string& path) {
  return Status(Code::kInvalidArgument, path + " is a symbolic link: cowctl does not follow links to images "
                                               "(it runs as root); give the path of the file itself");
}

Status PoolsOwn(const std::string& path) {
  return Status(Code::kInvalidArgument, path + " is this pool's own file or device: refusing to use it as an image");
}

Status Cancelled(const std::string& what) { return Status(Code::kIOError, what + " cancelled"); }

// Size of a regular file or block device open at `fd`.
store::Result<uint64_t> SizeOf(int fd, const struct stat& st, const std::string& path) {
  if (S_ISBLK(st.st_mode)) {
    uint64_t sz = 0;
    if (::ioctl(fd, BLKGETSIZE64, &sz) != 0) return Errno("cannot size " + path);
    return sz;
  }
  return static_cast<uint64_t>(st.st_size);
}

// Back to blocking I/O once the file is known to be a file or a device.
Status ClearNonblock(int fd, const std::string& path) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) return Errno("cannot set up " + path);
  return Status::Ok();
}

// Opens an import source: the last component not followed, non-blocking (a
// FIFO or a device that waits in open() is refused, not waited for), only a
// regular file or a block device, never the pool itself.
Status OpenSource(const std::string& path, const ImageOptions& o, Fd* fd, uint64_t* size) {
  fd->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd->fd < 0) {
    int e = errno;
    struct stat lst;
    if (e == ELOOP && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) return SymlinkRefused(path);
    return Errno("cannot open " + path, e);
  }
  struct stat st;
  if (::fstat(fd->fd, &st) != 0) return Errno("cannot stat " + path);
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) return NotAnImage(path, st.st_mode);
  if (o.pool_file.Is(st)) return PoolsOwn(path);
  Status s = ClearNonblock(fd->fd, path);
  if (!s.ok()) return s;
  auto sz = SizeOf(fd->fd, st, path);
  if (!sz.ok()) return sz.status();
  *size = sz.value();
  return Status::Ok();
}

Status WriteAll(int fd, const char* p, size_t n, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Errno("writing " + path + " failed", w < 0 ? errno : EIO);
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

bool IsCancelled(const ImageOptions& o) { return o.cancelled && o.cancelled(); }

Status CopyIn(store::Lun& lun, int fd, const std::string& path, uint64_t src_size, uint32_t bs,
              const ImageOptions& o, CopyStats* stats) {
  std::vector<char> buf(kChunk);
  // Zeros are skipped per unit of sharing (the grain; the AU at formats 1
  // and 2): a piece written maps that much, so a larger piece would map the
  // zero grains beside its data. It divides 1 MiB, so pieces stay aligned to
  // it; a grain below the block size is skipped a block at a time.
  const size_t piece = std::clamp<size_t>(lun.pool().grain(), bs, kChunk);
  for (uint64_t off = 0; off < src_size; off += kChunk) {
    if (IsCancelled(o)) return Cancelled("import of " + path);
    size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, src_size - off));
    size_t got = 0;
    while (got < want) {
      ssize_t n = ::pread(fd, buf.data() + got, want - got, static_cast<off_t>(off + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno("reading " + path + " failed");
      if (n == 0) return Status(Code::kIOError, "reading " + path + " failed: the file shrank");
      got += static_cast<size_t>(n);
    }
    size_t padded = (want + bs - 1) / bs * bs;
    std::fill(buf.begin() + static_cast<long>(want), buf.begin() + static_cast<long>(padded), 0);
    // Pieces of zeros are skipped (a new LUN reads zeros there already,
    // unmapped); runs of other pieces become one write.
    size_t run_start = 0, run_len = 0;
    auto flush_run = [&]() -> Status {
      if (run_len == 0) return Status::Ok();
      Status s = lun.Write((off + run_start) / bs, run_len / bs, buf.data() + run_start, store::Durability::kBuffered);
      stats->written += run_len;
      run_len = 0;
      return s;
    };
    for (size_t p = 0; p < padded; p += piece) {
      size_t n = std::min(piece, padded - p);
      if (AllZero(buf.data() + p, n)) {
        Status s = flush_run();
        if (!s.ok()) return s;
        stats->skipped += n;
      } else {
        if (run_len == 0) run_start = p;
        run_len += n;
      }
    }
    Status s = flush_run();
    if (!s.ok()) return s;
    if (o.progress) o.progress(o.progress_ctx, off + want, src_size);
  }
  return lun.Flush();
}

// Writes the LUN at `fd` (a fresh file, or a device written in full).
Status CopyOut(store::Lun& lun, int fd, bool blockdev, const std::string& path, const ImageOptions& o,
               CopyStats* stats) {
  const uint32_t bs = lun.block_size();
  const uint64_t blocks = lun.block_count();
  const uint64_t bytes = blocks * bs;
  auto runs = lun.GetAllocationStatus(0, blocks);
  if (!runs.ok()) return runs.status();
  const uint64_t chunk_blocks = kChunk / bs;
  std::vector<char> buf(kChunk);
  const std::vector<char> zeros(kChunk, 0);
  for (const auto& run : runs.value()) {
    for (uint64_t lba = run.lba; lba < run.lba + run.count; lba += chunk_blocks) {
      if (IsCancelled(o)) return Cancelled("export to " + path);
      uint64_t n = std::min<uint64_t>(chunk_blocks, run.lba + run.count - lba);
      size_t len = static_cast<size_t>(n * bs);
      const char* data = nullptr;
      if (run.mapped) {
        Status s = lun.Read(lba, n, buf.data());
        if (!s.ok()) return s;
        data = buf.data();
        if (!blockdev && AllZero(data, len)) data = nullptr;
      } else if (blockdev) {
        data = zeros.data();  // a device keeps its old contents otherwise
      }
      if (data) {
        Status s = WriteAll(fd, data, len, lba * bs, path);
        if (!s.ok()) return s;
        stats->written += len;
      } else {
        stats->skipped += len;
      }
      if (o.progress) o.progress(o.progress_ctx, lba + n, blocks);
    }
  }
  if (!blockdev && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return Errno("cannot size " + path);
  if (::fsync(fd) != 0) return Errno("fsync " + path + " failed");
  return Status::Ok();
}

// A block device, written in place: only with force, never while in use
// (O_EXCL: EBUSY when mounted or held exclusively), never the pool's own.
Status ExportToDevice(store::Lun& lun, const std::string& path, const ImageOptions& o, CopyStats* stats) {
  if (!o.force) {
    return Status(Code::kInvalidArgument, path + " is a block device: pass --force to overwrite it");
  }
  Fd out(::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  if (out.fd < 0) {
    int e = errno;
    if (e == EBUSY) {
      return Status(Code::kInvalidArgument,
                    path + " is in use (mounted, or held by another program): refusing to overwrite it");
    }
    if (e == ELOOP) return SymlinkRefused(path);
    return Errno("cannot open " + path, e);
  }
  struct stat st;
  if (::fstat(out.fd, &st) != 0) return Errno("cannot stat " + path);
  if (!S_ISBLK(st.st_mode)) return Status(Code::kInvalidArgument, path + " changed while being opened");
  if (o.pool_file.Is(st)) return PoolsOwn(path);
  Status s = ClearNonblock(out.fd, path);
  if (!s.ok()) return s;
  auto sz = SizeOf(out.fd, st, path);
  if (!sz.ok()) return sz.status();
  const uint64_t bytes = lun.block_count() * lun.block_size();
  if (sz.value() < bytes) {
    return Status(Code::kInvalidArgument, path + " is smaller than the LUN (" + std::to_string(bytes) + " bytes)");
  }
  return CopyOut(lun, out.fd, true, path, o, stats);
}

std::string RandomSuffix() {
  static const char* kChars = "abcdefghijklmnopqrstuvwxyz0123456789";
  uint8_t bytes[8];
  store::RandomBytes(bytes, sizeof bytes);
  std::string s;
  for (uint8_t b : bytes) s += kChars[b % 36];
  return s;
}

// A regular file: written as a temporary file in the same directory, then
// renamed over the name (or linked to it when it must not exist).
Status ExportToFile(store::Lun& lun, const std::string& path, bool exists, const ImageOptions& o,
                    CopyStats* stats) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return Status(Code::kInvalidArgument, path + " does not name a file");
  }
  if (exists && !o.force) return Status(Code::kAlreadyExists, path + " exists: pass --force to overwrite it");
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd < 0) return Errno("cannot open directory " + dir);
  std::string tmp;
  Fd out;
  for (int attempt = 0; attempt < 16 && out.fd < 0; ++attempt) {
    tmp = "." + base.substr(0, 200) + ".cowctl-" + RandomSuffix();
    out.fd = ::openat(d.fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out.fd < 0 && errno != EEXIST) return Errno("cannot create a file in " + dir);
  }
  if (out.fd < 0) return Status(Code::kIOError, "cannot create a temporary file in " + dir);
  auto fail = [&](Status s) {
    (void)::unlinkat(d.fd, tmp.c_str(), 0);
    return s;
  };
  // Exactly the mode asked for, whatever the umask.
  if (::fchmod(out.fd, o.mode) != 0) return fail(Errno("cannot set the mode of " + path));
  Status s = CopyOut(lun, out.fd, false, path, o, stats);
  if (!s.ok()) return fail(s);
  // The name may have changed since it was looked at: never replace the pool
  // (a rename over its entry would leave the pool's path naming the image).
  struct stat now;
  bool there = ::fstatat(d.fd, base.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0;
  if (there && o.pool_file.Is(now)) return fail(PoolsOwn(path));
  if (there && !o.force) return fail(Status(Code::kAlreadyExists, path + " exists: pass --force to overwrite it"));
  if (o.force) {
    if (::renameat(d.fd, tmp.c_str(), d.fd, base.c_str()) != 0) return fail(Errno("cannot rename the copy to " + path));
  } else {
    // linkat fails with EEXIST rather than replace what appeared meanwhile.
    if (::linkat(d.fd, tmp.c_str(), d.fd, base.c_str(), 0) != 0) {
      int e = errno;
      if (e == EEXIST) return fail(Status(Code::kAlreadyExists, path + " exists: pass --force to overwrite it"));
      return fail(Errno("cannot link the copy to " + path, e));
    }
    (void)::unlinkat(d.fd, tmp.c_str(), 0);
  }
  if (::fsync(d.fd) != 0) return Errno("fsync of directory " + dir + " failed");
  return Status::Ok();
}

}  // namespace

bool PoolFile::Is(const struct stat& st) const {
  if (!known) return false;
  if (device) return S_ISBLK(st.st_mode) && st.st_rdev == rdev;
  return S_ISREG(st.st_mode) && st.st_dev == dev && st.st_ino == ino;
}

store::Result<PoolFile> PoolFileAt(const std::string& pool_path) {
  struct stat st;
  if (::stat(pool_path.c_str(), &st) != 0) return Errno("cannot stat pool " + pool_path);
  PoolFile f;
  f.known = true;
  f.device = S_ISBLK(st.st_mode);
  f.dev = st.st_dev;
  f.ino = st.st_ino;
  f.rdev = st.st_rdev;
  return f;
}

std::optional<mode_t> ParseMode(const std::string& v) {
  if (v.empty() || v.size() > 5) return std::nullopt;
  mode_t m = 0;
  for (char c : v) {
    if (c < '0' || c > '7') return std::nullopt;
    m = m * 8 + static_cast<mode_t>(c - '0');
  }
  if (m > 07777) return std::nullopt;
  return m;
}

std::string ImportTempName(const std::string& name) {
  static const std::string kSuffix = ".importing";
  return name.substr(0, 64 - kSuffix.size()) + kSuffix;
}

store::Result<store::LunInfo> ImportImage(store::Pool& pool, const std::string& name, const std::string& path,
                                          uint32_t block_size, uint64_t size, const ImageOptions& o,
                                          CopyStats* stats) {
  CopyStats local;
  if (!stats) stats = &local;
  if (!store::ValidBlockSize(block_size)) {
    return Status(Code::kInvalidArgument, "block size must be " + std::string(store::kBlockSizeRule));
  }
  Fd in;
  uint64_t src_size = 0;
  Status opened = OpenSource(path, o, &in, &src_size);
  if (!opened.ok()) return opened;
  uint64_t bytes = size ? size : (src_size + block_size - 1) / block_size * block_size;
  if (bytes == 0 || bytes % block_size) {
    return Status(Code::kInvalidArgument, "size must be a non-zero multiple of the block size");
  }
  if (bytes < src_size) {
    return Status(Code::kInvalidArgument, "the size given is smaller than " + path + " (" +
                                              std::to_string(src_size) + " bytes)");
  }
  if (pool.GetLun(name).ok()) return Status(Code::kAlreadyExists, "LUN '" + name + "' exists: the name is taken");
  // The copy goes to a LUN named for what it is; only a complete copy gets
  // the name asked for (the store has no rename: a clone is one, metadata
  // only, and the temporary LUN is deleted).
  const std::string tmp = ImportTempName(name);
  auto made = pool.CreateLun(tmp, bytes, block_size);
  if (!made.ok()) {
    if (made.status().code() == Code::kAlreadyExists) {
      return Status(Code::kAlreadyExists, "LUN '" + tmp + "' exists: an import of '" + name +
                                              "' is running, or one was cut short by a crash (then delete '" + tmp +
                                              "' and import again)");
    }
    return made.status();
  }
  Status s;
  {
    auto lun = pool.OpenLun(tmp);
    s = lun.ok() ? CopyIn(*lun.value(), in.fd, path, src_size, block_size, o, stats) : lun.status();
  }
  if (s.ok()) {
    auto cloned = pool.CloneLun(tmp, name);
    if (!cloned.ok()) s = cloned.status();
  }
  Status removed = pool.DeleteLun(tmp);
  if (!s.ok()) {
    if (!removed.ok()) {
      return Status(s.code(), s.message() + "; the partial LUN '" + tmp + "' could not be deleted: " + removed.message());
    }
    return Status(s.code(), s.message() + " (nothing was kept)");
  }
  if (!removed.ok()) {
    return Status(removed.code(), "imported into '" + name + "', but the temporary LUN '" + tmp +
                                      "' could not be deleted: " + removed.message());
  }
  return pool.GetLun(name);
}

store::Status ExportImage(store::Pool& pool, const std::string& name, const std::string& path,
                          const ImageOptions& o, CopyStats* stats) {
  CopyStats local;
  if (!stats) stats = &local;
  if (o.mode & ~07777u) return Status(Code::kInvalidArgument, "mode must be an octal permission (at most 07777)");
  auto lr = pool.OpenLun(name);
  if (!lr.ok()) return lr.status();
  store::Lun& lun = *lr.value();
  struct stat st;
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return Errno("cannot stat " + path);
  if (exists) {
    if (S_ISLNK(st.st_mode)) return SymlinkRefused(path);
    if (o.pool_file.Is(st)) return PoolsOwn(path);
    if (S_ISBLK(st.st_mode)) return ExportToDevice(lun, path, o, stats);
    if (!S_ISREG(st.st_mode)) return NotAnImage(path, st.st_mode);
  }
  return ExportToFile(lun, path, exists, o, stats);
}

}  // namespace cowstore::control
