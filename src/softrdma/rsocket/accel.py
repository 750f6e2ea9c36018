"""TCP sockets that go over rsockets when the peer speaks them: what
``softrdma run --sockets`` installs in an unmodified Python program, as
librdmacm's librspreload.so does for C programs through LD_PRELOAD.

``install()`` replaces ``socket.socket`` with ``AccelSocket``, a real
``socket.socket`` subclass.  For AF_INET/AF_INET6 SOCK_STREAM sockets:

* ``connect`` first tries an rsocket to the same address and port; if the
  peer accepts it (it listens through rsockets too), the socket's I/O goes
  over it; if not (refused, unreachable, no RDMA path), the plain TCP
  connect runs, so a TCP-only peer is reached as before;
* ``listen`` listens on TCP and, on the same port, on an rsocket (as
  librspreload does); ``accept`` returns whichever connection comes,
  and ``fileno()`` is readable when either has one;
* on an rsocket connection every method the program may call (send,
  recv, sendall, makefile, select/poll/asyncio on ``fileno()``,
  shutdown, options, names) acts on the rsocket; options rsockets do not
  take are set on the TCP socket underneath, so they behave (or fail) as
  TCP's do.

Other families and types stay plain sockets.  ``SOFTRDMA_SOCKETS_DEBUG=1``
prints one line per connection saying which way it went.
"""

from __future__ import annotations

import errno
import os
import select
import socket as _socket
import sys

_PLAIN = _socket.socket
_DEBUG = os.environ.get("SOFTRDMA_SOCKETS_DEBUG") == "1"
_CONNECT_TIMEOUT = float(os.environ.get("SOFTRDMA_SOCKETS_CONNECT_TIMEOUT", "5"))


def _log(msg: str) -> None:
    if _DEBUG:
        print(f"softrdma sockets: {msg}", file=sys.stderr, flush=True)


def _rsocket_cls():
    from .api import RSocket           # late: a program that never opens a TCP socket loads no verbs
    return RSocket


