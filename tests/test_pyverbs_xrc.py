"""XRC through a real softrdmad with pyverbs' API: XRC domains opened
through a file and shared between processes (ib_uverbs_open_xrcd's inode
rules), XRC SRQs and their numbers, INI and TGT QPs, sends, RDMA and
atomics whose receive side is the SRQ the XRCETH names, and the NAK a TGT
QP answers with when that SRQ is of another domain."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from daemon_helpers import default_daemon_in_shm, poll_wcs, resources
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttrEx
from softrdma.pyverbs.srq import SRQ, SrqInitAttrEx
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR
from softrdma.pyverbs.xrcd import XRCD, XRCDInitAttr

HERE = os.path.dirname(os.path.abspath(__file__))
GID_INDEX = 1                     # on lo: ::ffff:127.0.0.1
ACC = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC
XRCD_MASK = e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("pvxrc") as d:
        yield d


@pytest.fixture
def ctx(daemon):
    c = Context(name="rxe0")
    yield c
    c.close()


def conn_attr(ctx, dest: int, psn: int = 0) -> QPAttr:
    a = QPAttr(port_num=1)
    a.qp_access_flags = ACC
    a.dest_qp_num, a.rq_psn, a.sq_psn = dest, psn, psn
    a.max_dest_rd_atomic = a.max_rd_atomic = 4
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 1, 14, 7, 7
    a.ah_attr = AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, GID_INDEX), sgid_index=GID_INDEX), is_global=1,
                       port_num=1)
    return a


def xrc_srq(ctx, pd, xrcd, cq, max_wr=16) -> SRQ:
    a = SrqInitAttrEx(max_wr=max_wr)
    a.srq_type, a.pd, a.xrcd, a.cq = e.IBV_SRQT_XRC, pd, xrcd, cq
    a.comp_mask = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_CQ \
        | e.IBV_SRQ_INIT_ATTR_XRCD
    return SRQ(ctx, a)


def ini_qp(ctx, pd, cq, cls=QP, **kw) -> QP:
    return cls(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_SEND, pd=pd, scq=cq, sq_sig_all=1,
                                 cap=QPCap(max_send_wr=16, max_recv_wr=0, max_recv_sge=0),
                                 comp_mask=e.IBV_QP_INIT_ATTR_PD | kw.pop("mask", 0), **kw), QPAttr(port_num=1))


def tgt_qp(ctx, xrcd) -> QP:
    a = QPAttr(port_num=1)
    a.qp_access_flags = ACC
    return QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=xrcd), a)


def test_two_processes_share_an_xrcd_through_a_file(ctx, daemon, tmp_path):
    """This process opens the domain with O_CREAT and puts its SRQ in it;
    another opens the same file's domain without O_CREAT (which finds only an
    existing one) and creates the TGT QP.  Sends to that QP land in this
    process's SRQ and CQ."""
    path = str(tmp_path / "xrcd")
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o400)
    xrcd = XRCD(ctx, XRCDInitAttr(XRCD_MASK, os.O_CREAT, fd))
    pd, cq = PD(ctx), CQ(ctx, 64)
    mr = MR(pd, 4096, ACC)
    srq = xrc_srq(ctx, pd, xrcd, cq)
    srqn = srq.get_srq_num()
    for i in range(4):
        srq.post_recv(RecvWR(wr_id=100 + i, num_sge=1, sg=[SGE(mr.buf + 256 * i, 256, mr.lkey)]))
    ini = ini_qp(ctx, pd, cq)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "pyverbs_programs", "xrc_tgt.py"), path],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(daemon.env))
    try:
        tgt = json.loads(proc.stdout.readline())["tgt"]
        ini.to_rts(conn_attr(ctx, tgt, psn=0))
        proc.stdin.write(json.dumps({"ini": ini.qp_num, "psn": 0}) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"ready": True, "state": e.IBV_QPS_RTS}
        src = MR(pd, 256, ACC)
        for i in range(3):
            src.write(bytes([0x41 + i]) * 200, 200)
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src.buf, 200, src.lkey)])
            wr.set_qp_type_xrc(srqn)
            ini.post_send(wr)
            got = poll_wcs(cq, 2)
            assert sorted(w.status for w in got) == [e.IBV_WC_SUCCESS] * 2, got
            recv = next(w for w in got if w.opcode == e.IBV_WC_RECV)
            send = next(w for w in got if w.opcode == e.IBV_WC_SEND)
            assert (recv.wr_id, recv.qp_num, recv.src_qp, recv.byte_len) == (100 + i, tgt, ini.qp_num, 200)
            assert (send.wr_id, send.qp_num) == (i, ini.qp_num)
            assert mr.read(200, 256 * i) == bytes([0x41 + i]) * 200
    finally:
        proc.stdin.write("done\n")
        proc.stdin.flush()
        assert proc.wait(60) == 0
    # the file's domain is still this process's (its open holds it): O_EXCL is refused ...
    with pytest.raises(PyverbsRDMAError) as ex:
        XRCD(ctx, XRCDInitAttr(XRCD_MASK, os.O_CREAT | os.O_EXCL, fd))
    assert ex.value.error_code == errno.EINVAL
    # ... and a second open finds it
    XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, fd)).close()
    xrcd.close()
    assert srq.closed and ini.pd is pd           # closing the domain closed its SRQ
    # every open is gone: without O_CREAT, nothing to find
    with pytest.raises(PyverbsRDMAError) as ex:
        XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, fd))
    assert ex.value.error_code == errno.EAGAIN and str(ex.value).startswith("Failed to allocate XRCD")
    os.close(fd)


