"""The extended CQ (CQEX: start_poll/poll_next/end_poll, read_*) and the
extended QP (QPEx: ibv_wr_* batches) through a real softrdmad, with
pyverbs' names and errors."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.uapi.queues import CompletionQueueProducer
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AH, AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ, CQEX, CompChannel, CqInitAttrEx, PollCqAttr
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.base import inc_rkey
from softrdma.pyverbs.mr import MR, MW, MWBind, MWBindInfo
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, DataBuffer, QPAttr, QPCap, QPEx, QPInitAttr, QPInitAttrEx
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR
from softrdma.uapi.abi import WC

HERE = os.path.dirname(os.path.abspath(__file__))
IPV4_GID = 1                      # on lo: ::ffff:127.0.0.1
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
EX_MASK = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
RC_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_SEND_WITH_INV
          | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_READ
          | e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
MW_OPS = e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_LOCAL_INV
UD_QKEY = 0x11111111


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("pvex") as d:
        old = os.environ.get("SOFTRDMA_RUN")
        os.environ["SOFTRDMA_RUN"] = d.run_dir
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("SOFTRDMA_RUN", None)
            else:
                os.environ["SOFTRDMA_RUN"] = old


@pytest.fixture
def ctx(daemon):
    c = Context(name="rxe0")
    yield c
    c.close()


def errno_of(fn, *args, **kw) -> int:
    with pytest.raises(PyverbsRDMAError) as ex:
        fn(*args, **kw)
    return ex.value.error_code


def cqex(ctx, wc_flags=e.IBV_WC_STANDARD_FLAGS, cqe=64) -> CQEX:
    return CQEX(ctx, CqInitAttrEx(cqe=cqe, wc_flags=wc_flags))


def qpex(ctx, pd, cq, qp_type=e.IBV_QPT_RC, ops=RC_OPS, cap=None) -> QPEx:
    cap = cap or QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=2, max_recv_sge=2, max_inline_data=64)
    return QPEx(ctx, QPInitAttrEx(qp_type=qp_type, scq=cq, rcq=cq, pd=pd, cap=cap, comp_mask=EX_MASK,
                                  send_ops_flags=ops))


def connect_rc(ctx, a, b) -> None:
    gid = ctx.query_gid(1, IPV4_GID)
    for q, peer in ((a, b), (b, a)):
        attr = QPAttr()
        attr.qp_access_flags = ACC
        attr.dest_qp_num = peer.qp_num
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
        attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=IPV4_GID), is_global=1, port_num=1)
        q.to_rts(attr)


def ud_rts(q) -> None:
    attr = QPAttr()
    attr.qkey = UD_QKEY
    q.to_rts(attr)


def poll_ex(cq: CQEX, n: int, timeout: float = 5.0) -> list[dict]:
    """``n`` completions, read the way rdma-core's tests/utils.py
    poll_cq_ex does (start_poll until not ENOENT, then poll_next), with
    every field the CQ was created with."""
    flags = cq.wc_flags
    readers = [(f, name) for f, name in (
        (e.IBV_WC_EX_WITH_BYTE_LEN, "byte_len"), (e.IBV_WC_EX_WITH_IMM, "imm_data"),
        (e.IBV_WC_EX_WITH_QP_NUM, "qp_num"), (e.IBV_WC_EX_WITH_SRC_QP, "src_qp"),
        (e.IBV_WC_EX_WITH_SLID, "slid"), (e.IBV_WC_EX_WITH_SL, "sl"),
        (e.IBV_WC_EX_WITH_DLID_PATH_BITS, "dlid_path_bits")) if flags & f]

    def one() -> dict:
        wc = {"wr_id": cq.wr_id, "status": cq.status, "opcode": cq.read_opcode(),
              "vendor_err": cq.read_vendor_err(), "wc_flags": cq.read_wc_flags()}
        for _, name in readers:
            wc[name] = getattr(cq, f"read_{name}")()
        return wc

    end = time.monotonic() + timeout
    while cq.start_poll(PollCqAttr()) == errno.ENOENT:
        assert time.monotonic() < end, "no completion"
    out = [one()]
    try:
        while len(out) < n:
            rc = cq.poll_next()
            if rc == errno.ENOENT:
                assert time.monotonic() < end, f"only {len(out)} of {n} completions"
                continue
            assert rc == 0
            out.append(one())
    finally:
        cq.end_poll()
    return out


def bswap(v: int) -> int:
    return int.from_bytes(v.to_bytes(4, "big"), "little")


# --------------------------------------------------------------------- CQEX
def test_cqex_reads_every_field_of_the_cqe_ring(ctx):
    """Every read_* against CQEs with a distinct value in every field,
    written into the ring the way the daemon writes them."""
    cq = cqex(ctx, cqe=8)
    prod = CompletionQueueProducer(cq.ring)          # the daemon's end of this ring (no QP uses the CQ)
    assert cq.start_poll(PollCqAttr()) == errno.ENOENT
    with pytest.raises(PyverbsRDMAError) as ex:
        cq.end_poll()                                # ENOENT from start_poll: no batch to end
    assert ex.value.error_code == errno.EINVAL
    recv = WC(0x1122334455667788, 0, e.IBV_WC_RECV, 0x123456, byte_len=4000, imm_data=0xA1B2C3D4,
              src_qp=0x654321, wc_flags=e.IBV_WC_WITH_IMM | e.IBV_WC_GRH, pkey_index=3, vendor_err=0x99,
              slid=0xBEEF, sl=11, dlid_path_bits=0x7F)
    inv = WC(2, 0, e.IBV_WC_RECV, 17, byte_len=5, imm_data=0xDEADBEEF, src_qp=18, wc_flags=e.IBV_WC_WITH_INV)
    err = WC(3, e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_RDMA_WRITE, 17, vendor_err=0x42)
    for wc in (recv, inv, err):
        assert prod.push(wc) == (True, False)
    assert cq.start_poll(None) == 0
    assert (cq.wr_id, cq.status, cq.read_opcode()) == (0x1122334455667788, 0, e.IBV_WC_RECV)
    assert (cq.read_byte_len(), cq.read_qp_num(), cq.read_src_qp()) == (4000, 0x123456, 0x654321)
    assert cq.read_wc_flags() == e.IBV_WC_WITH_IMM | e.IBV_WC_GRH
    assert cq.read_imm_data() == bswap(0xA1B2C3D4)   # __be32: ntohl() gives the value the sender put on the wire
    assert (cq.read_vendor_err(), cq.read_slid(), cq.read_sl(), cq.read_dlid_path_bits()) == (0x99, 0xBEEF, 11, 0x7F)
    assert cq.poll_next() == 0
    assert (cq.wr_id, cq.read_wc_flags()) == (2, e.IBV_WC_WITH_INV)
    assert cq.read_invalidated_rkey() == 0xDEADBEEF  # the union's rkey member: host order
    assert cq.poll_next() == 0
    assert (cq.wr_id, cq.status, cq.read_opcode(), cq.read_vendor_err()) == (3, e.IBV_WC_REM_ACCESS_ERR,
                                                                              e.IBV_WC_RDMA_WRITE, 0x42)
    assert cq.poll_next() == errno.ENOENT            # the batch stays on the last completion
    assert cq.wr_id == 3 and cq.ring.consumer == 0   # nothing released before end_poll
    cq.end_poll()
    assert cq.ring.consumer == 3
    assert cq.start_poll(PollCqAttr()) == errno.ENOENT
    cq.close()


def test_cqex_batch_misuse_and_unrequested_fields(ctx):
    cq = cqex(ctx, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN, cqe=4)
    prod = CompletionQueueProducer(cq.ring)
    assert errno_of(cq.poll_next) == errno.EINVAL            # no batch
    assert errno_of(cq.read_opcode) == errno.EINVAL          # no current completion
    prod.push(WC(1, 0, e.IBV_WC_SEND, 5, byte_len=9))
    assert cq.start_poll(PollCqAttr(comp_mask=1)) == errno.EINVAL
    assert cq.start_poll(PollCqAttr()) == 0
    assert errno_of(cq.start_poll, PollCqAttr()) == errno.EINVAL   # a batch is open
    assert cq.read_byte_len() == 9
    for read in (cq.read_imm_data, cq.read_invalidated_rkey, cq.read_qp_num, cq.read_src_qp, cq.read_slid,
                 cq.read_sl, cq.read_dlid_path_bits):
        assert errno_of(read) == errno.EINVAL                # not in wc_flags
    for read in (cq.read_timestamp, cq.read_completion_wallclock_ns, cq.read_tm_info):
        assert errno_of(read) == errno.EINVAL                # not in wc_flags either
    for read in (cq.read_cvlan, cq.read_flow_tag):
        assert errno_of(read) == errno.EOPNOTSUPP            # no softrdma CQ has these
    cq.end_poll()
    cq.close()


def test_cqex_creation_checks_and_device_caps(ctx):
    attrx = ctx.query_device_ex()
    # a completion clock (tests/test_cq_timestamp.py), but no VLAN or flow tag
    assert attrx.completion_timestamp_mask == (1 << 63) - 1 and attrx.hca_core_clock > 0
    assert attrx.orig_attr.max_qp == ctx.query_device().max_qp
    assert attrx.odp_caps.general_caps == e.IBV_ODP_SUPPORT | e.IBV_ODP_SUPPORT_IMPLICIT      # (see test_device_odp)
    for flag in (e.IBV_WC_EX_WITH_CVLAN, e.IBV_WC_EX_WITH_FLOW_TAG, 1 << 20):
        assert errno_of(CQEX, ctx, CqInitAttrEx(wc_flags=e.IBV_WC_STANDARD_FLAGS | flag)) == errno.EOPNOTSUPP
    assert errno_of(CQEX, ctx, CqInitAttrEx(comp_mask=1 << 5)) == errno.EINVAL
    assert errno_of(CQEX, ctx, CqInitAttrEx(comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD)) == errno.EINVAL    # no parent domain
    assert errno_of(CQEX, ctx, CqInitAttrEx(comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS,
                                            flags=e.IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) == errno.EOPNOTSUPP
    assert errno_of(CQEX, ctx, CqInitAttrEx(comp_vector=ctx.num_comp_vectors)) == errno.EINVAL
    assert errno_of(CQEX, ctx, CqInitAttrEx(cqe=0)) == errno.EINVAL
    ok = CQEX(ctx, CqInitAttrEx(comp_mask=e.IBV_CQ_INIT_ATTR_MASK_FLAGS,
                                flags=e.IBV_CREATE_CQ_ATTR_SINGLE_THREADED))
    assert ok.cqe >= 100 and CQEX(ctx, None).wc_flags == 0
    assert errno_of(CQ, ctx, 10, None, None, 1) == errno.EINVAL          # comp_vector checked for CQ too


# --------------------------------------------------------------------- QPEx over RC
def test_qpex_rc_every_opcode_in_one_batch(ctx):
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    qa, qb = qpex(ctx, pd, cqa), qpex(ctx, pd, cqb)
    connect_rc(ctx, qa, qb)
    ma, mb, victim = MR(pd, 1 << 16, ACC), MR(pd, 1 << 16, ACC), MR(pd, 64, ACC)
    data = os.urandom(3000)
    ma.write(data, len(data))
    mb.write(data[::-1], len(data), 20000)            # what the READ fetches
    mb.write((41).to_bytes(8, "little"), 8, 30000)    # the atomics' target
    for i in range(4):
        qb.post_recv(RecvWR(100 + i, 1, [SGE(mb.buf + 4096 * i, 4096, mb.lkey)]))
    qa.wr_start()
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_id = 1
    qa.wr_send()
    qa.wr_set_sge_list(2, [SGE(ma.buf, 1000, ma.lkey), SGE(ma.buf + 1000, 2000, ma.lkey)])
    qa.wr_id = 2
    qa.wr_send_imm(0x12345678)
    qa.wr_set_inline_data(ma.buf, 40)
    qa.wr_id = 3
    qa.wr_send_inv(victim.rkey)
    qa.wr_set_sge(SGE(ma.buf, 10, ma.lkey))
    qa.wr_id = 4
    qa.wr_rdma_write(mb.rkey, mb.buf + 40000)
    qa.wr_set_inline_data_list(2, [DataBuffer(ma.buf, 7), DataBuffer(ma.buf + 100, 9)])
    qa.wr_id = 5
    qa.wr_rdma_write_imm(mb.rkey, mb.buf + 50000, 0xCAFE)
    qa.wr_set_sge(SGE(ma.buf, 3000, ma.lkey))
    qa.wr_id = 6
    qa.wr_rdma_read(mb.rkey, mb.buf + 20000)
    qa.wr_set_sge(SGE(ma.buf + 10000, 3000, ma.lkey))
    qa.wr_id = 7
    qa.wr_atomic_fetch_add(mb.rkey, mb.buf + 30000, 1)
    qa.wr_set_sge(SGE(ma.buf + 20000, 8, ma.lkey))
    qa.wr_id = 8
    qa.wr_atomic_cmp_swp(mb.rkey, mb.buf + 30000, 42, 0xFEEDFACE)
    qa.wr_set_sge(SGE(ma.buf + 20008, 8, ma.lkey))
    assert qa.sq.producer == 0                        # nothing is visible before wr_complete
    qa.wr_complete()
    assert qa.sq.producer == 8                        # ... then all of it, with one index store
    sent = poll_ex(cqa, 8)
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in sent] == [
        (1, 0, e.IBV_WC_SEND), (2, 0, e.IBV_WC_SEND), (3, 0, e.IBV_WC_SEND), (4, 0, e.IBV_WC_RDMA_WRITE),
        (5, 0, e.IBV_WC_RDMA_WRITE), (6, 0, e.IBV_WC_RDMA_READ), (7, 0, e.IBV_WC_FETCH_ADD),
        (8, 0, e.IBV_WC_COMP_SWAP)]
    assert {w["qp_num"] for w in sent} == {qa.qp_num}
    got = poll_ex(cqb, 4)
    assert [(w["wr_id"], w["status"], w["opcode"], w["byte_len"]) for w in got] == [
        (100, 0, e.IBV_WC_RECV, 3000), (101, 0, e.IBV_WC_RECV, 40), (102, 0, e.IBV_WC_RECV, 10),
        (103, 0, e.IBV_WC_RECV_RDMA_WITH_IMM, 3000)]
    assert all(w["src_qp"] == qa.qp_num and w["qp_num"] == qb.qp_num for w in got)
    assert [w["wc_flags"] for w in got] == [0, e.IBV_WC_WITH_IMM, e.IBV_WC_WITH_INV, e.IBV_WC_WITH_IMM]
    assert bswap(got[1]["imm_data"]) == 0x12345678 and bswap(got[3]["imm_data"]) == 0xCAFE
    assert got[2]["imm_data"] == victim.rkey          # read_imm_data reads the invalidated rkey's union
    assert mb.read(3000, 0) == data and mb.read(40, 4096) == data[:40] and mb.read(10, 8192) == data[:10]
    assert mb.read(16, 40000) == data[:7] + data[100:109]
    assert mb.read(3000, 50000) == data
    assert ma.read(3000, 10000) == data[::-1]
    assert ma.read(16, 20000) == (41).to_bytes(8, "little") + (42).to_bytes(8, "little")
    assert mb.read(8, 30000) == (0xFEEDFACE).to_bytes(8, "little")
    # the SEND with invalidate took the victim's rkey away
    qa.wr_start()
    qa.wr_id = 9
    qa.wr_rdma_write(victim.rkey, victim.buf)
    qa.wr_set_sge(SGE(ma.buf, 8, ma.lkey))
    qa.wr_complete()
    assert [(w["wr_id"], w["status"]) for w in poll_ex(cqa, 1)] == [(9, e.IBV_WC_REM_ACCESS_ERR)]


def test_qpex_unsignaled_wrs_and_sq_sig_all(ctx):
    """wr_flags is read at each builder: only the signaled WR completes
    (QPInitAttrEx's sq_sig_all defaults to 0, as in pyverbs)."""
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    qa, qb = qpex(ctx, pd, cqa), qpex(ctx, pd, cqb)
    connect_rc(ctx, qa, qb)
    ma, mb = MR(pd, 4096, ACC), MR(pd, 4096, ACC)
    ma.write(b"abcdefgh", 8)
    qa.wr_start()
    for i in range(3):
        qa.wr_id = 10 + i
        qa.wr_flags = e.IBV_SEND_SIGNALED if i == 2 else 0
        qa.wr_rdma_write(mb.rkey, mb.buf + 8 * i)
        qa.wr_set_sge(SGE(ma.buf, 8, ma.lkey))
    qa.wr_complete()
    assert [w["wr_id"] for w in poll_ex(cqa, 1)] == [12]
    assert mb.read(24) == b"abcdefgh" * 3
    time.sleep(0.05)
    assert cqa.start_poll(PollCqAttr()) == errno.ENOENT


def test_cqex_with_a_completion_channel(ctx):
    """req_notify / get_cq_event work on an extended CQ as on a CQ."""
    pd = PD(ctx)
    ch = CompChannel(ctx)
    cqa = CQEX(ctx, CqInitAttrEx(cqe=16, channel=ch, wc_flags=e.IBV_WC_EX_WITH_BYTE_LEN))
    cqb = cqex(ctx)
    qa, qb = qpex(ctx, pd, cqa), qpex(ctx, pd, cqb)
    connect_rc(ctx, qa, qb)
    ma, mb = MR(pd, 64, ACC), MR(pd, 64, ACC)
    cqa.req_notify()
    qa.wr_start()
    qa.wr_id, qa.wr_flags = 77, e.IBV_SEND_SIGNALED
    qa.wr_rdma_write(mb.rkey, mb.buf)
    qa.wr_set_sge(SGE(ma.buf, 16, ma.lkey))
    qa.wr_complete()
    assert ch.get_cq_event(cqa, timeout=5) is cqa
    cqa.ack_events(1)
    assert [(w["wr_id"], w["byte_len"]) for w in poll_ex(cqa, 1)] == [(77, 16)]


# --------------------------------------------------------------------- QPEx over UD
def test_qpex_ud_send_and_send_imm(ctx):
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    ops = e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM
    qa, qb = qpex(ctx, pd, cqa, e.IBV_QPT_UD, ops), qpex(ctx, pd, cqb, e.IBV_QPT_UD, ops)
    ud_rts(qa)
    ud_rts(qb)
    ma, mb = MR(pd, 4096, ACC), MR(pd, 4096, ACC)
    data = os.urandom(512)
    ma.write(data, len(data))
    for i in range(3):
        qb.post_recv(RecvWR(200 + i, 1, [SGE(mb.buf + 1024 * i, 1024, mb.lkey)]))
    ah = AH(pd, attr=AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID), is_global=1,
                            port_num=1))
    qa.wr_start()
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_id = 1
    qa.wr_send()
    qa.wr_set_ud_addr(ah, qb.qp_num, UD_QKEY)
    qa.wr_set_sge(SGE(ma.buf, 512, ma.lkey))
    qa.wr_id = 2
    qa.wr_send_imm(1234)
    qa.wr_set_ud_addr(ah, qb.qp_num, UD_QKEY)         # the setters come in any order
    qa.wr_set_inline_data(ma.buf, 33)
    qa.wr_id = 3
    qa.wr_send()                                      # zero length (rdma-core's test_qp_ex_ud_zero_size)
    qa.wr_set_sge(SGE(ma.buf, 0, ma.lkey))
    qa.wr_set_ud_addr(ah, qb.qp_num, UD_QKEY)
    qa.wr_complete()
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in poll_ex(cqa, 3)] == [
        (1, 0, e.IBV_WC_SEND), (2, 0, e.IBV_WC_SEND), (3, 0, e.IBV_WC_SEND)]
    got = poll_ex(cqb, 3)
    assert [(w["wr_id"], w["status"], w["byte_len"], w["src_qp"], w["qp_num"]) for w in got] == [
        (200, 0, 40 + 512, qa.qp_num, qb.qp_num), (201, 0, 40 + 33, qa.qp_num, qb.qp_num),
        (202, 0, 40, qa.qp_num, qb.qp_num)]
    assert [w["wc_flags"] for w in got] == [e.IBV_WC_GRH, e.IBV_WC_GRH | e.IBV_WC_WITH_IMM, e.IBV_WC_GRH]
    assert bswap(got[1]["imm_data"]) == 1234
    assert [(w["slid"], w["sl"], w["dlid_path_bits"]) for w in got] == [(0, 0, 0)] * 3   # RoCE, as rxe
    assert mb.read(512, 40) == data and mb.read(33, 1024 + 40) == data[:33]


