"""Two network namespaces joined by a veth pair, each with its own
softrdmad: two hosts on one machine (root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from wait_helpers import DEADLINE_S, free_port, stop, wait_for, wait_listening
from shm_helpers import shm_dir


def need_root() -> None:
    if os.geteuid() != 0 or not shutil.which("ip"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root with iproute2: this test must run")
        pytest.skip("needs root and iproute2 (network namespaces)")


def need_nft() -> None:
    """nftables is a test dependency (the README's install line): under CI a
    missing one fails the test, elsewhere it skips."""
    if not shutil.which("nft"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI installs nftables: this test must run")
        pytest.skip("needs nft")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


class TwoHosts:
    """Namespaces A and B; A has 10.201.N.1 on its veth, B 10.201.N.2."""

    def __init__(self, mtu: int = 1500):
        tag = os.getpid() % 100000
        self.ns = (f"srdma-a{tag}", f"srdma-b{tag}")
        self.dev = (f"sra{tag}", f"srb{tag}")
        net = tag % 250
        self.ip = (f"10.201.{net}.1", f"10.201.{net}.2")
        self.run_dirs = [shm_dir(f"softrdma-ns{i}-{tag}") for i in range(2)]
        self.daemons: list[subprocess.Popen] = []
        for ns in self.ns:
            sh("ip", "netns", "del", ns, check=False)
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name", self.dev[1],
           "netns", self.ns[1])
        for ns, dev, ip in zip(self.ns, self.dev, self.ip):
            self.exec(ns, "ip", "link", "set", "lo", "up")
            self.exec(ns, "ip", "link", "set", dev, "mtu", str(mtu), "up")
            self.exec(ns, "ip", "addr", "add", f"{ip}/24", "dev", dev)

    def exec(self, ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ip", "netns", "exec", ns, *args, check=check)

    def popen(self, i: int, args: list[str], **kw) -> subprocess.Popen:
        env = {**os.environ, "SOFTRDMA_RUN": self.run_dirs[i], "SOFTRDMA_AUTOSTART": "0"}
        return subprocess.Popen(["ip", "netns", "exec", self.ns[i], *args], env=env, **kw)

    def start_daemons(self, args=()) -> None:
        """``args``: more softrdmad options for both (``--cpu 1``)."""
        for i in range(2):
            os.makedirs(self.run_dirs[i], exist_ok=True)
            log = open(os.path.join(self.run_dirs[i], "test-daemon.log"), "w")
            self.daemons.append(self.popen(i, [sys.executable, "-m", "softrdma", "daemon", "-f", "--run-dir",
                                               self.run_dirs[i], "--device", f"rxe0:{self.dev[i]}", *args],
                                           stdout=log, stderr=subprocess.STDOUT))
        for i in range(2):
            pid = os.path.join(self.run_dirs[i], "softrdmad.pid")
            try:
                # 60 s only bounds a failure; a daemon that exited fails at once
                wait_for(lambda: os.path.exists(pid), DEADLINE_S, f"softrdmad in {self.ns[i]} to start",
                         proc=self.daemons[i])
            except AssertionError as e:
                raise RuntimeError(f"{e}; log: " + open(os.path.join(self.run_dirs[i], "test-daemon.log")).read()) \
                    from None

    def pingpong(self, args: list[str], timeout: float = 60) -> tuple[str, str]:
        """``softrdma ibv_rc_pingpong ARGS``: the server in B on a free port,
        the client in A once the server listens.  Returns (client output,
        server output); both must exit 0."""
        port = str(free_port())
        args = [sys.executable, "-m", "softrdma", "ibv_rc_pingpong", *args, "-p", port]
        srv = self.popen(1, args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        cli = None
        try:
            wait_listening(int(port), srv)
            cli = self.popen(0, [*args, self.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            cout, _ = cli.communicate(timeout=timeout)
            sout, _ = srv.communicate(timeout=timeout)
        finally:
            for p in (srv, cli):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
        assert cli.returncode == 0 and srv.returncode == 0, (cout, sout)
        return cout, sout

    def drop_roce(self, one_in: int) -> None:
        """The kernel of each namespace drops one RoCE packet in ``one_in``
        arriving there, at random (nftables ``numgen random``), counted."""
        need_nft()
        rules = ("add table inet softrdma_test\n"
                 "add chain inet softrdma_test in { type filter hook input priority 0; }\n"
                 f"add rule inet softrdma_test in udp dport 4791 numgen random mod {one_in} == 0 counter drop\n")
        for ns in self.ns:
            subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True)

    def roce_dropped(self) -> bool:
        """Whether the kernel of every namespace really dropped packets (``drop_roce``)."""
        return all("counter packets 0 " not in self.exec(ns, "nft", "list", "table", "inet", "softrdma_test").stdout
                   for ns in self.ns)

    def close(self) -> None:
        for d in self.daemons:
            stop(d, 30)
        for ns in self.ns:
            sh("ip", "netns", "del", ns, check=False)
        for r in self.run_dirs:
            shutil.rmtree(r, ignore_errors=True)


@pytest.fixture
def hosts():
    """Two hosts (network namespaces over a veth pair), a daemon in each."""
    need_root()
    h = TwoHosts()
    h.start_daemons()
    yield h
    h.close()
