"""One connected rsocket's data path, as rsocket.c runs a SOCK_STREAM
rsocket once its QP exists: the endpoint (rs_create_ep: one CQ on a
completion channel for both queues, an RC QP signalling every send, the
send buffer, the target SGL the peer writes its receive-buffer credits
into, the receive buffer the peer writes data into), the completions
(rs_poll_cq), the credits (rs_send_credits / rs_give_credits), and the
byte stream (rsend / rrecv / rs_peek).

Data goes as RDMA WRITE WITH IMMEDIATE into the peer's receive buffer at
the address its latest SGL entry names; the immediate (``rs_msg_set``)
says how many bytes.  Each receive completion uses one receive WQE (no
SGEs), and the peer may have at most ``rq_size`` messages in flight
(sseq_no/sseq_comp): the credits.  When the application has consumed
half the receive buffer (or half the receive queue's messages), an SGL
update -- a WRITE WITH IMMEDIATE of 16 bytes into the peer's target SGL
-- hands the free half back.

Locking: one lock per rsocket (rsocket.c's slock/rlock/cq_lock in one);
waits release it.  ``wait`` is given by the owner (``api.RSocket``): it
blocks on the completion channel and the CM channel.
"""

from __future__ import annotations

import collections
import ctypes
import errno

from ..enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC, IBV_SEND_INLINE, IBV_WC_SUCCESS, IBV_WC_WITH_IMM,
    IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
)
from ..verbs.cq import CQ, CompChannel, bswap32
from ..verbs.errors import PyverbsRDMAError
from ..verbs.mr import MR
from ..verbs.qp import QPCap, QPInitAttr
from ..verbs.wr import SGE, RecvWR, SendWR
from . import protocol as P

# enum rs_state
RS_INIT = 0
RS_BOUND = 0x0001
RS_LISTENING = 0x0002
RS_OPENING = 0x0004
RS_RESOLVING_ADDR = RS_OPENING | 0x0010
RS_RESOLVING_ROUTE = RS_OPENING | 0x0020
RS_CONNECTING = RS_OPENING | 0x0040
RS_ACCEPTING = RS_OPENING | 0x0080
RS_CONNECTED = 0x0100
RS_WRITABLE = 0x0200
RS_READABLE = 0x0400
RS_CONNECT_RDWR = RS_CONNECTED | RS_READABLE | RS_WRITABLE
RS_CONNECT_ERROR = 0x0800
RS_DISCONNECTED = 0x1000
RS_ERROR = 0x2000

_WRITE_ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE
_RECV_WR = P.RS_WR_ID_FLAG_RECV


class RsError(OSError):
    """An rsocket call's failure, with the errno rsocket.c sets."""

    def __init__(self, err: int, what: str = ""):
        super().__init__(err, what or __import__("os").strerror(err))


