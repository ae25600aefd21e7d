// SPDX-License-Identifier: Apache-2.0
#include "handler/store/fault_env.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace cowstore::store {

class FaultFile final : public File {
 public:
  FaultFile(FaultInjectionEnv* env, std::shared_ptr<FaultInjectionEnv::Image> im, bool shared)
      : env_(env), im_(std::move(im)), shared_(shared), seen_errors_(im_->sync_errors) {}  // env_->mu_ held
  ~FaultFile() override {
    std::lock_guard<std::mutex> g(env_->mu_);
    if (shared_) im_->shared_locks--; else im_->exclusive = false;
  }

  Status Read(uint64_t off, size_t n, void* buf) override {
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kRead);
    if (!s.ok()) return s;
    auto* p = static_cast<uint8_t*>(buf);
    const SparseBytes& cur = im_->current;
    uint64_t have = off < cur.size() ? std::min<uint64_t>(n, cur.size() - off) : 0;
    if (have) cur.Read(off, have, p);
    if (have < n) std::memset(p + have, 0, n - have);
    return Status::Ok();
  }

  // One image, no readahead to keep apart: read as ReadV (each call gated
  // as a read, so FailAt(kRead) reaches these too).
  Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return ReadV(off, iov, n); }

  // Nothing to fetch in memory: the ranges asked for are recorded for tests
  // (the first kMaxPrefetchesKept since they were last taken: a long test
  // that never takes them does not grow without bound).
  void Prefetch(uint64_t off, uint64_t n) override {
    std::lock_guard<std::mutex> g(env_->mu_);
    if (env_->prefetches_.size() < FaultInjectionEnv::kMaxPrefetchesKept) env_->prefetches_.push_back({off, n});
  }

  Status Write(uint64_t off, size_t n, const void* buf) override {
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kWrite);
    if (!s.ok()) return s;
    if (off + n > im_->current.size()) FaultInjectionEnv::Resize(*im_, off + n);
    im_->current.Write(off, n, static_cast<const uint8_t*>(buf));
    Dirty(off, n);
    return Status::Ok();
  }

  Status Sync() override { return SyncAs(&seen_errors_); }

  // As a second descriptor's: the same sync, with its own record of the
  // write-back errors it has reported (SyncAs). The file outlives its
  // handles.
  Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override {
    struct Handle final : SyncHandle {
      Handle(FaultFile* f, uint64_t seen) : file(f), seen_errors(seen) {}
      Status Sync() override { return file->SyncAs(&seen_errors); }
      FaultFile* file;
      uint64_t seen_errors;
    };
    std::lock_guard<std::mutex> g(env_->mu_);
    return std::unique_ptr<SyncHandle>(new Handle(this, im_->sync_errors));
  }

  Status DropCache() override {
    env_->CountSync();  // it syncs first, as PosixEnv's does
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kDropCache);
    if (!s.ok()) return s;
    SyncLocked();
    // What the cache held of forgotten sectors is gone: reads now return
    // what the disk holds.
    constexpr uint64_t S = FaultInjectionEnv::kSector;
    for (uint64_t sec : im_->forgotten) {
      uint64_t off = sec * S;
      uint64_t n = std::min<uint64_t>(S, im_->current.size() - off);
      im_->current.CopyFrom(im_->durable, off, n);
    }
    im_->forgotten.clear();
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    std::lock_guard<std::mutex> g(env_->mu_);
    return static_cast<uint64_t>(im_->current.size());
  }

  Status Truncate(uint64_t size) override {
    if (!env_->can_truncate()) return Status(Code::kUnsupported, "cannot resize a medium of fixed size");
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kTruncate);
    if (!s.ok()) return s;
    FaultInjectionEnv::Resize(*im_, size);
    return Status::Ok();
  }

  Status PunchHole(uint64_t off, uint64_t n) override {
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kPunch);
    if (!s.ok()) return s;
    uint64_t size = im_->current.size();
    if (off >= size) return Status::Ok();
    n = std::min<uint64_t>(n, size - off);
    constexpr uint64_t S = FaultInjectionEnv::kSector;
    if (!env_->discard_zeroes()) {
      // A discard that only frees: the range holds a pattern afterwards.
      const std::vector<uint8_t> junk(S, FaultInjectionEnv::kDiscardedByte);
      for (uint64_t pos = off; pos < off + n;) {
        uint64_t e = std::min(off + n, (pos / S + 1) * S);
        im_->current.Write(pos, e - pos, junk.data());
        im_->dirty.insert(pos / S);
        pos = e;
      }
      return Status::Ok();
    }
    // Only sectors that change become unsynced: punching a hole over zeros
    // (a fresh pool) is free, as on a real file system.
    for (uint64_t pos = off; pos < off + n;) {
      uint64_t e = std::min(off + n, (pos / S + 1) * S);
      if (!im_->current.IsZero(pos, e - pos)) {
        im_->current.Zero(pos, e - pos);
        im_->dirty.insert(pos / S);
      }
      pos = e;
    }
    return Status::Ok();
  }

  bool CanTruncate() const override { return env_->can_truncate(); }
  uint32_t AtomicWriteBytes() const override { return env_->atomic_write_bytes(); }
  bool WritesAllocate() const override { return env_->writes_allocate(); }
  bool DiscardZeroes() const override { return env_->discard_zeroes(); }
  Result<BackingSpace> Backing() override { return env_->backing(); }

 private:
  // The sync of one open file description, whose write-back errors reported
  // so far are *seen. Linux (errseq) reports a write-back error once to
  // each open file: the sync that failed, and then the next sync through
  // every other open of the file, even though that one wrote everything
  // it had. Modelled for kForget only (Linux's behaviour); under kRetain a
  // failed sync loses nothing, so no other open needs to hear of it.
  Status SyncAs(uint64_t* seen) {
    env_->CountSync();
    std::lock_guard<std::mutex> g(env_->mu_);
    Status s = env_->Gate(FaultInjectionEnv::Op::kSync);
    if (!s.ok()) {
      // Linux after a failed fdatasync: the pages it could not write are
      // marked clean, their new bytes stay in the cache and never reach the
      // disk unless written again.
      if (env_->failed_sync_ == FaultInjectionEnv::FailedSync::kForget) {
        im_->forgotten.insert(im_->dirty.begin(), im_->dirty.end());
        im_->dirty.clear();
        *seen = ++im_->sync_errors;
      }
      return s;
    }
    SyncLocked();
    if (*seen != im_->sync_errors) {
      *seen = im_->sync_errors;
      return Status(Code::kIOError, "write-back error reported through another descriptor (EIO)");
    }
    return Status::Ok();
  }

  // A successful fdatasync (env_->mu_ held): every unsynced sector, and the
  // file's size, become durable. A forgotten sector is not written (it is
  // clean) unless it was written again since.
  void SyncLocked() {
    constexpr uint64_t S = FaultInjectionEnv::kSector;
    for (uint64_t sec : im_->dirty) {
      uint64_t off = sec * S;
      uint64_t n = std::min<uint64_t>(S, im_->current.size() - off);
      im_->durable.CopyFrom(im_->current, off, n);
      im_->forgotten.erase(sec);
    }
    im_->dirty.clear();
    im_->durable_size = im_->current.size();
  }
  void Dirty(uint64_t off, uint64_t n) {
    constexpr uint64_t S = FaultInjectionEnv::kSector;
    if (n == 0) return;
    for (uint64_t sec = off / S; sec <= (off + n - 1) / S; sec++) im_->dirty.insert(sec);
  }
  FaultInjectionEnv* env_;
  std::shared_ptr<FaultInjectionEnv::Image> im_;
  bool shared_;
  uint64_t seen_errors_;  // write-back errors this open has reported (SyncAs)
};

