"""Helpers of the IB data plane tests: a 2-switch, 4-CA topology (with the
LIDs and LFTs an SM would give it, for the tests that program the model
directly), native IB packets, and a fake device port -- a raw
SOCK_SEQPACKET client of a fabric server's data socket speaking
wire.fabriclink, as an IB device of the daemon does."""

from __future__ import annotations

import socket
import time

from softrdma.wire import fabriclink, lrh
from softrdma.wire.fabriclink import MsgType
from softrdma.wire.headers import BTH
from softrdma.wire.opcodes import Opcode
from softrdma.wire.smp import PortState

NET_2SW = """
Switch 4 "sw1"
[1] "h1"[1]
[2] "h2"[1]
[3] "sw2"[3]
Switch 4 "sw2"
[1] "h3"[1]
[2] "h4"[1]
[3] "sw1"[3]
Ca 1 "h1"
[1] "sw1"[1]
Ca 1 "h2"
[1] "sw1"[2]
Ca 1 "h3"
[1] "sw2"[1]
Ca 1 "h4"
[1] "sw2"[2]
"""
LID = {"sw1": 1, "sw2": 2, "h1": 3, "h2": 4, "h3": 5, "h4": 6}
# LFTs as an SM would program them: LID -> output port
LFT = {"sw1": {1: 0, 2: 3, 3: 1, 4: 2, 5: 3, 6: 3},
       "sw2": {1: 3, 2: 0, 3: 3, 4: 3, 5: 1, 6: 2}}


def program(f) -> None:
    """LIDs, LFTs and Active ports on a fabric of NET_2SW, as after a sweep."""
    for name, lid in LID.items():
        n = f.node(name)
        (n.ports[0] if n.is_switch else n.ports[1]).lid = lid
        if n.is_switch:
            n.lft = bytearray(b"\xff" * 64)
            for d, o in LFT[name].items():
                n.lft[d] = o
            n.lft_top = max(LFT[name])
    for p in f.ports():
        if p.remote is not None or p.num == 0:
            p.state = PortState.ACTIVE
    f.touch(*f.ports())


def data_packet(dlid, slid, payload=b"x" * 100, dqp=0x11, pkey=0xFFFF, vl=0, sl=0) -> bytes:
    """An RC SEND_ONLY as a native IB packet."""
    pad = -len(payload) % 4
    bth = BTH.pack(Opcode.RC_SEND_ONLY, pad << 4, pkey, dqp, 7)
    return lrh.encap(bth + payload + bytes(pad), dlid=dlid, slid=slid, vl=vl, sl=sl)


class FakeDevice:
    """One device port on a fabric's data socket."""

    def __init__(self, path: str, node: str, port: int = 1, name: str = "fake0", attach=True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(path)
        self.infos: list = []          # PORT_INFO messages seen, oldest first
        self.pkts: list = []           # packets received, not yet taken
        self.error = None
        if attach:
            self.send(fabriclink.pack_attach(port, node, name))

    def send(self, msg: bytes) -> None:
        self.sock.send(msg)

    def inject(self, pkts) -> None:
        for m in fabriclink.batches(list(pkts)):
            self.send(m)

    def _pump(self, timeout: float) -> bool:
        """Read one message (False on timeout); None-safe on a closed socket."""
        self.sock.settimeout(timeout)
        try:
            msg = self.sock.recv(fabriclink.MAX_MESSAGE + 64)
        except socket.timeout:
            return False
        if not msg:
            raise ConnectionError("the fabric closed the connection")
        t = fabriclink.msg_type(msg)
        if t == MsgType.PORT_INFO:
            self.infos.append(fabriclink.parse_port_info(msg))
        elif t == MsgType.PACKETS:
            self.pkts.extend(bytes(p) for p in fabriclink.iter_packets(msg))
        elif t == MsgType.ERROR:
            self.error = fabriclink.parse_error(msg)
        return True

    def wait(self, cond, timeout: float = 10.0, what: str = "condition"):
        end = time.monotonic() + timeout
        while True:
            v = cond()
            if v:
                return v
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {what} within {timeout} s (infos {len(self.infos)}, "
                                     f"packets {len(self.pkts)}, error {self.error})")
            try:
                self._pump(min(left, 0.5))
            except ConnectionError:
                v = cond()
                if v:
                    return v
                raise

    def wait_error(self, timeout: float = 10.0):
        """The ERROR the server answers with, and the connection closed after it."""
        self.wait(lambda: self.error, timeout, "ERROR")
        self.sock.settimeout(timeout)
        assert self.sock.recv(100) == b""
        return self.error

    def take(self, n: int, timeout: float = 10.0) -> list:
        self.wait(lambda: len(self.pkts) >= n, timeout, f"{n} packets")
        out, self.pkts = self.pkts[:n], self.pkts[n:]
        return out

    def close(self):
        self.sock.close()


# --- MADs as a device's QP0/QP1 sends and receives them ------------------------------------

def mad_of(pkt: bytes):
    """(LRH, dqp, sqp, MAD) of a native UD packet to QP0/QP1."""
    from softrdma.wire.headers import DETH
    lr, grh, body = lrh.decap(pkt)
    _, _, _, dqp, _ = BTH.unpack_from(body)
    _, sqp = DETH.unpack_from(body, 12)
    return lr, dqp & 0xFFFFFF, sqp & 0xFFFFFF, bytes(body[20:276])


def sa_get(attr: int, record: bytes, comp_mask: int, tid: int, method: int = 1) -> bytes:
    """An SA Get/Set (class version 2) of one record with ``comp_mask``."""
    from softrdma.wire import mad as madw
    from softrdma.wire.sa import SA_DATA_OFFSET, SA_HDR, SA_HDR_OFFSET
    m = madw.build_mad(madw.MgmtClass.SUBN_ADM, 2, method, attr, tid=tid)
    SA_HDR.pack_into(m, SA_HDR_OFFSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, comp_mask)
    m[SA_DATA_OFFSET:SA_DATA_OFFSET + len(record)] = record
    return bytes(m)
