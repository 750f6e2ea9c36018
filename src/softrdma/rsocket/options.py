"""rsetsockopt/rgetsockopt: the options an rsocket takes, at the levels
rsocket.c accepts them (SOL_SOCKET, IPPROTO_IP, IPPROTO_TCP,
IPPROTO_IPV6, SOL_RDMA), with its rules: the SOL_RDMA sizes only before
the connection opens (EINVAL after), SO_RCVBUF/SO_SNDBUF doubled as the
kernel does, anything else ENOTSUP.  And the keepalive service
(tcp_svc): one thread sending a zero-byte RDMA WRITE on every rsocket
with SO_KEEPALIVE each TCP_KEEPIDLE seconds.
"""

from __future__ import annotations

import errno
import heapq
import os
import socket as _socket
import struct
import threading
import time
import weakref

from . import protocol as P
from . import stream as S

_INT = struct.Struct("i")
_LINGER = struct.Struct("ii")


def _keepalive_default() -> int:
    try:
        with open("/proc/sys/net/ipv4/tcp_keepalive_time") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 7200


def _enotsup() -> OSError:
    return OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))


def _int(value) -> int:
    if isinstance(value, int):
        return value
    return _INT.unpack(bytes(value)[:4])[0]


class Options:
    """The option fields of struct rsocket."""

    def __init__(self, parent: "Options | None" = None):
        if parent is not None:                   # rs_alloc: inherited from the listening rsocket
            self.__dict__.update({k: v for k, v in parent.__dict__.items()})
            return
        self.sq_size = P.DEF_SQSIZE
        self.rq_size = P.DEF_RQSIZE
        self.sq_inline = P.DEF_INLINE
        self.sbuf_size = P.DEF_WMEM
        self.rbuf_size = P.DEF_MEM
        self.target_iomap_size = P.DEF_IOMAP_SIZE
        self.so_opts = 0
        self.tcp_opts = 0
        self.ipv6_opts = 0
        self.ipv4_tos = 0
        self.keepalive_time = _keepalive_default()
        self.route = None

    def sizes(self) -> dict:
        return {"sq_size": self.sq_size, "rq_size": self.rq_size, "sq_inline": self.sq_inline,
                "sbuf_size": self.sbuf_size, "rbuf_size": self.rbuf_size,
                "target_iomap_size": self.target_iomap_size}

    def apply_keepalive(self, rs) -> None:
        if self.so_opts & (1 << _socket.SO_KEEPALIVE):
            Keepalive.get().add(rs)

    # ------------------------------------------------------------------ rsetsockopt
    def set(self, rs, level: int, name: int, value) -> None:
        opts_attr = None
        on = 0
        st = rs.stream
        if level == _socket.SOL_SOCKET:
            opts_attr = "so_opts"
            if name == _socket.SO_REUSEADDR:
                on = _int(value)
                try:
                    rs.cm_id.set_option("reuseaddr", on)
                except Exception:              # rsocket.c ignores what the device refuses here
                    pass
            elif name == _socket.SO_RCVBUF:
                if st is None:
                    self.rbuf_size = _int(value) << 1
            elif name == _socket.SO_SNDBUF:
                if st is None:
                    self.sbuf_size = _int(value) << 1
                if self.sbuf_size < P.RS_SNDLOWAT:
                    self.sbuf_size = P.RS_SNDLOWAT << 1
            elif name == _socket.SO_LINGER:
                onoff = _LINGER.unpack(bytes(value)[:8])[0] if not isinstance(value, int) else value
                on = not onoff                  # inverted: the default (0) is on
            elif name == _socket.SO_KEEPALIVE:
                on = _int(value)
                if on:
                    self.so_opts |= 1 << name
                    if rs.stream is not None and rs.stream.state & S.RS_CONNECTED:
                        Keepalive.get().add(rs)
                elif rs.keepalive is not None:
                    rs.keepalive.remove(rs)
            elif name == _socket.SO_OOBINLINE:
                on = _int(value)
            else:
                raise _enotsup()
        elif level == _socket.IPPROTO_IP:
            if name != _socket.IP_TOS:
                raise _enotsup()
            self.ipv4_tos = _int(value)
            try:
                rs.cm_id.set_option("tos", self.ipv4_tos)
            except Exception as e:
                raise OSError(getattr(e, "error_code", errno.EINVAL), str(e)) from None
        elif level == _socket.IPPROTO_TCP:
            opts_attr = "tcp_opts"
            if name in (_socket.TCP_KEEPCNT, _socket.TCP_KEEPINTVL, _socket.TCP_MAXSEG, _socket.TCP_CONGESTION):
                pass                            # N/A: a reliable connection
            elif name == _socket.TCP_KEEPIDLE:
                v = _int(value)
                if v <= 0:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
                self.keepalive_time = v
                if rs.keepalive is not None:
                    rs.keepalive.add(rs)
            elif name == _socket.TCP_NODELAY:
                on = _int(value)
            else:
                raise _enotsup()
        elif level == _socket.IPPROTO_IPV6:
            opts_attr = "ipv6_opts"
            if name != _socket.IPV6_V6ONLY:
                raise _enotsup()
            on = _int(value)
            try:
                rs.cm_id.set_option("afonly", on)
            except Exception:
                pass
        elif level == P.SOL_RDMA:
            if rs.state >= S.RS_OPENING or st is not None:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            if name == P.RDMA_SQSIZE:
                self.sq_size = min(_int(value) & 0xFFFFFFFF, P.RS_QP_MAX_SIZE)
            elif name == P.RDMA_RQSIZE:
                self.rq_size = min(_int(value) & 0xFFFFFFFF, P.RS_QP_MAX_SIZE)
            elif name == P.RDMA_INLINE:
                self.sq_inline = min(_int(value) & 0xFFFFFFFF, P.RS_QP_MAX_SIZE)
            elif name == P.RDMA_IOMAPSIZE:
                self.target_iomap_size = P.rs_scale_to_value(P.rs_value_to_scale(_int(value), 8) & 0xFF, 8)
            elif name == P.RDMA_ROUTE:
                self.route = bytes(value)
            else:
                raise _enotsup()
        else:
            raise _enotsup()
        if opts_attr is not None and not (level == _socket.SOL_SOCKET and name == _socket.SO_KEEPALIVE and on):
            bits = getattr(self, opts_attr)
            setattr(self, opts_attr, bits | (1 << name) if on else bits & ~(1 << name))

    # ------------------------------------------------------------------ rgetsockopt
    def get(self, rs, level: int, name: int, buflen: int = 0):
        st = rs.stream
        if level == _socket.SOL_SOCKET:
            if name in (_socket.SO_REUSEADDR, _socket.SO_KEEPALIVE, _socket.SO_OOBINLINE):
                v = int(bool(self.so_opts & (1 << name)))
            elif name == _socket.SO_RCVBUF:
                v = st.rbuf_size if st is not None else self.rbuf_size
            elif name == _socket.SO_SNDBUF:
                v = st.sbuf_size if st is not None else self.sbuf_size
            elif name == _socket.SO_LINGER:
                data = _LINGER.pack(int(not self.so_opts & (1 << name)), 0)
                return data[:buflen] if buflen else _LINGER.unpack(data)[0]
            elif name == _socket.SO_ERROR:
                v, rs.err = rs.err, 0
            elif name == _socket.SO_TYPE:
                v = _socket.SOCK_STREAM
            elif name == _socket.SO_BROADCAST:
                v = 0
            else:
                raise _enotsup()
        elif level == _socket.IPPROTO_IP:
            if name != _socket.IP_TOS:
                raise _enotsup()
            v = self.ipv4_tos
        elif level == _socket.IPPROTO_TCP:
            if name in (_socket.TCP_CONGESTION, _socket.TCP_KEEPCNT, _socket.TCP_KEEPINTVL):
                v = 1
            elif name == _socket.TCP_KEEPIDLE:
                v = self.keepalive_time
            elif name == _socket.TCP_NODELAY:
                v = int(bool(self.tcp_opts & (1 << name)))
            elif name == _socket.TCP_MAXSEG:
                mtu = (rs.cm_id.info or {}).get("mtu") if rs.cm_id is not None else None
                v = 1 << (7 + int(mtu)) if mtu else 2048
            else:
                raise _enotsup()
        elif level == _socket.IPPROTO_IPV6:
            if name != _socket.IPV6_V6ONLY:
                raise _enotsup()
            v = int(bool(self.ipv6_opts & (1 << name)))
        elif level == P.SOL_RDMA:
            if name == P.RDMA_SQSIZE:
                v = st.sq_size if st is not None else self.sq_size
            elif name == P.RDMA_RQSIZE:
                v = st.rq_size if st is not None else self.rq_size
            elif name == P.RDMA_INLINE:
                v = st.sq_inline if st is not None else self.sq_inline
            elif name == P.RDMA_IOMAPSIZE:
                v = self.target_iomap_size
            elif name == P.RDMA_ROUTE:
                if self.route is None:
                    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))   # no IB path records on RoCE
                return self.route[:buflen] if buflen else self.route
            else:
                raise _enotsup()
        else:
            raise _enotsup()
        return _INT.pack(v)[:buflen] if buflen else v


