"""The messenger: rdma_cm connections sharing one PD, one registered chunk
pool, one SRQ and one CQ with a completion channel, driven by one polling
thread.

Every verbs call happens under one lock (the application's `send` posts
what credits allow at once; the polling thread posts the rest as credits
come back).  Messages are delivered to ``on_message(conn, seq, data)`` from
the polling thread, per connection in sequence order, once each.
"""

from __future__ import annotations

import collections
import errno
import os
import select
import struct
import threading

import pyverbs.enums as e
import pyverbs.librdmacm_enums as ce
from pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from pyverbs.cq import CQ, CompChannel
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from .credits import Credits
from .frag import fragments
from .header import HDR_LEN, MAGIC, MSG_CREDIT, MSG_DATA, Header, HeaderError, unpack
from .inbound import Inbound
from .pool import ChunkPool

_PRIV = struct.Struct("<IH")          # connection private data: magic, receive credits granted


class Connection:
    """One rdma_cm connection: its QP, credits, outbound queue and inbound state."""

    def __init__(self, cmid: CMID, credits: int):
        self.cmid = cmid
        self.state = "connecting"
        self.credits: Credits | None = None         # set once the peer's grant is known
        self.grant = credits                         # what we grant the peer
        self.inbound = Inbound()
        self.out_seq = 0
        self.outq: collections.deque = collections.deque()   # (Header, payload) not yet posted
        self.inflight: set[int] = set()              # chunks of our posted sends
        self.established = threading.Event()
        self.error: str | None = None
        self.qp_num = None
        self.name = ""

    def __repr__(self):
        return f"<Connection {self.name} {self.state}>"


