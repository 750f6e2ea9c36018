"""DCQCN end to end: two ``ib_write_bw`` flows from two sender namespaces
into one receiver through an ECN-marking switch namespace (nftables:
CE marks above 100 MB/s, drops above 150 MB/s, not-ECT traffic dropped
above 100 MB/s), each host with its own softrdmad.  With DCQCN on (the
default) the switch marks, the receiver sends CNPs, the senders cut their
rates: both flows share the link fairly and hardly any packet is lost.
With it off (every priority's notification and reaction points off) the
same incast loses packets at the switch and the go-back-N retransmissions
follow."""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from incast_helpers import PY, Incast, jain
from netns_helpers import need_root


def _run(dcqcn: bool) -> dict:
    need_root()
    if not shutil.which("nft"):
        pytest.fail("nftables is a test dependency (the README's install line)")
    ic = Incast(flows=2, mark_rate=100, drop_rate=150)
    sender = ic.sw.senders[0]

    def probe():
        """What a user sees of the limiter mid-run: rdma -dd's driver attributes, top's
        column.  Looked at again for up to 2 s until both show one: a limiter whose rate
        has climbed back to the line rate is gone until the next CNP."""
        end = time.monotonic() + 2
        while True:
            res = ic.call(sender, PY, "-m", "softrdma", "rdma", "-dd", "resource", "show", "qp")
            top = json.loads(ic.call(sender, PY, "-m", "softrdma", "top", "--once", "-j", "-i", "0.2"))
            if ("rp_current_rate" in res and any(q["dcqcn_rate_mbps"] for q in top["qps"])) or \
                    time.monotonic() > end:
                return res, top
    try:
        ic.up(dcqcn)
        return ic.run(duration=6, probe=probe)
    finally:
        ic.down()


def test_incast_with_and_without_dcqcn():
    on = _run(True)
    off = _run(False)
    print("on:", {k: v for k, v in on.items() if k != "series"})
    print("off:", {k: v for k, v in off.items() if k != "series"})
    # on: the counters move as named, along the whole loop
    assert on["switch_skbs"]["mark"] > 0
    assert on["np_ecn_marked_roce_packets"] > 0 and on["np_cnp_sent"] > 0
    assert all(f["rp_cnp_handled"] > 0 and f["rp_cnp_ignored"] == 0 for f in on["flows"])
    # ... and on the wire: the data ECN-capable (only ECT packets are marked), CNPs with DSCP 48, Not-ECT
    assert on["switch_skbs"]["cnp"] > 0 and on["np_cnp_sent"] > 0
    # ... and the sender's limiter is visible: rdma -dd resource show qp, softrdma top
    res, top = on["probe"]
    assert re.search(r"rp_current_rate \d+ rp_target_rate \d+ rp_alpha \d+", res), res
    assert any(q["dcqcn_rate_mbps"] for q in top["qps"]), top["qps"]
    res, top = off["probe"]
    assert "rp_current_rate" not in res and not any(q["dcqcn_rate_mbps"] for q in top["qps"])
    # off: no ECN at all -- the switch drops instead, the senders retransmit
    assert off["switch_skbs"]["mark"] == 0 and off["switch_skbs"]["red"] > 0
    assert off["np_cnp_sent"] == 0 and all(f["rp_cnp_handled"] == 0 for f in off["flows"])
    assert off["switch_skbs"]["cnp"] == 0
    assert off["retransmitted_pkts"] > 0
    # on: fair, far fewer packets dropped by the switch, fewer retransmissions, at
    # least the goodput of off.  (The switch's drops are what DCQCN prevents; on a
    # two-core machine the receiving host also loses packets of its own -- its
    # socket overflowing while its daemon is descheduled -- and those are
    # retransmitted either way: the retransmissions fall less than the drops.)
    assert on["jain"] >= 0.85, on["flows"]
    assert on["switch_skbs"]["red"] * 5 <= off["switch_skbs"]["red"], (on["switch_skbs"], off["switch_skbs"])
    assert on["retransmitted_pkts"] < off["retransmitted_pkts"], (on["retransmitted_pkts"],
                                                                  off["retransmitted_pkts"])
    assert on["goodput_MiB_s"] >= 0.8 * off["goodput_MiB_s"]
    # converged: over the second half of the run each flow had a fair share of the link
    rates = on["series"]["rates"]
    busy = [r for r in rates if sum(r) > 0]
    half = busy[len(busy) // 2:]
    assert half, rates
    means = [sum(r[i] for r in half) / len(half) for i in range(2)]
    assert jain(means) >= 0.85, means
