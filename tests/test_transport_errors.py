"""softrdma.transport: the error and recovery paths.

* responder, packet level (one QP driven by hand): PSN sequence errors,
  duplicates (SEND/WRITE re-ACKed, READ replayed, ATOMIC answered from the
  saved result), RNR, remote access / invalid request NAKs with the QP going
  to ERR and the async event, MSN accounting;
* requester / completer: local ACK timeout and retry_cnt, RNR back-off and
  rnr_retry, flushes, signaling, NAK -> status mapping, max_rd_atomic,
  fence, implied NAK, ghost ACKs -- in the simulator with deterministic loss
  (loss 1.0 on a link, or a drop filter on chosen packets) or by hand.

Expected values come from IBA vol. 1 ch. 9/10/11 and rxe (rxe_resp.c,
rxe_comp.c, rxe_req.c).
"""

from __future__ import annotations

import os

import pytest

from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_EVENT_QP_ACCESS_ERR, IBV_EVENT_QP_REQ_ERR, IBV_MTU_256,
    IBV_MTU_1024, IBV_QPS_ERR, IBV_QPS_RTS, IBV_SEND_FENCE, IBV_WC_LOC_LEN_ERR, IBV_WC_LOC_PROT_ERR,
    IBV_WC_RDMA_READ, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR, IBV_WC_RETRY_EXC_ERR,
    IBV_WC_RNR_RETRY_EXC_ERR, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR, IBV_WR_ATOMIC_CMP_AND_SWP,
    IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
)
from softrdma.transport.counters import Counter as C
from softrdma.transport.wr import RecvWQE, SendWQE
from softrdma.wire import RNR_TIMER_US
from softrdma.wire.opcodes import Opcode as O

from transport_helpers import ALL_ACCESS, Pair, Solo, drop_filter, p64, tap, u64

ACK = 0x1F             # AETH: ACK, "unlimited" credit (what rxe sends)
NAK_PSN, NAK_INV, NAK_ACC = 0x60, 0x61, 0x62
LW, RW, RR, RA = (IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_READ,
                  IBV_ACCESS_REMOTE_ATOMIC)


def acks(pkts):
    """(syndrome, psn, msn) of the ACK/NAK packets."""
    return [(p.aeth.syndrome, p.psn, p.aeth.msn) for p in pkts if p.name == "RC_ACKNOWLEDGE"]


def is_ack(syn):
    return syn & 0xE0 == 0


def post_recvs(s, n, size=4096):
    for i in range(n):
        s.qp.post_recv(RecvWQE(100 + i, [(s.mr.addr + 0x8000 + i * size, size, s.mr.lkey)]))


# ======================================================================
# responder (packet level)
# ======================================================================
def test_psn_sequence_error_nak_once_then_silent_then_normal():
    s = Solo(rq_psn=100)
    post_recvs(s, 4)
    s.rx(O.RC_SEND_ONLY, 102, b"late", ackreq=True)
    assert acks(s.out()) == [(NAK_PSN, 100, 0)]          # NAK names the expected PSN
    s.rx(O.RC_SEND_ONLY, 103, b"later", ackreq=True)     # further out-of-order: dropped silently
    s.rx(O.RC_SEND_ONLY, 101, b"late", ackreq=True)
    assert s.out() == []
    assert s.qp.cnt[C.out_of_seq_request] == 3
    assert len(s.rcq) == 0 and len(s.qp.rq) == 4
    s.rx(O.RC_SEND_ONLY, 100, b"first", ackreq=True)     # the expected PSN: normal again
    (a,) = acks(s.out())
    assert is_ack(a[0]) and a[1:] == (100, 1)
    s.rx(O.RC_SEND_ONLY, 101, b"second", ackreq=True)
    (a,) = acks(s.out())
    assert is_ack(a[0]) and a[1:] == (101, 2)
    assert [(w.wr_id, w.byte_len) for w in s.rcq.poll(5)] == [(100, 5), (101, 6)]
    # a new gap gives a new (single) NAK
    s.rx(O.RC_SEND_ONLY, 110, b"x", ackreq=True)
    s.rx(O.RC_SEND_ONLY, 111, b"x", ackreq=True)
    assert acks(s.out()) == [(NAK_PSN, 102, 2)]
    assert s.qp.state != IBV_QPS_ERR                     # a PSN error is not fatal


def test_duplicate_send_and_write_reacked_not_reexecuted():
    s = Solo(rq_psn=0)
    post_recvs(s, 3)
    s.rx(O.RC_SEND_ONLY, 0, b"hello", ackreq=True)
    s.rx(O.RC_RDMA_WRITE_ONLY, 1, b"AAAA", ackreq=True, reth=(s.mr.addr, s.mr.rkey, 4))
    s.rx(O.RC_SEND_ONLY, 2, b"world", ackreq=True)
    s.out()
    assert len(s.rcq.poll(5)) == 2
    s.rx(O.RC_SEND_ONLY, 0, b"HELLO", ackreq=True)                       # duplicate SEND
    s.rx(O.RC_RDMA_WRITE_ONLY, 1, b"BBBB", ackreq=True, reth=(s.mr.addr, s.mr.rkey, 4))  # dup WRITE
    s.rx(O.RC_SEND_ONLY, 2, b"WORLD", ackreq=False)                      # dup, no AckReq: still ACKed
    got = acks(s.out())
    assert [(is_ack(x[0]), x[1], x[2]) for x in got] == [(True, 2, 3)] * 3   # PSN = ePSN - 1
    assert len(s.rcq) == 0 and len(s.qp.rq) == 1          # no second completion, no WQE used
    assert s.mr.read(4) == b"AAAA"                        # the WRITE not redone
    assert s.mr.read(5, 0x8000) == b"hello"
    assert s.qp.cnt[C.duplicate_request] == 3
    assert s.qp.query().rq_psn == 3


def test_duplicate_read_replayed_from_responder_resources():
    s = Solo(rq_psn=50)
    data = os.urandom(2500)
    s.mr.write(data, 0x1000)
    s.rx(O.RC_RDMA_READ_REQUEST, 50, ackreq=True, reth=(s.mr.addr + 0x1000, s.mr.rkey, 2500))
    first = s.out()
    assert [(p.name, p.psn) for p in first] == [("RC_RDMA_READ_RESPONSE_FIRST", 50),
                                                ("RC_RDMA_READ_RESPONSE_MIDDLE", 51),
                                                ("RC_RDMA_READ_RESPONSE_LAST", 52)]
    assert b"".join(bytes(p.payload) for p in first) == data
    assert s.qp.query().rq_psn == 53                      # a READ uses one PSN per response
    s.mr.write(data[::-1], 0x1000)                        # memory may change: rxe re-reads it
    s.rx(O.RC_RDMA_READ_REQUEST, 50, ackreq=True, reth=(s.mr.addr + 0x1000, s.mr.rkey, 2500))
    again = s.out()
    assert [(p.name, p.psn) for p in again] == [(p.name, p.psn) for p in first]
    assert b"".join(bytes(p.payload) for p in again) == data[::-1]
    # a re-read of the tail (IBA 9.7.5.1.6: the requester may shorten it)
    s.rx(O.RC_RDMA_READ_REQUEST, 51, ackreq=True, reth=(s.mr.addr + 0x1000 + 1024, s.mr.rkey, 1476))
    tail = s.out()
    assert [(p.name, p.psn) for p in tail] == [("RC_RDMA_READ_RESPONSE_FIRST", 51),
                                               ("RC_RDMA_READ_RESPONSE_LAST", 52)]
    assert b"".join(bytes(p.payload) for p in tail) == data[::-1][1024:]
    assert s.qp.cnt[C.duplicate_request] == 2
    assert s.qp.cnt[C.rx_read_requests] == 1
    assert s.qp.query().rq_psn == 53 and s.qp.state != IBV_QPS_ERR


