// SPDX-License-Identifier: Apache-2.0
// Opens pool images with damaged metadata: shared by the corruption test
// (every build) and the libFuzzer target (fuzz preset). Images of format 2
// (the default) and of format 3 at grain 4 KiB and at grain = AU
// (ImageKind).
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
// On format 3 the last commit's bytes include the data of a one-sync first
// write (a kMapChecked record, store-v3.md 3.6 item 1): its data and its
// record reach the disk under one sync, so when that record is the last
// one (no later record's `proven` covers its LSN) replay checks the data
// against the record's CRCs and drops the record on a mismatch, exactly as
// if the cut had kept the record but not the data. So damage to the bytes
// of the grains that last kMapChecked record maps also yields the state
// before it. Not so for a kMapChecked record a later record vouches for
// (replay does not read its data), nor for any other data.
// Never a crash, a hang, or another error code.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"

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

// The pool formats the images come in.
enum class ImageKind : uint8_t { kV2, kV3Grain4K, kV3GrainAu };
constexpr ImageKind kImageKinds[] = {ImageKind::kV2, ImageKind::kV3Grain4K, ImageKind::kV3GrainAu};
inline uint32_t FormatOf(ImageKind k) { return k == ImageKind::kV2 ? 2 : 3; }
// The sharing unit: the AU but for format 3 at grain 4 KiB.
inline uint32_t GrainOf(ImageKind k) { return k == ImageKind::kV3Grain4K ? 4096 : kImgAu; }
inline const char* NameOf(ImageKind k) {
  return k == ImageKind::kV2 ? "format 2" : k == ImageKind::kV3Grain4K ? "format 3, grain 4 KiB" : "format 3, grain AU";
}

// Applies the same durable operations to a pool and to a model.
class ImageBuilder {
 public:
  explicit ImageBuilder(uint64_t units = 24, uint64_t journal = 64 * 1024, ImageKind kind = ImageKind::kV2) {
    PoolOptions o;
    o.allocation_unit = kImgAu;
    o.journal_bytes = journal;
    o.size_bytes = ((64 * 1024 + journal + kImgAu - 1) / kImgAu) * kImgAu + units * kImgAu;
    o.format = FormatOf(kind);
    o.grain = kind == ImageKind::kV3Grain4K ? 4096 : 0;
    auto p = Pool::Create(&env_, "p", o);
    if (!p.ok()) std::abort();  // the harness itself is broken
    pool_ = std::move(p.value());
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
  void Unmap(const std::string& n, uint64_t off, uint64_t len) {  // whole grains
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
  // Close and open again: the open writes a checkpoint (on format 3 its
  // index, leaf and LUN table pages) and later records go after it.
  void Checkpoint() {
    ok_ = ok_ && pool_->Close().ok();
    pool_.reset();
    auto p = Pool::Open(&env_, "p");
    ok_ = ok_ && p.ok();
    if (p.ok()) pool_ = std::move(p.value());
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
// checkpoint, closed cleanly. Format 2: AU-sized operations. Format 3: a
// checkpoint in the middle (its pages and the superblock naming them), then
// small first writes taking the one-sync path (kMapChecked records), into
// fresh space and into data a clone shares, ranges cloned and unmapped at
// the grain (4 KiB inside an AU at grain 4 KiB), closed.
inline Base MakeBaseImage(ImageKind kind) {
  ImageBuilder b(24, 64 * 1024, kind);
  if (kind == ImageKind::kV2) {
    b.Create("a", 512 * 1024, 512);
    b.Create("b", 512 * 1024, 4096);
    b.Write("a", 0, 3 * kImgAu, 0x42);
    b.CloneLun("a", "c");
    b.Unmap("a", kImgAu, kImgAu);
    b.CloneRange("a", 0, "c", 2 * kImgAu, kImgAu);
    b.Write("b", 4096, 8192, 0x17);
  } else {
    const uint64_t g = GrainOf(kind);
    b.Create("a", 512 * 1024, 512);
    b.Create("b", 512 * 1024, 4096);
    b.Write("a", 0, 3 * kImgAu, 0x42);
    b.Write("b", 4096, 4096, 0x17);  // one-sync, fresh space
    b.CloneLun("a", "c");
    b.Checkpoint();
    b.Write("c", 4096, 4096, 0x5a);  // one-sync, unshares a 4 KiB grain (or copies the AU)
    b.CloneRange("a", 2 * g, "c", 2 * kImgAu + g, g);
    b.Unmap("a", g, g);
    b.Write("b", 5 * kImgAu + 8192, 4096, 0x23);  // one-sync, fresh space
  }
  Base r;
  r.image = b.Close();
  r.model = b.model();
  if (!b.ok()) std::abort();  // the harness itself is broken
  return r;
}

inline const Base& BaseImage(ImageKind kind = ImageKind::kV2) {
  static const Base bases[] = {MakeBaseImage(kImageKinds[0]), MakeBaseImage(kImageKinds[1]),
                               MakeBaseImage(kImageKinds[2])};
  return bases[static_cast<int>(kind)];
}

// The newest superblock of a format 3 image that decodes, if any.
inline bool NewestSuperblockV3(const std::vector<uint8_t>& img, SuperblockV3* out) {
  bool found = false;
  for (uint64_t slot = 0; slot < 2; slot++) {
    SuperblockV3 sb;
    if (img.size() >= 2 * kSuperblockSlot &&
        DecodeSuperblockV3(img.data() + slot * kSuperblockSlot, kSuperblockSlot, img.size(), &sb).ok() &&
        (!found || sb.seq > out->seq)) {
      *out = sb;
      found = true;
    }
  }
  return found;
}

// The metadata regions. Format 2: superblocks, journal, and every checkpoint
// chunk. Format 3: the two superblock records, every journal extent the
// newest superblock lists, and every 4 KiB page with a checkpoint page's
// magic (index, leaf, LUN table; those of older checkpoints included).
inline std::vector<std::pair<uint64_t, uint64_t>> MetadataRegions(const std::vector<uint8_t>& img) {
  uint32_t version = 0;
  std::memcpy(&version, img.data() + 8, 4);
  SuperblockV3 sb;
  if (version == kFormatVersionV3 && NewestSuperblockV3(img, &sb)) {
    std::vector<std::pair<uint64_t, uint64_t>> r = {{0, kSuperblockV3Record},
                                                    {kSuperblockSlot, kSuperblockV3Record}};
    for (const JournalExtent& x : sb.journal) r.push_back({sb.data_offset + x.first_au * sb.au, x.aus * sb.au});
    for (uint64_t off = sb.data_offset; off + 4096 <= img.size(); off += 4096)
      for (const char* magic : {"COWINDX3", "COWLEAF3", "COWLUNT3"})
        if (std::memcmp(img.data() + off, magic, 8) == 0) r.push_back({off, 4096});
    return r;
  }
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

// Applies `data` as damage (triples: region, offset, xor byte) to a base
// image and opens it. False (with *why) if the store misbehaved. An input of
// 3k + 1 bytes chooses the image by its first byte (ImageKind, modulo 3);
// any other length damages the format 2 image, as before format 3 was.
inline bool OpenDamaged(const uint8_t* data, size_t n, std::string* why, Outcome* out = nullptr) {
  ImageKind kind = ImageKind::kV2;
  if (n % 3 == 1) {
    kind = kImageKinds[data[0] % 3];
    data++, n--;
  }
  const Base& base = BaseImage(kind);
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
