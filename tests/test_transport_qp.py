"""softrdma.transport: the QP state machine and verbs checks, segmentation,
every opcode end to end through the simulator, SRQ, UC, UD and SQD.

Expectations are written from the IBA / libibverbs / the Linux kernel
(ib_modify_qp_is_ok's qp_state_table, rxe), not derived from the module
under test: ``SPEC_TABLE`` below is a hand copy of the kernel's table.
"""

from __future__ import annotations

import errno
import os

import pytest

from softrdma.enums import (
    IBV_EVENT_SQ_DRAINED, IBV_EVENT_SRQ_LIMIT_REACHED, IBV_MTU_256, IBV_MTU_1024,
    IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WC_COMP_SWAP,
    IBV_WC_FETCH_ADD, IBV_WC_GRH, IBV_WC_LOCAL_INV, IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE,
    IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_SEND, IBV_WC_SUCCESS, IBV_WC_WITH_IMM,
    IBV_WC_WITH_INV, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_TSO,
    IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
    IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_INV, mtu_to_bytes,
)
from softrdma.enums import ibv_qp_attr_mask as M
from softrdma.enums import ibv_qp_state as S
from softrdma.errors import VerbsError
from softrdma.transport.counters import Counter as C
from softrdma.transport.qp import QPAttr, QPCap
from softrdma.transport.wr import AddressVector, RecvWQE, SendWQE
from softrdma.wire.opcodes import Opcode

from transport_helpers import ALL_ACCESS, PEER_QPN, QKEY, Pair, Solo, bring_up, new_qp, p64, tap, u64

RESET, INIT, RTR, RTS, SQD, SQE, ERR = (S.IBV_QPS_RESET, S.IBV_QPS_INIT, S.IBV_QPS_RTR,
                                        S.IBV_QPS_RTS, S.IBV_QPS_SQD, S.IBV_QPS_SQE, S.IBV_QPS_ERR)
RC, UC, UD = IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD
QP_TYPES = [RC, UC, UD]
STATES = [RESET, INIT, RTR, RTS, SQD, SQE, ERR]

# ---------------------------------------------------------------- the table
# drivers/infiniband/core/verbs.c qp_state_table, RC/UC/UD columns, by hand.
_RTS_OPT = {UD: M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY,
            UC: M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE,
            RC: M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE
            | M.IBV_QP_MIN_RNR_TIMER}
SPEC_TABLE = {
    (RESET, RESET): {t: (0, 0) for t in QP_TYPES},
    (RESET, INIT): {UD: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY, 0),
                    UC: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, 0),
                    RC: (M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS, 0)},
    (INIT, RESET): {t: (0, 0) for t in QP_TYPES},
    (INIT, ERR): {t: (0, 0) for t in QP_TYPES},
    (INIT, INIT): {UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY),
                   UC: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS),
                   RC: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS)},
    (INIT, RTR): {UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_QKEY),
                  UC: (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN,
                       M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX),
                  RC: (M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN
                       | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER,
                       M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX)},
    (RTR, RESET): {t: (0, 0) for t in QP_TYPES},
    (RTR, ERR): {t: (0, 0) for t in QP_TYPES},
    (RTR, RTS): {UD: (M.IBV_QP_SQ_PSN, M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY),
                 UC: (M.IBV_QP_SQ_PSN, M.IBV_QP_CUR_STATE | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS
                      | M.IBV_QP_PATH_MIG_STATE),
                 RC: (M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN
                      | M.IBV_QP_MAX_QP_RD_ATOMIC,
                      M.IBV_QP_CUR_STATE | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS
                      | M.IBV_QP_MIN_RNR_TIMER | M.IBV_QP_PATH_MIG_STATE)},
    (RTS, RESET): {t: (0, 0) for t in QP_TYPES},
    (RTS, ERR): {t: (0, 0) for t in QP_TYPES},
    (RTS, RTS): {t: (0, o) for t, o in _RTS_OPT.items()},
    (RTS, SQD): {t: (0, M.IBV_QP_EN_SQD_ASYNC_NOTIFY) for t in QP_TYPES},
    (SQD, RESET): {t: (0, 0) for t in QP_TYPES},
    (SQD, ERR): {t: (0, 0) for t in QP_TYPES},
    (SQD, RTS): {t: (0, o) for t, o in _RTS_OPT.items()},
    (SQD, SQD): {UD: (0, M.IBV_QP_PKEY_INDEX | M.IBV_QP_QKEY),
                 UC: (0, M.IBV_QP_AV | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX
                      | M.IBV_QP_PATH_MIG_STATE),
                 RC: (0, M.IBV_QP_PORT | M.IBV_QP_AV | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT
                      | M.IBV_QP_RNR_RETRY | M.IBV_QP_MAX_QP_RD_ATOMIC | M.IBV_QP_MAX_DEST_RD_ATOMIC
                      | M.IBV_QP_ALT_PATH | M.IBV_QP_ACCESS_FLAGS | M.IBV_QP_PKEY_INDEX
                      | M.IBV_QP_MIN_RNR_TIMER | M.IBV_QP_PATH_MIG_STATE)},
    (SQE, RESET): {t: (0, 0) for t in QP_TYPES},
    (SQE, ERR): {t: (0, 0) for t in QP_TYPES},
    (SQE, RTS): {UD: (0, M.IBV_QP_CUR_STATE | M.IBV_QP_QKEY),
                 UC: (0, M.IBV_QP_CUR_STATE | M.IBV_QP_ACCESS_FLAGS),
                 RC: (0, 0)},
    (ERR, RESET): {t: (0, 0) for t in QP_TYPES},
    (ERR, ERR): {t: (0, 0) for t in QP_TYPES},
}
ATTR_BITS = [M.IBV_QP_CUR_STATE, M.IBV_QP_EN_SQD_ASYNC_NOTIFY, M.IBV_QP_ACCESS_FLAGS,
             M.IBV_QP_PKEY_INDEX, M.IBV_QP_PORT, M.IBV_QP_QKEY, M.IBV_QP_AV, M.IBV_QP_PATH_MTU,
             M.IBV_QP_TIMEOUT, M.IBV_QP_RETRY_CNT, M.IBV_QP_RNR_RETRY, M.IBV_QP_RQ_PSN,
             M.IBV_QP_MAX_QP_RD_ATOMIC, M.IBV_QP_ALT_PATH, M.IBV_QP_MIN_RNR_TIMER, M.IBV_QP_SQ_PSN,
             M.IBV_QP_MAX_DEST_RD_ATOMIC, M.IBV_QP_PATH_MIG_STATE, M.IBV_QP_CAP, M.IBV_QP_DEST_QPN,
             M.IBV_QP_RATE_LIMIT]
