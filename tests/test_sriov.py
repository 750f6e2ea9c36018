"""SR-IOV VFs of a ConnectX-like device, end to end (root: the VFs'
netdevs are macvlans, made in a network namespace of the test's own):
SR-IOV enabled with mlxconfig and a firmware reset, 4 VFs through
sriov_numvfs, each a device of its own; RC traffic VF <-> VF and VF <-> PF,
byte for byte; a spoofed MAC from an untrusted VF dropped and counted,
VF counters in the PF's view; the policy driving a VF's port; numvfs back
to 0 refused while a VF is in use."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from daemon_helpers import RunningDaemon
from netns_helpers import need_root, sh
from rc_pair import RcPair, ipv4_gid_index
from shm_helpers import shm_dir
from wait_helpers import free_port, stop, wait_for, wait_listening

from softrdma.enums import IBV_WC_RETRY_EXC_ERR, IBV_WR_SEND
from softrdma.verbs import wr
from softrdma.verbs.device import Context

TAG = os.getpid() % 100000
NS = f"srdma-sriov{TAG}"
PF = f"srpf{TAG}"
NET = f"10.202.{TAG % 250}"


class Host:
    """A namespace with the PF's veth and a daemon serving ``mlx5_0`` on it
    (``args``: more daemon options)."""

    def __init__(self, args=()):
        need_root()
        sh("ip", "netns", "del", NS, check=False)
        sh("ip", "netns", "add", NS)
        sh("ip", "-n", NS, "link", "set", "lo", "up")
        sh("ip", "-n", NS, "link", "add", PF, "type", "veth", "peer", "name", f"{PF}p")
        for dev in (PF, f"{PF}p"):
            sh("ip", "-n", NS, "link", "set", dev, "up")
        sh("ip", "-n", NS, "addr", "add", f"{NET}.1/24", "dev", PF)
        self.run_dir = shm_dir(f"softrdma-sriov-{TAG}")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.makedirs(self.run_dir)
        self.daemon = RunningDaemon(self.run_dir, devices=(f"mlx5_0:{PF}",), prefix=("ip", "netns", "exec", NS),
                                    args=args)
        self.env = {**os.environ, "SOFTRDMA_RUN": self.run_dir, "SOFTRDMA_AUTOSTART": "0"}

    def tool(self, *argv: str) -> subprocess.CompletedProcess:
        """A softrdma tool in the namespace (ip reads the netdevs there)."""
        return subprocess.run(["ip", "netns", "exec", NS, sys.executable, "-m", "softrdma", *argv], env=self.env,
                              capture_output=True, text=True, timeout=60)

    def ok(self, *argv: str) -> str:
        r = self.tool(*argv)
        assert r.returncode == 0, (argv, r.stdout, r.stderr)
        return r.stdout

    def path(self, *parts: str) -> str:
        return os.path.join(self.run_dir, "sys", "class", "infiniband", *parts)

    def read(self, *parts: str) -> str:
        with open(self.path(*parts)) as f:
            return f.read()

    def close(self):
        try:
            self.daemon.stop()
        finally:
            sh("ip", "netns", "del", NS, check=False)
            shutil.rmtree(self.run_dir, ignore_errors=True)


@contextlib.contextmanager
def running_host(args=()):
    """A ``Host`` whose daemon this process's contexts open, ended after."""
    h = Host(args)
    try:
        with pytest.MonkeyPatch.context() as mp:      # this process's contexts open the namespace's daemon
            mp.setenv("SOFTRDMA_RUN", h.run_dir)
            mp.setenv("SOFTRDMA_AUTOSTART", "0")
            yield h
    finally:
        h.close()


@pytest.fixture(scope="module")
def host():
    with running_host() as h:
        yield h


NUMVFS = "/sys/class/infiniband/mlx5_0/device/sriov_numvfs"


