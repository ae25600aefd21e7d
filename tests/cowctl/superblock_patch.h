// SPDX-License-Identifier: Apache-2.0
// Rewrites the format version a pool file's superblock copy states, in
// place (pool files are sparse and large), as damage would, or, with its
// envelope CRC resealed, as a newer cowstore writing another format would:
// every format keeps the envelope (magic, version at 8, a CRC32C of bytes
// [0, 104) at 104: meta.h, superblock_v3.h). Format 3's own slot CRC is
// left as it was: a format this build does not know has its own.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "handler/store/crc32c.h"
#include "handler/store/meta.h"
#include "tests/store/patch_bytes.h"

namespace cowstore::cowctl::testing {

inline void SetSuperblockFormat(const std::string& path, uint64_t slot, uint32_t version, bool reseal) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::string sb(store::kSuperblockSlot, '\0');
  const auto at = static_cast<std::streamoff>(slot * store::kSuperblockSlot);
  f.seekg(at);
  f.read(sb.data(), static_cast<std::streamsize>(sb.size()));
  store::Put32(&sb, 8, version);
  if (reseal) {
    store::Put32(&sb, store::kSuperblockEnvelopeCrc, store::Crc32c(0, sb.data(), store::kSuperblockEnvelopeCrc));
  }
  f.seekp(at);
  f.write(sb.data(), static_cast<std::streamsize>(sb.size()));
  f.flush();
  ASSERT_TRUE(f.good()) << path;
}

}  // namespace cowstore::cowctl::testing
