"""`softrdma ibstat` on the IB port of a simulated fabric, against the real ibstat.

With IBSIM_SOCKNAME set, softrdma's ibstat shows what the real ibstat
shows under Debian's libumad2sim.so: the one CA 'ibsim0' of the node
SIM_HOST names, built from the fabric server's control answers.  Both run
against one fabric -- `softrdma fabric serve` and the real `ibsim` -- on
several nodes (CAs, switches, the default node, an unknown one) and with
ibstat's flags, before and after the real `opensm -o` brought the ports
up; stdout, stderr and exit code must be the same.  Normalised: umad2sim's
own "sim_connect: attached as client" line and the pid in "[pid]".

A second small fabric has one CA per link speed/width, for the Rate line.
Needs opensm, ibsim-utils and infiniband-diags: skipped when missing,
except in CI (CI=true), where that fails.
"""

import contextlib
import io
import os
import re
import subprocess
import sys

import pytest

from sm_helpers import SIMSO, have_ibsim, need_ibsim, norm_err, sim_cwd, sim_env, start_fabric, unique_base

pytestmark = need_ibsim()


RATES_NET = """\
switchguid=0x0002c90300100000
Switch	8 "sw1"
[1]	"h1"[1]		# lid 0 1xSDR
[2]	"h2"[1]		# lid 0 4xDDR
[3]	"h3"[1]		# lid 0 4xQDR
[4]	"h4"[1]		# lid 0 12xFDR
[5]	"h5"[1]		# lid 0 8xHDR
[6]	"h6"[1]		# lid 0 4xFDR10
[7]	"h7"[1]		# lid 0 1xEDR

caguid=0x0002c90400000000
Ca	1 "h1"
[1]	"sw1"[1]	# lid 0 1xSDR
Ca	1 "h2"
[1]	"sw1"[2]	# lid 0 4xDDR
Ca	1 "h3"
[1]	"sw1"[3]	# lid 0 4xQDR
Ca	1 "h4"
[1]	"sw1"[4]	# lid 0 12xFDR
Ca	1 "h5"
[1]	"sw1"[5]	# lid 0 8xHDR
Ca	1 "h6"
[1]	"sw1"[6]	# lid 0 4xFDR10
Ca	1 "h7"
[1]	"sw1"[7]	# lid 0 1xEDR
"""

NODES = ["", "host0001", "host0016", "leaf001", "spine002", "nosuch"]
SHORT = ["", "-p", "ibsim0 1"]
ARGS = ["", "-l", "-s", "-p", "ibsim0 1", "ibsim0 0", "ibsim0 2", "ibsim0x", "-s ibsim0 1",
        "-p ibsim0", "-h", "-V", "-C foo", "-v -d ibsim0"]





class Fabric:
    def __init__(self, tmp, server, net):
        self.tmp = tmp
        self.base = unique_base("st")
        self.proc = start_fabric(server, net, self.base, tmp)

    def sweep(self):
        log = self.tmp / f"osm-{self.base}.log"
        subprocess.run(["opensm", "-o", "-f", str(log)], cwd=sim_cwd() or self.tmp, capture_output=True,
                       env=sim_env(self.base, self.tmp, LD_PRELOAD=SIMSO), timeout=60)
        assert "SUBNET UP" in log.read_text()

    def real(self, args, host=None):
        r = subprocess.run(["ibstat", *args], cwd=sim_cwd() or self.tmp, capture_output=True, text=True, timeout=30,
                           env=sim_env(self.base, self.tmp, LD_PRELOAD=SIMSO, SIM_HOST=host))
        return r.returncode, r.stdout, norm_err(r.stderr)

    def ours(self, args, host=None):
        """In this process (a new python per case would take most of the time)."""
        from softrdma.tools import ibstat
        out, err = io.StringIO(), io.StringIO()
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(sim_env(self.base, self.tmp, SIM_HOST=host))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = ibstat.main(list(args))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return rc, out.getvalue(), norm_err(err.getvalue())

    def ours_cli(self, args, host=None):
        r = subprocess.run([sys.executable, "-m", "softrdma", "ibstat", *args], cwd=self.tmp,
                           capture_output=True, text=True, timeout=30,
                           env=sim_env(self.base, self.tmp, SIM_HOST=host))
        assert "Traceback" not in r.stderr, r.stderr
        return r.returncode, r.stdout, norm_err(r.stderr)

    def diffs(self, nodes, arglist, more=None):
        bad = []
        for host in nodes:
            for a in arglist if host in nodes[:2] else (more or arglist):
                args = a.split()
                mine, ref = self.ours(args, host or None), self.real(args, host or None)
                if mine != ref:
                    bad.append(f"SIM_HOST={host!r} ibstat {a}:\n  ours {mine!r}\n  real {ref!r}")
        return bad

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _need_tools():
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")


