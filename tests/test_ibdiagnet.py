"""`softrdma ibdiagnet` against a small fat tree (2 leaves, 1 spine, 4 hosts)
served by `softrdma fabric serve` (and the clean run also by the real
ibsim), swept by a resident `softrdma opensm -s 0` (no light sweeps, so
what a test changes behind the SM's back stays changed).

A clean fabric: every stage without errors, exit 0, all seven report files.
Faults, each made with SMPs from the test (as an SM would) or the fabric's
console, must be caught: a link's width lowered (LinkWidthEnabled 1x) and
-lw/-ls expectations, a duplicated LID (PortInfo Set), a broken LFT entry
(LinearForwardingTable Set: a routing loop and a credit loop with -r, an
unreachable LID), a link that went down and up (LinkDownedCounter above the
threshold; -P raises it, -pc clears it; without an SM it stays INIT, a Links
Check warning), a leaf-spine link down (unreachable routes with -r), a
duplicated port GUID from an edited topology file.  Bad arguments give one
`-E-` line and exit 2.  Needs ibsim-utils' ibsim for the real-ibsim case only.
"""

import re
import shutil
import subprocess
import sys
import time

import pytest

from sm_helpers import sim_env, start_fabric, unique_base
from softrdma.wire import smp
from wait_helpers import stop

NET = ["ft2", "--leaves", "2", "--spines", "1", "--hosts-per-leaf", "2", "--radix", "4"]


class Fab:
    def __init__(self, tmp, server="softrdma", topo=None):
        self.tmp = tmp
        self.base = unique_base("ibdn")
        self.env = sim_env(self.base, tmp)
        net = tmp / "ft.net"
        if topo is None:
            subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", *NET, "-o", str(net)],
                           check=True, env=self.env, capture_output=True)
        else:
            net.write_text(topo)
        self.server = start_fabric(server, net, self.base, tmp)
        self.sm = None
        try:
            self.log = tmp / "osm.log"
            self.sm = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-s", "0",
                                        "-f", str(self.log)], cwd=tmp, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.wait_up(1)
        except BaseException:
            self.close()
            raise

    def wait_up(self, count):
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.log.exists() and self.log.read_text(errors="replace").count("SUBNET UP") >= count:
                return
            assert self.sm.poll() is None, "the SM exited"
            time.sleep(0.05)
        raise AssertionError("no SUBNET UP")

    def run(self, *args, out="out"):
        r = subprocess.run([sys.executable, "-m", "softrdma", "ibdiagnet", "-o", str(self.tmp / out),
                            *args], cwd=self.tmp, env=self.env, capture_output=True, text=True,
                           timeout=60)
        return r

    def close(self):
        for p in (self.sm, self.server):
            stop(p)

    # --- faults, made as an SM makes changes: SMPs by directed route -------------------
    def mad(self):
        import os
        old = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            from softrdma.tools.ibdiag.rpc import MadPort
            return MadPort()
        finally:
            os.environ.clear()
            os.environ.update(old)

    def node(self, desc):
        from softrdma.tools.ibdiag.discover import discover
        with self.mad() as m:
            f = discover(m)
        return next(n for n in f.nodes if n.nodedesc == desc)

    def set_portinfo(self, desc, portnum, **fields):
        n = self.node(desc)
        with self.mad() as m:
            data = bytearray(m.smp_query(n.path, smp.SmpAttr.PORT_INFO, portnum))
            smp.PORT_INFO.set(data, "LinkState", 0)
            smp.PORT_INFO.set(data, "PhysLinkState", 0)
            for k, v in fields.items():
                smp.PORT_INFO.set(data, k, v)
            assert m.smp_query(n.path, smp.SmpAttr.PORT_INFO, portnum, bytes(data), 0x02) is not None

    def set_lft(self, desc, lid, port):
        n = self.node(desc)
        blk = lid // 64
        with self.mad() as m:
            data = bytearray(m.smp_query(n.path, smp.SmpAttr.LINEAR_FWD_TABLE, blk))
            data[lid % 64] = port
            assert m.smp_query(n.path, smp.SmpAttr.LINEAR_FWD_TABLE, blk, bytes(data), 0x02) is not None

    def lid(self, desc):
        return self.node(desc).ports[1].base_lid


@pytest.fixture
def fab(tmp_path):
    f = Fab(tmp_path)
    yield f
    f.close()


