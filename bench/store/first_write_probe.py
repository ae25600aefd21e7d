#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# What the file system charges for the shapes a durable 4 KiB first write
# can take (docs/design/store-v3.md, step 6, "the first-write floor"),
# without the store: pwrite(s) + one fdatasync on one file laid out like a
# pool (a written data area with a written journal at its start, and a hole
# area), alternating, medians, same run:
#   in-place            4 KiB over written blocks (the baseline)
#   kMapData append     4 KiB + a 64-byte header appended at the journal
#                       tail (the data-in-the-record sketch)
#   one-sync, hole      4 KiB into a hole + a 512-byte record at the tail
#                       (format 3's first write today)
#   one-sync, prewritten  the same over written blocks (zeroing ahead)
#
#   python3 bench/store/first_write_probe.py [DIR] [N]   (default /var/tmp, 400)
import os
import random
import statistics
import sys
import time

MIB = 1 << 20


def main():
    base_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COWSTORE_BENCH_DIR", "/var/tmp")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    path = os.path.join(base_dir, "first-write-probe.%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 512 * MIB)
        zeros = b"\0" * MIB
        for off in range(0, 256 * MIB, MIB):  # [0, 256 MiB) written: the journal is [0, 32 MiB)
            os.pwrite(fd, zeros, off)
        os.fdatasync(fd)
        written = list(range(32 * MIB, 256 * MIB, 4096))
        holes = list(range(256 * MIB, 512 * MIB, 4096))
        random.shuffle(written)
        random.shuffle(holes)
        data, header, record = os.urandom(4096), os.urandom(64), os.urandom(512)
        tail = [0]

        def append(b):
            os.pwrite(fd, b, tail[0])
            tail[0] += len(b)

        cases = [
            ("in-place", lambda i: os.pwrite(fd, data, written[i])),
            ("kMapData append", lambda i: append(header + data)),
            ("one-sync, hole", lambda i: (os.pwrite(fd, data, holes[i]), append(record))),
            ("one-sync, prewritten", lambda i: (os.pwrite(fd, data, written[-1 - i]), append(record))),
        ]
        times = {name: [] for name, _ in cases}
        for i in range(n):
            for name, write in cases[i % 4:] + cases[:i % 4]:  # rotate which goes first
                t0 = time.perf_counter()
                write(i)
                os.fdatasync(fd)
                times[name].append(time.perf_counter() - t0)
        base = statistics.median(times["in-place"])
        for name, _ in cases:
            m = statistics.median(times[name])
            print("%-22s %6.0f us  %.2fx in-place" % (name, m * 1e6, m / base))
    finally:
        os.close(fd)
        os.unlink(path)


if __name__ == "__main__":
    main()
