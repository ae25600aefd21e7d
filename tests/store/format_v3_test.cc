// SPDX-License-Identifier: Apache-2.0
// FormatV3 (format_v3.h): Create's layout and its power-cut safety, the
// superblock choice through ChooseMetaFormat, LoadState of the pool Create
// lays out, journal commits over the ring, and the refusals: arguments
// Create must not write, v3 pools Core must not open yet (below the AU), what LoadState
// refuses. Checkpoints: format_v3_ckpt_test.cc.
#include "handler/store/format_v3.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "handler/store/crc32c.h"
#include "handler/store/fault_env.h"
#include "handler/store/format_v2.h"
#include "handler/store/journal.h"
#include "handler/store/journal_segments.h"
#include "handler/store/lun_table_page.h"
#include "handler/store/meta_format.h"
#include "handler/store/pool.h"
#include "handler/store/replay.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::store {
namespace {

constexpr uint32_t kAu = 64 << 10;
constexpr uint32_t kGrain = 4096;
constexpr uint64_t kJournal = 100 << 10;  // two AUs of 64 KiB, rounded up
constexpr uint64_t kSize = (2 << 20) + 100;  // not a whole number of AUs: the rest is unused
constexpr uint32_t kSoft = 80;

Uuid PoolId(uint8_t b) {
  Uuid u{};
  u.fill(b);
  return u;
}

struct Params {
  uint32_t au = kAu;
  uint32_t grain = kGrain;
  uint64_t size = kSize;
  uint64_t journal = kJournal;
  uint32_t soft = kSoft;
};

Status CreateOn(FaultInjectionEnv* env, const Params& p = {}) {
  auto f = env->OpenLocked("p", Env::Mode::kCreate);
  if (!f.ok()) return f.status();
  return FormatV3::Create(f->get(), PoolId(7), p.au, p.grain, p.size, p.journal, p.soft);
}

// One open's steps 1 and 2 as Core takes them (recovery.cc), with the
// format its chooser builds.
struct Opened {
  std::unique_ptr<MetaFormat> format;
  PoolGeometry geo;
  MetaState st;
  LoadedMeta meta;
  const FormatV3* v3() const { return dynamic_cast<const FormatV3*>(format.get()); }
};
// Which step refused, if one did.
enum class Step { kChooseFormat, kChooseSuperblock, kLoad, kLoaded };
Step OpenPool(FaultInjectionEnv* env, Opened* o, Status* why,
              ServedFormats served = ServedFormats::kV1ToV3) {
  auto f = env->OpenLocked("p", Env::Mode::kReadOnly);
  EXPECT_TRUE(f.ok());
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(f->get(), &slots, served);
  if (!chosen.ok()) {
    *why = chosen.status();
    return Step::kChooseFormat;
  }
  o->format = std::move(chosen).value();
  *why = o->format->ChooseSuperblock(slots, &o->geo);
  if (!why->ok()) return Step::kChooseSuperblock;
  o->st.au = o->geo.grain;
  *why = o->format->LoadState(f->get(), &o->st, &o->meta);
  return why->ok() ? Step::kLoaded : Step::kLoad;
}

// Slot `slot` of the pool, decoded.
SuperblockV3 SlotOf(FaultInjectionEnv* env, int slot) {
  const std::vector<uint8_t> img = env->Snapshot("p");
  SuperblockV3 sb;
  Status s = DecodeSuperblockV3(img.data() + slot * kSuperblockSlot, kSuperblockSlot, img.size(), &sb);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return sb;
}
void WriteAt(FaultInjectionEnv* env, uint64_t off, const std::string& bytes) {
  auto f = env->OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Write(off, bytes.size(), bytes.data()).ok());
  ASSERT_TRUE((*f)->Sync().ok());
}
// Both slots rewritten with `sb` (the codec's own encoding, both CRCs valid).
void WriteBothSlots(FaultInjectionEnv* env, const SuperblockV3& sb) {
  std::string img;
  ASSERT_TRUE(EncodeSuperblockV3(sb, &img).ok());
  for (int slot = 0; slot < 2; slot++) ASSERT_NO_FATAL_FAILURE(WriteAt(env, slot * kSuperblockSlot, img));
}

// What Create's pool must load as, for `p`.
void ExpectNewPool(const Opened& o, const Params& p, uint64_t start_lsn) {
  ASSERT_NE(o.v3(), nullptr) << "a format 3 pool must get FormatV3";
  EXPECT_EQ(o.geo.uuid, PoolId(7));
  EXPECT_EQ(o.geo.au, p.au);
  EXPECT_EQ(o.geo.grain, p.grain);
  EXPECT_EQ(o.geo.data_offset, p.au);
  const uint64_t units = (p.size - p.au) / p.au;
  EXPECT_EQ(o.geo.total_units(), units);
  EXPECT_EQ(o.geo.size_bytes, p.au + units * p.au);
  EXPECT_EQ(o.geo.soft_threshold_percent, p.soft);
  // Empty: no LUN, the first LUN id still to give.
  EXPECT_TRUE(o.st.luns().empty());
  EXPECT_EQ(o.st.next_lun_id, 1u);
  // Metadata: AU 0 (the LUN table's chunk) and the journal's AUs after it.
  const uint64_t journal_aus = (p.journal + p.au - 1) / p.au;
  std::vector<uint64_t> meta;
  for (uint64_t u = 0; u < 1 + journal_aus; u++) meta.push_back(u);
  EXPECT_EQ(o.meta.meta_units, meta);
  // An empty journal: replay starts and ends at the start, clean.
  EXPECT_EQ(o.meta.end.tail, 0u);
  EXPECT_EQ(o.meta.end.next_lsn, start_lsn);
  EXPECT_FALSE(o.meta.end.damaged);
  EXPECT_FALSE(o.meta.end.newer_record_follows);
  EXPECT_TRUE(o.format->journal_empty());
  EXPECT_EQ(o.format->superblock_seq(), 1u);
}

