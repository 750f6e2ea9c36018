"""transport.completer: READ responses whose opcode does not fit the sequence.

A READ's responses are FIRST, MIDDLE..., LAST (or one ONLY), starting at the
PSN its request carried.  A response at the expected PSN with an opcode that
does not fit -- MIDDLE/LAST where FIRST/ONLY is expected, FIRST/ONLY while a
multi-packet response is in progress -- is a bad response: the WQE completes
with IBV_WC_BAD_RESP_ERR and the QP goes to ERR, with no retry (as mlx5, and
rxe_comp.c's check_ack -> COMPST_ERROR).  Responses outside the outstanding
window (duplicates, ghosts) stay dropped and counted, and a go-back's
re-request for the missing part legitimately restarts with FIRST/ONLY.
"""

from __future__ import annotations

import os

import pytest

from softrdma.enums import (
    IBV_MTU_256, IBV_QPS_ERR, IBV_WC_BAD_RESP_ERR, IBV_WC_RDMA_READ, IBV_WC_SUCCESS, IBV_WC_WR_FLUSH_ERR,
    IBV_WR_RDMA_READ, IBV_WR_SEND,
)
from softrdma.transport.counters import Counter as C
from softrdma.transport.wr import SendWQE
from softrdma.wire.opcodes import Opcode as O

from transport_helpers import Solo

ACK = 0x1F
FIRST, MIDDLE, LAST, ONLY = (O.RC_RDMA_READ_RESPONSE_FIRST, O.RC_RDMA_READ_RESPONSE_MIDDLE,
                             O.RC_RDMA_READ_RESPONSE_LAST, O.RC_RDMA_READ_RESPONSE_ONLY)
DATA = os.urandom(700)          # 3 packets at MTU 256: 256 + 256 + 188


def _resp(s, op, psn, payload):
    kw = {} if op == MIDDLE else {"aeth": (ACK, 1)}
    s.rx(op, psn, payload, **kw)


def _read(length=700, then_send=True, **kw):
    """A requester QP with one READ of ``length`` bytes at PSN 0 (and a SEND
    behind it), its request already sent."""
    s = Solo(path_mtu=IBV_MTU_256, sq_psn=0, timeout=10, retry_cnt=3, **kw)
    s.qp.post_send(SendWQE(1, IBV_WR_RDMA_READ, [(s.mr.addr, length, s.mr.lkey)],
                           remote_addr=0x9000, rkey=5))
    if then_send:
        s.qp.post_send(SendWQE(2, IBV_WR_SEND, [(s.mr.addr + 0x4000, 8, s.mr.lkey)]))
    pkts = s.out()
    assert [(p.name, p.psn) for p in pkts][0] == ("RC_RDMA_READ_REQUEST", 0)
    return s


def _assert_bad_response(s):
    wcs = s.scq.poll(5)
    assert [(w.wr_id, w.status) for w in wcs] == [(1, IBV_WC_BAD_RESP_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert wcs[0].opcode == IBV_WC_RDMA_READ
    assert s.qp.state == IBV_QPS_ERR
    # not retried: no go-back, no re-request, no retry spent
    assert s.out() == []
    assert s.qp.cnt[C.completer_retry_err] == 0 and s.qp.cnt[C.implied_nak_seq_err] == 0
    assert s.qp.cnt[C.dropped_ghost_response] == 0


SEQUENCE_CASES = {
    # MIDDLE / LAST where FIRST is expected
    "middle_first": [(MIDDLE, 0, DATA[:256])],
    "last_first": [(LAST, 0, DATA[:256])],
    # FIRST / ONLY while the response is in progress
    "first_twice": [(FIRST, 0, DATA[:256]), (FIRST, 1, DATA[256:512])],
    "only_inside": [(FIRST, 0, DATA[:256]), (MIDDLE, 1, DATA[256:512]), (ONLY, 2, DATA[512:])],
}


@pytest.mark.parametrize("case", list(SEQUENCE_CASES))
def test_read_response_out_of_sequence_is_a_bad_response(case):
    s = _read()
    steps = SEQUENCE_CASES[case]
    for op, psn, payload in steps:
        _resp(s, op, psn, payload)
    _assert_bad_response(s)
    good = len(steps) - 1                  # the responses before the bad one were placed
    assert s.mr.read(256 * good) == DATA[:256 * good]


@pytest.mark.parametrize("op", [LAST, MIDDLE], ids=["last", "middle"])
def test_single_packet_read_answered_by_a_non_start_opcode(op):
    s = _read(100)
    _resp(s, op, 0, DATA[:100] if op == LAST else DATA[:256])
    _assert_bad_response(s)


def test_first_for_a_single_packet_read_is_a_bad_response():
    s = _read(100)
    _resp(s, FIRST, 0, DATA[:256])
    _assert_bad_response(s)


def test_duplicates_and_ghosts_are_still_dropped_and_counted():
    s = _read()
    _resp(s, FIRST, 0, DATA[:256])
    _resp(s, FIRST, 0, DATA[:256])          # duplicate: older than comp_psn
    _resp(s, MIDDLE, 0, DATA[:256])         # older still, and a wrong opcode: not looked at
    _resp(s, MIDDLE, 5, DATA[:256])         # a PSN never sent: ghost
    _resp(s, ONLY, 4, DATA[:10])            # ghost
    assert s.qp.cnt[C.dropped_ghost_response] == 4
    assert s.qp.state != IBV_QPS_ERR and len(s.scq) == 0
    _resp(s, MIDDLE, 1, DATA[256:512])
    _resp(s, LAST, 2, DATA[512:])
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_SUCCESS)]
    assert s.mr.read(700) == DATA


