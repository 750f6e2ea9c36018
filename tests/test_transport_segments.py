"""The transport with and without its runs: a requester that emits
``SegmentRun``s (``qp.tx_runs``) and a responder that takes checked GRO
buffers whole (``responder.receive_segments``) do exactly what the
packet-by-packet transport does -- the same packets on the wire, the same
bytes in memory, the same completions, ACKs and counters -- for SENDs,
WRITEs and WRITEs with immediate of every size, PSNs wrapping, windows
filling, and the cases the fast loops must leave to the checked path
(RNR, a receive buffer too small, multi-SGE receives, access denied)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_MTU_256, IBV_MTU_1024,
    IBV_MTU_4096, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
    IBV_WR_SEND_WITH_IMM,
)
from softrdma.transport.memory import MemoryTable
from softrdma.transport.qp import QPCap
from softrdma.transport.wr import RecvWQE, SendWQE
from softrdma.wire.fastpath import SegmentRun, Segments, verify_segments
from softrdma.wire.icrc import ICRC, Ipv4Flow

from transport_helpers import ALL_ACCESS, bring_up, new_qp, run_buffers

SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
RUNS: list = []                   # the sizes of the SegmentRuns a sent (fast transfers)
LASTS: list = []                  # ... and whether each carried its message's LAST
FIRSTS: list = []                 # ... or its FIRST
PATTERN = bytes((i * 7 + 3) & 0xFF for i in range(1 << 18))


def wcs(cq) -> list[tuple]:
    return [tuple(getattr(wc, f) for f in wc.__slots__) for wc in cq.poll(1000)]


class Side:
    def __init__(self, mtu, sq_psn, rq_psn, access=ALL_ACCESS, mr_size=1 << 19):
        self.mem = MemoryTable()
        self.pd = object()
        self.qp = new_qp(memory=self.mem, pd=self.pd, cap=QPCap(max_send_wr=256, max_recv_wr=256,
                                                                max_send_sge=4, max_recv_sge=4))
        bring_up(self.qp, path_mtu=mtu, sq_psn=sq_psn, rq_psn=rq_psn, access=access)
        self.mr = self.mem.reg_mr(self.pd, mr_size, ALL_ACCESS)


def gro_buffer(pkts: list, sport: int = 4791) -> Segments:
    """What a socket with UDP GRO hands over for these packets of one GSO
    send, checked as the device checks it."""
    flow = Ipv4Flow(SRC, DST, sport, 4791)
    seg = len(pkts[0]) + 4
    buf = bytearray()
    for k, p in enumerate(pkts):
        buf += bytes(p) + ICRC.pack(flow.icrc(p, k))
    dqpn = verify_segments(buf, len(buf), seg, SRC, DST, sport, 4791)
    assert dqpn >= 0
    return Segments(memoryview(buf), len(buf), seg, dqpn)


def pump(a: Side, b: Side, fast: bool, wire: list, rounds: int = 10000) -> None:
    """Move packets both ways until both are quiet.  ``fast``: runs and GRO
    buffers (consecutive equal-sized packets grouped as GSO would); else
    every packet on its own.  Every packet a sends goes to ``wire``."""
    for _ in range(rounds):
        moved = False
        for src, dst in ((a, b), (b, a)):
            items = src.qp.tx[:]
            src.qp.tx.clear()
            if not items:
                continue
            moved = True
            batch: list = []
            group: list = []
            for _qp, pkt, _av in items:
                if pkt.__class__ is SegmentRun:
                    assert fast
                    RUNS.append(pkt.count)
                    LASTS.append(bool(pkt.last_hdr))
                    FIRSTS.append(bool(pkt.first_hdr))
                    if src is a:
                        wire.extend(bytes(p) for p in pkt.packets())
                    if group:
                        batch.append(gro_buffer(group))
                        group = []
                    batch.extend(run_buffers(pkt, SRC, DST))
                    continue
                if src is a:
                    wire.append(bytes(pkt))
                if not fast:
                    batch.append(memoryview(bytes(pkt)))
                    continue
                if group and len(pkt) > len(group[0]):
                    batch.append(gro_buffer(group))
                    group = []
                group.append(bytes(pkt))
                if len(pkt) < len(group[0]):              # a shorter one ends a GRO buffer
                    batch.append(gro_buffer(group))
                    group = []
            if group:
                batch.append(gro_buffer(group))
            dst.qp.receive_batch(batch, 0.0)
        if not moved:
            return
    raise AssertionError("the transfer did not finish")


def transfer(fast: bool, mtu_enum: int, psn: int, msgs: list, recv_lens: list, access=ALL_ACCESS) -> dict:
    a = Side(mtu_enum, psn, 7)
    b = Side(mtu_enum, 7, psn, access=access)
    a.qp.tx_runs = b.qp.tx_runs = fast
    for i, n in enumerate(recv_lens):
        if isinstance(n, tuple):                    # multi-SGE receive
            sges, off = [], 0
            for part in n:
                sges.append((b.mr.addr + (1 << 18) + i * 16384 + off, part, b.mr.lkey))
                off += part
            b.qp.post_recv(RecvWQE(100 + i, sges))
        else:
            b.qp.post_recv(RecvWQE(100 + i, [(b.mr.addr + (1 << 18) + i * 16384, n, b.mr.lkey)]))
    a.mr.buf[:len(PATTERN)] = PATTERN
    b.mr.buf[:len(PATTERN)] = PATTERN[::-1]           # what READs fetch
    wire: list = []
    off = 0
    for i, (op, n) in enumerate(msgs):
        wqe = SendWQE(i, op, [(a.mr.addr + off, n, a.mr.lkey)], remote_addr=b.mr.addr + off, rkey=b.mr.rkey,
                      imm_data=0x1000 + i)
        a.qp.post_send(wqe, 0.0)
        off += n
        if i % 3 == 2:                              # a few messages in flight at a time
            pump(a, b, fast, wire)
    pump(a, b, fast, wire)
    # RETH addresses relative to the MR, and no rkey (each MemoryTable picks its own)
    for i, p in enumerate(wire):
        if p[0] in (0x06, 0x0A, 0x0B, 0x0C):
            va = int.from_bytes(p[12:20], "big") - b.mr.addr
            wire[i] = p[:12] + va.to_bytes(8, "big") + bytes(4) + p[24:]
    return dict(wire=wire, mem=bytes(b.mr.buf), mem_a=bytes(a.mr.buf), scq=wcs(a.qp.send_cq), rcq=wcs(b.qp.recv_cq), cnt_a=list(a.qp.cnt), cnt_b=list(b.qp.cnt),
                state=(a.qp.state, b.qp.state, a.qp.req_psn, b.qp.resp_psn, b.qp.msn))


def same(msgs, recv_lens, mtu=IBV_MTU_1024, psn=0, access=ALL_ACCESS) -> dict:
    slow = transfer(False, mtu, psn, msgs, recv_lens, access)
    fast = transfer(True, mtu, psn, msgs, recv_lens, access)
    for k in slow:
        assert fast[k] == slow[k], k
    return fast


OPS = (IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ)


@settings(max_examples=25, deadline=None)
@given(mtu=st.sampled_from((IBV_MTU_256, IBV_MTU_1024, IBV_MTU_4096)),
       psn=st.sampled_from((0, 0xFFFFF0, 0xFFFFFF, 12345)),
       msgs=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 16384)), min_size=1, max_size=6))
def test_runs_and_gro_buffers_change_nothing(mtu, psn, msgs):
    recv = [16384] * sum(1 for op, _ in msgs if op in (IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM))
    out = same(msgs, recv, mtu, psn)
    assert all(wc[1] == 0 for wc in out["scq"] + out["rcq"])


def test_a_long_transfer_uses_runs_and_fills_the_window():
    """64 KiB WRITEs at MTU 256 (256 packets each): runs end at every 64th
    packet and at the window's edge, and the result is the same."""
    RUNS.clear()
    LASTS.clear()
    FIRSTS.clear()
    out = same([(IBV_WR_RDMA_WRITE, 65536)] * 3 + [(IBV_WR_SEND, 16384)] * 2 + [(IBV_WR_RDMA_READ, 65536)],
               [16384] * 2, IBV_MTU_256, 0xFFFF00)
    assert 64 in RUNS and 254 in RUNS and sum(RUNS) > 850     # requests in runs of at most 64; READ responses in one
    assert any(LASTS) and not all(LASTS)                       # some runs ended with the LAST, others not
    assert any(FIRSTS) and not all(FIRSTS)                     # the SENDs' runs began with their FIRST
    assert len(out["scq"]) == 6 and all(wc[1] == 0 for wc in out["scq"])
    fast_a = transfer(True, IBV_MTU_256, 0, [(IBV_WR_RDMA_WRITE, 65536)], [])
    assert fast_a["state"][2] == 256


