#!/usr/bin/env python3
"""The daemon's work per small SEND between two QPs of one device, in process.

    python3 benchmarks/sendpath_bench.py [--size 64] [--batch 64] [--iters 300]

Two connected RC QPs of one ``Device`` with real shared-memory rings (the
rig of tests/test_device_sendpath.py): each iteration writes ``--batch``
receive and send WQEs into the rings as the library does (not timed), then
times ``Device.poll_rings`` -- everything the daemon does for them: reading
the slots, the checks, the copies, the counters, the CQEs -- and empties
the CQs (not timed).  Printed: us per message, median of the iterations,
with the same-daemon SEND path (``device.sendpath``) and without it (every
slot through ``SendWQE``/``RecvWQE``, ``QP.post_send`` and
``transport.loopback``), alternating, so that a busy machine's drift hits
both.  No scheduler in the figure: this is the daemon's CPU per message,
what bounds ``ib_send_bw -s 64`` on one daemon when it has a core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from softrdma.device import core, sendpath  # noqa: E402
from test_device_sendpath import Rig  # noqa: E402
from softrdma.enums import IBV_SEND_SIGNALED  # noqa: E402


def one(rig: Rig, size: int, batch: int) -> float:
    for i in range(batch):
        rig.recv(i, size, off=(i % 64) * size)
    for i in range(batch):
        rig.send(i, size, flags=IBV_SEND_SIGNALED)
    rig.now += 1e-6
    t = time.perf_counter()
    rig.dev.poll_rings(rig.now)
    dt = time.perf_counter() - t
    rig.cqes()
    return dt / batch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--iters", type=int, default=300)
    a = ap.parse_args()
    rigs = {}
    for name in ("slot to slot", "objects"):
        rig = Rig(sq_wr=max(a.batch, 128), rq_wr=max(a.batch, 128), cqe=4 * max(a.batch, 128))
        rig.resolve_route()
        rig.cqes()
        rigs[name] = rig
    got = {name: [] for name in rigs}
    real = sendpath.send_burst
    for _ in range(a.iters):
        for name, rig in rigs.items():
            core.send_burst = real if name == "slot to slot" else (lambda *x: 0)
            got[name].append(one(rig, a.size, a.batch))
    core.send_burst = real
    for name, v in got.items():
        print(f"{name:>13}: {statistics.median(v) * 1e6:6.2f} us/message (median of {a.iters} batches of "
              f"{a.batch} {a.size}-byte SENDs; best {min(v) * 1e6:.2f})")
    for rig in rigs.values():
        rig.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
