// SPDX-License-Identifier: Apache-2.0
#include "handler/control/scrub.h"

#include <algorithm>

namespace cowstore::control {
namespace {

using store::Code;
using store::Status;

constexpr uint64_t kReadBytes = 1u << 20;

class Scrubber {
 public:
  Scrubber(store::ProgressFn progress, void* ctx, const std::function<bool()>& cancelled, uint64_t total,
           ScrubReport* report)
      : progress_(progress), ctx_(ctx), cancelled_(cancelled), total_(total), report_(report) {}

  Status Lun(store::Lun& lun, uint32_t au) {
    const uint32_t bs = lun.block_size();
    auto runs = lun.GetAllocationStatus(0, lun.block_count());
    if (!runs.ok()) return runs.status();
    const uint64_t step = kReadBytes / bs;
    const uint64_t au_blocks = std::max<uint64_t>(1, au / bs);
    buf_.resize(kReadBytes);
    for (const auto& run : runs.value()) {
      if (!run.mapped) continue;
      for (uint64_t lba = run.lba; lba < run.lba + run.count;) {
        if (cancelled_ && cancelled_()) return Status(Code::kIOError, "scrub cancelled");
        // Reads stay inside one allocation-unit-aligned 1 MiB window.
        uint64_t n = std::min(step - lba % step, run.lba + run.count - lba);
        Status s = lun.Read(lba, n, buf_.data());
        if (s.ok()) {
          report_->read_bytes += n * bs;
        } else {
          // Narrow it down, one allocation unit at a time.
          for (uint64_t a = lba; a < lba + n;) {
            uint64_t m = std::min(au_blocks - a % au_blocks, lba + n - a);
            Status t = lun.Read(a, m, buf_.data());
            if (t.ok()) {
              report_->read_bytes += m * bs;
            } else {
              Bad(lun.name(), a, m, t);
            }
            a += m;
          }
        }
        done_ += n * bs;
        if (progress_) progress_(ctx_, std::min(done_, total_), total_);
        lba += n;
      }
    }
    return Status::Ok();
  }

 private:
  // Adjacent unreadable blocks of one LUN make one range.
  void Bad(const std::string& lun, uint64_t lba, uint64_t count, const Status& s) {
    auto& u = report_->unreadable;
    if (!u.empty() && u.back().lun == lun && u.back().lba + u.back().count == lba) {
      u.back().count += count;
      return;
    }
    u.push_back({lun, lba, count, s.ToString()});
  }

  store::ProgressFn progress_;
  void* ctx_;
  const std::function<bool()>& cancelled_;
  uint64_t total_;
  ScrubReport* report_;
  uint64_t done_ = 0;
  std::vector<char> buf_;
};

}  // namespace

store::Result<ScrubReport> Scrub(store::Pool& pool, store::ProgressFn progress, void* ctx,
                                 const std::function<bool()>& cancelled) {
  ScrubReport report;
  std::vector<store::LunInfo> luns = pool.ListLuns();
  for (const auto& l : luns) report.mapped_bytes += l.mapped_bytes;
  Scrubber scrubber(progress, ctx, cancelled, report.mapped_bytes, &report);
  for (const auto& l : luns) {
    auto lun = pool.OpenLun(l.name);
    if (!lun.ok()) {
      if (lun.status().code() == Code::kNotFound) continue;  // deleted meanwhile
      return Status(lun.status().code(), "LUN " + l.name + ": " + lun.status().message());
    }
    ++report.luns;
    Status s = scrubber.Lun(*lun.value(), pool.allocation_unit());
    if (!s.ok()) return s;
  }
  return report;
}

}  // namespace cowstore::control
