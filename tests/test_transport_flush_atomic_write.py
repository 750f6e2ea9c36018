"""IBA 1.5's ATOMIC WRITE and FLUSH through the transport (two simulated
nodes, and one QP fed packet by packet), as kernel rxe has them: the wire
headers (RETH + 8 bytes; FETH + RETH), the zero-length READ RESPONSE ONLY
that answers both, the access checks (REMOTE_WRITE; the placement type's
IBV_ACCESS_FLUSH_* on the QP and on the MR), the range or whole-MR
selectivity, duplicates answered without being executed again, and the
completions (IBV_WC_ATOMIC_WRITE / IBV_WC_FLUSH)."""

from __future__ import annotations

import os

from softrdma.enums import (
    IBV_ACCESS_FLUSH_GLOBAL, IBV_ACCESS_FLUSH_PERSISTENT, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE,
    IBV_QPS_ERR, IBV_WC_ATOMIC_WRITE, IBV_WC_FLUSH, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_INV_REQ_ERR,
    IBV_WC_SUCCESS, IBV_WR_ATOMIC_WRITE, IBV_WR_FLUSH, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE,
)
from softrdma.transport.wr import SendWQE
from softrdma.wire.headers import feth_word
from softrdma.wire.opcodes import OPCODE_TABLE, Opcode

from transport_helpers import ALL_ACCESS, Pair, Solo, drop_filter, tap

FLUSH_QP = ALL_ACCESS | IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT


def _aw(wr_id, pr, off, value: bytes, **kw):
    return SendWQE(wr_id, IBV_WR_ATOMIC_WRITE, remote_addr=pr.mb.addr + off, rkey=kw.pop("rkey", pr.mb.rkey),
                   compare_add=int.from_bytes(value, "little"), **kw)


def _flush(wr_id, rkey, addr, length, ptype=IBV_FLUSH_GLOBAL, level=IBV_FLUSH_RANGE):
    return SendWQE(wr_id, IBV_WR_FLUSH, remote_addr=addr, rkey=rkey, compare_add=length, swap=ptype | level << 8)


def _wcs(qp):
    return [(w.wr_id, w.status, w.opcode, w.byte_len) for w in qp.send_cq.poll(16)]


def test_opcode_table_rows_as_rxe():
    f, aw = OPCODE_TABLE[Opcode.RC_FLUSH], OPCODE_TABLE[Opcode.RC_ATOMIC_WRITE]
    assert (f.opcode, f.feth, f.reth, f.length, f.has_payload) == (0x1C, 12, 16, 32, False)
    assert (aw.opcode, aw.feth, aw.reth, aw.length, aw.has_payload) == (0x1D, -1, 12, 28, True)
    assert OPCODE_TABLE[0x3C] is None and OPCODE_TABLE[0x3D] is None      # RC only: no UC FLUSH
    assert feth_word(IBV_FLUSH_PERSISTENT, IBV_FLUSH_MR) == 0x12


def test_atomic_write_places_8_bytes_and_completes():
    pr = Pair()
    seen_a, seen_b = tap(pr.sim, pr.a), tap(pr.sim, pr.b)
    pr.mb.write(b"\xee" * 24, 0x100)
    pr.qa.post_send(_aw(1, pr, 0x108, b"ABCDEFGH"))
    pr.run(0.01)
    assert _wcs(pr.qa) == [(1, IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, 8)]
    assert pr.mb.read(24, 0x100) == b"\xee" * 8 + b"ABCDEFGH" + b"\xee" * 8
    (req,) = [p for _, p in seen_a]
    assert req.name == "RC_ATOMIC_WRITE" and req.ackreq
    assert (req.reth.va, req.reth.rkey, req.reth.dma_len) == (pr.mb.addr + 0x108, pr.mb.rkey, 8)
    assert bytes(req.payload) == b"ABCDEFGH" and req.pad == 0
    (resp,) = [p for _, p in seen_b]
    assert resp.name == "RC_RDMA_READ_RESPONSE_ONLY" and resp.psn == req.psn and len(resp.payload) == 0
    assert resp.aeth.syndrome == 0x1F and resp.aeth.msn == 1


def test_flush_range_and_whole_mr():
    pr = Pair(access=FLUSH_QP)
    mr = pr.b.reg_mr(1 << 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL)
    seen_a, seen_b = tap(pr.sim, pr.a), tap(pr.sim, pr.b)
    pr.ma.write(os.urandom(4096))
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 4096, pr.ma.lkey)], remote_addr=mr.addr + 64,
                            rkey=mr.rkey))
    pr.qa.post_send(_flush(2, mr.rkey, mr.addr + 64, 4096))
    # MR level: the va and length are not looked at (rdma-core's test sends random lengths)
    pr.qa.post_send(_flush(3, mr.rkey, 0, 12345678, level=IBV_FLUSH_MR))
    pr.run(0.01)
    assert _wcs(pr.qa) == [(1, 0, 1, 4096), (2, IBV_WC_SUCCESS, IBV_WC_FLUSH, 4096),
                           (3, IBV_WC_SUCCESS, IBV_WC_FLUSH, 12345678)]
    assert mr.read(4096, 64) == pr.ma.read(4096)
    flushes = [p for _, p in seen_a if p.name == "RC_FLUSH"]
    assert [(p.feth, p.reth.dma_len) for p in flushes] == [(0x01, 4096), (0x11, 12345678)]
    assert all(p.ackreq and not len(p.payload) for p in flushes)
    resps = [p for _, p in seen_b if p.name == "RC_RDMA_READ_RESPONSE_ONLY"]
    assert [p.psn for p in resps] == [p.psn for p in flushes] and not any(len(p.payload) for p in resps)


