// SPDX-License-Identifier: Apache-2.0
// The control protocol between cowctl and the handler process that holds a
// pool open (docs/design/cowctl.md has the full description).
//
// A unix stream socket per open pool, <run_dir>/<pool>.sock (run_dir default
// /run/cowstore, 0700; socket 0600; peers other than root or the server's
// own uid are refused). Text lines, one request per line, any number of
// requests per connection, answered in order:
//
//   request: <verb> [key=value ...]\n
//   reply:   ok [key=value ...]\n  | error code=<CodeName> message=<text>\n
//            then zero or more "<type> key=value ...\n" records
//            then "end\n"
//   A request with progress=1 to lun-import, lun-export, check or scrub (version 2)
//   may get "progress done=<n> total=<n>\n" lines before the status line;
//   a server of version 1 ignores the key and sends none.
//
// Values are percent-encoded: bytes other than [A-Za-z0-9_.:/,+-] become %XX,
// so a line never holds a space, '=' or newline inside a value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cowstore::control {

inline constexpr int kProtocolVersion = 2;
// What `hello` lists. "safe-images": lun-import/lun-export refuse links,
// FIFOs and the pool's own file, replace files atomically, take mode= and
// stop when the client hangs up; cowctl sends them to no handler without it
// (an older one still loaded after an upgrade). "scrub": the scrub request.
inline constexpr const char* kFeatures = "progress,safe-images,scrub,snapshots";
inline constexpr int kSendTimeoutMs = 10000;  // server: per final reply
inline constexpr size_t kMaxLine = 64 * 1024;

std::string Encode(std::string_view raw);
// nullopt on a malformed escape.
std::optional<std::string> Decode(std::string_view encoded);

struct Record {
  std::string type;
  std::vector<std::pair<std::string, std::string>> fields;

  Record() = default;
  explicit Record(std::string t) : type(std::move(t)) {}
  Record& Set(const std::string& key, const std::string& value);
  Record& Set(const std::string& key, uint64_t value) { return Set(key, std::to_string(value)); }
  bool Has(const std::string& key) const;
  std::string Get(const std::string& key) const;  // "" when absent
  // nullopt when absent or not a decimal number.
  std::optional<uint64_t> GetU64(const std::string& key) const;
};

std::string FormatRecord(const Record& r);  // no trailing newline
std::optional<Record> ParseRecord(std::string_view line);

std::string SocketPath(const std::string& run_dir, const std::string& pool);

}  // namespace cowstore::control
