// SPDX-License-Identifier: Apache-2.0
// Opens pool images with damaged metadata: shared by the corruption test
// (random damage, every build) and the libFuzzer target (fuzz preset).
// The pool must answer Open with OK, kCorruption or kUnsupported — never crash,
// never hang — and a pool that opens must pass Check and serve reads.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::store::testing {

constexpr uint32_t kImgAu = 64 * 1024;
constexpr uint64_t kImgData = 128 * 1024;  // 64 KiB headers + 64 KiB journal

// A small pool with LUNs, clones, a checkpoint and journal records after it.
inline const std::vector<uint8_t>& BaseImage() {
  static const std::vector<uint8_t> img = [] {
    FaultInjectionEnv env;
    PoolOptions o;
    o.allocation_unit = kImgAu;
    o.journal_bytes = 64 * 1024;
    o.size_bytes = kImgData + 24 * kImgAu;
    auto p = Pool::Create(&env, "p", o);
    (void)(*p)->CreateLun("a", 512 * 1024, 512);
    (void)(*p)->CreateLun("b", 512 * 1024, 4096);
    auto a = (*p)->OpenLun("a").value();
    std::vector<uint8_t> d(3 * kImgAu, 0x42);
    (void)a->Write(0, d.size() / 512, d.data(), Durability::kDurable);
    (void)(*p)->CloneLun("a", "c");
    (void)a->Unmap(128, 128, Durability::kDurable);
    auto c = (*p)->OpenLun("c").value();
    (void)(*p)->CloneRange(*a, 0, *c, 256, 128, Durability::kDurable);
    a.reset();
    c.reset();
    (void)(*p)->Close();
    p->reset();
    return env.Snapshot("p");
  }();
  return img;
}

// The metadata regions: superblocks, journal, and every checkpoint chunk.
inline std::vector<std::pair<uint64_t, uint64_t>> MetadataRegions(const std::vector<uint8_t>& img) {
  std::vector<std::pair<uint64_t, uint64_t>> r = {{0, 512}, {4096, 512}, {64 * 1024, 4096}};
  for (uint64_t off = kImgData; off + kImgAu <= img.size(); off += kImgAu)
    if (std::memcmp(img.data() + off, "COWCKPT1", 8) == 0) r.push_back({off, 1024});
  return r;
}

// Applies `data` as damage (triples: region, offset, xor byte) and opens it.
// Returns false if the store misbehaved (opened but failed its own check or a
// read), true otherwise.
inline bool OpenDamaged(const uint8_t* data, size_t n, std::string* why) {
  std::vector<uint8_t> img = BaseImage();
  auto regions = MetadataRegions(img);
  for (size_t i = 0; i + 3 <= n; i += 3) {
    auto [base, len] = regions[data[i] % regions.size()];
    uint64_t off = base + (data[i + 1] * 131u + data[i] / regions.size() * 7u) % len;
    img[off] ^= data[i + 2] ? data[i + 2] : 0xff;
  }
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    (void)(*f)->Write(0, img.size(), img.data());
    (void)(*f)->Sync();
  }
  for (bool ro : {true, false}) {
    auto p = Pool::Open(&env, "p", {.read_only = ro});
    if (!p.ok()) {
      Code c = p.status().code();
      if (c != Code::kCorruption && c != Code::kUnsupported) {
        *why = "open: " + p.status().ToString();
        return false;
      }
      continue;
    }
    CheckReport rep = (*p)->Check();
    if (!rep.clean) {
      *why = "opened but check fails: " + rep.problems[0];
      return false;
    }
    for (const LunInfo& li : (*p)->ListLuns()) {
      auto l = (*p)->OpenLun(li.name);
      if (!l.ok()) { *why = "open LUN: " + l.status().ToString(); return false; }
      std::vector<uint8_t> buf(li.size_bytes);
      Status s = (*l)->Read(0, li.size_bytes / li.block_size, buf.data());
      if (!s.ok()) { *why = "read: " + s.ToString(); return false; }
    }
  }
  return true;
}

}  // namespace cowstore::store::testing
