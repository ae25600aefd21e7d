// SPDX-License-Identifier: Apache-2.0
// `cowctl metrics`' rendering (tools/cowctl/metrics.h) against a checker of
// the Prometheus text format, and the checker against broken expositions.
#include "tools/cowctl/metrics.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/cowctl/fake_tree.h"
#include "tests/cowctl/prometheus_check.h"
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

using testing::ParseExposition;

std::string Problems(const testing::Exposition& e) {
  std::string out;
  for (const auto& p : e.problems) out += p + "\n";
  return out;
}

TEST(PrometheusCheck, RefusesWhatTheCollectorWouldRefuse) {
  const std::string good = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3\n";
  EXPECT_TRUE(ParseExposition(good).problems.empty()) << Problems(ParseExposition(good));
  for (const std::string& broken : {
           std::string("# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\"} 3"),          // no final newline
           std::string("# HELP a A.\n# TYPE a counter\na 3\n"),                                  // counter not *_total
           std::string("# TYPE a gauge\na 3\n"),                                                  // no HELP
           std::string("# HELP a A.\na 3\n"),                                                     // no TYPE
           std::string("# HELP a A.\n# TYPE a gauge\na{x=1} 3\n"),                                // unquoted label
           std::string("# HELP a A.\n# TYPE a gauge\na{x=\"\\q\"} 3\n"),                          // bad escape
           std::string("# HELP a A.\n# TYPE a gauge\na{x=\"1\"} three\n"),                        // bad value
           std::string("# HELP a A.\n# TYPE a gauge\na 1\na 2\n"),                                // sample twice
           std::string("# HELP a A.\n# TYPE a gauge\n# HELP b B.\n# TYPE b gauge\na{x=\"1\"} 1\nb 1\na{x=\"2\"} 1\n"),
           std::string("# HELP a A.\na 1\n# TYPE a gauge\n"),                                     // TYPE after samples
           std::string("# HELP 1a A.\n# TYPE 1a gauge\n1a 1\n"),                                  // bad name
       }) {
    EXPECT_FALSE(ParseExposition(broken).problems.empty()) << broken;
  }
}

store::SpaceInfo TankSpace() {
  store::SpaceInfo s;
  s.pool_size_bytes = 1ull << 30;
  s.allocation_unit = 1 << 20;
  s.total_units = 1000;
  s.allocated_units = 100;
  s.metadata_units = 2;
  s.free_units = 900;
  s.thinning_units = 7;  // of the free ones, still being punched
  s.soft_threshold_units = 800;
  s.provisioned_bytes = 2ull << 30;
  s.backing_known = true;
  s.backing_grows = true;
  s.backing_size_bytes = 100ull << 30;
  s.backing_free_bytes = 500ull << 20;
  s.backing_short = true;
  store::LunInfo a;
  a.name = "vm1";
  a.size_bytes = 2ull << 30;
  a.block_size = 4096;
  a.mapped_bytes = 98ull << 20;
  s.luns = {a};
  return s;
}

