"""transport.tm: tag matching on an SRQ through the simulator -- the TMH
parsed by the responder, eager data into tagged buffers, unexpected and
NO_TAG messages into ordinary SRQ buffers, phase synchronization, the list
operations and their completions, and rendezvous (the device's own RDMA
READ, the FIN).  Expectations from ibv_post_srq_ops(3), ibv_create_srq_ex(3)
and mlx5's completions (providers/mlx5/cq.c), not from the module."""

from __future__ import annotations

import errno
import struct

import pytest

from softrdma.enums import (
    IBV_OPS_SIGNALED, IBV_OPS_TM_SYNC, IBV_QPT_UC, IBV_TMH_EAGER, IBV_TMH_FIN, IBV_TMH_NO_TAG, IBV_TMH_RNDV,
    IBV_WC_RECV, IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WC_TM_ADD, IBV_WC_TM_DATA_VALID, IBV_WC_TM_DEL, IBV_WC_TM_ERR,
    IBV_WC_TM_MATCH, IBV_WC_TM_NO_TAG, IBV_WC_TM_RECV, IBV_WC_TM_RNDV_INCOMPLETE, IBV_WC_TM_SYNC,
    IBV_WC_TM_SYNC_REQ, IBV_WR_SEND, IBV_WR_TAG_ADD, IBV_WR_TAG_DEL, IBV_WR_TAG_SYNC,
)
from softrdma.errors import VerbsError
from softrdma.sim import Link, Simulator, connect_qps
from softrdma.transport import tm
from softrdma.transport.cq import CompletionQueue
from softrdma.transport.wr import RecvWQE, SendWQE

from transport_helpers import ALL_ACCESS

SIG = IBV_OPS_SIGNALED
TMH = struct.Struct(">B3xIQ")
RVH = struct.Struct(">QII")
MATCHED = IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID


class TmPair:
    """Initiator ``qa`` on node a, responder ``qb`` on a TM SRQ of node b;
    path MTU 1024, so a 3000-byte message takes three packets."""

    def __init__(self, max_tags=4, seed=5):
        self.sim = sim = Simulator(seed=seed)
        self.a = sim.add_node("a", "10.0.0.1")
        self.b = sim.add_node("b", "10.0.0.2")
        sim.connect(self.a, self.b, Link())
        self.srq = self.b.create_srq(max_wr=16)
        self.ops = CompletionQueue()
        self.srq.tm = tm.TagMatching(max_tags, 16, self.ops)
        self.qa = self.a.create_qp()
        self.qb = self.b.create_qp(srq=self.srq)
        tm.attach(self.qb)
        connect_qps(self.qa, self.qb, self.a, self.b, path_mtu=3, access=ALL_ACCESS)
        self.ma, self.mb = self.a.reg_mr(1 << 16, ALL_ACCESS), self.b.reg_mr(1 << 16, ALL_ACCESS)
        self.wr = 0

    @property
    def tm(self) -> tm.TagMatching:
        return self.srq.tm

    def add(self, tag, wr_id, off=0, length=4000, mask=0xFFFF, flags=SIG, cnt=0) -> int:
        return self.tm.post_op(900 + wr_id, IBV_WR_TAG_ADD, flags, cnt, recv_wr_id=wr_id,
                               sg_list=[(self.mb.addr + off, length, self.mb.lkey)], tag=tag, mask=mask)

    def ordinary(self, wr_id, off=40000, length=8000) -> None:
        self.srq.post_recv(RecvWQE(wr_id, [(self.mb.addr + off, length, self.mb.lkey)]))

    def send(self, data: bytes, until=0.05) -> None:
        self.ma.write(data)
        self.wr += 1
        self.qa.post_send(SendWQE(self.wr, IBV_WR_SEND, [(self.ma.addr, len(data), self.ma.lkey)]), now=self.sim.now)
        self.sim.run(until=self.sim.now + until)

    def recv(self, n=1):
        wcs = self.qb.recv_cq.poll(n + 1)
        assert len(wcs) == n, wcs
        return wcs


def msg(op, tag, body=b"", app_ctx=0) -> bytes:
    return TMH.pack(op, app_ctx, tag) + body


def test_eager_message_fills_the_matching_tagged_buffer_after_its_tmh():
    p = TmPair()
    assert p.add(tag=5, wr_id=50) != p.add(tag=6, wr_id=60)      # two entries, two handles
    assert [(w.wr_id, w.opcode, w.status, w.wc_flags) for w in p.ops.poll(3)] == [
        (950, IBV_WC_TM_ADD, 0, 0), (960, IBV_WC_TM_ADD, 0, 0)]
    body = bytes(range(256)) * 12                                  # 3072 + 16 bytes: four packets
    p.send(msg(IBV_TMH_EAGER, 0xABC0006, body, app_ctx=0x77))     # & 0xFFFF == 6
    (wc,) = p.recv()
    assert (wc.wr_id, wc.status, wc.opcode, wc.wc_flags) == (60, IBV_WC_SUCCESS, IBV_WC_TM_RECV, MATCHED)
    assert (wc.byte_len, wc.tm_tag, wc.tm_priv) == (len(body), 0xABC0006, 0x77)
    assert p.mb.read(len(body)) == body                            # the TMH is not placed
    assert [w.opcode for w in p.qa.send_cq.poll(2)] == [IBV_WC_SEND]
    assert list(p.tm.entries) != [] and len(p.tm.entries) == 1     # tag 6 consumed, tag 5 left


