// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/util.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "handler/common/cfgstring.h"
#include "handler/store/names.h"

namespace cowstore::cowctl {

bool ValidName(const std::string& name) { return store::ValidName(name); }

void RequireName(const std::string& name, const char* what) {
  std::string label = what;
  label += " name";
  std::string why;
  if (store::ValidName(name, label, &why)) return;
  std::string msg = "invalid ";  // built in steps: GCC 12 warns (-Wrestrict) on "..." + string
  msg += why;
  throw UserError(msg);
}

uint64_t ParseSize(const std::string& text, const char* what) {
  auto bad = [&]() {
    return UserError(std::string("invalid ") + what + " '" + text +
                     "': expected a size such as 4096, 64K, 10G or 1.5T (binary units)");
  };
  std::string t = Trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  if (i == 0) throw bad();
  std::string num = t.substr(0, i), unit = t.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "IB") unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit[1] == 'B') unit.resize(1);
  else if (unit == "B") unit.clear();
  int shift;
  if (unit.empty()) shift = 0;
  else if (unit == "K") shift = 10;
  else if (unit == "M") shift = 20;
  else if (unit == "G") shift = 30;
  else if (unit == "T") shift = 40;
  else if (unit == "P") shift = 50;
  else throw bad();
  if (num.find('.') == std::string::npos) {
    if (num.size() > 19) throw bad();
    uint64_t v = std::stoull(num);
    if (shift && v > (UINT64_MAX >> shift)) throw bad();
    return v << shift;
  }
  if (num.find('.') != num.rfind('.') || num.back() == '.' || num.front() == '.') throw bad();
  long double v = std::strtold(num.c_str(), nullptr) * std::ldexp(1.0L, shift);
  if (!(v < 1.8e19L)) throw bad();
  uint64_t r = static_cast<uint64_t>(std::llround(static_cast<double>(v)));
  return r;
}

uint64_t BlockDeviceBytes(const std::string& path, bool follow_links) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW));
  if (fd < 0) return 0;
  uint64_t bytes = 0;
  if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) bytes = 0;
  ::close(fd);
  return bytes;
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) { v /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : (v < 100 ? "%.1f %s" : "%.0f %s"), v, kUnits[u]);
  return buf;
}

LunRef ParseLunRef(const std::string& text) {
  auto slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) {
    throw UserError("invalid LUN '" + text + "': write it as POOL/LUN, e.g. tank/vm1");
  }
  LunRef r{text.substr(0, slash), text.substr(slash + 1)};
  RequireName(r.pool, "pool");
  RequireName(r.lun, "LUN");
  return r;
}

// The format is common::ParseCfgstring/FormatCfgstring's (the handler's own);
// cowctl keeps its options as a map of the ones given.
namespace {
common::LunSpec ToSpec(const Cfgstring& c) {
  common::LunSpec spec{c.pool, c.lun, {}, {}, {}};
  if (auto it = c.options.find("copy_group"); it != c.options.end()) spec.copy_group = it->second;
  if (auto it = c.options.find("wce"); it != c.options.end()) spec.wce = it->second == "1";
  if (auto it = c.options.find("thin_on_thin"); it != c.options.end()) spec.thin_on_thin = it->second == "1";
  return spec;
}
}  // namespace

std::string Cfgstring::str() const { return common::FormatCfgstring(ToSpec(*this)); }

std::optional<Cfgstring> ParseCfgstring(const std::string& dev_config) {
  common::LunSpec spec;
  std::string why;
  // configfs shows attribute values with a trailing newline; nothing else
  // is taken off, so cowctl reads exactly what the handler gets.
  std::string_view text = dev_config;
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (!common::ParseCfgstring(text, &spec, &why)) return std::nullopt;
  Cfgstring c{spec.pool, spec.lun, {}};
  if (!spec.copy_group.empty()) c.options["copy_group"] = spec.copy_group;
  if (spec.wce) c.options["wce"] = std::string(1, *spec.wce ? '1' : '0');
  if (spec.thin_on_thin) c.options["thin_on_thin"] = std::string(1, *spec.thin_on_thin ? '1' : '0');
  return c;
}

std::string UuidString(const std::array<uint8_t, 16>& id) { return store::UuidText(id); }

std::array<uint8_t, 16> RandomBytes16() {
  std::array<uint8_t, 16> b{};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, b.data(), b.size()) != static_cast<ssize_t>(b.size())) {
    if (fd >= 0) ::close(fd);
    throw UserError("cannot read /dev/urandom");
  }
  ::close(fd);
  return b;
}

uint64_t Hash64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
  return h;
}

std::string Hex(uint64_t v, int digits) {
  std::string s(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i) { s[static_cast<size_t>(i)] = "0123456789abcdef"[v & 15]; v >>= 4; }
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (true) {
    auto p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

std::string DefaultPoolDir() { return common::PoolDirectory(); }

std::string DefaultRunDir() {
  const char* e = std::getenv("COWSTORE_RUN_DIR");
  return e && *e ? e : "/run/cowstore";
}

}  // namespace cowstore::cowctl
