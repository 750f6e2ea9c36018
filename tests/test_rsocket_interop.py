"""Interop of softrdma's rsockets with librdmacm's, in the rxe guest of
../shared/interop/rxe-vm (opt-in: ``pytest -m interop``; needs root and
the guest running, see tests/test_interop_rxe.py): the guest's
``rstream`` (rdmacm-utils) against ``softrdma rstream``, each side as
server and as client, with data verification (``-T v``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from wait_helpers import DEADLINE_S, free_port, wait_line

pytestmark = pytest.mark.interop

HARNESS = os.environ.get("RXEVM_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                       "shared", "interop", "rxe-vm")
NETNS = os.environ.get("RXEVM_NETNS", "rxevm")
TAP = os.environ.get("RXEVM_TAP", "rxetap0")
HOST_IP = os.environ.get("RXEVM_HOST_IP", "10.77.0.1")
GUEST_IP = os.environ.get("RXEVM_GUEST_IP", "10.77.0.2")
RUN = "/dev/shm/softrdma-interop-rsock"
ROW = re.compile(r"^custom\s+64k\s+100\s+1\s+12m\s+[\d.]+s\s+[\d.]+\s+[\d.]+$", re.M)
ARGS = ["-S", "65536", "-C", "100", "-T", "v"]


def guest(cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(HARNESS, "guest.sh"), "-n", cmd], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def env():
    if os.geteuid() != 0:
        pytest.fail("interop needs root")
    r = guest("command -v rstream", timeout=30)
    if r.returncode != 0:
        pytest.fail(f"the rxe guest is not running (start it with {HARNESS}/start.sh): {r.stderr.strip()}")
    os.makedirs(RUN, exist_ok=True)
    e = {**os.environ, "SOFTRDMA_RUN": RUN, "SOFTRDMA_AUTOSTART": "0"}
    log = open(os.path.join(RUN, "daemon.log"), "w")
    d = subprocess.Popen(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", "daemon", "-f",
                          "--device", f"rxe0:{TAP}"], env=e, stdout=log, stderr=subprocess.STDOUT)
    try:
        from wait_helpers import wait_for
        wait_for(lambda: os.path.exists(os.path.join(RUN, "softrdmad.pid")), DEADLINE_S, "softrdmad", proc=d)
        yield e
    finally:
        d.terminate()
        d.wait(30)
        log.close()


def host_rstream(e, args):
    return subprocess.Popen(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", "rstream", *args],
                            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_softrdma_server_guest_client(env):
    port = str(free_port())
    srv = host_rstream(env, ["-p", port, *ARGS])
    try:
        wait_line(srv.stdout, r"^name", DEADLINE_S, proc=srv)
        r = guest(f"timeout 100 rstream -s {HOST_IP} -p {port} {' '.join(ARGS)}")
        out, err = srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert r.returncode == 0 and srv.returncode == 0, (r.stdout, r.stderr, err)
    assert ROW.search(r.stdout) and ROW.search(out), (r.stdout, out)


def test_guest_server_softrdma_client(env):
    port = str(free_port())
    srv = subprocess.Popen([os.path.join(HARNESS, "guest.sh"), "-n", f"timeout 100 rstream -p {port} {' '.join(ARGS)}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the guest's rstream prints nothing before it exits (stdout is a pipe):
        # until it listens, a connect is refused and is made again
        end = time.monotonic() + DEADLINE_S
        while True:
            cli = host_rstream(env, ["-s", GUEST_IP, "-p", port, *ARGS])
            out, err = cli.communicate(timeout=DEADLINE_S * 2)
            if cli.returncode == 0 or "Connection refused" not in err or time.monotonic() > end:
                break
        sout, serr = srv.communicate(timeout=DEADLINE_S)
    finally:
        for p in (srv,):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert cli.returncode == 0 and srv.returncode == 0, (out, err, serr)
    assert ROW.search(out) and ROW.search(sout), (out, sout)
