#!/usr/bin/python3
"""SG_IO from one process: exact sense checks and per-command timing loops.

Starting one process per SCSI command costs ~56 ms under TCG, which swamps
per-command figures; this tool sends many commands from one process.

  sgio.py cmd DEV CDB_HEX [--out FILE] [--in LEN] [--expect GOOD|KEY/ASC/ASCQ] [--info N]
      Send one command. Prints "status=.. sense_key=.. asc=.. ascq=.. info=..".
      --expect: exit 0 iff the result matches (GOOD, or sense "0e/1d/00");
      --info:   additionally require the sense INFORMATION field to equal N.
      --in LEN: data-in length; the data is written to stdout as hex (first 64 bytes).
  sgio.py loop DEV OP N [LBA BLOCKS] [--unmap]
      OP: tur | ws16 | write16 | read16 | caw. Sends N commands, each BLOCKS
      blocks starting at LBA + i*BLOCKS (caw: always at LBA, 1 block, comparing
      with what it wrote last). Prints one line with the loop's elapsed time
      and milliseconds per command; exit 1 if any command failed.
"""
import argparse
import ctypes
import fcntl
import os
import sys
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
    r = dev.send(cdb, out=out, in_len=a.in_len)
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


def cmd_loop(a):
    dev = Device(a.dev)
    bs = a.block_size
    fails, first = 0, ""
    blk = bytes([0xa5]) * bs
    data = bytes(bs * a.blocks) if a.op in ("write16",) else None
    t0 = time.monotonic()
    prev = bytes(bs)                      # caw: what the block holds (zeros at first)
    for i in range(a.n):
        lba = a.lba + i * a.blocks
        if a.op == "tur":
            r = dev.send(bytes(6))
        elif a.op == "ws16":
            r = dev.send(cdb16(0x93, lba, a.blocks, 0x08 if a.unmap else 0), out=bytes(bs))
        elif a.op == "write16":
            r = dev.send(cdb16(0x8a, lba, a.blocks), out=data)
        elif a.op == "read16":
            r = dev.send(cdb16(0x88, lba, a.blocks), in_len=bs * a.blocks)
        elif a.op == "caw":
            new = (i + 1).to_bytes(8, "big") * (bs // 8)
            c = bytearray(16)
            c[0] = 0x89
            c[2:10] = a.lba.to_bytes(8, "big")
            c[13] = 1
            r = dev.send(c, out=prev + new)
            prev = new
        else:
            raise SystemExit("unknown op " + a.op)
        if not r.good:
            fails += 1
            if not first:
                first = "first failure at i=%d: %s" % (i, r.describe())
    el = time.monotonic() - t0
    print("sgio op=%s n=%d blocks_per_cmd=%d loop_secs=%.3f per_cmd_ms=%.3f fails=%d %s"
          % (a.op, a.n, a.blocks, el, 1000 * el / max(a.n, 1), fails, first))
    return 1 if fails else 0


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
    a = p.parse_args()
    return cmd_one(a) if a.what == "cmd" else cmd_loop(a)


if __name__ == "__main__":
    sys.exit(main())
