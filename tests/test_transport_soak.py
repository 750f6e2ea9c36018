"""Soak: RC traffic through the lossy simulator, byte-exact at every step.

At least SOFTRDMA_SOAK_PACKETS packets (default 1,000,000: every link's
``sent``, so requests, retransmissions, ACKs and READ responses all count)
cross a link with 10 % loss, 10 % reordering and 5 % duplication each way.
The traffic is batches of 64 random SEND / SEND_WITH_IMM / RDMA_WRITE /
WRITE_WITH_IMM / READ / FETCH_AND_ADD / CMP_AND_SWP (sizes 0 .. 3 MTU + 1,
one 8..200-packet message per batch, multi-SGE buffers), each batch checked
against the byte-for-byte model of ``sim_helpers.RCWorkload``; the PSN
starts just below 0xFFFFFF so the run wraps.

1,000,000 packets take ~20 s on the development machine (~50k packets/s);
``benchmarks/soak.py`` runs the same thing and prints the figures.
"""

from __future__ import annotations

import os

import pytest

from sim_helpers import soak

SOAK_PACKETS = int(os.environ.get("SOFTRDMA_SOAK_PACKETS", "1000000"))


@pytest.mark.slow
def test_rc_soak_lossy_reordering_duplicating_link_byte_exact():
    res = soak(SOAK_PACKETS, seed=1, loss=0.10, reorder=0.10, dup=0.05)
    print(res.summary())
    assert res.byte_exact
    assert res.packets >= SOAK_PACKETS
    # the faults really happened, and the transport really recovered from them
    assert res.lost > 0.05 * res.packets and res.duplicated > 0.02 * res.packets
    assert res.reordered > 0.05 * res.packets
    assert res.retransmissions > 0 and res.counters.get("duplicate_request", 0) > 0
    assert res.counters.get("out_of_seq_request", 0) > 0
    # giving up (RETRY_EXC_ERR, checked as such batch by batch) is legal but must stay rare
    assert res.retry_exc <= max(2, res.batches // 200), res.summary()
