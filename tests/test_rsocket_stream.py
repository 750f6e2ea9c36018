"""softrdma rsockets on one host: byte-exact streams (100 MB; 100
connections at once), the socket API's blocking and non-blocking
behaviour and errnos, options, shutdown, fileno() readiness, and the
rstream tool."""

from __future__ import annotations

import errno
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from daemon_helpers import default_daemon_in_shm
from rsocket_helpers import popen_with, run_peers
from wait_helpers import DEADLINE_S, free_port, wait_line

from softrdma.rsocket import RDMA_INLINE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA, rsocket


@pytest.fixture(scope="module")
def daemon():
    """The module's daemon, the process's SOFTRDMA_RUN while it runs, and no
    autostart (a missing daemon fails instead of starting another); both
    restored afterwards."""
    old = os.environ.get("SOFTRDMA_AUTOSTART")
    os.environ["SOFTRDMA_AUTOSTART"] = "0"
    try:
        with default_daemon_in_shm("rsock") as d:
            yield d
    finally:
        if old is None:
            os.environ.pop("SOFTRDMA_AUTOSTART", None)
        else:
            os.environ["SOFTRDMA_AUTOSTART"] = old


def env_of(daemon) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0"}


def pair(port: int | None = None):
    """A connected (client, server) pair in this process."""
    port = port or free_port()
    ls = rsocket()
    ls.bind(("127.0.0.1", port))
    ls.listen(4)
    c = rsocket()
    c.connect(("127.0.0.1", port))
    s, addr = ls.accept()
    ls.close()
    return c, s


def test_100mb_byte_exact(daemon):
    run_peers(popen_with(env_of(daemon)), popen_with(env_of(daemon)), "127.0.0.1", free_port(), 1, 100 << 20)


def test_100_concurrent_sockets(daemon):
    run_peers(popen_with(env_of(daemon)), popen_with(env_of(daemon)), "127.0.0.1", free_port(), 100, 1 << 20)


def test_send_recv_both_ways_and_eof(daemon):
    c, s = pair()
    try:
        assert c.getpeername() == ("127.0.0.1", s.getsockname()[1])
        c.sendall(b"hello")
        assert s.recv(100) == b"hello"
        t = threading.Thread(target=s.sendall, args=(b"x" * 300000,))   # more than the peer's buffer
        t.start()
        got = bytearray()
        while len(got) < 300000:
            got += c.recv(65536)
        t.join()
        assert got == b"x" * 300000
        buf = bytearray(10)
        c.sendall(b"0123456789abc")
        assert s.recv(4, socket.MSG_PEEK) == b"0123"
        assert s.recv_into(buf, 10, socket.MSG_WAITALL) == 10 and buf == b"0123456789"
        assert s.recv(10) == b"abc"
        c.shutdown(socket.SHUT_WR)                   # RS_CTRL_SHUTDOWN: the peer reads EOF, may still send
        assert s.recv(10) == b""
        with pytest.raises(OSError) as e:
            c.send(b"more")
        assert e.value.errno == errno.EPIPE
        s.sendall(b"reply")
        assert c.recv(10) == b"reply"
        s.close()                                    # RS_CTRL_DISCONNECT
        assert c.recv(10) == b""
    finally:
        c.close()
        s.close()


def test_nonblocking(daemon):
    c, s = pair()
    try:
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(10)
        with pytest.raises(BlockingIOError):
            c.recv(1, socket.MSG_DONTWAIT)
        # fill the peer's receive buffer: a non-blocking send stops with EWOULDBLOCK
        c.setblocking(False)
        sent = 0
        with pytest.raises(BlockingIOError):
            for _ in range(1000):
                sent += c.send(b"y" * 65536)
        assert 0 < sent <= 4 << 20
        s.setblocking(True)
        got = 0
        while got < sent:
            got += len(s.recv(1 << 20))
        assert got == sent
        c.settimeout(0.2)
        s.settimeout(0.2)
        with pytest.raises(socket.timeout):
            s.recv(10)
    finally:
        c.close()
        s.close()


def test_nonblocking_connect_einprogress(daemon):
    port = free_port()
    ls = rsocket()
    ls.bind(("127.0.0.1", port))
    ls.listen()
    ls.setblocking(False)
    c = rsocket()
    c.setblocking(False)
    try:
        assert c.connect_ex(("127.0.0.1", port)) == errno.EINPROGRESS
        r, _, _ = select.select([ls], [], [], DEADLINE_S)       # the request arrives: the listener is readable
        assert r == [ls]
        s, _ = ls.accept()
        _, w, _ = select.select([], [c], [], DEADLINE_S)         # the connect finished: writable
        assert w == [c]
        assert c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
        c.send(b"ping")
        s.setblocking(True)
        assert s.recv(4) == b"ping"
        s.close()
    finally:
        c.close()
        ls.close()


def test_fileno_poll_and_idle(daemon):
    c, s = pair()
    try:
        p = select.poll()
        p.register(s.fileno(), select.POLLIN)
        assert p.poll(50) == []                          # idle: nothing readable
        t = threading.Timer(0.1, lambda: c.sendall(b"wake"))
        t.start()
        ev = p.poll(DEADLINE_S * 1000)
        t.join()
        assert ev and ev[0][1] & select.POLLIN
        assert s.recv(4) == b"wake"
        assert p.poll(50) == []
    finally:
        c.close()
        s.close()


