// SPDX-License-Identifier: Apache-2.0
// What cowctl's commands share: how each noun's file adds its subcommands
// (one Add*Commands function a file, called from commands.cc), the options
// every command reads (Context), output, and the few helpers that more than
// one noun uses. A command's own code lives in its noun's file: cmd_pool.cc,
// cmd_lun.cc, cmd_backstore.cc, cmd_export.cc, cmd_vaai.cc, cmd_top.cc, cmd_metrics.cc,
// cmd_config.cc (save, restore).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tools/cowctl/lio.h"
#include "tools/cowctl/output.h"
#include "tools/cowctl/pools.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {

// The command line being built: each noun adds its subcommands to `app`.
// A callback reads the global options from `ctx` and may set the exit status
// in `rc`. Option values must outlive the parse: Keep() gives them a home
// that lives as long as this object.
class CommandLine {
 public:
  CommandLine(CLI::App& app, Context& ctx, int& rc) : app(app), ctx(ctx), rc(rc) {}
  template <typename T>
  T& Keep(T initial) {
    auto p = std::make_shared<T>(std::move(initial));
    kept_.push_back(p);
    return *p;
  }

  CLI::App& app;
  Context& ctx;
  int& rc;

 private:
  std::vector<std::shared_ptr<void>> kept_;
};

void AddPoolCommands(CommandLine& cl);       // cmd_pool.cc: pool create/list/show/check/scrub/grow/delete/upgrade
void AddLunCommands(CommandLine& cl);        // cmd_lun.cc: lun create/list/show/resize/delete/clone/snapshot/import/export
void AddBackstoreCommands(CommandLine& cl);  // cmd_backstore.cc: backstore create/list/delete
void AddExportCommands(CommandLine& cl);     // cmd_export.cc: export iscsi/loop/list, unexport
void AddVaaiCommands(CommandLine& cl);       // cmd_vaai.cc: vaai status
void AddTopCommand(CommandLine& cl);         // cmd_top.cc: top
void AddMetricsCommand(CommandLine& cl);     // cmd_metrics.cc: metrics (Prometheus text format)
void AddConfigCommands(CommandLine& cl);     // cmd_config.cc: save, restore
void AddLsCommand(CommandLine& cl);          // cmd_ls.cc: ls (the whole tree)

// ---------------------------------------------------------------- output (cmd_common.cc)

Lio MakeLio(const Context& ctx);
// Prints `j` with --json, else `human`.
void Emit(const Context& ctx, const Json& j, const std::string& human);

// ---------------------------------------------------------------- LUNs (cmd_common.cc)

std::optional<Backstore> BackstoreOf(const Context& ctx, const LunRef& ref);
// Seconds since the epoch as ISO 8601 UTC (2026-12-01T15:30:00Z).
std::string TimeText(uint64_t unix_seconds);
std::string LunNaa(const store::LunInfo& l, const std::optional<Backstore>& bs);
Json LunJson(const std::string& pool, const store::LunInfo& l, const std::optional<Backstore>& bs);

// Opens a pool and runs fn on it, again while the store (or the handler,
// through its control reply) says kBusy: the handler is briefly closing the
// LUN. Any other error, whatever its words, is thrown at once.
template <typename F>
auto WithPool(const Context& ctx, const std::string& pool, F&& fn) {
  for (int attempt = 0;; ++attempt) {
    auto h = OpenPool(ctx, pool);
    try {
      return fn(*h);
    } catch (const StoreError& e) {
      if (e.code() != store::Code::kBusy || attempt >= 25) throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// ---------------------------------------------------------------- pools (cmd_pool.cc)

// pool create's defaults, written here only: a 64 KiB allocation unit and a
// 4 KiB grain, so a new pool is format 3 and a clone owns only the 4 KiB
// blocks written after it. A --grain equal to the allocation unit makes
// format 2 (`--allocation-unit 1M --grain 1M`: the pool every cowctl made
// before, which an older cowstore reads). They are for the command line
// only: restore makes a saved pool with its entry's own allocation unit and
// grain (config.h: an entry without them means 1M and format 2).
inline constexpr char kDefaultAllocationUnit[] = "64K";
inline constexpr char kDefaultGrain[] = "4K";

struct PoolCreateArgs {
  std::string name, size, device, file, au = kDefaultAllocationUnit;
  uint32_t soft_threshold = 80;
  // A pool file larger than its filesystem's free space (capacity.h, the
  // one overcommit rule); warned about when allowed.
  bool overcommit = false;
  // The sharing unit (--grain): below the AU makes a format 3 pool, the AU
  // a format 2 one. (Initialised: callers list the fields above
  // positionally.)
  std::string grain = kDefaultGrain;
};
void PoolCreate(const Context& ctx, const PoolCreateArgs& a);
// What a clone and its source stop sharing when one is written: the pool's
// grain, the unit its space is counted in (the AU at format 2, and from a
// handler older than SpaceInfo::unit_bytes).
uint64_t SharingUnit(const store::SpaceInfo& s);

// ---------------------------------------------------------------- backstores (cmd_backstore.cc)

struct BackstoreArgs {
  bool make = false;
  std::string name, copy_group;
  std::string wce;  // "", "0", "1"
  std::string thin_on_thin{};  // "", "0", "1" (initialised: callers list the fields above positionally)
  // Any backstore option given (then lun create/clone make the backstore).
  bool any_given() const { return !copy_group.empty() || !wce.empty() || !thin_on_thin.empty() || !name.empty(); }
};
// --backstore (with_flag), --backstore-name, --copy-group, --wce, --thin-on-thin.
void AddBackstoreOptions(CLI::App* c, BackstoreArgs& bsa, bool with_flag);
Cfgstring MakeCfg(const LunRef& ref, const BackstoreArgs& b);
// Creates the LIO backstore of an existing LUN. The caller has released
// its pool handle: tcmu-runner opens the pool when the backstore is enabled.
Backstore MakeBackstore(const Context& ctx, const LunRef& ref, const store::LunInfo& l, const BackstoreArgs& b);
store::LunInfo LunInfoOf(const Context& ctx, const LunRef& ref);

// ---------------------------------------------------------------- exports (cmd_export.cc)

void Unexport(const Context& ctx, const LunRef& ref, bool and_backstore);

}  // namespace cowstore::cowctl
