// SPDX-License-Identifier: Apache-2.0
// An Env for tests that need a command to stay "in flight" at a known point:
// it forwards to another Env, and while the gate is closed every Read and
// ReadV of its files waits until the gate opens. A test closes the gate,
// starts a command whose first store read goes through this Env (e.g. a
// cross-pool EXTENDED COPY from a pool on it), waits until WaitForBlocked()
// sees the reader parked, does what must happen while that command runs,
// then opens the gate.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "handler/store/env.h"
#include "tests/common/gate.h"

namespace cowstore::scsi::testing {

class GatedEnv final : public store::Env {
 public:
  explicit GatedEnv(store::Env* base) : base_(base) {}

  void Close() { gate_.Close(); }
  void Open() { gate_.Open(); }
  // True once at least `n` reads are parked at the closed gate.
  bool WaitForBlocked(int n, std::chrono::seconds limit = std::chrono::seconds(30)) {
    return gate_.WaitForWaiting(n, limit);
  }

  store::Result<std::unique_ptr<store::File>> OpenLocked(const std::string& path,
                                                         Mode mode) override {
    auto f = base_->OpenLocked(path, mode);
    if (!f.ok()) return f.status();
    return std::unique_ptr<store::File>(new GatedFile(this, std::move(f.value())));
  }
  bool Exists(const std::string& path) override { return base_->Exists(path); }

 private:
  class GatedFile final : public store::File {
   public:
    GatedFile(GatedEnv* env, std::unique_ptr<store::File> f) : env_(env), f_(std::move(f)) {}
    store::Status Read(uint64_t off, size_t n, void* buf) override {
      env_->gate_.Pass();
      return f_->Read(off, n, buf);
    }
    store::Status ReadV(uint64_t off, const iovec* iov, size_t n) override {
      env_->gate_.Pass();
      return f_->ReadV(off, iov, n);
    }
    store::Status Write(uint64_t off, size_t n, const void* buf) override {
      return f_->Write(off, n, buf);
    }
    store::Status Sync() override { return f_->Sync(); }
    store::Result<std::unique_ptr<SyncHandle>> NewSyncHandle() override { return f_->NewSyncHandle(); }
    store::Status DropCache() override { return f_->DropCache(); }
    store::Result<uint64_t> Size() override { return f_->Size(); }
    store::Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    store::Status PunchHole(uint64_t off, uint64_t n) override { return f_->PunchHole(off, n); }
    bool CanTruncate() const override { return f_->CanTruncate(); }
    uint32_t AtomicWriteBytes() const override { return f_->AtomicWriteBytes(); }
    // As this file's own reads (counted, gated, changed as they are).
    store::Status ReadAside(uint64_t off, const iovec* iov, size_t n) override { return ReadV(off, iov, n); }
    void Prefetch(uint64_t off, uint64_t n) override { f_->Prefetch(off, n); }
    bool WritesAllocate() const override { return f_->WritesAllocate(); }
    bool DiscardZeroes() const override { return f_->DiscardZeroes(); }

   private:
    GatedEnv* env_;
    std::unique_ptr<store::File> f_;
  };

  store::Env* const base_;
  ::cowstore::testing::Gate gate_;
};

}  // namespace cowstore::scsi::testing
