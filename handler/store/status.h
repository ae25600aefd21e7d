// SPDX-License-Identifier: Apache-2.0
// Errors are values, never exceptions: every store call returns a Status (or
// a Result<T>) and the caller decides. Codes are storage-domain, not SCSI: the
// SCSI layer maps them to sense data.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace cowstore::store {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound,         // unknown LUN (or pool file missing)
  kAlreadyExists,    // LUN name clash, pool already present
  kInvalidArgument,  // bad name, size, block size, alignment, option
  kOutOfRange,       // LBA/count beyond the end of the LUN
  kNoSpace,          // the pool cannot allocate; nothing was changed
  kMiscompare,       // compare_and_write: data differed; nothing written
  kCorruption,       // bad magic/checksum/invariant in on-disk metadata
  kUnsupported,      // unsupported format version or feature
  kBusy,             // pool locked by another process, or LUN in use
  kIOError,          // the device failed (EIO and friends)
  kClosed,           // pool or LUN handle already closed
  kReadOnly,         // write-class call on a read-only LUN (a snapshot); nothing done
  kNotDurable,       // applied in memory (reads see it), but its commit was refused for
                     // room: durable with the first checkpoint that finds room (after a
                     // Grow or a free), lost if the pool closes or loses power first.
                     // Unlike kNoSpace, the change *was* made.
                     // (keep last: kLastCode names it, and the control client reads
                     // codes up to it)
};
inline constexpr Code kLastCode = Code::kNotDurable;

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // For kMiscompare: byte offset (from the start of the compared range) of the
  // first differing byte. Zero otherwise.
  uint64_t miscompare_offset() const { return miscompare_offset_; }
  Status& with_miscompare_offset(uint64_t off) { miscompare_offset_ = off; return *this; }
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
  uint64_t miscompare_offset_ = 0;
};

const char* CodeName(Code code);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {}   // NOLINT(implicit); must not be ok()
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  // The error, moved out (moving allocates nothing, where a copy of the
  // message would); only when !ok().
  Status TakeStatus() && { return std::get<Status>(std::move(v_)); }

 private:
  std::variant<T, Status> v_;
};

// Status(code, message) where no exception may pass (the commit queue's
// leader, a catch block): out of memory for the message, the status keeps
// its code with an empty message, which allocates nothing.
inline Status StatusNoThrow(Code code, std::string_view message) noexcept {
  try {
    return Status(code, std::string(message));
  } catch (...) {
    return Status(code, std::string());
  }
}

// A copy of `s` that cannot throw (the same fallback: the code, no message).
inline Status CopyStatus(const Status& s) noexcept {
  try {
    return s;
  } catch (...) {
    Status bare(s.code(), std::string());
    bare.with_miscompare_offset(s.miscompare_offset());
    return bare;
  }
}

// The one rule for an exception that reaches an edge of the store (the Pool
// and Lun API, the commit queue's leader): running out of memory is kNoSpace,
// anything else kIOError. Call only inside a catch block; `context` ("commit
// failed") prefixes the message. Never throws (a second std::bad_alloc while
// the message is built, likely when memory is short, would otherwise escape
// the catch, and the noexcept commit queue leader would terminate): without
// memory for the message it is a short one that needs none.
//
// kNoSpace means "retry later" only because the store keeps every
// allocation that can fail ahead of the changes it feeds: an operation
// refused for memory changed nothing. Where that cannot hold, the store
// does not let the exception through: a metadata update that throws part way
// (Core::AppendLocked) fails the pool with kIOError (it must be reopened),
// and so does a commit that throws (its queue's failure is sticky, whatever
// code this returns for it).
inline Status StatusFromCurrentException(std::string_view context = {}) noexcept {
  // First the code and the short message, which allocate nothing.
  Code code = Code::kIOError;
  const char* what = "internal error";
  try {
    throw;
  } catch (const std::bad_alloc&) {
    code = Code::kNoSpace;
    what = "out of memory";
  } catch (...) {
  }
  try {
    const std::string prefix = context.empty() ? std::string() : std::string(context) + ": ";
    try {
      throw;
    } catch (const std::bad_alloc&) {
      return Status(code, prefix + what);
    } catch (const std::exception& e) {
      return Status(code, prefix + what + ": " + e.what());
    } catch (...) {
      return Status(code, prefix + what);
    }
  } catch (...) {
    return StatusNoThrow(code, what);
  }
}

}  // namespace cowstore::store
