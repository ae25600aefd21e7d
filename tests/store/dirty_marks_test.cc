// SPDX-License-Identifier: Apache-2.0
// Dirty tracking for format 3's incremental checkpoint (store-v3.md 3.4,
// plan step 5d item 2): ApplyRecord marks what each record remaps
// (meta.h), FormatV3 rewrites only the leaves the marks touch, and Core
// keeps the set only for a format that asks (FormatV2 does not).
//  * Per record kind: applying it marks exactly its ranges; a refused
//    record marks them too (it may have changed the map part way).
//  * A model at format 3 without Core (Core does not serve it yet): random
//    records of every kind, checkpoints of the marks at random points, and
//    a fresh load must equal memory; the same run with every LUN dirty
//    must load the same.
//  * Core at format 2 keeps no marks.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "handler/store/dirty_ranges.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/meta.h"
#include "handler/store/pool_impl.h"
#include "tests/store/format_v3_pool.h"
#include "tests/store/small_core.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kKeyEnd = uint64_t{1} << 48;  // the maps' key bound, where a whole LUN's marks end

// ------------------------------------------------------------ per record kind

struct Marked {
  uint32_t lun;
  uint64_t first, end;
};

// `d` holds exactly `want` (coalesced, not touching one another): its range
// count, and every probe point of LUNs 0..8 marked or not as `want` says.
void ExpectMarks(const DirtyRanges& d, const std::vector<Marked>& want) {
  EXPECT_EQ(d.ranges(), want.size());
  std::vector<uint64_t> probes;
  for (uint64_t p = 0; p < 600; p++) probes.push_back(p);
  for (uint64_t p : {uint64_t{1} << 20, uint64_t{1} << 40, kKeyEnd - 1}) probes.push_back(p);
  for (uint32_t lun = 0; lun <= 8; lun++)
    for (uint64_t p : probes) {
      bool in = false;
      for (const Marked& m : want) in |= m.lun == lun && p >= m.first && p < m.end;
      EXPECT_EQ(d.Touches(lun, p, p + 1), in) << "LUN " << lun << " key " << p;
    }
}

constexpr uint32_t kUnit = 4096;  // the map's unit (format 3's grain)

Record Create(uint32_t id, const std::string& name, uint64_t units) {
  Record r;
  r.type = RecType::kCreateLun;
  r.lun = id;
  r.name = name;
  r.a = units * kUnit;
  r.bs = 512;
  return r;
}

Record Map(uint32_t lun, std::vector<Run> runs) {
  Record r;
  r.type = RecType::kMap;
  r.lun = lun;
  r.runs = std::move(runs);
  return r;
}

// `m` as a kMapChecked record (its CRCs are replay's: ApplyRecord ignores them).
Record Checked(Record m) {
  m.type = RecType::kMapChecked;
  m.crcs.assign(m.runs.size(), 0);
  return m;
}

Record Of(RecType t, uint32_t lun, uint32_t lun2 = 0, uint64_t a = 0, uint64_t b = 0, uint64_t n = 0) {
  Record r;
  r.type = t;
  r.lun = lun;
  r.lun2 = lun2;
  r.a = a;
  r.b = b;
  r.n = n;
  return r;
}

Record CopyOf(RecType t, uint32_t src, uint32_t id, const std::string& name) {
  Record r = Of(t, src, id);
  r.name = name;
  if (t == RecType::kSnapshotLun) r.attrs.read_only = true;
  return r;
}

// LUNs 1 and 2 of 256 units, with runs in both; nothing marked.
MetaState Base() {
  MetaState st;
  st.au = kUnit;
  for (const Record& r : {Create(1, "a", 256), Create(2, "b", 256),
                          Map(1, {{0, 100, 8}, {20, 200, 4}}), Map(2, {{0, 300, 4}})})
    EXPECT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
  return st;
}

struct KindCase {
  const char* what;
  Record record;
  std::vector<Marked> marks;
};

