"""An incast through an ECN-marking switch (``softrdma ecn-switch``): N
``ib_write_bw`` flows from N sender namespaces into one receiver, each
host with its own softrdmad, DCQCN on or off; optionally an
``ib_write_lat`` flow beside them.  Used by the end-to-end test and by
benchmarks/incast.py (root only)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time

from wait_helpers import DEADLINE_S, free_port, stop, wait_for, wait_listening

from softrdma.tools.ecnswitch import EcnSwitch
from shm_helpers import shm_dir

PY = sys.executable
LAT_ITERS = "5000"                # the latency flow's iterations (a few seconds under load: the 99th percentile)
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*$", re.M)
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)((?:\s+[-\d.]+){7})\s*$", re.M)
_MTU = re.compile(r"Mtu\s*:\s*(\d+)")

# the management calls a host's daemon answers (one python per call, run in its namespace)
_COUNTS = ("from softrdma.verbs.device import management as m; import json; c = m(); "
           "s = c.call('stat_snapshot', start=0)[0]; d = s['devices'][0]; "
           "print(json.dumps(dict(zip(s['names'], d['totals']))))")


def jain(xs: list[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2)."""
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 else 0.0


class Incast:
    """The switch, the hosts' daemons, the flows; ``run`` returns the figures."""

    def __init__(self, flows: int = 2, mark_rate: float = 30.0, drop_rate: float = 45.0, latency: bool = False,
                 prefix: str | None = None, mtu: int = 1500):
        self.flows = flows
        self.latency = latency
        tag = os.getpid() % 10000
        self.sw = EcnSwitch(prefix or f"ic{tag}", flows + (1 if latency else 0), mark_rate, drop_rate, mtu=mtu,
                            subnet=80 + tag % 100)
        self.run_dirs = {h[0]: shm_dir(f"softrdma-incast-{h[0]}") for h in self.sw.hosts}
        self.procs: list[subprocess.Popen] = []

    # -- processes in a host namespace
    def popen(self, ns: str, args: list[str], **kw) -> subprocess.Popen:
        env = {**os.environ, "SOFTRDMA_RUN": self.run_dirs[ns], "SOFTRDMA_AUTOSTART": "0"}
        p = subprocess.Popen(["ip", "netns", "exec", ns, *args], env=env, **kw)
        self.procs.append(p)
        return p

    def call(self, ns: str, *args: str) -> str:
        env = {**os.environ, "SOFTRDMA_RUN": self.run_dirs[ns], "SOFTRDMA_AUTOSTART": "0"}
        return subprocess.run(["ip", "netns", "exec", ns, *args], env=env, capture_output=True, text=True,
                              check=True, timeout=DEADLINE_S).stdout

    def up(self, dcqcn: bool, settings: list[str] = ()) -> None:
        """The switch and a daemon per host; ``dcqcn`` False turns the
        notification and reaction points off on every priority of every
        host; ``settings``: more ``softrdma ecn`` words for every host."""
        self.sw.up()
        for ns, dev, _, _, _ in self.sw.hosts:
            d = self.run_dirs[ns]
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            log = open(os.path.join(d, "daemon.log"), "w")
            self.popen(ns, [PY, "-m", "softrdma", "daemon", "-f", "--run-dir", d, "--device", f"rxe0:{dev}"],
                       stdout=log, stderr=subprocess.STDOUT)
        for ns, p in zip(self.run_dirs, self.procs):
            pid = os.path.join(self.run_dirs[ns], "softrdmad.pid")
            wait_for(lambda: os.path.exists(pid), DEADLINE_S, f"softrdmad in {ns}", proc=p)
        words = list(settings)
        if not dcqcn:
            for prio in range(8):
                words += ["roce_np", "enable", str(prio), "0", "roce_rp", "enable", str(prio), "0"]
        if words:
            for ns in self.run_dirs:
                self.call(ns, PY, "-m", "softrdma", "ecn", "rxe0", *words)

    def counters(self, ns: str) -> dict:
        return json.loads(self.call(ns, PY, "-c", _COUNTS))

    def run(self, duration: float = 6.0, size: int = 65536, sample_s: float = 0.1, probe=None) -> dict:
        """The flows for ``duration`` seconds; their figures, the switch's
        counts and each flow's offered rate over time (what the switch
        received from each sender, every ``sample_s``).  ``probe``: called
        once, half-way through, its result in ``probe``."""
        rx = self.sw.receiver
        senders = [h for h in self.sw.hosts[:-1]]
        bw_senders = senders[:self.flows]
        before = self.sw.counters()
        servers, clients = [], []
        dur = str(max(1, int(round(duration))))
        for ns, *_ in bw_senders:
            port = str(free_port())
            srv = self.popen(rx, [PY, "-m", "softrdma", "ib_write_bw", "-d", "rxe0", "-s", str(size), "-D", dur,
                                  "-p", port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            servers.append((srv, port))
        lat = None
        if self.latency:
            port = str(free_port())
            lsrv = self.popen(rx, [PY, "-m", "softrdma", "ib_write_lat", "-d", "rxe0", "-s", "64", "-n", LAT_ITERS,
                                   "-p", port], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wait_listening(int(port), lsrv)
            lat = (lsrv, port)
        for srv, port in servers:
            wait_listening(int(port), srv)
        ports = [h[3] for h in bw_senders]
        samples: list = []
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(ports, sample_s, samples, stop), daemon=True)
        sampler.start()
        t0 = time.monotonic()
        for (ns, *_), (srv, port) in zip(bw_senders, servers):
            clients.append(self.popen(ns, [PY, "-m", "softrdma", "ib_write_bw", "-d", "rxe0", "-s", str(size), "-D",
                                           dur, "-p", port, self.sw.receiver_ip],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        lcli = None
        if lat is not None:
            lcli = self.popen(senders[-1][0], [PY, "-m", "softrdma", "ib_write_lat", "-d", "rxe0", "-s", "64",
                                               "-n", LAT_ITERS, "-p", lat[1], self.sw.receiver_ip],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        probed = None
        if probe is not None:
            time.sleep(duration / 2)          # (not a wait for readiness: the middle of a timed run)
            probed = probe()
        outs = [c.communicate(timeout=duration + DEADLINE_S)[0] for c in clients]
        stop.set()
        sampler.join()
        for srv, _ in servers:
            srv.communicate(timeout=DEADLINE_S)
        lat_out = None
        if lcli is not None:
            lat_out = lcli.communicate(timeout=duration + DEADLINE_S)[0]
            lat[0].communicate(timeout=DEADLINE_S)
        after = self.sw.counters()
        flows = []
        for (ns, *_), out, c in zip(bw_senders, outs, clients):
            rows = _BW_ROW.findall(out)
            if c.returncode or not rows:
                raise RuntimeError(f"ib_write_bw in {ns} failed ({c.returncode}):\n{out}")
            mtu = int(_MTU.search(out).group(1)) if _MTU.search(out) else 1024
            iters, mib_s = int(rows[-1][1]), float(rows[-1][3])
            cnt = self.counters(ns)
            useful = iters * math.ceil(size / mtu)
            flows.append({"ns": ns, "iterations": iters, "MiB_s": mib_s, "sent_pkts": cnt["sent_pkts"],
                          "retransmitted_pkts": cnt["retransmitted_pkts"], "useful_pkts": useful,
                          "rp_cnp_handled": cnt["rp_cnp_handled"], "rp_cnp_ignored": cnt["rp_cnp_ignored"]})
        rcnt = self.counters(rx)
        sw = {k: after.get(k, {"packets": 0})["packets"] - before.get(k, {"packets": 0})["packets"]
              for k in after}
        res = {"flows": flows, "goodput_MiB_s": sum(f["MiB_s"] for f in flows),
               "jain": jain([f["MiB_s"] for f in flows]),
               "retransmitted_pkts": sum(f["retransmitted_pkts"] for f in flows),
               "np_ecn_marked_roce_packets": rcnt["np_ecn_marked_roce_packets"], "np_cnp_sent": rcnt["np_cnp_sent"],
               "switch_skbs": sw, "series": {"t": [s[0] - t0 for s in samples],
                                              "rates": [[r for r in s[1]] for s in samples]}}
        res["probe"] = probed
        if lat_out is not None:
            m = _LAT_ROW.search(lat_out)
            if m:
                vals = [float(v) for v in m.group(3).split()]
                # t_min t_max t_typical t_avg t_stdev 99% 99.9%
                res["lat_us"] = {"typical": vals[2], "avg": vals[3], "p99": vals[5], "p999": vals[6]}
        return res

    def _sample(self, ports: list[str], every: float, out: list, stop: threading.Event) -> None:
        """What the switch received on each sender's port: MB/s per interval."""
        prog = ("import sys, time\n"
                f"ports = {ports!r}\n"
                "fs = [open(f'/sys/class/net/{p}/statistics/rx_bytes') for p in ports]\n"
                "while True:\n"
                "    vals = []\n"
                "    for f in fs:\n"
                "        f.seek(0); vals.append(int(f.read()))\n"
                "    print(time.monotonic(), *vals, flush=True)\n"
                f"    time.sleep({every})\n")
        p = subprocess.Popen(["ip", "netns", "exec", self.sw.switch, PY, "-c", prog], stdout=subprocess.PIPE,
                             text=True)
        last = None
        try:
            while not stop.is_set():
                line = p.stdout.readline()
                if not line:
                    break
                t, *vals = line.split()
                t, vals = float(t), [int(v) for v in vals]
                if last is not None and t > last[0]:
                    out.append((t, [(v - v0) / (t - last[0]) / 1e6 for v, v0 in zip(vals, last[1])]))
                last = (t, vals)
        finally:
            p.kill()
            p.wait()

    def down(self) -> None:
        for p in self.procs:
            stop(p, 30)
        self.procs.clear()
        self.sw.down()
        for d in self.run_dirs.values():
            shutil.rmtree(d, ignore_errors=True)