def test_connect_refused(daemon):
    c = rsocket()
    try:
        with pytest.raises(ConnectionRefusedError):
            c.connect(("127.0.0.1", free_port()))
    finally:
        c.close()
    c = rsocket()
    c.setblocking(False)
    try:
        err = c.connect_ex(("127.0.0.1", free_port()))
        if err == errno.EINPROGRESS:                 # else the reject came back within the call
            _, w, _ = select.select([], [c], [], DEADLINE_S)
            assert w == [c]
            err = c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        assert err == errno.ECONNREFUSED
    finally:
        c.close()


def test_errors(daemon):
    with pytest.raises(OSError) as e:
        rsocket(socket.AF_INET, socket.SOCK_DGRAM)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(OSError) as e:
        rsocket(socket.AF_UNIX)
    assert e.value.errno == errno.EOPNOTSUPP
    s = rsocket()
    with pytest.raises(OSError) as e:
        s.send(b"x")
    assert e.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as e:
        s.getpeername()
    assert e.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as e:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 1)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(OSError) as e:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 0)
    assert e.value.errno == errno.EINVAL
    s.close()
    with pytest.raises(OSError) as e:
        s.recv(1)
    assert e.value.errno == errno.EBADF


def test_options(daemon):
    port = free_port()
    ls = rsocket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    assert ls.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
    ls.bind(("127.0.0.1", port))
    ls.listen()
    c = rsocket()
    assert c.getsockopt(SOL_RDMA, RDMA_SQSIZE) == 384 and c.getsockopt(SOL_RDMA, RDMA_RQSIZE) == 384
    assert c.getsockopt(SOL_RDMA, RDMA_INLINE) == 64
    assert c.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 1 << 17
    c.setsockopt(SOL_RDMA, RDMA_SQSIZE, 64)
    c.setsockopt(SOL_RDMA, RDMA_RQSIZE, 8)            # raised to RS_QP_MIN_SIZE
    c.setsockopt(SOL_RDMA, RDMA_INLINE, 0)            # the SGL updates then go from the send buffer
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    c.connect(("127.0.0.1", port))
    s, _ = ls.accept()
    try:
        assert c.getsockopt(SOL_RDMA, RDMA_SQSIZE) == 64 and c.getsockopt(SOL_RDMA, RDMA_RQSIZE) == 16
        assert c.getsockopt(SOL_RDMA, RDMA_INLINE) == 0
        assert c.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 16384
        with pytest.raises(OSError) as e:
            c.setsockopt(SOL_RDMA, RDMA_SQSIZE, 32)     # only before the connection opens
        assert e.value.errno == errno.EINVAL
        data = os.urandom(3 << 20)                     # small buffers, no inline: many SGL updates
        t = threading.Thread(target=c.sendall, args=(data,))
        t.start()
        got = bytearray()
        while len(got) < len(data):
            got += s.recv(1 << 16)
        t.join()
        assert got == data
    finally:
        c.close()
        s.close()
        ls.close()


def test_keepalive(daemon):
    c, s = pair()
    try:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        assert c.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 1
        ctrl0 = c.stream.ctrl_seqno
        t0 = time.monotonic()
        while c.stream.ctrl_seqno < ctrl0 + 2:          # two keepalives sent by the service thread
            assert time.monotonic() - t0 < DEADLINE_S, "no keepalive"
            threading.Event().wait(0.05)
        assert time.monotonic() - t0 >= 0.9             # one a second (TCP_KEEPIDLE 1), not more often
        with c.lock:
            c._wait(lambda: c.stream.ctrl_max_seqno - c.stream.ctrl_seqno == 4, None)
        c.sendall(b"still here")                       # the zero-byte writes did not disturb the stream
        assert s.recv(100) == b"still here"
    finally:
        c.close()
        s.close()


def test_rstream_tool(daemon):
    env = env_of(daemon)
    port = str(free_port())
    cmd = [sys.executable, "-m", "softrdma", "rstream", "-p", port, "-S", "65536", "-C", "200", "-T", "v"]
    srv = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv.stdout, r"^name\s+bytes", DEADLINE_S, proc=srv)
        cli = subprocess.run([*cmd, "-s", "127.0.0.1"], env=env, capture_output=True, text=True,
                             timeout=DEADLINE_S)
        out, err = srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert cli.returncode == 0 and srv.returncode == 0, (cli.stderr, err)
    head, row = cli.stdout.splitlines()
    assert head == "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer"
    assert re.fullmatch(r"custom    64k     200     1       25m     +[\d.]+s +[\d.]+ +[\d.]+", row), row


def test_rstream_sockets_mode_and_usage(daemon):
    env = env_of(daemon)
    port = str(free_port())
    cmd = [sys.executable, "-m", "softrdma", "rstream", "-p", port, "-S", "1000", "-C", "10", "-T", "s"]
    srv = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv.stdout, r"^name", DEADLINE_S, proc=srv)
        cli = subprocess.run([*cmd, "-s", "127.0.0.1", "-T", "b"], env=env, capture_output=True, text=True,
                             timeout=DEADLINE_S)
        srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[1].startswith("custom    1000    10      1       19k     ")
    bad = subprocess.run([sys.executable, "-m", "softrdma", "rstream", "-T", "zz"], env=env, capture_output=True,
                         text=True, timeout=DEADLINE_S)
    assert bad.returncode == 1 and bad.stdout.startswith("usage: rstream\n\t[-s server_address]")
