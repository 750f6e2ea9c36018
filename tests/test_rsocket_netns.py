"""softrdma rsockets between two hosts (network namespaces joined by a
veth pair, each with its softrdmad): a 100 MB byte-exact stream, again
with the kernel dropping RoCE packets on the link (nftables), and 100
connections at once."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from netns_helpers import TwoHosts, need_root
from rsocket_helpers import popen_with, run_peers
from wait_helpers import free_port


@pytest.fixture
def hosts():
    need_root()
    h = TwoHosts()
    h.start_daemons()
    yield h
    h.close()


def _env(hosts, i: int) -> dict:
    return {**os.environ, "SOFTRDMA_RUN": hosts.run_dirs[i], "SOFTRDMA_AUTOSTART": "0"}


def _peers(hosts, conns: int, nbytes: int, timeout: float = 600) -> None:
    run_peers(popen_with(_env(hosts, 1), ["ip", "netns", "exec", hosts.ns[1]]),
              popen_with(_env(hosts, 0), ["ip", "netns", "exec", hosts.ns[0]]),
              hosts.ip[1], free_port(), conns, nbytes, timeout=timeout)


@pytest.mark.slow
def test_100mb_across_namespaces(hosts):
    _peers(hosts, 1, 100 << 20)


@pytest.mark.slow            # about a minute: every drop costs an RC retransmission timeout
def test_100mb_with_loss(hosts):
    if not shutil.which("nft"):
        if os.environ.get("CI") == "true":
            pytest.fail("CI installs nftables: this test must run")
        pytest.skip("needs nft")
    # the kernel drops 0.5% of the RoCE packets arriving in each namespace (each loss
    # costs the sender an ACK timeout: rdma_cm's default, 67 ms)
    for ns in hosts.ns:
        rules = ("add table inet softrdma_test\n"
                 "add chain inet softrdma_test in { type filter hook input priority 0; }\n"
                 "add rule inet softrdma_test in udp dport 4791 numgen random mod 200 == 0 counter drop\n")
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True)
    _peers(hosts, 1, 100 << 20)
    for ns in hosts.ns:
        drops = hosts.exec(ns, "nft", "list", "table", "inet", "softrdma_test").stdout
        assert "counter packets 0 " not in drops            # the kernel really dropped packets


@pytest.mark.slow
def test_100_sockets_across_namespaces(hosts):
    _peers(hosts, 100, 1 << 20)
