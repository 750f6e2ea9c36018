"""perftest's -R (--rdma_cm): rdma_cm for the exchange and for the test QPs
(perftest_communication.c: create_comm_struct with use_rdma_cm,
rdma_client_connect / rdma_server_connect, rdma_write_data /
rdma_read_data, rdma_write_keys / rdma_read_keys, and
create_rdma_cm_connection with its rdma_cm_* event handlers).

With -R perftest sets ``use_rdma_cm`` too, so there is no TCP connection:

* ``RdmaComm`` is the exchange: an RC QP connected with rdma_cm on port
  -p (the server listens with backlog 1, accepts the first request without
  waiting for ESTABLISHED and destroys its listening ID; the client resolves,
  connects with responder resources and initiator depth 0, retry count
  --retry_count and RNR retry 7, and needs ESTABLISHED).  One receive of
  ``sizeof(struct pingpong_dest)`` = 56 bytes is posted (wr_id
  SYNC_SPEC_ID = 5) and re-posted after each message; every step is one
  signaled SEND of exactly the step's size (16 bytes of version, 4-byte
  ints, the MTU's 2 bytes, the report fields), client first, each side
  polling its CQ until the completion is there.  The keys are ``struct
  pingpong_dest`` itself in network byte order (``>iiiiI 4x Q 16s Ii``; the
  4 padding bytes are zero here, uninitialised stack in perftest), not the
  text of the TCP exchange.
* ``create_rdma_cm_connection`` connects the test QP: a key exchange of the
  zeroed keys, then the client resolves address and route to the server's
  port -p (where the server now listens again, backlog num_of_qps), creates
  the resources on the ID's device and connects (READ/ATOMIC: depths of
  -o/out_reads; retry and RNR retry --retry_count), up to 10 tries 100 ms
  apart; the server creates its resources on the request's ID, accepts
  (READ/ATOMIC: the depths clamped to the request's), sets min_rnr_timer
  12 and does not wait for ESTABLISHED; then one more key exchange.
* at the end each side disconnects its test QP's ID as
  rdma_cm_disconnect_nodes does (the server disconnects, both wait for
  DISCONNECTED), and closes the exchange's ID.

A peer may close first: perftest 4.5's ib_write_lat -R skips the closing
key exchange and disconnects its test QP at once (a DREQ, resent for ~80 s
until answered), then its exchange QP.  A DISCONNECTED on either ID is the
exchange's end of file: every read and write of the exchange watches both
channels while it polls, and stops when one comes; a closing exchange is
also bounded in time (``CLOSE_TIMEOUT_S``).  The disconnect that follows
answers the peer's DREQ (a DREP) instead of waiting for its own.

One rdma_cm QP only (perftest's own check of older releases says so for -q
above 1); RC only.  The ACK-timeout option (``RDMA_OPTION_ID_ACK_TIMEOUT``)
is not set, so the CM's default local ACK timeout stands.
"""

from __future__ import annotations

import struct
import sys
import time

from ...pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel, ConnParam
from ...pyverbs.cq import CQ
from ...pyverbs.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_QP_MIN_RNR_TIMER, IBV_QPT_RC, IBV_SEND_SIGNALED, IBV_WC_RECV, IBV_WC_SEND,
    IBV_WR_SEND,
)
from ...pyverbs.librdmacm_enums import (
    RAI_PASSIVE, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_REJECTED,
    RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_UNREACHABLE, RDMA_OPTION_ID,
    RDMA_OPTION_ID_TOS, RDMA_PS_TCP, RDMA_PS_UDP,
)
from ...pyverbs.mr import MR
from ...pyverbs.pyverbs_error import PyverbsError
from ...pyverbs.qp import QPAttr, QPCap, QPInitAttr
from ...pyverbs.wr import SGE, RecvWR, SendWR
from .. import verbs_setup as vs
from . import params as P
from .comm import Comm, CommError, Dest
from .resources import MIN_RNR_TIMER

SYNC_SPEC_ID = 5
PP_DEST = struct.Struct(">iiiiI4xQ16sIi")         # struct pingpong_dest, network order: 56 bytes
NUM_OF_RETRIES = 10
POLL_SPINS = 64
POLL_NAP_S = 50e-6
EVENT_CHECK_S = 0.02          # how often a waiting poll looks for DISCONNECTED
CLOSE_TIMEOUT_S = 20.0        # a closing exchange step: the peer's next message is due at once


