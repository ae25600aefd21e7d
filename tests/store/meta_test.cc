// SPDX-License-Identifier: Apache-2.0
// Golden tests of the journal's LUN records (meta.h, Record): the payload
// bytes of kCreateLun, kCloneLun and kSnapshotLun are on disk in every pool,
// so a refactoring of the encoder or decoder must leave them byte for byte
// as they are. The expected bytes below were produced by main 0e971a7
// (before the three records shared one encoder case).
#include "handler/store/meta.h"

#include <gtest/gtest.h>

#include <string>

namespace cowstore::store {
namespace {

std::string Hex(const std::string& s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) {
    h.push_back(kDigits[c >> 4]);
    h.push_back(kDigits[c & 15]);
  }
  return h;
}

Uuid Counting(uint8_t first) {
  Uuid u;
  for (size_t i = 0; i < u.size(); i++) u[i] = static_cast<uint8_t>(first + i);
  return u;
}

// Every field a LUN record carries set to a value whose bytes are distinct,
// so a field written in the wrong place or width changes the hex.
Record LunRecord(RecType t) {
  Record r;
  r.type = t;
  r.lun = 0x04030201;
  r.lun2 = 0x08070605;
  r.uuid = Counting(0x10);
  r.a = 0x1817161514131211;
  r.bs = 0x00001000;
  r.name = "vm-disk";
  return r;
}

std::string Payload(const Record& r) {
  std::string s;
  r.EncodePayload(&s);
  return s;
}

// lun | lun2 | uuid | a | bs | name: the part the three records share.
constexpr char kCommonHex[] =
    "01020304"                          // lun
    "05060708"                          // lun2
    "101112131415161718191a1b1c1d1e1f"  // uuid
    "1112131415161718"                  // a
    "00100000"                          // bs
    "07000000766d2d6469736b";           // name: length 7, "vm-disk"

TEST(LunRecordGolden, CreateLunBytesAreUnchanged) {
  EXPECT_EQ(Hex(Payload(LunRecord(RecType::kCreateLun))), kCommonHex);
}

TEST(LunRecordGolden, CloneLunBytesAreUnchanged) {
  EXPECT_EQ(Hex(Payload(LunRecord(RecType::kCloneLun))), kCommonHex);
}

TEST(LunRecordGolden, SnapshotLunBytesAreUnchanged) {
  Record r = LunRecord(RecType::kSnapshotLun);
  // An empty attribute list is still written: its length, zero.
  EXPECT_EQ(Hex(Payload(r)), std::string(kCommonHex) + "00000000");
  r.attrs.read_only = true;
  r.attrs.origin = Counting(0xa0);
  r.attrs.created = 0x6655443322110099;
  EXPECT_EQ(Hex(Payload(r)), std::string(kCommonHex) +
                                 "30000000"                            // list: 48 bytes
                                 "01000000" "00000000"                 // read-only, length 0
                                 "02000000" "10000000"                 // origin, length 16
                                 "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"    //
                                 "03000000" "08000000"                 // created, length 8
                                 "9900112233445566");
}

// The framed record (header, CRC) of each type, for the whole on-disk form.
TEST(LunRecordGolden, FramedRecordsAreUnchanged) {
  Record snap = LunRecord(RecType::kSnapshotLun);
  snap.attrs.read_only = true;
  std::string create, clone, snapshot;
  FrameRecord(LunRecord(RecType::kCreateLun), 1000, 999, &create);
  FrameRecord(LunRecord(RecType::kCloneLun), 1001, 1000, &clone);
  FrameRecord(snap, 1002, 1001, &snapshot);
  EXPECT_EQ(Hex(create),
            "a29a49262f000000e803000000000000e703000000000000"  // crc, len, lsn, proven
            "01" + std::string(kCommonHex));                    // type 1
  EXPECT_EQ(Hex(clone),
            "4785962a2f000000e903000000000000e803000000000000"
            "07" + std::string(kCommonHex));
  EXPECT_EQ(Hex(snapshot),
            "f5f3df523b000000ea03000000000000e903000000000000"
            "09" + std::string(kCommonHex) + "080000000100000000000000");
}

void ExpectSameLunFields(const Record& got, const Record& want) {
  EXPECT_EQ(got.type, want.type);
  EXPECT_EQ(got.lun, want.lun);
  EXPECT_EQ(got.lun2, want.lun2);
  EXPECT_EQ(got.uuid, want.uuid);
  EXPECT_EQ(got.a, want.a);
  EXPECT_EQ(got.bs, want.bs);
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.attrs.read_only, want.attrs.read_only);
  EXPECT_EQ(got.attrs.origin, want.attrs.origin);
  EXPECT_EQ(got.attrs.created, want.attrs.created);
  EXPECT_EQ(got.attrs.unknown_tag, 0u);
}

