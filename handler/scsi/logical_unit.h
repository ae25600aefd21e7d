// SPDX-License-Identifier: Apache-2.0
// The SCSI/VAAI command layer's public contract: one LogicalUnit per opened
// store LUN executes CDBs against it.
//
// Input:  a CDB, the command's data buffers (iovecs) and the LogicalUnit.
// Output: a CommandResult (SAM status, fixed-format sense, data-in length).
// Nothing here knows tcmu-runner; handler/plugin translates.
//
// Thread safety: Execute() may be called concurrently from any number of
// threads for the same or different LogicalUnits. Commands to disjoint LBA
// ranges proceed in parallel (the store serialises overlapping writes and
// makes COMPARE AND WRITE atomic against every write). Per-LU SCSI state
// (unit attentions, mode pages, copy list IDs, counters) has its own short
// locks that are never held across store I/O. EXTENDED COPY between pools
// copies in chunks and holds no lock for the whole copy, so other commands to
// both LUNs keep flowing.
//
// Exceptions: none escapes Execute(). std::bad_alloc and anything unexpected
// becomes CHECK CONDITION, HARDWARE ERROR / INTERNAL TARGET FAILURE.
// Thread cancellation: glibc implements pthread_cancel by unwinding with
// abi::__forced_unwind; Execute() re-throws it from its catch-all (it never
// swallows it), but a cancellation in the middle of a store commit is still
// the adapter's business: the adapter disables cancellation
// (pthread_setcancelstate) around every call into this layer, so in practice
// no unwind ever starts inside it.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "handler/scsi/command_result.h"
#include "handler/scsi/naa.h"
#include "handler/store/pool.h"

