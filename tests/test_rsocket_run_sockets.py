"""``softrdma run --sockets`` on unmodified programs: http.server with
urllib and a socketserver echo go over rsockets
(both ends launched that way) with the same bytes; a plain TCP peer is
still reached over TCP."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm
from wait_helpers import DEADLINE_S, free_port, wait_line

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "sockets_echo_apps.py")
ECHO_SHA = hashlib.sha256(random.Random(7).randbytes(1 << 20)).hexdigest()


@pytest.fixture(scope="module")
def env():
    with daemon_in_shm("rsock-run") as d:
        yield {**d.env, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_SOCKETS_DEBUG": "1"}


def run_sockets(args):
    return [sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--sockets", "--", *args]


def serve_and_call(env, server_args, client_args, ready: str, accel_server: bool = True):
    srv = subprocess.Popen(run_sockets(server_args) if accel_server else server_args, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv.stdout if ready == "listening" else srv.stderr, ready, DEADLINE_S, proc=srv)
        cli = subprocess.run(run_sockets(client_args), env=env, capture_output=True, text=True, timeout=120)
    finally:
        srv.kill()
        _, srv_err = srv.communicate()
    assert cli.returncode == 0, cli.stderr
    return cli, srv_err


@pytest.mark.parametrize("kind", ["socketserver"])
def test_echo_over_rsockets(env, kind):
    port = str(free_port())
    cli, srv_err = serve_and_call(env, [sys.executable, APPS, f"{kind}-server", port],
                                  [sys.executable, APPS, f"{kind}-client", port], "listening")
    assert cli.stdout.strip() == ECHO_SHA
    assert f"127.0.0.1:{port} over rsockets" in cli.stderr, cli.stderr
    assert "accepted 127.0.0.1:" in srv_err and "over rsockets" in srv_err, srv_err


def test_http_server_and_urllib(env, tmp_path):
    body = random.Random(3).randbytes(3 << 20)
    (tmp_path / "blob").write_bytes(body)
    port = str(free_port())
    cli, srv_err = serve_and_call(env, [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d",
                                        str(tmp_path), port],
                                  [sys.executable, APPS, "urllib", f"http://127.0.0.1:{port}/blob"],
                                  "listening on 127.0.0.1")
    assert cli.stdout.strip() == hashlib.sha256(body).hexdigest()
    assert f"127.0.0.1:{port} over rsockets" in cli.stderr, cli.stderr
    assert "accepted 127.0.0.1:" in srv_err, srv_err


def test_plain_tcp_peer_falls_back(env):
    port = str(free_port())
    cli, _ = serve_and_call(env, [sys.executable, APPS, "socketserver-server", port],
                            [sys.executable, APPS, "socketserver-client", port], "listening", accel_server=False)
    assert cli.stdout.strip() == ECHO_SHA
    assert f"127.0.0.1:{port} not over rsockets" in cli.stderr, cli.stderr
