"""The pure pieces of softrdma.rsocket against rsocket.c's definitions:
the immediate's encoding, struct rs_conn_data's bytes, the SGE byte
order, the iomap scale, the 16-bit credit arithmetic, and the receive
ring's copy (wrap, partial reads, peek)."""

from __future__ import annotations

import collections
import struct

import pytest

from softrdma.rsocket import protocol as P
from softrdma.rsocket import stream as S


def test_msg_encoding():
    assert P.rs_msg_set(P.RS_OP_DATA, 65536) == 65536
    assert P.rs_msg_set(P.RS_OP_SGL, 0x1234) == 0x80001234
    assert P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_DISCONNECT) == 0xE0000000
    assert P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_SHUTDOWN) == 0xE0000002
    assert P.rs_msg_set(P.RS_OP_IOMAP_SGL, 3) == 0xC0000003
    for op in range(8):
        m = P.rs_msg_set(op, 0x1FFFFFFF)
        assert P.rs_msg_op(m) == op and P.rs_msg_data(m) == 0x1FFFFFFF


def test_conn_data_layout():
    cd = P.format_conn_data(384, 0, P.Sge(0x1122334455667788, 0xAABBCCDD, 2), P.Sge(0x1000, 0x42, 65536))
    raw = cd.pack()
    assert len(raw) == 40
    # version 1, flags RS_CONN_FLAG_IOMAP (little-endian host), credits be16, 3 reserved, iomap size
    assert raw[:8] == bytes([1, P.RS_CONN_FLAG_IOMAP, 0x01, 0x80, 0, 0, 0, 0])
    # struct rs_sge {be64 addr; be32 key; be32 length}
    assert raw[8:24] == struct.pack(">QII", 0x1122334455667788, 0xAABBCCDD, 2)
    assert raw[24:40] == struct.pack(">QII", 0x1000, 0x42, 65536)
    back = P.ConnData.unpack(raw + bytes(156))         # as it arrives: padded to the REP's private data
    assert back == cd and not back.swapped
    net = P.ConnData.unpack(bytes([1, P.RS_CONN_FLAG_NET | P.RS_CONN_FLAG_IOMAP]) + raw[2:])
    assert net.swapped                                 # a big-endian peer: its SGL updates are swapped
    with pytest.raises(ValueError):
        P.ConnData.unpack(raw[:39])


def test_sge_byte_order():
    sge = P.Sge(0x0102030405060708, 0x11223344, 0x10000)
    assert P.pack_sge(sge, False) == struct.pack("<QII", *(sge.addr, sge.key, sge.length))
    assert P.pack_sge(sge, True) == struct.pack(">QII", *(sge.addr, sge.key, sge.length))
    assert P.unpack_sge(P.pack_sge(sge, False)) == sge


def test_scale_and_sizes():
    for v in (0, 1, 64, 128):
        assert P.rs_scale_to_value(P.rs_value_to_scale(v, 8), 8) == v
    assert P.rs_scale_to_value(P.rs_value_to_scale(1000, 8), 8) == 768        # rounded as rsocket.c does
    assert P.qp_size(4, 1 << 20) == P.RS_QP_MIN_SIZE
    assert P.qp_size(1 << 20, 1 << 20) == P.RS_QP_MAX_SIZE
    assert P.qp_size(384, 256) == 256


def test_seq16():
    assert P.seq16_ge(5, 5) and P.seq16_ge(6, 5) and not P.seq16_ge(4, 5)
    assert P.seq16_ge(2, 0xFFFE) and not P.seq16_ge(0xFFFE, 2)               # across the wrap


def _stream(rbuf_size=16, rq=4):
    st = S.Stream(None, {"sq_size": 16, "rq_size": rq, "sq_inline": 64, "sbuf_size": 4096,
                         "rbuf_size": rbuf_size, "target_iomap_size": 0})
    st.rbuf = memoryview(bytearray(rbuf_size))
    st.rbuf_offset = 0
    st.rbuf_bytes_avail = rbuf_size >> 1
    st.rbuf_free_offset = rbuf_size >> 1
    st.rseq_comp = rq >> 1
    st.state = S.RS_CONNECT_RDWR
    return st


def test_recv_ring_wrap_partial_and_peek():
    st = _stream()
    st.rbuf[:] = b"ABCDEFGHIJKLMNOP"
    st.rbuf_offset = 12
    st.rmsg = collections.deque([[6], [3]])            # 6 bytes wrapping past the end, then 3
    out = bytearray(4)
    assert st.recv_into(memoryview(out), peek=True) == 4 and out == b"MNOP"
    assert st.rbuf_offset == 12 and len(st.rmsg) == 2  # a peek consumes nothing
    out = bytearray(8)
    assert st.recv_into(memoryview(out)) == 8 and out == b"MNOPABCD"
    assert st.rmsg[0] == [1] and st.rseq_no == 1       # the first message done, 1 byte of the second left
    assert st.rbuf_offset == 4 and st.rbuf_bytes_avail == 8 + 8
    out = bytearray(8)
    assert st.recv_into(memoryview(out)) == 1 and out[:1] == b"E" and st.rseq_no == 2


def test_credit_rule():
    """rs_give_credits: half the receive buffer free, or half the
    receive queue's messages consumed; and a control slot free."""
    st = _stream(rbuf_size=16, rq=4)
    st.rbuf_bytes_avail = 0
    assert not st.give_credits()                       # rseq_no 0 < rseq_comp 2
    st.rseq_no = 2
    assert st.give_credits()
    st.ctrl_seqno = st.ctrl_max_seqno                  # the RS_QP_CTRL_SIZE slots are all in flight
    assert not st.give_credits()
    st.ctrl_seqno = 0
    st.rseq_no = 0
    st.rbuf_bytes_avail = 8
    assert st.give_credits()
    st.state = S.RS_DISCONNECTED
    assert not st.give_credits()
