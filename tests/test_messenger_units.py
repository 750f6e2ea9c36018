"""The messenger example's pure parts: the header, fragmentation and
reassembly, credit accounting, in-order delivery and duplicate dropping."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "messenger"))

from msgr.credits import Credits                                       # noqa: E402
from msgr.frag import Reassembler, fragments                           # noqa: E402
from msgr.header import (FLAG_LAST, HDR_LEN, MAGIC, MSG_CREDIT, MSG_DATA, Header, HeaderError,  # noqa: E402
                         crc32, unpack)
from msgr.inbound import Inbound                                       # noqa: E402


def test_header_round_trip_and_layout():
    h = Header(MSG_DATA, seq=2**40 + 5, frag_index=3, frag_count=7, length=100, total=650, credits=9,
               flags=FLAG_LAST, crc=0xDEADBEEF)
    b = h.pack()
    assert len(b) == HDR_LEN
    assert b[:4] == MAGIC.to_bytes(4, "little")
    assert unpack(b) == h
    assert unpack(b"\0" * 5 + b, 5) == h


@pytest.mark.parametrize("mutate, why", [
    (lambda b: b"XXXX" + b[4:], "magic"),
    (lambda b: b[:4] + bytes([9]) + b[5:], "type"),
    (lambda b: b[:16] + (7).to_bytes(2, "little") + (7).to_bytes(2, "little") + b[20:], "fragment"),
    (lambda b: b[:20], "short"),
])
def test_header_rejects_malformed(mutate, why):
    b = Header(MSG_DATA, 1, 0, 1, 10, 10).pack()
    with pytest.raises(HeaderError, match=why):
        unpack(mutate(b))


@pytest.mark.parametrize("size", [0, 1, 8192 - HDR_LEN, 8192 - HDR_LEN + 1, 65536, 300001])
def test_fragments_fit_chunks_and_reassemble(size):
    data = os.urandom(size)
    frags = fragments(4, data, 8192)
    assert len(frags) == max(1, -(-size // (8192 - HDR_LEN)))
    assert all(HDR_LEN + len(p) <= 8192 for _, p in frags)
    assert [h.frag_index for h, _ in frags] == list(range(len(frags)))
    assert all(h.frag_count == len(frags) and h.total == size and h.seq == 4 for h, _ in frags)
    assert [bool(h.flags & FLAG_LAST) for h, _ in frags] == [False] * (len(frags) - 1) + [True]
    r = Reassembler()
    out = [r.add(unpack(h.pack()), bytes(p)) for h, p in frags]
    assert out[:-1] == [None] * (len(frags) - 1)
    assert out[-1] == data


def test_reassembly_refuses_corruption_and_disorder():
    frags = fragments(0, os.urandom(30000), 8192)
    h, p = frags[0]
    with pytest.raises(HeaderError, match="CRC"):
        Reassembler().add(h, b"\xff" + bytes(p[1:]))
    with pytest.raises(HeaderError, match="out of order"):
        Reassembler().add(*frags[1])
    r = Reassembler()
    r.add(*frags[0])
    with pytest.raises(HeaderError, match="out of order"):
        r.add(*frags[2])
    with pytest.raises(HeaderError, match="length"):
        Reassembler().add(h, bytes(p[:-1]))


def test_credits_never_beyond_the_grant():
    c = Credits(4)
    for _ in range(4):
        assert c.can_send()
        c.spend()
    assert not c.can_send()
    with pytest.raises(RuntimeError):
        c.spend()
    c.granted(3)
    assert c.available == 3
    with pytest.raises(RuntimeError, match="more credits"):
        c.granted(2)


def test_credits_owed_returned_once():
    c = Credits(8)
    assert c.threshold == 4
    for _ in range(3):
        c.consumed(data=True)
    c.consumed(data=False)                 # a credit message's spare buffer is not owed
    assert not c.credit_message_due()
    c.consumed(data=True)
    assert c.credit_message_due()
    assert c.take_owed() == 4
    assert c.take_owed() == 0 and not c.credit_message_due()


def test_credit_reserve_bounds_credit_messages_in_flight():
    # each credit message carries >= threshold credits and at most `initial`
    # are ever owed or in flight, so reserve covers every credit message in flight
    for initial in (2, 3, 8, 32, 33, 100):
        c = Credits(initial)
        assert Credits.reserve(initial) > initial // c.threshold


def test_inbound_in_order_and_duplicates_dropped():
    ib = Inbound()
    msgs = [os.urandom(n) for n in (10, 20000, 0)]
    frags = [fragments(i, m, 8192) for i, m in enumerate(msgs)]
    assert ib.add(*frags[0][0]) == msgs[0]
    assert ib.add(*frags[0][0]) is None                 # message 0 again: dropped
    assert ib.add(*frags[1][0]) is None
    assert ib.add(*frags[1][0]) is None                 # a fragment seen already: dropped
    assert ib.add(*frags[1][1]) is None
    assert ib.add(*frags[1][2]) == msgs[1]
    assert ib.duplicates == 2
    with pytest.raises(HeaderError, match="expected 2"):
        ib.add(*fragments(3, b"x", 8192)[0])            # a gap: messages lost
    assert ib.add(*frags[2][0]) == msgs[2]
    assert ib.next_seq == 3


def test_credit_message_header():
    h = unpack(Header(MSG_CREDIT, 0, credits=17).pack())
    assert h.type == MSG_CREDIT and h.credits == 17 and h.length == 0
    assert crc32(b"") == 0
