// SPDX-License-Identifier: Apache-2.0
// Raw images in and out of a pool: the copy loops behind `cowctl lun import`
// and `lun export`, shared by cowctl (pool opened directly) and the control
// server (pool held by the handler), so both behave the same.
//
// Import makes a new LUN and writes only the non-zero parts of the source:
// a new LUN reads zeros, so zero runs stay unmapped. Export writes a file
// sparse (holes where the LUN is unmapped or zero) or a block device in
// full. Errors are store Status values whose messages name the file.
//
// Both run as root, in cowctl or inside tcmu-runner, on paths a user may
// control, so they open nothing they were not asked for:
// - the last component of the path is never followed if it is a symbolic
//   link (refused with a message saying so); directories on the way are;
// - only a regular file or a block device is read or written, and the file
//   type is checked on a descriptor opened O_NONBLOCK, so a FIFO, a socket
//   or a device that blocks in open() is refused instead of hanging;
// - the pool's own file or device is never read or written as an image;
// - export writes a new or replaced file as a temporary file beside it
//   (O_EXCL, same directory), synced, then renamed into place and the
//   directory synced: the old file stays whole until the new one is, and a
//   link planted at the name is replaced, never written through. The file
//   gets `mode` (0600 by default, as `cowctl save`), whatever the umask;
// - a block device is written in place (nothing atomic is possible): only
//   with `force`, and opened O_EXCL so that a mounted device, or one that
//   another program holds exclusively (md, LVM, a pool), is refused (EBUSY).
//   An export that fails part way leaves the device partly written.
// - `cancelled` is polled between 1 MiB chunks: an import then deletes its
//   partial LUN, an export removes its temporary file (a device stays
//   partly written).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "handler/store/pool.h"

namespace cowstore::control {

struct CopyStats {
  uint64_t written = 0;  // bytes written to the destination
  uint64_t skipped = 0;  // bytes left unmapped / as holes
};

// Which inode (or, for a pool on a device, which device) holds a pool.
struct PoolFile {
  bool known = false;
  bool device = false;
  dev_t dev = 0;   // regular file: st_dev and st_ino
  ino_t ino = 0;
  dev_t rdev = 0;  // block device: st_rdev
  // Whether `st` (of an image path) is this pool's file or device.
  bool Is(const struct stat& st) const;
};
// stat() of the pool's path (links followed: pool entries may be links to a
// device); kNotFound/kIOError when it cannot be read.
store::Result<PoolFile> PoolFileAt(const std::string& pool_path);

struct ImageOptions {
  PoolFile pool_file;       // never read or written as an image (when known)
  mode_t mode = 0600;       // export: permissions of the file written
  bool force = false;       // export: replace a file, overwrite a device
  std::function<bool()> cancelled;  // may be empty
  store::ProgressFn progress = nullptr;
  void* progress_ctx = nullptr;
};

// An octal permission as chmod(1) takes it ("600", "0640"); nullopt if not.
std::optional<mode_t> ParseMode(const std::string& text);

// The name a LUN is imported under until it is complete (then it is cloned
// to `name` and deleted): a crash part way leaves a LUN that says what it is,
// never one that looks like a finished import.
std::string ImportTempName(const std::string& name);

// Creates LUN `name` from the raw image or block device at `path`. `size` 0:
// the source's size rounded up to a block. On failure (or when cancelled)
// nothing is left: neither `name` nor its temporary LUN.
store::Result<store::LunInfo> ImportImage(store::Pool& pool, const std::string& name, const std::string& path,
                                          uint32_t block_size, uint64_t size, const ImageOptions& options,
                                          CopyStats* stats);

// Writes LUN `name` to `path`: a new file, with `force` a replaced regular
// file or a block device at least as large as the LUN.
store::Status ExportImage(store::Pool& pool, const std::string& name, const std::string& path,
                          const ImageOptions& options, CopyStats* stats);

}  // namespace cowstore::control
