// SPDX-License-Identifier: Apache-2.0
// Read-only LUs (store snapshots) and online rollback as initiators see them:
// every write-class command answers DATA PROTECT / WRITE PROTECTED and
// changes nothing, MODE SENSE reports WP, and a rollback drains the LU and
// queues MEDIUM MAY HAVE CHANGED (and CAPACITY DATA HAS CHANGED when the
// size differs) for the commands that follow it.
#include <atomic>
#include <thread>
#include <vector>

#include "tests/scsi/scsi_test_util.h"

namespace cowstore::scsi::testing {
namespace {

class SnapshotTest : public ScsiTest {
 protected:
  // A read-only snapshot of lun0, served as its own LU in copy group "g".
  std::shared_ptr<LogicalUnit> OpenSnapshot(const std::string& name, const std::string& serial,
                                            const std::string& group = "") {
    auto info = pool_->SnapshotLun("lun0", name);
    EXPECT_TRUE(info.ok()) << info.status().message();
    auto lun = pool_->OpenLun(name);
    EXPECT_TRUE(lun.ok());
    auto lu = LogicalUnit::Create(Config(serial, group), lun.value(), &directory_);
    EXPECT_TRUE(lu.ok());
    extra_.push_back(lu.value());
    return lu.value();
  }
  CommandResult Xcopy(LogicalUnit& lu, const XcopyList& l) {
    Bytes p = l.Build();
    return Exec(lu, cdb::ExtendedCopy(static_cast<uint32_t>(p.size())), p);
  }
};

TEST_F(SnapshotTest, ReadOnlyLuRefusesEveryWriteClassCommand) {
  Bytes data = Pattern(16 * kBlock, 3);
  ASSERT_TRUE(IsGood(Write(0, data)));
  auto snap = OpenSnapshot("s", "a1a1a1a1-41d2-4e8b-9a1c-0000000000a1");
  ASSERT_TRUE(snap->read_only());
  ASSERT_FALSE(lu_->read_only());
  const Expect wp{SenseKey::kDataProtect, asc::kWriteProtected};
  Bytes blk(kBlock, 0x5A), two(2 * kBlock, 0);
  std::vector<std::pair<Bytes, Bytes>> writes = {
      {Cdb6(0x0A, 0, 1), blk},
      {Cdb10(0x2A, 0, 1), blk},
      {Cdb12(0xAA, 0, 1), blk},
      {Cdb16(0x8A, 0, 1), blk},
      {Cdb10(0x2E, 0, 1), blk},            // WRITE AND VERIFY(10)
      {Cdb16(0x8E, 0, 1), blk},            // WRITE AND VERIFY(16)
      {Cdb10(0x41, 0, 8), blk},            // WRITE SAME(10)
      {Cdb16(0x93, 0, 8, 0x08), blk},      // WRITE SAME(16) UNMAP=1
      {cdb::Unmap(24), UnmapParams({{0, 2048}})},
      {cdb::CompareAndWrite(0, 1), two},
  };
  for (const auto& [cdb, out] : writes) {
    CommandResult r = Exec(*snap, cdb, out);
    EXPECT_TRUE(HasSense(r, wp.key, wp.asc)) << "opcode " << int(cdb[0]);
  }
  // XCOPY into the snapshot is refused before anything moves; out of it works.
  auto a = AddLu(*pool_, "a", 8 << 20, Config("aaaa1111-0000-0000-0000-000000000001", "g"));
  auto snap_g = OpenSnapshot("sg", "a2a2a2a2-41d2-4e8b-9a1c-0000000000a2", "g");
  XcopyList in;
  in.cscds = {IdentCscd(a->naa()), IdentCscd(snap_g->naa())};
  in.segments = {BlockSegment(0, 1, 16, 0, 0)};
  EXPECT_TRUE(HasSense(Xcopy(*a, in), wp.key, wp.asc));
  XcopyList inside;  // to itself
  inside.cscds = {IdentCscd(snap_g->naa())};
  inside.segments = {BlockSegment(0, 0, 8, 0, 64)};
  EXPECT_TRUE(HasSense(Xcopy(*snap_g, inside), wp.key, wp.asc));
  XcopyList out;
  out.cscds = {IdentCscd(snap_g->naa()), IdentCscd(a->naa())};
  out.segments = {BlockSegment(0, 1, 16, 0, 0)};
  EXPECT_TRUE(IsGood(Xcopy(*a, out)));
  EXPECT_EQ(Read(*a, 0, 16), data);
  // Nothing changed; reads and the rest work.
  EXPECT_EQ(Read(*snap, 0, 16), data);
  EXPECT_EQ(Read(*snap_g, 0, 16), data);
  EXPECT_TRUE(IsGood(Exec(*snap, Cdb10(0x35, 0, 0))));  // SYNCHRONIZE CACHE
  EXPECT_TRUE(IsGood(Exec(*snap, Cdb10(0x2F, 0, 1))));  // VERIFY(10), BYTCHK=0
  EXPECT_TRUE(IsGood(Write(0, blk)));                   // the origin stays writable
}

TEST_F(SnapshotTest, ModeSenseReportsWriteProtect) {
  auto snap = OpenSnapshot("s", "a1a1a1a1-41d2-4e8b-9a1c-0000000000a1");
  Bytes d;
  ASSERT_TRUE(IsGood(ExecIn(*snap, Cdb6(0x1A, 0x3F00, 0xFF), 255, &d)));  // MODE SENSE(6), all pages
  EXPECT_EQ(d[2], 0x90);  // WP | DPOFUA
  ASSERT_TRUE(IsGood(ExecIn(*lu_, Cdb6(0x1A, 0x3F00, 0xFF), 255, &d)));
  EXPECT_EQ(d[2], 0x10);
  Bytes ten = {0x5A, 0, 0x3F, 0, 0, 0, 0, 0x01, 0x00, 0};
  ASSERT_TRUE(IsGood(ExecIn(*snap, ten, 256, &d)));
  EXPECT_EQ(d[3], 0x90);
}

TEST_F(SnapshotTest, RollbackQueuesMediumChangedAndCapacityChanged) {
  Bytes before = Pattern(8 * kBlock, 1), after = Pattern(8 * kBlock, 2);
  ASSERT_TRUE(IsGood(Write(0, before)));
  ASSERT_TRUE(pool_->SnapshotLun("lun0", "s").ok());
  ASSERT_TRUE(IsGood(Write(0, after)));

  // Same size: MEDIUM MAY HAVE CHANGED only, to the next command.
  ASSERT_TRUE(lu_->Rollback("s").ok());
  Bytes d;
  EXPECT_TRUE(IsGood(ExecIn(cdb::Inquiry(false, 0, 96), 96, &d)));  // INQUIRY carries no UA
  EXPECT_TRUE(HasSense(Exec(Cdb6(0x00, 0, 0)), SenseKey::kUnitAttention, asc::kMediumMayHaveChanged));
  EXPECT_TRUE(IsGood(Exec(Cdb6(0x00, 0, 0))));
  EXPECT_EQ(Read(0, 8), before);

  // A different size: both, and READ CAPACITY tells the snapshot's size.
  ASSERT_TRUE(lu_->Resize(kLunBytes * 2).ok());
  ASSERT_TRUE(HasSense(Exec(Cdb6(0x00, 0, 0)), SenseKey::kUnitAttention, asc::kCapacityDataHasChanged));
  ASSERT_TRUE(IsGood(Write(0, after)));
  ASSERT_TRUE(lu_->Rollback("s").ok());
  EXPECT_TRUE(HasSense(Exec(Cdb6(0x00, 0, 0)), SenseKey::kUnitAttention, asc::kMediumMayHaveChanged));
  EXPECT_TRUE(HasSense(Exec(Cdb6(0x00, 0, 0)), SenseKey::kUnitAttention, asc::kCapacityDataHasChanged));
  EXPECT_TRUE(IsGood(Exec(Cdb6(0x00, 0, 0))));
  ASSERT_TRUE(IsGood(ExecIn(cdb::ReadCapacity16(), 32, &d)));
  EXPECT_EQ(uint64_t{d[4]} << 24 | uint64_t{d[5]} << 16 | uint64_t{d[6]} << 8 | d[7],
            kLunBytes / kBlock - 1);
  EXPECT_EQ(Read(0, 8), before);

  // A refused rollback changes nothing and queues nothing.
  EXPECT_EQ(lu_->Rollback("nope").code(), store::Code::kNotFound);
  EXPECT_TRUE(IsGood(Exec(Cdb6(0x00, 0, 0))));
  auto snap = OpenSnapshot("s2", "a3a3a3a3-41d2-4e8b-9a1c-0000000000a3");
  EXPECT_EQ(snap->Rollback("s").code(), store::Code::kReadOnly);
  EXPECT_TRUE(IsGood(Exec(*snap, Cdb6(0x00, 0, 0))));
}

// Two initiators (I_T nexuses) read the LU while it is rolled back. TCMU
// tells the handler no nexus, so the LU queues one unit attention for the
// LU: exactly one command, from either initiator, reports it
// (docs/design/scsi.md, "Rollback"). What both must never see is old data
// after the change: each initiator's reads go from the new contents to the
// old ones exactly once, and nothing is read half way.
TEST_F(SnapshotTest, RollbackUnderTwoInitiatorsDrainsAndReportsTheChangeOnce) {
  Bytes old_data = Pattern(64 * kBlock, 7), new_data = Pattern(64 * kBlock, 8);
  ASSERT_TRUE(IsGood(Write(0, old_data)));
  ASSERT_TRUE(pool_->SnapshotLun("lun0", "s").ok());
  ASSERT_TRUE(IsGood(Write(0, new_data)));

  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  struct Seen {
    int medium_changed = 0, news_after_old = 0, torn = 0, olds = 0, other = 0;
  };
  std::vector<Seen> seen(2);
  auto initiator = [&](Seen* s) {
    bool saw_old = false;
    started++;
    while (!stop || !saw_old) {
      Bytes d;
      CommandResult r = ExecIn(Cdb10(0x28, 0, 64), 64 * kBlock, &d);
      if (!r.good()) {
        if (HasSense(r, SenseKey::kUnitAttention, asc::kMediumMayHaveChanged)) s->medium_changed++;
        else s->other++;
        continue;
      }
      if (d == old_data) {
        saw_old = true;
        s->olds++;
      } else if (d == new_data) {
        if (saw_old) s->news_after_old++;
      } else {
        s->torn++;
      }
    }
  };
  std::thread a(initiator, &seen[0]), b(initiator, &seen[1]);
  while (started < 2) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(lu_->Rollback("s").ok());
  stop = true;
  a.join();
  b.join();
  EXPECT_EQ(seen[0].medium_changed + seen[1].medium_changed, 1);
  for (const Seen& s : seen) {
    EXPECT_EQ(s.news_after_old, 0);
    EXPECT_EQ(s.torn, 0);
    EXPECT_EQ(s.other, 0);
    EXPECT_GT(s.olds, 0);
  }
}

}  // namespace
}  // namespace cowstore::scsi::testing
