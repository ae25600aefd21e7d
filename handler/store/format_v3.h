// SPDX-License-Identifier: Apache-2.0
// FormatV3: pool format 3 behind MetaFormat (meta_format.h; store-v3.md 3.4,
// 3.6, 3.7, plan step 5d): Create, the superblock choice, journal commits
// over the ring, checkpoints (the LUN table and the maps' tree) and
// LoadState of what they wrote and of the journal after it.
// Core serves it at any grain GrainRule allows (PoolOptions::format 3,
// `cowctl pool create`'s default; below the AU its space map counts grains,
// grain_space.h), and calls the growing WriteCheckpoint.
//
// Where a new pool's pieces go (Create), in AUs of the data area:
//   bytes [0, 8 KiB)     both superblock slots (superblock_v3.h), one record
//                        at sequence 1 in each, byte for byte: the writer
//                        rule's steady state, so the chooser finds them
//                        redundant and no open has a slot to rewrite.
//   [8 KiB, data_offset) unused: the data area starts at the first AU
//                        boundary past the slots (data_offset = AU), since
//                        the codec wants it AU-aligned and pages address
//                        the data area only.
//   AU 0                 the metadata chunk (3.4 "Where pages go": pages
//                        come from AU-sized chunks taken from free space):
//                        its first 4 KiB hold the LUN table of no records
//                        (checkpoint sequence 1, next LUN id 1); the rest is
//                        free for the pages of later checkpoints. Next to
//                        the superblocks, so an open reads the metadata
//                        from the front of the device.
//   AUs [1, 1 + J)       the journal, one extent (JournalExtent) of J =
//                        journal bytes rounded up to whole AUs (its segments
//                        are AUs); replay starts at offset 0 with a random
//                        LSN (NewPoolJournalStartLsn, as v2). After the
//                        metadata chunk rather than before it, so the AUs
//                        following the journal are free data space at
//                        first and GrowJournal can lengthen its one extent
//                        in place (JournalExtentsJoin).
//   AUs [1 + J, units)   data, at least kMinPoolUnits of them (v2 keeps 8
//                        AUs beside its journal too).
// There is no index (kNoIndex): a pool without mapped LUNs has no leaf.
//
// Checkpoints (3.4, 3.6 item 5). Pages (the LUN table's chain, the tree's
// leaves and index pages: WriteLunTable, WriteCkptTree) go into metadata
// chunks: AUs that hold live pages of the current checkpoint, then AUs Core
// hands over (WriteCheckpoint's `units`, Freeze's meta_units of them: a
// bound on the pages the checkpoint may write, less the pages free in the
// chunks). A page is free when the current checkpoint does not name it, so
// no page of the previous checkpoint is written before the superblock that
// replaces it is durable; the chunks are then re-derived from the pages the
// new checkpoint names (meta_units()), and every other AU (a chunk emptied,
// a handed-over AU not used) leaves it, for Core's InstallMeta to retire or
// free by meta_turnover.h's one rule. Order: pages, sync,
// superblock to slot seq % 2, sync, the other slot, sync, the journal
// restarted at `start_lsn` from the tail rounded up to the write unit.
// Given a JournalSpace (WriteCheckpoint's overload), a checkpoint also grows
// the journal with the map (3.4, GrowJournal): its new runs cleared with the
// pages, before the superblock naming the new list, the ring restarted at
// that list's offset 0. Grow declares more AUs by a superblock naming the
// current checkpoint (the spend write below, with a new size).
// Sequences: every attempt takes a sequence above every earlier attempt's,
// even across crashes: an attempt uses the durable superblock's sequence
// + 1 only if no attempt may have used it yet; otherwise (the first
// checkpoint after an open, or after a failed attempt or Grow) a superblock naming
// the current checkpoint is written first, both slots synced, under the
// sequence after the highest this format wrote (a failed attempt's
// superblock may be on disk, in both slots, under the one after the
// durable superblock's: no other copy may carry it), so that a page a lost write left from an
// attempt never carries the sequence a later index names (ckpt_tree.h says
// why).
//
// Writes: first the open's half of the writer rule (PrepareWrites, before
// the first write of any kind: Core's open punches free AUs the older copy
// may still use, then checkpoints): a sync, since the chosen copy may be
// in the cache only (a process that died before its sync wrote it), then a
// slot not holding the chosen copy is rewritten with it, synced (the
// format's first superblock write, of a new sequence, goes to slot
// seq % 2, which may hold the chosen copy, then the pool's only valid
// one). A superblock write that fails (or a failed sync of this format's)
// leaves its slot in doubt: the next superblock write does that half again
// first (a sync cures a process that died, not a failed fsync:
// SettleSlots in format_v3.cc); so does a WriteCheckpoint or Grow not preceded by PrepareWrites.
// Then the open's checkpoint (CommitBatch refuses until one succeeded: the
// replayed ring may hold stale records past its tail); CommitBatch then
// appends to the journal ring (JournalRing, in CommitJournalBatch's order).
//
// Load: the LUN table (records and next LUN id) and the tree the index root
// names (ReadCkptTree), each LUN's map the tree's, then the journal's
// records from the replay start (ReplayJournal over JournalRing, ApplyRecord
// as v2), all into a state that replaces *st only when every step passed.
// The metadata AUs Core must not hand out are the chunks (the AUs of every
// page the superblock names, through the chain and the tree) and the
// journal's (LoadedMeta::meta_units).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "handler/store/ckpt_tree.h"
#include "handler/store/dirty_ranges.h"
#include "handler/store/journal_segments.h"  // JournalRing
#include "handler/store/meta_format.h"
#include "handler/store/superblock_v3.h"

