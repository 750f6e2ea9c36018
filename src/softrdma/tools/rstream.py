"""``rstream``: librdmacm's examples/rstream.c over softrdma's rsockets
(or, with ``-T s``, the host's TCP sockets): the same options, the same
latency and bandwidth test sequence and the same results table
("name bytes xfers iters total time Gb/sec usec/xfer"), so it runs
against librdmacm's rstream on another host either way round.

Without ``-s`` it is the server; ``-S``/``-C``/``-I`` make one custom
test, else the latency tests then the bandwidth tests of rstream's size
table (``-S all`` adds the in-between sizes).  The default is
non-blocking calls polled in a loop (rstream's MSG_DONTWAIT); ``-T b``
blocks, ``-T a`` waits in poll() on the rsocket's descriptor.
"""

from __future__ import annotations

import errno
import getopt
import os
import select
import socket
import sys
import time

from ..rsocket import RSocket
from ..rsocket.protocol import RDMA_INLINE, SOL_RDMA
from ..verbs.cm import AF_IB

TEST_SIZE = [(1 << 6, 0)] + [
    row for e in range(7, 23) for row in (((1 << e), 0 if e in (12, 16, 20) else 1), ((1 << e) + (1 << (e - 1)), 1))
]
USAGE = """usage: {prog}
\t[-s server_address]
\t[-b bind_address]
\t[-f address_format]
\t    name, ip, ipv6, or gid
\t[-B buffer_size]
\t[-i inline_size]
\t[-I iterations]
\t[-C transfer_count]
\t[-S transfer_size or all]
\t[-p port_number]
\t[-k keepalive_time]
\t[-T test_option]
\t    s|sockets - use standard tcp/ip sockets
\t    a|async - asynchronous operation (use poll)
\t    b|blocking - use blocking calls
\t    f|fork - fork server processing
\t    n|nonblocking - use nonblocking calls
\t    r|resolve - use rdma cm to resolve address
\t    v|verify - verify data
"""


def size_str(size: int) -> str:
    if size >= 1 << 30:
        base, mag = 1 << 30, "g"
    elif size >= 1 << 20:
        base, mag = 1 << 20, "m"
    elif size >= 1 << 10:
        base, mag = 1 << 10, "k"
    else:
        base, mag = 1, ""
    fraction = (size % base) * 10 // base if size // base < 10 else 0
    return f"{size // base}.{fraction}{mag}" if fraction else f"{size // base}{mag}"


def cnt_str(cnt: int) -> str:
    for div, mag in ((1000000000, "b"), (1000000, "m"), (1000, "k")):
        if cnt >= div:
            return f"{cnt // div}{mag}"
    return str(cnt)


def size_to_count(size: int) -> int:
    return 100 if size >= 1 << 20 else 1000 if size >= 1 << 16 else 10000 if size >= 1 << 10 else 100000


