// SPDX-License-Identifier: Apache-2.0
// Every reply's fields round-trip through handler/control/messages.h and
// the line format (the server encodes, cowctl decodes: one definition).
#include "handler/control/messages.h"

#include <gtest/gtest.h>

namespace cowstore::control_test {
namespace {

using control::Record;

// Through the wire: formatted and parsed again.
Record Wire(const Record& r) {
  auto p = control::ParseRecord(control::FormatRecord(r));
  EXPECT_TRUE(p.has_value()) << control::FormatRecord(r);
  return p ? *p : Record();
}
std::vector<Record> Wire(const std::vector<Record>& rs) {
  std::vector<Record> out;
  for (const auto& r : rs) out.push_back(Wire(r));
  return out;
}

store::LunInfo SomeLun(const std::string& name) {
  store::LunInfo l;
  l.name = name;
  for (size_t i = 0; i < l.id.size(); ++i) l.id[i] = static_cast<uint8_t>(0xf0 + i);
  l.size_bytes = 1ull << 40;
  l.block_size = 4096;
  l.mapped_bytes = 3 << 20;
  l.exclusive_bytes = 2 << 20;
  l.shared_bytes = 1 << 20;
  return l;
}

void ExpectSameLun(const store::LunInfo& a, const store::LunInfo& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.size_bytes, b.size_bytes);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.mapped_bytes, b.mapped_bytes);
  EXPECT_EQ(a.exclusive_bytes, b.exclusive_bytes);
  EXPECT_EQ(a.shared_bytes, b.shared_bytes);
  EXPECT_EQ(a.read_only, b.read_only);
  EXPECT_EQ(a.origin, b.origin);
  EXPECT_EQ(a.created_unix, b.created_unix);
}

TEST(Messages, LunAndSpaceRoundTrip) {
  store::LunInfo l = SomeLun("vm 1");
  ExpectSameLun(control::DecodeLun(Wire(control::EncodeLun(l))), l);
  store::LunInfo snap = SomeLun("vm1.snap-1");
  snap.read_only = true;
  snap.origin = l.id;
  snap.created_unix = 1764600000;
  ExpectSameLun(control::DecodeLun(Wire(control::EncodeLun(snap))), snap);
  // Attributes go on the wire only when set (older clients see nothing new).
  EXPECT_EQ(control::EncodeLun(l).Has("read_only"), false);
  store::SpaceInfo s;
  s.pool_size_bytes = 1ull << 30;
  s.allocation_unit = 65536;
  s.unit_bytes = 4096;  // counts in grains (format 3, grain < AU)
  s.total_units = 16000;
  s.allocated_units = 12;
  s.metadata_units = 2;
  s.shared_units = 3;
  s.free_units = 15988;
  s.thinning_units = 40;  // freed, still being punched
  s.mapped_bytes = 7 << 20;
  s.saved_bytes = 1 << 20;
  s.soft_threshold_units = 12800;
  s.luns = {SomeLun("a"), SomeLun("b")};
  s.provisioned_bytes = 3ull << 30;
  s.backing_known = true;
  s.backing_grows = true;
  s.backing_size_bytes = 100ull << 30;
  s.backing_free_bytes = 79ull << 30;
  s.backing_short = true;
  store::SpaceInfo d = control::DecodeSpace(Wire(control::EncodeSpace("tank", s)));
  EXPECT_EQ(d.provisioned_bytes, s.provisioned_bytes);
  EXPECT_TRUE(d.backing_known);
  EXPECT_TRUE(d.backing_grows);
  EXPECT_EQ(d.backing_size_bytes, s.backing_size_bytes);
  EXPECT_EQ(d.backing_free_bytes, s.backing_free_bytes);
  EXPECT_TRUE(d.backing_short);
  // A handler whose Env cannot tell sends no backing figures; an older one
  // no provisioned size either (it is the LUNs' sizes).
  s.backing_known = false;
  s.provisioned_bytes = 0;
  store::SpaceInfo u = control::DecodeSpace(Wire(control::EncodeSpace("tank", s)));
  EXPECT_FALSE(u.backing_known);
  EXPECT_FALSE(u.backing_short);
  EXPECT_EQ(u.backing_free_bytes, 0u);
  EXPECT_EQ(u.provisioned_bytes, s.luns[0].size_bytes + s.luns[1].size_bytes);
  EXPECT_EQ(d.pool_size_bytes, s.pool_size_bytes);
  EXPECT_EQ(d.allocation_unit, s.allocation_unit);
  EXPECT_EQ(d.unit_bytes, s.unit_bytes);
  EXPECT_EQ(d.Bytes(d.free_units), s.free_units * 4096);
  // An older handler names no unit: its figures count AUs.
  store::SpaceInfo older = d;
  older.unit_bytes = 0;
  EXPECT_EQ(older.Bytes(older.free_units), s.free_units * 65536);
  EXPECT_EQ(d.total_units, s.total_units);
  EXPECT_EQ(d.allocated_units, s.allocated_units);
  EXPECT_EQ(d.metadata_units, s.metadata_units);
  EXPECT_EQ(d.shared_units, s.shared_units);
  EXPECT_EQ(d.free_units, s.free_units);
  EXPECT_EQ(d.thinning_units, s.thinning_units);
  EXPECT_EQ(d.mapped_bytes, s.mapped_bytes);
  EXPECT_EQ(d.saved_bytes, s.saved_bytes);
  EXPECT_EQ(d.soft_threshold_units, s.soft_threshold_units);
  ASSERT_EQ(d.luns.size(), 2u);
  ExpectSameLun(d.luns[1], s.luns[1]);
}

