"""Shared helpers for the transport tests (test_transport_qp.py,
test_transport_errors.py).  Deliberately not a conftest.py: plain functions
and small classes, imported explicitly.

Two harnesses:

* ``Solo``  -- one QP driven by hand (packet level).  Packets go in with
  ``solo.rx(opcode, psn, ...)`` (built by ``softrdma.wire.build``); what the
  QP sends comes out parsed with ``solo.out()``.
* ``Pair``  -- two simulator ``Node``s joined by ``Link``s, one QP each,
  brought to RTS with ``connect_qps``.  ``drop_filter`` removes chosen packets
  deterministically (by a predicate on the parsed packet).
"""

from __future__ import annotations

from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_MTU_1024, IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD,
    ibv_qp_attr_mask as M, ibv_qp_state as S,
)
from softrdma.sim import Link, Simulator, connect_qps
from softrdma.transport.cq import CompletionQueue
from softrdma.transport.memory import MemoryTable
from softrdma.transport.qp import QP, QPAttr, QPCap
from softrdma.transport.wr import AddressVector
from softrdma.wire import build, parse
from softrdma.wire.fastpath import MAX_SEGMENTS, Segments, build_middles, verify_segments

ALL_ACCESS = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ
              | IBV_ACCESS_REMOTE_ATOMIC)
PEER_QPN = 0x99
LOCAL_QPN = 0x12
QKEY = 0x11111111


def u64(b: bytes) -> int:
    return int.from_bytes(b, "little")


def p64(v: int) -> bytes:
    return v.to_bytes(8, "little")


# --------------------------------------------------------------- state machine
def rtr_attr(qp_type, **kw) -> tuple[QPAttr, int]:
    """A valid INIT->RTR attr and mask for ``qp_type``."""
    if qp_type == IBV_QPT_UD:
        return QPAttr(qp_state=S.IBV_QPS_RTR), M.IBV_QP_STATE
    a = dict(qp_state=S.IBV_QPS_RTR, path_mtu=kw.get("path_mtu", IBV_MTU_1024),
             dest_qp_num=kw.get("dest_qp_num", PEER_QPN), rq_psn=kw.get("rq_psn", 0),
             ah_attr=AddressVector(dgid=bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2])))
    mask = M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
    if qp_type == IBV_QPT_RC:
        a.update(max_dest_rd_atomic=kw.get("max_dest_rd_atomic", 16),
                 min_rnr_timer=kw.get("min_rnr_timer", 12))
        mask |= M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER
    return QPAttr(**a), mask


def rts_attr(qp_type, **kw) -> tuple[QPAttr, int]:
    a = dict(qp_state=S.IBV_QPS_RTS, sq_psn=kw.get("sq_psn", 0))
    mask = M.IBV_QP_STATE | M.IBV_QP_SQ_PSN
    if qp_type == IBV_QPT_RC:
        a.update(timeout=kw.get("timeout", 14), retry_cnt=kw.get("retry_cnt", 7),
                 rnr_retry=kw.get("rnr_retry", 7), max_rd_atomic=kw.get("max_rd_atomic", 16))
        mask |= M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_MAX_QP_RD_ATOMIC
    return QPAttr(**a), mask


def init_attr(qp_type, **kw) -> tuple[QPAttr, int]:
    mask = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT
    a = dict(qp_state=S.IBV_QPS_INIT, pkey_index=0, port_num=1)
    if qp_type == IBV_QPT_UD:
        a["qkey"] = kw.get("qkey", QKEY)
        mask |= M.IBV_QP_QKEY
    else:
        a["qp_access_flags"] = kw.get("access", ALL_ACCESS)
        mask |= M.IBV_QP_ACCESS_FLAGS
    return QPAttr(**a), mask


def bring_up(qp: QP, state=S.IBV_QPS_RTS, **kw) -> None:
    """RESET -> INIT [-> RTR [-> RTS [-> SQD]]] with valid attributes."""
    qp.modify(*init_attr(qp.qp_type, **kw))
    if state == S.IBV_QPS_INIT:
        return
    qp.modify(*rtr_attr(qp.qp_type, **kw))
    if state == S.IBV_QPS_RTR:
        return
    qp.modify(*rts_attr(qp.qp_type, **kw))
    if state == S.IBV_QPS_RTS:
        return
    if state == S.IBV_QPS_SQD:
        qp.modify(QPAttr(qp_state=S.IBV_QPS_SQD), M.IBV_QP_STATE)
        return
    if state == S.IBV_QPS_ERR:
        qp.modify(QPAttr(qp_state=S.IBV_QPS_ERR), M.IBV_QP_STATE)
        return
    raise ValueError(state)


def new_qp(qp_type=IBV_QPT_RC, *, memory=None, pd=None, cap=None, sq_sig_all=True, srq=None,
           caps=None) -> QP:
    return QP(qp_type, LOCAL_QPN, pd=pd if pd is not None else object(),
              memory=memory if memory is not None else MemoryTable(),
              send_cq=CompletionQueue(), recv_cq=CompletionQueue(), cap=cap, srq=srq,
              sq_sig_all=sq_sig_all, caps=caps)


