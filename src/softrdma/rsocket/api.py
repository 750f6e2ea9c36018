"""``RSocket``: an rsocket with the ``socket`` module's methods, as
librdmacm's rsocket()/rbind()/rlisten()/raccept()/rconnect()/rsend()/
rrecv()/rshutdown()/rclose() and rsetsockopt()/rgetsockopt() behave for
SOCK_STREAM.

Connection set-up is rdma_cm's (RDMA_PS_TCP, the port is the TCP port
number): the active side resolves the address and route, makes its
endpoint and connects with ``struct rs_conn_data`` as private data; the
passive side answers each CONNECT_REQUEST of version 1 with its own
(rs_accept), and rejects any other.  Each rsocket has its own CM event
channel (an accepted one is migrated to one), so its DISCONNECTED events
are its own.  Blocking calls wait on the completion channel and the CM
channel; non-blocking ones fail with EWOULDBLOCK (connect: EINPROGRESS,
then readiness on ``fileno()``, and ``SO_ERROR``).  Errors are OSError
with the errno rsocket.c sets.  The family is AF_INET, AF_INET6 or AF_IB
(27, rdma_cm's struct sockaddr_ib: the address is a GID written as an IPv6
address, ``(gid, port)``), which runs over an InfiniBand port with the
route from the subnet administrator.
"""

from __future__ import annotations

import collections
import errno
import os
import select
import socket as _socket
import struct
import threading
import time

from ..enums import rdma_cm_event_type as EV
from ..verbs.cm import AF_IB, RDMA_PS_TCP, CmId, EventChannel
from ..verbs.errors import PyverbsRDMAError
from . import options
from . import protocol as P
from . import stream as S
from .signal import Progress, Signal
from .stream import RsError

_EV_ERRORS = (EV.RDMA_CM_EVENT_ADDR_ERROR, EV.RDMA_CM_EVENT_ROUTE_ERROR, EV.RDMA_CM_EVENT_CONNECT_ERROR,
              EV.RDMA_CM_EVENT_UNREACHABLE, EV.RDMA_CM_EVENT_REJECTED, EV.RDMA_CM_EVENT_DEVICE_REMOVAL)


def _oserror(e: PyverbsRDMAError) -> OSError:
    err = e.error_code or errno.EIO
    return OSError(err, os.strerror(err))


def _event_errno(ev) -> int:
    """ucma_complete's errno for a failed event."""
    if ev.event == EV.RDMA_CM_EVENT_REJECTED:
        return errno.ECONNREFUSED
    st = ev.status
    if st < 0:
        return -st
    return st or (errno.ETIMEDOUT if ev.event in (EV.RDMA_CM_EVENT_ADDR_ERROR, EV.RDMA_CM_EVENT_ROUTE_ERROR,
                                                   EV.RDMA_CM_EVENT_UNREACHABLE) else errno.ECONNREFUSED)


def _sockaddr(family: int, address) -> tuple[str, int]:
    host, port = address[0], int(address[1])
    if family == AF_IB:                         # struct sockaddr_ib: a GID, written as an IPv6 address
        try:
            return _socket.inet_ntop(_socket.AF_INET6, _socket.inet_pton(_socket.AF_INET6, host or "::")), port
        except (OSError, TypeError):
            raise OSError(errno.EINVAL, f"{host!r} is not a GID") from None
    if not host:
        host = "0.0.0.0" if family == _socket.AF_INET else "::"
    try:
        info = _socket.getaddrinfo(host, port, family, _socket.SOCK_STREAM)
    except _socket.gaierror:
        raise
    return info[0][4][0], port


