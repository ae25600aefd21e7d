// SPDX-License-Identifier: Apache-2.0
// The one LUN rule (meta.h, LunRecordRule): what it refuses, and that the
// loaders of formats 1 and 2 refuse it too, ApplyRecord (the journal's
// create, clone, snapshot and resize records) without changing anything and
// DecodeState (a checkpoint's payload), so no pool can hold a LUN that the
// v3 LUN table page would refuse to write; and the page keeps the same rule
// (plus its 2^48-block bound). Replay at open: corruption_test.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/lun_table_page.h"
#include "handler/store/meta.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kAu = 1 << 20;

struct Geometry {
  uint32_t id;
  std::string name;
  uint64_t size;
  uint32_t bs;
  const char* why;  // in the refusal
};

// Each a LUN some part of the rule refuses, the rest of it fine.
const Geometry kBad[] = {
    {0, "b", 1 << 20, 512, "LUN id 0"},
    // next_lun_id (the highest id plus one, 32 bits) would wrap to 0.
    {UINT32_MAX, "b", 1 << 20, 512, "LUN id 4294967295 leaves no next LUN id"},
    {7, "", 1 << 20, 512, "LUN name is empty"},
    {7, "b/c", 1 << 20, 512, "contains '/'"},
    {7, ".b", 1 << 20, 512, "must not start with '.'"},
    {7, std::string(65, 'b'), 1 << 20, 512, "characters long"},
    {7, "b", 1 << 20, 1024, "block size 1024"},
    {7, "b", 1 << 20, 0, "block size 0"},
    {7, "b", 0, 512, "size 0 not a positive multiple"},
    {7, "b", 1000, 512, "size 1000 not a positive multiple"},
};

TEST(LunRule, RefusesEachPartAndAcceptsWhatEveryBuildWrote) {
  for (const Geometry& g : kBad) {
    std::string why = LunRecordRule(g.id, g.name, g.size, g.bs);
    EXPECT_NE(why.find(g.why), std::string::npos) << g.name << ": " << why;
  }
  EXPECT_EQ(LunRecordRule(1, "a", 4096, 4096), "");
  // A name with "..": ValidName refuses it, but the store's check let it in
  // until 5968edc, so pools may hold one.
  EXPECT_EQ(LunRecordRule(1, "a..b", 512, 512), "");
  // Formats 1 and 2 do not bound the block count (an older build made LUNs
  // above 2^48 blocks in pools of 128 TiB or more); the v3 page does.
  EXPECT_EQ(LunRecordRule(1, "a", (kMaxLunBlocks + 1) * 512, 512), "");
}

// ValidStoredName is ValidName but for "..": nothing else an older build
// could not have made gets in.
TEST(LunRule, AStoredNameDiffersFromAValidNameOnlyByDotDot) {
  for (const char* n : {"a", "a.b", "a..b", "ab..", "..", "...", ".a", "-a", "a/b", "a b", "", "a\n"}) {
    std::string without_dots(n);
    for (size_t at; (at = without_dots.find("..")) != std::string::npos;) without_dots.replace(at, 2, "._");
    EXPECT_EQ(ValidStoredName(n), ValidName(without_dots)) << n;
  }
  EXPECT_TRUE(ValidStoredName("a..b"));
  EXPECT_FALSE(ValidName("a..b"));
}

LunRecord PageRecord(const Geometry& g) {
  LunRecord r;
  r.id = g.id;
  r.name = g.name;
  r.size = g.size;
  r.bs = g.bs;
  return r;
}

// The page writes and reads what the loaders accept, so a v3 checkpoint
// never fails on a LUN a pool holds, and refuses what they refuse.
TEST(LunRule, TheLunTablePageKeepsTheSameRule) {
  LunTablePage page;
  page.pool = Uuid{1};
  page.seq = 3;
  page.next_lun_id = 9;
  page.total_luns = 1;
  std::string bytes;
  for (const Geometry& g : kBad) {
    SCOPED_TRACE(g.why);
    page.luns = {PageRecord(g)};
    Status s = EncodeLunTablePage(page, &bytes);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(g.why), std::string::npos) << s.ToString();
  }
  page.luns = {PageRecord({7, "b", (kMaxLunBlocks + 1) * 512, 512, ""})};
  EXPECT_NE(EncodeLunTablePage(page, &bytes).message().find("2^48 blocks"), std::string::npos);
  page.luns = {PageRecord({7, "b..c", kMaxLunBlocks * 512, 512, ""})};
  ASSERT_TRUE(EncodeLunTablePage(page, &bytes).ok());
  LunTablePage back;
  ASSERT_TRUE(DecodeLunTablePage(bytes.data(), bytes.size(), 0, {page.pool, page.seq, 4096, 1 << 20}, &back).ok());
  EXPECT_EQ(back.luns, page.luns);
}

