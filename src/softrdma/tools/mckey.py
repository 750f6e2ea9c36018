"""mckey, as rdma-core's librdmacm/examples/mckey.c has it.

What a user sees is the real tool's:

* the options (``getopt(argc, argv, "m:M:sb:c:C:S:p:")``, glibc's
  diagnostics, then the usage text on stdout and exit 1): ``-m`` a
  multicast IP address (resolved through rdma_resolve_addr), ``-M`` an
  unmapped one -- a GID, rdma_cm's AF_IB (struct sockaddr_ib) -- which
  needs ``-b``, ``-s`` sender, ``-c`` IDs, ``-C`` messages, ``-S`` their
  size, ``-p`` the port space;
* the test: each ID (port space UDP) joins the group; the receiver posts
  ``-C`` receives of ``-S`` + 40 (GRH) bytes first and waits for them; the
  sender makes its address handle from the MULTICAST_JOIN event's (the
  MLID, SL and the GRH to the MGID on InfiniBand) and SENDs (with
  immediate: its QPN) ``-C`` unsignaled messages after the 3 s pause mckey
  gives the SM to program the switches; then every ID leaves the group;
* the messages and ``return status %d`` (main's ``ret``, the exit status).

``-b`` is an IP address, as the real tool reads it (getaddrinfo).  With
``-M`` on a host whose IB port has no IP address (no IPoIB), ``-b`` may
be the port's GID: the ID is then bound by GID (AF_IB), which is what an
IP address of the port would have bound it to.

One thread: the real tool's thread that prints MULTICAST_ERROR and
ADDR_CHANGE events after the joins is not there (events after the joins
are not read).  It uses only ``softrdma.pyverbs``.
"""

from __future__ import annotations

import errno
import socket
import sys
import time

from ..pyverbs import librdmacm_enums as E
from ..pyverbs.cmid import AddrInfo, UDParam
from ..pyverbs.librdmacm_enums import RAI_FAMILY, RAI_NUMERICHOST
from ..verbs.cm import AF_IB
from . import cma_common
from .cma_common import Getopt, Options, _errno_of, _out, common_option, perror
from .libc import strtol
from .udaddy import UdAddy

OPTSTRING = "m:M:sb:c:C:S:p:"
RDMA_PS_UDP, RDMA_PS_IPOIB = 0x0111, 0x0002
SM_PAUSE_S = 3                  # "Pause to give SM chance to configure switches"


def usage(prog: str) -> str:
    return (f"usage: {prog}\n"
            "\t-m multicast_address\n"
            "\t[-M unmapped_multicast_address]\n"
            "\t replaces -m and requires -b\n"
            "\t[-s(ender)]\n"
            "\t[-b bind_address]\n"
            "\t[-c connections]\n"
            "\t[-C message_count]\n"
            "\t[-S message_size]\n"
            f"\t[-p port_space - {RDMA_PS_UDP:#x} for UDP (default), {RDMA_PS_IPOIB:#x} for IPOIB]\n")


