"""``softrdma demo``: the transport over a lossy simulated link, then the
real device.

Part 1 runs the real transport (requester/responder/completer) and the real
wire format (every packet carries an ICRC over its IPv4 header) inside the
deterministic simulator and prints what happened: the operations, the
link's losses/duplicates/reorders/corruptions, the retransmissions and NAKs
they caused, and whether every byte arrived exactly once.

Part 2 runs ``ibv_rc_pingpong`` as two processes on rxe0 of the embedded
default daemon (started on lo if none runs) and prints their output and the
device's counters; then ``rping`` connects two processes with rdma_cm (the
IB CM's REQ/REP/RTU over QP1 of the device) and pings five times.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import socket
import subprocess
import sys
import time

from .cliargs import int_range
from .uapi.rundir import default_run_dir
from .enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_WC_SUCCESS, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
    WC_STATUS_STR, bytes_to_mtu,
)
from .sim import Link, Simulator, connect_qps
from .transport.counters import Counter
from .transport.wr import RecvWQE, SendWQE
from .verbs.device import AutostartError, connect, management

ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC


def _pct(s: str) -> float:
    """A rate: "10%", "10" (above 1: percent) or "0.1"; 0 to 100%."""
    try:
        v = float(s.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid rate: {s!r} (e.g. 10% or 0.1)") from None
    rate = v / 100 if s.endswith("%") or v > 1 else v
    if not 0 <= rate <= 1:                       # (also NaN)
        raise argparse.ArgumentTypeError(f"invalid rate: {s} (0-100%)")
    return rate


MAX_SIZE = 1 << 24                               # the simulator keeps every buffer in memory
MAX_ITERS = 100_000


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--loss", type=_pct, default=0.10, help="packet loss rate (default 10%%)")
    p.add_argument("--dup", type=_pct, default=0.02, help="duplication rate (default 2%%)")
    p.add_argument("--reorder", type=_pct, default=0.05, help="reordering rate (default 5%%)")
    p.add_argument("--corrupt", type=_pct, default=0.01, help="bit-flip rate (default 1%%)")
    p.add_argument("-s", "--size", type=int_range(1, MAX_SIZE), default=65536,
                   help=f"bytes per message (default 65536, at most {MAX_SIZE})")
    p.add_argument("-n", "--iters", type=int_range(1, MAX_ITERS), default=32,
                   help=f"messages of each kind (default 32, at most {MAX_ITERS})")
    p.add_argument("-m", "--mtu", type=int, default=1024, choices=(256, 512, 1024, 2048, 4096),
                   help="path MTU (default 1024)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sim-only", action="store_true", help="only the simulated link, not the device")
    p.add_argument("--pp-iters", type=int_range(1, 10_000_000), default=1000, help="ping-pong iterations on the device (default 1000)")


def run(args: argparse.Namespace) -> int:
    rc = run_simulated(args)
    if args.sim_only:
        return rc
    print()
    return run_device(args) or rc


def run_device(args: argparse.Namespace) -> int:
    """The same story on the real device: ibv_rc_pingpong server and client,
    two processes, on rxe0 of the embedded default daemon (started if none
    runs), then what the device counted."""
    try:
        conn = connect(report=False)               # starts the embedded default if needed
    except AutostartError as e:
        print(f"softrdma demo: no device: {e.strerror}")
        return 1
    except OSError as e:
        why = (f"no softrdmad serves {default_run_dir()} and SOFTRDMA_AUTOSTART=0"
               if os.environ.get("SOFTRDMA_AUTOSTART", "1") == "0" else e.strerror)
        print(f"softrdma demo: no device: {why}")
        return 1
    try:
        devs = conn.call("devices")[0]["devices"]
    finally:
        conn.close()
    if not devs:
        print(f"softrdma demo: no device: the softrdmad serving {default_run_dir()} hosts none "
              "(add one: softrdma rdma link add rxe0 type rxe netdev lo)")
        return 1
    mgmt = management()
    link = mgmt.call("links")[0]["links"][0]
    gid_index = next((i for i, g in enumerate(link["gids"]) if g.startswith("00000000000000000000ffff")), 0)
    with socket.socket() as s:                      # a free TCP port for the out-of-band exchange
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = ".".join(str(int(link["gids"][gid_index][i:i + 2], 16)) for i in range(24, 32, 2))
    tool = [sys.executable, "-m", "softrdma", "ibv_rc_pingpong", "-d", link["ifname"], "-g", str(gid_index),
            "-p", str(port), "-n", str(args.pp_iters)]
    before = link["hw_counters"]
    print(f"softrdma demo: ibv_rc_pingpong between two processes on {link['ifname']} "
          f"(netdev {link['netdev']}, GID {gid_index} = {addr}), {args.pp_iters} iterations of 4096 B")
    server = subprocess.Popen(tool, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    _wait(server, lambda: _tcp_listening(port))       # the client starts once the server listens, however slow
    client = subprocess.run(tool + [addr], capture_output=True, text=True, timeout=120)
    sout, _ = server.communicate(timeout=120)
    for who, text in (("server", sout), ("client", client.stdout + client.stderr)):
        for line in text.strip().splitlines():
            print(f"  {who}: {line}")
    after = mgmt.call("links")[0]["links"][0]["hw_counters"]
    delta = {k: after[k] - before.get(k, 0) for k in ("sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs")}
    print("  device counters: " + ", ".join(f"{k} +{v}" for k, v in delta.items())
          + f"  (sysfs: {os.environ.get('SOFTRDMA_RUN') or 'the run dir'}/sys/class/infiniband/{link['ifname']})")
    ok = server.returncode == 0 and client.returncode == 0
    print("  result: " + ("both processes exchanged every message" if ok else "FAILED"))
    print()
    return 0 if ok and _rping(link, addr, port) else 1


def _tcp_listening(port: int) -> bool:
    """A TCP socket listens on ``port`` (/proc/net/tcp, tcp6)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        if any(r.split()[3] == "0A" and int(r.split()[1].rsplit(":", 1)[1], 16) == port for r in rows):
            return True
    return False


