// SPDX-License-Identifier: Apache-2.0
// Format v3's LUN table pages (handler/store/lun_table_page.h): round trips,
// every page and chain fault refused by name, every single-bit flip refused.
#include "handler/store/lun_table_page.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "handler/store/fault_env.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::store {
namespace {

constexpr uint64_t kSeq = 7;
constexpr uint64_t kMin = 8192, kEnd = 1 << 20;

Uuid PoolId(uint8_t v) {
  Uuid u{};
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(v + i);
  return u;
}
LunTableExpect Expect() { return {PoolId(1), kSeq, kMin, kEnd}; }

LunRecord Lun(uint32_t id, const std::string& name) {
  LunRecord r;
  r.id = id;
  r.name = name;
  r.uuid = PoolId(static_cast<uint8_t>(id * 3));
  r.size = uint64_t{id} << 30;
  r.bs = id % 2 ? 512 : 4096;
  return r;
}

// A pool file and a lowest-first page allocator over [kMin, kEnd).
class Disk {
 public:
  Disk() {
    file_ = std::move(env_.OpenLocked("pool", Env::Mode::kCreate).value());
    EXPECT_TRUE(file_->Truncate(kEnd).ok());
  }
  LunPageAllocator Alloc() {
    return [this]() -> Result<uint64_t> {
      if (fail_after_ == 0) return Status(Code::kNoSpace, "no page");
      fail_after_--;
      uint64_t a = next_;
      next_ += kLunPageBytes;
      return a;
    };
  }
  Status Write(const std::vector<LunRecord>& luns, uint32_t next_id, uint64_t* root,
               std::vector<uint64_t>* written) {
    return WriteLunTable(file_.get(), PoolId(1), kSeq, next_id, luns, Alloc(), root, written);
  }
  Status Read(uint64_t root, LunTable* t) { return ReadLunTable(file_.get(), root, Expect(), t); }
  std::string Page(uint64_t a) {
    std::string b(kLunPageBytes, '\0');
    EXPECT_TRUE(file_->Read(a, b.size(), b.data()).ok());
    return b;
  }
  void Put(uint64_t a, const std::string& b) { ASSERT_TRUE(file_->Write(a, b.size(), b.data()).ok()); }
  int fail_after_ = 1 << 30;

 private:
  FaultInjectionEnv env_;
  std::unique_ptr<File> file_;
  uint64_t next_ = kMin;
};

std::vector<LunRecord> ManyLuns(uint32_t n) {
  std::vector<LunRecord> v;
  for (uint32_t i = 1; i <= n; i++) {
    LunRecord r = Lun(i, "vm-" + std::string(40, 'x') + "-" + std::to_string(i));
    if (i % 5 == 0) r.attrs = {true, PoolId(9), 1700000000 + i, 0};  // a snapshot
    v.push_back(r);
  }
  return v;
}

void ExpectRefused(const std::string& page, uint32_t page_no, const std::string& words,
                   Code code = Code::kCorruption) {
  LunTablePage out;
  Status s = DecodeLunTablePage(page.data(), page.size(), page_no, Expect(), &out);
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.ToString().find(words), std::string::npos) << s.ToString();
}

// A page of this test's pool and sequence: page `page_no` of a chain, naming
// `next`; page 0 also declares the next LUN id and its records as the table.
LunTablePage PageOf(uint32_t page_no, uint64_t next, std::vector<LunRecord> luns, uint32_t next_id = 100) {
  LunTablePage pg;
  pg.pool = PoolId(1);
  pg.seq = kSeq;
  pg.page_no = page_no;
  pg.next = next;
  if (page_no == 0) {
    pg.next_lun_id = next_id;
    pg.total_luns = static_cast<uint32_t>(luns.size());
  }
  pg.luns = std::move(luns);
  return pg;
}

std::string Encoded(const LunTablePage& pg) {
  std::string img;
  EXPECT_TRUE(EncodeLunTablePage(pg, &img).ok());
  return img;
}

std::string OnePage(std::vector<LunRecord> luns, uint32_t next_id = 100) {
  return Encoded(PageOf(0, 0, std::move(luns), next_id));
}

TEST(LunTablePage, EmptyOneAndManyLunsReadBackAsWritten) {
  for (uint32_t n : {0u, 1u, 60u, 400u}) {
    Disk d;
    const auto luns = ManyLuns(n);
    uint64_t root = 0;
    std::vector<uint64_t> written;
    ASSERT_TRUE(d.Write(luns, n + 1, &root, &written).ok());
    LunTable t;
    ASSERT_TRUE(d.Read(root, &t).ok()) << n;
    EXPECT_EQ(t.next_lun_id, n + 1);
    EXPECT_EQ(t.luns, luns);
    EXPECT_EQ(t.pages, written);
    // 60 LUNs of ~110 bytes fill more than one page; an empty table is one page.
    if (n == 0) {
      EXPECT_EQ(written.size(), 1u);
    }
    if (n >= 60) {
      EXPECT_GT(written.size(), 1u);
    }
    EXPECT_LE(written.size(), n * 110 / (kLunPageBytes - kLunPageHeader) + 1);
  }
}

