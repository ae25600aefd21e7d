// SPDX-License-Identifier: Apache-2.0
// A small format 3 pool for FormatV3's tests (format_v3_ckpt_test,
// format_v3_grow_test): its geometry, LUNs of many runs, opening it the way
// Core does, state copies and comparisons, checkpoints (growing the journal
// from a free space of runs too), journal batches, and power cuts at each
// call of an attempt.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "handler/store/dirty_ranges.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v3.h"
#include "handler/store/journal.h"
#include "handler/store/journal_segments.h"
#include "handler/store/meta_format.h"
#include "tests/store/slot_tear.h"

namespace cowstore::store::v3pool {

inline constexpr uint32_t kAu = 64 << 10;
inline constexpr uint32_t kGrain = 4096;
inline constexpr uint64_t kJournal = 64 << 10;
inline constexpr uint64_t kSize = 8 << 20;  // 127 AUs of data area, 2032 grains
inline constexpr uint64_t kPhysGrains = 2000;  // below the pool's grains: every run is one a leaf accepts

inline Uuid Id(uint8_t b) {
  Uuid u{};
  u.fill(b);
  return u;
}

// A LUN of `runs` single-grain runs that never join (every other LBA),
// their physical grains spread by `salt` so two maps differ.
inline std::shared_ptr<LunState> Lun(uint32_t id, const std::string& name, uint64_t runs, uint64_t salt) {
  auto l = std::make_shared<LunState>();
  l->id = id;
  l->name = name;
  l->uuid = Id(static_cast<uint8_t>(id));
  l->size = uint64_t{1} << 30;
  l->bs = 512;
  l->attrs.created = 1700000000 + id;
  l->attrs.read_only = id % 2 == 0;
  for (uint64_t i = 0; i < runs; i++) EXPECT_TRUE(l->map.Insert(2 * i, (i * 7 + salt) % kPhysGrains, 1).ok());
  return l;
}

using RunList = std::vector<std::tuple<uint64_t, uint64_t, uint64_t>>;
inline RunList RunsOf(const ExtentMap& m) {
  RunList out;
  for (const auto& [lba, e] : m.runs()) out.emplace_back(lba, e.phys, e.len);
  return out;
}

// The whole persistent state, compared field by field.
inline void ExpectSameState(const MetaState& want, const MetaState& got) {
  EXPECT_EQ(got.next_lun_id, want.next_lun_id);
  ASSERT_EQ(got.luns().size(), want.luns().size());
  for (const auto& [id, w] : want.luns()) {
    SCOPED_TRACE("LUN " + std::to_string(id));
    const LunState* g = got.Find(id);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->name, w->name);
    EXPECT_EQ(g->uuid, w->uuid);
    EXPECT_EQ(g->size, w->size);
    EXPECT_EQ(g->bs, w->bs);
    EXPECT_EQ(g->attrs.read_only, w->attrs.read_only);
    EXPECT_EQ(g->attrs.created, w->attrs.created);
    EXPECT_EQ(g->attrs.origin, w->attrs.origin);
    EXPECT_EQ(RunsOf(g->map), RunsOf(w->map));
  }
}

// A state's copy (LunState holds a lock, so members one by one).
inline MetaState Copy(const MetaState& st) {
  MetaState c;
  c.au = st.au;
  c.next_lun_id = st.next_lun_id;
  for (const auto& [id, l] : st.luns()) {
    auto n = std::make_shared<LunState>();
    n->id = l->id;
    n->name = l->name;
    n->uuid = l->uuid;
    n->size = l->size;
    n->bs = l->bs;
    n->attrs = l->attrs;
    n->map = l->map;
    c.AddLun(std::move(n));
  }
  return c;
}

// One open of the pool: the file, the format its chooser builds, what it loaded.
struct Opened {
  std::unique_ptr<File> file;
  std::unique_ptr<MetaFormat> format;
  FormatV3* v3 = nullptr;
  MetaState st;
  LoadedMeta meta;
};

