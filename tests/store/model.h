// SPDX-License-Identifier: Apache-2.0
// A reference model of a pool's logical contents, for the randomized and the
// crash tests. Contents are tracked per 512-byte sector as a tag: 0 is zeros,
// any other tag is a sector whose bytes are a function of the tag, so a read
// tells exactly which write a sector came from.
//
// For crash testing every sector also keeps the set of tags it may hold after
// a power cut: a buffered operation adds its new tag; a durable operation or a
// flush (which makes everything before it durable) collapses every set to the
// current tag.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "handler/store/pool.h"

namespace cowstore::store::testing {

constexpr uint64_t kSec = 512;

inline void FillSector(uint64_t tag, uint8_t* p) {
  if (tag == 0) {
    std::memset(p, 0, kSec);
    return;
  }
  uint64_t x = tag;
  for (size_t i = 0; i < kSec; i += 8) {
    std::memcpy(p + i, &x, 8);
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  }
}

// The tag a sector holds, or ~0 if it is not a well-formed sector.
inline uint64_t DecodeSector(const uint8_t* p) {
  uint64_t tag;
  std::memcpy(&tag, p, 8);
  uint8_t want[kSec];
  FillSector(tag, want);
  return std::memcmp(want, p, kSec) == 0 ? tag : ~uint64_t{0};
}

struct ModelLun {
  uint32_t bs = 512;
  bool read_only = false;  // a snapshot: every write-class call gets kReadOnly
  uint64_t sectors = 0;
  std::vector<uint64_t> cur;
  std::vector<std::vector<uint64_t>> maybe;  // besides cur, after a crash
};

class Model {
 public:
  std::map<std::string, ModelLun> luns;
  uint64_t next_tag = 1;
  uint32_t au = 0;
  uint32_t grain = 0;  // the unit of sharing: unmaps deallocate whole grains

  // Every sector's possible-after-crash set becomes just its current value.
  void MakeDurable() {
    for (auto& [n, l] : luns)
      for (auto& m : l.maybe) m.clear();
  }
  static void Maybe(ModelLun& l, uint64_t s, uint64_t tag) {
    if (tag != l.cur[s] && std::find(l.maybe[s].begin(), l.maybe[s].end(), tag) == l.maybe[s].end())
      l.maybe[s].push_back(tag);
  }
  // Sets sector s to tag, remembering the old value as possible after a crash.
  static void Set(ModelLun& l, uint64_t s, uint64_t tag) {
    uint64_t old = l.cur[s];
    if (old == tag) return;
    auto& m = l.maybe[s];
    m.erase(std::remove(m.begin(), m.end(), tag), m.end());
    if (std::find(m.begin(), m.end(), old) == m.end()) m.push_back(old);
    l.cur[s] = tag;
  }
  void AddLun(const std::string& name, uint64_t bytes, uint32_t bs) {
    ModelLun l;
    l.bs = bs;
    l.sectors = bytes / kSec;
    l.cur.assign(l.sectors, 0);
    l.maybe.assign(l.sectors, {});
    luns[name] = std::move(l);
  }
  void Resize(const std::string& name, uint64_t bytes) {
    ModelLun& l = luns[name];
    uint64_t ns = bytes / kSec;
    l.cur.resize(ns, 0);
    l.maybe.resize(ns);
    l.sectors = ns;
  }
};

// Builds the data for writing `n` sectors with fresh tags; returns the tags.
inline std::vector<uint64_t> MakeData(Model& m, uint64_t n, std::vector<uint8_t>* buf) {
  std::vector<uint64_t> tags(n);
  buf->resize(n * kSec);
  for (uint64_t i = 0; i < n; i++) {
    tags[i] = m.next_tag++;
    FillSector(tags[i], buf->data() + i * kSec);
  }
  return tags;
}

// Reads a LUN's sectors [s, s+n) and checks each against the model: equal to
// cur (strict) or within cur+maybe (after a crash). Returns the observed tags
// (~0 for a sector that is no valid tag) through *seen if given.
inline ::testing::AssertionResult VerifyRange(Lun& lun, ModelLun& ml, uint64_t s, uint64_t n,
                                              bool after_crash, bool allow_torn,
                                              std::vector<uint64_t>* seen = nullptr) {
  uint64_t spb = lun.block_size() / kSec;
  uint64_t b0 = s / spb, b1 = (s + n + spb - 1) / spb;
  std::vector<uint8_t> buf((b1 - b0) * lun.block_size());
  // Scattered buffers (cut at odd places) when there is more than one block.
  std::vector<iovec> iov;
  size_t cut1 = buf.size() / 3 + 7, cut2 = buf.size() * 2 / 3 + 3;
  if (buf.size() > 4096 && (s & 1)) {
    iov = {{buf.data(), cut1}, {buf.data() + cut1, cut2 - cut1}, {buf.data() + cut2, buf.size() - cut2}};
  } else {
    iov = {{buf.data(), buf.size()}};
  }
  Status st = lun.Read(b0, b1 - b0, std::span<const iovec>(iov));
  if (!st.ok()) return ::testing::AssertionFailure() << "read failed: " << st.ToString();
  for (uint64_t i = s; i < s + n; i++) {
    const uint8_t* p = buf.data() + (i - b0 * spb) * kSec;
    uint64_t tag = DecodeSector(p);
    bool ok = tag == ml.cur[i] ||
              (after_crash && std::find(ml.maybe[i].begin(), ml.maybe[i].end(), tag) != ml.maybe[i].end());
    if (!ok && after_crash && allow_torn && !ml.maybe[i].empty()) {
      // A sector torn by the power cut: every byte from one of the candidates.
      std::vector<std::vector<uint8_t>> cands;
      std::vector<uint64_t> all = ml.maybe[i];
      all.push_back(ml.cur[i]);
      for (uint64_t t : all) {
        cands.emplace_back(kSec);
        FillSector(t, cands.back().data());
      }
      ok = true;
      for (size_t k = 0; k < kSec && ok; k++) {
        bool any = false;
        for (auto& c : cands) any = any || c[k] == p[k];
        ok = any;
      }
      if (ok) tag = ~uint64_t{0} - 1;  // torn: remember as "unknown but legal"
    }
    if (!ok) {
      std::string cand;
      for (uint64_t t : ml.maybe[i]) cand += " " + std::to_string(t);
      return ::testing::AssertionFailure()
             << "LUN sector " << i << ": read tag " << tag << ", model has " << ml.cur[i]
             << (after_crash ? " or {" + cand + " }" : "");
    }
    if (seen) seen->push_back(tag);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cowstore::store::testing
