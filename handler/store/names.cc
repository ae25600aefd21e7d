// SPDX-License-Identifier: Apache-2.0
#include "handler/store/names.h"

namespace cowstore::store {
namespace {

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '.' || c == '-';
}

bool Fail(std::string* reason, std::string msg) {
  if (reason) *reason = std::move(msg);
  return false;
}

}  // namespace

std::string Quoted(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[(static_cast<unsigned char>(c) >> 4) & 0xf];
      out += kHex[static_cast<unsigned char>(c) & 0xf];
    }
  }
  return out + "'";
}

bool ValidStoredName(std::string_view name, std::string_view what, std::string* reason) {
  const std::string w(what);
  if (name.empty()) return Fail(reason, w + " is empty");
  if (name.size() > kMaxNameLength) {
    return Fail(reason, w + " " + Quoted(name.substr(0, 16)) + "... is " +
                            std::to_string(name.size()) + " characters long; at most " +
                            std::to_string(kMaxNameLength) + " are allowed");
  }
  for (char c : name) {
    if (!NameChar(c)) {
      return Fail(reason, w + " " + Quoted(name) + " contains " + Quoted(std::string_view(&c, 1)) +
                              "; use only letters, digits, '_', '.' and '-'");
    }
  }
  if (name[0] == '.' || name[0] == '-') {
    return Fail(reason, w + " " + Quoted(name) + " must not start with '.' or '-'");
  }
  return true;
}

bool ValidName(std::string_view name, std::string_view what, std::string* reason) {
  if (!ValidStoredName(name, what, reason)) return false;
  if (name.find("..") != std::string_view::npos) {
    return Fail(reason, std::string(what) + " " + Quoted(name) + " must not contain \"..\"");
  }
  return true;
}

bool ValidBlockSize(uint64_t bytes) { return bytes == 512 || bytes == 4096; }

bool ValidAllocationUnit(uint64_t bytes) {
  return bytes >= kMinAllocationUnit && bytes <= kMaxAllocationUnit && (bytes & (bytes - 1)) == 0;
}

std::string GrainRule(uint64_t grain, uint64_t au) {
  const std::string g = "grain of " + std::to_string(grain) + " bytes ";
  if (grain == 0 || (grain & (grain - 1)) != 0) return g + "is not a power of two";
  if (grain < 512) return g + "is below the smallest LUN block size (512)";
  if (grain > au) return g + "is larger than the allocation unit";
  if (au % grain != 0) return g + "does not divide the allocation unit";
  return "";
}

std::string WriteUnitRule(uint64_t bytes) {
  const std::string w = "the medium's atomic write unit of " + std::to_string(bytes) + " bytes ";
  if (bytes == 0 || (bytes & (bytes - 1)) != 0) return w + "is not a power of two";
  if (bytes < 512) return w + "is below a sector (512)";
  if (bytes > kSuperblockSlot)
    return w + "is above a superblock slot (" + std::to_string(kSuperblockSlot) +
           "): writing one slot could tear the other";
  return "";
}

std::string UuidText(const Uuid& id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[id[i] >> 4];
    s += kHex[id[i] & 0xf];
  }
  return s;
}

bool ParseUuidText(std::string_view text, Uuid* id) {
  const bool dashed = text.size() == 36;
  if (!dashed && text.size() != 32) return false;
  Uuid out{};
  size_t digit = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (dashed && (i == 8 || i == 13 || i == 18 || i == 23)) {
      if (c != '-') return false;
      continue;
    }
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return false;
    }
    out[digit / 2] = static_cast<uint8_t>(out[digit / 2] | (digit % 2 ? v : v << 4));
    ++digit;
  }
  *id = out;
  return true;
}

}  // namespace cowstore::store
