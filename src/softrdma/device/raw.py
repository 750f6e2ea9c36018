"""A device's raw Ethernet port: the AF_PACKET socket on its netdev and the
flow steering that hands received frames to raw packet QPs.

``RawPort`` exists only while the device has a raw packet QP, WQ or RSS
table (``raw_port``/``release``), its socket only while it has a raw QP,
so a device without them pays nothing.  Its socket (SOCK_RAW, bound to the
netdev's ifindex) sends the raw QPs' frames; it receives only while a flow
exists (bound to ETH_P_ALL then, to protocol 0 -- nothing -- otherwise),
and never the netdev's outgoing frames (PACKET_IGNORE_OUTGOING, and
PACKET_OUTGOING skipped where the kernel lacks it): steering sees what the
netdev receives, as a NIC's steering sees its wire.  The socket is a
copy, never a thief: every frame still goes to the kernel's stack.

Steering (``steer``), as ibv_create_flow(3) describes the rule types:
the NORMAL rules are tried in priority order (the lowest value first); the
QPs of every rule that matches at the first priority with a match get a
copy.  A frame no NORMAL rule took goes to the ALL_DEFAULT rules' QPs and,
if its destination MAC is a group address, to the MC_DEFAULT rules' QPs.
SNIFFER rules' QPs get a copy of every frame.  A QP gets at most one copy.

Loopback: a frame a raw QP sends on the loopback netdev comes back to the
socket as received, so it is steered like any other.  On any other netdev
the port steers it itself as well (a NIC loops a raw QP's frames back to
its own steering rules), since the wire never brings it back.
"""

from __future__ import annotations

import logging
import selectors
import socket

from ..enums import IBV_FLOW_ATTR_ALL_DEFAULT, IBV_FLOW_ATTR_MC_DEFAULT, IBV_FLOW_ATTR_NORMAL, IBV_FLOW_ATTR_SNIFFER
from ..wire.flow import FlowRule, parse_frame
from .raw_queues import RawQP

log = logging.getLogger("softrdmad")
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
IFF_LOOPBACK = 0x8
RX_BUDGET = 64                     # frames read per readable event (NAPI's weight)
_NORMAL, _ALL_DEFAULT, _MC_DEFAULT, _SNIFFER = (int(t) for t in (
    IBV_FLOW_ATTR_NORMAL, IBV_FLOW_ATTR_ALL_DEFAULT, IBV_FLOW_ATTR_MC_DEFAULT, IBV_FLOW_ATTR_SNIFFER))


class Flow:
    """One steering rule attached to a QP (ibv_flow)."""

    def __init__(self, qp: RawQP, flow_type: int, priority: int, rule: FlowRule):
        self.qp = qp
        self.type = flow_type
        self.priority = priority
        self.rule = rule


def _is_loopback(netdev: str) -> bool:
    try:
        with open(f"/sys/class/net/{netdev}/flags") as f:
            return bool(int(f.read(), 16) & IFF_LOOPBACK)
    except (OSError, ValueError):
        return netdev == "lo"


def _mtu(netdev: str) -> int:
    try:
        with open(f"/sys/class/net/{netdev}/mtu") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1500


