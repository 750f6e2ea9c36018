"""The MAD agent (softrdma.mgmt.agent): TIDs, the send window, timeouts and
retries on a fake clock, RMPP both ways (with a lost segment), and what is
dropped and counted."""

import pytest

from softrdma.mgmt.agent import MadAgent, mad_tid
from softrdma.wire.rmpp import RMPP_TYPE_ACK, RMPP_TYPE_DATA, parse_rmpp

SA, SMP_DR, CM = 0x03, 0x81, 0x07


def request(mgmt_class=SMP_DR, method=0x01, tid=0):
    mad = bytearray(256)
    mad[0:4] = bytes([1, mgmt_class, 1, method])
    mad[8:16] = tid.to_bytes(8, "big")
    return mad


def response(req, tid_high=0, status=0):
    """The answer to ``req`` (ibsim puts its client index in the TID's upper bits)."""
    mad = bytearray(req)
    mad[3] |= 0x80
    mad[4:6] = status.to_bytes(2, "big")
    mad[8:16] = (mad_tid(req) | tid_high << 32).to_bytes(8, "big")
    return bytes(mad)


def test_tids_are_allocated_in_order_and_written_into_the_mad():
    a = MadAgent(first_tid=0x1000)
    reqs = [request() for _ in range(3)]
    sends = [a.post_send(m) for m in reqs]
    assert [s.tid for s in sends] == [0x1000, 0x1001, 0x1002]
    assert [mad_tid(m) for m in reqs] == [0x1000, 0x1001, 0x1002]
    assert [mad_tid(m) for _d, m in a.take(0.0)] == [0x1000, 0x1001, 0x1002]


def test_tids_wrap_at_the_mask_and_skip_zero():
    a = MadAgent(first_tid=0xFFFFFFFF)
    assert [a.alloc_tid() for _ in range(3)] == [0xFFFFFFFF, 1, 2]


def test_a_response_is_matched_by_the_low_tid_bits_and_the_class():
    a = MadAgent()
    got = {}
    reqs = [request() for _ in range(3)]
    for i, m in enumerate(reqs):
        a.post_send(m, lambda r, i=i: got.setdefault(i, r))
    a.take(0.0)
    assert a.deliver(response(reqs[1], tid_high=0x00070000), 0.1)      # ibsim's upper bits ignored
    assert list(got) == [1] and got[1][3] == 0x81
    wrong_class = bytearray(response(reqs[0]))
    wrong_class[1] = SA
    assert not a.deliver(bytes(wrong_class), 0.1) and a.unmatched == 1
    assert 0 not in got and not a.idle


def test_the_gsi_matches_all_64_tid_bits_and_refuses_a_tid_twice():
    a = MadAgent(tid_mask=(1 << 64) - 1)
    m = request(CM, 0x03, tid=0xAB00000001)
    s = a.post_send(m, own_tid=True)
    assert s.tid == 0xAB00000001 and mad_tid(m) == 0xAB00000001
    with pytest.raises(ValueError, match="EBUSY"):
        a.post_send(request(CM, 0x03, tid=0xAB00000001), own_tid=True)
    a.take(0.0)
    other = bytearray(response(m))
    other[8] = 0xCD                                        # same low 32 bits, other upper ones
    assert not a.deliver(bytes(other), 0.0)
    assert a.deliver(response(m), 0.0) and s.done


def test_the_window_keeps_at_most_n_on_the_wire_in_order():
    a = MadAgent(window=2)
    reqs = [request() for _ in range(5)]
    for m in reqs:
        a.post_send(m)
    first = a.take(0.0)
    assert [mad_tid(m) for _d, m in first] == [1, 2] and a.take(0.0) == []
    a.deliver(response(reqs[0]), 0.1)
    assert [mad_tid(m) for _d, m in a.take(0.1)] == [3]
    a.deliver(response(reqs[1]), 0.1)
    a.deliver(response(reqs[2]), 0.1)
    assert [mad_tid(m) for _d, m in a.take(0.1)] == [4, 5]
    assert a.sent == 5 and len(a.wire) == 2


def test_timeouts_resend_ahead_of_the_backlog_then_give_up():
    a = MadAgent(window=1, timeout=0.2, retries=2)
    got = []
    r1, r2 = request(), request()
    a.post_send(r1, got.append, dest="x")
    a.post_send(r2, got.append, dest="x")
    assert a.take(0.0) == [("x", bytes(r1))] and a.deadline == pytest.approx(0.2)
    a.tick(0.19)
    assert a.take(0.19) == [] and a.timeouts == 0
    a.tick(0.2)                                            # expired: r1 again before r2
    assert [mad_tid(m) for _d, m in a.take(0.25)] == [1]
    assert a.deadline == pytest.approx(0.45) and a.timeouts == 1 and a.retried == 1
    a.tick(0.45)
    assert [mad_tid(m) for _d, m in a.take(0.45)] == [1]
    a.tick(0.65)                                           # 1 + 2 retries: given up
    assert got == [None] and a.failed == 1 and a.timeouts == 3 and a.retried == 2
    assert [mad_tid(m) for _d, m in a.take(0.65)] == [2]
    a.deliver(response(r2), 0.7)
    assert got[1] is not None and a.idle and a.deadline is None


