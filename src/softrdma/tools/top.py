"""``softrdma top``: a live view of every softrdma device/port and its QPs.

Every ``-i`` seconds (default 1) it takes a snapshot through the daemon's
``stat_snapshot`` management command (``device.commands.stat``) and shows, with
rich, the rates over the last interval and the totals:

* per device/port: its state and netdev; packets and bytes per second
  received and transmitted (bytes as on the wire: headers and ICRC
  included, what the PMA port counters and node_exporter report);
  retransmitted packets, sequence-error NAKs received, RNR NAKs received
  and local ACK timeouts, per second and in total; its QPs by state;
* per QP (the busiest first, ``-q`` rows): device, QPN, type, state, the
  process that owns it, the rdma counter it is bound to (``rdma statistic
  qp``), its packets and payload bytes per second each way, its
  retransmit/NAK/RNR/timeout totals, and the rate DCQCN holds it to (none
  while it has had no CNP, or has recovered to line rate).

``--once`` takes two snapshots ``-i`` seconds apart, prints one frame and
exits (``-j``: the same as JSON, every counter's total and rate included,
for scripts).  The live view ends with Ctrl-C.  The names of the counters
are the transport's (``transport.counters``): retransmits =
retransmitted_pkts, NAKs = rcvd_seq_err, RNR = rcvd_rnr_err, timeouts =
local_ack_timeout_err.

No daemon is an error (exit 1): a monitor does not start the daemon it
would watch.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time

from ..uapi.rundir import default_run_dir
from ..verbs.device import management
from ..verbs.errors import PyverbsError
from .rdma.link import LINK_STATES
from .rdma.res import QP_STATES, qp_type_str
from .rdma.utils import get_task_name, table_str

#: the columns a QP and a device share: (key, counter)
PACKETS = (("rx_packets", "rcvd_pkts"), ("tx_packets", "sent_pkts"))
EVENTS = (("retransmits", "retransmitted_pkts"), ("naks", "rcvd_seq_err"), ("rnr_naks", "rcvd_rnr_err"),
          ("timeouts", "local_ack_timeout_err"))
QP_BYTES = (("rx_bytes", "rcvd_bytes"), ("tx_bytes", "sent_bytes"))
DEV_TRAFFIC = (("rx_packets", "rx_packets"), ("tx_packets", "tx_packets"), ("rx_bytes", "rx_bytes"),
               ("tx_bytes", "tx_bytes"))


class Snapshot:
    def __init__(self, t: float, names: list[str], devices: list[dict], qps: list[list]):
        self.t = t
        self.names = names
        self.devices = {d["ifname"]: d for d in devices}
        self.qps = {(q[0], q[1]): q for q in qps}


def fetch(conn) -> Snapshot:
    """One snapshot, every page of it."""
    start, qps = 0, []
    while True:
        r, fds = conn.call("stat_snapshot", start=start)
        for fd in fds:
            os.close(fd)
        if not start:
            names, devices = r["names"], r["devices"]
        qps += r["qps"]
        if r.get("next") is None:
            return Snapshot(time.monotonic(), names, devices, qps)
        start = r["next"]


def _rate(cur: int, old: int | None, dt: float) -> float | None:
    if old is None or dt <= 0 or cur < old:
        return None
    return (cur - old) / dt


def model(prev: Snapshot | None, cur: Snapshot) -> dict:
    """What one frame shows (and ``-j`` prints): totals, and rates over
    the interval since ``prev`` (None where there is no earlier value)."""
    dt = cur.t - prev.t if prev is not None else 0.0
    idx = {n: i for i, n in enumerate(cur.names)}
    devices = []
    qp_states: dict[str, dict[str, int]] = {}
    for q in cur.qps.values():
        s = qp_states.setdefault(q[0], {})
        st = table_str(QP_STATES, q[3])
        s[st] = s.get(st, 0) + 1
    for name, d in cur.devices.items():
        old = prev.devices.get(name) if prev is not None else None
        e = {"ifname": name, "port": d["port"], "state": table_str(LINK_STATES, d["state"]), "netdev": d["netdev"],
             "qps": d["qps"], "qp_states": qp_states.get(name, {}), "counters_bound": d["counters"]}
        for key, src in DEV_TRAFFIC:
            e[key] = d["traffic"][src]
            e[key + "_rate"] = _rate(d["traffic"][src], old["traffic"][src] if old else None, dt)
        for key, cname in EVENTS:
            e[key] = d["totals"][idx[cname]]
            e[key + "_rate"] = _rate(e[key], old["totals"][idx[cname]] if old else None, dt)
        e["counters"] = {n: d["totals"][i] for n, i in idx.items()}
        e["rx_dropped"] = d["rx_dropped"]
        devices.append(e)
    qps = []
    for key, q in cur.qps.items():
        dev, qpn, qtype, state, pid, cntn, cnt = q[:7]
        rate = q[7] if len(q) > 7 else None
        old = prev.qps.get(key) if prev is not None else None
        if old is not None and old[2] != qtype:
            old = None                                 # the QPN was reused
        e = {"ifname": dev, "lqpn": qpn, "type": qp_type_str(qtype), "state": table_str(QP_STATES, state),
             "pid": pid, "comm": get_task_name(pid), "cntn": cntn, "dcqcn_rate_mbps": rate}
        for key2, cname in PACKETS + QP_BYTES + EVENTS:
            e[key2] = cnt[idx[cname]]
            e[key2 + "_rate"] = _rate(e[key2], old[6][idx[cname]] if old else None, dt)
        e["counters"] = {n: cnt[i] for n, i in idx.items()}
        qps.append(e)
    qps.sort(key=lambda e: (-((e["rx_packets_rate"] or 0) + (e["tx_packets_rate"] or 0)), e["ifname"], e["lqpn"]))
    return {"interval": round(dt, 6), "devices": devices, "qps": qps}


# ---------------------------------------------------------------- rendering
def si(v: float | None, unit: str = "") -> str:
    """1234 -> "1.23k", 2.5e6 B -> "2.50 MB"; None -> "-"."""
    if v is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.2f}{' ' if unit else ''}{suffix}{unit}"
    return f"{v:.0f}{' ' + unit if unit else ''}" if v == int(v) else f"{v:.1f}{' ' + unit if unit else ''}"


def render(m: dict, max_qps: int, run_dir: str):
    # rich is imported where it draws: it is heavy, and --json / one-shot use never draws
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    head = Text(f"softrdma top - {time.strftime('%H:%M:%S')}  interval {m['interval']:.2f}s  run dir {run_dir}",
                style="bold")
    dev = Table(title="devices", title_justify="left", expand=False)
    for col in ("DEV/PORT", "STATE", "NETDEV", "RX pkt/s", "RX B/s", "TX pkt/s", "TX B/s", "RETRANS/s",
                "NAK/s", "RNR/s", "T/O/s", "RETRANS", "NAK", "RNR", "T/O", "QPs"):
        dev.add_column(col, justify="left" if col in ("DEV/PORT", "STATE", "NETDEV", "QPs") else "right")
    for d in m["devices"]:
        states = " ".join(f"{k} {v}" for k, v in sorted(d["qp_states"].items()))
        dev.add_row(f"{d['ifname']}/{d['port']}", d["state"], d["netdev"],
                    si(d["rx_packets_rate"]), si(d["rx_bytes_rate"], "B"),
                    si(d["tx_packets_rate"]), si(d["tx_bytes_rate"], "B"),
                    si(d["retransmits_rate"]), si(d["naks_rate"]), si(d["rnr_naks_rate"]), si(d["timeouts_rate"]),
                    str(d["retransmits"]), str(d["naks"]), str(d["rnr_naks"]), str(d["timeouts"]),
                    f"{d['qps']}" + (f" ({states})" if states else ""))
    qt = Table(title=f"QPs ({len(m['qps'])}, busiest first)", title_justify="left", expand=False)
    for col in ("DEV", "QPN", "TYPE", "STATE", "PID", "COMM", "CNTN", "RX pkt/s", "TX pkt/s", "RX B/s", "TX B/s",
                "RETRANS", "NAK", "RNR", "T/O", "DCQCN"):
        qt.add_column(col, justify="right" if col not in ("DEV", "TYPE", "STATE", "COMM") else "left")
    for q in m["qps"][:max_qps]:
        qt.add_row(q["ifname"], str(q["lqpn"]), q["type"], q["state"], str(q["pid"]), q["comm"] or "?",
                   "-" if q["cntn"] is None else str(q["cntn"]),
                   si(q["rx_packets_rate"]), si(q["tx_packets_rate"]), si(q["rx_bytes_rate"], "B"),
                   si(q["tx_bytes_rate"], "B"), str(q["retransmits"]), str(q["naks"]), str(q["rnr_naks"]),
                   str(q["timeouts"]),
                   "-" if q["dcqcn_rate_mbps"] is None else f"{q['dcqcn_rate_mbps']} Mb/s")
    return Group(head, dev, qt)


def _connect():
    """The daemon's management connection, never starting one."""
    saved = os.environ.get("SOFTRDMA_AUTOSTART")
    os.environ["SOFTRDMA_AUTOSTART"] = "0"
    try:
        return management()
    finally:
        if saved is None:
            del os.environ["SOFTRDMA_AUTOSTART"]
        else:
            os.environ["SOFTRDMA_AUTOSTART"] = saved


