// SPDX-License-Identifier: Apache-2.0
// MODE SENSE / MODE SELECT (6) and (10) with three pages: read-write error
// recovery (0x01), caching (0x08: WCE is the only changeable bit and decides
// whether GOOD means durable) and control (0x0A). Saved values are not
// supported (no persistent mode parameters): PC=11b and SP=1 are rejected.
#include <array>
#include <cstring>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

namespace {

enum class PageControl : uint8_t { kCurrent = 0, kChangeable = 1, kDefault = 2, kSaved = 3 };

constexpr uint8_t kPageCodes[] = {0x01, 0x08, 0x0A};

size_t PageLength(uint8_t code) {
  switch (code) {
    case 0x01: return 12;
    case 0x08: return 20;
    case 0x0A: return 12;
    default: return 0;
  }
}

// The page as MODE SENSE returns it for `pc` (PS bit clear: not saveable).
std::vector<uint8_t> BuildPage(const LogicalUnit& lu, uint8_t code, PageControl pc) {
  std::vector<uint8_t> p(PageLength(code), 0);
  p[0] = code;
  p[1] = static_cast<uint8_t>(p.size() - 2);
  const bool changeable = pc == PageControl::kChangeable;
  switch (code) {
    case 0x01:  // AWRE, ARRE: reallocation is the store's business
      if (!changeable) p[2] = 0xC0;
      break;
    case 0x08: {
      bool wce = pc == PageControl::kDefault ? lu.config().write_cache_enabled
                                             : lu.write_cache_enabled();
      if (changeable) {
        p[2] = 0x04;  // WCE
      } else if (wce) {
        p[2] = 0x04;
      }
      break;
    }
    case 0x0A:
      if (!changeable) p[3] = 0x10;  // QUEUE ALGORITHM MODIFIER 1: unrestricted reordering
      break;
  }
  return p;
}

}  // namespace

CommandResult ModeSense(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const bool ten = c[0] == 0x5A;
  const bool dbd = c[1] & 0x08;
  const bool llbaa = ten && (c[1] & 0x10);
  const auto pc = static_cast<PageControl>(c[2] >> 6);
  const uint8_t page = c[2] & 0x3F;
  const uint8_t subpage = c[3];
  const uint32_t alloc_len = ten ? Be16(c + 7) : c[4];

  if (pc == PageControl::kSaved) {
    return Sense(SenseKey::kIllegalRequest, asc::kSavingParametersNotSupported)
        .FieldPointer(true, 2, 7);
  }
  std::vector<uint8_t> pages;
  if (page == 0x3F) {
    if (subpage != 0x00 && subpage != 0xFF) return InvalidFieldInCdb(3);
    for (uint8_t code : kPageCodes) {
      auto p = BuildPage(cmd.lu, code, pc);
      pages.insert(pages.end(), p.begin(), p.end());
    }
  } else {
    if (PageLength(page) == 0) return InvalidFieldInCdb(2, 5);
    if (subpage != 0) return InvalidFieldInCdb(3);
    pages = BuildPage(cmd.lu, page, pc);
  }

  std::vector<uint8_t> d;
  const size_t hdr = ten ? 8 : 4;
  d.resize(hdr, 0);
  // DPOFUA, and WP for a read-only LU (a snapshot; SBC-4 6.5.2).
  const uint8_t device_specific = static_cast<uint8_t>(0x10 | (cmd.lu.read_only() ? 0x80 : 0));
  size_t bd_len = dbd ? 0 : (llbaa ? 16 : 8);
  std::vector<uint8_t> bd(bd_len, 0);
  const uint64_t blocks = cmd.block_count();
  if (bd_len == 8) {
    PutBe32(bd.data(), blocks > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(blocks));
    PutBe32(bd.data() + 4, cmd.block_size());  // byte 4 (density) is 0
  } else if (bd_len == 16) {
    PutBe64(bd.data(), blocks);
    PutBe32(bd.data() + 12, cmd.block_size());
  }
  if (pc == PageControl::kChangeable) std::fill(bd.begin(), bd.end(), 0);
  d.insert(d.end(), bd.begin(), bd.end());
  d.insert(d.end(), pages.begin(), pages.end());
  if (ten) {
    PutBe16(d.data(), static_cast<uint16_t>(d.size() - 2));
    d[3] = device_specific;
    d[4] = llbaa ? 0x01 : 0;  // LONGLBA
    PutBe16(d.data() + 6, static_cast<uint16_t>(bd_len));
  } else {
    d[0] = static_cast<uint8_t>(d.size() - 1);
    d[2] = device_specific;
    d[3] = static_cast<uint8_t>(bd_len);
  }
  return cmd.ReturnData(d.data(), d.size(), alloc_len);
}

