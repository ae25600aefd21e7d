// SPDX-License-Identifier: Apache-2.0
#include "handler/scsi/logical_unit.h"

#include <cxxabi.h>

#include <algorithm>
#include <new>

#include "handler/scsi/cdb.h"
#include "handler/scsi/command.h"
#include "handler/scsi/copy_list_table.h"
#include "handler/scsi/lun_directory.h"
#include "handler/scsi/opcodes.h"
#include "handler/scsi/sense.h"

namespace cowstore::scsi {

namespace {

Asc AscOf(UnitAttention ua) {
  switch (ua) {
    case UnitAttention::kPowerOnOccurred: return asc::kPowerOnOccurred;
    case UnitAttention::kPowerOnResetOccurred: return asc::kPowerOnResetOccurred;
    case UnitAttention::kModeParametersChanged: return asc::kModeParametersChanged;
    case UnitAttention::kCapacityDataHasChanged: return asc::kCapacityDataHasChanged;
    case UnitAttention::kSoftThresholdReached: return asc::kThinProvisioningSoftThresholdReached;
    case UnitAttention::kMediumMayHaveChanged: return asc::kMediumMayHaveChanged;
  }
  return asc::kPowerOnResetOccurred;
}

}  // namespace

CommandResult UnitAttentionResult(UnitAttention ua) {
  return CheckCondition(SenseKey::kUnitAttention, AscOf(ua));
}

store::Result<std::shared_ptr<LogicalUnit>> LogicalUnit::Create(LunConfig config,
                                                                std::shared_ptr<store::Lun> lun,
                                                                LunDirectory* directory) {
  if (!lun) return store::Status(store::Code::kInvalidArgument, "no store LUN");
  if (config.unit_serial.empty()) {
    return store::Status(store::Code::kInvalidArgument, "empty unit serial (WWN)");
  }
  if (directory == nullptr) directory = &LunDirectory::Global();
  std::shared_ptr<LogicalUnit> lu(new LogicalUnit(std::move(config), std::move(lun), directory));
  directory->Register(lu);
  return lu;
}

LogicalUnit::LogicalUnit(LunConfig config, std::shared_ptr<store::Lun> lun,
                         LunDirectory* directory)
    : config_(std::move(config)),
      lun_(std::move(lun)),
      directory_(directory),
      naa_(NaaFromUnitSerial(config_.unit_serial)),
      wce_(config_.write_cache_enabled),
      copy_lists_(std::make_unique<CopyListTable>()) {
  soft_threshold_seen_.store(lun_->pool().soft_threshold_generation());
  backing_short_seen_.store(lun_->pool().backing_short_generation());
  if (config_.power_on_unit_attention) pending_ua_.push_back(UnitAttention::kPowerOnOccurred);
}

LogicalUnit::~LogicalUnit() { directory_->Unregister(this); }

Limits LogicalUnit::limits() const {
  Limits l;
  l.block_size = lun_->block_size();
  const uint32_t au = lun_->pool().allocation_unit();
  l.max_transfer_blocks = std::max<uint32_t>(1, config_.max_transfer_bytes / l.block_size);
  l.optimal_transfer_blocks = std::max<uint32_t>(1, au / l.block_size);
  l.max_compare_and_write_blocks = std::clamp<uint32_t>(l.max_transfer_blocks / 2, 1, 255);
  l.max_write_same_blocks = 1u << 20;
  l.max_unmap_blocks = 1u << 20;
  l.max_unmap_descriptors = 256;
  // The unit UNMAP frees whole: a smaller piece is written as zeros.
  l.unmap_granularity_blocks = std::max<uint32_t>(1, lun_->pool().grain() / l.block_size);
  l.max_cscd_descriptors = 128;
  l.max_segment_descriptors = 128;
  l.max_descriptor_list_length = 128 * 32 + 128 * 28;
  l.max_segment_bytes = 0xFFFFu * l.block_size;
  return l;
}

void LogicalUnit::RaiseUnitAttention(UnitAttention ua) {
  std::lock_guard<std::mutex> lock(ua_mu_);
  if (std::find(pending_ua_.begin(), pending_ua_.end(), ua) == pending_ua_.end()) {
    pending_ua_.push_back(ua);
  }
}

bool LogicalUnit::TakeUnitAttention(UnitAttention* out) {
  std::lock_guard<std::mutex> lock(ua_mu_);
  if (pending_ua_.empty()) return false;
  *out = pending_ua_.front();
  pending_ua_.erase(pending_ua_.begin());
  return true;
}

bool LogicalUnit::HasUnitAttention() const {
  std::lock_guard<std::mutex> lock(ua_mu_);
  return !pending_ua_.empty();
}

namespace {

// True once per increase of `gen` over `*seen`, whichever thread sees it.
bool Advanced(uint64_t gen, std::atomic<uint64_t>* seen) {
  uint64_t last = seen->load(std::memory_order_relaxed);
  while (gen > last) {
    if (seen->compare_exchange_weak(last, gen)) return true;
  }
  return false;
}

}  // namespace

void LogicalUnit::PollSoftThreshold() {
  store::Pool& pool = lun_->pool();
  bool crossed = Advanced(pool.soft_threshold_generation(), &soft_threshold_seen_);
  if (config_.thin_on_thin_signal) {
    crossed |= Advanced(pool.backing_short_generation(), &backing_short_seen_);
  }
  if (crossed) RaiseUnitAttention(UnitAttention::kSoftThresholdReached);
}

store::Status LogicalUnit::Resize(uint64_t new_size_bytes) {
  store::Status s = lun_->pool().ResizeLun(lun_->name(), new_size_bytes);
  if (s.ok()) RaiseUnitAttention(UnitAttention::kCapacityDataHasChanged);
  return s;
}

store::Status LogicalUnit::Rollback(const std::string& snapshot) {
  std::unique_lock<std::shared_mutex> quiesce(medium_mu_);
  const uint64_t old_blocks = lun_->block_count();
  store::Status s = lun_->pool().RollbackLun(lun_->name(), snapshot);
  if (!s.ok()) return s;
  RaiseUnitAttention(UnitAttention::kMediumMayHaveChanged);
  if (lun_->block_count() != old_blocks) RaiseUnitAttention(UnitAttention::kCapacityDataHasChanged);
  return s;
}

CommandResult LogicalUnit::Execute(std::span<const uint8_t> cdb, std::span<const iovec> data) {
  return Execute(cdb, data, nullptr);
}

CommandResult LogicalUnit::Execute(std::span<const uint8_t> cdb, std::span<const iovec> data,
                                   DeferredCommit* deferred) {
  counters_.commands.fetch_add(1, std::memory_order_relaxed);
  CommandResult r;
  try {
    std::shared_lock<std::shared_mutex> medium(medium_mu_);
    r = [&]() -> CommandResult {
      if (cdb.empty()) return InvalidFieldInCdb(0);
      const uint8_t op = cdb[0];
      // The soft threshold is the pool's: a crossing by this LU's last write
      // or by another LU's writes is queued here, once per LU, and reported
      // by this command or the next that may carry it. One atomic load.
      PollSoftThreshold();
      // Pending unit attentions go to the first command that may carry them.
      if (op != 0x12 && op != 0x03 && op != 0xA0) {
        UnitAttention ua;
        if (TakeUnitAttention(&ua)) return UnitAttentionResult(ua);
      }
      const size_t len = CdbLengthForOpcode(op);
      bool known = false;
      const OpcodeInfo* info = len == 0 ? nullptr : FindOpcode(op, ServiceActionOf(cdb), &known);
      if (!info) {
        if (!known) return InvalidOpcode();
        if (cdb.size() < 2) return InvalidFieldInCdb(static_cast<uint16_t>(cdb.size()));
        return InvalidFieldInCdb(1, 4);  // unsupported service action
      }
      if (cdb.size() < info->cdb_length) return InvalidFieldInCdb(static_cast<uint16_t>(cdb.size()));
      std::span<const uint8_t> full = cdb.first(info->cdb_length);
      const uint16_t control = static_cast<uint16_t>(info->cdb_length - 1);
      if (full[control] & 0x04) return InvalidFieldInCdb(control, 2);  // NACA unsupported
      if ((info->flags & kWritesMedium) && read_only()) {
        return CheckCondition(SenseKey::kDataProtect, asc::kWriteProtected);
      }
      Command cmd(*this, full, data, deferred);
      return info->handler(cmd);
    }();
  } catch (abi::__forced_unwind&) {
    throw;  // thread cancellation must unwind (the adapter normally disables it)
  } catch (const std::bad_alloc&) {
    counters_.internal_errors.fetch_add(1, std::memory_order_relaxed);
    r = CheckCondition(SenseKey::kHardwareError, asc::kInternalTargetFailure);
  } catch (...) {
    counters_.internal_errors.fetch_add(1, std::memory_order_relaxed);
    r = CheckCondition(SenseKey::kHardwareError, asc::kInternalTargetFailure);
  }
  if (!r.good()) counters_.check_conditions.fetch_add(1, std::memory_order_relaxed);
  return r;
}

}  // namespace cowstore::scsi
