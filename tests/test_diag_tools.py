"""softrdma's infiniband-diags (softrdma.tools.ibdiag) against the real ones.

A small fat tree (4 leaves, 2 spines, 16 hosts) served by `softrdma fabric
serve`, swept once by the real `opensm -o`; then every case runs softrdma's
tool and the real one (through Debian's libumad2sim.so) back to back and
the two must print the same stdout, the same stderr and exit the same.
What may differ, and is normalised:

* ibnetdiscover's "# Topology file: generated on <ctime>" line (the clock);
* stderr: umad2sim's own "sim_connect: attached as client" line (softrdma
  needs no preload), and the pid in "ibwarn: [pid]".

Counters that the tools' own MADs change are avoided (perfquery reads
ports no MAD crosses).  ibnetdiscover, iblinkinfo, ibroute, ibtracert and
smpquery also run against the real ibsim.  Needs opensm, ibsim-utils and
infiniband-diags: skipped when missing, except in CI (CI=true).
"""

import re
import shutil
import subprocess
import sys
import time

import pytest

from sm_helpers import (SIMSO, have_ibsim, need_ibsim, norm_err, sim_cwd, sim_env, softrdma_many, start_fabric,
                        unique_base)

pytestmark = need_ibsim()

DIAGS = ("ibnetdiscover", "iblinkinfo", "ibroute", "ibtracert", "smpquery", "perfquery",
         "sminfo", "ibqueryerrors", "ibhosts", "ibswitches", "ibnodes")





def _norm_out(text):
    return re.sub(r"^# Topology file: generated on .*$", "# Topology file: generated on -",
                  text, flags=re.M)


class Fabric:
    def __init__(self, tmp, server):
        self.tmp = tmp
        self.base = unique_base("dg")
        net = tmp / "ft.net"
        if not net.exists():
            subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves", "4",
                            "--spines", "2", "--hosts-per-leaf", "4", "--radix", "8", "-o", str(net)],
                           check=True, env=sim_env(self.base, tmp), capture_output=True)
        self.proc = start_fabric(server, net, self.base, tmp)
        r = self.real("opensm", "-o", "-f", str(tmp / "osm.log"), timeout=60)
        assert "SUBNET UP" in (tmp / "osm.log").read_text(), r

    def real(self, *cmd, timeout=60):
        r = subprocess.run(list(cmd), cwd=sim_cwd() or self.tmp, env=sim_env(self.base, self.tmp, LD_PRELOAD=SIMSO),
                           capture_output=True, text=True, timeout=timeout)
        return r.returncode, _norm_out(r.stdout), norm_err(r.stderr)

    def ours(self, *cmd, timeout=60):
        r = subprocess.run([sys.executable, "-m", "softrdma", *cmd], cwd=self.tmp,
                           env=sim_env(self.base, self.tmp), capture_output=True, text=True,
                           timeout=timeout)
        assert "Traceback" not in r.stderr, r.stderr
        return r.returncode, _norm_out(r.stdout), norm_err(r.stderr)

    def ours_many(self, cmds):
        """``ours`` for each of ``cmds`` (argument lists), all in one Python process."""
        return [(rc, _norm_out(out), norm_err(err))
                for rc, out, err in softrdma_many(cmds, self.tmp, sim_env(self.base, self.tmp))]

    def same(self, *cmd):
        mine = self.ours(*cmd)
        ref = self.real(*cmd)
        assert mine == ref, f"{' '.join(cmd)}:\nours {mine}\nreal {ref}"
        return mine

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def fab(tmp_path_factory):
    if not have_ibsim() or any(shutil.which(t) is None for t in DIAGS):
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")
    f = Fabric(tmp_path_factory.mktemp("diag"), "softrdma")
    yield f
    alive = f.proc.poll() is None
    f.close()
    assert alive, "the fabric server died"


# LIDs after opensm's sweep of this tree: host0001 1, leaf001..leaf004 2..5,
# spine001/002 6/7, host0002..host0016 8..22
SAME = [
    # discovery and its lists
    "ibnetdiscover", "ibnetdiscover -l", "ibnetdiscover -H", "ibnetdiscover -S",
    "ibnetdiscover -R", "ibnetdiscover -p", "ibnetdiscover -f", "ibnetdiscover -g",
    "ibhosts", "ibswitches", "ibnodes",
    "iblinkinfo", "iblinkinfo -l", "iblinkinfo -p", "iblinkinfo -d", "iblinkinfo --switches-only",
    "iblinkinfo --cas-only", "iblinkinfo -S 0x0002c90300100000",
    # forwarding tables and paths
    "ibroute 2", "ibroute 7", "ibroute -a 3", "ibroute -n 5", "ibroute 4 3 12", "ibroute -M 2",
    "ibroute -D 0,1", "ibroute 1", "ibroute x",
    "ibtracert 1 22", "ibtracert 1 7", "ibtracert 12 7", "ibtracert 7 12", "ibtracert -n 1 22",
    "ibtracert 22 22", "ibtracert 5 3",
    # attributes
    "smpquery nodeinfo 2", "smpquery NI 1", "smpquery nodedesc 6", "smpquery portinfo 2 5",
    "smpquery pi 1", "smpquery -x portinfo 3 1", "smpquery -K portinfo 1", "smpquery switchinfo 2",
    "smpquery pkeys 2", "smpquery pkeys 2 3", "smpquery pkeys 1", "smpquery sl2vl 2",
    "smpquery sl2vl 1", "smpquery vlarb 2 1", "smpquery vlarb 2", "smpquery gi 1",
    "smpquery -D nodeinfo 0,1", "smpquery -D nodedesc 0,1,5", "smpquery -D portinfo 0",
    "smpquery -c nodeinfo 2 0,5", "smpquery pie 1", "smpquery switchinfo 1",
    "smpquery -G nodedesc 0x0002c90400000011",
    # counters (ports that no MAD of these tools crosses)
    "perfquery 2 4", "perfquery -x 2 4", "perfquery 5 3", "perfquery -x 5 3", "perfquery -a 2 2,4",
    "perfquery -l 2 3-4", "perfquery -X 2 4",
    # the SM and the errors (no resident SM: SMInfo and the SA go unanswered)
    "sminfo", "sminfo 2", "ibqueryerrors", "ibqueryerrors --skip-sl", "ibqueryerrors --skip-sl -c",
    "ibqueryerrors --skip-sl --ca -r",
    # bad arguments and errors: the real usage, messages and exit codes
    "ibnetdiscover -h", "ibnetdiscover --bogus", "iblinkinfo -h", "ibroute", "ibroute -q 2",
    "ibroute -h", "ibtracert 1", "ibtracert -h", "ibtracert 1 99", "smpquery", "smpquery foo 1",
    "smpquery nodeinfo 99", "perfquery -h", "perfquery 99 1", "sminfo -h", "ibqueryerrors -h",
    "ibhosts -h", "ibhosts -x", "smpquery -V", "ibroute -t x 2", "iblinkinfo -D bad",
    "smpquery -D ni 0,1,x", "perfquery 2 5-3",
]


