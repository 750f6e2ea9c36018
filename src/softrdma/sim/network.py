"""Nodes, lossy links and the virtual-clock event loop of the simulator."""

from __future__ import annotations

import heapq
import ipaddress
import random
from dataclasses import dataclass, field

from ..enums import ibv_qp_attr_mask as M
from ..enums import ibv_qp_state as S
from ..enums import ibv_qp_type as T
from ..transport.cq import CompletionQueue
from ..transport.memory import MemoryTable
from ..transport.qp import QP, SRQ, DeviceCaps, QPAttr, QPCap
from ..transport.wr import AddressVector
import importlib

icrc_mod = importlib.import_module("softrdma.wire.icrc")
from ..wire.errors import WireError
from ..wire.packet import check

ROCE_PORT = icrc_mod.ROCEV2_UDP_PORT


def gid_of(ip: str) -> bytes:
    """The IPv4-mapped RoCEv2 GID (::ffff:a.b.c.d)."""
    return b"\x00" * 10 + b"\xff\xff" + ipaddress.IPv4Address(ip).packed


@dataclass
class LinkStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    corrupted: int = 0


@dataclass
class Link:
    """One direction of a wire.  Rates are probabilities per packet; times
    in seconds.  A reordered packet is held back by up to ``reorder_delay``."""

    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    corrupt: float = 0.0
    delay: float = 5e-6
    jitter: float = 0.0
    reorder_delay: float = 50e-6
    stats: LinkStats = field(default_factory=LinkStats)
    last_arrival: float = 0.0       # FIFO: jitter alone never reorders


@dataclass
class NodeStats:
    rx_datagrams: int = 0
    icrc_bad: int = 0
    wire_errors: int = 0
    unknown_qpn: int = 0


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
        self.tx: list = []
        self.events: list = []
        self.stats = NodeStats()
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
        return qp

    def av_to(self, other: "Node") -> AddressVector:
        return AddressVector(dgid=other.gid)

    # -- wire
    def deliver(self, udp_payload: bytes, ip_hdr: bytes, sport: int, now: float) -> None:
        st = self.stats
        st.rx_datagrams += 1
        verdict, _ = icrc_mod.verify(udp_payload, ip_hdr=ip_hdr, sport=sport)
        if verdict is not icrc_mod.Verdict.FULL:
            st.icrc_bad += 1
            return
        pkt = memoryview(udp_payload)[:-4]
        try:
            check(pkt)
        except WireError:
            st.wire_errors += 1
            return
        dqpn = (pkt[5] << 16) | (pkt[6] << 8) | pkt[7]
        qp = self.qps.get(dqpn)
        if qp is None:
            st.unknown_qpn += 1
            return
        qp.receive(pkt, now, grh=bytes(20) + ip_hdr)


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
        rng = self.rng
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
            dqpn = (pkt[5] << 16) | (pkt[6] << 8) | pkt[7]
            sport = icrc_mod.udp_sport(qp.qp_num, dqpn, av.flow_label)
            src._ip_id = (src._ip_id + 1) & 0xFFFF
            n = len(pkt) + 4
            ip_hdr = icrc_mod.ipv4_header(src.ip_bytes, dst.ip_bytes, n, ident=src._ip_id, df=True)
            udp_hdr = icrc_mod.udp_header(sport, ROCE_PORT, n)
            payload = bytes(pkt) + icrc_mod.ICRC.pack(icrc_mod.icrc(ip_hdr, udp_hdr, pkt))
            st = link.stats
            st.sent += 1
            if link.loss and rng.random() < link.loss:
                st.lost += 1
                continue
            copies = 1
            if link.dup and rng.random() < link.dup:
                st.duplicated += 1
                copies = 2
            for c in range(copies):
                data = payload
                if link.corrupt and rng.random() < link.corrupt:
                    st.corrupted += 1
                    b = bytearray(data)
                    i = rng.randrange(len(b))
                    b[i] ^= 1 << rng.randrange(8)
                    data = bytes(b)
                t = now + link.delay + (rng.random() * link.jitter if link.jitter else 0.0)
                if c or (link.reorder and rng.random() < link.reorder):
                    st.reordered += 1 if not c else 0
                    t += rng.random() * link.reorder_delay
                elif t < link.last_arrival:
                    t = link.last_arrival
                else:
                    link.last_arrival = t
                st.delivered += 1
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
