// SPDX-License-Identifier: Apache-2.0
// Read-around (store-v3.md 3.5): which pieces of one read share a request.
// A clone's 1 MiB region after random divergence maps the source's grains
// in place, with one-grain gaps where it diverged, and its own new grains
// packed in a chunk elsewhere: ~25 pieces, but two places on disk. Reading
// each place with one request and copying the pieces out costs two reads
// instead of 25 (clone_read_probe.py: 32 % of raw one read per piece, 75-80 %
// this way with the grains packed). The gaps read are other grains' bytes,
// dropped unread by anyone.
//
// One request of several pieces may go straight to its destination rather
// than through a scratch buffer (InPlaceSpan): the source's data in place,
// whose pieces lie in the file as they lie in the read. Its gaps then land
// on bytes that belong to other pieces or to holes, which are filled after
// it. That saves the copy out of scratch (perf: 11 % of a hot clone read's
// time; 1 MiB reads of a 5 %-diverged clone took 0.037 s per 256 MiB
// before, 0.029-0.035 s after, raw 0.016 s).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace cowstore::store {

// `n` bytes of the file at `file_off`, for bytes [at, at + n) of the request.
struct ReadPiece {
  uint64_t file_off = 0, at = 0, n = 0;
};

// Bytes [at, at + n) of the request that nothing maps: they read as zeros.
struct ReadHole {
  uint64_t at = 0, n = 0;
};

// One request: [file_off, file_off + len) of the file, holding the pieces
// [first, last) of the sorted list.
struct ReadSpan {
  uint64_t file_off = 0, len = 0;
  size_t first = 0, last = 0;
};

// Gaps on disk up to this are read and dropped rather than split into two
// requests (a 64 KiB read costs about what a 4 KiB one does, cold).
constexpr uint64_t kReadAroundGapBytes = 64 << 10;
// No request grows past this by read-around (a scratch buffer holds it).
constexpr uint64_t kReadAroundMaxBytes = 4 << 20;

// Sorts *pieces by file offset and groups them into requests: a piece joins
// the previous request when it starts no more than kReadAroundGapBytes past
// that request's end (or inside it: two LBAs may share a grain) and the
// request stays within kReadAroundMaxBytes.
inline std::vector<ReadSpan> PlanReadSpans(std::vector<ReadPiece>* pieces) {
  std::sort(pieces->begin(), pieces->end(),
            [](const ReadPiece& a, const ReadPiece& b) { return a.file_off < b.file_off; });
  std::vector<ReadSpan> spans;
  for (size_t i = 0; i < pieces->size(); i++) {
    const ReadPiece& p = (*pieces)[i];
    if (!spans.empty()) {
      ReadSpan& s = spans.back();
      const uint64_t end = s.file_off + s.len;
      const uint64_t new_end = std::max(end, p.file_off + p.n);
      if (p.file_off <= end + kReadAroundGapBytes && new_end - s.file_off <= kReadAroundMaxBytes) {
        s.len = new_end - s.file_off;
        s.last = i + 1;
        continue;
      }
    }
    spans.push_back({p.file_off, p.n, i, i + 1});
  }
  return spans;
}

// The request to read first and straight into the destination: the
// longest of several pieces whose every piece lies at the same distance
// from its place in the read as the request's first piece does (so the
// request's bytes are the destination's bytes [pieces[first].at,
// pieces[first].at + len)). spans.size() when there is none. One at most:
// two such requests could each cover the other's pieces with their gaps.
inline size_t InPlaceSpan(const std::vector<ReadSpan>& spans, const std::vector<ReadPiece>& pieces) {
  size_t best = spans.size();
  for (size_t k = 0; k < spans.size(); k++) {
    const ReadSpan& sp = spans[k];
    if (sp.last - sp.first < 2 || (best < spans.size() && spans[best].len >= sp.len)) continue;
    const ReadPiece& head = pieces[sp.first];  // sorted: head.file_off == sp.file_off
    bool in_place = true;
    for (size_t i = sp.first + 1; i < sp.last && in_place; i++)
      in_place = pieces[i].file_off - head.file_off == pieces[i].at - head.at;
    if (in_place) best = k;
  }
  return best;
}

}  // namespace cowstore::store
