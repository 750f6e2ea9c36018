"""``softrdma run --sockets`` on unmodified programs (http.server and
urllib, a socketserver echo, an asyncio stream server and client): their
TCP connections go over rsockets when both ends run this way, and over
TCP when the peer is a plain program; and softrdma.rsocket.aio's own
streams (asyncio echo over rsockets)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm
from wait_helpers import DEADLINE_S, free_port, wait_line

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "sockets_apps.py")


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("rsock-run") as d:
        yield d


def env_of(daemon) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_SOCKETS_DEBUG": "1"}


def accel(args):
    return [sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--sockets", "--", *args]


def serve_and_run(env, server_args, client_args, accel_server=True, accel_client=True, cwd=None):
    srv = subprocess.Popen(accel(server_args) if accel_server else server_args, env=env, cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(srv.stdout, r"ready|Serving HTTP", DEADLINE_S, proc=srv)
        cli = subprocess.run(accel(client_args) if accel_client else client_args, env=env, capture_output=True,
                             text=True, timeout=DEADLINE_S * 2)
    finally:
        srv.terminate()
        try:
            _, serr = srv.communicate(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            srv.kill()
            _, serr = srv.communicate()
    assert cli.returncode == 0, (cli.stdout, cli.stderr, serr)
    return cli, serr


def check_digests(out: str) -> None:
    got, want = out.split()
    assert got == want


@pytest.mark.parametrize("kind", ["echo", "aio"])
def test_echo_over_rsockets(daemon, kind):
    port = str(free_port())
    cli, serr = serve_and_run(env_of(daemon), [sys.executable, APPS, f"{kind}-server", port],
                              [sys.executable, APPS, f"{kind}-client", port, str(4 << 20)])
    check_digests(cli.stdout)
    assert f"127.0.0.1:{port} over rsockets" in cli.stderr
    assert "over TCP and rsockets" in serr and "over rsockets" in serr.split("accepted", 1)[1]


def test_fallback_to_tcp(daemon):
    """An accelerated client to a plain server: rdma_cm refuses, TCP carries it."""
    port = str(free_port())
    cli, _ = serve_and_run(env_of(daemon), [sys.executable, APPS, "echo-server", port],
                           [sys.executable, APPS, "echo-client", port, str(1 << 20)], accel_server=False)
    check_digests(cli.stdout)
    assert "not over rsockets" in cli.stderr and "): TCP" in cli.stderr
    # and a plain client to an accelerated server: its TCP listen still answers
    cli, _ = serve_and_run(env_of(daemon), [sys.executable, APPS, "echo-server", port],
                           [sys.executable, APPS, "echo-client", port, str(1 << 20)], accel_client=False)
    check_digests(cli.stdout)


def test_http_server_and_urllib(daemon, tmp_path):
    blob = os.urandom(3 << 20)
    (tmp_path / "blob.bin").write_bytes(blob)
    port = str(free_port())
    code = ("import urllib.request, hashlib, sys\n"
            f"d = urllib.request.urlopen('http://127.0.0.1:{port}/blob.bin', timeout=60).read()\n"
            "print(hashlib.sha256(d).hexdigest())\n"
            f"print(len(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=60).read()) > 0)\n")
    cli, serr = serve_and_run(env_of(daemon), [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", port],
                              [sys.executable, "-c", code], cwd=str(tmp_path))
    assert cli.stdout.split() == [hashlib.sha256(blob).hexdigest(), "True"]
    assert cli.stderr.count("over rsockets") == 2 and serr.count("accepted") == 2


def test_asyncio_streams(daemon, monkeypatch):
    """softrdma.rsocket.aio: start_rsocket_server / open_rsocket_connection."""
    monkeypatch.setenv("SOFTRDMA_RUN", daemon.run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    from softrdma.rsocket.aio import open_rsocket_connection, start_rsocket_server

    async def handle(r, w):
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        w.close()

    async def main():
        port = free_port()
        srv = await start_rsocket_server(handle, "127.0.0.1", port)
        r, w = await open_rsocket_connection("127.0.0.1", port)
        data = os.urandom(2 << 20)

        async def send():
            w.write(data)
            await w.drain()
        got, _ = await asyncio.gather(r.readexactly(len(data)), send())
        w.write_eof()
        assert await r.read() == b""
        w.close()
        srv.close()
        await srv.wait_closed()
        return got == data

    assert asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