# --------------------------------------------------------------------- QPEx and memory windows
def mw_pair(ctx):
    """qa (every RC op) writes into qb's MR; qb (WRITE, BIND_MW, LOCAL_INV)
    binds and invalidates windows on it."""
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    qa, qb = qpex(ctx, pd, cqa), qpex(ctx, pd, cqb, ops=MW_OPS)
    connect_rc(ctx, qa, qb)
    ma, mb = MR(pd, 1 << 16, ACC), MR(pd, 1 << 16, ACC | e.IBV_ACCESS_MW_BIND)
    return pd, (qa, cqa, ma), (qb, cqb, mb)


def write_through(a, rkey: int, raddr: int, length: int, wr_id: int, offset: int = 0) -> int:
    """An RDMA WRITE of ``length`` bytes of a's MR; its completion status."""
    qa, cqa, ma = a
    qa.wr_start()
    qa.wr_id, qa.wr_flags = wr_id, e.IBV_SEND_SIGNALED
    qa.wr_rdma_write(rkey, raddr)
    qa.wr_set_sge(SGE(ma.buf + offset, length, ma.lkey))
    qa.wr_complete()
    (wc,) = poll_ex(cqa, 1)
    assert wc["wr_id"] == wr_id
    return wc["status"]


def test_qpex_wr_bind_mw_type_2_then_writes_inside_and_outside_the_window(ctx):
    pd, a, (qb, cqb, mb) = mw_pair(ctx)
    ma = a[2]
    mw = MW(pd, e.IBV_MW_TYPE_2)
    old_rkey = mw.rkey
    key = inc_rkey(mw.rkey)
    win = mb.buf + 8192
    # the bind and an unrelated WRITE in one batch: the bind is an ordinary WQE of it
    qb.wr_start()
    qb.wr_id, qb.wr_flags = 0x77, e.IBV_SEND_SIGNALED
    qb.wr_bind_mw(mw, key, MWBindInfo(mb, win, 4096, e.IBV_ACCESS_REMOTE_WRITE))
    qb.wr_id = 0x78
    qb.wr_rdma_write(ma.rkey, ma.buf + 60000)
    qb.wr_set_inline_data(mb.buf, 4)
    assert qb.sq.producer == 0
    qb.wr_complete()
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in poll_ex(cqb, 2)] == [
        (0x77, e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW), (0x78, e.IBV_WC_SUCCESS, e.IBV_WC_RDMA_WRITE)]
    assert ma.read(4, 60000) == mb.read(4)
    assert mw.rkey == old_rkey               # as in C, wr_bind_mw leaves it: the caller keeps the new rkey
    data = os.urandom(512)
    ma.write(data, len(data))
    assert write_through(a, key, win + 4096 - 512, 512, 1) == e.IBV_WC_SUCCESS      # the window's last bytes
    assert mb.read(512, 8192 + 4096 - 512) == data
    assert write_through(a, key, win, 16, 2, offset=100) == e.IBV_WC_SUCCESS
    assert mb.read(16, 8192) == data[100:116]
    assert mb.read(8, 8192 - 8) == bytes(8)                                         # nothing before it
    assert write_through(a, key, win + 4096 - 4, 8, 3) == e.IBV_WC_REM_ACCESS_ERR   # 4 bytes past its end
    assert mb.read(8, 8192 + 4096 - 4) == data[508:] + bytes(4)                   # none of it landed


