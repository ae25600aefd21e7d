// SPDX-License-Identifier: Apache-2.0
// The reader of ckpt_tree.h (the writer is ckpt_tree.cc).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "handler/store/ckpt_page.h"
#include "handler/store/ckpt_tree.h"

namespace cowstore::store {

namespace {

Status Corrupt(const std::string& what) { return Status(Code::kCorruption, "checkpoint tree: " + what); }

Status ReadPage(File& file, uint64_t addr, std::string* page) {
  page->assign(kIndexPageBytes, '\0');
  return file.Read(addr, page->size(), page->data());
}

}  // namespace

Status ReadCkptTree(const CkptPool& pool, const IndexRoot& root, File& file,
                    std::map<uint32_t, ExtentMap>* maps, CkptTree* tree) {
  if (root == kNoIndex) {
    maps->clear();
    *tree = CkptTree{};
    return Status::Ok();
  }
  if (root.entry.addr == kNoPage) return Corrupt("a root with no page must be kNoIndex");
  // An empty root page (the other spelling of the empty index) is refused by
  // ReadIndex's IndexRootRule.
  const IndexPageExpect& bound = pool.bound;
  // ReadIndex checks every page against the entry naming it; the bytes are
  // kept so the pages can be decoded again for the tree without a second read.
  std::map<uint64_t, std::string> index_bytes;
  CkptTree t;
  t.root = root;
  Status s = ReadIndex(
      root, bound,
      [&](uint64_t addr, std::string* page) {
        if (Status r = ReadPage(file, addr, page); !r.ok()) return r;
        index_bytes[addr] = *page;
        return Status::Ok();
      },
      &t.leaves);
  if (!s.ok()) return s;
  if (std::string why = LeafTilingRule(t.leaves); !why.empty()) return Corrupt(why);

  t.levels.resize(root.level + 1);
  std::vector<IndexEntry> at_level{root.entry};
  for (uint32_t level = root.level;; level--) {
    std::vector<IndexEntry> below;
    for (const IndexEntry& e : at_level) {
      auto read = index_bytes.find(e.addr);
      if (read == index_bytes.end()) return Corrupt("index page at " + std::to_string(e.addr) + " was not read");
      const std::string& bytes = read->second;
      CkptIndexPage p{e.addr, {}};
      if (Status d = DecodeIndexPage(bytes.data(), bytes.size(), ExpectForChild(e, level, bound), &p.page); !d.ok())
        return d;
      below.insert(below.end(), p.page.entries.begin(), p.page.entries.end());
      t.levels[level].push_back(std::move(p));
    }
    if (level == 0) break;
    at_level = std::move(below);
  }

  // Leaves by address, not key order: after shadowing they are scattered,
  // and one ascending pass over the area is the sequential read an open
  // wants. Leaves are disjoint, so their runs go into the maps in any order.
  std::vector<const IndexEntry*> by_addr;
  by_addr.reserve(t.leaves.size());
  for (const IndexEntry& e : t.leaves) by_addr.push_back(&e);
  std::sort(by_addr.begin(), by_addr.end(), [](const IndexEntry* a, const IndexEntry* b) { return a->addr < b->addr; });
  std::map<uint32_t, ExtentMap> m;
  std::string bytes;
  for (const IndexEntry* leaf_entry : by_addr) {
    const IndexEntry& e = *leaf_entry;
    if (Status r = ReadPage(file, e.addr, &bytes); !r.ok()) return r;
    LeafPage leaf;
    if (Status d = DecodeLeafPage(bytes.data(), bytes.size(), LeafExpectFor(e, pool.bound.pool, pool.phys_grains), &leaf);
        !d.ok())
      return Status(d.code(), d.message() + " (leaf at address " + std::to_string(e.addr) + ")");
    // A LUN without runs has no leaves (ckpt_tree.h): an empty leaf is not
    // a way to write one, so that one state has one image on disk.
    if (leaf.runs.empty()) return Corrupt("leaf at address " + std::to_string(e.addr) + " holds no run");
    ExtentMap& map = m.try_emplace(e.first.lun, pool.phys_grains).first->second;
    for (const Run& r : leaf.runs)
      if (Status ins = map.Insert(r.lba, r.phys, r.len); !ins.ok())
        return Corrupt("leaf at address " + std::to_string(e.addr) + ": " + ins.message());
  }
  *maps = std::move(m);
  *tree = std::move(t);
  return Status::Ok();
}

}  // namespace cowstore::store