def _err(msg: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(msg)
    sys.stderr.flush()


def error_handler(msg: str) -> None:
    _err(msg + "\n")


def _i32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def encode_dest(d: Dest) -> bytes:
    """rdma_write_keys(): the struct with every field htobe32/htobe64."""
    return PP_DEST.pack(_i32(d.lid), _i32(d.out_reads), _i32(d.qpn), _i32(d.psn), d.rkey & 0xFFFFFFFF,
                        d.vaddr & 0xFFFFFFFFFFFFFFFF, bytes(d.gid)[:16].ljust(16, b"\0"), d.srqn & 0xFFFFFFFF,
                        _i32(d.gid_index))


def decode_dest(raw: bytes) -> Dest:
    """rdma_read_keys(): lid, out_reads, qpn, psn, rkey, vaddr and the GID
    (srqn and gid_index are not taken from the message)."""
    lid, out_reads, qpn, psn, rkey, vaddr, gid, _srqn, _gi = PP_DEST.unpack(bytes(raw[:PP_DEST.size]))
    return Dest(lid=lid, out_reads=out_reads, qpn=qpn, psn=psn, rkey=rkey, vaddr=vaddr, gid=gid)


def _poll(cq, stop=None):
    """``do { ne = ibv_poll_cq(cq, 1, &wc); } while (ne == 0);`` (with a
    nap after a while: softrdmad needs the CPU a pure spin would take).
    ``stop()``, asked every EVENT_CHECK_S once napping, ends the wait
    (None): the peer disconnected, or a closing step's time is up."""
    spins = 0
    next_check = 0.0
    while True:
        n, wcs = cq.poll(1)
        if n:
            return wcs[0]
        spins += 1
        if spins > POLL_SPINS:
            if stop is not None:
                now = time.monotonic()
                if now >= next_check:
                    if stop():
                        # what arrived before the DISCONNECTED still counts
                        n, wcs = cq.poll(1)
                        return wcs[0] if n else None
                    next_check = now + EVENT_CHECK_S
            time.sleep(POLL_NAP_S)


def _port_space(p: P.Params) -> int:
    return RDMA_PS_UDP if p.connection_type == P.UD else RDMA_PS_TCP


def _wait_event(channel):
    return CMEvent(channel)


def _event_id(ev):
    return getattr(getattr(ev, "event", None), "id", None)


class RdmaComm(Comm):
    """The exchange over an rdma_cm RC QP (perftest_comm with use_rdma_cm)."""

    def __init__(self, p: P.Params):
        super().__init__(p.servername, p.port, p.ai_family_v6, p.source_ip)
        self.p = p
        self.channel = self.cm_id = None
        self.mr = self.send_cq = self.recv_cq = self.qp = None
        self.test_cma = None          # the test QP's CmaMaster, watched too (create_rdma_cm_connection)
        self.peer_gone = False        # a DISCONNECTED came: nothing more will arrive
        self.deadline = None          # monotonic end of a closing step, or None

    def _stop_waiting(self) -> bool:
        """True once the peer disconnected either ID or the closing step's
        time is up.  Events other than DISCONNECTED (the server's ESTABLISHED
        it does not wait for) are acknowledged and passed over."""
        if self.peer_gone:
            return True
        for channel, cma in ((self.channel, None), (getattr(self.test_cma, "channel", None), self.test_cma)):
            if channel is not None and _disconnected(channel):
                self.peer_gone = True
                if cma is not None:
                    cma.peer_disconnected = True
                return True
        return self.deadline is not None and time.monotonic() >= self.deadline

    # ---- create_rdma_resources() + establish_connection()
    def connect(self) -> bool:
        try:
            self.channel = CMEventChannel()
        except PyverbsError:
            _err(" rdma_create_event_channel failed\n")
            _err(" Unable to create the resources needed by comm struct\n")
            return False
        if self.servername is not None:
            try:
                self.cm_id = CMID(creator=self.channel, port_space=_port_space(self.p))
            except PyverbsError:
                _err(" rdma_create_id failed\n")
                return False
            ok = self._client()
            if not ok:
                _err(" Unable to perform rdma_client function\n")
        else:
            ok = self._server()
            if not ok:
                _err(" Unable to perform rdma_server function\n")
        return ok

    def _addr(self, host: str | None, passive: bool):
        try:
            if passive:
                return AddrInfo(src=host, src_service=str(self.port), flags=RAI_PASSIVE)
            return AddrInfo(src=self.source_ip, dst=host, dst_service=str(self.port))
        except PyverbsError:
            _err(f"Name or service not known for {host if host is not None else '(null)'}:{self.port}\n")
            _err("Problem in resolving basic address and port\n")
            return None

    def _init_ctx(self, cm_id) -> bool:
        """ctx_init() for the exchange's parameters: tx/rx depth 1, one RC
        QP, SEND, a buffer for one struct pingpong_dest."""
        try:
            ctx = cm_id.context
            self.mr = MR(cm_id.pd, 2 * max(self.p.cycle_buffer, PP_DEST.size), IBV_ACCESS_LOCAL_WRITE)
            self.send_cq = CQ(ctx, 1, None, None, 0)
            self.recv_cq = CQ(ctx, 1, None, None, 0)
            cap = QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
            cm_id.create_qp(QPInitAttr(IBV_QPT_RC, scq=self.send_cq, rcq=self.recv_cq, cap=cap, sq_sig_all=0))
            self.qp = cm_id.qp
        except (PyverbsError, OSError, ValueError):
            _err(" Unable to create the resources needed by comm struct\n")
            return False
        return True

    def _post_one_recv_wqe(self) -> bool:
        try:
            self.qp.post_recv(RecvWR(SYNC_SPEC_ID, 1, [SGE(self.mr.buf, PP_DEST.size, self.mr.lkey)]))
        except PyverbsError:
            _err("Function ibv_post_recv failed for RDMA_CM QP\n")
            return False
        return True

    def _conn_param(self):
        # the exchange's verb is SEND: no responder resources, no initiator depth
        return ConnParam(resources=0, depth=0, retry=self.p.retry_count, rnr_retry=7)

    def _client(self) -> bool:
        ai = self._addr(self.servername, False)
        if ai is None:
            return False
        retries = NUM_OF_RETRIES
        while True:
            if retries == 0:
                _err(f"Received {NUM_OF_RETRIES} times ADDR_ERROR\n")
                return False
            try:
                self.cm_id.resolve_addr(ai, 2000)
                ev = _wait_event(self.channel)
            except PyverbsError:
                _err("rdma_resolve_addr failed\n")
                return False
            t = ev.event_type
            ev.ack_cm_event()
            if t == RDMA_CM_EVENT_ADDR_ERROR:
                retries -= 1
                continue
            if t != RDMA_CM_EVENT_ADDR_RESOLVED:
                _err(f"unexpected CM event {int(t)}\n")
                return False
            break
        if self.p.tos != P.DEF_TOS:
            try:
                self.cm_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, self.p.tos, 1)
            except PyverbsError:
                _err(f" Set TOS option failed: {int(t)}\n")
                return False
        while True:
            if retries <= 0:
                _err(f"Received {NUM_OF_RETRIES} times ADDR_ERROR - aborting\n")
                return False
            try:
                self.cm_id.resolve_route(2000)
                ev = _wait_event(self.channel)
            except PyverbsError:
                _err("rdma_resolve_route failed\n")
                return False
            t = ev.event_type
            ev.ack_cm_event()
            if t == RDMA_CM_EVENT_ROUTE_ERROR:
                retries -= 1
                continue
            if t != RDMA_CM_EVENT_ROUTE_RESOLVED:
                _err(f"unexpected CM event {int(t)}\n")
                return False
            break
        if not self._init_ctx(self.cm_id):
            return False
        if not self._post_one_recv_wqe():
            _err("Couldn't post send \n")
            return False
        try:
            self.cm_id.connect(self._conn_param())
        except PyverbsError:
            _err("Function rdma_connect failed\n")
            return False
        try:
            ev = _wait_event(self.channel)
        except PyverbsError:
            _err("rdma_get_cm_events failed\n")
            return False
        t = ev.event_type
        ev.ack_cm_event()
        if t != RDMA_CM_EVENT_ESTABLISHED:
            _err(f"Unexpected CM event bl blka {int(t)}\n")
            return False
        return True

    def _server(self) -> bool:
        ai = self._addr(self.source_ip, True)
        if ai is None:
            return False
        try:
            control = CMID(creator=self.channel, port_space=_port_space(self.p))
        except PyverbsError:
            _err(" rdma_create_id failed\n")
            return False
        try:
            control.bind_addr(ai)
        except PyverbsError:
            _err(" rdma_bind_addr failed\n")
            control.close()
            return False
        try:
            control.listen(1)
        except PyverbsError:
            _err("rdma_listen failed\n")
            control.close()
            return False
        try:
            while True:
                ev = _wait_event(self.channel)
                if ev.event_type == RDMA_CM_EVENT_CONNECT_REQUEST:
                    break
                _err(f"bad event waiting for connect request {int(ev.event_type)}\n")
                ev.ack_cm_event()
                control.close()
                return False
        except PyverbsError:
            _err("rdma_get_cm_events failed\n")
            control.close()
            return False
        self.cm_id = CMID(creator=ev, listen_id=control)
        if not self._init_ctx(self.cm_id):
            return False
        if not self._post_one_recv_wqe():
            _err("Couldn't post send \n")
            return False
        try:
            self.cm_id.accept(self._conn_param())
        except PyverbsError:
            _err("Function rdma_accept failed\n")
            return False
        ev.ack_cm_event()
        control.close()
        return True

    # ---- rdma_write_data / rdma_read_data
    def write(self, data: bytes) -> bool:
        data = bytes(data)
        self.mr.write(data, len(data), 0)
        wr = SendWR(SYNC_SPEC_ID, IBV_WR_SEND, 1, sg=[SGE(self.mr.buf, len(data), self.mr.lkey)],
                    send_flags=IBV_SEND_SIGNALED)
        try:
            self.qp.post_send(wr)
        except PyverbsError:
            _err("Function ibv_post_send failed\n")
            return False
        wc = _poll(self.send_cq, self._stop_waiting)
        if wc is None:
            return False
        if wc.status or wc.opcode != IBV_WC_SEND or wc.wr_id != SYNC_SPEC_ID:
            _err(f" Bad wc status {int(wc.status)}\n")
            return False
        return True

    def read(self, n: int) -> bytes | None:
        wc = _poll(self.recv_cq, self._stop_waiting)
        if wc is None:
            return None
        if wc.status or not (wc.opcode & IBV_WC_RECV) or wc.wr_id != SYNC_SPEC_ID:
            _err(f"Bad wc status -- {int(wc.status)} -- {int(wc.wr_id)} \n")
            return None
        data = self.mr.read(n, 0)
        if not self._post_one_recv_wqe():
            _err("Couldn't post send \n")
            return None
        return data

    # ---- ctx_xchg_data_rdma(): Comm.xchg_data over these, without ethernet's messages
    def _write_data(self, data: bytes) -> bool:
        return self.write(data)

    def _read_data(self, n: int) -> bytes | None:
        return self.read(n)

    def _fail(self, msg: str):
        _err(msg)
        raise CommError

    # ---- ctx_hand_shake() with rdma_write_keys / rdma_read_keys
    def _write_keys(self, d: Dest) -> bool:
        return self.write(encode_dest(d))

    def _read_keys(self, with_gid: bool) -> Dest | None:
        raw = self.read(PP_DEST.size)
        return None if raw is None else decode_dest(raw)

    # ---- ctx_close_connection(): the key exchange only
    def close_connection(self, my: Dest, lenient: bool = False) -> bool:
        """The closing key exchange, each step bounded; ``lenient``: a peer
        that disconnects instead (perftest 4.5's ib_write_lat) is no error."""
        self.deadline = time.monotonic() + CLOSE_TIMEOUT_S
        try:
            if lenient:
                self._lenient_hand_shake(my)
            else:
                self.hand_shake(my)
        except CommError:
            return False
        finally:
            self.deadline = None
        return True

    def _lenient_hand_shake(self, my: Dest) -> None:
        if self.servername is not None:
            if self.write(encode_dest(my)):
                self.read(PP_DEST.size)
        elif self.read(PP_DEST.size) is not None:
            self.write(encode_dest(my))

    def close(self) -> None:
        """destroy_ctx() of the exchange: its ID (a connected one sends the
        DREQ), CQs, MR, the channel."""
        vs.close_quietly(self.cm_id, self.send_cq, self.recv_cq, self.mr, self.channel)
        self.cm_id = self.send_cq = self.recv_cq = self.mr = self.channel = self.qp = None


