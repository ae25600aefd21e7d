// SPDX-License-Identifier: Apache-2.0
// Fuzzes Pool::Open with damaged metadata, judged against a model.
//
// A deterministic workload (LUN create/write/clone/unmap/clone-range/delete,
// a checkpoint in the middle) runs on a 4 MiB pool (64 KiB AUs) with a 256 KiB journal in
// the in-memory FaultInjectionEnv; after every durable operation the model
// records each LUN's size, block size and a hash of its bytes (the durable
// prefixes), and which journal bytes that operation wrote. Two base images
// come out: the file while the pool is still open (a power cut after the last
// operation; the operations after the checkpoint are journal records) and the
// file after a checkpoint and a clean Close (everything in the checkpoint).
//
// The pool is of format 2 (the default), or of format 3 at grain 4 KiB or at
// grain = AU; on format 3 the workload goes on after operation 13 with
// small first writes (the one-sync path: kMapChecked records) and ranges
// cloned and unmapped at the grain.
//
// Input: byte 0 = flags (bit 0: closed image; bit 1: bytes 1-2 give a length
// the file is cut to; bits 2-3: 0 format 2, 1 format 3 at grain 4 KiB, 2
// format 3 at grain = AU, 3 format 2 too), then 5-byte edits {region, offset
// (3 bytes), xor} restricted to metadata: the two superblock slots (format
// 3: their 448-byte records), the journal (its written part, and all of it;
// format 3: each extent the newest superblock lists), and every checkpoint
// chunk (header and payload; format 3: every index, leaf and LUN table page).
// Inputs from before format 3 (bits 2-3 clear) mean what they meant.
//
// The answer must be one of:
//   * refused (any error; nothing written to the file), or
//   * opened to the state after the last operation, or
//   * opened to the state after operation k < n only if the journal bytes of
//     every operation after k were damaged (damage in the last records is
//     indistinguishable from a torn tail; a damaged record followed by an
//     intact one is not, and is silent loss). Only metadata is damaged, so a
//     kMapChecked record's data check (which drops an unvouched record whose
//     data does not match) never widens this;
// read-only, read-write and a second read-write open agree; an open pool
// passes Check() and, once closed, CheckOffline(). Anything else aborts so
// libFuzzer reports it. Never a crash or a hang (run_fuzzer.sh bounds memory).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "handler/store/env.h"
#include "handler/store/fault_env.h"
#include "handler/store/meta.h"
#include "handler/store/pool.h"
#include "handler/store/superblock_v3.h"

namespace {

using namespace cowstore::store;

constexpr uint32_t kAu = 64 * 1024;
constexpr uint64_t kJournalOff = 64 * 1024;
constexpr uint64_t kJournalBytes = 256 * 1024;
constexpr uint64_t kPoolBytes = 4ull << 20;
constexpr const char* kPath = "p";

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_pool_open finding: %s\n", what.c_str());
  std::abort();
}