TEST(LunRecordGolden, EachTypeDecodesToWhatWasEncoded) {
  for (RecType t : {RecType::kCreateLun, RecType::kCloneLun, RecType::kSnapshotLun}) {
    SCOPED_TRACE(static_cast<int>(t));
    Record r = LunRecord(t);
    if (t == RecType::kSnapshotLun) r.attrs = {true, Counting(0xa0), 77};
    std::string p = Payload(r);
    Record back;
    ASSERT_TRUE(Record::DecodePayload(t, p.data(), p.size(), &back));
    ExpectSameLunFields(back, r);
  }
}

// Only a snapshot carries an attribute list: a create or clone payload with
// one has bytes left over, and a snapshot payload without one is truncated.
TEST(LunRecordGolden, AttributeListOnlyInSnapshots) {
  std::string common = Payload(LunRecord(RecType::kCreateLun));
  std::string with_list = common + std::string(4, '\0');
  Record back;
  EXPECT_FALSE(Record::DecodePayload(RecType::kCreateLun, with_list.data(), with_list.size(), &back));
  EXPECT_FALSE(Record::DecodePayload(RecType::kCloneLun, with_list.data(), with_list.size(), &back));
  EXPECT_TRUE(Record::DecodePayload(RecType::kSnapshotLun, with_list.data(), with_list.size(), &back));
  EXPECT_FALSE(Record::DecodePayload(RecType::kSnapshotLun, common.data(), common.size(), &back));
  EXPECT_TRUE(Record::DecodePayload(RecType::kCloneLun, common.data(), common.size(), &back));
}

// An attribute list has one spelling: tags strictly ascending, as the encoder
// writes them. A list in another order or with a tag twice is refused, so a
// page whose CRC was recomputed over reordered attributes cannot decode to a
// state that re-encodes to other bytes (found by fuzz_v3_pages).
std::string AttrList(std::initializer_list<std::pair<uint32_t, std::string>> tags) {
  std::string body;
  Encoder b(&body);
  for (const auto& [tag, value] : tags) {
    b.U32(tag);
    b.U32(static_cast<uint32_t>(value.size()));
    b.Bytes(value.data(), value.size());
  }
  std::string list;
  Encoder l(&list);
  l.U32(static_cast<uint32_t>(body.size()));
  l.Bytes(body.data(), body.size());
  return list;
}

bool Decodes(const std::string& list, LunAttrs* out) {
  Decoder d(list.data(), list.size());
  return DecodeLunAttrs(&d, out) && d.left() == 0;
}

TEST(LunAttributes, TagsInAscendingOrderOnly) {
  const std::string created("\x4d\0\0\0\0\0\0\0", 8), origin(16, '\x5a');
  LunAttrs a;
  ASSERT_TRUE(Decodes(AttrList({{kAttrReadOnly, ""}, {kAttrOrigin, origin}, {kAttrCreated, created}}), &a));
  EXPECT_TRUE(a.read_only);
  EXPECT_EQ(a.created, 77u);
  std::string again;
  Encoder e(&again);
  EncodeLunAttrs(a, &e);
  EXPECT_EQ(Hex(again),
            Hex(AttrList({{kAttrReadOnly, ""}, {kAttrOrigin, origin}, {kAttrCreated, created}})));

  EXPECT_FALSE(Decodes(AttrList({{kAttrCreated, created}, {kAttrReadOnly, ""}}), &a));
  EXPECT_FALSE(Decodes(AttrList({{kAttrOrigin, origin}, {kAttrReadOnly, ""}}), &a));
  EXPECT_FALSE(Decodes(AttrList({{kAttrReadOnly, ""}, {kAttrReadOnly, ""}}), &a));
  EXPECT_FALSE(Decodes(AttrList({{0, ""}}), &a));
  // A later build's tag after the known ones is remembered (the caller
  // refuses it as kUnsupported); before them it is out of order.
  ASSERT_TRUE(Decodes(AttrList({{kAttrReadOnly, ""}, {40, "x"}}), &a));
  EXPECT_EQ(a.unknown_tag, 40u);
  EXPECT_FALSE(Decodes(AttrList({{40, "x"}, {kAttrReadOnly, ""}}), &a));
}

}  // namespace
}  // namespace cowstore::store