# --------------------------------------------------------------- packet level
class Solo:
    """One QP at RTS, its memory and one MR; drive it packet by packet."""

    def __init__(self, qp_type=IBV_QPT_RC, *, mr_size=1 << 16, mr_access=ALL_ACCESS, cap=None,
                 sq_sig_all=True, **kw):
        self.mem = MemoryTable()
        self.pd = object()
        self.qp = new_qp(qp_type, memory=self.mem, pd=self.pd,
                         cap=cap or QPCap(max_send_wr=1024, max_recv_wr=1024, max_inline_data=64),
                         sq_sig_all=sq_sig_all)
        bring_up(self.qp, **kw)
        self.mr = self.mem.reg_mr(self.pd, mr_size, mr_access)
        self.now = 0.0

    @property
    def scq(self):
        return self.qp.send_cq

    @property
    def rcq(self):
        return self.qp.recv_cq

    def rx(self, opcode: int, psn: int, payload=b"", *, now=None, **kw) -> None:
        """Feed one request/response packet (addressed to this QP)."""
        if now is not None:
            self.now = now
        kw.setdefault("pkey", 0xFFFF)
        if opcode & 0xE0 == 0x60 and "deth" not in kw:
            kw["deth"] = (QKEY, PEER_QPN)
        self.qp.receive(build(opcode, self.qp.qp_num, psn, payload, **kw), self.now)

    def out(self):
        """Parsed packets the QP has sent since the last call."""
        pkts = [parse(bytes(p)) for _, p, _ in self.qp.tx]
        self.qp.tx.clear()
        return pkts

    def tick(self, now: float) -> None:
        self.now = now
        self.qp.tick(now)


# --------------------------------------------------------------- simulator
class Pair:
    """Two nodes, a->b and b->a links, one QP each connected at RTS."""

    def __init__(self, qp_type=IBV_QPT_RC, *, loss_ab=0.0, loss_ba=0.0, seed=1, sq_sig_all=True,
                 cap=None, mr_size=1 << 18, create_b=True, **connect_kw):
        self.sim = Simulator(seed=seed)
        self.a = self.sim.add_node("a", "10.0.0.1")
        self.b = self.sim.add_node("b", "10.0.0.2")
        self.ab, self.ba = self.sim.connect(self.a, self.b, Link(loss=loss_ab), Link(loss=loss_ba))
        cap = cap or QPCap(max_send_wr=4096, max_recv_wr=4096, max_inline_data=64)
        self.qa = self.a.create_qp(qp_type, cap=cap, sq_sig_all=sq_sig_all)
        if create_b:
            self.qb = self.b.create_qp(qp_type, cap=cap, sq_sig_all=sq_sig_all)
            connect_qps(self.qa, self.qb, self.a, self.b, **connect_kw)
        self.ma = self.a.reg_mr(mr_size, ALL_ACCESS)
        self.mb = self.b.reg_mr(mr_size, ALL_ACCESS)

    def run(self, until: float = 1.0, **kw) -> int:
        return self.sim.run(until=until, **kw)

    def run_until_cqe(self, cq, n: int = 1, until: float = 10.0) -> float:
        """Run until ``cq`` holds ``n`` entries; return the virtual time."""
        self.sim.run(until=until, stop=lambda: len(cq) >= n)
        return self.sim.now


def drop_filter(sim, node, pred, limit: int | None = None) -> list:
    """Drop, before they reach the wire, packets sent by ``node`` for which
    ``pred(parsed_packet)`` is true (at most ``limit`` of them).  Returns the
    list that collects the dropped parsed packets."""
    orig = sim._transmit
    dropped: list = []

    def _transmit(src):
        if src is node and src.tx:
            keep = []
            for item in src.tx:
                p = parse(bytes(item[1]))
                if (limit is None or len(dropped) < limit) and pred(p):
                    dropped.append(p)
                else:
                    keep.append(item)
            src.tx[:] = keep
        orig(src)

    sim._transmit = _transmit
    return dropped


def tap(sim, node) -> list:
    """Record (time, parsed packet) of everything ``node`` puts on the wire."""
    orig = sim._transmit
    seen: list = []

    def _transmit(src):
        if src is node:
            for item in src.tx:
                seen.append((sim.now, parse(bytes(item[1]))))
        orig(src)

    sim._transmit = _transmit
    return seen


__all__ = ["ALL_ACCESS", "PEER_QPN", "LOCAL_QPN", "QKEY", "Solo", "Pair", "drop_filter", "tap",
           "bring_up", "init_attr", "rtr_attr", "rts_attr", "new_qp", "u64", "p64",
           "IBV_QPT_RC", "IBV_QPT_UC", "IBV_QPT_UD"]


# --------------------------------------------------------------- runs
def run_buffers(run, src: bytes, dst: bytes, port: int = 4791) -> list:
    """A ``SegmentRun`` as a socket pair carries it: GSO sends of at most
    64 KiB built by ``build_middles`` (as ``device.net`` sends them), each
    checked whole by ``verify_segments`` into the ``Segments`` the peer's
    port hands its QP."""
    mtu = run.mtu
    stride = mtu + 16
    per = min(MAX_SEGMENTS, 65000 // stride)
    out = []
    for c0 in range(0, run.count, per):
        c = min(per, run.count - c0)
        final = c0 + c == run.count
        buf = bytearray(c * stride)
        n = build_middles(buf, run.hdr, run.payload[c0 * mtu:(c0 + c) * mtu], mtu, c, run.psn0 + c0,
                          run.ackreq_last and final, src, dst, port, port,
                          run.last_hdr if final else b"", run.first_hdr if c0 == 0 else b"")
        dqpn = verify_segments(buf, n, stride, src, dst, port, port)
        assert dqpn >= 0
        out.append(Segments(memoryview(buf), n, stride, dqpn))
    return out