def main(argv: list[str] | None = None, prog: str = "top") -> int:
    p = argparse.ArgumentParser(prog=f"softrdma {prog}", description="live view of softrdma devices, ports and QPs")
    p.add_argument("-i", "--interval", type=float, default=1.0, metavar="SECONDS",
                   help="refresh period, and the window rates are computed over (default 1)")
    p.add_argument("--once", action="store_true", help="print one frame (rates over one interval) and exit")
    p.add_argument("-j", "--json", action="store_true", help="with --once: the frame as JSON")
    p.add_argument("-q", "--qps", type=int, default=20, metavar="N", help="QP rows to show (default 20)")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.interval > 0:
        p.error("argument -i/--interval: must be a positive number of seconds")
    if args.json and not args.once:
        p.error("-j/--json needs --once")
    if args.qps < 0:
        p.error("argument -q/--qps: must not be negative")
    run_dir = default_run_dir()
    try:
        conn = _connect()
    except PyverbsError:
        sys.stderr.write(f"softrdma {prog}: softrdmad is not running in {run_dir}\n")
        return 1
    try:
        return _run(conn, args, run_dir, prog)
    except PyverbsError as e:
        code = e.error_code if isinstance(e.error_code, int) and e.error_code > 0 else errno.EIO
        sys.stderr.write(f"softrdma {prog}: lost softrdmad ({os.strerror(code)})\n")
        return 1
    finally:
        conn.close()


