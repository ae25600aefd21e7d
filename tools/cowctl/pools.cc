#include "tools/cowctl/pools.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "handler/control/client.h"
#include "handler/store/env.h"
#include "handler/store/names.h"

namespace cowstore::cowctl {
namespace {

using store::Code;

store::Uuid ParseUuidHex(const std::string& text) {
  store::Uuid id{};
  store::ParseUuidText(text, &id);  // a malformed id reads as all zeros, as before
  return id;
}

store::LunInfo LunFromRecord(const control::Record& r) {
  store::LunInfo l;
  l.name = r.Get("name");
  l.id = ParseUuidHex(r.Get("id"));
  l.size_bytes = r.GetU64("size").value_or(0);
  l.block_size = static_cast<uint32_t>(r.GetU64("block_size").value_or(512));
  l.mapped_bytes = r.GetU64("mapped").value_or(0);
  l.exclusive_bytes = r.GetU64("exclusive").value_or(0);
  l.shared_bytes = r.GetU64("shared").value_or(0);
  return l;
}

void ProgressThunk(void* ctx, uint64_t done, uint64_t total) {
  static_cast<Progress*>(ctx)->Update(done, total);
}

class LocalPool final : public PoolHandle {
 public:
  LocalPool(std::string name, std::unique_ptr<store::Pool> pool) : pool_(std::move(pool)) {
    name_ = std::move(name);
  }
  ~LocalPool() override { (void)pool_->Close(); }
  bool remote() const override { return false; }
  store::SpaceInfo Space() override { return pool_->Space(); }
  store::LunInfo GetLun(const std::string& n) override {
    auto r = pool_->GetLun(n);
    if (!r.ok()) Fail(r.status(), "LUN " + name_ + "/" + n);
    return r.value();
  }
  store::LunInfo CreateLun(const std::string& n, uint64_t size, uint32_t bs) override {
    auto r = pool_->CreateLun(n, size, bs);
    if (!r.ok()) Fail(r.status(), "creating LUN " + name_ + "/" + n);
    return r.value();
  }
  void DeleteLun(const std::string& n) override {
    auto s = pool_->DeleteLun(n);
    if (!s.ok()) Fail(s, "deleting LUN " + name_ + "/" + n);
  }
  store::LunInfo ResizeLun(const std::string& n, uint64_t size) override {
    auto s = pool_->ResizeLun(n, size);
    if (!s.ok()) Fail(s, "resizing LUN " + name_ + "/" + n);
    return GetLun(n);
  }
  store::LunInfo CloneLun(const std::string& src, const std::string& dst) override {
    auto r = pool_->CloneLun(src, dst);
    if (!r.ok()) Fail(r.status(), "cloning " + name_ + "/" + src + " to " + dst);
    return r.value();
  }
  void Grow(uint64_t size) override {
    auto s = pool_->Grow(size);
    if (!s.ok()) Fail(s, "growing pool " + name_);
  }
  store::CheckReport Check(Progress* progress) override {
    return pool_->Check(progress ? ProgressThunk : nullptr, progress);
  }
  std::optional<std::vector<control::LunCounters>> Counters() override { return std::nullopt; }
  store::LunInfo Import(const std::string& n, const std::string& path, uint32_t bs, uint64_t size,
                        control::CopyStats* stats, Progress* progress) override {
    auto r = control::ImportImage(*pool_, n, path, bs, size, stats, progress ? ProgressThunk : nullptr, progress);
    if (!r.ok()) Fail(r.status(), "importing " + path + " into " + name_ + "/" + n);
    return r.value();
  }
  void Export(const std::string& n, const std::string& path, bool force, control::CopyStats* stats,
              Progress* progress) override {
    auto s = control::ExportImage(*pool_, n, path, force, stats, progress ? ProgressThunk : nullptr, progress);
    if (!s.ok()) Fail(s, "exporting " + name_ + "/" + n + " to " + path);
  }

 private:
  std::unique_ptr<store::Pool> pool_;
};

class RemotePool final : public PoolHandle {
 public:
  RemotePool(std::string name, std::unique_ptr<control::Client> c) : client_(std::move(c)) {
    name_ = std::move(name);
  }
  bool remote() const override { return true; }