def test_qpex_wr_local_inv_takes_the_window_away(ctx):
    pd, a, (qb, cqb, mb) = mw_pair(ctx)
    mw = MW(pd, e.IBV_MW_TYPE_2)
    key = inc_rkey(mw.rkey)
    qb.wr_start()
    qb.wr_id, qb.wr_flags = 5, e.IBV_SEND_SIGNALED
    qb.wr_bind_mw(mw, key, MWBindInfo(mb, mb.buf, 1024, e.IBV_ACCESS_REMOTE_WRITE))
    qb.wr_complete()
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in poll_ex(cqb, 1)] == [
        (5, e.IBV_WC_SUCCESS, e.IBV_WC_BIND_MW)]
    a[2].write(b"bound", 5)
    assert write_through(a, key, mb.buf + 10, 5, 1) == e.IBV_WC_SUCCESS
    assert mb.read(5, 10) == b"bound"
    qb.wr_start()
    qb.wr_id = 6
    qb.wr_local_inv(key)
    qb.wr_complete()
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in poll_ex(cqb, 1)] == [
        (6, e.IBV_WC_SUCCESS, e.IBV_WC_LOCAL_INV)]
    a[2].write(b"gone!", 5)
    assert write_through(a, mb.rkey, mb.buf + 20, 5, 2) == e.IBV_WC_SUCCESS      # the MR's own rkey still works
    assert write_through(a, key, mb.buf + 10, 5, 3) == e.IBV_WC_REM_ACCESS_ERR   # the window's does not
    assert mb.read(15, 10) == b"bound" + bytes(5) + b"gone!"


