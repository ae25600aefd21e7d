// SPDX-License-Identifier: Apache-2.0
// EXTENDED COPY (LID1). Every segment is validated and every CSCD resolved
// before the first byte moves, so a malformed or refused list changes
// nothing. CSCDs name LUs by NAA through the LunDirectory, which applies the
// copy-group rule (a different LU only inside the same non-empty copy group;
// TCMU carries no initiator identity). Inside one pool a segment is the
// store's CloneRange (metadata only for whole allocation units); across
// pools it is a chunked read+write that holds no lock for the whole copy, so
// other commands to both LUs keep flowing. Segments run buffered and each
// WCE=0 destination is flushed once before the status goes back.
// The list ID never refuses a copy (TCMU gives no I_T nexus, so a "duplicate"
// may be another initiator's): LIST ID USAGE 00b records the copy in the LU's
// CopyListTable under its own CopyId for RECEIVE COPY RESULTS; 10b and 11b
// hold nothing and so record nothing.
#include <algorithm>
#include <memory>
#include <vector>

#include "handler/scsi/cdb.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/handlers.h"
#include "handler/scsi/lun_directory.h"
#include "handler/scsi/xcopy_parameters.h"

namespace cowstore::scsi {

namespace {

constexpr uint64_t kCopyChunkBytes = 1u << 20;

// COPY ABORTED for segment `index` with a pointer into the parameter list.
CommandResult CopyAborted(Asc code, size_t index, uint16_t pointer) {
  return Sense(SenseKey::kCopyAborted, code)
      .CommandSpecific(static_cast<uint32_t>(index))
      .SegmentPointer(false, pointer);
}

struct ResolvedSegment {
  const XcopySegment* seg;
  LogicalUnit* src;
  LogicalUnit* dst;
};

// The result of a failed store call while processing segment `index`.
CommandResult SegmentFailure(LogicalUnit& lu, const store::Status& s, size_t index,
                             uint16_t pointer) {
  if (s.code() == store::Code::kNoSpace || s.code() == store::Code::kNotDurable)
    return FromStoreStatus(lu, s, true);
  CommandResult mapped = FromStoreStatus(lu, s, true);
  Asc code = mapped.sense_length ? mapped.additional_sense() : asc::kNoAdditionalSense;
  return CopyAborted(code, index, pointer);
}

store::Status DataCopy(LogicalUnit& src, uint64_t src_lba, LogicalUnit& dst, uint64_t dst_lba,
                       uint64_t blocks) {
  const uint32_t bs = src.lun().block_size();
  const uint64_t chunk = std::max<uint64_t>(1, kCopyChunkBytes / bs);
  std::vector<uint8_t> buf(std::min(chunk, blocks) * bs);
  for (uint64_t done = 0; done < blocks;) {
    const uint64_t n = std::min(chunk, blocks - done);
    store::Status s = src.lun().Read(src_lba + done, n, buf.data());
    if (!s.ok()) return s;
    s = dst.lun().Write(dst_lba + done, n, buf.data(), store::Durability::kBuffered);
    if (!s.ok()) return s;
    done += n;
  }
  return store::Status::Ok();
}

// Segments are cloned/copied buffered; before GOOD (or the failure that
// reports how far the copy got) every destination with WCE=0 is flushed
// once, so a command of many segments costs one commit, not one per segment
// (or, when the caller commits, recorded for its commit).
store::Status FlushDestinations(Command& cmd, const std::vector<LogicalUnit*>& touched) {
  store::Status first;
  for (size_t i = 0; i < touched.size(); ++i) {
    LogicalUnit* lu = touched[i];
    if (std::find(touched.begin(), touched.begin() + i, lu) != touched.begin() + i) continue;
    if (lu->write_durability(false) != store::Durability::kDurable) continue;
    store::Status s = cmd.FlushBeforeStatus(*lu);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

CommandResult RunCopy(Command& cmd, const XcopyParameters& x, HeldCopy& held) {
  // Resolve each referenced CSCD once; the shared_ptrs keep the LUs alive.
  std::vector<std::shared_ptr<LogicalUnit>> resolved(x.cscds.size());
  auto resolve = [&](uint16_t index) -> LogicalUnit* {
    if (index >= x.cscds.size()) return nullptr;
    if (!resolved[index]) {
      const XcopyCscd& c = x.cscds[index];
      if (!c.naa_designator) return nullptr;
      resolved[index] = cmd.lu.directory().Resolve(c.naa, cmd.lu);
    }
    return resolved[index].get();
  };

  std::vector<ResolvedSegment> plan;
  plan.reserve(x.segments.size());
  for (size_t i = 0; i < x.segments.size(); ++i) {
    const XcopySegment& s = x.segments[i];
    LogicalUnit* src = resolve(s.source);
    if (!src) return CopyAborted(asc::kCopyTargetDeviceNotReachable, i, s.offset + 4);
    LogicalUnit* dst = resolve(s.destination);
    if (!dst) return CopyAborted(asc::kCopyTargetDeviceNotReachable, i, s.offset + 6);
    for (uint16_t idx : {s.source, s.destination}) {
      const uint32_t bl = x.cscds[idx].disk_block_length;
      LogicalUnit* lu = resolved[idx].get();
      if (bl != 0 && bl != lu->lun().block_size()) {
        return InvalidFieldInParameterList(static_cast<uint16_t>(x.cscds[idx].offset + 29));
      }
    }
    if (dst->read_only()) return CheckCondition(SenseKey::kDataProtect, asc::kWriteProtected);
    if (src->lun().block_size() != dst->lun().block_size()) {
      return InvalidFieldInParameterList(static_cast<uint16_t>(s.offset + 4));
    }
    const uint64_t sn = src->lun().block_count();
    const uint64_t dn = dst->lun().block_count();
    if (s.source_lba > sn || s.blocks > sn - s.source_lba) {
      return CopyAborted(asc::kNoAdditionalSense, i, s.offset + 12);
    }
    if (s.destination_lba > dn || s.blocks > dn - s.destination_lba) {
      return CopyAborted(asc::kNoAdditionalSense, i, s.offset + 20);
    }
    plan.push_back({&s, src, dst});
  }

  auto& counters = cmd.lu.mutable_counters();
  uint64_t bytes = 0;
  std::vector<LogicalUnit*> touched;
  for (size_t i = 0; i < plan.size(); ++i) {
    const ResolvedSegment& r = plan[i];
    const XcopySegment& s = *r.seg;
    if (s.blocks > 0) {
      store::Status st;
      const bool same_pool = &r.src->lun().pool() == &r.dst->lun().pool();
      if (same_pool) {
        st = r.src->lun().pool().CloneRange(r.src->lun(), s.source_lba, r.dst->lun(),
                                            s.destination_lba, s.blocks,
                                            store::Durability::kBuffered);
      } else {
        st = DataCopy(*r.src, s.source_lba, *r.dst, s.destination_lba, s.blocks);
      }
      if (!st.ok()) {
        (void)FlushDestinations(cmd, touched);  // what was done is reported, so make it durable
        return SegmentFailure(cmd.lu, st, i, s.offset);
      }
      touched.push_back(r.dst);
      (same_pool ? counters.xcopy_cloned_blocks : counters.xcopy_copied_blocks)
          .fetch_add(s.blocks, std::memory_order_relaxed);
      bytes += uint64_t{s.blocks} * r.src->lun().block_size();
    }
    held.Progress(static_cast<uint16_t>(i + 1), bytes);
  }
  store::Status fs = FlushDestinations(cmd, touched);
  if (!fs.ok()) return SegmentFailure(cmd.lu, fs, plan.size() - 1, plan.back().seg->offset);
  return Good();
}

}  // namespace

CommandResult ExtendedCopy(Command& cmd) {
  const uint32_t pll = Be32(cmd.cdb.data() + 10);
  if (pll == 0) return Good();
  if (cmd.data_length < pll) return ParameterListLengthError();
  const std::vector<uint8_t> p = cmd.GatherAll(pll);
  XcopyParameters x;
  CommandResult parsed = ParseXcopyParameters(p, cmd.lu.limits(), &x);
  if (!parsed.good()) return parsed;
  cmd.lu.mutable_counters().xcopy_commands.fetch_add(1, std::memory_order_relaxed);

  // 00b: held for RECEIVE COPY RESULTS. An exception out of RunCopy
  // finishes the entry as INTERNAL TARGET FAILURE (HeldCopy's destructor).
  HeldCopy held(x.list_id_usage == 0x00 ? &cmd.lu.copy_lists() : nullptr, x.list_id);
  const CommandResult r = RunCopy(cmd, x, held);
  held.Finish(r);
  return r;
}

}  // namespace cowstore::scsi
