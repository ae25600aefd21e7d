// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/lio.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "handler/scsi/naa.h"
#include "handler/store/names.h"

namespace cowstore::cowctl {
namespace {

std::string Errno() { return std::strerror(errno); }

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool Exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}
bool IsLink(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadFile(const std::string& p) {
  std::ifstream f(p);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& p, const std::string& value, bool append = false,
               const LioOptions* opt = nullptr) {
  if (opt && opt->refuse_write) {
    if (int err = opt->refuse_write(p, value)) {
      errno = err;
      throw UserError("writing '" + Trim(value) + "' to " + p + " failed: " + Errno() + " (" +
                      ErrnoAdvice(err, "see dmesg for the kernel's reason") + ")");
    }
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  int fd = ::open(p.c_str(), flags, 0644);
  if (fd < 0 && errno == ENOENT) {
    // A plain tree lacks configfs's default groups (wwn/, attrib/, auth/).
    ::mkdir(p.substr(0, p.rfind('/')).c_str(), 0755);
    fd = ::open(p.c_str(), flags, 0644);
  }
  if (fd < 0) {
    int err = errno;
    throw UserError("cannot open " + p + ": " + Errno() + " (" + ErrnoAdvice(err, "is configfs mounted?") + ")");
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    errno = err;
    throw UserError("writing '" + Trim(value) + "' to " + p + " failed: " + Errno() + " (" +
                    ErrnoAdvice(err, "see dmesg for the kernel's reason") + ")");
  }
}

void MkDir(const std::string& p) {
  if (::mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) {
    int err = errno;
    throw UserError("cannot create " + p + ": " + Errno() + " (" +
                    ErrnoAdvice(err, "see dmesg for the kernel's reason") + ")");
  }
}

// Removes a tree made in configfs (or its plain-directory imitation): links
// are unlinked, directories removed deepest first. Attribute files cannot be
// unlinked in configfs (EPERM) and default groups cannot be rmdir'ed; both
// go away with their parent. Inside a TPG, ACLs go before LUNs before portals.
void RemoveTree(const std::string& p) {
  if (IsLink(p)) {
    ::unlink(p.c_str());
    return;
  }
  auto kids = List(p);
  auto rank = [](const std::string& n) {
    if (n == "acls") return 0;
    if (n == "lun") return 1;
    if (n == "np") return 2;
    return 3;
  };
  std::stable_sort(kids.begin(), kids.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  for (const auto& k : kids) {
    std::string c = p + "/" + k;
    struct stat st;
    if (::lstat(c.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) ::unlink(c.c_str());
    else if (S_ISDIR(st.st_mode)) RemoveTree(c);
    else ::unlink(c.c_str());  // EPERM on configfs: fine
  }
  ::rmdir(p.c_str());  // default groups: EPERM, removed with the parent
}

// Undo log: what a command made, removed in reverse unless Commit()ed.
class Undo {
 public:
  ~Undo() {
    if (committed_) return;
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
      try { (*it)(); } catch (...) {}
    }
  }
  void Add(std::function<void()> f) { steps_.push_back(std::move(f)); }
  void MkDir(const std::string& p) {
    if (Exists(p)) return;
    cowctl::MkDir(p);
    Add([p] { RemoveTree(p); });
  }
  void Symlink(const std::string& target, const std::string& link) {
    if (::symlink(target.c_str(), link.c_str()) != 0) {
      throw UserError("cannot link " + link + " -> " + target + ": " + Errno());
    }
    Add([link] { ::unlink(link.c_str()); });
  }
  void Commit() { committed_ = true; }

 private:
  std::vector<std::function<void()>> steps_;
  bool committed_ = false;
};

// "key=value" lines a plain tree accumulated in a control file.
std::map<std::string, std::string> ControlHistory(const std::string& path) {
  std::map<std::string, std::string> m;
  for (const auto& line : Split(ReadFile(path), '\n')) {
    for (const auto& kv : Split(line, '\n')) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) m[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return m;
}

std::string AfterColon(const std::string& s) {
  std::string t = Trim(s);
  auto c = t.find(": ");
  return c == std::string::npos ? t : Trim(t.substr(c + 2));
}

uint64_t ToU64(const std::string& s) {
  try {
    return std::stoull(Trim(s));
  } catch (...) {
    return 0;
  }
}

// lun_<N> / tpgt_<N> -> N
std::optional<uint32_t> Suffix(const std::string& name, const std::string& prefix) {
  if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
    if (v > 0xffffffffu) return std::nullopt;
  }
  return static_cast<uint32_t>(v);
}

// The "user_3/<name>" a fabric LUN's link points at (absolute or relative).
std::string LinkKey(const std::string& link) {
  char buf[4096];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = 0;
  auto parts = Split(buf, '/');
  while (!parts.empty() && parts.back().empty()) parts.pop_back();
  if (parts.size() < 2) return {};
  return parts[parts.size() - 2] + "/" + parts.back();
}

std::string LinkName(const std::string& seed) { return Hex(Hash64(seed), 10); }

// The TPG LUN a mapped LUN directory (acls/<initiator>/lun_<M>) links to:
// its link ends in .../lun/lun_<L> (absolute as cowctl makes it, relative as
// configfs shows it). None for a directory without such a link.
std::optional<uint32_t> MappedTpgLun(const std::string& ml) {
  for (const auto& k : List(ml)) {
    std::string p = ml + "/" + k;
    if (!IsLink(p)) continue;
    char buf[4096];
    ssize_t n = ::readlink(p.c_str(), buf, sizeof buf - 1);
    if (n <= 0) continue;
    auto parts = Split(std::string(buf, static_cast<size_t>(n)), '/');
    while (!parts.empty() && parts.back().empty()) parts.pop_back();
    if (parts.size() >= 2 && parts[parts.size() - 2] == "lun") {
      if (auto l = Suffix(parts.back(), "lun_")) return l;
    }
  }
  return std::nullopt;
}

// Maps TPG LUN `lun` into the node ACL directory `ad` (tpg/acls/<initiator>),
// unless it maps it already: mapped LUN number = `lun`, as targetcli does, or
// the lowest free number when the ACL has that one taken by another LUN.
void MapLun(Undo& undo, const std::string& tpg, const std::string& ad, uint32_t lun) {
  std::vector<uint32_t> taken;
  for (const auto& m : List(ad)) {
    auto mn = Suffix(m, "lun_");
    if (!mn || !IsDir(ad + "/" + m)) continue;
    auto to = MappedTpgLun(ad + "/" + m);
    if (to == lun) return;
    if (to) taken.push_back(*mn);  // an empty lun_<M> (half made) is filled in
  }
  auto is_taken = [&](uint32_t m) { return std::find(taken.begin(), taken.end(), m) != taken.end(); };
  uint32_t mapped = lun;
  if (is_taken(mapped)) {
    mapped = 0;
    while (is_taken(mapped)) ++mapped;
  }
  std::string initiator = ad.substr(ad.rfind('/') + 1);
  std::string lundir = tpg + "/lun/lun_" + std::to_string(lun);
  std::string ml = ad + "/lun_" + std::to_string(mapped);
  undo.MkDir(ml);
  undo.Symlink(lundir, ml + "/" + LinkName(initiator + lundir));
}

// Every mapped LUN of node ACL directory `ad`, by mapped LUN number; a
// lun_<M> without a link to a TPG LUN (half made) is left out.
std::vector<MappedLun> ReadMappedLuns(const std::string& ad) {
  std::vector<std::pair<uint32_t, MappedLun>> found;
  for (const auto& m : List(ad)) {
    auto mn = Suffix(m, "lun_");
    if (!mn || !IsDir(ad + "/" + m)) continue;
    auto to = MappedTpgLun(ad + "/" + m);
    if (!to) continue;
    found.push_back({*mn, {*to, *mn, Trim(ReadFile(ad + "/" + m + "/write_protect")) == "1"}});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<MappedLun> out;
  for (const auto& f : found) out.push_back(f.second);
  return out;
}

// Maps TPG LUN m.lun into the node ACL directory `ad` exactly as a saved
// configuration says: as LUN m.mapped_lun, write-protected or not.
//  - lun_<M> maps that LUN already: only write_protect is made to match;
//  - lun_<M> maps another TPG LUN: refused (restore never removes a mapping);
//  - the ACL maps that LUN under another number: left alone (as MapLun does;
//    restore warns about it);
//  - else lun_<M> is made, and write_protect written when it differs.
void MapLunAs(Undo& undo, const std::string& tpg, const std::string& ad, const MappedLun& m,
              const LioOptions* opt) {
  std::string initiator = ad.substr(ad.rfind('/') + 1);
  std::string lundir = tpg + "/lun/lun_" + std::to_string(m.lun);
  std::string ml = ad + "/lun_" + std::to_string(m.mapped_lun);
  auto at = IsDir(ml) ? MappedTpgLun(ml) : std::nullopt;
  if (at && *at != m.lun) {
    std::string tdir = tpg.substr(0, tpg.rfind('/'));
    throw UserError(initiator + " sees LUN " + std::to_string(*at) + " of " + tdir.substr(tdir.rfind('/') + 1) +
                    " as its LUN " + std::to_string(m.mapped_lun) + ", where LUN " + std::to_string(m.lun) +
                    " should be: remove that mapping with targetcli, then restore again");
  }
  if (!at) {
    for (const auto& have : ReadMappedLuns(ad)) {
      if (have.lun == m.lun) return;  // under another number: left alone
    }
    undo.MkDir(ml);
    undo.Symlink(lundir, ml + "/" + LinkName(initiator + lundir));
  }
  bool wp = Trim(ReadFile(ml + "/write_protect")) == "1";
  if (wp != m.write_protect) WriteFile(ml + "/write_protect", m.write_protect ? "1" : "0", false, opt);
}

// The TPG LUN number a new export takes in `tpg` (of `target`, as messages
// name it): `want` when it is free, else the lowest free number. A wanted
// number out of range or held by another LUN is refused, naming the
// backstore that holds it, before anything is made. One rule for iSCSI,
// loopback, `cowctl export --lun` and restore.
uint32_t NewTpgLunNumber(const std::string& tpg, const std::string& target, std::optional<uint32_t> want) {
  auto dir = [&](uint32_t n) { return tpg + "/lun/lun_" + std::to_string(n); };
  if (!want) {
    uint32_t lun = 0;
    while (Exists(dir(lun))) ++lun;
    return lun;
  }
  if (*want > 65535) throw UserError("LUN number must be 0..65535");
  const std::string d = dir(*want);
  if (Exists(d)) {
    std::string holder;
    for (const auto& k : List(d)) {
      if (IsLink(d + "/" + k)) holder = LinkKey(d + "/" + k);
    }
    throw UserError("LUN " + std::to_string(*want) + " of " + target + " is taken" +
                    (holder.empty() ? std::string() : " by " + holder));
  }
  return *want;
}

}  // namespace

Lio::Lio(LioOptions options) : opt_(std::move(options)) {}

bool Lio::Available() const { return IsDir(T("core")); }

void Lio::RequireCore() const {
  if (!IsDir(opt_.configfs_root)) {
    throw UserError("configfs is not mounted at " + opt_.configfs_root +
                    ": run 'mount -t configfs none /sys/kernel/config' (or pass --configfs-root)");
  }
  if (!IsDir(T("core"))) {
    throw UserError("LIO is not loaded (no " + T("core") +
                    "): run 'modprobe target_core_user' and start tcmu-runner");
  }
}

void Lio::RequireRunner() const {
  for (const auto& pid : List(opt_.proc_root)) {
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), ::isdigit)) continue;
    if (Trim(ReadFile(opt_.proc_root + "/" + pid + "/comm")) == "tcmu-runner") return;
  }
  throw UserError("tcmu-runner is not running: run 'systemctl start tcmu-runner' and retry");
}

std::vector<Backstore> Lio::Backstores() const {
  std::vector<Backstore> out;
  for (const auto& hba : List(T("core"))) {
    if (!Suffix(hba, "user_")) continue;
    for (const auto& name : List(T("core/" + hba))) {
      std::string p = T("core/" + hba + "/" + name);
      if (!IsDir(p) || name == "hba_info" || name == "hba_mode") continue;
      auto hist = ControlHistory(p + "/control");
      std::string cfg = Trim(ReadFile(p + "/attrib/dev_config"));
      if (cfg.empty()) {
        std::string info = ReadFile(p + "/info");
        auto at = info.find("Config: ");
        if (at != std::string::npos) {
          auto end = info.find_first_of(" \n", at + 8);
          cfg = info.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
        }
      }
      if (cfg.empty()) cfg = hist["dev_config"];
      auto parsed = ParseCfgstring(cfg);
      if (!parsed) continue;  // not ours
      Backstore b;
      b.name = name;
      b.hba = hba;
      b.path = p;
      b.config = *parsed;
      std::string size = ReadFile(p + "/attrib/dev_size");
      b.size = ToU64(size.empty() ? hist["dev_size"] : size);
      std::string bsz = ReadFile(p + "/attrib/hw_block_size");
      b.block_size = static_cast<uint32_t>(ToU64(bsz.empty() ? hist["hw_block_size"] : bsz));
      if (b.block_size == 0) b.block_size = 512;
      b.wwn = AfterColon(ReadFile(p + "/wwn/vpd_unit_serial"));
      b.enabled = Trim(ReadFile(p + "/enable")) == "1";
      out.push_back(std::move(b));
    }
  }
  return out;
}

std::optional<Backstore> Lio::FindBackstore(const std::string& pool, const std::string& lun) const {
  for (auto& b : Backstores()) {
    if (b.config.pool == pool && b.config.lun == lun) return b;
  }
  return std::nullopt;
}

std::optional<Backstore> Lio::FindBackstoreByKey(const std::string& key) const {
  for (auto& b : Backstores()) {
    if (b.key() == key) return b;
  }
  return std::nullopt;
}

bool Lio::UserBackstoreExists(const std::string& name) const {
  for (const auto& hba : List(T("core"))) {
    if (Suffix(hba, "user_") && Exists(T("core/" + hba + "/" + name))) return true;
  }
  return false;
}

std::vector<LioDevice> Lio::Devices() const {
  std::vector<LioDevice> out;
  for (const auto& hba : List(T("core"))) {
    auto us = hba.rfind('_');
    if (us == std::string::npos || !Suffix(hba, hba.substr(0, us + 1)) || !IsDir(T("core/" + hba))) continue;
    for (const auto& name : List(T("core/" + hba))) {
      std::string p = T("core/" + hba + "/" + name);
      if (!IsDir(p)) continue;
      std::string serial = AfterColon(ReadFile(p + "/wwn/vpd_unit_serial"));
      if (!serial.empty() && serial.back() == ':') serial.clear();  // the kernel's label alone: none set
      out.push_back({hba + "/" + name, name, hba.compare(0, 5, "user_") == 0, serial});
    }
  }
  return out;
}

std::vector<std::string> Lio::TargetNames(const std::string& fabric) const {
  std::vector<std::string> out;
  for (const auto& t : List(T(fabric))) {
    if (IsDir(T(fabric + "/" + t))) out.push_back(t);
  }
  return out;
}

Backstore Lio::CreateBackstore(const BackstoreSpec& spec) {
  RequireCore();
  RequireName(spec.name, "backstore");
  if (!store::ValidBlockSize(spec.block_size)) {
    throw UserError("block size must be " + std::string(store::kBlockSizeRule));
  }
  if (auto b = FindBackstore(spec.config.pool, spec.config.lun)) {
    throw UserError("LUN " + spec.config.pool + "/" + spec.config.lun +
                    " already has the backstore " + b->key());
  }
  // Storage object names are unique per plugin in rtslib/targetcli.
  std::vector<uint32_t> used;
  for (const auto& hba : List(T("core"))) {
    auto idx = hba.rfind('_');
    if (idx != std::string::npos) {
      if (auto n = Suffix(hba.substr(idx), "_")) used.push_back(*n);
    }
  }
  if (UserBackstoreExists(spec.name)) {
    throw UserError("a user backstore named '" + spec.name + "' already exists: pick another name with --backstore-name");
  }
  uint32_t index = 0;
  while (std::find(used.begin(), used.end(), index) != used.end()) ++index;
  std::string hba = "user_" + std::to_string(index);

  Undo undo;
  undo.MkDir(T("core/" + hba));
  std::string p = T("core/" + hba + "/" + spec.name);
  undo.MkDir(p);
  // Each control write separately, like rtslib: the kernel splits one write
  // at ',' and dev_config may hold commas.
  WriteFile(p + "/control", "dev_config=" + spec.config.str() + "\n", true, &opt_);
  WriteFile(p + "/control", "dev_size=" + std::to_string(spec.size) + "\n", true, &opt_);
  WriteFile(p + "/control", "hw_block_size=" + std::to_string(spec.block_size) + "\n", true, &opt_);
  // 16 MiB per command (ESXi's largest XCOPY/WRITE transfer), in blocks.
  WriteFile(p + "/control",
            "hw_max_sectors=" + std::to_string((16u << 20) / spec.block_size) + "\n", true, &opt_);
  // The WWN before enable (rtslib writes it after): the kernel accepts it on
  // an unconfigured device, and the handler then sees it when it opens.
  if (!spec.wwn.empty()) WriteFile(p + "/wwn/vpd_unit_serial", spec.wwn, false, &opt_);
  WriteFile(p + "/enable", "1", false, &opt_);  // tcmu-runner opens the LUN here
  undo.Commit();
  auto b = FindBackstoreByKey(hba + "/" + spec.name);
  if (!b) throw UserError("backstore " + p + " did not take its configuration");
  return *b;
}

void Lio::DeleteBackstore(const Backstore& bs) {
  auto links = LinksTo(bs);
  if (!links.empty()) {
    throw UserError("backstore " + bs.key() + " is exported (" + links[0].fabric + " " +
                    links[0].target + " lun " + std::to_string(links[0].lun) +
                    "): unexport it first");
  }
  RemoveTree(bs.path);
  if (Exists(bs.path)) throw UserError("cannot remove " + bs.path + ": " + Errno());
  std::string hba = T("core/" + bs.hba);
  bool empty = true;
  for (const auto& k : List(hba)) {
    if (IsDir(hba + "/" + k)) empty = false;
  }
  if (empty) RemoveTree(hba);
}

std::vector<FabricLun> Lio::FabricLuns() const {
  std::vector<FabricLun> out;
  for (const auto& fabric : List(T(""))) {
    if (fabric == "core" || !IsDir(T(fabric))) continue;
    for (const auto& target : List(T(fabric))) {
      std::string tp = T(fabric + "/" + target);
      if (!IsDir(tp)) continue;
      for (const auto& tpg : List(tp)) {
        auto tpgn = Suffix(tpg, "tpgt_");
        if (!tpgn) continue;
        for (const auto& lun : List(tp + "/" + tpg + "/lun")) {
          auto ln = Suffix(lun, "lun_");
          if (!ln) continue;
          std::string lp = tp + "/" + tpg + "/lun/" + lun;
          for (const auto& k : List(lp)) {
            if (!IsLink(lp + "/" + k)) continue;
            out.push_back({fabric, target, *tpgn, *ln, lp, LinkKey(lp + "/" + k)});
          }
        }
      }
    }
  }
  return out;
}

std::vector<FabricLun> Lio::LinksTo(const Backstore& bs) const {
  std::vector<FabricLun> out;
  for (auto& l : FabricLuns()) {
    if (l.backstore_key == bs.key()) out.push_back(l);
  }
  return out;
}

bool Lio::OwnedTarget(const std::string& fabric, const std::string& target) const {
  bool any = false;
  auto ours = Backstores();
  for (const auto& l : FabricLuns()) {
    if (l.fabric != fabric || l.target != target) continue;
    any = true;
    bool found = std::any_of(ours.begin(), ours.end(),
                             [&](const Backstore& b) { return b.key() == l.backstore_key; });
    if (!found) return false;
  }
  return any;
}

void Lio::EnsureFabric(const std::string& fabric, const char* module) const {
  if (IsDir(T(fabric))) return;
  // configfs loads the fabric module on mkdir, as rtslib relies on.
  if (::mkdir(T(fabric).c_str(), 0755) != 0 && errno != EEXIST) {
    throw UserError(std::string("the ") + fabric + " fabric is not available: run 'modprobe " +
                    module + "'");
  }
}

bool ValidIqn(const std::string& iqn) {
  if (iqn.size() < 5 || iqn.size() > 223) return false;
  if (iqn.compare(0, 4, "iqn.") != 0 && iqn.compare(0, 4, "eui.") != 0 &&
      iqn.compare(0, 4, "naa.") != 0) {
    return false;
  }
  for (unsigned char c : iqn) {
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':')) return false;
  }
  if (iqn[0] == 'i') {
    // iqn.YYYY-MM.reverse.domain[:unique]
    if (iqn.size() < 12 || !std::isdigit(static_cast<unsigned char>(iqn[4])) || iqn[8] != '-' ||
        iqn[11] != '.') {
      return false;
    }
  }
  return true;
}

