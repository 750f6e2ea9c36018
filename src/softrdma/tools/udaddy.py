"""udaddy, as rdma-core's librdmacm/examples/udaddy.c has it.

What a user or a peer sees is the real tool's (docs/formats/udaddy.md):

* the options (``getopt(argc, argv, "s:b:c:C:S:t:p:P:f:")``, glibc's
  diagnostics, then the usage text on stdout and exit 1; ``-p`` is the port
  space, the port is always 7174), the warnings of ``-f`` and ``-P``, every
  message and status line;
* the test: ``-c`` UD "connections" over rdma_cm (port space UDP: SIDR REQ
  and REP), each with its own PD, one CQ of ``2 * -C`` entries, a UD QP
  and ``-C`` receives of ``-S`` + 40 (GRH) bytes posted before
  ``rdma_connect`` / ``rdma_accept``; the client takes the server's QPN,
  Q_Key and address from the ESTABLISHED event and SENDs (with immediate:
  its own QPN) ``-C`` unsignaled messages on every connection, the server
  makes its reply address handle from the first completion (the GRH in
  the receive buffer, the QPN in the immediate) and SENDs ``-C`` signaled
  replies; no disconnect (UD has none);
* the status: main's ``ret`` (``return status %d``) is the exit status.

One thread, as udaddy is.  It uses only ``softrdma.pyverbs``.
"""

from __future__ import annotations

import errno
import socket

from ..pyverbs.addr import AH, GID, AHAttr, GlobalRoute
from ..pyverbs.cmid import ConnParam, UDParam
from ..pyverbs.cq import CQ
from ..pyverbs.enums import IBV_LINK_LAYER_INFINIBAND, IBV_QP_QKEY, IBV_QPT_UD, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM
from ..pyverbs.qp import QPCap, QPInitAttr
from ..pyverbs.wr import SGE, SendWR
from ..verbs.addr import ah_attr_from_wc
from . import cma_common
from .cma_common import (
    CmaNode, CmaTest, Getopt, Options, _close, _errno_of, _out, common_option, port_space_option,
)
from .libc import strtol

OPTSTRING = "s:b:c:C:S:t:p:P:f:"
PORT = "7174"
GRH = 40                        # sizeof(struct ibv_grh)
RDMA_PS_UDP, RDMA_PS_IPOIB = 0x0111, 0x0002


def usage(prog: str) -> str:
    return (f"usage: {prog}\n"
            "\t[-s server_address]\n"
            "\t[-b bind_address]\n"
            "\t[-f address_format]\n"
            "\t    name, ip, ipv6, or gid\n"
            "\t[-P port_space]\n"
            "\t    udp or ipoib\n"
            "\t[-c connections]\n"
            "\t[-C message_count]\n"
            "\t[-S message_size]\n"
            "\t[-t type_of_service]\n"
            f"\t[-p port_space - {RDMA_PS_UDP:#x} for UDP (default), {RDMA_PS_IPOIB:#x} for IPOIB]\n")


class Node(CmaNode):
    """struct cmatest_node (UD)."""

    def __init__(self, i: int):
        super().__init__(i)
        self.cq = None
        self.ah = None
        self.remote_qpn = 0
        self.remote_qkey = 0

    def cqs(self) -> list:
        return [self.cq]


def ah_attr_from_grh(ctx, port_num: int, grh: bytes):
    """ibv_init_ah_from_wc for RoCE: the sender's GID is the destination,
    the local GID the packet was sent to gives the source index.  rxe's
    layout: an IPv4 header in the last 20 bytes, or an IPv6 header."""
    if grh[20] >> 4 == 4:
        tclass = grh[21]
        sgid = bytes(10) + b"\xff\xff" + grh[32:36]
        dgid = bytes(10) + b"\xff\xff" + grh[36:40]
        flow = 0
    else:
        vtf = int.from_bytes(grh[0:4], "big")
        tclass, flow = (vtf >> 20) & 0xFF, vtf & 0xFFFFF
        sgid, dgid = grh[8:24], grh[24:40]
    index = None
    for i in range(ctx.query_port(port_num).gid_tbl_len):
        try:
            if ctx.query_gid(port_num, i).raw == dgid:
                index = i
                break
        except Exception:
            continue
    if index is None:
        raise OSError(errno.ENOENT, "no local GID for the packet's destination")
    return AHAttr(gr=GlobalRoute(dgid=GID(sgid), flow_label=flow, sgid_index=index, hop_limit=0xFF,
                                 traffic_class=tclass), is_global=1, port_num=port_num)