def write_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 1, (r.stdout, r.stderr)
    m = re.match(r"softrdma sysfs-write: write error: (.*)\n$", r.stderr)
    assert m, r.stderr
    return m[1]


def test_sriov_needs_sriov_en_and_a_firmware_reset(host):
    assert write_error(host.tool("sysfs-write", NUMVFS, "4")) == "No such file or directory"
    host.ok("mlxconfig", "-d", "mlx5_0", "-y", "set", "SRIOV_EN=1", "NUM_OF_VFS=4")
    assert write_error(host.tool("sysfs-write", NUMVFS, "4")) == "No such file or directory"
    host.ok("mlxfwreset", "-d", "mlx5_0", "-y", "reset")
    assert host.read("mlx5_0", "device", "sriov_totalvfs") == "4\n"
    assert host.read("mlx5_0", "device", "sriov_numvfs") == "0\n"
    assert write_error(host.tool("sysfs-write", NUMVFS, "5")) == "Numerical result out of range"
    assert write_error(host.tool("sysfs-write", NUMVFS, "four")) == "Invalid argument"


def test_four_vfs_are_devices_of_their_own(host):
    host.ok("sysfs-write", f"/sys/class/net/{PF}/device/sriov_numvfs", "4")
    assert host.read("mlx5_0", "device", "sriov_numvfs") == "4\n"
    vfs = [f"mlx5_{i}" for i in range(1, 5)]
    guids = set()
    for i, name in enumerate(vfs):
        assert os.readlink(host.path("mlx5_0", "device", f"virtfn{i}")) == f"../../{name}/device"
        assert os.readlink(host.path(name, "device", "physfn")) == "../../mlx5_0/device"
        uevent = dict(line.split("=", 1) for line in host.read(name, "device", "uevent").splitlines())
        assert uevent["PCI_SLOT_NAME"] == f"0000:5e:00.{i + 1}" and uevent["PCI_ID"] == "15B3:1018"
        assert host.read(name, "hca_type") == "MT4120\n"
        assert os.listdir(host.path(name, "device", "net")) == [f"{PF}v{i}"]
        guids.add(host.read(name, "node_guid"))
        assert host.read("mlx5_0", "device", "sriov", str(i), "policy") == "Follow\n"
        assert host.read(name, "ports", "1", "state") == "4: ACTIVE\n"
    assert len(guids) == 4 and host.read("mlx5_0", "node_guid") not in guids
    links = sh("ip", "-n", NS, "-o", "link", "show", "type", "macvlan").stdout
    assert sorted(re.findall(rf"{PF}v\d", links)) == [f"{PF}v{i}" for i in range(4)]
    out = host.ok("ibv_devices")
    assert [ln.split()[0] for ln in out.splitlines()[2:]] == ["mlx5_0", *vfs]
    # VFs enabled: another count is EBUSY, the same one does nothing
    assert write_error(host.tool("sysfs-write", NUMVFS, "2")) == "Device or resource busy"
    host.ok("sysfs-write", NUMVFS, "4")
    for i in range(4):
        sh("ip", "-n", NS, "addr", "add", f"{NET}.{11 + i}/24", "dev", f"{PF}v{i}")


def _ctx(name: str) -> Context:
    ctx = Context(name=name)
    wait_for(lambda: _has_ipv4(ctx), what=f"{name}'s IPv4 GID")
    return ctx


def _has_ipv4(ctx) -> bool:
    try:
        ipv4_gid_index(ctx)
        return True
    except StopIteration:
        return False


def _exchange(pair: RcPair, size: int = 3000) -> None:
    """SEND and RDMA WRITE a -> b; the bytes arrive as sent."""
    data = os.urandom(size)
    pair.ma.write(data, size)
    pair.send(1, size)
    assert pair.mb.read(size, 0) == data
    data = os.urandom(size)
    pair.ma.write(data, size)
    pair.write(1, size)
    assert pair.mb.read(size, 0) == data


