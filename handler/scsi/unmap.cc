// SPDX-License-Identifier: Apache-2.0
// UNMAP (SBC-3 5.28). Every descriptor is validated before anything
// changes. Each range then goes through the store's ZeroRange, which
// deallocates the whole allocation units (space returns to the pool) and
// zeroes the partial ones at the edges, so with LBPRZ=1 every unmapped block
// reads zeros, as initiators that trust LBPRZ expect. If zeroing a partial
// edge needs space the pool lacks, the range falls back to Unmap (whole
// units only), which SBC permits.
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/handlers.h"

namespace cowstore::scsi {

CommandResult Unmap(Command& cmd) {
  const uint8_t* c = cmd.cdb.data();
  if (c[1] & 0x01) return InvalidFieldInCdb(1, 0);  // ANCHOR
  const uint32_t pll = Be16(c + 7);
  if (pll == 0) return Good();
  if (pll < 8 || cmd.data_length < pll) return ParameterListLengthError();
  const std::vector<uint8_t> p = cmd.GatherAll(pll);
  const uint32_t bddl = Be16(&p[2]);
  const size_t usable = std::min<size_t>(bddl, pll - 8);
  const size_t n = usable / 16;  // a partial trailing descriptor is ignored
  const Limits lim = cmd.lu.limits();
  if (n > lim.max_unmap_descriptors) return InvalidFieldInParameterList(2);
  uint64_t total = 0;
  struct Range { uint64_t lba, count; };
  std::vector<Range> ranges;
  ranges.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* d = &p[8 + 16 * i];
    const uint64_t lba = Be64(d);
    const uint32_t count = Be32(d + 8);
    total += count;
    if (count > lim.max_unmap_blocks || total > lim.max_unmap_blocks) {
      return InvalidFieldInParameterList(static_cast<uint16_t>(8 + 16 * i + 8));
    }
    if (!cmd.InRange(lba, count)) return LbaOutOfRange();
    if (count) ranges.push_back({lba, count});
  }
  // With several descriptors, each range goes in buffered and one flush
  // makes them all durable (WCE=0): one commit per command, not per range.
  const store::Durability want = cmd.WriteDurability(false);
  const store::Durability dur = ranges.size() > 1 ? store::Durability::kBuffered : want;
  for (const Range& r : ranges) {
    store::Status s = cmd.lu.lun().ZeroRange(r.lba, r.count, dur);
    if (s.code() == store::Code::kNoSpace) s = cmd.lu.lun().Unmap(r.lba, r.count, dur);
    if (!s.ok()) {
      if (dur != want) (void)cmd.lu.lun().Flush();
      return FromStoreStatus(cmd.lu, s, true);
    }
    cmd.lu.mutable_counters().unmapped_blocks.fetch_add(r.count, std::memory_order_relaxed);
  }
  if (dur != want) {
    store::Status s = cmd.lu.lun().Flush();
    if (!s.ok()) return FromStoreStatus(cmd.lu, s, true);
  }
  return Good();
}

}  // namespace cowstore::scsi
