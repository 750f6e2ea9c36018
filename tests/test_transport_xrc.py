"""XRC in the sans-IO transport (IBA 9.8): an INI QP (IBV_QPT_XRC_SEND)
sends RC's operations with XRC opcodes and the XRCETH naming the remote
SRQ; a TGT QP (IBV_QPT_XRC_RECV) answers as an RC responder whose receive
WQEs, PD and CQ are those of the XRC SRQ each message names -- which must
belong to the TGT QP's XRC domain, else NAK invalid request.  Packets are
carried by hand between the QPs' tx lists."""

from __future__ import annotations

import pytest

from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_EVENT_QP_REQ_ERR, IBV_MTU_1024, IBV_QPS_ERR, IBV_QPS_RTS, IBV_QPT_XRC_RECV, IBV_QPT_XRC_SEND,
    IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD, IBV_WC_RDMA_READ, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM,
    IBV_WC_REM_INV_REQ_ERR, IBV_WC_SUCCESS, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
    IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
    ibv_qp_attr_mask as M, ibv_qp_state as S,
)
from softrdma.errors import VerbsError
from softrdma.transport.cq import CompletionQueue
from softrdma.transport.memory import MemoryTable
from softrdma.transport.qp import QP, SRQ, QPAttr, QPCap
from softrdma.transport.wr import AddressVector, RecvWQE, SendWQE
from softrdma.wire import parse
from softrdma.wire.headers import AETH_ACK_UNLIMITED, AETH_NAK_INVALID_REQ
from softrdma.wire.opcodes import IB_OPCODE_XRC, Opcode

ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
AV = AddressVector(dgid=bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2]))
INI_QPN, TGT_QPN = 0x21, 0x31


class Domain:
    """An XRC domain, as the host keeps one: its identity is all the transport compares."""


def _modify(qp, state, mask, **a):
    qp.modify(QPAttr(qp_state=state, **a), M.IBV_QP_STATE | mask)


def connect_ini(qp, dest, *, psn=100, rpsn=500):
    _modify(qp, S.IBV_QPS_INIT, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, pkey_index=0,
            port_num=1, qp_access_flags=0)
    _modify(qp, S.IBV_QPS_RTR, M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
            ah_attr=AV, path_mtu=IBV_MTU_1024, dest_qp_num=dest, rq_psn=rpsn)
    _modify(qp, S.IBV_QPS_RTS, M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN
            | M.IBV_QP_MAX_QP_RD_ATOMIC, timeout=14, retry_cnt=7, rnr_retry=7, sq_psn=psn, max_rd_atomic=4)


def connect_tgt(qp, dest, *, psn=500, rpsn=100, access=ACC):
    _modify(qp, S.IBV_QPS_INIT, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, pkey_index=0,
            port_num=1, qp_access_flags=access)
    _modify(qp, S.IBV_QPS_RTR, M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
            | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER, ah_attr=AV, path_mtu=IBV_MTU_1024,
            dest_qp_num=dest, rq_psn=rpsn, max_dest_rd_atomic=4, min_rnr_timer=12)
    _modify(qp, S.IBV_QPS_RTS, M.IBV_QP_TIMEOUT | M.IBV_QP_SQ_PSN, timeout=14, sq_psn=psn)


