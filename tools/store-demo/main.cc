// SPDX-License-Identifier: Apache-2.0
// store-demo: creates a pool in a sparse file, two 24 GiB LUNs, writes data
// into the first, clones 20 GiB of it into the second, and prints what the
// clone cost against copying the same range by read+write (the copy is timed
// on a sample and extrapolated, as the output says).
//
//   store-demo [--dir DIR] [--sample-mib N] [--keep]
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/pool.h"

using namespace cowstore::store;

namespace {

constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "store-demo: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}
void Check(const char* what, const Status& s) {
  if (!s.ok()) Fail(what, s);
}

uint64_t DiskBytes(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

std::string Human(double bytes) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %s", bytes, u[i]);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = ".";
  uint64_t sample = 256 * kMiB;
  bool keep = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else if (a == "--sample-mib" && i + 1 < argc) sample = std::strtoull(argv[++i], nullptr, 10) * kMiB;
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: store-demo [--dir DIR] [--sample-mib N] [--keep]\n");
      return 2;
    }
  }
  if (sample == 0 || sample > 20 * kGiB) sample = 256 * kMiB;
  const uint64_t kClone = 20 * kGiB, kLun = 24 * kGiB;
  std::string path = dir + "/store-demo.pool";
  ::unlink(path.c_str());

  PoolOptions po;
  po.size_bytes = 64 * kGiB;  // declared; the file is sparse and grows with use
  auto pr = Pool::Create(DefaultEnv(), path, po);
  if (!pr.ok()) Fail("create pool", pr.status());
  std::unique_ptr<Pool> pool = std::move(pr.value());
  std::printf("pool %s: declared %s, allocation unit %s\n", path.c_str(), Human(64.0 * kGiB).c_str(),
              Human(pool->allocation_unit()).c_str());
  Check("create LUN src", pool->CreateLun("src", kLun, 512).status());
  Check("create LUN dst", pool->CreateLun("dst", kLun, 512).status());
  Check("create LUN copy", pool->CreateLun("copy", kLun, 512).status());
  auto src = pool->OpenLun("src").value();
  auto dst = pool->OpenLun("dst").value();
  auto copy = pool->OpenLun("copy").value();

  // Real data in the first `sample` bytes, the rest of the 20 GiB thick
  // allocated (mapped AUs): the clone's cost depends on extents, not bytes.
  std::vector<uint8_t> buf(kMiB), back(kMiB);
  std::mt19937_64 rng(2026);
  double t0 = Now();
  for (uint64_t off = 0; off < sample; off += kMiB) {
    for (size_t i = 0; i < buf.size(); i += 8) {
      uint64_t x = rng();
      std::memcpy(&buf[i], &x, 8);
    }
    Check("write", src->Write(off / 512, kMiB / 512, buf.data(), Durability::kBuffered));
  }
  Check("allocate", src->Allocate(0, kClone / 512, Durability::kBuffered));
  Check("flush", pool->Flush());
  std::printf("wrote %s of data into LUN src and mapped the rest of its first 20 GiB (%.2f s)\n",
              Human(static_cast<double>(sample)).c_str(), Now() - t0);

  // The clone: whole AUs shared by reference, durable when it returns.
  uint64_t disk_before = DiskBytes(path);
  t0 = Now();
  Check("clone", pool->CloneRange(*src, 0, *dst, 0, kClone / 512, Durability::kDurable));
  double clone_s = Now() - t0;
  uint64_t disk_after = DiskBytes(path);

  // The copy it replaces: read + write through the store, timed on a sample.
  t0 = Now();
  for (uint64_t off = 0; off < sample; off += kMiB) {
    Check("read", src->Read(off / 512, kMiB / 512, buf.data()));
    Check("write", copy->Write(off / 512, kMiB / 512, buf.data(), Durability::kBuffered));
  }
  Check("flush", pool->Flush());
  double copy_sample_s = Now() - t0;
  double copy_s = copy_sample_s * static_cast<double>(kClone) / static_cast<double>(sample);

  // The clone reads back the same bytes, and writing to it leaves src alone.
  for (uint64_t off = 0; off < sample; off += 64 * kMiB) {
    Check("read", src->Read(off / 512, kMiB / 512, buf.data()));
    Check("read", dst->Read(off / 512, kMiB / 512, back.data()));
    if (buf != back) {
      std::fprintf(stderr, "store-demo: clone differs from its source at %llu\n", (unsigned long long)off);
      return 1;
    }
  }
  std::vector<uint8_t> ones(4096, 1);
  Check("write", dst->Write(8, 8, ones.data(), Durability::kDurable));
  Check("read", src->Read(8, 8, back.data()));
  if (std::memcmp(back.data(), ones.data(), 4096) == 0) {
    std::fprintf(stderr, "store-demo: a write to the clone changed the source\n");
    return 1;
  }

  SpaceInfo sp = pool->Space();
  CheckReport rep = pool->Check();
  std::printf("\nclone of 20 GiB LUN-to-LUN: %.3f ms, %s more on disk\n", clone_s * 1e3,
              Human(static_cast<double>(disk_after > disk_before ? disk_after - disk_before : 0)).c_str());
  std::printf("copy of 20 GiB by read+write: %.1f s (measured %.3f s on %s, extrapolated), %s more on disk\n",
              copy_s, copy_sample_s, Human(static_cast<double>(sample)).c_str(), Human(20.0 * kGiB).c_str());
  std::printf("the clone cost 1/%.0f of the copy\n", copy_s / clone_s);
  std::printf("space: %llu of %llu AUs allocated, %llu shared, %s saved by sharing; pool file uses %s\n",
              (unsigned long long)sp.allocated_units, (unsigned long long)sp.total_units,
              (unsigned long long)sp.shared_units, Human(static_cast<double>(sp.saved_bytes)).c_str(),
              Human(static_cast<double>(DiskBytes(path))).c_str());
  std::printf("check: %s\n", rep.clean ? "clean" : rep.problems[0].c_str());
  src.reset();
  dst.reset();
  copy.reset();
  Check("close", pool->Close());
  pool.reset();
  if (!keep) ::unlink(path.c_str());
  return rep.clean ? 0 : 1;
}