// ------------------------------------------------------------ round trip

TEST(FormatV3Create, LaysOutAPoolThatChoosesAndLoads) {
  for (const Params& p : {Params{}, Params{.au = 1 << 20, .grain = 1 << 20, .size = 12 << 20, .journal = 64 << 10},
                          Params{.au = 256 << 10, .grain = 512, .size = 8 << 20, .journal = 1 << 20, .soft = 0}}) {
    SCOPED_TRACE(std::to_string(p.au) + "/" + std::to_string(p.grain));
    FaultInjectionEnv env;
    ASSERT_TRUE(CreateOn(&env, p).ok());
    EXPECT_EQ(env.unsynced_sectors("p"), 0u) << "Create returns with everything durable";
    EXPECT_EQ(env.Snapshot("p").size(), p.size);
    // The layout format_v3.h promises, slot by slot.
    const SuperblockV3 sb = SlotOf(&env, 0);
    EXPECT_EQ(sb, SlotOf(&env, 1)) << "both slots hold the one record";
    EXPECT_EQ(sb.seq, 1u);
    EXPECT_EQ(sb.origin_format, kFormatVersionV3);
    EXPECT_EQ(sb.incompat, kIncompatCheckedMaps) << "format 3 may write kMapChecked from its first record";
    EXPECT_EQ(sb.write_unit, 4096u);
    EXPECT_EQ(sb.index, kNoIndex);
    EXPECT_EQ(sb.lun_table, (PageRef{p.au, 1}));
    const uint64_t journal_aus = (p.journal + p.au - 1) / p.au;
    EXPECT_EQ(sb.journal, (std::vector<JournalExtent>{{1, journal_aus}}));
    EXPECT_EQ(sb.journal_start, 0u);

    Opened o;
    Status why;
    ASSERT_EQ(OpenPool(&env, &o, &why), Step::kLoaded) << why.ToString();
    ASSERT_NO_FATAL_FAILURE(ExpectNewPool(o, p, sb.journal_start_lsn));
    EXPECT_TRUE(o.v3()->choice().redundant);
    EXPECT_EQ(o.v3()->choice().other, -1);
  }
}

// Two pools on one device never share journal LSNs (v2's rule too): the
// start is random.
TEST(FormatV3Create, EachPoolStartsItsJournalAtAFreshLsn) {
  FaultInjectionEnv a, b;
  ASSERT_TRUE(CreateOn(&a).ok());
  ASSERT_TRUE(CreateOn(&b).ok());
  EXPECT_NE(SlotOf(&a, 0).journal_start_lsn, SlotOf(&b, 0).journal_start_lsn);
}

// ------------------------------------------------- the v1/v2 chooser refuses v3

// The chooser refuses a format 3 pool to a caller that serves 1 and 2 only
// (meta_format.h, ServedFormats), and nothing is written. Core asks for
// kV1ToV3 (plan step 5d, sub-steps 4 and 6).
TEST(FormatV3Served, AChooserServingV1V2RefusesAFormat3PoolAndWritesNothing) {
  FaultInjectionEnv env;
  ASSERT_TRUE(CreateOn(&env).ok());
  const std::vector<uint8_t> before = env.Snapshot("p");
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env, &o, &why, ServedFormats::kV1V2), Step::kChooseFormat);
  EXPECT_EQ(why.code(), Code::kUnsupported) << why.ToString();
  EXPECT_NE(why.message().find("holds pool format version 3, which this build does not serve yet"), std::string::npos)
      << why.ToString();
  EXPECT_EQ(env.Snapshot("p"), before);
}

// A version above 3 in either slot is a newer build's pool for every
// caller, however valid the other slot: refused, nothing written.
TEST(FormatV3Served, AVersionAbove3InEitherSlotIsRefusedAsNewer) {
  for (int slot = 0; slot < 2; slot++) {
    FaultInjectionEnv env;
    ASSERT_TRUE(CreateOn(&env).ok());
    std::vector<uint8_t> img = env.Snapshot("p");
    std::string s(img.begin() + slot * kSuperblockSlot, img.begin() + (slot + 1) * kSuperblockSlot);
    Put32(&s, 8, kFormatVersionV3 + 1);
    Put32(&s, kSuperblockEnvelopeCrc, Crc32c(0, s.data(), kSuperblockEnvelopeCrc));  // the envelope every format reads
    ASSERT_NO_FATAL_FAILURE(WriteAt(&env, slot * kSuperblockSlot, s));
    const std::vector<uint8_t> before = env.Snapshot("p");
    for (ServedFormats served : {ServedFormats::kV1V2, ServedFormats::kV1ToV3}) {
      Opened o;
      Status why;
      ASSERT_EQ(OpenPool(&env, &o, &why, served), Step::kChooseFormat) << slot;
      EXPECT_EQ(why.code(), Code::kUnsupported);
      // Each caller is told the versions it opens.
      const std::string reads = served == ServedFormats::kV1V2 ? "1 to 2" : "1 to 3";
      EXPECT_NE(why.message().find("superblock slot " + std::to_string(slot) +
                                   " holds pool format version 4 (this build reads versions " + reads + ")"),
                std::string::npos)
          << why.ToString();
    }
    auto p = Pool::Open(&env, "p");
    EXPECT_EQ(p.status().code(), Code::kUnsupported) << p.status().ToString();
    EXPECT_EQ(env.Snapshot("p"), before);
  }
}