bool ValidPortal(const std::string& portal) {
  auto colon = portal.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  std::string host = portal.substr(0, colon), port = portal.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return false;
  if (std::stoul(port) == 0 || std::stoul(port) > 65535) return false;
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) return false;
    in6_addr a;
    return ::inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a) == 1;
  }
  auto parts = Split(host, '.');
  if (parts.size() != 4) return false;
  for (const auto& p : parts) {
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit) || std::stoi(p) > 255) {
      return false;
    }
  }
  return true;
}

std::string ErrnoAdvice(int err, const std::string& otherwise) {
  // Only root may change LIO (configfs is root's; the kernel checks
  // CAP_SYS_ADMIN) or open the pools; the kernel's log has nothing to add.
  if ((err == EACCES || err == EPERM) && ::geteuid() != 0) return "run cowctl as root";
  return otherwise;
}

std::string NaaName(const std::string& unit_serial) {
  std::string out = "naa.";
  for (uint8_t b : scsi::NaaFromUnitSerial(unit_serial)) out += Hex(b, 2);
  return out;
}

bool ValidLoopbackWwn(const std::string& wwn) {
  return wwn.size() == 20 && wwn.compare(0, 4, "naa.") == 0 &&
         std::all_of(wwn.begin() + 4, wwn.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string ChapProblem(const std::string& v) {
  // LIO refuses a write of 256 bytes or more into its 256-byte buffers.
  if (v.empty() || v.size() > 255) return "must be 1 to 255 characters";
  for (unsigned char c : v) {
    if (c < 0x21 || c > 0x7e) return "may hold only printable ASCII without spaces (no newline, no accents)";
  }
  if (v.compare(0, 4, "NULL") == 0) return "must not start with NULL (LIO reads that as \"no CHAP\")";
  return {};
}

std::string DefaultIscsiTarget(const std::string& pool) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string h;
  for (char c : std::string(host)) {
    unsigned char u = static_cast<unsigned char>(c);
    h += std::isalnum(u) || c == '-' || c == '.' ? static_cast<char>(std::tolower(u)) : '-';
  }
  if (h.empty()) h = "localhost";
  std::string p;
  for (char c : pool) {
    unsigned char u = static_cast<unsigned char>(c);
    p += std::isalnum(u) || c == '-' || c == '.' ? static_cast<char>(std::tolower(u)) : '-';
  }
  return "iqn.2024-01.io.cowstore:" + h + "." + p;
}

namespace {

// Names and secrets, before anything is looked up or made.
void ValidateIscsiSpec(const IscsiSpec& spec) {
  if (!ValidIqn(spec.target)) {
    throw UserError("invalid target IQN '" + spec.target + "': expected iqn.YYYY-MM.domain:name");
  }
  for (const auto& p : spec.portals) {
    if (!ValidPortal(p)) {
      throw UserError("invalid portal '" + p + "': expected IPv4:port or [IPv6]:port");
    }
  }
  for (const auto& a : spec.acls) {
    if (!ValidIqn(a.initiator)) throw UserError("invalid initiator name '" + a.initiator + "'");
    if (a.chap_user.empty() != a.chap_password.empty()) {
      throw UserError("CHAP needs both --chap-user and --chap-password");
    }
    if (!a.chap_user.empty()) {
      if (auto p = ChapProblem(a.chap_user); !p.empty()) throw UserError("CHAP user of " + a.initiator + " " + p);
      if (auto p = ChapProblem(a.chap_password); !p.empty()) {
        throw UserError("CHAP password of " + a.initiator + " " + p);
      }
    }
  }
  for (const auto& a : spec.acls) {
    if (!a.mapped_luns) continue;
    std::vector<uint32_t> numbers;
    for (const auto& m : *a.mapped_luns) {
      if (m.lun > 65535 || m.mapped_lun > 65535) throw UserError("LUN numbers must be 0..65535");
      if (std::find(numbers.begin(), numbers.end(), m.mapped_lun) != numbers.end()) {
        throw UserError(a.initiator + " is given mapped LUN " + std::to_string(m.mapped_lun) + " twice");
      }
      numbers.push_back(m.mapped_lun);
    }
  }
  if (spec.demo_mode && !spec.acls.empty()) {
    throw UserError("--demo-mode lets every initiator in and --initiator names the ones allowed: use one or the other");
  }
}

// The rule ExportIscsi itself keeps (restore included): without ACLs, every
// initiator gets in only when the caller said so.
void RefuseUnaskedDemoMode(IscsiAccess access, const IscsiSpec& spec, const std::string& what) {
  if (!spec.acls.empty() || spec.demo_mode) return;
  if (access == IscsiAccess::kNoTpg) {
    throw UserError("refusing to export " + what +
                    " to every initiator: name one with --initiator IQN (repeatable), "
                    "or pass --demo-mode to allow any initiator (lab use)");
  }
  if (access == IscsiAccess::kDemo) {
    throw UserError("refusing to add " + what + " to " + spec.target +
                    ": that target lets every initiator log in (demo mode, no ACLs); "
                    "pass --demo-mode to accept that, or pick another --target and name initiators with --initiator IQN");
  }
}

}  // namespace

void CheckIscsiAccess(IscsiAccess access, const IscsiSpec& spec, const std::string& what) {
  ValidateIscsiSpec(spec);
  for (const auto& a : spec.acls) {
    // A new secret from the command line: Microsoft's initiator insists on
    // 12-16 characters (a saved file keeps whatever LIO accepted).
    if (!a.chap_password.empty() && (a.chap_password.size() < 12 || a.chap_password.size() > 16)) {
      throw UserError("CHAP password must be 12 to 16 characters long");
    }
  }
  RefuseUnaskedDemoMode(access, spec, what);
  if (!spec.acls.empty() && access == IscsiAccess::kDemo) {
    throw UserError("refusing to add " + what + " to " + spec.target +
                    ": that target lets every initiator log in (demo mode), so --initiator would keep nobody out; "
                    "pick another --target, or pass --demo-mode instead of --initiator to accept that");
  }
  if (spec.demo_mode && access == IscsiAccess::kAcls) {
    throw UserError(spec.target +
                    " admits only initiators with an ACL and cowctl does not turn demo mode on for an existing "
                    "target: name the initiators with --initiator IQN, or pick another --target for --demo-mode");
  }
}

IscsiAccess Lio::IscsiTpgAccess(const std::string& target) const {
  std::string tpg = T("iscsi/" + target + "/tpgt_1");
  if (!IsDir(tpg)) return IscsiAccess::kNoTpg;
  return Trim(ReadFile(tpg + "/attrib/generate_node_acls")) == "1" ? IscsiAccess::kDemo : IscsiAccess::kAcls;
}

FabricLun Lio::ExportIscsi(const Backstore& bs, const IscsiSpec& spec) {
  RequireCore();
  ValidateIscsiSpec(spec);
  std::string tdir = T("iscsi/" + spec.target);
  bool target_exists = IsDir(tdir);
  if (target_exists && !OwnedTarget("iscsi", spec.target)) {
    throw UserError("iSCSI target " + spec.target +
                    " was not made by cowctl (it holds other LUNs or none): "
                    "pick another --target or manage it with targetcli");
  }
  RefuseUnaskedDemoMode(IscsiTpgAccess(spec.target), spec, bs.config.pool + "/" + bs.config.lun);
  EnsureFabric("iscsi", "iscsi_target_mod");
  std::string tpg = tdir + "/tpgt_1";

  // The node ACLs the TPG has before this export (auto_map maps a new LUN
  // into each of them, as targetcli's auto_add_mapped_luns does).
  std::vector<std::string> old_acls;
  for (const auto& a : List(tpg + "/acls")) {
    if (IsDir(tpg + "/acls/" + a)) old_acls.push_back(a);
  }

  Undo undo;
  undo.MkDir(tdir);
  bool new_tpg = !IsDir(tpg);
  undo.MkDir(tpg);

  // The LUN: reuse an existing link to this backstore in this target.
  std::optional<FabricLun> have;
  for (auto& l : LinksTo(bs)) {
    if (l.fabric == "iscsi" && l.target == spec.target && l.tpg == 1) have = l;
  }
  uint32_t lun;
  if (have) {
    lun = have->lun;
    if (spec.lun && *spec.lun != lun) {
      throw UserError(bs.config.pool + "/" + bs.config.lun + " is already LUN " +
                      std::to_string(lun) + " of " + spec.target);
    }
  } else {
    lun = NewTpgLunNumber(tpg, spec.target, spec.lun);
    undo.MkDir(tpg + "/lun");
    std::string ld = tpg + "/lun/lun_" + std::to_string(lun);
    undo.MkDir(ld);
    undo.Symlink(bs.path, ld + "/" + LinkName(bs.key()));
  }
  std::string lundir = tpg + "/lun/lun_" + std::to_string(lun);

  std::vector<std::string> portals = spec.portals;
  if (portals.empty() && new_tpg) portals.push_back("0.0.0.0:3260");
  if (!portals.empty()) undo.MkDir(tpg + "/np");
  for (const auto& p : portals) undo.MkDir(tpg + "/np/" + p);

  bool chap = false;
  if (spec.acls.empty()) {
    // No initiator named. A new TPG gets here only with demo_mode (any
    // initiator may log in: targetcli's demo mode); an existing one keeps
    // its access policy (its ACLs, or demo mode asked for again).
    if (new_tpg) {
      undo.MkDir(tpg + "/attrib");
      WriteFile(tpg + "/attrib/generate_node_acls", "1", false, &opt_);
      WriteFile(tpg + "/attrib/cache_dynamic_acls", "1", false, &opt_);
      WriteFile(tpg + "/attrib/demo_mode_write_protect", "0", false, &opt_);
    }
  } else {
    undo.MkDir(tpg + "/acls");
    for (const auto& a : spec.acls) {
      std::string ad = tpg + "/acls/" + a.initiator;
      const bool new_acl = !IsDir(ad);
      undo.MkDir(ad);
      if (a.mapped_luns) {
        // Exactly what the caller (restore) lists for this ACL.
        for (const auto& m : *a.mapped_luns) {
          if (m.lun == lun) MapLunAs(undo, tpg, ad, m, &opt_);
        }
      } else if (new_acl && spec.auto_map) {
        // A new ACL sees every LUN of the TPG, this one included.
        for (const auto& ln : List(tpg + "/lun")) {
          auto n = Suffix(ln, "lun_");
          if (n && IsDir(tpg + "/lun/" + ln)) MapLun(undo, tpg, ad, *n);
        }
      } else {
        MapLun(undo, tpg, ad, lun);
      }
      if (!a.chap_user.empty()) {
        chap = true;
        undo.MkDir(ad + "/auth");
        WriteFile(ad + "/auth/userid", a.chap_user, false, &opt_);
        WriteFile(ad + "/auth/password", a.chap_password, false, &opt_);
      }
    }
  }
  // A LUN new in the TPG goes into every ACL it had already (a cowctl
  // target in demo mode has none; ACLs targetcli added there get it too).
  if (spec.auto_map && !have) {
    for (const auto& a : old_acls) {
      bool exact = std::any_of(spec.acls.begin(), spec.acls.end(),
                               [&](const AclSpec& s) { return s.initiator == a && s.mapped_luns; });
      if (!exact) MapLun(undo, tpg, tpg + "/acls/" + a, lun);
    }
  }
  if (new_tpg) {
    undo.MkDir(tpg + "/attrib");
    WriteFile(tpg + "/attrib/authentication", chap ? "1" : "0", false, &opt_);
    WriteFile(tpg + "/enable", "1", false, &opt_);
  } else if (chap) {
    WriteFile(tpg + "/attrib/authentication", "1", false, &opt_);
  }
  undo.Commit();
  return {"iscsi", spec.target, 1, lun, lundir, bs.key()};
}

FabricLun Lio::ExportLoopback(const Backstore& bs, const std::string& wwn_in, std::optional<uint32_t> lun_in) {
  RequireCore();
  // rtslib's loopback WWNs: naa.5001405 + 9 hex digits.
  std::string wwn = wwn_in.empty() ? "naa.5001405" + Hex(Hash64("t" + bs.wwn + bs.key()), 9) : wwn_in;
  const std::string what = bs.config.pool + "/" + bs.config.lun;
  for (auto& l : LinksTo(bs)) {
    if (l.fabric != "loopback") continue;
    // A number asked for its own target (or, with no target named, for
    // whichever it is exported on) must be the one it has.
    if (lun_in && (wwn_in.empty() || l.target == wwn) && l.lun != *lun_in) {
      throw UserError(what + " is already LUN " + std::to_string(l.lun) + " of loopback " + l.target);
    }
    return l;
  }
  std::string nexus = "naa.5001405" + Hex(Hash64("i" + bs.wwn + bs.key()), 9);
  if (!ValidLoopbackWwn(wwn)) {
    throw UserError("invalid loopback WWN '" + wwn + "': expected naa. and 16 hex digits");
  }
  std::string tdir = T("loopback/" + wwn);
  if (IsDir(tdir) && !OwnedTarget("loopback", wwn)) {
    throw UserError("loopback target " + wwn + " was not made by cowctl");
  }
  std::string tpg = tdir + "/tpgt_1";
  const uint32_t lun = NewTpgLunNumber(tpg, "loopback " + wwn, lun_in);
  EnsureFabric("loopback", "tcm_loop");
  Undo undo;
  undo.MkDir(tdir);
  undo.MkDir(tpg);
  if (Trim(ReadFile(tpg + "/nexus")).empty()) WriteFile(tpg + "/nexus", nexus, false, &opt_);
  undo.MkDir(tpg + "/lun");
  std::string ld = tpg + "/lun/lun_" + std::to_string(lun);
  undo.MkDir(ld);
  undo.Symlink(bs.path, ld + "/" + LinkName(bs.key()));
  undo.Commit();
  return {"loopback", wwn, 1, lun, ld, bs.key()};
}

void Lio::RemoveTarget(const std::string& fabric, const std::string& target) const {
  std::string tdir = T(fabric + "/" + target);
  for (const auto& tpg : List(tdir)) {
    if (!Suffix(tpg, "tpgt_")) continue;
    if (Exists(tdir + "/" + tpg + "/enable")) {
      try { WriteFile(tdir + "/" + tpg + "/enable", "0", false, &opt_); } catch (const UserError&) {}
    }
  }
  RemoveTree(tdir);
}

void Lio::Unexport(const Backstore& bs) {
  auto links = LinksTo(bs);
  for (const auto& l : links) {
    if (l.fabric != "iscsi" && l.fabric != "loopback") {
      throw UserError(bs.config.pool + "/" + bs.config.lun + " is exported over " + l.fabric +
                      " by another tool: remove that with targetcli first");
    }
  }
  std::vector<std::pair<std::string, std::string>> touched;
  for (const auto& l : links) {
    std::string tpg = T(l.fabric + "/" + l.target + "/tpgt_" + std::to_string(l.tpg));
    // Every ACL's mapped LUN linking to this TPG LUN first (rtslib's order),
    // found by its link, whatever its number.
    for (const auto& m : MappedTo(l)) {
      std::string ml = tpg + "/acls/" + m.initiator + "/lun_" + std::to_string(m.mapped_lun);
      RemoveTree(ml);
      if (Exists(ml)) throw UserError("cannot remove " + ml + ": " + Errno());
    }
    RemoveTree(l.path);
    if (Exists(l.path)) throw UserError("cannot remove " + l.path + ": " + Errno());
    touched.emplace_back(l.fabric, l.target);
  }
  for (const auto& [fabric, target] : touched) {
    bool any = false;
    for (const auto& l : FabricLuns()) {
      if (l.fabric == fabric && l.target == target) any = true;
    }
    if (!any) RemoveTarget(fabric, target);
  }
}

std::vector<LunMapping> Lio::MappedTo(const FabricLun& l) const {
  std::vector<LunMapping> out;
  std::string acls = T(l.fabric + "/" + l.target + "/tpgt_" + std::to_string(l.tpg) + "/acls");
  for (const auto& acl : List(acls)) {
    for (const auto& m : List(acls + "/" + acl)) {
      auto mn = Suffix(m, "lun_");
      if (mn && IsDir(acls + "/" + acl + "/" + m) && MappedTpgLun(acls + "/" + acl + "/" + m) == l.lun) {
        out.push_back({acl, *mn});
      }
    }
  }
  return out;
}

std::vector<MappedLun> Lio::AclMappedLuns(const std::string& target, const std::string& initiator) const {
  return ReadMappedLuns(T("iscsi/" + target + "/tpgt_1/acls/" + initiator));
}

std::vector<IscsiTarget> Lio::IscsiTargets() const {
  std::vector<IscsiTarget> out;
  for (const auto& iqn : List(T("iscsi"))) {
    if (!IsDir(T("iscsi/" + iqn)) || !OwnedTarget("iscsi", iqn)) continue;
    for (const auto& tpgname : List(T("iscsi/" + iqn))) {
      auto tpgn = Suffix(tpgname, "tpgt_");
      if (!tpgn) continue;
      std::string tpg = T("iscsi/" + iqn + "/" + tpgname);
      IscsiTarget t;
      t.iqn = iqn;
      t.tpg = *tpgn;
      for (const auto& np : List(tpg + "/np")) t.portals.push_back(np);
      for (const auto& l : FabricLuns()) {
        if (l.fabric == "iscsi" && l.target == iqn && l.tpg == *tpgn) t.luns.emplace_back(l.lun, l.backstore_key);
      }
      for (const auto& acl : List(tpg + "/acls")) {
        AclSpec a{acl, AfterColon(ReadFile(tpg + "/acls/" + acl + "/auth/userid")),
                  AfterColon(ReadFile(tpg + "/acls/" + acl + "/auth/password"))};
        a.mapped_luns = ReadMappedLuns(tpg + "/acls/" + acl);
        t.acls.push_back(a);
      }
      t.demo_mode = Trim(ReadFile(tpg + "/attrib/generate_node_acls")) == "1";
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<LoopbackTarget> Lio::LoopbackTargets() const {
  std::vector<LoopbackTarget> out;
  for (const auto& wwn : List(T("loopback"))) {
    if (!IsDir(T("loopback/" + wwn)) || !OwnedTarget("loopback", wwn)) continue;
    LoopbackTarget t;
    t.wwn = wwn;
    t.nexus = Trim(ReadFile(T("loopback/" + wwn + "/tpgt_1/nexus")));
    for (const auto& l : FabricLuns()) {
      if (l.fabric == "loopback" && l.target == wwn) t.luns.emplace_back(l.lun, l.backstore_key);
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace cowstore::cowctl