class Xrc:
    """One INI QP (on PD ``ini_pd``) connected to one TGT QP of domain
    ``xrcd``; an XRC SRQ of that domain (``srq``, on PD ``tgt_pd``, CQ
    ``srq_cq``) and one of another domain (``alien``)."""

    def __init__(self, access=ACC):
        self.mem = MemoryTable()
        self.ini_pd, self.tgt_pd = object(), object()
        self.xrcd, self.other = Domain(), Domain()
        self.srqs = {}
        self.srq, self.srq_cq = self._srq(7, self.xrcd)
        self.alien, self.alien_cq = self._srq(8, self.other)
        self.scq = CompletionQueue()
        self.ini = QP(IBV_QPT_XRC_SEND, INI_QPN, pd=self.ini_pd, memory=self.mem, send_cq=self.scq,
                      recv_cq=None, cap=QPCap(max_send_wr=64, max_recv_wr=0, max_recv_sge=0))
        self.tgt = QP(IBV_QPT_XRC_RECV, TGT_QPN, pd=None, memory=self.mem, send_cq=None, recv_cq=None,
                      cap=QPCap(max_send_wr=0, max_recv_wr=0, max_send_sge=0, max_recv_sge=0),
                      xrcd=self.xrcd, xrc_srqs=self.srqs)
        connect_ini(self.ini, TGT_QPN)
        connect_tgt(self.tgt, INI_QPN, access=access)
        self.src = self.mem.reg_mr(self.ini_pd, 1 << 14, ACC)            # the INI side's buffer
        self.dst = self.mem.reg_mr(self.tgt_pd, 1 << 14, ACC)            # on the SRQ's PD
        self.now = 0.0
        self.wire = []                                                   # every packet, parsed

    def _srq(self, num, xrcd):
        srq = SRQ(64, 2)
        srq.srq_num, srq.xrcd, srq.pd, srq.cq = num, xrcd, self.tgt_pd if xrcd is self.xrcd else object(), \
            CompletionQueue()
        self.srqs[num] = srq
        return srq, srq.cq

    def send(self, opcode, length=0, *, srqn=7, **kw) -> SendWQE:
        wqe = SendWQE(len(self.wire), opcode, [(self.src.addr, length, self.src.lkey)] if length else [],
                      send_flags=2, remote_qpn=srqn, **kw)
        self.ini.post_send(wqe, self.now)
        return wqe

    def pump(self, *, drop=None) -> None:
        """Carry packets both ways until both tx lists stay empty."""
        moved = True
        while moved:
            moved = False
            for src, dst in ((self.ini, self.tgt), (self.tgt, self.ini)):
                while src.tx:
                    _, buf, _ = src.tx.pop(0)
                    pkt = parse(bytes(buf))
                    self.wire.append(pkt)
                    moved = True
                    if drop is not None and drop(pkt):
                        continue
                    dst.receive(bytes(buf), self.now)


def test_qp_types_and_opcode_class():
    x = Xrc()
    assert x.ini.opclass == x.tgt.opclass == IB_OPCODE_XRC
    assert x.ini.state == x.tgt.state == IBV_QPS_RTS
    with pytest.raises(VerbsError):                 # a TGT QP has no send queue
        x.tgt.post_send(SendWQE(1, IBV_WR_SEND))
    with pytest.raises(VerbsError):                 # receives go to the XRC SRQ
        x.ini.post_recv(RecvWQE(1, []))
    with pytest.raises(VerbsError):                 # a TGT QP needs its domain
        QP(IBV_QPT_XRC_RECV, 5, pd=None, memory=x.mem, send_cq=None, recv_cq=None)


def test_modify_masks_are_the_kernels():
    """INI's RTR has no responder attributes, TGT's RTS no requester ones:
    each refuses the other's (ib_modify_qp_is_ok)."""
    x = Xrc()
    ini = QP(IBV_QPT_XRC_SEND, 0x40, pd=x.ini_pd, memory=x.mem, send_cq=x.scq, recv_cq=None)
    _modify(ini, S.IBV_QPS_INIT, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, pkey_index=0,
            port_num=1, qp_access_flags=0)
    with pytest.raises(VerbsError, match="does not accept"):
        _modify(ini, S.IBV_QPS_RTR, M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
                | M.IBV_QP_MAX_DEST_RD_ATOMIC, ah_attr=AV, path_mtu=IBV_MTU_1024, dest_qp_num=1, rq_psn=0,
                max_dest_rd_atomic=1)
    tgt = QP(IBV_QPT_XRC_RECV, 0x41, pd=None, memory=x.mem, send_cq=None, recv_cq=None, xrcd=x.xrcd,
             xrc_srqs=x.srqs)
    _modify(tgt, S.IBV_QPS_INIT, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, pkey_index=0,
            port_num=1, qp_access_flags=ACC)
    with pytest.raises(VerbsError, match="needs"):  # TGT's RTR needs MAX_DEST_RD_ATOMIC and MIN_RNR_TIMER
        _modify(tgt, S.IBV_QPS_RTR, M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
                ah_attr=AV, path_mtu=IBV_MTU_1024, dest_qp_num=1, rq_psn=0)
    _modify(tgt, S.IBV_QPS_RTR, M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
            | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER, ah_attr=AV, path_mtu=IBV_MTU_1024,
            dest_qp_num=1, rq_psn=0, max_dest_rd_atomic=1, min_rnr_timer=1)
    with pytest.raises(VerbsError, match="does not accept"):
        _modify(tgt, S.IBV_QPS_RTS, M.IBV_QP_TIMEOUT | M.IBV_QP_SQ_PSN | M.IBV_QP_RETRY_CNT, timeout=1,
                sq_psn=0, retry_cnt=1)


