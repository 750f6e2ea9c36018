"""The GID table follows the netdev live: ``ip addr add/del`` and link
up/down reach query_gid, the sysfs tree and async events within a second."""

from __future__ import annotations

import os
import subprocess
import sys
import time


from netns_helpers import need_root, sh
from shm_helpers import shm_dir
from wait_helpers import wait_file

PROBE = """
import json, sys
from softrdma.verbs.device import Context
ctx = Context(name="rxe0")
print(json.dumps({"gids": [str(ctx.query_gid(1, i)) for i in range(4)], "state": ctx.query_port(1).state}))
"""


def _probe(ns, env):
    out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True)
    import json
    return json.loads(out.stdout)


def _until(fn, pred, timeout=60.0):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if pred(v) or time.monotonic() > end:
            return v
        time.sleep(0.1)


def test_gid_table_follows_ip_addr_add_del_and_link_state():
    need_root()
    tag = os.getpid() % 100000
    ns, dev, peer = f"srdma-g{tag}", f"srg{tag}", f"srh{tag}"
    run = shm_dir(f"softrdma-gid-{tag}")
    sh("ip", "netns", "del", ns, check=False)
    sh("ip", "netns", "add", ns)
    daemon = None
    try:
        ex = ["ip", "netns", "exec", ns]
        sh(*ex, "ip", "link", "add", dev, "type", "veth", "peer", "name", peer)
        sh(*ex, "ip", "link", "set", peer, "up")
        sh(*ex, "ip", "link", "set", dev, "up")
        sh(*ex, "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        sh(*ex, "ip", "addr", "add", "10.210.0.1/24", "dev", dev)
        os.makedirs(run, exist_ok=True)
        env = {**os.environ, "SOFTRDMA_RUN": run, "SOFTRDMA_AUTOSTART": "0"}
        daemon = subprocess.Popen([*ex, sys.executable, "-m", "softrdma", "daemon", "-f", "--port", "0",
                                   "--device", f"rxe0:{dev}"], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_file(f"{run}/softrdmad.pid", proc=daemon)       # fails at once if the daemon exited
        v4 = "0000:0000:0000:0000:0000:ffff:0ad2:"
        first = _probe(ns, env)
        assert first["gids"][0].startswith("fe80:") and first["gids"][1] == v4 + "0001"
        sh(*ex, "ip", "addr", "add", "10.210.1.7/24", "dev", dev)
        got = _until(lambda: _probe(ns, env), lambda v: v["gids"][2] == v4.replace("0ad2:", "0ad2:") + "0107")
        assert got["gids"][2] == "0000:0000:0000:0000:0000:ffff:0ad2:0107"
        sysfs = f"{run}/sys/class/infiniband/rxe0/ports/1"
        assert open(f"{sysfs}/gids/2").read().strip() == got["gids"][2]
        assert open(f"{sysfs}/gid_attrs/types/2").read().strip() == "RoCE v2"
        sh(*ex, "ip", "addr", "del", "10.210.0.1/24", "dev", dev)
        got = _until(lambda: _probe(ns, env), lambda v: v["gids"][1].endswith("0000:0000"))
        assert got["gids"][1] == "0000:0000:0000:0000:0000:0000:0000:0000"          # slot freed, others stay
        assert got["gids"][2] == "0000:0000:0000:0000:0000:ffff:0ad2:0107"
        sh(*ex, "ip", "link", "set", dev, "down")
        assert _until(lambda: _probe(ns, env), lambda v: v["state"] == 1)["state"] == 1
        assert open(f"{sysfs}/state").read().strip() == "1: DOWN"
        sh(*ex, "ip", "link", "set", dev, "up")
        assert _until(lambda: _probe(ns, env), lambda v: v["state"] == 4)["state"] == 4
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(10)
        sh("ip", "netns", "del", ns, check=False)
        subprocess.run(["rm", "-rf", run])
