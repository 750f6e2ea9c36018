#!/usr/bin/env python3
"""Transport processing rate with no I/O: requester + responder + completer.

Two RC QPs are wired back to back in one process (packets handed over as
the same bytearrays, no ICRC, no sockets), and each case posts messages in
batches of ``--batch`` WQEs and shuttles packets until all complete.  The
figure is packets per second of CPU (requests + ACKs + responses, each
counted once, processed by both the sending and the receiving engine) --
the budget later layers spend.  Beside it, the machine's own limits in the
same run: bytes/s of a memoryview copy of the payload size, and the cost of
one CRC-32 over a full packet (what the ICRC will add), with the function
the ICRC uses (``wire.icrc.crc32``: ISA-L's where installed) and zlib's.

"runs" cases: the QPs emit their MIDDLE packets as SegmentRuns
(``qp.tx_runs``, as on a device's socket) and the harness hands them over as
a socket pair would -- ``fastpath.build_middles`` into GSO-sized buffers
(the ICRCs computed), ``fastpath.verify_segments`` on the other side (the
ICRCs checked), ``Segments`` to ``receive_batch``; every other packet one
by one as in the batched cases.  So the runs cases include ICRC work the
others leave out.

    python3 benchmarks/transport_bench.py            # all cases
    python3 benchmarks/transport_bench.py --profile  # + pyinstrument of the 64 B SEND case
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

from softrdma.enums import IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND  # noqa: E402
from softrdma.sim import Simulator, connect_qps  # noqa: E402
from softrdma.transport.wr import RecvWQE, SendWQE  # noqa: E402
from softrdma.wire import fastpath  # noqa: E402
from transport_helpers import run_buffers  # noqa: E402

ICRC_MOD = importlib.import_module("softrdma.wire.icrc")   # the module: wire.icrc is also a function


def make_pair(mtu_enum: int):
    # The simulator only builds the QPs; packets are shuttled by hand below.
    sim = Simulator()
    a, b = sim.add_node("a", "10.0.0.1"), sim.add_node("b", "10.0.0.2")
    qa, qb = a.create_qp(), b.create_qp()
    connect_qps(qa, qb, a, b, path_mtu=mtu_enum)
    return a, b, qa, qb


SRC, DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])        # the addresses the runs' ICRCs cover


def shuttle(a, b, qa, qb, mode: str) -> int:
    """Move packets between the two QPs until both are quiet; return count.
    Received packets are memoryviews, as a device's receive buffers are."""
    n = 0
    ta, tb = a.tx, b.tx
    while ta or tb:
        for tx, qp in ((ta, qb), (tb, qa)):
            if not tx:
                continue
            if mode == "runs":
                pkts: list = []
                for _, p, _ in tx:
                    if p.__class__ is fastpath.SegmentRun:
                        pkts.extend(run_buffers(p, SRC, DST))
                        n += p.count
                    else:
                        pkts.append(memoryview(p))
                        n += 1
            else:
                pkts = [memoryview(p) for _, p, _ in tx]
                n += len(pkts)
            tx.clear()
            if mode != "per packet":
                qp.receive_batch(pkts, 0.0)
            else:
                rx = qp.receive
                for p in pkts:
                    rx(p, 0.0)
    return n