TEST(LunTablePage, EachPageFaultIsRefusedByName) {
  const std::string good = OnePage({Lun(1, "a"), Lun(2, "b")});
  auto resealed = [&](auto change) {
    std::string b = good;
    change(&b);
    ResealCrc(&b, kLunPageCrcOffset);
    return b;
  };
  {
    std::string b = good;
    b[0] ^= 1;
    ExpectRefused(b, 0, "bad magic");
  }
  {
    std::string b = good;
    b[100] ^= 4;
    ExpectRefused(b, 0, "CRC mismatch");
  }
  ExpectRefused(resealed([](std::string* b) { (*b)[20] ^= 1; }), 0, "another pool");
  ExpectRefused(resealed([](std::string* b) { Put64(b, 32, kSeq - 1); }), 0, "sequence 6");
  ExpectRefused(good, 1, "says it is page 0");
  ExpectRefused(resealed([](std::string* b) { Put32(b, 44, 3); }), 0, "record 2");
  ExpectRefused(resealed([](std::string* b) { Put32(b, 44, 200); }), 0, "record count 200");
  ExpectRefused(resealed([](std::string* b) { Put64(b, 48, kMin + 1); }), 0, "unaligned");
  ExpectRefused(resealed([](std::string* b) { Put64(b, 48, kEnd); }), 0, "outside the pool");
  ExpectRefused(resealed([](std::string* b) { Put64(b, 48, 4096); }), 0, "outside the pool");
  ExpectRefused(resealed([](std::string* b) { (*b)[4000] = 1; }), 0, "nonzero bytes");
  ExpectRefused(resealed([](std::string* b) { Put32(b, 8, kLunPageVersion + 1); }), 0,
                "format version 2", Code::kUnsupported);
  ExpectRefused(resealed([](std::string* b) { Put32(b, 8, 0); }), 0, "version 0");
  // Record fields: the first record starts at the header's end.
  ExpectRefused(resealed([](std::string* b) { Put32(b, kLunPageHeader, 0); }), 0, "record 0: LUN id 0");
  ExpectRefused(resealed([](std::string* b) { Put32(b, kLunPageHeader, UINT32_MAX); }), 0,
                "record 0: LUN id 4294967295 leaves no next LUN id");
  ExpectRefused(resealed([](std::string* b) { Put32(b, kLunPageHeader, 5); }), 0, "out of id order");
  ExpectRefused(resealed([](std::string* b) { Put32(b, kLunPageHeader + 4, 1024); }), 0,
                "block size 1024");
  ExpectRefused(resealed([](std::string* b) { Put64(b, kLunPageHeader + 8, 1000); }), 0,
                "multiple of the block size");
  ExpectRefused(resealed([](std::string* b) { (*b)[kLunPageHeader + 36] = '/'; }), 0, "LUN name");
  ExpectRefused(resealed([](std::string* b) { Put64(b, kLunPageHeader + 8, ((uint64_t{1} << 48) + 1) * 512); }),
                0, "at most 2^48 blocks");
  // An attribute this build does not know: the one record "a" has an empty
  // attribute list at 37 bytes in (id, bs, size, uuid, name 4 + 1).
  {
    std::string b = OnePage({Lun(1, "a")});
    std::string attrs;
    Encoder e(&attrs);
    e.U32(8);    // the list's length: one entry
    e.U32(200);  // a tag a later build may write
    e.U32(0);    // of no bytes
    b.replace(kLunPageHeader + 37, attrs.size(), attrs);
    ResealCrc(&b, kLunPageCrcOffset);
    ExpectRefused(b, 0, "has attribute 200", Code::kUnsupported);
  }
}

TEST(LunTablePage, LaterPagesCarryNoTableFields) {
  LunTablePage pg = PageOf(1, 0, {Lun(3, "c")});
  std::string img = Encoded(pg);
  LunTablePage out;
  ASSERT_TRUE(DecodeLunTablePage(img.data(), img.size(), 1, Expect(), &out).ok());
  Put32(&img, 60, 1);
  ResealCrc(&img, kLunPageCrcOffset);
  ExpectRefused(img, 1, "page-0 fields on a later page");
  pg.total_luns = 1;
  EXPECT_EQ(EncodeLunTablePage(pg, &img).code(), Code::kInvalidArgument);
}

