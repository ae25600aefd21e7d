// SPDX-License-Identifier: Apache-2.0
#include "handler/control/protocol.h"

#include <cctype>

namespace cowstore::control {
namespace {

bool Plain(unsigned char c) {
  return std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '/' || c == ',' || c == '+' || c == '-';
}

int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Encode(std::string_view raw) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  out.reserve(raw.size());
  for (unsigned char c : raw) {
    if (Plain(c)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> Decode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size()) return std::nullopt;
    int hi = HexVal(in[i + 1]), lo = HexVal(in[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Record& Record::Set(const std::string& key, const std::string& value) {
  for (auto& [k, v] : fields) {
    if (k == key) {
      v = value;
      return *this;
    }
  }
  fields.emplace_back(key, value);
  return *this;
}

bool Record::Has(const std::string& key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return true;
  }
  return false;
}

std::string Record::Get(const std::string& key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return {};
}

std::optional<uint64_t> Record::GetU64(const std::string& key) const {
  if (!Has(key)) return std::nullopt;
  std::string v = Get(key);
  if (v.empty() || v.size() > 20) return std::nullopt;
  uint64_t r = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (r > (UINT64_MAX - d) / 10) return std::nullopt;
    r = r * 10 + d;
  }
  return r;
}

std::string FormatRecord(const Record& r) {
  std::string out = Encode(r.type);
  for (const auto& [k, v] : r.fields) {
    out += ' ';
    out += Encode(k);
    out += '=';
    out += Encode(v);
  }
  return out;
}

std::optional<Record> ParseRecord(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.empty() || line.size() > kMaxLine) return std::nullopt;
  Record r;
  size_t pos = 0;
  bool first = true;
  while (pos <= line.size()) {
    size_t sp = line.find(' ', pos);
    std::string_view tok = line.substr(pos, sp == std::string_view::npos ? std::string_view::npos : sp - pos);
    if (tok.empty()) return std::nullopt;
    if (first) {
      auto t = Decode(tok);
      if (!t || t->empty()) return std::nullopt;
      r.type = *t;
      first = false;
    } else {
      size_t eq = tok.find('=');
      if (eq == std::string_view::npos || eq == 0) return std::nullopt;
      auto k = Decode(tok.substr(0, eq));
      auto v = Decode(tok.substr(eq + 1));
      if (!k || !v) return std::nullopt;
      r.fields.emplace_back(*k, *v);
    }
    if (sp == std::string_view::npos) break;
    pos = sp + 1;
  }
  return r;
}

std::string SocketPath(const std::string& run_dir, const std::string& pool) {
  return run_dir + "/" + pool + ".sock";
}

}  // namespace cowstore::control
