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
this module is the same loop (its common part, shared with udaddy, is
``cma_common.CmaTest``).  It uses only ``softrdma.pyverbs``.
"""

from __future__ import annotations

import errno

from ..pyverbs.cmid import CMEventChannel, ConnParam
from ..pyverbs.cq import CQ
from ..pyverbs.enums import IBV_QPT_RC, IBV_WR_SEND
from ..pyverbs.librdmacm_enums import RDMA_PS_IB, RDMA_PS_TCP
from ..pyverbs.qp import QPCap, QPInitAttr
from ..pyverbs.wr import SGE, SendWR
from . import cma_common
from .cma_common import (
    CmaNode, CmaTest, Getopt, Options, _close, _out, common_option, perror, port_space_option,
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


class Node(CmaNode):
    """struct cmatest_node."""

    def __init__(self, i: int):
        super().__init__(i)
        self.cq = [None, None]

    def cqs(self) -> list:
        return self.cq


class CmaTose(CmaTest):
    """struct cmatest and the functions working on it: cmatose's own."""

    name = "cmatose"
    node_class = Node

    def __init__(self, o: Options):
        super().__init__(o)
        self.disconnects_left = 0

    # ------------------------------------------------------------------ nodes
    def qp_init_attr(self, node: Node):
        ctx = node.cma_id.context
        cqe = self.o.message_count if self.o.message_count else 1
        try:
            node.cq[SEND_CQ_INDEX] = CQ(ctx, cqe, None, None, 0)
            node.cq[RECV_CQ_INDEX] = CQ(ctx, cqe, None, None, 0)
        except Exception:
            _out("cmatose: unable to create CQ\n")
            return -errno.ENOMEM
        cap = QPCap(max_send_wr=cqe, max_recv_wr=cqe, max_send_sge=1, max_recv_sge=1)
        return QPInitAttr(qp_type=IBV_QPT_RC, qp_context=node, scq=node.cq[SEND_CQ_INDEX],
                          rcq=node.cq[RECV_CQ_INDEX], cap=cap, sq_sig_all=1)

    def send_wr_factory(self, node: Node, signal_flag: int):
        return lambda: SendWR(node.id, IBV_WR_SEND, 1, sg=[SGE(node.mr.buf, self.o.message_size, node.mr.lkey)],
                              send_flags=signal_flag)

    # ------------------------------------------------------------------ CM handlers
    def conn_param(self):
        # memset 0, then responder resources 1, initiator depth 1, retry 5
        # (RNR retry 0); no private data (ai_connect is AF_IB's)
        return ConnParam(resources=1, depth=1, flow_control=0, retry=5, rnr_retry=0)

    def established_handler(self, node: Node, ev) -> int:
        if node is not None:
            node.connected = True
        self.connects_left -= 1
        self.disconnects_left += 1
        return 0

    def disconnected_handler(self, node: Node) -> int:
        if node is not None and node.cma_id is not None:
            try:
                node.cma_id.disconnect()
            except Exception:
                pass
        self.disconnects_left -= 1
        return 0

    def disconnect_events(self) -> int:
        return self.events(lambda: self.disconnects_left, "disconnect")

    def migrate_channel(self, listen_id) -> int:
        """cmatose's migrate_channel: every ID (and the listener) to a new
        event channel, then the old channel closed."""
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
    def serve(self, listen_id) -> int:
        o = self.o
        ret = self.connect_events()
        if ret:
            return ret
        if o.message_count:
            _out("initiating data transfers\n")
            ret = self.post_all_sends()
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

    # ------------------------------------------------------------------ client
    def client_test(self) -> int:
        o = self.o
        ret = self.connect_events()
        if not ret:
            if o.message_count:
                _out("receiving data transfers\n")
                ret = self.poll_cqs(RECV_CQ_INDEX)
                if not ret:
                    _out("sending replies\n")
                    ret = self.post_all_sends()
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


def parse(argv: list[str], prog: str) -> Options | int:
    o = Options(DEFAULT_PORT)
    for op, optarg in Getopt(argv, prog, OPTSTRING):
        if common_option(o, op, optarg):
            continue
        if op == "P":
            port_space_option(o, optarg, "ib", RDMA_PS_IB, "tcp")
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
        o.port_space = RDMA_PS_TCP
    return o


def main(argv: list[str] | None = None, prog: str = "ucmatose") -> int:
    return cma_common.main(argv, prog, parse, CmaTose)
