// A temporary directory tree that mimics configfs (target/core) and /proc
// (a tcmu-runner process), for tests of cowctl's LIO code.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace cowstore::cowctl::testing
