"""umad files: management tools' MADs through an InfiniBand device's QP1
(the kernel's ib_umad over the MAD layer), so that ibping, saquery and the
other diags run against a host's own device (``-C DEV -P PORT``).

``UmadFile`` is one open file: the daemon's end of the SEQPACKET socket
``umad_open`` hands the tool (records of ``uapi.umad``), its agent's
``hi_tid`` (the upper 32 TID bits the tool's requests leave with and its
responses come back by), and the management classes it takes requests of
(ib_register_mad_agent's registration: ibping -S takes class 0x32), and
whether it is an issm file: while one is open the port has IsSM in its
CapabilityMask (the kernel's ``/dev/infiniband/issmN``; ``IbPort.set_port_cap``),
so that an SM bound to the port is seen by the others.
``Umad`` is a device's set of files: ``readable`` sends a tool's records
-- a MAD to QP0 as an SMP from the port's QP0 (VL15, ``IbPort.send_smp``:
the fabric's SMAs answer, the device's own SMA is the fabric's), any other
from QP1 (``Gsi.send_lid``) -- and ``deliver`` gives a received MAD to the
file it belongs to, if any (before the daemon's own agents see it).
"""

from __future__ import annotations

import errno
import socket

from ..uapi import umad as U
from ..wire.smp import CAP_IS_SM

FIRST_HI_TID = 0x100                 # below: the daemon's own requests (rdma_cm, SA queries)
MAX_FILES = 64
SNDBUF = 1 << 20


class UmadFile:
    def __init__(self, dev, hi_tid: int, classes, issm: bool = False):
        self.dev = dev
        self.hi_tid = hi_tid
        self.issm = issm                  # holds IsSM on the port (an issm device open)
        self.classes = frozenset(int(c) & 0xFF for c in classes)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.setblocking(False)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
        self.theirs = theirs
        self.sent = self.received = self.dropped = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def put(self, mad: bytes, *, lid: int, qpn: int, sl: int = 0, path_bits: int = 0, gid=None,
            status: int = 0) -> None:
        """A MAD for the tool; dropped (counted) when it does not read."""
        try:
            self.sock.send(U.pack(mad, lid=lid, qpn=qpn, sl=sl, path_bits=path_bits, gid=gid, status=status))
            self.received += 1
        except OSError:
            self.dropped += 1

    def close(self) -> None:
        self.sock.close()
        if self.theirs is not None:
            self.theirs.close()


class Umad:
    """The umad files of one device port."""

    def __init__(self, dev):
        self.dev = dev
        self.files: list[UmadFile] = []
        self._next_hi = FIRST_HI_TID

    def open(self, classes, issm: bool = False) -> UmadFile:
        if len(self.files) >= MAX_FILES:
            raise OSError(errno.EMFILE, f"{self.dev.name}: {MAX_FILES} umad files open")
        used = {f.hi_tid for f in self.files}
        while self._next_hi in used:
            self._next_hi += 1
        f = UmadFile(self.dev, self._next_hi, classes, issm)
        self._next_hi = self._next_hi + 1 if self._next_hi < 0xFFFFFFFF else FIRST_HI_TID
        if issm and not self.issm:
            self.dev.set_port_cap(CAP_IS_SM, 0)
        self.files.append(f)
        return f

    @property
    def issm(self) -> bool:
        """Whether an open file holds IsSM."""
        return any(f.issm for f in self.files)

    def close(self, f: UmadFile) -> None:
        if f in self.files:
            self.files.remove(f)
            if f.issm and not self.issm:
                self.dev.set_port_cap(0, CAP_IS_SM)
        f.close()

    def readable(self, f: UmadFile, now: float) -> bool:
        """Send what the tool wrote; False when it closed its end."""
        gsi = self.dev.gsi
        for _ in range(256):
            try:
                msg = f.sock.recv(U.RECORD_BYTES + 1)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not msg:
                return False
            try:
                r = U.unpack(msg)
            except ValueError:
                continue                      # not a record: the kernel's write() fails it (EINVAL)
            mad = bytearray(r.mad)
            if not mad[3] & 0x80:             # a request: the file's hi_tid (ib_umad_write)
                mad[8:12] = f.hi_tid.to_bytes(4, "big")
            if r.qpn == 0:                    # an SMP: QP0, any state the link is up in
                if self.dev.send_smp(bytes(mad), r.lid):
                    f.sent += 1
                else:
                    f.put(bytes(mad), lid=r.lid, qpn=0, status=errno.ETIMEDOUT)
                continue
            if self.dev.state != 4:           # the port cannot send: the tool gets it back failed
                f.put(bytes(mad), lid=r.lid, qpn=r.qpn, status=errno.ETIMEDOUT)
                continue
            gsi.send_lid(bytes(mad), r.lid, sl=r.sl, dqpn=r.qpn, qkey=r.qkey, path_bits=r.path_bits,
                         dgid=r.gid if r.grh else None, hop_limit=r.hop_limit or 64)
            f.sent += 1
        return True

    def deliver(self, mad: bytes, src, sqp: int, now: float) -> bool:
        """A MAD QP1 received from QP ``sqp`` (``src``: the port's ``LinkSource``): to the
        file whose request it answers, or that registered its class for
        requests.  False: none of ours."""
        if not self.files:
            return False
        if mad[3] & 0x80:
            hi = int.from_bytes(mad[8:12], "big")
            f = next((f for f in self.files if f.hi_tid == hi), None)
        else:
            f = next((f for f in self.files if mad[1] in f.classes), None)
        if f is None:
            return False
        gid = src.grh[8:24] if src.grh is not None else None
        f.put(mad, lid=src.slid, qpn=sqp, sl=src.sl, path_bits=src.dlid_path_bits, gid=gid)
        return True

    def close_all(self) -> list[UmadFile]:
        files, self.files = self.files, []
        for f in files:
            f.close()
        return files


__all__ = ["Umad", "UmadFile"]
