"""Two daemons in two network namespaces joined by veth: real RoCEv2 over
UDP between them, with the kernel dropping packets (nftables) and the
device's own fault injection adding duplication, reordering and
corruption."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from netns_helpers import TwoHosts, need_root

HERE = os.path.dirname(os.path.abspath(__file__))
XFER = os.path.join(HERE, "programs", "rc_xfer.py")


@pytest.fixture
def hosts():
    need_root()
    h = TwoHosts()
    h.start_daemons()
    yield h
    h.close()


def _xfer(h: TwoHosts, mib: int, timeout: float = 600) -> dict:
    srv = h.popen(1, [sys.executable, XFER, "server", str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  text=True)
    cli = h.popen(0, [sys.executable, XFER, "client", str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  text=True)
    a, b = cli.stdout.readline(), srv.stdout.readline()
    assert a and b, "a side failed to start"
    cli.stdin.write(b)
    cli.stdin.flush()
    srv.stdin.write(a)
    srv.stdin.flush()
    try:
        cli_out, _ = cli.communicate(timeout=timeout)
        srv_out, _ = srv.communicate(timeout=60)
    finally:
        for p in (cli, srv):
            if p.poll() is None:
                p.kill()
    assert cli.returncode == 0 and srv.returncode == 0, (cli_out, srv_out)
    res = json.loads(cli_out.strip().splitlines()[-1])
    res["server"] = json.loads(srv_out.strip().splitlines()[-1])
    return res


def test_rc_across_namespaces(hosts):
    res = _xfer(hosts, 32)
    assert res["server"] == {"batches": 4, "bad": 0}
