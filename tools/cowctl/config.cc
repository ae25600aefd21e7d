// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "handler/store/names.h"

namespace cowstore::cowctl {

bool ValidUuidString(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

namespace {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void Fail(const YAML::Node& n, const std::string& field, const std::string& what) const {
    int line = n.IsDefined() ? n.Mark().line + 1 : 0;
    throw UserError(file_ + ":" + (line > 0 ? std::to_string(line) : "?") + ": " + field + ": " + what);
  }

  void Keys(const YAML::Node& n, const std::string& field, std::set<std::string> allowed) const {
    if (!n.IsMap()) Fail(n, field, "expected a mapping");
    for (const auto& kv : n) {
      auto k = kv.first.as<std::string>();
      if (!allowed.count(k)) Fail(kv.first, field + "." + k, "unknown field");
    }
  }

  std::string Str(const YAML::Node& parent, const YAML::Node& at, const std::string& key,
                  const std::string& field, bool required) const {
    auto n = parent[key];
    if (!n) {
      if (required) Fail(at, field + "." + key, "missing");
      return {};
    }
    if (!n.IsScalar()) Fail(n, field + "." + key, "expected a string");
    return n.as<std::string>();
  }

  uint64_t Size(const YAML::Node& parent, const std::string& key, const std::string& field,
                bool required, uint64_t def) const {
    auto n = parent[key];
    if (!n) {
      if (required) Fail(parent, field + "." + key, "missing");
      return def;
    }
    if (!n.IsScalar()) Fail(n, field + "." + key, "expected a size");
    try {
      return ParseSize(n.as<std::string>(), key.c_str());
    } catch (const UserError& e) {
      Fail(n, field + "." + key, e.what());
    }
  }

  std::vector<YAML::Node> Seq(const YAML::Node& parent, const std::string& key,
                              const std::string& field) const {
    std::vector<YAML::Node> out;
    auto n = parent[key];
    if (!n || n.IsNull()) return out;
    if (!n.IsSequence()) Fail(n, field + "." + key, "expected a list");
    for (const auto& e : n) out.push_back(e);
    return out;
  }

  void Name(const YAML::Node& n, const std::string& v, const std::string& field, const char* what) const {
    if (!ValidName(v)) {
      Fail(n, field, std::string("invalid ") + what + " name '" + v +
                         "' (1-64 of A-Z a-z 0-9 _ . -, not starting with . or -)");
    }
  }

  std::vector<ExportLun> Luns(const YAML::Node& parent, const std::string& field) const {
    std::vector<ExportLun> out;
    std::set<uint32_t> seen;
    auto seq = Seq(parent, "luns", field);
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto& n = seq[i];
      std::string f = field + ".luns[" + std::to_string(i) + "]";
      Keys(n, f, {"lun", "pool", "name"});
      ExportLun e;
      uint64_t v = Size(n, "lun", f, true, 0);
      if (v > 65535) Fail(n["lun"], f + ".lun", "LUN number must be 0..65535");
      e.lun = static_cast<uint32_t>(v);
      if (!seen.insert(e.lun).second) Fail(n["lun"], f + ".lun", "LUN number used twice");
      e.pool = Str(n, n, "pool", f, true);
      Name(n["pool"], e.pool, f + ".pool", "pool");
      e.name = Str(n, n, "name", f, true);
      Name(n["name"], e.name, f + ".name", "LUN");
      out.push_back(e);
    }
    return out;
  }

  // An ACL's mapped_luns: which of the target's LUNs (`lun`, one of its
  // luns[].lun) the initiator sees under which number (`mapped_lun`).
  std::vector<MappedLun> MappedLuns(const YAML::Node& acl, const std::string& af, const IscsiConfig& t) const {
    std::vector<MappedLun> out;
    std::set<uint32_t> numbers, luns;
    auto seq = Seq(acl, "mapped_luns", af);
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto& n = seq[i];
      std::string f = af + ".mapped_luns[" + std::to_string(i) + "]";
      Keys(n, f, {"lun", "mapped_lun", "write_protect"});
      MappedLun m;
      uint64_t l = Size(n, "lun", f, true, 0);
      bool known = std::any_of(t.luns.begin(), t.luns.end(), [&](const ExportLun& e) { return e.lun == l; });
      if (!known) {
        std::string have;
        for (const auto& e : t.luns) have += (have.empty() ? "" : ", ") + std::to_string(e.lun);
        Fail(n["lun"], f + ".lun",
             "target " + t.target + " has no LUN " + std::to_string(l) +
                 (have.empty() ? " (it lists no luns)" : " (its luns: " + have + ")"));
      }
      m.lun = static_cast<uint32_t>(l);
      if (!luns.insert(m.lun).second) Fail(n["lun"], f + ".lun", "LUN " + std::to_string(l) + " mapped twice");
      uint64_t ml = Size(n, "mapped_lun", f, true, 0);
      if (ml > 65535) Fail(n["mapped_lun"], f + ".mapped_lun", "mapped LUN number must be 0..65535");
      m.mapped_lun = static_cast<uint32_t>(ml);
      if (!numbers.insert(m.mapped_lun).second) {
        Fail(n["mapped_lun"], f + ".mapped_lun", "mapped LUN number used twice");
      }
      if (n["write_protect"]) {
        std::string w = n["write_protect"].IsScalar() ? n["write_protect"].as<std::string>() : "";
        if (w == "true" || w == "1" || w == "on") m.write_protect = true;
        else if (w == "false" || w == "0" || w == "off") m.write_protect = false;
        else Fail(n["write_protect"], f + ".write_protect", "expected true or false");
      }
      out.push_back(m);
    }
    return out;
  }

