"""What softrdma's rdma_cm examples (rping, ucmatose, udaddy) share, as
rdma-core's librdmacm/examples/common.c is shared by theirs.

It owns:

* the output: ``_out`` (stdout, flushed), ``_err`` (stderr, after flushing
  stdout), ``perror`` and the errno of a failed call (``_errno_of``);
* the small C helpers the tools parse and clean up with: ``atoi``,
  ``_close``, and ``Getopt`` (plain getopt with glibc's diagnostics, no
  long options: cmatose's and udaddy's);
* common.c's ``get_rdma_addr`` (``getaddrinfo`` here, ``GaiError``) and
  ``create_first_event_channel``;
* ``Options``: the options cmatose and udaddy both have, and how they read
  them (``common_option``, ``port_space_option``);
* ``CmaTest``: struct cmatest, what cmatose and udaddy do with it alike
  (the nodes, the connection counts, the CM events, the event-channel
  loop, the listen, the address resolution, main), and ``main``.

Every message a tool prints with these is the tool's own: the helpers take
the text (or the tool's name) from their caller.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from ..pyverbs import librdmacm_enums as E
from ..pyverbs.cmid import CMID, AddrInfo, CMEvent, CMEventChannel
from ..pyverbs.device import get_device_list
from ..pyverbs.enums import IBV_ACCESS_LOCAL_WRITE
from ..pyverbs.librdmacm_enums import (RAI_FAMILY, RAI_NUMERICHOST, RAI_PASSIVE, RDMA_OPTION_ID,
                                      RDMA_OPTION_ID_ACK_TIMEOUT, RDMA_OPTION_ID_TOS)
from ..pyverbs.mr import MR
from ..pyverbs.pyverbs_error import PyverbsError
from ..pyverbs.wr import SGE, RecvWR
from ..verbs.cm import AF_IB
from .libc import GetoptLong, c_int, strtol, strtoul


# ---------------------------------------------------------------------- output
def _out(msg: str) -> None:
    sys.stdout.write(msg)
    sys.stdout.flush()


def _err(msg: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(msg)
    sys.stderr.flush()


def _errno_of(e: BaseException | None) -> int:
    code = getattr(e, "error_code", None) or getattr(e, "errno", None) or errno.EINVAL
    return abs(code)


def perror(what: str, e: BaseException | None = None) -> int:
    """perror(what) for a call that failed with ``e``; the errno."""
    code = _errno_of(e)
    _err(f"{what}: {os.strerror(code)}\n")
    return code


# ---------------------------------------------------------------------- C helpers
def atoi(s: str) -> int:
    """C atoi(): strtol base 10 converted to int."""
    return c_int(strtol(s, 10))


def _close(obj) -> None:
    if obj is None:
        return
    try:
        obj.close()
    except Exception:
        pass


class Getopt(GetoptLong):
    """Plain getopt: no long options, so ``--word`` is the option '-'
    (cmatose stops at the first error, the rest of the word is not read)."""

    def _long(self, body: str, i: int):
        self._err("invalid option -- '-'")
        return i, ("?", None)


# ---------------------------------------------------------------------- common.c
class GaiError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(code, text)
        self.code = code
        self.text = text


def getaddrinfo(node: str | None, service: str | None, o: Options, passive: bool) -> tuple[str, int]:
    """get_rdma_addr / rdma_getaddrinfo's address: (numeric address, port);
    GaiError as getaddrinfo's (negative EAI code, gai_strerror text)."""
    flags = (socket.AI_PASSIVE if passive else 0) | (socket.AI_NUMERICHOST if o.numeric else 0)
    try:
        # -f gid (AF_IB): getaddrinfo with no family, then ucma_convert_in6 makes the
        # IPv6 address a GID; the address is kept as text, the family goes in ``ai_hints``
        res = socket.getaddrinfo(node, service, 0, o.socktype, 0, flags)
    except socket.gaierror as e:
        raise GaiError(e.errno, e.strerror) from None
    except UnicodeError:
        raise GaiError(socket.EAI_NONAME, "Name or service not known") from None
    for family, _, _, _, sa in res:
        if family == socket.AF_INET6 or (family == socket.AF_INET and not o.af_ib):
            return sa[0], sa[1]
    raise GaiError(socket.EAI_FAMILY, "ai_family not supported")


