// SPDX-License-Identifier: Apache-2.0
// The grains of one-sync first writes that no durable record vouches for
// yet (store-v3.md 3.6 item 1; plan step 6 part B): Core keeps them
// copy-on-write and holds back their punch until one does.
//
// Why. A kMapChecked record and its data reach the disk under one sync, so
// replay checks the data of every such record no later record of the
// journal vouches for (replay.h, "the CRC rule": the unvouched tail), and
// the first mismatch ends replay there, dropping that record and every
// later one. Once the record's batch is acknowledged, the grains it maps
// must therefore keep exactly the bytes its CRCs name until a durable
// record vouches for it (framed with `proven` >= its LSN, i.e. after its
// batch's sync returned) or a checkpoint takes it out of the journal.
// Changing them earlier loses acknowledged writes at the next power cut:
//   * an overwrite in place (a rewrite of a just-first-written block) would
//     make the record's CRC fail; replay would drop it, the rewrite (which
//     has no record) with it, and every acknowledged record after it: so a
//     write to such a grain goes copy-on-write, with its own checked record;
//   * a punch of a grain freed since (an unmap, a rewrite's copy-on-write, a
//     LUN deleted, in the same batch or the next) zeroes it, and a reuse
//     writes other data into it, with the same effect: "freed grains are not
//     reused before the freeing record is durable" (3.6 item 2) is not
//     enough, since the freeing record may be durable while the checked one
//     is still unvouched (same batch, or a next batch framed before the
//     first's sync returned, whose `proven` stays below it). So Core holds a
//     durably freed run back from the thinner while it holds a grain marked
//     here (Core::held_, pool_impl.h). Once marked grains are vouched for,
//     a reuse is safe: replay never checks that record again.
// Nothing else changes a grain's bytes: a clone only adds references.
//
// Cost: Mark and Unvouched are O(log n) in the ranges held, Vouch O(ranges
// held). Every mark is forgotten by the first Vouch at or past its LSN,
// which comes with the second batch committed after the mark's (the first
// whose records were framed after the mark's batch's sync): so a mark is
// visited by at most a few Vouches, and memory is the grains not vouched
// for, a batch or two of small writes. Empty (every call O(1)) on formats
// 1 and 2, which never write the record.
//
// Not thread-safe: Core guards it with its metadata lock.
#pragma once

#include <cstdint>
#include <vector>

#include "handler/store/meta.h"
#include "handler/store/range_values.h"

namespace cowstore::store {

class CheckedGrains {
 public:
  // Nodes for marking `runs` runs: allocated before the record is appended,
  // so the marking that follows cannot fail (a record appended without its
  // marks would let an in-place write break it).
  static RangeValues::Spare SpareFor(size_t runs) {
    return RangeValues::Spare(RangeValues::kAssignNodes * runs);
  }
  // The kMapChecked record with LSN `lsn` maps `runs`' grains. Never throws
  // with a Spare from SpareFor(runs.size()).
  void Mark(const std::vector<Run>& runs, uint64_t lsn, RangeValues::Spare* spare) {
    for (const Run& r : runs) marks_.Assign(r.phys, r.len, lsn, spare);
  }
  // True if grain p is mapped by a checked record not vouched for yet.
  bool Unvouched(uint64_t p) const {
    uint64_t lsn;
    return !marks_.empty() && marks_.Find(p, &lsn) && lsn > vouched_;
  }
  // The highest LSN of an unvouched checked record mapping a grain of
  // [start, start+len): 0 if none. Vouch(that) frees the range.
  uint64_t NeededLsn(uint64_t start, uint64_t len) const {
    uint64_t need = 0;
    if (!marks_.empty())
      marks_.Visit(start, len, [&](uint64_t, uint64_t, uint64_t lsn) {
        if (lsn > vouched_ && lsn > need) need = lsn;
      });
    return need;
  }
  // Calls f(start, len) for the marked pieces of [start, start+len) not
  // vouched for, clipped to it, in order.
  template <typename F>
  void VisitUnvouched(uint64_t start, uint64_t len, F f) const {
    if (marks_.empty()) return;
    marks_.Visit(start, len, [&](uint64_t s, uint64_t n, uint64_t lsn) {
      if (lsn > vouched_) f(s, n);
    });
  }
  // Every checked record with an LSN up to `lsn` is vouched for (a durable
  // record's `proven`) or out of the journal (a checkpoint's). Never
  // throws (erasing frees nodes only).
  void Vouch(uint64_t lsn) {
    if (lsn <= vouched_) return;
    vouched_ = lsn;
    marks_.EraseIf([lsn](uint64_t v) { return v <= lsn; });
  }
  uint64_t vouched() const { return vouched_; }
  bool empty() const { return marks_.empty(); }
  uint64_t grains() const { return marks_.grains(); }  // tests

 private:
  RangeValues marks_;  // grain -> LSN of the newest checked record mapping it
  uint64_t vouched_ = 0;
};

}  // namespace cowstore::store