void FaultInjectionEnv::Resize(Image& im, uint64_t size) {
  im.current.Resize(size);
  im.durable.Resize(size);
  im.durable_size = std::min(im.durable_size, size);  // an extension waits for Sync()
  // Sectors past the end are gone; a partly cut sector keeps its dirty mark.
  im.dirty.erase(im.dirty.lower_bound((size + kSector - 1) / kSector), im.dirty.end());
  im.forgotten.erase(im.forgotten.lower_bound((size + kSector - 1) / kSector), im.forgotten.end());
}

Status FaultInjectionEnv::Gate(Op op) {
  uint64_t nth = op_counts_[static_cast<int>(op)]++;
  if (op != Op::kRead) {
    if (crashed_) return Status(Code::kIOError, "injected: disk is dead (power cut)");
    if (crash_countdown_ == 0) {
      crashed_ = true;
      return Status(Code::kIOError, "injected: disk is dead (power cut)");
    }
    if (crash_countdown_ > 0) crash_countdown_--;
    mutating_++;
  }
  for (size_t i = 0; i < faults_.size(); i++) {
    if (faults_[i].op == op && faults_[i].nth == nth) {
      Code c = faults_[i].code;
      faults_.erase(faults_.begin() + static_cast<long>(i));
      return Status(c, c == Code::kNoSpace ? "injected ENOSPC" : "injected EIO");
    }
  }
  return Status::Ok();
}

Result<std::unique_ptr<File>> FaultInjectionEnv::OpenLocked(const std::string& path, Mode mode) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) {
    if (mode != Mode::kCreate) return Status(Code::kNotFound, "no pool at " + path);
    it = files_.emplace(path, std::make_shared<Image>()).first;
  }
  Image& im = *it->second;
  bool shared = mode == Mode::kReadOnly;
  if (im.exclusive || (!shared && im.shared_locks > 0))
    return Status(Code::kBusy, path + " is in use by another process");
  if (shared) im.shared_locks++; else im.exclusive = true;
  return std::unique_ptr<File>(new FaultFile(this, it->second, shared));
}

Result<BackingSpace> FaultInjectionEnv::BackingOf(const std::string& path) {
  (void)path;
  return backing();
}

void FaultInjectionEnv::SetBacking(const BackingSpace& b) {
  std::lock_guard<std::mutex> g(mu_);
  backing_ = b;
}

BackingSpace FaultInjectionEnv::backing() const {
  std::lock_guard<std::mutex> g(mu_);
  return backing_;
}

