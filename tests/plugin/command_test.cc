// SPDX-License-Identifier: Apache-2.0
// Every implemented command, and the adapter's error paths, through the
// built .so: CDB and buffers in through handle_cmd, status and sense out as
// libtcmu would send them to the kernel. The SCSI layer's own tests cover
// each command's semantics in depth; these pin down that the adapter passes
// everything through intact (CDB length, data-in/out, sense, status).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/plugin/plugin_test_util.h"

namespace cowstore::plugin_test {
namespace {

bool ValidScsiStatus(uint8_t s) { return s == 0x00 || s == 0x02 || s == 0x08 || s == 0x28; }

class CommandTest : public PluginTest {
 protected:
  void SetUp() override {
    PluginTest::SetUp();
    MakePool("tank");
    dev_ = OpenDevice("cowstore/tank/vm1", kSize);
    // Nothing pending: the first command sees no unit attention.
    ASSERT_EQ(Run(dev_, Tur()).scsi_status, 0);
  }
  void ExpectGood(const Bytes& cdb, Bytes* data = nullptr) {
    fake::Outcome o = Run(dev_, cdb, data);
    EXPECT_EQ(o.tcmu_status, tcmu::kStsOk) << "opcode " << std::hex << int(cdb[0]);
    EXPECT_EQ(o.scsi_status, 0) << "opcode " << std::hex << int(cdb[0]) << " sense "
                                << int(o.sense_key()) << "/" << int(o.asc()) << "/"
                                << int(o.ascq());
  }
  void ExpectCheck(const Bytes& cdb, Bytes* data, uint8_t key, uint8_t asc, uint8_t ascq) {
    fake::Outcome o = Run(dev_, cdb, data);
    EXPECT_EQ(o.tcmu_status, tcmu::kStsPassthroughErr);
    EXPECT_EQ(o.scsi_status, 0x02);
    EXPECT_EQ(o.sense[0] & 0x7f, 0x70);  // fixed format, current
    EXPECT_EQ(o.sense_key(), key);
    EXPECT_EQ(o.asc(), asc);
    EXPECT_EQ(o.ascq(), ascq);
    // The sense buffer the kernel copies is ours, not left-overs.
    for (size_t i = 18; i < o.sense.size(); ++i) ASSERT_EQ(o.sense[i], 0) << i;
  }
  static constexpr uint64_t kSize = 64ull << 20;
  static constexpr uint64_t kBlocks = kSize / 512;
  tcmu_device* dev_ = nullptr;
};

TEST_F(CommandTest, TestUnitReady) { ExpectGood(Tur()); }

TEST_F(CommandTest, InquiryStandardDataWithThirdPartyCopy) {
  fake::Outcome o;
  Bytes b = RunIn(dev_, Inquiry(false, 0, 96), 96, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ(b[0] & 0x1f, 0);      // direct access block device
  EXPECT_NE(b[5] & 0x08, 0);      // 3PC
}

TEST_F(CommandTest, InquiryVpdPages) {
  for (uint8_t page : {0x00, 0x80, 0x83, 0x8f, 0xb0, 0xb1, 0xb2}) {
    fake::Outcome o;
    Bytes b = RunIn(dev_, Inquiry(true, page, 512), 512, &o);
    EXPECT_EQ(o.scsi_status, 0) << std::hex << int(page);
    EXPECT_EQ(b[1], page);
  }
}

TEST_F(CommandTest, DataInTailBeyondWhatTheCommandFilledIsZeroed) {
  // The kernel returns the whole buffer (1.5.4 reports no residual): bytes
  // the command did not fill must not leak earlier ring contents.
  Bytes buf(4096, 0xAA);
  fake::Outcome o = Run(dev_, Inquiry(false, 0, 4096), &buf);
  ASSERT_EQ(o.scsi_status, 0);
  const size_t filled = 5 + buf[4];
  ASSERT_LT(filled, buf.size());
  for (size_t i = filled; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0) << i;
}

TEST_F(CommandTest, DataInSpreadOverManyIovecs) {
  Bytes out(8 * 512);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  ASSERT_EQ(Run(dev_, Write10(100, 8), &out).scsi_status, 0);
  Bytes in(8 * 512, 0);
  std::vector<iovec> iov;
  for (size_t off = 0; off < in.size(); off += 384) {
    iov.push_back({&in[off], std::min<size_t>(384, in.size() - off)});
  }
  fake::Outcome o = runner().ExecuteIov(dev_, Read10(100, 8), iov.data(), iov.size());
  EXPECT_EQ(o.scsi_status, 0);
  EXPECT_EQ(in, out);
}

TEST_F(CommandTest, RequestSense) {
  fake::Outcome o;
  Bytes b = RunIn(dev_, RequestSense(18), 18, &o);
  EXPECT_EQ(o.scsi_status, 0);
  EXPECT_EQ(b[0] & 0x7f, 0x70);
}

TEST_F(CommandTest, ReadCapacity10And16) {
  fake::Outcome o;
  Bytes b = RunIn(dev_, ReadCapacity10(), 8, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ((uint32_t{b[0]} << 24 | b[1] << 16 | b[2] << 8 | b[3]), kBlocks - 1);
  b = RunIn(dev_, ReadCapacity16(32), 32, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ((uint32_t{b[8]} << 24 | b[9] << 16 | b[10] << 8 | b[11]), 512u);
  EXPECT_NE(b[14] & 0x80, 0);  // LBPME
  EXPECT_NE(b[14] & 0x40, 0);  // LBPRZ
}

TEST_F(CommandTest, ReadWriteAllSizesRoundTrip) {
  Bytes data(512);
  uint8_t fill = 1;
  for (auto [w, r] : {std::pair{Write6(10, 1), Read6(10, 1)},
                      std::pair{Write10(11, 1), Read10(11, 1)},
                      std::pair{Write12(12, 1), Read12(12, 1)},
                      std::pair{Write16(13, 1), Read16(13, 1)}}) {
    std::fill(data.begin(), data.end(), fill++);
    ExpectGood(w, &data);
    fake::Outcome o;
    EXPECT_EQ(RunIn(dev_, r, 512, &o), data);
    EXPECT_EQ(o.scsi_status, 0);
  }
}

TEST_F(CommandTest, WriteWithFuaAndDpo) {
  Bytes data(512, 0x42);
  ExpectGood(Write16(20, 1, 0x18), &data);
}

TEST_F(CommandTest, ProtectionInformationIsRejected) {
  Bytes data(512, 1);
  ExpectCheck(Write16(20, 1, 0x20), &data, 0x5, 0x24, 0x00);  // WRPROTECT=001b
  Bytes in(512);
  ExpectCheck(Read16(20, 1, 0x20), &in, 0x5, 0x24, 0x00);
}

TEST_F(CommandTest, LbaOutOfRange) {
  Bytes in(512);
  ExpectCheck(Read16(kBlocks, 1), &in, 0x5, 0x21, 0x00);
  Bytes out(1024);
  ExpectCheck(Write16(kBlocks - 1, 2), &out, 0x5, 0x21, 0x00);
}

TEST_F(CommandTest, MaxTransferLengthFollowsHwMaxSectors) {
  auto dev = MakeDevice("cowstore/tank/small", kSize);
  dev->max_xfer_len = 128;  // the kernel's default hw_max_sectors
  ASSERT_EQ(runner().Open(dev.get()), 0);
  Run(dev.get(), Tur());
  fake::Outcome o;
  Bytes b0 = RunIn(dev.get(), Inquiry(true, 0xb0, 64), 64, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ((uint32_t{b0[8]} << 24 | b0[9] << 16 | b0[10] << 8 | b0[11]), 128u);
  Bytes ok(128 * 512, 1), too_big(129 * 512, 1);
  EXPECT_EQ(Run(dev.get(), Write16(0, 128), &ok).scsi_status, 0);
  o = Run(dev.get(), Write16(0, 129), &too_big);
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x5);
  EXPECT_EQ(o.asc(), 0x24);
  runner().Close(dev.get());
}

TEST_F(CommandTest, InvalidOperationCode) {
  Bytes c(10, 0);
  c[0] = 0x3c;  // READ BUFFER: not implemented
  ExpectCheck(c, nullptr, 0x5, 0x20, 0x00);
}

TEST_F(CommandTest, VendorSpecificAndVariableLengthOpcodesAreRejectedNotCrashed) {
  for (uint8_t op : {0xc0, 0xff, 0x7f, 0x60}) {
    Bytes c(op == 0x7f ? 40 : 16, 0);
    c[0] = op;
    if (op == 0x7f) c[7] = 32;
    fake::Outcome o = Run(dev_, c);
    EXPECT_EQ(o.scsi_status, 0x02) << std::hex << int(op);
    EXPECT_EQ(o.sense_key(), 0x5);
  }
}

TEST_F(CommandTest, VerifyAndWriteAndVerify) {
  Bytes data(512, 0x33);
  ExpectGood(WriteAndVerify16(30, 1), &data);
  ExpectGood(Verify16(30, 1, 0));
  Bytes same = data;
  ExpectGood(Verify16(30, 1, 1), &same);
  Bytes other(512, 0x34);
  ExpectCheck(Verify16(30, 1, 1), &other, 0xe, 0x1d, 0x00);
}

TEST_F(CommandTest, SynchronizeCache10And16) {
  ExpectGood(SyncCache10());
  ExpectGood(SyncCache16());
}

TEST_F(CommandTest, CompareAndWriteAndMiscompareWithOffset) {
  Bytes init(512, 0x10);
  ExpectGood(Write16(40, 1), &init);
  Bytes cw(1024);
  std::fill(cw.begin(), cw.begin() + 512, 0x10);
  std::fill(cw.begin() + 512, cw.end(), 0x20);
  ExpectGood(CompareAndWrite(40, 1), &cw);
  // Now the block holds 0x20: comparing with 0x10 miscompares at byte 0.
  Bytes again = cw;
  again[0] = 0x20;  // first byte matches, the second differs
  fake::Outcome o = Run(dev_, CompareAndWrite(40, 1), &again);
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0xe);
  EXPECT_EQ(o.asc(), 0x1d);
  EXPECT_NE(o.sense[0] & 0x80, 0);  // INFORMATION valid
  EXPECT_EQ(o.sense[6], 1);         // byte offset of the first difference
}

TEST_F(CommandTest, WriteSameZeroesAndUnmapBit) {
  Bytes pattern(512, 0);
  ExpectGood(WriteSame16(2048, 2048), &pattern);
  ExpectGood(WriteSame16(4096, 2048, 0x08), &pattern);  // UNMAP
  Bytes in(512, 0xff);
  ExpectGood(Read16(4096, 1), &in);
  EXPECT_EQ(in, Bytes(512, 0));
}

TEST_F(CommandTest, UnmapAndGetLbaStatus) {
  Bytes data(1u << 20, 0x77);
  ExpectGood(Write16(0, (1u << 20) / 512), &data);
  Bytes params = UnmapParams({{0, 2048}});
  ExpectGood(Unmap(static_cast<uint16_t>(params.size())), &params);
  fake::Outcome o;
  Bytes b = RunIn(dev_, GetLbaStatus(0, 64), 64, &o);
  ASSERT_EQ(o.scsi_status, 0);
  EXPECT_EQ(b[8 + 12] & 0x0f, 1);  // first descriptor: deallocated
}

TEST_F(CommandTest, UnmapParameterListLengthError) {
  Bytes params = UnmapParams({{0, 8}});
  params.resize(4);
  ExpectCheck(Unmap(4), &params, 0x5, 0x1a, 0x00);
}

TEST_F(CommandTest, ModeSenseAndSelect) {
  fake::Outcome o;
  RunIn(dev_, ModeSense6(0x3f, 255), 255, &o);
  EXPECT_EQ(o.scsi_status, 0);
  Bytes b = RunIn(dev_, ModeSense10(0x0a, 255), 255, &o);  // control page
  EXPECT_EQ(o.scsi_status, 0);
  // MODE SELECT(6) of the caching page with WCE set.
  Bytes cur = RunIn(dev_, ModeSense6(0x08, 255), 255, &o);
  ASSERT_EQ(o.scsi_status, 0);
  const size_t page = 4 + cur[3], plen = 2 + cur[page + 1];
  Bytes sel(4 + plen, 0);
  std::memcpy(&sel[4], &cur[page], plen);
  sel[4] &= 0x3f;
  sel[4 + 2] |= 0x04;
  Bytes c(6, 0);
  c[0] = 0x15;
  c[1] = 0x10;  // PF
  c[4] = static_cast<uint8_t>(sel.size());
  ExpectGood(c, &sel);
  cur = RunIn(dev_, ModeSense6(0x08, 255), 255, &o);
  EXPECT_NE(cur[4 + cur[3] + 2] & 0x04, 0);
}

TEST_F(CommandTest, StartStopAndPreventAllow) {
  ExpectGood(StartStopUnit(true));
  ExpectGood(PreventAllow(true));
  ExpectGood(PreventAllow(false));
}

TEST_F(CommandTest, ReportSupportedOperationCodes) {
  fake::Outcome o;
  Bytes b = RunIn(dev_, ReportOpcodes(4096), 4096, &o);
  ASSERT_EQ(o.scsi_status, 0);
  const uint32_t len = uint32_t{b[0]} << 24 | b[1] << 16 | b[2] << 8 | b[3];
  EXPECT_GT(len, 8u * 20);
}

TEST_F(CommandTest, EveryReportedCommandReachesTheLogicalUnit) {
  // Walk REPORT SUPPORTED OPERATION CODES (all commands) and send each one,
  // with zero lengths, through the .so: none may come back as an unknown
  // opcode, and the adapter must hand over each CDB at its full length.
  fake::Outcome o;
  Bytes list = RunIn(dev_, ReportOpcodes(8192), 8192, &o);
  ASSERT_EQ(o.scsi_status, 0);
  const size_t len = uint32_t{list[0]} << 24 | list[1] << 16 | list[2] << 8 | list[3];
  int seen = 0;
  for (size_t off = 4; off + 8 <= 4 + len && off + 8 <= list.size();
       off += (list[off + 5] & 0x02) ? 20 : 8) {
    const uint8_t op = list[off];
    const uint16_t sa = static_cast<uint16_t>(list[off + 2] << 8 | list[off + 3]);
    const size_t cdb_len = list[off + 6] << 8 | list[off + 7];
    ASSERT_GE(cdb_len, 6u);
    Bytes cdb(cdb_len, 0);
    cdb[0] = op;
    if (list[off + 5] & 0x01) cdb[1] = static_cast<uint8_t>(sa & 0x1f);
    o = Run(dev_, cdb);
    EXPECT_TRUE(ValidScsiStatus(o.scsi_status)) << std::hex << int(op);
    EXPECT_FALSE(o.scsi_status == 0x02 && o.sense_key() == 0x5 && o.asc() == 0x20)
        << "reported but refused: opcode 0x" << std::hex << int(op) << " sa 0x" << sa;
    ++seen;
  }
  EXPECT_GE(seen, 30);
}

TEST_F(CommandTest, ExtendedCopyInsideOneLunAndReceiveCopyResults) {
  Bytes data(64 * 512, 0x61);
  ExpectGood(Write16(0, 64), &data);
  Bytes naa = NaaOf(dev_);
  Bytes params = XcopyParams(1, 0, {naa}, {{0, 0, 64, 0, 8192}}, 512);
  ExpectGood(ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
  Bytes in(64 * 512);
  ExpectGood(Read16(8192, 64), &in);
  EXPECT_EQ(in, data);
  fake::Outcome o;
  Bytes b = RunIn(dev_, ReceiveCopyResults(0x03, 0, 64), 64, &o);  // OPERATING PARAMETERS
  EXPECT_EQ(o.scsi_status, 0);
  RunIn(dev_, ReceiveCopyResults(0x00, 1, 64), 64, &o);  // COPY STATUS of list 1
  EXPECT_EQ(o.scsi_status, 0);
}

TEST_F(CommandTest, ExtendedCopyBetweenLunsOfOneCopyGroup) {
  tcmu_device* a = OpenDevice("cowstore/tank/ga:copy_group=esx", kSize);
  tcmu_device* b = OpenDevice("cowstore/tank/gb;copy_group=esx", kSize);
  Run(a, Tur());
  Run(b, Tur());
  Bytes data(128 * 512, 0x5c);
  ASSERT_EQ(Run(a, Write16(0, 128), &data).scsi_status, 0);
  Bytes params = XcopyParams(2, 0, {NaaOf(a), NaaOf(b)}, {{0, 1, 128, 0, 256}}, 512);
  fake::Outcome o = Run(a, ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
  ASSERT_EQ(o.scsi_status, 0) << int(o.sense_key()) << "/" << int(o.asc());
  fake::Outcome r;
  EXPECT_EQ(RunIn(b, Read16(256, 128), 128 * 512, &r), data);
}

TEST_F(CommandTest, ExtendedCopyToLunOutsideTheCopyGroupIsNotReachable) {
  tcmu_device* a = OpenDevice("cowstore/tank/ga:copy_group=esx", kSize);
  tcmu_device* c = OpenDevice("cowstore/tank/gc:copy_group=other", kSize);
  Run(a, Tur());
  Run(c, Tur());
  Bytes params = XcopyParams(3, 0, {NaaOf(a), NaaOf(c)}, {{0, 1, 8, 0, 0}}, 512);
  fake::Outcome o = Run(a, ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0xa);  // COPY ABORTED
  EXPECT_EQ(o.asc(), 0x0d);
  EXPECT_EQ(o.ascq(), 0x02);
}

TEST_F(CommandTest, ExtendedCopyAcrossPoolsCopiesData) {
  MakePool("other");
  tcmu_device* a = OpenDevice("cowstore/tank/xa:copy_group=g", kSize);
  tcmu_device* b = OpenDevice("cowstore/other/xb:copy_group=g", kSize);
  Run(a, Tur());
  Run(b, Tur());
  Bytes data(32 * 512, 0x3d);
  ASSERT_EQ(Run(a, Write16(64, 32), &data).scsi_status, 0);
  Bytes params = XcopyParams(4, 0, {NaaOf(a), NaaOf(b)}, {{0, 1, 32, 64, 0}}, 512);
  fake::Outcome o = Run(b, ExtendedCopy(static_cast<uint32_t>(params.size())), &params);
  ASSERT_EQ(o.scsi_status, 0) << int(o.sense_key()) << "/" << int(o.asc());
  fake::Outcome r;
  EXPECT_EQ(RunIn(b, Read16(0, 32), 32 * 512, &r), data);
}

TEST_F(CommandTest, PoolOutOfSpaceIsDataProtectSpaceAllocationFailed) {
  MakePool("tiny", 48ull << 20);
  tcmu_device* t = OpenDevice("cowstore/tiny/big", 1ull << 30);
  Run(t, Tur());
  Bytes chunk(1u << 20, 0x11);
  fake::Outcome o;
  bool threshold_seen = false;
  for (uint64_t lba = 0, i = 0; i < 200; ++i) {
    o = Run(t, Write16(lba, 2048), &chunk);
    if (o.scsi_status == 0x02 && o.sense_key() == 0x6) {  // UA: not executed, retry
      threshold_seen |= o.asc() == 0x38 && o.ascq() == 0x07;
      continue;
    }
    if (o.scsi_status != 0) break;
    lba += 2048;
  }
  EXPECT_TRUE(threshold_seen);  // 0x38/0x07 before the pool ran full
  EXPECT_EQ(o.scsi_status, 0x02);
  EXPECT_EQ(o.sense_key(), 0x7);
  EXPECT_EQ(o.asc(), 0x27);
  EXPECT_EQ(o.ascq(), 0x07);
}

TEST_F(CommandTest, NoCommandIsEverCompletedAsynchronously) {
  ExpectGood(Tur());
  EXPECT_EQ(runner().async_completions.load(), 0);
  EXPECT_EQ(runner().notifications.load(), 0);
}

}  // namespace
}  // namespace cowstore::plugin_test
