"""struct rping_cb and the functions working on it (rping.c): the CM event
handler, the CQ handler, the semaphore that the main loop waits on (here:
both handlers run in turn until one posts it), the verbs resources and the
connection steps both sides share."""

from __future__ import annotations

import errno
import select
import socket
import struct
import time

from ...pyverbs.cmid import CMID, CMEvent, ConnParam
from ...pyverbs.cq import CQ, CompChannel
from ...pyverbs.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
    IBV_QP_PORT, IBV_QP_STATE, IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, IBV_SEND_SIGNALED,
    IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_SEND, IBV_WC_WR_FLUSH_ERR, IBV_WR_SEND,
)
from ...pyverbs.librdmacm_enums import (
    RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_UNREACHABLE,
)
from ...pyverbs.mr import MR
from ...pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from ...pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from ...pyverbs.wr import SGE, RecvWR, SendWR
from ..cma_common import _close, _err, _out, perror
from ..libc import c_int

RPING_BUFSIZE = 64 * 1024
RPING_SQ_DEPTH = 16
RPING_MSG_FMT = "rdma-ping-%d: "
RPING_MIN_BUFSIZE = len("2147483647") + 1 + len(RPING_MSG_FMT) + 1     # sizeof(stringify(INT_MAX)) + sizeof(FMT)
DEFAULT_PORT = 7174
OPTSTRING = "a:I:Pp:C:S:t:scvVdq"

INFO = struct.Struct(">QII")            # struct rping_rdma_info: __be64 buf, __be32 rkey, __be32 size

# enum test_state
IDLE, CONNECT_REQUEST, ADDR_RESOLVED, ROUTE_RESOLVED, CONNECTED, RDMA_READ_ADV, RDMA_READ_COMPLETE, \
    RDMA_WRITE_ADV, RDMA_WRITE_COMPLETE, DISCONNECTED, ERROR = range(1, 12)


class Exit(Exception):
    """Leave the program with this status (rping's ``exit(ret)``)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def ptr_str(obj) -> str:
    """What rping's debug lines print for a pointer (``%p``)."""
    return "%#x" % (id(obj) & 0xFFFFFFFFFFFF)


