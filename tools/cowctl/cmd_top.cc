// SPDX-License-Identifier: Apache-2.0
// cowctl top: live per-LUN rates from the handler's counters.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <thread>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

void Top(const Context& ctx, double interval, int count) {
  if (interval < 0.1) throw UserError("--interval must be at least 0.1 seconds");
  using Snap = std::map<std::string, std::map<std::string, uint64_t>>;  // pool/lun -> counters
  auto snapshot = [&]() {
    Snap s;
    for (const auto& p : PoolNames(ctx)) {
      auto h = ConnectPool(ctx, p);
      if (!h) continue;
      auto cs = h->Counters();
      if (!cs) continue;
      for (const auto& c : *cs) {
        auto& m = s[p + "/" + c.lun];
        for (const auto& [k, v] : c.counters) m[k] = v;
      }
    }
    return s;
  };
  bool tty = ::isatty(1) == 1 && !ctx.json;
  Snap prev = snapshot();
  auto t0 = std::chrono::steady_clock::now();
  if (prev.empty() && count != 0 && !tty) {
    // Degrade gracefully: nothing serves a pool, so there is nothing to rate.
  }
  for (int i = 0; count == 0 || i < count; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    Snap cur = snapshot();
    auto t1 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    auto rate = [&](const std::string& lun, const char* k) {
      uint64_t a = prev.count(lun) && prev[lun].count(k) ? prev[lun][k] : 0;
      uint64_t b = cur[lun].count(k) ? cur[lun][k] : 0;
      return b >= a ? static_cast<double>(b - a) / dt : 0.0;
    };
    Json arr = Json::array();
    Table t({"LUN", "IOPS", "READ/s", "WRITE/s", "ATS/s", "MISCMP", "XCOPY/s", "CLONED/s", "COPIED/s", "ZEROED/s",
             "UNMAPPED/s"});
    // Counter names as the handler reports them (zero_blocks: older name).
    auto zeroed = [&](const std::string& lun) { return rate(lun, "write_same_blocks") + rate(lun, "zero_blocks"); };
    for (const auto& [lun, m] : cur) {
      uint64_t miscompares = m.count("ats_miscompares") ? m.at("ats_miscompares") : 0;
      Json j = Json::object();
      j["lun"] = lun;
      j["iops"] = rate(lun, "commands");
      j["read_bytes_per_s"] = rate(lun, "read_bytes");
      j["write_bytes_per_s"] = rate(lun, "write_bytes");
      j["ats_per_s"] = rate(lun, "ats");
      j["ats_miscompares"] = miscompares;
      j["xcopy_per_s"] = rate(lun, "xcopy");
      j["clone_blocks_per_s"] = rate(lun, "clone_blocks");
      j["copy_blocks_per_s"] = rate(lun, "copy_blocks");
      j["zero_blocks_per_s"] = zeroed(lun);
      j["unmap_blocks_per_s"] = rate(lun, "unmap_blocks");
      Json all = Json::object();
      for (const auto& [k, v] : m) all[k] = v;
      j["counters"] = all;
      arr.push_back(j);
      auto num = [](double v) {
        char b[32];
        std::snprintf(b, sizeof b, "%.0f", v);
        return std::string(b);
      };
      t.Row({lun, num(rate(lun, "commands")), FormatSize(static_cast<uint64_t>(rate(lun, "read_bytes"))),
             FormatSize(static_cast<uint64_t>(rate(lun, "write_bytes"))), num(rate(lun, "ats")),
             std::to_string(miscompares), num(rate(lun, "xcopy")), num(rate(lun, "clone_blocks")),
             num(rate(lun, "copy_blocks")), num(zeroed(lun)), num(rate(lun, "unmap_blocks"))});
    }
    std::string human;
    if (tty) human += "\033[H\033[2J";
    char hdr[64];
    std::time_t now = std::time(nullptr);
    std::strftime(hdr, sizeof hdr, "%H:%M:%S", std::localtime(&now));
    human += std::string("cowctl top - ") + hdr + " (every " + std::to_string(interval).substr(0, 4) + " s)\n";
    human += cur.empty() ? "no pool is served by a running handler: nothing to show (is tcmu-runner running and "
                           "a cowstore LUN exported?)\n"
                         : t.Render();
    Emit(ctx, arr, human);
    prev = std::move(cur);
  }
}

}  // namespace

void AddTopCommand(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& interval = cl.Keep(double{1.0});
  auto& count = cl.Keep(int{0});
  auto* top = cl.app.add_subcommand("top", "Live per-LUN IOPS, throughput and VAAI operations");
  top->add_option("--interval,-n", interval, "Seconds between updates")->capture_default_str();
  top->add_option("--count,-c", count, "Number of updates (0: until interrupted)")->capture_default_str();
  top->callback([&] { Top(ctx, interval, count); });
}

}  // namespace cowstore::cowctl
