#include "handler/control/image.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "handler/store/names.h"

namespace cowstore::control {
namespace {

using store::Code;
using store::Status;

constexpr size_t kChunk = 1u << 20;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status Errno(const std::string& what) {
  int e = errno;
  return Status(e == ENOENT ? Code::kNotFound : Code::kIOError, what + ": " + std::strerror(e));
}

bool AllZero(const char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i]) return false;
  }
  return true;
}

// Size of a regular file or block device; error for anything else.
store::Result<uint64_t> SizeOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("cannot stat " + path);
  if (S_ISBLK(st.st_mode)) {
    uint64_t sz = 0;
    if (::ioctl(fd, BLKGETSIZE64, &sz) != 0) return Errno("cannot size " + path);
    return sz;
  }
  if (!S_ISREG(st.st_mode)) {
    return Status(Code::kInvalidArgument, path + " is neither a regular file nor a block device");
  }
  return static_cast<uint64_t>(st.st_size);
}

Status WriteAll(int fd, const char* p, size_t n, uint64_t off, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Errno("writing " + path + " failed");
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status CopyIn(store::Lun& lun, int fd, const std::string& path, uint64_t src_size, uint32_t bs, CopyStats* stats,
              store::ProgressFn progress, void* ctx) {
  std::vector<char> buf(kChunk);
  // The allocation unit divides 1 MiB, so pieces stay aligned to it.
  const size_t piece = std::clamp<size_t>(lun.pool().allocation_unit(), bs, kChunk);
  for (uint64_t off = 0; off < src_size; off += kChunk) {
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
    // Allocation-unit pieces of zeros are skipped (a new LUN reads zeros
    // there already, unmapped); runs of other pieces become one write.
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
    if (progress) progress(ctx, off + want, src_size);
  }
  return lun.Flush();
}

}  // namespace

store::Result<store::LunInfo> ImportImage(store::Pool& pool, const std::string& name, const std::string& path,
                                          uint32_t block_size, uint64_t size, CopyStats* stats,
                                          store::ProgressFn progress, void* ctx) {
  CopyStats local;
  if (!stats) stats = &local;
  if (!store::ValidBlockSize(block_size)) {
    return Status(Code::kInvalidArgument, "block size must be " + std::string(store::kBlockSizeRule));
  }
  Fd in;
  in.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in.fd < 0) return Errno("cannot open " + path);
  auto src = SizeOf(in.fd, path);
  if (!src.ok()) return src.status();
  uint64_t src_size = src.value();
  uint64_t bytes = size ? size : (src_size + block_size - 1) / block_size * block_size;
  if (bytes == 0 || bytes % block_size) {
    return Status(Code::kInvalidArgument, "size must be a non-zero multiple of the block size");
  }
  if (bytes < src_size) {
    return Status(Code::kInvalidArgument, "the size given is smaller than " + path + " (" +
                                              std::to_string(src_size) + " bytes)");
  }
  auto made = pool.CreateLun(name, bytes, block_size);
  if (!made.ok()) return made.status();
  Status s;
  {
    auto lun = pool.OpenLun(name);
    s = lun.ok() ? CopyIn(*lun.value(), in.fd, path, src_size, block_size, stats, progress, ctx) : lun.status();
  }
  if (!s.ok()) {
    (void)pool.DeleteLun(name);  // no half-imported LUN
    return s;
  }
  return pool.GetLun(name);
}

store::Status ExportImage(store::Pool& pool, const std::string& name, const std::string& path, bool force,
                          CopyStats* stats, store::ProgressFn progress, void* ctx) {
  CopyStats local;
  if (!stats) stats = &local;
  auto lr = pool.OpenLun(name);
  if (!lr.ok()) return lr.status();
  store::Lun& lun = *lr.value();
  const uint32_t bs = lun.block_size();
  const uint64_t blocks = lun.block_count();
  const uint64_t bytes = blocks * bs;
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  bool blockdev = exists && S_ISBLK(st.st_mode);
  if (exists && !blockdev && !S_ISREG(st.st_mode)) {
    return Status(Code::kInvalidArgument, path + " is neither a regular file nor a block device");
  }
  if (exists && !blockdev && !force) {
    return Status(Code::kInvalidArgument, path + " exists: pass --force to overwrite it");
  }
  Fd out;
  out.fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (blockdev ? 0 : O_CREAT | O_TRUNC), 0644);
  if (out.fd < 0) return Errno("cannot open " + path);
  if (blockdev) {
    auto sz = SizeOf(out.fd, path);
    if (!sz.ok()) return sz.status();
    if (sz.value() < bytes) {
      return Status(Code::kInvalidArgument, path + " is smaller than the LUN (" + std::to_string(bytes) + " bytes)");
    }
  }
  auto runs = lun.GetAllocationStatus(0, blocks);
  if (!runs.ok()) return runs.status();
  const uint64_t chunk_blocks = kChunk / bs;
  std::vector<char> buf(kChunk);
  const std::vector<char> zeros(kChunk, 0);
  for (const auto& run : runs.value()) {
    for (uint64_t lba = run.lba; lba < run.lba + run.count; lba += chunk_blocks) {
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
        Status s = WriteAll(out.fd, data, len, lba * bs, path);
        if (!s.ok()) return s;
        stats->written += len;
      } else {
        stats->skipped += len;
      }
      if (progress) progress(ctx, lba + n, blocks);
    }
  }
  if (!blockdev && ::ftruncate(out.fd, static_cast<off_t>(bytes)) != 0) return Errno("cannot size " + path);
  if (::fsync(out.fd) != 0) return Errno("fsync " + path + " failed");
  return Status::Ok();
}

}  // namespace cowstore::control