def ai_hints(o: "Options", flags: int = 0) -> dict:
    """The rdma_addrinfo hints' flags and family of ``-f``: RAI_NUMERICHOST
    for ``ip``, RAI_NUMERICHOST | RAI_FAMILY with AF_IB for ``gid``."""
    if o.af_ib:
        return {"flags": flags | RAI_NUMERICHOST | RAI_FAMILY, "family": AF_IB}
    return {"flags": flags | (RAI_NUMERICHOST if o.numeric else 0)}


def create_first_event_channel():
    """common.c's create_first_event_channel(): the CMEventChannel, or the
    errno after the message.  librdmacm's ucma_init lists the verbs devices
    first (this also starts softrdma's embedded daemon when none runs)."""
    try:
        if not get_device_list():
            raise PyverbsError("no devices", errno.ENODEV)
        return CMEventChannel()
    except PyverbsError as e:
        if e.error_code == errno.ENODEV:
            _err("No RDMA devices were detected\n")
        else:
            perror("failed to create RDMA CM event channel", e)
        return e.error_code or errno.ENODEV


# ---------------------------------------------------------------------- cmatose's and udaddy's options
class Options:
    def __init__(self, port: str):
        self.connections = 1
        self.message_size = 100
        self.message_count = 10
        self.port = port
        self.set_tos = False
        self.tos = 0
        self.set_timeout = False
        self.timeout = 0
        self.migrate = False
        self.dst_addr: str | None = None
        self.src_addr: str | None = None
        self.numeric = False            # RAI_NUMERICHOST
        self.af_ib = False              # -f gid: RAI_FAMILY, AF_IB
        self.port_space = None          # RDMA_PS_TCP unless -P ib (udaddy: RDMA_PS_UDP)
        self.socktype = socket.SOCK_STREAM  # rdma_getaddrinfo's for the port space (udaddy: datagram)


def common_option(o: Options, op: str, optarg: str | None) -> bool:
    """The options cmatose and udaddy read alike (``-s -b -f -c -C -S -t``)
    into ``o``; False for another (the tool's own, or getopt's '?')."""
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
    elif op == "c":
        o.connections = atoi(optarg)
    elif op == "C":
        o.message_count = atoi(optarg)
    elif op == "S":
        o.message_size = atoi(optarg)
    elif op == "t":
        o.set_tos, o.tos = True, strtoul(optarg, 0) & 0xFF
    else:
        return False
    return True


def port_space_option(o: Options, optarg: str, other: str, other_port_space: int, usual: str) -> None:
    """-P (strncasecmp on the name's length): ``other`` selects
    ``other_port_space``, ``usual`` keeps the port space, anything else is
    warned about."""
    low = optarg.lower()
    if low.startswith(other):
        o.port_space = other_port_space
    elif not low.startswith(usual):
        _err("Warning: unknown port space format\n")


# ---------------------------------------------------------------------- cmatose's and udaddy's test
class CmaNode:
    """struct cmatest_node: what cmatose's (RC) and udaddy's (UD) have alike;
    the CQs are each tool's (``cqs()``)."""

    def __init__(self, i: int):
        self.id = i
        self.cma_id = None              # pyverbs CMID
        self.connected = False
        self.pd = None
        self.mr = None

    def cqs(self) -> list:
        raise NotImplementedError


