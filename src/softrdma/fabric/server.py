"""``softrdma fabric serve``: the fabric behind ibsim's client protocol.

Owns the sockets and the client table.  Speaks exactly what umad2sim
(Debian's libumad2sim.so, LD_PRELOADed into opensm and the diags) speaks
to ibsim: AF_UNIX datagrams in the abstract namespace, ``@<base>:ctl``
for control and ``@<base>:out<n>`` per client, names *with* the trailing
NUL; or, with ``-r``, UDP on ``<host>:<port>`` and ``<port>+n+1`` (bound to
127.0.0.1 unless told otherwise).  Control requests are answered with the
same 80-byte struct (type ERROR on failure); each MAD is one 288-byte
``sim_request``.  As ibsim: requests get the client index in TID bits
48..63 and responses find their client by it, unsolicited QP0/QP1 MADs go
to the client with issm set on the port, QP>1 is matched by qp, and a
dropped MAD comes back to its sender with status ETIMEDOUT.

Unlike ibsim: any number of clients (out sockets are made on demand); a
client whose socket is gone (killed without DISCONNECT) loses its slot
on the first failed send or at the next liveness check, which looks for
its ``@<base>:in<pid>`` socket in /proc/net/unix; link events come from
``softrdma fabric link ...`` over a control socket ``@<base>:softrdma``
as well as from ibsim's console commands on stdin.  All fabric behaviour
is route.Router's: this module only moves bytes.  InfiniBand device
ports of softrdma daemons attach to CA ports through the data socket
(datasock.DataSocket, polled by this loop).

A CA port that a device holds is shared with the ibsim clients attached
to that CA (``SIM_HOST`` naming it), as an HCA's umad is shared by the
host's processes: a client's responses reach it by the TIDs it sent
(``Client.pending``), the unsolicited MADs an SM takes -- QP0's SMPs and
the SA's requests -- go to the client with issm, and every other MAD at
the port (the device's own responses, the CM, ibping, ...) to the device.
A client with issm is refused at a port whose device holds IsSM (one SM
per port), as a second one is.
"""

from __future__ import annotations

import errno
import os
import select
import selectors
import signal
import socket
import struct
import sys
import threading
import time

from ..wire import ibsim
from ..wire.errors import WireError
from ..wire.ibsim import SimCtlType
from . import agents, model
from .commands import CONTROL_NAME, Commands
from .model import Fabric, FabricError
from .datasock import DataSocket
from .route import Router

try:                                       # the compiled sendmmsg(2)/recvmmsg(2), where built
    from ._sendmmsg import loop as _loop, recvmmsg as _recvmmsg, sendmmsg as _sendmmsg, serve as _serve
except ImportError:                        # pragma: no cover - no C compiler at install
    _loop = _recvmmsg = _sendmmsg = _serve = None

LIVENESS_INTERVAL = 1.0
DEFAULT_SPIN_US = 50                 # the loop polls this long after its last work before it sleeps
SEND_TIMEOUT = 1.0
BATCH = 64                           # datagrams read from one client per wakeup
_SMP_CLASSES = (0x01, 0x81)          # LID-routed and directed-route SMPs
_SIM_REQUEST = ibsim.SIM_REQUEST
_SIM_REQUEST_SIZE = ibsim.SIM_REQUEST_SIZE
SUBN_ADM = 0x03                       # the SA's class: its requests go to the port's SM
PENDING_MAX = 4096                    # TIDs remembered per client at a device's port


class _Poller:
    """The loop's epoll: ``selectors``' register/unregister (what the data socket
    uses too), with a ``poll`` that hands back (file, callback) pairs straight from
    one dict -- the selector's per-event key objects cost the MAD path a few
    microseconds per wakeup."""

    def __init__(self):
        self.ep = select.epoll()
        self.map: dict[int, tuple] = {}        # fd -> (file object, callback)

    @staticmethod
    def _fd(f) -> int:
        return f if isinstance(f, int) else f.fileno()

    def register(self, f, events, data) -> None:
        fd = self._fd(f)
        if fd < 0 or fd in self.map:
            raise (ValueError if fd < 0 else KeyError)(f"cannot register {f!r}")
        self.ep.register(fd, select.EPOLLIN)
        self.map[fd] = (f, data)

    def unregister(self, f) -> None:
        fd = self._fd(f)
        if fd < 0:                             # closed already: find it by the object
            fd = next((k for k, (o, _) in self.map.items() if o is f), -1)
        del self.map[fd]                       # KeyError: not registered (as selectors)
        try:
            self.ep.unregister(fd)
        except OSError:
            pass

    def poll(self, timeout: float) -> list:
        m = self.map
        return [m[fd] for fd, _ in self.ep.poll(timeout) if fd in m]

    def close(self) -> None:
        self.ep.close()