@pytest.mark.parametrize("late", [False, True], ids=["re_requested_first", "first_pass_middle_late"])
def test_go_back_restarts_the_response_with_first_at_the_missing_psn(late):
    """After a timeout go-back, the READ is re-requested from PSN 1 (its
    missing part): FIRST at PSN 1 starts the new response stream (softrdma's
    responder replays so); MIDDLE at PSN 1 is as good -- the first pass's,
    arriving late, or kernel rxe's replay, which continues with MIDDLE/LAST
    when the re-request is not at the READ's first PSN."""
    s = _read(then_send=False)
    _resp(s, FIRST, 0, DATA[:256])
    s.tick(s.qp.deadline)                   # PSNs 1 and 2 never came: go back
    (req,) = s.out()
    assert (req.name, req.psn, req.reth.dma_len) == ("RC_RDMA_READ_REQUEST", 1, 700 - 256)
    if late:
        _resp(s, MIDDLE, 1, DATA[256:512])
    else:
        _resp(s, FIRST, 1, DATA[256:512])
    _resp(s, FIRST, 2, DATA[512:])          # in progress: FIRST here does not fit
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_BAD_RESP_ERR)]
    assert s.qp.state == IBV_QPS_ERR and s.mr.read(512) == DATA[:512]


@pytest.mark.parametrize("late", [False, True], ids=["re_requested_first", "first_pass_middle_late"])
def test_go_back_response_completes(late):
    s = _read(then_send=False)
    _resp(s, FIRST, 0, DATA[:256])
    s.tick(s.qp.deadline)
    assert [p.psn for p in s.out()] == [1]
    _resp(s, MIDDLE if late else FIRST, 1, DATA[256:512])
    _resp(s, LAST, 2, DATA[512:])
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_SUCCESS)]
    assert s.mr.read(700) == DATA and s.qp.state != IBV_QPS_ERR


def test_go_back_to_the_first_psn_still_wants_first():
    s = _read(then_send=False)
    s.tick(s.qp.deadline)                   # nothing came: the whole READ again
    (req,) = s.out()
    assert (req.psn, req.reth.dma_len) == (0, 700)
    _resp(s, MIDDLE, 0, DATA[:256])
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_BAD_RESP_ERR)]
    assert s.qp.state == IBV_QPS_ERR


@pytest.mark.parametrize("op", [ONLY, LAST], ids=["only_softrdma_replay", "last_rxe_replay"])
def test_go_back_for_the_last_packet_takes_only_or_last(op):
    s = _read(then_send=False)
    _resp(s, FIRST, 0, DATA[:256])
    _resp(s, MIDDLE, 1, DATA[256:512])
    s.tick(s.qp.deadline)
    (req,) = s.out()
    assert (req.psn, req.reth.dma_len) == (2, 700 - 512)
    _resp(s, op, 2, DATA[512:])
    assert [(w.wr_id, w.status) for w in s.scq.poll(5)] == [(1, IBV_WC_SUCCESS)]
    assert s.mr.read(700) == DATA
