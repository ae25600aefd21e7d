// SPDX-License-Identifier: Apache-2.0
// Output for people (aligned tables, "key: value" blocks) and for scripts
// (--json). Commands build a Json value and, when not in --json mode, a
// human rendering of the same facts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace cowstore::cowctl {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;  // keeps insertion order

  Json() : v_(nullptr) {}
  Json(std::nullptr_t) : v_(nullptr) {}
  Json(bool b) : v_(b) {}
  Json(int i) : v_(static_cast<int64_t>(i)) {}
  Json(int64_t i) : v_(i) {}
  Json(uint32_t u) : v_(static_cast<uint64_t>(u)) {}
  Json(uint64_t u) : v_(u) {}
  Json(double d) : v_(d) {}
  Json(const char* s) : v_(std::string(s)) {}
  Json(std::string s) : v_(std::move(s)) {}
  Json(Array a) : v_(std::move(a)) {}
  Json(Object o) : v_(std::move(o)) {}
  static Json object() { return Json(Object{}); }
  static Json array() { return Json(Array{}); }

  // Object member access (appends when missing).
  Json& operator[](const std::string& key);
  void push_back(Json v);
  std::string Dump(int indent = 2) const;

 private:
  void DumpTo(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, int64_t, uint64_t, double, std::string, Array, Object> v_;
};

std::string JsonEscape(const std::string& s);

class Table {
 public:
  explicit Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// "key: value" lines with keys aligned.
std::string KeyValues(const std::vector<std::pair<std::string, std::string>>& kv);

// A progress bar on stderr, drawn only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(std::string label);
  ~Progress();
  void Update(uint64_t done, uint64_t total);
  void Done();

 private:
  std::string label_;
  bool tty_;
  int last_permille_ = -1;
  bool finished_ = false;
};

}  // namespace cowstore::cowctl