// Create sets the incompat bit that says the journal may hold kMapChecked
// records, and every later superblock keeps it (an open's checkpoint is the
// current one, changed); an incompat bit this build does not know, in
// either slot, is a newer build's pool: refused (kUnsupported), nothing
// written.
TEST(FormatV3Served, ThePoolKeepsItsIncompatBitAndAnUnknownOneIsRefused) {
  FaultInjectionEnv env;
  ASSERT_TRUE(CreateOn(&env).ok());
  ASSERT_EQ(SlotOf(&env, 0).incompat, kIncompatCheckedMaps);
  const uint64_t seq = SlotOf(&env, 0).seq;
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_TRUE((*p)->Close().ok());
  }
  for (int slot = 0; slot < 2; slot++) {
    const SuperblockV3 sb = SlotOf(&env, slot);
    EXPECT_GT(sb.seq, seq) << "the open wrote superblocks";
    EXPECT_EQ(sb.incompat, kIncompatCheckedMaps) << slot;
  }
  const std::vector<uint8_t> good = env.Snapshot("p");
  for (int slot = 0; slot < 2; slot++) {
    std::string s(good.begin() + slot * kSuperblockSlot, good.begin() + (slot + 1) * kSuperblockSlot);
    Put32(&s, 12, kIncompatCheckedMaps | 2);  // the flags word, then both CRCs resealed
    Put32(&s, kSuperblockEnvelopeCrc, Crc32c(0, s.data(), kSuperblockEnvelopeCrc));
    Put32(&s, kSuperblockV3Crc, Crc32cAroundField(s.data(), s.size(), kSuperblockV3Crc));
    ASSERT_NO_FATAL_FAILURE(WriteAt(&env, slot * kSuperblockSlot, s));
    const std::vector<uint8_t> before = env.Snapshot("p");
    for (bool read_only : {false, true}) {
      auto p = Pool::Open(&env, "p", OpenOptions{.read_only = read_only});
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.status().code(), Code::kUnsupported) << p.status().ToString();
      EXPECT_NE(p.status().message().find("superblock slot " + std::to_string(slot) +
                                          ": superblock v3: incompat flags 2 this build does not know"),
                std::string::npos)
          << p.status().ToString();
    }
    EXPECT_EQ(env.Snapshot("p"), before);
    ASSERT_NO_FATAL_FAILURE(WriteAt(&env, slot * kSuperblockSlot,
                                    std::string(good.begin() + slot * kSuperblockSlot,
                                                good.begin() + (slot + 1) * kSuperblockSlot)));
  }
}

// Formats 1 and 2 still get FormatV2 when format 3 is served too.
TEST(FormatV3Served, AFormat2PoolStillGetsFormatV2) {
  FaultInjectionEnv env;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV2::Create(f->get(), PoolId(2), kAu, 4 << 20, 64 << 10, 0).ok());
  }
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_NE(dynamic_cast<FormatV2*>(o.format.get()), nullptr);
  EXPECT_EQ(o.geo.uuid, PoolId(2));
  EXPECT_EQ(o.geo.grain, kAu);
}

// ------------------------------------------------------------ power cuts

// Every Env call of Create failing in turn, then the disk as it is and
// after each kind of power loss: either no chooser accepts anything, or the
// pool is whole (chooses, loads, declares what was asked, and the file
// holds the size it declares). Never a half pool.
TEST(FormatV3Create, EveryFailedCallLeavesNothingOrTheWholePool) {
  // The calls of a clean Create, per kind.
  FaultInjectionEnv clean;
  ASSERT_TRUE(CreateOn(&clean).ok());
  using Op = FaultInjectionEnv::Op;
  const Op kOps[] = {Op::kWrite, Op::kSync, Op::kPunch, Op::kTruncate, Op::kRead};
  uint64_t total = 0;
  for (Op op : kOps) total += clean.calls(op);
  EXPECT_EQ(clean.calls(Op::kWrite), 3u) << "the LUN table page and two slots";
  EXPECT_EQ(clean.calls(Op::kSync), 2u);

  int whole = 0, nothing = 0;
  for (Op op : kOps) {
    for (uint64_t nth = 0; nth < clean.calls(op); nth++) {
      for (int loss = -1; loss < 4; loss++) {  // -1: no power loss
        for (uint64_t seed = 0; seed < (loss >= 2 ? 8u : 1u); seed++) {
          SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " call " + std::to_string(nth) + " loss " +
                       std::to_string(loss) + " seed " + std::to_string(seed));
          FaultInjectionEnv env;
          env.FailAt(op, nth, Code::kIOError);
          Status s = CreateOn(&env);
          ASSERT_EQ(s.code(), Code::kIOError) << s.ToString();
          if (loss >= 0) env.PowerLoss(static_cast<FaultInjectionEnv::Loss>(loss), seed);
          Opened o;
          Status why;
          const Step step = OpenPool(&env, &o, &why);
          if (step == Step::kLoaded) {
            whole++;
            ASSERT_NO_FATAL_FAILURE(ExpectNewPool(o, Params{}, SlotOf(&env, o.v3()->choice().slot).journal_start_lsn));
            EXPECT_GE(env.Snapshot("p").size(), o.geo.size_bytes) << "a superblock declared a size not yet durable";
          } else {
            nothing++;
            // Refused by the choice, never by the load: a superblock that
            // chooses names a LUN table that is there.
            EXPECT_NE(step, Step::kLoad) << why.ToString();
            EXPECT_EQ(why.code(), Code::kCorruption) << why.ToString();
          }
        }
      }
    }
  }
  EXPECT_GT(total, 0u);
  EXPECT_GT(whole, 0) << "some failures come after a whole pool is on disk";
  EXPECT_GT(nothing, 0) << "some leave nothing";
}

