#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""SG_IO from one process: exact sense checks and per-command timing loops.

Starting one process per SCSI command costs ~56 ms under TCG, which swamps
per-command figures; this tool sends many commands from one process.

  sgio.py cmd DEV CDB_HEX [--out FILE] [--in LEN] [--expect GOOD|KEY/ASC/ASCQ] [--info N]
      Send one command. Prints "status=.. sense_key=.. asc=.. ascq=.. info=..".
      --expect: exit 0 iff the result matches (GOOD, or sense "0e/1d/00");
      --info:   additionally require the sense INFORMATION field to equal N.
      --in LEN: data-in length; the data is written to stdout as hex (first 64 bytes).
  sgio.py loop DEV OP N [LBA BLOCKS] [--unmap] [--qd Q]
      OP: tur | ws16 | write16 | read16 | caw | xcopy. Sends N commands, each
      BLOCKS blocks starting at LBA + i*BLOCKS (caw: always at LBA, 1 block,
      comparing with what it wrote last; xcopy: LID1, one 0x02 segment from
      DEV to --dst DEV2 (default DEV) at --dst-lba + i*BLOCKS; with --src SRC
      the segment copies from SRC to DEV and the command goes to DEV, the
      destination LU, as ESXi sends it). Prints one line
      with the loop's elapsed time and milliseconds per command; exit 1 if any
      command failed. --qd Q keeps Q commands in flight (Q threads, one file
      descriptor each), as an initiator with a queue does.
  sgio.py fill BLOCKDEV LBA BLOCKS
      Write a repeating 64 MiB random pattern with 4 MiB O_DIRECT writes.
  sgio.py same BLOCKDEV LBA_A LBA_B BLOCKS [--dev2 BLOCKDEV2] [--sample N]
  sgio.py zero BLOCKDEV LBA BLOCKS [--sample N]
      Compare two ranges (or a range with zeros) with 4 MiB O_DIRECT reads;
      --sample N checks N evenly spaced 1 MiB chunks only (fast on big ranges).
  sgio.py pattern DEV LBA CHUNKS [--chunk BLOCKS] [--seed S] [--until-fail KEY/ASC/ASCQ]
                  [--state FILE] [--verify-only] [--block-size N]
      WRITE(16) CHUNKS chunks of BLOCKS blocks (distinct pseudo-random data per
      seed and chunk) from LBA, then READ(16) every acknowledged chunk back and
      compare. A UNIT ATTENTION is printed and the command repeated.
      --until-fail: write until a WRITE fails; it must fail with exactly that
      sense; the number of acknowledged chunks goes to --state.
      --verify-only: write nothing, read back the chunks --state lists
      (from chunk --first on).
  sgio.py softua DEV LBA CHUNKS [--chunk BLOCKS] [--expect KEY/ASC/ASCQ]
      After every 1-chunk WRITE(16), TEST UNIT READY; exactly one TUR must get
      the sense (default 06/38/07), the TUR right after it must be GOOD, and no
      WRITE may get a UNIT ATTENTION.
  sgio.py vaai DEV [--require]
      What an ESXi host would conclude (ATS, Clone, Zero, Delete) and every
      VAAI-relevant field (INQUIRY 3PC, VPD B0/B2/83/8F, READ CAPACITY 16).
      --require: exit 1 unless every field meets what initiators need.
