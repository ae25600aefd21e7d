// SPDX-License-Identifier: Apache-2.0
#include "handler/store/status.h"

namespace cowstore::store {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kNoSpace: return "NoSpace";
    case Code::kMiscompare: return "Miscompare";
    case Code::kCorruption: return "Corruption";
    case Code::kUnsupported: return "Unsupported";
    case Code::kBusy: return "Busy";
    case Code::kIOError: return "IOError";
    case Code::kClosed: return "Closed";
    case Code::kReadOnly: return "ReadOnly";
    case Code::kNotDurable: return "NotDurable";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = CodeName(code_);
  if (!message_.empty()) s += ": " + message_;
  if (code_ == Code::kMiscompare) s += " (at byte " + std::to_string(miscompare_offset_) + ")";
  return s;
}

}  // namespace cowstore::store
