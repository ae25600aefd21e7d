#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Acknowledged-write log for crash tests.

  ackwriter.py write DEV START_LBA SLOTS LOG [--gen G] [--seconds S]
      Writes 4 KiB records (8 blocks of 512) with O_DIRECT, one after another,
      to slots START_LBA + 8*i, i = 0..SLOTS-1. After each write returns
      success it appends "i" to LOG (a file on the guest's tmpfs, which
      survives the daemon being killed) and flushes it. Stops after SLOTS
      records, S seconds, or the first error (printed).
  ackwriter.py verify DEV START_LBA SLOTS LOG [--gen G]
      Every acknowledged slot must hold exactly its record. Slots never
      acknowledged must hold either their record (written, not yet
      acknowledged when the daemon died) or zeros (never written): anything
      else is damage. Prints a one-line verdict; exit 1 on any violation.

Records are self-describing: b"ACKW gen=G slot=I\\n" followed by bytes that
depend only on (G, I), so a record in the wrong slot is caught too.
"""
import argparse
import mmap
import os
import random
import sys
import time

REC = 4096


def record(gen, i):
    head = b"ACKW gen=%d slot=%d\n" % (gen, i)
    body = random.Random(gen * 1000003 + i).randbytes(REC - len(head))
    return head + body


def write(a):
    fd = os.open(a.dev, os.O_RDWR | os.O_DIRECT)
    buf = mmap.mmap(-1, REC)                # page-aligned, as O_DIRECT needs
    t_end = time.monotonic() + a.seconds if a.seconds else None
    n = 0
    with open(a.log, "a", buffering=1) as log:
        for i in range(a.slots):
            if t_end and time.monotonic() > t_end:
                break
            buf[:] = record(a.gen, i)
            try:
                w = os.pwrite(fd, buf, (a.start + 8 * i) * 512)
            except OSError as e:
                print("ackwriter: slot %d: %s (after %d acknowledged)" % (i, e, n))
                return 1
            if w != REC:
                print("ackwriter: slot %d: short write %d" % (i, w))
                return 1
            log.write("%d\n" % i)
            n += 1
    print("ackwriter: %d records acknowledged" % n)
    return 0


def verify(a):
    acked = set()
    if os.path.exists(a.log):
        with open(a.log) as f:
            acked = {int(x) for x in f.read().split()}
    fd = os.open(a.dev, os.O_RDONLY | os.O_DIRECT)
    chunk = 256                             # slots per read: 1 MiB, not one command per slot
    buf = mmap.mmap(-1, REC * chunk)
    zero = bytes(REC)
    lost, damaged, unacked_new = [], [], 0
    for first in range(0, a.slots, chunk):
        n = min(chunk, a.slots - first)
        view = memoryview(buf)[:REC * n]
        got_n = os.preadv(fd, [view], (a.start + 8 * first) * 512)
        if got_n != REC * n:
            print("ackwriter verify: short read at slot %d" % first)
            return 1
        for k in range(n):
            i = first + k
            got = bytes(buf[REC * k:REC * (k + 1)])
            want = record(a.gen, i)
            if i in acked:
                if got != want:
                    lost.append(i)
            elif got == want:
                unacked_new += 1
            elif got != zero:
                damaged.append(i)
    ok = not lost and not damaged
    print("ackwriter verify: %d acknowledged, %d lost, %d damaged, %d written-but-unacknowledged: %s"
          % (len(acked), len(lost), len(damaged), unacked_new, "OK" if ok else "FAILED"))
    if lost:
        print("  lost acknowledged slots: %s" % lost[:20])
    if damaged:
        print("  damaged slots (neither record nor zeros): %s" % damaged[:20])
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("write", "verify"))
    p.add_argument("dev")
    p.add_argument("start", type=int)
    p.add_argument("slots", type=int)
    p.add_argument("log")
    p.add_argument("--gen", type=int, default=1)
    p.add_argument("--seconds", type=float, default=0)
    a = p.parse_args()
    return write(a) if a.mode == "write" else verify(a)


if __name__ == "__main__":
    sys.exit(main())