class RawPort:
    """The raw side of one device (see the module's docstring)."""

    def __init__(self, dev, sel: selectors.BaseSelector):
        self.dev = dev
        self.sel = sel
        self.netdev = dev.netdev
        self.qps: dict[int, RawQP] = {}      # raw QPs by number (RSS QPs included)
        self.wqs: dict = {}                  # WQs by number
        self.tables: list = []               # RSS indirection tables
        self.next_table = 0                  # the last ind_tbl_num given
        self.numbers: set[int] = set()       # QP and WQ numbers taken here (Device.alloc_qpn skips them)
        self.flows: list[Flow] = []          # NORMAL rules by priority, then the others
        self.loopback = _is_loopback(self.netdev)
        self.mtu = _mtu(self.netdev)
        self.listening = False
        self.tx_frames = self.tx_errors = self.rx_frames = self.rx_unsteered = 0
        self._buf = bytearray(65536 + 64)
        self.sock: socket.socket | None = None

    def open_socket(self) -> None:
        """The netdev's AF_PACKET socket, opened for the first raw QP
        (PermissionError: the daemon may not open one)."""
        if self.sock is not None:
            return
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, 0)
        try:
            sock.bind((self.netdev, 0))
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass                          # before Linux 4.20: skipped by packet type below
            self.sel.register(sock, selectors.EVENT_READ, ("raw", self.readable))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.listening = False

    def close_socket(self) -> None:
        if self.sock is None:
            return
        try:
            self.sel.unregister(self.sock)
        except (KeyError, ValueError):
            pass
        self.sock.close()
        self.sock = None
        self.listening = False

    @property
    def idle(self) -> bool:
        """Nothing raw left on the device: the port may go."""
        return not self.qps and not self.wqs and not self.tables

    # ------------------------------------------------------------ flows
    def add_flow(self, fl: Flow) -> None:
        self.flows.append(fl)
        # NORMAL rules first, by priority (stable: equal priorities keep their order)
        self.flows.sort(key=lambda f: (f.type != _NORMAL, f.priority))
        fl.qp.flows.append(fl)
        self._listen(True)

    def remove_flow(self, fl: Flow) -> None:
        if fl in self.flows:
            self.flows.remove(fl)
        if fl in fl.qp.flows:
            fl.qp.flows.remove(fl)
        if not self.flows:
            self._listen(False)

    def _listen(self, on: bool) -> None:
        if self.sock is not None and on != self.listening:
            self.sock.bind((self.netdev, ETH_P_ALL if on else 0))
            self.listening = on

    # ------------------------------------------------------------ data
    def transmit(self, frame) -> None:
        """Send one frame on the netdev (what the netdev refuses is counted,
        as a NIC counts what it cannot put on the wire)."""
        try:
            self.sock.send(frame)       # (a raw QP exists, so the socket does)
            self.tx_frames += 1
        except OSError as e:
            self.tx_errors += 1
            log.debug("raw send on %s: %s", self.netdev, e)
            return
        if not self.loopback and self.flows:
            self.steer(frame)

    def readable(self) -> None:
        sock, buf = self.sock, self._buf
        view = memoryview(buf)
        for _ in range(RX_BUDGET):
            try:
                n, addr = sock.recvfrom_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                log.debug("raw receive on %s: %s", self.netdev, e)
                return
            if addr[2] == PACKET_OUTGOING or not self.flows:
                continue
            self.steer(view[:n])

    def steer(self, frame) -> None:
        """Hand ``frame`` to the QPs its rules choose (module docstring)."""
        fields = parse_frame(frame)
        if fields is None:
            return
        self.rx_frames += 1
        chosen: list[RawQP] = []
        best = None
        others = False
        for fl in self.flows:
            if fl.type != _NORMAL:
                others = True
                break
            if best is not None and fl.priority != best:
                continue
            if fl.rule.matches(fields):
                best = fl.priority
                if fl.qp not in chosen:
                    chosen.append(fl.qp)
        if others:
            mc = fields.multicast
            for fl in self.flows:
                t = fl.type
                if t == _NORMAL:
                    continue
                if t == _SNIFFER or (best is None and (t == _ALL_DEFAULT or (t == _MC_DEFAULT and mc))):
                    if fl.qp not in chosen:
                        chosen.append(fl.qp)
        if not chosen:
            self.rx_unsteered += 1
            return
        data = bytes(frame)
        for qp in chosen:
            qp.receive(data, fields)


def raw_port(daemon, dev) -> RawPort:
    """The device's raw port (QPs, WQs, tables, flows), made now if it has
    none; its socket is opened by the first raw QP (``open_socket``)."""
    port = dev.raw
    if port is None:
        port = dev.raw = RawPort(dev, daemon.sel)
    return port


def release(dev) -> None:
    """Close the socket once the device has no raw QP, and forget the
    port once nothing raw is left on it."""
    port = dev.raw
    if port is None:
        return
    if not port.qps:
        port.close_socket()
    if port.idle:
        dev.raw = None


__all__ = ["RawPort", "Flow", "raw_port", "release"]