def test_qpex_writes_the_wqes_post_send_and_bind_mw_write(ctx, monkeypatch):
    """Byte for byte: wr_bind_mw = post_send(IBV_WR_BIND_MW) = QP.bind_mw for
    the same bind, wr_local_inv = post_send(IBV_WR_LOCAL_INV).  Compared in
    the SQ's first slot, never published (commit is a no-op here)."""
    pd = PD(ctx)
    cq = cqex(ctx)
    q = qpex(ctx, pd, cq, ops=MW_OPS)
    mr = MR(pd, 4096, ACC | e.IBV_ACCESS_MW_BIND)
    mw1, mw2 = MW(pd, e.IBV_MW_TYPE_1), MW(pd, e.IBV_MW_TYPE_2)
    monkeypatch.setattr(q.sq_wq, "commit", lambda n=1: None)
    # nothing is published, so the QP never leaves RESET; posting checks the
    # state first (EINVAL before RTS), which is not what is compared here
    monkeypatch.setattr(q, "state", e.IBV_QPS_RTS)
    flags = e.IBV_SEND_SIGNALED | e.IBV_SEND_FENCE

    def via_qpex(build) -> bytes:
        q.wr_start()
        q.wr_id, q.wr_flags = 0x1234, flags
        build()
        wqe = bytes(q.sq_wq.next_slot())
        q.wr_abort()
        q.sq_wq.next_slot()[:] = bytes(len(wqe))
        return wqe

    def via_post_send(post) -> bytes:
        post()
        wqe = bytes(q.sq_wq.next_slot())
        q.sq_wq.next_slot()[:] = bytes(len(wqe))
        return wqe

    info = MWBindInfo(mr, mr.buf + 64, 512, e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ)
    wr = SendWR(0x1234, e.IBV_WR_BIND_MW, send_flags=flags)
    wr.set_bind_wr(mw2, info)
    posted = via_post_send(lambda: q.post_send(wr))
    assert posted[8] == e.IBV_WR_BIND_MW and posted != bytes(len(posted))
    assert via_qpex(lambda: q.wr_bind_mw(mw2, inc_rkey(mw2.rkey), info)) == posted
    key1 = inc_rkey(mw1.rkey)
    built = via_qpex(lambda: q.wr_bind_mw(mw1, key1, info))
    assert via_post_send(lambda: q.bind_mw(mw1, MWBind(info, flags, wr_id=0x1234))) == built
    assert mw1.rkey == key1                  # ibv_bind_mw moves the type 1 window's rkey
    inv = SendWR(0x1234, e.IBV_WR_LOCAL_INV, send_flags=flags)
    inv.imm_data = 0xA1B2C3D4
    assert via_qpex(lambda: q.wr_local_inv(0xA1B2C3D4)) == via_post_send(lambda: q.post_send(inv))
    assert q.sq.producer == 0


