"""RMPP (softrdma.wire.rmpp, softrdma.mgmt.rmpp): segmentation, windows, ACKs, loss, and the kernel's length arithmetic."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from softrdma.mgmt.rmpp import RmppReceiver, RmppSender
from softrdma.wire.rmpp import (RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_FLAG_LAST, RMPP_STATUS_BADT,
                                RMPP_STATUS_TMR, RMPP_TYPE_ABORT, RMPP_TYPE_ACK, RMPP_TYPE_DATA,
                                control_mad, is_segmented, parse_rmpp)


def sa_header(tid=0x1234):
    h = bytearray(56)
    h[0:4] = bytes([1, 3, 2, 0x92])               # SA GetTableResp
    h[8:16] = tid.to_bytes(8, "big")
    h[16:18] = (0x11).to_bytes(2, "big")
    h[44:46] = (14).to_bytes(2, "big")            # AttributeOffset: 112-byte records
    return h


def same_transfer(result, data):
    """The reassembled MAD: segment 1's header (its RMPP header included) and the data."""
    h = bytes(sa_header())
    return result[:24] == h[:24] and result[36:56] == h[36:56] and result[56:] == data


def run(data, loss=0.0, dup=0.0, seed=0, window=64):
    """Move ``data`` from a sender to a receiver over a lossy channel; the reassembled MAD."""
    rng = random.Random(seed)
    s, r = RmppSender(sa_header(), data), RmppReceiver(window=window)
    now = 0.0
    wire = s.start(now)
    for _ in range(10000):
        acks = []
        for seg in wire:
            if rng.random() < loss:
                continue
            for _ in range(2 if rng.random() < dup else 1):
                a = r.on_data(seg)
                if a is not None:
                    acks.append(a)
        wire = []
        for a in acks:
            if rng.random() >= loss:
                wire += s.on_control(a, now)
        if s.done:
            break
        if not wire:
            now += 0.25
            wire = s.on_timer(now)
            if s.done:
                break
    return s, r


@pytest.mark.parametrize("n", [0, 1, 199, 200, 201, 1000, 70 * 112])
def test_lengths_are_the_kernels(n):
    data = bytes(random.Random(n).randrange(256) for _ in range(n))
    s = RmppSender(sa_header(), data)
    segs = s.start(0.0)
    count = max(1, -(-n // 200))
    pad = (200 - n % 200) % 200 if n else 200
    first = parse_rmpp(segs[0])
    assert first.seg == 1 and first.flags & RMPP_FLAG_FIRST and first.flags & RMPP_FLAG_ACTIVE
    if count == 1:
        assert first.flags & RMPP_FLAG_LAST and first.paylen == 220 - pad
    else:
        assert first.paylen == count * 220 - pad
        assert len(segs) == 1                     # a window of one until the first ACK
    s2, r = run(data)
    assert s2.done and not s2.aborted
    assert same_transfer(r.result, data)
    # the receiver's reported length: hdr + seg_count * 200 - (220 - last paylen)
    assert len(r.result) == 56 + count * 200 - pad


def test_window_grows_after_the_first_ack():
    data = bytes(200 * 10)
    s, r = RmppSender(sa_header(), data), RmppReceiver(window=4)
    seg1 = s.start(0.0)
    ack = r.on_data(seg1[0])
    h = parse_rmpp(ack)
    assert h.type == RMPP_TYPE_ACK and h.seg == 1 and h.paylen == 5
    assert ack[3] == 0x12                       # the response bit flipped: GetTable
    nxt = s.on_control(ack, 0.0)
    assert [parse_rmpp(m).seg for m in nxt] == [2, 3, 4, 5]
    assert all(parse_rmpp(m).paylen == 0 for m in nxt)
    for m in nxt[:-1]:
        assert r.on_data(m) is None
    ack = r.on_data(nxt[-1])
    assert parse_rmpp(ack).seg == 5 and parse_rmpp(ack).paylen == 9
    last = s.on_control(ack, 0.0)
    assert [parse_rmpp(m).seg for m in last] == [6, 7, 8, 9]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 4000), loss=st.sampled_from([0.0, 0.1, 0.3]), dup=st.sampled_from([0.0, 0.2]),
       seed=st.integers(0, 1000), window=st.integers(1, 8))
def test_lossy_channel_delivers_exactly_or_gives_up(n, loss, dup, seed, window):
    data = bytes((i * 7 + seed) & 0xFF for i in range(n))
    s, r = run(data, loss, dup, seed, window)
    assert s.done
    if not s.aborted:
        assert same_transfer(r.result, data)
    else:
        assert s.aborted == RMPP_STATUS_TMR     # segment 1 or its ACK lost: the requester asks again


def test_a_receiver_that_never_acks_gets_nothing_resent():
    # umad2sim's readers take segment 1 as the answer; a resend would reach the next client
    s = RmppSender(sa_header(), bytes(1000), timeout=0.2, retries=3)
    assert len(s.start(0.0)) == 1
    resent = [s.on_timer(t) for t in (0.1, 0.25, 0.5)]
    assert [len(x) for x in resent] == [0, 0, 0]
    assert s.done and s.aborted == RMPP_STATUS_TMR


def test_after_an_ack_lost_segments_are_resent():
    s, r = RmppSender(sa_header(), bytes(200 * 6), timeout=0.2, retries=2), RmppReceiver(window=8)
    ack = r.on_data(s.start(0.0)[0])
    segs = s.on_control(ack, 0.0)
    assert [parse_rmpp(m).seg for m in segs] == [2, 3, 4, 5, 6]
    assert [parse_rmpp(m).seg for m in s.on_timer(0.3)] == [2, 3, 4, 5, 6]     # all lost: again
    assert s.on_timer(0.6) and not s.done
    assert s.on_timer(0.9) == [] and s.done and s.aborted == RMPP_STATUS_TMR


def test_first_length_counts_whole_records_for_umad2sim():
    s = RmppSender(sa_header(), bytes(112 * 70))
    assert s.first_length(112) == 56 + 112     # one NodeRecord fits in segment 1
    assert RmppSender(sa_header(), bytes(72 * 2)).first_length(72) == 56 + 144
    # umad2sim copies 224 bytes of a MAD: of three PathRecords the third would not all arrive
    assert RmppSender(sa_header(), bytes(64 * 3)).first_length(64) == 56 + 192
    assert RmppSender(sa_header(), bytes(64 * 3)).first_length(64, 224) == 56 + 128


def test_bad_segments_are_aborted_not_crashed():
    r = RmppReceiver()
    m = bytearray(RmppSender(sa_header(), bytes(500)).segment(2))     # no FIRST on segment 1
    m[31:32] = b"\x01"
    m[26] = (0x1F << 3) | RMPP_FLAG_ACTIVE
    assert parse_rmpp(r.on_data(bytes(m))).type == RMPP_TYPE_ABORT
    r = RmppReceiver()
    m = bytearray(RmppSender(sa_header(), bytes(10)).segment(1))
    m[25] = 9
    a = r.on_data(bytes(m))
    assert parse_rmpp(a).type == RMPP_TYPE_ABORT and parse_rmpp(a).status == RMPP_STATUS_BADT


def test_is_segmented():
    assert is_segmented(RmppSender(sa_header(), bytes(10)).segment(1))
    plain = bytearray(256)
    plain[24:28] = bytes([1, RMPP_TYPE_DATA, RMPP_FLAG_ACTIVE, 0])   # opensm through umad2sim: seg 0
    assert not is_segmented(plain)
    assert not is_segmented(control_mad(bytes(256), RMPP_TYPE_ACK, 1, 2))