def test_a_consumed_entry_cannot_be_deleted_and_a_listed_one_can():
    p = TmPair()
    h5, h6 = p.add(tag=5, wr_id=50), p.add(tag=6, wr_id=60)
    p.ops.poll(2)
    p.send(msg(IBV_TMH_EAGER, 5, b"x" * 10))
    p.recv()
    p.tm.post_op(1, IBV_WR_TAG_DEL, SIG, handle=h5)
    p.tm.post_op(2, IBV_WR_TAG_DEL, SIG, handle=h6)
    p.tm.post_op(3, IBV_WR_TAG_DEL, 0, handle=h6)                  # unsignalled: no completion
    assert [(w.wr_id, w.opcode, w.status) for w in p.ops.poll(4)] == [
        (1, IBV_WC_TM_DEL, IBV_WC_TM_ERR), (2, IBV_WC_TM_DEL, IBV_WC_SUCCESS)]
    p.ordinary(7)
    p.send(msg(IBV_TMH_EAGER, 6, b"y" * 10))                        # deleted: unexpected now
    (wc,) = p.recv()
    assert (wc.wr_id, wc.opcode, wc.wc_flags) == (7, IBV_WC_TM_RECV, 0)


def test_unexpected_messages_stop_matching_until_software_syncs():
    p = TmPair()
    p.add(tag=5, wr_id=50)
    p.ops.poll(1)
    p.ordinary(1)
    p.ordinary(2, off=50000)
    p.send(msg(IBV_TMH_EAGER, 0x1234, b"u" * 100, app_ctx=3))      # no entry: unexpected
    (wc,) = p.recv()
    assert (wc.wr_id, wc.opcode, wc.wc_flags, wc.tm_tag, wc.tm_priv) == (1, IBV_WC_TM_RECV, 0, 0, 0)
    assert p.mb.read(116, 40000) == msg(IBV_TMH_EAGER, 0x1234, b"u" * 100, app_ctx=3)   # TMH kept
    assert wc.byte_len == 116 and p.tm.hw_unexp == 1
    p.send(msg(IBV_TMH_EAGER, 5, b"m" * 8))                         # matches, but out of phase
    (wc,) = p.recv()
    assert (wc.wr_id, wc.wc_flags) == (2, 0) and p.tm.hw_unexp == 2
    h = p.add(tag=9, wr_id=90)                                      # added out of phase: SYNC_REQ
    p.tm.post_op(27, IBV_WR_TAG_SYNC, SIG | IBV_OPS_TM_SYNC, 2)
    assert [(w.wr_id, w.opcode, w.wc_flags) for w in p.ops.poll(3)] == [
        (990, IBV_WC_TM_ADD, IBV_WC_TM_SYNC_REQ), (27, IBV_WC_TM_SYNC, 0)]
    assert h in p.tm.entries
    p.send(msg(IBV_TMH_EAGER, 5, b"m" * 8))                         # in phase again: matched
    (wc,) = p.recv()
    assert (wc.wr_id, wc.wc_flags, wc.byte_len) == (50, MATCHED, 8)


def test_no_tag_and_headerless_messages_go_to_ordinary_buffers():
    p = TmPair()
    p.add(tag=5, wr_id=50)
    p.ordinary(1)
    p.ordinary(2, off=50000)
    p.send(msg(IBV_TMH_NO_TAG, 5, b"n" * 20))                       # a tag, but NO_TAG: never matched
    p.send(b"short")                                                # no TMH at all
    w1, w2 = p.recv(2)
    assert (w1.wr_id, w1.opcode, w1.wc_flags, w1.byte_len) == (1, IBV_WC_TM_NO_TAG, 0, 36)
    assert (w2.wr_id, w2.opcode, w2.byte_len) == (2, IBV_WC_RECV, 5)
    assert p.tm.hw_unexp == 0 and len(p.tm.entries) == 1


def test_unexpected_message_without_a_buffer_is_rnr_and_counted_once():
    p = TmPair()
    p.send(msg(IBV_TMH_EAGER, 1, b"r" * 10), until=0.001)
    assert not p.qb.recv_cq.poll(1) and p.tm.hw_unexp == 0
    p.ordinary(4)
    p.sim.run(until=p.sim.now + 1.0)                                # the RNR retry finds it
    (wc,) = p.recv()
    assert (wc.wr_id, wc.opcode, wc.wc_flags) == (4, IBV_WC_TM_RECV, 0) and p.tm.hw_unexp == 1