def summary(out):
    """{stage: (warnings, errors)} from the Summary table."""
    body = out.split("\nSummary\n", 1)[1]
    rows = {}
    for m in re.finditer(r"^-I- (\S.*?)\s{2,}(\d+)\s+(\d+)", body, re.M):
        rows[m.group(1).strip()] = (int(m.group(2)), int(m.group(3)))
    return rows


FILES = ("log", "lst", "db_csv", "fdbs", "mcfdbs", "sm", "pm")


@pytest.mark.parametrize("server", ["softrdma", "ibsim"])
def test_clean_fabric(tmp_path, server):
    if server == "ibsim" and not shutil.which("ibsim"):
        import os
        if os.environ.get("CI") == "true":
            pytest.fail("ibsim missing (CI=true)")
        pytest.skip("ibsim-utils not installed")
    f = Fab(tmp_path, server)
    try:
        r = f.run("-r", "-lw", "4x", "-ls", "25")
    finally:
        f.close()
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr == ""
    assert "-I- Discovering ... 7 nodes (3 Switches & 4 CA-s) discovered." in r.stdout
    rows = summary(r.stdout)
    assert list(rows) == ["Discovery", "Lids Check", "Links Check", "Subnet Manager", "Port Counters",
                          "Speed / Width checks", "Routing"]
    assert all(e == 0 for _w, e in rows.values()), r.stdout
    assert "-E-" not in r.stdout
    out = tmp_path / "out"
    for ext in FILES:
        assert (out / f"ibdiagnet2.{ext}").exists(), ext
    assert (out / "ibdiagnet2.log").read_text() == r.stdout
    lst = (out / "ibdiagnet2.lst").read_text().splitlines()
    assert len(lst) == 8 and all("LOG=ACT" in ln and "PHY=4x" in ln and "SPD=25" in ln for ln in lst)
    db = (out / "ibdiagnet2.db_csv").read_text()
    for sec in ("NODES", "PORTS", "LINKS", "SWITCHES", "PM_INFO"):
        assert f"START_{sec}\n" in db and f"END_{sec}\n" in db
    assert db.split("START_NODES\n")[1].split("END_NODES")[0].count("\n") == 1 + 7
    assert "SM - master" in (out / "ibdiagnet2.sm").read_text()
    fdbs = (out / "ibdiagnet2.fdbs").read_text()
    assert fdbs.count("osm_ucast_mgr_dump_ucast_routes: Switch") == 3
    assert "-I- Checked 12 paths" in r.stdout


def test_width_and_speed_expectations(fab):
    r = fab.run("-lw", "1x", "-ls", "10")
    assert r.returncode == 1
    assert summary(r.stdout)["Speed / Width checks"] == (0, 16)
    assert r.stdout.count("Unexpected width, actual link width is 4x") == 8
    assert r.stdout.count("Unexpected actual link speed 25") == 8
    r = fab.run("-ls", "200")           # XDR: no port runs it
    assert r.returncode == 1 and summary(r.stdout)["Speed / Width checks"][1] == 8
    # one link trained down to 1x: caught against -lw 4x, by that link only
    fab.set_portinfo("host0003", 1, LinkWidthEnabled=1)
    r = fab.run("-lw", "4x")
    assert r.returncode == 1, r.stdout
    errs = [ln for ln in r.stdout.splitlines() if ln.startswith("-E- Link:")]
    guid = fab.node("host0003").guid
    assert len(errs) == 1 and f"N{guid:016x}/P1" in errs[0] and errs[0].endswith("link width is 1x")
    assert "PHY=1x" in (fab.tmp / "out" / "ibdiagnet2.lst").read_text()
    # no expectation given: no error, a warning that both ends could do more
    r = fab.run()
    assert r.returncode == 0, r.stdout
    warn = [ln for ln in r.stdout.splitlines() if "actual link width is 1x, could be" in ln]
    assert len(warn) == 1 and warn[0].startswith("-W- Link:") and f"N{guid:016x}/P1" in warn[0]
    assert summary(r.stdout)["Speed / Width checks"][0] >= 1


def test_duplicate_lid(fab):
    lid3 = fab.lid("host0003")
    fab.set_portinfo("host0004", 1, Lid=lid3)
    r = fab.run()
    assert r.returncode == 1
    assert summary(r.stdout)["Lids Check"][1] == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("-E- Duplicated LID"))
    assert f"0x{lid3:04x}" in line
    for h in ("host0003", "host0004"):
        assert f"N{fab.node(h).guid:016x}/P1" in line


