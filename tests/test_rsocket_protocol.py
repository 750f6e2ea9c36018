"""The rsockets wire values as librdmacm's rsocket.c has them: the
immediate's op/data split, struct rs_conn_data (40 bytes, network
order), the SGL entries a peer writes, the iomap size scale, the
16-bit credit arithmetic, and the credit bookkeeping of a stream
(rs_send_credits, rs_write_data, rs_poll_cq, rrecv) on a stand-in QP."""

from __future__ import annotations

import struct

import pytest

from softrdma.enums import IBV_WC_SUCCESS, IBV_WC_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM
from softrdma.rsocket import protocol as P
from softrdma.rsocket import stream as S
from softrdma.verbs.cq import bswap32


def test_msg_encoding():
    assert P.rs_msg_set(P.RS_OP_DATA, 65536) == 0x00010000
    assert P.rs_msg_set(P.RS_OP_SGL, 0xFFFF) == 0x8000FFFF
    assert P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_SHUTDOWN) == 0xE0000002
    assert P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_DISCONNECT) == 0xE0000000
    m = P.rs_msg_set(P.RS_OP_IOMAP_SGL, 0x1FFFFFFF)
    assert m == 0xDFFFFFFF and P.rs_msg_op(m) == P.RS_OP_IOMAP_SGL and P.rs_msg_data(m) == 0x1FFFFFFF
    for op in range(8):
        assert P.rs_msg_op(P.rs_msg_set(op, 12345)) == op
        assert P.rs_msg_data(P.rs_msg_set(op, 12345)) == 12345


def test_conn_data_layout():
    cd = P.ConnData(1, P.RS_CONN_FLAG_IOMAP, 384, 0, P.Sge(0x1122334455667788, 0xAABBCCDD, 2),
                    P.Sge(0x0102030405060708, 0x0A0B0C0D, 65536))
    raw = cd.pack()
    assert len(raw) == 40 == P.CONN_DATA.size
    assert raw[:8] == bytes([1, 2, 0x01, 0x80, 0, 0, 0, 0])          # version, flags, be16 credits, rsvd, iomap
    assert raw[8:24] == bytes.fromhex("1122334455667788" "aabbccdd" "00000002")
    assert raw[24:40] == bytes.fromhex("0102030405060708" "0a0b0c0d" "00010000")
    back = P.ConnData.unpack(raw + b"\0" * 16)                         # private data is padded to 56
    assert back == cd
    with pytest.raises(ValueError):
        P.ConnData.unpack(raw[:39])


def test_format_conn_data_and_swap():
    cd = P.format_conn_data(384, 0, P.Sge(1, 2, P.RS_SGL_SIZE), P.Sge(3, 4, 1 << 16))
    assert cd.version == 1 and cd.credits == 384
    assert cd.flags & P.RS_CONN_FLAG_IOMAP
    assert bool(cd.flags & P.RS_CONN_FLAG_NET) == P.HOST_IS_NET
    assert not cd.swapped
    other = P.ConnData(1, cd.flags ^ P.RS_CONN_FLAG_NET, 1, 0, cd.target_sgl, cd.data_buf)
    assert other.swapped
    sge = P.Sge(0x1000, 7, 4096)
    assert P.pack_sge(sge, False) == struct.pack("=QII", 0x1000, 7, 4096)
    assert P.pack_sge(sge, True) == struct.pack(">QII" if not P.HOST_IS_NET else "<QII", 0x1000, 7, 4096)
    assert P.unpack_sge(P.pack_sge(sge, False)) == sge
    assert P.RS_SGE_SIZE == 16 and P.RS_IOMAP_SIZE == 24


def test_scale_and_sizes():
    for v in (0, 1, 127, 128):
        assert P.rs_value_to_scale(v, 8) == v == P.rs_scale_to_value(v, 8)
    assert P.rs_value_to_scale(1024, 8) == 0x80 | 4
    assert P.rs_scale_to_value(0x84, 8) == 1024
    assert P.qp_size(8, 1 << 20) == P.RS_QP_MIN_SIZE
    assert P.qp_size(1 << 20, 1 << 20) == P.RS_QP_MAX_SIZE
    assert P.qp_size(500, 256) == 256