class Keepalive:
    """tcp_svc: the keepalive thread, started with the first rsocket that
    asks and sleeping until the next one is due."""

    _instance: "Keepalive | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> "Keepalive":
        with cls._lock:
            if cls._instance is None:
                cls._instance = Keepalive()
            return cls._instance

    def __init__(self):
        self.cond = threading.Condition()
        self.due: list = []                        # (time, id, weakref)
        self.members: dict[int, float] = {}
        threading.Thread(target=self._run, name="rsocket-keepalive", daemon=True).start()

    def add(self, rs) -> None:
        with self.cond:
            rs.keepalive = self
            when = time.monotonic() + rs.opts.keepalive_time
            self.members[id(rs)] = when
            heapq.heappush(self.due, (when, id(rs), weakref.ref(rs)))
            self.cond.notify()

    def remove(self, rs) -> None:
        with self.cond:
            self.members.pop(id(rs), None)
            rs.keepalive = None

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.due or self.due[0][0] > time.monotonic():
                    self.cond.wait(None if not self.due else self.due[0][0] - time.monotonic())
                when, key, ref = heapq.heappop(self.due)
                rs = ref()
                if rs is None or self.members.get(key) != when:
                    continue
                nxt = time.monotonic() + rs.opts.keepalive_time
                self.members[key] = nxt
                heapq.heappush(self.due, (nxt, key, ref))
            with rs.lock:
                st = rs.stream
                if st is not None and not rs._closed:
                    try:
                        st.post_keepalive()
                    except Exception:
                        pass
