// SPDX-License-Identifier: Apache-2.0
#include "handler/plugin/device.h"

#include <algorithm>
#include <cerrno>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "handler/plugin/log.h"
#include "handler/plugin/pool_registry.h"
#include "handler/store/names.h"

namespace cowstore::plugin {
namespace {

// Keeps the pool referenced for as long as anyone holds the LUN.
struct LunHold {
  std::shared_ptr<store::Pool> pool;
  std::shared_ptr<store::Lun> lun;
};

std::string Bytes(uint64_t n) { return std::to_string(n) + " bytes"; }

// Never destroyed (see PoolRegistry::Global).
std::mutex& ClaimsMutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::set<std::string>& Claims() {
  static auto* claims = new std::set<std::string>;
  return *claims;
}

}  // namespace

bool LunClaim::Acquire(const std::string& key) {
  std::lock_guard<std::mutex> lock(ClaimsMutex());
  if (!Claims().insert(key).second) return false;
  key_ = key;
  return true;
}

LunClaim::~LunClaim() {
  if (key_.empty()) return;
  std::lock_guard<std::mutex> lock(ClaimsMutex());
  Claims().erase(key_);
}

int ErrnoFor(const store::Status& status) {
  switch (status.code()) {
    case store::Code::kOk: return 0;
    case store::Code::kNotFound: return -ENOENT;
    case store::Code::kAlreadyExists: return -EEXIST;
    case store::Code::kInvalidArgument: return -EINVAL;
    case store::Code::kOutOfRange: return -ERANGE;
    case store::Code::kNoSpace:
    case store::Code::kNotDurable: return -ENOSPC;
    case store::Code::kBusy: return -EBUSY;
    case store::Code::kUnsupported: return -EOPNOTSUPP;
    case store::Code::kReadOnly: return -EROFS;
    case store::Code::kCorruption:
    case store::Code::kIOError:
    case store::Code::kMiscompare:
    case store::Code::kClosed: return -EIO;
  }
  return -EIO;
}

std::string NotDurableAdvice() {
  return "not durable: the pool is short of free space for its metadata checkpoint. Grow the "
         "pool (cowctl pool grow) or free space in it (delete LUNs or snapshots no longer "
         "needed, unmap from the initiators): the first checkpoint that finds room makes what "
         "is applied durable";
}

std::unique_ptr<Device> Device::Open(const DeviceParams& p, std::string* reason, int* err) {
  common::LunSpec spec;
  std::string why;
  if (!common::ParseCfgstring(p.cfgstring, &spec, &why)) {
    *reason = why;
    *err = -EINVAL;
    return nullptr;
  }
  const std::string name = common::FormatCfgstring(spec);
  auto fail = [&](std::string msg, int e) -> std::unique_ptr<Device> {
    *reason = name + ": " + std::move(msg);
    *err = e;
    return nullptr;
  };
  if (!store::ValidBlockSize(p.block_size)) {
    return fail("hw_block_size " + std::to_string(p.block_size) + " is not supported; use " +
                    std::string(store::kBlockSizeRule),
                -EINVAL);
  }
  if (p.num_lbas == 0 || p.num_lbas > std::numeric_limits<uint64_t>::max() / p.block_size) {
    return fail("configfs size of " + std::to_string(p.num_lbas) + " blocks is not usable", -EINVAL);
  }
  const uint64_t size = p.num_lbas * p.block_size;

  const std::string path = common::PoolPath(spec);
  LunClaim claim;
  if (!claim.Acquire(path + "\n" + spec.lun)) {
    return fail("another backstore of this tcmu-runner already serves this LUN", -EBUSY);
  }
  auto pool = PoolRegistry::Global().Acquire(path, spec.pool);
  if (!pool.ok()) {
    std::string hint;
    if (pool.status().code() == store::Code::kNotFound) {
      hint = " (no pool file there; create the pool first, or point COWSTORE_POOL_DIR of "
             "tcmu-runner at the pool directory)";
    } else if (pool.status().code() == store::Code::kBusy) {
      hint = " (another process holds the pool)";
    } else if (pool.status().code() == store::Code::kCorruption) {
      // Nothing was written to it: the open refuses before its first write.
      hint = " (the pool is left as it was; `cowctl pool check " + spec.pool +
             "` tells what is damaged and what a repair would give up)";
    }
    return fail("cannot open pool " + path + ": " + pool.status().ToString() + hint,
                ErrnoFor(pool.status()));
  }
  std::shared_ptr<store::Pool> pool_ref = std::move(pool).value();

  auto info = pool_ref->GetLun(spec.lun);
  if (!info.ok() && info.status().code() == store::Code::kNotFound) {
    auto created = pool_ref->CreateLun(spec.lun, size, p.block_size);
    // kNotDurable: the LUN exists, in memory only. The open still fails
    // with ENOSPC rather than serve it: the admin is told at once that the
    // pool needs room, before any initiator sees a LUN whose every write
    // would be refused for that room, and nothing is lost by not serving
    // it: the LUN is new and empty. A retry after room is made finds it
    // (the existing-LUN path below) if the pool stayed open meanwhile,
    // else the pool's release dropped it (PoolRegistry logs that) and the
    // retry creates it anew; the same empty LUN either way.
    if (created.status().code() == store::Code::kNotDurable) {
      COWSTORE_LOG_ERROR(nullptr, name + ": the LUN was created in pool " + path +
                                      " but is applied in memory only and " + NotDurableAdvice() +
                                      "; it is not served until then (retry the backstore then)");
    }
    if (!created.ok()) {
      return fail("cannot create LUN of " + Bytes(size) + " in pool " + path + ": " +
                      created.status().ToString(),
                  ErrnoFor(created.status()));
    }
    COWSTORE_LOG_INFO(nullptr, name + ": created LUN of " + Bytes(size) + ", block size " +
                                   std::to_string(p.block_size));
    info = std::move(created);
  } else if (!info.ok()) {
    return fail("cannot look up the LUN in pool " + path + ": " + info.status().ToString(),
                ErrnoFor(info.status()));
  } else {
    if (info->block_size != p.block_size) {
      return fail("the LUN has block size " + std::to_string(info->block_size) +
                      " but the backstore was created with hw_block_size " +
                      std::to_string(p.block_size) + "; they must match",
                  -EINVAL);
    }
    if (info->size_bytes > size) {
      return fail("the LUN is " + Bytes(info->size_bytes) + " but the backstore's size is " +
                      Bytes(size) + "; create the backstore with the LUN's size (shrinking "
                      "happens only through an explicit resize)",
                  -EINVAL);
    }
    if (info->size_bytes < size) {
      store::Status st = pool_ref->ResizeLun(spec.lun, size);
      // kNotDurable: grown in memory only; refused as the create above is.
      if (st.code() == store::Code::kNotDurable) {
        COWSTORE_LOG_ERROR(nullptr, name + ": the LUN was grown to " + Bytes(size) +
                                        " but that is applied in memory only and " +
                                        NotDurableAdvice() + "; it is not served until then");
      }
      if (!st.ok()) {
        return fail("cannot grow the LUN from " + Bytes(info->size_bytes) + " to " + Bytes(size) +
                        ": " + st.ToString(),
                    ErrnoFor(st));
      }
      COWSTORE_LOG_INFO(nullptr, name + ": grew LUN from " + Bytes(info->size_bytes) + " to " +
                                     Bytes(size) + " (configfs size)");
    }
  }

  auto lun = pool_ref->OpenLun(spec.lun);
  if (!lun.ok()) {
    return fail("cannot open the LUN: " + lun.status().ToString(), ErrnoFor(lun.status()));
  }
  auto hold = std::make_shared<LunHold>(LunHold{std::move(pool_ref), std::move(lun).value()});
  std::shared_ptr<store::Lun> held_lun(hold, hold->lun.get());

  uint32_t max_transfer = scsi::LunConfig{}.max_transfer_bytes;
  if (p.max_xfer_blocks > 0) {
    const uint64_t bytes = uint64_t{p.max_xfer_blocks} * p.block_size;
    max_transfer =
        static_cast<uint32_t>(std::min<uint64_t>(bytes, std::numeric_limits<uint32_t>::max()));
  }
  std::unique_ptr<Device> device(new Device(std::move(claim), std::move(spec), path, p.cfgstring,
                                            std::move(held_lun),
                                            max_transfer, p.read_unit_serial));
  store::Status st = device->MakeLogicalUnit(p.unit_serial, device->spec_.write_cache());
  if (!st.ok()) {
    return fail("cannot set up the SCSI logical unit: " + st.ToString(), ErrnoFor(st));
  }
  *err = 0;
  return device;
}

store::Status Device::MakeLogicalUnit(const std::string& configfs_serial, bool wce) {
  // No serial (yet): a stable one from the LUN's identity, as cowctl writes it.
  const std::string serial = configfs_serial.empty() ? store::UuidText(lun_->id()) : configfs_serial;
  scsi::LunConfig config;
  config.unit_serial = serial;
  config.copy_group = spec_.copy_group;
  config.write_cache_enabled = wce;
  config.thin_on_thin_signal = spec_.thin_on_thin_signal();
  config.max_transfer_bytes = max_transfer_bytes_;
  auto lu = scsi::LogicalUnit::Create(std::move(config), lun_);
  if (!lu.ok()) return lu.status();
  // Registered before the previous LogicalUnit (if any) is dropped below.
  PoolRegistry::Global().SetLogicalUnit(pool_path_, spec_.lun, lu.value().get());
  std::lock_guard<std::mutex> lock(mu_);
  lu_ = std::move(lu).value();
  serial_ = configfs_serial;
  return store::Status::Ok();
}

void Device::ConfirmIdentity() {
  if (!read_unit_serial_) return;
  const std::string now = read_unit_serial_();
  // No reconfig in between: what it changes on the old LogicalUnit is
  // carried over below.
  std::lock_guard<std::mutex> reconfig(reconfig_mu_);
  std::shared_ptr<scsi::LogicalUnit> old = logical_unit();
  const std::string before = unit_serial();
  if (now == before || now.empty()) return;
  // The old LogicalUnit unregisters from the LunDirectory when replaced.
  store::Status st = MakeLogicalUnit(now, old->write_cache_enabled());
  if (!st.ok()) {
    COWSTORE_LOG_ERROR(nullptr, common::FormatCfgstring(spec_) + ": keeping unit serial '" + before +
                                    "': cannot rebuild the logical unit for '" + now +
                                    "': " + st.ToString());
    return;
  }
  // Unit attentions queued before the first command (a resize, a write
  // cache change) are still owed to the initiators.
  std::shared_ptr<scsi::LogicalUnit> fresh = logical_unit();
  for (scsi::UnitAttention ua; old->TakeUnitAttention(&ua);) fresh->RaiseUnitAttention(ua);
  COWSTORE_LOG_INFO(nullptr, common::FormatCfgstring(spec_) + ": unit serial is '" + now + "'" +
                                 (before.empty() ? "" : " (was '" + before + "' at open)"));
}

std::shared_ptr<scsi::LogicalUnit> Device::logical_unit() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lu_;
}