def test_duplicate_atomic_answered_with_original_not_executed_twice():
    s = Solo(rq_psn=7)
    s.mr.write(p64(10), 64)
    s.rx(O.RC_FETCH_ADD, 7, ackreq=True, atmeth=(s.mr.addr + 64, s.mr.rkey, 5, 0))
    (p,) = s.out()
    assert p.name == "RC_ATOMIC_ACKNOWLEDGE" and p.psn == 7 and p.atmack == 10
    assert u64(s.mr.read(8, 64)) == 15
    s.rx(O.RC_FETCH_ADD, 7, ackreq=True, atmeth=(s.mr.addr + 64, s.mr.rkey, 5, 0))   # duplicate
    (p,) = s.out()
    assert p.name == "RC_ATOMIC_ACKNOWLEDGE" and p.psn == 7 and p.atmack == 10
    assert u64(s.mr.read(8, 64)) == 15                    # changed once only
    # compare & swap: same story
    s.rx(O.RC_COMPARE_SWAP, 8, ackreq=True, atmeth=(s.mr.addr + 64, s.mr.rkey, 99, 15))
    (p,) = s.out()
    assert p.atmack == 15 and u64(s.mr.read(8, 64)) == 99
    s.mr.write(p64(15), 64)                               # would swap again if re-executed
    s.rx(O.RC_COMPARE_SWAP, 8, ackreq=True, atmeth=(s.mr.addr + 64, s.mr.rkey, 99, 15))
    (p,) = s.out()
    assert p.atmack == 15 and u64(s.mr.read(8, 64)) == 15
    assert s.qp.cnt[C.rx_atomic_requests] == 2 and s.qp.cnt[C.duplicate_request] == 2


@pytest.mark.parametrize("timer", [12, 5, 0])
def test_rnr_nak_when_no_receive_wqe(timer):
    s = Solo(rq_psn=0, min_rnr_timer=timer)
    s.rx(O.RC_SEND_ONLY, 0, b"x", ackreq=True)
    assert acks(s.out()) == [(0x20 | timer, 0, 0)]
    assert s.qp.query().rq_psn == 0 and s.qp.state != IBV_QPS_ERR
    assert s.qp.cnt[C.send_rnr_err] == 1
    # RDMA WRITE with immediate needs a receive WQE as well
    s.rx(O.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 0, b"y", ackreq=True, imm=1,
         reth=(s.mr.addr, s.mr.rkey, 1))
    assert acks(s.out()) == [(0x20 | timer, 0, 0)]
    post_recvs(s, 1)
    s.rx(O.RC_SEND_ONLY, 0, b"x", ackreq=True)
    (a,) = acks(s.out())
    assert is_ack(a[0]) and a[1:] == (0, 1)
    assert s.rcq.poll(5)[0].status == IBV_WC_SUCCESS


def _foreign_mr(s):
    return s.mem.reg_mr(object(), 4096, ALL_ACCESS)


REMOTE_ACCESS_CASES = {
    "write_bad_rkey": lambda s: (O.RC_RDMA_WRITE_ONLY, b"abcd",
                                 dict(reth=(s.mr.addr, s.mr.rkey ^ 0x0100, 4))),
    "write_beyond_mr": lambda s: (O.RC_RDMA_WRITE_ONLY, b"abcdefgh",
                                  dict(reth=(s.mr.addr + s.mr.length - 4, s.mr.rkey, 8))),
    "write_below_mr": lambda s: (O.RC_RDMA_WRITE_ONLY, b"abcd",
                                 dict(reth=(s.mr.addr - 4, s.mr.rkey, 4))),
    "write_mr_without_remote_write": lambda s: (
        O.RC_RDMA_WRITE_ONLY, b"abcd", dict(reth=(s.ro.addr, s.ro.rkey, 4))),
    "read_mr_without_remote_read": lambda s: (
        O.RC_RDMA_READ_REQUEST, b"", dict(reth=(s.wo.addr, s.wo.rkey, 4))),
    "atomic_mr_without_remote_atomic": lambda s: (
        O.RC_FETCH_ADD, b"", dict(atmeth=(s.ro.addr, s.ro.rkey, 1, 0))),
    "write_mr_of_other_pd": lambda s: (
        O.RC_RDMA_WRITE_ONLY, b"abcd", dict(reth=(s.other.addr, s.other.rkey, 4))),
    "read_bad_rkey": lambda s: (O.RC_RDMA_READ_REQUEST, b"", dict(reth=(s.mr.addr, 0x12345, 4))),
}


@pytest.mark.parametrize("case", list(REMOTE_ACCESS_CASES))
def test_remote_access_error_nak(case):
    s = Solo(rq_psn=30)
    s.ro = s.mem.reg_mr(s.pd, 4096, LW | RR)             # read-only MR
    s.wo = s.mem.reg_mr(s.pd, 4096, LW | RW)             # write-only MR
    s.other = _foreign_mr(s)
    post_recvs(s, 2)
    op, payload, kw = REMOTE_ACCESS_CASES[case](s)
    s.rx(op, 30, payload, ackreq=True, **kw)
    pkts = s.out()
    assert [p.name for p in pkts] == ["RC_ACKNOWLEDGE"]
    assert acks(pkts) == [(NAK_ACC, 30, 0)]
    assert s.qp.state == IBV_QPS_ERR
    assert (IBV_EVENT_QP_ACCESS_ERR, s.qp) in s.qp.events
    assert s.qp.cnt[C.resp_remote_access_errors] == 1
    assert s.mr.read(16) == bytes(16) and s.other.read(4) == bytes(4) and s.ro.read(4) == bytes(4)
    # the receive queue is flushed
    assert [w.status for w in s.rcq.poll(5)] == [IBV_WC_WR_FLUSH_ERR] * 2


INVALID_REQUEST_CASES = {
    "misaligned_atomic": (ALL_ACCESS, [(O.RC_FETCH_ADD, b"", "atm4")]),
    "send_middle_without_first": (ALL_ACCESS, [(O.RC_SEND_MIDDLE, bytes(1024), None)]),
    "send_last_without_first": (ALL_ACCESS, [(O.RC_SEND_LAST, b"abc", None)]),
    "write_middle_without_first": (ALL_ACCESS, [(O.RC_RDMA_WRITE_MIDDLE, bytes(1024), None)]),
    "send_middle_after_write_first": (ALL_ACCESS, [(O.RC_RDMA_WRITE_FIRST, bytes(1024), "w3k"),
                                                   (O.RC_SEND_MIDDLE, bytes(1024), None)]),
    "send_only_inside_a_send": (ALL_ACCESS, [(O.RC_SEND_FIRST, bytes(1024), None),
                                             (O.RC_SEND_ONLY, b"abc", None)]),
    "send_first_shorter_than_mtu": (ALL_ACCESS, [(O.RC_SEND_FIRST, bytes(100), None)]),
    "send_only_longer_than_mtu": (ALL_ACCESS, [(O.RC_SEND_ONLY, bytes(1028), None)]),
    "write_last_shorter_than_reth": (ALL_ACCESS, [(O.RC_RDMA_WRITE_FIRST, bytes(1024), "w3k"),
                                                  (O.RC_RDMA_WRITE_MIDDLE, bytes(1024), None),
                                                  (O.RC_RDMA_WRITE_LAST, bytes(100), None)]),
    "write_only_longer_than_reth": (ALL_ACCESS, [(O.RC_RDMA_WRITE_ONLY, bytes(8), "w4")]),
}