# --------------------------------------------------------------------------- the test QPs
class CmaMaster:
    """ctx->cma_master: the test QP's event channel and ID."""

    def __init__(self):
        self.channel = None
        self.cm_id = None
        self.connected = False
        self.peer_disconnected = False     # its DISCONNECTED was taken by the exchange (RdmaComm)


def create_rdma_cm_connection(t) -> bool:
    """create_rdma_cm_connection(): the test QP connected by rdma_cm, its
    resources (ctx_init) made on the ID.  False after perftest's messages."""
    p, comm = t.p, t.comm
    cma = t.cma = CmaMaster()
    if isinstance(comm, RdmaComm):
        comm.test_cma = cma
    try:
        cma.channel = CMEventChannel()
    except PyverbsError:
        error_handler("Failed to create RDMA CM event channel.")
        return False
    zero = [Dest(gid_index=0)]
    try:
        comm.hand_shake(zero[0])
    except CommError:
        error_handler("Failed to sync between client and server before creating RDMA CM connection.")
        return False
    ok = _client_connection(t, cma) if p.machine == P.CLIENT else _server_connection(t, cma)
    if not ok:
        error_handler("Failed to create RDMA CM connection.")
        return False
    try:
        comm.hand_shake(zero[0])
    except CommError:
        error_handler("Failed to sync between client and server after creating RDMA CM connection.")
        return False
    return True