std::string Device::unit_serial() const {
  std::lock_guard<std::mutex> lock(mu_);
  return serial_;
}

Device::~Device() {
  PoolRegistry::Global().SetLogicalUnit(pool_path_, spec_.lun, nullptr);
  std::shared_ptr<scsi::LogicalUnit> lu = logical_unit();
  if (lu && lu->write_cache_enabled()) {
    store::Status st = lun_->Flush();
    if (!st.ok()) COWSTORE_LOG_ERROR(nullptr, common::FormatCfgstring(spec_) + ": flush at close: " + st.ToString());
  }
}

bool Device::Resize(uint64_t new_size_bytes, std::string* reason, int* err) {
  const uint32_t bs = lun_->block_size();
  if (new_size_bytes == 0 || new_size_bytes % bs != 0) {
    *reason = "new size " + Bytes(new_size_bytes) + " is not a positive multiple of the block size " +
              std::to_string(bs);
    *err = -EINVAL;
    return false;
  }
  std::lock_guard<std::mutex> reconfig(reconfig_mu_);
  const uint64_t old_size = lun_->block_count() * bs;
  store::Status st = logical_unit()->Resize(new_size_bytes);
  if (st.ok() && new_size_bytes < old_size) {
    COWSTORE_LOG_WARN(nullptr, common::FormatCfgstring(spec_) + ": shrunk from " + Bytes(old_size) + " to " +
                                   Bytes(new_size_bytes) + "; the blocks beyond are released");
  }
  if (!st.ok()) {
    *reason = "resize to " + Bytes(new_size_bytes) + " failed: " + st.ToString();
    *err = ErrnoFor(st);
    return false;
  }
  *err = 0;
  return true;
}

void Device::SetWriteCache(bool enabled) {
  std::lock_guard<std::mutex> reconfig(reconfig_mu_);
  std::shared_ptr<scsi::LogicalUnit> lu = logical_unit();
  if (lu->write_cache_enabled() == enabled) return;
  if (!enabled) {
    // Turning the cache off promises durability from now on, so make what
    // was buffered durable first.
    store::Status st = lun_->Flush();
    if (!st.ok()) COWSTORE_LOG_ERROR(nullptr, common::FormatCfgstring(spec_) + ": flush: " + st.ToString());
  }
  lu->set_write_cache_enabled(enabled);
  lu->RaiseUnitAttention(scsi::UnitAttention::kModeParametersChanged);
}

}  // namespace cowstore::plugin