// ------------------------------------------------------- damaged slots

// Either slot damaged (torn, rotted): the other opens the pool, and the
// choice names the damaged one for the open to rewrite. Both: refused.
TEST(FormatV3Choose, EitherSlotDamagedLoadsFromTheOther) {
  for (int slot = 0; slot < 2; slot++) {
    for (uint64_t at : {uint64_t{8}, uint64_t{40}, uint64_t{200}, uint64_t{4000}}) {
      FaultInjectionEnv env;
      ASSERT_TRUE(CreateOn(&env).ok());
      const uint64_t start_lsn = SlotOf(&env, 1 - slot).journal_start_lsn;
      env.Corrupt("p", slot * kSuperblockSlot + at, 1);
      Opened o;
      Status why;
      ASSERT_EQ(OpenPool(&env, &o, &why), Step::kLoaded) << slot << " " << at << ": " << why.ToString();
      ASSERT_NO_FATAL_FAILURE(ExpectNewPool(o, Params{}, start_lsn));
      EXPECT_FALSE(o.v3()->choice().redundant);
      EXPECT_EQ(o.v3()->choice().slot, 1 - slot);
      EXPECT_EQ(o.v3()->choice().other, slot);
      EXPECT_EQ(o.v3()->choice().other_state.rfind("damaged: ", 0), 0u) << o.v3()->choice().other_state;
    }
  }
  FaultInjectionEnv env;
  ASSERT_TRUE(CreateOn(&env).ok());
  env.Corrupt("p", 40, 1);
  env.Corrupt("p", kSuperblockSlot + 40, 1);
  Opened o;
  Status why;
  EXPECT_NE(OpenPool(&env, &o, &why), Step::kLoaded);
  EXPECT_EQ(why.code(), Code::kCorruption) << why.ToString();
}

// A damaged LUN table page is corruption, and with one slot damaged too the
// message names that slot beside the page's fault (the copy opened may be
// the older one).
TEST(FormatV3Load, ADamagedLunTablePageIsCorruptionNamingADamagedSlot) {
  FaultInjectionEnv env;
  ASSERT_TRUE(CreateOn(&env).ok());
  env.Corrupt("p", kAu + 20, 1);  // the LUN table page: AU 0 of the data area
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env, &o, &why), Step::kLoad);
  EXPECT_EQ(why.code(), Code::kCorruption) << why.ToString();
  EXPECT_EQ(why.message().find("superblock slot"), std::string::npos) << why.ToString();
  env.Corrupt("p", 40, 1);
  Opened o2;
  ASSERT_EQ(OpenPool(&env, &o2, &why), Step::kLoad);
  EXPECT_EQ(why.code(), Code::kCorruption);
  EXPECT_NE(why.message().find("superblock slot 0 was passed over (damaged: "), std::string::npos)
      << why.ToString();
}

// ------------------------------------------------------------- arguments

// Each refused with kInvalidArgument before a byte is written.
TEST(FormatV3Create, RefusesArgumentsBeforeWritingAnything) {
  const uint64_t kMin = kAu + (1 + 2 + 8) * uint64_t{kAu};  // AU 0, two journal AUs, 8 of data
  struct Case {
    std::string why;
    Params p;
  } cases[] = {
      {"allocation unit must be", {.au = 32 << 10, .grain = 4096}},
      {"allocation unit must be", {.au = 96 << 10, .grain = 4096}},
      {"allocation unit must be", {.au = 2 << 20, .grain = 4096, .size = 64 << 20}},
      {"grain", {.grain = 256}},
      {"grain", {.grain = 3000}},
      {"grain", {.grain = 128 << 10}},
      {"soft threshold", {.soft = 101}},
      {"journal size", {.journal = 32 << 10}},
      {"journal size", {.journal = (64 << 10) + 512}},
      {"journal size", {.journal = (uint64_t{1} << 30) + 4096}},
      {"pool too small: needs at least " + std::to_string(kMin) + " bytes", {.size = kMin - 1}},
      {"pool too small", {.size = 0}},
      // 2^44 AUs of 16 grains = 2^48 grains: one AU more passes it.
      {"pool too large: pool size of 17592186044417 AUs passes 2^48 grains",
       {.size = kAu + ((uint64_t{1} << 44) + 1) * kAu}},
      // 1 MiB grains: 2^62 bytes binds first (2^42 AUs).
      {"pool too large", {.au = 1 << 20, .grain = 1 << 20, .size = (uint64_t{1} << 20) * ((uint64_t{1} << 42) + 2)}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.why);
    FaultInjectionEnv env;
    Status s = CreateOn(&env, c.p);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.ToString().find(c.why), std::string::npos) << s.ToString();
    EXPECT_EQ(env.mutating_calls(), 0u);
    EXPECT_TRUE(env.Snapshot("p").empty());
  }
  // The bounds are exact: the smallest pool is made, and opens.
  FaultInjectionEnv env;
  ASSERT_TRUE(CreateOn(&env, {.size = kMin}).ok());
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_EQ(o.geo.total_units(), 11u);
  // ... and so is the largest (too large to lay out on a test's file).
  EXPECT_EQ(PoolUnitsRuleV3(uint64_t{1} << 44, kAu, kGrain), "");
  EXPECT_NE(PoolUnitsRuleV3((uint64_t{1} << 44) + 1, kAu, kGrain), "");
  EXPECT_EQ(PoolUnitsRuleV3(uint64_t{1} << 42, 1 << 20, 1 << 20), "");
  EXPECT_NE(PoolUnitsRuleV3((uint64_t{1} << 42) + 1, 1 << 20, 1 << 20), "");
}