def test_routing_loop_and_credit_loop(fab):
    lid3 = fab.lid("host0003")
    r = fab.run("-r")
    assert r.returncode == 0, r.stdout
    # spine001 sends host0003's LID back down to leaf001, which sends it up again
    leaf1 = fab.node("leaf001")
    spine_port = next(p.remoteport.portnum for p in leaf1.ports[1:]
                      if p and p.remoteport and p.remoteport.node.nodedesc == "spine001")
    fab.set_lft("spine001", lid3, spine_port)
    r = fab.run("-r")
    assert r.returncode == 1
    rows = summary(r.stdout)
    assert rows["Routing"][1] >= 3, r.stdout
    loops = [ln for ln in r.stdout.splitlines() if ln.startswith("-E- loop:")]
    # host0001 and host0002 (leaf001 -> spine001 -> leaf001 ...) to host0003; host0004 shares its leaf
    assert len(loops) == 2 and all(f"lid 0x{lid3:04x}" in ln for ln in loops)
    assert "-E- Credit loop found:" in r.stdout
    # without -r the routing is not looked at
    assert fab.run().returncode == 0
    # an LFT entry pointing nowhere: unreachable
    fab.set_lft("leaf002", fab.lid("host0001"), 0xFF)
    r = fab.run("-r")
    unreach = [ln for ln in r.stdout.splitlines() if ln.startswith("-E- Unreachable:")]
    assert len(unreach) == 2 and all("no LFT entry" in ln for ln in unreach), r.stdout


def test_pm_counters_thresholds_and_reset(fab):
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "link", "down", "leaf002", "1"],
                       env=fab.env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "link", "up", "leaf002", "1"],
                       env=fab.env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    fab.wait_up(2)                      # trap 128: the SM sweeps again
    r = fab.run()
    assert r.returncode == 1, r.stdout
    pm = [ln for ln in r.stdout.splitlines() if "PM counter link_downed_counter" in ln]
    assert pm and all(ln.startswith("-E-") and "exceeds threshold 0" in ln for ln in pm), r.stdout
    assert summary(r.stdout)["Port Counters"][1] == len(pm)
    assert "link_downed_counter=0x1" in (fab.tmp / "out" / "ibdiagnet2.pm").read_text()
    # a threshold above the value: no error
    r = fab.run("-P", "link_downed_counter=5")
    assert r.returncode == 0, r.stdout
    # -pc: read (still reported), then reset: the next run is clean
    r = fab.run("-pc")
    assert r.returncode == 1 and "-I- Ports counters reset" in r.stdout
    r = fab.run()
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("args, msg", [
    (["-ls", "3"], "-E- Invalid link speed: 3"),
    (["-ls", "400"], "-E- Invalid link speed: 400"),
    (["-lw", "5x"], "-E- Invalid link width: 5x"),
    (["-lw"], "-E- Option \"-lw\" requires an argument"),
    (["--bogus"], "-E- Unknown option: --bogus"),
    (["-P", "nosuch=1"], "-E- Invalid PM threshold: nosuch=1"),
    (["-P", "port_rcv_errors=x"], "-E- Invalid PM threshold value: port_rcv_errors=x"),
    (["-P", "port_rcv_errors=-1"], "-E- Invalid PM threshold value: port_rcv_errors=-1"),
    (["-p", "0"], "-E- Invalid port number: 0"),
    (["-i", "mlx5_0"], "-E- Device mlx5_0 not found"),
])
def test_bad_arguments(tmp_path, args, msg):
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibdiagnet", "-o", str(tmp_path / "o"), *args],
                       env=sim_env(unique_base("ibdn"), tmp_path), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(msg), r.stderr