namespace cowstore::scsi {

class LunDirectory;
class CopyListTable;
class DeferredCommit;

// Per-LUN configuration the adapter gathers from configfs and the cfgstring.
struct LunConfig {
  // The unit serial number exactly as configfs shows it (wwn/vpd_unit_serial,
  // what tcmu_cfgfs_dev_get_wwn returns), e.g. a UUID. Reported in VPD 0x80
  // and as the T10 vendor ID designator's tail; the NAA type 6 designator of
  // VPD 0x83 (and what EXTENDED COPY CSCDs name) derives from it, see naa.h.
  // Must not be empty.
  std::string unit_serial;
  // Administrator-declared copy group (LUN option). EXTENDED COPY between two
  // different LUs is allowed only when both have the same non-empty group.
  // Empty: only copies inside this LU. (TCMU gives no initiator identity; see
  // CVE-2020-28374, CVE-2021-3139.)
  std::string copy_group;
  // Standard INQUIRY strings, space-padded/truncated to 8/16/4 bytes.
  std::string vendor = "COWSTORE";
  std::string product = "cowstore";
  std::string revision = "0001";
  // Largest READ/WRITE/VERIFY data transfer accepted, in bytes (the adapter
  // passes the kernel's max data area / hw_max_sectors limit). Longer
  // transfers get INVALID FIELD IN CDB. Reported in VPD 0xB0.
  uint32_t max_transfer_bytes = 8u << 20;
  // Initial caching mode page WCE. false (default): every GOOD status of a
  // write-class command means durable (Durability::kDurable), which is what
  // ESXi (which does not send SYNCHRONIZE CACHE) needs.
  bool write_cache_enabled = false;
  // Queue POWER ON OCCURRED (0x29/0x01) for the first command after
  // creation. Off by default: the kernel target already reports per-nexus
  // reset UAs, and this layer cannot tell initiators apart.
  bool power_on_unit_attention = false;
  // Thin on thin (LUN option thin_on_thin=0|1, default on): report the pool's
  // backing store falling short of the pool's remaining growth
  // (store::Pool::backing_short_generation) as THIN PROVISIONING SOFT
  // THRESHOLD REACHED, as the pool's own percentage threshold is. Off: only
  // the percentage threshold is reported on this LU.
  bool thin_on_thin_signal = true;
};

// Limits the LU advertises (VPD 0xB0, 0x8F, RECEIVE COPY RESULTS) and
// enforces; derived from LunConfig, block size and the pool's AU size.
struct Limits {
  uint32_t block_size = 512;
  uint32_t max_transfer_blocks = 0;        // READ/WRITE/VERIFY
  uint32_t optimal_transfer_blocks = 0;    // one allocation unit
  uint32_t max_compare_and_write_blocks = 0;
  uint64_t max_write_same_blocks = 0;      // WSNZ=1: 0 blocks rejected
  uint32_t max_unmap_blocks = 0;           // per UNMAP command
  uint32_t max_unmap_descriptors = 0;
  uint32_t unmap_granularity_blocks = 0;   // one allocation unit
  // EXTENDED COPY (LID1)
  uint16_t max_cscd_descriptors = 0;
  uint16_t max_segment_descriptors = 0;
  uint32_t max_descriptor_list_length = 0; // CSCD + segment bytes
  uint32_t max_segment_bytes = 0;          // per 0x02 segment
};

// Unit attentions the adapter (or the layer itself) can raise.
enum class UnitAttention : uint8_t {
  kPowerOnOccurred,            // 0x29/0x01
  kPowerOnResetOccurred,       // 0x29/0x00
  kModeParametersChanged,      // 0x2A/0x01
  kCapacityDataHasChanged,     // 0x2A/0x09
  kSoftThresholdReached,       // 0x38/0x07
  kMediumMayHaveChanged,       // 0x28/0x00, after a rollback (docs/design/scsi.md)
};

// Monotonic counters, readable at any time (relaxed atomics).
struct LuCounters {
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> check_conditions{0};
  std::atomic<uint64_t> read_blocks{0};
  std::atomic<uint64_t> written_blocks{0};
  std::atomic<uint64_t> compare_and_writes{0};
  std::atomic<uint64_t> miscompares{0};
  std::atomic<uint64_t> write_same_blocks{0};
  std::atomic<uint64_t> unmapped_blocks{0};
  std::atomic<uint64_t> xcopy_commands{0};
  std::atomic<uint64_t> xcopy_cloned_blocks{0};   // metadata clones (same pool)
  std::atomic<uint64_t> xcopy_copied_blocks{0};   // data copies (across pools)
  std::atomic<uint64_t> no_space_errors{0};
  std::atomic<uint64_t> internal_errors{0};
};

class LogicalUnit : public std::enable_shared_from_this<LogicalUnit> {
 public:
  // Wraps an open store LUN and registers the LU in `directory` (the
  // process-wide LunDirectory::Global() when null) under its NAA; the
  // registration ends when the last shared_ptr goes. Fails with
  // kInvalidArgument for an empty unit_serial or a null lun.
  static store::Result<std::shared_ptr<LogicalUnit>> Create(
      LunConfig config, std::shared_ptr<store::Lun> lun, LunDirectory* directory = nullptr);
  ~LogicalUnit();
  LogicalUnit(const LogicalUnit&) = delete;
  LogicalUnit& operator=(const LogicalUnit&) = delete;

  // Executes one command. `cdb` is the whole CDB (6..16 bytes; its length is
  // taken from the operation code's group, extra bytes are ignored, too few
  // is INVALID FIELD IN CDB). `data` holds the data-out bytes of write-class
  // commands (their total length must match what the CDB implies, else
  // INVALID FIELD IN CDB), or receives data-in (at most the buffers' total
  // length and the CDB's ALLOCATION LENGTH; data_in_length tells how much).
  // Never throws (see the file comment); on any CHECK CONDITION the store
  // was not changed unless the command's semantics say otherwise (a failed
  // EXTENDED COPY keeps the segments it completed, as SPC-4 allows).
  CommandResult Execute(std::span<const uint8_t> cdb, std::span<const iovec> data);
  // The same for a caller that makes the command durable itself (non-null
  // `deferred`, deferred_commit.h): what must be durable before GOOD goes
  // in buffered and the LUNs whose pools must commit are added to
  // *deferred. The caller commits them (DeferredCommit::Commit) before it
  // returns the status, and answers CommitFailure() instead of GOOD if that
  // fails.
  CommandResult Execute(std::span<const uint8_t> cdb, std::span<const iovec> data,
                        DeferredCommit* deferred);

