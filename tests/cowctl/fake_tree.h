// SPDX-License-Identifier: Apache-2.0
// A temporary directory tree that mimics configfs (target/core) and /proc
// (a tcmu-runner process), for tests of cowctl's LIO code.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cowstore::cowctl::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cowctl-test-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    path_ = p ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteText(const std::string& p, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(p).parent_path());
  std::ofstream(p) << text;
}

inline std::string ReadText(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool Exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// Every directory, file (with its contents) and link (with its target) under
// `root`, one per line in name order: equal snapshots mean nothing changed.
inline std::string Snapshot(const std::string& root) {
  std::vector<std::string> lines;
  if (!Exists(root)) return "(missing)\n";
  for (auto it = std::filesystem::recursive_directory_iterator(root); it != std::filesystem::end(it); ++it) {
    std::string rel = it->path().string().substr(root.size());
    if (it->is_symlink()) {
      lines.push_back(rel + " -> " + std::filesystem::read_symlink(it->path()).string());
      it.disable_recursion_pending();
    } else if (it->is_directory()) {
      lines.push_back(rel + "/");
    } else {
      lines.push_back(rel + ": " + ReadText(it->path().string()));
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// <dir>/configfs/target/core and <dir>/proc/4242/comm = tcmu-runner.
struct FakeHost {
  TempDir dir;
  std::string configfs = dir.path() + "/configfs";
  std::string proc = dir.path() + "/proc";
  FakeHost() {
    std::filesystem::create_directories(configfs + "/target/core");
    WriteText(proc + "/4242/comm", "tcmu-runner\n");
    WriteText(proc + "/1/comm", "systemd\n");
  }
  std::string T(const std::string& rel) const { return configfs + "/target/" + rel; }
};

// "initiator:lun_M->lun_L " for every mapped LUN under a TPG's acls/
// directory, sorted: which TPG LUN each ACL's mapped LUN links to. A link
// that resolves to nothing fails the calling test.
inline std::string AclMappings(const std::string& acls_dir) {
  std::string out;
  if (!std::filesystem::exists(acls_dir)) return out;
  std::vector<std::string> lines;
  for (const auto& acl : std::filesystem::directory_iterator(acls_dir)) {
    for (const auto& ml : std::filesystem::directory_iterator(acl.path())) {
      if (!ml.is_directory() || ml.path().filename().string().rfind("lun_", 0) != 0) continue;
      for (const auto& link : std::filesystem::directory_iterator(ml.path())) {
        if (!link.is_symlink()) continue;
        EXPECT_TRUE(std::filesystem::exists(link.path())) << link.path() << " dangles";
        lines.push_back(acl.path().filename().string() + ":" + ml.path().filename().string() + "->" +
                        std::filesystem::read_symlink(link.path()).filename().string());
      }
    }
  }
  std::sort(lines.begin(), lines.end());
  for (const auto& l : lines) out += l + " ";
  return out;
}

}  // namespace cowstore::cowctl::testing
