"""What the rsocket tests share: running tests/programs/rsocket_peer.py
as a server and a client and checking every connection's bytes."""

from __future__ import annotations

import os
import subprocess
import sys

from wait_helpers import DEADLINE_S, wait_line

PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "rsocket_peer.py")


def run_peers(popen_server, popen_client, host: str, port: int, conns: int, nbytes: int,
              timeout: float = 300) -> list[str]:
    """Server, then client once the server listens; returns the client's
    lines after checking that every connection's count and digest match."""
    srv = popen_server([sys.executable, PEER, "server", host, str(port), str(conns)])
    cli = None
    try:
        wait_line(srv.stdout, "listening", DEADLINE_S, proc=srv)
        cli = popen_client([sys.executable, PEER, "client", host, str(port), str(conns), str(nbytes)])
        out, err = cli.communicate(timeout=timeout)
        assert cli.returncode == 0, (out, err)
        srv.wait(timeout=DEADLINE_S)
        assert srv.returncode == 0, srv.stderr.read()
    finally:
        for p in (srv, cli):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    lines = out.splitlines()
    assert len(lines) == conns, out
    for line in lines:
        got, digest, want = line.split()
        assert int(got) == nbytes and digest == want, line
    return lines


def popen_with(env: dict, prefix: list[str] = ()):
    def popen(args):
        return subprocess.Popen([*prefix, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return popen
