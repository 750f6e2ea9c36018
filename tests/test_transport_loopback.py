"""transport.loopback: whole messages between two QPs of one engine, with
no packets -- the same results, PSNs and counters as the packet path, and
the packet path whenever anything would not simply succeed."""

from __future__ import annotations

import os

import pytest

from softrdma.enums import (
    IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_EVENT_QP_ACCESS_ERR,
    IBV_MTU_1024, IBV_QPS_ERR, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_REM_ACCESS_ERR,
    IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WC_WR_FLUSH_ERR, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
)
from softrdma.transport.counters import Counter as C
from softrdma.transport.wr import RecvWQE, SendWQE
from transport_helpers import Pair, p64, tap, u64


def _linked(**kw) -> tuple[Pair, list]:
    pr = Pair(path_mtu=IBV_MTU_1024, **kw)
    pr.qa.local_peer = lambda qp: pr.qb
    pr.qb.local_peer = lambda qp: pr.qa
    return pr, [tap(pr.sim, pr.a), tap(pr.sim, pr.b)]


def _wire(seen) -> int:
    return sum(len(s) for s in seen)


def test_messages_run_without_packets_and_advance_both_sides_as_packets_would():
    pr, seen = _linked(psn_a=0xFFFFF0)
    data = os.urandom(5000)
    pr.ma.write(data)
    pr.qb.post_recv(RecvWQE(7, [(pr.mb.addr + 0x8000, 8000, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND_WITH_IMM, [(pr.ma.addr, 3000, pr.ma.lkey),
                                                      (pr.ma.addr + 3000, 2000, pr.ma.lkey)], imm_data=9))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 5000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x100, rkey=pr.mb.rkey))
    pr.qa.post_send(SendWQE(3, IBV_WR_RDMA_READ, [(pr.ma.addr + 0x4000, 4000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x100, rkey=pr.mb.rkey))
    # everything completed inside post_send: no simulated time, no packet
    assert [(w.wr_id, w.status, w.byte_len) for w in pr.qa.send_cq.poll(8)] == [
        (1, IBV_WC_SUCCESS, 5000), (2, IBV_WC_SUCCESS, 5000), (3, IBV_WC_SUCCESS, 4000)]
    (rwc,) = pr.qb.recv_cq.poll(4)
    assert (rwc.wr_id, rwc.opcode, rwc.byte_len, rwc.imm_data, rwc.wc_flags & IBV_WC_WITH_IMM,
            rwc.src_qp) == (7, IBV_WC_RECV, 5000, 9, IBV_WC_WITH_IMM, pr.qa.qp_num)
    assert pr.mb.read(5000, 0x8000) == data and pr.mb.read(5000, 0x100) == data
    assert pr.ma.read(4000, 0x4000) == data[:4000]
    pr.run(0.01)
    assert _wire(seen) == 0
    # 5 + 5 + 4 packets' worth of PSNs, across the wrap, on both sides
    assert pr.qa.req_psn == pr.qa.comp_psn == pr.qb.resp_psn == (0xFFFFF0 + 14) & 0xFFFFFF
    assert pr.qb.msn == 3
    assert pr.qa.cnt[C.sent_pkts] == 10 + 1 and pr.qb.cnt[C.rcvd_pkts] == 10 + 1
    assert pr.qb.cnt[C.sent_pkts] == 2 + 4 and pr.qa.cnt[C.rcvd_pkts] == 2 + 4
    assert pr.qb.cnt[C.rx_write_requests] == 1 and pr.qb.cnt[C.rx_read_requests] == 1
    assert pr.qa.cnt[C.sent_bytes] == pr.qb.cnt[C.rcvd_bytes] == 10000
    # the paths mix: the same QPs go on over packets, PSNs in step
    pr.qa.local_peer = pr.qb.local_peer = None
    pr.qa.post_send(SendWQE(4, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 3000, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 0x10000, rkey=pr.mb.rkey))
    pr.run(0.02)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(4)] == [(4, IBV_WC_SUCCESS)]
    assert pr.mb.read(3000, 0x10000) == data[:3000] and _wire(seen) == 3 + 1


def test_write_with_imm_consumes_a_receive_and_carries_the_immediate():
    pr, seen = _linked()
    pr.ma.write(b"abc")
    pr.qb.post_recv(RecvWQE(5, []))
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE_WITH_IMM, [(pr.ma.addr, 3, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey, imm_data=0x1234))
    (rwc,) = pr.qb.recv_cq.poll(2)
    assert (rwc.wr_id, rwc.opcode, rwc.byte_len, rwc.imm_data) == (5, IBV_WC_RECV_RDMA_WITH_IMM, 3, 0x1234)
    assert pr.mb.read(3) == b"abc" and _wire(seen) == 0


def test_no_receive_wqe_takes_the_packet_path_rnr_then_completes():
    pr, seen = _linked()
    pr.ma.write(b"x" * 100)
    pr.qa.post_send(SendWQE(1, IBV_WR_SEND, [(pr.ma.addr, 100, pr.ma.lkey)]))
    pr.run(0.0005)
    assert pr.qa.send_cq.poll(2) == [] and pr.qb.cnt[C.send_rnr_err] == 1     # the RNR NAK went out
    pr.qb.post_recv(RecvWQE(3, [(pr.mb.addr, 100, pr.mb.lkey)]))
    pr.run(0.1)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(2)] == [(1, IBV_WC_SUCCESS)]
    assert pr.mb.read(100) == b"x" * 100


