// SPDX-License-Identifier: Apache-2.0
// Cold reads for benchmarks: a file's pages dropped from the page cache.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace cowstore::bench {

// Drops a file's pages from the page cache so reads come from the disk
// (written back first: dirty pages cannot be dropped).
inline void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace cowstore::bench
