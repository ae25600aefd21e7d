// SPDX-License-Identifier: Apache-2.0
#include "handler/store/meta_turnover.h"

#include <algorithm>
#include <iterator>
#include <string>

namespace cowstore::store {
namespace {

std::vector<uint64_t> Sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

Status Refuse(const std::string& why) {
  return Status(Code::kIOError, "checkpoint's metadata AUs: " + why + "; the pool must be reopened");
}

}  // namespace

Status SplitMetaTurnover(const std::vector<uint64_t>& current, const std::vector<uint64_t>& handed_over,
                         const std::vector<uint64_t>& next, MetaTurnover* out) {
  const std::vector<uint64_t> cur = Sorted(current), handed = Sorted(handed_over), nxt = Sorted(next);
  // Each list names an AU once, or it would retire (pend) or free twice.
  if (auto d = std::adjacent_find(cur.begin(), cur.end()); d != cur.end())
    return Refuse("the current set names AU " + std::to_string(*d) + " twice");
  if (auto d = std::adjacent_find(handed.begin(), handed.end()); d != handed.end())
    return Refuse("AU " + std::to_string(*d) + " is handed over twice");
  std::vector<uint64_t> both;
  std::set_intersection(cur.begin(), cur.end(), handed.begin(), handed.end(), std::back_inserter(both));
  if (!both.empty())
    return Refuse("AU " + std::to_string(both[0]) +
                  " is both current and handed over (impossible: TakeMeta hands over free AUs only)");
  if (auto d = std::adjacent_find(nxt.begin(), nxt.end()); d != nxt.end())
    return Refuse("the new set names AU " + std::to_string(*d) + " twice");
  for (uint64_t a : nxt)
    if (!std::binary_search(cur.begin(), cur.end(), a) && !std::binary_search(handed.begin(), handed.end(), a))
      return Refuse("the new set names AU " + std::to_string(a) + ", neither current nor handed over");
  MetaTurnover t;
  std::set_intersection(cur.begin(), cur.end(), nxt.begin(), nxt.end(), std::back_inserter(t.kept));
  std::set_difference(cur.begin(), cur.end(), nxt.begin(), nxt.end(), std::back_inserter(t.retired));
  std::set_difference(handed.begin(), handed.end(), nxt.begin(), nxt.end(), std::back_inserter(t.unused));
  *out = std::move(t);
  return Status::Ok();
}

bool RunHandedOver(const std::vector<uint64_t>& handed_over, uint64_t first, uint64_t n) {
  // The AUs are distinct (TakeMeta and TakeMetaRun hand out free AUs), so
  // n of them in the run is the whole run.
  const auto in_run = [&](uint64_t a) { return a >= first && a - first < n; };
  return n != 0 && static_cast<uint64_t>(std::count_if(handed_over.begin(), handed_over.end(), in_run)) == n;
}

void ForgetHandedOver(std::vector<uint64_t>* handed_over, uint64_t first, uint64_t n) {
  std::erase_if(*handed_over, [&](uint64_t a) { return a >= first && a - first < n; });
}

}  // namespace cowstore::store
