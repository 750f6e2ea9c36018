"""softrdma.transport: memory windows -- bind, the responder's rkey checks
through a window, invalidation (local and remote), and every bind error.

Expected values from rxe (rxe_mw.c: rxe_check_bind_mw, rxe_lookup_mw,
rxe_invalidate_mw; rxe_req.c: rxe_do_local_ops; rxe_resp.c: check_rkey)
and IBA vol. 1 10.6.7.
"""

from __future__ import annotations

import pytest

from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_ZERO_BASED, IBV_MW_TYPE_1, IBV_MW_TYPE_2, IBV_QPS_ERR,
    IBV_QPT_UC, IBV_QPT_UD, IBV_WC_BIND_MW, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOCAL_INV, IBV_WC_MW_BIND_ERR,
    IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SUCCESS, IBV_WC_WITH_INV,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_LOCAL_INV, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
)
from softrdma.errors import VerbsError
from softrdma.transport import mw as mwmod
from softrdma.transport.mw import MW, bind_wqe
from softrdma.transport.wr import RecvWQE, SendWQE
from softrdma.wire.opcodes import Opcode as O

from transport_helpers import Pair, Solo, new_qp, p64, u64

NAK_ACC = 0x62
LW, RW, RR, RA = IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_ATOMIC
MR_ACC = LW | RW | RR | RA | IBV_ACCESS_MW_BIND


def acks(pkts):
    return [(p.aeth.syndrome, p.psn) for p in pkts if p.name == "RC_ACKNOWLEDGE"]


def inc(rkey):
    return (rkey & ~0xFF) | ((rkey + 1) & 0xFF)


def solo(mr_access=MR_ACC, **kw):
    return Solo(mr_access=mr_access, **kw)


def do_bind(s, mw, addr, length, access, mr=None, wr_id=1, qp=None):
    """Post a BIND_MW for ``mw`` on ``qp`` (default the Solo's); the WC."""
    mr = s.mr if mr is None else mr
    qp = s.qp if qp is None else qp
    new = inc(mw.rkey)
    qp.post_send(bind_wqe(wr_id, mw.rkey, new, mr.lkey, addr, length, access))
    (wc,) = qp.send_cq.poll(4)
    return wc


# ---------------------------------------------------------------- bind + access
@pytest.mark.parametrize("mw_type", [IBV_MW_TYPE_1, IBV_MW_TYPE_2])
def test_bind_then_remote_write_read_atomic_through_the_window(mw_type):
    s = solo()
    w = MW(s.mem, s.pd, mw_type)
    old = w.rkey
    base = s.mr.addr + 0x1000
    wc = do_bind(s, w, base, 0x100, RW | RR | RA)
    assert (wc.status, wc.opcode, wc.byte_len) == (IBV_WC_SUCCESS, IBV_WC_BIND_MW, 0)
    assert w.rkey == inc(old) and w.rkey >> 8 == old >> 8          # a new key byte, same index
    s.rx(O.RC_RDMA_WRITE_ONLY, 0, b"window!!", reth=(base + 8, w.rkey, 8), ackreq=True)
    assert [a[0] & 0xE0 for a in acks(s.out())] == [0]
    assert s.mr.read(8, 0x1008) == b"window!!"
    s.rx(O.RC_RDMA_READ_REQUEST, 1, reth=(base + 8, w.rkey, 8))
    (resp,) = s.out()
    assert resp.name == "RC_RDMA_READ_RESPONSE_ONLY" and bytes(resp.payload) == b"window!!"
    s.mr.write(p64(40), 0x1010)
    s.rx(O.RC_FETCH_ADD, 2, atmeth=(base + 0x10, w.rkey, 2, 0))
    (ack,) = s.out()
    assert ack.atmack == 40 and u64(s.mr.read(8, 0x1010)) == 42
    assert s.qp.state != IBV_QPS_ERR