APM = M.IBV_QP_ALT_PATH | M.IBV_QP_PATH_MIG_STATE      # RoCE: no APM (EOPNOTSUPP)


def full_attr(new, cur) -> QPAttr:
    """An attr with a valid value in every field."""
    return QPAttr(qp_state=new, cur_qp_state=cur, path_mtu=IBV_MTU_1024, qkey=QKEY, rq_psn=5,
                  sq_psn=7, dest_qp_num=PEER_QPN, qp_access_flags=ALL_ACCESS,
                  ah_attr=AddressVector(dgid=bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 2])),
                  pkey_index=0, en_sqd_async_notify=1, max_rd_atomic=4, max_dest_rd_atomic=4,
                  min_rnr_timer=12, port_num=1, timeout=14, retry_cnt=7, rnr_retry=7)


def qp_in(qp_type, state):
    qp = new_qp(qp_type)
    if state == RESET:
        return qp
    if state == SQE:                      # only the device enters SQE; put it there by hand
        bring_up(qp, RTS)
        qp.state = qp.attr.qp_state = SQE
        return qp
    bring_up(qp, state)
    return qp


def mask_for(qp_type, cur, new, extra=0, drop=0):
    req, opt = SPEC_TABLE[(cur, new)][qp_type]
    return (M.IBV_QP_STATE | req | (opt & ~APM) | extra) & ~drop


def _einval(fn, *a):
    with pytest.raises(VerbsError) as ei:
        fn(*a)
    assert ei.value.errno == errno.EINVAL, ei.value
    return ei.value


# ================================================================ state machine
@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_every_valid_transition_with_required_and_optional_attrs(qp_type):
    for (cur, new) in SPEC_TABLE:
        for extra_opt in (False, True):
            qp = qp_in(qp_type, cur)
            req, opt = SPEC_TABLE[(cur, new)][qp_type]
            mask = M.IBV_QP_STATE | req | ((opt & ~APM) if extra_opt else 0)
            qp.modify(full_attr(new, cur), mask)
            assert qp.state == new, (S(cur).name, S(new).name, extra_opt)
            assert qp.query().qp_state == new


@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_missing_required_attr_is_einval(qp_type):
    n = 0
    for (cur, new), rule in SPEC_TABLE.items():
        req = rule[qp_type][0]
        for bit in ATTR_BITS:
            if not req & bit:
                continue
            qp = qp_in(qp_type, cur)
            _einval(qp.modify, full_attr(new, cur), mask_for(qp_type, cur, new, drop=bit))
            assert qp.state == cur
            n += 1
    assert n >= 2


@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_attr_not_allowed_is_einval(qp_type):
    for (cur, new), rule in SPEC_TABLE.items():
        if cur == SQE and qp_type == RC:
            continue                     # an RC QP never enters SQE (only UD/UC do)
        req, opt = rule[qp_type]
        for bit in ATTR_BITS:
            if (req | opt) & bit:
                continue
            qp = qp_in(qp_type, cur)
            err = None
            try:
                qp.modify(full_attr(new, cur), mask_for(qp_type, cur, new, extra=bit))
            except VerbsError as e:
                err = e
            assert err is not None and err.errno == errno.EINVAL, (S(cur).name, S(new).name, M(bit))
            assert qp.state == cur


@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_invalid_transitions_are_einval(qp_type):
    checked = set()
    for cur in STATES:
        for new in STATES:
            if (cur, new) in SPEC_TABLE or (cur, new) == (RESET, ERR):
                continue                       # RESET->ERR: its own test below
            qp = qp_in(qp_type, cur)
            # give every attribute: the transition itself must be refused
            mask = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT
            _einval(qp.modify, full_attr(new, cur), mask)
            _einval(qp.modify, full_attr(new, cur), M.IBV_QP_STATE)
            assert qp.state == cur
            checked.add((cur, new))
    for must in [(RESET, RTR), (RESET, RTS), (INIT, RTS), (RTR, SQD), (RTR, RTR), (ERR, RTS),
                 (ERR, INIT), (SQD, RTR), (RTS, INIT), (RTS, RTR), (INIT, SQD), (RTS, SQE)]:
        assert must in checked


@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_reset_to_err_is_invalid_as_in_ib_modify_qp_is_ok(qp_type):
    # qp_state_table[IB_QPS_RESET] has only RESET and INIT: RESET->ERR is refused.
    qp = qp_in(qp_type, RESET)
    _einval(qp.modify, QPAttr(qp_state=ERR), M.IBV_QP_STATE)
    assert qp.state == RESET


@pytest.mark.parametrize("qp_type", QP_TYPES, ids=["RC", "UC", "UD"])
def test_any_state_to_reset_and_to_err(qp_type):
    for cur in (INIT, RTR, RTS, SQD, SQE, ERR):
        for new in (RESET, ERR):
            qp = qp_in(qp_type, cur)
            qp.modify(QPAttr(qp_state=new), M.IBV_QP_STATE)
            assert qp.state == new
    qp = qp_in(qp_type, RESET)
    qp.modify(QPAttr(qp_state=RESET), M.IBV_QP_STATE)
    assert qp.state == RESET


@pytest.mark.parametrize("field,value,cur,new,bit", [
    ("path_mtu", 6, INIT, RTR, M.IBV_QP_PATH_MTU),
    ("path_mtu", 0, INIT, RTR, M.IBV_QP_PATH_MTU),
    ("retry_cnt", 8, RTR, RTS, M.IBV_QP_RETRY_CNT),
    ("rnr_retry", 8, RTR, RTS, M.IBV_QP_RNR_RETRY),
    ("timeout", 32, RTR, RTS, M.IBV_QP_TIMEOUT),
    ("max_rd_atomic", 129, RTR, RTS, M.IBV_QP_MAX_QP_RD_ATOMIC),
    ("max_dest_rd_atomic", 129, INIT, RTR, M.IBV_QP_MAX_DEST_RD_ATOMIC),
    ("min_rnr_timer", 32, INIT, RTR, M.IBV_QP_MIN_RNR_TIMER),
    ("port_num", 2, RESET, INIT, M.IBV_QP_PORT),
    ("port_num", 0, RESET, INIT, M.IBV_QP_PORT),
    ("pkey_index", 1, RESET, INIT, M.IBV_QP_PKEY_INDEX),
])
def test_attribute_value_checks_are_einval(field, value, cur, new, bit):
    qp = qp_in(RC, cur)
    before = vars(qp.query()).copy() if hasattr(qp.query(), "__dict__") else None
    attr = full_attr(new, cur)
    setattr(attr, field, value)
    _einval(qp.modify, attr, mask_for(RC, cur, new))
    assert qp.state == cur
    if before is not None:                 # nothing applied (modify is atomic)
        assert getattr(qp.query(), field) == before[field]
    # the same attribute with a valid value goes through
    qp.modify(full_attr(new, cur), mask_for(RC, cur, new))
    assert qp.state == new