// ------------------------------------------- what LoadState loads or refuses

// An index root naming no index page is refused (kCorruption), the state
// left as it was (never half loaded); LUN records and journal records load
// (format_v3_ckpt_test.cc has the checkpoints that write them).
class FormatV3LoadState : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(CreateOn(&env_).ok());
    sb_ = SlotOf(&env_, 0);
  }
  void ExpectRefused(Code code, const std::string& what) {
    Opened o;
    o.st.next_lun_id = 99;  // LoadState must not touch it when it refuses
    Status why;
    ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoad) << why.ToString();
    EXPECT_EQ(why.code(), code) << why.ToString();
    EXPECT_NE(why.message().find(what), std::string::npos) << why.ToString();
    EXPECT_TRUE(o.st.luns().empty());
    EXPECT_EQ(o.st.next_lun_id, 99u);
    EXPECT_TRUE(o.meta.meta_units.empty());
  }
  // Ring offset 0 of the journal: AU 1 of the data area.
  uint64_t JournalStart() const { return sb_.data_offset + sb_.journal[0].first_au * sb_.au; }
  std::string Seal(uint64_t lsn) const {
    Record r;
    r.type = RecType::kSeal;
    std::string out;
    FrameRecord(r, lsn, &out);  // vouches for nothing
    return out;
  }

  FaultInjectionEnv env_;
  SuperblockV3 sb_;
};

TEST_F(FormatV3LoadState, AnIndexRootNamingNoIndexPageIsCorruption) {
  SuperblockV3 sb = sb_;
  sb.index = {IndexEntry{{1, 0}, {1, 100}, sb.data_offset + 4096, 1}, 0};  // in the metadata AU, zeros
  ASSERT_NO_FATAL_FAILURE(WriteBothSlots(&env_, sb));
  ExpectRefused(Code::kCorruption, "not an index page) (at address " + std::to_string(sb.data_offset + 4096));
}

TEST_F(FormatV3LoadState, LunRecordsLoad) {
  auto f = env_.OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  LunRecord lun;
  lun.id = 1;
  lun.name = "a";
  lun.size = 1 << 20;
  uint64_t root = 0;
  std::vector<uint64_t> written;
  // Rewritten in place under the root's sequence: a table with one LUN.
  ASSERT_TRUE(WriteLunTable(f->get(), sb_.uuid, sb_.lun_table.seq, 2, {lun},
                            [&]() -> Result<uint64_t> { return sb_.lun_table.addr; }, &root, &written)
                  .ok());
  ASSERT_TRUE((*f)->Sync().ok());
  f->reset();
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_EQ(o.st.next_lun_id, 2u);
  ASSERT_EQ(o.st.luns().size(), 1u);
  const LunState* l = o.st.Find(1);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->name, "a");
  EXPECT_EQ(l->size, uint64_t{1} << 20);
  EXPECT_EQ(l->map.extents(), 0u) << "no index: no runs";
  EXPECT_EQ(o.meta.meta_units, (std::vector<uint64_t>{0, 1, 2}));  // the LUN table's AU, the journal's two
}

TEST_F(FormatV3LoadState, AJournalHoldingRecordsIsReplayed) {
  std::string two = Seal(sb_.journal_start_lsn) + Seal(sb_.journal_start_lsn + 1);
  ASSERT_NO_FATAL_FAILURE(WriteAt(&env_, JournalStart(), two));
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_EQ(o.meta.end.next_lsn, sb_.journal_start_lsn + 2);
  EXPECT_EQ(o.meta.end.tail, two.size());
  EXPECT_FALSE(o.meta.end.damaged);
  EXPECT_FALSE(o.format->journal_empty());
}

// What replays nothing is loaded, with the scan's verdict for Core: a torn
// first record is a clean tail; a record of a later LSN where the first
// should be is a newer generation (Core refuses it unless told to accept).
TEST_F(FormatV3LoadState, ATornRecordIsACleanEmptyJournal) {
  const std::string rec = Seal(sb_.journal_start_lsn);
  ASSERT_NO_FATAL_FAILURE(WriteAt(&env_, JournalStart(), rec.substr(0, rec.size() - 3)));
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoaded) << why.ToString();
  ASSERT_NO_FATAL_FAILURE(ExpectNewPool(o, Params{}, sb_.journal_start_lsn));
}

TEST_F(FormatV3LoadState, ANewerGenerationIsReportedNotReplayed) {
  ASSERT_NO_FATAL_FAILURE(WriteAt(&env_, JournalStart(), Seal(sb_.journal_start_lsn + 5)));
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_EQ(o.meta.end.tail, 0u);
  EXPECT_TRUE(o.meta.end.newer_record_follows);
  EXPECT_TRUE(o.st.luns().empty());
}