def _wait(server, ready, timeout: float = 60.0) -> None:
    """Wait until ``ready()`` (the server listens), at most ``timeout``
    seconds; not at all once the server has exited (the client then
    reports what went wrong)."""
    end = time.monotonic() + timeout
    while server.poll() is None and time.monotonic() < end and not ready():
        time.sleep(0.02)


def _rping(link: dict, addr: str, port: int) -> bool:
    """rping -s / rping -c -v -C 5: a connection made by rdma_cm, then the CM
    messages the device's QP1 counted (sysfs class/infiniband_cm)."""
    rping = [sys.executable, "-m", "softrdma", "rping", "-a", addr, "-p", str(port), "-C", "5"]
    print(f"softrdma demo: rping between two processes, connected by rdma_cm over QP1 of {link['ifname']}")
    server = subprocess.Popen(rping + ["-s"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    mgmt = management()
    _wait(server, lambda: any(r["kind"] == "cm_id" and r.get("state") == 8 and r["src_addr"][1] == port   # LISTEN
                              for r in mgmt.call("resources")[0]["resources"]))
    client = subprocess.run(rping + ["-c", "-v"], capture_output=True, text=True, timeout=60)
    server.communicate(timeout=60)
    for line in (client.stdout + client.stderr).strip().splitlines():
        print(f"  client: {line}")
    base = os.path.join(default_run_dir(), "sys", "class", "infiniband_cm", link["ifname"], "1", "cm_tx_msgs")
    try:
        # the daemon rewrites the counters once a second: wait for the DREP, the last message
        end = time.monotonic() + 10
        while int(open(os.path.join(base, "drep")).read()) == 0 and time.monotonic() < end:
            time.sleep(0.05)
        sent = {m: int(open(os.path.join(base, m)).read()) for m in ("req", "rep", "rtu", "dreq", "drep")}
        print("  CM messages sent (cm_tx_msgs): " + ", ".join(f"{k} {v}" for k, v in sent.items()))
    except OSError:
        pass
    ok = server.returncode == 0 and client.returncode == 0
    print("  result: " + ("connected, 5 pings, disconnected" if ok else "FAILED"))
    return ok


def run_simulated(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    rng = random.Random(args.seed)
    sim = Simulator(seed=args.seed)
    a = sim.add_node("client", "10.0.0.1")
    b = sim.add_node("server", "10.0.0.2")
    link = Link(loss=args.loss, dup=args.dup, reorder=args.reorder, corrupt=args.corrupt,
                delay=10e-6, jitter=2e-6)
    sim.connect(a, b, link)
    qa, qb = a.create_qp(), b.create_qp()
    connect_qps(qa, qb, a, b, path_mtu=bytes_to_mtu(args.mtu), psn_a=rng.randrange(1 << 24),
                psn_b=rng.randrange(1 << 24), timeout=8, retry_cnt=7, rnr_retry=7)
    n, size = args.iters, args.size
    src = a.reg_mr(3 * n * size + 8 * n, ACCESS)
    dst = b.reg_mr(3 * n * size + 8, ACCESS)
    payload = bytes(rng.getrandbits(8) for _ in range(min(size, 4096))) * (-(-size // 4096))
    blocks = [hashlib.sha256(i.to_bytes(4, "little")).digest()[:8] + payload[8:size] for i in range(2 * n)]
    for i in range(2 * n):
        src.write(blocks[i], i * size)
    for i in range(n):
        dst.write(blocks[i][::-1], (2 * n + i) * size)       # READ source on the server
        qb.post_recv(RecvWQE(i, [(dst.addr + i * size, size, dst.lkey)]))
    wid = 0
    for i in range(n):
        qa.post_send(SendWQE(wid := wid + 1, IBV_WR_SEND, [(src.addr + i * size, size, src.lkey)]))
        qa.post_send(SendWQE(wid := wid + 1, IBV_WR_RDMA_WRITE, [(src.addr + (n + i) * size, size, src.lkey)],
                             remote_addr=dst.addr + (n + i) * size, rkey=dst.rkey))
        qa.post_send(SendWQE(wid := wid + 1, IBV_WR_RDMA_READ,
                             [(src.addr + (2 * n + i) * size, size, src.lkey)],
                             remote_addr=dst.addr + (2 * n + i) * size, rkey=dst.rkey))
        qa.post_send(SendWQE(wid := wid + 1, IBV_WR_ATOMIC_FETCH_AND_ADD,
                             [(src.addr + 3 * n * size + 8 * i, 8, src.lkey)],
                             remote_addr=dst.addr + 3 * n * size, rkey=dst.rkey, compare_add=1))
    done = lambda: len(qa.send_cq) >= wid or qa.state == 6          # noqa: E731
    events = sim.run(until=600.0, stop=done)
    wcs = qa.send_cq.poll(wid)
    rwcs = qb.recv_cq.poll(n)
    ok_wc = [w for w in wcs if w.status == IBV_WC_SUCCESS]
    sends_ok = all(dst.read(size, i * size) == blocks[i] for i in range(n))
    writes_ok = all(dst.read(size, (n + i) * size) == blocks[n + i] for i in range(n))
    reads_ok = all(src.read(size, (2 * n + i) * size) == blocks[i][::-1] for i in range(n))
    counter = int.from_bytes(dst.read(8, 3 * n * size), "little")
    olds = sorted(int.from_bytes(src.read(8, 3 * n * size + 8 * i), "little") for i in range(n))
    atomics_ok = counter == n and olds == list(range(n))
    order_ok = [w.wr_id for w in wcs] == list(range(1, wid + 1)) and [w.wr_id for w in rwcs] == list(range(n))
    wall = time.perf_counter() - t0

    print(f"softrdma demo: 2 RC QPs over a simulated RoCEv2 link "
          f"(loss {args.loss:.0%}, dup {args.dup:.0%}, reorder {args.reorder:.0%}, corrupt {args.corrupt:.0%}), "
          f"path MTU {args.mtu}")
    print(f"  client QP 0x{qa.qp_num:06x} -> server QP 0x{qb.qp_num:06x}; "
          f"{n} x SEND, RDMA WRITE, RDMA READ of {size} B and {n} x FETCH_ADD, interleaved")
    print(f"  virtual time {sim.now * 1e3:.3f} ms, {events} events, wall {wall:.2f} s")
    for (x, y), lk in sim.links.items():
        s = lk.stats
        print(f"  link {x:>6} -> {y:<6}: {s.sent} sent, {s.lost} lost, {s.duplicated} duplicated, "
              f"{s.reordered} reordered, {s.corrupted} corrupted")
    for node in (a, b):
        print(f"  {node.name:>6} rx: {node.stats.rx_datagrams} datagrams, {node.stats.icrc_bad} dropped on ICRC")
    c, r = qa.cnt, qb.cnt
    print(f"  requester: {c[Counter.sent_pkts]} packets sent, {c[Counter.retransmitted_pkts]} retransmitted, "
          f"{c[Counter.local_ack_timeout_err]} ACK timeouts, {c[Counter.rcvd_seq_err]} sequence NAKs, "
          f"{c[Counter.implied_nak_seq_err]} implied NAKs")
    print(f"  responder: {r[Counter.out_of_seq_request]} out-of-sequence, "
          f"{r[Counter.duplicate_request]} duplicates (re-ACKed or replayed, never re-executed)")
    print(f"  completions: {len(ok_wc)}/{wid} send OK, {len(rwcs)}/{n} receive; "
          + ("in order" if order_ok else "OUT OF ORDER"))
    bad = [w for w in wcs if w.status != IBV_WC_SUCCESS]
    if bad:
        print(f"  first error: wr_id {bad[0].wr_id}: {WC_STATUS_STR[bad[0].status]}")
    print(f"  data: SEND {'exact' if sends_ok else 'WRONG'}, WRITE {'exact' if writes_ok else 'WRONG'}, "
          f"READ {'exact' if reads_ok else 'WRONG'}, FETCH_ADD counter {counter} "
          f"({'each executed once' if atomics_ok else 'WRONG'})")
    good = sends_ok and writes_ok and reads_ok and atomics_ok and order_ok and not bad
    print("  result: " + ("every byte delivered exactly once, in order" if good else "FAILED"))
    return 0 if good else 1