def test_av_without_grh_is_einval_on_roce():
    qp = qp_in(RC, INIT)
    attr = full_attr(RTR, INIT)
    attr.ah_attr = AddressVector(is_global=False)
    _einval(qp.modify, attr, mask_for(RC, INIT, RTR))


@pytest.mark.parametrize("cur,new", [(INIT, RTR), (RTR, RTS), (RTS, RTS)])
def test_alt_path_is_eopnotsupp(cur, new):
    qp = qp_in(RC, cur)
    with pytest.raises(VerbsError) as ei:
        qp.modify(full_attr(new, cur), mask_for(RC, cur, new, extra=M.IBV_QP_ALT_PATH))
    assert ei.value.errno == errno.EOPNOTSUPP
    assert qp.state == cur


def test_cur_state_mismatch_is_einval():
    qp = qp_in(RC, RTS)
    _einval(qp.modify, full_attr(RTS, RTR), M.IBV_QP_STATE | M.IBV_QP_CUR_STATE)
    qp.modify(full_attr(RTS, RTS), M.IBV_QP_STATE | M.IBV_QP_CUR_STATE)
    assert qp.state == RTS


def test_post_send_and_recv_in_reset_are_einval():
    s = Solo()
    qp = s.qp
    qp.modify(QPAttr(qp_state=RESET), M.IBV_QP_STATE)
    _einval(qp.post_send, SendWQE(1, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    _einval(qp.post_recv, RecvWQE(1, [(s.mr.addr, 8, s.mr.lkey)]))
    assert not qp.sq and not qp.rq and not qp.tx


def test_post_send_beyond_max_send_wr_is_enomem():
    s = Solo(cap=QPCap(max_send_wr=4, max_recv_wr=4))
    for i in range(4):
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    with pytest.raises(VerbsError) as ei:
        s.qp.post_send(SendWQE(9, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    assert ei.value.errno == errno.ENOMEM
    assert len(s.qp.sq) == 4


def test_post_recv_beyond_max_recv_wr_is_enomem():
    s = Solo(cap=QPCap(max_send_wr=4, max_recv_wr=3))
    for i in range(3):
        s.qp.post_recv(RecvWQE(i, [(s.mr.addr, 8, s.mr.lkey)]))
    with pytest.raises(VerbsError) as ei:
        s.qp.post_recv(RecvWQE(9, [(s.mr.addr, 8, s.mr.lkey)]))
    assert ei.value.errno == errno.ENOMEM
    assert len(s.qp.rq) == 3


def test_too_many_sges_is_einval():
    s = Solo(cap=QPCap(max_send_sge=2, max_recv_sge=1))
    sge = (s.mr.addr, 8, s.mr.lkey)
    _einval(s.qp.post_send, SendWQE(1, IBV_WR_SEND, [sge] * 3))
    _einval(s.qp.post_recv, RecvWQE(1, [sge] * 2))
    s.qp.post_send(SendWQE(2, IBV_WR_SEND, [sge] * 2))
    s.qp.post_recv(RecvWQE(2, [sge]))


def test_inline_data_above_max_inline_is_einval():
    s = Solo(cap=QPCap(max_inline_data=16))
    _einval(s.qp.post_send, SendWQE(1, IBV_WR_SEND, inline_data=bytes(17), send_flags=IBV_SEND_INLINE))
    s.qp.post_send(SendWQE(2, IBV_WR_SEND, inline_data=bytes(16), send_flags=IBV_SEND_INLINE))


def test_ud_and_uc_opcode_restrictions():
    ud = Solo(UD)
    sge = [(ud.mr.addr, 8, ud.mr.lkey)]
    ah = AddressVector(dgid=bytes(16))
    for op in (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_READ,
               IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_SEND_WITH_INV):
        _einval(ud.qp.post_send, SendWQE(1, op, sge, ah=ah, remote_qpn=PEER_QPN, remote_qkey=QKEY))
    _einval(ud.qp.post_send, SendWQE(1, IBV_WR_SEND, sge))          # UD needs an AH
    ud.qp.post_send(SendWQE(2, IBV_WR_SEND, sge, ah=ah, remote_qpn=PEER_QPN, remote_qkey=QKEY))
    ud.qp.post_send(SendWQE(3, IBV_WR_SEND_WITH_IMM, sge, ah=ah, remote_qpn=PEER_QPN,
                            remote_qkey=QKEY, imm_data=1))
    uc = Solo(UC)
    sge = [(uc.mr.addr, 8, uc.mr.lkey)]
    for op in (IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD):
        _einval(uc.qp.post_send, SendWQE(1, op, sge, remote_addr=0, rkey=1))
    rc = Solo(RC)
    with pytest.raises(VerbsError) as ei:              # (BIND_MW: tests/test_transport_mw.py)
        rc.qp.post_send(SendWQE(1, IBV_WR_TSO, []))
    assert ei.value.errno == errno.EOPNOTSUPP
    assert not uc.qp.sq and not rc.qp.sq


def test_reset_clears_queues_without_completions():
    s = Solo()
    sge = [(s.mr.addr, 8, s.mr.lkey)]
    for i in range(3):
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, sge))
        s.qp.post_recv(RecvWQE(i, sge))
    assert s.qp.sq and s.qp.rq
    s.qp.modify(QPAttr(qp_state=RESET), M.IBV_QP_STATE)
    assert not s.qp.sq and not s.qp.rq
    assert len(s.scq) == 0 and len(s.rcq) == 0
    assert s.qp.deadline is None
    # and it comes back up fresh
    bring_up(s.qp, sq_psn=100, rq_psn=200)
    a = s.qp.query()
    assert (a.sq_psn, a.rq_psn) == (100, 200)


def test_query_returns_attributes():
    qp = new_qp(RC)
    bring_up(qp, RTS, path_mtu=IBV_MTU_256, dest_qp_num=0x4242, rq_psn=0x123, sq_psn=0xABC,
             timeout=9, retry_cnt=3, rnr_retry=5, max_rd_atomic=2, max_dest_rd_atomic=3,
             min_rnr_timer=7, access=ALL_ACCESS)
    a = qp.query()
    assert a.qp_state == RTS and a.cur_qp_state == RTS
    assert a.path_mtu == IBV_MTU_256 and a.dest_qp_num == 0x4242
    assert a.rq_psn == 0x123 and a.sq_psn == 0xABC
    assert (a.timeout, a.retry_cnt, a.rnr_retry) == (9, 3, 5)
    assert (a.max_rd_atomic, a.max_dest_rd_atomic, a.min_rnr_timer) == (2, 3, 7)
    assert a.qp_access_flags == ALL_ACCESS and a.port_num == 1 and a.pkey_index == 0
    assert a.cap.max_send_wr == qp.cap.max_send_wr
    ud = new_qp(UD)
    bring_up(ud, RTS, qkey=0x1234)
    assert ud.query().qkey == 0x1234


# ================================================================ segmentation
MTUS = [1, 2, 3, 4, 5]


@pytest.mark.parametrize("mtu_enum", MTUS, ids=[str(mtu_to_bytes(m)) for m in MTUS])
def test_send_segmentation_at_every_path_mtu(mtu_enum):
    mtu = mtu_to_bytes(mtu_enum)
    for size in (0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu):
        s = Solo(path_mtu=mtu_enum, sq_psn=1000)
        data = os.urandom(size)
        s.mr.write(data)
        s.qp.post_send(SendWQE(1, IBV_WR_SEND, [(s.mr.addr, size, s.mr.lkey)] if size else []))
        pkts = s.out()
        n = max(1, -(-size // mtu))
        assert len(pkts) == n, (mtu, size)
        if n == 1:
            names = ["RC_SEND_ONLY"]
        else:
            names = ["RC_SEND_FIRST"] + ["RC_SEND_MIDDLE"] * (n - 2) + ["RC_SEND_LAST"]
        assert [p.name for p in pkts] == names
        assert [p.psn for p in pkts] == [1000 + i for i in range(n)]
        assert [p.ackreq for p in pkts] == [False] * (n - 1) + [True]
        sizes = [len(p.payload) for p in pkts]
        assert sizes == [mtu] * (n - 1) + [size - mtu * (n - 1)]
        assert [p.pad for p in pkts] == [(-k) & 3 for k in sizes]
        assert b"".join(bytes(p.payload) for p in pkts) == data
        assert all(p.dqpn == PEER_QPN for p in pkts)


@pytest.mark.parametrize("op,names", [
    (IBV_WR_RDMA_WRITE, ("RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST",
                         "RC_RDMA_WRITE_ONLY")),
    (IBV_WR_SEND_WITH_IMM, ("RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST_WITH_IMMEDIATE",
                            "RC_SEND_ONLY_WITH_IMMEDIATE")),
    (IBV_WR_RDMA_WRITE_WITH_IMM, ("RC_RDMA_WRITE_FIRST", "RC_RDMA_WRITE_MIDDLE",
                                  "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
                                  "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE")),
])
def test_write_and_imm_segmentation_headers(op, names):
    s = Solo(path_mtu=IBV_MTU_256)
    s.qp.post_send(SendWQE(1, op, [(s.mr.addr, 600, s.mr.lkey)], remote_addr=0x5000, rkey=0x77,
                           imm_data=0xDEADBEEF))
    s.qp.post_send(SendWQE(2, op, [(s.mr.addr, 100, s.mr.lkey)], remote_addr=0x6000, rkey=0x78,
                           imm_data=0x01020304))
    pkts = s.out()
    assert [p.name for p in pkts] == [names[0], names[1], names[2], names[3]]
    if op in (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM):
        assert pkts[0].reth == (0x5000, 0x77, 600) and pkts[1].reth is None and pkts[2].reth is None
        assert pkts[3].reth == (0x6000, 0x78, 100)
    if op != IBV_WR_RDMA_WRITE:
        assert pkts[0].imm is None and pkts[2].imm == 0xDEADBEEF and pkts[3].imm == 0x01020304


def test_ackreq_every_64th_packet_of_a_long_message():
    s = Solo(path_mtu=IBV_MTU_256)
    size = 200 * 256 - 10
    s.qp.post_send(SendWQE(1, IBV_WR_SEND, [(s.mr.addr, size, s.mr.lkey)]))
    first = s.out()
    assert len(first) == 128                       # window: 128 PSNs unacknowledged
    assert [i for i, p in enumerate(first) if p.ackreq] == [63, 127]
    s.rx(Opcode.RC_ACKNOWLEDGE, 127, aeth=(0x1F, 0))
    rest = s.out()
    assert [p.psn for p in rest] == list(range(128, 200))
    assert [p.psn for p in rest if p.ackreq] == [191, 199]
    assert rest[-1].name == "RC_SEND_LAST" and len(rest[-1].payload) == 246


def test_no_more_than_128_unacked_psns_in_flight():
    s = Solo(path_mtu=IBV_MTU_256)
    for i in range(10):                            # 10 messages x 20 packets
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, [(s.mr.addr, 20 * 256, s.mr.lkey)]))
    pkts = s.out()
    assert len(pkts) == 128 and pkts[-1].psn == 127
    assert s.out() == []                           # peer silent: nothing more
    s.rx(Opcode.RC_ACKNOWLEDGE, 19, aeth=(0x1F, 1))   # first message acknowledged
    more = s.out()
    assert [p.psn for p in more] == list(range(128, 148))
    assert s.scq.poll(10)[0].wr_id == 0
    # still never more than 128 outstanding
    s.rx(Opcode.RC_ACKNOWLEDGE, 147, aeth=(0x1F, 7))
    more = s.out()
    assert [p.psn for p in more] == list(range(148, 200))
    s.rx(Opcode.RC_ACKNOWLEDGE, 199, aeth=(0x1F, 10))
    assert len(s.scq) == 9


def test_psn_wraparound_over_a_long_message():
    pr = Pair(path_mtu=IBV_MTU_1024, psn_a=0xFFFFF0, psn_b=0xFFFFFA)
    seen = tap(pr.sim, pr.a)
    data = os.urandom(40 * 1024 + 100)
    pr.ma.write(data)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, len(data), pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, len(data), pr.ma.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 20000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 100000, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(pr.ma.addr + 100000, 30000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 100000, rkey=pr.mb.rkey))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(10)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, 0), (2, 0), (3, 0)]
    rwc = pr.qb.recv_cq.poll(10)
    assert len(rwc) == 1 and rwc[0].byte_len == len(data)
    assert pr.mb.read(len(data)) == data
    assert pr.mb.read(20000, 100000) == data[:20000]
    assert pr.ma.read(30000, 100000) == data[:20000] + pr.mb.read(10000, 120000)
    psns = [p.psn for _, p in seen]
    assert psns[:17] == list(range(0xFFFFF0, 0x1000000)) + [0]
    assert psns == [(0xFFFFF0 + i) & 0xFFFFFF for i in range(len(psns))]
    assert pr.qa.query().sq_psn == (0xFFFFF0 + len(psns) + 29) & 0xFFFFFF   # READ took 30 PSNs