class RSocket:
    """A SOCK_STREAM rsocket."""

    def __init__(self, family: int = _socket.AF_INET, type: int = _socket.SOCK_STREAM, proto: int = 0,
                 *, _cm_id: CmId | None = None, _parent: "RSocket | None" = None):
        stype = type & ~(_socket.SOCK_CLOEXEC | _socket.SOCK_NONBLOCK)
        if (family not in (_socket.AF_INET, _socket.AF_INET6, AF_IB) or stype != _socket.SOCK_STREAM
                or proto not in (0, _socket.IPPROTO_TCP)):
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        self.family, self.type, self.proto = family, _socket.SOCK_STREAM, _socket.IPPROTO_TCP
        self.lock = threading.RLock()
        self._timeout: float | None = 0.0 if type & _socket.SOCK_NONBLOCK else None
        self.opts = options.Options(_parent.opts if _parent is not None else None)
        self.state = S.RS_INIT
        self.err = 0
        self.stream: S.Stream | None = None
        self.accept_queue: collections.deque = collections.deque()
        self.peer: tuple | None = None
        self.local: tuple | None = None
        self.signal: Signal | None = None
        self._closed = False
        self._dst = None
        if _cm_id is None:
            try:
                self.channel = EventChannel()
                self.cm_id = CmId(self.channel, RDMA_PS_TCP)
            except PyverbsRDMAError as e:
                raise _oserror(e) from None
        else:
            self.cm_id, self.channel = _cm_id, _cm_id.channel
        self.keepalive = None

    # ------------------------------------------------------------------ socket-module basics
    def __repr__(self) -> str:
        return f"<softrdma.rsocket.RSocket state={self.state:#x} local={self.local} peer={self.peer}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if not self._closed:
                self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self._closed:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def settimeout(self, value: float | None) -> None:
        if value is not None and value < 0:
            raise ValueError("Timeout value out of range")
        self._timeout = value

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    # ------------------------------------------------------------------ fileno and readiness
    def fileno(self) -> int:
        """A descriptor select/poll/epoll/asyncio can wait on: readable when
        recv/accept would not block (or the stream ended), writable when
        send would not block (or the connect finished)."""
        self._check_open()
        with self.lock:
            if self.signal is None:
                self.signal = Signal()
                self._signal()
                self._watch()
            return self.signal.fd

    def _fds(self) -> list[int]:
        fds = [self.channel.fileno()]
        if self.stream is not None and self.stream.channel is not None:
            fds.append(self.stream.channel.fd)
        return fds

    def _watch(self) -> None:
        if self.signal is not None:
            Progress.get().watch(self, self._fds())

    def _readiness(self) -> tuple[bool, bool]:
        st = self.stream
        if self.state == S.RS_LISTENING:
            return bool(self.accept_queue), False
        if self.state & S.RS_OPENING:
            return False, False
        if self.state == S.RS_CONNECT_ERROR:
            return True, True
        if st is None:
            return False, True
        if not st.state & S.RS_CONNECTED:
            return True, True
        return st.conn_have_rdata(), st.conn_can_send()

    def _signal(self) -> None:
        if self.signal is not None:
            r, w = self._readiness()
            if not (r and w) and self.stream is not None and self.stream.state & S.RS_CONNECTED:
                self.stream.arm()
                self.stream.process()
                r, w = self._readiness()
            self.signal.set(r, w)

    def _poke(self) -> None:
        """The progress thread's call when one of this rsocket's channels
        is readable."""
        with self.lock:
            if self._closed:
                raise OSError(errno.EBADF, "closed")
            self._cm_events()
            st = self.stream
            if st is not None:
                st.take_cq_event()
                if st.state & (S.RS_CONNECTED | S.RS_DISCONNECTED | S.RS_ERROR):
                    st.process()
            self._signal()

    # ------------------------------------------------------------------ CM events
    def _cm_events(self) -> None:
        """Every CM event waiting on this rsocket's channel, without waiting."""
        while True:
            try:
                ev = self.channel.get_event(timeout=0)
            except PyverbsRDMAError as e:
                if e.error_code == errno.EAGAIN:
                    return
                self._fail(e.error_code or errno.EIO)
                return
            self._cm_event(ev)
            ev.ack()

    def _cm_event(self, ev) -> None:
        t = ev.event
        if self.state == S.RS_LISTENING:
            if t == EV.RDMA_CM_EVENT_CONNECT_REQUEST:
                self._accept_one(ev)
            return
        if self.state & S.RS_OPENING:
            self._connect_step(ev)
            return
        st = self.stream
        if st is not None and t == EV.RDMA_CM_EVENT_DISCONNECTED and st.state & S.RS_CONNECTED:
            st.state = S.RS_DISCONNECTED
        if st is not None and t == EV.RDMA_CM_EVENT_DEVICE_REMOVAL:
            st.state = S.RS_ERROR
            st.err = errno.EIO

    def _fail(self, err: int) -> None:
        self.state = S.RS_CONNECT_ERROR
        self.err = err

    # ------------------------------------------------------------------ waiting
    def _deadline(self, flags: int = 0) -> float | None:
        if self._timeout == 0.0 or flags & _socket.MSG_DONTWAIT:
            return 0.0
        if self._timeout is None:
            return None
        return time.monotonic() + self._timeout

    def _wait(self, test, deadline: float | None, write: bool = False) -> None:
        """rs_get_comp: process completions (and CM events) until ``test()``;
        EWOULDBLOCK for a non-blocking call, socket.timeout past the
        deadline.  Called with the lock held; released while sleeping."""
        st = self.stream
        spins = 0
        while True:
            self._cm_events()
            if st is not None and st.channel is not None:
                st.process()
            if test():
                return
            if deadline == 0.0:
                raise BlockingIOError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK))
            if spins < 1:                     # rsocket.c polls a little before it sleeps
                spins += 1
                continue
            if st is not None and st.channel is not None:
                if not st.cq_armed:
                    st.arm()
                    continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _socket.timeout("timed out")
            p = select.poll()
            for fd in self._fds():
                p.register(fd, select.POLLIN)
            if self.signal is not None:       # the progress thread may take the event first
                p.register(self.signal.fd, select.POLLOUT if write else select.POLLIN)
            self.lock.release()
            try:
                p.poll(1000 if left is None else max(0, int(min(left, 1.0) * 1000)))
            finally:
                self.lock.acquire()
            if st is not None and st.channel is not None:
                st.take_cq_event()

    # ------------------------------------------------------------------ bind / listen / accept
    def bind(self, address) -> None:
        self._check_open()
        host, port = _sockaddr(self.family, address)
        try:
            self.cm_id.bind_addr(None if host in ("0.0.0.0", "::") else host, port,
                                 {_socket.AF_INET6: 6, AF_IB: AF_IB}.get(self.family, 4))
        except PyverbsRDMAError as e:
            raise _oserror(e) from None
        src = self.cm_id.info.get("src") or {}
        self.local = (src.get("ip") or host, src.get("port", port))
        self.state = S.RS_BOUND

    def listen(self, backlog: int = 128) -> None:
        self._check_open()
        with self.lock:
            if self.state == S.RS_LISTENING:
                return
            if self.state != S.RS_BOUND:
                self.bind(("", 0))
            try:
                self.cm_id.listen(max(1, backlog))
            except PyverbsRDMAError as e:
                raise _oserror(e) from None
            self.state = S.RS_LISTENING
            # rsocket.c's listen service: requests are answered in the
            # background, so a connect from this very process completes
            self.fileno()

    def _accept_one(self, ev) -> None:
        """rs_accept: a new rsocket for the request, its endpoint made, its
        private data answered with ours; any failure rejects it."""
        child = ev.id
        new = None
        try:
            conn = P.ConnData.unpack(ev.private_data)
            if conn.version != 1:
                raise RsError(errno.EOPNOTSUPP)
            child.migrate(EventChannel())
            new = RSocket(self.family, _socket.SOCK_STREAM, 0, _cm_id=child, _parent=self)
            new.stream = S.Stream(child, self.opts.sizes())
            new.stream.create_ep()
            new.stream.save_conn_data(conn)
            param = {"private_data": new.stream.conn_data().pack(),
                     "flow_control": ev.conn.get("flow_control", 1), "retry_count": ev.conn.get("retry_count", 7),
                     "rnr_retry_count": ev.conn.get("rnr_retry_count", 7)}
            child.accept(param)
            new.stream.state = S.RS_CONNECT_RDWR
            new.state = S.RS_CONNECTED
            info = child.query()
            new.local = (info["src"]["ip"], info["src"]["port"])
            new.peer = (info["dst"]["ip"], info["dst"]["port"])
            new.opts.apply_keepalive(new)
            self.accept_queue.append(new)
        except (PyverbsRDMAError, OSError, ValueError):
            try:
                child.reject()
            except PyverbsRDMAError:
                pass
            if new is not None:
                new.close()
            else:
                child.destroy()

    def accept(self):
        """raccept: (RSocket, address)."""
        self._check_open()
        with self.lock:
            if self.state != S.RS_LISTENING:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            self._wait(lambda: bool(self.accept_queue), self._deadline())
            new = self.accept_queue.popleft()
            self._signal()
        if self._timeout is not None:
            new.setblocking(True)
        return new, new.peer

    # ------------------------------------------------------------------ connect
    def connect(self, address) -> None:
        err = self.connect_ex(address, _raise=True)
        if err:
            raise OSError(err, os.strerror(err))

    def connect_ex(self, address, _raise: bool = False) -> int:
        self._check_open()
        with self.lock:
            if self.state & S.RS_CONNECTED or (self.stream is not None and self.stream.state & S.RS_CONNECTED):
                return errno.EISCONN
            if self.state == S.RS_CONNECT_ERROR:
                err, self.err = self.err, 0
                return err or errno.ECONNABORTED
            if not self.state & S.RS_OPENING:
                host, port = _sockaddr(self.family, address)
                self._dst = (host, port)
                self.peer = (host, port)
                try:
                    self.cm_id.resolve_addr(None, host, port, 2000, family=AF_IB if self.family == AF_IB else 0)
                except PyverbsRDMAError as e:
                    return e.error_code or errno.EIO
                self.state = S.RS_RESOLVING_ADDR
                self._watch()
            elif self._deadline() == 0.0:
                self._cm_events()
                self._signal()
                if self.state & S.RS_OPENING:
                    return errno.EALREADY
            try:
                self._wait(lambda: not self.state & S.RS_OPENING, self._deadline(), write=True)
            except BlockingIOError:
                self._signal()
                return errno.EINPROGRESS
            except _socket.timeout:
                if _raise:
                    raise
                return errno.EAGAIN
            self._signal()
            if self.state == S.RS_CONNECT_ERROR:
                err, self.err = self.err, 0
                return err
            return 0

    def _connect_step(self, ev) -> None:
        """rs_do_connect's states, advanced by the CM event ``ev``."""
        t = ev.event
        try:
            if t in _EV_ERRORS:
                self._fail(_event_errno(ev))
            elif self.state == S.RS_RESOLVING_ADDR and t == EV.RDMA_CM_EVENT_ADDR_RESOLVED:
                self.cm_id.resolve_route(2000)
                self.state = S.RS_RESOLVING_ROUTE
            elif self.state == S.RS_RESOLVING_ROUTE and t == EV.RDMA_CM_EVENT_ROUTE_RESOLVED:
                self.stream = S.Stream(self.cm_id, self.opts.sizes())
                self.stream.create_ep()
                self._watch()
                self.cm_id.connect({"private_data": self.stream.conn_data().pack(), "flow_control": 1,
                                    "retry_count": 7, "rnr_retry_count": 7,
                                    "initiator_depth": min(1, self.cm_id.max_initiator_depth()),
                                    "responder_resources": min(1, self.cm_id.max_responder_resources())})
                self.state = S.RS_CONNECTING
            elif self.state == S.RS_CONNECTING and t == EV.RDMA_CM_EVENT_ESTABLISHED:
                conn = P.ConnData.unpack(ev.private_data)
                if conn.version != 1:
                    self._fail(errno.EOPNOTSUPP)
                    return
                self.stream.save_conn_data(conn)
                self.stream.state = S.RS_CONNECT_RDWR
                self.state = S.RS_CONNECTED
                info = self.cm_id.query()
                self.local = (info["src"]["ip"], info["src"]["port"])
                self.opts.apply_keepalive(self)
        except PyverbsRDMAError as e:
            self._fail(e.error_code or errno.EIO)
        except ValueError:
            self._fail(errno.EPROTO)

    # ------------------------------------------------------------------ data
    def _connected_stream(self) -> S.Stream:
        self._check_open()
        st = self.stream
        if st is None or not (st.state & (S.RS_CONNECTED | S.RS_DISCONNECTED | S.RS_ERROR)) \
                or self.state & S.RS_OPENING:
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
        return st

    def send(self, data, flags: int = 0) -> int:
        with self.lock:
            st = self._connected_stream()
            if not st.state & S.RS_WRITABLE:
                raise OSError(errno.EPIPE if st.state & S.RS_CONNECTED else errno.ECONNRESET,
                              os.strerror(errno.EPIPE))
            mv = memoryview(data).cast("B")
            if not len(mv):
                return 0
            deadline = self._deadline(flags)
            try:
                n = st.send_some(mv, lambda test: self._wait(test, deadline, write=True))
            except PyverbsRDMAError as e:
                raise _oserror(e) from None
            finally:
                self._signal()
            return n

    def sendall(self, data, flags: int = 0) -> None:
        mv = memoryview(data).cast("B")
        while len(mv):
            try:
                n = self.send(mv, flags)
            except BlockingIOError:
                if self._timeout == 0.0:
                    raise
                continue
            mv = mv[n:]

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        mv = memoryview(buffer).cast("B")
        if nbytes:
            mv = mv[:nbytes]
        with self.lock:
            st = self._connected_stream()
            got = 0
            deadline = self._deadline(flags)
            try:
                while True:
                    if not st.have_rdata():
                        try:
                            self._wait(st.conn_have_rdata, 0.0 if got else deadline)
                        except BlockingIOError:
                            if got:
                                break
                            raise
                    if not st.have_rdata():          # the stream ended (or broke)
                        if st.state & S.RS_ERROR and not got:
                            err = st.err or errno.ECONNRESET
                            raise OSError(err, os.strerror(err))
                        break
                    got += st.recv_into(mv[got:], bool(flags & _socket.MSG_PEEK))
                    if (flags & _socket.MSG_PEEK or got == len(mv) or not flags & _socket.MSG_WAITALL
                            or not st.state & S.RS_READABLE):
                        if not flags & _socket.MSG_WAITALL or got == len(mv):
                            break
                st.update_credits()
            finally:
                self._signal()
            return got

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        buf = bytearray(bufsize)
        n = self.recv_into(buf, bufsize, flags)
        return bytes(buf[:n])

    # ------------------------------------------------------------------ options
    def setsockopt(self, level: int, optname: int, value, optlen: int | None = None) -> None:
        self._check_open()
        with self.lock:
            self.opts.set(self, level, optname, value)

    def getsockopt(self, level: int, optname: int, buflen: int = 0):
        self._check_open()
        with self.lock:
            return self.opts.get(self, level, optname, buflen)

    def getsockname(self):
        self._check_open()
        if self.local is None:
            return ("0.0.0.0", 0) if self.family == _socket.AF_INET else ("::", 0) if self.family == AF_IB \
                else ("::", 0, 0, 0)
        return self.local if self.family in (_socket.AF_INET, AF_IB) else (*self.local, 0, 0)

    def getpeername(self):
        self._check_open()
        if self.peer is None or not (self.state & S.RS_CONNECTED):
            raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
        return self.peer if self.family in (_socket.AF_INET, AF_IB) else (*self.peer, 0, 0)

    # ------------------------------------------------------------------ shutdown / close
    def shutdown(self, how: int) -> None:
        """rshutdown: SHUT_RDWR sends RS_CTRL_DISCONNECT, SHUT_WR
        RS_CTRL_SHUTDOWN while we still read; then every send completes."""
        self._check_open()
        with self.lock:
            st = self.stream
            if st is None or not st.state & S.RS_CONNECTED:
                if self.state == S.RS_LISTENING or st is None:
                    raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN))
                return
            if self.keepalive is not None:
                self.keepalive.remove(self)
            if how == _socket.SHUT_RDWR:
                ctrl = P.RS_CTRL_DISCONNECT
                st.state &= ~(S.RS_READABLE | S.RS_WRITABLE)
            elif how == _socket.SHUT_WR:
                st.state &= ~S.RS_WRITABLE
                ctrl = P.RS_CTRL_SHUTDOWN if st.state & S.RS_READABLE else P.RS_CTRL_DISCONNECT
            elif how == _socket.SHUT_RD:
                st.state &= ~S.RS_READABLE
                ctrl = None if st.state & S.RS_WRITABLE else P.RS_CTRL_DISCONNECT
            else:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            try:
                if ctrl is not None:
                    if not st.ctrl_avail():
                        self._wait(st.conn_can_send_ctrl, time.monotonic() + 10)
                    if st.state & S.RS_CONNECTED and st.ctrl_avail():
                        st.post_ctrl(ctrl)
                if st.state & S.RS_CONNECTED:
                    self._wait(st.conn_all_sends_done, time.monotonic() + 10)
            except (OSError, PyverbsRDMAError):
                pass
            if st.state & S.RS_DISCONNECTED:
                try:
                    self.cm_id.disconnect()           # ucma_shutdown
                except PyverbsRDMAError:
                    pass
            self._signal()

    def close(self) -> None:
        """rclose: a connected rsocket disconnects (SHUT_RDWR) first."""
        if self._closed:
            return
        with self.lock:
            st = self.stream
            if st is not None and st.state & S.RS_CONNECTED and not self.state & S.RS_OPENING:
                try:
                    self.shutdown(_socket.SHUT_RDWR)
                except OSError:
                    pass
            if self.keepalive is not None:
                self.keepalive.remove(self)
            self._closed = True
            if self.signal is not None:
                Progress.get().forget(self)
            if st is not None:
                st.free()
            for q in list(self.accept_queue):
                q.close()
            self.accept_queue.clear()
            try:
                self.cm_id.destroy()
            except PyverbsRDMAError:
                pass
            try:
                self.channel.close()
            except (PyverbsRDMAError, OSError):
                pass
            if self.signal is not None:
                self.signal.close()

    def detach(self):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    def makefile(self, mode: str = "r", buffering=None, **kw):
        return _socket.socket.makefile(self, mode, buffering, **kw)

    @property
    def _io_refs(self):               # socket.makefile's bookkeeping
        return self.__dict__.get("_refs", 0)

    @_io_refs.setter
    def _io_refs(self, v):
        self.__dict__["_refs"] = v

    def _decref_socketios(self):
        self._io_refs -= 1


def rsocket(family: int = _socket.AF_INET, type: int = _socket.SOCK_STREAM, proto: int = 0) -> RSocket:
    """rsocket(3): a new SOCK_STREAM rsocket (EOPNOTSUPP for anything else)."""
    return RSocket(family, type, proto)


def create_connection(address, timeout=None) -> RSocket:
    """socket.create_connection over rsockets."""
    host, port = address
    err = None
    for fam, _, _, _, sa in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        rs = RSocket(fam)
        try:
            if timeout is not None:
                rs.settimeout(timeout)
            rs.connect(sa[:2])
            return rs
        except OSError as e:
            err = e
            rs.close()
    raise err if err else OSError(errno.EHOSTUNREACH, os.strerror(errno.EHOSTUNREACH))


_STRUCT_INT = struct.Struct("i")