namespace cowstore::store {

// What a checkpoint given a JournalSpace did to the journal's AUs
// (FormatV3::WriteCheckpoint): empty unless it succeeded and changed the
// journal's list.
struct JournalGrowth {
  // Runs taken from the space that the journal now holds: in meta_units(),
  // never the caller's to free while this checkpoint is current.
  std::vector<JournalExtent> allocated;
  // The journal's extents it no longer lists: out of meta_units() from the
  // return on (the superblock that drops them is durable; they hold old
  // records only, which an open punches as any free run). A report only:
  // the caller does not free them, InstallMeta retires them as every AU
  // the previous meta_units() named and the new one does not
  // (meta_turnover.h).
  std::vector<JournalExtent> freed;
};

class FormatV3 final : public MetaFormat {
 public:
  // `device_bytes`: the file's or device's size, the bound the superblock
  // codec checks every address against.
  explicit FormatV3(uint64_t device_bytes) : device_bytes_(device_bytes) {}

  // Lays out a new, empty format 3 pool of `size` bytes on `file` (see the
  // layout above): the file extended to `size` (a block device must hold
  // it: the caller's check, as for v2), the journal's AUs cleared and the
  // LUN table page written, synced before the superblocks that name them,
  // then both slots, synced. kInvalidArgument, with nothing written, for an
  // AU off ValidAllocationUnit, a grain off GrainRule, a soft threshold
  // above 100, a journal size off JournalBytesRule, a size that cannot hold
  // the metadata chunk, the journal and kMinPoolUnits data AUs, or more
  // than PoolUnitsRuleV3 allows. The caller has checked that no pool is
  // there (Core::Create's check). `journal_bytes` is taken as given (Core
  // passes PoolOptions::journal_bytes, 16 MiB when 0), even above the share
  // of the pool JournalTargetAus grows a journal to: such a journal is
  // kept, never shrunk, and only stops growing.
  static Status Create(File* file, const Uuid& uuid, uint32_t au, uint32_t grain, uint64_t size,
                       uint64_t journal_bytes, uint32_t soft_threshold_percent);
  // The smallest `size` Create accepts (the layout above): the superblocks'
  // AU, the metadata chunk, the journal and kMinPoolUnits AUs of data.
  static uint64_t MinPoolBytes(uint32_t au, uint64_t journal_bytes);

