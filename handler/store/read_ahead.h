// SPDX-License-Identifier: Apache-2.0
// Read-ahead by LBA (store-v3.md 3.5, "Reads"): which bytes of a LUN a
// sequential reader will want next.
//
// Why: a clone after random divergence maps each 1 MiB region to the
// source's data in place plus a short stretch of its own grains elsewhere
// (one chunk per region). The OS reads ahead along the file, so it
// follows the source's data, but it cannot foresee where the next region's
// own grains lie: every region then waits for one cold small read of its
// own. ZFS's prefetcher (zfetch) solves the same problem for copy-on-write
// data by detecting streams in the logical block numbers and fetching the
// blocks those map to. Here: a stream is detected per LUN, and the pool
// asks the OS (File::Prefetch) for the small requests of the next few MiB
// of the LUN before it reads the current ones, so they arrive meanwhile.
// Measured by replaying a 5 %-diverged clone's reads (256 MiB, cold):
// 58 % of raw read as they come, 69-86 % with the small requests of the next
// 4 MiB prefetched; prefetching the large requests too made it slower
// (the OS's own readahead already has them).
//
// This class only tracks streams; what a range maps to is the pool's
// (Core::ReadAheadOf). A few streams per LUN, so several sequential
// readers (a backup and a guest, two initiators) do not undo each other,
// and a random reader, which matches no stream, never prefetches.
//
// Thread safety: Next may be called concurrently (it takes its own lock).
#pragma once

#include <array>
#include <cstdint>

#include "handler/store/thread_annotations.h"

namespace cowstore::store {

// How far ahead of a stream's position its bytes are asked for.
constexpr uint64_t kReadAheadBytes = 4 << 20;
// A stream's window is asked for in steps of at least this much (a reader
// of 4 KiB blocks does not look up the map and call the OS per block).
constexpr uint64_t kReadAheadStepBytes = 1 << 20;
// Streams kept per LUN; a read matching none replaces the least recent.
constexpr size_t kReadAheadStreams = 8;
// A read continues a stream when it starts within this of where the
// stream's last read ended (reads issued in order at a queue depth above
// one may arrive a little out of order).
constexpr uint64_t kReadAheadSlackBytes = 256 << 10;
// Reads that must continue a stream before it reads ahead (its third
// read): a random reader that happens to land next to an earlier read
// once is not a stream.
constexpr uint32_t kReadAheadHits = 2;
// Only requests shorter than this are prefetched: longer ones are the
// source's data in place, which the OS's readahead follows by itself.
constexpr uint64_t kReadAheadSpanMax = 512 << 10;

class ReadAhead {
 public:
  struct Range {
    uint64_t off = 0, len = 0;  // bytes of the LUN; len 0: nothing to fetch
  };
  // Called with each read of [off, off + len) (bytes of the LUN). Returns
  // the bytes to fetch ahead now, each byte at most once per stream.
  Range Next(uint64_t off, uint64_t len) EXCLUDES(mu_);

 private:
  struct Stream {
    uint64_t next = 0;     // where the stream's last read ended
    uint64_t fetched = 0;  // bytes below this were asked for already
    uint64_t used = 0;     // clock_ at its last read; 0: never used
    uint32_t hits = 0;     // reads that continued it
  };
  Mutex mu_;
  std::array<Stream, kReadAheadStreams> streams_ GUARDED_BY(mu_);
  uint64_t clock_ GUARDED_BY(mu_) = 0;
};

}  // namespace cowstore::store