class Stream:
    """The SOCK_STREAM half of struct rsocket that exists once connected
    (or connecting with its QP made)."""

    def __init__(self, cm_id, sizes: dict):
        self.cm_id = cm_id
        self.state = RS_INIT
        self.err = 0
        self.sq_size = sizes["sq_size"]
        self.rq_size = sizes["rq_size"]
        self.sq_inline = sizes["sq_inline"]
        self.sbuf_size = sizes["sbuf_size"]
        self.rbuf_size = sizes["rbuf_size"]
        self.target_iomap_size = sizes["target_iomap_size"]
        self.ctrl_seqno = 0
        self.ctrl_max_seqno = P.RS_QP_CTRL_SIZE
        self.sseq_no = self.sseq_comp = self.rseq_no = self.rseq_comp = 0
        self.remote_sge = 0
        self.remote_sgl = P.Sge(0, 0, 0)
        self.swap_sgl = False
        self.target_sge = 0
        self.rmsg: collections.deque = collections.deque()     # [length] of each unread message
        self.cq_armed = False
        self.channel = self.cq = self.qp = None
        self.smr = self.rmr = self.target_mr = None
        self.closed = False

    # ------------------------------------------------------------------ rs_create_ep
    def create_ep(self) -> None:
        cm_id = self.cm_id
        dev = cm_id.verbs.query_device()
        max_size = min(dev.max_qp_wr, P.RS_QP_MAX_SIZE)
        self.sq_size = P.qp_size(self.sq_size, max_size)
        self.rq_size = P.qp_size(self.rq_size, max_size)
        ctx = cm_id.verbs
        self.channel = CompChannel(ctx)
        self.cq = CQ(ctx, self.sq_size + self.rq_size, None, self.channel, 0)
        self.cq.req_notify(False)
        self.cq_armed = True
        cap = QPCap(max_send_wr=self.sq_size, max_recv_wr=self.rq_size, max_send_sge=2, max_recv_sge=1,
                    max_inline_data=self.sq_inline)
        self.qp = cm_id.create_qp(QPInitAttr(qp_type=IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap, sq_sig_all=1))
        self.sq_inline = self.qp.cap.max_inline_data if hasattr(self.qp, "cap") else self.sq_inline
        self._init_bufs()
        recv = RecvWR(_RECV_WR, 0, [])
        for _ in range(self.rq_size):
            self.qp.post_recv(recv)

    def _init_bufs(self) -> None:
        """rs_init_bufs: the send buffer (with room for the SGL updates when
        they cannot go inline), the target SGL (+ iomap), the receive buffer."""
        pd = self.cm_id.default_pd()
        total_sbuf = self.sbuf_size
        if self.sq_inline < P.RS_SGE_SIZE:
            total_sbuf += P.RS_SGE_SIZE * P.RS_QP_CTRL_SIZE
        self.smr = MR(pd, total_sbuf, IBV_ACCESS_LOCAL_WRITE)
        self.sbuf = self.smr.view
        tlen = P.RS_SGE_SIZE * P.RS_SGL_SIZE + P.RS_IOMAP_SIZE * self.target_iomap_size
        self.target_mr = MR(pd, tlen, _WRITE_ACCESS)
        self.target_sgl = self.target_mr.view
        self.rmr = MR(pd, self.rbuf_size, _WRITE_ACCESS)
        self.rbuf = self.rmr.view
        self.ssgl_off = 0                                     # ssgl[0].addr - sbuf
        self.sbuf_bytes_avail = self.sbuf_size
        self.rbuf_free_offset = self.rbuf_size >> 1
        self.rbuf_bytes_avail = self.rbuf_size >> 1
        self.rbuf_offset = 0
        self.sqe_avail = self.sq_size - self.ctrl_max_seqno
        self.rseq_comp = self.rq_size >> 1
        self.inline_buf = ctypes.create_string_buffer(max(self.sq_inline, P.RS_SGE_SIZE))
        self.inline_addr = ctypes.addressof(self.inline_buf)

    def conn_data(self) -> P.ConnData:
        return P.format_conn_data(self.rq_size, self.target_iomap_size,
                                  P.Sge(self.target_mr.buf, self.target_mr.rkey, P.RS_SGL_SIZE),
                                  P.Sge(self.rmr.buf, self.rmr.rkey, self.rbuf_size >> 1))

    def save_conn_data(self, conn: P.ConnData) -> None:
        """rs_save_conn_data: the peer's target SGL, and its first receive
        buffer half as our first target SGL entry."""
        self.remote_sgl = P.Sge(conn.target_sgl.addr, conn.target_sgl.key, conn.target_sgl.length)
        self.remote_sge = 1
        self.swap_sgl = conn.swapped
        P.SGE_HOST.pack_into(self.target_sgl, 0, conn.data_buf.addr, conn.data_buf.key, conn.data_buf.length)
        self.sseq_comp = conn.credits & 0xFFFF

    # ------------------------------------------------------------------ posting
    def _post(self, wr_id: int, opcode: int, sges: list, flags: int, addr: int, rkey: int, imm: int = 0) -> None:
        wr = SendWR(wr_id, opcode, len(sges), imm_data=bswap32(imm), sg=sges, send_flags=flags)
        wr.set_wr_rdma(rkey, addr)
        self.qp.post_send(wr)

    def _post_msg(self, msg: int) -> None:
        """rs_post_msg: a zero-byte WRITE WITH IMMEDIATE."""
        self._post(msg, IBV_WR_RDMA_WRITE_WITH_IMM, [], 0, 0, 0, msg)

    def _write_data(self, sges: list, length: int, flags: int) -> None:
        """rs_write_data: the target SGL entry is advanced before the post."""
        self.sseq_no = (self.sseq_no + 1) & 0xFFFF
        self.sqe_avail -= 1
        self.sbuf_bytes_avail -= length
        off = self.target_sge * P.RS_SGE_SIZE
        addr, rkey, tlen = P.SGE_HOST.unpack_from(self.target_sgl, off)
        P.SGE_HOST.pack_into(self.target_sgl, off, addr + length, rkey, tlen - length)
        if tlen - length == 0:
            self.target_sge = (self.target_sge + 1) % P.RS_SGL_SIZE
        msg = P.rs_msg_set(P.RS_OP_DATA, length)
        self._post(msg, IBV_WR_RDMA_WRITE_WITH_IMM, sges, flags, addr, rkey, msg)

    def _target_len(self) -> int:
        return P.SGE_HOST.unpack_from(self.target_sgl, self.target_sge * P.RS_SGE_SIZE)[2]

    # ------------------------------------------------------------------ credits
    def ctrl_avail(self) -> bool:
        return self.ctrl_seqno != self.ctrl_max_seqno

    def send_credits(self) -> None:
        """rs_send_credits: the free half of the receive buffer as an SGL
        update, or just the message credits."""
        self.ctrl_seqno += 1
        self.rseq_comp = (self.rseq_no + (self.rq_size >> 1)) & 0xFFFF
        msg = P.rs_msg_set(P.RS_OP_SGL, (self.rseq_no + self.rq_size) & 0xFFFF)
        half = self.rbuf_size >> 1
        if self.rbuf_bytes_avail >= half:
            sge = P.pack_sge(P.Sge(self.rmr.buf + self.rbuf_free_offset, self.rmr.rkey, half), self.swap_sgl)
            if self.sq_inline >= P.RS_SGE_SIZE:
                ctypes.memmove(self.inline_addr, sge, P.RS_SGE_SIZE)
                sg, flags = [SGE(self.inline_addr, P.RS_SGE_SIZE, 0)], IBV_SEND_INLINE
            else:
                off = self.sbuf_size + P.RS_SGE_SIZE * (self.ctrl_seqno & (P.RS_QP_CTRL_SIZE - 1))
                self.sbuf[off:off + P.RS_SGE_SIZE] = sge
                sg, flags = [SGE(self.smr.buf + off, P.RS_SGE_SIZE, self.smr.lkey)], 0
            self._post(msg, IBV_WR_RDMA_WRITE_WITH_IMM, sg, flags,
                       self.remote_sgl.addr + self.remote_sge * P.RS_SGE_SIZE, self.remote_sgl.key, msg)
            self.rbuf_bytes_avail -= half
            self.rbuf_free_offset += half
            if self.rbuf_free_offset >= self.rbuf_size:
                self.rbuf_free_offset = 0
            self.remote_sge += 1
            if self.remote_sge == self.remote_sgl.length:
                self.remote_sge = 0
        else:
            self._post_msg(msg)

    def give_credits(self) -> bool:
        return ((self.rbuf_bytes_avail >= (self.rbuf_size >> 1) or P.seq16_ge(self.rseq_no, self.rseq_comp))
                and self.ctrl_avail() and bool(self.state & RS_CONNECTED))

    def update_credits(self) -> None:
        if self.give_credits():
            self.send_credits()

    # ------------------------------------------------------------------ completions
    def poll_cq(self) -> None:
        """rs_poll_cq: every completion the CQ holds; the receive WQEs used
        are posted again while connected."""
        rcnt = 0
        cq = self.cq
        while True:
            n, wcs = cq.poll(32)
            if not n:
                break
            for wc in wcs:
                if wc.wr_id & _RECV_WR:
                    if wc.status != IBV_WC_SUCCESS:
                        continue
                    rcnt += 1
                    msg = bswap32(wc.imm_data) if wc.wc_flags & IBV_WC_WITH_IMM else 0
                    op = msg >> 29
                    if op == P.RS_OP_SGL:
                        self.sseq_comp = msg & 0xFFFF
                    elif op == P.RS_OP_CTRL:
                        data = msg & 0x1FFFFFFF
                        if data == P.RS_CTRL_DISCONNECT:
                            self.state = RS_DISCONNECTED
                        elif data == P.RS_CTRL_SHUTDOWN:
                            if self.state & RS_WRITABLE:
                                self.state &= ~RS_READABLE
                            else:
                                self.state = RS_DISCONNECTED
                    elif op == P.RS_OP_DATA:
                        self.rmsg.append([msg & 0x1FFFFFFF])
                    # RS_OP_IOMAP_SGL: nice to know; RS_OP_WRITE: never sent
                else:
                    msg = wc.wr_id & 0xFFFFFFFF
                    op = msg >> 29
                    if op == P.RS_OP_SGL:
                        self.ctrl_max_seqno += 1
                    elif op == P.RS_OP_CTRL:
                        self.ctrl_max_seqno += 1
                        if msg & 0x1FFFFFFF == P.RS_CTRL_DISCONNECT:
                            self.state = RS_DISCONNECTED
                    elif op == P.RS_OP_IOMAP_SGL:
                        self.sqe_avail += 1
                        self.sbuf_bytes_avail += P.RS_IOMAP_SIZE
                    else:
                        self.sqe_avail += 1
                        self.sbuf_bytes_avail += msg & 0x1FFFFFFF
                    if wc.status != IBV_WC_SUCCESS and self.state & RS_CONNECTED:
                        self.state = RS_ERROR
                        self.err = errno.EIO
        if self.state & RS_CONNECTED and rcnt:
            recv = RecvWR(_RECV_WR, 0, [])
            try:
                for _ in range(rcnt):
                    self.qp.post_recv(recv)
            except PyverbsRDMAError as e:
                self.state = RS_ERROR
                self.err = e.error_code or errno.EIO

    def process(self) -> None:
        """One non-blocking pass: credits out, completions in, credits out."""
        self.update_credits()
        self.poll_cq()
        self.update_credits()

    def arm(self) -> None:
        if not self.cq_armed:
            self.cq.req_notify(False)
            self.cq_armed = True

    def take_cq_event(self) -> bool:
        """rs_get_cq_event without waiting: True if one was read."""
        try:
            self.channel.get_cq_event(timeout=0)
        except PyverbsRDMAError as e:
            if e.error_code == errno.EAGAIN:
                return False
            self.state = RS_ERROR
            self.err = e.error_code
            return False
        self.cq.ack_events(1)
        self.cq_armed = False
        return True

    # ------------------------------------------------------------------ tests (rs_*_can_*)
    def can_send(self) -> bool:
        return (self.sqe_avail > 0 and self.sbuf_bytes_avail >= P.RS_SNDLOWAT and self.sseq_no != self.sseq_comp
                and self._target_len() != 0)

    def conn_can_send(self) -> bool:
        return self.can_send() or not self.state & RS_WRITABLE

    def have_rdata(self) -> bool:
        return bool(self.rmsg)

    def conn_have_rdata(self) -> bool:
        return bool(self.rmsg) or not self.state & RS_READABLE

    def conn_can_send_ctrl(self) -> bool:
        return self.ctrl_avail() or not self.state & RS_CONNECTED

    def conn_all_sends_done(self) -> bool:
        return ((self.ctrl_max_seqno - self.ctrl_seqno) + self.sqe_avail == self.sq_size
                or not self.state & RS_CONNECTED)

    # ------------------------------------------------------------------ the byte stream
    def send_some(self, data: memoryview, wait) -> int:
        """rsend's loop; ``wait(test)`` processes completions until ``test``
        holds (or raises EWOULDBLOCK).  Returns the bytes taken."""
        left = len(data)
        pos = 0
        olen = P.RS_OLAP_START_SIZE
        while left:
            if not self.can_send():
                try:
                    wait(self.conn_can_send)
                except BlockingIOError:
                    if pos:
                        return pos
                    raise
                if not self.state & RS_WRITABLE:
                    if pos:
                        return pos
                    raise RsError(errno.ECONNRESET)
            if olen < left:
                xfer = olen
                if olen < P.RS_MAX_TRANSFER:
                    olen <<= 1
            else:
                xfer = left
            xfer = min(xfer, self.sbuf_bytes_avail, self._target_len())
            chunk = data[pos:pos + xfer]
            if xfer <= self.sq_inline:
                ctypes.memmove(self.inline_addr, bytes(chunk), xfer)
                self._write_data([SGE(self.inline_addr, xfer, 0)], xfer, IBV_SEND_INLINE)
            else:
                off = self.ssgl_off
                room = self.sbuf_size - off
                lkey = self.smr.lkey
                base = self.smr.buf
                if xfer <= room:
                    self.sbuf[off:off + xfer] = chunk
                    self._write_data([SGE(base + off, xfer, lkey)], xfer, 0)
                    self.ssgl_off = off + xfer if xfer < room else 0
                else:
                    self.sbuf[off:self.sbuf_size] = chunk[:room]
                    rest = xfer - room
                    self.sbuf[0:rest] = chunk[room:]
                    self._write_data([SGE(base + off, room, lkey), SGE(base, rest, lkey)], xfer, 0)
                    self.ssgl_off = rest
            pos += xfer
            left -= xfer
        return pos

    def recv_into(self, buf: memoryview, peek: bool = False) -> int:
        """rrecv's copy (rs_peek with ``peek``) out of the receive ring;
        the caller has made sure there is data or the stream has ended."""
        left = len(buf)
        pos = 0
        rbuf, size = self.rbuf, self.rbuf_size
        offset = self.rbuf_offset
        msgs = self.rmsg
        i = 0
        while left and i < len(msgs):
            m = msgs[i]
            if left < m[0]:
                rsize = left
                if not peek:
                    m[0] -= left
            else:
                rsize = m[0]
                if peek:
                    i += 1
                else:
                    msgs.popleft()
                    self.rseq_no = (self.rseq_no + 1) & 0xFFFF
            end = size - offset
            if rsize > end:
                buf[pos:pos + end] = rbuf[offset:size]
                pos += end
                rsize -= end
                left -= end
                offset = 0
            buf[pos:pos + rsize] = rbuf[offset:offset + rsize]
            offset += rsize
            pos += rsize
            left -= rsize
        if not peek:
            self.rbuf_offset = offset
            self.rbuf_bytes_avail += pos
        return pos

    # ------------------------------------------------------------------ control messages
    def post_ctrl(self, ctrl: int) -> None:
        self.ctrl_seqno += 1
        self._post_msg(P.rs_msg_set(P.RS_OP_CTRL, ctrl))

    def post_keepalive(self) -> None:
        """tcp_svc_send_keepalive: a zero-byte RDMA WRITE (no immediate)."""
        if self.ctrl_avail() and self.state & RS_CONNECTED:
            self.ctrl_seqno += 1
            self._post(P.rs_msg_set(P.RS_OP_CTRL, P.RS_CTRL_KEEPALIVE), IBV_WR_RDMA_WRITE, [], 0, 0, 0)

    # ------------------------------------------------------------------ teardown
    def free(self) -> None:
        if self.closed:
            return
        self.closed = True
        for mr in (self.smr, self.target_mr, self.rmr):
            if mr is not None:
                try:
                    mr.close()
                except PyverbsRDMAError:
                    pass
        try:
            self.cm_id.destroy_qp()
        except PyverbsRDMAError:
            pass
        for obj in (self.cq, self.channel):
            if obj is not None:
                try:
                    obj.close()
                except PyverbsRDMAError:
                    pass