def _conn_param(p: P.Params, req_conn: dict | None = None):
    resources = depth = 0
    if p.verb in (P.READ, P.ATOMIC):
        resources = depth = p.out_reads
        if req_conn:
            # clamp to what the peer's request offers
            resources = min(p.out_reads, req_conn.get("initiator_depth", p.out_reads))
            depth = min(p.out_reads, req_conn.get("responder_resources", p.out_reads))
    return ConnParam(resources=resources, depth=depth, retry=p.retry_count, rnr_retry=p.retry_count)


def _client_once(t, cma) -> bool:
    """_rdma_cm_client_connection(): resolve, route, ctx_init + QP, connect,
    until ESTABLISHED."""
    p = t.p
    try:
        cma.cm_id = CMID(creator=cma.channel, port_space=_port_space(p))
    except PyverbsError:
        error_handler("Failed to create RDMA CM ID.")
        return False
    try:
        ai = AddrInfo(src=p.source_ip, dst=p.servername, dst_service=str(p.port))
    except PyverbsError as e:
        error_handler(f"Failed to get RDMA CM address info - Error: {e}")
        return False
    try:
        cma.cm_id.resolve_addr(ai, 2000)
    except PyverbsError:
        error_handler("Failed to resolve RDMA CM address.")
        return False
    while True:
        try:
            ev = _wait_event(cma.channel)
        except PyverbsError:
            error_handler("Failed to get RDMA CM event.")
            return False
        typ = ev.event_type
        try:
            if typ == RDMA_CM_EVENT_ADDR_RESOLVED:
                if p.tos != P.DEF_TOS:
                    cma.cm_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, p.tos, 1)
                cma.cm_id.resolve_route(2000)
            elif typ == RDMA_CM_EVENT_ROUTE_RESOLVED:
                if not t.res.init(cma.cm_id):
                    error_handler("Failed to initialize RDMA contexts.")
                    ev.ack_cm_event()
                    return False
                cma.cm_id.connect(_conn_param(p))
            elif typ == RDMA_CM_EVENT_ESTABLISHED:
                cma.connected = True
                ev.ack_cm_event()
                return True
            elif _is_error_event(typ):
                error_handler(f"RDMA CM event error:\nEvent: {ev.event_str()}; error: {ev.status}.\n")
                error_handler("Failed to handle RDMA CM event.")
                ev.ack_cm_event()
                return False
        except PyverbsError:
            error_handler("Failed to connect through RDMA CM." if typ == RDMA_CM_EVENT_ROUTE_RESOLVED
                          else "Failed to resolve RDMA CM route.")
            ev.ack_cm_event()
            return False
        ev.ack_cm_event()