class Client:
    __slots__ = ("idx", "pid", "port", "qp", "issm", "sock", "addr", "congested", "tid_top", "pending",
                 "handler")

    def __init__(self, idx, pid, port, qp, issm, sock, addr):
        self.idx, self.pid, self.port, self.qp, self.issm = idx, pid, port, qp, issm
        self.tid_top = (idx & 0xFFFF).to_bytes(2, "big")    # a request's TID bits 48..63 (ibsim)
        self.sock, self.addr = sock, addr
        self.congested = False     # its queue stayed full: drop, do not wait, until it reads
        self.pending: dict = {}    # at a device's port: the TIDs of its requests (theirs the responses)
        self.handler = None        # its requests' compiled path (Router.fast_handler), once used


class Server(Commands):
    def __init__(self, fabric: Fabric, base: str = ibsim.SIM_BASENAME, *, remote: bool = False,
                 host: str = "127.0.0.1", port: int = ibsim.IBSIM_DEFAULT_SERVER_PORT,
                 verbose: int = 0, out=sys.stderr, console=None, seed: int = 0,
                 data_socket: "bool | str" = True, spin_us: int = DEFAULT_SPIN_US):
        self.fabric = fabric
        self.spin_s = spin_us / 1e6
        self.base = base
        self.remote = remote
        self.host = host
        self.udp_port = port
        self.verbose = verbose
        self.out = out
        self.router = Router(fabric, seed=seed, log=self._log_drop if verbose else None)
        self.clients: dict[int, Client] = {}
        self.sel = _Poller()
        self.running = False
        self.console = console
        self.stats = {"mads": 0, "ctl": 0, "bad": 0, "dropped": 0, "released": 0, "batched": 0}
        self._out = None                   # answers of the batch being handled (_on_data)
        self.recvmmsg = _recvmmsg          # None: one recv per request (the reference path)
        self._answered: dict[int, int] = {}    # fd -> requests the compiled loop answered
        self._next_liveness = 0.0
        self._open()
        self.datasock = None
        if data_socket:
            self.datasock = DataSocket(self, data_socket if isinstance(data_socket, str) else None)

    # --- sockets -----------------------------------------------------------------------------
    def _name(self, what: str):
        return ibsim.abstract_name(self.base, what)

    def _sock(self):
        s = socket.socket(socket.AF_INET if self.remote else socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        return s

    def _open(self):
        self.ctl = self._sock()
        try:
            self.ctl.bind((self.host, self.udp_port) if self.remote else self._name("ctl"))
        except OSError as e:
            self.ctl.close()
            where = f"{self.host}:{self.udp_port}" if self.remote else f"@{self.base}:ctl"
            raise FabricError(f"cannot bind {where}: {e.strerror} (another server running?)") \
                from None
        self.ctl.setblocking(False)
        self.sel.register(self.ctl, selectors.EVENT_READ, self._on_ctl)
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.control.bind(self._name(CONTROL_NAME))
        except OSError as e:
            raise FabricError(f"cannot bind @{self.base}:{CONTROL_NAME}: {e.strerror}") from None
        self.control.setblocking(False)
        self.sel.register(self.control, selectors.EVENT_READ, self._on_control)
        self.pending_commands = []
        if self.console is not None:
            try:
                self.sel.register(self.console, selectors.EVENT_READ, self._on_console)
                os.set_blocking(self.console.fileno(), False)
            except PermissionError:
                # a regular file or /dev/null (epoll refuses those): its commands, once
                self.pending_commands = [("stdin", ln) for ln in self.console.read().splitlines()
                                         if ln.strip()]

    def _out_socket(self, idx: int) -> socket.socket:
        s = self._sock()
        s.bind((self.host, self.udp_port + idx + 1) if self.remote else self._name(f"out{idx}"))
        # non-blocking: a socket with a timeout would make Python wait for
        # readability before every recv, MSG_DONTWAIT or not
        s.setblocking(False)
        return s

    def close(self):
        for c in list(self.clients.values()):
            self._release(c, "server exit")
        if self.datasock is not None:
            self.datasock.close()
        for s in (self.ctl, self.control):
            try:
                self.sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()
        self.sel.close()

    # --- logging -------------------------------------------------------------------------------
    def log(self, msg: str):
        if self.verbose > 1:
            msg = f"{time.time():.3f} {msg}"
        print(msg, file=self.out, flush=True)

    def _log_drop(self, msg: str):
        self.log(f"fabric: {msg}")

    # --- the loop --------------------------------------------------------------------------------
    def serve_forever(self):
        self.running = True
        for _, line in self.pending_commands:
            self.log(self.command(line))
        # a signal wakes the loop through a socket (signal.set_wakeup_fd): one that
        # came while the compiled loop was serving would otherwise wait for its timeout
        wake = None
        if threading.current_thread() is threading.main_thread():
            wake, wake_w = socket.socketpair()
            for s in (wake, wake_w):
                s.setblocking(False)
            old = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
            self.sel.register(wake, selectors.EVENT_READ, self._drain)
        try:
            while self.running:
                self.run_once(LIVENESS_INTERVAL)
        finally:
            if wake is not None:
                signal.set_wakeup_fd(old)
                self.sel.unregister(wake)
                wake.close()
                wake_w.close()

    @staticmethod
    def _drain(sock) -> None:
        try:
            sock.recv(4096)
        except OSError:
            pass

    def run_once(self, timeout: float):
        if _loop is not None and self.recvmmsg is not None:
            self._pass_compiled(timeout)
        else:
            for fileobj, callback in self.sel.poll(timeout):
                self._call(callback, fileobj)
        if self.datasock is not None:
            self.datasock.poll()
        now = time.monotonic()
        if now >= self._next_liveness:
            self._next_liveness = now + LIVENESS_INTERVAL
            self.check_liveness()

    def _call(self, callback, *args) -> None:
        try:
            callback(*args)
        except (WireError, FabricError) as e:      # never let one datagram stop us
            self._bad_input(e)

    def _bad_input(self, e: Exception) -> None:
        self.stats["bad"] += 1
        if self.verbose:
            self.log(f"fabric: bad input: {e}")

    def _pass_compiled(self, timeout: float) -> None:
        """One pass with the wait in C (``_sendmmsg.loop``): the requests of the
        clients on the compiled path are answered there, wakeup after wakeup,
        until something needs Python -- another socket, a request the compiled
        path leaves to Python, a port a device must hear of (``fabric.dirty``),
        a signal -- or the timeout.  The Python loop cost ~15 us a wakeup: a
        client with one request in flight waited that long for each answer."""
        fast, by_fd = {}, {}
        for c in self.clients.values():
            if self._fast(c):
                fd = c.sock.fileno()
                fast[fd], by_fd[fd] = self._handler(c), c
        answered = self._answered
        try:
            events = _loop(self.sel.ep.fileno(), fast, self.fabric.dirty, answered, timeout, self.spin_s)
        except (WireError, FabricError) as e:
            events = ()
            self._bad_input(e)
        finally:
            for fd, n in answered.items():
                self.stats["mads"] += n
                by_fd[fd].congested = False    # its queue took answers again (as _transmit notes)
            answered.clear()
        m = self.sel.map
        for e in events:
            if type(e) is int:
                entry = m.get(e)
                if entry is not None:
                    self._call(entry[1], entry[0])
            else:
                c = by_fd[e[0]]
                if self.clients.get(c.idx) is not c:
                    continue
                if len(e) == 2:                # reading its socket failed: e[1] is the errno
                    if e[1] in (errno.ECONNREFUSED, errno.ENOTCONN):
                        self._release(c, "connection refused")
                else:
                    self._call(self._stopped, c, e)

    def _fast(self, c: Client) -> bool:
        """Whether client ``c``'s requests may take the compiled path: not at a
        device's port (its MADs are the device's to see) nor with every MAD logged."""
        return self.router.fast and self.verbose < 2 and \
            (self.datasock is None or c.port not in self.datasock.by_port)

    def _handler(self, c: Client):
        """Client ``c``'s compiled path (``Router.fast_handler``), made once."""
        if c.handler is None:
            c.handler = self.router.fast_handler(c.port, c.idx & 0xFFFF, c.port)
        return c.handler

    # --- control requests ----------------------------------------------------------------------
    def _on_ctl(self, sock):
        for _ in range(64):
            try:
                buf, addr = sock.recvfrom(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats["ctl"] += 1
            try:
                ctl = ibsim.parse_ctl(buf)
            except WireError as e:
                self.stats["bad"] += 1
                if self.verbose:
                    self.log(f"fabric: ctl datagram dropped: {e}")
                continue                       # ibsim answers nothing either
            reply = self._ctl(ctl, addr)
            try:
                sock.sendto(reply, addr)
            except OSError as e:
                if self.verbose:
                    self.log(f"fabric: cannot answer ctl: {e.strerror}")

    def _ctl(self, ctl, addr) -> bytes:
        t, data = ctl.type, ctl.data
        err = ibsim.build_ctl(SimCtlType.ERROR, data, ctl.clientid, ctl.len)
        if t == SimCtlType.CONNECT:
            return self._connect(ctl, addr) or err
        c = self.clients.get(ctl.clientid)
        if c is None:
            if self.verbose:
                self.log(f"fabric: ctl type {t} from unknown client {ctl.clientid}")
            return err
        p, node = c.port, c.port.node
        if t == SimCtlType.DISCONNECT:
            self._release(c, "disconnect")
            out = data
        elif t == SimCtlType.GET_PORT:
            base = node.ports[0] if node.is_switch else p
            out = ibsim.SIM_PORT.pack(base.lid, p.state)
        elif t == SimCtlType.GET_VENDOR:
            out = ibsim.build_vendor(node.vendid, node.devid, node.revision, 1)
        elif t == SimCtlType.GET_GID:
            out = struct.pack(">Q", p.gid_prefix) + struct.pack("<Q", node.guid)
        elif t == SimCtlType.GET_GUID:
            out = struct.pack("<Q", node.guid)
        elif t == SimCtlType.GET_NODEINFO:
            out = agents.node_info(node, p.num)
        elif t == SimCtlType.GET_PORTINFO:
            num = data[0]
            q = node.ports[num] if 0 < num <= node.nports else p
            out = agents.port_info(node, q, q.num)
        elif t == SimCtlType.SET_ISSM:
            issm = ibsim.parse_issm(data)
            if issm and any(o.issm and o.port.node is node and o is not c
                            for o in self.clients.values()):
                return err
            c.issm = bool(issm)
            p.has_sm = bool(issm)
            self.fabric.touch(p)                   # CapabilityMask.IsSM: for an attached device
            out = data
        elif t == SimCtlType.GET_PKEYS:
            cap = node.pkey_cap(p)
            table = p.pkeys if p.pkeys is not None else [model.DEFAULT_PKEY]
            out = ibsim.build_pkeys(list(table[:min(32, cap)]))
        else:
            if self.verbose:
                self.log(f"fabric: bad ctl type {t}")
            return err
        return ibsim.build_ctl(t, bytes(out).ljust(ibsim.SIM_CTL_MAX_DATA, b"\0"), ctl.clientid,
                               ctl.len)

    def _connect(self, ctl, addr):
        info = ibsim.parse_client_info(ctl.data)
        try:
            if info.nodeid:
                node = self.fabric.node(info.nodeid)
                port = node.ports[0] if node.is_switch else node.ports[1]
            else:
                port = self.fabric.default_port
        except FabricError as e:
            self.log(f"fabric: client pid {info.id} attempt to attach to unknown host: {e}")
            return None
        if info.issm and any(o.issm and o.port.node is port.node for o in self.clients.values()):
            self.log(f'fabric: client pid {info.id}: SM already exists on "{port.node.nodeid}"')
            return None
        held = self.datasock.by_port.get(port) if self.datasock is not None else None
        if info.issm and held is not None and held.is_sm:
            self.log(f'fabric: client pid {info.id}: SM already exists on "{port.node.nodeid}" '
                     f"(device {held.device!r})")
            return None
        idx = 0
        while idx in self.clients:
            idx += 1
        if self.remote:
            caddr = (addr[0], info.id)
        else:
            caddr = self._name(f"in{info.id}")
        try:
            s = self._out_socket(idx)
        except OSError as e:
            self.log(f"fabric: cannot open out{idx}: {e.strerror}")
            return None
        try:
            s.connect(caddr)
        except OSError as e:
            self.log(f"fabric: cannot reach client pid {info.id}: {e.strerror}")
            s.close()
            return None
        # as ibsim: CONNECT's issm only routes the unsolicited QP0/QP1 requests here;
        # the IsSM capability bit comes with SET_ISSM (a server like `ibping -S` is no SM)
        c = Client(idx, info.id, port, info.qp, bool(info.issm), s, caddr)
        self.clients[idx] = c
        self.sel.register(s, selectors.EVENT_READ, lambda sock, c=c: self._on_data(c))
        if self.verbose:
            self.log(f'fabric: client {idx} (pid {info.id}) attached at "{port.node.nodeid}" '
                     f"port {port.num}")
        reply = ibsim.build_client_info(idx, info.qp, info.issm, port.node.nodeid)
        return ibsim.build_ctl(SimCtlType.CONNECT, reply.ljust(ibsim.SIM_CTL_MAX_DATA, b"\0"),
                               ctl.clientid, ctl.len)

    def _release(self, c: Client, why: str):
        if self.clients.get(c.idx) is not c:
            return
        del self.clients[c.idx]
        if c.issm:
            c.port.has_sm = False
            self.fabric.touch(c.port)
        try:
            self.sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()          # frees out<n>: the next client with this index binds it anew
        self.stats["released"] += why != "disconnect"
        if self.verbose:
            self.log(f"fabric: client {c.idx} (pid {c.pid}) released: {why}")

    def check_liveness(self):
        """Release clients whose in-socket no longer exists (killed, no DISCONNECT)."""
        if self.remote or not self.clients:
            return
        try:
            with open("/proc/net/unix", "rb") as f:
                table = f.read()
        except OSError:
            return
        for c in list(self.clients.values()):
            if f"@{self.base}:in{c.pid}@".encode() not in table and \
                    f"@{self.base}:in{c.pid}\n".encode() not in table:
                self._release(c, "socket gone")

    # --- MADs --------------------------------------------------------------------------------------
    def _on_data(self, c: Client):
        """Every datagram the client has queued (one recvmmsg where the compiled
        helper is there), each answered as it is handled: a client with several
        requests in flight (opensm keeps 4) works on the first answer while the
        next are handled.  (Answering a whole read at its end made the two take
        turns: opensm's sweep took 10-15 % longer; the compiled path reads 8 at
        a time, sends the first answer of a read at once and the others with
        one sendmmsg.)  A plain
        directed-route SMP takes the compiled path (``Router.directed_fast``),
        inside the compiled receive loop (``_sendmmsg.serve``) where there is
        one.  The server loop does the same inside its compiled wait
        (``_pass_compiled``); this is its path for a client it hands back."""
        sock = c.sock
        fast = self._fast(c)
        stop, bufs = None, ()
        try:
            if fast and _serve is not None and self.recvmmsg is not None:
                done, stop = _serve(sock.fileno(), self._handler(c))
                self.stats["mads"] += done
                if done:
                    c.congested = False        # its queue took answers again (as _transmit notes)
            elif self.recvmmsg is not None:
                bufs = self.recvmmsg(sock.fileno(), BATCH, 1024)   # [] when none is queued
            else:
                bufs = self._recv_each(c)
        except OSError as e:
            if e.errno in (errno.ECONNREFUSED, errno.ENOTCONN):
                self._release(c, "connection refused")
        if stop is not None:
            self._stopped(c, stop)
        else:
            self._finish(c, None, bufs, fast)

    def _stopped(self, c: Client, stop) -> None:
        """Where the compiled path stopped (``_sendmmsg.serve``/``loop``): the
        answers it could not send, the request it left to Python and the rest."""
        _, buf, r, rest, unsent = stop
        self.stats["mads"] += len(unsent)
        self._finish(c, None if buf is None else (buf, r), rest, True, unsent)

    def _finish(self, c: Client, stop, bufs, fast: bool = True, unsent=()) -> None:
        """The rest of a read from client ``c``: the compiled path's answers it
        could not send (``unsent``), ``stop``, (request, what the compiled path
        returned) where it left one to Python, and the requests after it, each
        answered in turn."""
        self._out = out = []
        router = self.router
        try:
            if unsent:
                self._flush([(c, pkt, None, 0, 0, 0, 0, None) for pkt in unsent])
            if stop is not None:
                self._answer(c, stop[0], router.fast_result(c.port, stop[0], stop[1]), out)
            for buf in bufs:
                self._answer(c, buf, router.directed_fast(c.port, buf, c.idx & 0xFFFF, c.port)
                             if fast else None, out)
        finally:
            self._out = None
            if out:
                self._flush(out)

    def _answer(self, c: Client, buf: bytes, r, out: list) -> None:
        """One request of client ``c`` and what the compiled path made of it
        (``Router.directed_fast``; None: the Python path), answered now."""
        if r is None:
            self.handle_request(c, buf)
        else:
            self.stats["mads"] += 1
            ds, pkt = r
            if ds:
                self._route_fast_out(c, ds, buf)
            if pkt is not None:                # after what the compiled path left to deliver
                out.append((c, pkt, None, 0, 0, 0, 0, None))
        if out:
            self._flush(out)
            out.clear()

    def _recv_each(self, c: Client):
        """The client's queued datagrams one recv at a time (no compiled recvmmsg)."""
        for _ in range(BATCH):
            try:
                buf = c.sock.recv(1024, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.ECONNREFUSED, errno.ENOTCONN):
                    self._release(c, "connection refused")
                return
            yield buf
            if self.clients.get(c.idx) is not c:
                return

    def handle_request(self, c: Client, buf: bytes):
        if len(buf) != _SIM_REQUEST_SIZE:
            try:
                ibsim.parse_request(buf)       # raises the reason
            except WireError as e:
                self.stats["bad"] += 1
                if self.verbose:
                    self.log(f"fabric: client {c.idx}: {e}")
            return
        dlid, slid, dqp, sqp, _status, length, raw = _SIM_REQUEST.unpack(buf)
        self.stats["mads"] += 1
        mad = bytearray(raw)
        if not mad[3] & 0x80:
            mad[8:10] = c.tid_top          # ibsim.tid_with_client: the client index in bits 48..63
            if self.datasock is not None and c.port in self.datasock.by_port:
                pend = c.pending                     # (a device's responses carry TIDs of their own)
                pend[int.from_bytes(mad[8:16], "big")] = None
                if len(pend) > PENDING_MAX:
                    del pend[next(iter(pend))]
        if self.verbose > 1:
            self.log(f"fabric: client {c.idx} -> class {mad[1]:#x} method {mad[3]:#x} attr "
                     f"{int.from_bytes(mad[16:18], 'big'):#x} slid {slid} dlid {dlid} "
                     f"dqp {dqp} tid {int.from_bytes(mad[8:16], 'big'):#x}")
        self._route_out(c, self.router.inject(c.port, mad, slid, dlid, sqp, dqp), mad, dlid, slid,
                        sqp, dqp, length)

    def _route_fast_out(self, c: Client, deliveries, buf: bytes):
        """``_route_out`` for what the compiled path left to deliver (traps, an
        answer leaving at another port)."""
        dlid, slid, dqp, sqp, _status, length, raw = _SIM_REQUEST.unpack(buf)
        mad = bytearray(raw)
        mad[8:10] = c.tid_top
        self._route_out(c, deliveries, mad, dlid, slid, sqp, dqp, length)

    def _route_out(self, c: Client, deliveries, mad, dlid, slid, sqp, dqp, length):
        """What came out of the fabric for client ``c``'s request (``mad`` as it
        went in, with the header's LIDs, QPs and length), to whom it is for."""
        for d in deliveries:
            if d.dropped:
                self.stats["dropped"] += 1
                self._send(c, d.mad, d.dlid, d.slid, d.qp, d.sqp, d.status, None)
                continue
            to = self._find(d)
            if to is None and self.datasock is not None and self.datasock.deliver_mad(d):
                continue                             # for an attached IB device
            if to is None:
                if d.spontaneous:
                    continue                         # a trap with no SM listening: lost
                self.stats["dropped"] += 1
                if self.verbose:
                    self.log(f"fabric: nobody listens on {d.port.name} qp {d.qp}: "
                             f"class {d.mad[1]:#x} attr {int.from_bytes(d.mad[16:18], 'big'):#x}")
                self._send(c, mad, dlid, slid, sqp, dqp, ibsim.ETIMEDOUT, None)
                continue
            if self.verbose > 1:
                self.log(f"fabric:   -> client {to.idx} at {d.port.name} qp {d.qp}")
            # a MAD forwarded between clients keeps the length its sender gave (an SA's
            # first RMPP segment says how much of it a reader without RMPP should take)
            fwd = d.mad[1] not in _SMP_CLASSES and d.mad[3] == mad[3] and 0 < length < 256
            self._send(to, d.mad, d.slid, d.dlid, d.sqp, d.qp, 0, c, length if fwd else 256)

    def _find(self, d) -> Client | None:
        """The client a delivery is for; None: the device at the port, if any
        (see the module: how a device's port is shared)."""
        port = d.port
        held = self.datasock is not None and port in self.datasock.by_port
        resp = d.mad[3] & 0x80
        if resp:
            idx = int.from_bytes(d.mad[8:10], "big")
            c = self.clients.get(idx)
            if c is not None and c.port is port and (not held or int.from_bytes(d.mad[8:16], "big") in c.pending):
                return c
            if held:
                return None
        for c in self.clients.values():
            if c.port is not port:
                continue
            if d.qp > 1:
                if c.qp == d.qp:
                    return c
            elif not resp and c.issm and (not held or d.qp == 0 or d.mad[1] == SUBN_ADM):
                return c
        return None

    def _send(self, to: Client, mad, slid, dlid, sqp, dqp, status, sender, length=256):
        """One sim_request to ``to``: slid/dlid as the receiver sees them
        (umad2sim takes the peer's LID from slid), dqp = its QP.  Inside a
        batch (``_on_data``) it is queued for ``_flush``."""
        pkt = ibsim.build_request(dlid, slid, dqp, sqp, mad, status, length)
        if self._out is not None:
            self._out.append((to, pkt, mad, slid, dlid, sqp, dqp, sender))
            return True
        return self._transmit(to, pkt, mad, slid, dlid, sqp, dqp, sender)

    def _flush(self, out):
        """A batch's answers, in order; consecutive ones to the same client with one
        sendmmsg where the compiled helper is there."""
        i, n = 0, len(out)
        while i < n:
            to = out[i][0]
            j = i + 1
            while j < n and out[j][0] is to:
                j += 1
            if j - i > 1 and _sendmmsg is not None and not to.congested:
                try:
                    sent = _sendmmsg(to.sock.fileno(), [o[1] for o in out[i:j]])
                except OSError:
                    sent = 0                   # the first one failed: the one by one path says why
                i += sent
                self.stats["batched"] += sent
            while i < j:
                self._transmit(*out[i])
                i += 1

    def _transmit(self, to: Client, pkt, mad, slid, dlid, sqp, dqp, sender):
        if self.clients.get(to.idx) is not to:
            return False                       # released (its socket is closed): the answer is lost
        try:
            try:
                to.sock.send(pkt)
            except BlockingIOError:
                # the client's queue is full: give it a moment once (ibsim spins on
                # EAGAIN); a client that still does not read loses MADs, not its slot
                if to.congested or not select.select([], [to.sock], [], SEND_TIMEOUT)[1]:
                    to.congested = True
                    self.stats["dropped"] += 1
                    return False
                to.sock.send(pkt)
            to.congested = False
            return True
        except BlockingIOError:
            to.congested = True
            self.stats["dropped"] += 1
            return False
        except OSError as e:
            self._release(to, f"send failed: {e.strerror or e}")
            if sender is not None and sender is not to and self.clients.get(sender.idx) is sender:
                self._send(sender, mad, dlid, slid, dqp, sqp, ibsim.ETIMEDOUT, None)
            return False

    def _deliver_unsolicited(self, deliveries):
        for d in deliveries:
            to = self._find(d)
            if to is not None:
                self._send(to, d.mad, d.slid, d.dlid, d.sqp, d.qp, 0, None)
            elif self.datasock is not None:
                self.datasock.deliver_mad(d)