class UdAddy(CmaTest):
    """struct cmatest and the functions working on it: udaddy's own."""

    name = "udaddy"
    node_class = Node
    recv_headroom = GRH

    # ------------------------------------------------------------------ nodes
    def verify_test_params(self, node: Node) -> int:
        try:
            attr = node.cma_id.context.query_port(1)
        except Exception as e:
            return _errno_of(e)
        mtu = 1 << (attr.active_mtu + 7)
        if self.o.message_count and self.o.message_size > mtu:
            _out(f"{self.name}: message_size {self.o.message_size} is larger than active mtu {mtu}\n")
            return -errno.EINVAL
        return 0

    def prepare_node(self, node: Node) -> int:
        ret = self.verify_test_params(node)
        if not ret:
            ret = self.init_node(node)
        return ret

    def qp_init_attr(self, node: Node):
        o = self.o
        cqe = o.message_count * 2 if o.message_count else 2
        try:
            node.cq = CQ(node.cma_id.context, cqe, None, None, 0)
        except Exception:
            _out(f"{self.name}: unable to create CQ\n")
            return -errno.ENOMEM
        wrs = o.message_count if o.message_count else 1
        return QPInitAttr(qp_type=IBV_QPT_UD, qp_context=node, scq=node.cq, rcq=node.cq,
                          cap=QPCap(max_send_wr=wrs, max_recv_wr=wrs, max_send_sge=1, max_recv_sge=1),
                          sq_sig_all=0)

    def send_wr_factory(self, node: Node, signal_flag: int):
        qpn = node.cma_id.qp.qp_num

        def send_wr():
            wr = SendWR(node.id, IBV_WR_SEND_WITH_IMM, 1, imm_data=socket.htonl(qpn),
                        sg=[SGE(node.mr.buf, self.o.message_size, node.mr.lkey)], send_flags=signal_flag)
            wr.set_wr_ud(node.ah, node.remote_qpn, node.remote_qkey)
            return wr
        return send_wr

    def destroy_node(self, node: Node) -> None:
        if node.cma_id is not None:
            _close(node.ah)
        super().destroy_node(node)

    # ------------------------------------------------------------------ CM handlers
    def conn_param(self):
        return ConnParam(resources=0, depth=0, retry=0, rnr_retry=0)     # memset 0: no private data

    def accept_param(self, cma_id):
        return ConnParam(resources=0, depth=0, retry=0, rnr_retry=0, qp_num=cma_id.qp.qp_num)

    def accepted(self, node: Node) -> None:
        node.connected = True
        self.connects_left -= 1

    def established_handler(self, node: Node, ev) -> int:
        """resolved_handler: the server's QPN, Q_Key and address."""
        try:
            ud = UDParam(ev)
            node.remote_qpn, node.remote_qkey = ud.qp_num, ud.qkey
            node.ah = AH(node.pd, attr=ud.ah_attr)
        except Exception:
            _out(f"{self.name}: failure creating address handle\n")
            self.connect_error()
            return -1
        node.connected = True
        self.connects_left -= 1
        return 0

    def get_event_failed(self, e: BaseException, where: str) -> int:
        return -1                                       # rdma_get_cm_event's -1, no message

    # ------------------------------------------------------------------ completions
    def create_reply_ah(self, node: Node, wc) -> None:
        try:
            ctx = node.cma_id.context
            if ctx.query_port(1).link_layer == IBV_LINK_LAYER_INFINIBAND:
                # LID-routed: the completion's SLID and SL (a GRH only if the packet had one)
                attr = ah_attr_from_wc(ctx, 1, wc, node.mr.read(GRH, 0))
            else:
                attr = ah_attr_from_grh(ctx, 1, node.mr.read(GRH, 0))
            node.ah = AH(node.pd, attr=attr)
        except Exception:
            node.ah = None                              # ibv_create_ah_from_wc's NULL, unchecked
        node.remote_qpn = socket.ntohl(wc.imm_data & 0xFFFFFFFF)
        attr, _ = node.cma_id.qp.query(IBV_QP_QKEY)
        node.remote_qkey = attr.qkey

    def polled(self, node: Node, n: int, wcs) -> None:
        if n and node.ah is None:
            self.create_reply_ah(node, wcs[0])

    # ------------------------------------------------------------------ server and client
    def serve(self, listen_id) -> int:
        o = self.o
        self.connect_events()                           # its status is not looked at
        ret = 0
        if o.message_count:
            _out("receiving data transfers\n")
            ret = self.poll_cqs()
            if ret:
                return ret
            _out("sending replies\n")
            ret = self.post_all_sends(IBV_SEND_SIGNALED)
            if ret:
                return ret
            ret = self.poll_cqs()
            if ret:
                return ret
            _out("data transfers complete\n")
        return ret

    def client_test(self) -> int:
        o = self.o
        ret = self.connect_events()
        if ret:
            return ret
        if o.message_count:
            _out("initiating data transfers\n")
            ret = self.post_all_sends(0)
            if ret:
                return ret
            _out("receiving data transfers\n")
            ret = self.poll_cqs()
            if ret:
                return ret
            _out("data transfers complete\n")
        return ret


def parse(argv: list[str], prog: str) -> Options | int:
    o = Options(PORT)
    o.port_space = RDMA_PS_UDP
    o.socktype = socket.SOCK_DGRAM
    for op, optarg in Getopt(argv, prog, OPTSTRING):
        if common_option(o, op, optarg):
            continue
        if op == "p":                                   # the port space, for backwards compatibility
            o.port_space = strtol(optarg, 0) & 0xFFFFFFFF
        elif op == "P":
            port_space_option(o, optarg, "ipoib", RDMA_PS_IPOIB, "udp")
        else:
            _out(usage(prog))
            return 1
    return o


def main(argv: list[str] | None = None, prog: str = "udaddy") -> int:
    return cma_common.main(argv, prog, parse, UdAddy)
