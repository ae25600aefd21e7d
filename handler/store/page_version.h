// SPDX-License-Identifier: Apache-2.0
// The version rule of format v3's page codecs (checkpoint leaf and index
// pages, LUN table pages), written once. Every page records the version of
// the page format that wrote it, under the page's CRC, so the value is what
// a writer wrote:
//  * above this build's version: a later cowstore's page, kUnsupported (the
//    pool needs a newer build; it is not damage and must not be repaired);
//  * any other version but this build's, 0 included: no cowstore ever wrote
//    it (versions start at 1 and only grow), so kCorruption (a writer's bug
//    or a misdirected write), like every other field a decoder refuses.
#pragma once

#include <cstdint>
#include <string>

#include "handler/store/status.h"

namespace cowstore::store {

// Ok if `version` is `current`; else the refusal above, its message starting
// with `page` (what the caller calls the page: "checkpoint leaf page").
inline Status PageVersionRule(const std::string& page, uint32_t version, uint32_t current) {
  if (version == current) return Status::Ok();
  const std::string what = page + ": format version " + std::to_string(version);
  if (version > current)
    return Status(Code::kUnsupported, what + " (this build reads up to " + std::to_string(current) + ")");
  return Status(Code::kCorruption, what + ", which no cowstore writes (this build writes " +
                                       std::to_string(current) + ")");
}

}  // namespace cowstore::store