// ----------------------------------------------------------- journal ring

// CommitBatch over the ring Create laid out and LoadState opened, after
// the open's checkpoint (no batch may come before it).
class FormatV3Journal : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(CreateOn(&env_).ok()); }
  // Chooses and loads the pool read-write, keeping the file for writes,
  // then writes the open's checkpoint, as Core's open does.
  void Load() {
    ASSERT_NO_FATAL_FAILURE(LoadOnly());
    ASSERT_NO_FATAL_FAILURE(OpenCheckpoint());
  }
  // The open's checkpoint of the empty pool (its LUN table page fits the
  // metadata chunk: no AU to hand over), its journal starting at next_lsn_.
  void OpenCheckpoint() {
    const FrozenCheckpoint f = v3_->Freeze(MetaState());
    ASSERT_EQ(f.meta_units, 0u);
    Status s = format_->WriteCheckpoint(file_.get(), f, {}, next_lsn_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    sb_ = v3_->choice().sb;
  }
  void LoadOnly() {
    auto f = env_.OpenLocked("p", Env::Mode::kReadWrite);
    ASSERT_TRUE(f.ok());
    file_ = std::move(f).value();
    SuperblockSlots slots;
    auto chosen = ChooseMetaFormat(file_.get(), &slots, ServedFormats::kV1ToV3);
    ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
    format_ = std::move(chosen).value();
    v3_ = dynamic_cast<FormatV3*>(format_.get());
    ASSERT_NE(v3_, nullptr);
    PoolGeometry g;
    ASSERT_TRUE(format_->ChooseSuperblock(slots, &g).ok());
    MetaState st;
    st.au = g.grain;
    LoadedMeta meta;
    Status s = format_->LoadState(file_.get(), &st, &meta);
    ASSERT_TRUE(s.ok()) << s.ToString();
    sb_ = v3_->choice().sb;
    next_lsn_ = meta.end.next_lsn + kLsnGapAfterOpen;  // the open's jump (meta_format.h)
  }
  // A batch of `n` records with the LSNs after the last batch's.
  JournalBatch Batch(int n) {
    JournalBatch b;
    for (int i = 0; i < n; i++) {
      Record r;
      r.type = RecType::kSeal;
      std::string one;
      FrameRecord(r, next_lsn_, format_->durable_lsn(), &one);
      b.bytes += one;
      b.last_lsn = next_lsn_++;
    }
    return b;
  }
  std::string Slot(int slot) const {
    const std::vector<uint8_t> img = env_.Snapshot("p");
    return std::string(img.begin() + slot * kSuperblockSlot, img.begin() + (slot + 1) * kSuperblockSlot);
  }
  std::string Ring() const {
    const std::vector<uint8_t> img = env_.Snapshot("p");
    const uint64_t at = sb_.data_offset + sb_.journal[0].first_au * sb_.au;
    return std::string(img.begin() + at, img.begin() + at + sb_.capacity());
  }
  // Cuts power (unsynced writes dropped) and scans the ring as the next
  // open does: the records durable there.
  uint64_t DurableRecordsAfterPowerLoss() {
    file_.reset();
    env_.PowerLoss(FaultInjectionEnv::Loss::kDropAll, 0);
    auto f = env_.OpenLocked("p", Env::Mode::kReadOnly);
    EXPECT_TRUE(f.ok());
    auto layout = JournalLayout::Of(sb_);
    EXPECT_TRUE(layout.ok());
    JournalRingSource ring(f->get(), *layout, sb_.journal_start);
    auto scan = ScanJournal(&ring, sb_.journal_start_lsn);
    EXPECT_TRUE(scan.ok());
    EXPECT_FALSE(scan->damaged);
    EXPECT_FALSE(scan->newer_generation);
    return scan->replayed;
  }

  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  std::unique_ptr<MetaFormat> format_;
  FormatV3* v3_ = nullptr;
  SuperblockV3 sb_;
  uint64_t next_lsn_ = 0;
};

TEST_F(FormatV3Journal, CommitBatchMakesItsRecordsDurableInTheRing) {
  ASSERT_NO_FATAL_FAILURE(Load());
  EXPECT_TRUE(format_->journal_empty());
  EXPECT_EQ(format_->durable_lsn(), next_lsn_ - 1) << "the checkpoint holds every record before its start";
  const uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  JournalBatch b = Batch(3);
  ASSERT_TRUE(format_->CommitBatch(file_.get(), b).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync) - syncs, 1u) << "no data to sync first, no slot to rewrite";
  EXPECT_EQ(format_->durable_lsn(), b.last_lsn);
  EXPECT_FALSE(format_->journal_empty());
  b = Batch(2);  // vouching for the first batch
  ASSERT_TRUE(format_->CommitBatch(file_.get(), b).ok());
  EXPECT_EQ(format_->durable_lsn(), b.last_lsn);
  EXPECT_EQ(DurableRecordsAfterPowerLoss(), 5u);
  // And the next open replays all five.
  Opened o;
  Status why;
  ASSERT_EQ(OpenPool(&env_, &o, &why), Step::kLoaded) << why.ToString();
  EXPECT_EQ(o.meta.end.next_lsn, b.last_lsn + 1);
  EXPECT_FALSE(o.meta.end.damaged);
}