  // The write of an upgrade from format 1 or 2 (store-v3.md 3.7; upgrade.h
  // plans it, Pool::Upgrade runs it): `st`'s LUN table and maps (in grains
  // of sb.grain) as a full checkpoint whose pages go into `page_aus` (AUs
  // the old state leaves free, in that order), sb.journal's runs cleared,
  // all synced; then `sb`, its index and LUN table roots set here, into
  // slot sb.seq % 2, synced, and the same bytes into the other slot,
  // synced. The first durable slot write is the upgrade's commit point:
  // before it every slot holds the old format (the pages and the journal
  // lie in AUs that format calls free), after it the v3 chooser takes the
  // new copy and its open rewrites the other slot. kInvalidArgument,
  // nothing written, for what the superblock codec refuses; kNoSpace,
  // nothing written past the cleared journal and pages in `page_aus`,
  // when the pages do not fit. *pages: how many pages were written.
  static Status WriteUpgrade(File* file, SuperblockV3 sb, const MetaState& st, const std::vector<uint64_t>& page_aus,
                             uint64_t* pages);
  // The AUs WriteUpgrade may need for the pages of `luns` LUNs holding
  // `extents` runs (the checkpoint bound's rule over an empty tree).
  static uint64_t UpgradePageAus(uint32_t au, uint64_t luns, uint64_t extents);

  // ChooseSuperblockV3 over the slots; the choice is kept (which slot, and
  // what the other holds, for the open that must rewrite it).
  Status ChooseSuperblock(const SuperblockSlots& slots, PoolGeometry* g) override;
  // Reads the LUN table and the tree into *st (LUNs, their maps, the next
  // LUN id) and replays the journal ring from the replay start; *out's
  // verdict is replay's (a torn tail is clean; a damaged or newer journal
  // is reported for Core, as v2's). kCorruption for what the page codecs
  // refuse, a page named twice or inside the journal, a map of a LUN the
  // table does not hold; a record ApplyRecord refuses, as it refuses it.
  // *st and the format are unchanged unless it succeeds (an exception
  // too: the commit only moves).
  Status LoadState(File* file, MetaState* st, LoadedMeta* out) override;
  // The writer rule's open half (SettleSlots; header comment, "Writes"):
  // at open, afterwards both slots hold the chosen copy, durably and byte
  // for byte.
  // kInvalidArgument, nothing written, before LoadState. On failure it is
  // left whole for the next call (or superblock write) to do again.
  Status PrepareWrites(File* file) override;