def _is_error_event(typ) -> bool:
    return typ in (RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_ERROR,
                   RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_REJECTED)


def _client_connection(t, cma) -> bool:
    """rdma_cm_client_connection(): up to 10 tries, 100 ms apart (the server
    may not listen yet)."""
    for _ in range(10):
        if _client_once(t, cma):
            return True
        t.res.release_cm()
        vs.close_quietly(cma.cm_id)
        cma.cm_id = None
        time.sleep(0.1)
    error_handler("Failed to connect RDMA CM client, tried 10 times.")
    return False


def _server_connection(t, cma) -> bool:
    """rdma_cm_server_connection(): listen on port -p, take one request,
    ctx_init + QP on its ID, accept, destroy the listening ID."""
    p = t.p
    try:
        listen_id = CMID(creator=cma.channel, port_space=_port_space(p))
    except PyverbsError:
        error_handler("Failed to create RDMA CM server control ID.")
        return False
    try:
        ai = AddrInfo(src=p.source_ip, src_service=str(p.port), flags=RAI_PASSIVE)
        listen_id.bind_addr(ai)
    except PyverbsError:
        error_handler("Failed to bind RDMA CM address on the server.")
        listen_id.close()
        return False
    try:
        listen_id.listen(p.num_of_qps)
    except PyverbsError:
        error_handler("Failed to listen on RDMA CM server listen ID.")
        listen_id.close()
        return False
    while True:
        try:
            ev = _wait_event(cma.channel)
        except PyverbsError:
            error_handler("Failed to get RDMA CM event.")
            listen_id.close()
            return False
        if ev.event_type == RDMA_CM_EVENT_CONNECT_REQUEST:
            break
        if _is_error_event(ev.event_type):
            error_handler(f"RDMA CM event error:\nEvent: {ev.event_str()}; error: {ev.status}.\n")
            ev.ack_cm_event()
            listen_id.close()
            return False
        ev.ack_cm_event()
    cma.cm_id = CMID(creator=ev, listen_id=listen_id)
    if not t.res.init(cma.cm_id):
        error_handler("Failed to initialize RDMA contexts.")
        cma.cm_id.reject()
        listen_id.close()
        return False
    req_conn = getattr(getattr(ev, "event", None), "conn", None)
    try:
        cma.cm_id.accept(_conn_param(p, req_conn))
    except PyverbsError:
        error_handler("Failed to accept RDMA CM connection.")
        listen_id.close()
        return False
    try:
        a = QPAttr()
        a.min_rnr_timer = MIN_RNR_TIMER
        cma.cm_id.qp.modify(a, IBV_QP_MIN_RNR_TIMER)      # perftest ignores the result
    except (PyverbsError, AttributeError):
        pass
    cma.connected = True
    ev.ack_cm_event()
    listen_id.close()
    return True


