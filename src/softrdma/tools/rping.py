"""rping, as rdma-core's librdmacm/examples/rping.c has it.

What a user or a peer sees is the real tool's (docs/formats/rping.md):

* the options (``getopt(argc, argv, "a:I:Pp:C:S:t:scvVdq")`` with
  ``opterr = 0``: an unknown option, a missing argument and ``-t`` all give
  the usage text and exit 22, EINVAL), the checks of ``-S`` (26 to 65535)
  and ``-C``, the usage text, every message and the exit codes (``ret`` of
  main, so -1 is 255);
* the wire: an RC connection made with rdma_cm (port space TCP, default
  port 7174, responder resources and initiator depth 1, retry and RNR
  retry 7), one receive of ``struct rping_rdma_info`` (be64 buf, be32 rkey,
  be32 size: 16 bytes) re-posted after each receive, and the ping-pong:
  the client SENDs its source buffer's address/rkey/size, the server RDMA
  READs it and SENDs "go ahead" (its own 16-byte send buffer, contents
  unchanged), the client SENDs its sink buffer's info, the server RDMA
  WRITEs ``strlen + 1`` bytes of what it read there and SENDs "go ahead";
* the ping data: ``"rdma-ping-%d: "`` then letters from ``start`` (65, one
  more each ping, wrapping after 122) counting up to 122 and wrapping to
  65, the last byte NUL;
* the CM events and what rping prints for them ("cma event %s, error %d"
  then exit 255 for the error events, "client DISCONNECT EVENT..." /
  "server DISCONNECT EVENT...").

rping is three threads (the CM event thread, the CQ thread and the main
thread, which waits on a semaphore the other two post).  This module is one
thread doing the same: ``Rping.sem_wait`` handles CM events and CQ
completions with rping's two handlers, in arrival order, until one of them
posts the semaphore.  ``-P`` (persistent server) serves the connections one
after another rather than one thread each: a second client's request waits
(in the listen backlog of 3) until the first client is done.

The tool uses only ``softrdma.pyverbs`` (``cmid``, ``cq``, ``mr``, ``qp``,
``wr``).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import sys
import time

from ..pyverbs.cmid import CMID, AddrInfo, CMEvent, ConnParam
from ..pyverbs.cq import CQ, CompChannel
from ..pyverbs.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE, IBV_QP_ACCESS_FLAGS, IBV_QP_PKEY_INDEX,
    IBV_QP_PORT, IBV_QP_STATE, IBV_QPS_ERR, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC, IBV_SEND_SIGNALED,
    IBV_WC_RDMA_READ, IBV_WC_RDMA_WRITE, IBV_WC_RECV, IBV_WC_SEND, IBV_WC_WR_FLUSH_ERR, IBV_WR_RDMA_READ,
    IBV_WR_RDMA_WRITE, IBV_WR_SEND,
)
from ..pyverbs.librdmacm_enums import (
    RAI_PASSIVE, RDMA_CM_EVENT_ADDR_ERROR, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_CONNECT_ERROR,
    RDMA_CM_EVENT_CONNECT_REQUEST, RDMA_CM_EVENT_CONNECT_RESPONSE, RDMA_CM_EVENT_DEVICE_REMOVAL,
    RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_REJECTED, RDMA_CM_EVENT_ROUTE_ERROR,
    RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_UNREACHABLE, RDMA_PS_TCP,
)
from ..pyverbs.mr import MR
from ..pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from ..pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from ..pyverbs.wr import SGE, RecvWR, SendWR
from .cma_common import _close, _err, _out, atoi, create_first_event_channel, perror
from .libc import c_int

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

USAGE = (
    "rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n"
    "rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n"
    "\t-c\t\tclient side\n"
    "\t-I\t\tSource address to bind to for client.\n"
    "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n"
    "\t-v\t\tdisplay ping data to stdout\n"
    "\t-V\t\tvalidate ping data\n"
    "\t-d\t\tdebug printfs\n"
    "\t-S size \tping data size\n"
    "\t-C count\tping count times\n"
    "\t-a addr\t\taddress\n"
    "\t-p port\t\tport\n"
    "\t-P\t\tpersistent server mode allowing multiple connections\n"
    "\t-q\t\tuse self-created, self-modified QP\n"
)


class Exit(Exception):
    """Leave the program with this status (rping's ``exit(ret)``)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _ptr(obj) -> str:
    return "%#x" % (id(obj) & 0xFFFFFFFFFFFF)


def getopt(argv: list[str], optstring: str):
    """POSIX getopt with ``opterr = 0`` (no diagnostics), glibc's argument
    permutation; yields ``(opt, optarg)``, ``("?", None)`` for an unknown
    option or a missing argument."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return
        if a[:1] != "-" or a == "-":
            i += 1                              # operands are permuted to the end; rping has none
            continue
        i += 1
        j = 1
        while j < len(a):
            c = a[j]
            k = optstring.find(c)
            if c == ":" or k < 0:
                yield "?", None
                j += 1
                continue
            if optstring[k + 1:k + 2] == ":":
                if j + 1 < len(a):
                    yield c, a[j + 1:]
                elif i < len(argv):
                    yield c, argv[i]
                    i += 1
                else:
                    yield "?", None
                break
            yield c, None
            j += 1


def get_addr(dst: str) -> tuple[int, str] | int:
    """getaddrinfo(dst, NULL, NULL, &res): the first address (family, text),
    or the getaddrinfo error (negative) after rping's message."""
    try:
        res = socket.getaddrinfo(dst, None)
    except socket.gaierror as e:
        _out(f"getaddrinfo failed ({e.strerror}) - invalid hostname or IP address\n")
        return e.errno if e.errno else -1
    except UnicodeError:
        _out("getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n")
        return socket.EAI_NONAME
    family, _, _, _, sa = res[0]
    if family not in (socket.AF_INET, socket.AF_INET6):
        return -1
    return family, sa[0]


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
        self.log(f"cma_event type {ev.event_str()} cma_id {_ptr(eid)} ({'parent' if parent else 'child'})\n")
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
            self.log(f"child cma {_ptr(child)}\n")
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
        self.log(f"created pd {_ptr(self.pd)}\n")
        ctx = cm_id.context
        try:
            self.channel = CompChannel(ctx)
        except PyverbsError as e:
            _err("ibv_create_comp_channel failed\n")
            return e.error_code or errno.EINVAL
        self.log(f"created channel {_ptr(self.channel)}\n")
        try:
            self.cq = CQ(ctx, RPING_SQ_DEPTH * 2, None, self.channel, 0)
        except PyverbsError as e:
            _err("ibv_create_cq failed\n")
            return e.error_code or errno.EINVAL
        self.log(f"created cq {_ptr(self.cq)}\n")
        try:
            self.cq.req_notify(False)
        except PyverbsError as e:
            _err("ibv_create_cq failed\n")
            return e.error_code or errno.EINVAL
        ret = self.create_qp(cm_id)
        if ret:
            return ret
        self.log(f"created qp {_ptr(self.qp)}\n")
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
        self.log(f"rping_setup_buffers called on cb {_ptr(self)}\n")
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
        self.log(f"rping_free_buffers called on cb {_ptr(self)}\n")
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

    # ------------------------------------------------------------------ server
    def bind_server(self) -> int:
        try:
            self.cm_id.bind_addr(AddrInfo(src=self.sin[1], src_service=str(self.port), flags=RAI_PASSIVE))
        except PyverbsError as e:
            perror("rdma_bind_addr", e)
            return -1
        self.log("rdma_bind_addr successful\n")
        self.log("rdma_listen\n")
        try:
            self.cm_id.listen(3)
        except PyverbsError as e:
            perror("rdma_listen", e)
            return -1
        return 0

    def _serve_one(self) -> int:
        """The part of rping_run_server after the CONNECT_REQUEST (also one
        connection of the persistent server)."""
        ret = self.setup_connection(self.child_cm_id)
        if ret:
            return ret
        ret = self.accept()
        if ret:
            _err(f"connect error {ret}\n")
            self.free_connection(self.child_cm_id)
            return ret
        ret = self.test_server()
        if ret and not self.persistent:
            _err(f"rping server failed: {ret}\n")
        self.disconnect(self.child_cm_id)
        self.drain_after_disconnect(0.2)
        self.free_connection(self.child_cm_id)
        _close(self.child_cm_id)
        self.child_cm_id = None
        return 0 if self.persistent else ret

    def run_server(self) -> int:
        ret = self.bind_server()
        if ret:
            return ret
        if self.wait_for(CONNECT_REQUEST, "wait for CONNECT_REQUEST"):
            return -1
        return self._serve_one()

    def run_persistent_server(self) -> int:
        ret = self.bind_server()
        if ret:
            return ret
        while True:
            if self.pending_requests:
                self.child_cm_id = self.pending_requests.pop(0)
                self.state = CONNECT_REQUEST
            else:
                if self.wait_for(CONNECT_REQUEST, "wait for CONNECT_REQUEST"):
                    return -1
            self._reset_conn()
            self.sem = 0
            self._serve_one()
            self.state = IDLE

    def test_server(self) -> int:
        ret = 0
        while True:
            ret = self.wait_for(RDMA_READ_ADV, "wait for RDMA_READ_ADV")
            if ret:
                break
            self.log("server received sink adv\n")
            ret = self.post_or_report(self.post_rdma, IBV_WR_RDMA_READ, self.remote_len, errors=(ValueError,))
            if ret:
                break
            self.log("server posted rdma read req \n")
            ret = self.wait_for(RDMA_READ_COMPLETE, "wait for RDMA_READ_COMPLETE")
            if ret:
                break
            self.log("server received read complete\n")
            data = self.rdma_mr.read(self.size, 0)
            text = data.split(b"\0", 1)[0]
            if self.verbose:
                _out(f"server ping data: {text.decode('latin-1')}\n")
            ret = self.post_or_report(self.post_send_info)
            if ret:
                break
            self.log("server posted go ahead\n")
            ret = self.wait_for(RDMA_WRITE_ADV, "wait for RDMA_WRITE_ADV")
            if ret:
                break
            self.log("server received sink adv\n")
            length = min(len(text) + 1, self.size)
            self.log(f"rdma write from lkey {self.rdma_mr.lkey:x} laddr {self.rdma_mr.buf:x} len {length}\n")
            ret = self.post_or_report(self.post_rdma, IBV_WR_RDMA_WRITE, length, errors=(ValueError,))
            if ret:
                break
            ret = self.wait_for(RDMA_WRITE_COMPLETE, "wait for RDMA_WRITE_COMPLETE")
            if ret:
                break
            self.log("server rdma write complete \n")
            ret = self.post_or_report(self.post_send_info)
            if ret:
                break
            self.log("server posted go ahead\n")
        return 0 if self.state == DISCONNECTED else ret

    # ------------------------------------------------------------------ client
    def bind_client(self) -> int:
        try:
            ai = AddrInfo(src=self.ssource[1] if self.ssource else None, dst=self.sin[1],
                          dst_service=str(self.port))
            self.cm_id.resolve_addr(ai, 2000)
        except PyverbsError as e:
            perror("rdma_resolve_addr", e)
            return -1
        if self.wait_for(ROUTE_RESOLVED, "waiting for addr/route resolution"):
            return -1
        self.log("rdma_resolve_addr - rdma_resolve_route successful\n")
        return 0

    def connect_client(self) -> int:
        try:
            self.cm_id.connect(self.conn_param())
        except PyverbsError as e:
            perror("rdma_connect", e)
            return -1
        if self.wait_for(CONNECTED, "wait for CONNECTED"):
            return -1
        if self.self_create_qp:
            ret = self.self_modify_qp(self.cm_id)
            if ret:
                _err("rping_modify_qp: " + os.strerror(-ret) + "\n")
                return ret
            try:
                self.cm_id.establish()
            except PyverbsError as e:
                perror("rdma_establish", e)
                return -1
        self.log("rdma_connect successful\n")
        return 0

    def test_client(self) -> int:
        ret = 0
        start = 65
        ping = 0
        while not self.count or ping < self.count:
            self.state = RDMA_READ_ADV
            head = (RPING_MSG_FMT % ping).encode()[:self.size - 1]
            buf = bytearray(self.size)
            buf[:len(head)] = head
            c = start
            for i in range(len(head), self.size):
                buf[i] = c
                c += 1
                if c > 122:
                    c = 65
            start += 1
            if start > 122:
                start = 65
            buf[self.size - 1] = 0
            self.start_mr.write(bytes(buf), self.size, 0)
            self.format_send(self.start_mr)
            ret = self.post_or_report(self.post_send_info)
            if ret:
                break
            ret = self.wait_for(RDMA_WRITE_ADV, "wait for RDMA_WRITE_ADV")
            if ret:
                break
            self.format_send(self.rdma_mr)
            ret = self.post_or_report(self.post_send_info)
            if ret:
                break
            ret = self.wait_for(RDMA_WRITE_COMPLETE, "wait for RDMA_WRITE_COMPLETE")
            if ret:
                break
            got = self.rdma_mr.read(self.size, 0)
            if self.validate and got != bytes(buf):
                _err("data mismatch!\n")
                ret = -1
                break
            if self.verbose:
                text = got.split(b"\0", 1)[0].decode("latin-1")
                _out(f"ping data: {text}\n")
            ping += 1
        return 0 if self.state == DISCONNECTED else ret

    def run_client(self) -> int:
        ret = self.bind_client()
        if ret:
            return ret
        ret = self.setup_connection(self.cm_id)
        if ret:
            return ret
        ret = self.connect_client()
        if ret:
            _err(f"connect error {ret}\n")
        else:
            ret = self.test_client()
            if ret:
                _err(f"rping client failed: {ret}\n")
            self.disconnect(self.cm_id)
            self.drain_after_disconnect()
        self.free_connection(self.cm_id)
        return ret


def parse(argv: list[str], cb: Rping) -> int:
    """main()'s option loop; 0 or the exit status."""
    ret = 0
    for op, optarg in getopt(argv, OPTSTRING):
        if op == "a":
            r = get_addr(optarg)
            if isinstance(r, tuple):
                cb.sin, ret = r, 0
            else:
                ret = r
        elif op == "I":
            r = get_addr(optarg)
            if isinstance(r, tuple):
                cb.ssource, ret = r, 0
            else:
                ret = r
        elif op == "P":
            cb.persistent = 1
        elif op == "p":
            cb.port = atoi(optarg) & 0xFFFF
            cb.log(f"port {atoi(optarg)}\n")
        elif op == "s":
            cb.server = 1
            cb.log("server\n")
        elif op == "c":
            cb.server = 0
            cb.log("client\n")
        elif op == "S":
            cb.size = atoi(optarg)
            if cb.size < RPING_MIN_BUFSIZE or cb.size > RPING_BUFSIZE - 1:
                _err(f"Invalid size {cb.size} (valid range is {RPING_MIN_BUFSIZE} to {RPING_BUFSIZE})\n")
                ret = errno.EINVAL
            else:
                ret = 0
                cb.log(f"size {atoi(optarg)}\n")
        elif op == "C":
            cb.count = atoi(optarg)
            if cb.count < 0:
                _err(f"Invalid count {cb.count}\n")
                ret = errno.EINVAL
            else:
                ret = 0
                cb.log(f"count {cb.count}\n")
        elif op == "v":
            cb.verbose += 1
            cb.log("verbose\n")
        elif op == "V":
            cb.validate += 1
            cb.log("validate data\n")
        elif op == "d":
            cb.debug += 1
        elif op == "q":
            cb.self_create_qp = 1
        else:
            _out(USAGE)
            return errno.EINVAL
    if ret:
        return ret
    if cb.server == -1:
        _out(USAGE)
        return errno.EINVAL
    return 0


def main(argv: list[str] | None = None, prog: str = "rping") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cb = Rping()
    ret = parse(argv, cb)
    if ret:
        return ret & 0xFF
    try:
        return _run(cb) & 0xFF
    except Exit as e:
        return e.code
    finally:
        sys.stdout.flush()


def _run(cb: Rping) -> int:
    channel = create_first_event_channel()
    if isinstance(channel, int):
        return channel
    cb.cm_channel = channel
    try:
        try:
            cb.cm_id = CMID(creator=cb.cm_channel, port_space=RDMA_PS_TCP)
        except PyverbsError as e:
            perror("rdma_create_id", e)
            return -1
        cb.log(f"created cm_id {_ptr(cb.cm_id)}\n")
        if cb.server:
            ret = cb.run_persistent_server() if cb.persistent else cb.run_server()
        else:
            ret = cb.run_client()
        cb.log(f"destroy cm_id {_ptr(cb.cm_id)}\n")
        _close(cb.cm_id)
        return ret
    finally:
        _close(cb.cm_channel)