// An empty state of map bound `max_phys` holding LUN "a" (id 1, 1 MiB,
// 512-byte blocks) and nothing mapped.
MetaState EmptyLunA(uint64_t max_phys = ExtentMap::kMaxPhys) {
  MetaState st;
  st.au = kAu;
  st.max_phys = max_phys;
  Record c;
  c.type = RecType::kCreateLun;
  c.lun = 1;
  c.name = "a";
  c.a = 1 << 20;
  c.bs = 512;
  EXPECT_TRUE(ApplyRecord(&st, c, nullptr, nullptr).ok());
  return st;
}

// LUN "a" with one extent.
MetaState OneLun() {
  MetaState st = EmptyLunA();
  Record m;
  m.type = RecType::kMap;
  m.lun = 1;
  m.runs = {{0, 3, 1}};
  EXPECT_TRUE(ApplyRecord(&st, m, nullptr, nullptr).ok());
  return st;
}

std::string Encoded(const MetaState& st) {
  std::string s;
  EncodeState(st, &s);
  return s;
}

// A RefSink that allows every increment and records each Inc and Dec, so a
// test sees reference counts a refused record changed (EncodeState does not
// hold them).
struct RecordingSink : RefSink {
  std::vector<std::string> calls;
  Status CanInc(std::span<const Run>) const override { return Status::Ok(); }
  Status Inc(uint64_t phys, uint64_t n) override {
    calls.push_back("Inc " + std::to_string(phys) + " +" + std::to_string(n));
    return Status::Ok();
  }
  void Dec(uint64_t phys, uint64_t n) override {
    calls.push_back("Dec " + std::to_string(phys) + " +" + std::to_string(n));
  }
};

// A record the rule refuses is corruption, and leaves the state as it was
// (EncodeState covers every LUN field, the maps and the next LUN id) and
// every reference count too (no Inc or Dec reached the sink).
void ExpectRefusedUnchanged(const Record& r, const char* why) {
  MetaState st = OneLun();
  const std::string before = Encoded(st);
  RecordingSink sink;
  Status s = ApplyRecord(&st, r, &sink, nullptr);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(why), std::string::npos) << s.ToString();
  EXPECT_EQ(Encoded(st), before);
  EXPECT_EQ(st.luns().size(), 1u);
  EXPECT_TRUE(sink.calls.empty()) << sink.calls.front();
}

TEST(LunRule, ApplyRecordRefusesACreateOffTheRuleChangingNothing) {
  for (const Geometry& g : kBad) {
    SCOPED_TRACE(g.why);
    Record r;
    r.type = RecType::kCreateLun;
    r.lun = g.id;
    r.name = g.name;
    r.a = g.size;
    r.bs = g.bs;
    ExpectRefusedUnchanged(r, g.why);
  }
}

TEST(LunRule, ApplyRecordRefusesACloneOrSnapshotOffTheRuleChangingNothing) {
  for (RecType t : {RecType::kCloneLun, RecType::kSnapshotLun}) {
    SCOPED_TRACE(static_cast<int>(t));
    Record r;
    r.type = t;
    r.lun = 1;
    r.lun2 = 0;
    r.name = "b";
    ExpectRefusedUnchanged(r, "LUN id 0");
    r.lun2 = UINT32_MAX;
    ExpectRefusedUnchanged(r, "leaves no next LUN id");
    r.lun2 = 2;
    for (const char* name : {"", "b c", "-b"}) {
      r.name = name;
      ExpectRefusedUnchanged(r, "LUN name");
    }
    r.name = "b";  // the record is otherwise right: the copy adds a reference
    MetaState st = OneLun();
    RecordingSink sink;
    EXPECT_TRUE(ApplyRecord(&st, r, &sink, nullptr).ok());
    EXPECT_EQ(sink.calls, std::vector<std::string>{"Inc 3 +1"});
    // The highest id a LUN may have moves next_lun_id to UINT32_MAX, no wrap.
    r.lun2 = UINT32_MAX - 1;
    r.name = "c";
    EXPECT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
    EXPECT_EQ(st.next_lun_id, UINT32_MAX);
  }
}

TEST(LunRule, ApplyRecordRefusesAResizeOffTheRuleChangingNothing) {
  Record r;
  r.type = RecType::kResizeLun;
  r.lun = 1;
  r.a = 0;
  ExpectRefusedUnchanged(r, "size 0 not a positive multiple");
  r.a = 1000;
  ExpectRefusedUnchanged(r, "size 1000 not a positive multiple");
  r.a = 1024;
  MetaState st = OneLun();
  EXPECT_TRUE(ApplyRecord(&st, r, nullptr, nullptr).ok());
}