TEST(LunTablePage, EverySingleBitFlipIsRefused) {
  const std::string good = OnePage(ManyLuns(20));
  for (size_t bit = 0; bit < good.size() * 8; bit++) {
    std::string b = good;
    b[bit / 8] = static_cast<char>(b[bit / 8] ^ (1 << (bit % 8)));
    LunTablePage out;
    ASSERT_FALSE(DecodeLunTablePage(b.data(), b.size(), 0, Expect(), &out).ok()) << "bit " << bit;
  }
}

// A buggy writer or a misdirected write passes the CRC: random changes,
// resealed, must never crash the decoder, and whatever it accepts must be
// the one spelling the encoder gives (no byte ignored, no value with two).
TEST(LunTablePage, ResealedRandomDamageIsRefusedOrReadExactly) {
  const std::string good = OnePage(ManyLuns(20));
  std::mt19937_64 rng(5);
  int accepted = 0;
  for (int i = 0; i < 20000; i++) {
    std::string b = good;
    const int changes = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < changes; k++) {
      // Mostly the header and the records, where a decoder could be fooled.
      const size_t at = rng() % 4 ? rng() % 1200 : rng() % b.size();
      b[at] = static_cast<char>(rng());
    }
    ResealCrc(&b, kLunPageCrcOffset);
    LunTablePage out;
    if (!DecodeLunTablePage(b.data(), b.size(), 0, Expect(), &out).ok()) continue;
    accepted++;
    std::string again;
    ASSERT_TRUE(EncodeLunTablePage(out, &again).ok()) << i;
    ASSERT_EQ(again, b) << i;
  }
  EXPECT_GT(accepted, 0);  // some changes (a uuid, a size) are legal values
}

TEST(LunTablePage, TheEncoderRefusesWhatTheDecoderWould) {
  LunTablePage pg;
  pg.pool = PoolId(1);
  pg.seq = kSeq;
  pg.next_lun_id = 10;
  std::string img = "unchanged";
  pg.luns = {Lun(2, "b"), Lun(1, "a")};
  EXPECT_EQ(EncodeLunTablePage(pg, &img).code(), Code::kInvalidArgument);
  pg.luns = {Lun(1, "../x")};
  EXPECT_EQ(EncodeLunTablePage(pg, &img).code(), Code::kInvalidArgument);
  pg.luns = ManyLuns(60);  // more than a page holds
  EXPECT_EQ(EncodeLunTablePage(pg, &img).code(), Code::kInvalidArgument);
  pg.luns = {};
  pg.seq = 0;
  EXPECT_EQ(EncodeLunTablePage(pg, &img).code(), Code::kInvalidArgument);
  EXPECT_EQ(img, "unchanged");
}

// Chain faults: pages that each decode but do not make one table.
class LunTableChain : public ::testing::Test {
 protected:
  void SetUp() override {
    luns_ = ManyLuns(150);
    ASSERT_TRUE(d_.Write(luns_, 151, &root_, &pages_).ok());
    ASSERT_GE(pages_.size(), 3u);
  }
  // Page i of the chain, changed by `f` and resealed.
  template <class F>
  void Edit(size_t i, F f) {
    std::string b = d_.Page(pages_[i]);
    f(&b);
    ResealCrc(&b, kLunPageCrcOffset);
    d_.Put(pages_[i], b);
  }
  void ExpectRefused(const std::string& words) {
    LunTable t;
    Status s = d_.Read(root_, &t);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_NE(s.ToString().find(words), std::string::npos) << s.ToString();
  }
  Disk d_;
  std::vector<LunRecord> luns_;
  uint64_t root_ = 0;
  std::vector<uint64_t> pages_;
};

TEST_F(LunTableChain, ALoopIsRefused) {
  Edit(1, [&](std::string* b) { Put64(b, 48, pages_[0]); });
  ExpectRefused("chain loops");
}

TEST_F(LunTableChain, AChainCutShortIsRefused) {
  Edit(pages_.size() - 2, [](std::string* b) { Put64(b, 48, 0); });
  ExpectRefused("LUNs where page 0 declares 150");
}

TEST_F(LunTableChain, APageOfAnotherPlaceIsRefused) {
  d_.Put(pages_[1], d_.Page(pages_[2]));  // a misdirected write
  ExpectRefused("says it is page 2");
}

TEST_F(LunTableChain, ADeclaredCountBelowTheRecordsIsRefused) {
  Edit(0, [&](std::string* b) { Put32(b, 60, 149); });
  ExpectRefused("more LUNs than page 0 declares");
  // An empty table is one page: one that goes on is damage.
  d_.Put(pages_[0], Encoded(PageOf(0, pages_[1], {}, 1)));
  ExpectRefused("chain longer than its LUNs");
}

TEST_F(LunTableChain, IdsAndNamesMustMakeOneTable) {
  Edit(0, [](std::string* b) { Put32(b, 56, 100); });  // next LUN id below the ids
  ExpectRefused("not below the next LUN id");
}