def exchanges(pairs) -> None:
    """``_exchange`` between each (a, b) of devices named in ``pairs``."""
    ctxs = {}
    try:
        for names in pairs:
            for n in names:
                if n not in ctxs:
                    ctxs[n] = _ctx(n)
        for a, b in pairs:
            pair = RcPair(ctxs[a], peer_ctx=ctxs[b])
            try:
                _exchange(pair)
            finally:
                pair.close()
    finally:
        for c in ctxs.values():
            c.close()


def test_rc_between_two_vfs_and_between_a_vf_and_the_pf(host):
    exchanges((("mlx5_1", "mlx5_2"), ("mlx5_2", "mlx5_1"), ("mlx5_1", "mlx5_0"), ("mlx5_0", "mlx5_2")))
    stats = _vf_stats(host)
    assert stats[0]["tx_bytes"] >= 4 * 3000 and stats[1]["rx_bytes"] >= 4 * 3000
    assert stats[0]["tx_dropped"] == 0

    def stats_file() -> dict:
        text = host.read("mlx5_0", "device", "sriov", "0", "stats")
        return {k.strip(): int(v) for k, v in (line.split(":") for line in text.splitlines())}
    # mlx5's sriov/N/stats: the same counters, refreshed each second
    st = wait_for(lambda: (lambda d: d if d["tx_bytes"] >= 4 * 3000 else None)(stats_file()),
                  what="sriov/0/stats to show the traffic")
    assert list(st) == ["tx_packets", "tx_bytes", "tx_dropped", "rx_packets", "rx_bytes", "rx_broadcast",
                        "rx_multicast", "tx_broadcast", "tx_multicast", "rx_dropped"]


@pytest.mark.slow
def test_the_tools_use_a_vf_like_any_device(host):
    """ibv_rc_pingpong between two VFs, as between any two devices."""
    with _ctx("mlx5_3") as c3, _ctx("mlx5_4") as c4:
        g3, g4 = ipv4_gid_index(c3), ipv4_gid_index(c4)
    port = free_port()
    server = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-m", "softrdma", "ibv_rc_pingpong",
                               "-d", "mlx5_3", "-g", str(g3), "-p", str(port), "-n", "50", "-s", "4096"],
                              env=host.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, server)
        client = host.tool("ibv_rc_pingpong", "-d", "mlx5_4", "-g", str(g4), "-p", str(port), "-n", "50", "-s",
                           "4096", "127.0.0.1")
        assert client.returncode == 0, client.stderr
        out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
        for text in (client.stdout, out):
            assert "409600 bytes in" in text and "50 iters in" in text, text
    finally:
        stop(server)


def _vf_stats(host) -> dict[int, dict]:
    """``ip -s link show PF``'s vf lines and counters."""
    out = host.ok("ip", "-s", "link", "show", PF)
    stats = {}
    for m in re.finditer(r"    vf (\d+) .*\n    RX: bytes  packets  mcast   bcast   dropped \n    (.*)\n"
                         r"    TX: bytes  packets  dropped \n    (.*)\n", out):
        rx, tx = [int(x) for x in m[2].split()], [int(x) for x in m[3].split()]
        stats[int(m[1])] = {"rx_bytes": rx[0], "rx_packets": rx[1], "tx_bytes": tx[0], "tx_packets": tx[1],
                            "tx_dropped": tx[2]}
    assert len(stats) == 4, out
    return stats


def _lost_send(a, b) -> int:
    """One SEND a -> b on a fresh pair with short retries: the requester's
    completion status (the receiver must have got nothing)."""
    pair = RcPair(a, peer_ctx=b, timeout=8, retry_cnt=1)
    try:
        pair.b.post_recv(wr.RecvWR(1, 1, [wr.SGE(pair.mb.buf, 64, pair.mb.lkey)]))
        pair.a.post_send(wr.SendWR(1, IBV_WR_SEND, 1, sg=[wr.SGE(pair.ma.buf, 64, pair.ma.lkey)]))
        (wc,) = pair.wait(pair.cqa, 1, timeout=60)
        assert pair.cqb.poll(1)[1] == []
        return wc.status
    finally:
        pair.close()