# ================================================================ opcodes end to end
def _recv(pr, wr_id=100, off=0, length=1 << 16):
    pr.qb.post_recv(RecvWQE(wr_id, [(pr.mb.addr + off, length, pr.mb.lkey)]))


def test_read_and_atomic_across_psn_wrap():
    pr = Pair(path_mtu=IBV_MTU_1024, psn_a=0xFFFFFD)
    seen = tap(pr.sim, pr.b)
    data = os.urandom(5000)
    pr.mb.write(data, 0x1000)
    pr.mb.write(p64(5), 0x40)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(pr.ma.addr, 5000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x1000, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(2, IBV_WR_ATOMIC_FETCH_AND_ADD, [(pr.ma.addr + 0x2000, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x40, rkey=pr.mb.rkey, compare_add=1))
    pr.run(0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [(1, 0), (2, 0)]
    assert pr.ma.read(5000) == data and u64(pr.ma.read(8, 0x2000)) == 5
    assert [(p.name[3:], p.psn) for _, p in seen] == [
        ("RDMA_READ_RESPONSE_FIRST", 0xFFFFFD), ("RDMA_READ_RESPONSE_MIDDLE", 0xFFFFFE),
        ("RDMA_READ_RESPONSE_MIDDLE", 0xFFFFFF), ("RDMA_READ_RESPONSE_MIDDLE", 0),
        ("RDMA_READ_RESPONSE_LAST", 1), ("ATOMIC_ACKNOWLEDGE", 2)]


def test_e2e_send():
    pr = Pair(path_mtu=IBV_MTU_1024)
    data = os.urandom(5000)
    pr.ma.write(data)
    _recv(pr)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 5000, pr.ma.lkey)]))
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert (swc.wr_id, swc.status, swc.opcode, swc.byte_len) == (1, IBV_WC_SUCCESS, IBV_WC_SEND, 5000)
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len) == (100, IBV_WC_SUCCESS, IBV_WC_RECV, 5000)
    assert rwc.src_qp == pr.qa.qp_num and rwc.qp_num == pr.qb.qp_num
    assert not rwc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)
    assert pr.mb.read(5000) == data