@pytest.mark.parametrize("case", list(INVALID_REQUEST_CASES))
def test_invalid_request_nak(case):
    access, steps = INVALID_REQUEST_CASES[case]
    s = Solo(rq_psn=0, access=access)
    post_recvs(s, 2)
    hdr = {"atm4": dict(atmeth=(s.mr.addr + 4, s.mr.rkey, 1, 0)),
           "atm0": dict(atmeth=(s.mr.addr, s.mr.rkey, 1, 0)),
           "w3k": dict(reth=(s.mr.addr, s.mr.rkey, 3072)),
           "w4": dict(reth=(s.mr.addr, s.mr.rkey, 4)), None: {}}
    for psn, (op, payload, h) in enumerate(steps):
        s.rx(op, psn, payload, ackreq=True, **hdr[h])
    bad = len(steps) - 1
    got = acks(s.out())
    assert got[-1][:2] == (NAK_INV, bad)
    assert all(is_ack(x[0]) for x in got[:-1])
    assert s.qp.state == IBV_QPS_ERR
    assert (IBV_EVENT_QP_REQ_ERR, s.qp) in s.qp.events
    assert s.qp.cnt[C.resp_invalid_request_errors] == 1
    assert u64(s.mr.read(8)) == 0
    wcs = s.rcq.poll(5)
    assert len(wcs) == 2 and all(w.status != IBV_WC_SUCCESS for w in wcs)


# An operation the QP's access flags do not enable (CHK_OP_VALID): NAK remote
# access error and the QP to ERR with QP_ACCESS_ERR, as the spec and mlx5
# have it -- not rxe's invalid-request NAK.
QP_ACCESS_DENIED_CASES = {
    "write_only": (LW | RR | RA, O.RC_RDMA_WRITE_ONLY, b"abcd", "w4"),
    "write_first": (LW | RR | RA, O.RC_RDMA_WRITE_FIRST, bytes(1024), "w3k"),
    "write_only_with_imm": (LW | RR | RA, O.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, b"abcd", "w4"),
    "read": (LW | RW | RA, O.RC_RDMA_READ_REQUEST, b"", "w4"),
    "fetch_add": (LW | RW | RR, O.RC_FETCH_ADD, b"", "atm0"),
    "cmp_swap": (LW | RW | RR, O.RC_COMPARE_SWAP, b"", "atm0"),
}


@pytest.mark.parametrize("case", list(QP_ACCESS_DENIED_CASES))
def test_qp_access_flags_deny_with_remote_access_nak(case):
    access, op, payload, h = QP_ACCESS_DENIED_CASES[case]
    s = Solo(rq_psn=7, access=access)
    post_recvs(s, 2)
    s.mr.write((5).to_bytes(8, "little"), 0)
    hdr = {"atm0": dict(atmeth=(s.mr.addr, s.mr.rkey, 1, 5)),
           "w3k": dict(reth=(s.mr.addr, s.mr.rkey, 3072)),
           "w4": dict(reth=(s.mr.addr, s.mr.rkey, 4))}[h]
    if op == O.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE:
        hdr["imm"] = 9
    s.rx(op, 7, payload, ackreq=True, **hdr)
    pkts = s.out()
    assert [p.name for p in pkts] == ["RC_ACKNOWLEDGE"]          # no read response, no atomic ACK
    assert acks(pkts) == [(NAK_ACC, 7, 0)]
    assert s.qp.state == IBV_QPS_ERR
    assert (IBV_EVENT_QP_ACCESS_ERR, s.qp) in s.qp.events
    assert (IBV_EVENT_QP_REQ_ERR, s.qp) not in s.qp.events
    assert s.qp.cnt[C.resp_remote_access_errors] == 1
    assert s.qp.cnt[C.resp_invalid_request_errors] == 0
    assert u64(s.mr.read(8)) == 5                                 # memory untouched
    # no receive WQE was consumed: both are flushed
    assert [w.status for w in s.rcq.poll(5)] == [IBV_WC_WR_FLUSH_ERR] * 2


def test_send_longer_than_receive_buffer():
    s = Solo(rq_psn=0, path_mtu=IBV_MTU_256)
    s.qp.post_recv(RecvWQE(1, [(s.mr.addr, 300, s.mr.lkey)]))
    s.qp.post_recv(RecvWQE(2, [(s.mr.addr + 1000, 300, s.mr.lkey)]))
    s.rx(O.RC_SEND_FIRST, 0, bytes(256))
    s.rx(O.RC_SEND_LAST, 1, bytes(100), ackreq=True)      # 356 > 300
    assert acks(s.out()) == [(NAK_INV, 1, 0)]
    assert s.qp.state == IBV_QPS_ERR
    assert (IBV_EVENT_QP_REQ_ERR, s.qp) in s.qp.events
    wcs = s.rcq.poll(5)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_LOC_LEN_ERR), (2, IBV_WC_WR_FLUSH_ERR)]


def test_ack_msn_counts_completed_messages():
    s = Solo(rq_psn=0, path_mtu=IBV_MTU_256)
    post_recvs(s, 4)
    s.rx(O.RC_SEND_FIRST, 0, bytes(256), ackreq=True)
    s.rx(O.RC_SEND_LAST, 1, b"abc", ackreq=True)
    s.rx(O.RC_RDMA_WRITE_FIRST, 2, bytes(256), ackreq=True, reth=(s.mr.addr, s.mr.rkey, 300))
    s.rx(O.RC_RDMA_WRITE_LAST, 3, bytes(44), ackreq=True)
    s.rx(O.RC_RDMA_READ_REQUEST, 4, ackreq=True, reth=(s.mr.addr, s.mr.rkey, 8))
    s.rx(O.RC_FETCH_ADD, 5, ackreq=True, atmeth=(s.mr.addr + 64, s.mr.rkey, 1, 0))
    s.rx(O.RC_SEND_ONLY, 6, b"z", ackreq=True)
    pkts = s.out()
    msns = [(p.name, p.psn, p.aeth.msn) for p in pkts]
    assert msns == [("RC_ACKNOWLEDGE", 0, 0), ("RC_ACKNOWLEDGE", 1, 1), ("RC_ACKNOWLEDGE", 2, 1),
                    ("RC_ACKNOWLEDGE", 3, 2), ("RC_RDMA_READ_RESPONSE_ONLY", 4, 3),
                    ("RC_ATOMIC_ACKNOWLEDGE", 5, 4), ("RC_ACKNOWLEDGE", 6, 5)]


def test_responder_in_error_drops_requests():
    s = Solo(rq_psn=0)
    s.rx(O.RC_RDMA_WRITE_ONLY, 0, b"abcd", ackreq=True, reth=(s.mr.addr, 1, 4))
    s.out()
    assert s.qp.state == IBV_QPS_ERR
    s.rx(O.RC_RDMA_WRITE_ONLY, 1, b"abcd", ackreq=True, reth=(s.mr.addr, s.mr.rkey, 4))
    assert s.out() == [] and s.mr.read(4) == bytes(4)
    assert s.qp.cnt[C.dropped_bad_state] == 1