// A handler that predates a `pool` field (here: the reply of one from before
// thinning_units) is read without error, the missing figure as 0.
TEST(Messages, AnOlderHandlersSpaceReadsTheMissingFiguresAsZero) {
  auto p = control::ParseRecord(
      "pool name=tank size=1073741824 allocation_unit=65536 total_units=16000 allocated_units=12 metadata_units=2 "
      "shared_units=3 free_units=15988 mapped_bytes=7340032 saved_bytes=1048576 soft_threshold_units=12800 "
      "provisioned_bytes=3221225472");
  ASSERT_TRUE(p);
  store::SpaceInfo s = control::DecodeSpace({*p});
  EXPECT_EQ(s.free_units, 15988u);
  EXPECT_EQ(s.thinning_units, 0u);
  EXPECT_EQ(s.provisioned_bytes, 3221225472u);
  EXPECT_FALSE(s.backing_known);
}

TEST(Messages, ReportsAndCountersRoundTrip) {
  store::CheckReport c;
  c.clean = false;
  c.problems = {"leak at 5", "refcount of 7 is 2, maps say 1"};
  c.luns = 2;
  c.extents = 9;
  c.allocated_units = 11;
  c.leaked_units = 1;
  c.unit_bytes = 4096;
  Record head("ok");
  std::vector<Record> recs;
  control::EncodeCheck(c, &head, &recs);
  store::CheckReport dc = control::DecodeCheck(Wire(head), Wire(recs));
  EXPECT_EQ(dc.clean, c.clean);
  EXPECT_EQ(dc.problems, c.problems);
  EXPECT_EQ(dc.luns, 2u);
  EXPECT_EQ(dc.extents, 9u);
  EXPECT_EQ(dc.allocated_units, 11u);
  EXPECT_EQ(dc.leaked_units, 1u);
  EXPECT_EQ(dc.unit_bytes, 4096u);
  // From a handler older than unit_bytes: none sent, 0 (units unknown).
  Record old_head("ok");
  old_head.Set("clean", 1).Set("allocated_units", 11);
  EXPECT_EQ(control::DecodeCheck(Wire(old_head), {}).unit_bytes, 0u);

  control::ScrubReport s;
  s.luns = 3;
  s.mapped_bytes = 10;
  s.read_bytes = 8;
  s.unreadable = {{"vm1", 128, 128, "IOError: EIO at 4096"}};
  head = Record("ok");
  recs.clear();
  control::EncodeScrub(s, &head, &recs);
  EXPECT_EQ(head.Get("clean"), "0");
  control::ScrubReport ds = control::DecodeScrub(Wire(head), Wire(recs));
  EXPECT_EQ(ds.luns, 3u);
  EXPECT_EQ(ds.mapped_bytes, 10u);
  EXPECT_EQ(ds.read_bytes, 8u);
  ASSERT_EQ(ds.unreadable.size(), 1u);
  EXPECT_EQ(ds.unreadable[0].lun, "vm1");
  EXPECT_EQ(ds.unreadable[0].lba, 128u);
  EXPECT_EQ(ds.unreadable[0].count, 128u);
  EXPECT_EQ(ds.unreadable[0].error, "IOError: EIO at 4096");

  head = Record("ok");
  control::EncodeCopyStats({5, 6}, &head);
  control::CopyStats st = control::DecodeCopyStats(Wire(head));
  EXPECT_EQ(st.written, 5u);
  EXPECT_EQ(st.skipped, 6u);

  std::vector<control::LunCounters> counters{{"vm1", {{"commands", 10}, {"ats", 3}}}, {"vm2", {}}};
  auto dcnt = control::DecodeCounters(Wire(control::EncodeCounters(counters)));
  ASSERT_EQ(dcnt.size(), 2u);
  EXPECT_EQ(dcnt[0].lun, "vm1");
  EXPECT_EQ(dcnt[0].counters, counters[0].counters);
  EXPECT_EQ(dcnt[1].lun, "vm2");
  EXPECT_TRUE(dcnt[1].counters.empty());
}

// A reply from a broken or newer server never throws in cowctl: bad numbers
// read as 0, a bad id as all zeros, unknown records are skipped.
TEST(Messages, DecodingIsLenient) {
  auto r = control::ParseRecord("lun name=x id=zz00 size=abc block_size=4096 extra=1");
  ASSERT_TRUE(r);
  store::LunInfo l = control::DecodeLun(*r);
  EXPECT_EQ(l.name, "x");
  EXPECT_EQ(l.id, store::Uuid{});
  EXPECT_EQ(l.size_bytes, 0u);
  EXPECT_EQ(l.block_size, 4096u);
  auto bad = control::ParseRecord("lun name=y id=" + std::string(31, 'a') + "g");
  ASSERT_TRUE(bad);
  EXPECT_EQ(control::DecodeLun(*bad).id, store::Uuid{});
  store::SpaceInfo s = control::DecodeSpace({Record("future").Set("x", "1"), Record("lun").Set("name", "a")});
  ASSERT_EQ(s.luns.size(), 1u);
  EXPECT_EQ(s.luns[0].name, "a");
}

}  // namespace
}  // namespace cowstore::control_test
