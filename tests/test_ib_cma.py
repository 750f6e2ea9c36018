"""rdma_cm on InfiniBand devices, by GID (AF_IB): route resolution through
the subnet administrator's PathRecords (softrdma's SM and the real opensm),
the IB CM over QP1 with LID-routed MADs, RC and UD (SIDR) between two hosts
a switch apart, the errors of no SM and no path, and ``ucmatose``/``udaddy
-f gid`` between the hosts."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from ib_helpers import IbHosts, link
from ibfabric_helpers import NET_2SW
from sm_helpers import have_ibsim
from wait_helpers import stop, wait_for

PROG = os.path.join(os.path.dirname(__file__), "pyverbs_programs", "cm_ib_pingpong.py")


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def hosts(tmp_path_factory, shm_path_module, request):
    """h1 and h4 (one switch hop apart: sw1 - sw2), swept by softrdma's SM or by the real opensm."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    h = IbHosts(tmp_path_factory.mktemp("ibcma"), shm_path_module / request.param, NET_2SW, ("h1", "h4"),
                request.param)
    h.sm_kind = request.param
    yield h
    h.close()


def gid0(h, host: str) -> str:
    """The host's port GID 0, written as an IPv6 address."""
    import ipaddress
    return str(ipaddress.IPv6Address(bytes.fromhex(link(h.run_dir(host), "mlx5_0")["gids"][0])))


def pyverbs_env(h, host: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "softrdma", "pyverbs-path"], capture_output=True, text=True,
                         check=True).stdout.strip()
    d = h.daemons[host]
    return {**d.env, "PYTHONPATH": out + os.pathsep + d.env.get("PYTHONPATH", ""), "SOFTRDMA_AUTOSTART": "0"}


def peer(h, host: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, PROG, *args], env=pyverbs_env(h, host), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def run_pair(h, port: int, mode: str, n: int = 4):
    srv = peer(h, "h1", "server", gid0(h, "h1"), str(port), mode, str(n))
    try:
        wait_for(lambda: srv.poll() is not None or "listening" in (srv.stdout.readline() or ""), 60, "the server",
                 proc=srv)
        cli = subprocess.run([sys.executable, PROG, "client", gid0(h, "h1"), str(port), mode, str(n)],
                             env=pyverbs_env(h, "h4"), capture_output=True, text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    return cli, sout


def test_rc_by_gid_across_a_switch_hop(hosts):
    cli, sout = run_pair(hosts, 7800, "rc")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "ROUTE_RESOLVED" in cli.stdout and "established b'welcome'" in cli.stdout, cli.stdout
    # the QP's path is the SA's: LID-routed to h1's LID, no GRH (HopLimit 0 within the subnet)
    assert f"qp dlid {hosts.lid['h1']} global 0" in cli.stdout, cli.stdout
    assert "data ok 4" in cli.stdout and "disconnected" in cli.stdout
    assert "request b'hello'" in sout and "data ok 4" in sout and "disconnected" in sout, sout


def test_ud_by_gid_sidr_across_a_switch_hop(hosts):
    cli, sout = run_pair(hosts, 7801, "ud")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    # SIDR_REP's Q_Key (RDMA_PS_UDP's), the address handle of the SA's path
    assert f"sidr qkey 0x1234567 dlid {hosts.lid['h1']} global 0" in cli.stdout, cli.stdout
    assert "data ok 4" in cli.stdout
    assert "accepted" in sout and f"data ok 4 from lid {hosts.lid['h4']}" in sout, sout


def client(h, gid: str, *args, timeout_ms: int = 2000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, PROG, "client", gid, "7802", "route", "1", str(timeout_ms), *args],
                          env=pyverbs_env(h, "h4"), capture_output=True, text=True, timeout=120)


def test_route_errors_as_the_kernel_gives_them(hosts):
    import ipaddress
    g = ipaddress.IPv6Address(gid0(hosts, "h1")).packed
    # a GID of the subnet that no port has: the SA has no path -> ROUTE_ERROR -EINVAL
    nobody = str(ipaddress.IPv6Address(g[:8] + bytes.fromhex("00000000deadbeef")))
    r = client(hosts, nobody)
    assert r.returncode == 0 and f"RDMA_CM_EVENT_ROUTE_ERROR {-errno.EINVAL}" in r.stdout, r.stdout + r.stderr
    # a GID of another subnet: no IB port reaches it -> rdma_resolve_addr fails ENODEV
    r = client(hosts, "fe90::1")
    assert r.returncode != 0 and "Failed to Resolve Address" in r.stdout + r.stderr, r.stdout + r.stderr
    assert f"Errno: {errno.ENODEV}" in r.stdout + r.stderr or "No such device" in r.stdout + r.stderr


PORT_ARGS = {"ucmatose": ("-p", "7810"), "udaddy": ()}        # (udaddy's -p is the port space; its port is 7174)


@pytest.mark.parametrize("tool", ["ucmatose", "udaddy"])
def test_tool_f_gid_between_two_hosts(hosts, tool):
    g = gid0(hosts, "h1")
    s, c = hosts.daemons["h1"], hosts.daemons["h4"]
    env_s, env_c = {**s.env, "SOFTRDMA_AUTOSTART": "0"}, {**c.env, "SOFTRDMA_AUTOSTART": "0"}
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", tool, "-f", "gid", "-b", g, *PORT_ARGS[tool],
                            "-C", "3"], env=env_s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(i.get("state") == 8 for i in cm_ids(s.run_dir)), 60, f"{tool} to listen", proc=srv)
        cli = subprocess.run([sys.executable, "-m", "softrdma", tool, "-f", "gid", "-s", g, *PORT_ARGS[tool],
                              "-C", "3"], env=env_c, capture_output=True, text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout.endswith("test complete\nreturn status 0\n"), cli.stdout
    assert srv.returncode == 0 and sout.endswith("test complete\nreturn status 0\n"), sout


def cm_ids(run_dir: str) -> list:
    from ib_helpers import control
    r = control(run_dir, "resources")
    return [o for o in r.get("resources", []) if o.get("kind") == "cm_id"]


def test_zz_no_sm_the_route_query_times_out(hosts):
    """Last in the module: the SM goes; the ports keep their LIDs and SM LID,
    and the SA query gets no answer -> ROUTE_ERROR -ETIMEDOUT."""
    stop(hosts.fabric.sm)
    r = client(hosts, gid0(hosts, "h1"), timeout_ms=500)
    assert r.returncode == 0 and f"RDMA_CM_EVENT_ROUTE_ERROR {-errno.ETIMEDOUT}" in r.stdout, r.stdout + r.stderr
