"""The ibsim client: what libumad2sim does for opensm and the diags, a umad port over ibsim.

``IbsimPort`` speaks ibsim's client protocol (softrdma.wire.ibsim): it binds
``@<base>:ctl<pid>`` and ``@<base>:in<pid>`` (abstract AF_UNIX names with the
trailing NUL), sends CONNECT with issm set to ``@<base>:ctl`` (so ibsim
hands it unsolicited QP0 MADs, as to an SM), and exchanges one
``sim_request`` datagram per MAD with ``@<base>:out<client index>``.  With
``IBSIM_SERVER_NAME``/``IBSIM_SERVER_PORT`` set it uses ibsim's UDP remote
mode instead (ctl on PORT, data on PORT+1+index).  ``IBSIM_SOCKNAME`` and
``SIM_HOST`` mean what they mean to umad2sim.  Works against the real ibsim
and against ``softrdma fabric serve``.  The requests, their TIDs, timers and
retries are the users' ``agent.MadAgent``'s; this module only moves datagrams.
"""

from __future__ import annotations

import os
import select
import socket
import struct

from ..wire import ibsim
from ..wire.errors import WireError

QP0 = 0


class TransportError(Exception):
    pass


class IbsimPort:
    def __init__(self, sockname: str | None = None, node: str | None = None, issm: bool = True,
                 server: str | None = None, server_port: int | None = None, timeout: float = 3.0,
                 set_issm: bool | None = None):
        env = os.environ
        self.base = sockname or env.get("IBSIM_SOCKNAME") or ibsim.SIM_BASENAME
        self.node = node if node is not None else env.get("SIM_HOST", "")
        server = server or env.get("IBSIM_SERVER_NAME")
        self.remote = bool(server)
        pid = os.getpid()
        try:
            if self.remote:
                port = int(server_port or env.get("IBSIM_SERVER_PORT") or ibsim.IBSIM_DEFAULT_SERVER_PORT)
                self.ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.ctl.bind(("", 0))
                self.ctl.connect((server, port))
                self.data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.data.bind(("", 0))
                me = self.data.getsockname()[1]
            else:
                self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self.ctl.bind(ibsim.abstract_name(self.base, f"ctl{pid}"))
                self.ctl.connect(ibsim.abstract_name(self.base, "ctl"))
                self.data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self.data.bind(ibsim.abstract_name(self.base, f"in{pid}"))
                me = pid
        except OSError as e:
            where = f"{server}" if self.remote else f"@{self.base}:ctl"
            raise TransportError(f"cannot reach the ibsim server at {where}: {e.strerror or e}") from None
        self.ctl.settimeout(timeout)
        reply = self.control(ibsim.SimCtlType.CONNECT,
                          ibsim.build_client_info(me, 0, 1 if issm else 0, self.node))
        info = ibsim.parse_client_info(reply.data)
        self.client = info.id
        self.attached = info.nodeid
        if issm if set_issm is None else set_issm:
            self.set_issm()
        if self.remote:
            self.data.connect((server, port + 1 + self.client))
        else:
            self.data.connect(ibsim.abstract_name(self.base, f"out{self.client}"))
        self.data.setblocking(False)

    def set_issm(self) -> None:
        """What opening /dev/infiniband/issm* does: the port's CapabilityMask gets IsSM,
        so that other SMs find this one (CONNECT's issm only routes QP0 MADs here).
        The server tells the master SM at once (trap 144), and it asks this SM's SMInfo."""
        self.control(ibsim.SimCtlType.SET_ISSM, struct.pack("<i", 1))

    def control(self, type_: int, data=b"") -> ibsim.SimCtl:
        """One control request (CONNECT, GET_PORTINFO, ...) and its answer."""
        try:
            self.ctl.send(ibsim.build_ctl(type_, data, getattr(self, "client", 0)))
            while True:
                reply = ibsim.parse_ctl(self.ctl.recv(4096))
                # the server answers with the request's type (or ERROR); anything else is
                # a late answer meant for an earlier client of this pid (same ctl<pid> name)
                if reply.type in (type_, ibsim.SimCtlType.ERROR):
                    break
        except (OSError, WireError) as e:
            raise TransportError(f"ibsim control request {ibsim.SimCtlType(type_).name} failed: {e}") from None
        if reply.type == ibsim.SimCtlType.ERROR:
            raise TransportError(f"ibsim refused {ibsim.SimCtlType(type_).name}"
                                 + (" (an SM is already attached to that node?)"
                                    if type_ == ibsim.SimCtlType.CONNECT else ""))
        return reply

    def fileno(self) -> int:
        return self.data.fileno()

    def send(self, mad: bytes, dlid: int = 0xFFFF, dqp: int = QP0, sqp: int = QP0,
             length: int | None = None, *, slid: int | None = None, block: float = 1.0) -> None:
        """One MAD to ``dlid``/``dqp`` from our ``sqp``; ``block``: how long to
        wait for room in a full socket buffer."""
        # a directed-route SMP leaves with the permissive SLID as well (umad2sim does so):
        # with SLID 0 ibsim would LID-route the answer to the SM port, LID 0 before the sweep
        if slid is None:
            slid = 0xFFFF if dlid == 0xFFFF else 0
        dgram = ibsim.build_request(dlid, slid, dqp, sqp, mad, 0, length)
        try:
            self.data.send(dgram)
        except BlockingIOError:
            select.select([], [self.data], [], block)
            self.data.send(dgram)

    def wait(self, timeout: float | None) -> bool:
        """True when a datagram is waiting (within ``timeout`` seconds; None: until one is)."""
        return bool(select.select([self.data], [], [], None if timeout is None else max(0.0, timeout))[0])

    def recv_all(self) -> list[ibsim.SimRequest]:
        """Every datagram waiting (status, SLID and source QP say where it came from)."""
        out = []
        while True:
            try:
                buf = self.data.recv(4096)
            except (BlockingIOError, InterruptedError):
                return out
            try:
                req = ibsim.parse_request(buf)
            except WireError:
                continue
            out.append(req._replace(mad=req.mad[:256]))

    def close(self) -> None:
        # wait for the answer, as umad2sim does: a client of this process that
        # binds ctl<pid> next would otherwise read it as the answer to its CONNECT
        try:
            self.ctl.settimeout(0.5)
            self.control(ibsim.SimCtlType.DISCONNECT)
        except TransportError:
            pass
        self.ctl.close()
        self.data.close()