TEST_F(LunTableChain, AnEmptyPageInAChainIsRefused) {
  d_.Put(pages_[1], Encoded(PageOf(1, pages_[2], {})));
  ExpectRefused("no records");
}

// The writer packs records greedily: a page ends only where the next record
// does not fit on it. The same table split elsewhere is a second spelling.
TEST_F(LunTableChain, ARecordMovedToTheNextPageIsRefused) {
  const size_t i = pages_.size() - 2;  // the last page has room for one more
  const std::string pa = d_.Page(pages_[i]), pb = d_.Page(pages_[i + 1]);
  LunTablePage a, b;
  ASSERT_TRUE(DecodeLunTablePage(pa.data(), pa.size(), static_cast<uint32_t>(i), Expect(), &a).ok());
  ASSERT_TRUE(DecodeLunTablePage(pb.data(), pb.size(), static_cast<uint32_t>(i + 1), Expect(), &b).ok());
  b.luns.insert(b.luns.begin(), a.luns.back());
  a.luns.pop_back();
  d_.Put(pages_[i], Encoded(a));
  d_.Put(pages_[i + 1], Encoded(b));
  ExpectRefused("page " + std::to_string(i) + ": ends with room for LUN " + std::to_string(b.luns[0].id));
}

// [1] -> [2] where the writer writes [1 2]: two pages of one record each.
TEST(LunTableRead, TwoRecordsThatFitOnePageSplitOverTwoAreRefused) {
  Disk d;
  const uint64_t a0 = kMin, a1 = kMin + kLunPageBytes;
  LunTablePage p0 = PageOf(0, a1, {Lun(1, "a")}, 3);
  p0.total_luns = 2;
  d.Put(a0, Encoded(p0));
  d.Put(a1, Encoded(PageOf(1, 0, {Lun(2, "b")})));
  LunTable t;
  Status s = d.Read(a0, &t);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.ToString().find("page 0: ends with room for LUN 2"), std::string::npos) << s.ToString();
  // What the writer writes for that table: one page, read back.
  uint64_t root = 0;
  std::vector<uint64_t> written;
  ASSERT_TRUE(d.Write({Lun(1, "a"), Lun(2, "b")}, 3, &root, &written).ok());
  EXPECT_EQ(written.size(), 1u);
  ASSERT_TRUE(d.Read(root, &t).ok());
  EXPECT_EQ(t.luns.size(), 2u);
}

// Page 1's first record given the id, then the name, of a LUN on page 0.
TEST_F(LunTableChain, AnIdOrNameRepeatedAcrossPagesIsRefused) {
  std::string p0 = d_.Page(pages_[0]);
  LunTablePage first;
  ASSERT_TRUE(DecodeLunTablePage(p0.data(), p0.size(), 0, Expect(), &first).ok());
  const std::string p1 = d_.Page(pages_[1]);
  LunTablePage second;
  ASSERT_TRUE(DecodeLunTablePage(p1.data(), p1.size(), 1, Expect(), &second).ok());
  Edit(1, [&](std::string* b) { Put32(b, kLunPageHeader, first.luns.back().id); });
  ExpectRefused("out of id order");
  d_.Put(pages_[1], p1);
  // A name of page 0 as long as page 1's first (names of ids 10-99 are).
  const std::string& twin = first.luns[9].name;
  ASSERT_EQ(twin.size(), second.luns[0].name.size());
  Edit(1, [&](std::string* b) { b->replace(kLunPageHeader + 36, twin.size(), twin); });
  ExpectRefused("LUN name " + twin + " twice");
}

TEST(LunTablePageWrite, RefusesATableThatCouldNotBeRead) {
  Disk d;
  uint64_t root = 0;
  std::vector<uint64_t> written;
  EXPECT_EQ(d.Write({Lun(1, "a"), Lun(2, "a")}, 3, &root, &written).code(), Code::kInvalidArgument);
  EXPECT_EQ(d.Write({Lun(1, "a"), Lun(5, "b")}, 5, &root, &written).code(), Code::kInvalidArgument);
  // Out of id order (the reader would refuse the table).
  auto luns = ManyLuns(150);
  std::swap(luns.front(), luns.back());
  EXPECT_EQ(d.Write(luns, 151, &root, &written).code(), Code::kInvalidArgument);
  EXPECT_TRUE(written.empty());
  // The allocator fails at the third page: the two addresses it gave are
  // reported for the caller to give back, and no page was written.
  d.fail_after_ = 2;
  EXPECT_EQ(d.Write(ManyLuns(150), 151, &root, &written).code(), Code::kNoSpace);
  EXPECT_EQ(written, (std::vector<uint64_t>{kMin, kMin + kLunPageBytes}));
  for (uint64_t a : written) EXPECT_EQ(d.Page(a), std::string(kLunPageBytes, '\0'));
}

}  // namespace
}  // namespace cowstore::store
