// SPDX-License-Identifier: Apache-2.0
#include "tests/scsi/scsi_test_util.h"

#include <cstring>

#include "handler/scsi/cdb.h"

namespace cowstore::scsi::testing {

Bytes Cdb6(uint8_t op, uint32_t lba, uint8_t len, uint8_t byte1) {
  Bytes c(6, 0);
  c[0] = op;
  c[1] = static_cast<uint8_t>(byte1 | ((lba >> 16) & 0x1F));
  c[2] = static_cast<uint8_t>(lba >> 8);
  c[3] = static_cast<uint8_t>(lba);
  c[4] = len;
  return c;
}
Bytes Cdb10(uint8_t op, uint32_t lba, uint16_t len, uint8_t byte1) {
  Bytes c(10, 0);
  c[0] = op;
  c[1] = byte1;
  PutBe32(&c[2], lba);
  PutBe16(&c[7], len);
  return c;
}
Bytes Cdb12(uint8_t op, uint32_t lba, uint32_t len, uint8_t byte1) {
  Bytes c(12, 0);
  c[0] = op;
  c[1] = byte1;
  PutBe32(&c[2], lba);
  PutBe32(&c[6], len);
  return c;
}
Bytes Cdb16(uint8_t op, uint64_t lba, uint32_t len, uint8_t byte1) {
  Bytes c(16, 0);
  c[0] = op;
  c[1] = byte1;
  PutBe64(&c[2], lba);
  PutBe32(&c[10], len);
  return c;
}
Bytes CompareAndWriteCdb(uint64_t lba, uint8_t blocks, uint8_t byte1) {
  Bytes c(16, 0);
  c[0] = 0x89;
  c[1] = byte1;
  PutBe64(&c[2], lba);
  c[13] = blocks;
  return c;
}
Bytes UnmapCdb(uint16_t param_len) {
  Bytes c(10, 0);
  c[0] = 0x42;
  PutBe16(&c[7], param_len);
  return c;
}
Bytes UnmapParams(const std::vector<std::pair<uint64_t, uint32_t>>& ranges) {
  Bytes p(8 + 16 * ranges.size(), 0);
  PutBe16(&p[0], static_cast<uint16_t>(p.size() - 2));
  PutBe16(&p[2], static_cast<uint16_t>(16 * ranges.size()));
  for (size_t i = 0; i < ranges.size(); ++i) {
    PutBe64(&p[8 + 16 * i], ranges[i].first);
    PutBe32(&p[8 + 16 * i + 8], ranges[i].second);
  }
  return p;
}
Bytes GetLbaStatusCdb(uint64_t lba, uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x9E;
  c[1] = 0x12;
  PutBe64(&c[2], lba);
  PutBe32(&c[10], alloc);
  return c;
}
Bytes ReadCapacity16Cdb(uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x9E;
  c[1] = 0x10;
  PutBe32(&c[10], alloc);
  return c;
}
Bytes InquiryCdb(bool evpd, uint8_t page, uint16_t alloc) {
  Bytes c(6, 0);
  c[0] = 0x12;
  c[1] = evpd ? 1 : 0;
  c[2] = page;
  PutBe16(&c[3], alloc);
  return c;
}
Bytes XcopyCdb(uint32_t param_len) {
  Bytes c(16, 0);
  c[0] = 0x83;
  PutBe32(&c[10], param_len);
  return c;
}
Bytes ReceiveCopyResultsCdb(uint8_t sa, uint8_t list_id, uint32_t alloc) {
  Bytes c(16, 0);
  c[0] = 0x84;
  c[1] = sa;
  c[2] = list_id;
  PutBe32(&c[10], alloc);
  return c;
}

Bytes XcopyList::Build() const {
  Bytes p(16, 0);
  p[0] = list_id;
  p[1] = static_cast<uint8_t>(list_id_usage << 3);
  size_t cl = 0, sl = 0;
  for (const Bytes& c : cscds) cl += c.size();
  for (const Bytes& s : segments) sl += s.size();
  PutBe16(&p[2], static_cast<uint16_t>(cl));
  PutBe32(&p[8], static_cast<uint32_t>(sl));
  for (const Bytes& c : cscds) p.insert(p.end(), c.begin(), c.end());
  for (const Bytes& s : segments) p.insert(p.end(), s.begin(), s.end());
  return p;
}
Bytes IdentCscd(const Naa& naa, uint32_t block_length) {
  Bytes d(32, 0);
  d[0] = 0xE4;
  d[4] = 0x01;  // binary
  d[5] = 0x03;  // LU association, NAA
  d[7] = 16;
  std::memcpy(&d[8], naa.data(), 16);
  d[29] = static_cast<uint8_t>(block_length >> 16);
  d[30] = static_cast<uint8_t>(block_length >> 8);
  d[31] = static_cast<uint8_t>(block_length);
  return d;
}
Bytes BlockSegment(uint16_t src, uint16_t dst, uint16_t blocks, uint64_t src_lba, uint64_t dst_lba) {
  Bytes d(28, 0);
  d[0] = 0x02;
  PutBe16(&d[2], 0x18);
  PutBe16(&d[4], src);
  PutBe16(&d[6], dst);
  PutBe16(&d[10], blocks);
  PutBe64(&d[12], src_lba);
  PutBe64(&d[20], dst_lba);
  return d;
}

Bytes Pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    b[i] = static_cast<uint8_t>(x >> 16);
  }
  return b;
}

