// SPDX-License-Identifier: Apache-2.0
// Read-around (store-v3.md 3.5): which pieces of one read share a request.
// A clone's 1 MiB region after random divergence maps the source's grains
// in place, with one-grain gaps where it diverged, and its own new grains
// packed in a chunk elsewhere: ~25 pieces, but two places on disk. Reading
// each place with one request and copying the pieces out costs two reads
// instead of 25 (clone_read_probe.py: 32 % of raw one read per piece, 75-80 %
// this way with the grains packed). The gaps read are other grains' bytes,
// dropped unread by anyone.
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

}  // namespace cowstore::store
