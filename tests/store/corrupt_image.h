// SPDX-License-Identifier: Apache-2.0
// Opens pool images with damaged metadata: shared by the corruption test
// (every build) and the libFuzzer target (fuzz preset).
//
// The acceptance rule (docs/design/store.md, "What damage may do"): the
// images are built by a known list of durable operations, so the store's
// answer to any damage must be one of
//   * refused: Open returns kCorruption or kUnsupported (nothing written), or
//   * the exact state: every LUN the operations created, with its size, block
//     size and every byte, and a clean Check, read-only and read-write, and
//     again after the read-write open closed.
// Opening to anything else is silent loss. The one exception is written down
// with its reason: in an image cut while the pool was open, damage inside the
// bytes of the last commit is indistinguishable from that commit being torn
// by the power cut (no later record vouches for it), so the state before the
// last operation is accepted there — and only there.
// Never a crash, a hang, or another error code.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"

namespace cowstore::store::testing {

constexpr uint32_t kImgAu = 64 * 1024;
constexpr uint64_t kImgData = 128 * 1024;  // 64 KiB headers + 64 KiB journal

// What the operations leave: name -> (block size, contents).
struct ImageModel {
  struct Lun {
    uint32_t bs = 512;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Lun> luns;
};

// Applies the same durable operations to a pool and to a model.
class ImageBuilder {
 public:
  explicit ImageBuilder(uint64_t units = 24, uint64_t journal = 64 * 1024) {
    PoolOptions o;
    o.allocation_unit = kImgAu;
    o.journal_bytes = journal;
    o.size_bytes = ((64 * 1024 + journal + kImgAu - 1) / kImgAu) * kImgAu + units * kImgAu;
    pool_ = std::move(Pool::Create(&env_, "p", o).value());
  }
  void Create(const std::string& n, uint64_t bytes, uint32_t bs) {
    ok_ = ok_ && pool_->CreateLun(n, bytes, bs).ok();
    model_.luns[n] = {bs, std::vector<uint8_t>(bytes, 0)};
  }
  void Write(const std::string& n, uint64_t off, uint64_t len, uint8_t v) {
    std::vector<uint8_t> d(len, v);
    auto l = pool_->OpenLun(n).value();
    ok_ = ok_ && l->Write(off / l->block_size(), len / l->block_size(), d.data(), Durability::kDurable).ok();
    std::memset(model_.luns[n].bytes.data() + off, v, len);
  }
  void Unmap(const std::string& n, uint64_t off, uint64_t len) {  // whole AUs
    auto l = pool_->OpenLun(n).value();
    ok_ = ok_ && l->Unmap(off / l->block_size(), len / l->block_size(), Durability::kDurable).ok();
    std::memset(model_.luns[n].bytes.data() + off, 0, len);
  }
  void CloneLun(const std::string& s, const std::string& d) {
    ok_ = ok_ && pool_->CloneLun(s, d).ok();
    model_.luns[d] = model_.luns[s];
  }
  void CloneRange(const std::string& s, uint64_t soff, const std::string& d, uint64_t doff, uint64_t len) {
    auto a = pool_->OpenLun(s).value(), b = pool_->OpenLun(d).value();
    uint32_t bs = a->block_size();
    ok_ = ok_ && pool_->CloneRange(*a, soff / bs, *b, doff / bs, len / bs, Durability::kDurable).ok();
    auto& src = model_.luns[s].bytes;
    std::memmove(model_.luns[d].bytes.data() + doff, src.data() + soff, len);
  }
  // The file as it is now, pool still open (what a power cut leaves: every
  // operation above was durable).
  std::vector<uint8_t> Snapshot() const { return env_.Snapshot("p"); }
  std::vector<uint8_t> Close() {
    ok_ = ok_ && pool_->Close().ok();
    pool_.reset();
    return env_.Snapshot("p");
  }
  const ImageModel& model() const { return model_; }
  bool ok() const { return ok_; }

