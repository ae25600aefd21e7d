// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "tools/cowctl/capacity.h"
#include "tools/cowctl/lio.h"  // ErrnoAdvice
#include "tools/cowctl/util.h"

namespace cowstore::cowctl {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Label values may hold any UTF-8; the format escapes \, " and newline.
std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// Families in the order first added; every sample of a family together
// under its HELP and TYPE lines, as the format requires.
class Exposition {
 public:
  void Add(const std::string& name, const char* type, const std::string& help, const Labels& labels,
           const std::string& value) {
    auto [it, fresh] = index_.emplace(name, families_.size());
    if (fresh) families_.push_back({name, type, help, {}});
    std::string line = name;
    if (!labels.empty()) {
      line += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) line += ',';
        line += labels[i].first + "=\"" + EscapeLabel(labels[i].second) + '"';
      }
      line += '}';
    }
    families_[it->second].samples.push_back(line + ' ' + value);
  }
  void Gauge(const std::string& name, const std::string& help, const Labels& l, uint64_t v) {
    Add(name, "gauge", help, l, std::to_string(v));
  }
  void Counter(const std::string& name, const std::string& help, const Labels& l, uint64_t v) {
    Add(name, "counter", help, l, std::to_string(v));
  }
  std::string Render() const {
    std::string out;
    for (const auto& f : families_) {
      out += "# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
      for (const auto& s : f.samples) out += s + "\n";
    }
    return out;
  }

 private:
  struct Family {
    std::string name, type, help;
    std::vector<std::string> samples;
  };
  std::vector<Family> families_;
  std::map<std::string, size_t> index_;
};

// The handler's counters (pool_registry.cc names them) as metric families.
// Block counts become bytes (Prometheus wants base units).
struct CounterMetric {
  const char* counter;
  const char* metric;
  const char* help;
  bool blocks;
};
constexpr CounterMetric kCounterMetrics[] = {
    {"commands", "cowstore_lun_commands_total", "SCSI commands the handler executed for the LUN.", false},
    {"read_bytes", "cowstore_lun_read_bytes_total", "Bytes read by initiators.", false},
    {"write_bytes", "cowstore_lun_written_bytes_total", "Bytes written by initiators.", false},
    {"ats", "cowstore_lun_vaai_ats_total", "COMPARE AND WRITE commands (VAAI ATS).", false},
    {"ats_miscompares", "cowstore_lun_vaai_ats_miscompares_total",
     "COMPARE AND WRITE commands that found other data (ATS miscompares).", false},
    {"xcopy", "cowstore_lun_vaai_xcopy_total", "EXTENDED COPY commands (VAAI Clone).", false},
    {"clone_blocks", "cowstore_lun_vaai_xcopy_cloned_bytes_total",
     "Bytes EXTENDED COPY shared by reference (metadata only).", true},
    {"copy_blocks", "cowstore_lun_vaai_xcopy_copied_bytes_total", "Bytes EXTENDED COPY copied as data.", true},
    {"write_same_blocks", "cowstore_lun_vaai_write_same_bytes_total", "Bytes written by WRITE SAME (VAAI Zero).",
     true},
    {"zero_blocks", "cowstore_lun_vaai_write_same_bytes_total", "Bytes written by WRITE SAME (VAAI Zero).", true},
    {"unmap_blocks", "cowstore_lun_vaai_unmapped_bytes_total", "Bytes deallocated by UNMAP (VAAI Delete).", true},
    {"check_conditions", "cowstore_lun_check_conditions_total", "Commands answered with CHECK CONDITION.", false},
    {"no_space_errors", "cowstore_lun_no_space_errors_total",
     "Writes refused because the pool was full (07/27/07).", false},
    {"internal_errors", "cowstore_lun_internal_errors_total", "Commands failed by an internal or I/O error.", false},
};

