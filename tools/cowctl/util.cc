#include "tools/cowctl/util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace cowstore::cowctl {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.' || name[0] == '-') return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

void RequireName(const std::string& name, const char* what) {
  if (!ValidName(name)) {
    throw UserError(std::string("invalid ") + what + " name '" + name +
                    "': use 1-64 characters of A-Z a-z 0-9 _ . - not starting with '.' or '-'");
  }
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

std::string Cfgstring::str() const {
  // The ';' form: the kernel cuts a control write at ',' and rtslib
  // (targetcli's restoreconfig) refuses ':' in a config string.
  std::string s = "cowstore/" + pool + "/" + lun;
  for (const auto& [k, v] : options) s += ";" + k + "=" + v;
  return s;
}

std::optional<Cfgstring> ParseCfgstring(const std::string& dev_config) {
  const std::string prefix = "cowstore/";
  std::string s = Trim(dev_config);
  if (s.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  s = s.substr(prefix.size());
  std::string opts;
  if (auto sep = s.find_first_of(":;"); sep != std::string::npos) {
    opts = s.substr(sep + 1);
    s = s.substr(0, sep);
  }
  for (auto& c : opts) {
    if (c == ',' || c == ':') c = ';';
  }
  auto slash = s.find('/');
  if (slash == std::string::npos) return std::nullopt;
  Cfgstring c{s.substr(0, slash), s.substr(slash + 1), {}};
  if (!ValidName(c.pool) || !ValidName(c.lun)) return std::nullopt;
  for (const auto& kv : Split(opts, ';')) {
    if (kv.empty()) continue;
    auto eq = kv.find('=');
    if (eq == std::string::npos) return std::nullopt;
    if (kv.substr(0, eq) == "tcmur_cmd_time_out") continue;  // tcmu-runner's own
    c.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return c;
}

std::string UuidString(const std::array<uint8_t, 16>& id) {
  std::string s;
  static const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[id[i] >> 4];
    s += hex[id[i] & 15];
  }
  return s;
}

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

std::string DefaultPoolDir() {
  const char* e = std::getenv("COWSTORE_POOL_DIR");
  return e && *e ? e : "/var/lib/cowstore/pools";
}

std::string DefaultRunDir() {
  const char* e = std::getenv("COWSTORE_RUN_DIR");
  return e && *e ? e : "/run/cowstore";
}

}  // namespace cowstore::cowctl