# ======================================================================
# requester / completer
# ======================================================================
def _to(t):
    return 4.096e-6 * 2 ** t


@pytest.mark.parametrize("timeout,retry_cnt", [(8, 0), (10, 3), (12, 7)])
def test_local_ack_timeout_retries_then_retry_exc_err(timeout, retry_cnt):
    pr = Pair(loss_ab=1.0, timeout=timeout, retry_cnt=retry_cnt)
    seen = tap(pr.sim, pr.a)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    t = pr.run_until_cqe(pr.qa.send_cq, 2, until=10.0)
    to = _to(timeout)
    sends = [(tt, p.psn) for tt, p in seen]
    # each attempt re-sends both packets with the same PSNs, one timeout apart
    assert [psn for _, psn in sends] == [0, 1] * (retry_cnt + 1)
    times = sorted({tt for tt, _ in sends})
    assert len(times) == retry_cnt + 1
    for k, tt in enumerate(times):
        assert tt == pytest.approx(k * to, rel=1e-6, abs=1e-9)
    assert t == pytest.approx((retry_cnt + 1) * to, rel=1e-6)
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_RETRY_EXC_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert pr.qa.state == IBV_QPS_ERR
    assert pr.ab.stats.sent == 2 * (retry_cnt + 1)
    assert pr.qa.cnt[C.local_ack_timeout_err] == retry_cnt + 1
    assert pr.qa.cnt[C.retry_exceeded_err] == 1


def test_local_ack_timeout_recovers_when_link_comes_back():
    pr = Pair(loss_ab=1.0, timeout=10, retry_cnt=7)
    seen = tap(pr.sim, pr.a)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.ma.write(b"Q" * 64)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    pr.run(2.5 * _to(10))                    # two transmissions lost
    pr.ab.loss = 0.0
    t = pr.run_until_cqe(pr.qa.send_cq, 1)
    assert pr.qa.send_cq.poll(1)[0].status == IBV_WC_SUCCESS
    assert len(seen) == 4                    # at 0, to, 2*to (lost) and 3*to
    assert t == pytest.approx(3 * _to(10) + 10e-6, rel=1e-6)
    assert pr.mb.read(64) == b"Q" * 64
    assert pr.qb.cnt[C.duplicate_request] == 0


def test_timeout_zero_means_no_timeout():
    pr = Pair(loss_ab=1.0, timeout=0)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    assert pr.qa.deadline is None
    pr.run(100.0)
    assert len(pr.qa.send_cq) == 0 and pr.ab.stats.sent == 1
    assert pr.qa.state != IBV_QPS_ERR and len(pr.qa.sq) == 1


@pytest.mark.parametrize("rnr_retry", [2, 0])
def test_rnr_retry_exhausted(rnr_retry):
    timer = 5
    pr = Pair(rnr_retry=rnr_retry, min_rnr_timer=timer)
    seen = tap(pr.sim, pr.a)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 64, pr.ma.lkey)]))
    pr.run_until_cqe(pr.qa.send_cq, 2)
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_RNR_RETRY_EXC_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    first_tx = [tt for tt, p in seen if p.psn == 0]
    assert len(first_tx) == rnr_retry + 1                        # 1 + rnr_retry attempts
    rtt = 2 * pr.ab.delay
    gap = rtt + RNR_TIMER_US[timer] * 1e-6
    for a, b in zip(first_tx, first_tx[1:]):
        assert b - a == pytest.approx(gap, rel=1e-6)
    assert pr.qb.cnt[C.send_rnr_err] == rnr_retry + 1
    assert pr.qa.cnt[C.retry_rnr_exceeded_err] == 1
    assert pr.qa.state == IBV_QPS_ERR


def test_rnr_retry_7_retries_until_a_receive_is_posted():
    pr = Pair(rnr_retry=7, min_rnr_timer=1)
    pr.ma.write(b"late" * 4)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 16, pr.ma.lkey)]))
    pr.run(0.002)
    assert pr.qb.cnt[C.send_rnr_err] > 20 and len(pr.qa.send_cq) == 0
    pr.qb.post_recv(RecvWQE(5, [(pr.mb.addr, 16, pr.mb.lkey)]))
    pr.run(0.004)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [(1, IBV_WC_SUCCESS)]
    assert [(w.wr_id, w.byte_len) for w in pr.qb.recv_cq.poll(5)] == [(5, 16)]
    assert pr.mb.read(16) == b"late" * 4


