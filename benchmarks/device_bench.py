#!/usr/bin/env python3
"""Device data path: RC through softrdmad, beside the machine's limits.

Measures, in one run:
  * memcpy: memoryview copy of 1 MiB (the ceiling for same-host WRITE);
  * raw UDP: a plain Python sender blasting 1 KiB datagrams over loopback
    (the ceiling a Python RoCE stack's socket path competes with);
  * same daemon: 1 MiB RDMA WRITE bandwidth (16 in flight) and the RTT of a
    2-byte RC SEND ping-pong, two QPs on one device (loopback path);
  * across namespaces (root): two daemons in two netns over veth, 1 MiB
    RDMA WRITEs with the sender's throughput, MTU 1024 (as tests/programs/rc_xfer.py).

    python3 benchmarks/device_bench.py [--writes 300] [--pings 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from softrdma.enums import IBV_MTU_4096, IBV_QPT_RC, IBV_WC_RECV, IBV_WR_RDMA_WRITE, IBV_WR_SEND  # noqa: E402


def memcpy_rate(size=1 << 20, reps=300) -> float:
    src, dst = memoryview(bytearray(os.urandom(size))), memoryview(bytearray(size))
    t = time.perf_counter()
    for _ in range(reps):
        dst[:] = src
    return size * reps / (time.perf_counter() - t)


def udp_blast(seconds=1.0, size=1024) -> tuple[float, float]:
    """(sent, received) bytes/s of a plain Python UDP sender on loopback."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = os.urandom(size)
    dst = rx.getsockname()
    sent = got = 0
    buf = bytearray(65536)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(64):
            try:
                tx.sendto(payload, dst)
                sent += size
            except BlockingIOError:
                break
        while True:
            try:
                got += rx.recv_into(buf)
            except BlockingIOError:
                break
    dt = time.perf_counter() - t0
    rx.close(), tx.close()
    return sent / dt, got / dt


def same_daemon(writes: int, pings: int) -> dict:
    from daemon_helpers import daemon_in_shm
    from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
    with daemon_in_shm("bench") as d:
        os.environ["SOFTRDMA_RUN"] = d.run_dir
        ctx = device.Context(name="rxe0")
        p = pd.PD(ctx)
        ma, mb = mr.MR(p, 1 << 20, 15), mr.MR(p, 1 << 20, 15)
        ca, cb = cq.CQ(ctx, 256), cq.CQ(ctx, 256)
        cap = qp.QPCap(max_send_wr=128, max_recv_wr=128)
        qa = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=ca, rcq=ca, cap=cap))
        qb = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=cb, rcq=cb, cap=cap))
        gid = ctx.query_gid(1, 1)
        for q, peer in ((qa, qb), (qb, qa)):
            a = qp.QPAttr()
            a.qp_access_flags, a.path_mtu, a.dest_qp_num = 15, IBV_MTU_4096, peer.qp_num
            a.max_dest_rd_atomic = a.max_rd_atomic = 4
            a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
            a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=gid, sgid_index=1), is_global=1)
            q.to_rts(a)
        t = time.perf_counter()
        done = posted = 0
        while done < writes:
            while posted < writes and posted - done < 16:
                w = wr.SendWR(posted, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(ma.buf, 1 << 20, ma.lkey)])
                w.set_wr_rdma(mb.rkey, mb.buf)
                qa.post_send(w)
                posted += 1
            done += ca.poll(16)[0]
        write_bw = writes * (1 << 20) / (time.perf_counter() - t)
        for i in range(64):
            qb.post_recv(wr.RecvWR(i, 1, [wr.SGE(mb.buf, 64, mb.lkey)]))
            qa.post_recv(wr.RecvWR(i, 1, [wr.SGE(ma.buf + 4096, 64, ma.lkey)]))
        lat = []
        for i in range(pings):
            t0 = time.perf_counter()
            qa.post_send(wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(ma.buf, 2, ma.lkey)]))
            while not any(x.opcode == IBV_WC_RECV for x in cb.poll(4)[1]):
                pass
            qb.post_recv(wr.RecvWR(i, 1, [wr.SGE(mb.buf, 64, mb.lkey)]))
            qb.post_send(wr.SendWR(i, IBV_WR_SEND, 1, sg=[wr.SGE(mb.buf, 2, mb.lkey)]))
            while not any(x.opcode == IBV_WC_RECV for x in ca.poll(4)[1]):
                pass
            qa.post_recv(wr.RecvWR(i, 1, [wr.SGE(ma.buf + 4096, 64, ma.lkey)]))
            lat.append(time.perf_counter() - t0)
        lat.sort()
        ctx.close()
        return {"write_1MiB_Bps": write_bw, "pingpong_rtt_median_us": lat[len(lat) // 2] * 1e6,
                "pingpong_rtt_p99_us": lat[int(len(lat) * 0.99)] * 1e6}


def across_namespaces(mib: int) -> dict | None:
    if os.geteuid() != 0:
        return None
    from netns_helpers import TwoHosts
    import test_device_netns as t
    h = TwoHosts()
    try:
        h.start_daemons()
        r = t._xfer(h, mib)
        return {"write_1MiB_Bps": r["MBps"] * 1e6}
    finally:
        h.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=300)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--ns-mib", type=int, default=64)
    args = ap.parse_args()
    mc = memcpy_rate()
    us, ur = udp_blast()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"limits: memoryview copy 1 MiB {mc / 1e6:,.0f} MB/s; plain Python UDP sender (1 KiB) "
          f"{us / 1e6:,.0f} MB/s sent, {ur / 1e6:,.0f} MB/s received")
    s = same_daemon(args.writes, args.pings)
    print(f"same daemon: 1 MiB RDMA WRITE {s['write_1MiB_Bps'] / 1e6:,.1f} MB/s "
          f"({s['write_1MiB_Bps'] / mc:.2%} of memcpy); 2 B SEND ping-pong RTT median "
          f"{s['pingpong_rtt_median_us']:.1f} us, p99 {s['pingpong_rtt_p99_us']:.1f} us")
    x = across_namespaces(args.ns_mib)
    if x is None:
        print("across namespaces: skipped (needs root)")
    else:
        print(f"across namespaces (veth, MTU 1024): 1 MiB RDMA WRITE {x['write_1MiB_Bps'] / 1e6:,.1f} MB/s "
              f"({x['write_1MiB_Bps'] / us:.1%} of the plain UDP sender)")
    print(json.dumps({"memcpy_Bps": mc, "udp_sent_Bps": us, "same_daemon": s, "across": x}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
