"""rdma_cm by GID on InfiniBand ports, beyond connections (softrdma's SM
and the real opensm): multicast -- ``mckey -M MGID`` (AF_IB) joins through
the subnet administrator (an MCMemberRecord Set from the port's QP1), the
group's MLID in the JOIN event's address handle, the UD QP attached, the
sends delivered through the switches' MFTs; the leave is an SA Delete (the
port leaves the group) -- and rsockets over AF_IB (``rstream -f gid``)."""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys

import pytest

from ib_helpers import two_hosts
from test_ib_cma import cm_ids, gid0
from wait_helpers import stop, wait_for

MGID = "ff12:4d43::1:4b59"            # (not an IPoIB MGID: opensm gives those IPoIB's Q_Key)


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def hosts(tmp_path_factory, shm_path_module, request):
    """h1 and h4 (one switch hop apart), swept by softrdma's SM or by the real opensm."""
    h = two_hosts(tmp_path_factory, shm_path_module, request.param, "ibmiscmc")
    yield h
    h.close()


def mckey(h, host: str, *args) -> subprocess.Popen:
    env = {**h.daemons[host].env, "SOFTRDMA_AUTOSTART": "0"}
    return subprocess.Popen([sys.executable, "-m", "softrdma", "mckey", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def members(h, host: str, mgid: str) -> list[str]:
    """The PortGIDs of the group's MCMemberRecords, as the SA gives them
    (saquery -m from ``host``: zero for a requester that is not trusted)."""
    env = {**h.daemons[host].env, "SOFTRDMA_AUTOSTART": "0"}
    out = subprocess.run([sys.executable, "-m", "softrdma", "saquery", "-C", "mlx5_0", "-m"], env=env,
                         capture_output=True, text=True, timeout=60).stdout
    recs, cur = [], {}
    for ln in out.splitlines():
        m = re.match(r"\s*(\w+)\.+(.*)", ln)
        if m:
            cur[m.group(1)] = m.group(2).strip()
            if m.group(1) == "PortGid":
                recs.append(dict(cur))
    want = ipaddress.IPv6Address(mgid)
    return [str(ipaddress.IPv6Address(r["PortGid"])) for r in recs
            if "MGID" in r and ipaddress.IPv6Address(r["MGID"]) == want]


def wait_joined(srv: subprocess.Popen) -> list[str]:
    """The receiver's lines up to its ``mckey: joined`` line (or its end)."""
    lines = []

    def joined():
        ln = srv.stdout.readline()
        lines.append(ln)
        return srv.poll() is not None or ln.startswith("mckey: joined")
    wait_for(joined, 60, "the receiver's join", proc=srv)
    return lines


def test_mckey_by_gid_between_two_hosts(hosts):
    g1, g4 = gid0(hosts, "h1"), gid0(hosts, "h4")
    srv = mckey(hosts, "h1", "-M", MGID, "-b", g1, "-C", "4")
    try:
        lines = wait_joined(srv)
        m = re.match(r"mckey: joined dgid: (\S+) mlid 0x([0-9a-f]+) sl (\d+)", lines[-1])
        assert m, "".join(lines)
        assert ipaddress.IPv6Address(m.group(1)) == ipaddress.IPv6Address(MGID)
        mlid = int(m.group(2), 16)
        assert mlid >= 0xC000, lines
        assert len(members(hosts, "h4", MGID)) == 1         # the SA has h1's port in the group
        cli = subprocess.run([sys.executable, "-m", "softrdma", "mckey", "-M", MGID, "-b", g4, "-s", "-C", "4"],
                             env={**hosts.daemons["h4"].env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True,
                             text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    sout = "".join(lines) + sout
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"mlid 0x{mlid:x}" in cli.stdout, cli.stdout
    assert cli.stdout.endswith("initiating data transfers\ndata transfers complete\ntest complete\n"
                               "return status 0\n"), cli.stdout
    assert sout.startswith("mckey: starting server\nmckey: joining\nmckey: joined"), sout
    assert sout.endswith("receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"), sout
    # both left: the SA has no member of the group left
    wait_for(lambda: members(hosts, "h1", MGID) == [], 30, "the leaves")


def test_a_join_the_sa_refuses_is_a_multicast_error(hosts):
    """An IPoIB MGID (signature 0x401B): opensm holds those groups to the
    IPoIB Q_Key and refuses rdma_cm's (REQ_INVALID) -> MULTICAST_ERROR -EINVAL,
    as the kernel reports an SA's error status; softrdma's SA makes the group."""
    ipoib_mgid = "ff12:401b:ffff::4d43:4b59"
    p = mckey(hosts, "h1", "-M", ipoib_mgid, "-b", gid0(hosts, "h1"), "-C", "0")
    try:
        out, _ = p.communicate(timeout=60)
    finally:
        stop(p)
    if hosts.sm == "opensm":
        # (mckey's status is its last leave's, which succeeds: the failed join is left too)
        assert out == ("mckey: starting server\nmckey: joining\n"
                       "mckey: event: RDMA_CM_EVENT_MULTICAST_ERROR, error: -22\n"
                       "test complete\nreturn status 0\n") and p.returncode == 0, out
    else:
        assert "mckey: joined dgid: ff12:401b:ffff::4d43:4b59 mlid 0x" in out, out
        assert out.endswith("test complete\nreturn status 0\n") and p.returncode == 0, out


def test_mgid_of_an_address():
    """cma_set_mgid: a GID is itself (AF_IB); an IPv4 group is mapped under
    the IPoIB broadcast prefix with the RDMA CM signature for UDP."""
    from softrdma.device.cma_id import AF_IB, CmaId
    from softrdma.device.cma_mcast import mgid_of
    from softrdma.wire.cma import PortSpace
    ib = CmaId(None, PortSpace.UDP, "UD", 0)
    ib.family = AF_IB
    assert mgid_of(ib, MGID, 0xFFFF) == ipaddress.IPv6Address(MGID).packed
    ip = CmaId(None, PortSpace.UDP, "UD", 0)
    assert mgid_of(ip, "239.1.2.3", 0x7FFF).hex() == "ff124001ffff000000000000" + "0f010203"
    ip.ps = PortSpace.IPOIB
    assert mgid_of(ip, "239.1.2.3", 0xFFFF).hex() == "ff12401bffff000000000000" + "0f010203"
    assert mgid_of(ip, "ff15:a01b::1", 0xFFFF) == ipaddress.IPv6Address("ff15:a01b::1").packed


def test_rstream_f_gid_between_two_hosts(hosts):
    """rsockets over AF_IB: rstream's server bound to h1's GID, the client
    connecting to it from h4 (the SA's path, the IB CM over LIDs)."""
    g1 = gid0(hosts, "h1")
    env = {**hosts.daemons["h1"].env, "SOFTRDMA_AUTOSTART": "0"}
    args = ["-f", "gid", "-p", "7820", "-S", "4096", "-C", "200", "-T", "b"]
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "rstream", "-b", g1, *args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(i.get("state") == 8 for i in cm_ids(hosts.run_dir("h1"))), 60, "rstream to listen",
                 proc=srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", "rstream", "-s", g1, *args],
                             env={**hosts.daemons["h4"].env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True,
                             text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr + sout
    lines = cli.stdout.splitlines()
    assert lines[0].split() == ["name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"], lines
    assert lines[1].split()[:3] == ["custom", "4k", "200"], lines