def test_bad_rkey_takes_the_packet_path_and_gets_the_spec_error():
    pr, seen = _linked()
    pr.qa.post_send(SendWQE(1, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 100, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey ^ 0x5A))
    pr.run(0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(2)] == [(1, IBV_WC_REM_ACCESS_ERR)]
    assert _wire(seen) >= 2                                   # the WRITE and the NAK


def test_atomics_and_anything_behind_in_flight_packets_use_the_packet_path():
    pr, seen = _linked()
    pr.mb.write((41).to_bytes(8, "little"), 64)
    pr.qa.post_send(SendWQE(1, IBV_WR_ATOMIC_FETCH_AND_ADD, [(pr.ma.addr, 8, pr.ma.lkey)],
                            remote_addr=pr.mb.addr + 64, rkey=pr.mb.rkey, compare_add=1))
    pr.qa.post_send(SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 10, pr.ma.lkey)],
                            remote_addr=pr.mb.addr, rkey=pr.mb.rkey))
    assert pr.qa.send_cq.poll(2) == []                        # both wait for packets
    pr.run(0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(2)] == [(1, 0), (2, 0)]
    assert u64(pr.ma.read(8)) == 41 and u64(pr.mb.read(8, 64)) == 42


def _messages(pr):
    pr.ma.write(os.urandom(6000))
    for i in range(2):
        pr.qb.post_recv(RecvWQE(10 + i, [(pr.mb.addr + 0x8000, 8000, pr.mb.lkey)]))
    return [SendWQE(1, IBV_WR_SEND_WITH_IMM, [(pr.ma.addr, 5001, pr.ma.lkey)], imm_data=3),
            SendWQE(2, IBV_WR_RDMA_WRITE, [(pr.ma.addr, 3000, pr.ma.lkey)],
                    remote_addr=pr.mb.addr + 0x100, rkey=pr.mb.rkey),
            SendWQE(3, IBV_WR_RDMA_READ, [(pr.ma.addr + 0x4000, 4095, pr.ma.lkey)],
                    remote_addr=pr.mb.addr + 0x100, rkey=pr.mb.rkey),
            SendWQE(4, IBV_WR_SEND, [])]