// Fits is the ring's room exactly; a batch that does not fit is kNoSpace
// and writes nothing.
TEST_F(FormatV3Journal, FitsIsTheRingsRoomAndAFullBatchWritesNothing) {
  ASSERT_NO_FATAL_FAILURE(Load());
  const uint64_t cap = sb_.capacity();
  EXPECT_EQ(cap, 2u * kAu);
  EXPECT_TRUE(format_->Fits(cap));
  EXPECT_FALSE(format_->Fits(cap + 1));
  const JournalBatch b = Batch(4);
  ASSERT_TRUE(format_->CommitBatch(file_.get(), b).ok());
  const uint64_t room = cap - b.bytes.size();
  EXPECT_TRUE(format_->Fits(room));
  EXPECT_FALSE(format_->Fits(room + 1));
  JournalBatch big;
  big.bytes.assign(room + 1, '\0');
  big.last_lsn = next_lsn_;
  const std::vector<uint8_t> before = env_.Snapshot("p");
  const uint64_t calls = env_.mutating_calls();
  EXPECT_EQ(format_->CommitBatch(file_.get(), big).code(), Code::kNoSpace);
  EXPECT_EQ(env_.mutating_calls(), calls);
  EXPECT_EQ(env_.Snapshot("p"), before);
  EXPECT_EQ(format_->durable_lsn(), b.last_lsn);
  EXPECT_TRUE(format_->Fits(room));
}

// The writer rule's open half: a slot the chooser named is rewritten with
// the chosen copy, synced, before the open's checkpoint (the format's first
// write: no batch comes before it) writes anything else; if that rewrite
// fails, nothing else is written. Batches then need no rewrite.
TEST_F(FormatV3Journal, ADamagedSlotIsRewrittenBeforeTheOpensCheckpointWritesAnythingElse) {
  env_.Corrupt("p", kSuperblockSlot + 40, 1);
  ASSERT_NO_FATAL_FAILURE(LoadOnly());
  ASSERT_FALSE(v3_->choice().redundant);
  ASSERT_EQ(v3_->choice().other, 1);
  const std::vector<uint8_t> image = env_.Snapshot("p");
  const uint64_t seq = v3_->superblock_seq();
  // The rewrite's write fails: nothing written.
  env_.FailAt(FaultInjectionEnv::Op::kWrite, 0, Code::kIOError);
  const FrozenCheckpoint f = v3_->Freeze(MetaState());
  EXPECT_EQ(format_->WriteCheckpoint(file_.get(), f, {}, next_lsn_).code(), Code::kIOError);
  EXPECT_EQ(env_.Snapshot("p"), image);
  EXPECT_FALSE(v3_->choice().redundant);
  EXPECT_EQ(v3_->superblock_seq(), seq);
  // The rewrite's sync (after the one that makes the chosen copy durable)
  // fails: only the slot was written, with the chosen copy.
  env_.FailAt(FaultInjectionEnv::Op::kSync, 1, Code::kIOError);
  const uint64_t writes = env_.calls(FaultInjectionEnv::Op::kWrite);
  EXPECT_EQ(format_->WriteCheckpoint(file_.get(), f, {}, next_lsn_).code(), Code::kIOError);
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kWrite) - writes, 1u);
  std::vector<uint8_t> want = image;
  std::copy(image.begin(), image.begin() + kSuperblockSlot, want.begin() + kSuperblockSlot);
  EXPECT_EQ(env_.Snapshot("p"), want);
  EXPECT_EQ(v3_->superblock_seq(), seq);
  // Then it goes through, and a batch after it rewrites no slot.
  env_.ClearFaults();
  ASSERT_NO_FATAL_FAILURE(OpenCheckpoint());
  EXPECT_EQ(Slot(1), Slot(0));
  EXPECT_TRUE(v3_->choice().redundant);
  const uint64_t syncs = env_.calls(FaultInjectionEnv::Op::kSync);
  ASSERT_TRUE(format_->CommitBatch(file_.get(), Batch(1)).ok());
  EXPECT_EQ(env_.calls(FaultInjectionEnv::Op::kSync) - syncs, 1u);
  EXPECT_EQ(DurableRecordsAfterPowerLoss(), 1u);
  SuperblockChoice c;
  const std::vector<uint8_t> img = env_.Snapshot("p");
  ASSERT_TRUE(ChooseSuperblockV3(img.data(), img.data() + kSuperblockSlot, img.size(), &c).ok());
  EXPECT_TRUE(c.redundant);
}

// A failed batch (its sync) leaves the ring's tail and durable LSN: the
// next batch would go where it went, and Core fails the pool anyway.
TEST_F(FormatV3Journal, AFailedBatchMovesNeitherTailNorDurableLsn) {
  ASSERT_NO_FATAL_FAILURE(Load());
  const JournalBatch first = Batch(1);
  ASSERT_TRUE(format_->CommitBatch(file_.get(), first).ok());
  const uint64_t room = sb_.capacity() - first.bytes.size();
  env_.FailAt(FaultInjectionEnv::Op::kSync, 0, Code::kIOError);
  EXPECT_EQ(format_->CommitBatch(file_.get(), Batch(2)).code(), Code::kIOError);
  EXPECT_EQ(format_->durable_lsn(), first.last_lsn);
  EXPECT_TRUE(format_->Fits(room));
  EXPECT_FALSE(format_->Fits(room + 1));
}