// Every record kind, and what applying it marks (meta.h, ApplyRecord).
std::vector<KindCase> KindCases() {
  Record resize_odd = Of(RecType::kResizeLun, 1, 0, 100 * kUnit + 512);
  return {
      {"create: the new LUN, whole", Create(3, "c", 16), {{3, 0, kKeyEnd}}},
      {"delete: the LUN, whole", Of(RecType::kDeleteLun, 1), {{1, 0, kKeyEnd}}},
      {"shrink: the map from the new end", Of(RecType::kResizeLun, 1, 0, 10 * kUnit), {{1, 10, kKeyEnd}}},
      {"grow: from the new end (nothing there to remove)", Of(RecType::kResizeLun, 2, 0, 512 * kUnit),
       {{2, 512, kKeyEnd}}},
      {"resize within a unit: the partial unit is kept", resize_odd, {{1, 101, kKeyEnd}}},
      {"map: each run", Map(1, {{10, 500, 2}, {40, 600, 1}, {12, 700, 3}}), {{1, 10, 15}, {1, 40, 41}}},
      {"data-checked map: each run, as map", Checked(Map(1, {{10, 500, 2}, {40, 600, 1}, {12, 700, 3}})),
       {{1, 10, 15}, {1, 40, 41}}},
      {"unmap: its range, mapped or not", Of(RecType::kUnmap, 1, 0, 5, 0, 30), {{1, 5, 35}}},
      {"clone: the destination range only", Of(RecType::kClone, 1, 2, 0, 20, 8), {{2, 20, 28}}},
      {"clone within a LUN: the destination range", Of(RecType::kClone, 1, 1, 0, 50, 8), {{1, 50, 58}}},
      {"LUN clone: the new LUN, whole", CopyOf(RecType::kCloneLun, 1, 3, "c"), {{3, 0, kKeyEnd}}},
      {"snapshot: the new LUN, whole", CopyOf(RecType::kSnapshotLun, 1, 3, "s"), {{3, 0, kKeyEnd}}},
      {"rollback: the target, whole", Of(RecType::kRollbackLun, 1, 2), {{1, 0, kKeyEnd}}},
      {"seal: nothing (no map changes)", Of(RecType::kSeal, 0), {}},
  };
}

TEST(DirtyMarks, EveryRecordKindMarksExactlyWhatItRemaps) {
  std::set<uint8_t> kinds;
  for (const KindCase& c : KindCases()) {
    SCOPED_TRACE(c.what);
    kinds.insert(static_cast<uint8_t>(c.record.type));
    MetaState st = Base();
    DirtyRanges d;
    Status s = ApplyRecord(&st, c.record, nullptr, &d);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectMarks(d, c.marks);
  }
  // A record kind added later needs its own decision here.
  EXPECT_EQ(kinds.size(), size_t{kLastRecType});
}

// The state's extent count (MetaState::extents, which sizes the room kept
// for the next checkpoint on every allocation) stays what walking the maps
// finds, after every record kind, and after a record refused (a run past
// the maps' bound: refused before anything changes).
uint64_t ExtentsWalked(const MetaState& st) {
  uint64_t n = 0;
  for (const auto& [id, l] : st.luns()) n += l->map.extents();
  return n;
}

TEST(ExtentCount, EveryRecordKindKeepsTheCountInStepWithTheMaps) {
  int changed = 0;
  for (const KindCase& c : KindCases()) {
    SCOPED_TRACE(c.what);
    MetaState st = Base();
    ASSERT_EQ(st.extents(), ExtentsWalked(st));
    const uint64_t before = st.extents();
    ASSERT_TRUE(ApplyRecord(&st, c.record, nullptr, nullptr).ok());
    EXPECT_EQ(st.extents(), ExtentsWalked(st));
    changed += st.extents() != before;
  }
  EXPECT_GE(changed, 8);  // the cases move the count, so a stale one would show
  MetaState st = Base();
  const uint64_t before = st.extents();
  EXPECT_FALSE(ApplyRecord(&st, Map(1, {{40, 500, 1}, {60, ExtentMap::kMaxPhys, 1}}), nullptr, nullptr).ok());
  EXPECT_EQ(st.extents(), before);
  EXPECT_EQ(st.extents(), ExtentsWalked(st));
}

// Marks add to what the set holds (the engine's set spans many records)
// and are made with or without a sink.
TEST(DirtyMarks, MarksAccumulateOverRecords) {
  MetaState st = Base();
  DirtyRanges d;
  ASSERT_TRUE(ApplyRecord(&st, Map(1, {{3, 400, 2}}), nullptr, &d).ok());
  ASSERT_TRUE(ApplyRecord(&st, Of(RecType::kUnmap, 1, 0, 5, 0, 2), nullptr, &d).ok());
  ASSERT_TRUE(ApplyRecord(&st, Of(RecType::kClone, 1, 2, 0, 90, 4), nullptr, &d).ok());
  ExpectMarks(d, {{1, 3, 7}, {2, 90, 94}});
}