@pytest.fixture(scope="module")
def ft_net(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ibstat")
    net = tmp / "ft.net"
    subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves", "4",
                    "--spines", "2", "--hosts-per-leaf", "4", "--radix", "8", "-o", str(net)],
                   check=True, env=sim_env("unused", tmp), capture_output=True)
    return net


@pytest.mark.parametrize("server", ["softrdma", "ibsim"])
def test_same_as_real_ibstat_before_and_after_the_sm(tmp_path, ft_net, server):
    _need_tools()
    fab = Fabric(tmp_path, server, ft_net)
    try:
        # every flag on the default node and a switch, the usual views elsewhere
        bad = fab.diffs(["", "leaf001", "host0001", "host0016", "spine002", "nosuch"], ARGS, SHORT)
        assert not bad, "before the SM:\n" + "\n".join(bad)
        rc, out, _ = fab.ours(["ibsim0", "1"], "host0016")
        assert rc == 0 and "Base lid: 0" in out and "Port GUID: 0x0002c904000000f1" in out
        # the command line, in its own process
        assert fab.ours_cli(["-s"], "leaf001") == fab.real(["-s"], "leaf001")
        fab.sweep()
        bad = fab.diffs(NODES[:5], SHORT)
        assert not bad, "after the SM:\n" + "\n".join(bad)
        rc, out, _ = fab.ours(["ibsim0", "1"], "host0016")
        assert rc == 0 and "State: Active" in out and "Base lid: 22" in out
        assert fab.ours_cli([], "host0016") == fab.real([], "host0016")
    finally:
        fab.close()


@pytest.mark.parametrize("server", ["softrdma", "ibsim"])
def test_rate_of_every_speed_and_width(tmp_path, server):
    _need_tools()
    net = tmp_path / "rates.net"
    net.write_text(RATES_NET)
    fab = Fabric(tmp_path, server, net)
    try:
        bad = fab.diffs(["sw1", "h1", "h2", "h3", "h4", "h5", "h6", "h7"], [""])
        assert not bad, "\n".join(bad)
        rates = {h: re.search(r"Rate: (\S+)", fab.ours([], h)[1]).group(1) for h in ("h1", "h4", "h5")}
        assert rates == {"h1": "2.5", "h4": "168", "h5": "208"}, rates
    finally:
        fab.close()


def test_no_fabric_server_is_an_ibpanic(tmp_path):
    """The real one waits for ibsim forever; softrdma's says so and exits 255."""
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibstat"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=30, env=sim_env(unique_base("st"), tmp_path))
    assert r.returncode == 255 and r.stdout == ""
    assert re.fullmatch(r"ibpanic: \[\d+\] sim_attach: can't connect to sim socket st\d+n\d+:ctl: "
                        r"Connection refused\n", r.stderr), r.stderr


def test_only_the_umad2sim_environment_selects_the_ib_port():
    """Without IBSIM_SOCKNAME/IBSIM_SERVER_NAME ibstat stays softrdma's RoCE
    ibstat (tests/test_tool_devinfo.py); the fake sysfs values, unit by unit."""
    from softrdma.tools.ibdiag import simca
    assert not simca.env_selects_ibsim({})
    assert not simca.env_selects_ibsim({"SIM_HOST": "h1", "IBSIM_SOCKNAME": ""})
    assert simca.env_selects_ibsim({"IBSIM_SOCKNAME": "x"})
    assert simca.env_selects_ibsim({"IBSIM_SERVER_NAME": "127.0.0.1"})
    pi = {"CapMask": 0x4000, "LinkSpeedExtActive": 0, "LinkWidthActive": 2, "LinkSpeedActive": 1}
    assert simca.rate_text(pi) == "10 Gb/sec (4X)"
    assert simca.rate_text(dict(pi, LinkWidthActive=1)) == "2.5 Gb/sec (1X)"
    assert simca.rate_text(dict(pi, LinkWidthActive=16)) == "0 Gb/sec (0X)"
    assert simca.rate_text(dict(pi, LinkSpeedExtActive=1, LinkWidthActive=8)) == "168 Gb/sec (12X FDR)"
    assert simca.rate_text(dict(pi, CapMask=0, LinkSpeedExtActive=2)) == "10 Gb/sec (4X)"
    ni = {"NodeType": 1, "Guid": 0x10, "SystemGuid": 0x20}
    ca = simca.ca_from((0x2c9, 0, 0xa1, 1), ni, dict(pi, LocalPort=1, LinkState=4, PhysLinkState=5,
                                                        Lid=3, LMC=0, SMLid=1))
    assert (ca["ca_name"], ca["hw_ver"], ca["fw_ver"], ca["numports"]) == ("ibsim0", "a1", "1", 1)
    assert ca["ports"][1]["port_guid"] == 0x11 and ca["ports"][1]["rate"] == 10
