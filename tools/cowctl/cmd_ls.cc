// SPDX-License-Identifier: Apache-2.0
// cowctl ls: pools, LUNs, backstores and exports as one tree, as targetcli's
// `ls` draws LIO's; --json gives the same tree ({name, info, children}).
#include <map>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

struct Node {
  std::string name, info;
  std::vector<Node> children;
};

Json NodeJson(const Node& n) {
  Json j = Json::object();
  j["name"] = n.name;
  j["info"] = n.info;
  Json kids = Json::array();
  for (const auto& c : n.children) kids.push_back(NodeJson(c));
  j["children"] = kids;
  return j;
}

// "o- name [info]", children indented under it, a "|" joining siblings
// still to come (targetcli's drawing, without its dot leaders).
void Draw(const Node& n, const std::string& prefix, bool last, std::string& out) {
  out += prefix + "o- " + n.name + (n.info.empty() ? "" : " [" + n.info + "]") + "\n";
  for (size_t i = 0; i < n.children.size(); ++i) {
    Draw(n.children[i], prefix + (last ? "  " : "| "), i + 1 == n.children.size(), out);
  }
}

std::string Count(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

Node Tree(const Context& ctx) {
  Lio lio = MakeLio(ctx);
  const bool lio_on = lio.Available();
  const std::vector<Backstore> bss = lio_on ? lio.Backstores() : std::vector<Backstore>{};
  std::map<std::string, const Backstore*> by_key;  // "user_N/name" -> backstore
  for (const auto& b : bss) by_key[b.key()] = &b;
  auto lun_of = [&](const std::string& key) {
    auto it = by_key.find(key);
    return it == by_key.end() ? key + " (not a cowstore backstore)"
                              : it->second->name + " (" + it->second->config.pool + "/" + it->second->config.lun + ")";
  };

  Node root{"/", "cowstore", {}};
  Node pools{"pools", ctx.pool_dir, {}};
  for (const auto& name : PoolNames(ctx)) {
    Node p{name, "", {}};
    try {
      auto h = OpenPool(ctx, name, true);
      auto s = h->Space();
      p.info = FormatSize(s.pool_size_bytes) + ", " + FormatSize(s.Bytes(s.free_units)) + " free, " +
               Count(s.luns.size(), "LUN", "LUNs") + (h->remote() ? ", open by tcmu-runner" : "");
      for (const auto& l : s.luns) {
        std::string bs;
        for (const auto& b : bss) {
          if (b.config.pool == name && b.config.lun == l.name) bs = b.name;
        }
        p.children.push_back({l.name, FormatSize(l.size_bytes) + ", " +
                                          (bs.empty() ? "not exported" : "backstore " + bs), {}});
      }
    } catch (const UserError& e) {
      p.info = std::string("error: ") + e.what();
    }
    pools.children.push_back(std::move(p));
  }
  pools.info += ": " + Count(pools.children.size(), "pool", "pools");
  root.children.push_back(std::move(pools));
  if (!lio_on) {
    root.children.push_back({"lio", "not available: configfs not mounted or target_core_user not loaded", {}});
    return root;
  }

  Node backstores{"backstores", "user:cowstore, " + Count(bss.size(), "backstore", "backstores"), {}};
  for (const auto& b : bss) {
    backstores.children.push_back({b.name, b.config.pool + "/" + b.config.lun + ", " + FormatSize(b.size) + ", " +
                                               (b.wwn.empty() ? std::string("no serial") : NaaName(b.wwn)) +
                                               (b.enabled ? "" : ", disabled"),
                                   {}});
  }
  root.children.push_back(std::move(backstores));

  Node iscsi{"iscsi", "", {}};
  for (const auto& t : lio.IscsiTargets()) {
    std::string portals;
    for (const auto& p : t.portals) portals += (portals.empty() ? "" : " ") + p;
    Node tn{t.iqn, "tpg" + std::to_string(t.tpg) + ", " +
                       (t.demo_mode ? std::string("demo mode: any initiator") : Count(t.acls.size(), "ACL", "ACLs")) +
                       (portals.empty() ? "" : ", portals " + portals),
            {}};
    Node luns{"luns", "", {}};
    for (const auto& [n, key] : t.luns) luns.children.push_back({"lun" + std::to_string(n), lun_of(key), {}});
    luns.info = Count(luns.children.size(), "LUN", "LUNs");
    tn.children.push_back(std::move(luns));
    Node acls{"acls", Count(t.acls.size(), "ACL", "ACLs"), {}};
    for (const auto& a : t.acls) {
      Node an{a.initiator, a.chap_user.empty() ? "" : "CHAP user " + a.chap_user, {}};
      if (a.mapped_luns) {
        for (const auto& m : *a.mapped_luns) {
          an.children.push_back({"mapped_lun" + std::to_string(m.mapped_lun),
                                 "lun" + std::to_string(m.lun) + (m.write_protect ? ", read-only" : ""), {}});
        }
      }
      acls.children.push_back(std::move(an));
    }
    tn.children.push_back(std::move(acls));
    iscsi.children.push_back(std::move(tn));
  }
  iscsi.info = Count(iscsi.children.size(), "target", "targets");
  root.children.push_back(std::move(iscsi));

  Node loop{"loopback", "", {}};
  for (const auto& t : lio.LoopbackTargets()) {
    Node tn{t.wwn, "", {}};
    for (const auto& [n, key] : t.luns) tn.children.push_back({"lun" + std::to_string(n), lun_of(key), {}});
    tn.info = Count(tn.children.size(), "LUN", "LUNs");
    loop.children.push_back(std::move(tn));
  }
  loop.info = Count(loop.children.size(), "target", "targets");
  root.children.push_back(std::move(loop));
  return root;
}

}  // namespace

void AddLsCommand(CommandLine& cl) {
  Context& ctx = cl.ctx;
  cl.app.add_subcommand("ls", "Pools, LUNs, backstores and exports as one tree (as targetcli's ls)")->callback([&] {
    Node root = Tree(ctx);
    std::string human;
    Draw(root, "", true, human);
    Emit(ctx, NodeJson(root), human);
  });
}

}  // namespace cowstore::cowctl
