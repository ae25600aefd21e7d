// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/output.h"

#include <unistd.h>

#include <cstdio>

namespace cowstore::cowctl {

Json& Json::operator[](const std::string& key) {
  if (std::holds_alternative<std::nullptr_t>(v_)) v_ = Object{};
  auto& o = std::get<Object>(v_);
  for (auto& [k, v] : o) {
    if (k == key) return v;
  }
  o.emplace_back(key, Json());
  return o.back().second;
}

void Json::push_back(Json v) {
  if (std::holds_alternative<std::nullptr_t>(v_)) v_ = Array{};
  std::get<Array>(v_).push_back(std::move(v));
}

std::string JsonEscape(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(out, indent, 0);
  return out;
}

void Json::DumpTo(std::string& out, int indent, int depth) const {
  auto nl = [&](int d) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (std::holds_alternative<std::nullptr_t>(v_)) {
    out += "null";
  } else if (auto* b = std::get_if<bool>(&v_)) {
    out += *b ? "true" : "false";
  } else if (auto* i = std::get_if<int64_t>(&v_)) {
    out += std::to_string(*i);
  } else if (auto* u = std::get_if<uint64_t>(&v_)) {
    out += std::to_string(*u);
  } else if (auto* d = std::get_if<double>(&v_)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", *d);
    out += buf;
  } else if (auto* s = std::get_if<std::string>(&v_)) {
    out += JsonEscape(*s);
  } else if (auto* a = std::get_if<Array>(&v_)) {
    if (a->empty()) { out += "[]"; return; }
    out += '[';
    for (size_t k = 0; k < a->size(); ++k) {
      if (k) out += ',';
      nl(depth + 1);
      (*a)[k].DumpTo(out, indent, depth + 1);
    }
    nl(depth);
    out += ']';
  } else {
    const auto& o = std::get<Object>(v_);
    if (o.empty()) { out += "{}"; return; }
    out += '{';
    for (size_t k = 0; k < o.size(); ++k) {
      if (k) out += ',';
      nl(depth + 1);
      out += JsonEscape(o[k].first);
      out += indent > 0 ? ": " : ":";
      o[k].second.DumpTo(out, indent, depth + 1);
    }
    nl(depth);
    out += '}';
  }
}

std::string Table::Render() const {
  std::vector<size_t> w(headers_.size(), 0);
  for (size_t c = 0; c < headers_.size(); ++c) w[c] = headers_[c].size();
  for (const auto& r : rows_) {
    for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < w.size(); ++c) {
      std::string cell = c < cells.size() ? cells[c] : "";
      l += cell;
      if (c + 1 < w.size()) l.append(w[c] - cell.size() + 2, ' ');
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(headers_);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string KeyValues(const std::vector<std::pair<std::string, std::string>>& kv) {
  size_t w = 0;
  for (const auto& [k, v] : kv) w = std::max(w, k.size());
  std::string out;
  for (const auto& [k, v] : kv) {
    out += k + ":";
    out.append(w - k.size() + 1, ' ');
    out += v + "\n";
  }
  return out;
}

Progress::Progress(std::string label) : label_(std::move(label)), tty_(::isatty(2) == 1) {}

Progress::~Progress() { Done(); }

void Progress::Update(uint64_t done, uint64_t total) {
  if (!tty_ || total == 0) return;
  int permille = static_cast<int>(done * 1000 / total);
  if (permille == last_permille_) return;
  last_permille_ = permille;
  constexpr int kWidth = 40;
  int fill = permille * kWidth / 1000;
  std::string bar(static_cast<size_t>(fill), '#');
  bar.append(static_cast<size_t>(kWidth - fill), '.');
  std::fprintf(stderr, "\r%s [%s] %3d.%d%%", label_.c_str(), bar.c_str(), permille / 10, permille % 10);
  std::fflush(stderr);
}

void Progress::Done() {
  if (tty_ && last_permille_ >= 0 && !finished_) std::fputc('\n', stderr);
  finished_ = true;
}

}  // namespace cowstore::cowctl