def test_rdma_atomics_and_qpex_through_a_tgt_qp(ctx, daemon):
    """A private domain (fd -1): WRITE, READ and FETCH_ADD reach the SRQ's
    PD's memory through the TGT QP; QPEx's wr_set_xrc_srqn names the SRQ of
    a send with immediate."""
    xrcd = XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, -1))
    pd, cq = PD(ctx), CQ(ctx, 64)
    dst, src = MR(pd, 4096, ACC), MR(pd, 4096, ACC)
    srq = xrc_srq(ctx, pd, xrcd, cq)
    tgt = tgt_qp(ctx, xrcd)
    ini = ini_qp(ctx, pd, cq, QPEx, mask=e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                 send_ops_flags=e.IBV_QP_EX_WITH_SEND_WITH_IMM | e.IBV_QP_EX_WITH_RDMA_WRITE)
    ini.to_rts(conn_attr(ctx, tgt.qp_num, 7))
    tgt.to_rts(conn_attr(ctx, ini.qp_num, 7))
    src.write(b"w" * 128, 128)
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 64, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf + 1024)
    wr.set_qp_type_xrc(srq.get_srq_num())
    ini.post_send(wr)
    assert [w.status for w in poll_wcs(cq, 1)] == [e.IBV_WC_SUCCESS]
    assert dst.read(64, 1024) == b"w" * 64
    dst.write((40).to_bytes(8, "little"), 8, 2048)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(src.buf, 8, src.lkey)])
    wr.set_wr_atomic(dst.rkey, dst.buf + 2048, 2)
    wr.set_qp_type_xrc(srq.get_srq_num())
    ini.post_send(wr)
    (wc,) = poll_wcs(cq, 1)
    assert (wc.status, wc.opcode) == (e.IBV_WC_SUCCESS, e.IBV_WC_FETCH_ADD)
    assert int.from_bytes(dst.read(8, 2048), "little") == 42 and int.from_bytes(src.read(8, 0), "little") == 40
    srq.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(dst.buf, 64, dst.lkey)]))
    ini.wr_start()
    ini.wr_id, ini.wr_flags = 3, e.IBV_SEND_SIGNALED
    ini.wr_send_imm(0x12345678)
    ini.wr_set_sge(SGE(src.buf + 64, 16, src.lkey))
    ini.wr_set_xrc_srqn(srq.get_srq_num())
    ini.wr_complete()
    got = poll_wcs(cq, 2)
    recv = next(w for w in got if w.opcode == e.IBV_WC_RECV)
    assert (recv.wr_id, recv.status, recv.qp_num, recv.byte_len, recv.wc_flags & e.IBV_WC_WITH_IMM) == \
        (9, e.IBV_WC_SUCCESS, tgt.qp_num, 16, e.IBV_WC_WITH_IMM)
    assert dst.read(16) == b"w" * 16
    qps = {r["lqpn"]: r for r in resources(daemon.run_dir) if r["kind"] == "qp"}
    assert (qps[ini.qp_num]["type"], qps[tgt.qp_num]["type"]) == (e.IBV_QPT_XRC_SEND, e.IBV_QPT_XRC_RECV)
    assert qps[tgt.qp_num]["state"] == e.IBV_QPS_RTS
    xrcd.close()
    assert tgt.closed and srq.closed


