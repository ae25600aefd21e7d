// SPDX-License-Identifier: Apache-2.0
// Format v3's incremental checkpoint of the LUNs' extent maps (docs/design/
// store-v3.md 3.4): leaf pages (ckpt_page.h) under an index (ckpt_index.h),
// written by shadowing, persistent-data's copy-on-write B+tree rule.
// FormatV3 (format_v3.h) writes it at each checkpoint and reads it at open.
//
// Shape. A LUN with runs has leaves whose key ranges tile [0, 2^48) of that
// LUN, in order, with no gap (a format rule ReadCkptTree enforces): every LBA
// falls in exactly one leaf, so a dirty range names its leaves and a change
// can never fall between two. A leaf holds the map clipped to its range (a
// run crossing a boundary is stored in two pieces; the reader's inserts join
// them again), with neighbours the map would merge written as one run: a
// leaf page refuses two runs that join (ckpt_page.h, LeafRunsJoin), and a
// map can hold such a pair (ExtentMap::Remove does not merge what it
// leaves). A LUN without runs has no leaves: the tree says nothing of it
// (the LUN table names the LUNs). Index pages are the codec's.
//
// Shadowing. WriteCkptTree writes a new tree next to the previous one and
// never writes a page the previous tree uses: a leaf no dirty range touches
// is named again by its address and sequence; the dirty leaves of a LUN are
// re-packed, with their neighbours only when a range empties, into leaves at
// fresh addresses; an index page whose children are all unchanged is named
// again, every other one is rewritten at a fresh address (so only the index
// pages on changed paths). A crash at any point leaves the previous tree
// whole and still named by the durable superblock.
//
// The commit rule (one place: the engine's checkpoint). 1. WriteCkptTree
// writes and syncs the new pages. 2. The engine writes the superblock naming
// the new root, both slots, and syncs them. 3. Only then may the pages in
// `freed` go back to the allocator: until step 2 is durable, a crash reopens
// the previous tree, which still uses them. Likewise the allocator must never
// hand out a page the previous tree uses (WriteCkptTree refuses one anyway).
//
// The empty index has ONE spelling: kNoIndex (superblock_v3.h: no page, all
// else zero). WriteCkptTree never writes an index page for no leaves, and
// the index codec's IndexRootRule (so the superblock codec and ReadIndex)
// refuses a root with an empty key range, the empty level-0 page the page
// codec can still spell. Why kNoIndex and
// not the page: "nothing" then costs no allocation, so a pool with no LUN
// (just created, or after its last LUN went) needs no metadata page and a
// checkpoint that empties the pool cannot fail for lack of one; the
// superblock codec already checks "none" exactly (no sequence, level or key
// range); and one spelling means a reader never has to treat two images of
// one state as equal.
//
// Not thread-safe: the engine calls it with the maps frozen (under its
// metadata lock or on a copy).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "handler/store/ckpt_index.h"
#include "handler/store/dirty_ranges.h"
#include "handler/store/env.h"  // File
#include "handler/store/extent_map.h"
#include "handler/store/status.h"
#include "handler/store/superblock_v3.h"  // kNoIndex

