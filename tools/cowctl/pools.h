// SPDX-License-Identifier: Apache-2.0
// How cowctl reaches a pool: it opens the pool file itself when nobody holds
// it; when the store answers kBusy (tcmu-runner has it open and holds its
// flock), it talks to the handler through the pool's control socket.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "handler/control/image.h"
#include "handler/control/scrub.h"
#include "handler/control/server.h"
#include "handler/store/pool.h"
#include "tools/cowctl/output.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {

struct Context {
  std::string pool_dir = DefaultPoolDir();
  std::string run_dir = DefaultRunDir();
  std::string configfs_root = "/sys/kernel/config";
  std::string proc_root = "/proc";
  bool json = false;
  // How long to wait for a pool another cowctl holds (e.g. a snapshot timer
  // firing during an admin's command) before giving up; 0: fail at once.
  int wait_seconds = 10;
};

// <pool_dir>/<pool>; the entry may be a symlink to a block device or file.
std::string PoolPath(const Context& ctx, const std::string& pool);
// Names of the pool entries in pool_dir, sorted.
std::vector<std::string> PoolNames(const Context& ctx);

class PoolHandle {
 public:
  virtual ~PoolHandle() = default;
  virtual bool remote() const = 0;  // served by the handler process
  virtual store::SpaceInfo Space() = 0;
  virtual store::LunInfo GetLun(const std::string& name) = 0;
  virtual store::LunInfo CreateLun(const std::string& name, uint64_t size, uint32_t block_size) = 0;
  virtual void DeleteLun(const std::string& name) = 0;
  virtual store::LunInfo ResizeLun(const std::string& name, uint64_t size) = 0;
  virtual store::LunInfo CloneLun(const std::string& src, const std::string& dst) = 0;
  // A read-only snapshot recording its origin and creation time.
  virtual store::LunInfo SnapshotLun(const std::string& src, const std::string& dst) = 0;
  // `lun` takes `snapshot`'s contents and keeps its identity; when the
  // handler serves the LUN it drains it and tells the initiators.
  virtual store::LunInfo RollbackLun(const std::string& lun, const std::string& snapshot) = 0;
  virtual void Grow(uint64_t size) = 0;
  virtual store::CheckReport Check(Progress* progress) = 0;
  // Reads every mapped block (control/scrub.h); Ctrl-C stops it while an
  // Interruptible lives.
  virtual control::ScrubReport Scrub(Progress* progress) = 0;
  // Per-LUN handler counters; nullopt when the pool is not served.
  virtual std::optional<std::vector<control::LunCounters>> Counters() = 0;
  // A new LUN from a raw image or block device (absolute path); done by the
  // handler when it serves the pool. Both stop and roll back on Ctrl-C or
  // SIGTERM while an Interruptible lives (the error then says "interrupted").
  virtual store::LunInfo Import(const std::string& name, const std::string& path, uint32_t block_size,
                                uint64_t size, control::CopyStats* stats, Progress* progress) = 0;
  // `mode`: permissions of a file written (not of a device).
  virtual void Export(const std::string& name, const std::string& path, bool force, mode_t mode,
                      control::CopyStats* stats, Progress* progress) = 0;
  const std::string& name() const { return name_; }

 protected:
  std::string name_;
};

// Throws UserError naming the pool and what to do (missing, locked without a
// socket, corrupt ...).
std::unique_ptr<PoolHandle> OpenPool(const Context& ctx, const std::string& pool, bool read_only = false);
// The socket of a pool the handler serves, or nullptr.
std::unique_ptr<PoolHandle> ConnectPool(const Context& ctx, const std::string& pool);

// A store error (local, or as the handler's control reply named it), said
// as one line for the user, with the store's code kept for the code that
// acts on it (WithPool retries kBusy): decisions are made on the code, never
// on the words.
class StoreError : public UserError {
 public:
  StoreError(store::Code code, const std::string& what) : UserError(what), code_(code) {}
  store::Code code() const { return code_; }

 private:
  store::Code code_;
};

// Throws StoreError: `what`, a hint for the code, and the store's message.
[[noreturn]] void Fail(const store::Status& s, const std::string& what);

std::string UuidHexString(const store::Uuid& id);  // WWN form

// What a path holds, read from its two superblock copies without opening
// the pool (so it answers while tcmu-runner holds the pool, and it never
// replays a journal or writes). Follows symlinks; opens non-blocking and
// reads only a regular file or a block device.
struct PoolProbe {
  enum Kind {
    kAbsent,    // nothing there (ENOENT, or a dangling link)
    kNotAPool,  // no cowstore magic in either superblock copy (or not a file/device)
    kDamaged,   // cowstore magic, but neither copy is valid
    // A copy of a format this cowctl does not know (envelope valid, format
    // not 1..3), in either slot: nothing but its format is read from it.
    kUnknownFormat,
    kPool,      // a pool: `uuid` is its identity
  } kind = kAbsent;
  store::Uuid uuid{};
  // kPool: what the pool was made with, from the copy `uuid` was read from.
  uint32_t format = 0;  // 1, 2 or 3
  uint32_t au = 0;      // allocation unit, bytes
  uint32_t grain = 0;   // sharing unit, bytes: the AU at formats 1 and 2
  // The format it was made at: `format`, or at format 3 1 or 2 for a pool
  // `cowctl pool upgrade` converted (its superblock says which).
  uint32_t origin_format = 0;
  std::string detail;  // why, for kNotAPool/kDamaged/kUnknownFormat, or an open/read error
};
PoolProbe ProbePool(const std::string& path);

}  // namespace cowstore::cowctl