  Config Parse(const YAML::Node& root) const {
    Config c;
    if (root.IsNull() || !root.IsDefined()) return c;
    Keys(root, "(top)", {"version", "pools", "iscsi", "loopback"});
    // Version 2 added an ACL's mapped_luns; a version 1 file (none) still
    // reads, and an older cowctl refuses a version 2 file rather than map
    // every LUN into every ACL. Version 3 added pools[].uuid; an older
    // cowctl refuses it rather than restore without checking identities.
    if (root["version"]) {
      std::string v = root["version"].IsScalar() ? root["version"].as<std::string>() : "";
      if (v != "1" && v != "2" && v != "3") {
        Fail(root["version"], "version", "unsupported version (this cowctl reads versions 1 to 3)");
      }
    }
    // Where each NAA identifier and backstore name was first seen.
    std::map<std::string, std::string> naas, backstores;
    std::set<std::string> pool_names;
    auto pools = Seq(root, "pools", "");
    for (size_t i = 0; i < pools.size(); ++i) {
      const auto& n = pools[i];
      std::string f = "pools[" + std::to_string(i) + "]";
      Keys(n, f, {"name", "uuid", "device", "file", "size", "allocation_unit", "grain", "soft_threshold", "luns"});
      PoolConfig p;
      p.name = Str(n, n, "name", f, true);
      Name(n["name"], p.name, f + ".name", "pool");
      if (!pool_names.insert(p.name).second) Fail(n["name"], f + ".name", "pool '" + p.name + "' listed twice");
      p.uuid = Lower(Str(n, n, "uuid", f, false));
      if (n["uuid"] && !ValidUuidString(p.uuid)) {
        Fail(n["uuid"], f + ".uuid", "expected the pool's UUID, 8-4-4-4-12 hex digits (as 'cowctl save' writes it)");
      }
      p.device = Str(n, n, "device", f, false);
      p.file = Str(n, n, "file", f, false);
      if (!p.device.empty() && !p.file.empty()) Fail(n, f, "give either device or file, not both");
      if (n["device"] && p.device.rfind("/", 0) != 0) Fail(n["device"], f + ".device", "expected an absolute path");
      if (n["file"] && p.file.rfind("/", 0) != 0) Fail(n["file"], f + ".file", "expected an absolute path");
      p.size = Size(n, "size", f, p.device.empty(), 0);
      uint64_t au = Size(n, "allocation_unit", f, false, 1u << 20);
      if (!store::ValidAllocationUnit(au)) {
        Fail(n["allocation_unit"], f + ".allocation_unit", "must be " + std::string(store::kAllocationUnitRule));
      }
      p.allocation_unit = static_cast<uint32_t>(au);
      uint64_t grain = Size(n, "grain", f, false, au);
      if (std::string why = store::GrainRule(grain, au); !why.empty()) Fail(n["grain"], f + ".grain", why);
      p.grain = static_cast<uint32_t>(grain);
      uint64_t st = Size(n, "soft_threshold", f, false, 80);
      if (st > 100) Fail(n["soft_threshold"], f + ".soft_threshold", "a percentage 0..100");
      p.soft_threshold = static_cast<uint32_t>(st);
      std::set<std::string> lun_names;
      auto luns = Seq(n, "luns", f);
      for (size_t j = 0; j < luns.size(); ++j) {
        const auto& l = luns[j];
        std::string lf = f + ".luns[" + std::to_string(j) + "]";
        Keys(l, lf, {"name", "size", "block_size", "backstore", "wwn", "copy_group", "wce", "thin_on_thin"});
        LunConfig lc;
        lc.name = Str(l, l, "name", lf, true);
        Name(l["name"], lc.name, lf + ".name", "LUN");
        if (!lun_names.insert(lc.name).second) Fail(l["name"], lf + ".name", "LUN '" + lc.name + "' listed twice");
        lc.size = Size(l, "size", lf, true, 0);
        uint64_t bs = Size(l, "block_size", lf, false, 512);
        if (!store::ValidBlockSize(bs)) Fail(l["block_size"], lf + ".block_size", "must be " + std::string(store::kBlockSizeRule));
        lc.block_size = static_cast<uint32_t>(bs);
        if (lc.size == 0 || lc.size % lc.block_size) {
          Fail(l["size"], lf + ".size", "must be a non-zero multiple of the block size");
        }
        lc.backstore = Str(l, l, "backstore", lf, false);
        if (!lc.backstore.empty()) {
          Name(l["backstore"], lc.backstore, lf + ".backstore", "backstore");
          auto [at, fresh] = backstores.emplace(lc.backstore, lf);
          if (!fresh) Fail(l["backstore"], lf + ".backstore", "backstore '" + lc.backstore + "' is also " + at->second + "'s");
        }
        lc.wwn = Str(l, l, "wwn", lf, false);
        if (l["wwn"]) {
          // It becomes the LUN's SCSI identity (VPD 0x80 and 0x83): a
          // multipath initiator takes two LUNs with one NAA for two paths to
          // one disk, and writes to both.
          if (!ValidUuidString(lc.wwn)) {
            Fail(l["wwn"], lf + ".wwn", "expected a UUID, 8-4-4-4-12 hex digits (as 'cowctl save' writes it)");
          }
          auto [at, fresh] = naas.emplace(NaaName(lc.wwn), lf);
          if (!fresh) {
            Fail(l["wwn"], lf + ".wwn", "gives the same identifier (" + at->first + ") as " + at->second +
                                            ".wwn: an initiator would take the two LUNs for one disk");
          }
        }
        lc.copy_group = Str(l, l, "copy_group", lf, false);
        if (!lc.copy_group.empty()) Name(l["copy_group"], lc.copy_group, lf + ".copy_group", "copy group");
        // Switches: true/false as save writes them (1/0, on/off accepted).
        for (auto [key, into] : {std::pair{"wce", &lc.wce}, std::pair{"thin_on_thin", &lc.thin_on_thin}}) {
          if (!l[key]) continue;
          std::string w = l[key].as<std::string>();
          if (w == "true" || w == "1" || w == "on") *into = true;
          else if (w == "false" || w == "0" || w == "off") *into = false;
          else Fail(l[key], lf + "." + key, "expected true or false");
        }
        p.luns.push_back(std::move(lc));
      }
      c.pools.push_back(std::move(p));
    }
    auto iscsi = Seq(root, "iscsi", "");
    for (size_t i = 0; i < iscsi.size(); ++i) {
      const auto& n = iscsi[i];
      std::string f = "iscsi[" + std::to_string(i) + "]";
      Keys(n, f, {"target", "portals", "acls", "luns"});
      IscsiConfig t;
      t.target = Str(n, n, "target", f, true);
      if (!ValidIqn(t.target)) Fail(n["target"], f + ".target", "not a valid IQN");
      for (const auto& o : c.iscsi) {
        if (o.target == t.target) Fail(n["target"], f + ".target", "target " + t.target + " listed twice");
      }
      auto portals = Seq(n, "portals", f);
      for (size_t k = 0; k < portals.size(); ++k) {
        std::string p = portals[k].IsScalar() ? portals[k].as<std::string>() : "";
        if (!ValidPortal(p)) {
          Fail(portals[k], f + ".portals[" + std::to_string(k) + "]", "expected IPv4:port or [IPv6]:port");
        }
        t.portals.push_back(p);
      }
      t.luns = Luns(n, f);
      auto acls = Seq(n, "acls", f);
      for (size_t k = 0; k < acls.size(); ++k) {
        std::string af = f + ".acls[" + std::to_string(k) + "]";
        const auto& a = acls[k];
        Keys(a, af, {"initiator", "chap_user", "chap_password", "mapped_luns"});
        AclSpec s{Str(a, a, "initiator", af, true), Str(a, a, "chap_user", af, false),
                  Str(a, a, "chap_password", af, false)};
        if (!ValidIqn(s.initiator)) Fail(a["initiator"], af + ".initiator", "not a valid initiator name");
        if (s.chap_user.empty() != s.chap_password.empty()) {
          Fail(a, af, "chap_user and chap_password go together");
        }
        if (!s.chap_user.empty()) {
          if (auto p = ChapProblem(s.chap_user); !p.empty()) Fail(a["chap_user"], af + ".chap_user", p);
          if (auto p = ChapProblem(s.chap_password); !p.empty()) Fail(a["chap_password"], af + ".chap_password", p);
        }
        // Absent (a version 1 file): the ACL maps every LUN of the target.
        if (a["mapped_luns"]) s.mapped_luns = MappedLuns(a, af, t);
        t.acls.push_back(s);
      }
      c.iscsi.push_back(std::move(t));
    }
    auto loop = Seq(root, "loopback", "");
    for (size_t i = 0; i < loop.size(); ++i) {
      const auto& n = loop[i];
      std::string f = "loopback[" + std::to_string(i) + "]";
      Keys(n, f, {"wwn", "luns"});
      LoopbackConfig t;
      t.wwn = Str(n, n, "wwn", f, true);
      if (!ValidLoopbackWwn(t.wwn)) Fail(n["wwn"], f + ".wwn", "expected naa. and 16 hex digits");
      for (const auto& o : c.loopback) {
        if (o.wwn == t.wwn) Fail(n["wwn"], f + ".wwn", "loopback target " + t.wwn + " listed twice");
      }
      t.luns = Luns(n, f);
      c.loopback.push_back(std::move(t));
    }
    // Every exported LUN must be a configured LUN with a backstore.
    auto check_ref = [&](const YAML::Node& n, const std::string& f, const ExportLun& e) {
      for (const auto& p : c.pools) {
        if (p.name != e.pool) continue;
        for (const auto& l : p.luns) {
          if (l.name == e.name) return;
        }
      }
      Fail(n, f, "LUN " + e.pool + "/" + e.name + " is not in pools");
    };
    auto once = [&](const YAML::Node& n, const std::string& f, const std::vector<ExportLun>& luns, size_t k) {
      for (size_t j = 0; j < k; ++j) {
        if (luns[j].pool == luns[k].pool && luns[j].name == luns[k].name) {
          Fail(n, f, "LUN " + luns[k].pool + "/" + luns[k].name + " is exported twice by this target");
        }
      }
    };
    for (size_t i = 0; i < c.iscsi.size(); ++i) {
      for (size_t k = 0; k < c.iscsi[i].luns.size(); ++k) {
        std::string f = "iscsi[" + std::to_string(i) + "].luns[" + std::to_string(k) + "]";
        check_ref(iscsi[i]["luns"][k], f, c.iscsi[i].luns[k]);
        once(iscsi[i]["luns"][k], f, c.iscsi[i].luns, k);
      }
    }
    for (size_t i = 0; i < c.loopback.size(); ++i) {
      for (size_t k = 0; k < c.loopback[i].luns.size(); ++k) {
        std::string f = "loopback[" + std::to_string(i) + "].luns[" + std::to_string(k) + "]";
        check_ref(loop[i]["luns"][k], f, c.loopback[i].luns[k]);
        once(loop[i]["luns"][k], f, c.loopback[i].luns, k);
      }
    }
    return c;
  }

