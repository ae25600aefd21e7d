#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Would zeroing ahead of the allocator, done while the writes run, give a
# format 3 first write the cost of an in-place write? (docs/design/store-v3.md,
# step 6, "the first-write floor"; divergence_bench measured only zeros
# written long before.) Without the store: one file laid out like a pool (a
# written journal at its start, a written data area, a hole area), and a
# writer doing what the store's first write does at queue depth 1: 4 KiB
# into the next grain of its chunk (consecutive grains, as FreeSpace hands
# them out), a 61-byte record appended at the journal tail, one fdatasync.
# Phases of N writes each, rotated, medians:
#   in-place        4 KiB over written blocks at random, + record (the baseline)
#   holes           the next grains are holes (what format 3 does today)
#   zero-ahead B    a second thread keeps the next AHEAD bytes written with
#                   zeros, in batches of B bytes, each batch one pwrite and
#                   one fdatasync; the writer never waits for it (a grain it
#                   reaches before the zeros is counted as a miss)
#   prewritten      the grains were written with zeros before the phase
#
#   python3 bench/store/zero_ahead_probe.py [DIR] [N] [ROUNDS]   (default /var/tmp, 400, 3)
import os
import random
import statistics
import sys
import threading
import time

KIB, MIB = 1 << 10, 1 << 20
GRAIN = 4 * KIB
RECORD = 61  # a one-run kMapChecked record (strace of divergence_bench)


class Pool:
    """The probe's file: journal [0, 32 MiB), written data [32, 256 MiB), then
    free space handed out in order from `free_at` (holes unless prewritten)."""

    def __init__(self, path, size):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.unlink(path)  # gone when the probe ends, however it ends
        os.ftruncate(self.fd, size)
        zeros = b"\0" * MIB
        for off in range(0, 256 * MIB, MIB):
            os.pwrite(self.fd, zeros, off)
        os.fdatasync(self.fd)
        self.written = list(range(32 * MIB, 256 * MIB, GRAIN))
        random.shuffle(self.written)
        self.free_at = 256 * MIB
        self.size = size
        self.tail = 0

    def take(self, n):
        """The next n bytes of free space (a LUN's chunks, one after another)."""
        at = self.free_at
        self.free_at += n
        if self.free_at > self.size:
            raise SystemExit("probe file too small: raise its size")
        return at

    def first_write(self, data, record, at):
        os.pwrite(self.fd, data, at)
        os.pwrite(self.fd, record, self.tail)
        self.tail = (self.tail + len(record)) % (32 * MIB)
        os.fdatasync(self.fd)


class ZeroAhead(threading.Thread):
    """Keeps [writer's position, + ahead) written with zeros, `batch` bytes a
    pwrite + fdatasync; `done` is how far the zeros are durable."""

    def __init__(self, fd, start, ahead, batch):
        super().__init__(daemon=True)
        self.fd, self.ahead, self.batch = fd, ahead, batch
        self.done = start
        self.writer_at = start
        self.stop = False
        self.batches = 0
        self.wake = threading.Condition()
        self.zeros = b"\0" * batch

    def run(self):
        while True:
            with self.wake:
                while not self.stop and self.done >= self.writer_at + self.ahead:
                    self.wake.wait()
                if self.stop:
                    return
            os.pwrite(self.fd, self.zeros, self.done)
            os.fdatasync(self.fd)
            self.done += self.batch
            self.batches += 1

    def advance(self, writer_at):
        with self.wake:
            self.writer_at = writer_at
            self.wake.notify()

    def finish(self):
        with self.wake:
            self.stop = True
            self.wake.notify()
        self.join()


def phase(pool, name, n, data, record, ahead=0, batch=0):
    times, misses, batches = [], 0, 0
    if name == "in-place":
        for i in range(n):
            t0 = time.perf_counter()
            pool.first_write(data, record, pool.written.pop())
            times.append(time.perf_counter() - t0)
        return times, misses, batches
    start = pool.take(n * GRAIN + ahead + batch)
    if name == "prewritten":
        os.pwrite(pool.fd, b"\0" * (n * GRAIN), start)
        os.fdatasync(pool.fd)
    z = None
    if ahead:
        z = ZeroAhead(pool.fd, start, ahead, batch)
        z.start()
        while z.done < start + ahead:  # the steady state: the zeros ahead already
            time.sleep(0.001)
    for i in range(n):
        at = start + i * GRAIN
        if z:
            z.advance(at)
            misses += z.done < at + GRAIN
        t0 = time.perf_counter()
        pool.first_write(data, record, at)
        times.append(time.perf_counter() - t0)
    if z:
        z.finish()
        batches = z.batches
    return times, misses, batches


def main():
    base_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COWSTORE_BENCH_DIR", "/var/tmp")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cases = [("in-place", 0, 0), ("holes", 0, 0), ("zero-ahead 256K", MIB, 256 * KIB),
             ("zero-ahead 1M", 4 * MIB, MIB), ("prewritten", 0, 0)]
    per_round = sum(n * GRAIN + a + b for _, a, b in cases)
    pool = Pool(os.path.join(base_dir, "zero-ahead-probe.%d" % os.getpid()),
                256 * MIB + rounds * per_round + MIB)
    data, record = os.urandom(GRAIN), os.urandom(RECORD)
    times = {c[0]: [] for c in cases}
    misses = {c[0]: 0 for c in cases}
    batches = {c[0]: 0 for c in cases}
    for r in range(rounds):
        for name, ahead, batch in cases[r % len(cases):] + cases[:r % len(cases)]:
            t, m, b = phase(pool, name, n, data, record, ahead, batch)
            times[name] += t
            misses[name] += m
            batches[name] += b
    base = statistics.median(times["in-place"])
    print("%d rounds of %d durable 4 KiB first writes per case, medians" % (rounds, n))
    for name, ahead, batch in cases:
        m = statistics.median(times[name])
        extra = ""
        if ahead:
            extra = "  (%d zero batches of %d KiB, %d KiB ahead; %d writes reached a grain before its zeros)" % (
                batches[name], batch // KIB, ahead // KIB, misses[name])
        print("%-16s %6.0f us  %.2fx in-place%s" % (name, m * 1e6, m / base, extra))
    os.close(pool.fd)


if __name__ == "__main__":
    main()