def test_seq16():
    assert P.seq16_ge(5, 5) and P.seq16_ge(6, 5) and not P.seq16_ge(5, 6)
    assert P.seq16_ge(2, 0xFFFE) and not P.seq16_ge(0xFFFE, 2)
    assert P.seq16(0x12345) == 0x2345


class FakeMR:
    def __init__(self, size, buf, key):
        self.view = memoryview(bytearray(size))
        self.buf, self.rkey, self.lkey = buf, key, key


class FakeQP:
    def __init__(self):
        self.sent = []
        self.recvs = 0

    def post_send(self, wr):
        self.sent.append(wr)

    def post_recv(self, wr):
        self.recvs += 1


class FakeWC:
    def __init__(self, wr_id, imm=None, status=IBV_WC_SUCCESS):
        self.wr_id, self.status = wr_id, status
        self.wc_flags = IBV_WC_WITH_IMM if imm is not None else 0
        self.imm_data = bswap32(imm) if imm is not None else 0


class FakeCQ:
    def __init__(self):
        self.wcs = []

    def poll(self, n):
        out, self.wcs = self.wcs[:n], self.wcs[n:]
        return len(out), out


def make_stream(rbuf=1 << 16, sbuf=1 << 16, rq=32, sq=32, inline=64):
    st = S.Stream(None, dict(sq_size=sq, rq_size=rq, sq_inline=inline, sbuf_size=sbuf, rbuf_size=rbuf,
                             target_iomap_size=0))
    st.qp, st.cq = FakeQP(), FakeCQ()
    st.smr = FakeMR(sbuf, 0x10000, 11)
    st.sbuf = st.smr.view
    st.target_mr = FakeMR(P.RS_SGE_SIZE * P.RS_SGL_SIZE, 0x20000, 12)
    st.target_sgl = st.target_mr.view
    st.rmr = FakeMR(rbuf, 0x30000, 13)
    st.rbuf = st.rmr.view
    import ctypes
    st.ssgl_off = 0
    st.sbuf_bytes_avail = sbuf
    st.rbuf_free_offset = rbuf >> 1
    st.rbuf_bytes_avail = rbuf >> 1
    st.rbuf_offset = 0
    st.sqe_avail = sq - st.ctrl_max_seqno
    st.rseq_comp = rq >> 1
    st.inline_buf = ctypes.create_string_buffer(max(inline, P.RS_SGE_SIZE))
    st.inline_addr = ctypes.addressof(st.inline_buf)
    st.state = S.RS_CONNECT_RDWR
    return st


def test_conn_data_of_a_stream_and_save():
    a, b = make_stream(), make_stream()
    b.save_conn_data(P.ConnData.unpack(a.conn_data().pack()))
    assert b.remote_sgl == P.Sge(0x20000, 12, P.RS_SGL_SIZE)
    assert b.sseq_comp == 32                                   # the peer's rq_size: our message credits
    assert P.unpack_sge(b.target_sgl) == P.Sge(0x30000, 13, 1 << 15)   # the first half of its buffer
    assert b.remote_sge == 1 and b.can_send()


def test_write_data_consumes_credits_and_target():
    st = make_stream()
    st.save_conn_data(P.ConnData(1, 0, 4, 0, P.Sge(0x90000, 99, 2), P.Sge(0x80000, 98, 4096)))
    sent = st.send_some(memoryview(bytes(range(256)) * 16), lambda test: (_ for _ in ()).throw(BlockingIOError()))
    assert sent == 4096                                       # the whole target entry
    wrs = st.qp.sent
    lengths = [P.rs_msg_data(w.wr_id) for w in wrs]
    assert lengths == [2048, 2048]                            # RS_OLAP_START_SIZE, then limited by the target
    assert all(w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM and bswap32(w.imm_data) == w.wr_id for w in wrs)
    assert st.sseq_no == 2 and st.sbuf_bytes_avail == (1 << 16) - 4096
    assert st._target_len() == 0 and st.target_sge == 1       # entry used up: the next one
    assert not st.can_send()
    with pytest.raises(BlockingIOError):
        st.send_some(memoryview(b"x"), lambda test: (_ for _ in ()).throw(BlockingIOError()))
    # the send completions give back the send buffer and the WQEs
    st.cq.wcs = [FakeWC(w.wr_id) for w in wrs]
    st.poll_cq()
    assert st.sbuf_bytes_avail == 1 << 16 and st.sqe_avail == 32 - P.RS_QP_CTRL_SIZE