def test_send_lands_in_the_named_srq_with_its_pd_and_cq():
    x = Xrc()
    x.srq.post_recv(RecvWQE(77, [(x.dst.addr, 4096, x.dst.lkey)]))
    x.src.write(bytes(range(256)) * 10)
    x.send(IBV_WR_SEND_WITH_IMM, 2560, imm_data=0xA1B2C3D4)      # 3 packets at MTU 1024
    x.pump()
    reqs = [p for p in x.wire if p.info.mask & 1 << 10]
    assert [p.opcode for p in reqs] == [Opcode.XRC_SEND_FIRST, Opcode.XRC_SEND_MIDDLE,
                                        Opcode.XRC_SEND_LAST_WITH_IMMEDIATE]
    assert {p.xrceth for p in reqs} == {7}
    acks = [p for p in x.wire if p.opcode == Opcode.XRC_ACKNOWLEDGE]
    assert acks and acks[-1].aeth.syndrome == AETH_ACK_UNLIMITED
    (wc,) = x.srq_cq.poll(100)
    assert (wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.qp_num, wc.src_qp, wc.imm_data) == \
        (77, IBV_WC_SUCCESS, IBV_WC_RECV, 2560, TGT_QPN, INI_QPN, 0xA1B2C3D4)
    assert x.dst.read(2560) == bytes(range(256)) * 10
    (swc,) = x.scq.poll(100)
    assert swc.status == IBV_WC_SUCCESS and swc.qp_num == INI_QPN
    assert not x.alien_cq.poll(100)


def test_write_read_and_atomics_through_the_tgt_qp():
    x = Xrc()
    x.src.write(b"\x11" * 64)
    x.srq.post_recv(RecvWQE(5, [(x.dst.addr, 16, x.dst.lkey)]))
    x.send(IBV_WR_RDMA_WRITE_WITH_IMM, 64, remote_addr=x.dst.addr + 64, rkey=x.dst.rkey, imm_data=9)
    x.pump()
    assert x.dst.read(64, 64) == b"\x11" * 64
    (wc,) = x.srq_cq.poll(100)
    assert (wc.wr_id, wc.opcode, wc.qp_num) == (5, IBV_WC_RECV_RDMA_WITH_IMM, TGT_QPN)
    x.dst.write(b"\x22" * 32, 256)
    x.send(IBV_WR_RDMA_READ, 32, remote_addr=x.dst.addr + 256, rkey=x.dst.rkey)
    x.pump()
    assert x.src.read(32) == b"\x22" * 32
    x.dst.write((5).to_bytes(8, "little"), 512)
    x.send(IBV_WR_ATOMIC_FETCH_AND_ADD, 8, remote_addr=x.dst.addr + 512, rkey=x.dst.rkey, compare_add=3)
    x.pump()
    assert int.from_bytes(x.dst.read(8, 512), "little") == 8 and int.from_bytes(x.src.read(8), "little") == 5
    x.send(IBV_WR_ATOMIC_CMP_AND_SWP, 8, remote_addr=x.dst.addr + 512, rkey=x.dst.rkey, compare_add=8, swap=42)
    x.pump()
    assert int.from_bytes(x.dst.read(8, 512), "little") == 42
    wcs = x.scq.poll(100)
    assert [w.opcode for w in wcs][1:] == [IBV_WC_RDMA_READ, IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP]
    assert all(w.status == IBV_WC_SUCCESS for w in wcs)
    ops = {p.opcode for p in x.wire}
    assert {Opcode.XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, Opcode.XRC_RDMA_READ_REQUEST,
            Opcode.XRC_RDMA_READ_RESPONSE_ONLY, Opcode.XRC_FETCH_ADD, Opcode.XRC_COMPARE_SWAP,
            Opcode.XRC_ATOMIC_ACKNOWLEDGE} <= ops
    assert all(p.opcode & 0xE0 == IB_OPCODE_XRC for p in x.wire)