class RefuseIncrements final : public RefSink {
 public:
  Status CanInc(std::span<const Run> runs) const override {
    return runs.empty() ? Status::Ok() : Status(Code::kNoSpace, "count at its bound");
  }
  Status Inc(uint64_t, uint64_t) override { return Status::Ok(); }
  void Dec(uint64_t, uint64_t) override {}
};

// ApplyRecord marks whatever its status (meta.h): a record refused part way
// may have changed the map, and marking a refused one costs pages only.
TEST(DirtyMarks, ARefusedRecordKeepsEarlierMarksAndLeavesTheStateAsItWas) {
  const std::vector<std::pair<const char*, Record>> refused = {
      {"create twice", Create(1, "again", 16)},
      {"create off the LUN rule", Create(3, "", 16)},
      {"delete of an unknown LUN", Of(RecType::kDeleteLun, 7)},
      {"resize of an unknown LUN", Of(RecType::kResizeLun, 7, 0, kUnit)},
      {"map on an unknown LUN", Map(7, {{0, 1, 1}})},
      {"map of a run off the rule", Map(1, {{kKeyEnd - 1, 1, 2}})},
      {"unmap on an unknown LUN", Of(RecType::kUnmap, 7, 0, 0, 0, 4)},
      {"unmap out of bounds", Of(RecType::kUnmap, 1, 0, 0, 0, kKeyEnd + 1)},
      {"clone to an unknown LUN", Of(RecType::kClone, 1, 7, 0, 0, 4)},
      {"clone past the key bound", Of(RecType::kClone, 1, 2, 0, kKeyEnd - 2, 4)},
      {"LUN clone over an existing id", CopyOf(RecType::kCloneLun, 1, 2, "c")},
      {"snapshot of an unknown LUN", CopyOf(RecType::kSnapshotLun, 7, 3, "s")},
      {"rollback onto itself", Of(RecType::kRollbackLun, 1, 1)},
  };
  for (const auto& [what, r] : refused) {
    SCOPED_TRACE(what);
    MetaState st = Base();
    DirtyRanges d;
    d.Mark(5, 10, 2);  // what the set held before stays
    EXPECT_FALSE(ApplyRecord(&st, r, nullptr, &d).ok());
    EXPECT_TRUE(d.Touches(5, 10, 11) && d.Touches(5, 11, 12));
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(Base(), st));
  }
}

// A reference count the sink refuses up front: nothing changes, but the
// record's ranges are marked as if it had applied.
TEST(DirtyMarks, ARecordTheSinkRefusesMarksItsRanges) {
  RefuseIncrements sink;
  const std::vector<std::pair<Record, std::vector<Marked>>> cases = {
      {Map(1, {{0, 9, 1}}), {{1, 0, 1}}},
      {Of(RecType::kClone, 1, 2, 0, 0, 8), {{2, 0, 8}}},
      {CopyOf(RecType::kCloneLun, 1, 3, "c"), {{3, 0, kKeyEnd}}},
      {Of(RecType::kRollbackLun, 1, 2), {{1, 0, kKeyEnd}}},
  };
  for (const auto& [r, marks] : cases) {
    SCOPED_TRACE(DescribeRecord(r));
    MetaState st = Base();
    DirtyRanges d;
    EXPECT_EQ(ApplyRecord(&st, r, &sink, &d).code(), Code::kNoSpace);
    ExpectMarks(d, marks);
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(Base(), st));
  }
}

// A sink whose second Inc fails, after CanInc said yes: a map record's
// first run is applied before the error (no sink does this today; the
// marks must not depend on it).
class FailSecondInc final : public RefSink {
 public:
  Status CanInc(std::span<const Run>) const override { return Status::Ok(); }
  Status Inc(uint64_t, uint64_t) override {
    return ++incs_ == 2 ? Status(Code::kNoSpace, "second increment") : Status::Ok();
  }
  void Dec(uint64_t, uint64_t) override {}

 private:
  int incs_ = 0;
};

TEST(DirtyMarks, ARecordRefusedPartWayMarksWhatItChanged) {
  MetaState st = Base();
  FailSecondInc sink;
  DirtyRanges d;
  EXPECT_EQ(ApplyRecord(&st, Map(1, {{40, 500, 1}, {60, 600, 1}}), &sink, &d).code(), Code::kNoSpace);
  std::vector<store::Run> at40;
  st.Find(1)->map.Lookup(40, 1, &at40);
  ASSERT_EQ(at40.size(), 1u);  // the first run did change the map
  EXPECT_EQ(at40[0].phys, 500u);
  ExpectMarks(d, {{1, 40, 41}, {1, 60, 61}});
}