def disconnect_nodes(t) -> None:
    """rdma_cm_disconnect_nodes(): the server disconnects, each side waits
    for its DISCONNECTED (bounded here: a peer that is gone does not hang
    the tool)."""
    cma = getattr(t, "cma", None)
    if cma is None or cma.cm_id is None or not cma.connected:
        return
    cma.connected = False
    if cma.peer_disconnected:
        # the peer disconnected first (its DREQ is here): answer it with the
        # DREP, whichever side we are; its DISCONNECTED was already taken
        try:
            cma.cm_id.disconnect()
        except PyverbsError:
            pass
        return
    if t.p.machine == P.SERVER:
        try:
            cma.cm_id.disconnect()
        except PyverbsError:
            return
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            ev = CMEvent(cma.channel, timeout=max(0.0, end - time.monotonic()))
        except PyverbsError:
            return
        typ = ev.event_type
        ev.ack_cm_event()
        if typ == RDMA_CM_EVENT_DISCONNECTED:
            return


def _disconnected(channel) -> bool:
    """Take the events waiting on ``channel`` (without blocking): True if a
    DISCONNECTED was among them."""
    seen = False
    while not seen:
        try:
            ev = CMEvent(channel, timeout=0)
        except PyverbsError:
            break
        seen = ev.event_type == RDMA_CM_EVENT_DISCONNECTED
        ev.ack_cm_event()
    return seen


def close(t) -> None:
    cma = getattr(t, "cma", None)
    if cma is not None and cma.channel is not None:
        vs.close_quietly(cma.channel)
        cma.channel = None
