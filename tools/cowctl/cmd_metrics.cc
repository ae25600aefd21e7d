// SPDX-License-Identifier: Apache-2.0
// cowctl metrics: every pool's space and, for a pool the handler serves, its
// per-LUN counters, in the Prometheus text format (metrics.h) on stdout or,
// for node_exporter's textfile collector, replacing --output FILE whole.
#include <iostream>

#include "tools/cowctl/cmd_common.h"
#include "tools/cowctl/metrics.h"

namespace cowstore::cowctl {
namespace {

std::vector<PoolSample> Gather(const Context& ctx) {
  std::vector<PoolSample> out;
  for (const auto& name : PoolNames(ctx)) {
    PoolSample p;
    p.pool = name;
    try {
      auto h = OpenPool(ctx, name, true);
      p.space = h->Space();
      p.served = h->remote();
      if (p.served) p.counters = h->Counters();
    } catch (const UserError& e) {
      // A pool that cannot be read is a sample (cowstore_pool_up 0), not a
      // failed scrape: the others are still worth having. Said on stderr.
      std::cerr << "cowctl: warning: pool " << name << ": " << e.what() << "\n";
    }
    out.push_back(std::move(p));
  }
  return out;
}

void Metrics(const Context& ctx, const std::string& output) {
  if (ctx.json) throw UserError("metrics writes the Prometheus text format: --json does not apply");
  std::string text = PrometheusText(Gather(ctx));
  if (output.empty()) {
    std::cout << text << std::flush;
  } else {
    WriteFileAtomically(output, text);
  }
}

}  // namespace

void AddMetricsCommand(CommandLine& cl) {
  Context& ctx = cl.ctx;
  auto& output = cl.Keep(std::string());
  auto* m = cl.app.add_subcommand("metrics", "Pool space and handler counters in the Prometheus text format");
  m->add_option("--output,-o", output,
                "Replace this file whole (temporary file and rename), e.g. for node_exporter's textfile collector: "
                "/var/lib/prometheus/node-exporter/cowstore.prom");
  m->callback([&] { Metrics(ctx, output); });
}

}  // namespace cowstore::cowctl
