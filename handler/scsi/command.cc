// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/command.h"

#include <algorithm>
#include <cstring>

#include "handler/store/iovec_slice.h"

namespace cowstore::scsi {

Command::Command(LogicalUnit& l, std::span<const uint8_t> c, std::span<const iovec> v,
                 DeferredCommit* d)
    : lu(l), cdb(c), iov(v), deferred(d) {
  for (const iovec& e : iov) data_length += e.iov_len;
}

store::Durability Command::WriteDurability(bool fua, LogicalUnit& target) {
  const store::Durability d = target.write_durability(fua);
  if (d != store::Durability::kDurable || !deferred) return d;
  deferred->Need(target.lun_ptr());
  return store::Durability::kBuffered;
}

store::Status Command::FlushBeforeStatus(LogicalUnit& target) {
  if (!deferred) return target.lun().Flush();
  deferred->Need(target.lun_ptr());
  return store::Status::Ok();
}

size_t Command::Gather(uint64_t offset, void* dst, size_t len) const {
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  uint64_t pos = 0;
  for (const iovec& e : iov) {
    if (done == len) break;
    uint64_t end = pos + e.iov_len;
    if (end > offset + done) {
      uint64_t from = offset + done - pos;
      size_t n = static_cast<size_t>(std::min<uint64_t>(e.iov_len - from, len - done));
      std::memcpy(out + done, static_cast<const uint8_t*>(e.iov_base) + from, n);
      done += n;
    }
    pos = end;
  }
  return done;
}

std::vector<uint8_t> Command::GatherAll(size_t len) const {
  std::vector<uint8_t> v(static_cast<size_t>(std::min<uint64_t>(len, data_length)));
  Gather(0, v.data(), v.size());
  return v;
}

CommandResult Command::ReturnData(const void* src, size_t len, uint64_t alloc_len) const {
  uint64_t n = std::min<uint64_t>({len, alloc_len, data_length});
  const auto* in = static_cast<const uint8_t*>(src);
  uint64_t done = 0;
  for (const iovec& e : iov) {
    if (done == n) break;
    size_t k = static_cast<size_t>(std::min<uint64_t>(e.iov_len, n - done));
    std::memcpy(e.iov_base, in + done, k);
    done += k;
  }
  return Good(static_cast<uint32_t>(done));
}

std::vector<iovec> Command::Slice(uint64_t offset, uint64_t len) const {
  std::vector<iovec> out;
  store::SliceIovec(iov, offset, len, &out);
  return out;
}

CommandResult FromStoreStatus(LogicalUnit& lu, const store::Status& status, bool writing) {
  using store::Code;
  switch (status.code()) {
    case Code::kOk:
      return Good();
    case Code::kOutOfRange:
      return LbaOutOfRange();
    case Code::kNoSpace:
    case Code::kNotDurable:  // the write is in memory only: not GOOD with the cache off
      lu.mutable_counters().no_space_errors.fetch_add(1, std::memory_order_relaxed);
      return CheckCondition(SenseKey::kDataProtect, asc::kSpaceAllocationFailedWriteProtect);
    case Code::kReadOnly:
      return CheckCondition(SenseKey::kDataProtect, asc::kWriteProtected);
    case Code::kMiscompare:
      return Sense(SenseKey::kMiscompare, asc::kMiscompareDuringVerify)
          .Information(status.miscompare_offset());
    case Code::kIOError:
      return CheckCondition(SenseKey::kMediumError,
                            writing ? asc::kWriteError : asc::kUnrecoveredReadError);
    case Code::kClosed:
      return CheckCondition(SenseKey::kNotReady, asc::kLunNotReadyCauseNotReportable);
    case Code::kBusy: {
      CommandResult r;
      r.status = ScsiStatus::kBusy;
      return r;
    }
    default:
      lu.mutable_counters().internal_errors.fetch_add(1, std::memory_order_relaxed);
      return CheckCondition(SenseKey::kHardwareError, asc::kInternalTargetFailure);
  }
}

}  // namespace cowstore::scsi