// ------------------------------------------------------------ the model at format 3

using v3pool::kPhysGrains;

// ApplyRecord's reference changes, counted per physical grain (maps share
// grains freely: the counts must stay those of the maps).
class GrainCounts final : public RefSink {
 public:
  GrainCounts() : refs_(kPhysGrains, 0) {}
  Status CanInc(std::span<const Run>) const override { return Status::Ok(); }
  Status Inc(uint64_t phys, uint64_t n) override {
    for (uint64_t i = 0; i < n; i++) refs_.at(phys + i)++;
    return Status::Ok();
  }
  void Dec(uint64_t phys, uint64_t n) override {
    for (uint64_t i = 0; i < n; i++) {
      EXPECT_GT(refs_.at(phys + i), 0u) << "grain " << phys + i;
      refs_.at(phys + i)--;
    }
  }
  // The counts the maps of `st` imply (the model's own check).
  void ExpectCountsOf(const MetaState& st) const {
    std::vector<uint32_t> want(kPhysGrains, 0);
    for (const auto& [id, l] : st.luns())
      for (const auto& [lba, e] : l->map.runs())
        for (uint64_t i = 0; i < e.len; i++) want.at(e.phys + i)++;
    EXPECT_EQ(refs_, want);
  }

 private:
  std::vector<uint32_t> refs_;
};

// Random records of every kind over the LUNs of `st`, each valid for it
// (ApplyRecord's refusals are the test above's). Dense writes (a run per
// grain, none joining the next) give LUNs several leaves, so a mark in the
// wrong place or unit leaves a changed leaf reused, which the load sees;
// with one leaf a LUN any mark in it rewrites it whole.
class RecordSource {
 public:
  explicit RecordSource(uint64_t seed) : rng_(seed) {}

  // Where the leaves of the tree split LUNs: the first key of every leaf but
  // a LUN's first. Records across an edge change both leaves, so a mark one
  // grain short at either end leaves one of them reused but changed.
  void SetEdges(std::vector<IndexKey> edges) { edges_ = std::move(edges); }

  Record Next(const MetaState& st) {
    for (;;) {
      const uint64_t pick = Below(100);
      const bool have = !st.luns().empty();
      if (pick < 5 || !have) {
        if (st.luns().size() < 6) return Create(st.next_lun_id, Name(st), 256 + Below(1800));
        continue;
      }
      const uint32_t a = Any(st);
      const LunState& l = *st.Find(a);
      const uint64_t units = (l.size + kUnit - 1) / kUnit;
      if (pick < 8) return Of(RecType::kDeleteLun, a);
      if (pick < 12) return Of(RecType::kResizeLun, a, 0, (64 + Below(2000)) * kUnit + 512 * Below(8));
      if (pick < 14 && st.luns().size() < 6)
        return CopyOf(Below(2) ? RecType::kCloneLun : RecType::kSnapshotLun, a, st.next_lun_id, Name(st));
      if (pick < 16) {
        const uint32_t b = Any(st);
        if (b != a) return Of(RecType::kRollbackLun, a, b);
        continue;
      }
      if (pick < 17) return Of(RecType::kSeal, 0);
      if (pick < 25) {  // a dense write: one grain per run, scattered grains
        const uint64_t n = std::min<uint64_t>(units, 150 + Below(250));
        const uint64_t lba = Below(units - n + 1);
        std::vector<Run> runs;
        for (uint64_t i = 0; i < n; i++) runs.push_back({lba + i, Below(kPhysGrains), 1});
        return Map(a, std::move(runs));
      }
      if (pick < 32 && !edges_.empty()) {
        const IndexKey e = edges_[Below(edges_.size())];
        const LunState* el = st.Find(e.lun);
        if (!el || e.lba < 2 || e.lba + 1 >= (el->size + kUnit - 1) / kUnit || units < 2) continue;
        const uint64_t x = e.lba - 1;  // the last key of the leaf before the edge
        switch (Below(4)) {
          case 0: return Map(e.lun, {{x, Below(kPhysGrains - 2), 2}});
          case 1: return Of(RecType::kUnmap, e.lun, 0, x, 0, 2);
          case 2: return Of(RecType::kClone, a, e.lun, Below(units - 1), x, 2);
          default:  // ends the LUN in the last grain before the edge, partly
            return Of(RecType::kResizeLun, e.lun, 0, x * kUnit - 512 * (1 + Below(7)));
        }
      }
      if (pick < 60) {  // writes: a few short runs scattered over the LUN
        std::vector<Run> runs;
        for (uint64_t k = 1 + Below(4); k > 0; k--) {
          const uint64_t len = 1 + Below(4);
          runs.push_back({Below(units - len + 1), Below(kPhysGrains - len), len});
        }
        return Map(a, std::move(runs));
      }
      if (pick < 80) {
        const uint64_t first = Below(units);
        return Of(RecType::kUnmap, a, 0, first, 0, 1 + Below(std::min<uint64_t>(64, units - first)));
      }
      const uint32_t b = Any(st);
      const LunState& d = *st.Find(b);
      const uint64_t dunits = (d.size + kUnit - 1) / kUnit;
      const uint64_t n = 1 + Below(std::min<uint64_t>({96, units, dunits}));
      return Of(RecType::kClone, a, b, Below(units - n + 1), Below(dunits - n + 1), n);
    }
  }
  uint64_t Below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