def test_e2e_send_with_imm():
    pr = Pair()
    pr.ma.write(b"hello")
    _recv(pr)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND_WITH_IMM, [(pr.ma.addr, 5, pr.ma.lkey)], imm_data=0x12345678))
    pr.run(0.01)
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.status == IBV_WC_SUCCESS and rwc.opcode == IBV_WC_RECV
    assert rwc.wc_flags & IBV_WC_WITH_IMM and rwc.imm_data == 0x12345678 and rwc.byte_len == 5
    assert pr.qa.send_cq.poll(5)[0].opcode == IBV_WC_SEND


def test_e2e_send_with_inv():
    pr = Pair()
    victim = pr.b.reg_mr(4096, ALL_ACCESS)
    assert pr.b.memory.remote_view(pr.b.pd, victim.rkey, victim.addr, 8, 2) is not None
    _recv(pr)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND_WITH_INV, [(pr.ma.addr, 64, pr.ma.lkey)],
                            invalidate_rkey=victim.rkey))
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert swc.status == IBV_WC_SUCCESS and swc.opcode == IBV_WC_SEND
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.status == IBV_WC_SUCCESS and rwc.wc_flags & IBV_WC_WITH_INV
    assert rwc.imm_data == victim.rkey                 # ibv_wc.invalidated_rkey
    assert pr.b.memory.remote_view(pr.b.pd, victim.rkey, victim.addr, 8, 2) is None
    # and the next WRITE with that rkey is refused
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=victim.addr, rkey=victim.rkey))
    pr.run(0.02)
    assert pr.qa.send_cq.poll(5)[0].status != IBV_WC_SUCCESS


def test_e2e_rdma_write():
    pr = Pair(path_mtu=IBV_MTU_256)
    data = os.urandom(3000)
    pr.ma.write(data)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 3000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 777, rkey=pr.mb.rkey))
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert (swc.status, swc.opcode, swc.byte_len) == (IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 3000)
    assert pr.mb.read(3000, 777) == data
    assert pr.mb.read(777) == bytes(777)
    assert len(pr.qb.recv_cq) == 0


def test_e2e_rdma_write_with_imm_consumes_a_receive():
    pr = Pair(path_mtu=IBV_MTU_256)
    data = os.urandom(1000)
    pr.ma.write(data)
    _recv(pr, wr_id=55, off=60000, length=16)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE_WITH_IMM, [(pr.ma.addr, 1000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 64, rkey=pr.mb.rkey, imm_data=0xCAFE))
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert swc.status == IBV_WC_SUCCESS and swc.opcode == IBV_WC_RDMA_WRITE
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.wr_id == 55 and rwc.status == IBV_WC_SUCCESS
    assert rwc.opcode == IBV_WC_RECV_RDMA_WITH_IMM and rwc.wc_flags & IBV_WC_WITH_IMM
    assert rwc.imm_data == 0xCAFE and rwc.byte_len == 1000
    assert pr.mb.read(1000, 64) == data
    assert pr.mb.read(16, 60000) == bytes(16)        # the receive buffer is not written
    assert not pr.qb.rq


def test_e2e_rdma_read():
    pr = Pair(path_mtu=IBV_MTU_1024)
    data = os.urandom(10000)
    pr.mb.write(data, 5000)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(pr.ma.addr + 3, 10000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 5000, rkey=pr.mb.rkey))
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert (swc.status, swc.opcode, swc.byte_len) == (IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 10000)
    assert pr.ma.read(10000, 3) == data
    assert pr.qb.cnt[C.rx_read_requests] == 1