class McKey(UdAddy):
    """udaddy's nodes, QPs and sends; mckey's joins and test."""

    name = "mckey"

    def __init__(self, o: Options):
        super().__init__(o)
        self.is_sender = o.is_sender
        self.unmapped = o.unmapped
        self.group: str | None = None       # the multicast address as rdma_join_multicast takes it

    # ------------------------------------------------------------------ nodes
    def polled(self, node, n: int, wcs) -> None:
        """(udaddy's reply address: mckey never replies)"""

    def alloc_nodes(self) -> int:
        self.o.dst_addr = self.o.dst_addr or ""     # mckey makes its IDs whatever the options
        return super().alloc_nodes()

    # ------------------------------------------------------------------ CM handlers
    def addr_handler(self, node) -> int:
        ret = self.verify_test_params(node)
        if not ret:
            ret = self.init_node(node)
        if not ret and not self.is_sender:
            ret = self.post_recvs(node)
        if not ret:
            try:
                node.cma_id.join_multicast(self.group)
            except Exception as e:
                perror("mckey: failure joining", e)
                ret = -1
        if ret:
            self.connect_error()
        return ret

    def join_handler(self, node, ev) -> int:
        """The group's line, then udaddy's: the QPN, Q_Key and address handle of the event."""
        a = UDParam(ev).ah_attr
        _out(f"mckey: joined dgid: {socket.inet_ntop(socket.AF_INET6, a.gr.dgid.raw)} mlid 0x{a.dlid:x} "
             f"sl {a.sl}\n")
        return self.established_handler(node, ev)

    def cma_handler(self, ev) -> int:
        t = ev.event_type
        node = self.by_id.get(id(ev.event.id))
        if t == E.RDMA_CM_EVENT_ADDR_RESOLVED:
            return self.addr_handler(node)
        if t == E.RDMA_CM_EVENT_MULTICAST_JOIN:
            return self.join_handler(node, ev)
        if t in (E.RDMA_CM_EVENT_ADDR_ERROR, E.RDMA_CM_EVENT_ROUTE_ERROR, E.RDMA_CM_EVENT_MULTICAST_ERROR):
            return self.event_error(ev)
        return 0

    def get_event_failed(self, e: BaseException, where: str) -> int:
        return -1

    # ------------------------------------------------------------------ the test
    def bind(self, node, src: str) -> None:
        """rdma_bind_addr of -b; with -M, a GID of the host's IB port when the
        address is no IP address of the host (see the module)."""
        try:
            node.cma_id.bind_addr(AddrInfo(src=src, src_service="0", port_space=self.o.port_space,
                                           flags=RAI_NUMERICHOST))
        except Exception as e:
            if not self.unmapped or _errno_of(e) not in (errno.EADDRNOTAVAIL, errno.ENODEV):
                raise
            try:
                node.cma_id.bind_addr(AddrInfo(src=src, src_service="0", port_space=self.o.port_space,
                                               flags=RAI_FAMILY | RAI_NUMERICHOST, family=AF_IB))
            except Exception:
                raise e from None

    def run_test(self) -> int:
        o = self.o
        _out(f"mckey: starting {'client' if self.is_sender else 'server'}\n")
        src = None
        if o.src_addr is not None:
            src = _get_addr(o.src_addr)
            if isinstance(src, int):
                return src
        if self.unmapped:
            try:
                self.group = str(socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6,
                                                                                     o.dst_addr)))
            except OSError:
                self.group = "::"                   # inet_pton's failure leaves sib_addr zero
        else:
            dst = _get_addr(o.dst_addr)
            if isinstance(dst, int):
                return dst
            self.group = dst
        _out("mckey: joining\n")
        for node in self.nodes:
            if src is not None:
                try:
                    self.bind(node, src)
                except Exception as e:
                    ret = perror("mckey: addr bind failure", e)
                    self.connect_error()
                    return -ret
            try:
                if self.unmapped:
                    ret = self.addr_handler(node)
                    if ret:
                        raise OSError(errno.EINVAL, "join")
                else:
                    node.cma_id.resolve_addr(AddrInfo(src=src, dst=self.group, dst_service="0",
                                                      port_space=o.port_space, flags=RAI_NUMERICHOST), 2000)
            except Exception as e:
                perror("mckey: resolve addr failure", e)
                self.connect_error()
                return -1
        ret = self.connect_events()
        if not ret:
            time.sleep(SM_PAUSE_S)
            if o.message_count:
                if self.is_sender:
                    _out("initiating data transfers\n")
                    ret = self.post_all_sends(0)
                else:
                    _out("receiving data transfers\n")
                    ret = self.poll_cqs()
                if not ret:
                    _out("data transfers complete\n")
        for node in self.nodes:
            try:
                node.cma_id.leave_multicast(self.group)
                ret = 0
            except Exception as e:
                perror("mckey: failure leaving", e)
                ret = -1
        return ret

    def run_client(self) -> int:
        return self.run_test()


def _get_addr(name: str) -> str | int:
    """get_addr: getaddrinfo(dst, NULL, NULL): the address, or the EAI code after the message."""
    try:
        res = socket.getaddrinfo(name, None)
    except socket.gaierror as e:
        _out(f"getaddrinfo failed ({e.strerror}) - invalid hostname or IP address\n")
        return e.errno
    except UnicodeError:
        _out("getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n")
        return socket.EAI_NONAME
    return res[0][4][0]


def parse(argv: list[str], prog: str) -> Options | int:
    o = Options("0")
    o.port_space = RDMA_PS_UDP
    o.socktype = socket.SOCK_DGRAM
    o.is_sender = False
    o.unmapped = False
    for op, optarg in Getopt(argv, prog, OPTSTRING):
        if op in ("m", "M"):                            # -M: a GID (AF_IB), "unmapped"
            o.unmapped, o.dst_addr = op == "M", optarg
        elif op == "s":                                 # (a flag here: the sender)
            o.is_sender = True
        elif op == "p":
            o.port_space = strtol(optarg, 0) & 0xFFFFFFFF
        elif op == "?" or not common_option(o, op, optarg):     # -b -c -C -S
            _out(usage(prog))
            return 1
    if o.unmapped and o.src_addr is None:
        _out("unmapped multicast address requires binding to source address\n")
        return 1
    return o


def main(argv: list[str] | None = None, prog: str = "mckey") -> int:
    return cma_common.main(argv, prog, parse, McKey)


if __name__ == "__main__":
    sys.exit(main())