 private:
  uint32_t Any(const MetaState& st) {
    auto it = st.luns().begin();
    std::advance(it, Below(st.luns().size()));
    return it->first;
  }
  static std::string Name(const MetaState& st) { return "lun" + std::to_string(st.next_lun_id); }

  std::mt19937_64 rng_;
  std::vector<IndexKey> edges_;
};

struct ModelRun {
  MetaState final_state;  // memory at the end
  MetaState loaded;       // a fresh load of the last checkpoint
  uint64_t fresh_leaves = 0;  // leaves the checkpoints wrote, over the run
  int checkpoints = 0;
  size_t most_leaves = 0;  // the most leaves one LUN had, at any checkpoint
  // Checkpoints that rewrote some leaves of a LUN and reused others of it:
  // only those can tell a mark in the right place from one in the wrong one.
  int partly_rewritten = 0;
  // The leaf edges after each checkpoint, in order, which the source aims
  // records at: the run with every LUN dirty takes the marked run's, so both
  // apply the same records.
  std::vector<std::vector<IndexKey>> edges;
};

std::vector<IndexKey> EdgesOf(const std::vector<IndexEntry>& leaves) {
  std::vector<IndexKey> edges;
  for (const IndexEntry& e : leaves)
    if (e.first.lba > 0) edges.push_back(e.first);
  return edges;
}

// Leaves per LUN of `after`, and whether some LUN has both leaves `before`
// had (reused) and leaves it did not (rewritten).
void CountLeaves(const std::vector<IndexEntry>& before, const std::vector<IndexEntry>& after,
                 ModelRun* out) {
  std::map<uint32_t, size_t> count, reused;
  for (const IndexEntry& e : after) {
    count[e.first.lun]++;
    if (std::find(before.begin(), before.end(), e) != before.end()) reused[e.first.lun]++;
  }
  bool partly = false;
  for (const auto& [lun, n] : count) {
    out->most_leaves = std::max(out->most_leaves, n);
    partly |= reused[lun] > 0 && reused[lun] < n;
  }
  out->partly_rewritten += partly;
}

