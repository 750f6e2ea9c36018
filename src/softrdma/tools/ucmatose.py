"""ucmatose, as rdma-core's librdmacm/examples/cmatose.c has it.

What a user or a peer sees is the real tool's (docs/formats/ucmatose.md):

* the options (``getopt(argc, argv, "s:b:f:P:c:C:S:t:p:a:m")``, glibc's
  diagnostics, then the usage text on stdout and exit 1), the warnings of
  ``-f`` and ``-P``, and every message and status line;
* the test: ``-c`` RC connections (port space TCP, or IB with ``-P ib``)
  made at once on one event channel, each with its own PD, a send and a
  receive CQ of ``-C`` entries and ``-C`` receives of ``-S`` bytes posted
  before ``rdma_connect`` / ``rdma_accept``; the server SENDs ``-C``
  messages on every connection, polls its send CQs, then its receive CQs;
  the client polls its receive CQs, then SENDs its ``-C`` replies; the
  server disconnects every connection and both sides wait for all the
  DISCONNECTED events;
* the status: main's ``ret`` (``return status %d``) is the exit status.

cmatose is single-threaded already: one loop on the event channel
(``connect_events``/``disconnect_events``) and busy polling of the CQs;
this module is the same loop.  It uses only ``softrdma.pyverbs``.
"""

from __future__ import annotations

import errno
import sys

from .cma_common import (
    GaiError, Getopt, Options, _close, _err, _errno_of, _out, atoi, create_first_event_channel,
    getaddrinfo as _getaddrinfo, perror,
)
from .libc import strtoul

OPTSTRING = "s:b:f:P:c:C:S:t:p:a:m"
DEFAULT_PORT = "7471"

SEND_CQ_INDEX, RECV_CQ_INDEX = 0, 1


def usage(prog: str) -> str:
    return (f"usage: {prog}\n"
            "\t[-s server_address]\n"
            "\t[-b bind_address]\n"
            "\t[-f address_format]\n"
            "\t    name, ip, ipv6, or gid\n"
            "\t[-P port_space]\n"
            "\t    tcp or ib\n"
            "\t[-c connections]\n"
            "\t[-C message_count]\n"
            "\t[-S message_size]\n"
            "\t[-t type_of_service]\n"
            "\t[-p port_number]\n"
            "\t[-m(igrate)]\n"
            "\t[-a ack_timeout]\n")


class Node:
    """struct cmatest_node."""

    def __init__(self, i: int):
        self.id = i
        self.cma_id = None              # pyverbs CMID
        self.connected = False
        self.pd = None
        self.cq = [None, None]
        self.mr = None