def test_a_spoofed_mac_from_an_untrusted_vf_is_dropped(host):
    host.ok("ip", "link", "set", PF, "vf", "0", "spoofchk", "on")
    assert "vf 0     link/ether 02:" in host.ok("ip", "link", "show", PF)
    assert "spoof checking on, link-state auto, trust off" in host.ok("ip", "link", "show", PF)
    v1, v2 = _ctx("mlx5_1"), _ctx("mlx5_2")
    try:
        gid0 = str(v1.query_gid(1, 0))
        # the VF changes its own MAC: its packets now carry a source MAC it was not given
        sh("ip", "-n", NS, "link", "set", f"{PF}v0", "address", "02:00:5e:10:20:30")
        wait_for(lambda: str(v1.query_gid(1, 0)) != gid0, what="the VF's new MAC in its GID table")
        before = _vf_stats(host)[0]["tx_dropped"]
        assert _lost_send(v1, v2) == IBV_WC_RETRY_EXC_ERR
        assert _vf_stats(host)[0]["tx_dropped"] > before
        # a trusted VF may: the same MAC passes
        host.ok("ip", "link", "set", PF, "vf", "0", "trust", "on")
        pair = RcPair(v1, peer_ctx=v2)
        try:
            _exchange(pair, 100)
        finally:
            pair.close()
        host.ok("ip", "link", "set", PF, "vf", "0", "trust", "off", "mac", "02:00:5e:10:20:30")
        pair = RcPair(v1, peer_ctx=v2)               # its assigned MAC now: passes with the check on
        try:
            _exchange(pair, 100)
        finally:
            pair.close()
        cfg = host.read("mlx5_0", "device", "sriov", "0", "config")
        assert "MAC        : 02:00:5e:10:20:30\n" in cfg and "SpoofCheck : ON\n" in cfg and "Trust      : OFF\n" in cfg
    finally:
        v1.close()
        v2.close()


def test_the_policy_drives_the_vf_port(host):
    state = ("mlx5_2", "ports", "1", "state")
    host.ok("sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov/1/policy", "Down")
    assert host.read("mlx5_0", "device", "sriov", "1", "policy") == "Down\n"
    assert host.read(*state) == "1: DOWN\n"
    assert "link-state disable" in host.ok("ip", "link", "show", PF)
    with _ctx("mlx5_3") as c3, _ctx("mlx5_2") as c2:      # nothing reaches a VF held down
        assert _lost_send(c3, c2) == IBV_WC_RETRY_EXC_ERR
    host.ok("ip", "link", "set", PF, "vf", "1", "state", "auto")
    assert host.read(*state) == "4: ACTIVE\n"
    # Follow: the PF's link goes down, the VF's port with it; Up stays up
    host.ok("ip", "link", "set", PF, "vf", "2", "state", "enable")
    sh("ip", "-n", NS, "link", "set", PF, "down")
    try:
        wait_for(lambda: host.read(*state) == "1: DOWN\n", what="mlx5_2 down with its PF")
        assert host.read("mlx5_3", "ports", "1", "state") == "4: ACTIVE\n"
    finally:
        sh("ip", "-n", NS, "link", "set", PF, "up")
    wait_for(lambda: host.read(*state) == "4: ACTIVE\n", what="mlx5_2 up with its PF")
    assert write_error(host.tool("sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov/1/policy",
                                 "Sideways")) == "Invalid argument"
    r = host.tool("ip", "link", "set", PF, "vf", "1", "min_tx_rate", "5")
    assert r.returncode == 2 and r.stderr == "RTNETLINK answers: Operation not supported\n"