def test_srq_of_another_domain_is_a_remote_invalid_request(ctx):
    """Two private domains are two domains: a send naming the SRQ of the
    other one is NAKed invalid request -- IBV_WC_REM_INV_REQ_ERR at the
    sender, the TGT QP in ERR, the SRQ untouched."""
    mine, other = XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, -1)), XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, -1))
    pd, cq, scq = PD(ctx), CQ(ctx, 64), CQ(ctx, 64)
    mr = MR(pd, 4096, ACC)
    foreign = xrc_srq(ctx, pd, other, cq)
    foreign.post_recv(RecvWR(wr_id=5, num_sge=1, sg=[SGE(mr.buf, 64, mr.lkey)]))
    tgt = tgt_qp(ctx, mine)
    ini = ini_qp(ctx, pd, scq)
    ini.to_rts(conn_attr(ctx, tgt.qp_num))
    tgt.to_rts(conn_attr(ctx, ini.qp_num))
    wr = SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf + 64, 8, mr.lkey)])
    wr.set_qp_type_xrc(foreign.get_srq_num())
    ini.post_send(wr)
    (wc,) = poll_wcs(scq, 1)
    assert wc.status == e.IBV_WC_REM_INV_REQ_ERR
    assert tgt.qp_state == e.IBV_QPS_ERR
    assert cq.poll(4)[0] == 0                    # nothing was taken from the other domain's SRQ


def test_api_refusals(ctx, tmp_path):
    pd, cq = PD(ctx), CQ(ctx, 8)
    attr = SrqInitAttrEx(max_wr=4)
    attr.comp_mask, attr.pd = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD, pd
    basic = SRQ(ctx, attr)
    with pytest.raises(PyverbsRDMAError) as ex:          # a basic SRQ has no number to give
        basic.get_srq_num()
    assert ex.value.error_code == errno.EOPNOTSUPP
    for mask, code in ((e.IBV_XRCD_INIT_ATTR_FD, errno.EINVAL), (XRCD_MASK | 4, errno.EOPNOTSUPP)):
        with pytest.raises(PyverbsRDMAError) as ex:
            XRCD(ctx, XRCDInitAttr(mask, 0, -1))
        assert ex.value.error_code == code
    fd = os.open(str(tmp_path / "f"), os.O_RDONLY | os.O_CREAT, 0o400)
    os.close(fd)
    with pytest.raises(PyverbsRDMAError) as ex:          # a closed fd
        XRCD(ctx, XRCDInitAttr(XRCD_MASK, os.O_CREAT, fd))
    assert ex.value.error_code == errno.EBADF
    xrcd = XRCD(ctx, XRCDInitAttr(XRCD_MASK, 0, -1))
    no_cq = SrqInitAttrEx(max_wr=4)
    no_cq.srq_type, no_cq.pd, no_cq.xrcd = e.IBV_SRQT_XRC, pd, xrcd
    no_cq.comp_mask = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD | e.IBV_SRQ_INIT_ATTR_XRCD
    with pytest.raises(PyverbsRDMAError) as ex:
        SRQ(ctx, no_cq)
    assert ex.value.error_code == errno.EINVAL
    tgt = tgt_qp(ctx, xrcd)
    tgt.to_rts(conn_attr(ctx, 0x99))
    with pytest.raises(PyverbsRDMAError) as ex:          # a TGT QP has no send queue
        tgt.post_send(SendWR())
    assert ex.value.error_code == errno.EINVAL
    srq, other = xrc_srq(ctx, pd, xrcd, cq), xrc_srq(ctx, pd, xrcd, cq)
    assert srq.get_srq_num() != other.get_srq_num()
    cq.close()                                           # a CQ closes the XRC SRQs completing into it
    assert srq.closed and other.closed and not xrcd.closed