class Pattern:
    """format_buf / verify_buf: a running byte counter."""

    def __init__(self):
        self.data = 0
        self.total = 0

    def fill(self, buf: bytearray, size: int) -> None:
        start = self.data
        buf[:size] = bytes((start + i) & 0xFF for i in range(256)) * (size // 256) + \
            bytes((start + i) & 0xFF for i in range(size % 256))
        self.data = (start + size) & 0xFF

    def check(self, buf, size: int) -> bool:
        want = bytearray(size)
        saved = self.data
        self.fill(want, size)
        if bytes(buf[:size]) != bytes(want):
            bad = next(i for i in range(size) if buf[i] != want[i])
            print(f"data verification failed byte {self.total + bad}")
            self.data = saved
            return False
        self.total += size
        return True


class Rstream:
    def __init__(self):
        self.use_rs = True
        self.use_async = False
        self.verify = False
        self.dontwait = True
        self.waitall = False
        self.custom = False
        self.iterations = 1
        self.transfer_size = 1000
        self.transfer_count = 1000
        self.buffer_size = 0
        self.inline_size = 64
        self.test_name = "custom"
        self.port = "7471"
        self.keepalive = 0
        self.dst_addr = None
        self.src_addr = None
        self.size_option = 0
        self.family = 0
        self.numeric = False
        self.rs = self.lrs = None
        self.optimization = None
        self.send_pat, self.recv_pat = Pattern(), Pattern()

    # ------------------------------------------------------------------ sockets
    def new_socket(self, family: int):
        return RSocket(family) if self.use_rs else socket.socket(family, socket.SOCK_STREAM)

    def do_poll(self, s, write: bool) -> int:
        while True:
            r, w, x = select.select([] if write else [s], [s] if write else [], [s], None)
            if r or w or x:
                return 0

    def set_keepalive(self, s) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except OSError as e:
            print(f"rsetsockopt SO_KEEPALIVE: {e.strerror}", file=sys.stderr)
            return
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, self.keepalive)
        except OSError as e:
            print(f"rsetsockopt TCP_KEEPIDLE: {e.strerror}", file=sys.stderr)
        try:
            print(f"Keepalive: {'ON' if s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) else 'OFF'}")
            print(f"  time: {s.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)}")
        except OSError:
            pass

    def set_options(self, s) -> None:
        size = self.buffer_size or 1 << 19
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                s.setsockopt(socket.SOL_SOCKET, opt, size)
            except OSError:
                pass
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.dontwait:
            s.setblocking(False)
        if self.use_rs:
            try:
                if self.optimization == "latency":
                    s.setsockopt(SOL_RDMA, RDMA_INLINE, self.inline_size)
                elif self.optimization == "bandwidth":
                    s.setsockopt(SOL_RDMA, RDMA_INLINE, 0)
            except OSError:
                pass                          # an accepted rsocket is open already (EINVAL)
        if self.keepalive:
            self.set_keepalive(s)

    def addrinfo(self, host, passive: bool):
        if self.family == AF_IB:                # rdma_getaddrinfo's sockaddr_ib: the GID as given
            try:
                gid = socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, host or "::"))
            except OSError:
                raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None
            return AF_IB, socket.SOCK_STREAM, 0, "", (gid, int(self.port))
        flags = (socket.AI_PASSIVE if passive else 0) | (socket.AI_NUMERICHOST if self.numeric else 0)
        return socket.getaddrinfo(host, self.port, self.family, socket.SOCK_STREAM, 0, flags)[0]

    def server_listen(self) -> int:
        try:
            fam, _, _, _, sa = self.addrinfo(self.src_addr, True)
        except socket.gaierror as e:
            print(f"getaddrinfo: {e.strerror}")
            return -1
        self.lrs = self.new_socket(fam)
        try:
            self.lrs.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        except OSError as e:
            print(f"rsetsockopt SO_REUSEADDR: {e.strerror}", file=sys.stderr)
            self.lrs.close()
            return -1
        try:
            self.lrs.bind(sa[:2])
        except OSError as e:
            print(f"rbind: {e.strerror}", file=sys.stderr)
            self.lrs.close()
            return -1
        try:
            self.lrs.listen(1)
        except OSError as e:
            print(f"rlisten: {e.strerror}", file=sys.stderr)
            self.lrs.close()
            return -1
        return 0

    def server_connect(self) -> int:
        self.set_options(self.lrs)
        while True:
            if self.use_async:
                self.do_poll(self.lrs, False)
            try:
                self.rs, _ = self.lrs.accept()
                break
            except BlockingIOError:
                continue
            except OSError as e:
                print(f"raccept: {e.strerror}", file=sys.stderr)
                return -1
        self.set_options(self.rs)
        return 0

    def client_connect(self) -> int:
        try:
            fam, _, _, _, sa = self.addrinfo(self.dst_addr, False)
            src = self.addrinfo(self.src_addr, True)[4] if self.src_addr else None
        except socket.gaierror as e:
            print(f"getaddrinfo: {e.strerror}")
            return -1
        self.rs = self.new_socket(fam)
        self.set_options(self.rs)
        try:
            if src:
                self.rs.bind(src[:2])
        except OSError as e:
            print(f"rbind: {e.strerror}", file=sys.stderr)
            self.rs.close()
            return -1
        err = self.rs.connect_ex(sa[:2])
        if err and err not in (errno.EINPROGRESS, errno.EAGAIN):
            print(f"rconnect: {os.strerror(err)}", file=sys.stderr)
            self.rs.close()
            return -1
        if err:
            self.do_poll(self.rs, True)
            err = self.rs.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                print(f"async rconnect: {os.strerror(err)}", file=sys.stderr)
                self.rs.close()
                return -1
        return 0

    # ------------------------------------------------------------------ transfers
    def send_xfer(self, buf: memoryview, size: int) -> int:
        if self.verify:
            self.send_pat.fill(buf.obj, size)
        off = 0
        flags = socket.MSG_DONTWAIT if self.dontwait else 0
        while off < size:
            if self.use_async:
                self.do_poll(self.rs, True)
            try:
                n = self.rs.send(buf[off:size], flags)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                print(f"rsend: {e.strerror}", file=sys.stderr)
                return -1
            off += n
        return 0

    def recv_xfer(self, buf: memoryview, size: int) -> int:
        off = 0
        flags = (socket.MSG_DONTWAIT if self.dontwait else 0) | (socket.MSG_WAITALL if self.waitall else 0)
        while off < size:
            if self.use_async:
                self.do_poll(self.rs, False)
            try:
                n = self.rs.recv_into(buf[off:size], size - off, flags)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                print(f"rrecv: {e.strerror}", file=sys.stderr)
                return -1
            if n == 0:
                print("rrecv: Connection reset by peer", file=sys.stderr)
                return -1
            off += n
        if self.verify and not self.recv_pat.check(buf, size):
            return -1
        return 0

    def run_test(self, buf: memoryview) -> int:
        client = self.dst_addr is not None
        if (self.send_xfer(buf, 16) if client else self.recv_xfer(buf, 16)):
            return -1
        if (self.recv_xfer(buf, 16) if client else self.send_xfer(buf, 16)):
            return -1
        start = time.perf_counter()
        for _ in range(self.iterations):
            for _ in range(self.transfer_count):
                if (self.send_xfer(buf, self.transfer_size) if client else self.recv_xfer(buf, self.transfer_size)):
                    return -1
            for _ in range(self.transfer_count):
                if (self.recv_xfer(buf, self.transfer_size) if client else self.send_xfer(buf, self.transfer_size)):
                    return -1
        self.show_perf(time.perf_counter() - start)
        return 0

    def show_perf(self, secs: float) -> None:
        usec = secs * 1e6
        nbytes = self.iterations * self.transfer_count * self.transfer_size * 2
        print(f"{self.test_name:<10}{size_str(self.transfer_size):<8}{cnt_str(self.transfer_count):<8}"
              f"{cnt_str(self.iterations):<8}{size_str(nbytes):<8}"
              f"{usec / 1e6:8.2f}s{nbytes * 8 / (1000.0 * usec):10.2f}"
              f"{(usec / self.iterations) / (self.transfer_count * 2):11.2f}", flush=True)

    def close_conn(self) -> None:
        try:
            self.rs.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.rs.close()

    def run(self) -> int:
        buf = memoryview(bytearray(TEST_SIZE[-1][0] if not self.custom else self.transfer_size))
        if self.dst_addr is None and self.server_listen():
            return -1
        print(f"{'name':<10}{'bytes':<8}{'xfers':<8}{'iters':<8}{'total':<8}{'time':>8} {'Gb/sec':>10}"
              f"{'usec/xfer':>13}", flush=True)
        connect = self.client_connect if self.dst_addr is not None else self.server_connect
        ret = 0
        try:
            if not self.custom:
                self.optimization = "latency"
                if connect():
                    return -1
                for size, option in TEST_SIZE:
                    if option > self.size_option:
                        continue
                    self.test_name = f"{size_str(size)}_lat"
                    self.transfer_count, self.transfer_size = 1, size
                    self.iterations = size_to_count(size)
                    self.run_test(buf)
                self.close_conn()
                self.optimization = "bandwidth"
                if connect():
                    return -1
                for size, option in TEST_SIZE:
                    if option > self.size_option:
                        continue
                    self.test_name = f"{size_str(size)}_bw"
                    self.iterations, self.transfer_size = 1, size
                    self.transfer_count = size_to_count(size)
                    self.run_test(buf)
            else:
                if connect():
                    return -1
                ret = self.run_test(buf)
            self.close_conn()
        finally:
            if self.lrs is not None:
                self.lrs.close()
        return ret

    def set_test_opt(self, arg: str) -> bool:
        a = arg.lower()
        if a in ("s",) or a.startswith("socket"):
            self.use_rs = False
        elif a in ("a",) or a.startswith("async"):
            self.use_async = True
        elif a in ("b",) or a.startswith("block"):
            self.dontwait, self.waitall = False, True
        elif a in ("f",) or a.startswith("fork"):
            print("rstream: -T f (fork) is not supported here", file=sys.stderr)
            return False
        elif a in ("n",) or a.startswith("nonblock"):
            self.dontwait = True
        elif a in ("r",) or a.startswith("resolve"):
            pass                              # rdma_getaddrinfo resolves as getaddrinfo does for IP
        elif a in ("v",) or a.startswith("verify"):
            self.verify = True
        else:
            return False
        return True