"""
import argparse
import ctypes
import fcntl
import mmap
import os
import random
import sys
import threading
import time

SG_IO = 0x2285
DXFER_NONE, DXFER_TO_DEV, DXFER_FROM_DEV = -1, -2, -3


class SgIoHdr(ctypes.Structure):
    # struct sg_io_hdr from <scsi/sg.h> (x86_64 layout)
    _fields_ = [("interface_id", ctypes.c_int), ("dxfer_direction", ctypes.c_int),
                ("cmd_len", ctypes.c_ubyte), ("mx_sb_len", ctypes.c_ubyte),
                ("iovec_count", ctypes.c_ushort), ("dxfer_len", ctypes.c_uint),
                ("dxferp", ctypes.c_void_p), ("cmdp", ctypes.c_void_p),
                ("sbp", ctypes.c_void_p), ("timeout", ctypes.c_uint),
                ("flags", ctypes.c_uint), ("pack_id", ctypes.c_int),
                ("usr_ptr", ctypes.c_void_p), ("status", ctypes.c_ubyte),
                ("masked_status", ctypes.c_ubyte), ("msg_status", ctypes.c_ubyte),
                ("sb_len_wr", ctypes.c_ubyte), ("host_status", ctypes.c_ushort),
                ("driver_status", ctypes.c_ushort), ("resid", ctypes.c_int),
                ("duration", ctypes.c_uint), ("info", ctypes.c_uint)]


class Result:
    def __init__(self, hdr, sense, data):
        self.status, self.host, self.driver = hdr.status, hdr.host_status, hdr.driver_status
        self.sense = bytes(sense[:hdr.sb_len_wr])
        self.data = data
        self.key = self.asc = self.ascq = None
        self.info = None
        s = self.sense
        if len(s) >= 8 and (s[0] & 0x7f) in (0x72, 0x73):        # descriptor format
            self.key, self.asc, self.ascq = s[1] & 0xf, s[2], s[3]
            i = 8
            while i + 1 < len(s):
                dlen = s[i + 1]
                if s[i] == 0x00 and dlen >= 0x0a and s[i + 2] & 0x80:   # information, VALID
                    self.info = int.from_bytes(s[i + 4:i + 12], "big")
                i += 2 + dlen
        elif len(s) >= 14 and (s[0] & 0x7f) in (0x70, 0x71):     # fixed format
            self.key, self.asc, self.ascq = s[2] & 0xf, s[12], s[13]
            if s[0] & 0x80:                                       # VALID
                self.info = int.from_bytes(s[3:7], "big")

    @property
    def good(self):
        return self.status == 0 and self.host == 0 and (self.driver & 0xf) == 0

    def describe(self):
        txt = "status=0x%02x host=0x%x driver=0x%x" % (self.status, self.host, self.driver)
        if self.key is not None:
            txt += " sense_key=0x%x asc=0x%02x ascq=0x%02x info=%s sense=%s" % (
                self.key, self.asc, self.ascq,
                "-" if self.info is None else str(self.info), self.sense.hex())
        return txt


class Device:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.sense = ctypes.create_string_buffer(96)
        self.cdb = ctypes.create_string_buffer(32)

    def send(self, cdb, out=None, in_len=0, timeout_ms=600000):
        h = SgIoHdr()
        h.interface_id = ord("S")
        h.mx_sb_len = len(self.sense)
        h.sbp = ctypes.addressof(self.sense)
        h.timeout = timeout_ms
        self.cdb.raw = bytes(cdb) + bytes(32 - len(cdb))
        h.cmdp = ctypes.addressof(self.cdb)
        h.cmd_len = len(cdb)
        buf = None
        if out is not None:
            buf = ctypes.create_string_buffer(bytes(out), len(out))
            h.dxfer_direction, h.dxfer_len = DXFER_TO_DEV, len(out)
            h.dxferp = ctypes.addressof(buf)
        elif in_len:
            buf = ctypes.create_string_buffer(in_len)
            h.dxfer_direction, h.dxfer_len = DXFER_FROM_DEV, in_len
            h.dxferp = ctypes.addressof(buf)
        else:
            h.dxfer_direction = DXFER_NONE
        fcntl.ioctl(self.fd, SG_IO, h)
        data = buf.raw[:in_len - h.resid] if (buf is not None and in_len) else b""
        return Result(h, self.sense.raw, data)

    def send_retry_ua(self, cdb, out=None, in_len=0, tries=4):
        """As initiators do: repeat a command that got UNIT ATTENTION."""
        for _ in range(tries):
            r = self.send(cdb, out=out, in_len=in_len)
            if r.key != 6:
                return r
            print("(unit attention %02x/%02x on opcode %02x, retrying)" % (r.asc, r.ascq, cdb[0]))
        return r


def cdb16(op, lba, nblk, byte1=0):
    c = bytearray(16)
    c[0], c[1] = op, byte1
    c[2:10] = lba.to_bytes(8, "big")
    c[10:14] = nblk.to_bytes(4, "big")
    return c


def cmd_one(a):
    dev = Device(a.dev)
    cdb = bytes.fromhex(a.cdb)
    out = open(a.out, "rb").read() if a.out else None
    r = dev.send_retry_ua(cdb, out=out, in_len=a.in_len)
    print(r.describe())
    if a.in_len:
        print("data=" + r.data[:64].hex())
    ok = True
    if a.expect:
        if a.expect.upper() == "GOOD":
            ok = r.good
        else:
            k, asc, ascq = (int(x, 16) for x in a.expect.split("/"))
            ok = (r.key, r.asc, r.ascq) == (k, asc, ascq)
    if a.info is not None:
        ok = ok and r.info == a.info
    if not ok:
        print("UNEXPECTED: wanted %s%s" % (a.expect or "", "" if a.info is None else " info=%d" % a.info))
    return 0 if ok else 1


def naa_designator(dev):
    """The 16-byte NAA (type 6) LU designator from VPD 0x83, or None."""
    r = dev.send_retry_ua(bytes([0x12, 1, 0x83, 0x10, 0x00, 0]), in_len=4096)
    if not r.good:
        return None
    d = r.data
    i = 4
    while i + 4 <= len(d):
        code_set, assoc_type, ln = d[i] & 0xf, d[i + 1], d[i + 3]
        if code_set == 1 and (assoc_type & 0x30) == 0 and (assoc_type & 0xf) == 3 and ln == 16:
            return bytes(d[i + 4:i + 20])
        i += 4 + ln
    return None


def xcopy_params(src_naa, dst_naa, src_lba, dst_lba, nblk, bs, list_id=0, id_usage=3):
    """LID1 EXTENDED COPY parameter list: 0xE4 CSCDs naming LUs by NAA, one
    block-to-block (0x02) segment."""
    def cscd(naa):
        c = bytearray(32)
        c[0] = 0xe4
        c[4], c[5], c[7] = 0x01, 0x03, 16          # binary, LU assoc, NAA, length 16
        c[8:24] = naa
        c[29:32] = bs.to_bytes(3, "big")           # disk block length
        return c
    cscds = cscd(src_naa) + (cscd(dst_naa) if dst_naa != src_naa else b"")
    dst_idx = 1 if dst_naa != src_naa else 0
    seg = bytearray(28)
    seg[0] = 0x02
    seg[2:4] = (24).to_bytes(2, "big")
    seg[4:6] = (0).to_bytes(2, "big")
    seg[6:8] = dst_idx.to_bytes(2, "big")
    seg[10:12] = nblk.to_bytes(2, "big")
    seg[12:20] = src_lba.to_bytes(8, "big")
    seg[20:28] = dst_lba.to_bytes(8, "big")
    hdr = bytearray(16)
    hdr[0] = list_id & 0xff
    hdr[1] = (id_usage & 3) << 3
    hdr[2:4] = len(cscds).to_bytes(2, "big")
    hdr[8:12] = len(seg).to_bytes(4, "big")
    return bytes(hdr + cscds + seg)


def xcopy_cdb(plen):
    c = bytearray(16)
    c[0] = 0x83
    c[10:14] = plen.to_bytes(4, "big")
    return c


def cmd_loop(a):
    dev = Device(a.dev)
    if a.op == "xcopy":
        if a.src and a.dst:
            raise SystemExit("sgio: --src and --dst: the command goes to DEV, which is one of them")
        dst = Device(a.dst) if a.dst else dev
        src = Device(a.src) if a.src else dev
        src_naa, dst_naa = naa_designator(src), naa_designator(dst)
        if src_naa is None or dst_naa is None:
            print("sgio: no NAA designator in VPD 0x83")
            return 1
    if a.op == "caw" and a.qd > 1:
        raise SystemExit("sgio: caw compares with its own previous write: --qd 1 only")
    bs = a.block_size
    dev.send_retry_ua(bytes(6))            # consume pending unit attentions first
    data = bytes(bs * a.blocks) if a.op in ("write16",) else None
    prev = [bytes(bs)]                     # caw: what the block holds (zeros at first)

    def one(d, i):
        lba = a.lba + i * a.blocks
        if a.op == "tur":
            return d.send(bytes(6))
        if a.op == "ws16":
            return d.send(cdb16(0x93, lba, a.blocks, 0x08 if a.unmap else 0), out=bytes(bs))
        if a.op == "write16":
            return d.send(cdb16(0x8a, lba, a.blocks), out=data)
        if a.op == "read16":
            return d.send(cdb16(0x88, lba, a.blocks), in_len=bs * a.blocks)
        if a.op == "caw":
            new = (i + 1).to_bytes(8, "big") * (bs // 8)
            c = bytearray(16)
            c[0] = 0x89
            c[2:10] = a.lba.to_bytes(8, "big")
            c[13] = 1
            r = d.send(c, out=prev[0] + new)
            prev[0] = new
            return r
        if a.op == "xcopy":
            p = xcopy_params(src_naa, dst_naa, lba, a.dst_lba + i * a.blocks, a.blocks, bs)
            return d.send(xcopy_cdb(len(p)), out=p)
        raise SystemExit("unknown op " + a.op)

    # --qd N: N threads with a file descriptor each keep up to N commands in
    # flight (as ESXi's data mover does); SG_IO releases the GIL while it waits.
    lock = threading.Lock()
    state = {"next": 0, "fails": 0, "first": ""}

    def worker(d):
        while True:
            with lock:
                i = state["next"]
                if i >= a.n:
                    return
                state["next"] = i + 1
            r = one(d, i)
            if not r.good:
                with lock:
                    state["fails"] += 1
                    if not state["first"]:
                        state["first"] = "first failure at i=%d: %s" % (i, r.describe())

    devs = [dev] + [Device(a.dev) for _ in range(a.qd - 1)]
    t0 = time.monotonic()
    if a.qd == 1:
        worker(dev)
    else:
        ts = [threading.Thread(target=worker, args=(d,)) for d in devs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    el = time.monotonic() - t0
    fails, first = state["fails"], state["first"]
    print("sgio op=%s n=%d blocks_per_cmd=%d qd=%d loop_secs=%.3f per_cmd_ms=%.3f fails=%d %s"
          % (a.op, a.n, a.blocks, a.qd, el, 1000 * el / max(a.n, 1), fails, first))
    return 1 if fails else 0


CHUNK = 4 << 20


def _ranges(blocks, sample, bs=512):
    """(offset_blocks, nblocks) pieces covering BLOCKS, or N sampled 1 MiB pieces."""
    if sample:
        step = max(blocks // sample, 2048)
        return [(o, min(2048, blocks - o)) for o in range(0, blocks, step)][:sample]
    per = CHUNK // bs
    return [(o, min(per, blocks - o)) for o in range(0, blocks, per)]


def _pread(fd, buf, nbytes, off):
    view = memoryview(buf)[:nbytes]
    got = os.preadv(fd, [view], off)
    if got != nbytes:
        raise SystemExit("sgio: short read at byte %d" % off)
    return view


def cmd_fill(a):
    fd = os.open(a.dev, os.O_WRONLY | os.O_DIRECT)
    pat = os.urandom(64 << 20)
    buf = mmap.mmap(-1, CHUNK)
    done, total = 0, a.blocks * 512
    t0 = time.monotonic()
    while done < total:
        n = min(CHUNK, total - done)
        o = done % len(pat)
        buf[:n] = pat[o:o + n]
        os.pwritev(fd, [memoryview(buf)[:n]], a.lba * 512 + done)
        done += n
    print("sgio fill: %d MiB in %.1f s" % (total >> 20, time.monotonic() - t0))
    return 0


def cmd_same(a):
    fa = os.open(a.dev, os.O_RDONLY | os.O_DIRECT)
    fb = os.open(a.dev2, os.O_RDONLY | os.O_DIRECT) if getattr(a, "dev2", None) else fa
    ba, bb = mmap.mmap(-1, CHUNK), mmap.mmap(-1, CHUNK)
    zero = bytes(CHUNK)
    checked = 0
    for off, n in _ranges(a.blocks, a.sample):
        x = _pread(fa, ba, n * 512, (a.lba + off) * 512)
        if a.what == "zero":
            y = memoryview(zero)[:n * 512]
        else:
            y = _pread(fb, bb, n * 512, (a.lba_b + off) * 512)
        if x != y:
            print("sgio %s: DIFFER in blocks %d..%d" % (a.what, a.lba + off, a.lba + off + n - 1))
            return 1
        checked += n
    print("sgio %s: %d blocks checked%s, equal" % (a.what, checked, " (sampled)" if a.sample else ""))
    return 0


def u(b, lo, hi):
    return int.from_bytes(b[lo:hi], "big")


def cmd_vaai(a):
    dev = Device(a.dev)
    out, bad = [], []

    def check(name, value, ok, want):
        out.append("  %-44s %-12s %s" % (name, value, "ok" if ok else "BAD (want %s)" % want))
        if not ok:
            bad.append(name)

    inq = dev.send_retry_ua(bytes([0x12, 0, 0, 0, 96, 0]), in_len=96).data
    tpc = bool(len(inq) > 5 and inq[5] & 0x08)
    vpds = dev.send_retry_ua(bytes([0x12, 1, 0, 0, 255, 0]), in_len=255).data
    pages = set(vpds[4:4 + (vpds[3] if len(vpds) > 3 else 0)])
    b0 = dev.send_retry_ua(bytes([0x12, 1, 0xb0, 0, 255, 0]), in_len=255)
    b2 = dev.send_retry_ua(bytes([0x12, 1, 0xb2, 0, 255, 0]), in_len=255)
    rc = dev.send_retry_ua(bytes([0x9e, 0x10]) + bytes(8) + (32).to_bytes(4, "big") + bytes(2), in_len=32)
    for what, r in (("VPD B0", b0), ("VPD B2", b2), ("READ CAPACITY(16)", rc)):
        if not r.good:
            print("%s failed: %s" % (what, r.describe()))
    naa = naa_designator(dev)
    bl = b0.data if b0.good else bytes(64)
    lb = b2.data if b2.good else bytes(8)
    cap = rc.data if rc.good else bytes(32)
    bs = u(cap, 8, 12) or 512
    one_mib = (1 << 20) // bs
    print("VAAI-relevant fields of %s (block size %d):" % (a.dev, bs))
    check("INQUIRY 3PC", int(tpc), tpc, 1)
    check("VPD pages 83 B0 B2 8F", " ".join("%02X" % p for p in sorted(pages) if p >= 0x80),
          {0x83, 0xb0, 0xb2}.issubset(pages), "83 B0 B2")
    check("VPD 83 NAA type 6 designator", naa.hex() if naa else "none",
          bool(naa) and (naa[0] >> 4) == 6, "16-byte NAA 6")
    check("READ CAPACITY(16) LBPME", int(bool(cap[14] & 0x80)), bool(cap[14] & 0x80), 1)
    check("READ CAPACITY(16) LBPRZ", int(bool(cap[14] & 0x40)), bool(cap[14] & 0x40), 1)
    check("B0 WSNZ", bl[4] & 1, True, "-")
    check("B0 MAXIMUM COMPARE AND WRITE LENGTH", bl[5], bl[5] >= 1, ">= 1")
    check("B0 MAXIMUM TRANSFER LENGTH", u(bl, 8, 12), True, "-")
    check("B0 OPTIMAL TRANSFER LENGTH", u(bl, 12, 16), True, "-")
    check("B0 MAXIMUM UNMAP LBA COUNT", u(bl, 20, 24), u(bl, 20, 24) > 0, "> 0")
    check("B0 MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT", u(bl, 24, 28), u(bl, 24, 28) > 0, "> 0")
    g = u(bl, 28, 32)
    check("B0 OPTIMAL UNMAP GRANULARITY", g, g > 0 and one_mib % g == 0, "divides 1 MiB")
    check("B0 UGAVALID", int(bool(bl[32] & 0x80)), True, "-")
    check("B0 MAXIMUM WRITE SAME LENGTH", u(bl, 36, 44), u(bl, 36, 44) >= one_mib, ">= 1 MiB")
    check("B2 LBPU", int(bool(lb[5] & 0x80)), bool(lb[5] & 0x80), 1)
    check("B2 LBPWS", int(bool(lb[5] & 0x40)), bool(lb[5] & 0x40), 1)
    check("B2 LBPWS10", int(bool(lb[5] & 0x20)), bool(lb[5] & 0x20), 1)
    check("B2 LBPRZ", int(bool(lb[5] & 0x04)), bool(lb[5] & 0x04), 1)
    check("B2 PROVISIONING TYPE", lb[6] & 7, (lb[6] & 7) == 2, "2 (thin)")
    f = dev.send_retry_ua(bytes([0x12, 1, 0x8f, 0, 255, 0]), in_len=255)
    check("VPD 8F page length (ODX needs >= 0x24)", u(f.data, 2, 4) if f.good else "absent", True, "-")
    for line in out:
        print(line)
    ats = bl[5] >= 1
    clone = tpc
    zero = u(bl, 36, 44) > 0
    delete = bool(cap[14] & 0x80) and bool(lb[5] & 0xc0)
    print("As esxcli would list it: ATS Status: %s  Clone Status: %s  Zero Status: %s  Delete Status: %s"
          % tuple("supported" if x else "unsupported" for x in (ats, clone, zero, delete)))
    if bad:
        print("NOT MET: " + ", ".join(bad))
    return 1 if (a.require and bad) else 0


def _sense_tuple(txt):
    return tuple(int(x, 16) for x in txt.split("/"))


def _chunk_data(seed, i, n):
    return random.Random(seed * 1000003 + i).randbytes(n)


def cmd_pattern(a):
    dev = Device(a.dev)
    bs, cb = a.block_size, a.chunk
    n = cb * bs
    acked = 0
    if a.verify_only:
        acked = int(open(a.state).read().split()[0])
    else:
        want = _sense_tuple(a.until_fail) if a.until_fail else None
        failed = None
        for i in range(a.chunks):
            r = dev.send(cdb16(0x8a, a.lba + i * cb, cb), out=_chunk_data(a.seed, i, n))
            while r.key == 6:
                print("chunk %d: unit attention %02x/%02x, repeating the WRITE" % (i, r.asc, r.ascq))
                r = dev.send(cdb16(0x8a, a.lba + i * cb, cb), out=_chunk_data(a.seed, i, n))
            if not r.good:
                failed = r
                print("WRITE(16) of chunk %d (LBA %d, %d blocks) failed after %d acknowledged chunks (%d MiB): %s"
                      % (i, a.lba + i * cb, cb, acked, (acked * n) >> 20, r.describe()))
                break
            acked += 1
        if a.state:
            open(a.state, "w").write("%d\n" % acked)
        if want is None and failed is not None:
            return 1
        if want is not None:
            if failed is None:
                print("UNEXPECTED: all %d chunks were acknowledged; no WRITE failed" % acked)
                return 1
            if (failed.status, failed.key, failed.asc, failed.ascq) != (2,) + want:
                print("UNEXPECTED: wanted CHECK CONDITION %s" % a.until_fail)
                return 1
            print("failing WRITE: CHECK CONDITION sense_key=0x%x asc=0x%02x ascq=0x%02x as required"
                  % want)
    bad = 0
    for i in range(a.first, acked):
        r = dev.send_retry_ua(cdb16(0x88, a.lba + i * cb, cb), in_len=n)
        if not r.good or r.data != _chunk_data(a.seed, i, n):
            bad += 1
            print("chunk %d (LBA %d) does not read back: %s" % (i, a.lba + i * cb, r.describe()))
    print("sgio pattern: %d chunks of %d blocks acknowledged, chunks %d..%d read back: %d intact"
          % (acked, cb, a.first, acked - 1, acked - a.first - bad))
    return 1 if bad else 0


def cmd_softua(a):
    dev = Device(a.dev)
    bs, cb = a.block_size, a.chunk
    want = _sense_tuple(a.expect)
    seen, bad = [], 0
    for i in range(a.chunks):
        w = dev.send(cdb16(0x8a, a.lba + i * cb, cb), out=_chunk_data(a.seed, i, cb * bs))
        if not w.good:
            bad += 1
            print("chunk %d: WRITE(16) not GOOD: %s" % (i, w.describe()))
            continue
        t = dev.send(bytes(6))
        if t.good:
            continue
        print("chunk %d (%d MiB written): TEST UNIT READY: %s" % (i, ((i + 1) * cb * bs) >> 20, t.describe()))
        if (t.status, t.key, t.asc, t.ascq) == (2,) + want:
            seen.append(i)
            t2 = dev.send(bytes(6))
            print("  the next TEST UNIT READY: %s" % t2.describe())
            if not t2.good:
                bad += 1
        else:
            bad += 1
    print("sgio softua: %s seen %d time(s)%s" % (a.expect, len(seen),
          "" if not seen else " (after chunk %s)" % ",".join(map(str, seen))))
    if len(seen) != 1:
        print("UNEXPECTED: wanted exactly one")
    return 0 if (len(seen) == 1 and not bad) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cmd")
    c.add_argument("dev")
    c.add_argument("cdb")
    c.add_argument("--out")
    c.add_argument("--in", dest="in_len", type=int, default=0)
    c.add_argument("--expect")
    c.add_argument("--info", type=int)
    lp = sub.add_parser("loop")
    lp.add_argument("dev")
    lp.add_argument("op")
    lp.add_argument("n", type=int)
    lp.add_argument("lba", type=int, nargs="?", default=0)
    lp.add_argument("blocks", type=int, nargs="?", default=1)
    lp.add_argument("--unmap", action="store_true")
    lp.add_argument("--block-size", type=int, default=512)
    lp.add_argument("--dst", help="xcopy: destination device (default DEV)")
    lp.add_argument("--src", help="xcopy: source device; the command goes to DEV, the destination")
    lp.add_argument("--dst-lba", type=int, default=0)
    lp.add_argument("--qd", type=int, default=1, help="commands in flight (threads)")
    f = sub.add_parser("fill")
    f.add_argument("dev")
    f.add_argument("lba", type=int)
    f.add_argument("blocks", type=int)
    sm = sub.add_parser("same")
    sm.add_argument("dev")
    sm.add_argument("lba", type=int)
    sm.add_argument("lba_b", type=int)
    sm.add_argument("blocks", type=int)
    sm.add_argument("--dev2")
    sm.add_argument("--sample", type=int, default=0)
    z = sub.add_parser("zero")
    z.add_argument("dev")
    z.add_argument("lba", type=int)
    z.add_argument("blocks", type=int)
    z.add_argument("--sample", type=int, default=0)
    v = sub.add_parser("vaai")
    v.add_argument("dev")
    v.add_argument("--require", action="store_true")
    pt = sub.add_parser("pattern")
    pt.add_argument("dev")
    pt.add_argument("lba", type=int)
    pt.add_argument("chunks", type=int)
    pt.add_argument("--chunk", type=int, default=2048)
    pt.add_argument("--seed", type=int, default=1)
    pt.add_argument("--until-fail")
    pt.add_argument("--state")
    pt.add_argument("--verify-only", action="store_true")
    pt.add_argument("--first", type=int, default=0, help="read back from this chunk on")
    pt.add_argument("--block-size", type=int, default=512)
    su = sub.add_parser("softua")
    su.add_argument("dev")
    su.add_argument("lba", type=int)
    su.add_argument("chunks", type=int)
    su.add_argument("--chunk", type=int, default=2048)
    su.add_argument("--seed", type=int, default=7)
    su.add_argument("--expect", default="06/38/07")
    su.add_argument("--block-size", type=int, default=512)
    a = p.parse_args()
    return {"cmd": cmd_one, "loop": cmd_loop, "vaai": cmd_vaai, "fill": cmd_fill,
            "same": cmd_same, "zero": cmd_same,
            "pattern": cmd_pattern, "softua": cmd_softua}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