def test_error_completion_flushes_sq_and_rq():
    pr = Pair()
    for i in range(2):
        pr.qa.post_recv(RecvWQE(70 + i, [(pr.ma.addr, 64, pr.ma.lkey)]))
        pr.qb.post_recv(RecvWQE(80 + i, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey + 0x100))
    for i in range(3):
        pr.qa.post_send(SendWQE(2 + i, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(10)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_REM_ACCESS_ERR)] + \
        [(i, IBV_WC_WR_FLUSH_ERR) for i in (2, 3, 4)]
    assert [(w.wr_id, w.status) for w in pr.qa.recv_cq.poll(10)] == \
        [(70, IBV_WC_WR_FLUSH_ERR), (71, IBV_WC_WR_FLUSH_ERR)]
    assert pr.qa.state == IBV_QPS_ERR and not pr.qa.sq and not pr.qa.rq
    # the responder went to ERR as well and flushed its receive queue
    assert pr.qb.state == IBV_QPS_ERR
    assert [w.status for w in pr.qb.recv_cq.poll(10)] == [IBV_WC_WR_FLUSH_ERR] * 2
    # posting to a QP in ERR completes at once with a flush error
    pr.qa.post_send(SendWQE(9, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [(9, IBV_WC_WR_FLUSH_ERR)]


def test_unsignaled_success_has_no_cqe_but_errors_do():
    pr = Pair(sq_sig_all=False)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))                 # ok, silent
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=0x999999))                       # fails
    pr.qa.post_send(SendWQE(3, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))                 # flushed
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(10)
    assert [(w.wr_id, w.status) for w in wcs] == [(2, IBV_WC_REM_ACCESS_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
    assert len(pr.qb.recv_cq.poll(5)) >= 1


@pytest.mark.parametrize("case,status", [
    ("bad_rkey", IBV_WC_REM_ACCESS_ERR),
    ("read_out_of_bounds", IBV_WC_REM_ACCESS_ERR),
    ("misaligned_atomic", IBV_WC_REM_INV_REQ_ERR),
    ("send_too_long", IBV_WC_REM_INV_REQ_ERR),
    ("no_remote_write_on_qp", IBV_WC_REM_ACCESS_ERR),
    ("read_with_no_responder_resources", IBV_WC_REM_INV_REQ_ERR),
])
def test_remote_errors_map_to_requester_status(case, status):
    pr = Pair(access=ALL_ACCESS if case != "no_remote_write_on_qp" else LW | RR | RA,
              max_dest_rd_atomic=0 if case == "read_with_no_responder_resources" else 16)
    ma, mb = pr.ma, pr.mb
    if case == "bad_rkey":
        w = SendWQE(1, IBV_WR_RDMA_WRITE, [(ma.addr, 8, ma.lkey)], remote_addr=mb.addr, rkey=mb.rkey ^ 1)
    elif case == "read_out_of_bounds":
        w = SendWQE(1, IBV_WR_RDMA_READ, [(ma.addr, 64, ma.lkey)], remote_addr=mb.addr + mb.length - 32,
                    rkey=mb.rkey)
    elif case == "read_with_no_responder_resources":
        w = SendWQE(1, IBV_WR_RDMA_READ, [(ma.addr, 64, ma.lkey)], remote_addr=mb.addr, rkey=mb.rkey)
    elif case == "misaligned_atomic":
        w = SendWQE(1, IBV_WR_ATOMIC_FETCH_AND_ADD, [(ma.addr, 8, ma.lkey)], remote_addr=mb.addr + 4,
                    rkey=mb.rkey, compare_add=1)
    elif case == "send_too_long":
        pr.qb.post_recv(RecvWQE(1, [(mb.addr, 16, mb.lkey)]))
        w = SendWQE(1, IBV_WR_SEND, [(ma.addr, 17, ma.lkey)])
    else:
        w = SendWQE(1, IBV_WR_RDMA_WRITE, [(ma.addr, 8, ma.lkey)], remote_addr=mb.addr, rkey=mb.rkey)
    pr.qa.post_send(w)
    pr.run(0.01)
    (wc,) = pr.qa.send_cq.poll(5)
    assert wc.status == status
    assert pr.qa.state == IBV_QPS_ERR and pr.qb.state == IBV_QPS_ERR
    assert pr.mb.read(8) == bytes(8)


def test_max_rd_atomic_limits_outstanding_reads():
    s = Solo(max_rd_atomic=1, path_mtu=IBV_MTU_1024)
    for i in range(3):
        s.qp.post_send(SendWQE(i, IBV_WR_RDMA_READ, [(s.mr.addr + 100 * i, 100, s.mr.lkey)],
                               remote_addr=0x1000 + 100 * i, rkey=0x42))
    s.qp.post_send(SendWQE(3, IBV_WR_ATOMIC_FETCH_AND_ADD, [(s.mr.addr + 1000, 8, s.mr.lkey)],
                           remote_addr=0x2000, rkey=0x42, compare_add=1))
    pkts = s.out()
    assert [(p.name, p.psn) for p in pkts] == [("RC_RDMA_READ_REQUEST", 0)]
    s.rx(O.RC_RDMA_READ_RESPONSE_ONLY, 0, b"a" * 100, aeth=(ACK, 1))
    assert [(p.name, p.psn) for p in s.out()] == [("RC_RDMA_READ_REQUEST", 1)]
    s.rx(O.RC_RDMA_READ_RESPONSE_ONLY, 1, b"b" * 100, aeth=(ACK, 2))
    assert [(p.name, p.psn) for p in s.out()] == [("RC_RDMA_READ_REQUEST", 2)]
    s.rx(O.RC_RDMA_READ_RESPONSE_ONLY, 2, b"c" * 100, aeth=(ACK, 3))
    assert [(p.name, p.psn) for p in s.out()] == [("RC_FETCH_ADD", 3)]
    s.rx(O.RC_ATOMIC_ACKNOWLEDGE, 3, aeth=(ACK, 4), atmack=41)
    assert [(w.wr_id, w.status) for w in s.scq.poll(10)] == [(i, 0) for i in range(4)]
    assert s.mr.read(300) == b"a" * 100 + b"b" * 100 + b"c" * 100
    assert u64(s.mr.read(8, 1000)) == 41


def test_max_rd_atomic_in_the_simulator():
    pr = Pair(max_rd_atomic=1)
    seen = tap(pr.sim, pr.a)
    pr.mb.write(os.urandom(4096))
    for i in range(4):
        pr.qa.post_send(SendWQE(i, IBV_WR_RDMA_READ, [(pr.ma.addr + 1024 * i, 1024, pr.ma.lkey)],
                                remote_addr=pr.mb.addr + 1024 * i, rkey=pr.mb.rkey))
    pr.run(0.01)
    reads = [tt for tt, p in seen if p.name == "RC_RDMA_READ_REQUEST"]
    assert len(reads) == 4
    for a, b in zip(reads, reads[1:]):
        assert b - a == pytest.approx(2 * pr.ab.delay, rel=1e-6)    # one at a time, one RTT apart
    assert [w.status for w in pr.qa.send_cq.poll(10)] == [0] * 4
    assert pr.ma.read(4096) == pr.mb.read(4096)


def test_fence_waits_for_outstanding_read():
    s = Solo()
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(s.mr.addr, 16, s.mr.lkey)], remote_addr=0x1000, rkey=7))
    s.qp.post_send(SendWQE(2, IBV_WR_SEND, [(s.mr.addr + 100, 4, s.mr.lkey)], send_flags=IBV_SEND_FENCE))
    assert [p.name for p in s.out()] == ["RC_RDMA_READ_REQUEST"]
    s.rx(O.RC_RDMA_READ_RESPONSE_ONLY, 0, b"r" * 16, aeth=(ACK, 1))
    assert [(p.name, p.psn) for p in s.out()] == [("RC_SEND_ONLY", 1)]
    # without the fence the SEND does not wait
    t = Solo()
    t.qp.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(t.mr.addr, 16, t.mr.lkey)], remote_addr=0x1000, rkey=7))
    t.qp.post_send(SendWQE(2, IBV_WR_SEND, [(t.mr.addr + 100, 4, t.mr.lkey)]))
    assert [p.name for p in t.out()] == ["RC_RDMA_READ_REQUEST", "RC_SEND_ONLY"]


@pytest.mark.parametrize("kind", ["read", "atomic"])
def test_implied_nak_after_ack_of_later_send(kind):
    pr = Pair(path_mtu=IBV_MTU_1024)
    seen = tap(pr.sim, pr.a)
    resp = "RC_RDMA_READ_RESPONSE" if kind == "read" else "RC_ATOMIC_ACKNOWLEDGE"
    dropped = drop_filter(pr.sim, pr.b, lambda p: p.name.startswith(resp), limit=1)
    data = os.urandom(1000)
    pr.mb.write(data, 0x4000)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 64, pr.mb.lkey)]))
    if kind == "read":
        pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(pr.ma.addr, 1000, pr.ma.lkey)],
                                remote_addr=pr.mb.addr + 0x4000, rkey=pr.mb.rkey))
    else:
        pr.qa.post_send(SendWQE(1, IBV_WR_ATOMIC_CMP_AND_SWP, [(pr.ma.addr, 8, pr.ma.lkey)],
                                remote_addr=pr.mb.addr + 0x4000, rkey=pr.mb.rkey,
                                compare_add=u64(data[:8]), swap=0x5555))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr + 2000, 8, pr.ma.lkey)]))
    t = pr.run_until_cqe(pr.qa.send_cq, 2)
    assert len(dropped) == 1
    wcs = pr.qa.send_cq.poll(5)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    if kind == "read":
        assert wcs[0].opcode == IBV_WC_RDMA_READ
        assert pr.ma.read(1000) == data
    else:
        assert pr.ma.read(8) == data[:8]                 # the original, replayed
        assert u64(pr.mb.read(8, 0x4000)) == 0x5555      # swapped once (a 2nd CAS would fail)
        assert pr.qb.cnt[C.rx_atomic_requests] == 1
    assert t < 1e-3                                      # long before the 67 ms ACK timeout
    req = "RC_RDMA_READ_REQUEST" if kind == "read" else "RC_COMPARE_SWAP"
    assert [p.name for _, p in seen].count(req) == 2
    assert pr.qa.cnt[C.implied_nak_seq_err] == 1
    assert len(pr.qb.recv_cq.poll(5)) == 1               # the SEND was not delivered twice