@pytest.mark.parametrize("case", ["below", "above", "straddle", "old_key", "no_read_right", "mr_rkey_still_ok"])
def test_access_outside_the_window_or_its_rights_is_a_remote_access_error(case):
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    old = w.rkey
    base = s.mr.addr + 0x1000
    assert do_bind(s, w, base, 0x100, RW).status == IBV_WC_SUCCESS
    va, key, op = {"below": (base - 8, w.rkey, "w"), "above": (base + 0x100, w.rkey, "w"),
                   "straddle": (base + 0xFC, w.rkey, "w"), "old_key": (base, old, "w"),
                   "no_read_right": (base, w.rkey, "r"),
                   "mr_rkey_still_ok": (s.mr.addr, s.mr.rkey, "w")}[case]
    if op == "w":
        s.rx(O.RC_RDMA_WRITE_ONLY, 0, b"x" * 8, reth=(va, key, 8), ackreq=True)
    else:
        s.rx(O.RC_RDMA_READ_REQUEST, 0, reth=(va, key, 8))
    if case == "mr_rkey_still_ok":           # the MR's own rkey is untouched by the window
        assert [a[0] & 0xE0 for a in acks(s.out())] == [0]
        return
    assert acks(s.out()) == [(NAK_ACC, 0)]
    assert s.qp.state == IBV_QPS_ERR


def test_zero_based_type_2_window_is_addressed_from_0():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w, s.mr.addr + 0x2000, 64, RW | RR | IBV_ACCESS_ZERO_BASED).status == IBV_WC_SUCCESS
    s.rx(O.RC_RDMA_WRITE_ONLY, 0, b"zb", reth=(4, w.rkey, 2), ackreq=True)
    assert [a[0] & 0xE0 for a in acks(s.out())] == [0]
    assert s.mr.read(2, 0x2004) == b"zb"
    s.rx(O.RC_RDMA_WRITE_ONLY, 1, b"zb", reth=(63, w.rkey, 2), ackreq=True)    # past its 64 bytes
    assert acks(s.out()) == [(NAK_ACC, 1)]


def test_type_2_window_serves_only_the_qp_it_is_bound_to():
    s = solo()
    other = new_qp(memory=s.mem, pd=s.pd)                 # same device, same PD
    w = MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    assert s.mem.remote_view(s.pd, w.rkey, s.mr.addr, 8, RW, s.qp) is not None
    assert s.mem.remote_view(s.pd, w.rkey, s.mr.addr, 8, RW, other) is None
    assert s.mem.remote_view(object(), w.rkey, s.mr.addr, 8, RW, s.qp) is None     # another PD
    # a type 1 window serves any QP of its PD
    w1 = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    assert do_bind(s, w1, s.mr.addr, 64, RW, wr_id=2).status == IBV_WC_SUCCESS
    assert s.mem.remote_view(s.pd, w1.rkey, s.mr.addr, 8, RW, other) is not None


def test_a_window_is_never_a_local_key():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    assert do_bind(s, w, s.mr.addr, 64, RW | RR).status == IBV_WC_SUCCESS
    assert s.mem.local_view(s.pd, w.rkey, s.mr.addr, 8, 0) is None


# ---------------------------------------------------------------- bind errors
def _pd_other():
    return object()