  // The journal ring from LoadState on (before it: nothing fits, nothing
  // was committed).
  bool Fits(size_t bytes) const override { return ring_ && ring_->Fits(bytes); }
  // JournalRing::WriteBatch, once the open's checkpoint succeeded.
  // kInvalidArgument, nothing written, between LoadState and that
  // checkpoint: a replay that ended at a torn tail may leave stale CRC-valid
  // records right after it, and records appended there could let a later
  // replay chain a stale record after a new one (the checkpoint restarts
  // the ring at the write unit after the tail, maybe onto them, but under a
  // start LSN above every LSN they may carry). kInvalidArgument, nothing
  // written, after a failed checkpoint too (WriteCheckpoint); kNoSpace,
  // nothing written, when the batch does not fit; on any failure the ring's
  // tail and durable LSN stay.
  Status CommitBatch(File* file, const JournalBatch& b) override;
  bool journal_empty() const override { return !ring_ || ring_->tail() == ring_->start(); }
  // 0 until a batch or a checkpoint is committed (LoadState vouches for
  // none of the records it replayed: 0 vouches for nothing, which
  // meta_format.h allows, a stale value vouching for less). ring_ is
  // engaged by LoadState, before the pool is shared.
  uint64_t durable_lsn() const override { return ring_ ? ring_->durable_lsn() : 0; }
  uint64_t superblock_seq() const override { return choice_.sb.seq; }
  // Copies what the checkpoint writes (LUN records, next LUN id, every map
  // with runs: O(extents) under Core's metadata lock, as v2's encoding; the
  // writer reads only the dirty LUNs' maps, but needs every LUN with leaves
  // present) and asks for meta_units AUs: the pages it may write (its LUN
  // table pages, and a bound on the leaves and index pages WriteCkptTree
  // writes for `dirty`) less the pages free in the current chunks. `dirty`
  // must cover every map change since the last checkpoint (dirty_ranges.h;
  // Core's, marked by ApplyRecord) but those the format adds itself: a
  // failed attempt's set, and after an open that replayed records every
  // LUN (until a checkpoint succeeds). The one-argument form marks every
  // LUN dirty, so every leaf is rewritten (tests: the full checkpoint an
  // incremental one must equal); not MetaFormat's, so Core cannot call it
  // by mistake. Before LoadState: no detail and no AU asked for, which
  // WriteCheckpoint refuses.
  // The result names this format by its address (WriteCheckpoint checks it
  // is this format's): it must never outlive the format, or a format later
  // built at the same address could take it for its own.
  bool tracks_dirty() const override { return true; }
  bool writes_checked_maps() const override { return true; }
  FrozenCheckpoint Freeze(const MetaState& st, const DirtyRanges& dirty) const override;
  FrozenCheckpoint Freeze(const MetaState& st) const;
  std::shared_ptr<const CheckpointCost> NextCheckpointCost() const override;
  // The pages a Freeze bounded its checkpoint's writes by (the LUN table's
  // and the tree's; 0 for a Freeze of no detail or another format's): tests
  // hold what a checkpoint wrote against it, which the free pages of the
  // chunks would otherwise hide.
  static uint64_t PagesBound(const FrozenCheckpoint& f);
  // Of those, the fresh leaves, exactly as many as its checkpoint writes
  // (FreshLeafCount; 0 as above).
  static uint64_t FreshLeaves(const FrozenCheckpoint& f);
  // The checkpoint (header comment): `f` must be this format's latest
  // Freeze (kInvalidArgument, nothing written, for a Freeze from before
  // another checkpoint) and `units` free AUs outside the chunks and the
  // journal (kInvalidArgument, nothing written); until a checkpoint after
  // LoadState succeeded, `start_lsn` at least kLsnGapAfterOpen past the
  // replayed records' (kInvalidArgument, nothing written: meta_format.h).
  // kNoSpace when the pages do not fit the chunks and `units`. On success meta_units() is the new
  // checkpoint's; on failure (a status, or an exception such as bad_alloc:
  // whatever allocates runs before the superblock write, the commit after
  // it only moves) every in-memory state is the previous
  // checkpoint's, the frozen dirty set is carried into the next Freeze
  // (merging it back too is harmless), the next attempt writes a
  // superblock first (above), and CommitBatch refuses until a checkpoint
  // succeeds: the disk may already name this attempt's journal start.
  Status WriteCheckpoint(File* file, const FrozenCheckpoint& f, const std::vector<uint64_t>& units,
                         uint64_t start_lsn) override;
  // The same checkpoint, growing the journal with the map (3.4): the list
  // the new superblock names is GrowJournal(current extents,
  // JournalTargetAus(the frozen maps' extents, AU, the pool's AUs, the
  // journal's AUs), space): the journal sized with the map, within 1/16 of
  // the pool, never shrunk. When the plan changes the list, its new runs
  // are cleared (ClearJournalRuns: they held data, which may frame as
  // records) and synced with the pages before the superblock that names
  // them, and the ring restarts at offset 0 of the new list (its kept
  // segments hold records of lower LSNs only); else the ring restarts in
  // place as without `space`. Who frees what:
  //  * runs GrowJournal takes and does not keep it gives back itself;
  //  * on success *growth (if given) names the runs kept (now journal AUs,
  //    in meta_units()) and the extents dropped (out of meta_units(): the
  //    caller's InstallMeta of meta_units() retires them, as the chunks no
  //    longer listed; growth is a report, nothing to free by it);
  //  * on failure (a status, or an exception) every run the plan kept is
  //    given back to `space` before the return, *growth is empty and the
  //    format keeps the previous journal (list, ring, meta_units()). The
  //    failed attempt's superblock may still be on disk naming those runs,
  //    as it may name pages in `units`: like them they must hold no data
  //    until a checkpoint succeeds or the pool is reopened (Core fails the
  //    pool after a failed checkpoint), so `space` must not hand them out
  //    again before then (PoolJournalSpace keeps every run given back).
  // kInvalidArgument, nothing written and the runs given back, for a run
  // taken that is not a free AU outside the checkpoint's (the chunks, the
  // journal, `units`).
  Status WriteCheckpoint(File* file, const FrozenCheckpoint& f, const std::vector<uint64_t>& units,
                         uint64_t start_lsn, JournalSpace* space, JournalGrowth* growth);
  // Declares the pool's data area (new_size - data_offset) / AU AUs: a
  // superblock naming the current checkpoint and journal with the new
  // size, by the writer rule as a checkpoint's (a sync first when the
  // chosen copy may be in the cache only, the other slot rewritten if the
  // chooser or a failed write left it in doubt; slot seq % 2, sync, the
  // other, sync), under a sequence above every one this format wrote, so it is
  // also the spend write a checkpoint would otherwise make first. The
  // caller has made the device hold new_size (Core::Grow: truncate, sync).
  // kInvalidArgument, nothing written: before LoadState, a size that adds
  // no whole AU (or shrinks), more AUs than PoolUnitsRuleV3 allows, or what
  // the codec refuses. The format changes only once both slots are synced.
  // On failure the format holds the old size, and either slot may hold the
  // new superblock, whole or torn: the disk opens at the old size or the
  // new one (nothing lies in the new AUs: Core hands them out only after
  // Grow succeeded). What follows a failed Grow stays safe: batches may
  // commit (both copies name the same journal start and LSN); the next
  // superblock write (a checkpoint or a Grow) first rewrites the slot in
  // doubt with the chosen copy, then takes a sequence above the failed
  // one's (a checkpoint spends one first), and a checkpoint declares the
  // old size again (Core fails the pool on a failed Grow anyway).
  // PoolUnitsRuleV3 at the loaded pool's AU and grain (before LoadState,
  // which Grow needs anyway, it says so).
  std::string UnitsRule(uint64_t aus) const override;
  Status Grow(File* file, uint64_t new_size) override;

