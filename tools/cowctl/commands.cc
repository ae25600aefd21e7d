// SPDX-License-Identifier: Apache-2.0
// cowctl's command line: the global options, each noun's subcommands (added
// by its cmd_*.cc file), and how errors become exit statuses.
#include "tools/cowctl/commands.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

// The word of argv that is not a subcommand where one is expected, with the
// command it was given to and that command's subcommands (CLI11 says only
// "A subcommand is required"). Options, and the values of those that take
// one, are stepped over; nullopt once a command takes positional arguments.
struct UnknownWord {
  std::string word, command, choices;
};
std::optional<UnknownWord> FindUnknownCommand(CLI::App& app, int argc, char** argv) {
  CLI::App* cur = &app;
  std::string path = "cowctl";
  for (int i = 1; i < argc; ++i) {
    std::string tok = argv[i];
    if (tok == "--") return std::nullopt;
    if (tok.size() > 1 && tok[0] == '-') {
      if (tok.find('=') != std::string::npos) continue;
      const CLI::Option* o = nullptr;
      for (CLI::App* a = cur; a && !o; a = a->get_parent()) o = a->get_option_no_throw(tok);
      if (o && o->get_expected_min() > 0) ++i;  // its value
      continue;
    }
    auto subs = cur->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) return std::nullopt;
    auto it = std::find_if(subs.begin(), subs.end(), [&](CLI::App* a) { return a->check_name(tok); });
    if (it == subs.end()) {
      std::string choices;
      for (auto* a : subs) choices += (choices.empty() ? "" : ", ") + a->get_name();
      return UnknownWord{tok, path, choices};
    }
    cur = *it;
    path += " " + tok;
  }
  return std::nullopt;
}

}  // namespace

void AddCommandLine(CommandLine& cl) {
  CLI::App& app = cl.app;
  Context& ctx = cl.ctx;
  app.set_version_flag("--version", std::string("cowctl ") + "0.1.0");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--pool-dir", ctx.pool_dir, "Where pools live (env COWSTORE_POOL_DIR)")->capture_default_str();
  app.add_option("--configfs-root", ctx.configfs_root, "configfs mount point")->capture_default_str();
  app.add_option("--run-dir", ctx.run_dir, "Where handler control sockets are (env COWSTORE_RUN_DIR)")
      ->capture_default_str();
  app.add_option("--proc-root", ctx.proc_root, "procfs, to find tcmu-runner (tests)")->group("");
  app.add_flag("--json", ctx.json, "Machine-readable JSON output");
  app.add_option("--wait", ctx.wait_seconds, "Seconds to wait for a pool another cowctl holds (0: fail at once)")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  AddPoolCommands(cl);
  AddLunCommands(cl);
  AddBackstoreCommands(cl);
  AddExportCommands(cl);
  AddVaaiCommands(cl);
  AddTopCommand(cl);
  AddMetricsCommand(cl);
  AddConfigCommands(cl);
  AddLsCommand(cl);
}

int Main(int argc, char** argv) {
  Context ctx;
  CLI::App app{"cowctl: manage cowstore pools, LUNs and their LIO exports (VAAI-capable iSCSI LUNs)", "cowctl"};
  int rc = 0;
  CommandLine cl(app, ctx, rc);
  AddCommandLine(cl);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (auto u = FindUnknownCommand(app, argc, argv)) {
      std::cerr << "cowctl: unknown " << (u->command == "cowctl" ? "command" : "subcommand") << " '" << u->word
                << "'" << (u->command == "cowctl" ? "" : " of '" + u->command + "'") << " (one of: " << u->choices
                << "; see '" << u->command << " --help')\n";
      return 2;
    }
    std::string cmd = "cowctl";
    for (auto* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      cmd += " " + sub->get_name();
    }
    std::cerr << "cowctl: " << e.what() << " (see '" << cmd << " --help')\n";
    return 2;
  } catch (const UserError& e) {
    std::cerr << "cowctl: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "cowctl: internal error: " << e.what() << "\n";
    return 1;
  }
  return rc;
}

}  // namespace cowstore::cowctl
