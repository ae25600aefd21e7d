// SPDX-License-Identifier: Apache-2.0
#include "handler/control/messages.h"

#include "handler/store/names.h"

namespace cowstore::control {
namespace {

// A LUN's id on the wire: store::UuidText without its dashes, the 32 hex
// digits every cowctl release reads; ParseUuidText reads both forms.
std::string WireUuid(const store::Uuid& id) {
  std::string t = store::UuidText(id);
  std::erase(t, '-');
  return t;
}

// All zeros unless `text` is a LUN id.
store::Uuid UuidFromWire(const std::string& text) {
  store::Uuid id{};
  if (!store::ParseUuidText(text, &id)) return store::Uuid{};
  return id;
}

uint64_t U64(const Record& r, const char* key) { return r.GetU64(key).value_or(0); }

}  // namespace

Record EncodeLun(const store::LunInfo& l) {
  Record r("lun");
  r.Set("name", l.name).Set("id", WireUuid(l.id)).Set("size", l.size_bytes).Set("block_size", l.block_size);
  r.Set("mapped", l.mapped_bytes).Set("exclusive", l.exclusive_bytes).Set("shared", l.shared_bytes);
  // Snapshot attributes only when set: an older cowctl skips unknown fields.
  if (l.read_only) r.Set("read_only", 1);
  if (l.origin != store::Uuid{}) r.Set("origin", WireUuid(l.origin));
  if (l.created_unix) r.Set("created", l.created_unix);
  return r;
}

store::LunInfo DecodeLun(const Record& r) {
  store::LunInfo l;
  l.name = r.Get("name");
  l.id = UuidFromWire(r.Get("id"));
  l.size_bytes = U64(r, "size");
  l.block_size = static_cast<uint32_t>(r.GetU64("block_size").value_or(512));
  l.mapped_bytes = U64(r, "mapped");
  l.exclusive_bytes = U64(r, "exclusive");
  l.shared_bytes = U64(r, "shared");
  l.read_only = U64(r, "read_only") != 0;
  l.origin = UuidFromWire(r.Get("origin"));
  l.created_unix = U64(r, "created");
  return l;
}

store::LunInfo DecodeFirstLun(const std::vector<Record>& records) {
  for (const auto& r : records) {
    if (r.type == "lun") return DecodeLun(r);
  }
  return {};
}

std::vector<Record> EncodeSpace(const std::string& pool, const store::SpaceInfo& s) {
  Record p("pool");
  p.Set("name", pool).Set("size", s.pool_size_bytes).Set("allocation_unit", s.allocation_unit);
  p.Set("total_units", s.total_units).Set("allocated_units", s.allocated_units);
  p.Set("metadata_units", s.metadata_units).Set("shared_units", s.shared_units);
  p.Set("free_units", s.free_units).Set("mapped_bytes", s.mapped_bytes).Set("saved_bytes", s.saved_bytes);
  // Freed units still being punched (counted in free_units too); an older
  // cowctl skips the field, an older handler sends none (read as 0).
  p.Set("thinning_units", s.thinning_units);
  // What the *_units count (the grain); an older handler sends none, and
  // SpaceInfo::Bytes then counts AUs, as that handler did (pool.h).
  p.Set("unit_bytes", s.unit_bytes);
  p.Set("soft_threshold_units", s.soft_threshold_units).Set("provisioned_bytes", s.provisioned_bytes);
  // Thin on thin; absent when the handler's Env cannot tell.
  if (s.backing_known) {
    p.Set("backing_grows", s.backing_grows ? 1 : 0).Set("backing_size", s.backing_size_bytes);
    p.Set("backing_free", s.backing_free_bytes).Set("backing_short", s.backing_short ? 1 : 0);
  }
  std::vector<Record> out{p};
  for (const auto& l : s.luns) out.push_back(EncodeLun(l));
  return out;
}

store::SpaceInfo DecodeSpace(const std::vector<Record>& records) {
  store::SpaceInfo s;
  for (const auto& r : records) {
    if (r.type == "pool") {
      s.pool_size_bytes = U64(r, "size");
      s.allocation_unit = static_cast<uint32_t>(U64(r, "allocation_unit"));
      s.unit_bytes = static_cast<uint32_t>(U64(r, "unit_bytes"));
      s.total_units = U64(r, "total_units");
      s.allocated_units = U64(r, "allocated_units");
      s.metadata_units = U64(r, "metadata_units");
      s.shared_units = U64(r, "shared_units");
      s.free_units = U64(r, "free_units");
      s.thinning_units = U64(r, "thinning_units");
      s.mapped_bytes = U64(r, "mapped_bytes");
      s.saved_bytes = U64(r, "saved_bytes");
      s.soft_threshold_units = U64(r, "soft_threshold_units");
      s.provisioned_bytes = U64(r, "provisioned_bytes");
      s.backing_known = r.Has("backing_free");
      s.backing_grows = r.Get("backing_grows") == "1";
      s.backing_size_bytes = U64(r, "backing_size");
      s.backing_free_bytes = U64(r, "backing_free");
      s.backing_short = r.Get("backing_short") == "1";
    } else if (r.type == "lun") {
      s.luns.push_back(DecodeLun(r));
    }
  }
  // An older handler sends no provisioned_bytes: it is the LUNs' sizes.
  if (s.provisioned_bytes == 0)
    for (const auto& l : s.luns) s.provisioned_bytes += l.size_bytes;
  return s;
}

void EncodeCheck(const store::CheckReport& c, Record* head, std::vector<Record>* records) {
  head->Set("clean", c.clean ? 1 : 0).Set("luns", c.luns).Set("extents", c.extents);
  head->Set("allocated_units", c.allocated_units).Set("leaked_units", c.leaked_units);
  // What the units count; an older handler sends none (0: unknown, not AUs:
  // CheckReport in pool.h).
  head->Set("unit_bytes", c.unit_bytes);
  for (const auto& p : c.problems) records->push_back(Record("problem").Set("text", p));
}

store::CheckReport DecodeCheck(const Record& head, const std::vector<Record>& records) {
  store::CheckReport c;
  c.clean = head.Get("clean") == "1";
  c.luns = U64(head, "luns");
  c.extents = U64(head, "extents");
  c.allocated_units = U64(head, "allocated_units");
  c.leaked_units = U64(head, "leaked_units");
  c.unit_bytes = static_cast<uint32_t>(U64(head, "unit_bytes"));
  for (const auto& r : records) {
    if (r.type == "problem") c.problems.push_back(r.Get("text"));
  }
  return c;
}

void EncodeScrub(const ScrubReport& s, Record* head, std::vector<Record>* records) {
  head->Set("clean", s.clean() ? 1 : 0).Set("luns", s.luns).Set("mapped_bytes", s.mapped_bytes);
  head->Set("read_bytes", s.read_bytes);
  for (const auto& u : s.unreadable) {
    records->push_back(Record("unreadable").Set("lun", u.lun).Set("lba", u.lba).Set("count", u.count).Set("error", u.error));
  }
}

ScrubReport DecodeScrub(const Record& head, const std::vector<Record>& records) {
  ScrubReport s;
  s.luns = U64(head, "luns");
  s.mapped_bytes = U64(head, "mapped_bytes");
  s.read_bytes = U64(head, "read_bytes");
  for (const auto& r : records) {
    if (r.type == "unreadable") s.unreadable.push_back({r.Get("lun"), U64(r, "lba"), U64(r, "count"), r.Get("error")});
  }
  return s;
}

void EncodeCopyStats(const CopyStats& st, Record* head) { head->Set("written", st.written).Set("skipped", st.skipped); }

CopyStats DecodeCopyStats(const Record& head) { return {U64(head, "written"), U64(head, "skipped")}; }

std::vector<Record> EncodeCounters(const std::vector<LunCounters>& c) {
  std::vector<Record> out;
  for (const auto& lc : c) {
    Record r("counters");
    r.Set("lun", lc.lun);
    for (const auto& [k, v] : lc.counters) {
      if (k != "lun") r.Set(k, v);
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<LunCounters> DecodeCounters(const std::vector<Record>& records) {
  std::vector<LunCounters> out;
  for (const auto& r : records) {
    if (r.type != "counters") continue;
    LunCounters c;
    c.lun = r.Get("lun");
    for (const auto& [k, v] : r.fields) {
      if (k != "lun") c.counters.emplace_back(k, U64(r, k.c_str()));
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace cowstore::control