def test_no_fabric_and_help(tmp_path):
    env = sim_env(unique_base("ibdn"), tmp_path)      # nobody serves this fabric
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibdiagnet", "-o", str(tmp_path / "o")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith("-E- Cannot reach the fabric")
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibdiagnet", "-h"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("Usage: ibdiagnet") and "-ls" in r.stdout
    r = subprocess.run([sys.executable, "-m", "softrdma", "ibdiagnet", "--version"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("IBDIAGNET ")


# --- duplicated GUIDs: neither fabric server loads a topology with one, so the
# --- checks run on a discovered fabric built here, with a MAD port answering by path


def _fabric_with(ca_guids, dup_behind_port2=None, lids=None):
    """A switch (GUID 0x10, ports 1..n: one CA each) as the discovery leaves it;
    ``dup_behind_port2``: port n+1 is LinkUp without a peer (the discovery
    merged what is behind it)."""
    from softrdma.tools.ibdiag.discover import Fabric, Node, Port
    from softrdma.tools.ibdiag.rpc import PortId

    def pi(**kw):
        return smp.PORT_INFO.decode(smp.PORT_INFO.encode(LinkState=4, PhysLinkState=5, **kw))

    f = Fabric()
    n = len(ca_guids) + (1 if dup_behind_port2 is not None else 0)
    sw = Node(bytes(smp.NODE_INFO.encode(NodeType=2, NumPorts=n, SystemGuid=0x10, Guid=0x10,
                                         PortGuid=0x10)).ljust(64, b"\0"), PortId(0, ()))
    f.nodes.append(sw)
    f.by_guid[0x10] = sw
    sw.ports[0] = Port(sw, 0)
    sw.ports[0].pi, sw.ports[0].base_lid, sw.ports[0].guid = pi(Lid=1), 1, 0x10
    for i, (node_guid, port_guid) in enumerate(ca_guids, 1):
        ca = Node(bytes(smp.NODE_INFO.encode(NodeType=1, NumPorts=1, SystemGuid=node_guid, Guid=node_guid,
                                             PortGuid=port_guid, LocalPort=1)).ljust(64, b"\0"),
                  PortId(0, (i,)))
        f.nodes.append(ca)
        f.by_guid[node_guid] = ca
        p = ca.ports[1] = Port(ca, 1)
        lid = lids[i - 1] if lids else i + 1
        p.pi, p.base_lid, p.guid = pi(Lid=lid), lid, port_guid
        sp = sw.ports[i] = Port(sw, i)
        sp.pi, sp.guid = pi(), 0x10
        p.remoteport, sp.remoteport = sp, p
    if dup_behind_port2 is not None:
        sp = sw.ports[n] = Port(sw, n)
        sp.pi, sp.guid = pi(), 0x10
    return f


class _PathMad:
    """Answers NodeInfo by directed path from ``answers`` (path -> GUID); others are lost."""
    lid = 0

    def __init__(self, answers):
        self.answers = answers

    def smp_request(self, portid, attr, mod=0):
        return portid.path

    def rpc_many(self, reqs, window=16):
        out = []
        for path in reqs:
            g = self.answers.get(path)
            out.append(None if g is None else bytes(64) + bytes(
                smp.NODE_INFO.encode(NodeType=1, NumPorts=1, Guid=g, PortGuid=g + 1)).ljust(64, b"\0"))
        return out


def test_duplicated_guids_and_lids_offline():
    from softrdma.tools.ibdiag.ibdiagnet import probe_unlinked
    from softrdma.tools.ibdiag.ibdiagnet_checks import duplicate_guids, lid_check
    # a second CA with host A's node GUID behind switch port 2: merged by the discovery
    f = _fabric_with([(0x20, 0x21)], dup_behind_port2=True)
    found = probe_unlinked(_PathMad({(2,): 0x20}), f)
    assert found == [("E", "Duplicated node GUID 0x0000000000000020 at DR paths 0,1 and 0,2")]
    found = probe_unlinked(_PathMad({}), f)
    assert found == [("W", "Unresponsive node behind S0000000000000010/N0000000000000010/P2 "
                           "(DR path 0,2)")]
    assert probe_unlinked(_PathMad({}), _fabric_with([(0x20, 0x21)])) == []
    # two nodes, one port GUID
    f = _fabric_with([(0x20, 0x21), (0x30, 0x21)])
    (sev, text), = duplicate_guids(f)
    assert sev == "E" and text.startswith("Duplicated port GUID 0x0000000000000021: ")
    assert "N0000000000000020/P1" in text and "N0000000000000030/P1" in text
    assert duplicate_guids(_fabric_with([(0x20, 0x21), (0x30, 0x31)])) == []
    # LIDs: one held twice, one zero
    (sev, text), = lid_check(_fabric_with([(0x20, 0x21), (0x30, 0x31)], lids=[5, 5]))
    assert sev == "E" and text.startswith("Duplicated LID 0x0005: ")
    (sev, text), = lid_check(_fabric_with([(0x20, 0x21)], lids=[0]))
    assert text == "Zero LID on port S0000000000000020/N0000000000000020/P1"


def test_no_master_sm(fab):
    assert fab.run().returncode == 0
    fab.sm.terminate()
    fab.sm.wait(10)
    r = fab.run()
    assert r.returncode == 1, r.stdout
    assert "-E- Missing master SM in the discovered fabric" in r.stdout
    rows = summary(r.stdout)
    assert rows["Subnet Manager"] == (0, 1)
    assert sum(e for _w, e in rows.values()) == 1
    assert "SM - master" not in (fab.tmp / "out" / "ibdiagnet2.sm").read_text()


def _link(fab, op, node, port):
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "link", op, node, str(port)],
                       env=fab.env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def test_link_down_and_up_without_sm(fab):
    """With no SM to bring it back, a link taken down and up stays in INIT (a
    Links Check warning), and a leaf-spine link that is down breaks the routes
    whose LFT entries still point at it (with -r)."""
    assert fab.run("-r").returncode == 0
    fab.sm.terminate()
    fab.sm.wait(10)
    _link(fab, "down", "host0003", 1)
    _link(fab, "up", "host0003", 1)
    r = fab.run()
    rows = summary(r.stdout)
    assert rows["Links Check"][0] == 1, r.stdout
    guid = fab.node("host0003").guid
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("-W- Link:"))
    assert f"N{guid:016x}/P1" in line and "logical state is INIT" in line, line
    # one of the two leaf001-spine001 links down: the routes through it have no link
    leaf1 = fab.node("leaf001")
    up = [p.portnum for p in leaf1.ports[1:]
          if p and p.remoteport and p.remoteport.node.nodedesc == "spine001"]
    lid3 = fab.lid("host0003")
    with fab.mad() as m:
        lft = m.smp_query(leaf1.path, smp.SmpAttr.LINEAR_FWD_TABLE, lid3 // 64)
    used = lft[lid3 % 64]
    assert used in up
    _link(fab, "down", "leaf001", used)
    r = fab.run("-r")
    assert r.returncode == 1, r.stdout
    far = leaf1.ports[used].remoteport
    ends = (f"LFT port {used} of switch {leaf1.guid:016x} has no link",
            f"LFT port {far.portnum} of switch {far.node.guid:016x} has no link")
    bad = [ln for ln in r.stdout.splitlines() if ln.startswith("-E- Unreachable:")]
    assert bad and all(ln.endswith(ends) for ln in bad), r.stdout
    assert any(ln.endswith(ends[0]) for ln in bad), r.stdout
    assert summary(r.stdout)["Routing"][1] == len(bad)
    assert "-E- Missing master SM" in r.stdout


#: one switch, three CAs; hostB is a 2-port CA whose node GUID is one below
#: hostA's, so its port 2 has hostA's port 1 GUID (a CA's port GUIDs are its
#: node GUID + port number on both servers)
DUP_PORT_GUID = """\
switchguid=0x0002c90300100000
Switch	4 "sw"
[1]	"hostA"[1]
[2]	"hostB"[1]
[3]	"hostB"[2]
[4]	"hostC"[1]

caguid=0x0002c90400000010
Ca	1 "hostA"
[1]	"sw"[1]

caguid=0x0002c9040000000f
Ca	2 "hostB"
[1]	"sw"[2]
[2]	"sw"[3]

caguid=0x0002c90400000020
Ca	1 "hostC"
[1]	"sw"[4]
"""


@pytest.mark.parametrize("server", ["softrdma", "ibsim"])
def test_duplicated_port_guid_from_topology(tmp_path, server):
    if server == "ibsim" and not shutil.which("ibsim"):
        import os
        if os.environ.get("CI") == "true":
            pytest.fail("ibsim missing (CI=true)")
        pytest.skip("ibsim-utils not installed")
    f = Fab(tmp_path, server, topo=DUP_PORT_GUID)
    try:
        r = f.run()
    finally:
        f.close()
    assert r.returncode == 1, r.stdout + r.stderr
    dup = [ln for ln in r.stdout.splitlines() if ln.startswith("-E- Duplicated port GUID")]
    assert len(dup) == 1, r.stdout
    assert dup[0].startswith("-E- Duplicated port GUID 0x0002c90400000011: ")
    assert "N0002c90400000010/P1" in dup[0] and "N0002c9040000000f/P2" in dup[0]
    assert summary(r.stdout)["Discovery"][1] >= 1
