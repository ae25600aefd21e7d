// SPDX-License-Identifier: Apache-2.0
#include "handler/store/journal_segments.h"

#include <algorithm>
#include <string>
#include <utility>

#include "handler/store/meta.h"   // kMinJournalBytes, kMaxJournalBytes, kDefaultJournalBytes
#include "handler/store/names.h"  // ValidAllocationUnit
#include "handler/store/zero_fill.h"

namespace cowstore::store {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

uint64_t Aus(const std::vector<JournalExtent>& v) {
  uint64_t n = 0;
  for (const JournalExtent& x : v) n += x.aus;
  return n;
}

}  // namespace

Result<JournalLayout> JournalLayout::Make(uint32_t au, uint64_t data_offset, uint64_t units,
                                          std::vector<JournalExtent> extents) {
  auto bad = [](const std::string& what) { return Status(Code::kInvalidArgument, "journal layout: " + what); };
  if (!ValidAllocationUnit(au))
    return bad("AU of " + N(au) + " bytes is not " + std::string(kAllocationUnitRule));
  uint64_t area = 0, end = 0;
  if (__builtin_mul_overflow(units, uint64_t{au}, &area) || __builtin_add_overflow(data_offset, area, &end))
    return bad("data area of " + N(units) + " AUs from byte " + N(data_offset) + " overflows");
  if (std::string why = JournalExtentsRule(extents, units, au); !why.empty()) return bad(why);
  JournalLayout l;
  l.au_ = au;
  l.data_offset_ = data_offset;
  uint64_t aus = 0;
  for (const JournalExtent& x : extents) {
    aus += x.aus;  // <= 32 * 2^16 (the rule)
    l.ends_.push_back(aus * au);
  }
  l.capacity_ = aus * au;
  l.extents_ = std::move(extents);
  return l;
}

Status JournalLayout::Map(uint64_t pos, uint64_t len, std::vector<RingPiece>* out) const {
  if (len > capacity_)
    return Status(Code::kInvalidArgument,
                  "journal range of " + N(len) + " bytes exceeds the " + N(capacity_) + "-byte ring");
  out->clear();
  uint64_t off = pos % capacity_;
  size_t i = std::upper_bound(ends_.begin(), ends_.end(), off) - ends_.begin();
  while (len > 0) {
    if (i == extents_.size()) i = 0, off = 0;  // the wrap: back to the first extent
    const uint64_t begin = ends_[i] - extents_[i].aus * au_;
    const uint64_t n = std::min(len, ends_[i] - off);
    const uint64_t dev = data_offset_ + extents_[i].first_au * au_ + (off - begin);
    // Extents next to each other on the device make one write, not two.
    if (!out->empty() && out->back().offset + out->back().len == dev)
      out->back().len += n;
    else
      out->push_back({dev, n});
    len -= n;
    off += n;
    i++;
  }
  return Status::Ok();
}

// ------------------------------------------------------------------- ring

Result<JournalRing> JournalRing::Open(JournalLayout layout, uint64_t start, uint64_t tail) {
  if (tail < start || tail - start > layout.capacity())
    return Status(Code::kInvalidArgument, "journal tail " + N(tail) + " is not within one ring (" +
                                              N(layout.capacity()) + " bytes) after start " + N(start));
  JournalRing r(std::move(layout));
  r.start_ = start;
  r.tail_ = tail;
  return r;
}

Status JournalRing::WriteAtTail(File* file, const std::string& bytes) const {
  if (!Fits(bytes.size()))
    return Status(Code::kNoSpace, "journal full: " + N(bytes.size()) + " bytes do not fit");
  std::vector<RingPiece> pieces;
  Status s = layout_.Map(tail_, bytes.size(), &pieces);
  const char* p = bytes.data();
  for (size_t i = 0; s.ok() && i < pieces.size(); i++) {
    s = file->Write(pieces[i].offset, pieces[i].len, p);
    p += pieces[i].len;
  }
  return s;
}

Status JournalRing::WriteBatch(File* file, const JournalBatch& b) {
  // Refused before the data sync: nothing about the batch changes on disk.
  if (!Fits(b.bytes.size())) return WriteAtTail(file, b.bytes);
  Status s = CommitJournalBatch(file, b, [&] { return WriteAtTail(file, b.bytes); });
  if (s.ok()) tail_ += b.bytes.size();
  if (s.ok()) durable_lsn_.store(b.last_lsn, std::memory_order_release);  // as JournalWriter: only after the sync
  return s;
}

uint64_t JournalRing::Restart(uint32_t write_unit) {
  // The capacity is a multiple of the AU, which the write unit (<= 4 KiB)
  // divides, so the ring offset of an aligned position is aligned too.
  start_ = tail_ = RoundUp(tail_, write_unit);
  return start_ % layout_.capacity();
}

Status JournalRingSource::Read(uint64_t offset, size_t n, uint8_t* buf) {
  if (offset > size() || n > size() - offset)
    return Status(Code::kInvalidArgument, "journal ring read past its " + N(size()) + " bytes");
  std::vector<RingPiece> pieces;  // at most one per extent, and one for the wrap
  Status s = layout_.Map(start_ + offset, n, &pieces);
  for (size_t i = 0; s.ok() && i < pieces.size(); i++) {
    s = file_->Read(pieces[i].offset, pieces[i].len, buf);
    buf += pieces[i].len;
  }
  return s;
}

