"""``/sys/class/infiniband/<dev>/device/net/`` through ``softrdma run``:
rdma-core's tests find a device's netdev and IP address with ``ls`` of that
directory and ``ip -j addr show <netdev>`` (base.py ``get_net_name``,
``get_ip_mac_address``); the rdma_cm tests skip without it.  Checked for
the embedded default (rxe0 on lo) and for a device on a veth in a network
namespace (root only: the /sys/class overlay needs a mount namespace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from daemon_helpers import daemon_in_shm
from netns_helpers import TwoHosts, need_root

# base.py's lookup, as the suite runs it
LOOKUP = r"""
import json, os, subprocess, sys
dev = sys.argv[1]
print(json.dumps(os.path.exists('/sys/class/infiniband/{}/device/net/'.format(dev))))
out = subprocess.check_output(['ls', '/sys/class/infiniband/{}/device/net/'.format(dev)])
net = out.decode().split('\n')[0]
out = json.loads(subprocess.check_output(['ip', '-j', 'addr', 'show', net]).decode())
print(json.dumps([net, out[0]['addr_info'][0]['local'], out[0]['address']]))
"""


def _lookup(argv_prefix: list[str], env: dict) -> tuple[bool, list]:
    out = subprocess.run([*argv_prefix, sys.executable, "-m", "softrdma", "run", "--", sys.executable, "-c", LOOKUP,
                          "rxe0"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    exists, found = (json.loads(line) for line in out.stdout.split("\n")[:2])
    return exists, found


def test_embedded_default_device_on_lo():
    need_root()
    with daemon_in_shm("pvnet") as d:
        exists, (net, ip, mac) = _lookup([], {**d.env, "SOFTRDMA_AUTOSTART": "0"})
    assert exists and net == "lo" and ip == "127.0.0.1" and mac == "00:00:00:00:00:00"


def test_device_on_a_veth_in_a_namespace():
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()
        for i in range(2):
            env = {**os.environ, "SOFTRDMA_RUN": h.run_dirs[i], "SOFTRDMA_AUTOSTART": "0"}
            exists, (net, ip, mac) = _lookup(["ip", "netns", "exec", h.ns[i]], env)
            want_mac = h.exec(h.ns[i], "cat", f"/sys/class/net/{h.dev[i]}/address").stdout.strip()
            assert exists and (net, ip, mac) == (h.dev[i], h.ip[i], want_mac)
    finally:
        h.close()


def test_without_the_overlay_the_tree_still_holds_the_link():
    """``--no-sysfs`` (no root): the run directory's own tree has it."""
    with daemon_in_shm("pvnet2") as d:
        net = os.path.join(d.run_dir, "sys", "class", "infiniband", "rxe0", "device", "net")
        assert os.listdir(net) == ["lo"] and os.readlink(os.path.join(net, "lo")) == "/sys/class/net/lo"
