"""Nodes, lossy links and the virtual-clock event loop of the simulator.

A ``Node``'s port is a ``SimPort``: the same receive demux as a device's
(``transport.port``), over a link whose datagrams carry real IPv4 + UDP +
ICRC.  A ``Link``'s loss, duplication, reordering, delay and corruption
are the shared fault injector's (``transport.faults``), drawn from the
simulator's one seeded random stream.
"""

from __future__ import annotations

import heapq
import ipaddress
import random
from dataclasses import dataclass

from ..enums import ibv_qp_attr_mask as M
from ..enums import ibv_qp_state as S
from ..enums import ibv_qp_type as T
from ..transport.counters import FaultCounter, PortCounter
from ..transport.cq import CompletionQueue
from ..transport.faults import Faults
from ..transport.memory import MemoryTable
from ..transport.port import Port, PortQP
from ..transport.qp import QP, SRQ, DeviceCaps, QPAttr, QPCap
from ..transport.wr import AddressVector
from ..wire.headers import bth_dqpn
from ..wire.icrc import ICRC, ROCEV2_UDP_PORT, Verdict, icrc, ipv4_header, udp_header, udp_sport, verify


def gid_of(ip: str) -> bytes:
    """The IPv4-mapped RoCEv2 GID (::ffff:a.b.c.d)."""
    return b"\x00" * 10 + b"\xff\xff" + ipaddress.IPv4Address(ip).packed


class LinkStats:
    """A link's counts by name: its fault injector's ``FaultCounter``s."""

    __slots__ = ("cnt",)

    def __init__(self, cnt: list[int]):
        self.cnt = cnt

    sent = property(lambda self: self.cnt[FaultCounter.sent])
    delivered = property(lambda self: self.cnt[FaultCounter.delivered])
    lost = property(lambda self: self.cnt[FaultCounter.lost])
    duplicated = property(lambda self: self.cnt[FaultCounter.duplicated])
    reordered = property(lambda self: self.cnt[FaultCounter.reordered])
    corrupted = property(lambda self: self.cnt[FaultCounter.corrupted])


@dataclass
class Link:
    """One direction of a wire.  Rates are probabilities per packet; times
    in seconds.  A reordered packet is held back by up to ``reorder_delay``.
    The link is its fault injector's settings (they may change mid-run)."""

    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    delay: float = 5e-6
    jitter: float = 0.0
    reorder_delay: float = 50e-6

    def __post_init__(self):
        self.faults = Faults(self)        # its rng: the simulator's (``Simulator.connect``)

    @property
    def stats(self) -> LinkStats:
        return LinkStats(self.faults.cnt)


@dataclass
class NodeStats:
    rx_datagrams: int = 0
    icrc_bad: int = 0
    wire_errors: int = 0
    unknown_qpn: int = 0


class SimPort(Port):
    """A node's port: the demux of ``transport.port``; the GRH a UD buffer
    gets is the IPv4 header the datagram came with (``rx_ip_hdr``, set for
    each delivery).  The simulator moves the packets itself (``Simulator``),
    so nothing here sends."""

    def __init__(self):
        super().__init__()
        self.rx_ip_hdr = bytes(20)

    def _grh(self, src: bytes, dst: bytes, nbytes: int) -> bytes:
        return bytes(20) + self.rx_ip_hdr