// FNV-1a over 8-byte words (then the tail bytes): a LUN's megabytes are
// hashed three times per execution, and a byte at a time was a third of it.
uint64_t Fnv(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (uint64_t w; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct LunSig {
  uint64_t size = 0;
  uint32_t bs = 0;
  uint64_t hash = 0;
  bool operator==(const LunSig&) const = default;
};
using State = std::map<std::string, LunSig>;

std::string Describe(const State& s) {
  std::string r = "{";
  for (const auto& [n, l] : s)
    r += " " + n + ":" + std::to_string(l.size) + "/" + std::to_string(l.bs) + "/" +
         std::to_string(l.hash % 100000);
  return r + " }";
}

// The workload and what it leaves.
struct Image {
  std::vector<uint8_t> bytes;
  std::vector<std::pair<uint64_t, uint64_t>> regions;  // [offset, length) of metadata
  // For each operation i (1-based; 0 = the empty pool): the file offsets of
  // the journal bytes it wrote that still hold its bytes here, sorted.
  std::vector<std::vector<uint64_t>> op_journal_bytes;
};
// Which pool the workload builds (input bits 2-3).
enum class Kind { kV2, kV3Grain4K, kV3GrainAu };
struct World {
  std::vector<State> states;  // states[i]: after operation i
  Image open_image, closed_image;
};

class Workload {
 public:
  explicit Workload(Kind kind) {
    PoolOptions o;
    o.allocation_unit = kAu;
    o.journal_bytes = kJournalBytes;
    o.size_bytes = kPoolBytes;
    o.format = kind == Kind::kV2 ? 2 : 3;
    o.grain = kind == Kind::kV3Grain4K ? 4096 : 0;
    auto p = Pool::Create(&env_, kPath, o);
    if (!p.ok()) Finding("harness: create: " + p.status().ToString());
    pool_ = std::move(p.value());
    Durable();
  }
  void Create(const std::string& n, uint64_t bytes, uint32_t bs) {
    Need(pool_->CreateLun(n, bytes, bs).status(), "create");
    luns_[n] = {bs, std::vector<uint8_t>(bytes, 0)};
    Durable();
  }
  void Write(const std::string& n, uint64_t off, uint64_t len, uint8_t seed) {
    std::vector<uint8_t> d(len);
    for (size_t i = 0; i < len; i++) d[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
    auto l = Lun(n);
    Need(l->Write(off / l->block_size(), len / l->block_size(), d.data(), Durability::kDurable),
         "write");
    std::memcpy(luns_[n].bytes.data() + off, d.data(), len);
    Durable();
  }
  void Unmap(const std::string& n, uint64_t off, uint64_t len) {  // whole grains
    auto l = Lun(n);
    Need(l->Unmap(off / l->block_size(), len / l->block_size(), Durability::kDurable), "unmap");
    std::memset(luns_[n].bytes.data() + off, 0, len);
    Durable();
  }
  void CloneLun(const std::string& s, const std::string& d) {
    Need(pool_->CloneLun(s, d).status(), "clone");
    luns_[d] = luns_[s];
    Durable();
  }
  void CloneRange(const std::string& s, uint64_t soff, const std::string& d, uint64_t doff,
                  uint64_t len) {
    auto a = Lun(s), b = Lun(d);
    uint32_t bs = a->block_size();
    Need(pool_->CloneRange(*a, soff / bs, *b, doff / bs, len / bs, Durability::kDurable),
         "clone range");
    std::vector<uint8_t> tmp(luns_[s].bytes.begin() + soff, luns_[s].bytes.begin() + soff + len);
    std::memcpy(luns_[d].bytes.data() + doff, tmp.data(), len);
    Durable();
  }
  void Delete(const std::string& n) {
    Need(pool_->DeleteLun(n), "delete");
    luns_.erase(n);
    Durable();
  }
  // Close and reopen: Open writes a checkpoint and restarts the journal. Not
  // an operation of the model (the state does not change).
  void Checkpoint() {
    Need(pool_->Close(), "close");
    pool_.reset();
    auto p = Pool::Open(&env_, kPath);
    if (!p.ok()) Finding("harness: reopen: " + p.status().ToString());
    pool_ = std::move(p.value());
    first_in_journal_ = ops_ + 1;
  }
  Image Snapshot() const { return Finish(env_.Snapshot(kPath)); }
  // Checkpoints, then closes: every operation is in the checkpoint.
  Image Close() {
    Checkpoint();
    Need(pool_->Close(), "close");
    pool_.reset();
    return Finish(env_.Snapshot(kPath));
  }
  const std::vector<State>& states() const { return states_; }

 private:
  std::shared_ptr<cowstore::store::Lun> Lun(const std::string& n) {
    auto l = pool_->OpenLun(n);
    if (!l.ok()) Finding("harness: open LUN: " + l.status().ToString());
    return l.value();
  }
  static void Need(const Status& s, const char* what) {
    if (!s.ok()) Finding(std::string("harness: ") + what + ": " + s.ToString());
  }
  void Durable() {
    State s;
    for (const auto& [n, l] : luns_) s[n] = {l.bytes.size(), l.bs, Fnv(l.bytes.data(), l.bytes.size())};
    states_.push_back(std::move(s));
    ops_ = states_.size() - 1;
  }
  // Where the journal lies: file offsets of its ring bytes in order, as
  // runs {file offset, bytes}, and where replay starts in the ring.
  struct Ring {
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    uint64_t start = 0;
    uint64_t capacity() const {
      uint64_t c = 0;
      for (const auto& r : runs) c += r.second;
      return c;
    }
    uint64_t FileOffset(uint64_t x) const {  // x < capacity()
      for (const auto& [at, len] : runs) {
        if (x < len) return at + x;
        x -= len;
      }
      return ~uint64_t{0};
    }
  };
  static Ring RingOf(const std::vector<uint8_t>& img, SuperblockV3* v3) {
    Ring r;
    uint32_t version = 0;
    std::memcpy(&version, img.data() + 8, 4);
    if (version != kFormatVersionV3) {
      r.runs = {{kJournalOff, kJournalBytes}};
      return r;
    }
    bool found = false;
    for (uint64_t slot = 0; slot < 2; slot++) {
      SuperblockV3 sb;
      if (DecodeSuperblockV3(img.data() + slot * kSuperblockSlot, kSuperblockSlot, img.size(), &sb).ok() &&
          (!found || sb.seq > v3->seq))
        *v3 = sb, found = true;
    }
    if (!found) Finding("harness: no format 3 superblock decodes");
    for (const JournalExtent& x : v3->journal) r.runs.push_back({v3->data_offset + x.first_au * v3->au, x.aus * v3->au});
    r.start = v3->journal_start;
    return r;
  }
  Image Finish(std::vector<uint8_t> img) const {
    Image r;
    r.bytes = std::move(img);
    SuperblockV3 v3;
    const Ring ring = RingOf(r.bytes, &v3);
    const uint64_t cap = ring.capacity();
    auto byte = [&](uint64_t x) { return r.bytes[ring.FileOffset((ring.start + x) % cap)]; };
    r.op_journal_bytes.resize(ops_ + 1);
    // Operations before the last checkpoint live in it, not in the journal.
    // Each later one appended one record (framing in meta.h) at the ring's
    // tail, from the replay start on; all of the record's bytes are that
    // operation's, zeros included.
    uint64_t off = 0;
    for (size_t i = first_in_journal_; i <= ops_; i++) {
      uint32_t len = 0;
      if (off + kRecordHeader <= cap)
        for (int k = 0; k < 4; k++) len |= uint32_t{byte(off + 4 + k)} << (8 * k);
      if (len == 0 || off + kRecordHeader + len > cap)
        Finding("harness: operation " + std::to_string(i) + " wrote no record at " +
                std::to_string(off));
      for (uint64_t o = off; o < off + kRecordHeader + len; o++)
        r.op_journal_bytes[i].push_back(ring.FileOffset((ring.start + o) % cap));
      std::sort(r.op_journal_bytes[i].begin(), r.op_journal_bytes[i].end());
      off += kRecordHeader + len;
    }
    const uint64_t used = off;
    if (ring.runs.size() == 1 && cap == kJournalBytes && ring.start == 0 && ring.runs[0].first == kJournalOff) {
      // Format 2 (and the regions its seeds were made with).
      r.regions = {{0, 512}, {4096, 512}, {kJournalOff, used + 64}, {kJournalOff, kJournalBytes}};
      const uint64_t data = ((kJournalOff + kJournalBytes + kAu - 1) / kAu) * kAu;
      for (uint64_t off = data; off + kAu <= r.bytes.size(); off += kAu)
        if (std::memcmp(r.bytes.data() + off, "COWCKPT1", 8) == 0) {
          uint32_t len;
          std::memcpy(&len, r.bytes.data() + off + 20, 4);
          r.regions.push_back({off, 64 + std::min<uint64_t>(len, kAu - 64)});
        }
      return r;
    }
    // Format 3: the records, the replay start's run to its end, each run
    // whole, and every page.
    r.regions = {{0, kSuperblockV3Record}, {kSuperblockSlot, kSuperblockV3Record}};
    const uint64_t at = ring.FileOffset(ring.start % cap);
    for (const auto& [run_at, len] : ring.runs)
      if (at >= run_at && at < run_at + len)
        r.regions.push_back({at, std::min(used + 64, run_at + len - at)});
    for (const auto& run : ring.runs) r.regions.push_back(run);
    for (uint64_t off = v3.data_offset; off + 4096 <= r.bytes.size(); off += 4096)
      for (const char* magic : {"COWINDX3", "COWLEAF3", "COWLUNT3"})
        if (std::memcmp(r.bytes.data() + off, magic, 8) == 0) r.regions.push_back({off, 4096});
    return r;
  }

  struct ModelLun {
    uint32_t bs;
    std::vector<uint8_t> bytes;
  };
  FaultInjectionEnv env_;
  std::unique_ptr<Pool> pool_;
  std::map<std::string, ModelLun> luns_;
  std::vector<State> states_;
  size_t ops_ = 0;  // operations done (states_ also holds the empty pool's)
  size_t first_in_journal_ = 1;
};

World* MakeWorld(Kind kind) {
    auto* world = new World();
    Workload b(kind);
    b.Create("a", 1 << 20, 512);              // 1
    b.Write("a", 0, 3 * kAu, 0x11);           // 2
    b.Create("b", 512 * 1024, 4096);          // 3
    b.Write("b", kAu, kAu, 0x22);             // 4
    b.CloneLun("a", "c");                     // 5
    b.Checkpoint();                           // the journal restarts here
    b.Write("c", 0, kAu, 0x33);               // 6: copy-on-write of a shared AU
    b.Unmap("a", kAu, kAu);                   // 7
    b.CloneRange("c", 0, "a", 4 * kAu, kAu);  // 8
    b.Delete("b");                            // 9
    b.Create("d", 256 * 1024, 4096);          // 10
    b.Write("d", 0, 2 * kAu, 0x44);           // 11
    b.CloneLun("d", "e");                     // 12
    b.Write("e", kAu, 4096, 0x55);            // 13: copy-on-write inside an AU
    if (kind != Kind::kV2) {
      // Format 3 only (format 2 inputs keep their operation numbers).
      const uint64_t g = kind == Kind::kV3Grain4K ? 4096 : kAu;
      b.Write("a", kAu + 4096, 4096, 0x66);          // 14: one-sync, fresh space (unmapped by 7)
      b.CloneRange("d", g, "e", 2 * kAu + g, g);     // 15: shares a grain
      b.Unmap("a", 2 * g, g);                        // 16: a grain (4 KiB inside an AU)
      b.Write("d", 3 * kAu, 4096, 0x77);             // 17: one-sync, the last record: unvouched
    }
    world->open_image = b.Snapshot();
    world->closed_image = b.Close();
    world->states = b.states();
    // Every operation after the checkpoint must have left a journal record,
    // or the acceptance rule below would have nothing to go by.
    for (size_t i = 6; i < world->states.size(); i++)
      if (world->open_image.op_journal_bytes[i].empty()) Finding("harness: op without a record");
    return world;
}

const World& TheWorld(Kind kind) {
  static const World* worlds[3] = {};
  const World*& w = worlds[static_cast<int>(kind)];
  if (w == nullptr) w = MakeWorld(kind);  // built on first use: a format 2 run pays for format 2 only
  return *w;
}

// What an opened pool holds.
State Observe(Pool& p) {
  State s;
  for (const LunInfo& li : p.ListLuns()) {
    auto l = p.OpenLun(li.name);
    if (!l.ok()) Finding("opened, but LUN " + li.name + " does not open: " + l.status().ToString());
    if (li.block_size == 0 || li.size_bytes % li.block_size || li.size_bytes > kPoolBytes)
      Finding("opened, but LUN " + li.name + " has an impossible geometry");
    static std::vector<uint8_t> buf;  // reused: a fresh MiB per LUN per open is most of an execution under ASan
    buf.resize(li.size_bytes);
    Status st = (*l)->Read(0, li.size_bytes / li.block_size, buf.data());
    if (!st.ok()) Finding("opened, but LUN " + li.name + " does not read: " + st.ToString());
    s[li.name] = {li.size_bytes, li.block_size, Fnv(buf.data(), buf.size())};
  }
  return s;
}

// -1: refused; else the index of the durable prefix the pool opened to.
// Calls that change a file. A refused open, and a read-only one, make none
// (stricter than comparing the image, and no 4 MiB copy per open).
uint64_t Changes(const FaultInjectionEnv& env) {
  using Op = FaultInjectionEnv::Op;
  return env.calls(Op::kWrite) + env.calls(Op::kPunch) + env.calls(Op::kTruncate);
}

int OpenOnce(FaultInjectionEnv& env, bool read_only, const std::vector<State>& states) {
  const uint64_t before = Changes(env);
  int k = -1;
  {
    auto p = Pool::Open(&env, kPath, {.read_only = read_only});
    if (!p.ok()) {
      if (Changes(env) != before)
        Finding("a refused open (" + p.status().ToString() + ") wrote to the pool");
      return -1;
    }
    State s = Observe(**p);
    for (size_t i = states.size(); i-- > 0;)
      if (states[i] == s) {
        k = static_cast<int>(i);
        break;
      }
    if (k < 0) {
      // Name the closest prefix with the same LUNs, and the LUNs whose bytes differ.
      std::string near;
      size_t fewest = ~size_t{0};
      for (size_t i = states.size(); i-- > 0;) {
        bool same_luns = states[i].size() == s.size();
        for (const auto& [name, sig] : s)
          same_luns = same_luns && states[i].count(name) && states[i].at(name).size == sig.size;
        if (!same_luns) continue;
        std::string differ;
        size_t count = 0;
        for (const auto& [name, sig] : s)
          if (!(states[i].at(name) == sig)) differ += " " + name, count++;
        if (count >= fewest) continue;
        fewest = count;
        near = "; closest: operation " + std::to_string(i) + ", but other bytes in" + differ;
      }
      Finding("opened to a state no durable prefix had: " + Describe(s) + near + "; last state " +
              Describe(states.back()));
    }
    CheckReport rep = (*p)->Check();
    if (!rep.clean) Finding("opened, but Check fails: " + rep.problems.at(0));
    if (!(*p)->Close().ok()) Finding("close after open failed");
    if (read_only && Changes(env) != before) Finding("a read-only open wrote to the pool");
  }
  auto off = Pool::CheckOffline(&env, kPath);
  if (!off.ok() || !off->clean)
    Finding("opened, but the offline check fails: " +
            (off.ok() ? off->problems.at(0) : off.status().ToString()));
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t flags = size > 0 ? data[0] : 0;
  const int kind_bits = (flags >> 2) & 3;
  const World& w = TheWorld(kind_bits == 1 ? Kind::kV3Grain4K : kind_bits == 2 ? Kind::kV3GrainAu : Kind::kV2);
  const Image& base = (flags & 1) ? w.closed_image : w.open_image;
  // Reused from one input to the next, as the Env below: under ASan every
  // fresh multi-MiB buffer is a fresh mapping, and page faults were most of
  // an execution.
  static std::vector<uint8_t> img;
  img.assign(base.bytes.begin(), base.bytes.end());
  size_t i = 1;
  uint64_t cut = img.size();
  if ((flags & 2) && size >= 3) {
    // A length from the headers to the whole file, in 4 KiB steps.
    cut = (uint64_t{data[1]} << 8 | data[2]) * 4096 % img.size();
    i = 3;
  }
  std::vector<uint64_t> damaged;
  for (; i + 5 <= size; i += 5) {
    const auto& [start, len] = base.regions[data[i] % base.regions.size()];
    const uint64_t off = (uint64_t{data[i + 1]} | uint64_t{data[i + 2]} << 8 |
                          uint64_t{data[i + 3]} << 16) % len;
    img[start + off] ^= data[i + 4] ? data[i + 4] : 0x01;
    damaged.push_back(start + off);
  }
  const uint64_t full = img.size();
  static FaultInjectionEnv env;  // no pool is open between inputs; counters are compared as deltas
  env.Install(kPath, img.data(), cut);
  const int n = static_cast<int>(w.states.size()) - 1;
  const int ro = OpenOnce(env, true, w.states);
  const int rw = OpenOnce(env, false, w.states);
  const int again = ro == -1 && rw == -1 ? -1 : OpenOnce(env, false, w.states);
  if (ro != rw || rw != again)
    Finding("the opens disagree: read-only " + std::to_string(ro) + ", read-write " +
            std::to_string(rw) + ", again " + std::to_string(again));
  if (ro < 0 || ro == n) return 0;
  if (cut < full)
    Finding("a file cut to " + std::to_string(cut) + " bytes opened to operation " +
            std::to_string(ro) + " of " + std::to_string(n));
  // Opened to an earlier state: every later operation's journal bytes must
  // have been damaged, else a record past the damage vouched for them.
  for (int op = ro + 1; op <= n; op++) {
    const auto& mine = base.op_journal_bytes[op];
    bool hit = false;
    for (uint64_t d : damaged)
      if (std::binary_search(mine.begin(), mine.end(), d))
        hit = true;
    if (!hit)
      Finding("silent loss: opened to the state after operation " + std::to_string(ro) + " of " +
              std::to_string(n) + ", but operation " + std::to_string(op) +
              "'s journal record was not damaged");
  }
  return 0;
}
