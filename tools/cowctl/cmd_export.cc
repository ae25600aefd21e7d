// SPDX-License-Identifier: Apache-2.0
// cowctl export iscsi/loop/list and unexport: a LUN's LIO exports.
#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {

void Unexport(const Context& ctx, const LunRef& ref, bool and_backstore) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  auto bs = lio.FindBackstore(ref.pool, ref.lun);
  if (!bs) throw UserError(ref.str() + " has no backstore: nothing to unexport");
  lio.Unexport(*bs);
  if (and_backstore) lio.DeleteBackstore(*bs);
}
namespace {

struct ExportArgs {
  std::string target, chap_user, chap_password;
  std::vector<std::string> portals, initiators;
  int64_t lun = -1;
  bool demo_mode = false;
  bool no_auto_map = false;
};

// --lun as Lio takes it: unset (-1) or a TPG LUN number. Lio refuses numbers
// above 65535 (and one another backstore holds); a value beyond 32 bits
// stays beyond that range instead of wrapping.
std::optional<uint32_t> LunNumber(int64_t v) {
  if (v < 0) return std::nullopt;
  return static_cast<uint32_t>(std::min<int64_t>(v, UINT32_MAX));
}
// What the parser takes for --lun: a whole number, not negative; which
// numbers LIO allows is Lio's rule, checked there.
const CLI::Range kLunOption(int64_t{0}, int64_t{UINT32_MAX});

// Exports ref's backstore (made first if it has none) through `export_fn`;
// a backstore made here is removed again when the export fails, so a failed
// export leaves nothing behind.
template <typename ExportFn>
std::pair<Backstore, FabricLun> ExportBackstore(const Context& ctx, Lio& lio, const LunRef& ref,
                                                const BackstoreArgs& b, ExportFn export_fn) {
  auto bs = lio.FindBackstore(ref.pool, ref.lun);
  const bool made = !bs;
  if (made) bs = MakeBackstore(ctx, ref, LunInfoOf(ctx, ref), b);
  try {
    return {*bs, export_fn(*bs)};
  } catch (const UserError&) {
    if (made) {
      try { lio.DeleteBackstore(*bs); } catch (const UserError&) {}
    }
    throw;
  }
}

void ExportIscsi(const Context& ctx, const std::string& refs, const ExportArgs& a, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  IscsiSpec spec;
  spec.target = a.target.empty() ? DefaultIscsiTarget(ref.pool) : a.target;
  spec.portals = a.portals;
  for (const auto& i : a.initiators) spec.acls.push_back({i, a.chap_user, a.chap_password});
  if (!a.chap_user.empty() && a.initiators.empty()) {
    throw UserError("CHAP is set per initiator: name one with --initiator");
  }
  spec.lun = LunNumber(a.lun);
  spec.demo_mode = a.demo_mode;
  spec.auto_map = !a.no_auto_map;
  // Who may log in is decided here, before the backstore or anything else
  // is made: no ACLs means every initiator only when --demo-mode says so.
  const IscsiAccess access = lio.IscsiTpgAccess(spec.target);
  CheckIscsiAccess(access, spec, ref.str());
  auto [bs, l] = ExportBackstore(ctx, lio, ref, b, [&](const Backstore& s) { return lio.ExportIscsi(s, spec); });
  // Who sees the LUN now: every ACL that maps it (all of the TPG's unless
  // --no-auto-map), whoever made the mapping.
  const std::vector<LunMapping> mapped = lio.MappedTo(l);
  Json to = Json::array();
  std::string seen;
  for (const auto& m : mapped) {
    to.push_back(m.initiator);
    seen += (seen.empty() ? "" : ", ") + m.initiator;
    if (m.mapped_lun != l.lun) seen += " (as LUN " + std::to_string(m.mapped_lun) + ")";
  }
  if (spec.demo_mode) {
    std::cerr << "cowctl: warning: demo mode: any initiator can log in to " << l.target << " and write to "
              << ref.str() << " (no ACLs)\n";
  } else if (mapped.empty()) {
    std::cerr << "cowctl: note: " << l.target << " admits only the initiators in its ACLs, and none maps LUN "
              << l.lun << ", so no initiator sees it: map it with --initiator IQN\n";
  }
  Json j = Json::object();
  j["lun"] = ref.str();
  j["fabric"] = "iscsi";
  j["target"] = l.target;
  j["tpg"] = l.tpg;
  j["lun_number"] = l.lun;
  j["backstore"] = bs.name;
  j["demo_mode"] = spec.demo_mode;
  j["mapped_to"] = to;
  j["naa"] = NaaName(bs.wwn);
  Emit(ctx, j,
       "exported " + ref.str() + " as LUN " + std::to_string(l.lun) + " of " + l.target + "\n" +
           (seen.empty() ? std::string() : "seen by " + seen + "\n") + "ESXi lists it as " + NaaName(bs.wwn) + "\n");
}

void ExportLoop(const Context& ctx, const std::string& refs, int64_t lun, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  // Restore places a saved loopback LUN the same way (Lio::ExportLoopback).
  auto [bs, l] = ExportBackstore(ctx, lio, ref, b,
                                 [&](const Backstore& s) { return lio.ExportLoopback(s, "", LunNumber(lun)); });
  Json j = Json::object();
  j["lun"] = ref.str();
  j["fabric"] = "loopback";
  j["target"] = l.target;
  j["lun_number"] = l.lun;
  j["naa"] = NaaName(bs.wwn);
  Emit(ctx, j, "exported " + ref.str() + " over tcm_loop as " + l.target + " LUN " + std::to_string(l.lun) +
                   " (a local /dev/sdX appears, " + NaaName(bs.wwn) + ")\n");
}

void ExportList(const Context& ctx) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  Json arr = Json::array();
  Table t({"LUN", "FABRIC", "TARGET", "TPG", "LUN#", "BACKSTORE", "NAA"});
  for (const auto& b : lio.Backstores()) {
    for (const auto& l : lio.LinksTo(b)) {
      Json j = Json::object();
      j["lun"] = b.config.pool + "/" + b.config.lun;
      j["fabric"] = l.fabric;
      j["target"] = l.target;
      j["tpg"] = l.tpg;
      j["lun_number"] = l.lun;
      j["backstore"] = b.name;
      j["naa"] = NaaName(b.wwn);
      arr.push_back(j);
      t.Row({b.config.pool + "/" + b.config.lun, l.fabric, l.target, std::to_string(l.tpg), std::to_string(l.lun),
             b.name, NaaName(b.wwn)});
    }
  }
  Emit(ctx, arr, t.empty() ? std::string("no cowstore exports\n") : t.Render());
}

}  // namespace

void AddExportCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& lref = cl.Keep(std::string());
  auto& bsa = cl.Keep(BackstoreArgs{});
  auto* ex = cl.app.add_subcommand("export", "Export a LUN over iSCSI or tcm_loop");
  ex->require_subcommand(1);
  auto& ea = cl.Keep(ExportArgs{});
  auto* ei = ex->add_subcommand("iscsi", "Export over iSCSI (creates the backstore if needed)");
  ei->add_option("lun", lref, "POOL/LUN")->required();
  ei->add_option("--target,-t", ea.target, "Target IQN (default iqn.2024-01.io.cowstore:<host>.<pool>)");
  ei->add_option("--portal,-p", ea.portals, "Portal IP:port (repeatable; default 0.0.0.0:3260 on a new target)");
  ei->add_option("--initiator,-i", ea.initiators,
                 "Initiator IQN allowed in (repeatable; needed for a new target unless --demo-mode)");
  ei->add_flag("--demo-mode", ea.demo_mode, "let any initiator log in, without ACLs (lab use)");
  ei->add_flag("--no-auto-map", ea.no_auto_map,
               "Map the new LUN only into the ACLs named with -i (targetcli's auto_add_mapped_luns=false)");
  ei->add_option("--chap-user", ea.chap_user, "CHAP user name for the named initiators");
  ei->add_option("--chap-password", ea.chap_password, "CHAP secret (12-16 characters)");
  ei->add_option("--lun", ea.lun, "LUN number in the target (default: lowest free)")->check(kLunOption);
  AddBackstoreOptions(ei, bsa, false);
  ei->footer(
      "Who may log in is set when the target is made: with --initiator, only those initiators (ACLs);\n"
      "with --demo-mode, any initiator (no ACLs); with neither, a new target is refused. Adding a LUN to an\n"
      "existing target keeps its policy: a target in demo mode takes LUNs only with --demo-mode; a target\n"
      "with ACLs takes them with or without --initiator. As targetcli does (auto_add_mapped_luns), a LUN\n"
      "added to a target is mapped into every ACL it has, and a new --initiator ACL sees every LUN of the\n"
      "target. With --no-auto-map, only the --initiator ACLs are mapped, and only to this LUN (with no\n"
      "--initiator, the LUN is added but no initiator sees it).");
  ei->callback([&] {
    if (ea.demo_mode && !ea.initiators.empty()) {
      throw CLI::ValidationError("--demo-mode",
                                 "cannot be used with --initiator: demo mode lets every initiator in, "
                                 "--initiator names the only ones allowed; pick one");
    }
    ExportIscsi(ctx, lref, ea, bsa);
  });
  auto* elp = ex->add_subcommand("loop", "Export through tcm_loop (a local SCSI disk)");
  elp->add_option("lun", lref, "POOL/LUN")->required();
  auto& loop_lun = cl.Keep(int64_t{-1});
  elp->add_option("--lun", loop_lun, "LUN number in the loopback target (default: lowest free)")
      ->check(kLunOption);
  AddBackstoreOptions(elp, bsa, false);
  elp->callback([&] { ExportLoop(ctx, lref, loop_lun, bsa); });
  ex->add_subcommand("list", "List exports of cowstore LUNs")->alias("ls")->callback([&] { ExportList(ctx); });
  auto& with_bs = cl.Keep(false);
  auto* ue = cl.app.add_subcommand("unexport", "Remove every iSCSI/loopback export of a LUN");
  ue->add_option("lun", lref, "POOL/LUN")->required();
  ue->add_flag("--backstore", with_bs, "Also delete the backstore");
  ue->callback([&] {
    LunRef ref = ParseLunRef(lref);
    Unexport(ctx, ref, with_bs);
    Json j = Json::object();
    j["unexported"] = ref.str();
    Emit(ctx, j, "unexported " + ref.str() + (with_bs ? " and deleted its backstore" : "") + "\n");
  });
}

}  // namespace cowstore::cowctl