  // Rolls the LUN back to `snapshot` (store::Pool::RollbackLun) while no
  // command runs on this LU: commands in flight finish first, new ones wait,
  // and the first to run afterwards finds the unit attentions for the
  // changed medium queued: MEDIUM MAY HAVE CHANGED, and CAPACITY DATA HAS
  // CHANGED when the size differs. On failure nothing changed and nothing
  // is queued.
  store::Status Rollback(const std::string& snapshot);
  // Resizes the store LUN (reconfig) and queues CAPACITY DATA HAS CHANGED.
  // new_size_bytes must be a multiple of the block size.
  store::Status Resize(uint64_t new_size_bytes);
  // Queues a unit attention (no duplicates: a pending one is not repeated).
  // All initiators share one LU-wide queue (TCMU has no nexus identity): the
  // next command other than INQUIRY, REPORT LUNS or REQUEST SENSE from any
  // initiator gets CHECK CONDITION / UNIT ATTENTION and consumes it;
  // REQUEST SENSE returns it as sense data and consumes it.
  void RaiseUnitAttention(UnitAttention ua);
  // Checks the pool's soft-threshold generation (and, unless
  // LunConfig::thin_on_thin_signal is off, its backing-store generation) and
  // queues 0x38/0x07 once per crossing. Execute() calls it before every
  // command (the crossing may come from this LU's last write or from another
  // LU of the pool). Crossings of both kinds before the attention is taken
  // are one attention: it is queued at most once (RaiseUnitAttention).
  void PollSoftThreshold();

  const LunConfig& config() const { return config_; }
  const Naa& naa() const { return naa_; }
  Limits limits() const;
  bool write_cache_enabled() const { return wce_.load(std::memory_order_acquire); }
  store::Durability write_durability(bool fua) const {
    return (fua || !write_cache_enabled()) ? store::Durability::kDurable
                                           : store::Durability::kBuffered;
  }
  store::Lun& lun() const { return *lun_; }
  bool read_only() const { return lun_->read_only(); }
  const std::shared_ptr<store::Lun>& lun_ptr() const { return lun_; }
  LunDirectory& directory() const { return *directory_; }
  const LuCounters& counters() const { return counters_; }

  // Internal (used by the command implementations in handler/scsi).
  LuCounters& mutable_counters() { return counters_; }
  void set_write_cache_enabled(bool on) { wce_.store(on, std::memory_order_release); }
  CopyListTable& copy_lists() { return *copy_lists_; }
  bool prevent_removal() const { return prevent_.load(std::memory_order_relaxed); }
  void set_prevent_removal(bool on) { prevent_.store(on, std::memory_order_relaxed); }
  // Removes and returns the oldest pending unit attention, if any.
  bool TakeUnitAttention(UnitAttention* out);
  bool HasUnitAttention() const;

 private:
  LogicalUnit(LunConfig config, std::shared_ptr<store::Lun> lun, LunDirectory* directory);

  const LunConfig config_;
  const std::shared_ptr<store::Lun> lun_;
  LunDirectory* const directory_;
  const Naa naa_;
  std::atomic<bool> wce_;
  std::atomic<bool> prevent_{false};
  std::atomic<uint64_t> soft_threshold_seen_{0};
  std::atomic<uint64_t> backing_short_seen_{0};
  // Held shared by every command's execution, exclusive by Rollback: the
  // swap and its unit attentions appear at once to every later command.
  std::shared_mutex medium_mu_;
  mutable std::mutex ua_mu_;
  std::vector<UnitAttention> pending_ua_;  // guarded by ua_mu_
  std::unique_ptr<CopyListTable> copy_lists_;
  LuCounters counters_;
};

}  // namespace cowstore::scsi
