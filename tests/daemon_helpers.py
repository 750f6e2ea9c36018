"""Start a real softrdmad for a test, in its own run directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

from softrdma.uapi.control import recv_msg, send_msg
from wait_helpers import DEADLINE_S, wait_for
from shm_helpers import shm_dir


class RunningDaemon:
    def __init__(self, run_dir: str, devices=("rxe0:lo",), port: int = 0, args=(), prefix=()):
        """``port`` 0: an ephemeral UDP port, so that test daemons (which talk
        to themselves through the loopback path) never collide on 4791.
        ``args``: more softrdmad options (``--cpu 1``); ``prefix``: what
        runs it (``ip netns exec NS``)."""
        self.run_dir = run_dir
        extra = list(args)
        args = [*prefix, sys.executable, "-m", "softrdma", "daemon", "-f", "--run-dir", run_dir, "--port", str(port)]
        for d in devices:
            args += ["--device", d]
        args += extra
        self.log = open(os.path.join(run_dir, "test-daemon.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        sock = os.path.join(run_dir, "softrdmad.sock")
        pid = os.path.join(run_dir, "softrdmad.pid")
        try:
            # 60 s only bounds a failure (a loaded machine can take long to start Python);
            # a daemon that exited fails at once
            wait_for(lambda: os.path.exists(sock) and os.path.exists(pid), DEADLINE_S, "softrdmad to start",
                     proc=self.proc)
        except AssertionError as e:
            self.stop(signal.SIGKILL)                  # never leave behind a daemon we gave up on
            raise RuntimeError(f"softrdmad did not start: {e}; log: " + open(self.log.name).read()) from None
        self.env = {**os.environ, "SOFTRDMA_RUN": run_dir}

    def resources(self) -> list[dict]:
        return resources(self.run_dir)

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:              # it did not stop when asked: end it anyway
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self.log.close()
        return rc


def resources(run_dir: str) -> list[dict]:
    """The daemon's resource list (what `rdma resource show` prints from)."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(os.path.join(run_dir, "softrdmad.sock"))
        send_msg(s, {"op": "resources", "seq": 1})
        msg, _ = recv_msg(s)
    finally:
        s.close()
    return msg["resources"]


def cm_listening(run_dir: str, port: int, pid: int) -> bool:
    """An rdma_cm server (process ``pid``) of the daemon in ``run_dir`` is
    listening on ``port``: a cm_id in LISTEN on that port; for a wildcard
    listener (no device, so listed without its state and port, as the
    kernel lists only IDs on a device) a cm_id of that process.  rdma_cm
    ports live in the daemon, not in the host's TCP table."""
    LISTEN = 8
    for r in resources(run_dir):
        if r["kind"] != "cm_id" or r.get("pid") != pid:
            continue
        if r.get("dev") is None or (r.get("state") == LISTEN and r["src_addr"][1] == port):
            return True
    return False


def wait_cm_listening(run_dir: str, port: int, proc: subprocess.Popen) -> None:
    wait_for(lambda: cm_listening(run_dir, port, proc.pid), DEADLINE_S, f"an rdma_cm listener on port {port}",
             proc=proc)


@contextlib.contextmanager
def daemon_in_shm(tag: str, **kw):
    """A RunningDaemon whose run dir is on /dev/shm (its sysfs tree is
    thousands of small files; a journalled disk makes that slow), removed
    afterwards."""
    run = shm_dir(f"softrdma-{tag}-{os.getpid()}")
    os.makedirs(run, exist_ok=True)
    try:
        d = RunningDaemon(run, **kw)
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)
        raise
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(run, ignore_errors=True)


@contextlib.contextmanager
def default_daemon_in_shm(tag: str, **kw):
    """``daemon_in_shm`` that is also the process's SOFTRDMA_RUN while it
    runs (what a verbs Context in the test process opens)."""
    with daemon_in_shm(tag, **kw) as d, softrdma_run(d.run_dir):
        yield d


@contextlib.contextmanager
def softrdma_run(run_dir: str):
    """SOFTRDMA_RUN is ``run_dir`` inside (what the test process's verbs,
    diags and MAD ports open), and as it was after -- unset if it was."""
    old = os.environ.get("SOFTRDMA_RUN")
    os.environ["SOFTRDMA_RUN"] = run_dir
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SOFTRDMA_RUN", None)
        else:
            os.environ["SOFTRDMA_RUN"] = old


@contextlib.contextmanager
def context_on(run_dir: str, monkeypatch):
    """A fresh verbs Context on rxe0 of the daemon in ``run_dir``, with
    the process's SOFTRDMA_RUN pointing there and autostart off (a missing
    daemon fails the test instead of starting another): a per-test
    fixture's body."""
    from softrdma.verbs.device import Context
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    with Context(name="rxe0") as c:
        yield c


@contextlib.contextmanager
def context_on_own_daemon(tag: str, **kw):
    """A verbs Context on rxe0 of a daemon of the test's own
    (``default_daemon_in_shm``): a module fixture's body."""
    from softrdma.verbs.device import Context
    with default_daemon_in_shm(tag, **kw):
        c = Context(name="rxe0")
        try:
            yield c
        finally:
            c.close()


def poll_wcs(cq, n: int, timeout: float = 60.0) -> list:
    """Up to ``n`` completions from ``cq``, polling until they came or
    ``timeout`` passed (the caller asserts what it got)."""
    got = []
    end = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        got += cq.poll(16)[1]
    return got


class RawControl:
    """A control connection without the library."""

    def __init__(self, run_dir: str, timeout: float = 10.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(os.path.join(run_dir, "softrdmad.sock"))
        self.s.settimeout(timeout)
        self.seq = 0

    def call(self, op, fds=(), **kw) -> dict:
        self.seq += 1
        send_msg(self.s, {"op": op, "seq": self.seq, **kw}, fds)
        return self.reply()

    def send_raw(self, data: bytes, fds=()) -> dict:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
        self.s.sendmsg([data], anc)
        return self.reply()

    def reply(self) -> dict:
        """The next record that is not an async event (fds it carries closed)."""
        while True:
            msg, fds = recv_msg(self.s)
            for fd in fds:
                os.close(fd)
            assert msg is not None, "the daemon closed the connection"
            if "event" in msg and "seq" not in msg:
                continue
            return msg

    def ok(self, op, fds=(), **kw) -> dict:
        r = self.call(op, fds, **kw)
        assert r["errno"] == 0, r
        return r

    def close(self):
        self.s.close()
