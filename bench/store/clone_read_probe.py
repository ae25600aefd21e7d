#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# What can bring a 1 MiB sequential read of a clone after 5 % random 4 KiB
# divergence to >= 80 % of raw (issue 10; docs/design/store-v3.md, step 9)?
# divergence_bench measures the store at 12-15 %: one pread per physical
# piece, ~26 per MiB, one after another, each cold. This probe lays out the
# same shape in one file without the store and times, cold (fdatasync +
# POSIX_FADV_DONTNEED before every pass), whole passes of 1 MiB reads over a
# 256 MiB "clone":
#   base        the clone's shared grains: the source's data, at phys = LBA
#   diverged    5 % of the grains at random, rewritten into a separate area,
#               placed in one of three orders:
#                 write order    what a LUN's chunk allocator does today: a
#                                MiB's new grains lie anywhere in that area
#                 region chunks  each 1 MiB region's new grains together (a
#                                chunk per LBA region), the regions' chunks
#                                in write order
#                 windows        each region's new grains at their offset in
#                                a 1 MiB window of their own (the grain
#                                mirrors the LBA, as ext4 aims a block at
#                                its logical neighbour's physical one plus
#                                the distance), windows in write order, the
#                                unused grains of each left as holes
#                 LBA order      as region chunks, the chunks also in LBA
#                                order (the ideal, not an allocator)
# and ways to read each 1 MiB:
#   pieces      one pread per physical piece (the store today)
#   willneed    POSIX_FADV_WILLNEED on every piece first, then the preads
#               (the kernel starts all of them at once)
#   read-around one pread of the whole base MiB (the diverged grains' old
#               data in it is discarded), then one pread per diverged piece
#   around+will read-around with WILLNEED on the diverged pieces first
#   coalesce    read-around, and diverged pieces less than 64 KiB apart read
#               as one span into a scratch buffer (one pread per span)
# beside raw (1 MiB preads of the written base, cold).
#
#   python3 bench/store/clone_read_probe.py [DIR] [PERCENT] [ROUNDS]   (default /var/tmp, 5, 3)
import os
import random
import statistics
import sys
import time

KIB, MIB = 1 << 10, 1 << 20
GRAIN = 4 * KIB
LUN = 256 * MIB
GRAINS = LUN // GRAIN
PER_MIB = MIB // GRAIN


def layout(percent, order):
    """phys byte of every diverged grain, by LBA grain, in the area after the base."""
    chosen = random.sample(range(GRAINS), GRAINS * percent // 100)  # in write order
    if order == "lba":
        chosen.sort()
    elif order in ("region", "window"):  # regions in the order of their first write
        first = {}
        for k, g in enumerate(chosen):
            first.setdefault(g // PER_MIB, len(first))
        if order == "window":  # the area after the packed layouts' (LUN / 2 past the base)
            return {g: LUN + LUN // 2 + first[g // PER_MIB] * MIB + (g % PER_MIB) * GRAIN for g in chosen}
        chosen.sort(key=lambda g: (first[g // PER_MIB], g))
    return {g: LUN + k * GRAIN for k, g in enumerate(chosen)}


GAP = 64 * KIB  # coalesce: diverged pieces nearer than this are read as one span


def spans(far):
    """far pieces (phys, n, at) merged into spans [phys, end) with their pieces."""
    out = []
    for phys, n, at in sorted(far):
        if out and phys - out[-1][1] < GAP:
            out[-1][1] = max(out[-1][1], phys + n)
            out[-1][2].append((phys, n, at))
        else:
            out.append([phys, phys + n, [(phys, n, at)]])
    return out


def pieces(region, diverged):
    """The physical pieces of one MiB of the clone: (phys, length), contiguous merged."""
    out = []
    for g in range(region * PER_MIB, (region + 1) * PER_MIB):
        phys = diverged.get(g, g * GRAIN)
        if out and out[-1][0] + out[-1][1] == phys:
            out[-1][1] += GRAIN
        else:
            out.append([phys, GRAIN])
    return out


def cold(fd):
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def read_pass(fd, diverged, how, buf, scratch):
    view = memoryview(buf)
    sv = memoryview(scratch)
    t0 = time.perf_counter()
    for region in range(LUN // MIB):
        ps = pieces(region, diverged)
        if how == "raw":
            os.preadv(fd, [view], region * MIB)
            continue
        if how in ("pieces", "willneed"):
            if how == "willneed":
                for phys, n in ps:
                    os.posix_fadvise(fd, phys, n, os.POSIX_FADV_WILLNEED)
            at = 0
            for phys, n in ps:
                os.preadv(fd, [view[at:at + n]], phys)
                at += n
            continue
        # read-around: the base MiB whole, then the diverged pieces over it
        far = [(phys, n) for phys, n in ps if phys >= LUN]
        if how == "coalesce":
            os.preadv(fd, [view], region * MIB)
            at, placed = 0, []
            for phys, n in ps:
                if phys >= LUN:
                    placed.append((phys, n, at))
                at += n
            for start, end, parts in spans(placed):
                os.preadv(fd, [sv[:end - start]], start)
                for phys, n, at in parts:
                    view[at:at + n] = sv[phys - start:phys - start + n]
            continue
        if how == "around+will":
            for phys, n in far:
                os.posix_fadvise(fd, phys, n, os.POSIX_FADV_WILLNEED)
        os.preadv(fd, [view], region * MIB)
        at = 0
        for phys, n in ps:
            if phys >= LUN:
                os.preadv(fd, [view[at:at + n]], phys)
            at += n
    return time.perf_counter() - t0


def main():
    base_dir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COWSTORE_BENCH_DIR", "/var/tmp")
    percent = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    path = os.path.join(base_dir, "clone-read-probe.%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    block = os.urandom(MIB)
    for off in range(0, LUN + LUN * percent // 100 + MIB, MIB):
        os.pwrite(fd, block, off)
    os.ftruncate(fd, 3 * LUN)
    buf, scratch = bytearray(MIB), bytearray(2 * MIB)
    layouts = {"write order": layout(percent, "write"), "region chunks": layout(percent, "region"),
               "windows": layout(percent, "window"), "LBA order": layout(percent, "lba")}
    for phys in layouts["windows"].values():  # the windows' grains written, the rest holes
        os.pwrite(fd, block[:GRAIN], phys)
    os.fdatasync(fd)
    for name, d in layouts.items():
        n = sum(len(pieces(r, d)) for r in range(LUN // MIB))
        print("%-13s %.1f physical pieces per MiB" % (name, n / (LUN // MIB)))
    hows = ["pieces", "willneed", "read-around", "around+will", "coalesce"]
    runs = [("raw", "raw", {})] + [(o, h, d) for o, d in layouts.items() for h in hows]
    times = {(o, h): [] for o, h, _ in runs}
    for r in range(rounds):
        for o, h, d in runs[r % len(runs):] + runs[:r % len(runs)]:
            cold(fd)
            times[(o, h)].append(read_pass(fd, d, h, buf, scratch))
    raw = statistics.median(times[("raw", "raw")])
    print("%d rounds, cold, 256 MiB in 1 MiB reads, %d %% diverged; medians" % (rounds, percent))
    print("%-26s %7.3f s  100%% of raw" % ("raw", raw))
    for o, h, _ in runs[1:]:
        m = statistics.median(times[(o, h)])
        print("%-26s %7.3f s  %3.0f%% of raw" % (o + ", " + h, m, 100 * raw / m))
    os.close(fd)


if __name__ == "__main__":
    main()
