"""The messenger example end to end through a daemon: a publisher and three
subscribers, and a subscriber killed mid-stream while the survivors receive
every message once, in order, byte-exact."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm
from netns_helpers import TwoHosts, need_root
from softrdma.runner import shim_path
from wait_helpers import free_port, wait_line

EX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "messenger")


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("msgr") as d:
        yield d


def _env(d):
    return dict(d.env, PYTHONPATH=shim_path() + os.pathsep + os.environ.get("PYTHONPATH", ""),
                SOFTRDMA_AUTOSTART="0")


def _cmd(prog, *args):
    return [sys.executable, os.path.join(EX, prog), *map(str, args)]


def _on_daemon(d):
    """Start a demo program on daemon ``d`` (role is "pub" or "sub")."""
    def start(role, prog, *args):
        return subprocess.Popen(_cmd(prog, *args), env=_env(d), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    return start


class Procs:
    """Every process a test starts, ended by the test whatever happens."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def add(self, p):
        self.procs.append(p)
        return p

    def end(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()


def _run(start, count, size, kill_one=False, addr="127.0.0.1"):
    port = free_port()
    procs = Procs()
    try:
        pub = procs.add(start("pub", "publisher.py", addr, port, "--subscribers", 3, "--count", count,
                               "--size", size))
        _, pub_lines = wait_line(pub.stdout, "listening", proc=pub)
        subs = []
        for i in range(3):
            extra = ["--stall-after", 40] if kill_one and i == 1 else []
            s = procs.add(start("sub", "subscriber.py", addr, port, "--count", count, "--size", size,
                                 *extra))
            wait_line(s.stdout, "^connected", proc=s)
            subs.append(s)
        if kill_one:
            wait_line(subs[1].stdout, "^stalled", proc=subs[1])   # it holds its credits: the stream waits
            subs[1].send_signal(signal.SIGKILL)
            subs[1].wait()
            _, more = wait_line(pub.stdout, "subscriber left", proc=pub)
            pub_lines += more
        outs = {}
        for i, s in enumerate(subs):
            if kill_one and i == 1:
                continue
            outs[i], _ = s.communicate(timeout=300)
            assert s.returncode == 0, outs[i]
        out, _ = pub.communicate(timeout=300)
        assert pub.returncode == 0, "".join(pub_lines) + out
        return "".join(pub_lines) + out, outs
    finally:
        procs.end()


def test_publisher_three_subscribers(daemon):
    """300 messages of 20 000 bytes (three fragments each) to three subscribers."""
    pub, subs = _run(_on_daemon(daemon), 300, 20000)
    assert pub.count("subscriber ") >= 3 and "subscriber 3 connected" in pub
    assert re.search(r"done: 300 messages", pub)
    assert "2700 fragments sent" in pub, pub          # 3 fragments x 300 messages x 3 subscribers
    for out in subs.values():
        assert "done: 300 messages in order, byte-exact, no duplicates" in out, out


def test_subscriber_killed_mid_stream(daemon):
    """A subscriber stops reading after 40 messages and is SIGKILLed; the
    publisher (throttled by its credits meanwhile) carries on, and the two
    survivors get all 400 messages once each, in order, byte-exact (each
    checks every message's number and bytes and fails otherwise)."""
    pub, subs = _run(_on_daemon(daemon), 400, 12000, kill_one=True)
    assert sorted(subs) == [0, 2]
    m = re.search(r"subscriber left \(.*\) while publishing message (\d+); 2 left", pub)
    assert m and int(m.group(1)) < 200, pub           # killed mid-stream: the publisher was held back
    assert pub.index("subscriber left") < pub.index("done: 400 messages"), pub
    for out in subs.values():
        assert "done: 400 messages in order, byte-exact, no duplicates" in out, out


@pytest.mark.slow
def test_across_namespaces_with_a_subscriber_killed():
    """The publisher in one namespace, three subscribers in another (two
    daemons, RoCE over a veth pair); one subscriber is SIGKILLed mid-stream."""
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()
        path = shim_path() + os.pathsep + os.environ.get("PYTHONPATH", "")

        def start(role, prog, *args):
            return h.popen(0 if role == "pub" else 1, ["env", f"PYTHONPATH={path}", *_cmd(prog, *args)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        pub, subs = _run(start, 300, 65536, kill_one=True, addr=h.ip[0])
        assert re.search(r"subscriber left \(.*\) while publishing message \d+; 2 left", pub), pub
        assert "done: 300 messages" in pub, pub
        for out in subs.values():
            assert "done: 300 messages in order, byte-exact, no duplicates" in out, out
    finally:
        h.close()
