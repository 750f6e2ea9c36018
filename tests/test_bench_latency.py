"""The latency benchmarks' arithmetic: hop_trace chains the stamps of one
round trip across four processes, hop by hop (the ACK beside it), and
perftest_bench reports the latency point as is and placed, every run's
figure.  Synthetic stamps with known hop times; no daemon."""

from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import hop_trace  # noqa: E402
import perftest_bench  # noqa: E402

# the hops of one round trip in ns, in hop_trace.HOPS order
STEPS = [3_000, 20_000, 3_000, 14_000, 1_000, 7_000, 21_000, 3_000, 15_000, 2_000]


def _streams(n: int, jitter: bool = False) -> dict[str, list[int]]:
    s: dict[str, list[int]] = {}
    t = 1_000_000
    order = [b for _, _, b in hop_trace.HOPS[:-1]]
    for i in range(n):
        s.setdefault("A.post", []).append(t)
        x = t
        for k, name in enumerate(order):
            x += STEPS[k] + (i % 3 if jitter else 0)
            s.setdefault(name, []).append(x)
            if name == "dB.rx":                                  # the ACK of this WRITE
                s.setdefault("dB.ack", []).append(x + 5_000)
                s.setdefault("dA.ackrx", []).append(x + 8_000)
                s.setdefault("A.cqe", []).append(x + 10_000)
        t = x + STEPS[-1]
    # noise that must not be taken for a hop: an earlier ring pass of daemon B
    s["dB.ring"].append(500)
    for v in s.values():
        v.sort()
    return s


def test_chain_recovers_every_hop():
    hops = hop_trace.chain(_streams(120), skip=10)
    assert len(hops["round trip (A post -> A post)"]) == 109           # the last post has no successor
    for (name, _, _), want in zip(hop_trace.HOPS, STEPS):
        assert statistics.median(hops[name]) == want / 1e3, name
    assert statistics.median(hops["round trip (A post -> A post)"]) == sum(STEPS) / 1e3
    ack = dict((name, v) for name, v in hops.items())
    assert statistics.median(ack["daemon B reads WRITE i -> sends its ACK"]) == 5.0
    assert statistics.median(ack["ACK sendmsg -> daemon A's read"]) == 3.0
    assert statistics.median(ack["daemon A reads the ACK -> app A's poll_cq has the CQE"]) == 2.0


def test_chain_drops_a_round_trip_with_a_missing_stamp():
    s = _streams(60)
    del s["dA.ring"][30]                                      # one pass the probe missed
    hops = hop_trace.chain(s, skip=0)
    n = len(hops["round trip (A post -> A post)"])
    assert n < 59                                             # that round trip (at least) is not chained ...
    assert statistics.median(hops["A post -> daemon A finds the WQE"]) == STEPS[0] / 1e3   # ... nor misread


def _results(latency_one: dict, latency_two: dict) -> dict:
    return {"limits": {"memcpy_1MiB_Bps": 1e10, "udp_pingpong_2B": {"t_typical": 7.0, "t_min": 6.0}},
            "one_daemon": {"targets": {}, "latency": latency_one},
            "two_namespaces": {"targets": {}, "latency": latency_two}}


def test_report_names_both_placements_and_every_run():
    one = {"as is": {"best": {"t_typical": 34.6}, "runs": [40.5, 34.6]},
           "placed": {"best": {"t_typical": 11.2}, "runs": [11.2, 11.5], "daemon": ["--cpu", "1"],
                      "applications": ["taskset", "-c", "0"]}}
    two = {"as is": {"best": {"t_typical": 74.6}, "runs": [74.6]},
           "placed": {"best": {"t_typical": 79.3}, "runs": [79.3], "daemon": ["--cpu", "1", "--spin-us", "5"],
                      "applications": ["taskset", "-c", "0"]}}
    rows = {name: (got, ok) for name, got, _, ok in perftest_bench.targets(_results(one, two))}
    assert rows["ib_write_lat 2 B typical, one daemon, as is"] == (
        "34.60 us (the best run; every run: 40.5, 34.6)", False)
    assert rows["ib_write_lat 2 B typical, one daemon, placed: daemon --cpu 1, applications taskset -c 0"] == (
        "11.20 us (the best run; every run: 11.2, 11.5)", True)
    got, ok = rows["ib_write_lat 2 B typical, across two namespaces, placed: daemons --cpu 1 --spin-us 5, "
                   "applications taskset -c 0"]
    assert got.startswith("79.30 us = 11.3x the Python UDP ping-pong's 7.0 us one way") and not ok


def test_report_reads_an_older_results_json():
    r = {"limits": {}, "one_daemon": {"targets": {"ib_write_lat": [{"bytes": 2, "t_typical": 32.0}]}}}
    rows = perftest_bench.targets(r)
    assert [(n, g) for n, g, _, _ in rows] == [("ib_write_lat 2 B typical, one daemon, as is", "32.00 us")]