class AccelSocket(_PLAIN):
    """socket.socket, over an rsocket where the peer speaks rsockets."""

    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        super().__init__(family, type, proto, fileno)
        self._rs = None                  # the connected rsocket
        self._rl = None                  # the listening rsocket beside the TCP listen
        self._ep = None                  # epoll over both listens (fileno of a listener)
        self._eligible = (fileno is None and self.family in (_socket.AF_INET, _socket.AF_INET6)
                          and self.type == _socket.SOCK_STREAM)

    # ------------------------------------------------------------------ connect
    def _try_rsocket(self, address):
        try:
            host, port = address[0], int(address[1])
            infos = _socket.getaddrinfo(host, port, self.family, _socket.SOCK_STREAM)
        except (OSError, TypeError, ValueError, IndexError):
            return None
        RSocket = _rsocket_cls()
        for _, _, _, _, sa in infos:
            try:
                rs = RSocket(self.family)
            except OSError:
                return None
            try:
                t = super().gettimeout()
                rs.settimeout(_CONNECT_TIMEOUT if not t else min(t, _CONNECT_TIMEOUT))
                rs.connect(sa[:2])
                rs.settimeout(t)
                _log(f"{sa[0]}:{sa[1]} over rsockets")
                return rs
            except OSError as e:
                _log(f"{sa[0]}:{sa[1]} not over rsockets ({e.strerror or e}): TCP")
                rs.close()
        return None

    def connect(self, address):
        if self._eligible and self._rs is None:
            rs = self._try_rsocket(address)
            if rs is not None:
                self._rs = rs
                return None
        return super().connect(address)

    def connect_ex(self, address):
        if self._eligible and self._rs is None:
            rs = self._try_rsocket(address)
            if rs is not None:
                self._rs = rs
                return 0
        return super().connect_ex(address)

    # ------------------------------------------------------------------ listen / accept
    def listen(self, backlog: int = 128):
        super().listen(backlog)
        if not self._eligible or self._rl is not None:
            return
        host, port = super().getsockname()[:2]
        try:
            rl = _rsocket_cls()(self.family)
            rl.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
            rl.bind((host, port))
            rl.listen(backlog)
            rl.setblocking(False)
        except OSError as e:
            _log(f"listen on {host}:{port}: TCP only ({e.strerror or e})")
            return
        self._rl = rl
        _log(f"listening on {host}:{port} over TCP and rsockets")

    def _listen_fd(self) -> int:
        if self._ep is None:
            self._ep = select.epoll()
            self._ep.register(super().fileno(), select.EPOLLIN)
            self._ep.register(self._rl.fileno(), select.EPOLLIN)
        return self._ep.fileno()

    def _wrap(self, rs):
        s = AccelSocket(self.family, _socket.SOCK_STREAM)
        s._rs = rs
        return s

    def accept(self):
        if self._rl is None:
            return super().accept()
        timeout = super().gettimeout()
        tcp_fd = super().fileno()
        while True:
            try:
                rs, addr = self._rl.accept()
                rs.setblocking(True)
                s = self._wrap(rs)
                if _socket.getdefaulttimeout() is None and timeout:
                    s.setblocking(True)
                _log(f"accepted {addr[0]}:{addr[1]} over rsockets")
                return s, addr
            except BlockingIOError:
                pass
            p = select.poll()
            p.register(tcp_fd, select.POLLIN)
            if p.poll(0):
                try:
                    return super().accept()
                except BlockingIOError:
                    pass
            if timeout == 0.0:
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            p.register(self._rl.fileno(), select.POLLIN)
            if not p.poll(None if timeout is None else int(timeout * 1000)) and timeout is not None:
                raise TimeoutError("timed out")

    # ------------------------------------------------------------------ descriptors and modes
    def fileno(self):
        if self._rs is not None:
            return self._rs.fileno()
        if self._rl is not None:
            return self._listen_fd()
        return super().fileno()

    def settimeout(self, value):
        super().settimeout(value)
        if self._rs is not None:
            self._rs.settimeout(value)

    def setblocking(self, flag):
        super().setblocking(flag)
        if self._rs is not None:
            self._rs.setblocking(flag)

    # ------------------------------------------------------------------ data
    def send(self, data, flags=0):
        return self._rs.send(data, flags) if self._rs is not None else super().send(data, flags)

    def sendall(self, data, flags=0):
        return self._rs.sendall(data, flags) if self._rs is not None else super().sendall(data, flags)

    def sendto(self, data, *args):
        if self._rs is not None:
            raise OSError(errno.EISCONN, os.strerror(errno.EISCONN))
        return super().sendto(data, *args)

    def sendmsg(self, buffers, ancdata=(), flags=0, address=None):
        if self._rs is None:
            return super().sendmsg(buffers, ancdata, flags, *([address] if address else []))
        if ancdata or address:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return self._rs.send(b"".join(bytes(b) for b in buffers), flags)

    def recv(self, bufsize, flags=0):
        return self._rs.recv(bufsize, flags) if self._rs is not None else super().recv(bufsize, flags)

    def recv_into(self, buffer, nbytes=0, flags=0):
        if self._rs is not None:
            return self._rs.recv_into(buffer, nbytes, flags)
        return super().recv_into(buffer, nbytes, flags)

    def recvfrom(self, bufsize, flags=0):
        if self._rs is not None:
            return self._rs.recv(bufsize, flags), None
        return super().recvfrom(bufsize, flags)

    def recvfrom_into(self, buffer, nbytes=0, flags=0):
        if self._rs is not None:
            return self._rs.recv_into(buffer, nbytes, flags), None
        return super().recvfrom_into(buffer, nbytes, flags)

    def recvmsg(self, bufsize, ancbufsize=0, flags=0):
        if self._rs is not None:
            return self._rs.recv(bufsize, flags), [], 0, None
        return super().recvmsg(bufsize, ancbufsize, flags)

    def _sendfile_use_sendfile(self, file, offset=0, count=None):
        if self._rs is not None:
            raise _socket._GiveupOnSendfile("rsocket")
        return super()._sendfile_use_sendfile(file, offset, count)

    # ------------------------------------------------------------------ names, options, shutdown, close
    def getpeername(self):
        return self._rs.getpeername() if self._rs is not None else super().getpeername()

    def getsockname(self):
        return self._rs.getsockname() if self._rs is not None else super().getsockname()

    def setsockopt(self, level, optname, value, optlen=None):
        if self._rs is not None:
            try:
                return self._rs.setsockopt(level, optname, value)
            except OSError as e:
                if e.errno != errno.EOPNOTSUPP:
                    raise
        args = (level, optname, value) if optlen is None else (level, optname, value, optlen)
        return super().setsockopt(*args)

    def getsockopt(self, level, optname, buflen=0):
        if self._rs is not None:
            try:
                return self._rs.getsockopt(level, optname, buflen)
            except OSError as e:
                if e.errno != errno.EOPNOTSUPP:
                    raise
        return super().getsockopt(level, optname, buflen) if buflen else super().getsockopt(level, optname)

    def shutdown(self, how):
        return self._rs.shutdown(how) if self._rs is not None else super().shutdown(how)

    def _real_close(self, _ss=_PLAIN):
        for obj in (self._rs, self._rl, self._ep):
            if obj is not None:
                try:
                    obj.close()
                except OSError:
                    pass
        self._rs = self._rl = self._ep = None
        super()._real_close()

    def __repr__(self):
        if self._rs is not None:
            return f"<AccelSocket over rsockets {self._rs.getsockname()} -> {self._rs.peer}>"
        return super().__repr__()

    def dup(self):
        if self._rs is not None or self._rl is not None:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        return super().dup()


def install() -> None:
    """Make ``socket.socket`` (and so socket.create_connection, socketserver,
    http, asyncio...) create AccelSockets."""
    _socket.socket = AccelSocket


__all__ = ["AccelSocket", "install"]