@pytest.mark.slow                   # every diag tool, ours and the real one
def test_same_output_as_infiniband_diags(fab):
    # softrdma's tools in one process per run of cases; a case that reads counters
    # (perfquery, ibqueryerrors) runs once every case before it ran, ours and the real one,
    # and right before the real one, as each case did when it ran alone
    bad, run = [], []
    for i, case in enumerate(SAME):
        run.append(case)
        if i + 1 < len(SAME) and not SAME[i + 1].startswith(("perfquery", "ibqueryerrors")) and \
                not case.startswith(("perfquery", "ibqueryerrors")):
            continue
        ours = fab.ours_many([c.split() for c in run])
        assert len(ours) == len(run)
        for c, mine in zip(run, ours):
            ref = fab.real(*c.split())
            if mine != ref:
                bad.append(f"{c}:\n  ours {mine!r}\n  real {ref!r}")
        run = []
    assert not bad, "\n".join(bad)


def test_perfquery_reset(fab):
    rc, out, _ = fab.ours("perfquery", "-r", "3", "2")
    assert rc == 0 and "# Port counters: Lid 3 port 2" in out
    rc, out, _ = fab.ours("perfquery", "3", "2")
    assert re.search(r"^PortXmitPkts:\.+0$", out, re.M) and re.search(r"^PortRcvData:\.+0$", out, re.M)
    fab.same("perfquery", "3", "2")
    fab.same("perfquery", "-x", "3", "2")


def test_ibnetdiscover_to_a_file(fab):
    rc, out, _ = fab.ours("ibnetdiscover", str(fab.tmp / "topo.out"))
    assert rc == 0 and out == ""
    text = (fab.tmp / "topo.out").read_text()
    assert _norm_out(text) == fab.real("ibnetdiscover")[1]
    # ibhosts & co. read a topology file too
    fab.same("ibhosts", str(fab.tmp / "topo.out"))
    fab.same("ibswitches", str(fab.tmp / "topo.out"))


def test_with_a_resident_sm(fab):
    """SMInfo answered by the real opensm, GUIDs resolved through its SA, and
    ibqueryerrors' PathRecord table (last in the module: the SM stays up)."""
    log = fab.tmp / "resident.log"
    sm = subprocess.Popen(["opensm", "-d2", "-f", str(log)], cwd=sim_cwd() or fab.tmp,
                          env=sim_env(fab.base, fab.tmp, LD_PRELOAD=SIMSO), stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 60
        while "SUBNET UP" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < end and sm.poll() is None, "no SUBNET UP"
            time.sleep(0.1)
        act = re.compile(r"activity count \d+")
        for case in ("sminfo", "sminfo 1", "sminfo -G 0x0002c90400000001"):
            mine, ref = fab.ours(*case.split()), fab.real(*case.split())
            assert mine[0] == ref[0] == 0 and "SMINFO_MASTER" in mine[1], (mine, ref)
            assert act.sub("activity count N", mine[1]) == act.sub("activity count N", ref[1])
        for case in ("ibroute -G 0x0002c90300100000", "smpquery -G nodedesc 0x0002c90400000011",
                     "ibtracert -G 0x0002c90400000001 0x0002c904000000f1", "ibqueryerrors",
                     "iblinkinfo -S 0x0002c90300200004"):
            fab.same(*case.split())
    finally:
        sm.terminate()
        sm.wait(10)


def test_no_fabric_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibnetdiscover"], cwd=tmp_path,
                       env=sim_env(unique_base("dg"), tmp_path), capture_output=True, text=True, timeout=30)
    assert r.returncode == 255
    assert "cannot reach the ibsim server" in r.stderr and "Traceback" not in r.stderr


def test_against_real_ibsim(tmp_path):
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")
    f = Fabric(tmp_path, "ibsim")
    try:
        for case in ("ibnetdiscover", "ibnetdiscover -p", "iblinkinfo", "ibswitches", "ibroute 2",
                     "ibroute 6", "ibtracert 1 22", "smpquery nodeinfo 5", "smpquery portinfo 5 7",
                     "smpquery -D switchinfo 0,1", "perfquery 4 2", "ibroute 99"):
            f.same(*case.split())
    finally:
        f.close()