def test_remote_access_is_checked_against_the_srqs_pd():
    """The rkey of an MR on the INI side's PD is not valid through the TGT QP:
    the SRQ's PD decides (remote access error)."""
    x = Xrc()
    x.send(IBV_WR_RDMA_READ, 8, remote_addr=x.src.addr, rkey=x.src.rkey)
    x.pump()
    (wc,) = x.scq.poll(100)
    assert wc.status != IBV_WC_SUCCESS
    assert x.tgt.state == IBV_QPS_ERR


@pytest.mark.parametrize("srqn", [8, 1234])
def test_srq_of_another_domain_or_none_is_nak_invalid_request(srqn):
    x = Xrc()
    x.alien.post_recv(RecvWQE(1, [(x.dst.addr, 64, x.dst.lkey)]))
    x.send(IBV_WR_SEND, 16, srqn=srqn)
    x.pump()
    naks = [p for p in x.wire if p.opcode == Opcode.XRC_ACKNOWLEDGE]
    assert [n.aeth.syndrome for n in naks] == [AETH_NAK_INVALID_REQ]
    (wc,) = x.scq.poll(100)
    assert wc.status == IBV_WC_REM_INV_REQ_ERR
    assert x.tgt.state == IBV_QPS_ERR and (IBV_EVENT_QP_REQ_ERR, x.tgt) in x.tgt.events
    assert len(x.alien.rq) == 1 and not x.alien_cq.poll(100)        # nothing taken from the other domain


def test_rnr_when_the_named_srq_is_empty_then_retry():
    x = Xrc()
    x.send(IBV_WR_SEND, 16)
    x.pump()
    assert [p.aeth.syndrome >> 5 for p in x.wire if p.opcode == Opcode.XRC_ACKNOWLEDGE] == [1]   # RNR NAK
    x.srq.post_recv(RecvWQE(3, [(x.dst.addr, 64, x.dst.lkey)]))
    x.now = 1.0
    x.ini.tick(x.now)
    x.pump()
    (wc,) = x.srq_cq.poll(100)
    assert wc.wr_id == 3 and wc.status == IBV_WC_SUCCESS


def test_foreign_srq_after_a_sequence_nak_is_still_invalid():
    """The in-sequence packet after a PSN-sequence NAK names an SRQ of another
    domain: NAK invalid request -- never a receive WQE of the SRQ the last
    message used."""
    from softrdma.wire import build
    x = Xrc()
    x.srq.post_recv(RecvWQE(1, [(x.dst.addr, 64, x.dst.lkey)]))
    x.srq.post_recv(RecvWQE(2, [(x.dst.addr, 64, x.dst.lkey)]))
    x.send(IBV_WR_SEND, 8)
    x.pump()
    assert [w.wr_id for w in x.srq_cq.poll(4)] == [1]
    epsn = x.tgt.resp_psn
    x.tgt.receive(build(Opcode.XRC_SEND_ONLY, TGT_QPN, (epsn + 3) & 0xFFFFFF, b"late", xrceth=7, ackreq=True), 0.0)
    x.tgt.receive(build(Opcode.XRC_SEND_ONLY, TGT_QPN, epsn, b"evil", xrceth=8, ackreq=True), 0.0)
    naks = [parse(bytes(b)).aeth.syndrome for _, b, _ in x.tgt.tx]
    assert naks == [0x60, AETH_NAK_INVALID_REQ]              # sequence NAK, then invalid request
    assert x.tgt.state == IBV_QPS_ERR
    assert [w.wr_id for w in x.srq.rq] == [2] and not x.srq_cq.poll(4)