  // The AUs the current checkpoint occupies, sorted: the chunks holding its
  // pages and the journal's. After LoadState, LoadedMeta::meta_units; after
  // a checkpoint, what Core keeps as metadata (every other AU it handed
  // over, and every chunk no longer listed, it may free: the superblock
  // naming the new pages is durable).
  std::vector<uint64_t> meta_units() const override { return UnitsOf(chunks_); }
  // The current checkpoint's tree (tests: which pages it names).
  const CkptTree& tree() const { return tree_; }
  const std::vector<uint64_t>& lun_table_pages() const { return lun_pages_; }

  // The chosen copy and what the other slot holds (tests; SettleSlots).
  const SuperblockChoice& choice() const { return choice_; }

 private:
  // Names a slot that is not redundant beside an error from what the chosen
  // copy names (ok passes through), as FormatV2::Fallback.
  Status Fallback(const Status& s) const;
  // The writer rule's open half (superblock_v3.h), unless slots_settled_:
  // a sync (the chosen copy may be in the cache only), then, unless both
  // slots hold the chosen copy, it is written into the other slot, synced,
  // so that no later fault can fall back to that slot's older state (a
  // stale or damaged copy, or the v2 copy of an upgrade cut between its two
  // slot writes, which this completes: store-v3.md 3.7) once writes moved
  // past it. The chosen copy is re-encoded: the codec has one spelling and
  // a valid slot's tail is zeros, so both slots then match byte for byte.
  Status SettleSlots(File* file);
  // WriteCheckpoint's work; *plan holds the runs the journal's growth kept,
  // which WriteCheckpoint gives back when this fails.
  Status CheckpointBody(File* file, const FrozenCheckpoint& f, const std::vector<uint64_t>& units,
                        uint64_t start_lsn, JournalSpace* space, JournalPlan* plan, JournalGrowth* growth);
  // The writer rule (superblock_slots.h): slot sb.seq % 2, sync, the
  // other slot, sync. On success both slots hold `sb` and it is the choice
  // (moved in: nothing allocates once the writes are durable); on a failure
  // once a slot was written, that slot is the choice's `other`, not
  // redundant.
  Status WriteSuperblock(File* file, SuperblockV3 sb);
  // The pages a checkpoint names (its tree and LUN table chain), sorted.
  static std::vector<uint64_t> PagesOf(const CkptTree& tree, const std::vector<uint64_t>& lun_pages);
  // The chunks of those pages (their AUs). Computed before the state they
  // belong to is committed, which then only moves and swaps: a bad_alloc
  // never leaves the format half updated.
  std::set<uint64_t> ChunksOf(const CkptTree& tree, const std::vector<uint64_t>& lun_pages) const;
  // `chunks` and the journal's AUs, sorted (meta_units()).
  std::vector<uint64_t> UnitsOf(const std::set<uint64_t>& chunks) const;
  uint64_t AuOf(uint64_t addr) const { return (addr - choice_.sb.data_offset) / choice_.sb.au; }