class Node:
    """A host with one RoCE port: an IPv4 address, memory, QPs."""

    def __init__(self, sim: "Simulator", name: str, ip: str, caps: DeviceCaps | None = None):
        self.sim = sim
        self.name = name
        self.ip = ip
        self.ip_bytes = ipaddress.IPv4Address(ip).packed
        self.gid = gid_of(ip)
        self.caps = caps or DeviceCaps()
        # keys from the run's seed: a seeded simulation is reproducible
        self.memory = MemoryTable(rng=random.Random(f"{sim.seed}:{name}"))
        self.qps: dict[int, QP] = {}
        self.port = SimPort()
        self.tx: list = self.port.tx
        self.events: list = []
        self.pd = object()
        self._next_qpn = 0x11
        self._ip_id = 0x1000

    def reg_mr(self, length: int, access: int, pd=None):
        return self.memory.reg_mr(self.pd if pd is None else pd, length, access)

    def create_cq(self, cqe: int = 1 << 20) -> CompletionQueue:
        return CompletionQueue(cqe)

    def create_srq(self, **kw) -> SRQ:
        return SRQ(events=self.events, **kw)

    def create_qp(self, qp_type=T.IBV_QPT_RC, *, send_cq=None, recv_cq=None, cap=None, srq=None,
                  sq_sig_all=True, pd=None) -> QP:
        qpn = self._next_qpn
        self._next_qpn += 1
        qp = QP(qp_type, qpn, pd=self.pd if pd is None else pd, memory=self.memory,
                send_cq=send_cq or CompletionQueue(), recv_cq=recv_cq or CompletionQueue(),
                cap=cap or QPCap(max_send_wr=4096, max_recv_wr=4096), srq=srq,
                sq_sig_all=sq_sig_all, caps=self.caps, tx=self.tx, events=self.events)
        self.qps[qpn] = qp
        self.port.qps[qpn] = PortQP(qp)
        return qp

    @property
    def stats(self) -> NodeStats:
        """What arrived and what the port dropped before any QP."""
        c = self.port.cnt
        bad, wire, unknown = (c[PortCounter.rx_dropped_icrc], c[PortCounter.rx_dropped_wire],
                              c[PortCounter.rx_dropped_unknown_qpn])
        return NodeStats(c[PortCounter.rx_packets] + bad + wire + unknown, bad, wire, unknown)

    def av_to(self, other: "Node") -> AddressVector:
        return AddressVector(dgid=other.gid)

    # -- wire
    def deliver(self, udp_payload: bytes, ip_hdr: bytes, sport: int, now: float) -> None:
        """A datagram off the wire: its ICRC checked, then the port's demux."""
        port = self.port
        verdict, _ = verify(udp_payload, ip_hdr=ip_hdr, sport=sport)
        if verdict is not Verdict.FULL:
            port.cnt[PortCounter.rx_dropped_icrc] += 1
            return
        port.rx_ip_hdr = ip_hdr
        port.deliver(memoryview(udp_payload)[:-4], ip_hdr[12:16], ip_hdr[16:20], now)


class Simulator:
    def __init__(self, seed: int = 0):
        self.now = 0.0
        self.seed = seed
        self.rng = random.Random(seed)
        self.nodes: list[Node] = []
        self.links: dict[tuple[str, str], Link] = {}
        self._heap: list = []
        self._seq = 0
        self.by_gid: dict[bytes, Node] = {}

    def add_node(self, name: str, ip: str, caps: DeviceCaps | None = None) -> Node:
        node = Node(self, name, ip, caps)
        self.nodes.append(node)
        self.by_gid[node.gid] = node
        return node

    def connect(self, a: Node, b: Node, link: Link | None = None, back: Link | None = None) -> tuple[Link, Link]:
        """Join two nodes (``back`` defaults to a copy of ``link``'s settings)."""
        link = link or Link()
        if back is None:
            back = Link(loss=link.loss, dup=link.dup, reorder=link.reorder, corrupt=link.corrupt,
                        delay=link.delay, jitter=link.jitter, reorder_delay=link.reorder_delay)
        link.faults.rng = back.faults.rng = self.rng
        self.links[(a.name, b.name)] = link
        self.links[(b.name, a.name)] = back
        return link, back

    # -- event loop
    def _schedule(self, t: float, node: Node, payload: bytes, ip_hdr: bytes, sport: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, node, payload, ip_hdr, sport))

    def _transmit(self, src: Node) -> None:
        tx = src.tx
        if not tx:
            return
        now = self.now
        items = tx[:]
        tx.clear()
        for qp, pkt, av in items:
            dst = self.by_gid.get(av.dgid)
            if dst is None:
                continue
            link = self.links.get((src.name, dst.name))
            if link is None:
                continue
            dqpn = bth_dqpn(pkt)
            sport = udp_sport(qp.qp_num, dqpn, av.flow_label)
            src._ip_id = (src._ip_id + 1) & 0xFFFF
            n = len(pkt) + 4
            ip_hdr = ipv4_header(src.ip_bytes, dst.ip_bytes, n, ident=src._ip_id, df=True)
            udp_hdr = udp_header(sport, ROCEV2_UDP_PORT, n)
            payload = bytes(pkt) + ICRC.pack(icrc(ip_hdr, udp_hdr, pkt))
            for t, bit in link.faults.fate(now, len(payload)):
                data = payload
                if bit is not None:
                    b = bytearray(data)
                    b[bit >> 3] ^= 1 << (bit & 7)
                    data = bytes(b)
                self._schedule(t, dst, data, ip_hdr, sport)

    def step(self) -> bool:
        """Advance to the next event (a delivery or a QP timer); False when idle."""
        for node in self.nodes:
            self._transmit(node)
        t_next = self._heap[0][0] if self._heap else None
        timer_qp = None
        for node in self.nodes:
            for qp in node.qps.values():
                d = qp.deadline
                if d is not None and (t_next is None or d < t_next):
                    t_next, timer_qp = d, qp
        if t_next is None:
            return False
        if t_next > self.now:
            self.now = t_next
        if timer_qp is not None:
            timer_qp.tick(self.now)
        else:
            _, _, node, payload, ip_hdr, sport = heapq.heappop(self._heap)
            node.deliver(payload, ip_hdr, sport, self.now)
        return True

    def run(self, until: float | None = None, max_events: int | None = None, stop=None) -> int:
        """Run until idle, the clock passes ``until``, ``max_events`` or ``stop()``."""
        n = 0
        while True:
            if stop is not None and stop():
                break
            if max_events is not None and n >= max_events:
                break
            if until is not None:
                nxt = self.next_time()
                if nxt is None or nxt > until:
                    self.now = max(self.now, until)
                    break
            if not self.step():
                break
            n += 1
        return n

    def next_time(self) -> float | None:
        for node in self.nodes:
            self._transmit(node)
        t = self._heap[0][0] if self._heap else None
        for node in self.nodes:
            for qp in node.qps.values():
                d = qp.deadline
                if d is not None and (t is None or d < t):
                    t = d
        return t