def _run(conn, args, run_dir: str, prog: str) -> int:
    from rich.console import Console               # deferred: rich is heavy (see render)
    tty = sys.stdout.isatty()
    console = Console(file=sys.stdout, width=160, color_system="auto" if tty else None, highlight=False)

    def fit() -> None:
        # the terminal's real size, every frame (it may be resized; a COLUMNS
        # inherited from elsewhere is no guide to it)
        if tty:
            try:
                console.size = os.get_terminal_size(sys.stdout.fileno())
            except OSError:
                pass
    fit()
    prev = fetch(conn)
    if args.once:
        time.sleep(args.interval)
        m = model(prev, fetch(conn))
        if args.json:
            sys.stdout.write(json.dumps(m) + "\n")
        else:
            console.print(render(m, args.qps, run_dir))
        return 0
    from rich.live import Live                     # deferred: rich is heavy (see render)
    try:
        with Live(render(model(None, prev), args.qps, run_dir), console=console, screen=tty,
                  auto_refresh=False) as live:
            nxt = prev.t + args.interval
            while True:
                time.sleep(max(0.0, nxt - time.monotonic()))
                nxt += args.interval
                cur = fetch(conn)
                fit()
                live.update(render(model(prev, cur), args.qps, run_dir), refresh=True)
                prev = cur
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
