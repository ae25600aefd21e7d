// SPDX-License-Identifier: Apache-2.0
// cowctl top: live per-LUN rates from the handler's counters, with procps
// top's -d (delay) and -n (iterations); --json gives JSON Lines, one object
// per sample, flushed as it is written (for `jq`, a log shipper, a pipe).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <thread>

#include "tools/cowctl/cmd_common.h"

namespace cowstore::cowctl {
namespace {

struct LunSample {
  uint32_t block_size = 512;
  std::map<std::string, uint64_t> counters;
};
using Snap = std::map<std::string, LunSample>;  // "pool/lun" ->

Snap Sample(const Context& ctx) {
  Snap s;
  for (const auto& p : PoolNames(ctx)) {
    auto h = ConnectPool(ctx, p);
    if (!h) continue;
    auto cs = h->Counters();
    if (!cs) continue;
    std::map<std::string, uint32_t> block_sizes;
    for (const auto& l : h->Space().luns) block_sizes[l.name] = l.block_size;
    for (const auto& c : *cs) {
      auto& m = s[p + "/" + c.lun];
      if (block_sizes.count(c.lun)) m.block_size = block_sizes[c.lun];
      for (const auto& [k, v] : c.counters) m.counters[k] = v;
    }
  }
  return s;
}

std::string Rate(double bytes_per_s) { return FormatSize(static_cast<uint64_t>(bytes_per_s + 0.5)) + "/s"; }

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

void Top(const Context& ctx, double delay, int iterations) {
  if (delay < 0.1) throw UserError("-d (--delay) must be at least 0.1 seconds");
  if (iterations < 0) throw UserError("-n (--iterations) must be 0 (until interrupted) or more");
  bool tty = ::isatty(1) == 1 && !ctx.json;
  Snap prev = Sample(ctx);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; iterations == 0 || i < iterations; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    Snap cur = Sample(ctx);
    auto t1 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
    // Per second over the measured interval; a counter that went back (the
    // LUN was reopened) counts from 0.
    auto per_s = [&](const std::string& lun, const char* k) {
      const auto& c = cur[lun].counters;
      uint64_t b = c.count(k) ? c.at(k) : 0;
      uint64_t a = prev.count(lun) && prev[lun].counters.count(k) ? prev[lun].counters[k] : 0;
      return static_cast<double>(b >= a ? b - a : b) / dt;
    };
    // Counters the handler keeps in blocks, as bytes.
    auto bytes_per_s = [&](const std::string& lun, const char* k) { return per_s(lun, k) * cur[lun].block_size; };
    // zero_blocks: an older handler's name for write_same_blocks.
    auto zeroed = [&](const std::string& lun) {
      return bytes_per_s(lun, "write_same_blocks") + bytes_per_s(lun, "zero_blocks");
    };
    Json luns = Json::array();
    Table t({"LUN", "IOPS", "READ", "WRITE", "ATS/s", "MISCMP", "XCOPY/s", "CLONED", "COPIED", "ZEROED", "UNMAPPED"});
    for (const auto& [lun, m] : cur) {
      uint64_t miscompares = m.counters.count("ats_miscompares") ? m.counters.at("ats_miscompares") : 0;
      Json j = Json::object();
      j["lun"] = lun;
      j["iops"] = per_s(lun, "commands");
      j["read_bytes_per_s"] = per_s(lun, "read_bytes");
      j["write_bytes_per_s"] = per_s(lun, "write_bytes");
      j["ats_per_s"] = per_s(lun, "ats");
      j["ats_miscompares"] = miscompares;
      j["xcopy_per_s"] = per_s(lun, "xcopy");
      j["cloned_bytes_per_s"] = bytes_per_s(lun, "clone_blocks");
      j["copied_bytes_per_s"] = bytes_per_s(lun, "copy_blocks");
      j["zeroed_bytes_per_s"] = zeroed(lun);
      j["unmapped_bytes_per_s"] = bytes_per_s(lun, "unmap_blocks");
      Json all = Json::object();
      for (const auto& [k, v] : m.counters) all[k] = v;
      j["counters"] = all;
      luns.push_back(j);
      t.Row({lun, Num(per_s(lun, "commands")), Rate(per_s(lun, "read_bytes")), Rate(per_s(lun, "write_bytes")),
             Num(per_s(lun, "ats")), std::to_string(miscompares), Num(per_s(lun, "xcopy")),
             Rate(bytes_per_s(lun, "clone_blocks")), Rate(bytes_per_s(lun, "copy_blocks")), Rate(zeroed(lun)),
             Rate(bytes_per_s(lun, "unmap_blocks"))});
    }
    char hdr[64];
    std::time_t now = std::time(nullptr);
    if (ctx.json) {
      // JSON Lines: one sample, one line, on its way at once.
      Json sample = Json::object();
      std::strftime(hdr, sizeof hdr, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      sample["time"] = std::string(hdr);
      sample["seconds"] = dt;
      sample["luns"] = luns;
      std::cout << sample.Dump(0) << "\n" << std::flush;
    } else {
      std::string human;
      if (tty) human += "\033[H\033[2J";
      std::strftime(hdr, sizeof hdr, "%H:%M:%S", std::localtime(&now));
      char every[32];
      std::snprintf(every, sizeof every, "%.1f", delay);
      human += std::string("cowctl top - ") + hdr + " (every " + every + " s; rates per second)\n";
      human += cur.empty() ? "no pool is served by a running handler: nothing to show (is tcmu-runner running and "
                             "a cowstore LUN exported?)\n"
                           : t.Render();
      std::cout << human << std::flush;
    }
    prev = std::move(cur);
  }
}

}  // namespace

void AddTopCommand(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& delay = cl.Keep(double{1.0});
  auto& iterations = cl.Keep(int{0});
  auto* top = cl.app.add_subcommand("top", "Live per-LUN IOPS, throughput (bytes/s) and VAAI operations");
  top->add_option("-d,--delay,--interval", delay, "Seconds between updates, as top -d")->capture_default_str();
  top->add_option("-n,--iterations,--count", iterations, "Number of updates, as top -n (0: until interrupted)")
      ->capture_default_str();
  top->callback([&] { Top(ctx, delay, iterations); });
}

}  // namespace cowstore::cowctl
