// SPDX-License-Identifier: Apache-2.0
// cowctl backstore: create, list, delete; and making the LIO user:cowstore
// backstore of a LUN, which lun, export and restore do too.
#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {

void AddBackstoreOptions(CLI::App* c, BackstoreArgs& bsa, bool with_flag) {
  if (with_flag) c->add_flag("--backstore", bsa.make, "Also create the LIO user:cowstore backstore");
  c->add_option("--backstore-name", bsa.name, "Backstore name (default POOL-LUN)");
  c->add_option("--copy-group", bsa.copy_group, "XCOPY copy group: clones between LUNs of one group are offloaded");
  c->add_option("--wce", bsa.wce, "Write cache enabled (0: every GOOD is durable, the default)");
  c->add_option("--thin-on-thin", bsa.thin_on_thin,
                "1 (default): the soft threshold also warns when the pool's filesystem cannot hold its growth; 0: not");
}

Cfgstring MakeCfg(const LunRef& ref, const BackstoreArgs& b) {
  Cfgstring c{ref.pool, ref.lun, {}};
  if (!b.copy_group.empty()) {
    RequireName(b.copy_group, "copy group");
    c.options["copy_group"] = b.copy_group;
  }
  if (!b.wce.empty()) {
    if (b.wce != "0" && b.wce != "1") throw UserError("--wce takes 0 or 1");
    c.options["wce"] = b.wce;
  }
  if (!b.thin_on_thin.empty()) {
    if (b.thin_on_thin != "0" && b.thin_on_thin != "1") throw UserError("--thin-on-thin takes 0 or 1");
    c.options["thin_on_thin"] = b.thin_on_thin;
  }
  if (c.str().size() > 250) throw UserError("the cfgstring would pass the kernel's 255-character limit");
  return c;
}

// Creates the LIO backstore of an existing LUN. The caller has released
// its pool handle: tcmu-runner opens the pool when the backstore is enabled.
Backstore MakeBackstore(const Context& ctx, const LunRef& ref, const store::LunInfo& l, const BackstoreArgs& b) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  lio.RequireRunner();
  BackstoreSpec spec;
  spec.name = b.name.empty() ? ref.pool + "-" + ref.lun : b.name;
  if (spec.name.size() > 64) spec.name = ref.lun;
  spec.config = MakeCfg(ref, b);
  spec.size = l.size_bytes;
  spec.block_size = l.block_size;
  spec.wwn = UuidString(l.id);
  return lio.CreateBackstore(spec);
}

store::LunInfo LunInfoOf(const Context& ctx, const LunRef& ref) {
  auto h = OpenPool(ctx, ref.pool, true);
  return h->GetLun(ref.lun);
}

namespace {

Json BackstoreJson(const Backstore& b) {
  Json j = Json::object();
  j["name"] = b.name;
  j["path"] = b.hba + "/" + b.name;
  j["pool"] = b.config.pool;
  j["lun"] = b.config.lun;
  j["dev_config"] = b.config.str();
  j["size"] = b.size;
  j["block_size"] = b.block_size;
  j["wwn"] = b.wwn;
  j["enabled"] = b.enabled;
  return j;
}

void BackstoreCreate(const Context& ctx, const std::string& refs, const BackstoreArgs& b) {
  LunRef ref = ParseLunRef(refs);
  MakeCfg(ref, b);
  store::LunInfo l = LunInfoOf(ctx, ref);
  Backstore bs = MakeBackstore(ctx, ref, l, b);
  Emit(ctx, BackstoreJson(bs), "created backstore user:cowstore/" + bs.name + " for " + ref.str() + "\n");
}

void BackstoreList(const Context& ctx) {
  Lio lio = MakeLio(ctx);
  lio.RequireCore();
  Json arr = Json::array();
  Table t({"BACKSTORE", "PATH", "LUN", "SIZE", "BLOCK", "CONFIG", "EXPORTS"});
  for (const auto& b : lio.Backstores()) {
    arr.push_back(BackstoreJson(b));
    auto links = lio.LinksTo(b);
    t.Row({b.name, b.hba + "/" + b.name, b.config.pool + "/" + b.config.lun, FormatSize(b.size),
           std::to_string(b.block_size), b.config.str(), std::to_string(links.size())});
  }
  Emit(ctx, arr, t.empty() ? std::string("no cowstore backstores\n") : t.Render());
}

}  // namespace

void AddBackstoreCommands(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& lref = cl.Keep(std::string());
  auto& lforce = cl.Keep(false);
  auto& bsa = cl.Keep(BackstoreArgs{});
  auto* bsc = cl.app.add_subcommand("backstore", "LIO user:cowstore backstores");
  bsc->require_subcommand(1);
  auto* bc = bsc->add_subcommand("create", "Create the backstore of an existing LUN");
  bc->add_option("lun", lref, "POOL/LUN")->required();
  AddBackstoreOptions(bc, bsa, false);
  bc->callback([&] { BackstoreCreate(ctx, lref, bsa); });
  bsc->add_subcommand("list", "List cowstore backstores")->alias("ls")->callback([&] { BackstoreList(ctx); });
  auto* bd = bsc->add_subcommand("delete", "Delete a LUN's backstore (refused while exported unless --force)");
  bd->alias("rm");
  bd->add_option("lun", lref, "POOL/LUN")->required();
  bd->add_flag("--force", lforce, "Unexport first");
  bd->callback([&] {
    LunRef ref = ParseLunRef(lref);
    Lio lio = MakeLio(ctx);
    lio.RequireCore();
    auto b = lio.FindBackstore(ref.pool, ref.lun);
    if (!b) throw UserError(ref.str() + " has no backstore");
    if (lforce) lio.Unexport(*b);
    lio.DeleteBackstore(*b);
    Json j = Json::object();
    j["deleted"] = b->name;
    Emit(ctx, j, "deleted backstore " + b->name + "\n");
  });
}

}  // namespace cowstore::cowctl