inline Status Open(FaultInjectionEnv* env, Opened* o) {
  auto f = env->OpenLocked("p", Env::Mode::kReadWrite);
  if (!f.ok()) return f.status();
  o->file = std::move(f).value();
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(o->file.get(), &slots, ServedFormats::kV1ToV3);
  if (!chosen.ok()) return chosen.status();
  o->format = std::move(chosen).value();
  o->v3 = dynamic_cast<FormatV3*>(o->format.get());
  if (o->v3 == nullptr) return Status(Code::kCorruption, "not a format 3 pool");
  PoolGeometry g;
  if (Status s = o->format->ChooseSuperblock(slots, &g); !s.ok()) return s;
  o->st.au = g.grain;
  return o->format->LoadState(o->file.get(), &o->st, &o->meta);
}

// The lowest `n` AUs outside the format's metadata (Core's space map would
// hand out AUs free of data too; the format cares only that they are not
// its own).
inline std::vector<uint64_t> FreeAus(const FormatV3& v3, uint64_t n) {
  const std::vector<uint64_t> meta = v3.meta_units();
  std::vector<uint64_t> out;
  for (uint64_t u = 0; out.size() < n; u++)
    if (!std::binary_search(meta.begin(), meta.end(), u)) out.push_back(u);
  return out;
}

// Freeze (all dirty, or `dirty`) and WriteCheckpoint as Core's checkpoint does.
inline Status Checkpoint(Opened* o, const MetaState& st, uint64_t start_lsn, const DirtyRanges* dirty = nullptr) {
  FrozenCheckpoint f = dirty ? o->v3->Freeze(st, *dirty) : o->v3->Freeze(st);
  return o->format->WriteCheckpoint(o->file.get(), f, FreeAus(*o->v3, f.meta_units), start_lsn);
}

inline const DirtyRanges kNothingDirty;

inline JournalBatch BatchOf(const std::vector<Record>& records, uint64_t lsn, uint64_t proven) {
  JournalBatch b;
  for (const Record& r : records) FrameRecord(r, lsn++, proven, &b.bytes);
  b.last_lsn = lsn - 1;
  return b;
}

// A kMap record of LUN 1: `n` single-grain runs at every other LBA from
// `lba`, their grains from `phys` on in steps of 3 (no two join).
inline Record MapOf(uint64_t lba, uint64_t phys, uint64_t n) {
  Record r;
  r.type = RecType::kMap;
  r.lun = 1;
  for (uint64_t i = 0; i < n; i++) r.runs.push_back(store::Run{lba + 2 * i, (phys + 3 * i) % kPhysGrains, 1});
  return r;
}

// Free space as runs of AUs (the engine's FreeSpace stands behind
// JournalSpace): Take hands out the front of the longest run, up to what
// is asked, Give takes a run back without allocating (JournalSpace's
// contract: room for kMaxRuns runs is made up front).
class RunSpace final : public JournalSpace {
 public:
  static constexpr size_t kMaxRuns = 64;
  explicit RunSpace(const std::map<uint64_t, uint64_t>& runs) {
    runs_.reserve(kMaxRuns);
    for (const auto& [first, aus] : runs) runs_.push_back({first, aus});
  }
  std::optional<JournalExtent> Take(uint64_t max_aus) override {
    auto best = runs_.end();
    for (auto it = runs_.begin(); it != runs_.end(); ++it)
      if (best == runs_.end() || it->aus > best->aus) best = it;
    if (best == runs_.end()) return std::nullopt;
    JournalExtent run{best->first_au, std::min(best->aus, max_aus)};
    best->first_au += run.aus;
    best->aus -= run.aus;
    if (best->aus == 0) runs_.erase(best);
    return run;
  }
  void Give(const JournalExtent& run) override {
    EXPECT_FALSE(Holds(run.first_au)) << "a run given twice";
    EXPECT_LT(runs_.size(), kMaxRuns);
    runs_.push_back(run);  // within the capacity reserved
  }
  // The free runs, those next to each other joined.
  std::map<uint64_t, uint64_t> runs() const {
    std::map<uint64_t, uint64_t> out;
    for (const JournalExtent& r : runs_) out.emplace(r.first_au, r.aus);
    for (auto it = out.begin(); it != out.end();) {
      auto next = std::next(it);
      if (next != out.end() && it->first + it->second == next->first) {
        it->second += next->second;
        out.erase(next);
      } else {
        it = next;
      }
    }
    return out;
  }
  bool Holds(uint64_t au) const {
    for (const JournalExtent& r : runs_)
      if (au - r.first_au < r.aus) return true;
    return false;
  }