// An upgrade cut after its first slot write (store-v3.md 3.7): the v3 copy
// in slot 0 beside the v2 copy it started from in slot 1. FormatV3 takes the
// v3 copy, and its first write (the open's checkpoint's, before any batch)
// completes the upgrade by rewriting the v2 slot.
TEST(FormatV3Upgrade, TheFirstWriteCompletesAnUpgradeCutAfterOneSlot) {
  FaultInjectionEnv env;
  Superblock v2;
  {
    auto f = env.OpenLocked("p", Env::Mode::kCreate);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(FormatV2::Create(f->get(), PoolId(7), kAu, 2 << 20, 64 << 10, 0).ok());
    std::vector<char> slot(kSuperblockSlot);
    ASSERT_TRUE((*f)->Read(kSuperblockSlot, slot.size(), slot.data()).ok());
    ASSERT_TRUE(Superblock::Decode(slot.data(), slot.size(), &v2).ok());
    ASSERT_EQ(v2.seq, 1u);
    // The upgrade's v3 superblock (same pool: UUID, AU, data offset, size),
    // its LUN table in data AU 1 and journal in AU 0, both free in v2.
    SuperblockV3 sb;
    sb.uuid = v2.uuid;
    sb.seq = v2.seq + 1;
    sb.au = v2.au;
    sb.grain = kGrain;
    sb.data_offset = v2.data_offset;
    sb.units = v2.total_units();
    sb.origin_format = v2.version;
    sb.journal = {{0, 1}};
    sb.lun_table = {v2.data_offset + v2.au, sb.seq};
    sb.journal_start_lsn = v2.journal_start_lsn + 1;
    uint64_t root = 0;
    std::vector<uint64_t> written;
    ASSERT_TRUE(WriteLunTable(f->get(), sb.uuid, sb.seq, 1, {}, [&]() -> Result<uint64_t> { return sb.lun_table.addr; },
                              &root, &written)
                    .ok());
    ASSERT_TRUE((*f)->Sync().ok());
    std::string img;
    ASSERT_TRUE(EncodeSuperblockV3(sb, &img).ok());
    ASSERT_TRUE((*f)->Write(sb.seq % 2 * kSuperblockSlot, img.size(), img.data()).ok());  // slot 0
    ASSERT_TRUE((*f)->Sync().ok());
  }
  auto f = env.OpenLocked("p", Env::Mode::kReadWrite);
  ASSERT_TRUE(f.ok());
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(f->get(), &slots, ServedFormats::kV1ToV3);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  auto* v3 = dynamic_cast<FormatV3*>(chosen->get());
  ASSERT_NE(v3, nullptr);
  PoolGeometry g;
  ASSERT_TRUE(v3->ChooseSuperblock(slots, &g).ok());
  EXPECT_EQ(v3->choice().slot, 0);
  EXPECT_EQ(v3->choice().other, 1);
  EXPECT_NE(v3->choice().other_state.find("format 2"), std::string::npos) << v3->choice().other_state;
  MetaState st;
  LoadedMeta meta;
  ASSERT_TRUE(v3->LoadState(f->get(), &st, &meta).ok());
  EXPECT_EQ(meta.meta_units, (std::vector<uint64_t>{0, 1}));
  const uint64_t v3_slot_seq = v3->superblock_seq();
  const FrozenCheckpoint frozen = v3->Freeze(st);
  ASSERT_EQ(frozen.meta_units, 0u);
  const uint64_t lsn = meta.end.next_lsn + kLsnGapAfterOpen;
  // The checkpoint's first write is the rewrite: with the one after it
  // failing (the superblock of the next sequence, 3, for slot 1 too), the
  // v2 slot already holds the v3 copy (sequence 2), byte for byte.
  env.FailAt(FaultInjectionEnv::Op::kWrite, 1, Code::kIOError);
  ASSERT_EQ(v3->WriteCheckpoint(f->get(), frozen, {}, lsn).code(), Code::kIOError);
  std::vector<uint8_t> img = env.Snapshot("p");
  EXPECT_TRUE(std::equal(img.begin(), img.begin() + kSuperblockSlot, img.begin() + kSuperblockSlot))
      << "the v2 slot holds the v3 copy before any other write";
  EXPECT_EQ(v3->superblock_seq(), v3_slot_seq);
  ASSERT_TRUE(v3->WriteCheckpoint(f->get(), v3->Freeze(st), {}, lsn).ok());
  EXPECT_GT(v3->superblock_seq(), v3_slot_seq);
  JournalBatch b;
  Record seal;
  seal.type = RecType::kSeal;
  FrameRecord(seal, lsn, &b.bytes);
  b.last_lsn = lsn;
  ASSERT_TRUE(v3->CommitBatch(f->get(), b).ok());
  f->reset();
  img = env.Snapshot("p");
  EXPECT_TRUE(std::equal(img.begin(), img.begin() + kSuperblockSlot, img.begin() + kSuperblockSlot))
      << "both slots hold the checkpoint's copy";
  EXPECT_EQ(SuperblockEnvelopeVersion(img.data() + kSuperblockSlot, kSuperblockSlot), kFormatVersionV3);
  // Core serves format 3 (store-v3 5d.4): the upgraded pool opens, at its
  // grain below the AU, and checks clean.
  {
    auto p = Pool::Open(&env, "p");
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ((*p)->Space().unit_bytes, kGrain);
    ASSERT_TRUE((*p)->Close().ok());
  }
  auto rep = Pool::CheckOffline(&env, "p");
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->clean) << (rep->problems.empty() ? "" : rep->problems.front());
}

}  // namespace
}  // namespace cowstore::store