def _sizes(sim, node) -> list:
    """UDP payload sizes (packet + ICRC) of what ``node`` puts on the wire."""
    orig = sim._transmit
    seen: list = []

    def _transmit(src):
        if src is node:
            seen.extend(len(item[1]) + 4 for item in src.tx)
        orig(src)

    sim._transmit = _transmit
    return seen


def test_port_traffic_reported_for_a_message_equals_its_packets_on_the_wire():
    # the packet path: what the two nodes put on the wire, message by message
    pr = Pair(path_mtu=IBV_MTU_1024)
    ta, tb = _sizes(pr.sim, pr.a), _sizes(pr.sim, pr.b)
    wire = []
    for w in _messages(pr):
        na, nb = len(ta), len(tb)
        pr.qa.post_send(w)
        pr.run(pr.sim.now + 0.01)
        fwd, back = ta[na:], tb[nb:]
        wire.append(((len(fwd), sum(fwd)), (len(back), sum(back))))
    # the short cut reports the same packets and bytes
    pr2, seen = _linked()
    told = []
    pr2.qa.local_traffic = lambda qp, peer, fwd, back: told.append((fwd, back))
    for w in _messages(pr2):
        pr2.qa.post_send(w)
    assert _wire(seen) == 0
    assert told == wire


@pytest.mark.parametrize("op,access", [
    (IBV_WR_RDMA_WRITE, 0xF & ~IBV_ACCESS_REMOTE_WRITE),
    (IBV_WR_RDMA_WRITE_WITH_IMM, 0xF & ~IBV_ACCESS_REMOTE_WRITE),
    (IBV_WR_RDMA_READ, 0xF & ~IBV_ACCESS_REMOTE_READ),
    (IBV_WR_ATOMIC_FETCH_AND_ADD, 0xF & ~IBV_ACCESS_REMOTE_ATOMIC),
], ids=["write", "write_with_imm", "read", "atomic"])
@pytest.mark.parametrize("linked", [True, False], ids=["loopback", "packets"])
def test_op_the_qp_does_not_enable_is_a_remote_access_error_on_both_paths(op, access, linked):
    """CHK_OP_VALID (the QP's access flags) fails the same way whether the
    engine short-cuts the message or sends its packets: NAK remote access
    error -> IBV_WC_REM_ACCESS_ERR, the responder QP in ERR with
    QP_ACCESS_ERR (rxe would say invalid request)."""
    if linked:
        pr, seen = _linked(access=access)
    else:
        pr = Pair(path_mtu=IBV_MTU_1024, access=access)
        seen = [tap(pr.sim, pr.a), tap(pr.sim, pr.b)]
    pr.mb.write(p64(3))
    pr.qb.post_recv(RecvWQE(5, [(pr.mb.addr + 0x100, 64, pr.mb.lkey)]))
    pr.qa.post_send(SendWQE(1, op, [(pr.ma.addr, 8, pr.ma.lkey)], remote_addr=pr.mb.addr,
                            rkey=pr.mb.rkey, compare_add=1, imm_data=7))
    pr.qa.post_send(SendWQE(2, IBV_WR_SEND, [(pr.ma.addr, 8, pr.ma.lkey)]))
    pr.run(0.01)
    assert [(w.wr_id, w.status) for w in pr.qa.send_cq.poll(4)] == [
        (1, IBV_WC_REM_ACCESS_ERR), (2, IBV_WC_WR_FLUSH_ERR)]
    assert pr.qa.state == pr.qb.state == IBV_QPS_ERR
    assert (IBV_EVENT_QP_ACCESS_ERR, pr.qb) in pr.qb.events
    assert pr.qb.cnt[C.resp_remote_access_errors] == 1 and pr.qb.cnt[C.resp_invalid_request_errors] == 0
    assert [(w.wr_id, w.status) for w in pr.qb.recv_cq.poll(4)] == [(5, IBV_WC_WR_FLUSH_ERR)]
    assert u64(pr.mb.read(8)) == 3
    assert _wire(seen) >= 2                                   # the request and the NAK