TEST(Metrics, PoolsAndHandlerCountersInTheTextFormat) {
  std::vector<PoolSample> pools(3);
  pools[0].pool = "tank";
  pools[0].space = TankSpace();
  pools[0].served = true;
  pools[0].counters = std::vector<control::LunCounters>{
      {"vm1",
       {{"commands", 10}, {"read_bytes", 8192}, {"write_bytes", 4096}, {"ats", 3}, {"ats_miscompares", 1},
        {"xcopy", 2}, {"clone_blocks", 256}, {"copy_blocks", 1}, {"write_same_blocks", 2}, {"unmap_blocks", 4},
        {"check_conditions", 5}, {"no_space_errors", 1}, {"internal_errors", 0}, {"a new one", 7}}}};
  pools[1].pool = "offline";  // not served: space only
  pools[1].space = TankSpace();
  pools[1].space->backing_known = false;
  pools[2].pool = "we\"ird";  // unreadable (and a name the format must escape)
  std::string text = PrometheusText(pools);
  auto e = ParseExposition(text);
  ASSERT_TRUE(e.problems.empty()) << Problems(e) << text;
  auto v = [&](const std::string& k) {
    auto it = e.samples.find(k);
    EXPECT_NE(it, e.samples.end()) << k << "\n" << text;
    return it == e.samples.end() ? -1.0 : it->second;
  };
  EXPECT_EQ(v("cowstore_pool_up{pool=\"tank\"}"), 1);
  EXPECT_EQ(v("cowstore_pool_up{pool=\"we\\\"ird\"}"), 0);
  EXPECT_EQ(v("cowstore_pool_served{pool=\"tank\"}"), 1);
  EXPECT_EQ(v("cowstore_pool_served{pool=\"offline\"}"), 0);
  EXPECT_EQ(v("cowstore_pool_size_bytes{pool=\"tank\"}"), 1ull << 30);
  EXPECT_EQ(v("cowstore_pool_used_bytes{pool=\"tank\"}"), 100ull << 20);
  EXPECT_EQ(v("cowstore_pool_free_bytes{pool=\"tank\"}"), 900ull << 20);
  EXPECT_EQ(v("cowstore_pool_thinning_bytes{pool=\"tank\"}"), 7ull << 20);  // bytes, not units
  EXPECT_EQ(v("cowstore_pool_provisioned_bytes{pool=\"tank\"}"), 2ull << 30);
  EXPECT_EQ(v("cowstore_pool_overcommit_ratio{pool=\"tank\"}"), 2.0);
  EXPECT_EQ(v("cowstore_pool_soft_threshold_bytes{pool=\"tank\"}"), 800ull << 20);
  EXPECT_EQ(v("cowstore_pool_backing_free_bytes{pool=\"tank\"}"), 500ull << 20);
  EXPECT_EQ(v("cowstore_pool_backing_size_bytes{pool=\"tank\"}"), 100ull << 30);
  EXPECT_EQ(v("cowstore_pool_outgrows_backing{pool=\"tank\"}"), 1);
  EXPECT_EQ(e.samples.count("cowstore_pool_backing_free_bytes{pool=\"offline\"}"), 0u);  // unknown: absent, not 0
  EXPECT_EQ(v("cowstore_lun_size_bytes{pool=\"tank\",lun=\"vm1\"}"), 2ull << 30);
  EXPECT_EQ(v("cowstore_lun_mapped_bytes{pool=\"tank\",lun=\"vm1\"}"), 98ull << 20);
  EXPECT_EQ(v("cowstore_lun_commands_total{pool=\"tank\",lun=\"vm1\"}"), 10);
  EXPECT_EQ(v("cowstore_lun_read_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 8192);
  EXPECT_EQ(v("cowstore_lun_written_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 4096);
  EXPECT_EQ(v("cowstore_lun_vaai_ats_total{pool=\"tank\",lun=\"vm1\"}"), 3);
  EXPECT_EQ(v("cowstore_lun_vaai_ats_miscompares_total{pool=\"tank\",lun=\"vm1\"}"), 1);
  EXPECT_EQ(v("cowstore_lun_vaai_xcopy_total{pool=\"tank\",lun=\"vm1\"}"), 2);
  // Blocks become bytes (4096-byte blocks).
  EXPECT_EQ(v("cowstore_lun_vaai_xcopy_cloned_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 256 * 4096);
  EXPECT_EQ(v("cowstore_lun_vaai_xcopy_copied_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 4096);
  EXPECT_EQ(v("cowstore_lun_vaai_write_same_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 2 * 4096);
  EXPECT_EQ(v("cowstore_lun_vaai_unmapped_bytes_total{pool=\"tank\",lun=\"vm1\"}"), 4 * 4096);
  EXPECT_EQ(v("cowstore_lun_check_conditions_total{pool=\"tank\",lun=\"vm1\"}"), 5);
  EXPECT_EQ(v("cowstore_lun_no_space_errors_total{pool=\"tank\",lun=\"vm1\"}"), 1);
  EXPECT_EQ(v("cowstore_lun_internal_errors_total{pool=\"tank\",lun=\"vm1\"}"), 0);
  EXPECT_EQ(v("cowstore_lun_handler_counter_total{pool=\"tank\",lun=\"vm1\",counter=\"a new one\"}"), 7);
  EXPECT_EQ(e.types["cowstore_lun_commands_total"], "counter");
  EXPECT_EQ(e.types["cowstore_pool_free_bytes"], "gauge");
  EXPECT_EQ(e.types["cowstore_pool_thinning_bytes"], "gauge");
}

TEST(Metrics, AnOlderHandlersZeroBlocksCountsAsWriteSame) {
  PoolSample p;
  p.pool = "tank";
  p.space = TankSpace();
  p.counters = std::vector<control::LunCounters>{{"vm1", {{"zero_blocks", 3}}}};
  auto e = ParseExposition(PrometheusText({p}));
  ASSERT_TRUE(e.problems.empty()) << Problems(e);
  EXPECT_EQ(e.samples["cowstore_lun_vaai_write_same_bytes_total{pool=\"tank\",lun=\"vm1\"}"], 3 * 4096);
}

TEST(Metrics, TheOutputFileIsReplacedWhole) {
  cowctl::testing::TempDir dir;
  std::string f = dir.path() + "/cowstore.prom";
  WriteFileAtomically(f, "old\n");
  WriteFileAtomically(f, "new\n");
  EXPECT_EQ(cowctl::testing::ReadText(f), "new\n");
  struct stat st;
  ASSERT_EQ(::stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // the collector runs as another user
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) entries += e.exists();
  EXPECT_EQ(entries, 1);  // no temporary file left
  EXPECT_THROW(WriteFileAtomically(dir.path() + "/missing/x.prom", "x"), UserError);
  EXPECT_EQ(cowctl::testing::ReadText(f), "new\n");
}

}  // namespace
}  // namespace cowstore::cowctl
