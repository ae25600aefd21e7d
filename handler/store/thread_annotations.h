// SPDX-License-Identifier: Apache-2.0
// Clang thread-safety annotations and a mutex that carries them, so the
// store's lock contracts ("guarded by meta_mu_", "call as the commit queue's
// leader") are checked by the compiler (-Wthread-safety, on for every clang
// build) instead of living in comments. Under GCC the annotations vanish.
//
// See https://clang.llvm.org/docs/ThreadSafetyAnalysis.html.
#pragma once

#include <mutex>

#if defined(__clang__)
#define COWSTORE_TSA(x) __attribute__((x))
#else
#define COWSTORE_TSA(x)
#endif

#define CAPABILITY(x) COWSTORE_TSA(capability(x))
#define SCOPED_CAPABILITY COWSTORE_TSA(scoped_lockable)
#define GUARDED_BY(x) COWSTORE_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) COWSTORE_TSA(pt_guarded_by(x))
#define ACQUIRED_AFTER(...) COWSTORE_TSA(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) COWSTORE_TSA(acquired_before(__VA_ARGS__))
#define REQUIRES(...) COWSTORE_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) COWSTORE_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) COWSTORE_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) COWSTORE_TSA(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) COWSTORE_TSA(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS COWSTORE_TSA(no_thread_safety_analysis)

namespace cowstore::store {

// std::mutex, as a capability the analysis can follow.
class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock() lets go early (e.g. to commit before
// a retry), after which the destructor does nothing until Lock().
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  // Takes it again after Unlock() (a retry that must look again).
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
  bool held_ = true;
};

}  // namespace cowstore::store