BIND_ERRORS = {
    # name: (window type, mr access, bind access, addr offset, length, setup)
    "mr_without_mw_bind": (IBV_MW_TYPE_1, LW | RW, RW, 0, 64, None),
    "range_past_mr_end": (IBV_MW_TYPE_1, MR_ACC, RW, (1 << 16) - 32, 64, None),
    "range_before_mr": (IBV_MW_TYPE_1, MR_ACC, RW, -8, 64, None),
    "type_1_zero_based": (IBV_MW_TYPE_1, MR_ACC, RW | IBV_ACCESS_ZERO_BASED, 0, 64, None),
    "writable_window_on_read_only_mr": (IBV_MW_TYPE_1, RR | IBV_ACCESS_MW_BIND, RW, 0, 64, None),
    "atomic_window_on_read_only_mr": (IBV_MW_TYPE_2, RR | IBV_ACCESS_MW_BIND, RA, 0, 64, None),
    "unsupported_access_bit": (IBV_MW_TYPE_1, MR_ACC, RW | (1 << 12), 0, 64, None),
    "type_2_zero_length": (IBV_MW_TYPE_2, MR_ACC, RW, 0, 0, None),
    "type_2_already_bound": (IBV_MW_TYPE_2, MR_ACC, RW, 0, 64, "bind_first"),
    "type_2_qp_of_another_pd": (IBV_MW_TYPE_2, MR_ACC, RW, 0, 64, "mw_other_pd"),
    "type_1_qp_of_another_pd": (IBV_MW_TYPE_1, MR_ACC, RW, 0, 64, "mw_other_pd"),
    "mr_of_another_pd": (IBV_MW_TYPE_1, MR_ACC, RW, 0, 64, "mr_other_pd"),
    "stale_mw_rkey": (IBV_MW_TYPE_1, MR_ACC, RW, 0, 64, "stale_key"),
    "deallocated_window": (IBV_MW_TYPE_1, MR_ACC, RW, 0, 64, "dealloc"),
    "invalidated_mr": (IBV_MW_TYPE_1, MR_ACC, RW, 0, 64, "mr_invalid"),
}


@pytest.mark.parametrize("case", sorted(BIND_ERRORS))
def test_bind_errors_complete_with_mw_bind_err_and_the_qp_goes_to_err(case):
    mw_type, mr_acc, acc, off, length, setup = BIND_ERRORS[case]
    s = solo(mr_access=mr_acc)
    mr = s.mr
    mw_pd = s.pd
    if setup == "mw_other_pd":           # window and MR in another PD than the QP's
        mw_pd = _pd_other()
        mr = s.mem.reg_mr(mw_pd, 4096, mr_acc)
    w = MW(s.mem, mw_pd, mw_type)
    key = w.rkey
    if setup == "bind_first":
        assert do_bind(s, w, mr.addr, 64, RW).status == IBV_WC_SUCCESS
        key = w.rkey
    elif setup == "mr_other_pd":
        mr = s.mem.reg_mr(_pd_other(), 4096, MR_ACC)
    elif setup == "stale_key":
        key = inc(key)
    elif setup == "dealloc":
        w.dealloc()
    elif setup == "mr_invalid":
        assert s.mem.invalidate(s.pd, mr.rkey)
    s.qp.post_send(bind_wqe(7, key, inc(key), mr.lkey, mr.addr + off, length, acc))
    (wc,) = s.scq.poll(4)
    assert (wc.wr_id, wc.status, wc.opcode) == (7, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW)
    assert s.qp.state == IBV_QPS_ERR


def test_nothing_after_a_failed_bind_goes_out():
    s = solo(mr_access=LW | RW)                      # no MW_BIND right
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    s.qp.post_send(bind_wqe(1, w.rkey, inc(w.rkey), s.mr.lkey, s.mr.addr, 64, RW))
    s.qp.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(s.mr.addr, 8, s.mr.lkey)], remote_addr=0, rkey=1))
    assert s.out() == []
    assert [(w.wr_id, w.status) for w in s.scq.poll(4)] == [(1, IBV_WC_MW_BIND_ERR), (2, 5)]   # 5: FLUSH


def test_type_1_zero_length_bind_unbinds():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    assert s.mem.remote_view(s.pd, w.rkey, s.mr.addr, 8, RW) is not None
    assert do_bind(s, w, 0, 0, 0, wr_id=2).status == IBV_WC_SUCCESS
    assert s.mem.remote_view(s.pd, w.rkey, s.mr.addr, 8, RW) is None
    assert s.mr.mws == []
    assert do_bind(s, w, s.mr.addr + 8, 8, RR, wr_id=3).status == IBV_WC_SUCCESS    # and it binds again
    assert s.mem.remote_view(s.pd, w.rkey, s.mr.addr + 8, 8, RR) is not None