// One seed's run on a new pool: given the `marked` run of the seed, it
// checkpoints with the one-argument Freeze (every leaf rewritten) instead of
// the marks, aiming at that run's leaf edges. After
// each checkpoint, a copy of the disk loads as the state it froze; between
// a Freeze and its WriteCheckpoint more records may be applied, as on a
// running pool (their marks go to the next checkpoint: the hand-over).
// What it catches: a dropped mark of a map, unmap, range clone, resize or
// rollback, and a mark in the wrong place (a clone's source range) or one
// grain short at either end (each verified by breaking it, STATUS_wire2.md).
// Not the marks of a LUN made or deleted: the tree writer packs a LUN new to
// the tree whole and drops the leaves of one the maps no longer hold
// (ckpt_tree.cc), which holds only because LUN ids are never reused; the
// per-kind test above pins those marks.
void RunModel(uint64_t seed, const ModelRun* marked, ModelRun* out) {
  const bool every_lun_dirty = marked != nullptr;
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), v3pool::Id(9), v3pool::kAu, v3pool::kGrain, v3pool::kSize,
                                 v3pool::kJournal, 80).ok());
  }
  v3pool::Opened o;
  ASSERT_TRUE(v3pool::Open(&env, &o).ok());
  ASSERT_EQ(o.st.au, kUnit);
  MetaState st;
  st.au = kUnit;
  GrainCounts counts;
  DirtyRanges dirty;
  RecordSource src(seed);
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;

  auto apply = [&](int n) {
    for (int i = 0; i < n; i++) {
      const Record r = src.Next(st);
      Status s = ApplyRecord(&st, r, &counts, &dirty);
      ASSERT_TRUE(s.ok()) << DescribeRecord(r) << ": " << s.ToString();
    }
  };
  auto checkpoint = [&](bool interleave, bool last) {
    const MetaState frozen_state = v3pool::Copy(st);
    const DirtyRanges taken = dirty.Take();
    const FrozenCheckpoint f = every_lun_dirty ? o.v3->Freeze(st) : o.v3->Freeze(st, taken);
    out->fresh_leaves += FormatV3::FreshLeaves(f);
    if (interleave) {
      ASSERT_NO_FATAL_FAILURE(apply(1 + static_cast<int>(src.Below(4))));
    }
    const std::vector<IndexEntry> before = o.v3->tree().leaves;
    Status s = o.format->WriteCheckpoint(o.file.get(), f, v3pool::FreeAus(*o.v3, f.meta_units), lsn);
    ASSERT_TRUE(s.ok()) << s.ToString();
    CountLeaves(before, o.v3->tree().leaves, out);
    out->edges.push_back(every_lun_dirty ? marked->edges.at(out->edges.size()) : EdgesOf(o.v3->tree().leaves));
    src.SetEdges(out->edges.back());
    lsn += 100;
    out->checkpoints++;
    // Loading a copy of the image is most of the run's time: the full run
    // (the reference) loads its last checkpoint only.
    if (every_lun_dirty && !last) return;
    const std::vector<uint8_t> img = env.Snapshot("p");
    FaultInjectionEnv copy;
    copy.Install("p", img.data(), img.size());
    v3pool::Opened fresh;
    s = v3pool::Open(&copy, &fresh);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(frozen_state, fresh.st));
    out->loaded = std::move(fresh.st);
  };

  for (int step = 0; step < 20; step++) {
    ASSERT_NO_FATAL_FAILURE(apply(1 + static_cast<int>(src.Below(30))));
    ASSERT_NO_FATAL_FAILURE(checkpoint(src.Below(3) == 0, false));
  }
  ASSERT_NO_FATAL_FAILURE(checkpoint(false, true));
  ASSERT_NO_FATAL_FAILURE(counts.ExpectCountsOf(st));
  ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(st, out->loaded));
  out->final_state = std::move(st);
}

TEST(DirtyMarksModel, IncrementalCheckpointsLoadAsMemoryAndAsFullOnes) {
  for (uint64_t seed = 1; seed <= 5; seed++) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ModelRun marked, full;
    ASSERT_NO_FATAL_FAILURE(RunModel(seed, nullptr, &marked));
    ASSERT_NO_FATAL_FAILURE(RunModel(seed, &marked, &full));
    // The same records (the source depends on the seed and the state only).
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(full.final_state, marked.final_state));
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(full.loaded, marked.loaded));
    // And the marks did spare leaves: the run tested incremental checkpoints.
    EXPECT_LT(marked.fresh_leaves, full.fresh_leaves);
    EXPECT_EQ(marked.checkpoints, full.checkpoints);
    // LUNs of several leaves, partly rewritten: the marks were checked per
    // range, not just per LUN.
    EXPECT_GE(marked.most_leaves, 3u);
    EXPECT_GT(marked.partly_rewritten, 0);
  }
}

