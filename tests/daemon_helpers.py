"""Start a real softrdmad for a test, in its own run directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from softrdma.device.control import recv_msg, send_msg


class RunningDaemon:
    def __init__(self, run_dir: str, devices=("rxe0:lo",), port: int = 0):
        """``port`` 0: an ephemeral UDP port, so that test daemons (which talk
        to themselves through the loopback path) never collide on 4791."""
        self.run_dir = run_dir
        args = [sys.executable, "-m", "softrdma", "daemon", "-f", "--run-dir", run_dir, "--port", str(port)]
        for d in devices:
            args += ["--device", d]
        self.log = open(os.path.join(run_dir, "test-daemon.log"), "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        sock = os.path.join(run_dir, "softrdmad.sock")
        pid = os.path.join(run_dir, "softrdmad.pid")
        end = time.monotonic() + 15
        while not (os.path.exists(sock) and os.path.exists(pid)):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError("softrdmad did not start: " + open(self.log.name).read())
            time.sleep(0.02)
        self.env = {**os.environ, "SOFTRDMA_RUN": run_dir}

    def resources(self) -> list[dict]:
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(os.path.join(self.run_dir, "softrdmad.sock"))
        send_msg(s, {"op": "resources", "seq": 1})
        msg, _ = recv_msg(s)
        s.close()
        return msg["resources"]

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(10)
        self.log.close()
        return rc


@contextlib.contextmanager
def daemon_in_shm(tag: str, **kw):
    """A RunningDaemon whose run dir is on /dev/shm (its sysfs tree is
    thousands of small files; a journalled disk makes that slow), removed
    afterwards."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    run = os.path.join(base, f"softrdma-{tag}-{os.getpid()}")
    os.makedirs(run, exist_ok=True)
    d = RunningDaemon(run, **kw)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(run, ignore_errors=True)
