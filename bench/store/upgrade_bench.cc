// SPDX-License-Identifier: Apache-2.0
// What `cowctl pool upgrade` (Pool::Upgrade, store-v3.md 3.7) costs on a
// large format 2 pool: its time, split into its steps by the progress it
// reports, the process's peak RSS, and what it wrote. A plain program, not a
// test; figures of one run.
//
//   upgrade_bench [--extents N] [--au BYTES] [--dir DIR]
//       (default 1,000,000 extents, 1 MiB AUs (what cowctl made before
//       format 3); DIR default $TMPDIR, else /var/tmp)
//
// The pool: a 16 TiB sparse file at format 2, built
// through the public API as open_scale_bench builds its pools: four LUNs
// each Allocate one AU at the next even LBA in turn, so every AU is its own
// run and the LUNs interleave physically, then a snapshot of one of them
// (shared runs). Allocate maps punched AUs without writing data, so the
// pool holds N runs on a few MiB of disk. The upgrade then runs in this
// process (its peak RSS is the upgrade's plus the empty process's).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/pool.h"

namespace {

using cowstore::store::DefaultEnv;
using cowstore::store::Durability;
using cowstore::store::Pool;
using cowstore::store::PoolOptions;
using cowstore::store::Status;

constexpr uint64_t kPoolBytes = uint64_t{16} << 40;
constexpr int kLuns = 4;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "upgrade_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

uint64_t PeakRssMiB() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) / 1024;
}

// The time at which each step ended, from the progress Pool::Upgrade gives
// (thousandths of three steps).
struct Steps {
  double t0 = 0;
  double ends[3] = {0, 0, 0};
  static void Report(void* c, uint64_t done, uint64_t total) {
    auto* s = static_cast<Steps*>(c);
    for (int i = 0; i < 3; i++)
      if (s->ends[i] == 0 && done * 3 >= total * static_cast<uint64_t>(i + 1)) s->ends[i] = Now() - s->t0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  uint64_t extents = 1000000;
  uint32_t au = 1 << 20;
  const char* tmpdir = std::getenv("TMPDIR");
  std::string dir = tmpdir ? tmpdir : "/var/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--extents") extents = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--au") au = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
  }
  const std::string path = dir + "/upgrade-bench.pool";
  ::unlink(path.c_str());
  PoolOptions o;
  o.format = 2;
  o.allocation_unit = au;
  o.grain = au;
  o.size_bytes = kPoolBytes;
  o.soft_threshold_percent = 0;
  auto p = Pool::Create(DefaultEnv(), path, o);
  if (!p.ok()) {  // ext4 caps a file at 16 TiB - 4 KiB: one AU less
    ::unlink(path.c_str());
    o.size_bytes = kPoolBytes - au;
    p = Pool::Create(DefaultEnv(), path, o);
  }
  Die(p.status(), "create pool");
  const uint64_t rounds = extents / kLuns;
  const double b0 = Now();
  {
    std::vector<std::shared_ptr<cowstore::store::Lun>> luns;
    for (int k = 0; k < kLuns; k++) {
      const std::string name = "vm-" + std::to_string(k);
      Die((*p)->CreateLun(name, 2 * rounds * au, 4096).status(), "create LUN");
      luns.push_back((*p)->OpenLun(name).value());
    }
    const uint64_t per_au = au / 4096;
    for (uint64_t i = 0; i < rounds; i++)
      for (auto& l : luns) Die(l->Allocate(2 * i * per_au, per_au, Durability::kBuffered), "allocate");
  }
  Die((*p)->SnapshotLun("vm-0", "snap-0").status(), "snapshot");
  Die((*p)->Close(), "close");
  p->reset();
  const double built = Now() - b0;

  Steps steps;
  steps.t0 = Now();
  auto r = Pool::Upgrade(DefaultEnv(), path, 4096, Steps::Report, &steps);
  const double took = Now() - steps.t0;
  Die(r.status(), "upgrade");
  std::printf("==== upgrade_bench: format 2 (%u KiB AU) to format 3 (4 KiB grain), one run ====\n", au >> 10);
  std::printf("pool: %.1f TiB sparse, %" PRIu64 " LUNs, %" PRIu64 " extents after the upgrade (built in %.1f s)\n",
              static_cast<double>(o.size_bytes) / (uint64_t{1} << 40), r->luns, r->extents, built);
  std::printf("upgrade: %.2f s in all: check of the format 2 pool (its open included) %.2f s, write %.2f s, "
              "open and check of the format 3 pool %.2f s\n",
              took, steps.ends[0], steps.ends[1] - steps.ends[0], steps.ends[2] - steps.ends[1]);
  std::printf("wrote: a %" PRIu64 " MiB journal, %" PRIu64 " checkpoint pages (%" PRIu64
              " KiB); peak RSS of the process %" PRIu64 " MiB\n",
              r->journal_bytes >> 20, r->metadata_pages, r->metadata_pages * 4, PeakRssMiB());
  ::unlink(path.c_str());
  return 0;
}