 private:
  FaultInjectionEnv env_;
  std::unique_ptr<Pool> pool_;
  ImageModel model_;
  bool ok_ = true;
};

struct Base {
  std::vector<uint8_t> image;
  ImageModel model;
};

// A small pool with LUNs, clones, unmaps and journal records after the last
// checkpoint, closed cleanly.
inline const Base& BaseImage() {
  static const Base base = [] {
    ImageBuilder b;
    b.Create("a", 512 * 1024, 512);
    b.Create("b", 512 * 1024, 4096);
    b.Write("a", 0, 3 * kImgAu, 0x42);
    b.CloneLun("a", "c");
    b.Unmap("a", kImgAu, kImgAu);
    b.CloneRange("a", 0, "c", 2 * kImgAu, kImgAu);
    b.Write("b", 4096, 8192, 0x17);
    Base r;
    r.image = b.Close();
    r.model = b.model();
    if (!b.ok()) std::abort();  // the harness itself is broken
    return r;
  }();
  return base;
}

// The metadata regions: superblocks, journal, and every checkpoint chunk.
inline std::vector<std::pair<uint64_t, uint64_t>> MetadataRegions(const std::vector<uint8_t>& img) {
  std::vector<std::pair<uint64_t, uint64_t>> r = {{0, 512}, {4096, 512}, {64 * 1024, 4096}};
  for (uint64_t off = kImgData; off + kImgAu <= img.size(); off += kImgAu)
    if (std::memcmp(img.data() + off, "COWCKPT1", 8) == 0) r.push_back({off, 1024});
  return r;
}

enum class Outcome { kRefused, kExact, kPrevious, kBad };

// Does the open pool hold exactly `m`? Empty string if so, else what differs.
inline std::string Differs(Pool& p, const ImageModel& m) {
  auto list = p.ListLuns();
  if (list.size() != m.luns.size())
    return "pool has " + std::to_string(list.size()) + " LUNs, expected " + std::to_string(m.luns.size());
  for (const LunInfo& li : list) {
    auto it = m.luns.find(li.name);
    if (it == m.luns.end()) return "unexpected LUN " + li.name;
    if (li.size_bytes != it->second.bytes.size() || li.block_size != it->second.bs)
      return "LUN " + li.name + " has the wrong geometry";
    auto l = p.OpenLun(li.name);
    if (!l.ok()) return "open LUN " + li.name + ": " + l.status().ToString();
    std::vector<uint8_t> buf(li.size_bytes);
    Status s = (*l)->Read(0, li.size_bytes / li.block_size, buf.data());
    if (!s.ok()) return "read " + li.name + ": " + s.ToString();
    if (buf != it->second.bytes) return "LUN " + li.name + " holds other data";
  }
  CheckReport rep = p.Check();
  if (!rep.clean) return "opened but check fails: " + rep.problems[0];
  return "";
}

// Opens `img` read-only, then read-write, then once more after closing, and
// classifies: refused everywhere, or the same acceptable state everywhere.
// `previous` (may be null) is the state before the last operation, accepted
// only when the caller says the damage lies in the last commit's bytes.
inline Outcome OpenImage(const std::vector<uint8_t>& img, const ImageModel& want,
                         const ImageModel* previous, std::string* why) {
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    (void)(*f)->Write(0, img.size(), img.data());
    (void)(*f)->Sync();
  }
  Outcome seen = Outcome::kBad;
  for (int pass = 0; pass < 3; pass++) {
    auto p = Pool::Open(&env, "p", {.read_only = pass == 0});
    Outcome o;
    if (!p.ok()) {
      Code c = p.status().code();
      if (c != Code::kCorruption && c != Code::kUnsupported) {
        *why = "open: " + p.status().ToString();
        return Outcome::kBad;
      }
      if (env.Snapshot("p") != img) {
        *why = "a refused open wrote to the pool";
        return Outcome::kBad;
      }
      o = Outcome::kRefused;
    } else {
      std::string d = Differs(**p, want);
      o = Outcome::kExact;
      if (!d.empty() && previous && Differs(**p, *previous).empty()) o = Outcome::kPrevious;
      if (!d.empty() && o != Outcome::kPrevious) {
        *why = "silent loss: opened, but " + d;
        return Outcome::kBad;
      }
    }
    if (pass > 0 && o != seen) {
      *why = "read-only and read-write opens disagree";
      return Outcome::kBad;
    }
    seen = o;
  }
  return seen;
}

// Applies `data` as damage (triples: region, offset, xor byte) to the base
// image and opens it. False (with *why) if the store misbehaved.
inline bool OpenDamaged(const uint8_t* data, size_t n, std::string* why, Outcome* out = nullptr) {
  const Base& base = BaseImage();
  std::vector<uint8_t> img = base.image;
  auto regions = MetadataRegions(img);
  for (size_t i = 0; i + 3 <= n; i += 3) {
    auto [start, len] = regions[data[i] % regions.size()];
    uint64_t off = start + (data[i + 1] * 131u + data[i] / regions.size() * 7u) % len;
    img[off] ^= data[i + 2] ? data[i + 2] : 0xff;
  }
  Outcome o = OpenImage(img, base.model, nullptr, why);
  if (out) *out = o;
  return o != Outcome::kBad;
}

}  // namespace cowstore::store::testing
