// SPDX-License-Identifier: Apache-2.0
#include "handler/store/commit_queue.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <utility>

namespace cowstore::store {

CommitQueue::CommitQueue(CommitFn commit, AfterFn after, uint64_t durable)
    : commit_(std::move(commit)), after_(std::move(after)), durable_(durable) {}

Status CommitQueue::failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return CopyStatus(failed_);
}

CommitQueue::Stats CommitQueue::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  Stats s = stats_;
  s.waits = waits_.load(std::memory_order_relaxed);
  s.fast_returns = fast_.load(std::memory_order_relaxed);
  s.wake_calls = wake_calls_.load(std::memory_order_relaxed);
  return s;
}

namespace {

// The queue's futex word: private to this process.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
              std::atomic<uint32_t>::is_always_lock_free);
uint32_t* Word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

void FutexWaitBits(std::atomic<uint32_t>* a, uint32_t expected, uint32_t bits) {
  // Returns at once if the word no longer holds `expected`; may also return
  // spuriously (EINTR, or a wake for another waiter sharing a bit): the
  // caller looks again. No timeout (null).
  syscall(SYS_futex, Word(a), FUTEX_WAIT_BITSET_PRIVATE, expected, nullptr, nullptr, bits);
}

void FutexWakeBits(std::atomic<uint32_t>* a, uint32_t bits) {
  // Every sleeper whose bits meet `bits`: a waiter's bit may be shared, so
  // waking fewer could pass over the one the wake is for.
  syscall(SYS_futex, Word(a), FUTEX_WAKE_BITSET_PRIVATE, INT32_MAX, nullptr, nullptr, bits);
}

}  // namespace

void CommitQueue::EnqueueLocked(Waiter* w) {
  w->bit = uint32_t{1} << (next_bit_++ % 32);
  if (w->ticket == kExclusive) {
    w->prev = ex_tail_;
    w->next = nullptr;
    (ex_tail_ ? ex_tail_->next : ex_head_) = w;
    ex_tail_ = w;
    return;
  }
  // Tickets mostly arrive in order: look from the newest end.
  Waiter* after = tail_;
  while (after && after->ticket > w->ticket) after = after->prev;
  w->prev = after;
  w->next = after ? after->next : head_;
  (w->next ? w->next->prev : tail_) = w;
  (after ? after->next : head_) = w;
}

void CommitQueue::CollectSatisfiedLocked(Wakeups* w, bool all) {
  const uint64_t d = durable_.load(std::memory_order_relaxed);
  const bool failed = all || !failed_.ok();
  // Waiters are ordered by ticket: the satisfied ones are a prefix of the
  // list, detached whole as a chain.
  Waiter* last = nullptr;
  for (Waiter* p = head_; p && (failed || p->ticket <= d); p = p->next) last = p;
  if (!last) return;
  Waiter* first = head_;
  head_ = last->next;
  (head_ ? head_->prev : tail_) = nullptr;
  last->next = nullptr;
  (w->done_tail ? w->done_tail->next : w->done) = first;
  w->done_tail = last;
}

void CommitQueue::PassLeadershipLocked(Wakeups* w) {
  Waiter* next = nullptr;
  if (ex_head_) {  // the oldest Exclusive() request first
    next = ex_head_;
    ex_head_ = next->next;
    (ex_head_ ? ex_head_->prev : ex_tail_) = nullptr;
  } else if (head_ && failed_.ok()) {
    next = head_;
    head_ = next->next;
    (head_ ? head_->prev : tail_) = nullptr;
  }
  if (!next) {
    leading_ = false;
    return;
  }
  next->next = nullptr;
  w->lead = next;
}

uint32_t CommitQueue::Release(Waiter* w, Waiter::State st) {
  const uint32_t bit = w->bit;
  w->state.store(st, std::memory_order_release);
  return bit;  // from the store on, `w` may be gone (its caller returned)
}

void CommitQueue::WakeBits(uint32_t mask) {
  if (mask == 0) return;
  // Raised after the states were set: a waiter that read the word before
  // this, and its state before they were set, finds the word changed when
  // it goes to sleep (FUTEX_WAIT compares it), so it cannot miss the wake.
  wake_word_.fetch_add(1, std::memory_order_seq_cst);
  wake_calls_.fetch_add(1, std::memory_order_relaxed);
  FutexWakeBits(&wake_word_, mask);
}

