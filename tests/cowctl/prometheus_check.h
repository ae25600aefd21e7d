// SPDX-License-Identifier: Apache-2.0
// A checker of the Prometheus text exposition format (0.0.4), as
// node_exporter's textfile collector parses it, for the tests of
// `cowctl metrics`: metric and label names, label escaping, values, HELP
// and TYPE (at most once, TYPE before the family's first sample), every
// family's samples together, no sample twice, and a final newline. Ours must
// also give every family HELP and TYPE and name every counter *_total.
#pragma once

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace cowstore::cowctl::testing {

struct Exposition {
  std::vector<std::string> problems;          // empty: it parses
  std::map<std::string, double> samples;      // `name{l="v",...}` as written -> value
  std::map<std::string, std::string> types;   // family -> type
};

inline Exposition ParseExposition(const std::string& text) {
  Exposition e;
  auto bad = [&](int line, const std::string& what) { e.problems.push_back("line " + std::to_string(line) + ": " + what); };
  if (!text.empty() && text.back() != '\n') e.problems.push_back("no newline at the end");
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kLabelName("[a-zA-Z_][a-zA-Z0-9_]*");
  std::set<std::string> helped, finished;
  std::string current;  // the family whose samples are being read
  std::istringstream in(text);
  std::string l;
  int n = 0;
  while (std::getline(in, l)) {
    ++n;
    if (l.empty()) continue;
    if (l[0] == '#') {
      std::istringstream c(l.substr(1));
      std::string kw, name;
      c >> kw >> name;
      if (kw != "HELP" && kw != "TYPE") continue;  // a plain comment
      if (!std::regex_match(name, kName)) bad(n, "bad metric name in " + kw + ": " + name);
      if (kw == "HELP") {
        if (!helped.insert(name).second) bad(n, "second HELP for " + name);
      } else {
        std::string type, rest;
        c >> type >> rest;
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
          bad(n, "unknown type " + type);
        if (!rest.empty()) bad(n, "text after the type");
        if (e.types.count(name)) bad(n, "second TYPE for " + name);
        bool sampled = finished.count(name) || current == name;
        if (sampled) bad(n, "TYPE for " + name + " after its samples");
        e.types[name] = type;
      }
      continue;
    }
    // name{labels} value [timestamp]
    size_t i = 0;
    while (i < l.size() && l[i] != '{' && l[i] != ' ') ++i;
    std::string name = l.substr(0, i);
    if (!std::regex_match(name, kName)) bad(n, "bad metric name: " + name);
    std::string key = name;
    if (i < l.size() && l[i] == '{') {
      size_t j = i + 1;
      std::set<std::string> seen;
      while (j < l.size() && l[j] != '}') {
        size_t eq = l.find('=', j);
        if (eq == std::string::npos) { bad(n, "label without '='"); break; }
        std::string ln = l.substr(j, eq - j);
        if (!std::regex_match(ln, kLabelName) || ln.rfind("__", 0) == 0) bad(n, "bad label name: " + ln);
        if (!seen.insert(ln).second) bad(n, "label twice: " + ln);
        if (eq + 1 >= l.size() || l[eq + 1] != '"') { bad(n, "label value not quoted"); break; }
        size_t k = eq + 2;
        for (; k < l.size() && l[k] != '"'; ++k) {
          if (l[k] == '\\') {
            if (k + 1 >= l.size() || (l[k + 1] != '\\' && l[k + 1] != '"' && l[k + 1] != 'n')) bad(n, "bad escape");
            ++k;
          }
        }
        if (k >= l.size()) { bad(n, "unterminated label value"); break; }
        j = k + 1;
        if (j < l.size() && l[j] == ',') ++j;
      }
      if (j >= l.size()) { bad(n, "no '}'"); continue; }
      key = l.substr(0, j + 1);
      i = j + 1;
    }
    if (i >= l.size() || l[i] != ' ') { bad(n, "no value"); continue; }
    std::istringstream v(l.substr(i + 1));
    std::string value, ts, extra;
    v >> value >> ts >> extra;
    char* end = nullptr;
    double d = std::strtod(value.c_str(), &end);
    bool special = value == "NaN" || value == "+Inf" || value == "-Inf";
    if (value.empty() || (!special && *end != '\0')) bad(n, "bad value: " + value);
    if (!ts.empty() && ts.find_first_not_of("-0123456789") != std::string::npos) bad(n, "bad timestamp: " + ts);
    if (!extra.empty()) bad(n, "text after the timestamp");
    if (name != current) {
      if (!current.empty()) finished.insert(current);
      if (finished.count(name)) bad(n, "samples of " + name + " are not together");
      current = name;
    }
    if (!e.samples.emplace(key, d).second) bad(n, "sample twice: " + key);
    // Ours: every family documented and typed, counters named *_total.
    if (!helped.count(name)) bad(n, "no HELP before " + name);
    auto t = e.types.find(name);
    if (t == e.types.end()) bad(n, "no TYPE before " + name);
    else if (t->second == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total"))
      bad(n, "counter not named *_total: " + name);
  }
  return e;
}

}  // namespace cowstore::cowctl::testing
