"""VF VLAN tagging (mlx5's VST: ``ip link set <pf> vf N vlan V qos Q``)
end to end (root): a PF in one namespace with 3 VFs, the far end of its
veth in another with a daemon of its own -- ``rxe0`` on a VLAN 10 port of
the wire (a macvlan tagged as a VF is), ``rxe1`` untagged.  RC between a
VLAN 10 VF and the VLAN 10 host crosses the wire 802.1Q-tagged with the
VF's VID and PCP (tshark on the wire), and between two VLAN 10 VFs; a VF
reaches neither another VLAN's VF nor untagged peers; vlan 0 clears it and
its traffic is untagged again.  iproute2's errors and output, mlx5's
``sriov/N/vlan`` and ``config`` files."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time

import pytest

from daemon_helpers import RunningDaemon, softrdma_run
from netns_helpers import sh
from rc_pair import RcPair
from shm_helpers import shm_dir
from test_sriov import _ctx, _exchange, _lost_send, running_host, write_error, NS, PF, NET
from wait_helpers import stop

from softrdma.enums import IBV_WC_RETRY_EXC_ERR
from softrdma.verbs.device import Context

NS2 = f"{NS}w"
VNET = f"10.203.{os.getpid() % 250}"           # VLAN 10's subnet
WNET = f"10.204.{os.getpid() % 250}"           # VLAN 20's
HOST10 = f"{PF}h"                              # the VLAN 10 host's port on the wire's far end


def tag(ns: str, netdev: str, vlan: int, qos: int = 0) -> None:
    """``netdev`` in ``ns`` becomes a port of VLAN ``vlan``, as a VF's is."""
    sh("ip", "netns", "exec", ns, sys.executable, "-c",
       f"from softrdma.device import vf_vlan; vf_vlan.tag({netdev!r}, {vlan}, {qos})")


