// SPDX-License-Identifier: Apache-2.0
// cowctl vaai status: VAAI support and handler counters, as ESXi lists them.
#include <map>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

void VaaiStatus(const Context& ctx, const std::string& refs) {
  Lio lio = MakeLio(ctx);
  std::vector<Backstore> bss = lio.Available() ? lio.Backstores() : std::vector<Backstore>{};
  std::vector<LunRef> refs_list;
  if (!refs.empty()) {
    LunRef r = ParseLunRef(refs);
    LunInfoOf(ctx, r);  // exists?
    refs_list.push_back(r);
  } else {
    for (const auto& b : bss) refs_list.push_back({b.config.pool, b.config.lun});
  }
  std::map<std::string, std::optional<std::vector<control::LunCounters>>> counters;
  Json arr = Json::array();
  std::string human;
  for (const auto& ref : refs_list) {
    std::optional<Backstore> bs;
    for (const auto& b : bss) {
      if (b.config.pool == ref.pool && b.config.lun == ref.lun) bs = b;
    }
    if (!counters.count(ref.pool)) {
      auto h = ConnectPool(ctx, ref.pool);
      counters[ref.pool] = h ? h->Counters() : std::nullopt;
    }
    std::string group = bs && bs->config.options.count("copy_group") ? bs->config.options.at("copy_group") : "";
    std::string st = bs ? "supported" : "unsupported (not exported)";
    Json j = Json::object();
    j["lun"] = ref.str();
    j["exported"] = bs.has_value();
    j["ats"] = st;
    j["clone"] = st;
    j["zero"] = st;
    j["delete"] = st;
    j["copy_group"] = group;
    // As esxcli storage core device vaai status get heads each device.
    if (bs) j["naa"] = NaaName(bs->wwn);
    else j["naa"] = nullptr;
    human += bs ? NaaName(bs->wwn) + " (" + ref.str() + ")\n" : ref.str() + " (not exported)\n";
    human += "   VAAI Plugin Name: (none: VMW_VAAIP_T10, standard T10 commands)\n";
    human += "   ATS Status: " + st + "\n";
    human += "   Clone Status: " + st +
             (bs ? (group.empty() ? " (within this LUN; set a copy group for clones between LUNs)"
                                  : " (within copy group '" + group + "')")
                 : std::string()) + "\n";
    human += "   Zero Status: " + st + "\n";
    human += "   Delete Status: " + st + "\n";
    const auto& cs = counters[ref.pool];
    std::optional<control::LunCounters> mine;
    if (cs) {
      for (const auto& c : *cs) {
        if (c.lun == ref.lun) mine = c;
      }
    }
    if (mine) {
      Json cj = Json::object();
      for (const auto& [k, v] : mine->counters) cj[k] = v;
      j["counters"] = cj;
      human += "   Handler counters:";
      for (const auto& [k, v] : mine->counters) human += " " + k + "=" + std::to_string(v);
      human += "\n";
    } else {
      j["counters"] = nullptr;
      human += "   Handler counters: unavailable (pool not served by a running handler)\n";
    }
    arr.push_back(j);
  }
  if (refs_list.empty()) human = "no exported cowstore LUNs (export one with 'cowctl export iscsi POOL/LUN')\n";
  Emit(ctx, arr, human);
}

}  // namespace

void AddVaaiCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& lref = cl.Keep(std::string());
  auto* va = cl.app.add_subcommand("vaai", "VAAI support as ESXi lists it");
  va->require_subcommand(1);
  auto* vs = va->add_subcommand("status", "ATS/Clone/Zero/Delete status and handler counters");
  vs->add_option("lun", lref, "POOL/LUN (default: every exported LUN)");
  vs->callback([&] { VaaiStatus(ctx, lref); });
}

}  // namespace cowstore::cowctl
