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
import sys

from .cma_common import (
    GaiError, Getopt, Options, _close, _err, _errno_of, _out, atoi, create_first_event_channel,
    getaddrinfo as _getaddrinfo, perror,
)
from .libc import strtol, strtoul

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


class Node:
    """struct cmatest_node (UD)."""

    def __init__(self, i: int):
        self.id = i
        self.cma_id = None
        self.connected = False
        self.pd = None
        self.cq = None
        self.mr = None
        self.ah = None
        self.remote_qpn = 0
        self.remote_qkey = 0


def ah_attr_from_grh(ctx, port_num: int, grh: bytes):
    """ibv_init_ah_from_wc for RoCE: the sender's GID is the destination,
    the local GID the packet was sent to gives the source index.  rxe's
    layout: an IPv4 header in the last 20 bytes, or an IPv6 header."""
    from ..pyverbs.addr import GID, AHAttr, GlobalRoute
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


class UdAddy:
    """struct cmatest and the functions working on it."""

    def __init__(self, o: Options):
        self.o = o
        self.channel = None
        self.nodes: list[Node] = []
        self.by_id: dict[int, Node] = {}
        self.listen_id = None
        self.conn_index = 0
        self.connects_left = o.connections
        self.src = self.dst = None

    # ------------------------------------------------------------------ nodes
    def create_message(self, node: Node) -> int:
        from ..pyverbs.enums import IBV_ACCESS_LOCAL_WRITE
        from ..pyverbs.mr import MR
        o = self.o
        if not o.message_size:
            o.message_count = 0
        if not o.message_count:
            return 0
        if o.message_size + GRH <= 0:
            _out("failed message allocation\n")
            return -1
        try:
            node.mr = MR(node.pd, o.message_size + GRH, IBV_ACCESS_LOCAL_WRITE)
        except Exception:
            _out("failed to reg MR\n")
            return -1
        return 0

    def verify_test_params(self, node: Node) -> int:
        try:
            attr = node.cma_id.context.query_port(1)
        except Exception as e:
            return _errno_of(e)
        mtu = 1 << (attr.active_mtu + 7)
        if self.o.message_count and self.o.message_size > mtu:
            _out(f"udaddy: message_size {self.o.message_size} is larger than active mtu {mtu}\n")
            return -errno.EINVAL
        return 0

    def init_node(self, node: Node) -> int:
        from ..pyverbs.cq import CQ
        from ..pyverbs.enums import IBV_QPT_UD
        from ..pyverbs.qp import QPCap, QPInitAttr
        o = self.o
        try:
            node.pd = node.cma_id.pd
        except Exception:
            node.pd = None
        if node.pd is None:
            _out("udaddy: unable to allocate PD\n")
            return -errno.ENOMEM
        cqe = o.message_count * 2 if o.message_count else 2
        try:
            node.cq = CQ(node.cma_id.context, cqe, None, None, 0)
        except Exception:
            _out("udaddy: unable to create CQ\n")
            return -errno.ENOMEM
        wrs = o.message_count if o.message_count else 1
        init = QPInitAttr(qp_type=IBV_QPT_UD, qp_context=node, scq=node.cq, rcq=node.cq,
                          cap=QPCap(max_send_wr=wrs, max_recv_wr=wrs, max_send_sge=1, max_recv_sge=1),
                          sq_sig_all=0)
        try:
            node.cma_id.create_qp(init)
        except Exception as e:
            perror("udaddy: unable to create QP", e)
            return -1
        ret = self.create_message(node)
        if ret:
            _out(f"udaddy: failed to create messages: {ret}\n")
        return ret

    def post_recvs(self, node: Node) -> int:
        from ..pyverbs.wr import SGE, RecvWR
        o = self.o
        if not o.message_count:
            return 0
        for _ in range(o.message_count):
            try:
                node.cma_id.qp.post_recv(RecvWR(node.id, 1, [SGE(node.mr.buf, o.message_size + GRH,
                                                                   node.mr.lkey)]))
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post receives: {ret}\n")
                return ret
        return 0

    def post_sends(self, node: Node, signal_flag: int) -> int:
        from ..pyverbs.enums import IBV_WR_SEND_WITH_IMM
        from ..pyverbs.wr import SGE, SendWR
        o = self.o
        if not node.connected or not o.message_count:
            return 0
        qpn = node.cma_id.qp.qp_num
        for _ in range(o.message_count):
            try:
                wr = SendWR(node.id, IBV_WR_SEND_WITH_IMM, 1, imm_data=socket.htonl(qpn),
                            sg=[SGE(node.mr.buf, o.message_size, node.mr.lkey)], send_flags=signal_flag)
                wr.set_wr_ud(node.ah, node.remote_qpn, node.remote_qkey)
                node.cma_id.qp.post_send(wr)
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post sends: {ret}\n")
                return ret
        return 0

    def destroy_node(self, node: Node) -> None:
        if node.cma_id is None:
            return
        _close(node.ah)
        try:
            if node.cma_id.id is not None:
                node.cma_id.id.destroy_qp()
        except Exception:
            pass
        _close(node.cq)
        _close(node.mr)
        _close(node.cma_id)
        node.cma_id = None

    # ------------------------------------------------------------------ CM handlers
    def connect_error(self) -> None:
        self.connects_left -= 1

    def addr_handler(self, node: Node) -> int:
        from ..pyverbs.librdmacm_enums import RDMA_OPTION_ID, RDMA_OPTION_ID_TOS
        if self.o.set_tos:
            try:
                node.cma_id.set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, self.o.tos, 1)
            except Exception as e:
                perror("udaddy: set TOS option failed", e)
        try:
            node.cma_id.resolve_route(2000)
        except Exception as e:
            perror("udaddy: resolve route failed", e)
            self.connect_error()
            return -1
        return 0

    def route_handler(self, node: Node) -> int:
        from ..pyverbs.cmid import ConnParam
        ret = self.verify_test_params(node)
        if not ret:
            ret = self.init_node(node)
        if not ret:
            ret = self.post_recvs(node)
        if not ret:
            try:                                        # memset 0: no private data (ai_connect is AF_IB's)
                node.cma_id.connect(ConnParam(resources=0, depth=0, retry=0, rnr_retry=0))
            except Exception as e:
                perror("udaddy: failure connecting", e)
                ret = -1
        if ret:
            self.connect_error()
        return ret

    def connect_handler(self, ev) -> int:
        from ..pyverbs.cmid import CMID, ConnParam
        cma_id = CMID(creator=ev, listen_id=self.listen_id)
        if self.conn_index == self.o.connections:
            ret = -errno.ENOMEM
        else:
            node = self.nodes[self.conn_index]
            self.conn_index += 1
            node.cma_id = cma_id
            self.by_id[id(cma_id.id)] = node
            ret = self.verify_test_params(node)
            if not ret:
                ret = self.init_node(node)
            if not ret:
                ret = self.post_recvs(node)
            if not ret:
                try:
                    cma_id.accept(ConnParam(resources=0, depth=0, retry=0, rnr_retry=0,
                                            qp_num=cma_id.qp.qp_num))
                    node.connected = True
                    self.connects_left -= 1
                    return 0
                except Exception as e:
                    perror("udaddy: failure accepting", e)
                    ret = -1
            node.cma_id = None
            self.by_id.pop(id(cma_id.id), None)
            self.connect_error()
        _out("udaddy: failing connection request\n")
        try:
            cma_id.reject()
        except Exception:
            pass
        return ret

    def resolved_handler(self, node: Node, ev) -> int:
        from ..pyverbs.addr import AH
        from ..pyverbs.cmid import UDParam
        try:
            ud = UDParam(ev)
            node.remote_qpn, node.remote_qkey = ud.qp_num, ud.qkey
            node.ah = AH(node.pd, attr=ud.ah_attr)
        except Exception:
            _out("udaddy: failure creating address handle\n")
            self.connect_error()
            return -1
        node.connected = True
        self.connects_left -= 1
        return 0

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
            return self.resolved_handler(node, ev)
        if t in (E.RDMA_CM_EVENT_ADDR_ERROR, E.RDMA_CM_EVENT_ROUTE_ERROR, E.RDMA_CM_EVENT_CONNECT_ERROR,
                 E.RDMA_CM_EVENT_UNREACHABLE, E.RDMA_CM_EVENT_REJECTED):
            _out(f"udaddy: event: {ev.event_str()}, error: {ev.status}\n")
            self.connect_error()
            return ev.status
        return 0

    def connect_events(self) -> int:
        from ..pyverbs.cmid import CMEvent
        ret = 0
        while self.connects_left and not ret:
            try:
                ev = CMEvent(self.channel)
            except Exception:
                ret = -1                                # rdma_get_cm_event's -1, no message
                break
            ret = self.cma_handler(ev)
            ev.ack_cm_event()
        return ret

    def create_reply_ah(self, node: Node, wc) -> None:
        from ..pyverbs.addr import AH
        from ..pyverbs.enums import IBV_QP_QKEY
        try:
            attr = ah_attr_from_grh(node.cma_id.context, 1, node.mr.read(GRH, 0))
            node.ah = AH(node.pd, attr=attr)
        except Exception:
            node.ah = None                              # ibv_create_ah_from_wc's NULL, unchecked
        node.remote_qpn = socket.ntohl(wc.imm_data & 0xFFFFFFFF)
        attr, _ = node.cma_id.qp.query(IBV_QP_QKEY)
        node.remote_qkey = attr.qkey

    def poll_cqs(self) -> int:
        for node in self.nodes:
            if not node.connected:
                continue
            done = 0
            while done < self.o.message_count:
                try:
                    n, wcs = node.cq.poll(8)
                except Exception as e:
                    ret = -_errno_of(e)
                    _out(f"udaddy: failed polling CQ: {ret}\n")
                    return ret
                if n and node.ah is None:
                    self.create_reply_ah(node, wcs[0])
                done += n
        return 0

    # ------------------------------------------------------------------ server and client
    def run_server(self) -> int:
        from ..pyverbs.cmid import AddrInfo, CMID
        from ..pyverbs.librdmacm_enums import RAI_PASSIVE
        from ..pyverbs.enums import IBV_SEND_SIGNALED
        o = self.o
        _out("udaddy: starting server\n")
        try:
            listen_id = CMID(creator=self.channel, port_space=o.port_space)
        except Exception as e:
            perror("udaddy: listen request failed", e)
            return -1
        self.listen_id = listen_id
        try:
            try:
                self.src = _getaddrinfo(o.src_addr, o.port, o, True)
            except GaiError as e:
                _out(f"udaddy: getrdmaaddr error: {e.text}\n")
                return e.code
            try:
                listen_id.bind_addr(AddrInfo(src=self.src[0], src_service=str(self.src[1]), flags=RAI_PASSIVE,
                                             port_space=o.port_space))
            except Exception as e:
                perror("udaddy: bind address failed", e)
                return -1
            try:
                listen_id.listen(0)
            except Exception as e:
                perror("udaddy: failure trying to listen", e)
                return -1
            self.connect_events()                       # its status is not looked at
            ret = 0
            if o.message_count:
                _out("receiving data transfers\n")
                ret = self.poll_cqs()
                if ret:
                    return ret
                _out("sending replies\n")
                for node in self.nodes:
                    ret = self.post_sends(node, IBV_SEND_SIGNALED)
                    if ret:
                        return ret
                ret = self.poll_cqs()
                if ret:
                    return ret
                _out("data transfers complete\n")
            return ret
        finally:
            _close(listen_id)

    def run_client(self) -> int:
        from ..pyverbs.cmid import AddrInfo
        o = self.o
        _out("udaddy: starting client\n")
        try:
            if o.src_addr is not None:
                self.src = _getaddrinfo(o.src_addr, None, o, True)
            self.dst = _getaddrinfo(o.dst_addr, o.port, o, False)
        except GaiError as e:
            _out(f"udaddy: getaddrinfo error: {e.text}\n")
            return e.code
        _out("udaddy: connecting\n")
        for node in self.nodes:
            try:
                node.cma_id.resolve_addr(AddrInfo(src=self.src[0] if self.src else None, dst=self.dst[0],
                                                  dst_service=str(self.dst[1]), port_space=o.port_space), 2000)
            except Exception as e:
                perror("udaddy: failure getting addr", e)
                self.connect_error()
                return -1
        ret = self.connect_events()
        if ret:
            return ret
        if o.message_count:
            _out("initiating data transfers\n")
            for node in self.nodes:
                ret = self.post_sends(node, 0)
                if ret:
                    return ret
            _out("receiving data transfers\n")
            ret = self.poll_cqs()
            if ret:
                return ret
            _out("data transfers complete\n")
        return ret

    def alloc_nodes(self) -> int:
        from ..pyverbs.cmid import CMID
        if self.o.connections < 0:
            _out("udaddy: unable to allocate memory for test nodes\n")
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
    o = Options(PORT)
    o.port_space = RDMA_PS_UDP
    o.socktype = socket.SOCK_DGRAM
    for op, optarg in Getopt(argv, prog, OPTSTRING):
        if op == "s":
            o.dst_addr = optarg
        elif op == "b":
            o.src_addr = optarg
        elif op == "c":
            o.connections = atoi(optarg)
        elif op == "C":
            o.message_count = atoi(optarg)
        elif op == "S":
            o.message_size = atoi(optarg)
        elif op == "t":
            o.set_tos, o.tos = True, strtoul(optarg, 0) & 0xFF
        elif op == "p":                                 # the port space, for backwards compatibility
            o.port_space = strtol(optarg, 0) & 0xFFFFFFFF
        elif op == "f":
            low = optarg.lower()
            if low.startswith("ip"):
                o.numeric, o.af_ib = True, False
            elif low.startswith("gid"):
                o.numeric, o.af_ib = True, True
            elif not low.startswith("name"):
                _err("Warning: unknown address format\n")
        elif op == "P":
            low = optarg.lower()
            if low.startswith("ipoib"):
                o.port_space = RDMA_PS_IPOIB
            elif not low.startswith("udp"):
                _err("Warning: unknown port space format\n")
        else:
            _out(usage(prog))
            return 1
    return o


def main(argv: list[str] | None = None, prog: str = "udaddy") -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    o = parse(argv, prog)
    if isinstance(o, int):
        return o
    try:
        return _run(o) & 0xFF
    finally:
        sys.stdout.flush()


def _run(o: Options) -> int:
    test = UdAddy(o)
    channel = create_first_event_channel()
    if isinstance(channel, int):
        return 1
    test.channel = channel
    try:
        if test.alloc_nodes():
            return 1
        ret = test.run_client() if o.dst_addr is not None else test.run_server()
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