// A LUN deleted and made again under the same id between two checkpoints:
// only the delete's and the create's whole-LUN marks stop the old LUN's
// leaves (reused by address) from bringing its runs back. The engine never
// reuses an id (lun_table.cc counts next_lun_id up), but ApplyRecord does
// not depend on that, and neither may the marks.
TEST(DirtyMarksModel, ALunDeletedAndMadeAgainUnderItsIdLoadsAsMemory) {
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV3::Create(f->get(), v3pool::Id(9), v3pool::kAu, v3pool::kGrain, v3pool::kSize,
                                 v3pool::kJournal, 80).ok());
  }
  v3pool::Opened o;
  ASSERT_TRUE(v3pool::Open(&env, &o).ok());
  MetaState st;
  st.au = kUnit;
  DirtyRanges dirty;
  uint64_t lsn = o.meta.end.next_lsn + kLsnGapAfterOpen;
  auto checkpoint = [&]() {
    const FrozenCheckpoint f = o.v3->Freeze(st, dirty.Take());
    Status s = o.format->WriteCheckpoint(o.file.get(), f, v3pool::FreeAus(*o.v3, f.meta_units), lsn);
    ASSERT_TRUE(s.ok()) << s.ToString();
    lsn += 100;
    const std::vector<uint8_t> img = env.Snapshot("p");
    FaultInjectionEnv copy;
    copy.Install("p", img.data(), img.size());
    v3pool::Opened fresh;
    s = v3pool::Open(&copy, &fresh);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_NO_FATAL_FAILURE(v3pool::ExpectSameState(st, fresh.st));
  };
  auto apply = [&](const Record& r) { ASSERT_TRUE(ApplyRecord(&st, r, nullptr, &dirty).ok()) << DescribeRecord(r); };
  ASSERT_NO_FATAL_FAILURE(apply(Create(1, "a", 2000)));
  ASSERT_NO_FATAL_FAILURE(apply(v3pool::MapOf(0, 0, 900)));  // 900 runs: several leaves
  ASSERT_NO_FATAL_FAILURE(checkpoint());
  size_t leaves = 0;
  for (const IndexEntry& e : o.v3->tree().leaves) leaves += e.first.lun == 1;
  ASSERT_GE(leaves, 3u);
  ASSERT_NO_FATAL_FAILURE(apply(Of(RecType::kDeleteLun, 1)));
  ASSERT_NO_FATAL_FAILURE(apply(Create(1, "a", 2000)));
  ASSERT_NO_FATAL_FAILURE(apply(Map(1, {{5, 7, 1}})));  // in the old first leaf only
  ASSERT_NO_FATAL_FAILURE(checkpoint());
}

// ------------------------------------------------------------ Core at format 2

// FormatV2 rewrites every map at each checkpoint: Core marks nothing for it
// (MetaFormat::tracks_dirty), whatever the records.
TEST(DirtyMarksCore, AFormat2PoolKeepsNoMarks) {
  constexpr uint32_t kAu = testing::kSmallCoreAu;
  FaultInjectionEnv env;
  std::shared_ptr<Core> core = testing::MakeSmallCore(&env);
  ASSERT_TRUE(core);
  {
    auto a = core->Acquire("a");
    ASSERT_TRUE(a.ok());
    std::vector<uint8_t> data(4 * kAu, 0x5a);
    iovec v{data.data(), data.size()};
    ASSERT_TRUE(core->Write(a->get(), 0, data.size() / 4096, {&v, 1}, Durability::kDurable).ok());
    ASSERT_TRUE(core->ZeroRange(a->get(), 0, kAu / 4096, Durability::kDurable, true).ok());
    ASSERT_TRUE(core->CloneRange(a->get(), 16, a->get(), 64, 16, Durability::kDurable).ok());
    core->ReleaseHandle(a->get());
  }
  ASSERT_TRUE(core->SnapshotLun("a", "s").ok());
  ASSERT_TRUE(core->CloneLun("a", "b").ok());
  ASSERT_TRUE(core->ResizeLun("b", 4 * kAu).ok());
  ASSERT_TRUE(core->RollbackLun("a", "s").ok());
  ASSERT_TRUE(core->DeleteLun("b").ok());
  EXPECT_EQ(core->DirtyRangesForTest(), 0u);
  ASSERT_TRUE(core->Close().ok());
}

// Core's cached track_dirty_ disagreeing with the format (here: tracking
// at v2) makes the next checkpoint fail the pool instead of writing one.
TEST(DirtyMarksCore, ACheckpointRefusesWhenTheTrackingFlagDisagreesWithTheFormat) {
  FaultInjectionEnv env;
  std::shared_ptr<Core> core = testing::MakeSmallCore(&env);
  ASSERT_TRUE(core);
  core->SetTrackDirtyForTest(true);
  const Status s = testing::ChurnUntilCheckpoint(core.get());
  EXPECT_EQ(s.code(), Code::kIOError);
  EXPECT_NE(s.message().find("dirty tracking disagrees"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace cowstore::store
