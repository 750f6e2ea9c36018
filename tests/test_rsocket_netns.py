"""softrdma rsockets between two hosts (network namespaces joined by a
veth pair, each with its softrdmad): a 100 MB byte-exact stream, again
with the kernel dropping RoCE packets on the link (nftables), and 100
connections at once."""

from __future__ import annotations

import os

import pytest

from netns_helpers import hosts  # noqa: F401 (a fixture)
from rsocket_helpers import popen_with, run_peers
from wait_helpers import free_port


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
    # the kernel drops 0.5% of the RoCE packets arriving in each namespace (each loss
    # costs the sender an ACK timeout: rdma_cm's default, 67 ms)
    hosts.drop_roce(200)
    _peers(hosts, 1, 100 << 20)
    assert hosts.roce_dropped()                             # the kernel really dropped packets


@pytest.mark.slow
def test_100_sockets_across_namespaces(hosts):
    _peers(hosts, 100, 1 << 20)