def test_retry_counter_is_restored_by_progress():
    # retry_cnt counts the retries of one stall; an ACK that makes progress restores it
    pr = Pair(timeout=8, retry_cnt=1)
    firsts = set()

    def first_try(p):
        if p.psn in firsts:
            return False
        firsts.add(p.psn)
        return True
    lost = drop_filter(pr.sim, pr.a, first_try)
    for i in range(2):
        pr.qb.post_recv(RecvWQE(i, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.run_until_cqe(pr.qa.send_cq, 1)
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]), now=pr.sim.now)
    pr.run_until_cqe(pr.qa.send_cq, 2)
    assert [p.psn for p in lost] == [0, 1]                # each message lost its first try
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [(1, 0), (2, 0)]
    assert pr.qa.cnt[C.local_ack_timeout_err] == 2


def test_qp_reset_after_error_and_reconnect():
    from softrdma.enums import IBV_QPS_RESET
    from softrdma.enums import ibv_qp_attr_mask as M
    from softrdma.sim import connect_qps
    from softrdma.transport.qp import QPAttr
    pr = Pair(path_mtu=IBV_MTU_256)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 600, pr.ma.lkey)]))   # too long: both die
    pr.run(0.01)
    assert pr.qa.state == IBV_QPS_ERR and pr.qb.state == IBV_QPS_ERR
    pr.qa.send_cq.poll(10)
    pr.qb.recv_cq.poll(10)
    for qp in (pr.qa, pr.qb):
        qp.modify(QPAttr(qp_state=IBV_QPS_RESET), M.IBV_QP_STATE)
    connect_qps(pr.qa, pr.qb, pr.a, pr.b, path_mtu=IBV_MTU_256, psn_a=0x500, psn_b=0x900)
    data = os.urandom(600)
    pr.ma.write(data)
    pr.qb.post_recv(RecvWQE(2, [(pr.mb.addr, 1024, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 600, pr.ma.lkey)]), now=pr.sim.now)
    pr.qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(pr.ma.addr + 4096, 600, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey), now=pr.sim.now)
    pr.run(pr.sim.now + 0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [(2, 0), (3, 0)]
    assert [(w.wr_id, w.byte_len) for w in pr.qb.recv_cq.poll(5)] == [(2, 600)]
    assert pr.ma.read(600, 4096) == data


def test_psn_sequence_nak_makes_requester_go_back():
    s = Solo(sq_psn=10)
    for i in range(3):
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    assert [p.psn for p in s.out()] == [10, 11, 12]
    s.rx(O.RC_ACKNOWLEDGE, 11, aeth=(NAK_PSN, 1))   # PSN 11 missing: 10 implicitly acknowledged
    assert [w.wr_id for w in s.scq.poll(5)] == [0]
    assert [p.psn for p in s.out()] == [11, 12]
    assert s.qp.cnt[C.rcvd_seq_err] == 1
    s.rx(O.RC_ACKNOWLEDGE, 12, aeth=(ACK, 3))
    assert [w.wr_id for w in s.scq.poll(5)] == [1, 2]


def test_a_nak_after_a_timeouts_go_back_spends_no_second_retry():
    # rxe's started_retry: the timeout went back from PSN 10; a sequence NAK for
    # PSN 10 that the peer sent before it saw the go-back neither goes back again
    # nor spends a retry.  A later timeout still does both.
    s = Solo(sq_psn=10, timeout=8, retry_cnt=3)
    for i in range(3):
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    assert [p.psn for p in s.out()] == [10, 11, 12]
    s.tick(1.1 * _to(8))
    assert [p.psn for p in s.out()] == [10, 11, 12] and s.qp.retry_cnt == 2
    s.rx(O.RC_ACKNOWLEDGE, 10, aeth=(NAK_PSN, 0))
    assert s.out() == [] and s.qp.retry_cnt == 2
    assert s.qp.cnt[C.rcvd_seq_err] == 1 and s.qp.cnt[C.completer_retry_err] == 1
    s.tick(2.2 * _to(8))
    assert [p.psn for p in s.out()] == [10, 11, 12] and s.qp.retry_cnt == 1
    s.rx(O.RC_ACKNOWLEDGE, 11, aeth=(NAK_PSN, 1))     # progress: 10 acknowledged, 11 missing
    assert [p.psn for p in s.out()] == [11, 12] and s.qp.retry_cnt == 2   # restored, one spent
    assert [w.wr_id for w in s.scq.poll(5)] == [0]


def test_ghost_and_duplicate_acks_are_ignored_and_counted():
    s = Solo(sq_psn=100)
    for i in range(2):
        s.qp.post_send(SendWQE(i, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    s.out()
    s.rx(O.RC_ACKNOWLEDGE, 105, aeth=(ACK, 9))       # a PSN never sent
    s.rx(O.RC_ACKNOWLEDGE, 102, aeth=(ACK, 9))       # == next PSN to send: never sent either
    assert len(s.scq) == 0 and s.qp.cnt[C.dropped_ghost_response] == 2
    s.rx(O.RC_ACKNOWLEDGE, 100, aeth=(ACK, 1))
    assert [w.wr_id for w in s.scq.poll(5)] == [0]
    s.rx(O.RC_ACKNOWLEDGE, 100, aeth=(ACK, 1))       # duplicate (old) ACK
    s.rx(O.RC_ACKNOWLEDGE, 99, aeth=(ACK, 0))        # older still
    s.rx(O.RC_ACKNOWLEDGE, 100, aeth=(NAK_ACC, 1))   # an old NAK must not fail anything
    s.rx(O.RC_RDMA_READ_RESPONSE_ONLY, 100, b"x" * 4, aeth=(ACK, 1))   # stale response
    assert len(s.scq) == 0 and s.qp.state != IBV_QPS_ERR
    assert s.qp.cnt[C.dropped_ghost_response] == 6
    assert s.out() == []
    s.rx(O.RC_ACKNOWLEDGE, 101, aeth=(ACK, 2))
    assert [w.wr_id for w in s.scq.poll(5)] == [1]
    assert s.qp.deadline is None                     # nothing outstanding: timer stopped


def test_rnr_nak_on_requester_backs_off_by_the_nak_timer():
    s = Solo(sq_psn=0, rnr_retry=3)
    s.qp.post_send(SendWQE(1, IBV_WR_SEND, [(s.mr.addr, 8, s.mr.lkey)]))
    s.out()
    s.rx(O.RC_ACKNOWLEDGE, 0, aeth=(0x20 | 14, 0), now=1e-3)
    assert s.qp.deadline == pytest.approx(1e-3 + RNR_TIMER_US[14] * 1e-6)
    s.tick(1e-3 + RNR_TIMER_US[14] * 1e-6 * 0.5)
    assert s.out() == []
    s.tick(s.qp.deadline)
    assert [(p.name, p.psn) for p in s.out()] == [("RC_SEND_ONLY", 0)]
    assert s.qp.cnt[C.rcvd_rnr_err] == 1


def test_retransmitted_write_is_identical():
    pr = Pair(path_mtu=IBV_MTU_256, timeout=8)
    drop_filter(pr.sim, pr.a, lambda p: p.psn == 2, limit=1)
    seen = tap(pr.sim, pr.a)                 # wraps the filter: sees the dropped packet too
    data = os.urandom(1000)
    pr.ma.write(data)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 1000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 8, rkey=pr.mb.rkey))
    pr.run_until_cqe(pr.qa.send_cq, 1)
    assert pr.qa.send_cq.poll(1)[0].status == IBV_WC_SUCCESS
    assert pr.mb.read(1000, 8) == data
    # the gap is NAKed (PSN sequence error) and the requester goes back to PSN 2
    psns = [p.psn for _, p in seen]
    assert psns[:4] == [0, 1, 2, 3] and psns[4:] == [2, 3]
    first = {p.psn: bytes(p.payload) for _, p in seen[:4]}
    again = {p.psn: bytes(p.payload) for _, p in seen[4:]}
    assert all(first[k] == v for k, v in again.items())
    assert pr.qb.cnt[C.out_of_seq_request] == 1 and pr.qa.cnt[C.rcvd_seq_err] == 1


@pytest.mark.parametrize("sizes", [[700], [8, 8]], ids=["one_3_packet_send", "two_pipelined_sends"])
def test_rnr_retry_7_waits_for_a_receive_with_packets_in_flight(sizes):
    # The packets behind the RNR-NAKed one arrive out of sequence, so the responder also
    # sends one PSN-sequence NAK per RNR cycle (rxe's responder does the same).  rxe's
    # completer starts at most one retry sequence (comp.started_retry) until progress, so
    # retry_cnt is spent once, not per cycle: with rnr_retry=7 the sender must wait for the
    # receive however long it takes.
    pr = Pair(path_mtu=IBV_MTU_256, rnr_retry=7, retry_cnt=1, min_rnr_timer=1)
    data = os.urandom(700)
    pr.ma.write(data)
    for i, n in enumerate(sizes):
        pr.qa.post_send(SendWQE(1 + i, IBV_WR_SEND, [(pr.ma.addr, n, pr.ma.lkey)]))
    pr.run(0.001)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.entries] == []    # still waiting
    assert pr.qb.cnt[C.send_rnr_err] > 5
    for i, n in enumerate(sizes):
        pr.qb.post_recv(RecvWQE(5 + i, [(pr.mb.addr + 1024 * i, 1024, pr.mb.lkey)]))
    pr.run(0.002)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == \
        [(1 + i, IBV_WC_SUCCESS) for i in range(len(sizes))]
    assert pr.mb.read(sizes[0]) == data[:sizes[0]]