@pytest.mark.slow
def test_max_tx_rate_paces_a_vf(host):
    """ip link set PF vf N max_tx_rate 16: the VF's link carries 16 Mbit/s
    (2 MB/s): 4 MiB of RDMA WRITEs take 2 s at least."""
    host.ok("ip", "link", "set", PF, "vf", "2", "max_tx_rate", "16")
    assert ", max_tx_rate 16Mbps, spoof checking" in host.ok("ip", "link", "show", PF)
    assert "MaxTxRate  : 16\n" in host.read("mlx5_0", "device", "sriov", "2", "config")
    with _ctx("mlx5_3") as c3, _ctx("mlx5_4") as c4:
        pair = RcPair(c3, peer_ctx=c4)
        try:
            t0 = time.monotonic()
            pair.write(4, 1 << 20)
            elapsed = time.monotonic() - t0
        finally:
            pair.close()
    assert elapsed >= 4 * (1 << 20) / 2e6, elapsed
    host.ok("sysfs-write", "/sys/class/infiniband/mlx5_0/device/sriov/2/max_tx_rate", "0")
    assert "MaxTxRate  : 0\n" in host.read("mlx5_0", "device", "sriov", "2", "config")
    assert "max_tx_rate" not in host.ok("ip", "link", "show", PF)


def test_numvfs_to_zero_while_a_vf_is_in_use_is_ebusy(host):
    ctx = Context(name="mlx5_3")
    try:
        assert write_error(host.tool("sysfs-write", NUMVFS, "0")) == "Device or resource busy"
        assert os.path.isdir(host.path("mlx5_3"))
    finally:
        ctx.close()
    host.ok("sysfs-write", NUMVFS, "0")
    assert host.read("mlx5_0", "device", "sriov_numvfs") == "0\n"
    assert sorted(os.listdir(host.path())) == ["mlx5_0"]
    assert not [n for n in os.listdir(host.path("mlx5_0", "device")) if n.startswith("virtfn")]
    assert sh("ip", "-n", NS, "-o", "link", "show", "type", "macvlan").stdout == ""
    assert [ln.split()[0] for ln in host.ok("ibv_devices").splitlines()[2:]] == ["mlx5_0"]


def test_echo_into_the_tree_files(host):
    """``echo 2 > .../sriov_numvfs`` and ``echo ON > .../sriov/0/trust`` on
    the daemon's tree (as ``softrdma run`` shows it at /sys/class): taken
    within a second; a refused value leaves the state in force on show."""
    numvfs = host.path("mlx5_0", "device", "sriov_numvfs")
    with open(numvfs, "w") as f:
        f.write("2\n")
    wait_for(lambda: os.path.exists(host.path("mlx5_0", "device", "sriov", "1", "config")),
             what="2 VFs from a write to sriov_numvfs")
    assert os.path.isdir(host.path("mlx5_2"))
    assert host.read("mlx5_0", "device", "sriov_numvfs") == "2\n"
    with open(host.path("mlx5_0", "device", "sriov", "0", "trust"), "w") as f:
        f.write("ON\n")
    wait_for(lambda: "Trust      : ON\n" in host.read("mlx5_0", "device", "sriov", "0", "config"),
             what="trust ON from a write to sriov/0/trust")
    assert host.read("mlx5_0", "device", "sriov", "0", "trust") == "usage: write <ON|OFF> to trust|untrust VF\n"
    with open(numvfs, "w") as f:
        f.write("9\n")                                  # ERANGE: logged, the file shows 2 again
    wait_for(lambda: host.read("mlx5_0", "device", "sriov_numvfs") == "2\n", what="sriov_numvfs restored")
    with open(numvfs, "w") as f:
        f.write("0\n")
    wait_for(lambda: not os.path.exists(host.path("mlx5_1")), what="the VFs gone")
    assert host.read("mlx5_0", "device", "sriov_numvfs") == "0\n"
