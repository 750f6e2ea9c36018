"""rdma_cm on port 2 of a 2-port HCA (the fabric of ``test_ib_2port``: h1's
port 1 on one subnet with h2, its port 2 on another with h3, one SM per
port).  ``ucmatose``/``udaddy -f gid`` bound to port 2's GID 0 run over
port 2's subnet -- its SA's path, its QP1 and CM agent, the QPs on port 2
-- and the cm_id reports port 2; the same tools on port 1's GID still run
over port 1's subnet; ``mckey -M`` joins through port 2's SA."""

from __future__ import annotations

import errno
import ipaddress
import re
import subprocess
import sys

import pytest

from test_ib_2port import port_of, tool, two  # noqa: F401 -- the module's fabric, hosts and SMs
from test_ib_cma import CLIENT_OUT, PORT_ARGS, SERVER_TAIL, cm_ids
from wait_helpers import stop, wait_for


def gid_of(d, num: int) -> str:
    """GID 0 of port ``num`` of the host's mlx5_0, written as an IPv6 address."""
    return str(ipaddress.IPv6Address(bytes.fromhex(port_of(d, num)["gids"][0])))


def run_pair(server, client, tool_name: str, gid: str, client_bind: str | None = None, on_listen=None):
    """``tool -f gid`` listening on ``gid`` on the server's host, the client
    on the other host connecting to it (bound to ``client_bind`` when
    given); ``on_listen()`` runs while the server listens.  Returns (server
    output, client result)."""
    env_s, env_c = {**server.env, "SOFTRDMA_AUTOSTART": "0"}, {**client.env, "SOFTRDMA_AUTOSTART": "0"}
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", tool_name, "-f", "gid", "-b", gid, *PORT_ARGS[tool_name],
                            "-C", "3"], env=env_s, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(i.get("state") == 8 for i in cm_ids(server.run_dir)), 60, f"{tool_name} to listen",
                 proc=srv)
        if on_listen is not None:
            on_listen()
        cb = ["-b", client_bind] if client_bind else []
        cli = subprocess.run([sys.executable, "-m", "softrdma", tool_name, "-f", "gid", *cb,
                              "-s", gid, *PORT_ARGS[tool_name], "-C", "3"], env=env_c, capture_output=True,
                             text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    assert srv.returncode == 0, sout
    return sout, cli


def xmit(d) -> dict:
    return {n: port_of(d, n)["ib"]["counters"]["xmit_packets"] for n in (1, 2)}


@pytest.mark.parametrize("tool_name", ["ucmatose", "udaddy"])
def test_tool_f_gid_on_each_port(two, tool_name):  # noqa: F811
    """h1's server bound to port 2's GID, h3's client; the same on port 1's
    GID with h2 (port 1 still works); h1 as the client, bound to port 2's
    GID, to h3's server.  Each run's packets leave h1 from the port
    it is on, and the listen reports its port."""
    d1, d2, d3 = (two.daemons[h] for h in ("h1", "h2", "h3"))
    g1, g2, g3 = gid_of(d1, 1), gid_of(d1, 2), gid_of(d3, 1)
    for num, server, client, gid, client_bind in ((2, d1, d3, g2, None), (1, d1, d2, g1, None), (2, d3, d1, g3, g2)):
        before = xmit(d1)
        seen = {}

        def listening(num=num):
            # a listen bound to a GID is on that GID's port: rdma res show cm_id says mlx5_0/<num>
            rc, out, err = tool(d1, "rdma", "res", "show", "cm_id")
            assert rc == 0, err
            seen["res"] = out
            seen["ports"] = sorted(i.get("port") for i in cm_ids(d1.run_dir))

        sout, cli = run_pair(server, client, tool_name, gid, client_bind, listening if server is d1 else None)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert cli.stdout == CLIENT_OUT[tool_name], cli.stdout
        assert sout.endswith("data transfers complete\n" + SERVER_TAIL[tool_name]), sout
        if server is d1:
            assert seen["ports"] == [num], seen
            assert re.search(rf"link mlx5_0/{num} .*state LISTEN", seen["res"]), seen["res"]
        after = xmit(d1)
        # the CM's messages and the data went out of the port the ID is on (at least
        # the CM's answer and 3 messages); the other port sends only its SM's sweeps
        assert after[num] - before[num] >= 4, (num, before, after)
        assert after[3 - num] - before[3 - num] < after[num] - before[num], (num, before, after)


def test_port_2_ids_report_port_2(two):  # noqa: F811
    """Through the library: an AF_IB ID on port 2's GID resolves the peer
    (h3) on port 2, its route from port 2's SA, port_num 2 in the QP's
    INIT attributes; a GID no port holds is ENODEV."""
    d1 = two.daemons["h1"]
    g2 = gid_of(d1, 2)
    g3 = str(ipaddress.IPv6Address(bytes.fromhex(port_of(two.daemons["h3"], 1)["gids"][0])))
    code = f"""
from softrdma.verbs import cm
from softrdma.verbs.errors import PyverbsRDMAError
i = cm.CmId(None, 0x106)
i.bind_addr({g2!r}, 0, 27)
print("bind", i.info["device"], i.info["port_num"])
i.resolve_addr({g2!r}, {g3!r}, 7899, 2000, 27)
i.resolve_route(2000)
q = i.query()
print("route", q["port_num"], q["dlid"] == {two.lid["h3"]})
print("init", i.init_qp_attr(1)[0]["port_num"])
j = cm.CmId(None, 0x106)
try:
    j.bind_addr("fe80::dead:beef", 0, 27)
except PyverbsRDMAError as e:
    print("bind", e.error_code)
"""
    r = subprocess.run([sys.executable, "-c", code], env={**d1.env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == f"bind mlx5_0 2\nroute 2 True\ninit 2\nbind {errno.ENODEV}\n", r.stdout + r.stderr


def test_mckey_by_gid_on_port_2(two):  # noqa: F811
    """A multicast join on port 2's GID goes to port 2's SA: the group is
    made in port 2's subnet, whose switch forwards h3's sends to h1's port 2."""
    from test_ib_cma_gid import MGID, mckey, wait_joined
    d1 = two.daemons["h1"]
    srv = mckey(two, "h1", "-M", MGID, "-b", gid_of(d1, 2), "-C", "4")
    try:
        lines = wait_joined(srv)
        assert re.match(r"mckey: joined dgid: \S+ mlid 0x[0-9a-f]+ sl \d+", lines[-1]), "".join(lines)
        cli = subprocess.run([sys.executable, "-m", "softrdma", "mckey", "-M", MGID, "-b",
                              gid_of(two.daemons["h3"], 1), "-s", "-C", "4"],
                             env={**two.daemons["h3"].env, "SOFTRDMA_AUTOSTART": "0"}, capture_output=True,
                             text=True, timeout=120)
        sout, _ = srv.communicate(timeout=60)
    finally:
        stop(srv)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert sout.endswith("receiving data transfers\ndata transfers complete\ntest complete\nreturn status 0\n"), sout