def test_lost_middle_read_response_rereads_only_the_missing_part():
    pr = Pair(path_mtu=IBV_MTU_1024)
    seen = tap(pr.sim, pr.a)
    dropped = drop_filter(pr.sim, pr.b, lambda p: p.name == "RC_RDMA_READ_RESPONSE_MIDDLE" and p.psn == 2,
                          limit=1)
    data = os.urandom(5000)
    pr.mb.write(data, 0x100)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(pr.ma.addr, 5000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x100, rkey=pr.mb.rkey))
    t = pr.run_until_cqe(pr.qa.send_cq, 1)
    assert len(dropped) == 1
    assert pr.qa.send_cq.poll(1)[0].status == IBV_WC_SUCCESS
    assert pr.ma.read(5000) == data
    reqs = [p for _, p in seen if p.name == "RC_RDMA_READ_REQUEST"]
    assert [(r.psn, r.reth.va - pr.mb.addr, r.reth.dma_len) for r in reqs] == \
        [(0, 0x100, 5000), (2, 0x100 + 2048, 5000 - 2048)]
    assert t < 1e-3                                     # found by the gap, not by the timer


def test_lost_atomic_ack_is_retried_and_not_executed_twice():
    pr = Pair(timeout=8)
    dropped = drop_filter(pr.sim, pr.b, lambda p: p.name == "RC_ATOMIC_ACKNOWLEDGE", limit=1)
    pr.mb.write(p64(100), 8)
    pr.qa.post_send(SendWQE(1, IBV_WR_ATOMIC_FETCH_AND_ADD, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 8, rkey=pr.mb.rkey, compare_add=7))
    t = pr.run_until_cqe(pr.qa.send_cq, 1)
    assert len(dropped) == 1
    assert pr.qa.send_cq.poll(1)[0].status == IBV_WC_SUCCESS
    assert t == pytest.approx(_to(8) + 2 * pr.ab.delay, rel=1e-6)
    assert u64(pr.ma.read(8)) == 100                    # the original value, from the replay
    assert u64(pr.mb.read(8, 8)) == 107                 # executed once
    assert pr.qb.cnt[C.duplicate_request] == 1 and pr.qb.cnt[C.rx_atomic_requests] == 1


@pytest.mark.parametrize("case", ["bad_lkey", "beyond_local_mr", "read_into_mr_without_local_write"])
def test_local_protection_error(case):
    from softrdma.enums import IBV_WC_LOC_PROT_ERR
    pr = Pair()
    ro = pr.a.reg_mr(4096, RR)                         # no LOCAL_WRITE
    if case == "bad_lkey":
        w = SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey + 0x100)])
    elif case == "beyond_local_mr":
        w = SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr + pr.ma.length - 4, 8, pr.ma.lkey)],
                    remote_addr=pr.mb.addr, rkey=pr.mb.rkey)
    else:
        w = SendWQE(1, IBV_WR_RDMA_READ, [(ro.addr, 8, ro.lkey)], remote_addr=pr.mb.addr, rkey=pr.mb.rkey)
    pr.qa.post_send(w)
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.run(0.01)
    wcs = pr.qa.send_cq.poll(5)
    assert [(x.wr_id, x.status) for x in wcs] == [(1, IBV_WC_LOC_PROT_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert pr.qa.state == IBV_QPS_ERR
    assert pr.ab.stats.sent == 0                       # nothing reached the wire


def test_timeout_resends_from_oldest_unacked_psn_mid_message():
    s = Solo(path_mtu=IBV_MTU_256, timeout=10, retry_cnt=3)
    data = os.urandom(1200)
    s.mr.write(data)
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(s.mr.addr, 1200, s.mr.lkey)], remote_addr=0x9000, rkey=5))
    first = s.out()
    assert [p.name for p in first] == ["RC_RDMA_WRITE_FIRST"] + ["RC_RDMA_WRITE_MIDDLE"] * 3 + \
        ["RC_RDMA_WRITE_LAST"]
    s.rx(O.RC_ACKNOWLEDGE, 1, aeth=(ACK, 0), now=1e-5)   # PSNs 0 and 1 arrived
    assert s.qp.deadline == pytest.approx(1e-5 + _to(10))
    s.tick(s.qp.deadline)
    again = s.out()
    assert [(p.name, p.psn) for p in again] == [("RC_RDMA_WRITE_MIDDLE", 2), ("RC_RDMA_WRITE_MIDDLE", 3),
                                                ("RC_RDMA_WRITE_LAST", 4)]
    assert [bytes(p.payload) for p in again] == [bytes(p.payload) for p in first[2:]]
    assert again[-1].ackreq
    s.rx(O.RC_ACKNOWLEDGE, 4, aeth=(ACK, 1))
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_SUCCESS)]


def test_request_with_wrong_pkey_is_dropped():
    s = Solo(rq_psn=0)
    post_recvs(s, 1)
    s.rx(O.RC_SEND_ONLY, 0, b"abc", ackreq=True, pkey=0x1234)
    assert s.out() == [] and len(s.rcq) == 0
    assert s.qp.cnt[C.dropped_bad_pkey] == 1
    s.rx(O.RC_SEND_ONLY, 0, b"abc", ackreq=True, pkey=0x7FFF)   # membership bit ignored
    assert len(s.rcq) == 1


