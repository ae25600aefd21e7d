// SPDX-License-Identifier: Apache-2.0
// The fields of every control reply, written once: the server builds its
// replies with the Encode functions and cowctl reads them with the Decode
// ones, so a field's name and format live in one place (protocol.h has the
// line format, docs/design/cowctl.md the table of requests).
//
// A reply is a head record ("ok" or "error") and records; the functions here
// fill or read those of one kind of answer. Decoding is lenient as the
// protocol is: a missing or malformed number reads as 0, unknown fields and
// records are skipped (a newer server may send more).
#pragma once

#include <string>
#include <vector>

#include "handler/control/image.h"
#include "handler/control/protocol.h"
#include "handler/control/scrub.h"
#include "handler/control/server.h"
#include "handler/store/pool.h"

namespace cowstore::control {

// A `lun` record: name, id (32 hex digits), size, block_size, mapped,
// exclusive, shared; for a snapshot also read_only=1, origin (32 hex
// digits) and created (seconds since the epoch).
Record EncodeLun(const store::LunInfo& l);
store::LunInfo DecodeLun(const Record& r);
// The first `lun` record of a reply (a default LunInfo if none).
store::LunInfo DecodeFirstLun(const std::vector<Record>& records);

// `space`: a `pool` record (the SpaceInfo figures; thinning_units reads as 0
// from a handler that predates it), then a `lun` record per LUN.
std::vector<Record> EncodeSpace(const std::string& pool, const store::SpaceInfo& s);
store::SpaceInfo DecodeSpace(const std::vector<Record>& records);

// `check`: fields of the head, a `problem` record per problem.
void EncodeCheck(const store::CheckReport& c, Record* head, std::vector<Record>* records);
store::CheckReport DecodeCheck(const Record& head, const std::vector<Record>& records);

// `scrub`: fields of the head, an `unreadable` record per range.
void EncodeScrub(const ScrubReport& s, Record* head, std::vector<Record>* records);
ScrubReport DecodeScrub(const Record& head, const std::vector<Record>& records);

// `lun-import` / `lun-export`: written= skipped= in the head.
void EncodeCopyStats(const CopyStats& st, Record* head);
CopyStats DecodeCopyStats(const Record& head);

// `counters`: a `counters` record per LUN (lun=, then counter=value).
std::vector<Record> EncodeCounters(const std::vector<LunCounters>& c);
std::vector<LunCounters> DecodeCounters(const std::vector<Record>& records);

}  // namespace cowstore::control