def test_flush_placement_type_the_mr_lacks_is_a_remote_access_error():
    """rdma-core's test_qp_ex_rc_flush_type_violate: an MR with FLUSH_GLOBAL
    only, a PERSISTENT flush -> IBV_WC_REM_ACCESS_ERR (rxe: rkey violation)."""
    pr = Pair(access=FLUSH_QP)
    mr = pr.b.reg_mr(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL)
    pr.qa.post_send(_flush(1, mr.rkey, mr.addr, 64, ptype=IBV_FLUSH_PERSISTENT))
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]
    assert pr.qb.state == IBV_QPS_ERR


def test_flush_the_qp_does_not_allow_and_an_mr_without_flush_access():
    pr = Pair()                                     # QP access without FLUSH_GLOBAL
    pr.qa.post_send(_flush(1, pr.mb.rkey, pr.mb.addr, 8))
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]
    pr = Pair(access=FLUSH_QP)                      # the QP allows it, the MR (ALL_ACCESS) does not
    pr.qa.post_send(_flush(1, pr.mb.rkey, pr.mb.addr, 8, level=IBV_FLUSH_MR))
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]


def test_flush_range_outside_the_mr_is_a_remote_access_error():
    pr = Pair(access=FLUSH_QP)
    mr = pr.b.reg_mr(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_GLOBAL)
    pr.qa.post_send(_flush(1, mr.rkey, mr.addr + 4000, 200))
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]


def test_atomic_write_needs_remote_write_alignment_and_bounds():
    pr = Pair(access=IBV_ACCESS_REMOTE_READ)        # CHK_OP_VALID
    pr.qa.post_send(_aw(1, pr, 0, b"x" * 8))
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]
    pr = Pair()
    pr.qa.post_send(_aw(1, pr, 4, b"x" * 8))        # oA19-28: 8-byte aligned
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_INV_REQ_ERR)]
    pr = Pair()
    pr.qa.post_send(_aw(1, pr, (1 << 18) - 4 + 4, b"x" * 8))   # past the MR's end
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(1, IBV_WC_REM_ACCESS_ERR)]
    assert pr.mb.read(8, 0) == bytes(8)


def test_lost_response_duplicate_is_answered_not_executed_again():
    """The response is lost; the requester times out and resends; the
    responder answers from its resources without writing again (oA19-14)."""
    pr = Pair(access=FLUSH_QP)
    mr = pr.b.reg_mr(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_FLUSH_GLOBAL)
    dropped = drop_filter(pr.sim, pr.b, lambda p: p.name == "RC_RDMA_READ_RESPONSE_ONLY", limit=2)
    seen_b = tap(pr.sim, pr.b)
    pr.qa.post_send(SendWQE(1, IBV_WR_ATOMIC_WRITE, remote_addr=mr.addr, rkey=mr.rkey,
                            compare_add=int.from_bytes(b"11111111", "little")))
    pr.qa.post_send(_flush(2, mr.rkey, mr.addr, 8))
    pr.run(0.05)                                    # both responses lost: nothing completes yet
    assert len(dropped) == 2 and not _wcs(pr.qa)
    mr.write(b"22222222")                           # changed after the first execution
    pr.run_until_cqe(pr.qa.send_cq, 2)
    assert [w[:3] for w in _wcs(pr.qa)] == [(1, 0, IBV_WC_ATOMIC_WRITE), (2, 0, IBV_WC_FLUSH)]
    assert mr.read(8) == b"22222222"                # the duplicate ATOMIC WRITE was not redone
    assert [p.aeth.msn for _, p in seen_b if p.name == "RC_RDMA_READ_RESPONSE_ONLY"][-2:] == [1, 2]


def test_max_rd_atomic_holds_atomic_writes_back():
    pr = Pair(max_rd_atomic=1)
    seen_a = tap(pr.sim, pr.a)
    for i in range(3):
        pr.qa.post_send(_aw(i, pr, 8 * i, bytes([65 + i]) * 8))
    pr.sim.run(until=pr.sim.now)                    # nothing delivered yet: one request out
    assert len(seen_a) == 1
    pr.run(0.01)
    assert [w[:2] for w in _wcs(pr.qa)] == [(0, 0), (1, 0), (2, 0)]
    assert pr.mb.read(24) == b"A" * 8 + b"B" * 8 + b"C" * 8


def test_read_response_with_data_for_an_atomic_write_is_a_bad_response():
    s = Solo()
    s.qp.post_send(SendWQE(1, IBV_WR_ATOMIC_WRITE, remote_addr=0x1000, rkey=0x55, compare_add=7))
    (req,) = s.out()
    s.rx(Opcode.RC_RDMA_READ_RESPONSE_ONLY, req.psn, b"data", aeth=(0x1F, 1))
    (wc,) = s.scq.poll(4)
    assert wc.status == 7 and s.qp.state == IBV_QPS_ERR        # IBV_WC_BAD_RESP_ERR


def test_an_ack_past_an_unanswered_flush_is_an_implied_nak():
    s = Solo()
    s.qp.post_send(_flush(1, 0x55, 0x1000, 64))
    s.qp.post_send(SendWQE(2, IBV_WR_RDMA_READ, [(s.mr.addr, 8, s.mr.lkey)], remote_addr=0x1000, rkey=0x55))
    reqs = s.out()
    assert [p.name for p in reqs] == ["RC_FLUSH", "RC_RDMA_READ_REQUEST"]
    s.rx(Opcode.RC_ACKNOWLEDGE, reqs[1].psn, aeth=(0x1F, 2))
    assert not s.scq.poll(4)                        # not completed by a bare ACK: it is re-sent
    assert [p.name for p in s.out()][:1] == ["RC_FLUSH"]