void CommitQueue::Deliver(Wakeups* w) {
  // One wake for all: one FUTEX_WAKE per waiter let each woken caller
  // preempt the leader before the next wake (the header says what it cost).
  uint32_t mask = 0;
  if (w->lead) mask |= Release(w->lead, Waiter::kLead);
  for (Waiter* p = w->done; p;) {
    Waiter* n = p->next;  // read before the store releases p
    mask |= Release(p, Waiter::kDone);
    p = n;
  }
  WakeBits(mask);
}

CommitQueue::Waiter::State CommitQueue::Sleep(Waiter* w) {
  for (;;) {
    // The word first: a wake raises it after setting the state, so if the
    // state below is still kWaiting, either the wake has not raised the
    // word yet (FUTEX_WAIT then sleeps until it wakes us) or the word no
    // longer holds `seen` (FUTEX_WAIT returns at once, and we look again).
    const uint32_t seen = wake_word_.load(std::memory_order_seq_cst);
    const uint32_t st = w->state.load(std::memory_order_acquire);
    if (st != Waiter::kWaiting) return static_cast<Waiter::State>(st);
    FutexWaitBits(&wake_word_, seen, w->bit);
  }
}

Result<uint64_t> CommitQueue::RunCommit() noexcept {
  // An exception (std::bad_alloc while a large checkpoint is encoded) is a
  // failed commit like any other: the queue fails, every waiter is told,
  // leadership is handed on. What reached the disk is unknown, so the
  // failure is sticky, as for an I/O error.
  try {
    return commit_();
  } catch (...) {
    return StatusFromCurrentException("commit failed");
  }
}

void CommitQueue::RunAfter(uint64_t durable) noexcept {
  // The hook hands AUs whose freeing record is durable on for punching and
  // reuse. If it throws, those AUs stay unused until the pool is next
  // opened (recovery frees every AU no map holds): space, never data, and
  // the hook's bookkeeping below still ends, so Exclusive() and
  // DrainHooks() do not wait for it for ever.
  try {
    after_(durable);
  } catch (...) {
  }
}

Status CommitQueue::Wait(uint64_t ticket) {
  waits_.fetch_add(1, std::memory_order_relaxed);
  if (durable_.load(std::memory_order_acquire) >= ticket) {
    fast_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }
  std::unique_lock<std::mutex> lk(mu_);
  if (durable_.load(std::memory_order_relaxed) >= ticket) return Status::Ok();
  if (!failed_.ok()) return CopyStatus(failed_);
  if (leading_) {
    Waiter w;
    w.ticket = ticket;
    EnqueueLocked(&w);
    stats_.slept++;
    lk.unlock();
    if (Sleep(&w) == Waiter::kDone) {
      // Signalled after durable_ was raised (or the queue failed), under mu_.
      if (durable_.load(std::memory_order_acquire) >= ticket) return Status::Ok();
      lk.lock();
      // A later batch may have made it durable since (after a refusal).
      if (durable_.load(std::memory_order_relaxed) >= ticket) return Status::Ok();
      return NotDurableLocked();
    }
    lk.lock();
    // kLead: the previous leader handed us the queue (leading_ stays true).
  } else {
    leading_ = true;
  }
  // The leader: run batches until our own ticket is durable. Each batch takes
  // everything appended so far, so one is enough unless the commit function
  // returns early (which it may, e.g. after a checkpoint).
  // Nothing from here to the return allocates (Status copies would: their
  // messages are longer than a short string): a throw would leave the queue
  // led by no one, or a chosen next leader never signalled, and every
  // waiter, later caller and Exclusive() section asleep for ever. So a
  // failed batch's status is moved into failed_, and the failure is copied
  // for our caller only after the hand-on (CopyStatus cannot throw); the
  // hook's entry is a node on this stack.
  for (;;) {
    Wakeups wk;
    if (!failed_.ok()) {  // Fail() was called while we waited for our turn
      PassLeadershipLocked(&wk);
      lk.unlock();
      Deliver(&wk);
      return FailedCopy();
    }
    stats_.batches++;
    lk.unlock();
    Result<uint64_t> r = RunCommit();
    lk.lock();
    if (!r.ok() && std::exchange(refused_, false) && failed_.ok()) {
      // Refused: nothing written, nothing changed. Every waiter is told (the
      // batch took everything appended, so none of them is durable), the
      // queue stays usable, and the next Wait() leads a new batch. Moved,
      // never copied, as a failure is (nothing on this path allocates).
      refusal_ = std::move(r).TakeStatus();
      CollectSatisfiedLocked(&wk, /*all=*/true);
      PassLeadershipLocked(&wk);
      lk.unlock();
      Deliver(&wk);
      lk.lock();
      return NotDurableLocked();
    }
    refused_ = false;  // set by a function that then succeeded: not a refusal
    if (!r.ok()) {
      if (failed_.ok()) failed_ = std::move(r).TakeStatus();
      CollectSatisfiedLocked(&wk);
      PassLeadershipLocked(&wk);
      lk.unlock();
      Deliver(&wk);
      return FailedCopy();
    }
    const uint64_t d = std::max(durable_.load(std::memory_order_relaxed), r.value());
    // The batch's hook counts as running from the moment its tickets are
    // durable, in the same critical section: a caller that sees its ticket
    // durable (woken, or on the fast path) and then calls DrainHooks must
    // find the hook that hands the batch's freed runs on, or its
    // ReclaimPending would drain nothing and give up on space on its way back.
    RunningHook hook;
    if (after_) {
      hook.seq = ++hook_seq_;
      LinkHookLocked(&hook);
    }
    durable_.store(d, std::memory_order_release);
    CollectSatisfiedLocked(&wk);
    const bool mine = d >= ticket;
    // Wake the batch's waiters first, then hand on: the callers it woke
    // issue their next operations while this happens, so they join the next
    // batch instead of the one after it. (Handing on first was measured:
    // with 32 callers in a closed loop the batches split into two alternating
    // halves, and syncs per command went from 0.037 to 0.062.)
    lk.unlock();
    Deliver(&wk);
    wk = Wakeups{};
    lk.lock();
    if (mine) PassLeadershipLocked(&wk);
    lk.unlock();
    Deliver(&wk);  // the next leader, if any
    if (after_) {
      RunAfter(d);
      lk.lock();
      UnlinkHookLocked(&hook);
      hooks_done_.notify_all();
    } else {
      lk.lock();
    }
    if (mine) return Status::Ok();
  }
}