def test_a_late_answer_to_a_request_waiting_for_its_resend_still_completes_it():
    a = MadAgent(window=1, timeout=0.2)
    got = []
    r = request()
    a.post_send(r, got.append)
    a.take(0.0)
    a.tick(0.3)                                            # requeued, not yet resent
    assert a.deliver(response(r), 0.31) and got and a.take(0.31) == [] and a.idle


def test_duplicate_and_unsolicited_responses_are_dropped_and_counted():
    a = MadAgent()
    got = []
    r = request()
    a.post_send(r, got.append)
    a.take(0.0)
    assert a.deliver(response(r), 0.1)
    assert not a.deliver(response(r), 0.1)                 # a duplicate
    assert not a.deliver(response(request(tid=77)), 0.1)   # nobody asked
    assert a.unmatched == 2 and len(got) == 1
    assert not a.deliver(request(tid=5), 0.1)              # a request: the caller's, not counted
    assert not a.deliver(b"short", 0.1) and a.unmatched == 2


def test_a_request_handed_back_undelivered_fails_at_once_and_cancel_forgets():
    a = MadAgent()
    got = []
    r1, r2 = request(), request()
    s1 = a.post_send(r1, got.append)
    s2 = a.post_send(r2, got.append)
    a.take(0.0)
    assert a.fail(r1, 110) and got == [None] and s1.status == 110
    a.cancel(s2.tid)
    assert a.idle and got == [None] and not a.wire
    assert not a.deliver(response(r2), 0.1) and a.unmatched == 1


def sa_table_response(req):
    h = bytearray(req[:56])
    h[3] = 0x92                                            # SubnAdmGetTableResp
    return h


def shuttle(client, sa, data, drop=lambda seg: False, rmpp_timeout=1.0):
    """A GetTable from ``client`` to ``sa`` and its RMPP answer; ``drop`` loses segments."""
    got = []
    req = request(SA, 0x12)
    s = client.post_send(req, got.append, dest="sa", rmpp=True, timeout=5.0, retries=0)
    now = 0.0
    (dest, m), = client.take(now)
    t = sa.send_rmpp(sa_table_response(m), data, "client", now, timeout=rmpp_timeout, retries=3)
    for _ in range(200):
        moved = False
        for dest, seg in sa.take(now):
            moved = True
            if not drop(seg):
                assert client.deliver(seg, now, "sa")
        for dest, ack in client.take(now):
            moved = True
            assert dest == "sa" and parse_rmpp(ack).type == RMPP_TYPE_ACK
            assert sa.deliver(ack, now, "client")
        if got and sa.idle:
            break
        if not moved:
            now += 0.5
            sa.tick(now)
            client.tick(now)
    return s, t, got


def test_rmpp_send_and_receive_reassemble_the_table():
    data = bytes(i % 251 for i in range(200 * 9 + 17))
    client, sa = MadAgent(rmpp_window=4), MadAgent()
    s, t, got = shuttle(client, sa, data)
    assert got == [s.response] and s.rmpp is not None and s.rmpp_status == 0
    assert s.response[56:] == data and s.response[:3] == bytes([1, SA, 1])
    assert t.done and not t.aborted and sa.rmpp_transfers == 1 and sa.rmpp_aborted == 0
    assert client.idle and sa.idle


def test_rmpp_a_lost_segment_is_sent_again_after_the_timeout():
    data = bytes(i % 253 for i in range(200 * 7))
    lost = []

    def drop(seg):
        h = parse_rmpp(seg)
        if h.type == RMPP_TYPE_DATA and h.seg == 3 and not lost:
            lost.append(seg)
            return True
        return False

    client, sa = MadAgent(rmpp_window=4), MadAgent()
    s, t, got = shuttle(client, sa, data, drop)
    assert lost and got and s.response[56:] == data
    assert t.done and not t.aborted and t.last_ack == t.count


def test_rmpp_a_segment_restarts_the_requests_timer():
    client = MadAgent()
    req = request(SA, 0x12)
    s = client.post_send(req, dest="sa", rmpp=True, timeout=1.0, retries=0)
    client.take(0.0)
    sa = MadAgent()
    sa.send_rmpp(sa_table_response(req), bytes(200 * 3), "client", 0.9)
    (_d, seg1), = sa.take(0.9)
    client.deliver(seg1, 0.9, "sa")
    assert s.deadline == pytest.approx(1.9)
    client.tick(1.5)
    assert not s.done


def test_rmpp_the_sender_gives_up_on_a_reader_that_never_acks():
    sa = MadAgent()
    ended = []
    t = sa.send_rmpp(sa_table_response(request(SA, 0x12, tid=9)), bytes(200 * 3), "client", 0.0,
                     timeout=0.2, retries=3, done=ended.append)
    assert len(sa.take(0.0)) == 1 and not sa.idle and sa.deadline == pytest.approx(0.2)
    sa.tick(0.2)
    assert ended == [t] and t.aborted and sa.rmpp_aborted == 1 and sa.idle


def test_rmpp_is_only_for_the_classes_that_have_it():
    """An SMP's bytes 24..35 are its M_Key and DR fields, never an RMPP header."""
    a = MadAgent()
    got = []
    r = request(SMP_DR)
    a.post_send(r, got.append, rmpp=True)
    a.take(0.0)
    resp = bytearray(response(r))
    resp[24:36] = bytes([1, 1, 0x07, 0, 0, 0, 0, 1, 0, 0, 0, 220])
    assert a.deliver(bytes(resp), 0.0) and got == [bytes(resp)]