namespace cowstore::store {

// Runs a leaf is written with when runs are split over new leaves, of the
// kLeafPageRuns (252) it holds: a dirty leaf is rewritten as one leaf as long
// as its runs fit the page, and split only past that, so the slack lets the
// next writes into a fresh leaf (each may split one run into three) rewrite
// that one leaf instead of splitting it, which would also add an entry to its
// index page. So one changed extent usually writes its leaf and one page a
// level (3 pages for 1 M extents, two levels). But a leaf rewritten whole can
// reach 252 runs, and the change that overflows it splits it: two leaves and
// one page a level, 4 pages in two levels (and one page more a level where
// the split also overflows a full index page, which the fill below makes
// rare).
constexpr uint32_t kLeafFillRuns = 224;
// The same one level up, of kIndexPageEntries (100): a leaf split adds an entry.
constexpr uint32_t kIndexFillEntries = 90;

// An index page of a tree, with where it lies.
struct CkptIndexPage {
  uint64_t addr = 0;
  IndexPage page;
};

// Everything the next checkpoint needs of this one to shadow it.
struct CkptTree {
  IndexRoot root = kNoIndex;                       // what the superblock records
  std::vector<IndexEntry> leaves;                  // the level-0 entries, in key order
  std::vector<std::vector<CkptIndexPage>> levels;  // levels[l]: the level-l pages, in key order
  // Every page address the tree uses, leaves and index pages.
  std::vector<uint64_t> Pages() const;
};

// Gives a fresh metadata page's byte address, or the status that stops the
// checkpoint (kNoSpace). Must not give a page the previous tree uses, nor one
// twice.
class PageAllocator {
 public:
  virtual ~PageAllocator() = default;
  virtual Result<uint64_t> Allocate() = 0;
};

struct CkptPool {
  // The pool's UUID and the address bound of every page, as ReadIndex takes
  // them (IndexReadBound(sb) gives it); its seq, level and key range are unused.
  IndexPageExpect bound;
  uint64_t phys_grains = 0;  // every run ends at or below it (sb.grains())
};

struct CkptWrite {
  CkptTree tree;                 // the new tree; tree.root goes into the superblock
  std::vector<uint64_t> written;  // fresh pages written, in write order; on failure the
                                  // pages allocated, to give back (nothing names them). An
                                  // address the writer refused (out of bound, unaligned, one
                                  // the previous tree uses, given twice) is never listed:
                                  // it is the allocator's bug, not a page to give back.
  std::vector<uint64_t> freed;    // pages of the previous tree the new one no longer names:
                                  // free them only after the superblock is durable (above)
};

// Writes checkpoint `seq` of `maps` (LUN -> map; a missing or empty map has
// no leaves) by shadowing `prev` (kNoIndex's empty tree for the first one):
// the leaves of the LUNs `dirty` touches are re-packed, everything else is
// reused. Pages are written through `file` at their addresses, then synced
// once (step 1 of the commit rule); nothing the previous tree uses is
// written.
//
// A sequence is used up by any attempt that may have written a page, whether
// it failed or the machine died in it: a retry takes a new one. Why: the
// allocator may give the retry the same addresses, and if one of its writes
// is lost, the failed attempt's page there is CRC-valid and carries the very
// sequence the new index names, so the exact-sequence check passes and the
// maps silently roll back. Being "after prev" is not enough and this
// function cannot tell (it does not outlive a crash). The engine keeps the
// next sequence in RAM, bumps it on every attempt, and on open first writes
// a superblock with sb.seq + 1 before its first checkpoint, so the sequence
// of an attempt that crashed is never given out again.
//
// kInvalidArgument (nothing written) if seq is not after every
// sequence of `prev` or `prev` is not one consistent tree (each level's
// entries name exactly the pages below it, the root the top page, every
// address once, the leaves tiling their LUNs in LUN order); if the
// allocator gives an address out of the pool's bound, unaligned, one `prev`
// uses or one given twice, kInvalidArgument; a run past pool.phys_grains
// (any leaf the reader's DecodeLeafPage would refuse), kInvalidArgument
// before that leaf is written; the allocator's or the file's
// error as is. On failure `prev` is untouched on disk, out->tree is the
// empty tree, out->freed is empty and out->written lists what to give back.
// `prev` must not be out->tree (kInvalidArgument, *out unchanged): keep the
// previous tree apart and take the new one from *out after success.
Status WriteCkptTree(const CkptPool& pool, uint64_t seq, const std::map<uint32_t, const ExtentMap*>& maps,
                     const DirtyRanges& dirty, const CkptTree& prev, PageAllocator& alloc, File& file,
                     CkptWrite* out);

// The fresh leaves WriteCkptTree writes for `maps`, `dirty` over `prev`,
// counted by its own rule (the stretches of previous leaves it re-packs,
// each packed as it packs them): Freeze's page bound (format_v3.cc) takes
// it as the leaves' share. O(the runs of the re-packed stretches).
uint64_t FreshLeafCount(const std::map<uint32_t, const ExtentMap*>& maps, const DirtyRanges& dirty,
                        const CkptTree& prev);

// The shape rule above for a tree's level-0 entries (in key order): each
// LUN's leaves start at LBA 0, each begins where the one before ends, and
// the last ends at 2^48; a leaf stays in one LUN and the LUNs come in
// increasing order. "" if they obey it, else the first fault.
std::string LeafTilingRule(const std::vector<IndexEntry>& leaves);

// Reads the tree `root` names through `file`: every index page (ReadIndex,
// then the pages decoded again to keep their entries for the next shadowing
// write) and every leaf (DecodeLeafPage with LeafExpectFor; in address
// order, one ascending pass however shadowing scattered them), and replaces
// *maps with the maps of the LUNs that have leaves (bound pool.phys_grains)
// and *tree with the tree. kNoIndex: no maps, the empty tree. kCorruption,
// naming the fault, for what the codecs refuse, a root with an address of
// kNoPage but not kNoIndex, an empty index written as a page (see above), a
// LUN whose leaves do not tile [0, 2^48), a leaf without runs (a LUN without
// runs has no leaves), or a run the map refuses; the
// file's error as is. Leaves the outputs unchanged unless it succeeds.
Status ReadCkptTree(const CkptPool& pool, const IndexRoot& root, File& file,
                    std::map<uint32_t, ExtentMap>* maps, CkptTree* tree);

}  // namespace cowstore::store
