// SPDX-License-Identifier: Apache-2.0
// Creating and opening a pool: the options checked, then the format lays
// the pool out; the format's choice and load (superblock, checkpoint, journal
// replay: meta_format.h), the checks of its geometry against the device,
// and the rebuild of reference counts and free space from the maps.

#include "handler/store/pool_impl.h"

#include <cstring>
#include <map>

#include "handler/store/format_v2.h"
#include "handler/store/format_v3.h"
#include "handler/store/names.h"
#include "handler/store/random.h"

namespace cowstore::store {
Result<std::shared_ptr<Core>> Core::Create(Env* env, const std::string& path,
                                           const PoolOptions& o) {
  uint32_t au = o.allocation_unit;
  if (!ValidAllocationUnit(au))
    return Status(Code::kInvalidArgument,
                  "allocation unit must be " + std::string(kAllocationUnitRule));
  if (o.soft_threshold_percent > 100)
    return Status(Code::kInvalidArgument, "soft threshold is a percentage");
  // The format (pool.h: 2, or 3 for sharing below the AU) and the
  // grain, checked before anything is opened or written.
  if (o.format != kFormatVersion && o.format != kFormatVersionV3)
    return Status(Code::kInvalidArgument, "pool format must be " + std::to_string(kFormatVersion) + " or " +
                                              std::to_string(kFormatVersionV3) + ", not " +
                                              std::to_string(o.format));
  const uint32_t grain = o.grain ? o.grain : au;
  if (o.format == kFormatVersion && grain != au)
    return Status(Code::kInvalidArgument, "pool format 2 has no grain but the allocation unit");
  if (std::string why = GrainRule(grain, au); !why.empty()) return Status(Code::kInvalidArgument, why);
  const uint64_t jbytes = JournalBytesOf(o);
  if (std::string why = JournalBytesRule(jbytes); !why.empty()) return Status(Code::kInvalidArgument, why);
  bool existed = env->Exists(path);
  auto f = env->OpenLocked(path, existed ? Env::Mode::kReadWrite : Env::Mode::kCreate);
  if (!f.ok()) return f.status();
  std::unique_ptr<File> file = std::move(f.value());
  if (std::string why = WriteUnitRule(file->AtomicWriteBytes()); !why.empty())
    return Status(Code::kUnsupported, why);
  auto fsize = file->Size();
  if (!fsize.ok()) return fsize.status();
  if (existed) {
    char buf[kSuperblockSlot];
    for (int slot = 0; slot < 2; slot++) {
      Status s = file->Read(slot * kSuperblockSlot, sizeof buf, buf);
      if (!s.ok()) return s;
      if (std::memcmp(buf, kSuperblockMagic, sizeof kSuperblockMagic) == 0)
        return Status(Code::kAlreadyExists, "a pool already exists at " + path);
    }
    if (file->CanTruncate() && *fsize > 0)
      return Status(Code::kAlreadyExists, path + " exists and is not an empty file");
  }
  uint64_t size = o.size_bytes;
  if (!file->CanTruncate()) {  // the medium's size (env.h)
    if (size == 0) size = *fsize;
    if (size > *fsize) return Status(Code::kInvalidArgument, "size exceeds the device");
  }
  Status s = o.format == kFormatVersionV3
                 ? FormatV3::Create(file.get(), NewUuid(), au, grain, size, jbytes, o.soft_threshold_percent)
                 : FormatV2::Create(file.get(), NewUuid(), au, size, jbytes, o.soft_threshold_percent);
  if (!s.ok()) return s;
  auto core = std::make_shared<Core>(env, std::move(file), false);
  s = core->Load();
  if (!s.ok()) return s;
  return core;
}

Result<std::shared_ptr<Core>> Core::Open(Env* env, const std::string& path, bool read_only,
                                         bool accept_journal_loss) {
  auto f = env->OpenLocked(path, read_only ? Env::Mode::kReadOnly : Env::Mode::kReadWrite);
  if (!f.ok()) return f.status();
  if (std::string why = WriteUnitRule(f.value()->AtomicWriteBytes()); !why.empty() && !read_only)
    return Status(Code::kUnsupported, why + ": the pool can only be opened read-only here");
  // Before the first read: after a failed sync (this process's or one that
  // ran earlier since boot) the OS cache may hold metadata that never
  // reached the disk; the open must read, and build on, the disk's bytes
  // (env.h, File::DropCache; docs/design/store.md, "Commit protocol").
  if (Status s = f.value()->DropCache(); !s.ok()) return s;
  auto core = std::make_shared<Core>(env, std::move(f.value()), read_only);
  core->accept_journal_loss_ = accept_journal_loss;
  Status s = core->Load();
  if (!s.ok()) return s;
  return core;
}

void Core::NewSpaceLocked() {
  // Formats 1 and 2 (and format 3 at grain == AU) count their maps per AU:
  // the flat SpaceMap, which the check reads per AU. Below the AU, grains
  // in a GrainSpace, which hands out the checkpoint's chunks as whole AUs.
  flat_space_ = nullptr;
  grain_space_ = nullptr;
  zero_ahead_on_ = false;
  if (grain_ < au_) {
    auto grains = std::make_unique<GrainSpace>(grain_, au_);
    grain_space_ = grains.get();
    space_ = std::move(grains);
    // Its chunks open on zeroed-ahead runs (zero_ahead.h), where a write
    // into free space costs an allocation.
    zero_ahead_on_ = !read_only_ && file_->WritesAllocate();
    // Its syncs go through a handle of their own (env.h, SyncHandle): a
    // round's sync that met a write-back error of a commit's journal page
    // would otherwise take the error from the commit's sync on the same
    // descriptor, which would then report success for a record that never
    // reached the disk. Without one, no zeroing ahead (it only saves time).
    if (zero_ahead_on_ && !zero_ahead_sync_) {
      Result<std::unique_ptr<File::SyncHandle>> h = file_->NewSyncHandle();
      if (h.ok()) zero_ahead_sync_ = std::move(h).value();
      zero_ahead_on_ = zero_ahead_sync_ != nullptr;
    }
    return;
  }
  auto flat = std::make_unique<SpaceMap>();
  flat_space_ = flat.get();
  space_ = std::move(flat);
}

Status Core::LoadLocked() {
  MutexLock g(&meta_mu_);  // uncontended (nothing else knows this Core yet)
  // 1. The format that reads the superblocks, and the copy it opens from.
  SuperblockSlots slots;
  auto chosen = ChooseMetaFormat(file_.get(), &slots, ServedFormats::kV1ToV3);
  if (!chosen.ok()) return chosen.status();
  format_ = std::move(chosen).value();
  track_dirty_ = format_->tracks_dirty();
  one_sync_ = format_->writes_checked_maps();
  PoolGeometry geo;
  Status s = format_->ChooseSuperblock(slots, &geo);
  if (!s.ok()) return s;
  sb_uuid_ = geo.uuid;
  au_ = geo.au;
  grain_ = geo.grain;
  {
    std::string bad = GrainRule(grain_, au_);
    if (!bad.empty()) return Status(Code::kCorruption, "superblock: " + bad);
  }
  data_offset_ = geo.data_offset;
  // The geometry counts AUs; the space map, the maps and the thinner grains.
  const uint64_t total_units = UnitsOfAus(geo.total_units());
  // Punch slices, and at most 1/16 of the pool waiting for its punch (thinner.h).
  thinner_.set_units(std::max<uint64_t>(1, kPunchSliceBytes / grain_),
                     std::max<uint64_t>(1, total_units / 16));
  size_bytes_ = geo.size_bytes;
  NewSpaceLocked();
  space_->set_soft_percent(geo.soft_threshold_percent);
  soft_percent_ = geo.soft_threshold_percent;
  auto fsize = file_->Size();
  if (!fsize.ok()) return fsize.status();
  // Create and Grow extend a pool file (and sync) before any superblock names
  // the size, and a pool never shrinks: a shorter file was cut or copied
  // incompletely, and what lay past its end would read as zeros.
  if (*fsize < geo.size_bytes) {
    if (!file_->CanTruncate())
      return Status(Code::kCorruption, "device is smaller than the pool's declared size");
    return Status(Code::kCorruption,
                  "pool file is " + std::to_string(*fsize) + " bytes, shorter than the " +
                      std::to_string(geo.size_bytes) +
                      " bytes its superblock declares: it was truncated or copied incompletely "
                      "(docs/design/store.md, \"Recovery procedures\")");
  }
  st_ = MetaState();
  st_.au = grain_;  // MetaState's unit is the map's: the grain

  // 2. The checkpoint and the journal after it. A torn tail ends replay
  // quietly; damage to records later ones vouch for, or a journal of a newer
  // superblock, is refused unless the caller knowingly accepts the loss.
  LoadedMeta loaded;
  s = format_->LoadState(file_.get(), &st_, &loaded);
  if (!s.ok()) return s;
  ckpt_cost_ = format_->NextCheckpointCost();
  const ReplayEnd& end = loaded.end;
  jbuf_.set_next_lsn(end.next_lsn);
  loss_ = JournalLoss();
  if (end.damaged || end.newer_record_follows) {
    if (!accept_journal_loss_) return Status(Code::kCorruption, end.explain);
    loss_ = {true, end.tail, end.next_lsn, end.lost, end.lost_operations};
  }

  // 3. Rebuild reference counts, unit states and free space from the maps
  // (grains, as total_units; the checkpoint's AUs stay AUs).
  for (const auto& [id, l] : st_.luns()) {
    // Every loader has applied the one LUN rule (meta.h) already: this is a
    // second line of defence, should a loader ever miss it. A block must
    // also lie within one grain, as CreateLun requires: that check is this
    // one's own (the loaders do not know the grain).
    if (std::string why = LunGeometryRule(*l, grain_, total_units); !why.empty())
      return Status(Code::kCorruption, why);
  }
  s = space_->Rebuild(total_units, st_, std::move(loaded.meta_units));
  if (!s.ok()) return s;
  if (read_only_) return Status::Ok();
  // The replayed one-sync writes nothing vouches for: until the open's
  // checkpoint takes them out of the journal, a cut replays them again and
  // checks their grains, so those grains keep their bytes (checked_grains.h)
  // even where later records freed them. Marked at the replay's last LSN,
  // which the checkpoint's Vouch covers.
  {
    RangeValues::Spare spare = CheckedGrains::SpareFor(loaded.unvouched.size());
    checked_.Mark(loaded.unvouched, end.next_lsn, &spare);
  }

  // 4. Writable: zero every free AU (a crash may have left data in AUs whose
  // mapping never became durable; but the grains of replayed one-sync
  // writes, held until a vouch as below), then checkpoint with a fresh LSN
  // range so a torn journal tail can never be mistaken for new records.
  // Jump LSNs by 2^32 plus a random amount, so neither a torn tail nor the
  // records of a generation we fell back from can pass for new records.
  jbuf_.SkipLsns(kLsnGapAfterOpen + (RandomU64() & 0xffffff));
  // Free grains of replayed one-sync writes keep their bytes until a vouch:
  // a cut before it replays their records again and checks them (freed
  // later in the journal, they are free in the replayed state). So they are
  // not punched here but held out of free space, as ReleasePending holds a
  // run freed at run time (held_, pool_impl.h), and handed to the thinner
  // by the ReleasePending that finds them vouched: the open's checkpoint
  // (its Vouch) when it succeeds; when it fails, never before the pool is
  // reopened; when the pool is too full for it, the checkpoint made by the
  // first commit that carries a record once there is room (a Grow). Held,
  // the open's checkpoint cannot take them for its chunks or journal
  // either.
  std::vector<std::pair<uint64_t, uint64_t>> punch_now, hold;
  for (const auto& [p, n] : space_->free_runs()) {
    uint64_t at = p;
    // Only locals in here: the lambda is a function of its own to the
    // thread-safety analysis, which cannot see `g` held.
    checked_.VisitUnvouched(p, n, [&](uint64_t q, uint64_t k) {
      if (q > at) punch_now.push_back({at, q - at});
      hold.push_back({q, k});
      at = q + k;
    });
    if (p + n > at) punch_now.push_back({at, p + n - at});
  }
  held_.reserve(held_.size() + hold.size());  // before any Withhold: none taken if it throws
  for (const auto& [q, k] : hold) {
    // Tag 0: no record freed them in this session (a quarantine says so).
    const PendingRun r{q, k, 0};
    s = space_->Withhold(r);  // wholly inside one free run
    if (!s.ok()) return s;
    held_.push_back({checked_.NeededLsn(q, k), r});  // reserved: no throw
  }
  g.Unlock();  // no data I/O under the metadata lock
  // Before the first write: the punches may hit AUs an older superblock
  // copy still names, which a cut must never fall back to (meta_format.h).
  s = format_->PrepareWrites(file_.get());
  if (!s.ok()) return s;
  for (const auto& [p, n] : punch_now) {
    s = file_->PunchHole(GrainOffset(p), n * grain_);
    if (!s.ok()) return s;
  }
  uint64_t target;
  s = CheckpointLocked(&target);
  if (s.code() == Code::kNoSpace) {
    // A full pool: no room for the open's checkpoint, refused before
    // anything changed (CheckpointLocked's only kNoSpace). Rather than
    // refuse the open, which would leave no way to read the data or grow
    // the pool, serve it as a checkpoint refused for room leaves a running
    // pool (checkpoint.cc): reads and overwrites in place, every record
    // refused with that kNoSpace until the AUs are free (a Grow), and the
    // first commit after is this checkpoint (CommitBatch checkpoints while
    // ckpt_refused_aus_ is set), so no record is ever written into the
    // journal as replayed, and the LSN gap above holds for it.
    return Status::Ok();
  }
  if (!s.ok()) return s;
  ReleasePending(target);
  return Status::Ok();
}

}  // namespace cowstore::store
