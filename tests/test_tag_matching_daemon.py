"""Tag matching end to end through a real softrdmad with pyverbs' API:
SRQ(ctx, SrqInitAttrEx) of type IBV_SRQT_TM, post_srq_ops, a CQEX with
IBV_WC_EX_WITH_TM_INFO, and RC traffic carrying TMHs (eager, unexpected,
no-tag, rendezvous) between two QPs of one daemon."""

from __future__ import annotations

import errno
import struct
import time

import pytest

from daemon_helpers import context_on_own_daemon
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ, CQEX, CqInitAttrEx, PollCqAttr
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from softrdma.pyverbs.srq import SRQ, OpsWr, SrqInitAttr, SrqInitAttrEx
from softrdma.pyverbs.srq import SrqAttr
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR

TMH = struct.Struct(">B3xIQ")
RVH = struct.Struct(">QII")
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE
TM_MASK = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ | e.IBV_SRQ_INIT_ATTR_TM


@pytest.fixture(scope="module")
def ctx():
    with context_on_own_daemon("tmd") as c:
        yield c


def tm_srq_attr(pd, cq, tags=8, mask=TM_MASK):
    a = SrqInitAttrEx(max_wr=16)
    a.comp_mask, a.srq_type, a.pd, a.cq = mask, e.IBV_SRQT_TM, pd, cq
    a.max_num_tags, a.max_ops = tags, 4
    return a


def errno_of(fn, *args) -> int:
    with pytest.raises(PyverbsRDMAError) as ex:
        fn(*args)
    return ex.value.error_code


def poll(cq: CQEX) -> dict:
    end = time.monotonic() + 10
    while cq.start_poll(PollCqAttr()) == errno.ENOENT:
        assert time.monotonic() < end, "no completion"
    try:
        out = {"wr_id": cq.wr_id, "status": cq.status, "opcode": cq.read_opcode(), "flags": cq.read_wc_flags(),
               "len": cq.read_byte_len()}
        if cq.wc_flags & e.IBV_WC_EX_WITH_TM_INFO:
            info = cq.read_tm_info()
            out["tag"], out["priv"] = info.tag, info.priv
        return out
    finally:
        cq.end_poll()


class Players:
    def __init__(self, ctx):
        self.pd = PD(ctx)
        flags = e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_TM_INFO
        self.ccq, self.scq = CQEX(ctx, CqInitAttrEx(cqe=64, wc_flags=flags)), CQEX(ctx, CqInitAttrEx(cqe=64,
                                                                                                     wc_flags=flags))
        self.srq = SRQ(ctx, tm_srq_attr(self.pd, self.scq))
        self.client = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.ccq, rcq=self.ccq,
                                             cap=QPCap(max_send_wr=4, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)))
        self.server = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.scq, rcq=self.scq, srq=self.srq,
                                             cap=QPCap(max_send_wr=0, max_recv_wr=0, max_send_sge=0,
                                                       max_recv_sge=0)))
        gid = ctx.query_gid(1, 1)
        for q, peer in ((self.client, self.server), (self.server, self.client)):
            attr = QPAttr()
            attr.qp_access_flags = ACC
            attr.dest_qp_num = peer.qp_num
            attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
            attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
            attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=1), is_global=1, port_num=1)
            q.to_rts(attr)
        self.cmr, self.smr = MR(self.pd, 8192, ACC), MR(self.pd, 8192, ACC)

    def add(self, tag, wr_id, off=0, length=1024):
        wr = OpsWr(wr_id=wr_id, recv_wr_id=wr_id, num_sge=1, tag=tag, mask=0xFFFF,
                   sg_list=[SGE(self.smr.buf + off, length, self.smr.lkey)])
        self.srq.post_srq_ops(wr)
        assert poll(self.scq) == {"wr_id": wr_id, "status": 0, "opcode": e.IBV_WC_TM_ADD, "flags": 0, "len": 0,
                                  "tag": 0, "priv": 0}
        return wr.handle

    def ordinary(self, wr_id, off=4096):
        self.srq.post_recv(RecvWR(wr_id, 1, [SGE(self.smr.buf + off, 1024, self.smr.lkey)]))

    def send(self, data: bytes):
        self.cmr.write(data, len(data))
        self.client.post_send(SendWR(1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(self.cmr.buf, len(data),
                                                                                  self.cmr.lkey)]))
        assert poll(self.ccq)["opcode"] == e.IBV_WC_SEND

    def close(self):
        for o in (self.client, self.server, self.srq, self.scq, self.ccq, self.cmr, self.smr, self.pd):
            o.close()