def test_receive_and_give_credits():
    st = make_stream(rbuf=8192, rq=8)
    st.save_conn_data(P.ConnData(1, 0, 8, 0, P.Sge(0x90000, 99, 2), P.Sge(0x80000, 98, 4096)))
    assert st.give_credits()                                  # the buffer's second half, at once
    st.update_credits()
    w = st.qp.sent[-1]
    assert P.rs_msg_op(w.wr_id) == P.RS_OP_SGL and P.rs_msg_data(w.wr_id) == 0 + 8    # rseq_no + rq_size
    assert w.remote_addr == 0x90000 + P.RS_SGE_SIZE and w.rkey == 99                  # remote_sge 1
    assert bytes(st.inline_buf.raw[:16]) == P.pack_sge(P.Sge(0x30000 + 4096, 13, 4096), False)
    assert st.rbuf_bytes_avail == 0 and st.rbuf_free_offset == 0 and st.remote_sge == 0
    assert not st.give_credits()
    st.rbuf[0:4096] = bytes(range(256)) * 16
    st.cq.wcs = [FakeWC(P.RS_WR_ID_FLAG_RECV, P.rs_msg_set(P.RS_OP_DATA, 1000)),
                 FakeWC(P.RS_WR_ID_FLAG_RECV, P.rs_msg_set(P.RS_OP_DATA, 3096))]
    st.poll_cq()
    assert st.qp.recvs == 2 and list(st.rmsg) == [[1000], [3096]]
    buf = bytearray(1500)
    assert st.recv_into(memoryview(buf), peek=True) == 1500 and len(st.rmsg) == 2
    assert st.recv_into(memoryview(buf)) == 1500
    assert buf == (bytes(range(256)) * 16)[:1500]
    assert list(st.rmsg) == [[2596]] and st.rseq_no == 1
    assert not st.give_credits()                              # half the buffer not yet free
    assert st.recv_into(memoryview(bytearray(4000))) == 2596
    assert st.rbuf_bytes_avail == 4096 and st.give_credits()
    st.update_credits()
    w = st.qp.sent[-1]
    assert P.rs_msg_op(w.wr_id) == P.RS_OP_SGL and P.rs_msg_data(w.wr_id) == 2 + 8
    assert w.remote_addr == 0x90000 and w.rkey == 99                                   # remote_sge 0
    assert bytes(st.inline_buf.raw[:16]) == P.pack_sge(P.Sge(0x30000, 13, 4096), False)
    assert st.rbuf_bytes_avail == 0 and st.rbuf_free_offset == 4096 and st.remote_sge == 1
    assert st.ctrl_seqno == 2 and not st.give_credits()
    st.ctrl_seqno = st.ctrl_max_seqno                          # no control credits: no update, whatever is free
    st.rbuf_bytes_avail = 8192
    assert not st.give_credits()
    st.ctrl_seqno = 2
    # the peer's SGL message moves our message credits; its shutdown ends reading
    st.cq.wcs = [FakeWC(P.RS_WR_ID_FLAG_RECV, P.rs_msg_set(P.RS_OP_SGL, 77)),
                 FakeWC(P.RS_WR_ID_FLAG_RECV, P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_SHUTDOWN))]
    st.poll_cq()
    assert st.sseq_comp == 77 and not st.state & S.RS_READABLE and st.state & S.RS_WRITABLE
    st.cq.wcs = [FakeWC(P.RS_WR_ID_FLAG_RECV, P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_DISCONNECT))]
    st.poll_cq()
    assert st.state == S.RS_DISCONNECTED