class CmaTose:
    """struct cmatest and the functions working on it."""

    def __init__(self, o: Options):
        self.o = o
        self.channel = None
        self.nodes: list[Node] = []
        self.by_id: dict[int, Node] = {}    # id(verbs CmId) -> node: cma_id->context
        self.listen_id = None
        self.conn_index = 0
        self.connects_left = o.connections
        self.disconnects_left = 0
        self.src = None                     # the rai's source address (ip, port) or None
        self.dst = None

    # ------------------------------------------------------------------ nodes
    def create_message(self, node: Node) -> int:
        from ..pyverbs.enums import IBV_ACCESS_LOCAL_WRITE
        from ..pyverbs.mr import MR
        o = self.o
        if not o.message_size:
            o.message_count = 0
        if not o.message_count:
            return 0
        if o.message_size < 0:
            _out("failed message allocation\n")
            return -1
        try:
            node.mr = MR(node.pd, o.message_size, IBV_ACCESS_LOCAL_WRITE)
        except Exception:
            _out("failed to reg MR\n")
            return -1
        return 0

    def init_node(self, node: Node) -> int:
        from ..pyverbs.cq import CQ
        from ..pyverbs.enums import IBV_QPT_RC
        from ..pyverbs.qp import QPCap, QPInitAttr
        try:
            # the ID's PD (rdma_create_qp with the library's PD for the ID;
            # cmatose allocates one per node: one per node here too)
            node.pd = node.cma_id.pd
        except Exception:
            node.pd = None
        if node.pd is None:
            _out("cmatose: unable to allocate PD\n")
            return -errno.ENOMEM
        ctx = node.cma_id.context
        cqe = self.o.message_count if self.o.message_count else 1
        try:
            node.cq[SEND_CQ_INDEX] = CQ(ctx, cqe, None, None, 0)
            node.cq[RECV_CQ_INDEX] = CQ(ctx, cqe, None, None, 0)
        except Exception:
            _out("cmatose: unable to create CQ\n")
            return -errno.ENOMEM
        cap = QPCap(max_send_wr=cqe, max_recv_wr=cqe, max_send_sge=1, max_recv_sge=1)
        init = QPInitAttr(qp_type=IBV_QPT_RC, qp_context=node, scq=node.cq[SEND_CQ_INDEX],
                          rcq=node.cq[RECV_CQ_INDEX], cap=cap, sq_sig_all=1)
        try:
            node.cma_id.create_qp(init)
        except Exception as e:
            perror("cmatose: unable to create QP", e)
            return -1
        ret = self.create_message(node)
        if ret:
            _out(f"cmatose: failed to create messages: {ret}\n")
        return ret

    def post_recvs(self, node: Node) -> int:
        from ..pyverbs.wr import SGE, RecvWR
        o = self.o
        if not o.message_count:
            return 0
        for _ in range(o.message_count):
            try:
                node.cma_id.qp.post_recv(RecvWR(node.id, 1, [SGE(node.mr.buf, o.message_size, node.mr.lkey)]))
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post receives: {ret}\n")
                return ret
        return 0

    def post_sends(self, node: Node) -> int:
        from ..pyverbs.enums import IBV_WR_SEND
        from ..pyverbs.wr import SGE, SendWR
        o = self.o
        if not node.connected or not o.message_count:
            return 0
        for _ in range(o.message_count):
            try:
                node.cma_id.qp.post_send(SendWR(node.id, IBV_WR_SEND, 1,
                                                sg=[SGE(node.mr.buf, o.message_size, node.mr.lkey)],
                                                send_flags=0))
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post sends: {ret}\n")
                return ret
        return 0

    def destroy_node(self, node: Node) -> None:
        if node.cma_id is None:
            return
        # rdma_destroy_qp, the CQs, the MR, then the ID (its PD with it)
        cid = node.cma_id
        try:
            if cid.id is not None:
                cid.id.destroy_qp()
        except Exception:
            pass
        for obj in (node.cq[SEND_CQ_INDEX], node.cq[RECV_CQ_INDEX], node.mr):
            _close(obj)
        _close(cid)
        node.cma_id = None

    # ------------------------------------------------------------------ CM handlers
    def connect_error(self) -> None:
        self.connects_left -= 1

    def addr_handler(self, node: Node) -> int:
        from ..pyverbs.librdmacm_enums import RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_ID_TOS
        o = self.o
        if o.set_tos:
            try:
                node.cma_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, o.tos, 1)
            except Exception as e:
                perror("cmatose: set TOS option failed", e)
        if o.set_timeout:
            try:
                node.cma_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, o.timeout, 1)
            except Exception as e:
                perror("cmatose: set ack timeout option failed", e)
        try:
            node.cma_id.resolve_route(2000)
        except Exception as e:
            perror("cmatose: resolve route failed", e)
            self.connect_error()
            return -1
        return 0

    def route_handler(self, node: Node) -> int:
        from ..pyverbs.cmid import ConnParam
        ret = self.init_node(node)
        if not ret:
            ret = self.post_recvs(node)
        if not ret:
            # memset 0, then responder resources 1, initiator depth 1, retry 5
            # (RNR retry 0); no private data (ai_connect is AF_IB's)
            try:
                node.cma_id.connect(ConnParam(resources=1, depth=1, flow_control=0, retry=5, rnr_retry=0))
            except Exception as e:
                perror("cmatose: failure connecting", e)
                ret = -1
        if ret:
            self.connect_error()
        return ret

    def connect_handler(self, ev) -> int:
        from ..pyverbs.cmid import CMID
        cma_id = CMID(creator=ev, listen_id=self.listen_id)
        if self.conn_index == self.o.connections:
            ret = -errno.ENOMEM
        else:
            node = self.nodes[self.conn_index]
            self.conn_index += 1
            node.cma_id = cma_id
            self.by_id[id(cma_id.id)] = node
            ret = self.init_node(node)
            if not ret and self.o.set_timeout:
                from ..pyverbs.librdmacm_enums import RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT
                try:
                    cma_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, self.o.timeout, 1)
                except Exception as e:
                    perror("cmatose: set ack timeout option failed", e)
            if not ret:
                ret = self.post_recvs(node)
            if not ret:
                try:
                    cma_id.accept(None)
                    return 0
                except Exception as e:
                    perror("cmatose: failure accepting", e)
                    ret = -1
            # err2: the node forgets the ID (its resources stay, as cmatose's)
            node.cma_id = None
            self.by_id.pop(id(cma_id.id), None)
            self.connect_error()
        _out("cmatose: failing connection request\n")
        try:
            cma_id.reject()
        except Exception:
            pass
        return ret

    def cma_handler(self, ev) -> int:
        from ..pyverbs import librdmacm_enums as E
        t = ev.event_type
        node = self.by_id.get(id(ev.event.id))
        if t == E.RDMA_CM_EVENT_ADDR_RESOLVED:
            return self.addr_handler(node)
        if t == E.RDMA_CM_EVENT_ROUTE_RESOLVED:
            return self.route_handler(node)
        if t == E.RDMA_CM_EVENT_CONNECT_REQUEST:
            return self.connect_handler(ev)
        if t == E.RDMA_CM_EVENT_ESTABLISHED:
            if node is not None:
                node.connected = True
            self.connects_left -= 1
            self.disconnects_left += 1
            return 0
        if t in (E.RDMA_CM_EVENT_ADDR_ERROR, E.RDMA_CM_EVENT_ROUTE_ERROR, E.RDMA_CM_EVENT_CONNECT_ERROR,
                 E.RDMA_CM_EVENT_UNREACHABLE, E.RDMA_CM_EVENT_REJECTED):
            _out(f"cmatose: event: {ev.event_str()}, error: {ev.status}\n")
            self.connect_error()
            return ev.status
        if t == E.RDMA_CM_EVENT_DISCONNECTED:
            if node is not None and node.cma_id is not None:
                try:
                    node.cma_id.disconnect()
                except Exception:
                    pass
            self.disconnects_left -= 1
            return 0
        return 0                        # DEVICE_REMOVAL: cleanup after the test; the rest ignored

    def _events(self, left, where: str) -> int:
        from ..pyverbs.cmid import CMEvent
        ret = 0
        while left() and not ret:
            try:
                ev = CMEvent(self.channel)
            except Exception as e:
                return perror(f"cmatose: failure in rdma_get_cm_event in {where} events", e)
            ret = self.cma_handler(ev)
            ev.ack_cm_event()
        return ret

    def connect_events(self) -> int:
        return self._events(lambda: self.connects_left, "connect")

    def disconnect_events(self) -> int:
        return self._events(lambda: self.disconnects_left, "disconnect")

    def poll_cqs(self, index: int) -> int:
        for node in self.nodes:
            if not node.connected:
                continue
            done = 0
            while done < self.o.message_count:
                try:
                    n, _ = node.cq[index].poll(8)
                except Exception as e:
                    ret = -_errno_of(e)
                    _out(f"cmatose: failed polling CQ: {ret}\n")
                    return ret
                done += n
        return 0

    def migrate_channel(self, listen_id) -> int:
        """cmatose's migrate_channel: every ID (and the listener) to a new
        event channel, then the old channel closed."""
        from ..pyverbs.cmid import CMEventChannel
        _out("migrating to new event channel\n")
        try:
            channel = CMEventChannel()
        except Exception as e:
            perror("cmatose: failed to create event channel", e)
            return -1
        try:
            ids = ([listen_id] if listen_id is not None else []) + \
                [n.cma_id for n in self.nodes if n.cma_id is not None]
            for cmid in ids:
                cmid.id.migrate(channel.event_channel)    # rdma_migrate_id
                cmid.event_channel = channel
        except Exception as e:
            perror("cmatose: failure migrating to channel", e)
            _close(channel)
            return -1
        _close(self.channel)
        self.channel = channel
        return 0

    # ------------------------------------------------------------------ server
    def run_server(self) -> int:
        from ..pyverbs.cmid import AddrInfo, CMID
        from ..pyverbs.librdmacm_enums import RAI_PASSIVE
        o = self.o
        _out("cmatose: starting server\n")
        try:
            listen_id = CMID(creator=self.channel, port_space=o.port_space)
        except Exception as e:
            perror("cmatose: listen request failed", e)
            return -1
        self.listen_id = listen_id
        try:
            try:
                self.src = _getaddrinfo(o.src_addr, o.port, o, True)
            except GaiError as e:
                _out(f"cmatose: getrdmaaddr error: {e.text}\n")
                return e.code
            try:
                listen_id.bind_addr(AddrInfo(src=self.src[0], src_service=str(self.src[1]), flags=RAI_PASSIVE,
                                             port_space=o.port_space))
            except Exception as e:
                perror("cmatose: bind address failed", e)
                return -1
            try:
                listen_id.listen(0)
            except Exception as e:
                perror("cmatose: failure trying to listen", e)
                return -1
            ret = self.connect_events()
            if ret:
                return ret
            if o.message_count:
                _out("initiating data transfers\n")
                for node in self.nodes:
                    ret = self.post_sends(node)
                    if ret:
                        return ret
                _out("completing sends\n")
                ret = self.poll_cqs(SEND_CQ_INDEX)
                if ret:
                    return ret
                _out("receiving data transfers\n")
                ret = self.poll_cqs(RECV_CQ_INDEX)
                if ret:
                    return ret
                _out("data transfers complete\n")
            if o.migrate:
                ret = self.migrate_channel(listen_id)
                if ret:
                    return ret
            _out("cmatose: disconnecting\n")
            for node in self.nodes:
                if not node.connected:
                    continue
                node.connected = False
                try:
                    node.cma_id.disconnect()
                except Exception:
                    pass
            ret = self.disconnect_events()
            _out("disconnected\n")
            return ret
        finally:
            _close(listen_id)

    # ------------------------------------------------------------------ client
    def run_client(self) -> int:
        from ..pyverbs.cmid import AddrInfo
        o = self.o
        _out("cmatose: starting client\n")
        try:
            if o.src_addr is not None:
                self.src = _getaddrinfo(o.src_addr, None, o, True)
            self.dst = _getaddrinfo(o.dst_addr, o.port, o, False)
        except GaiError as e:
            _out(f"cmatose: getaddrinfo error: {e.text}\n")
            return e.code
        _out("cmatose: connecting\n")
        for node in self.nodes:
            try:
                node.cma_id.resolve_addr(AddrInfo(src=self.src[0] if self.src else None, dst=self.dst[0],
                                                  dst_service=str(self.dst[1]), port_space=o.port_space), 2000)
            except Exception as e:
                perror("cmatose: failure getting addr", e)
                self.connect_error()
                return -1
        ret = self.connect_events()
        if not ret:
            if o.message_count:
                _out("receiving data transfers\n")
                ret = self.poll_cqs(RECV_CQ_INDEX)
                if not ret:
                    _out("sending replies\n")
                    for node in self.nodes:
                        ret = self.post_sends(node)
                        if ret:
                            break
                    if not ret:
                        _out("data transfers complete\n")
            if not ret:
                if o.migrate:
                    ret = self.migrate_channel(None)
                    if ret:
                        return ret
        ret2 = self.disconnect_events()
        if ret2:
            ret = ret2
        return ret

    # ------------------------------------------------------------------ main's setup and teardown
    def alloc_nodes(self) -> int:
        from ..pyverbs.cmid import CMID
        if self.o.connections < 0:
            _out("cmatose: unable to allocate memory for test nodes\n")
            return -errno.ENOMEM
        self.nodes = [Node(i) for i in range(self.o.connections)]
        if self.o.dst_addr is not None:
            for node in self.nodes:
                try:
                    node.cma_id = CMID(creator=self.channel, port_space=self.o.port_space)
                except Exception:
                    for n in self.nodes:
                        _close(n.cma_id)
                        n.cma_id = None
                    return -1
                self.by_id[id(node.cma_id.id)] = node
        return 0

    def destroy_nodes(self) -> None:
        for node in self.nodes:
            self.destroy_node(node)