  uint64_t device_bytes_;
  SuperblockChoice choice_;  // choice_.sb: the newest durable superblock
  // No slot is in doubt: each holds a durable, valid copy a fallback may
  // open (choice_.sb, or a failed attempt's under a sequence no later write
  // reuses), set by SettleSlots or a superblock write that succeeded: the
  // next superblock write owes no sync or rewrite first. False from
  // ChooseSuperblock, and from each slot write on until that write's
  // superblock is durable in both slots.
  bool slots_settled_ = false;
  std::optional<JournalRing> ring_;  // engaged by LoadState
  // The current checkpoint, as the newest durable superblock names it.
  CkptTree tree_;
  std::vector<uint64_t> lun_pages_;  // the LUN table's chain
  std::set<uint64_t> chunks_;        // AUs holding pages of lun_pages_ or tree_
  uint64_t checkpoints_ = 0;  // checkpoints written: a Freeze is for the tree of its count
  // Whether an attempt may have written pages under choice_.sb.seq + 1 (an
  // attempt of the last session, or one that failed): then that sequence
  // is spent by a superblock write before the next attempt (header comment).
  bool seq_spent_ = true;
  // The highest sequence this format wrote a superblock or pages under (a
  // failed attempt's may be above choice_.sb.seq, and on disk): the spend
  // write takes the next above it, never one a failed attempt used.
  uint64_t highest_seq_used_ = 0;
  // Marks every Freeze adds to its caller's until a checkpoint succeeds:
  // failed attempts' sets, and every LUN after a replay applied records.
  DirtyRanges carried_dirty_;
  // A checkpoint attempt failed after its first write: the disk may name
  // the attempt's journal start, past records the ring would still append
  // (meta_format.h: Core fails the pool). Until a checkpoint succeeds,
  // CommitBatch refuses.
  bool ckpt_failed_ = false;
  // Set by LoadState until a checkpoint succeeds: CommitBatch refuses
  // (CommitBatch's comment says why).
  bool needs_open_ckpt_ = false;
  // The LSN after the replayed records (LoadState): while needs_open_ckpt_,
  // a checkpoint's start LSN must be kLsnGapAfterOpen past it.
  uint64_t replayed_next_lsn_ = 0;
};

}  // namespace cowstore::store
