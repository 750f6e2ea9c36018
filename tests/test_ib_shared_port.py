"""A CA port held by an IB device and an ibsim client attached to the same
CA (``SIM_HOST`` naming it) share the port: the SM running as that client
(softrdma's, or the real opensm through libumad2sim) sweeps the subnet and
answers the SA from h1's CA, while h1's device still gets its own MADs --
the SA's answers to its PathRecord query, the IB CM's messages -- so
rdma_cm by GID runs between h1 and h4 as with the SM anywhere else."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ib_helpers import IbHosts, link
from ibfabric_helpers import NET_2SW
from wait_helpers import wait_for


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def hosts(tmp_path_factory, shm_path_module, request):
    import sm_helpers
    if not sm_helpers.have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    tmp = tmp_path_factory.mktemp("ibmiscsh")
    h = IbHosts(tmp, shm_path_module / request.param, NET_2SW, ("h1", "h4"), sm=None)
    try:
        log = tmp / "osm.log"
        if request.param == "softrdma":
            args, env = [sys.executable, "-m", "softrdma", "opensm", "-s", "0", "-f", str(log)], {}
        else:
            args, env = ["opensm", "-d2", "-s", "0", "-f", str(log)], {"LD_PRELOAD": sm_helpers.SIMSO}
        sm = subprocess.Popen(args, cwd=tmp, env=h.fabric.env(SIM_HOST="h1", **env),
                              stdout=open(tmp / "sm.out", "w"), stderr=subprocess.STDOUT)
        h.fabric.procs.append(sm)
        wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 60, "SUBNET UP", proc=sm)
        h.lid = {n: h.fabric.wait_active(d.run_dir) for n, d in h.daemons.items()}
    except BaseException:
        h.close()
        raise
    yield h
    h.close()


def test_the_sm_at_a_device_s_ca_sweeps_and_the_device_keeps_its_mads(hosts):
    # the SM sits at h1's CA: every port's SM LID is h1's LID
    for n in ("h1", "h4"):
        assert link(hosts.run_dir(n), "mlx5_0")["port_attr"]["sm_lid"] == hosts.lid["h1"], n
    # h1's device asks the SA (at its own port) and takes the CM's REQ: an RC
    # connection by GID with h1 as the server
    from test_ib_cma import run_pair
    cli, sout = run_pair(hosts, 7830, "rc")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert "ROUTE_RESOLVED" in cli.stdout and "data ok 4" in cli.stdout, cli.stdout
    assert "request b'hello'" in sout and "data ok 4" in sout, sout


def test_an_ibsim_sm_is_refused_at_a_port_whose_device_runs_an_sm(hosts):
    """One SM per port: with ``softrdma opensm -g`` bound to h4's device (a
    standby here), an ibsim client with issm at h4's CA is refused."""
    from softrdma.mgmt.umad import IbsimPort, TransportError
    from softrdma.wire.smp import CAP_IS_SM
    from wait_helpers import stop
    d = hosts.daemons["h4"]
    guid = "0x" + link(d.run_dir, "mlx5_0")["gids"][0][16:]
    tmp = hosts.fabric.tmp
    sm = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-g", guid, "-p", "1", "-s", "0",
                           "-f", str(tmp / "osm-h4.log")], env={**d.env, "SOFTRDMA_AUTOSTART": "0"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: link(d.run_dir, "mlx5_0")["port_attr"]["port_cap_flags"] & CAP_IS_SM, 60,
                 "IsSM on h4's port", proc=sm)
        with pytest.raises(TransportError, match="refused"):
            IbsimPort(hosts.fabric.base, "h4", issm=True).close()
        IbsimPort(hosts.fabric.base, "h4", issm=False).close()          # a diag's client is welcome
    finally:
        stop(sm)
