// SPDX-License-Identifier: Apache-2.0
// Without libFuzzer (GCC builds): runs LLVMFuzzerTestOneInput on every file
// of the directories or files given, so the seed corpus is a regression test.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return 1;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
  return 0;
}

int main(int argc, char** argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      std::fprintf(stderr, "missing %s\n", argv[i]);
      return 1;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR* d = opendir(argv[i]);
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        errors += RunFile(std::string(argv[i]) + "/" + e->d_name);
        ++files;
      }
      closedir(d);
    } else {
      errors += RunFile(argv[i]);
      ++files;
    }
  }
  std::printf("replayed %d inputs\n", files);
  return errors == 0 && files > 0 ? 0 : 1;
}