def connect_qps(a: QP, b: QP, na: Node, nb: Node, *, path_mtu: int = 5, psn_a: int = 0, psn_b: int = 0,
                access: int = 0xF, timeout: int = 14, retry_cnt: int = 7, rnr_retry: int = 7,
                min_rnr_timer: int = 12, max_rd_atomic: int = 16, max_dest_rd_atomic: int = 16,
                qkey: int = 0x11111111) -> None:
    """Bring two QPs to RTS pointing at each other (what ibv_rc_pingpong does)."""
    for qp, peer, me, other, sq_psn, rq_psn in ((a, b, na, nb, psn_a, psn_b), (b, a, nb, na, psn_b, psn_a)):
        if qp.qp_type == T.IBV_QPT_UD:
            qp.modify(QPAttr(qp_state=S.IBV_QPS_INIT, pkey_index=0, port_num=1, qkey=qkey),
                      M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY)
            qp.modify(QPAttr(qp_state=S.IBV_QPS_RTR), M.IBV_QP_STATE)
            qp.modify(QPAttr(qp_state=S.IBV_QPS_RTS, sq_psn=sq_psn), M.IBV_QP_STATE | M.IBV_QP_SQ_PSN)
            continue
        qp.modify(QPAttr(qp_state=S.IBV_QPS_INIT, pkey_index=0, port_num=1, qp_access_flags=access),
                  M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS)
        rtr = QPAttr(qp_state=S.IBV_QPS_RTR, path_mtu=path_mtu, dest_qp_num=peer.qp_num, rq_psn=rq_psn,
                     ah_attr=me.av_to(other), max_dest_rd_atomic=max_dest_rd_atomic,
                     min_rnr_timer=min_rnr_timer)
        mask = M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
        if qp.qp_type == T.IBV_QPT_RC:
            mask |= M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER
        qp.modify(rtr, mask)
        rts = QPAttr(qp_state=S.IBV_QPS_RTS, sq_psn=sq_psn, timeout=timeout, retry_cnt=retry_cnt,
                     rnr_retry=rnr_retry, max_rd_atomic=max_rd_atomic)
        mask = M.IBV_QP_STATE | M.IBV_QP_SQ_PSN
        if qp.qp_type == T.IBV_QPT_RC:
            mask |= M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_MAX_QP_RD_ATOMIC
        qp.modify(rts, mask)