def bench(op: str, size: int, mtu_enum: int, total_msgs: int, batch: int, mode: str = "per packet") -> dict:
    a, b, qa, qb = make_pair(mtu_enum)
    qa.tx_runs = qb.tx_runs = mode == "runs"
    ma = a.reg_mr(max(size, 64) * batch, 0xF)
    mb = b.reg_mr(max(size, 64) * batch, 0xF)
    ma.write(os.urandom(len(ma.buf)))
    opcode = {"send": IBV_WR_SEND, "write": IBV_WR_RDMA_WRITE, "read": IBV_WR_RDMA_READ}[op]
    pkts = 0
    sent = 0
    t0 = time.perf_counter()
    wid = 0
    while sent < total_msgs:
        k = min(batch, total_msgs - sent)
        if op == "send":
            for i in range(k):
                qb.post_recv(RecvWQE(i, [(mb.addr + i * size, size, mb.lkey)]))
        for i in range(k):
            wid += 1
            qa.post_send(SendWQE(wid, opcode, [(ma.addr + i * size, size, ma.lkey)],
                                 remote_addr=mb.addr + i * size, rkey=mb.rkey))
        pkts += shuttle(a, b, qa, qb, mode)
        qa.send_cq.entries.clear()
        qb.recv_cq.entries.clear()
        sent += k
    dt = time.perf_counter() - t0
    assert qa.state == 3 and qb.state == 3, "QPs left RTS"
    return {"op": op + ("" if mode == "per packet" else " " + mode), "size": size, "mtu": 128 << mtu_enum, "msgs": total_msgs, "pkts": pkts,
            "secs": dt, "pps": pkts / dt, "msg_rate": total_msgs / dt,
            "gbps": total_msgs * size * 8 / dt / 1e9}


def memcpy_rate(size: int, reps: int = 2000) -> float:
    src = memoryview(bytearray(os.urandom(size)))
    dst = memoryview(bytearray(size))
    t0 = time.perf_counter()
    for _ in range(reps):
        dst[:] = src
    return size * reps / (time.perf_counter() - t0)


def crc_cost(nbytes: int, reps: int = 20000, crc32=zlib.crc32) -> float:
    buf = os.urandom(nbytes)
    t0 = time.perf_counter()
    for _ in range(reps):
        crc32(buf)
    return (time.perf_counter() - t0) / reps


CASES = [
    ("send", 64, 5, 200_000, 64),
    ("write", 65536, 5, 20_000, 16),
    ("read", 65536, 5, 20_000, 16),
    ("send", 4096, 3, 100_000, 64),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply message counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the best is shown")
    ap.add_argument("--profile", action="store_true", help="pyinstrument the 64 B SEND case")
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"machine limits: memoryview copy 64 KiB {memcpy_rate(65536) / 1e9:.2f} GB/s, "
          f"4 KiB {memcpy_rate(4096) / 1e9:.2f} GB/s; zlib.crc32 of 4 KiB {crc_cost(4096) * 1e6:.2f} us, "
          f"of 76 B {crc_cost(76) * 1e6:.3f} us; the ICRC's crc32 ({ICRC_MOD.CRC32_IMPL}) of 4 KiB "
          f"{crc_cost(4096, crc32=ICRC_MOD.crc32) * 1e6:.2f} us, of 76 B {crc_cost(76, crc32=ICRC_MOD.crc32) * 1e6:.3f} us")
    print(f"{'case':<30}{'messages':>10}{'packets':>10}{'seconds':>9}{'packets/s':>12}{'msgs/s':>11}{'Gbit/s':>9}")
    print(f"(runs: the compiled loops are {'in use' if fastpath.IMPL == 'c' else 'not built: the Python reference runs'})")
    for mode in ("per packet", "batched", "runs"):
        for op, size, mtu, n, batch in CASES:
            if mode == "runs" and size <= 128 << mtu:
                continue                       # a single packet per message: nothing to run
            best = None
            for _ in range(args.repeat):
                r = bench(op, size, mtu, int(n * args.scale), batch, mode)
                if best is None or r["secs"] < best["secs"]:
                    best = r
            name = f"{best['op']} {size} B mtu {best['mtu']}"
            print(f"{name:<30}{best['msgs']:>10}{best['pkts']:>10}{best['secs']:>9.2f}{best['pps']:>12,.0f}"
                  f"{best['msg_rate']:>11,.0f}{best['gbps']:>9.2f}")
    if args.profile:
        from pyinstrument import Profiler
        p = Profiler(interval=0.0005)
        p.start()
        bench("send", 64, 5, 50_000, 64)
        p.stop()
        print(p.output_text(unicode=False, color=False, show_all=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