// A v2 checkpoint's payload holding one LUN with geometry `g`.
std::string PayloadWith(const Geometry& g, uint32_t next_lun_id = 8) {
  MetaState st;
  auto l = std::make_shared<LunState>();
  l->id = g.id;
  l->name = g.name;
  l->size = g.size;
  l->bs = g.bs;
  st.AddLun(std::move(l));
  st.next_lun_id = next_lun_id;
  return Encoded(st);
}

TEST(LunRule, DecodeStateRefusesALunOffTheRule) {
  for (const Geometry& g : kBad) {
    SCOPED_TRACE(g.why);
    MetaState st;
    Status s = DecodeState(PayloadWith(g), &st, kFormatVersion);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    // (A name past kMaxNameLength is refused by the decoder's length bound first.)
    if (g.name.size() <= kMaxNameLength) {
      EXPECT_NE(s.message().find(g.why), std::string::npos) << s.ToString();
    }
  }
  // The same payload with a good LUN decodes (the refusal is the rule's).
  for (const char* name : {"b", "b..c"}) {
    MetaState st;
    EXPECT_TRUE(DecodeState(PayloadWith({7, name, 1 << 20, 512, ""}), &st, kFormatVersion).ok()) << name;
  }
}

// next_lun_id is above every id and never 0 (every build kept it so; the v3
// LUN table page requires it), so a payload breaking that is corruption: the
// next CreateLun would reuse an id, or a v3 checkpoint could not be written.
TEST(LunRule, DecodeStateRefusesAnIdNotBelowTheNextLunId) {
  for (uint32_t next : {7u, 3u, 0u}) {
    SCOPED_TRACE(next);
    MetaState st;
    Status s = DecodeState(PayloadWith({7, "b", 1 << 20, 512, ""}, next), &st, kFormatVersion);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(next == 0 ? "next LUN id 0" : "LUN 7 not below the next LUN id"), std::string::npos)
        << s.ToString();
  }
  MetaState empty;
  empty.next_lun_id = 0;
  MetaState st;
  EXPECT_EQ(DecodeState(Encoded(empty), &st, kFormatVersion).code(), Code::kCorruption);
  // The top: the highest id a LUN may have, and the next id past it.
  EXPECT_TRUE(DecodeState(PayloadWith({UINT32_MAX - 1, "b", 1 << 20, 512, ""}, UINT32_MAX), &st, kFormatVersion).ok());
}

// A state's map bound (MetaState::max_phys) is every LUN map's and every
// record's: a format 3 pool's grains (here the largest, 2^48) take runs past
// 2^32 in LUNs created and cloned by records (they had format 2's 2^32 bound,
// so a format 3 pool past 16 TiB at 4 KiB grains refused the writes that
// landed there); format 2's state still refuses them, changing nothing.
TEST(MapBound, Format3StatesMapGrainsPast2To32InEveryLunTheyMake) {
  const uint64_t high = (uint64_t{1} << 33) + 5;
  for (bool v3 : {false, true}) {
    SCOPED_TRACE(v3 ? "format 3 bound" : "format 2 bound");
    MetaState st = EmptyLunA(v3 ? ExtentMap::kMaxPhysLimit : ExtentMap::kMaxPhys);
    Record m;
    m.type = RecType::kMap;
    m.lun = 1;
    m.runs = {{0, high, 2}};
    const std::string before = Encoded(st);
    RecordingSink sink;
    const Status s = ApplyRecord(&st, m, &sink, nullptr);
    if (!v3) {
      EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
      EXPECT_EQ(Encoded(st), before);
      EXPECT_TRUE(sink.calls.empty());
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(st.Find(1)->map.Find(1), high + 1);
    Record k;  // a LUN copied by a record maps them too
    k.type = RecType::kCloneLun;
    k.lun = 1;
    k.lun2 = 2;
    k.name = "b";
    ASSERT_TRUE(ApplyRecord(&st, k, &sink, nullptr).ok());
    EXPECT_EQ(st.Find(2)->map.Find(0), high);
    Record r;  // a range clone within the copy: an Insert under its bound
    r.type = RecType::kClone;
    r.lun = 2;
    r.lun2 = 2;
    r.a = 0;
    r.b = 10;
    r.n = 2;
    ASSERT_TRUE(ApplyRecord(&st, r, &sink, nullptr).ok());
    EXPECT_EQ(st.Find(2)->map.Find(11), high + 1);
  }
}

}  // namespace
}  // namespace cowstore::store