void CommitQueue::LinkHookLocked(RunningHook* h) {
  h->prev = hooks_tail_;
  h->next = nullptr;
  (hooks_tail_ ? hooks_tail_->next : hooks_head_) = h;
  hooks_tail_ = h;
}

void CommitQueue::UnlinkHookLocked(RunningHook* h) {
  (h->prev ? h->prev->next : hooks_head_) = h->next;
  (h->next ? h->next->prev : hooks_tail_) = h->prev;
}

Status CommitQueue::FailedCopy() const noexcept {
  // failed_ never changes once set, and this caller saw it set under mu_.
  return CopyStatus(failed_);
}

Status CommitQueue::NotDurableLocked() const noexcept {
  if (!failed_.ok()) return CopyStatus(failed_);
  if (!refusal_.ok()) return CopyStatus(refusal_);
  return StatusNoThrow(Code::kIOError, "commit refused");  // not reached: woken for a reason
}

void CommitQueue::DrainHooks() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t started = hook_seq_;
  // Hooks start in number order, so the oldest running one is the head.
  hooks_done_.wait(lk, [&] { return !hooks_head_ || hooks_head_->seq > started; });
}

void CommitQueue::BeginExclusive() {
  std::unique_lock<std::mutex> lk(mu_);
  if (!leading_) {
    leading_ = true;
  } else {
    Waiter w;
    w.ticket = kExclusive;
    EnqueueLocked(&w);
    lk.unlock();
    Sleep(&w);  // only ever signalled kLead
    lk.lock();
  }
  // We lead, so no batch and no new hook can start: wait out the hooks of
  // earlier batches (they change what an exclusive section may inspect).
  hooks_done_.wait(lk, [&] { return !hooks_head_; });
}

void CommitQueue::EndExclusive() {
  Wakeups wk;
  {
    std::lock_guard<std::mutex> g(mu_);
    CollectSatisfiedLocked(&wk);  // the exclusive part may have published tickets
    PassLeadershipLocked(&wk);
  }
  Deliver(&wk);
}

Status CommitQueue::Exclusive(const std::function<Status()>& fn) {
  ExclusiveGuard g(this);
  return fn();
}

void CommitQueue::Publish(uint64_t durable) {
  uint64_t d = durable_.load(std::memory_order_relaxed);
  while (d < durable &&
         !durable_.compare_exchange_weak(d, durable, std::memory_order_release,
                                         std::memory_order_relaxed)) {
  }
}

void CommitQueue::Fail(const Status& why) noexcept {
  Wakeups wk;
  {
    std::lock_guard<std::mutex> g(mu_);
    // Nothing here may throw (Core calls it from a catch): a copy that
    // finds no memory keeps the code without the message.
    if (failed_.ok())
      failed_ = why.ok() ? StatusNoThrow(Code::kIOError, "commit queue failed") : CopyStatus(why);
    CollectSatisfiedLocked(&wk);
  }
  Deliver(&wk);
}

}  // namespace cowstore::store