  // With a progress bar, asks the handler to stream progress (ignored by a
  // handler of protocol version 1, which just answers at the end).
  control::Reply Call(const control::Record& req, const std::string& what, Progress* progress = nullptr) {
    control::Record sent = req;
    control::Client::ProgressCallback cb;
    if (progress) {
      sent.Set("progress", "1");
      cb = [progress](uint64_t done, uint64_t total) { progress->Update(done, total); };
    }
    auto r = client_->Call(sent, cb);
    if (!r.ok()) Fail(r.status(), what + " (through the handler's control socket)");
    if (!r->ok()) Fail(r->status(), what);
    return r.value();
  }
  store::SpaceInfo Space() override {
    auto r = Call(control::Record("space"), "reading space of pool " + name_);
    store::SpaceInfo s;
    for (const auto& rec : r.records) {
      if (rec.type == "pool") {
        s.pool_size_bytes = rec.GetU64("size").value_or(0);
        s.allocation_unit = static_cast<uint32_t>(rec.GetU64("allocation_unit").value_or(0));
        s.total_units = rec.GetU64("total_units").value_or(0);
        s.allocated_units = rec.GetU64("allocated_units").value_or(0);
        s.metadata_units = rec.GetU64("metadata_units").value_or(0);
        s.shared_units = rec.GetU64("shared_units").value_or(0);
        s.free_units = rec.GetU64("free_units").value_or(0);
        s.mapped_bytes = rec.GetU64("mapped_bytes").value_or(0);
        s.saved_bytes = rec.GetU64("saved_bytes").value_or(0);
        s.soft_threshold_units = rec.GetU64("soft_threshold_units").value_or(0);
      } else if (rec.type == "lun") {
        s.luns.push_back(LunFromRecord(rec));
      }
    }
    return s;
  }
  store::LunInfo One(const control::Reply& r) {
    for (const auto& rec : r.records) {
      if (rec.type == "lun") return LunFromRecord(rec);
    }
    throw UserError("the handler's reply lacks the LUN");
  }
  store::LunInfo GetLun(const std::string& n) override {
    return One(Call(control::Record("lun-get").Set("name", n), "LUN " + name_ + "/" + n));
  }
  store::LunInfo CreateLun(const std::string& n, uint64_t size, uint32_t bs) override {
    return One(Call(control::Record("lun-create").Set("name", n).Set("size", size).Set("block_size", bs),
                    "creating LUN " + name_ + "/" + n));
  }
  void DeleteLun(const std::string& n) override {
    Call(control::Record("lun-delete").Set("name", n), "deleting LUN " + name_ + "/" + n);
  }
  store::LunInfo ResizeLun(const std::string& n, uint64_t size) override {
    return One(Call(control::Record("lun-resize").Set("name", n).Set("size", size), "resizing LUN " + name_ + "/" + n));
  }
  store::LunInfo CloneLun(const std::string& src, const std::string& dst) override {
    return One(Call(control::Record("lun-clone").Set("src", src).Set("dst", dst),
                    "cloning " + name_ + "/" + src + " to " + dst));
  }
  void Grow(uint64_t size) override { Call(control::Record("grow").Set("size", size), "growing pool " + name_); }
  store::CheckReport Check(Progress* progress) override {
    client_->SetTimeout(0);  // as long as the check takes
    auto r = Call(control::Record("check"), "checking pool " + name_, progress);
    store::CheckReport rep;
    rep.clean = r.head.Get("clean") == "1";
    rep.luns = r.head.GetU64("luns").value_or(0);
    rep.extents = r.head.GetU64("extents").value_or(0);
    rep.allocated_units = r.head.GetU64("allocated_units").value_or(0);
    rep.leaked_units = r.head.GetU64("leaked_units").value_or(0);
    for (const auto& rec : r.records) {
      if (rec.type == "problem") rep.problems.push_back(rec.Get("text"));
    }
    return rep;
  }
  store::LunInfo Import(const std::string& n, const std::string& path, uint32_t bs, uint64_t size,
                        control::CopyStats* stats, Progress* progress) override {
    client_->SetTimeout(0);  // as long as the copy takes
    auto r = Call(control::Record("lun-import").Set("name", n).Set("path", path).Set("block_size", bs).Set("size", size),
                  "importing " + path + " into " + name_ + "/" + n + " (done by tcmu-runner's handler)", progress);
    stats->written = r.head.GetU64("written").value_or(0);
    stats->skipped = r.head.GetU64("skipped").value_or(0);
    return One(r);
  }
  void Export(const std::string& n, const std::string& path, bool force, control::CopyStats* stats,
              Progress* progress) override {
    client_->SetTimeout(0);
    auto r = Call(control::Record("lun-export").Set("name", n).Set("path", path).Set("force", force ? "1" : "0"),
                  "exporting " + name_ + "/" + n + " to " + path + " (done by tcmu-runner's handler)", progress);
    stats->written = r.head.GetU64("written").value_or(0);
    stats->skipped = r.head.GetU64("skipped").value_or(0);
  }
  std::optional<std::vector<control::LunCounters>> Counters() override {
    auto r = client_->Call(control::Record("counters"));
    if (!r.ok() || !r->ok()) return std::nullopt;
    std::vector<control::LunCounters> out;
    for (const auto& rec : r->records) {
      if (rec.type != "counters") continue;
      control::LunCounters c;
      c.lun = rec.Get("lun");
      for (const auto& [k, v] : rec.fields) {
        if (k == "lun") continue;
        c.counters.emplace_back(k, control::Record().Set("v", v).GetU64("v").value_or(0));
      }
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  std::unique_ptr<control::Client> client_;
};

}  // namespace

std::string UuidHexString(const store::Uuid& id) { return UuidString(id); }

[[noreturn]] void Fail(const store::Status& s, const std::string& what) {
  std::string hint;
  switch (s.code()) {
    case Code::kNotFound: hint = "not found"; break;
    case Code::kAlreadyExists: hint = "the name is taken: pick another"; break;
    case Code::kInvalidArgument: hint = "refused"; break;
    case Code::kNoSpace: hint = "not enough free space in the pool: free some or run 'cowctl pool grow'"; break;
    case Code::kBusy: hint = "in use (exported LUNs are held open by tcmu-runner: unexport first)"; break;
    case Code::kCorruption: hint = "metadata damaged: run 'cowctl pool check'"; break;
    case Code::kUnsupported: hint = "made by a newer cowstore: upgrade cowctl"; break;
    case Code::kIOError: hint = "I/O error: check the device and dmesg"; break;
    default: hint = store::CodeName(s.code()); break;
  }
  std::string msg = what + ": " + hint;
  if (!s.message().empty()) msg += " (" + s.message() + ")";
  throw UserError(msg);
}

std::string PoolPath(const Context& ctx, const std::string& pool) {
  RequireName(pool, "pool");
  return ctx.pool_dir + "/" + pool;
}

std::vector<std::string> PoolNames(const Context& ctx) {
  std::vector<std::string> out;
  DIR* d = ::opendir(ctx.pool_dir.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (ValidName(n) && n.find(".tmp") == std::string::npos) out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<PoolHandle> ConnectPool(const Context& ctx, const std::string& pool) {
  auto c = control::Client::Connect(control::SocketPath(ctx.run_dir, pool));
  if (!c.ok()) return nullptr;
  return std::make_unique<RemotePool>(pool, std::move(c.value()));
}

std::unique_ptr<PoolHandle> OpenPool(const Context& ctx, const std::string& pool, bool read_only) {
  std::string path = PoolPath(ctx, pool);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    throw UserError("pool '" + pool + "' not found in " + ctx.pool_dir +
                    " (create it with 'cowctl pool create', or point --pool-dir/COWSTORE_POOL_DIR at it)");
  }
  if (S_ISLNK(st.st_mode) && ::stat(path.c_str(), &st) != 0) {
    throw UserError("pool '" + pool + "' points at a missing device or file (" + path +
                    "): attach the device, or remove the stale link");
  }
  store::OpenOptions oo;
  oo.read_only = read_only;
  auto r = store::Pool::Open(store::DefaultEnv(), path, oo);
  if (r.ok()) return std::make_unique<LocalPool>(pool, std::move(r.value()));
  if (r.status().code() != Code::kBusy) Fail(r.status(), "opening pool '" + pool + "'");
  std::string sock = control::SocketPath(ctx.run_dir, pool);
  auto c = control::Client::Connect(sock);
  if (!c.ok()) {
    throw UserError("pool '" + pool + "' is held by another process and nothing answers on " + sock +
                    ": wait for the other cowctl, or restart tcmu-runner");
  }
  return std::make_unique<RemotePool>(pool, std::move(c.value()));
}

}  // namespace cowstore::cowctl