 private:
  std::string file_;
};

}  // namespace

Config ParseConfig(const std::string& text, const std::string& name) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UserError(name + ":" + std::to_string(e.mark.line + 1) + ": (syntax): " + e.msg);
  }
  try {
    return Parser(name).Parse(root);
  } catch (const YAML::Exception& e) {
    throw UserError(name + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

Config LoadConfig(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    int err = errno;
    throw UserError("cannot read " + path + ": " + std::strerror(err) + " (" +
                    ErrnoAdvice(err, "write one with 'cowctl save'") + ")");
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ParseConfig(ss.str(), path);
}

std::string DumpConfig(const Config& c) {
  YAML::Emitter out;
  out << YAML::Comment("cowstore configuration: written by 'cowctl save', applied by 'cowctl restore'");
  out << YAML::BeginMap << YAML::Key << "version" << YAML::Value << kConfigVersion;
  out << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (const auto& p : c.pools) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << p.name;
    if (!p.uuid.empty()) out << YAML::Key << "uuid" << YAML::Value << p.uuid;
    if (!p.device.empty()) out << YAML::Key << "device" << YAML::Value << p.device;
    if (!p.file.empty()) out << YAML::Key << "file" << YAML::Value << p.file;
    out << YAML::Key << "size" << YAML::Value << p.size;
    out << YAML::Key << "allocation_unit" << YAML::Value << p.allocation_unit;
    // Only below the AU (format 3): a format 2 pool's entry stays what an
    // older cowctl, which refuses unknown keys, can restore.
    if (p.sharing_unit() != p.allocation_unit) out << YAML::Key << "grain" << YAML::Value << p.grain;
    out << YAML::Key << "soft_threshold" << YAML::Value << p.soft_threshold;
    out << YAML::Key << "luns" << YAML::Value << YAML::BeginSeq;
    for (const auto& l : p.luns) {
      out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << l.name;
      out << YAML::Key << "size" << YAML::Value << l.size;
      out << YAML::Key << "block_size" << YAML::Value << l.block_size;
      if (!l.backstore.empty()) out << YAML::Key << "backstore" << YAML::Value << l.backstore;
      if (!l.wwn.empty()) out << YAML::Key << "wwn" << YAML::Value << l.wwn;
      if (!l.copy_group.empty()) out << YAML::Key << "copy_group" << YAML::Value << l.copy_group;
      if (l.wce) out << YAML::Key << "wce" << YAML::Value << *l.wce;
      if (l.thin_on_thin) out << YAML::Key << "thin_on_thin" << YAML::Value << *l.thin_on_thin;
      out << YAML::EndMap;
    }
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndSeq;
  auto luns = [&](const std::vector<ExportLun>& v) {
    out << YAML::Key << "luns" << YAML::Value << YAML::BeginSeq;
    for (const auto& e : v) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "lun" << YAML::Value << e.lun << YAML::Key
          << "pool" << YAML::Value << e.pool << YAML::Key << "name" << YAML::Value << e.name << YAML::EndMap;
    }
    out << YAML::EndSeq;
  };
  out << YAML::Key << "iscsi" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : c.iscsi) {
    out << YAML::BeginMap << YAML::Key << "target" << YAML::Value << t.target;
    out << YAML::Key << "portals" << YAML::Value << YAML::Flow << t.portals;
    out << YAML::Key << "acls" << YAML::Value << YAML::BeginSeq;
    for (const auto& a : t.acls) {
      out << YAML::BeginMap << YAML::Key << "initiator" << YAML::Value << a.initiator;
      if (!a.chap_user.empty()) {
        out << YAML::Key << "chap_user" << YAML::Value << a.chap_user;
        out << YAML::Key << "chap_password" << YAML::Value << a.chap_password;
      }
      if (a.mapped_luns) {
        // Always written, [] included: a missing list means "every LUN".
        out << YAML::Key << "mapped_luns" << YAML::Value;
        if (a.mapped_luns->empty()) out << YAML::Flow;
        out << YAML::BeginSeq;
        for (const auto& m : *a.mapped_luns) {
          out << YAML::Flow << YAML::BeginMap << YAML::Key << "lun" << YAML::Value << m.lun << YAML::Key
              << "mapped_lun" << YAML::Value << m.mapped_lun;
          if (m.write_protect) out << YAML::Key << "write_protect" << YAML::Value << true;
          out << YAML::EndMap;
        }
        out << YAML::EndSeq;
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
    luns(t.luns);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "loopback" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : c.loopback) {
    out << YAML::BeginMap << YAML::Key << "wwn" << YAML::Value << t.wwn;
    luns(t.luns);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void WriteConfig(const std::string& path, const Config& config) {
  std::string text = DumpConfig(config);
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (!dir.empty()) ::mkdir(dir.c_str(), 0755);
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    std::string advice = ErrnoAdvice(err, "");
    throw UserError("cannot write " + tmp + ": " + std::strerror(err) + (advice.empty() ? "" : " (" + advice + ")"));
  }
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw UserError("cannot write " + path + ": " + std::strerror(errno));
  }
}

}  // namespace cowstore::cowctl