def test_qpex_memory_window_batch_errors(ctx):
    pd = PD(ctx)
    cq = cqex(ctx)
    q = qpex(ctx, pd, cq, ops=MW_OPS)
    no_mw = qpex(ctx, pd, cq)                # RC_OPS: neither BIND_MW nor LOCAL_INV
    mr = MR(pd, 4096, ACC | e.IBV_ACCESS_MW_BIND)
    mw = MW(pd, e.IBV_MW_TYPE_2)
    info = MWBindInfo(mr, mr.buf, 64, e.IBV_ACCESS_REMOTE_WRITE)
    sge = SGE(mr.buf, 8, mr.lkey)

    def bind():
        q.wr_bind_mw(mw, inc_rkey(mw.rkey), info)

    # a bind carries no data (rxe's validate_send_wr); inline data is for SEND and WRITE only
    assert _failed_batch(q, lambda: (bind(), q.wr_set_sge(sge))) == errno.EINVAL
    assert _failed_batch(q, lambda: (bind(), q.wr_set_sge_list(1, [sge]))) == errno.EINVAL
    assert _failed_batch(q, lambda: (bind(), q.wr_set_inline_data(mr.buf, 4))) == errno.EINVAL
    assert _failed_batch(q, lambda: (q.wr_local_inv(1), q.wr_set_inline_data(mr.buf, 4))) == errno.EINVAL
    assert _failed_batch(q, lambda: q.wr_bind_mw(None, 0, None)) == errno.EINVAL
    # not in send_ops_flags: libibverbs' NULL callback, EINVAL at once
    assert _failed_batch(no_mw, lambda: no_mw.wr_bind_mw(mw, inc_rkey(mw.rkey), info)) == errno.EINVAL
    no_mw.wr_start()
    assert errno_of(no_mw.wr_bind_mw, mw, 0, info) == errno.EINVAL
    assert errno_of(no_mw.wr_local_inv, 0) == errno.EINVAL
    no_mw.wr_abort()
    assert errno_of(q.wr_local_inv, 0) == errno.EINVAL         # outside wr_start
    # a zero-length SGE is no data (rxe), so that batch is fine -- aborted here
    q.wr_start()
    bind()
    q.wr_set_sge(SGE(mr.buf, 0, mr.lkey))
    q.wr_set_sge_list(0, [])
    q.wr_abort()
    assert q.sq.producer == 0 and no_mw.sq.producer == 0


