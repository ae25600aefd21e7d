// SPDX-License-Identifier: Apache-2.0
// Snapshots and rollback through the control socket, as cowctl does them
// while the handler serves the pool: lun-snapshot records the attributes
// every `lun` record then carries, and lun-rollback of a LUN the handler
// serves goes to its LogicalUnit, which drains it, swaps and queues the unit
// attentions the initiators must see.
#include <vector>

#include "handler/control/client.h"
#include "handler/control/messages.h"
#include "handler/scsi/logical_unit.h"
#include "handler/scsi/lun_directory.h"
#include "tests/control/served_pool.h"

namespace cowstore::control_test {
namespace {

std::vector<uint8_t> Fill(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

TEST_F(ServedPool, SnapshotAndOnlineRollbackThroughTheSocket) {
  scsi::LunDirectory directory;
  std::shared_ptr<scsi::LogicalUnit> lu;  // the LUN "tcmu-runner" serves
  rollback = [&](const std::string& lun, const std::string& snap) {
    if (lu && lu->lun().name() == lun) return lu->Rollback(snap);
    return pool->RollbackLun(lun, snap);
  };
  Serve();
  ASSERT_TRUE(pool->CreateLun("vm1", 4 << 20, 512).ok());
  auto opened = pool->OpenLun("vm1");
  ASSERT_TRUE(opened.ok());
  scsi::LunConfig config;
  config.unit_serial = "0d0d0d0d-0000-4000-8000-000000000001";
  lu = scsi::LogicalUnit::Create(config, opened.value(), &directory).value();
  ASSERT_TRUE(opened.value()->Write(0, 8, Fill(4096, 0x11).data(), store::Durability::kDurable).ok());

  auto c = control::Client::Connect(sock);
  ASSERT_TRUE(c.ok());
  auto r = c.value()->Call(control::Record("lun-snapshot").Set("src", "vm1").Set("dst", "vm1.snap1"));
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->ok()) << r->status().ToString();
  store::LunInfo snap = control::DecodeFirstLun(r->records);
  EXPECT_EQ(snap.name, "vm1.snap1");
  EXPECT_TRUE(snap.read_only);
  EXPECT_EQ(snap.origin, pool->GetLun("vm1")->id);
  EXPECT_GT(snap.created_unix, 0u);
  // space lists the attributes too.
  auto sp = c.value()->Call(control::Record("space"));
  ASSERT_TRUE(sp.ok());
  store::SpaceInfo space = control::DecodeSpace(sp->records);
  ASSERT_EQ(space.luns.size(), 2u);
  EXPECT_FALSE(space.luns[0].read_only);
  EXPECT_TRUE(space.luns[1].read_only);
  EXPECT_EQ(space.luns[1].created_unix, snap.created_unix);

  // New data, then roll back online.
  ASSERT_TRUE(lu->lun().Write(0, 8, Fill(4096, 0x22).data(), store::Durability::kDurable).ok());
  const store::Uuid id = lu->lun().id();
  auto rb = c.value()->Call(control::Record("lun-rollback").Set("name", "vm1").Set("snapshot", "vm1.snap1"));
  ASSERT_TRUE(rb.ok());
  ASSERT_TRUE(rb->ok()) << rb->status().ToString();
  EXPECT_EQ(control::DecodeFirstLun(rb->records).id, id);  // same identity
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  scsi::CommandResult ua = lu->Execute(tur, {});
  ASSERT_EQ(ua.status, scsi::ScsiStatus::kCheckCondition);
  EXPECT_EQ(ua.sense_key(), scsi::SenseKey::kUnitAttention);
  EXPECT_EQ(ua.additional_sense(), scsi::asc::kMediumMayHaveChanged);
  EXPECT_TRUE(lu->Execute(tur, {}).good());
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(lu->lun().Read(0, 8, back.data()).ok());
  EXPECT_EQ(back, Fill(4096, 0x11));

  // Errors come back with their codes; the snapshot refuses to be rolled back.
  auto bad = c.value()->Call(control::Record("lun-rollback").Set("name", "vm1.snap1").Set("snapshot", "vm1"));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status().code(), store::Code::kReadOnly);
  bad = c.value()->Call(control::Record("lun-rollback").Set("name", "vm1"));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status().code(), store::Code::kInvalidArgument);
  EXPECT_TRUE(lu->Execute(tur, {}).good());  // nothing queued by the failures

  // A LUN the handler does not serve is rolled back in the pool directly.
  ASSERT_TRUE(pool->CreateLun("vm2", 1 << 20, 512).ok());
  ASSERT_TRUE(c.value()->Call(control::Record("lun-snapshot").Set("src", "vm2").Set("dst", "vm2.snap1"))->ok());
  EXPECT_TRUE(c.value()->Call(control::Record("lun-rollback").Set("name", "vm2").Set("snapshot", "vm2.snap1"))->ok());
  lu.reset();
}

}  // namespace
}  // namespace cowstore::control_test