class CmaTest:
    """struct cmatest and what cmatose and udaddy do with it alike: the
    nodes, the connection counts, the CM handlers' common events, the loop
    on the event channel, the server's listen, the client's address
    resolution and main's setup and teardown.

    A tool gives its name (the prefix of its messages), its node class, the
    bytes it receives in front of each message, and the hooks that differ
    by transport: ``qp_init_attr`` (the CQs and the QP), ``prepare_node``,
    ``send_wr_factory``, ``conn_param`` / ``accept_param`` / ``accepted``,
    ``established_handler``, ``disconnected_handler``, ``get_event_failed``,
    ``polled``, and ``serve`` / ``client_test`` (each tool's data
    transfers, in its own order)."""

    name = ""                           # "cmatose", "udaddy"
    node_class = CmaNode
    recv_headroom = 0                   # received in front of each message (udaddy: the GRH)

    def __init__(self, o: Options):
        self.o = o
        self.channel = None
        self.nodes: list = []
        self.by_id: dict = {}               # id(verbs CmId) -> node: cma_id->context
        self.listen_id = None
        self.conn_index = 0
        self.connects_left = o.connections
        self.src = None                     # the rai's source address (ip, port) or None
        self.dst = None

    # ------------------------------------------------------------------ nodes
    def create_message(self, node) -> int:
        o = self.o
        if not o.message_size:
            o.message_count = 0
        if not o.message_count:
            return 0
        size = o.message_size + self.recv_headroom
        if size <= 0:                       # malloc's NULL (message_size is not 0 here)
            _out("failed message allocation\n")
            return -1
        try:
            node.mr = MR(node.pd, size, IBV_ACCESS_LOCAL_WRITE)
        except Exception:
            _out("failed to reg MR\n")
            return -1
        return 0

    def qp_init_attr(self, node):
        """The node's CQs made; the QPInitAttr, or the error (an int) after
        the tool's message."""
        raise NotImplementedError

    def init_node(self, node) -> int:
        try:
            # the ID's PD (rdma_create_qp with the library's PD for the ID;
            # the tools allocate one per node: one per node here too)
            node.pd = node.cma_id.pd
        except Exception:
            node.pd = None
        if node.pd is None:
            _out(f"{self.name}: unable to allocate PD\n")
            return -errno.ENOMEM
        init = self.qp_init_attr(node)
        if isinstance(init, int):
            return init
        try:
            node.cma_id.create_qp(init)
        except Exception as e:
            perror(f"{self.name}: unable to create QP", e)
            return -1
        ret = self.create_message(node)
        if ret:
            _out(f"{self.name}: failed to create messages: {ret}\n")
        return ret

    def prepare_node(self, node) -> int:
        """What both sides do to a node before posting its receives."""
        return self.init_node(node)

    def post_recvs(self, node) -> int:
        o = self.o
        if not o.message_count:
            return 0
        for _ in range(o.message_count):
            try:
                node.cma_id.qp.post_recv(RecvWR(node.id, 1, [SGE(node.mr.buf, o.message_size + self.recv_headroom,
                                                                   node.mr.lkey)]))
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post receives: {ret}\n")
                return ret
        return 0

    def send_wr_factory(self, node, signal_flag: int):
        """A function making the node's next send work request."""
        raise NotImplementedError

    def post_sends(self, node, signal_flag: int = 0) -> int:
        o = self.o
        if not node.connected or not o.message_count:
            return 0
        send_wr = self.send_wr_factory(node, signal_flag)
        for _ in range(o.message_count):
            try:
                node.cma_id.qp.post_send(send_wr())
            except Exception as e:
                ret = _errno_of(e)
                _out(f"failed to post sends: {ret}\n")
                return ret
        return 0

    def post_all_sends(self, signal_flag: int = 0) -> int:
        """post_sends on every node; the first error."""
        for node in self.nodes:
            ret = self.post_sends(node, signal_flag)
            if ret:
                return ret
        return 0

    def destroy_node(self, node) -> None:
        if node.cma_id is None:
            return
        # rdma_destroy_qp, the CQs, the MR, then the ID (its PD with it)
        cid = node.cma_id
        try:
            if cid.id is not None:
                cid.id.destroy_qp()
        except Exception:
            pass
        for obj in (*node.cqs(), node.mr):
            _close(obj)
        _close(cid)
        node.cma_id = None

    def alloc_nodes(self) -> int:
        if self.o.connections < 0:
            _out(f"{self.name}: unable to allocate memory for test nodes\n")
            return -errno.ENOMEM
        self.nodes = [self.node_class(i) for i in range(self.o.connections)]
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

    # ------------------------------------------------------------------ CM handlers
    def connect_error(self) -> None:
        self.connects_left -= 1

    def set_option(self, cma_id, option: int, value: int, what: str) -> None:
        try:
            cma_id.set_option(RDMA_OPTION_ID, option, value, 1)
        except Exception as e:
            perror(f"{self.name}: set {what} option failed", e)

    def set_ack_timeout(self, cma_id) -> None:
        """-a (cmatose's only: udaddy never sets ``set_timeout``)."""
        if self.o.set_timeout:
            self.set_option(cma_id, RDMA_OPTION_ID_ACK_TIMEOUT, self.o.timeout, "ack timeout")

    def addr_handler(self, node) -> int:
        if self.o.set_tos:
            self.set_option(node.cma_id, RDMA_OPTION_ID_TOS, self.o.tos, "TOS")
        self.set_ack_timeout(node.cma_id)
        try:
            node.cma_id.resolve_route(2000)
        except Exception as e:
            perror(f"{self.name}: resolve route failed", e)
            self.connect_error()
            return -1
        return 0

    def conn_param(self):
        """rdma_connect's parameters."""
        raise NotImplementedError

    def route_handler(self, node) -> int:
        ret = self.prepare_node(node)
        if not ret:
            ret = self.post_recvs(node)
        if not ret:
            try:
                node.cma_id.connect(self.conn_param())
            except Exception as e:
                perror(f"{self.name}: failure connecting", e)
                ret = -1
        if ret:
            self.connect_error()
        return ret

    def accept_param(self, cma_id):
        """rdma_accept's parameters (None: the library's)."""
        return None

    def accepted(self, node) -> None:
        """After rdma_accept (UD: the node is connected now)."""

    def connect_handler(self, ev) -> int:
        cma_id = CMID(creator=ev, listen_id=self.listen_id)
        if self.conn_index == self.o.connections:
            ret = -errno.ENOMEM
        else:
            node = self.nodes[self.conn_index]
            self.conn_index += 1
            node.cma_id = cma_id
            self.by_id[id(cma_id.id)] = node
            ret = self.prepare_node(node)
            if not ret:
                self.set_ack_timeout(cma_id)
            if not ret:
                ret = self.post_recvs(node)
            if not ret:
                try:
                    cma_id.accept(self.accept_param(cma_id))
                    self.accepted(node)
                    return 0
                except Exception as e:
                    perror(f"{self.name}: failure accepting", e)
                    ret = -1
            # err2: the node forgets the ID (its resources stay, as the tools')
            node.cma_id = None
            self.by_id.pop(id(cma_id.id), None)
            self.connect_error()
        _out(f"{self.name}: failing connection request\n")
        try:
            cma_id.reject()
        except Exception:
            pass
        return ret

    def established_handler(self, node, ev) -> int:
        raise NotImplementedError

    def disconnected_handler(self, node) -> int:
        """RDMA_CM_EVENT_DISCONNECTED: ignored (UD has none)."""
        return 0

    def event_error(self, ev) -> int:
        """An error event: its line, one connection less, its status."""
        _out(f"{self.name}: event: {ev.event_str()}, error: {ev.status}\n")
        self.connect_error()
        return ev.status

    def cma_handler(self, ev) -> int:
        t = ev.event_type
        node = self.by_id.get(id(ev.event.id))
        if t == E.RDMA_CM_EVENT_ADDR_RESOLVED:
            return self.addr_handler(node)
        if t == E.RDMA_CM_EVENT_ROUTE_RESOLVED:
            return self.route_handler(node)
        if t == E.RDMA_CM_EVENT_CONNECT_REQUEST:
            return self.connect_handler(ev)
        if t == E.RDMA_CM_EVENT_ESTABLISHED:
            return self.established_handler(node, ev)
        if t in (E.RDMA_CM_EVENT_ADDR_ERROR, E.RDMA_CM_EVENT_ROUTE_ERROR, E.RDMA_CM_EVENT_CONNECT_ERROR,
                 E.RDMA_CM_EVENT_UNREACHABLE, E.RDMA_CM_EVENT_REJECTED):
            return self.event_error(ev)
        if t == E.RDMA_CM_EVENT_DISCONNECTED:
            return self.disconnected_handler(node)
        return 0                        # DEVICE_REMOVAL: cleanup after the test; the rest ignored

    # ------------------------------------------------------------------ the event channel
    def get_event_failed(self, e: BaseException, where: str) -> int:
        """rdma_get_cm_event failed: the loop's status."""
        return perror(f"{self.name}: failure in rdma_get_cm_event in {where} events", e)

    def events(self, left, where: str) -> int:
        """Handle events while ``left()`` and no handler failed."""
        ret = 0
        while left() and not ret:
            try:
                ev = CMEvent(self.channel)
            except Exception as e:
                return self.get_event_failed(e, where)
            ret = self.cma_handler(ev)
            ev.ack_cm_event()
        return ret

    def connect_events(self) -> int:
        return self.events(lambda: self.connects_left, "connect")

    # ------------------------------------------------------------------ completions
    def polled(self, node, n: int, wcs) -> None:
        """After a poll of ``n`` completions (udaddy: the reply's address)."""

    def poll_cqs(self, index: int = 0) -> int:
        for node in self.nodes:
            if not node.connected:
                continue
            done = 0
            while done < self.o.message_count:
                try:
                    n, wcs = node.cqs()[index].poll(8)
                except Exception as e:
                    ret = -_errno_of(e)
                    _out(f"{self.name}: failed polling CQ: {ret}\n")
                    return ret
                self.polled(node, n, wcs)
                done += n
        return 0

    # ------------------------------------------------------------------ server and client
    def serve(self, listen_id) -> int:
        """The server's test, once it listens."""
        raise NotImplementedError

    def run_server(self) -> int:
        o = self.o
        _out(f"{self.name}: starting server\n")
        try:
            listen_id = CMID(creator=self.channel, port_space=o.port_space)
        except Exception as e:
            perror(f"{self.name}: listen request failed", e)
            return -1
        self.listen_id = listen_id
        try:
            try:
                self.src = getaddrinfo(o.src_addr, o.port, o, True)
            except GaiError as e:
                _out(f"{self.name}: getrdmaaddr error: {e.text}\n")
                return e.code
            try:
                listen_id.bind_addr(AddrInfo(src=self.src[0], src_service=str(self.src[1]), port_space=o.port_space,
                                             **ai_hints(o, RAI_PASSIVE)))
            except Exception as e:
                perror(f"{self.name}: bind address failed", e)
                return -1
            try:
                listen_id.listen(0)
            except Exception as e:
                perror(f"{self.name}: failure trying to listen", e)
                return -1
            return self.serve(listen_id)
        finally:
            _close(listen_id)

    def client_test(self) -> int:
        """The client's test, once every node resolves its address."""
        raise NotImplementedError

    def run_client(self) -> int:
        o = self.o
        _out(f"{self.name}: starting client\n")
        try:
            if o.src_addr is not None:
                self.src = getaddrinfo(o.src_addr, None, o, True)
            self.dst = getaddrinfo(o.dst_addr, o.port, o, False)
        except GaiError as e:
            _out(f"{self.name}: getaddrinfo error: {e.text}\n")
            return e.code
        _out(f"{self.name}: connecting\n")
        for node in self.nodes:
            try:
                node.cma_id.resolve_addr(AddrInfo(src=self.src[0] if self.src else None, dst=self.dst[0],
                                                  dst_service=str(self.dst[1]), port_space=o.port_space,
                                                  **ai_hints(o)), 2000)
            except Exception as e:
                perror(f"{self.name}: failure getting addr", e)
                self.connect_error()
                return -1
        return self.client_test()

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        """main() after the options: the test's status."""
        channel = create_first_event_channel()
        if isinstance(channel, int):
            return 1
        self.channel = channel
        try:
            if self.alloc_nodes():
                return 1
            ret = self.run_client() if self.o.dst_addr is not None else self.run_server()
            _out("test complete\n")
            self.destroy_nodes()
            _close(self.channel)
            self.channel = None
            _out(f"return status {ret}\n")
            return ret
        finally:
            if self.channel is not None:
                self.destroy_nodes()
                _close(self.channel)


def main(argv: list[str] | None, prog: str, parse, test_class) -> int:
    """cmatose's and udaddy's main(): ``parse`` the options (an int: the
    exit status), run the test; its status as an exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    o = parse(argv, prog)
    if isinstance(o, int):
        return o
    try:
        return test_class(o).run() & 0xFF
    finally:
        sys.stdout.flush()