def test_tm_caps_and_creation_checks(ctx):
    caps = ctx.query_device_ex().tm_caps
    assert caps.flags & e.IBV_TM_CAP_RC and caps.max_num_tags > 0 and caps.max_rndv_hdr_size >= 32
    assert caps.max_ops > 0 and caps.max_sge == 1
    pd = PD(ctx)
    cqex = CQEX(ctx, CqInitAttrEx(wc_flags=e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_TM_INFO))
    cq = CQ(ctx, 8)
    assert errno_of(SRQ, ctx, tm_srq_attr(pd, cq)) == errno.EINVAL                 # mlx5: an extended CQ
    assert errno_of(SRQ, ctx, tm_srq_attr(pd, cqex, mask=TM_MASK & ~e.IBV_SRQ_INIT_ATTR_TM)) == errno.EINVAL
    assert errno_of(SRQ, ctx, tm_srq_attr(pd, cqex, tags=caps.max_num_tags + 1)) == errno.EINVAL
    basic = SRQ(pd, SrqInitAttr(SrqAttr(8)))
    assert errno_of(basic.post_srq_ops, OpsWr(opcode=e.IBV_WR_TAG_SYNC)) == errno.EINVAL   # no tag list
    srq = SRQ(ctx, tm_srq_attr(pd, cqex, tags=1))
    mr = MR(pd, 64, ACC)
    srq.post_srq_ops(OpsWr(wr_id=1, recv_wr_id=1, num_sge=1, sg_list=[SGE(mr.buf, 64, mr.lkey)], tag=1))
    with pytest.raises(PyverbsRDMAError) as ex:
        srq.post_srq_ops(OpsWr(wr_id=2, recv_wr_id=2, num_sge=1, sg_list=[SGE(mr.buf, 64, mr.lkey)], tag=2))
    assert ex.value.error_code == errno.ENOMEM and "post SRQ ops failed." in str(ex.value)
    cqex.close()                                   # the SRQ's CQ first: its list operations go nowhere
    srq.post_srq_ops(OpsWr(wr_id=3, opcode=e.IBV_WR_TAG_SYNC))
    for o in (srq, basic, mr, cq, pd):
        o.close()


def test_eager_unexpected_and_no_tag_traffic(ctx):
    p = Players(ctx)
    try:
        for wr_id in (1, 2, 3):
            p.ordinary(wr_id, off=4096 + 1024 * wr_id)
        h = p.add(tag=7, wr_id=70)
        body = b"e" * 500
        p.send(TMH.pack(e.IBV_TMH_EAGER, 0x42, 7) + body)
        assert poll(p.scq) == {"wr_id": 70, "status": 0, "opcode": e.IBV_WC_TM_RECV,
                               "flags": e.IBV_WC_TM_MATCH | e.IBV_WC_TM_DATA_VALID, "len": 500, "tag": 7,
                               "priv": 0x42}
        assert p.smr.read(500, 0) == body
        dele = OpsWr(wr_id=9, opcode=e.IBV_WR_TAG_DEL, flags=e.IBV_OPS_SIGNALED)
        dele.handle = h
        p.srq.post_srq_ops(dele)
        assert poll(p.scq)["status"] == e.IBV_WC_TM_ERR               # the message consumed the entry
        msg = TMH.pack(e.IBV_TMH_EAGER, 0, 0x1234) + b"u" * 100
        p.send(msg)
        wc = poll(p.scq)
        assert (wc["wr_id"], wc["opcode"], wc["flags"], wc["tag"], wc["len"]) == (1, e.IBV_WC_TM_RECV, 0, 0, 116)
        assert p.smr.read(116, 5120) == msg
        p.srq.post_srq_ops(OpsWr(wr_id=27, opcode=e.IBV_WR_TAG_SYNC, unexpected_cnt=1,
                                 flags=e.IBV_OPS_SIGNALED | e.IBV_OPS_TM_SYNC))
        assert poll(p.scq)["opcode"] == e.IBV_WC_TM_SYNC
        p.send(TMH.pack(e.IBV_TMH_NO_TAG, 0, 5) + b"n" * 10)
        wc = poll(p.scq)
        assert (wc["wr_id"], wc["opcode"], wc["flags"], wc["len"]) == (2, e.IBV_WC_TM_NO_TAG, 0, 26)
    finally:
        p.close()


def test_rendezvous_through_the_daemon(ctx):
    p = Players(ctx)
    try:
        p.add(tag=3, wr_id=30, length=4096)
        data = bytes(range(256)) * 12
        p.cmr.write(data, len(data))                                    # at offset 0 of the client's MR
        p.client.post_recv(RecvWR(77, 1, [SGE(p.cmr.buf + 7000, 64, p.cmr.lkey)]))
        hdr = TMH.pack(e.IBV_TMH_RNDV, 9, 3) + RVH.pack(p.cmr.buf, p.cmr.rkey, len(data))
        p.cmr.write(hdr, len(hdr), 6000)
        p.client.post_send(SendWR(1, opcode=e.IBV_WR_SEND, num_sge=1,
                                  sg=[SGE(p.cmr.buf + 6000, len(hdr), p.cmr.lkey)]))
        assert poll(p.ccq)["opcode"] == e.IBV_WC_SEND
        first = poll(p.scq)
        assert (first["wr_id"], first["flags"], first["tag"], first["priv"]) == (30, e.IBV_WC_TM_MATCH, 3, 9)
        fin = poll(p.ccq)
        assert (fin["wr_id"], fin["opcode"], fin["len"]) == (77, e.IBV_WC_RECV, 16)
        assert p.cmr.read(16, 7000) == TMH.pack(e.IBV_TMH_FIN, 9, 3)
        second = poll(p.scq)
        assert (second["wr_id"], second["flags"], second["len"]) == (30, e.IBV_WC_TM_DATA_VALID, len(data))
        assert p.smr.read(len(data), 0) == data
    finally:
        p.close()