class Rping:
    """struct rping_cb and the functions working on it."""

    def __init__(self):
        self.server = -1
        self.state = IDLE
        self.size = 64
        self.sin: tuple[int, str] = (socket.AF_INET, "0.0.0.0")
        self.ssource: tuple[int, str] | None = None
        self.port = DEFAULT_PORT
        self.verbose = 0
        self.validate = 0
        self.debug = 0
        self.self_create_qp = 0
        self.count = 0
        self.persistent = 0
        self.sem = 0
        self.cm_channel = self.cm_id = self.child_cm_id = None
        self.pending_requests: list = []       # -P: requests waiting for the current connection
        self.cm_exit: int | None = None        # the CM thread's exit(ret)
        self._reset_conn()

    def _reset_conn(self) -> None:
        self.pd = self.channel = self.cq = self.qp = None
        self.recv_mr = self.send_mr = self.rdma_mr = self.start_mr = None
        self.remote_rkey = self.remote_addr = self.remote_len = 0
        self.cq_running = False
        self.send_buf = bytes(INFO.size)

    def log(self, msg: str) -> None:
        if self.debug:
            _out(msg)

    # ------------------------------------------------------------------ the semaphore
    def sem_post(self) -> None:
        self.sem += 1

    def sem_wait(self) -> None:
        """sem_wait(&cb->sem): run the CM and CQ handlers until one posts."""
        while self.sem == 0:
            if self.cm_exit is not None:
                raise Exit(self.cm_exit)
            self._pump()
        self.sem -= 1

    def wait_for(self, state: int, what: str) -> int:
        """sem_wait, then rping's check that the handlers reached ``state``:
        0, or -1 after "``what`` state %d"."""
        self.sem_wait()
        if self.state != state:
            _err(f"{what} state {self.state}\n")
            return -1
        return 0

    def _pump(self) -> None:
        progressed = False
        while True:                                       # cm_thread
            try:
                ev = CMEvent(self.cm_channel, timeout=0)
            except PyverbsRDMAError as e:
                if e.error_code == errno.EAGAIN:
                    break
                perror("rdma_get_cm_event", e)
                raise Exit(c_int(-1) & 0xFF)
            progressed = True
            ret = self.cma_event_handler(ev)
            ev.ack_cm_event()
            if ret:
                # the CM thread calls exit(ret); the main thread, woken by
                # the handler's sem_post, still prints what it prints
                self.cm_exit = ret & 0xFF
            if self.sem:
                return
        if self.cq_running:                               # cq_thread
            if self.cq_event_handler():
                progressed = True
            if self.sem:
                return
        if progressed:
            return
        fds = [self.cm_channel.fileno()]
        if self.cq_running and self.channel is not None:
            fds.append(self.channel.fd)
        r, _, _ = select.select(fds, [], [], 0.5)
        if self.cq_running and self.channel is not None and self.channel.fd in r:
            try:
                self.channel.get_cq_event(timeout=0)
                self.cq.ack_events(1)
            except PyverbsRDMAError:
                pass
            try:
                self.cq.req_notify(False)
            except PyverbsRDMAError:
                _err("Failed to set notify!\n")
                self.cq_running = False

    # ------------------------------------------------------------------ rping_cma_event_handler
    def _event_id(self, ev):
        inner = getattr(ev, "event", None)
        return getattr(ev, "id", None) or getattr(inner, "id", None)

    def cma_event_handler(self, ev) -> int:
        t = ev.event_type
        eid = self._event_id(ev)
        parent = self.cm_id is not None and eid is self.cm_id.id
        self.log(f"cma_event type {ev.event_str()} cma_id {ptr_str(eid)} ({'parent' if parent else 'child'})\n")
        if t == RDMA_CM_EVENT_ADDR_RESOLVED:
            self.state = ADDR_RESOLVED
            try:
                self.cm_id.resolve_route(2000)
            except PyverbsError as e:
                self.state = ERROR
                perror("rdma_resolve_route", e)
                self.sem_post()
        elif t == RDMA_CM_EVENT_ROUTE_RESOLVED:
            self.state = ROUTE_RESOLVED
            self.sem_post()
        elif t == RDMA_CM_EVENT_CONNECT_REQUEST:
            child = CMID(creator=ev, listen_id=self.cm_id)
            if self.child_cm_id is not None and self.persistent:
                self.pending_requests.append(child)      # sem_wait(&cb->accept_ready)
                return 0
            self.state = CONNECT_REQUEST
            self.child_cm_id = child
            self.log(f"child cma {ptr_str(child)}\n")
            self.sem_post()
        elif t == RDMA_CM_EVENT_CONNECT_RESPONSE:
            self.log("CONNECT_RESPONSE\n")
            self.state = CONNECTED
            self.sem_post()
        elif t == RDMA_CM_EVENT_ESTABLISHED:
            self.log("ESTABLISHED\n")
            if not self.server:
                self.state = CONNECTED
            self.sem_post()
        elif t in (RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ROUTE_ERROR, RDMA_CM_EVENT_CONNECT_ERROR,
                   RDMA_CM_EVENT_UNREACHABLE, RDMA_CM_EVENT_REJECTED):
            _err(f"cma event {ev.event_str()}, error {ev.status}\n")
            self.sem_post()
            return -1
        elif t == RDMA_CM_EVENT_DISCONNECTED:
            if self.persistent and self.server and not self._is_current(eid):
                return 0                                  # a queued request's client gave up
            _err(f"{'server' if self.server else 'client'} DISCONNECT EVENT...\n")
            self.state = DISCONNECTED
            self.sem_post()
        elif t == RDMA_CM_EVENT_DEVICE_REMOVAL:
            _err("cma detected device removal!!!!\n")
            self.state = ERROR
            self.sem_post()
            return -1
        else:
            _err(f"unhandled event: {ev.event_str()}, ignoring\n")
        return 0

    def _is_current(self, eid) -> bool:
        return self.child_cm_id is not None and self.child_cm_id.id is eid

    # ------------------------------------------------------------------ the CQ side
    def server_recv(self, wc) -> int:
        if wc.byte_len != INFO.size:
            _err(f"Received bogus data, size {wc.byte_len}\n")
            return -1
        buf, rkey, size = INFO.unpack(self.recv_mr.read(INFO.size, 0))
        self.remote_rkey, self.remote_addr, self.remote_len = rkey, buf, c_int(size)
        self.log(f"Received rkey {rkey:x} addr {buf:x} len {c_int(size)} from peer\n")
        if self.state <= CONNECTED or self.state == RDMA_WRITE_COMPLETE:
            self.state = RDMA_READ_ADV
        else:
            self.state = RDMA_WRITE_ADV
        return 0

    def client_recv(self, wc) -> int:
        if wc.byte_len != INFO.size:
            _err(f"Received bogus data, size {wc.byte_len}\n")
            return -1
        if self.state == RDMA_READ_ADV:
            self.state = RDMA_WRITE_ADV
        else:
            self.state = RDMA_WRITE_COMPLETE
        return 0

    def cq_event_handler(self) -> bool:
        """rping_cq_event_handler(): poll until empty; True if anything
        completed.  A flushed completion or an error ends the CQ thread."""
        got = False
        flushed = False
        while True:
            try:
                n, wcs = self.cq.poll(1)
            except PyverbsError as e:
                _err(f"poll error {-abs(getattr(e, 'error_code', 1) or 1)}\n")
                return self._cq_error()
            if not n:
                break
            got = True
            wc = wcs[0]
            if wc.status:
                if wc.status == IBV_WC_WR_FLUSH_ERR:
                    flushed = True
                    continue
                _err(f"cq completion failed status {int(wc.status)}\n")
                return self._cq_error()
            op = wc.opcode
            if op == IBV_WC_SEND:
                self.log("send completion\n")
            elif op == IBV_WC_RDMA_WRITE:
                self.log("rdma write completion\n")
                self.state = RDMA_WRITE_COMPLETE
                self.sem_post()
            elif op == IBV_WC_RDMA_READ:
                self.log("rdma read completion\n")
                self.state = RDMA_READ_COMPLETE
                self.sem_post()
            elif op == IBV_WC_RECV:
                self.log("recv completion\n")
                ret = self.server_recv(wc) if self.server else self.client_recv(wc)
                if ret:
                    _err(f"recv wc error: {ret}\n")
                    return self._cq_error()
                try:
                    self.post_recv()
                except PyverbsError as e:
                    _err(f"post recv error: {-abs(e.error_code or 1)}\n")
                    return self._cq_error()
                self.sem_post()
            else:
                self.log("unknown!!!!! completion\n")
                return self._cq_error()
        if flushed:
            self.cq_running = False                        # the CQ thread exits
        return got

    def _cq_error(self) -> bool:
        self.state = ERROR
        self.sem_post()
        self.cq_running = False
        return True

    # ------------------------------------------------------------------ verbs resources
    def post_recv(self) -> None:
        self.qp.post_recv(RecvWR(0, 1, [SGE(self.recv_mr.buf, INFO.size, self.recv_mr.lkey)]))

    def post_or_report(self, post, *args, errors: tuple = ()) -> int:
        """One post of the ping loops: 0, or the negative errno after rping's
        "post send error" (a PyverbsError, or one of ``errors``, failed it)."""
        try:
            post(*args)
        except (PyverbsError, *errors) as e:
            ret = -abs(getattr(e, "error_code", 1) or 1)
            _err(f"post send error {ret}\n")
            return ret
        return 0

    def post_send_info(self) -> None:
        self.send_mr.write(self.send_buf, INFO.size, 0)
        self.qp.post_send(SendWR(0, IBV_WR_SEND, 1, sg=[SGE(self.send_mr.buf, INFO.size, self.send_mr.lkey)],
                                 send_flags=IBV_SEND_SIGNALED))

    def post_rdma(self, opcode: int, length: int) -> None:
        wr = SendWR(0, opcode, 1, sg=[SGE(self.rdma_mr.buf, length, self.rdma_mr.lkey)],
                    send_flags=IBV_SEND_SIGNALED)
        wr.set_wr_rdma(self.remote_rkey, self.remote_addr)
        self.qp.post_send(wr)

    def setup_qp(self, cm_id) -> int:
        """rping_setup_qp(): PD, completion channel, CQ (armed), QP."""
        try:
            self.pd = cm_id.pd
        except PyverbsError:
            self.pd = None
        if self.pd is None:
            _err("ibv_alloc_pd failed\n")
            return errno.ENOMEM
        self.log(f"created pd {ptr_str(self.pd)}\n")
        ctx = cm_id.context
        try:
            self.channel = CompChannel(ctx)
        except PyverbsError as e:
            _err("ibv_create_comp_channel failed\n")
            return e.error_code or errno.EINVAL
        self.log(f"created channel {ptr_str(self.channel)}\n")
        try:
            self.cq = CQ(ctx, RPING_SQ_DEPTH * 2, None, self.channel, 0)
        except PyverbsError as e:
            _err("ibv_create_cq failed\n")
            return e.error_code or errno.EINVAL
        self.log(f"created cq {ptr_str(self.cq)}\n")
        try:
            self.cq.req_notify(False)
        except PyverbsError as e:
            _err("ibv_create_cq failed\n")
            return e.error_code or errno.EINVAL
        ret = self.create_qp(cm_id)
        if ret:
            return ret
        self.log(f"created qp {ptr_str(self.qp)}\n")
        return 0

    def create_qp(self, cm_id) -> int:
        cap = QPCap(max_send_wr=RPING_SQ_DEPTH, max_recv_wr=2, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        if self.self_create_qp:
            try:
                self.qp = QP(self.pd, init)
            except PyverbsError as e:
                perror("ibv_create_qp", e)
                return -1
            attr = QPAttr(qp_state=IBV_QPS_INIT)
            attr.pkey_index = 0
            attr.port_num = 1
            attr.qp_access_flags = 0
            try:
                self.qp.modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
            except PyverbsError as e:
                perror("ibv_modify_qp", e)
                self.qp.close()
                return -1
            return 0
        try:
            cm_id.create_qp(init)
        except PyverbsError as e:
            perror("rdma_create_qp", e)
            return -1
        self.qp = cm_id.qp
        return 0

    def setup_buffers(self) -> int:
        self.log(f"rping_setup_buffers called on cb {ptr_str(self)}\n")
        rdma = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE
        steps = [("recv_mr", INFO.size, IBV_ACCESS_LOCAL_WRITE, "recv_buf reg_mr failed\n"),
                 ("send_mr", INFO.size, 0, "send_buf reg_mr failed\n"),
                 ("rdma_mr", self.size, rdma, "rdma_buf reg_mr failed\n")]
        if not self.server:
            steps.append(("start_mr", self.size, rdma, "start_buf reg_mr failed\n"))
        for name, size, access, msg in steps:
            try:
                setattr(self, name, MR(self.pd, size, access))
            except (PyverbsError, OSError, ValueError) as e:
                _err(msg)
                return getattr(e, "error_code", None) or errno.ENOMEM
        self.log("allocated & registered buffers...\n")
        return 0

    def free_buffers(self) -> None:
        self.log(f"rping_free_buffers called on cb {ptr_str(self)}\n")
        for mr in (self.recv_mr, self.send_mr, self.rdma_mr, self.start_mr):
            _close(mr)
        self.recv_mr = self.send_mr = self.rdma_mr = self.start_mr = None

    def free_qp(self, cm_id=None) -> None:
        if self.self_create_qp or cm_id is None:
            _close(self.qp)
        self.qp = None
        _close(self.cq)
        _close(self.channel)
        self.cq = self.channel = None

    def setup_connection(self, cm_id) -> int:
        """What rping_run_server and rping_run_client both do before
        accepting / connecting: the QP, the buffers, the first receive, then
        the CQ thread.  0, or the error after rping's message (what was made
        is freed)."""
        ret = self.setup_qp(cm_id)
        if ret:
            _err(f"setup_qp failed: {ret}\n")
            return ret
        ret = self.setup_buffers()
        if ret:
            _err(f"rping_setup_buffers failed: {ret}\n")
            self.free_qp(cm_id)
            return ret
        try:
            self.post_recv()
        except Exception as e:
            ret = -abs(getattr(e, "error_code", 1) or 1)
            _err(f"ibv_post_recv failed: {ret}\n")
            self.free_buffers()
            self.free_qp(cm_id)
            return ret
        self.cq_running = True
        return 0

    def free_connection(self, cm_id) -> None:
        """The CQ thread stopped, the buffers and the QP freed."""
        self.cq_running = False
        self.free_buffers()
        self.free_qp(cm_id)

    def format_send(self, mr) -> None:
        self.send_buf = INFO.pack(mr.buf, mr.rkey, self.size & 0xFFFFFFFF)
        self.log(f"RDMA addr {mr.buf:x} rkey {mr.rkey:x} len {self.size}\n")

    # ------------------------------------------------------------------ connection steps
    def conn_param(self):
        return ConnParam(resources=1, depth=1, retry=7, rnr_retry=7,
                         qp_num=self.qp.qp_num if self.self_create_qp else 0)

    def self_modify_qp(self, cm_id) -> int:
        for st in (IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS):
            try:
                attr, mask = cm_id.init_qp_attr(st)
                self.qp.modify(attr, mask)
            except PyverbsError as e:
                return -abs(e.error_code or 1)
        return 0

    def accept(self) -> int:
        self.log("accepting client connection request\n")
        try:
            if self.self_create_qp:
                ret = self.self_modify_qp(self.child_cm_id)
                if ret:
                    return ret
                self.child_cm_id.accept(self.conn_param())
            else:
                self.child_cm_id.accept(None)
        except PyverbsError as e:
            perror("rdma_accept", e)
            return -1
        self.sem_wait()
        if self.state == ERROR:
            _err(f"wait for CONNECTED state {self.state}\n")
            return -1
        return 0

    def disconnect(self, cm_id) -> int:
        try:
            if self.self_create_qp and self.qp is not None:
                self.qp.modify(QPAttr(qp_state=IBV_QPS_ERR), IBV_QP_STATE)
            cm_id.disconnect()
        except PyverbsError as e:
            return -abs(e.error_code or 1)
        return 0

    def drain_after_disconnect(self, timeout: float = 2.0) -> None:
        """pthread_join(cqthread) and what the CM thread still prints: the
        flushed receive ends the CQ thread; the DISCONNECTED event of the
        side that disconnected first comes with the peer's DREP."""
        end = time.monotonic() + timeout
        while self.state != DISCONNECTED and self.cm_exit is None and time.monotonic() < end:
            self._pump()
        self.sem = 0

