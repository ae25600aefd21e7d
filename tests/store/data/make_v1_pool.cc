// SPDX-License-Identifier: Apache-2.0
// Writes tests/store/data/v1_pool.img: a format-version-1 pool made by the
// store as it was before version 2 (main at 39ba3da). Not built by CMake: it
// compiles only against that commit's handler/store, which is the point:
//
//   git archive 39ba3da handler/store | tar -x -C /tmp/v1src
//   g++ -std=c++20 -O1 -I/tmp/v1src tests/store/data/make_v1_pool.cc \
//       /tmp/v1src/handler/store/*.cc -o /tmp/make_v1_pool -lpthread
//   /tmp/make_v1_pool /tmp/v1 && cp /tmp/v1/image tests/store/data/v1_pool.img
//
// The image holds a version-1 checkpoint (LUN "a", written before a reopen)
// and a version-1 journal (LUN "b" created, written and partly cloned from
// "a" after it): it is a copy of the file taken while the pool was still
// open, durable operations done, as a power cut would leave it.
// tests/store/v1_test.cc recomputes every byte from Fill() below.
#include <cstdio>
#include <filesystem>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/pool.h"

using namespace cowstore::store;

namespace {
constexpr uint64_t kMiB = 1 << 20;
void Fill(std::vector<uint8_t>* v, uint8_t seed) {
  for (size_t i = 0; i < v->size(); i++) (*v)[i] = static_cast<uint8_t>(i * 7 + seed + i / 4096);
}
int Die(const char* what, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string dir = argv[1], path = dir + "/pool";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(path);
  PoolOptions o;
  o.size_bytes = 8 * kMiB;
  o.allocation_unit = 64 * 1024;
  o.journal_bytes = 64 * 1024;
  std::vector<uint8_t> a(kMiB), b(kMiB / 2);
  Fill(&a, 1);
  Fill(&b, 2);
  {
    auto p = Pool::Create(DefaultEnv(), path, o);
    if (!p.ok()) return Die("create", p.status());
    if (auto r = (*p)->CreateLun("a", kMiB, 512); !r.ok()) return Die("lun a", r.status());
    auto la = (*p)->OpenLun("a");
    if (!la.ok()) return Die("open a", la.status());
    if (Status s = (*la)->Write(0, kMiB / 512, a.data(), Durability::kDurable); !s.ok())
      return Die("write a", s);
  }
  auto p = Pool::Open(DefaultEnv(), path, OpenOptions{});  // checkpoints "a"
  if (!p.ok()) return Die("open", p.status());
  if (auto r = (*p)->CreateLun("b", kMiB, 512); !r.ok()) return Die("lun b", r.status());
  auto la = (*p)->OpenLun("a");
  auto lb = (*p)->OpenLun("b");
  if (!la.ok() || !lb.ok()) return Die("open luns", Status(Code::kNotFound, "a or b"));
  // b = [0, 512 KiB) its own data, [512 KiB, 768 KiB) a's first 256 KiB by reference.
  if (Status s = (*lb)->Write(0, b.size() / 512, b.data(), Durability::kDurable); !s.ok())
    return Die("write b", s);
  if (Status s = (*p)->CloneRange(**la, 0, **lb, 1024, 512, Durability::kDurable); !s.ok())
    return Die("clone", s);
  std::filesystem::copy_file(path, dir + "/image");  // while open: the journal holds b
  return 0;
}