void AddPool(Exposition& e, const PoolSample& p) {
  const Labels pl{{"pool", p.pool}};
  e.Gauge("cowstore_pool_up", "1 if the pool's space could be read, else 0.", pl, p.space ? 1 : 0);
  e.Gauge("cowstore_pool_served", "1 if a running handler (tcmu-runner) serves the pool.", pl, p.served ? 1 : 0);
  if (!p.space) return;
  const store::SpaceInfo& s = *p.space;
  e.Gauge("cowstore_pool_size_bytes", "Declared size of the pool.", pl, s.pool_size_bytes);
  e.Gauge("cowstore_pool_used_bytes", "Allocated bytes of the pool (data and metadata).", pl, s.Bytes(s.allocated_units));
  e.Gauge("cowstore_pool_free_bytes", "Bytes the pool can still allocate.", pl, s.Bytes(s.free_units));
  e.Gauge("cowstore_pool_thinning_bytes",
          "Freed bytes still being returned to the backing filesystem or device (counted in "
          "cowstore_pool_free_bytes).",
          pl, s.Bytes(s.thinning_units));
  e.Gauge("cowstore_pool_metadata_bytes", "Bytes of the pool holding metadata.", pl, s.Bytes(s.metadata_units));
  e.Gauge("cowstore_pool_saved_bytes", "Bytes the LUNs map beyond the distinct data (shared by clones).", pl,
          s.saved_bytes);
  e.Gauge("cowstore_pool_provisioned_bytes", "Sum of the sizes of the pool's LUNs.", pl, s.provisioned_bytes);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.6g", OvercommitRatio(s));
  e.Add("cowstore_pool_overcommit_ratio", "gauge", "Provisioned bytes over the pool's size.", pl, ratio);
  e.Gauge("cowstore_pool_soft_threshold_bytes",
          "Allocated bytes at which initiators get THIN PROVISIONING SOFT THRESHOLD REACHED (0: off).", pl,
          s.Bytes(s.soft_threshold_units));
  if (s.backing_known) {
    e.Gauge("cowstore_pool_backing_size_bytes", "Size of the filesystem or device holding the pool.", pl,
            s.backing_size_bytes);
    e.Gauge("cowstore_pool_backing_free_bytes",
            "Free bytes of the filesystem holding the pool file (for a device pool: the device's size).", pl,
            s.backing_free_bytes);
    e.Gauge("cowstore_pool_outgrows_backing",
            "1 if the backing filesystem has less free space than the pool can still grow by.", pl,
            s.backing_short ? 1 : 0);
  }
  for (const auto& l : s.luns) {
    const Labels ll{{"pool", p.pool}, {"lun", l.name}};
    e.Gauge("cowstore_lun_size_bytes", "Size of the LUN.", ll, l.size_bytes);
    e.Gauge("cowstore_lun_mapped_bytes", "Bytes of the LUN backed by allocated units.", ll, l.mapped_bytes);
    e.Gauge("cowstore_lun_shared_bytes", "Mapped bytes of the LUN shared with another LUN.", ll, l.shared_bytes);
  }
}

void AddCounters(Exposition& e, const PoolSample& p) {
  if (!p.counters) return;
  for (const auto& c : *p.counters) {
    uint64_t bs = 512;
    if (p.space) {
      for (const auto& l : p.space->luns) {
        if (l.name == c.lun) bs = l.block_size;
      }
    }
    const Labels ll{{"pool", p.pool}, {"lun", c.lun}};
    // Several handler names may feed one family (an older name): summed.
    std::map<const CounterMetric*, uint64_t> known;
    for (const auto& [name, value] : c.counters) {
      const CounterMetric* m = nullptr;
      for (const auto& cm : kCounterMetrics) {
        if (name == cm.counter) m = &cm;
      }
      if (!m) {
        Labels ol = ll;
        ol.emplace_back("counter", name);
        e.Counter("cowstore_lun_handler_counter_total", "Other handler counters, by the handler's name.", ol, value);
        continue;
      }
      // Aliases share a metric: keep the first entry's pointer as the key.
      for (const auto& cm : kCounterMetrics) {
        if (std::strcmp(cm.metric, m->metric) == 0) {
          m = &cm;
          break;
        }
      }
      known[m] += m->blocks ? value * bs : value;
    }
    for (const auto& cm : kCounterMetrics) {
      auto it = known.find(&cm);
      if (it != known.end()) e.Counter(cm.metric, cm.help, ll, it->second);
    }
  }
}

}  // namespace

std::string PrometheusText(const std::vector<PoolSample>& pools) {
  Exposition e;
  for (const auto& p : pools) AddPool(e, p);
  for (const auto& p : pools) AddCounters(e, p);
  return e.Render();
}

void WriteFileAtomically(const std::string& path, const std::string& text, mode_t mode) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty()) throw UserError("--output " + path + ": give a file name");
  // A dot name: the textfile collector reads only *.prom files.
  std::string tmp_name = dir + "/." + base + ".tmp-XXXXXX";
  std::vector<char> tmp(tmp_name.begin(), tmp_name.end());
  tmp.push_back('\0');
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string advice = ErrnoAdvice(err, "");
    throw UserError("cannot write " + path + ": " + std::strerror(err) + (advice.empty() ? "" : " (" + advice + ")"));
  }
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.data());
    throw UserError("cannot write " + path + " (" + what + "): " + std::strerror(err));
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, mode) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    throw UserError("cannot write " + path + " (close): " + std::strerror(err));
  }
  if (::rename(tmp.data(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.data());
    throw UserError("cannot write " + path + " (rename): " + std::strerror(err));
  }
}

}  // namespace cowstore::cowctl
