// SPDX-License-Identifier: Apache-2.0
// The shadowing writer of ckpt_tree.h (the reader is ckpt_tree_read.cc).
#include "handler/store/ckpt_tree.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_set>

#include "handler/store/ckpt_page.h"

namespace cowstore::store {

namespace {

std::string N(uint64_t v) { return std::to_string(v); }

Status Invalid(const std::string& what) { return Status(Code::kInvalidArgument, "checkpoint tree: " + what); }

// Calls fn(run) for the map's runs clipped to [first, end), in order, as
// leaves hold them, until fn returns false: neighbours that join
// (LeafRunsJoin) made one run, left to right. A map can hold such a pair:
// Remove does not merge the pieces it leaves, so cutting the head off the
// first of two contiguous runs too long to merge leaves two that would. A
// leaf page refuses the pair (one spelling per map), so it is written as the
// run the map means. Joining greedily leaves no pair that joins: a run that
// could not join the one before it cannot once either has grown. Streamed
// from the map, never copied: a re-packed stretch may be a whole LUN of
// millions of runs (the open's checkpoint after a replay).
template <typename Fn>
void VisitJoined(const ExtentMap& map, uint64_t first, uint64_t end, Fn fn) {
  Run cur;
  bool have = false, more = true;
  map.Visit(first, end - first, [&](const Run& r) {
    if (have && LeafRunsJoin(cur, r)) {
      cur.len += r.len;
      return true;
    }
    if (have && !fn(cur)) {
      more = false;
      return false;
    }
    cur = r;
    have = true;
    return true;
  });
  if (more && have) fn(cur);
}

// Where each page of n items starts, for pages that hold `cap` and are
// filled to `fill` when written: n items that fit one page stay one page
// (a dirty leaf that grew a little is rewritten, not split, so its parent
// keeps its entry count); more are split into ceil(n / fill) pages as even
// as they can be, so every new page gets the same slack for later growth.
std::vector<size_t> PageStarts(size_t n, size_t cap, size_t fill) {
  const size_t k = n == 0 ? 0 : n <= cap ? 1 : (n + fill - 1) / fill;
  std::vector<size_t> starts;
  for (size_t c = 0; c < k; c++) starts.push_back(n * c / k);
  return starts;
}

// Where each leaf of `joined` runs (VisitJoined) starts: Pack's rule.
std::vector<size_t> LeafStarts(size_t joined) { return PageStarts(joined, kLeafPageRuns, kLeafFillRuns); }

// Calls fn(lun, map, begin, end) for each LUN with runs in `maps`, with its
// previous leaves [begin, end) of prev.leaves (key order: a LUN's leaves
// are one stretch of them); a LUN without runs gets no leaves (its previous
// ones are freed). Stops at the first error.
template <typename Fn>
Status ForEachLunWithRuns(const std::map<uint32_t, const ExtentMap*>& maps, const CkptTree& prev, Fn fn) {
  std::set<uint32_t> luns;
  for (const auto& [lun, m] : maps) luns.insert(lun);
  for (const IndexEntry& e : prev.leaves) luns.insert(e.first.lun);
  size_t at = 0;
  for (uint32_t lun : luns) {
    const size_t begin = at;
    while (at < prev.leaves.size() && prev.leaves[at].first.lun == lun) at++;
    auto m = maps.find(lun);
    const ExtentMap* map = m == maps.end() ? nullptr : m->second;
    if (map == nullptr || map->extents() == 0) continue;
    if (Status s = fn(lun, *map, begin, at); !s.ok()) return s;
  }
  return Status::Ok();
}

// A stretch of a LUN's previous leaves that is re-packed: leaves [i, j) of
// the LUN's (relative to its first), the LBAs [first, end) they tile, and
// how many runs the new leaves hold there (VisitJoined's; the runs stay in
// the map).
struct Stretch {
  size_t i = 0, j = 0;
  uint64_t first = 0, end = 0;
  size_t runs = 0;
};

// VisitJoined's count over [first, end).
size_t JoinedCount(const ExtentMap& map, uint64_t first, uint64_t end) {
  size_t n = 0;
  VisitJoined(map, first, end, [&n](const Run&) {
    n++;
    return true;
  });
  return n;
}

// The stretches of LUN `lun` (previous leaves [begin, end) of `prev`) that
// are re-packed, in key order: every previous leaf is named again but
// those in a stretch. A LUN new to the tree is one stretch, all its LBAs.
// Otherwise the maximal runs of previous leaves a dirty range touches; one
// whose LBAs hold no run takes a neighbour in (no leaf may be empty): the
// next leaf, else the previous one. kInvalidArgument when the map has runs
// outside the previous leaves.
Status TouchedStretches(uint32_t lun, const ExtentMap& map, const std::vector<IndexEntry>& prev, size_t begin,
                        size_t end, const DirtyRanges& dirty, std::vector<Stretch>* out) {
  out->clear();
  if (begin == end) {
    Stretch st;
    st.end = ExtentMap::kMaxLba;
    st.runs = JoinedCount(map, 0, ExtentMap::kMaxLba);
    out->push_back(std::move(st));
    return Status::Ok();
  }
  std::vector<bool> touched(end - begin);
  for (size_t i = begin; i < end; i++) touched[i - begin] = dirty.Touches(lun, prev[i].first.lba, prev[i].end.lba);
  for (size_t i = 0; i < touched.size();) {
    if (!touched[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < touched.size() && touched[j]) j++;
    Stretch st;
    st.i = i;
    st.j = j;
    st.first = prev[begin + i].first.lba;
    st.end = prev[begin + j - 1].end.lba;
    st.runs = JoinedCount(map, st.first, st.end);
    if (st.runs == 0) {
      // The next leaf, else the previous one (named again by no stretch:
      // the stretch is maximal). The map holds a run, so some leaf of the
      // LUN has one.
      if (j < touched.size()) {
        touched[j] = true;
      } else {
        if (i == 0) return Invalid("LUN " + N(lun) + " has runs outside its previous leaves");
        touched[--i] = true;
      }
      continue;
    }
    out->push_back(std::move(st));
    i = j;
  }
  return Status::Ok();
}

// What WriteCkptTree assumes of the previous tree, so that a caller's bug
// cannot make it drop a change or overwrite a page: one consistent tree, each
// level's entries naming exactly the pages below it, every address once, the
// leaves tiling their LUNs. O(pages).
std::string PrevTreeRule(const CkptTree& t, uint64_t seq) {
  if (t.root == kNoIndex)
    return t.leaves.empty() && t.levels.empty() ? "" : "kNoIndex with leaves or index pages";
  if (t.levels.empty() || t.levels.size() != t.root.level + 1 || t.levels.back().size() != 1 || t.leaves.empty())
    return "levels that do not end in the root page";
  if (t.root.entry.seq >= seq) return "sequence " + N(seq) + " is not after the previous " + N(t.root.entry.seq);
  for (uint32_t l = 0; l < t.levels.size(); l++) {
    std::vector<IndexEntry> named;  // the level's entries, in order
    for (const CkptIndexPage& p : t.levels[l]) {
      if (p.page.level != l) return "level-" + N(l) + " page at " + N(p.addr) + " says level " + N(p.page.level);
      named.insert(named.end(), p.page.entries.begin(), p.page.entries.end());
    }
    if (l == 0) {
      if (named != t.leaves) return "the level-0 pages' entries are not the leaves";
      continue;
    }
    std::vector<IndexEntry> below;
    for (const CkptIndexPage& p : t.levels[l - 1]) below.push_back(EntryFor(p.page, p.addr));
    if (named != below) return "the level-" + N(l) + " pages' entries do not name the level-" + N(l - 1) + " pages";
  }
  const CkptIndexPage& top = t.levels.back()[0];
  if (EntryFor(top.page, top.addr) != t.root.entry) return "the root does not name the top page";
  std::unordered_set<uint64_t> seen;
  for (uint64_t a : t.Pages())
    if (!seen.insert(a).second) return "address " + N(a) + " used twice";
  return LeafTilingRule(t.leaves);
}

class Writer {
 public:
  Writer(const CkptPool& pool, uint64_t seq, const CkptTree& prev, PageAllocator& alloc, File& file,
         CkptWrite* out)
      : pool_(pool), seq_(seq), prev_(prev), alloc_(alloc), file_(file), out_(out) {
    for (uint64_t a : prev.Pages()) prev_pages_.insert(a);
  }

  Status WriteAll(const std::map<uint32_t, const ExtentMap*>& maps, const DirtyRanges& dirty) {
    Status lun_status = ForEachLunWithRuns(maps, prev_, [&](uint32_t lun, const ExtentMap& map, size_t begin,
                                                            size_t end) { return WriteLun(lun, map, begin, end, dirty); });
    if (!lun_status.ok()) return lun_status;
    CkptTree& t = out_->tree;
    if (!t.leaves.empty()) {
      std::vector<IndexEntry> children = t.leaves;
      for (uint32_t level = 0;; level++) {
        static const std::vector<CkptIndexPage> kNone;
        const auto& prev_level = level < prev_.levels.size() ? prev_.levels[level] : kNone;
        std::vector<CkptIndexPage> pages;
        if (Status s = WriteLevel(level, children, prev_level, &pages); !s.ok()) return s;
        t.levels.push_back(std::move(pages));
        const std::vector<CkptIndexPage>& made = t.levels.back();
        if (made.size() == 1) {
          t.root = IndexRoot{EntryFor(made[0].page, made[0].addr), level};
          break;
        }
        if (level == kIndexMaxLevel) return Invalid("the index needs more than " + N(kIndexMaxLevel + 1) + " levels");
        children.clear();
        for (const CkptIndexPage& p : made) children.push_back(EntryFor(p.page, p.addr));
      }
    }
    if (!out_->written.empty())
      if (Status s = file_.Sync(); !s.ok()) return s;
    std::unordered_set<uint64_t> kept;
    for (uint64_t a : t.Pages()) kept.insert(a);
    for (uint64_t a : prev_.Pages())
      if (!kept.count(a)) out_->freed.push_back(a);
    return Status::Ok();
  }

 private:
  // A fresh page from the allocator, refused unless the pool's bound holds
  // it and neither the previous tree nor this write uses it: shadowing's
  // guarantee must not rest on the allocator alone.
  Result<uint64_t> Fresh() {
    Result<uint64_t> r = alloc_.Allocate();
    if (!r.ok()) return r.status();
    const uint64_t a = *r;
    if (Status s = CheckPageAddress(Code::kInvalidArgument, a, pool_.bound.addr_begin, pool_.bound.addr_end); !s.ok())
      return Invalid("allocator gave " + s.message());
    if (prev_pages_.count(a)) return Invalid("allocator gave address " + N(a) + ", a page the previous tree uses");
    if (!given_.insert(a).second) return Invalid("allocator gave address " + N(a) + " twice");
    out_->written.push_back(a);
    return a;
  }

  Result<uint64_t> WriteFresh(const std::string& bytes) {
    Result<uint64_t> a = Fresh();
    if (!a.ok()) return a;
    if (Status s = file_.Write(*a, bytes.size(), bytes.data()); !s.ok()) return s;
    return a;
  }

  // The LUN's new leaves: the previous ones [begin, end) of prev_.leaves
  // outside its touched stretches are kept, each stretch re-packed.
  Status WriteLun(uint32_t lun, const ExtentMap& map, size_t begin, size_t end, const DirtyRanges& dirty) {
    std::vector<Stretch> stretches;
    if (Status s = TouchedStretches(lun, map, prev_.leaves, begin, end, dirty, &stretches); !s.ok()) return s;
    size_t k = begin;
    for (const Stretch& st : stretches) {
      for (; k < begin + st.i; k++) out_->tree.leaves.push_back(prev_.leaves[k]);
      if (Status s = Pack(lun, map, st); !s.ok()) return s;
      k = begin + st.j;
    }
    for (; k < end; k++) out_->tree.leaves.push_back(prev_.leaves[k]);
    return Status::Ok();
  }

  // New leaves tiling the stretch's LBAs, holding the map's runs there as
  // VisitJoined gives them, split by LeafStarts over st.runs: each leaf is
  // written when the run that starts the next one (or the stretch's end) is
  // reached, so only one leaf's runs are held at a time.
  Status Pack(uint32_t lun, const ExtentMap& map, const Stretch& st) {
    const std::vector<size_t> starts = LeafStarts(st.runs);
    if (starts.empty()) return Status::Ok();
    LeafPage leaf;
    leaf.pool = pool_.bound.pool;
    leaf.lun = lun;
    leaf.seq = seq_;
    leaf.first_lba = st.first;
    leaf.runs.reserve(kLeafPageRuns);
    size_t c = 0, k = 0;  // the leaf being filled, the runs seen
    Status s;
    VisitJoined(map, st.first, st.end, [&](const Run& r) {
      if (c + 1 < starts.size() && k == starts[c + 1]) {
        leaf.end_lba = r.lba;
        if (s = WriteLeaf(leaf); !s.ok()) return false;
        c++;
        leaf.first_lba = r.lba;
        leaf.runs.clear();
      }
      leaf.runs.push_back(r);
      k++;
      return true;
    });
    if (!s.ok()) return s;
    // The count that planned the leaves (JoinedCount) and this visit must
    // agree: they read the same frozen map. If they ever did not, the
    // leaves would be planned for other runs: refused, not written.
    if (k != st.runs || c + 1 != starts.size())
      return Status(Code::kInvalidArgument, "checkpoint of LUN " + std::to_string(lun) +
                                                ": its map changed while it was packed");
    leaf.end_lba = st.end;
    return WriteLeaf(leaf);
  }

  Status WriteLeaf(const LeafPage& leaf) {
    std::string bytes;
    if (Status s = EncodeLeafPage(leaf, &bytes); !s.ok()) return s;
    IndexEntry e{{leaf.lun, leaf.first_lba}, {leaf.lun, leaf.end_lba}, 0, seq_};
    // The encoder knows no pool bound (phys_grains): check the page with
    // the reader's own rule, so a tree the reader refuses is never written.
    LeafPage back;
    if (Status d = DecodeLeafPage(bytes.data(), bytes.size(), LeafExpectFor(e, pool_.bound.pool, pool_.phys_grains), &back);
        !d.ok())
      return Invalid("LUN " + N(leaf.lun) + "'s leaf would be refused on read: " + d.message());
    Result<uint64_t> a = WriteFresh(bytes);
    if (!a.ok()) return a.status();
    e.addr = *a;
    out_->tree.leaves.push_back(e);
    return Status::Ok();
  }

  // The level's pages over `children`: a previous page whose entries are
  // exactly a stretch of them is named again; the children between such
  // pages go into new pages.
  Status WriteLevel(uint32_t level, const std::vector<IndexEntry>& children,
                    const std::vector<CkptIndexPage>& prev, std::vector<CkptIndexPage>* out) {
    std::map<IndexKey, size_t> prev_by_first;
    for (size_t i = 0; i < prev.size(); i++) prev_by_first.emplace(prev[i].page.first, i);
    std::vector<IndexEntry> pending;
    auto flush = [&]() -> Status {
      const std::vector<size_t> starts = PageStarts(pending.size(), kIndexPageEntries, kIndexFillEntries);
      for (size_t c = 0; c < starts.size(); c++) {
        const size_t stop = c + 1 < starts.size() ? starts[c + 1] : pending.size();
        CkptIndexPage p;
        p.page.pool = pool_.bound.pool;
        p.page.seq = seq_;
        p.page.level = level;
        p.page.entries.assign(pending.begin() + starts[c], pending.begin() + stop);
        p.page.first = p.page.entries.front().first;
        p.page.end = p.page.entries.back().end;
        std::string bytes;
        if (Status s = EncodeIndexPage(p.page, &bytes); !s.ok()) return s;
        Result<uint64_t> a = WriteFresh(bytes);
        if (!a.ok()) return a.status();
        p.addr = *a;
        out->push_back(std::move(p));
      }
      pending.clear();
      return Status::Ok();
    };
    for (size_t i = 0; i < children.size();) {
      auto it = prev_by_first.find(children[i].first);
      if (it != prev_by_first.end()) {
        const std::vector<IndexEntry>& same = prev[it->second].page.entries;
        if (same.size() <= children.size() - i && std::equal(same.begin(), same.end(), children.begin() + i)) {
          if (Status s = flush(); !s.ok()) return s;
          out->push_back(prev[it->second]);
          i += same.size();
          continue;
        }
      }
      pending.push_back(children[i++]);
    }
    return flush();
  }

  const CkptPool& pool_;
  const uint64_t seq_;
  const CkptTree& prev_;
  PageAllocator& alloc_;
  File& file_;
  CkptWrite* out_;
  std::unordered_set<uint64_t> prev_pages_;
  std::unordered_set<uint64_t> given_;
};

}  // namespace

std::vector<uint64_t> CkptTree::Pages() const {
  std::vector<uint64_t> a;
  for (const IndexEntry& e : leaves) a.push_back(e.addr);
  for (const auto& level : levels)
    for (const CkptIndexPage& p : level) a.push_back(p.addr);
  return a;
}

std::string LeafTilingRule(const std::vector<IndexEntry>& leaves) {
  for (size_t i = 0; i < leaves.size(); i++) {
    const IndexEntry& e = leaves[i];
    const bool starts_lun = i == 0 || leaves[i - 1].first.lun != e.first.lun;
    const bool ends_lun = i + 1 == leaves.size() || leaves[i + 1].first.lun != e.first.lun;
    const std::string at = "LUN " + N(e.first.lun) + "'s leaf [" + N(e.first.lba) + ", " + N(e.end.lba) + ")";
    if (e.end.lun != e.first.lun) return at + " ends in LUN " + N(e.end.lun);
    // A LUN's leaves are one stretch: the LUNs come in increasing order.
    if (starts_lun && i > 0 && leaves[i - 1].first.lun > e.first.lun)
      return at + " comes after LUN " + N(leaves[i - 1].first.lun) + "'s leaves";
    if (starts_lun && e.first.lba != 0) return at + " is its first but does not start at LBA 0";
    if (!starts_lun && leaves[i - 1].end.lba != e.first.lba)
      return at + " does not start where the leaf before it ends, " + N(leaves[i - 1].end.lba);
    if (ends_lun && e.end.lba != ExtentMap::kMaxLba) return at + " is its last but does not end at 2^48";
  }
  return "";
}

uint64_t FreshLeafCount(const std::map<uint32_t, const ExtentMap*>& maps, const DirtyRanges& dirty,
                        const CkptTree& prev) {
  uint64_t leaves = 0;
  std::vector<Stretch> stretches;
  Status s = ForEachLunWithRuns(maps, prev, [&](uint32_t lun, const ExtentMap& map, size_t begin, size_t end) {
    Status t = TouchedStretches(lun, map, prev.leaves, begin, end, dirty, &stretches);
    for (const Stretch& st : stretches) leaves += LeafStarts(st.runs).size();
    return t;
  });
  // A refused LUN: WriteCkptTree refuses it before it packs any of its
  // stretches, so it writes no more leaves than counted.
  (void)s;
  return leaves;
}

Status WriteCkptTree(const CkptPool& pool, uint64_t seq, const std::map<uint32_t, const ExtentMap*>& maps,
                     const DirtyRanges& dirty, const CkptTree& prev, PageAllocator& alloc, File& file,
                     CkptWrite* out) {
  // Resetting *out would wipe a `prev` that is out->tree before it is read.
  if (&prev == &out->tree) return Invalid("the previous tree is the output's own tree");
  *out = CkptWrite{};
  if (seq == 0) return Invalid("sequence 0 names no checkpoint");
  if (std::string why = PrevTreeRule(prev, seq); !why.empty()) return Invalid("previous tree: " + why);
  Status s = Writer(pool, seq, prev, alloc, file, out).WriteAll(maps, dirty);
  if (!s.ok()) {
    out->tree = CkptTree{};  // a half-built tree names pages no superblock may name
    out->freed.clear();
  }
  return s;
}

}  // namespace cowstore::store