def parse(argv: list[str], prog: str) -> Options | int:
    o = Options(DEFAULT_PORT)
    for op, optarg in Getopt(argv, prog, OPTSTRING):
        if op == "s":
            o.dst_addr = optarg
        elif op == "b":
            o.src_addr = optarg
        elif op == "f":
            low = optarg.lower()
            if low.startswith("ip"):
                o.numeric, o.af_ib = True, False
            elif low.startswith("gid"):
                o.numeric, o.af_ib = True, True
            elif not low.startswith("name"):
                _err("Warning: unknown address format\n")
        elif op == "P":
            from ..pyverbs.librdmacm_enums import RDMA_PS_IB
            low = optarg.lower()
            if low.startswith("ib"):
                o.port_space = RDMA_PS_IB
            elif not low.startswith("tcp"):
                _err("Warning: unknown port space format\n")
        elif op == "c":
            o.connections = atoi(optarg)
        elif op == "C":
            o.message_count = atoi(optarg)
        elif op == "S":
            o.message_size = atoi(optarg)
        elif op == "t":
            o.set_tos, o.tos = True, strtoul(optarg, 0) & 0xFF
        elif op == "p":
            o.port = optarg
        elif op == "m":
            o.migrate = True
        elif op == "a":
            o.set_timeout, o.timeout = True, strtoul(optarg, 0) & 0xFF
        else:
            _out(usage(prog))
            return 1
    if o.port_space is None:
        from ..pyverbs.librdmacm_enums import RDMA_PS_TCP
        o.port_space = RDMA_PS_TCP
    return o


def main(argv: list[str] | None = None, prog: str = "ucmatose") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    o = parse(argv, prog)
    if isinstance(o, int):
        return o
    try:
        return _run(o) & 0xFF
    finally:
        sys.stdout.flush()


def _run(o: Options) -> int:
    test = CmaTose(o)
    channel = create_first_event_channel()
    if isinstance(channel, int):
        return 1
    test.channel = channel
    try:
        if test.alloc_nodes():
            return 1
        if o.dst_addr is not None:
            ret = test.run_client()
        else:
            ret = test.run_server()
        _out("test complete\n")
        test.destroy_nodes()
        _close(test.channel)
        test.channel = None
        _out(f"return status {ret}\n")
        return ret
    finally:
        if test.channel is not None:
            test.destroy_nodes()
            _close(test.channel)