# --------------------------------------------------------------------- batches and errors
def test_wr_abort_discards_the_batch(ctx):
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    qa, qb = qpex(ctx, pd, cqa), qpex(ctx, pd, cqb)
    connect_rc(ctx, qa, qb)
    ma, mb = MR(pd, 4096, ACC), MR(pd, 4096, ACC)
    ma.write(b"first" + b"second", 11)
    qb.post_recv(RecvWR(1, 1, [SGE(mb.buf, 64, mb.lkey)]))
    qa.wr_start()
    qa.wr_flags = e.IBV_SEND_SIGNALED
    qa.wr_id = 50
    qa.wr_send()
    qa.wr_set_sge(SGE(ma.buf, 5, ma.lkey))
    qa.wr_abort()
    qa.wr_start()                                     # the aborted slots are reused
    qa.wr_id = 51
    qa.wr_send()
    qa.wr_set_sge(SGE(ma.buf + 5, 6, ma.lkey))
    qa.wr_complete()
    assert [w["wr_id"] for w in poll_ex(cqa, 1)] == [51]
    assert [(w["wr_id"], w["byte_len"]) for w in poll_ex(cqb, 1)] == [(1, 6)]
    assert mb.read(6) == b"second"
    time.sleep(0.05)
    assert cqa.start_poll(PollCqAttr()) == errno.ENOENT and cqb.start_poll(PollCqAttr()) == errno.ENOENT


