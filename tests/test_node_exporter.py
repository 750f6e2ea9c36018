"""Prometheus node_exporter's infiniband collector on softrdmad's sysfs tree.

Debian's prometheus-node-exporter runs with ``--path.sysfs`` at the run
directory's ``sys`` and only the infiniband collector, on a free port of
127.0.0.1; the test scrapes /metrics before and after real traffic through
the daemon and checks what the collector reports against what crossed the
port: packets as the daemon counted them (``rdma statistic``), bytes as the
packets' sizes add up (PMA data counters are in 4-byte words, which the
collector multiplies back).  On CI (CI=true) a missing node_exporter is a
failure, not a skip."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from daemon_helpers import daemon_in_shm
from rc_pair import RcPair

LINE = re.compile(r'^(\w+)(?:\{([^}]*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
PORT = (("device", "rxe0"), ("port", "1"))


def _binary() -> str:
    for name in ("prometheus-node-exporter", "node_exporter"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)")
    pytest.skip("prometheus-node-exporter is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict:
    """The text exposition format -> {(name, ((label, value), ...)): float}."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, line
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


@pytest.fixture
def exporter(monkeypatch):
    binary = _binary()
    with daemon_in_shm("nodeexp") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        port = _free_port()
        log = open(os.path.join(d.run_dir, "node-exporter.log"), "w")
        proc = subprocess.Popen([binary, f"--path.sysfs={d.run_dir}/sys", "--collector.disable-defaults",
                                 "--collector.infiniband", "--web.disable-exporter-metrics",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            end = time.monotonic() + 60
            while True:
                try:
                    scrape(url)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > end:
                        raise RuntimeError("node_exporter did not start: " + open(log.name).read()) from None
                    time.sleep(0.1)
            yield url, d
        finally:
            proc.terminate()
            proc.wait(10)
            log.close()


def port_metrics(m: dict) -> dict:
    return {name[len("node_infiniband_"):]: v for (name, labels), v in m.items()
            if name.startswith("node_infiniband_") and labels == PORT}


def test_node_exporter_reports_softrdma_ports_and_traffic(exporter, capsys):
    url, d = exporter
    m = scrape(url)
    assert m[("node_scrape_collector_success", (("collector", "infiniband"),))] == 1.0
    info = [(labels, v) for (name, labels), v in m.items() if name == "node_infiniband_info"]
    assert info == [((("board_id", ""), ("device", "rxe0"), ("firmware_version", ""), ("hca_type", "")), 1.0)]
    before = port_metrics(m)
    assert before["state_id"] == 4 and before["physical_state_id"] == 5
    assert before["rate_bytes_per_second"] == 2.5e9 / 8                      # "2.5 Gb/sec (1X SDR)"
    traffic = ("port_data_transmitted_bytes_total", "port_data_received_bytes_total",
               "port_packets_transmitted_total", "port_packets_received_total")
    # every PMA counter the tree writes is exported (rxe's PMA fills the four above and link_downed)
    for name in traffic + ("link_downed_total", "symbol_error_total", "port_errors_received_total",
                           "port_discards_transmitted_total", "port_transmit_wait_total", "vl15_dropped_total",
                           "unicast_packets_transmitted_total", "multicast_packets_received_total"):
        assert name in before, name
    assert all(before[name] == 0 for name in traffic)           # a fresh daemon: nothing moved yet

    from softrdma.tools import rdma as tool
    from softrdma.verbs import device
    ctx = device.Context(name="rxe0")
    p = RcPair(ctx)
    n = 40
    p.send(n, 1024)                       # one SEND_ONLY each: BTH 12 + 1024 + ICRC 4 = 1040 bytes
    p.close()
    ctx.close()
    assert tool.main(["-j", "statistic"], prog="rdma") == 0
    hw = json.loads(capsys.readouterr().out)[0]
    pkts = hw["sent_pkts"]
    assert pkts == hw["rcvd_pkts"] >= 2 * n - 2                      # the SENDs and their (coalesced) ACKs
    acks = pkts - n
    data = 1040 * n + 20 * acks                                   # an ACK: BTH 12 + AETH 4 + ICRC 4
    # the daemon refreshes the tree each second; the collector reads it on every scrape
    end = time.monotonic() + 60
    while True:
        after = port_metrics(scrape(url))
        if after["port_packets_transmitted_total"] == pkts or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert after["port_packets_transmitted_total"] == after["port_packets_received_total"] == pkts
    # port_xmit_data holds bytes >> 2; the collector multiplies by 4
    assert after["port_data_transmitted_bytes_total"] == after["port_data_received_bytes_total"] == data // 4 * 4
    assert after["port_data_transmitted_bytes_total"] > before["port_data_transmitted_bytes_total"]
    for name in before:
        if name not in traffic:
            assert after[name] == before[name], name
