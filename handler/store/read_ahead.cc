// SPDX-License-Identifier: Apache-2.0
#include "handler/store/read_ahead.h"

#include <algorithm>

namespace cowstore::store {

ReadAhead::Range ReadAhead::Next(uint64_t off, uint64_t len) {
  MutexLock g(&mu_);
  const uint64_t end = off + len;
  Stream* s = nullptr;
  for (Stream& c : streams_) {
    // Within the slack either side of where it ended (no unsigned wrap).
    if (c.used != 0 && off + kReadAheadSlackBytes >= c.next && off <= c.next + kReadAheadSlackBytes) {
      s = &c;
      break;
    }
  }
  if (s == nullptr) {
    // A new stream in the least recently used slot (never-used slots first).
    s = &*std::min_element(streams_.begin(), streams_.end(),
                           [](const Stream& a, const Stream& b) { return a.used < b.used; });
    *s = Stream{end, end, ++clock_, 0};
    return {};
  }
  s->used = ++clock_;
  s->hits++;
  s->next = std::max(s->next, end);
  if (s->hits < kReadAheadHits) return {};
  const uint64_t from = std::max(s->fetched, s->next);
  const uint64_t to = s->next + kReadAheadBytes;
  if (to < from + kReadAheadStepBytes) return {};  // not a step's worth new yet
  s->fetched = to;
  return {from, to - from};
}

}  // namespace cowstore::store