def test_bind_mw_is_not_a_ud_operation():
    qp = new_qp(IBV_QPT_UD)
    from transport_helpers import bring_up
    bring_up(qp)
    with pytest.raises(VerbsError) as e:
        qp.post_send(bind_wqe(1, 0x100, 0x101, 0x200, 0, 0, 0))
    assert e.value.errno == 22
    uc = Solo(IBV_QPT_UC, mr_access=MR_ACC)              # UC binds (rxe: WR_LOCAL_OP_MASK for UC too)
    w = MW(uc.mem, uc.pd, IBV_MW_TYPE_2)
    assert do_bind(uc, w, uc.mr.addr, 64, RW).status == IBV_WC_SUCCESS


# ---------------------------------------------------------------- invalidation
def test_local_invalidate_of_type_2_then_access_fails_and_it_binds_again():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    s.qp.post_send(SendWQE(2, IBV_WR_LOCAL_INV, [], invalidate_rkey=w.rkey))
    (wc,) = s.scq.poll(4)
    assert (wc.status, wc.opcode) == (IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)
    assert w.state == mwmod.STATE_FREE and s.mr.mws == []
    s.rx(O.RC_RDMA_WRITE_ONLY, 0, b"x" * 8, reth=(s.mr.addr, w.rkey, 8), ackreq=True)
    assert acks(s.out()) == [(NAK_ACC, 0)]