@pytest.mark.parametrize("case", ["rnr", "too_small", "multi_sge", "denied"])
def test_what_the_fast_loops_leave_to_the_checked_path(case):
    if case == "rnr":              # no receive posted for the second SEND: RNR NAK, then it fails
        out = same([(IBV_WR_SEND, 15000), (IBV_WR_SEND, 15000)], [16000], IBV_MTU_1024)
    elif case == "too_small":      # a receive buffer shorter than the SEND: IBV_WC_LOC_LEN_ERR mid-message
        out = same([(IBV_WR_SEND, 15000)], [9000], IBV_MTU_1024)
        assert out["rcq"][0][1] != 0
    elif case == "multi_sge":
        out = same([(IBV_WR_SEND, 15000)], [(4000, 5000, 6000)], IBV_MTU_1024)
        assert out["rcq"][0][1] == 0 and out["rcq"][0][4] == 15000
    else:                          # remote WRITE not allowed on the responder
        out = same([(IBV_WR_RDMA_WRITE, 15000)], [], IBV_MTU_1024,
                   access=IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
        assert out["scq"][0][1] != 0


def test_enable_runs_raises_the_go_back_windows_ceiling():
    """A QP whose packets leave through a device socket as runs keeps up to
    512 PSNs unacknowledged; a window backed off by loss keeps its size and
    regrows to the new ceiling, not past it; a reset goes back to rxe's 128."""
    from softrdma.transport import completer
    from softrdma.transport.limits import MAX_UNACKED_PSNS, RUN_UNACKED_PSNS
    qp = Side(IBV_MTU_1024, 0, 0).qp
    assert qp.cwnd == qp.cwnd_max == MAX_UNACKED_PSNS and not qp.tx_runs
    qp.enable_runs()
    assert qp.tx_runs and qp.cwnd == qp.cwnd_max == RUN_UNACKED_PSNS
    backed = Side(IBV_MTU_1024, 0, 0).qp
    backed.cwnd = 40.0
    backed.enable_runs()
    assert backed.cwnd == 40.0 and backed.cwnd_max == RUN_UNACKED_PSNS
    for _ in range(100000):
        completer.update_comp(backed, 0.0, 64)
        if backed.cwnd >= RUN_UNACKED_PSNS:
            break
    assert backed.cwnd == RUN_UNACKED_PSNS
    from softrdma.enums import ibv_qp_attr_mask as M, ibv_qp_state as QPS
    from softrdma.transport.qp import QPAttr
    qp.modify(QPAttr(qp_state=QPS.IBV_QPS_RESET), M.IBV_QP_STATE)
    bring_up(qp)                                       # RESET -> ... -> RTS again
    assert qp.cwnd == qp.cwnd_max == MAX_UNACKED_PSNS and not qp.tx_runs


@pytest.mark.parametrize("op", [IBV_WR_RDMA_WRITE, IBV_WR_SEND])
def test_a_run_ending_at_the_64th_packet_keeps_its_ackreq_before_the_last(op):
    """A message whose 64th packet since the last AckReq is its last MIDDLE:
    that MIDDLE asks for an ACK, so the LAST cannot join its run (the same
    packets as one by one: AckReq on both)."""
    for npkts in (64, 65, 66):
        same([(op, npkts * 256)], [npkts * 256], IBV_MTU_256)