def _failed_batch(q, build) -> int:
    """Run ``build`` inside wr_start; return wr_complete's errno (it must fail)."""
    q.wr_start()
    q.wr_flags = e.IBV_SEND_SIGNALED
    try:
        build()
    except PyverbsRDMAError:
        pass                                          # an immediate error: the batch is spoiled too
    return errno_of(q.wr_complete)


def test_wr_complete_fails_whole_batch_and_the_qp_stays_usable(ctx):
    pd = PD(ctx)
    cqa, cqb = cqex(ctx), cqex(ctx)
    cap = QPCap(max_send_wr=2, max_recv_wr=4, max_send_sge=1, max_recv_sge=1, max_inline_data=16)
    ops = e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ
    qa, qb = qpex(ctx, pd, cqa, ops=ops, cap=cap), qpex(ctx, pd, cqb, ops=ops, cap=cap)
    connect_rc(ctx, qa, qb)
    ma, mb = MR(pd, 4096, ACC), MR(pd, 4096, ACC)
    sge = SGE(ma.buf, 8, ma.lkey)

    def sends(n):
        for i in range(n):
            qa.wr_id = i
            qa.wr_send()
            qa.wr_set_sge(sge)

    def two_sges():
        qa.wr_send()
        qa.wr_set_sge_list(2, [sge, sge])

    def long_inline():
        qa.wr_send()
        qa.wr_set_inline_data(ma.buf, 17)

    def inline_read():
        qa.wr_rdma_read(mb.rkey, mb.buf)
        qa.wr_set_inline_data(ma.buf, 8)

    def setter_first():
        qa.wr_set_sge(sge)

    def not_enabled():
        sends(1)
        qa.wr_send_imm(5)

    assert _failed_batch(qa, lambda: sends(3)) == errno.ENOSPC          # queue of 2 (rxe: ENOSPC)
    assert _failed_batch(qa, two_sges) == errno.ENOSPC
    assert _failed_batch(qa, long_inline) == errno.ENOSPC
    assert _failed_batch(qa, inline_read) == errno.EINVAL
    assert _failed_batch(qa, setter_first) == errno.EINVAL
    assert _failed_batch(qa, not_enabled) == errno.EINVAL
    assert qa.sq.producer == 0                                           # none of it was posted
    qa.wr_start()
    assert errno_of(qa.wr_send_imm, 5) == errno.EINVAL                   # raised at once ...
    assert errno_of(qa.wr_complete) == errno.EINVAL                      # ... and the batch is gone
    assert errno_of(qa.wr_complete) == errno.EINVAL                      # no wr_start
    assert errno_of(qa.wr_send) == errno.EINVAL                          # builder outside a batch
    qa.wr_start()
    assert errno_of(qa.wr_start) == errno.EINVAL                         # one batch at a time
    qa.wr_abort()
    # a good batch after all that
    ma.write(b"12345678", 8)
    for i in range(2):
        qb.post_recv(RecvWR(7 + i, 1, [SGE(mb.buf + 64 * i, 64, mb.lkey)]))
    qa.wr_start()
    qa.wr_flags = e.IBV_SEND_SIGNALED
    sends(2)
    qa.wr_complete()
    assert [(w["wr_id"], w["status"]) for w in poll_ex(cqa, 2)] == [(0, 0), (1, 0)]
    assert [(w["wr_id"], w["byte_len"]) for w in poll_ex(cqb, 2)] == [(7, 8), (8, 8)]
    assert mb.read(72) == b"12345678" + bytes(56) + b"12345678"