def test_rendezvous_reads_the_initiators_buffer_then_sends_fin():
    p = TmPair()
    p.add(tag=8, wr_id=80, off=100, length=6000)
    p.ops.poll(1)
    data = bytes(range(251)) * 20                                   # 5020 bytes from a's MR at 8192
    p.ma.write(data, 8192)
    p.qa.post_recv(RecvWQE(555, [(p.ma.addr + 60000, 64, p.ma.lkey)]))     # for the FIN
    hdr = msg(IBV_TMH_RNDV, 8, RVH.pack(p.ma.addr + 8192, p.ma.rkey, len(data)), app_ctx=0x55) + b"h" * 8
    p.send(hdr, until=0.1)
    first, second = p.recv(2)
    assert (first.wr_id, first.opcode, first.wc_flags, first.tm_tag, first.tm_priv) == (
        80, IBV_WC_TM_RECV, IBV_WC_TM_MATCH, 8, 0x55)
    assert (second.wr_id, second.status, second.opcode, second.wc_flags, second.byte_len) == (
        80, IBV_WC_SUCCESS, IBV_WC_TM_RECV, IBV_WC_TM_DATA_VALID, len(data))
    assert p.mb.read(len(data), 100) == data
    fin = [w for w in p.qa.recv_cq.poll(3)]
    assert [(w.wr_id, w.opcode, w.byte_len) for w in fin] == [(555, IBV_WC_RECV, 16)]
    assert p.ma.read(16, 60000) == TMH.pack(IBV_TMH_FIN, 0x55, 8)
    assert not p.qb.send_cq.poll(1) and not p.qb.sq                  # the device's own WQEs: no completions


def test_rendezvous_into_a_buffer_too_small_is_left_to_software():
    p = TmPair()
    p.add(tag=8, wr_id=80, length=100)
    p.send(msg(IBV_TMH_RNDV, 8, RVH.pack(p.ma.addr, p.ma.rkey, 5000)))
    (wc,) = p.recv()
    assert (wc.wr_id, wc.status, wc.wc_flags, wc.tm_tag) == (80, IBV_WC_TM_RNDV_INCOMPLETE, IBV_WC_TM_MATCH, 8)
    assert not p.qb.sq and not p.tm.entries


def test_list_operation_refusals_and_qp_types():
    p = TmPair(max_tags=2)
    p.add(tag=1, wr_id=1)
    p.add(tag=2, wr_id=2)
    for call, code in ((lambda: p.add(tag=3, wr_id=3), errno.ENOMEM),
                       (lambda: p.tm.post_op(0, IBV_WR_TAG_ADD, SIG, sg_list=[(0, 1, 0)] * 2), errno.EINVAL),
                       (lambda: p.tm.post_op(0, 7, SIG), errno.EINVAL),
                       (lambda: p.tm.post_op(0, IBV_WR_TAG_DEL, SIG, handle=2), errno.EINVAL)):
        with pytest.raises(tm.TmError) as ex:
            call()
        assert ex.value.errno == code
    uc = p.b.create_qp(IBV_QPT_UC, srq=p.srq)
    with pytest.raises(VerbsError) as ex:
        tm.attach(uc)
    assert ex.value.errno == errno.EINVAL


def test_send_with_immediate_keeps_its_immediate_in_a_tm_completion():
    from softrdma.enums import IBV_WC_WITH_IMM, IBV_WR_SEND_WITH_IMM
    p = TmPair()
    p.add(tag=2, wr_id=20)
    data = msg(IBV_TMH_EAGER, 2, b"i" * 30)
    p.ma.write(data)
    p.qa.post_send(SendWQE(1, IBV_WR_SEND_WITH_IMM, [(p.ma.addr, len(data), p.ma.lkey)], imm_data=0xCAFE),
                   now=p.sim.now)
    p.sim.run(until=p.sim.now + 0.05)
    (wc,) = p.recv()
    assert (wc.wr_id, wc.wc_flags, wc.imm_data, wc.byte_len) == (20, MATCHED | IBV_WC_WITH_IMM, 0xCAFE, 30)


def test_a_failed_rendezvous_read_completes_the_tag_in_error_and_never_the_send_queue():
    from softrdma.enums import IBV_WC_REM_ACCESS_ERR
    p = TmPair()
    p.add(tag=8, wr_id=80, length=6000)
    p.send(msg(IBV_TMH_RNDV, 8, RVH.pack(p.ma.addr, p.ma.rkey ^ 0x55, 100)), until=0.1)   # a wrong rkey
    first, second = p.recv(2)
    assert (first.wr_id, first.status, first.wc_flags) == (80, IBV_WC_SUCCESS, IBV_WC_TM_MATCH)
    assert (second.wr_id, second.status, second.opcode) == (80, IBV_WC_REM_ACCESS_ERR, IBV_WC_TM_RECV)
    assert not p.qb.send_cq.poll(1) and not p.qb.sq       # the device's READ: no completion, flushed silently