bool FaultInjectionEnv::Exists(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  return files_.count(path) > 0;
}

void FaultInjectionEnv::CrashAfter(int64_t n) {
  std::lock_guard<std::mutex> g(mu_);
  crash_countdown_ = n;
}

bool FaultInjectionEnv::Disarm() {
  std::lock_guard<std::mutex> g(mu_);
  crash_countdown_ = -1;
  return crashed_;
}

bool FaultInjectionEnv::crashed() const {
  std::lock_guard<std::mutex> g(mu_);
  return crashed_;
}

uint64_t FaultInjectionEnv::mutating_calls() const {
  std::lock_guard<std::mutex> g(mu_);
  return mutating_;
}

std::vector<std::pair<uint64_t, uint64_t>> FaultInjectionEnv::TakePrefetches() {
  std::lock_guard<std::mutex> g(mu_);
  return std::exchange(prefetches_, {});
}

uint64_t FaultInjectionEnv::calls(Op op) const {
  std::lock_guard<std::mutex> g(mu_);
  return op_counts_[static_cast<int>(op)];
}

void FaultInjectionEnv::FailAt(Op op, uint64_t nth, Code code) {
  std::lock_guard<std::mutex> g(mu_);
  faults_.push_back({op, op_counts_[static_cast<int>(op)] + nth, code});
}

void FaultInjectionEnv::SetFailedSync(FailedSync mode) {
  std::lock_guard<std::mutex> g(mu_);
  failed_sync_ = mode;
}

void FaultInjectionEnv::ClearFaults() {
  std::lock_guard<std::mutex> g(mu_);
  faults_.clear();
  crash_countdown_ = -1;
  crashed_ = false;
}

void FaultInjectionEnv::PowerLoss(Loss loss, uint64_t seed) {
  std::lock_guard<std::mutex> g(mu_);
  std::mt19937_64 rng(seed);
  // Whether one unsynced piece (a sector, or a file's new size: one inode
  // field) reached the media.
  auto survives = [&] {
    return loss == Loss::kKeepAll || ((loss == Loss::kRandom || loss == Loss::kTear) && (rng() & 1));
  };
  for (auto& [path, imp] : files_) {
    Image& im = *imp;
    for (uint64_t sec : im.dirty) {
      uint64_t off = sec * kSector;
      uint64_t n = std::min<uint64_t>(kSector, im.current.size() - off);
      if (survives()) {
        im.durable.CopyFrom(im.current, off, n);
      } else if (loss == Loss::kTear && rng() % 4 == 0) {
        uint64_t cut = rng() % n;  // first `cut` bytes made it
        im.durable.CopyFrom(im.current, off, cut);
      }
      im.current.CopyFrom(im.durable, off, n);
    }
    im.dirty.clear();
    // A forgotten sector was only ever in the cache.
    for (uint64_t sec : im.forgotten) {
      uint64_t off = sec * kSector;
      uint64_t n = std::min<uint64_t>(kSector, im.current.size() - off);
      im.current.CopyFrom(im.durable, off, n);
    }
    im.forgotten.clear();
    // An extension not yet synced survives as a whole or not at all.
    if (survives()) {
      im.durable_size = im.current.size();
    } else {
      im.current.Resize(im.durable_size);
      im.durable.Resize(im.durable_size);
    }
  }
  crashed_ = false;
  crash_countdown_ = -1;
}

void FaultInjectionEnv::Delete(const std::string& path) {
  std::lock_guard<std::mutex> g(mu_);
  files_.erase(path);
}

void FaultInjectionEnv::Corrupt(const std::string& path, uint64_t off, size_t n) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return;
  Image& im = *it->second;
  const uint64_t size = im.current.size();
  if (off >= size) return;
  const uint64_t len = std::min<uint64_t>(n, size - off);
  im.current.Xor(off, len, 0x5a);
  im.durable.Xor(off, len, 0x5a);
}

std::vector<uint8_t> FaultInjectionEnv::Snapshot(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? std::vector<uint8_t>() : it->second->current.ToVector();
}

void FaultInjectionEnv::Install(const std::string& path, const uint8_t* data, size_t n) {
  std::lock_guard<std::mutex> g(mu_);
  std::shared_ptr<Image>& im = files_[path];
  if (!im) im = std::make_shared<Image>();
  im->current.Assign(data, n);
  im->durable.Assign(data, n);
  im->durable_size = n;
  im->dirty.clear();
  im->forgotten.clear();
}

void FaultInjectionEnv::ResizeMedium(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> g(mu_);
  std::shared_ptr<Image>& im = files_[path];
  if (!im) im = std::make_shared<Image>();
  if (size <= im->current.size()) return;
  Resize(*im, size);
  im->durable_size = size;
}

uint64_t FaultInjectionEnv::forgotten_sectors(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second->forgotten.size();
}

std::vector<uint8_t> FaultInjectionEnv::DurableSnapshot(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? std::vector<uint8_t>() : it->second->durable.ToVector();
}

uint64_t FaultInjectionEnv::unsynced_sectors(const std::string& path) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? 0 : it->second->dirty.size();
}

}  // namespace cowstore::store
