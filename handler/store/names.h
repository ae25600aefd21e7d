// SPDX-License-Identifier: Apache-2.0
// The store's rules for what it accepts from outside, each written once:
// names of pools, LUNs and copy groups, logical block sizes, allocation
// units, and how a LUN's 128-bit identity is written as text. The store, the
// handler and cowctl all check with these functions, so what one accepts the
// others accept (tests/common/agreement_test.cc pins it).
//
// Pure functions, no I/O; this file and names.cc form the small library
// cowstore_rules, which cowctl's store-free parts link too.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace cowstore::store {

using Uuid = std::array<uint8_t, 16>;

// Names of pools, LUNs and copy groups: 1..64 characters of [A-Za-z0-9_.-],
// not starting with '.' or '-', without "..". A pool name is a file name in
// the pool directory and a LUN name travels in the cfgstring, so neither may
// ever read as a path.
inline constexpr size_t kMaxNameLength = 64;
// On failure *reason (when non-null) is a sentence naming the value as
// `what` ("pool name", "LUN name", "copy group name") and saying what to do.
bool ValidName(std::string_view name, std::string_view what = "name",
               std::string* reason = nullptr);
// What every build has let into a pool as a LUN name: ValidName but for
// "..", which the store's own check allowed until 5968edc (cowctl made LUNs
// named 'a..b' then), so a pool may hold one. Only the loaders' and the
// on-disk codecs' rule (LunRecordRule, meta.h); anything that makes a name
// uses ValidName.
bool ValidStoredName(std::string_view name, std::string_view what = "name",
                     std::string* reason = nullptr);

// A name (any user input) as a message shows it: in single quotes, bytes
// outside printable ASCII as \xNN, so an empty or damaged name still reads.
std::string Quoted(std::string_view s);

// Logical block size of a LUN: 512 or 4096 bytes.
bool ValidBlockSize(uint64_t bytes);
inline constexpr std::string_view kBlockSizeRule = "512 or 4096";

// Allocation unit of a pool: a power of two from 64 KiB to 1 MiB, so it
// always divides 1 MiB (ESXi aligns XCOPY and UNMAP to 1 MiB and needs the
// optimal unmap granularity to divide it).
inline constexpr uint32_t kMinAllocationUnit = 64u << 10;
inline constexpr uint32_t kMaxAllocationUnit = 1u << 20;
bool ValidAllocationUnit(uint64_t bytes);
inline constexpr std::string_view kAllocationUnitRule = "a power of two from 64 KiB to 1 MiB";

// Whether `grain` may be a pool's sharing unit beside allocation unit `au`
// (both bytes): a power of two, at least the smallest LUN block size, at
// most the AU (so it divides it). Empty if so, else why not. Core checks it
// at open; format v3's superblock codec (superblock_v3.h) when decoding.
std::string GrainRule(uint64_t grain, uint64_t au);

// The bytes of each of a pool's two superblock slots, at the start of the
// medium (formats 1 to 3): the largest write unit a medium may have
// (WriteUnitRule).
inline constexpr uint64_t kSuperblockSlot = 4096;

// Whether a medium whose File::AtomicWriteBytes() is `bytes` can hold a pool
// this build writes (formats 2 and 3 alike): a power of two from 512 to
// 4096. Each superblock slot is 4096 bytes of its own, written alone while
// the other holds the pool (the writer rule, docs/design/store.md): a larger
// unit holds both slots, and a cut inside one slot's write could tear the
// other. Empty if so, else why not. Create refuses such a medium, and a
// writable open does; a read-only open writes nothing and is allowed.
std::string WriteUnitRule(uint64_t bytes);

// A LUN's identity as text: 8-4-4-4-12 lowercase hex digits, the form
// written to configfs wwn/vpd_unit_serial (from which the SCSI layer derives
// the NAA designator).
std::string UuidText(const Uuid& id);
// Reads UuidText's form back (the 32 hex digits without dashes too); false
// on anything else.
bool ParseUuidText(std::string_view text, Uuid* id);

}  // namespace cowstore::store