def test_ud_wr_needs_an_address(ctx):
    pd = PD(ctx)
    cq = cqex(ctx)
    q = qpex(ctx, pd, cq, e.IBV_QPT_UD, e.IBV_QP_EX_WITH_SEND)
    ud_rts(q)
    mr = MR(pd, 64, ACC)
    assert _failed_batch(q, lambda: (q.wr_send(), q.wr_set_sge(SGE(mr.buf, 8, mr.lkey)))) == errno.EINVAL
    rc = qpex(ctx, pd, cq, ops=e.IBV_QP_EX_WITH_SEND)
    ah = AH(pd, attr=AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID), is_global=1,
                            port_num=1))
    assert _failed_batch(rc, lambda: (rc.wr_send(), rc.wr_set_ud_addr(ah, 1, 1))) == errno.EINVAL
    # the XRC SRQ of a send is for an XRC INI QP only
    assert _failed_batch(rc, lambda: (rc.wr_send(), rc.wr_set_xrc_srqn(1))) == errno.EINVAL


def test_unsupported_operations_are_eopnotsupp(ctx):
    pd = PD(ctx)
    cq = cqex(ctx)
    q = qpex(ctx, pd, cq)
    for call, args in ((q.wr_send_tso, (0, 0, 0)),):
        assert errno_of(call, *args) == errno.EOPNOTSUPP
        q.wr_start()
        assert errno_of(call, *args) == errno.EOPNOTSUPP
        assert errno_of(q.wr_complete) == errno.EOPNOTSUPP       # the batch is spoiled


def test_qp_ex_creation_checks(ctx):
    pd = PD(ctx)
    cq = cqex(ctx)

    def create(qp_type=e.IBV_QPT_RC, ops=e.IBV_QP_EX_WITH_SEND, mask=EX_MASK, the_pd=pd, **kw):
        return QPEx(ctx, QPInitAttrEx(qp_type=qp_type, scq=cq, rcq=cq, pd=the_pd, comp_mask=mask,
                                      send_ops_flags=ops, **kw))

    # what rdma-core's test_qpex.py skips on (EOPNOTSUPP): ops the QP type lacks in rxe's
    # RXE_SUP_*_QP_SEND_OPS_FLAGS (BIND_MW on RC and UC, LOCAL_INV on RC only)
    rc = create(e.IBV_QPT_RC, e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_LOCAL_INV)
    assert rc.send_ops_flags == e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_BIND_MW | e.IBV_QP_EX_WITH_LOCAL_INV
    assert create(e.IBV_QPT_UC, e.IBV_QP_EX_WITH_BIND_MW).send_ops_flags == e.IBV_QP_EX_WITH_BIND_MW
    assert errno_of(create, e.IBV_QPT_UC, e.IBV_QP_EX_WITH_LOCAL_INV) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_UD, e.IBV_QP_EX_WITH_BIND_MW) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_UD, e.IBV_QP_EX_WITH_LOCAL_INV) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_UD, e.IBV_QP_EX_WITH_RDMA_WRITE) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_UC, e.IBV_QP_EX_WITH_RDMA_READ) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_RC, e.IBV_QP_EX_WITH_TSO) == errno.EOPNOTSUPP
    assert create(e.IBV_QPT_XRC_SEND).qp_type == e.IBV_QPT_XRC_SEND      # an XRC INI QP: a PD and a send CQ
    assert errno_of(create, e.IBV_QPT_XRC_SEND, e.IBV_QP_EX_WITH_TSO) == errno.EOPNOTSUPP
    assert errno_of(create, e.IBV_QPT_XRC_RECV) == errno.EINVAL            # a TGT QP is made on an XRCD
    assert errno_of(create, mask=EX_MASK | e.IBV_QP_INIT_ATTR_XRCD) == errno.EOPNOTSUPP
    assert errno_of(create, mask=EX_MASK | e.IBV_QP_INIT_ATTR_CREATE_FLAGS,
                    create_flags=e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) == errno.EOPNOTSUPP
    assert errno_of(create, mask=e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) == errno.EINVAL      # no PD
    assert errno_of(create, the_pd=None) == errno.EINVAL
    uc = create(e.IBV_QPT_UC, e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
    assert uc.send_ops_flags == e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    # without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS a QPEx has no builders (pyverbs: no qp_ex)
    plain = create(mask=e.IBV_QP_INIT_ATTR_PD)
    plain.wr_start()
    assert errno_of(plain.wr_send) == errno.EINVAL
    plain.wr_abort()
    # pyverbs' creators: QPInitAttrEx goes with a Context, QPInitAttr with a PD; CQ or CQEX either way
    assert QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd, comp_mask=e.IBV_QP_INIT_ATTR_PD))
    assert QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=CQ(ctx, 8)))
    with pytest.raises(TypeError):
        QP(pd, QPInitAttrEx(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, pd=pd, comp_mask=e.IBV_QP_INIT_ATTR_PD))
    with pytest.raises(TypeError):
        QPEx(ctx, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq))


# --------------------------------------------------------------------- an unmodified program
def test_pyverbs_program_with_qpex_and_cqex_through_softrdma_run(daemon):
    prog = os.path.join(HERE, "pyverbs_programs", "qpex_cqex_traffic.py")
    # PYTHONPATH (if any) leads to softrdma itself; `import pyverbs` works only through `softrdma run`
    env = {**daemon.env}
    out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", sys.executable, prog],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "OK rc_send rc_send_imm rc_write rc_write_imm rc_read " \
        "rc_cmp_swp rc_fetch_add ud_send ud_send_imm rc_bind_mw skipped:"