 private:
  std::vector<JournalExtent> runs_;  // unordered; capacity kMaxRuns
};

// Freeze (every LUN dirty) and WriteCheckpoint with `space`, the pages in
// the lowest AUs outside the format's metadata and the space.
inline Status GrowingCheckpoint(Opened* o, const MetaState& st, uint64_t start_lsn, RunSpace* space,
                         JournalGrowth* growth) {
  FrozenCheckpoint f = o->v3->Freeze(st);
  const std::vector<uint64_t> meta = o->v3->meta_units();
  std::vector<uint64_t> units;
  for (uint64_t u = 0; units.size() < f.meta_units; u++)
    if (!std::binary_search(meta.begin(), meta.end(), u) && !space->Holds(u)) units.push_back(u);
  return o->v3->WriteCheckpoint(o->file.get(), f, units, start_lsn, space, growth);
}

inline std::vector<uint64_t> AusOf(const std::vector<JournalExtent>& list) {
  std::vector<uint64_t> out;
  for (const JournalExtent& x : list)
    for (uint64_t i = 0; i < x.aus; i++) out.push_back(x.first_au + i);
  return out;
}

using testing::CutTearingSlotsInFlight;  // slot_tear.h
using testing::kTearSlotsInFlight;

// Cuts power at each mutating Env call of `attempt` (run on an open of the
// pool `setup` lays out in an empty env, after `before` on the same open),
// in every loss mode and kTearSlotsInFlight: the pool must open, and
// `check` judges what it opened as. `seeds` per random mode: a
// superblock's fields and CRCs share its first sector, which kTear cuts
// inside for about one seed in eight.
inline void CutEachCall(const std::function<void(FaultInjectionEnv*)>& setup,
                 const std::function<void(Opened*, FaultInjectionEnv*)>& before,
                 const std::function<Status(Opened*)>& attempt, uint64_t seeds,
                 const std::function<void(const Opened&)>& check) {
  uint64_t calls = 0;
  {
    FaultInjectionEnv env;
    setup(&env);
    Opened o;
    EXPECT_TRUE(Open(&env, &o).ok());
    before(&o, &env);
    const uint64_t at = env.mutating_calls();
    EXPECT_TRUE(attempt(&o).ok());
    calls = env.mutating_calls() - at;
  }
  FaultInjectionEnv env;  // one for all: Install then reuses its buffers
  for (uint64_t n = 0; n < calls; n++) {
    for (int loss = 0; loss <= kTearSlotsInFlight; loss++) {
      for (uint64_t seed = 0; seed < (loss == 2 || loss == 3 ? seeds : 1u); seed++) {
        SCOPED_TRACE("call " + std::to_string(n) + " of " + std::to_string(calls) + " loss " + std::to_string(loss) +
                     " seed " + std::to_string(seed));
        env.ClearFaults();
        setup(&env);
        {
          Opened o;
          EXPECT_TRUE(Open(&env, &o).ok());
          before(&o, &env);
          env.CrashAfter(static_cast<int64_t>(n));
          EXPECT_FALSE(attempt(&o).ok());
        }
        if (loss == kTearSlotsInFlight)
          CutTearingSlotsInFlight(&env);
        else
          env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
        Opened back;
        Status why = Open(&env, &back);
        EXPECT_TRUE(why.ok()) << why.ToString();
        if (why.ok()) check(back);
      }
    }
  }
}

}  // namespace cowstore::store::v3pool