def test_nak_implicitly_acknowledges_earlier_wqes():
    pr = Pair()
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + pr.mb.length, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(3, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.run(0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(5)] == [
        (1, IBV_WC_SUCCESS), (2, IBV_WC_REM_ACCESS_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
    assert [(w.wr_id, w.status) for w in pr.qb.recv_cq.poll(5)] == [(1, IBV_WC_SUCCESS)]


def test_uc_responder_errors_drop_the_message_silently():
    from softrdma.enums import IBV_QPT_UC, IBV_QPS_RTS
    pr = Pair(IBV_QPT_UC)
    pr.qb.post_recv(RecvWQE(1, [(pr.mb.addr, 16, pr.mb.lkey)]))
    pr.qb.post_recv(RecvWQE(2, [(pr.mb.addr + 100, 64, pr.mb.lkey)]))
    pr.ma.write(b"payload!" * 8)
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey ^ 0x100))      # bad rkey
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))       # fits WQE 1
    pr.run(0.01)
    assert [w.status for w in pr.qa.send_cq.poll(5)] == [0, 0]
    assert pr.qb.state == IBV_QPS_RTS and pr.ba.stats.sent == 0
    assert [(w.wr_id, w.status, w.byte_len) for w in pr.qb.recv_cq.poll(5)] == [(1, 0, 8)]
    assert pr.mb.read(8) == b"payload!"


def test_ack_for_psns_sent_before_a_go_back_moves_the_requester_forward():
    # After a timeout the requester re-sends from comp_psn; the responder had
    # everything already (only the ACK was lost), so its re-ACK names a PSN
    # beyond what this pass has re-sent.  That ACK is no ghost: it completes
    # the WQEs it covers and the requester resumes after it.
    s = Solo(path_mtu=IBV_MTU_256, timeout=10, retry_cnt=3)
    s.mr.write(os.urandom(8192))
    for i in range(3):                    # three 8-packet WRITEs: PSNs 0..23
        s.qp.post_send(SendWQE(i + 1, IBV_WR_RDMA_WRITE, [(s.mr.addr + 2048 * i, 2048, s.mr.lkey)],
                               remote_addr=0x9000, rkey=5))
    assert len(s.out()) == 24
    s.qp.cwnd = 32.0
    s.tick(s.qp.deadline)                 # timeout: go back to PSN 0, window halved to 16
    resent = s.out()
    assert [p.psn for p in resent] == list(range(16))
    s.rx(O.RC_ACKNOWLEDGE, 19, aeth=(ACK, 2))    # re-ACK from the responder: up to PSN 19
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_SUCCESS), (2, IBV_WC_SUCCESS)]
    assert s.qp.comp_psn == 20
    nxt = s.out()
    assert [(p.name, p.psn) for p in nxt] == [("RC_RDMA_WRITE_MIDDLE", 20), ("RC_RDMA_WRITE_MIDDLE", 21),
                                              ("RC_RDMA_WRITE_MIDDLE", 22), ("RC_RDMA_WRITE_LAST", 23)]
    assert bytes(nxt[0].payload) == s.mr.read(256, 4096 + 4 * 256)
    assert s.qp.cnt[C.dropped_ghost_response] == 0
    s.rx(O.RC_ACKNOWLEDGE, 23, aeth=(ACK, 3))
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(3, IBV_WC_SUCCESS)]


def test_ack_for_a_psn_never_sent_is_a_ghost():
    s = Solo(path_mtu=IBV_MTU_256)
    s.mr.write(os.urandom(512))
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(s.mr.addr, 512, s.mr.lkey)], remote_addr=0x9000, rkey=5))
    assert len(s.out()) == 2
    s.rx(O.RC_ACKNOWLEDGE, 2, aeth=(ACK, 1))      # PSN 2 was never sent
    assert s.qp.cnt[C.dropped_ghost_response] == 1
    assert len(s.scq) == 0 and s.qp.comp_psn == 0


def test_go_back_window_halves_on_loss_and_regrows():
    s = Solo(path_mtu=IBV_MTU_256, timeout=10, retry_cnt=7)
    s.mr.write(os.urandom(1 << 16))
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(s.mr.addr, 256 * 200, s.mr.lkey)], remote_addr=0x9000,
                           rkey=5))
    first = s.out()
    assert len(first) == 128 and first[-1].ackreq          # the window (128) fills: AckReq
    s.rx(O.RC_ACKNOWLEDGE, 10, aeth=(0x60, 0))             # sequence NAK at 10: go back
    again = s.out()
    assert s.qp.cwnd == 64
    assert [p.psn for p in again] == list(range(10, 74)) and again[-1].ackreq
    s.rx(O.RC_ACKNOWLEDGE, 73, aeth=(ACK, 0))               # 64 PSNs acknowledged: +1 per window
    assert s.qp.cwnd == pytest.approx(65)
    for _ in range(10):                                     # repeated losses stop at the floor
        s.qp.retry_psn = None
        s.rx(O.RC_ACKNOWLEDGE, s.qp.comp_psn, aeth=(0x60, 0))
        s.out()
    assert s.qp.cwnd == 16


def test_the_requester_counts_the_runs_that_end_at_a_full_window():
    s = Solo(path_mtu=IBV_MTU_256)
    s.mr.write(os.urandom(1 << 16))
    full = C.req_window_full

    def write(wr_id, npkts):
        s.qp.post_send(SendWQE(wr_id, IBV_WR_RDMA_WRITE, [(s.mr.addr, 256 * npkts, s.mr.lkey)],
                               remote_addr=0x9000, rkey=5))
    write(1, 100)
    assert len(s.out()) == 100 and s.qp.cnt[full] == 0     # room left: no stop
    write(2, 40)
    assert len(s.out()) == 28 and s.qp.cnt[full] == 1      # stops mid-message at 128 unacknowledged
    write(3, 1)
    assert s.out() == [] and s.qp.cnt[full] == 2           # a new WQE behind the full window
    s.rx(O.RC_ACKNOWLEDGE, 99, aeth=(ACK, 1))              # 100 PSNs acknowledged: the rest goes
    assert [p.psn for p in s.out()] == list(range(128, 141)) and s.qp.cnt[full] == 2


def test_local_error_stops_the_requester_and_completes_in_order():
    s = Solo(path_mtu=IBV_MTU_256)
    s.mr.write(os.urandom(1024))
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(s.mr.addr, 512, s.mr.lkey)], remote_addr=0x9000, rkey=5))
    s.qp.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(s.mr.addr, 512, s.mr.lkey + 1)], remote_addr=0x9000,
                           rkey=5))                                    # bad lkey
    s.qp.post_send(SendWQE(3, IBV_WR_RDMA_WRITE, [(s.mr.addr, 512, s.mr.lkey)], remote_addr=0x9000, rkey=5))
    assert [p.psn for p in s.out()] == [0, 1]                          # nothing after the bad WQE
    assert len(s.scq) == 0 and s.qp.state == IBV_QPS_RTS
    s.rx(O.RC_ACKNOWLEDGE, 1, aeth=(ACK, 1))
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [
        (1, IBV_WC_SUCCESS), (2, IBV_WC_LOC_PROT_ERR), (3, IBV_WC_WR_FLUSH_ERR)]
    assert s.qp.state == IBV_QPS_ERR and s.out() == []