def test_e2e_compare_and_swap():
    pr = Pair()
    pr.mb.write(p64(0x1111), 64)
    # not equal: no swap, original returned
    pr.qa.post_send(SendWQE(1, IBV_WR_ATOMIC_CMP_AND_SWP, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 64, rkey=pr.mb.rkey, compare_add=0x2222, swap=0x3333))
    # equal: swapped, original returned
    pr.qa.post_send(SendWQE(2, IBV_WR_ATOMIC_CMP_AND_SWP, [(pr.ma.addr + 8, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 64, rkey=pr.mb.rkey, compare_add=0x1111, swap=0x4444))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.wr_id, w.status, w.opcode) for w in wcs] == [(1, 0, IBV_WC_COMP_SWAP), (2, 0, IBV_WC_COMP_SWAP)]
    assert u64(pr.ma.read(8, 0)) == 0x1111
    assert u64(pr.ma.read(8, 8)) == 0x1111
    assert u64(pr.mb.read(8, 64)) == 0x4444


def test_e2e_fetch_and_add_wraps_at_2_64():
    pr = Pair()
    pr.mb.write(p64(2**64 - 2), 128)
    for i in range(3):
        pr.qa.post_send(SendWQE(i, IBV_WR_ATOMIC_FETCH_AND_ADD, [(pr.ma.addr + 8 * i, 8, pr.ma.lkey)],
                                remote_addr=pr.mb.addr + 128, rkey=pr.mb.rkey, compare_add=1))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.status, w.opcode) for w in wcs] == [(0, IBV_WC_FETCH_ADD)] * 3
    assert [u64(pr.ma.read(8, 8 * i)) for i in range(3)] == [2**64 - 2, 2**64 - 1, 0]
    assert u64(pr.mb.read(8, 128)) == 1


def test_e2e_local_inv():
    pr = Pair()
    victim = pr.a.reg_mr(4096, ALL_ACCESS)
    pr.qa.post_send(SendWQE(1, IBV_WR_LOCAL_INV, [], invalidate_rkey=victim.lkey))
    pr.run(0.01)
    (wc,) = pr.qa.send_cq.poll(5)
    assert (wc.wr_id, wc.status, wc.opcode) == (1, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)
    assert pr.a.memory.local_view(pr.a.pd, victim.lkey, victim.addr, 8, 0) is None
    assert pr.ab.stats.sent == 0                     # nothing on the wire


def test_e2e_inline_data():
    pr = Pair()
    _recv(pr)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, inline_data=b"inline payload!", send_flags=IBV_SEND_INLINE))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, inline_data=b"0123456789", send_flags=IBV_SEND_INLINE,
                            remote_addr=pr.mb.addr + 1000, rkey=pr.mb.rkey))
    pr.run(0.01)
    assert [w.status for w in pr.qa.send_cq.poll(5)] == [0, 0]
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.byte_len == 15 and pr.mb.read(15) == b"inline payload!"
    assert pr.mb.read(10, 1000) == b"0123456789"


def test_e2e_multiple_sges_on_send_and_receive():
    pr = Pair(path_mtu=IBV_MTU_256)
    blob = os.urandom(4000)
    pr.ma.write(blob)
    sg = [(pr.ma.addr, 300, pr.ma.lkey), (pr.ma.addr + 1000, 0, pr.ma.lkey),
          (pr.ma.addr + 2000, 17, pr.ma.lkey), (pr.ma.addr + 3000, 400, pr.ma.lkey)]
    want = blob[:300] + blob[2000:2017] + blob[3000:3400]
    pr.qb.post_recv(RecvWQE(7, [(pr.mb.addr, 100, pr.mb.lkey), (pr.mb.addr + 5000, 5, pr.mb.lkey),
                                (pr.mb.addr + 9000, 1000, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, sg))
    # RDMA WRITE and READ gather/scatter across SGEs too
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, sg, remote_addr=pr.mb.addr + 20000, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(pr.ma.addr + 50000, 10, pr.ma.lkey),
                                                  (pr.ma.addr + 60000, 707, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 20000, rkey=pr.mb.rkey))
    pr.run(0.01)
    assert [w.status for w in pr.qa.send_cq.poll(5)] == [0, 0, 0]
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.byte_len == len(want) == 717
    got = pr.mb.read(100) + pr.mb.read(5, 5000) + pr.mb.read(612, 9000)
    assert got == want
    assert pr.mb.read(717, 20000) == want
    assert pr.ma.read(10, 50000) + pr.ma.read(707, 60000) == want


def test_e2e_zero_length_send_and_write():
    pr = Pair()
    pr.mb.write(b"\xAA" * 16)
    _recv(pr)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, []))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [], remote_addr=pr.mb.addr, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(3, IBV_WR_RDMA_WRITE, [], remote_addr=0, rkey=0))   # no key check at 0 bytes
    pr.qa.post_send(SendWQE(4, IBV_WR_RDMA_READ, [], remote_addr=pr.mb.addr, rkey=pr.mb.rkey))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.wr_id, w.status, w.byte_len) for w in wcs] == [(1, 0, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0)]
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.status == IBV_WC_SUCCESS and rwc.byte_len == 0
    assert pr.mb.read(16) == b"\xAA" * 16