::testing::AssertionResult IsGood(const CommandResult& r) {
  if (r.good()) return ::testing::AssertionSuccess();
  char buf[96];
  std::snprintf(buf, sizeof(buf), "status 0x%02x sense key 0x%x asc 0x%02x/0x%02x",
                static_cast<unsigned>(r.status), static_cast<unsigned>(r.sense_key()),
                r.additional_sense().asc, r.additional_sense().ascq);
  return ::testing::AssertionFailure() << buf;
}

::testing::AssertionResult HasSense(const CommandResult& r, SenseKey key, Asc code) {
  if (r.status == ScsiStatus::kCheckCondition && r.sense_length == 18 && r.sense_key() == key &&
      r.additional_sense() == code) {
    return ::testing::AssertionSuccess();
  }
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "got status 0x%02x key 0x%x asc 0x%02x/0x%02x, want key 0x%x asc 0x%02x/0x%02x",
                static_cast<unsigned>(r.status), static_cast<unsigned>(r.sense_key()),
                r.additional_sense().asc, r.additional_sense().ascq, static_cast<unsigned>(key),
                code.asc, code.ascq);
  return ::testing::AssertionFailure() << buf;
}

::testing::AssertionResult HasFieldPointer(const CommandResult& r, bool in_cdb, uint16_t byte,
                                           int bit) {
  const bool sksv = r.sense[15] & 0x80;
  const bool cd = r.sense[15] & 0x40;
  const bool bpv = r.sense[15] & 0x08;
  const uint16_t ptr = Be16(&r.sense[16]);
  bool ok = sksv && cd == in_cdb && ptr == byte;
  if (bit >= 0) ok = ok && bpv && (r.sense[15] & 0x07) == bit;
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "sksv=" << sksv << " cd=" << cd << " byte=" << ptr << " bpv=" << bpv
         << " bit=" << (r.sense[15] & 0x07) << ", want cd=" << in_cdb << " byte=" << byte
         << " bit=" << bit;
}

void ScsiTest::SetUp() {
  store::PoolOptions opts;
  opts.size_bytes = 96ull << 20;  // the in-memory Env holds the whole image
  opts.allocation_unit = 1u << 20;
  auto pool = store::Pool::Create(&env_, "/pool0", opts);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  pool_ = std::move(pool.value());
  lu_ = AddLu(*pool_, "lun0", kLunBytes, Config("5f3b0c2a-41d2-4e8b-9a1c-000000000001"));
  ASSERT_NE(lu_, nullptr);
}

void ScsiTest::TearDown() {
  extra_.clear();
  lu_.reset();
  if (pool_) {
    EXPECT_TRUE(pool_->Close().ok());
    pool_.reset();
  }
}

LunConfig ScsiTest::Config(const std::string& serial, const std::string& group) const {
  LunConfig c;
  c.unit_serial = serial;
  c.copy_group = group;
  return c;
}

std::shared_ptr<LogicalUnit> ScsiTest::AddLu(store::Pool& pool, const std::string& name,
                                             uint64_t bytes, LunConfig config, uint32_t block) {
  auto info = pool.CreateLun(name, bytes, block);
  EXPECT_TRUE(info.ok()) << info.status().message();
  auto lun = pool.OpenLun(name);
  EXPECT_TRUE(lun.ok()) << lun.status().message();
  if (!lun.ok()) return nullptr;
  auto lu = LogicalUnit::Create(std::move(config), lun.value(), &directory_);
  EXPECT_TRUE(lu.ok());
  if (!lu.ok()) return nullptr;
  extra_.push_back(lu.value());
  return lu.value();
}

CommandResult ScsiTest::Exec(LogicalUnit& lu, const Bytes& cdb, const Bytes& data_out) {
  Bytes copy = data_out;
  iovec v{copy.data(), copy.size()};
  std::span<const iovec> iov;
  if (!copy.empty()) iov = std::span<const iovec>(&v, 1);
  return lu.Execute(cdb, iov);
}

CommandResult ScsiTest::ExecIn(LogicalUnit& lu, const Bytes& cdb, size_t len, Bytes* out) {
  out->assign(len, 0xEE);
  iovec v{out->data(), out->size()};
  CommandResult r = lu.Execute(cdb, std::span<const iovec>(&v, len ? 1 : 0));
  out->resize(r.data_in_length);
  return r;
}

CommandResult ScsiTest::Write(LogicalUnit& lu, uint64_t lba, const Bytes& data) {
  return Exec(lu, Cdb16(0x8A, lba, static_cast<uint32_t>(data.size() / lu.lun().block_size())), data);
}

Bytes ScsiTest::Read(LogicalUnit& lu, uint64_t lba, uint32_t blocks) {
  Bytes out;
  CommandResult r = ExecIn(lu, Cdb16(0x88, lba, blocks), size_t{blocks} * lu.lun().block_size(), &out);
  EXPECT_TRUE(IsGood(r));
  return out;
}

}  // namespace cowstore::scsi::testing