CommandResult ModeSelect(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  const bool ten = c[0] == 0x55;
  const uint32_t pll = ten ? Be16(c + 7) : c[4];
  if (c[1] & 0x01) return InvalidFieldInCdb(1, 0);  // SP: nothing is saveable
  if (pll == 0) return Good();
  if (!(c[1] & 0x10)) return InvalidFieldInCdb(1, 4);  // PF=0: vendor format unsupported
  if (cmd.data_length < pll) return ParameterListLengthError();
  const std::vector<uint8_t> buf = cmd.GatherAll(pll);
  const size_t hdr = ten ? 8 : 4;
  if (pll < hdr) return ParameterListLengthError();
  const bool longlba = ten && (buf[4] & 0x01);
  const size_t bdl = ten ? Be16(buf.data() + 6) : buf[3];
  if (bdl != 0 && bdl != (longlba ? 16u : 8u)) {
    return InvalidFieldInParameterList(static_cast<uint16_t>(ten ? 7 : 3));
  }
  if (hdr + bdl > pll) return ParameterListLengthError();
  if (bdl != 0) {
    const size_t at = hdr + (longlba ? 12 : 5);
    const uint32_t bl = longlba ? Be32(&buf[at]) : Be24(&buf[at]);
    if (bl != cmd.block_size()) return InvalidFieldInParameterList(static_cast<uint16_t>(at));
  }
  bool wce = cmd.lu.write_cache_enabled();
  size_t pos = hdr + bdl;
  while (pos < pll) {
    if (pll - pos < 2) return ParameterListLengthError();
    const uint8_t code = buf[pos] & 0x3F;
    if (buf[pos] & 0x40) return InvalidFieldInParameterList(static_cast<uint16_t>(pos), 6);  // SPF
    const size_t len = buf[pos + 1];
    if (pos + 2 + len > pll) return ParameterListLengthError();
    if (PageLength(code) == 0) return InvalidFieldInParameterList(static_cast<uint16_t>(pos), 5);
    if (len + 2 != PageLength(code)) {
      return InvalidFieldInParameterList(static_cast<uint16_t>(pos + 1));
    }
    const auto current = BuildPage(cmd.lu, code, PageControl::kCurrent);
    const auto mask = BuildPage(cmd.lu, code, PageControl::kChangeable);
    for (size_t i = 2; i < len + 2; ++i) {
      uint8_t diff = static_cast<uint8_t>((buf[pos + i] ^ current[i]) & ~mask[i]);
      if (diff) {
        int bit = 7;
        while (!(diff & (1 << bit))) --bit;
        return InvalidFieldInParameterList(static_cast<uint16_t>(pos + i), bit);
      }
    }
    if (code == 0x08) wce = buf[pos + 2] & 0x04;
    pos += 2 + len;
  }
  if (!wce && cmd.lu.write_cache_enabled()) {
    // Turning the cache off: what earlier GOODs left buffered becomes durable now.
    store::Status s = cmd.FlushBeforeStatus(cmd.lu);
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  }
  cmd.lu.set_write_cache_enabled(wce);
  return Good();
}

}  // namespace cowstore::scsi