def test_e2e_srq_shared_by_two_qps_with_limit_event():
    from softrdma.sim import Link, Simulator, connect_qps
    sim = Simulator(seed=3)
    a = sim.add_node("a", "10.0.0.1")
    b = sim.add_node("b", "10.0.0.2")
    sim.connect(a, b, Link())
    srq = b.create_srq(max_wr=16)
    qa1, qa2 = a.create_qp(), a.create_qp()
    qb1, qb2 = b.create_qp(srq=srq), b.create_qp(srq=srq)
    connect_qps(qa1, qb1, a, b)
    connect_qps(qa2, qb2, a, b)
    ma, mb = a.reg_mr(1 << 16, ALL_ACCESS), b.reg_mr(1 << 16, ALL_ACCESS)
    ma.write(b"x" * 64 + b"y" * 64)
    for i in range(5):
        srq.post_recv(RecvWQE(10 + i, [(mb.addr + 1000 * i, 1000, mb.lkey)]))
    with pytest.raises(VerbsError):
        qb1.post_recv(RecvWQE(1, [(mb.addr, 8, mb.lkey)]))      # QP on an SRQ: post to the SRQ
    srq.modify(srq_limit=3)
    qa1.post_send(SendWQE(1, IBV_WR_SEND, [(ma.addr, 64, ma.lkey)]))
    sim.run(until=0.001)
    assert not [e for e in b.events if e[0] == IBV_EVENT_SRQ_LIMIT_REACHED]    # 4 left, not < 3
    qa2.post_send(SendWQE(2, IBV_WR_SEND, [(ma.addr + 64, 64, ma.lkey)]), now=sim.now)
    sim.run(until=0.002)
    assert not [e for e in b.events if e[0] == IBV_EVENT_SRQ_LIMIT_REACHED]    # 3 left
    qa1.post_send(SendWQE(3, IBV_WR_SEND, [(ma.addr, 64, ma.lkey)]), now=sim.now)
    qa2.post_send(SendWQE(4, IBV_WR_SEND, [(ma.addr + 64, 64, ma.lkey)]), now=sim.now)
    sim.run(until=0.01)
    lim = [e for e in b.events if e[0] == IBV_EVENT_SRQ_LIMIT_REACHED]
    assert lim == [(IBV_EVENT_SRQ_LIMIT_REACHED, srq)]   # once (one-shot until re-armed)
    w1 = qb1.recv_cq.poll(10)
    w2 = qb2.recv_cq.poll(10)
    assert len(w1) == 2 and len(w2) == 2
    assert sorted(w.wr_id for w in w1 + w2) == [10, 11, 12, 13]
    assert all(w.status == 0 and w.byte_len == 64 for w in w1 + w2)
    assert {w.qp_num for w in w1} == {qb1.qp_num} and {w.qp_num for w in w2} == {qb2.qp_num}
    for w in w2:
        assert mb.read(64, 1000 * (w.wr_id - 10)) == b"y" * 64
    assert len(srq.rq) == 1


def test_srq_limits_and_last_wqe_reached_on_error():
    from softrdma.enums import IBV_EVENT_QP_LAST_WQE_REACHED
    from softrdma.sim import Simulator
    sim = Simulator()
    b = sim.add_node("b", "10.0.0.2")
    srq = b.create_srq(max_wr=2)
    mb = b.reg_mr(4096, ALL_ACCESS)
    srq.post_recv(RecvWQE(1, [(mb.addr, 8, mb.lkey)]))
    srq.post_recv(RecvWQE(2, [(mb.addr, 8, mb.lkey)]))
    with pytest.raises(VerbsError) as ei:
        srq.post_recv(RecvWQE(3, [(mb.addr, 8, mb.lkey)]))
    assert ei.value.errno == errno.ENOMEM
    with pytest.raises(VerbsError) as ei:
        srq.modify(srq_limit=3)
    assert ei.value.errno == errno.EINVAL
    qp = b.create_qp(srq=srq)
    bring_up(qp)
    qp.modify(QPAttr(qp_state=ERR), M.IBV_QP_STATE)
    assert (IBV_EVENT_QP_LAST_WQE_REACHED, qp) in b.events
    assert len(srq.rq) == 2 and len(qp.recv_cq) == 0      # the SRQ's WQEs are not the QP's to flush


# ================================================================ UC
@pytest.mark.parametrize("lost", [1, 0, 2], ids=["middle", "first", "last"])
def test_uc_lost_packet_drops_only_that_message(lost):
    from transport_helpers import drop_filter
    pr = Pair(UC, path_mtu=IBV_MTU_256)
    dropped = drop_filter(pr.sim, pr.a, lambda p: p.psn == lost, limit=1)
    blob = os.urandom(3000)
    pr.ma.write(blob)
    for i in range(3):
        pr.qb.post_recv(RecvWQE(50 + i, [(pr.mb.addr + 4000 * i, 4000, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 700, pr.ma.lkey)]))        # psn 0,1,2
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr + 1000, 100, pr.ma.lkey)])) # psn 3
    pr.qa.post_send(SendWQE(3, IBV_WR_SEND, [(pr.ma.addr + 2000, 600, pr.ma.lkey)])) # psn 4,5,6
    pr.run(0.01)
    assert [p.psn for p in dropped] == [lost]
    # the sender completes all three (UC has no acknowledgements)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(10)] == [(1, 0), (2, 0), (3, 0)]
    rwc = pr.qb.recv_cq.poll(10)
    assert [(w.wr_id, w.status, w.byte_len) for w in rwc] == [(50, 0, 100), (51, 0, 600)]
    assert pr.mb.read(100) == blob[1000:1100]
    assert pr.mb.read(600, 4000) == blob[2000:2600]
    assert len(pr.qb.rq) == 1 and pr.qb.rq[0].wr_id == 52
    assert pr.ba.stats.sent == 0                       # a UC responder never answers


def test_uc_write_and_write_with_imm():
    pr = Pair(UC, path_mtu=IBV_MTU_256)
    data = os.urandom(900)
    pr.ma.write(data)
    _recv(pr, wr_id=9)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 900, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 100, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE_WITH_IMM, [(pr.ma.addr, 300, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 2000, rkey=pr.mb.rkey, imm_data=77))
    pr.run(0.01)
    assert [w.status for w in pr.qa.send_cq.poll(5)] == [0, 0]
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.opcode == IBV_WC_RECV_RDMA_WITH_IMM and rwc.imm_data == 77 and rwc.wr_id == 9
    assert pr.mb.read(900, 100) == data and pr.mb.read(300, 2000) == data[:300]
    assert pr.ba.stats.sent == 0


# ================================================================ UD
def _ud_pair(**kw):
    pr = Pair(UD, **kw)
    return pr


def _ud_send(pr, wr_id, length, qkey=QKEY, **kw):
    pr.qa.post_send(SendWQE(wr_id, kw.pop("opcode", IBV_WR_SEND), [(pr.ma.addr, length, pr.ma.lkey)],
                            ah=pr.a.av_to(pr.b), remote_qpn=pr.qb.qp_num, remote_qkey=qkey, **kw),
                    now=pr.sim.now)


def test_ud_receive_has_grh_prefix_and_src_qp():
    pr = _ud_pair()
    data = os.urandom(1000)
    pr.ma.write(data)
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 1040, pr.mb.lkey)]))
    _ud_send(pr, 1, 1000)
    pr.run(0.01)
    (swc,) = pr.qa.send_cq.poll(5)
    assert swc.status == IBV_WC_SUCCESS and swc.opcode == IBV_WC_SEND
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.status == IBV_WC_SUCCESS and rwc.opcode == IBV_WC_RECV
    assert rwc.byte_len == 1000 + 40
    assert rwc.src_qp == pr.qa.qp_num
    assert rwc.wc_flags & IBV_WC_GRH
    grh = pr.mb.read(40)
    assert grh[:20] == bytes(20)
    ip = grh[20:40]
    assert ip[0] == 0x45 and ip[9] == 17                      # IPv4, UDP
    assert ip[12:16] == bytes([10, 0, 0, 1]) and ip[16:20] == bytes([10, 0, 0, 2])
    assert int.from_bytes(ip[2:4], "big") == 20 + 8 + 12 + 8 + 1000 + 4   # IP total length
    assert pr.mb.read(1000, 40) == data