Status ClearJournalRuns(File* file, uint32_t au, uint64_t data_offset, const std::vector<JournalExtent>& runs) {
  for (const JournalExtent& r : runs) {
    Status s = ZeroFill(file, data_offset + r.first_au * au, r.aus * au);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// ----------------------------------------------------------------- growth

namespace {

// 3.4: ~48 journal bytes per extent of the map lets each checkpoint cycle
// hold ~170 remapping records per leaf page, so dirty pages stay <= 0.6 % of
// the journal written.
constexpr uint64_t kJournalBytesPerExtent = 48;

// A journal is worth at most a small share of its pool: the rest is for
// data, and a smaller journal costs only more frequent checkpoints, never
// a failed one. At 1/16 every pool of 256 MiB or more keeps the full
// 16 MiB, a small pool's journal stays well inside the room above the
// default soft line (20 %), and a journal reaches 1 GiB only in a pool of
// 16 GiB or more.
constexpr uint64_t kJournalPoolShare = 16;

void GiveBack(const std::vector<JournalExtent>& runs, JournalSpace* space) {
  for (const JournalExtent& r : runs) space->Give(r);
}

// Takes runs from `space` onto the end of *list until it holds `target`
// AUs, has kMaxJournalExtents extents, or nothing is free. A run longer than
// asked is cut and the rest given back; a run right after the last extent
// lengthens it. Returns the runs taken; if an allocation throws, every run
// taken is given back first (a run in no list would be lost to the space).
std::vector<JournalExtent> Fill(std::vector<JournalExtent>* list, uint64_t target, JournalSpace* space) {
  std::vector<JournalExtent> taken;
  try {
    for (uint64_t have = Aus(*list); have < target && list->size() < kMaxJournalExtents;) {
      const uint64_t want = std::min(target - have, kMaxJournalExtentAus);
      std::optional<JournalExtent> got = space->Take(want);
      if (!got || got->aus == 0) break;
      JournalExtent run = *got;
      if (run.aus > want) {
        space->Give({run.first_au + want, run.aus - want});
        run.aus = want;
      }
      try {
        taken.push_back(run);
      } catch (...) {
        space->Give(run);
        throw;
      }
      have += run.aus;
      JournalExtent* last = list->empty() ? nullptr : &list->back();
      if (last && JournalExtentsJoin(*last, run))  // the list's one spelling (superblock_v3.h)
        last->aus += run.aus;
      else
        list->push_back(run);
    }
  } catch (...) {
    GiveBack(taken, space);
    throw;
  }
  return taken;
}

}  // namespace

uint64_t JournalTargetAus(uint64_t map_extents, uint32_t au, uint64_t pool_aus, uint64_t current_aus) {
  const uint64_t by_map = map_extents > kMaxJournalBytes / kJournalBytesPerExtent
                              ? kMaxJournalBytes
                              : map_extents * kJournalBytesPerExtent;
  const uint64_t bytes = std::min(std::max(kDefaultJournalBytes, by_map), kMaxJournalBytes);
  // Whole AUs; a valid AU divides kMaxJournalBytes, so rounding up stays under the cap.
  const uint64_t want = (bytes + au - 1) / au;
  // The pool's share (kJournalPoolShare), rounded down so that it is never
  // exceeded, but one AU at least (a pool may have as few as kMinPoolUnits).
  const uint64_t share = std::max<uint64_t>(pool_aus / kJournalPoolShare, 1);
  return std::max(std::min(want, share), current_aus);
}

JournalPlan GrowJournal(const std::vector<JournalExtent>& current, uint64_t target_aus, JournalSpace* space) {
  JournalPlan plan;
  plan.extents = current;
  const uint64_t have = Aus(current);
  if (have >= target_aus) return plan;

  // Growing keeps the current segments and takes only the difference: the
  // least free space, and no extra punching. What allocates while runs are
  // held is Fill's (which gives them back if it throws) or made first.
  std::vector<JournalExtent> replaced = current;  // plan.freed if fresh runs replace the list
  std::vector<JournalExtent> grown = current;
  std::vector<JournalExtent> taken = Fill(&grown, target_aus, space);
  const uint64_t grown_aus = Aus(grown);
  if (grown_aus < target_aus) {
    // Short of the target (the list is full of short runs, or free space is
    // fragmented): the journal is empty, so fresh runs may replace it all.
    GiveBack(taken, space);
    std::vector<JournalExtent> fresh;
    std::vector<JournalExtent> fresh_taken = Fill(&fresh, target_aus, space);
    if (Aus(fresh) > grown_aus) {
      plan.extents = std::move(fresh);
      plan.allocated = std::move(fresh_taken);
      plan.freed = std::move(replaced);
      return plan;
    }
    GiveBack(fresh_taken, space);
    grown = current;
    taken = Fill(&grown, target_aus, space);  // the same runs again, if nothing else took them
  }
  if (taken.empty()) return plan;  // too fragmented to grow at all: keep the journal
  plan.extents = std::move(grown);
  plan.allocated = std::move(taken);
  return plan;
}

}  // namespace cowstore::store