def _count(val: str, lo: int = 1) -> int:
    """A size or count option: a number from ``lo`` to INT_MAX (rstream's
    atoi would take anything; a value that cannot be allocated or sent is
    refused here, with the usage, instead of failing later)."""
    v = int(val)
    if not lo <= v <= 0x7FFFFFFF:
        raise ValueError(val)
    return v

def main(argv: list[str] | None = None, prog: str = "rstream") -> int:
    argv = sys.argv[1:] if argv is None else argv
    t = Rstream()
    try:
        opts, _ = getopt.getopt(argv, "s:b:f:B:i:I:C:S:p:k:T:")
    except getopt.GetoptError as e:
        print(f"{prog}: {e.msg}", file=sys.stderr)
        print(USAGE.format(prog=prog), end="")
        return 1
    for op, val in opts:
        try:
            if op == "-s":
                t.dst_addr = val
            elif op == "-b":
                t.src_addr = val
            elif op == "-f":
                if val.lower().startswith("ip"):
                    t.numeric = True
                elif val.lower().startswith("gid"):
                    t.numeric, t.family = True, AF_IB       # RAI_NUMERICHOST | RAI_FAMILY, AF_IB
                else:
                    print("Warning: unknown address format", file=sys.stderr)
            elif op == "-B":
                t.buffer_size = _count(val)
            elif op == "-i":
                t.inline_size = _count(val, 0)
            elif op == "-I":
                t.custom, t.iterations = True, _count(val)
            elif op == "-C":
                t.custom, t.transfer_count = True, _count(val)
            elif op == "-S":
                if val.lower().startswith("all"):
                    t.size_option = 1
                else:
                    t.custom, t.transfer_size = True, _count(val)
            elif op == "-p":
                t.port = val
            elif op == "-k":
                t.keepalive = _count(val, 0)
            elif op == "-T":
                if not t.set_test_opt(val):
                    raise ValueError(val)
        except ValueError:
            print(USAGE.format(prog=prog), end="")
            return 1
    try:
        return 1 if t.run() else 0
    except OSError as e:          # rsocket() itself failed (no daemon, no device): perror("rsocket")
        print(f"rsocket: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
