// SPDX-License-Identifier: Apache-2.0
// Output and LUN helpers shared by several nouns' commands.
#include "tools/cowctl/cmd_common.h"

#include <iostream>

namespace cowstore::cowctl {

Lio MakeLio(const Context& ctx) { return Lio(LioOptions{ctx.configfs_root, ctx.proc_root, nullptr}); }

void Emit(const Context& ctx, const Json& j, const std::string& human) {
  if (ctx.json) std::cout << j.Dump() << "\n";
  else std::cout << human;
  std::cout.flush();
}

std::optional<Backstore> BackstoreOf(const Context& ctx, const LunRef& ref) {
  Lio lio = MakeLio(ctx);
  if (!lio.Available()) return std::nullopt;
  return lio.FindBackstore(ref.pool, ref.lun);
}

// The identifier initiators see, as ESXi names the device (naa.6001405...):
// from the backstore's unit serial when there is one, else from the LUN's
// UUID, the serial cowctl gives a backstore it makes.
std::string LunNaa(const store::LunInfo& l, const std::optional<Backstore>& bs) {
  return NaaName(bs && !bs->wwn.empty() ? bs->wwn : UuidString(l.id));
}

std::string TimeText(uint64_t unix_seconds) {
  char ts[32];
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (!gmtime_r(&t, &tm) || !std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm)) return "?";
  return ts;
}

Json LunJson(const std::string& pool, const store::LunInfo& l, const std::optional<Backstore>& bs) {
  Json j = Json::object();
  j["pool"] = pool;
  j["name"] = l.name;
  j["wwn"] = UuidString(l.id);
  j["naa"] = LunNaa(l, bs);
  j["size"] = l.size_bytes;
  j["block_size"] = l.block_size;
  j["mapped"] = l.mapped_bytes;
  j["exclusive"] = l.exclusive_bytes;
  j["shared"] = l.shared_bytes;
  j["read_only"] = l.read_only;
  j["origin"] = l.origin == store::Uuid{} ? Json(nullptr) : Json(UuidString(l.origin));
  j["created"] = l.created_unix ? Json(TimeText(l.created_unix)) : Json(nullptr);
  if (bs) {
    Json b = Json::object();
    b["name"] = bs->name;
    b["path"] = bs->hba + "/" + bs->name;
    b["dev_config"] = bs->config.str();
    j["backstore"] = b;
  } else {
    j["backstore"] = nullptr;
  }
  return j;
}

}  // namespace cowstore::cowctl