def test_local_invalidate_of_a_type_2_window_twice_fails():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    assert do_bind(s, w, s.mr.addr, 64, RW, wr_id=9).status == IBV_WC_MW_BIND_ERR   # not FREE
    s2 = solo()
    w2 = MW(s2.mem, s2.pd, IBV_MW_TYPE_2)
    assert do_bind(s2, w2, s2.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    key = w2.rkey
    s2.qp.post_send(SendWQE(2, IBV_WR_LOCAL_INV, [], invalidate_rkey=key))
    s2.qp.post_send(SendWQE(3, IBV_WR_LOCAL_INV, [], invalidate_rkey=key))
    assert [(c.wr_id, c.status) for c in s2.scq.poll(4)] == [(2, IBV_WC_SUCCESS), (3, IBV_WC_LOC_QP_OP_ERR)]


@pytest.mark.parametrize("what", ["type_1_window", "mr_with_bound_window", "unknown_key"])
def test_local_invalidate_refusals_are_loc_qp_op_err(what):
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    key = {"type_1_window": w.rkey, "mr_with_bound_window": s.mr.rkey, "unknown_key": 0x7777_7700}[what]
    s.qp.post_send(SendWQE(2, IBV_WR_LOCAL_INV, [], invalidate_rkey=key))
    (wc,) = s.scq.poll(4)
    assert (wc.status, wc.opcode) == (IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOCAL_INV)
    assert s.qp.state == IBV_QPS_ERR


def test_send_with_invalidate_of_a_type_2_window():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    s.qp.post_recv(RecvWQE(5, [(s.mr.addr + 0x8000, 64, s.mr.lkey)]))
    s.rx(O.RC_SEND_ONLY_WITH_INVALIDATE, 0, b"bye", ieth=w.rkey, ackreq=True)
    (rwc,) = s.rcq.poll(4)
    assert (rwc.status, rwc.wc_flags & IBV_WC_WITH_INV, rwc.imm_data) == (IBV_WC_SUCCESS, IBV_WC_WITH_INV, w.rkey)
    assert w.state == mwmod.STATE_FREE
    s.out()
    s.rx(O.RC_RDMA_WRITE_ONLY, 1, b"x" * 8, reth=(s.mr.addr, w.rkey, 8), ackreq=True)
    assert acks(s.out()) == [(NAK_ACC, 1)]


def test_send_with_invalidate_of_a_type_1_window_is_an_invalid_request():
    s = solo()
    w = MW(s.mem, s.pd, IBV_MW_TYPE_1)
    assert do_bind(s, w, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    s.qp.post_recv(RecvWQE(5, [(s.mr.addr + 0x8000, 64, s.mr.lkey)]))
    s.rx(O.RC_SEND_ONLY_WITH_INVALIDATE, 0, b"bye", ieth=w.rkey, ackreq=True)
    (rwc,) = s.rcq.poll(4)
    assert rwc.status == IBV_WC_REM_INV_REQ_ERR
    assert w.state == mwmod.STATE_VALID and s.mem.remote_view(s.pd, w.rkey, s.mr.addr, 8, RW) is not None


# ---------------------------------------------------------------- lifetime
def test_dereg_of_the_mr_unbinds_and_dealloc_frees_the_key():
    s = solo()
    w1, w2 = MW(s.mem, s.pd, IBV_MW_TYPE_1), MW(s.mem, s.pd, IBV_MW_TYPE_2)
    assert do_bind(s, w1, s.mr.addr, 64, RW).status == IBV_WC_SUCCESS
    assert do_bind(s, w2, s.mr.addr, 64, RW, wr_id=2).status == IBV_WC_SUCCESS
    assert len(s.mr.mws) == 2
    s.mem.dereg_mr(s.mr)
    assert (w1.state, w2.state) == (mwmod.STATE_VALID, mwmod.STATE_FREE)
    assert w1.view is None and w2.view is None and w2.bound_qp is None
    assert s.mem.remote_view(s.pd, w1.rkey, s.mr.addr, 8, RW) is None
    w1.dealloc()
    assert s.mem.lookup(w1.rkey) is None and w1.state == mwmod.STATE_INVALID
    with pytest.raises(ValueError):
        MW(s.mem, s.pd, 3)


# ---------------------------------------------------------------- two nodes
def test_rdma_over_the_simulated_link_through_a_type_2_window():
    p = Pair()
    p.mb = p.b.reg_mr(1 << 16, MR_ACC)
    w = MW(p.b.memory, p.b.pd, IBV_MW_TYPE_2)
    p.qb.post_send(bind_wqe(1, w.rkey, inc(w.rkey), p.mb.lkey, p.mb.addr + 4096, 4096, RW | RR | RA))
    p.run_until_cqe(p.qb.send_cq)
    assert p.qb.send_cq.poll(1)[0].status == IBV_WC_SUCCESS
    p.ma.write(bytes(range(200)) * 10)
    p.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(p.ma.addr, 2000, p.ma.lkey)], remote_addr=p.mb.addr + 4096,
                           rkey=w.rkey))
    p.qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(p.ma.addr + 8192, 2000, p.ma.lkey)],
                           remote_addr=p.mb.addr + 4096, rkey=w.rkey))
    p.qa.post_send(SendWQE(4, IBV_WR_ATOMIC_FETCH_AND_ADD, [(p.ma.addr + 16384, 8, p.ma.lkey)],
                           remote_addr=p.mb.addr + 8184, rkey=w.rkey, compare_add=5))
    p.qa.post_send(SendWQE(5, IBV_WR_RDMA_WRITE, [(p.ma.addr, 8, p.ma.lkey)], remote_addr=p.mb.addr + 8192,
                           rkey=w.rkey))                        # one past the window
    p.run_until_cqe(p.qa.send_cq, 4)
    assert [(c.wr_id, c.status) for c in p.qa.send_cq.poll(8)] == [
        (2, IBV_WC_SUCCESS), (3, IBV_WC_SUCCESS), (4, IBV_WC_SUCCESS), (5, IBV_WC_REM_ACCESS_ERR)]
    assert p.mb.read(2000, 4096) == bytes(range(200)) * 10
    assert p.ma.read(2000, 8192) == bytes(range(200)) * 10
    assert u64(p.mb.read(8, 8184)) == 5