class Messenger:
    def __init__(self, chunk_size: int = 8192, credits: int = 32, max_conns: int = 8,
                 on_message=None, on_connect=None, on_close=None):
        self.chunk_size, self.grant, self.max_conns = chunk_size, credits, max_conns
        self.on_message, self.on_connect, self.on_close = on_message, on_connect, on_close
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.channel = CMEventChannel()
        self.conns: dict[object, Connection] = {}    # verbs cm_id -> connection
        self.by_qpn: dict[int, Connection] = {}
        self.listener: CMID | None = None
        self.pd = None
        self.srq_posted = 0
        self._wake_r, self._wake_w = os.pipe()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="messenger-poll", daemon=True)
        self.stats = collections.Counter()

    # -- shared resources -----------------------------------------------------------------------
    def _setup(self, ctx) -> None:
        """The device's PD, chunk pool, SRQ, completion channel and CQ, once."""
        if self.pd is not None:
            return
        per_conn = self.grant + Credits.reserve(self.grant)
        self.srq_max = per_conn * self.max_conns
        self.send_depth = self.grant + Credits.reserve(self.grant) + 1
        self.pd = PD(ctx)
        self.pool = ChunkPool(self.pd, self.chunk_size, self.srq_max + self.send_depth * self.max_conns)
        self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=self.srq_max, max_sge=1)))
        self.comp_channel = CompChannel(ctx)
        self.cq = CQ(ctx, self.srq_max + self.send_depth * self.max_conns, None, self.comp_channel, 0)
        self.cq.req_notify(False)
        self._thread.start()

    def _probe_context(self, ai: AddrInfo):
        """The verbs context rdma_cm picks for an address: a synchronous ID
        resolved and dropped (rdma_cm hands every ID on a device the same context)."""
        probe = CMID(creator=ai)
        try:
            return probe.context
        finally:
            probe.close()

    def _post_srq(self, want: int) -> None:
        while self.srq_posted < want:
            idx = self.pool.take()
            if idx is None:
                raise RuntimeError("chunk pool exhausted")
            self._post_recv(idx)

    def _post_recv(self, idx: int) -> None:
        self.srq.post_recv(RecvWR(idx, 1, [SGE(self.pool.addr(idx), self.chunk_size, self.pool.mr.lkey)]))
        self.srq_posted += 1

    def _new_qp(self, conn: Connection) -> None:
        live = sum(1 for c in self.conns.values() if c.state != "closed")
        if live > self.max_conns:
            raise PyverbsError(f"more than {self.max_conns} connections")
        self._post_srq((self.grant + Credits.reserve(self.grant)) * live)
        cap = QPCap(max_send_wr=self.send_depth, max_recv_wr=0, max_send_sge=1, max_recv_sge=1)
        conn.cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, srq=self.srq, cap=cap))
        conn.qp_num = conn.cmid.qpn
        self.by_qpn[conn.qp_num] = conn

    # -- connection setup -------------------------------------------------------------------------
    def listen(self, addr: str, port: int) -> None:
        """Accept connections on addr:port (rdma_cm, RDMA_PS_TCP)."""
        ai = AddrInfo(src=addr, src_service=str(port), port_space=ce.RDMA_PS_TCP, flags=ce.RAI_PASSIVE)
        ctx = self._probe_context(ai)
        with self.lock:
            self._setup(ctx)
            self.listener = CMID(creator=self.channel, pd=self.pd)
            self.listener.bind_addr(ai)
            self.listener.listen()
        self._wake()

    def connect(self, addr: str, port: int, timeout: float = 30.0) -> Connection:
        """A connection to a listening messenger, once established."""
        ai = AddrInfo(dst=addr, dst_service=str(port), port_space=ce.RDMA_PS_TCP)
        ctx = self._probe_context(ai)
        with self.lock:
            self._setup(ctx)
            cmid = CMID(creator=self.channel, pd=self.pd)
            conn = Connection(cmid, self.grant)
            conn.name = f"{addr}:{port}"
            self.conns[cmid.id] = conn
            cmid.resolve_addr(ai)
        self._wake()
        if not conn.established.wait(timeout):
            raise TimeoutError(f"connection to {addr}:{port} not established in {timeout} s")
        if conn.error:
            raise ConnectionError(conn.error)
        return conn

    def _priv(self) -> bytes:
        return _PRIV.pack(MAGIC, self.grant)

    @staticmethod
    def _peer_grant(data: bytes) -> int:
        magic, credits = _PRIV.unpack_from(bytes(data[:_PRIV.size]).ljust(_PRIV.size, b"\0"))
        if magic != MAGIC or credits < 2:
            raise HeaderError("peer is not a messenger")
        return credits

    def _cm_event(self, ev: CMEvent) -> None:
        t = ev.event_type
        cid = ev.event.id
        if t == ce.RDMA_CM_EVENT_CONNECT_REQUEST:
            try:
                grant = self._peer_grant(ev.private_data)
            except HeaderError:
                cmid = CMID(creator=ev, listen_id=self.listener)
                ev.ack_cm_event()
                cmid.reject()
                cmid.close()
                return
            cmid = CMID(creator=ev, listen_id=self.listener)
            ev.ack_cm_event()
            if sum(1 for c in self.conns.values() if c.state != "closed") >= self.max_conns:
                cmid.reject()                       # its receive buffers would overrun the SRQ
                cmid.close()
                self.stats["rejected"] += 1
                return
            conn = Connection(cmid, self.grant)
            conn.credits = Credits(grant)
            conn.name = "peer"
            self.conns[cid] = conn
            try:
                self._new_qp(conn)
                cmid.accept(ConnParam(private_data=self._priv(), rnr_retry=7))
            except PyverbsError as err:
                self._close(conn, f"accept failed: {err}")
            return
        ev_private = ev.private_data if t == ce.RDMA_CM_EVENT_ESTABLISHED else b""
        ev.ack_cm_event()
        conn = self.conns.get(cid)
        if conn is None:
            return
        try:
            if t == ce.RDMA_CM_EVENT_ADDR_RESOLVED:
                conn.cmid.resolve_route()
            elif t == ce.RDMA_CM_EVENT_ROUTE_RESOLVED:
                self._new_qp(conn)
                conn.cmid.connect(ConnParam(private_data=self._priv(), rnr_retry=7))
            elif t == ce.RDMA_CM_EVENT_ESTABLISHED:
                if conn.credits is None:
                    conn.credits = Credits(self._peer_grant(ev_private))
                conn.state = "established"
                conn.established.set()
                if self.on_connect:
                    self.on_connect(conn)
            else:       # DISCONNECTED, REJECTED, UNREACHABLE, *_ERROR, TIMEWAIT_EXIT...
                self._close(conn, f"rdma_cm: {ev.event_str()}")
        except (PyverbsError, HeaderError) as err:
            self._close(conn, str(err))

    def _close(self, conn: Connection, why: str) -> None:
        if conn.state == "closed":
            return
        was = conn.state
        conn.state = "closed"
        conn.error = conn.error or why
        conn.outq.clear()
        self.stats["closed"] += 1
        try:
            if was == "established":
                conn.cmid.disconnect()
        except PyverbsError:
            pass
        self.by_qpn.pop(conn.qp_num, None)
        for cid, c in list(self.conns.items()):
            if c is conn:
                del self.conns[cid]
        try:
            conn.cmid.close()
        except PyverbsError:
            pass
        for idx in conn.inflight:                    # its QP is gone: no completion will return them
            self.pool.give(idx)
        conn.inflight.clear()
        conn.established.set()
        self.cond.notify_all()
        if self.on_close and was == "established":
            self.on_close(conn, why)

    # -- sending ----------------------------------------------------------------------------------
    def send(self, conn: Connection, data: bytes) -> int:
        """Queue one message on ``conn`` and post what credits allow; its sequence number."""
        with self.lock:
            if conn.state != "established":
                raise ConnectionError(f"connection {conn.name} is {conn.state}: {conn.error}")
            seq = conn.out_seq
            conn.out_seq += 1
            conn.outq.extend(fragments(seq, data, self.chunk_size))
            self._progress(conn)
        return seq

    def backlog(self) -> int:
        """Fragments queued on all connections, not yet posted."""
        with self.lock:
            return sum(len(c.outq) for c in self.conns.values())

    def wait_backlog(self, limit: int, timeout: float | None = None) -> bool:
        """Block until at most ``limit`` fragments wait to be posted."""
        with self.cond:
            return self.cond.wait_for(lambda: sum(len(c.outq) for c in self.conns.values()) <= limit, timeout)

    def _post(self, conn: Connection, h: Header, payload) -> bool:
        if len(conn.inflight) >= self.send_depth:
            return False
        idx = self.pool.take()
        if idx is None:
            return False
        h.credits = conn.credits.take_owed()
        buf = bytearray(HDR_LEN + len(payload))
        h.pack_into(buf)
        buf[HDR_LEN:] = payload
        self.pool.write(idx, bytes(buf))
        wr = SendWR(idx, e.IBV_WR_SEND, 1, sg=[SGE(self.pool.addr(idx), len(buf), self.pool.mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        try:
            conn.cmid.qp.post_send(wr)
        except PyverbsError as err:
            conn.credits.owed += h.credits
            self.pool.give(idx)
            self._close(conn, f"post_send: {err}")
            return False
        conn.inflight.add(idx)
        return True

    def _progress(self, conn: Connection) -> None:
        if conn.state != "established":
            return
        while conn.outq and conn.credits.can_send():
            h, payload = conn.outq[0]
            if not self._post(conn, h, payload):
                break
            conn.credits.spend()
            conn.outq.popleft()
            self.stats["frags_sent"] += 1
        if conn.state == "established" and conn.credits.credit_message_due():
            if self._post(conn, Header(MSG_CREDIT, 0), b""):
                self.stats["credit_msgs"] += 1
        self.cond.notify_all()

    # -- the polling thread -----------------------------------------------------------------------
    def _wake(self) -> None:
        os.write(self._wake_w, b"x")

    def _run(self) -> None:
        fds = [self.channel.fileno(), self.comp_channel.fd, self._wake_r]
        while self._running:
            r, _, _ = select.select(fds, [], [], 1.0)
            if self._wake_r in r:
                os.read(self._wake_r, 4096)
            deliveries = []
            with self.lock:
                if not self._running:
                    break
                self._cm_events()
                if self.comp_channel.fd in r:
                    try:
                        self.comp_channel.get_cq_event(self.cq, timeout=0)
                        self.cq.ack_events(1)
                    except PyverbsError:
                        pass
                self._drain_cq(deliveries)
                self.cq.req_notify(False)
                self._drain_cq(deliveries)          # what arrived before the arm
                for conn in list(self.conns.values()):
                    self._progress(conn)
            for conn, seq, data in deliveries:
                if self.on_message:
                    self.on_message(conn, seq, data)

    def _cm_events(self) -> None:
        while True:
            try:
                ev = CMEvent(self.channel, timeout=0)
            except PyverbsError as err:
                if getattr(err, "error_code", 0) in (errno.EAGAIN, errno.ETIMEDOUT, 0):
                    return
                raise
            self._cm_event(ev)

    def _drain_cq(self, deliveries: list) -> None:
        while True:
            n, wcs = self.cq.poll(32)
            if not n:
                return
            for wc in wcs:
                if wc.opcode & e.IBV_WC_RECV:
                    self._recv_wc(wc, deliveries)
                else:
                    self._send_wc(wc)

    def _send_wc(self, wc) -> None:
        conn = self.by_qpn.get(wc.qp_num)
        if conn is None or wc.wr_id not in conn.inflight:
            return                                  # a closed connection's: returned at close
        conn.inflight.discard(wc.wr_id)
        self.pool.give(wc.wr_id)
        if wc.status != e.IBV_WC_SUCCESS:
            self._close(conn, f"send completion status {wc.status}")

    def _recv_wc(self, wc, deliveries: list) -> None:
        idx = wc.wr_id
        self.srq_posted -= 1
        conn = self.by_qpn.get(wc.qp_num)
        data = self.pool.read(idx, wc.byte_len) if wc.status == e.IBV_WC_SUCCESS else b""
        self._post_recv(idx)                        # consumed: the buffer goes straight back
        if conn is None or conn.state != "established" or wc.status != e.IBV_WC_SUCCESS:
            return
        try:
            h = unpack(data)
            conn.credits.granted(h.credits)
            self.stats["credits_returned"] += h.credits
            conn.credits.consumed(h.type == MSG_DATA)
            if h.type == MSG_DATA:
                self.stats["frags_recv"] += 1
                msg = conn.inbound.add(h, memoryview(data)[HDR_LEN:])
                if msg is not None:
                    deliveries.append((conn, h.seq, msg))
        except (HeaderError, RuntimeError) as err:
            self._close(conn, f"protocol error: {err}")

    # -- teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        with self.lock:
            self._running = False
            for conn in list(self.conns.values()):
                self._close(conn, "messenger closed")
        self._wake()
        if self._thread.is_alive():
            self._thread.join(10)
        with self.lock:
            if self.listener is not None:
                self.listener.close()
            if self.pd is not None:
                for obj in (self.cq, self.comp_channel, self.srq, self.pool, self.pd):
                    try:
                        obj.close()
                    except PyverbsError:
                        pass
            self.channel.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