class Wire:
    """The far end: namespace NS2 holding the PF veth's peer and a VLAN 10
    host on it, for a daemon with rxe0 (VLAN 10) and rxe1 (untagged)."""

    def __init__(self):
        self.run_dir = shm_dir(f"softrdma-sriov-wire-{os.getpid()}")
        sh("ip", "netns", "del", NS2, check=False)
        sh("ip", "netns", "add", NS2)
        try:
            self._build()
        except BaseException:
            self.remove()
            raise

    def _build(self) -> None:
        sh("ip", "-n", NS, "link", "set", f"{PF}p", "netns", NS2)
        for cmd in (("link", "set", "lo", "up"), ("link", "set", f"{PF}p", "up"),
                    ("addr", "add", f"{NET}.2/24", "dev", f"{PF}p"),
                    ("link", "add", HOST10, "link", f"{PF}p", "type", "macvlan", "mode", "bridge"),
                    ("link", "set", HOST10, "up"), ("addr", "add", f"{VNET}.2/24", "dev", HOST10)):
            sh("ip", "-n", NS2, *cmd)
        tag(NS2, HOST10, 10)
        # a host answers ARP only on the interface with the address (not the
        # untagged address through the VLAN 10 port: that is routing, not the VLAN)
        sh("ip", "netns", "exec", NS2, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.makedirs(self.run_dir)

    def ctx(self, name: str) -> Context:
        with softrdma_run(self.run_dir):
            return _ctx(name)

    def remove(self):
        """The namespace and the run directory gone (the daemon stopped first)."""
        sh("ip", "netns", "del", NS2, check=False)
        shutil.rmtree(self.run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def site():
    """(host, wire): the PF with 3 VFs (VF 0 and 1 on VLAN 10's subnet, VF 2
    on VLAN 20's) and the wire's far end."""
    with running_host(args=("--port", "4791")) as h:         # (RoCE's port: the namespaces are the test's)
        h.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=3")
        h.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
        h.ok("sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov_numvfs", "3")
        for i, addr in enumerate((f"{VNET}.11", f"{VNET}.12", f"{WNET}.13")):
            sh("ip", "-n", NS, "addr", "add", f"{addr}/24", "dev", f"{PF}v{i}")
        w = Wire()
        try:
            daemon = RunningDaemon(w.run_dir, devices=(f"rxe0:{HOST10}", f"rxe1:{PF}p"), port=4791,
                                   prefix=("ip", "netns", "exec", NS2))
            try:
                yield h, w
            finally:
                daemon.stop()
        finally:
            w.remove()


def test_vlan_arguments_and_errors(site):
    h, _ = site
    for argv, status, err in (
            (("vlan", "4096"), 255, 'Error: argument "4096" is wrong: Invalid "vlan" value\n'),
            (("qos", "3"), 255, 'Error: either "dev" is duplicate, or "qos" is a garbage.\n'),
            (("vlan", "5", "qos", "8"), 2, "RTNETLINK answers: Invalid argument\n"),
            (("vlan", "5", "proto", "802.1ad"), 2, "RTNETLINK answers: Protocol not supported\n"),
            (("vlan", "5", "proto", "0x800"), 255, 'Error: argument "0x800" is wrong: Invalid "vlan protocol" value'
                                                ' - supported 802.1Q, 802.1ad\n'),
            (("max_tx_rate", "5", "min_tx_rate", "10"), 255, "Invalid min_tx_rate 10 - must be <= max_tx_rate 5\n"),
            (("min_tx_rate", "10"), 2, "RTNETLINK answers: Operation not supported\n")):
        r = h.tool("ip", "link", "set", PF, "vf", "0", *argv)
        assert (r.returncode, r.stderr) == (status, err), argv
    vlan_file = "/sys/class/infiniband/mlx5_0/device/sriov/0/vlan"
    assert write_error(h.tool("sysfs-write", vlan_file, "5")) == "Invalid argument"
    assert write_error(h.tool("sysfs-write", vlan_file, "5:0:802.1ad")) == "Protocol not supported"
    assert "vlan" not in h.ok("ip", "link", "show", PF)          # nothing refused was applied


def test_vlan_set_and_shown(site):
    h, _ = site
    h.ok("ip", "link", "set", PF, "vf", "0", "vlan", "10", "qos", "3")
    h.ok("sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov/1/vlan", "10:0")
    h.ok("ip", "link", "set", PF, "vf", "2", "vlan", "20", "proto", "802.1Q")
    out = h.ok("ip", "link", "show", PF)
    assert "brd ff:ff:ff:ff:ff:ff, vlan 10, qos 3, spoof checking off, link-state auto" in out
    assert "brd ff:ff:ff:ff:ff:ff, vlan 20, spoof checking off" in out
    assert out.count(", vlan 10, spoof") == 1
    cfg = h.read("mlx5_0", "device", "sriov", "0", "config")
    assert "VLAN       : 10\nQoS        : 3\nVLAN Proto : 802.1Q\n" in cfg
    assert "VLAN       : 0\nQoS        : 0\nVLAN Proto : N/A\n" not in h.read("mlx5_0", "device", "sriov", "1", "config")


class Capture:
    """tshark on the wire's far end (``filt``: a capture filter, ICMP
    included): per frame its VLAN id and PCP, source MAC and BTH opcode."""

    def __init__(self, filt: str):
        self.p = subprocess.Popen(["ip", "netns", "exec", NS2, "tshark", "-l", "-n", "-i", f"{PF}p", "-f", filt,
                                   "-T", "fields", "-e", "vlan.id", "-e", "vlan.priority", "-e", "eth.src",
                                   "-e", "infiniband.bth.opcode", "-e", "icmp.type"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        self.buf = b""

    def _line(self, until: float) -> list[str] | None:
        """The next frame's fields, or None when none came by ``until``."""
        while b"\n" not in self.buf:
            if not select.select([self.p.stdout], [], [], max(0.0, until - time.monotonic()))[0]:
                return None
            chunk = os.read(self.p.stdout.fileno(), 4096)
            assert chunk, "tshark ended"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().split("\t")

    def wait_live(self) -> None:
        """Ping the VLAN 10 host from VF 0's netdev until tshark shows a
        ping: the capture runs (tshark says so before it does)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            sh("ip", "netns", "exec", NS, "ping", "-c", "1", "-W", "1", "-I", f"{PF}v0", f"{VNET}.2", check=False)
            f = self._line(time.monotonic() + 1)
            if f is not None and f[4]:
                return
        raise AssertionError("tshark captured no ping")

    def roce(self, n: int) -> list[list[str]]:
        """The next ``n`` RoCE frames (pings skipped); tshark ended after."""
        frames, deadline = [], time.monotonic() + 30
        try:
            while len(frames) < n:
                f = self._line(deadline)
                assert f is not None, f"tshark saw {frames} only"
                if f[3]:
                    frames.append(f)
        finally:
            stop(self.p)
        return frames


def _exchanges(pairs, size: int = 100) -> None:
    """``_exchange`` on a fresh RC pair a -> b for each (a, b) of contexts."""
    for a, b in pairs:
        pair = RcPair(a, peer_ctx=b)
        try:
            _exchange(pair, size)
        finally:
            pair.close()


def test_tagged_rc_on_the_wire_and_between_vlan_peers(site):
    h, w = site
    cap = Capture("vlan and (udp port 4791 or icmp)")
    v0, v1, far = _ctx("mlx5_1"), _ctx("mlx5_2"), w.ctx("rxe0")
    try:
        cap.wait_live()
        _exchanges(((v0, far), (far, v0), (v0, v1)), 600)
        frames = cap.roce(4)
    finally:
        stop(cap.p)
        for c in (v0, v1, far):
            c.close()
    vf_mac = sh("ip", "-n", NS, "-br", "link", "show", f"{PF}v0").stdout.split()[2]
    assert len(frames) == 4 and all(f[0] == "10" and f[3] for f in frames), frames     # VID 10, RoCE inside
    assert {f[1] for f in frames if f[2] == vf_mac} == {"3"}, frames                  # the VF's: PCP 3
    assert {f[1] for f in frames if f[2] != vf_mac} == {"0"}, frames                  # the host's: PCP 0


def test_other_vlans_and_untagged_peers_are_unreachable(site):
    _, w = site
    v0, v2, pf, far_untagged = _ctx("mlx5_1"), _ctx("mlx5_3"), _ctx("mlx5_0"), w.ctx("rxe1")
    try:
        for a, b in ((v0, v2), (v2, v0), (v0, pf), (pf, v0), (v0, far_untagged)):
            assert _lost_send(a, b) == IBV_WC_RETRY_EXC_ERR
    finally:
        for c in (v0, v2, pf, far_untagged):
            c.close()


def test_vlan_0_clears_the_tag(site):
    h, w = site
    h.ok("ip", "link", "set", PF, "vf", "0", "vlan", "0")
    assert "VLAN       : 0\nQoS        : 0\nVLAN Proto : N/A\n" in h.read("mlx5_0", "device", "sriov", "0", "config")
    assert ", vlan" not in [ln for ln in h.ok("ip", "link", "show", PF).splitlines() if "vf 0 " in ln][0]
    v0, pf, far = _ctx("mlx5_1"), _ctx("mlx5_0"), w.ctx("rxe0")
    cap = None
    try:
        assert _lost_send(v0, far) == IBV_WC_RETRY_EXC_ERR          # the VLAN 10 host: no longer its VLAN
        _exchanges(((v0, pf),))                                      # the PF: untagged, as the VF now is
        tag(NS2, HOST10, 0)                                          # the far host untagged too: the wire
        cap = Capture("udp port 4791 or icmp")
        cap.wait_live()
        _exchanges(((v0, far),))
        frames = cap.roce(2)
    finally:
        if cap is not None:
            stop(cap.p)
        for c in (v0, pf, far):
            c.close()
    assert len(frames) == 2 and all(f[0] == "" and f[3] for f in frames), frames