def test_ud_grh_and_payload_scattered_over_sges():
    pr = _ud_pair()
    data = os.urandom(300)
    pr.ma.write(data)
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 40, pr.mb.lkey), (pr.mb.addr + 1000, 100, pr.mb.lkey),
                                (pr.mb.addr + 2000, 500, pr.mb.lkey)]))
    _ud_send(pr, 1, 300)
    pr.run(0.01)
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.status == 0 and rwc.byte_len == 340
    assert pr.mb.read(40)[20] == 0x45
    assert pr.mb.read(100, 1000) + pr.mb.read(200, 2000) == data


def test_ud_send_with_imm():
    pr = _ud_pair()
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 100, pr.mb.lkey)]))
    _ud_send(pr, 1, 10, opcode=IBV_WR_SEND_WITH_IMM, imm_data=0xABCD)
    pr.run(0.01)
    (rwc,) = pr.qb.recv_cq.poll(5)
    assert rwc.wc_flags & IBV_WC_WITH_IMM and rwc.wc_flags & IBV_WC_GRH and rwc.imm_data == 0xABCD
    assert rwc.byte_len == 50


def test_ud_qkey_mismatch_is_dropped():
    pr = _ud_pair()
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 1040, pr.mb.lkey)]))
    _ud_send(pr, 1, 10, qkey=0x22222222)
    pr.run(0.01)
    assert pr.qa.send_cq.poll(5)[0].status == IBV_WC_SUCCESS     # UD: the sender never knows
    assert len(pr.qb.recv_cq) == 0
    assert pr.qb.cnt[C.dropped_bad_qkey] == 1
    assert len(pr.qb.rq) == 1                                     # the receive WQE is still there


def test_ud_message_above_mtu_is_einval():
    pr = _ud_pair()
    mtu = pr.qa.mtu
    with pytest.raises(VerbsError) as ei:
        _ud_send(pr, 1, mtu + 1)
    assert ei.value.errno == errno.EINVAL
    _ud_send(pr, 2, mtu)
    assert len(pr.qa.sq) <= 1


def test_ud_remote_qkey_high_bit_uses_own_qkey():
    pr = _ud_pair()
    seen = tap(pr.sim, pr.a)
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 1040, pr.mb.lkey)]))
    pr.qb.post_recv(RecvWQE(4, [(pr.mb.addr, 1040, pr.mb.lkey)]))
    _ud_send(pr, 1, 10, qkey=0x80000000)
    pr.run(0.01)
    assert seen[-1][1].deth.qkey == QKEY                           # the QP's own Q_Key on the wire
    assert len(pr.qb.recv_cq.poll(5)) == 1
    # change the sender's own Q_Key (RTS->RTS): the high-bit send now carries that one
    pr.qa.modify(QPAttr(qp_state=RTS, qkey=0x33333333), M.IBV_QP_STATE | M.IBV_QP_QKEY)
    _ud_send(pr, 2, 10, qkey=0x80000000)
    pr.run(0.02)
    assert seen[-1][1].deth.qkey == 0x33333333
    assert len(pr.qb.recv_cq) == 0 and pr.qb.cnt[C.dropped_bad_qkey] == 1


# ================================================================ SQD
def _sqd(pr, notify=1):
    pr.qa.modify(QPAttr(qp_state=SQD, en_sqd_async_notify=notify),
                 M.IBV_QP_STATE | M.IBV_QP_EN_SQD_ASYNC_NOTIFY)


def test_sqd_drained_event_after_outstanding_wqes_complete():
    pr = Pair()
    _recv(pr, 1)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    _sqd(pr)
    assert pr.qa.state == SQD
    assert not [e for e in pr.a.events if e[0] == IBV_EVENT_SQ_DRAINED]   # SEND still unacked
    pr.run(0.01)
    assert pr.a.events.count((IBV_EVENT_SQ_DRAINED, pr.qa)) == 1
    assert pr.qa.send_cq.poll(5)[0].status == IBV_WC_SUCCESS


def test_sqd_new_wqes_wait_until_back_to_rts():
    pr = Pair()
    _recv(pr, 1)
    _recv(pr, 2)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    _sqd(pr)
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 32, pr.ma.lkey)]))   # posted in SQD
    pr.run(0.01)
    # the started SEND completed; the new one was not begun
    assert [w.wr_id for w in pr.qa.send_cq.poll(5)] == [1]
    assert [w.wr_id for w in pr.qb.recv_cq.poll(5)] == [1]
    assert pr.ab.stats.sent == 1
    drained = pr.a.events.count((IBV_EVENT_SQ_DRAINED, pr.qa))
    pr.qa.modify(QPAttr(qp_state=RTS), M.IBV_QP_STATE)
    pr.run(0.02)
    assert [w.wr_id for w in pr.qa.send_cq.poll(5)] == [2]
    assert [(w.wr_id, w.byte_len) for w in pr.qb.recv_cq.poll(5)] == [(2, 32)]
    # the SQ was drained while in SQD (only a not-yet-started WQE remained): IBA 10.3.1 /
    # rxe req_next_wqe raise IBV_EVENT_SQ_DRAINED then, whatever was posted meanwhile
    assert drained == 1


def test_sqd_without_notify_gives_no_event():
    pr = Pair()
    _recv(pr, 1)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    _sqd(pr, notify=0)
    pr.run(0.01)
    assert not [e for e in pr.a.events if e[0] == IBV_EVENT_SQ_DRAINED]
    assert pr.qa.send_cq.poll(5)[0].status == 0


def test_unsignaled_wqe_no_cqe_signaled_one_does():
    pr = Pair(sq_sig_all=False)
    _recv(pr, 1)
    _recv(pr, 2)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)], send_flags=IBV_SEND_SIGNALED))
    pr.run(0.01)
    assert [w.wr_id for w in pr.qa.send_cq.poll(5)] == [2]
    assert len(pr.qb.recv_cq) == 2 and not pr.qa.sq
