"""softrdma top: the live view, its --once frame and its JSON, over a real
softrdmad with real traffic (two RC QPs on the daemon's loopback path).

The rates must move with the traffic and fall back to zero without it;
the totals must be the counts ``rdma statistic`` and the traffic give; the
live terminal view is read back with tmux capture-pane."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm
from rc_pair import RcPair
from softrdma.tools import rdma, top

TOP = [sys.executable, "-m", "softrdma", "top"]


@pytest.fixture
def env(monkeypatch):
    with daemon_in_shm("top") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        from softrdma.verbs import device
        ctx = device.Context(name="rxe0")
        try:
            yield ctx
        finally:
            ctx.close()


def top_while(pair: RcPair | None, *args: str) -> subprocess.CompletedProcess:
    """Run ``softrdma top ARGS`` to its end, moving SENDs through ``pair``
    all the while (None: no traffic)."""
    p = subprocess.Popen(TOP + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ))
    while p.poll() is None:
        if pair is not None:
            pair.send(8, 2048)
        else:
            time.sleep(0.05)
    out, err = p.communicate(timeout=30)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_no_daemon_and_bad_arguments(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SOFTRDMA_RUN", str(tmp_path))
    monkeypatch.delenv("SOFTRDMA_AUTOSTART", raising=False)
    assert top.main(["--once"], prog="top") == 1
    assert capsys.readouterr().err == f"softrdma top: softrdmad is not running in {tmp_path}\n"
    assert not os.path.exists(tmp_path / "softrdmad.sock")                 # a monitor starts nothing
    assert os.environ.get("SOFTRDMA_AUTOSTART") is None
    for args, msg in ((["-i", "0"], "argument -i/--interval: must be a positive number of seconds"),
                      (["-i", "x"], "argument -i/--interval: invalid float value: 'x'"),
                      (["-j"], "-j/--json needs --once"),
                      (["--bogus"], "unrecognized arguments: --bogus")):
        with pytest.raises(SystemExit) as e:
            top.main(args, prog="top")
        assert e.value.code == 2
        assert capsys.readouterr().err.endswith(f"softrdma top: error: {msg}\n"), args


def test_rates_follow_traffic_and_totals_match(env):
    pair = RcPair(env)
    a, b = pair.a.qp_num, pair.b.qp_num
    r = top_while(pair, "--once", "-j", "-i", "1")
    assert (r.returncode, r.stderr) == (0, "")
    m = json.loads(r.stdout)
    assert 0.9 < m["interval"] < 3
    (d,) = m["devices"]
    assert (d["ifname"], d["port"], d["state"], d["netdev"], d["qps"], d["qp_states"]) == (
        "rxe0", 1, "ACTIVE", "lo", 2, {"RTS": 2})
    assert d["rx_packets_rate"] > 10 and d["tx_bytes_rate"] > 10 * 2048
    assert d["rx_packets_rate"] == d["tx_packets_rate"] and d["rx_bytes_rate"] == d["tx_bytes_rate"]   # loopback
    assert d["retransmits_rate"] == d["naks_rate"] == d["rnr_naks_rate"] == d["timeouts_rate"] == 0
    qps = {q["lqpn"]: q for q in m["qps"]}
    assert sorted(qps) == [a, b]
    assert [q["lqpn"] for q in m["qps"]][0] in (a, b)
    for q in qps.values():
        assert (q["ifname"], q["type"], q["state"], q["pid"], q["cntn"]) == ("rxe0", "RC", "RTS", os.getpid(), None)
        assert q["rx_packets_rate"] > 0 and q["tx_packets_rate"] > 0
    # a sends the data (2 packets per SEND), b answers with ACKs
    assert qps[a]["tx_packets_rate"] > qps[b]["tx_packets_rate"]
    assert qps[a]["tx_bytes_rate"] > 0 and qps[a]["rx_bytes_rate"] == 0
    assert qps[b]["rx_bytes_rate"] == qps[a]["tx_bytes_rate"]
    # no traffic: every rate is zero; the totals are what the traffic was
    r = top_while(None, "--once", "-j", "-i", "0.3")
    m2 = json.loads(r.stdout)
    (d2,) = m2["devices"]
    assert d2["rx_packets_rate"] == d2["tx_bytes_rate"] == 0
    q2 = {q["lqpn"]: q for q in m2["qps"]}
    assert all(q[k] == 0 for q in q2.values() for k in q if k.endswith("_rate"))
    assert q2[a]["tx_bytes"] % 2048 == 0 and q2[a]["tx_bytes"] == q2[b]["rx_bytes"]
    sends = q2[a]["tx_bytes"] // 2048
    assert q2[a]["tx_packets"] == q2[b]["rx_packets"] == 2 * sends
    assert q2[a]["counters"]["rdma_sends"] == q2[b]["counters"]["rdma_recvs"] == sends
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert rdma.main(["-j", "statistic"], prog="rdma") == 0
    hw = json.loads(buf.getvalue())[0]
    assert d2["counters"]["sent_pkts"] == hw["sent_pkts"] == d2["tx_packets"]
    assert d2["counters"]["rdma_sends"] == hw["rdma_sends"] == sends
    pair.close()


def test_once_text_frame(env):
    pair = RcPair(env)
    r = top_while(pair, "--once", "-i", "0.5")
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert re.match(r"^softrdma top - \d\d:\d\d:\d\d  interval 0\.\d\ds  run dir ", lines[0])
    row = next(line for line in lines if "rxe0/1" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:3] == ["rxe0/1", "ACTIVE", "lo"]
    assert cells[3] not in ("0", "-") and cells[4].endswith("B")               # RX pkt/s, RX B/s
    assert cells[-1] == "2 (RTS 2)"
    qrows = [line for line in lines if re.search(rf"│\s+({pair.a.qp_num}|{pair.b.qp_num})\s+│ RC", line)]
    assert len(qrows) == 2 and all("RTS" in q and f"│ {os.getpid()} │" in q for q in qrows)
    pair.close()


def test_model_rates_and_reused_qpns():
    names = ["sent_pkts", "rcvd_pkts", "sent_bytes", "rcvd_bytes", "retransmitted_pkts", "rcvd_seq_err",
             "rcvd_rnr_err", "local_ack_timeout_err"]

    def snap(t, tx, qps):
        dev = {"ifname": "rxe0", "port": 1, "state": 4, "netdev": "lo", "qps": len(qps), "counters": 0,
               "traffic": {"tx_packets": tx, "rx_packets": tx, "tx_bytes": 100 * tx, "rx_bytes": 100 * tx},
               "totals": [tx, tx, 0, 0, 1, 2, 3, 4], "rx_dropped": {}}
        return top.Snapshot(t, names, [dev], [["rxe0", q, t_, 3, 1, None, c] for q, t_, c in qps])

    s0 = snap(10.0, 100, [(17, 2, [10, 10, 0, 0, 0, 0, 0, 0]), (18, 2, [5, 5, 0, 0, 0, 0, 0, 0])])
    s1 = snap(12.0, 300, [(17, 2, [30, 50, 0, 0, 0, 0, 0, 0]), (18, 4, [7, 7, 0, 0, 0, 0, 0, 0])])
    m = top.model(s0, s1)
    (d,) = m["devices"]
    assert (d["tx_packets_rate"], d["rx_bytes_rate"], d["retransmits"], d["naks"], d["rnr_naks"], d["timeouts"]) == (
        100.0, 10000.0, 1, 2, 3, 4)
    q = {e["lqpn"]: e for e in m["qps"]}
    assert (q[17]["tx_packets_rate"], q[17]["rx_packets_rate"]) == (10.0, 20.0)
    assert q[18]["tx_packets_rate"] is None and q[18]["type"] == "UD"      # a new QP under a reused QPN
    assert [e["lqpn"] for e in m["qps"]] == [17, 18]
    assert top.model(None, s1)["devices"][0]["rx_packets_rate"] is None
    assert (top.si(None), top.si(999), top.si(1500), top.si(2.5e6, "B"), top.si(0.5)) == (
        "-", "999", "1.50k", "2.50 MB", "0.5")


def test_live_view_in_tmux(env, tmp_path):
    tmux = shutil.which("tmux")
    if tmux is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed (apt-get install tmux)")
        pytest.skip("tmux is not installed")
    sock = f"softrdma-top-{os.getpid()}"
    cmd = " ".join(["env"] + [f"{k}={shlex.quote(os.environ[k])}" for k in ("SOFTRDMA_RUN", "PYTHONPATH")
                              if k in os.environ] + [shlex.quote(x) for x in TOP] + ["-i", "0.5"])
    base = [tmux, "-L", sock, "-f", "/dev/null"]
    subprocess.run(base + ["new-session", "-d", "-x", "200", "-y", "50", cmd], check=True, timeout=30)

    def screen() -> str:
        return subprocess.run(base + ["capture-pane", "-p"], capture_output=True, text=True, timeout=30).stdout

    def device_row(text: str):
        row = next((line for line in text.splitlines() if "rxe0/1" in line), None)
        cells = None if row is None else [c.strip() for c in row.strip("│ ").split("│")]
        return cells if cells and len(cells) >= 6 else None          # (a row caught while being drawn)

    pair = RcPair(env)
    try:
        end = time.monotonic() + 60
        busy = None
        while time.monotonic() < end:
            pair.send(8, 2048)
            row = device_row(screen())
            if row is not None and row[3] not in ("0", "-"):
                busy = row
                break
        assert busy is not None, screen()
        assert busy[:3] == ["rxe0/1", "ACTIVE", "lo"] and busy[-1] == "2 (RTS 2)"
        # traffic stops: within a few refreshes the rates read 0 again
        end = time.monotonic() + 60
        while time.monotonic() < end:
            time.sleep(0.5)
            row = device_row(screen())
            if row is not None and row[3] == "0":
                break
        assert row is not None and row[3] == "0" and row[5] == "0", screen()
        assert str(pair.a.qp_num) in screen()
    finally:
        subprocess.run(base + ["kill-server"], timeout=30)
        pair.close()
