"""End to end: `softrdma fabric serve` driven by the real opensm and
infiniband-diags through Debian's libumad2sim.so, compared with the real
ibsim, fed garbage, and told about link events.

Needs opensm, ibsim-utils and infiniband-diags: skipped when opensm is
missing, except in CI (CI=true), where missing tools are a failure."""

import os
import random
import re
import socket
import struct
import subprocess
import sys
import time

import pytest

from softrdma.wire import ibsim, smp
from softrdma.wire.ibsim import SimCtlType
from sm_helpers import SIMSO, ibnetdiscover_lids, missing_tools, sim_cwd, skip_without_opensm
from wait_helpers import wait_for

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
TOOLS = ("opensm", "ibnetdiscover", "ibstat", "smpquery", "ibroute", "perfquery", "ibtracert",
         "sminfo", "iblinkinfo", "ibportstate", "ibsim")

skip_without_opensm()


@pytest.fixture(scope="module", autouse=True)
def _tools():
    missing = missing_tools(TOOLS)
    if missing:
        pytest.fail(f"missing: {', '.join(missing)} (apt-get install opensm ibsim-utils "
                    f"infiniband-diags)")


_seq = [0]


def _base():
    _seq[0] += 1
    return f"sr{os.getpid()}t{_seq[0]}"


def _env(base, **extra):
    env = dict(os.environ, IBSIM_SOCKNAME=base, PYTHONPATH=SRC)
    env.pop("LD_PRELOAD", None)
    env.update(extra)
    return env


def _wait_bound(name: str, timeout=10.0, proc=None):
    want = f"@{name}".encode()
    t = time.monotonic() + timeout
    while time.monotonic() < t:
        with open("/proc/net/unix", "rb") as f:
            if want in f.read():
                return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    raise AssertionError(f"{name} never bound")


class Fab:
    """A running `softrdma fabric serve` on a small fat tree in tmp."""

    def __init__(self, tmp, net=None, extra=()):
        self.tmp = str(tmp)
        self.base = _base()
        self.net = net or os.path.join(self.tmp, "ft.net")
        if net is None:
            subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves",
                            "4", "--spines", "2", "--hosts-per-leaf", "4", "--radix", "8", "-o",
                            self.net], check=True, env=_env(self.base), capture_output=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "softrdma", "fabric", "serve", self.net, *extra],
            env=_env(self.base), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, cwd=self.tmp)
        if "-r" not in extra:
            _wait_bound(f"{self.base}:ctl", proc=self.proc)
        _wait_bound(f"{self.base}:softrdma", proc=self.proc)

    def tool(self, *cmd, timeout=30, check=True, **extra):
        env = _env(self.base, LD_PRELOAD=SIMSO, OSM_TMP_DIR=self.tmp, OSM_CACHE_DIR=self.tmp,
                   **extra)
        r = subprocess.run(list(cmd), env=env, cwd=sim_cwd() or self.tmp, capture_output=True, text=True,
                           timeout=timeout)
        if check:
            assert r.returncode == 0, f"{cmd}: rc {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def opensm(self, log="osm.log"):
        path = os.path.join(self.tmp, log)
        self.tool("opensm", "-o", "-f", path, timeout=60, check=False)
        with open(path) as f:
            text = f.read()
        assert "SUBNET UP" in text, text[-2000:]
        return text

    def cli(self, *args):
        return subprocess.run([sys.executable, "-m", "softrdma", "fabric", *args, "--sock",
                               self.base], env=_env(self.base), capture_output=True, text=True,
                              timeout=10)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def fab(tmp_path):
    f = Fab(tmp_path)
    yield f
    alive = f.proc.poll() is None
    f.close()
    assert alive, "the fabric server died"


def test_opensm_and_diags(fab):
    log = fab.opensm()
    assert "Entering MASTER state" in log and "ERR" not in log
    disc = fab.tool("ibnetdiscover")
    assert len(re.findall(r"^Switch\s", disc, re.M)) == 6
    assert len(re.findall(r"^Ca\s", disc, re.M)) == 16
    lids = ibnetdiscover_lids(disc)
    hosts = {k: v for k, v in lids.items() if k.startswith("host")}
    assert len(hosts) == 16 and all(hosts.values())
    assert len(set(lids.values())) == 22                     # every node its own LID
    st = fab.tool("ibstat")
    assert "State: Active" in st and "Physical state: LinkUp" in st and "Base lid: " in st
    ni = fab.tool("smpquery", "nodeinfo", str(hosts["host0016"]))
    assert re.search(r"Guid:\.+0x0002c904000000f0", ni)
    assert "Channel Adapter" in ni
    dr = fab.tool("smpquery", "-D", "nodeinfo", "0,1")
    assert "Switch" in dr and re.search(r"LocalPort:\.+1\b", dr)
    leaf = lids["leaf001"]
    rt = fab.tool("ibroute", str(leaf))
    routed = re.findall(r"^0x([0-9a-f]{4}) (\d{3}) :", rt, re.M)
    assert {int(l, 16) for l, _ in routed} == set(lids.values())
    for dst in ("host0006", "host0016", "spine002"):
        tr = fab.tool("ibtracert", str(hosts["host0001"]), str(lids[dst]))
        assert f'"{dst}"' in tr.splitlines()[-1]
    pq = fab.tool("perfquery", str(leaf), "1")
    assert int(re.search(r"PortXmitPkts:\.+(\d+)", pq).group(1)) > 0
    px = fab.tool("perfquery", "-x", str(hosts["host0001"]), "1")
    assert int(re.search(r"PortRcvPkts:\.+(\d+)", px).group(1)) > 0
    # the neighbour query: LID-routed to the leaf, one directed hop (ibsim drops it)
    ps = fab.tool("ibportstate", str(leaf), "5")
    assert "Peer PortInfo" in ps and "DR path slid" in ps
    il = fab.tool("iblinkinfo")
    assert il.count("Active/  LinkUp") >= 32


def test_same_discovery_as_ibsim(fab, tmp_path):
    """ibnetdiscover after `opensm -o` is the same on ibsim and on us."""
    fab.opensm()
    ours = fab.tool("ibnetdiscover")
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    base = _base()
    sim = subprocess.Popen(["ibsim", "-s", fab.net], env=_env(base), stdin=subprocess.PIPE,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ref_dir)
    try:
        _wait_bound(f"{base}:ctl")
        env = _env(base, LD_PRELOAD=SIMSO, OSM_TMP_DIR=str(ref_dir), OSM_CACHE_DIR=str(ref_dir))
        subprocess.run(["opensm", "-o", "-f", str(ref_dir / "osm.log")], env=env, cwd=sim_cwd() or ref_dir,
                       capture_output=True, timeout=60)
        ref = subprocess.run(["ibnetdiscover"], env=env, cwd=sim_cwd() or ref_dir, capture_output=True,
                             text=True, timeout=30).stdout
    finally:
        sim.stdin.close()
        sim.kill()
        sim.wait()
    strip = lambda t: [l for l in t.splitlines() if not l.startswith("# Topology file")]
    assert strip(ours) == strip(ref)


def _fake_client(base, pid, nodeid="", issm=0):
    """A minimal umad2sim: binds ctl<pid>/in<pid>, CONNECTs; returns (ctl, data, index)."""
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ctl.bind(ibsim.abstract_name(base, f"ctl{pid}"))
    ctl.connect(ibsim.abstract_name(base, "ctl"))
    ctl.settimeout(5)
    data = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    data.bind(ibsim.abstract_name(base, f"in{pid}"))
    info = ibsim.build_client_info(pid, 0, issm, nodeid)
    ctl.send(ibsim.build_ctl(SimCtlType.CONNECT, info))
    r = ibsim.parse_ctl(ctl.recv(80))
    assert r.type == SimCtlType.CONNECT
    idx = ibsim.parse_client_info(r.data).id
    data.connect(ibsim.abstract_name(base, f"out{idx}"))
    data.settimeout(5)
    return ctl, data, idx


def test_protocol_and_dead_clients(fab):
    base = fab.base
    ctl, data, idx = _fake_client(base, 4000001, "leaf002")
    # GET_PORTINFO of the switch's port 0, NodeInfo, vendor, pkeys
    ctl.send(ibsim.build_ctl(SimCtlType.GET_NODEINFO, b"", idx))
    ni = smp.NODE_INFO.decode(ibsim.parse_ctl(ctl.recv(80)).data)
    assert ni["NodeType"] == 2 and ni["NumPorts"] == 8
    ctl.send(ibsim.build_ctl(SimCtlType.GET_PKEYS, b"", idx))
    assert ibsim.parse_ctl(ctl.recv(80)).data[:2] == b"\xff\xff"
    ctl.send(ibsim.build_ctl(42, b"", idx))
    assert ibsim.parse_ctl(ctl.recv(80)).type == SimCtlType.ERROR
    # a DR SMP from the switch: NodeInfo of the host on its port 1, via the out socket
    mad = smp.build_dr_smp(1, smp.SmpAttr.NODE_INFO, [1], tid=0x1234)
    data.send(ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad))
    rsp = ibsim.parse_request(data.recv(512))
    assert rsp.status == 0 and rsp.mad[3] == 0x81
    assert ibsim.tid_client(int.from_bytes(rsp.mad[8:16], "big")) == idx
    assert smp.NODE_INFO.decode(rsp.mad, 64)["Guid"] == 0x0002C90400000040
    # a path that goes nowhere comes back with ETIMEDOUT
    data.send(ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, smp.build_dr_smp(1, 0x11, [9])))
    assert ibsim.parse_request(data.recv(512)).status == ibsim.ETIMEDOUT
    # more than ibsim's 10 clients at once
    extra = [_fake_client(base, 4000100 + i) for i in range(12)]
    assert len({e[2] for e in extra}) == 12
    # killed without DISCONNECT: their slots are released
    for c, d, _ in extra:
        c.close()
        d.close()
    # released when the simulator notices the closed sockets: poll, the deadline only bounds a failure
    att = wait_for(lambda: (lambda a: "40001" not in a.replace("4000001", "") and a)(
        fab.cli("cmd", "attached").stdout), what="the dead clients' slots to be released")
    assert "4000001" in att and "40001" not in att.replace("4000001", "")
    ctl.send(ibsim.build_ctl(SimCtlType.DISCONNECT, b"", idx))
    ctl.recv(80)


def test_garbage_never_kills_the_server(fab):
    rng = random.Random(7)
    base = fab.base
    ctl, data, idx = _fake_client(base, 4000200, "host0003")
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    raw.bind(ibsim.abstract_name(base, "ctl4000201"))
    data.setblocking(False)
    raw.setblocking(False)

    def send(sock, blob, *addr):
        # the server's queue holds net.unix.max_dgram_qlen datagrams: wait for it to read
        for _ in range(1000):
            try:
                return sock.sendto(blob, *addr) if addr else sock.send(blob)
            except BlockingIOError:
                time.sleep(0.002)
            try:
                while True:
                    data.recv(512)
            except BlockingIOError:
                pass
        raise AssertionError("server stopped reading")
    for i in range(3000):
        kind = i % 6
        n = rng.choice([0, 1, 3, 16, 79, 80, 81, 200, 287, 288, 289, 600])
        blob = bytes(rng.getrandbits(8) for _ in range(n))
        if kind == 0:       # random ctl datagrams, some with the magic
            if n >= 80 and rng.random() < 0.5:
                t = rng.randrange(12)
                # any client may DISCONNECT any index (as with ibsim): spare ours
                cid = rng.randrange(1000, 2000) if t == SimCtlType.DISCONNECT else rng.randrange(20)
                blob = struct.pack("<IIII", ibsim.SIM_MAGIC, cid, t, rng.randrange(100)) + blob[16:80]
            send(raw, blob, ibsim.abstract_name(base, "ctl"))
        elif kind == 1:     # random bytes on the data socket
            send(data, blob)
        else:               # well-framed requests with random or half-valid MADs
            mad = bytearray(rng.getrandbits(8) for _ in range(256))
            if kind >= 3:
                mad[0], mad[2] = 1, 1
                mad[1] = rng.choice([0x01, 0x81, 0x04, 0x03])
                mad[3] = rng.choice([1, 2, 5, 7, 0x81])
                mad[16:18] = rng.choice([0x10, 0x11, 0x12, 0x14, 0x15, 0x16, 0x17, 0x18,
                                         0x19, 0x1B, 0x20, 0x02, 0x12, 0x1D, 0x01]).to_bytes(2, "big")
                if kind == 4:
                    mad[4:8] = bytes([0, 0, 0, rng.randrange(4)])
                    mad[32:36] = b"\xff\xff\xff\xff"
                    mad[128:132] = bytes([0, 1, rng.randrange(10), rng.randrange(10)])
            send(data, ibsim.build_request(rng.choice([0xFFFF, 0, 1, 5, 0xC001]),
                                          rng.choice([0, 0xFFFF, 3]), rng.randrange(3),
                                          rng.randrange(3), bytes(mad)))
        if i % 50 == 0:     # keep our in-socket from filling up
            try:
                while True:
                    data.recv(512)
            except BlockingIOError:
                pass
    data.close()
    ctl.close()
    raw.close()
    time.sleep(0.5)
    assert fab.proc.poll() is None
    fab.opensm()                       # and the fabric still works
    assert "Switch" in fab.tool("smpquery", "-D", "nodeinfo", "0,1")


def test_link_events_reach_a_resident_opensm(fab):
    log = os.path.join(fab.tmp, "res.log")
    env = _env(fab.base, LD_PRELOAD=SIMSO, OSM_TMP_DIR=fab.tmp, OSM_CACHE_DIR=fab.tmp)
    sm = subprocess.Popen(["opensm", "-d2", "-s", "30", "-f", log], env=env, cwd=sim_cwd() or fab.tmp,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def wait_for(pattern, count, timeout=60):
            t = time.monotonic() + timeout
            while time.monotonic() < t:
                try:
                    with open(log) as f:
                        if len(re.findall(pattern, f.read())) >= count:
                            return
                except FileNotFoundError:
                    pass
                time.sleep(0.1)
            raise AssertionError(f"{pattern!r} x{count} not in {log}")
        wait_for("SUBNET UP", 1)
        assert "SMINFO_MASTER" in fab.tool("sminfo")
        r = fab.cli("link", "down", "leaf002", "1")
        assert r.returncode == 0, r.stderr
        wait_for(r"num:128 \(Link state change\)", 1)
        wait_for("SUBNET UP", 2)
        assert "Down" in fab.tool("smpquery", "-D", "portinfo", "0,1,5,3", "1")
        assert fab.cli("link", "up", "leaf002", "1").returncode == 0
        wait_for("SUBNET UP", 3)
        assert re.search(r"LinkState:\.+Active",
                         fab.tool("smpquery", "-D", "portinfo", "0,1,5,3", "1"))
        bad = fab.cli("link", "down", "nosuchnode", "1")
        assert bad.returncode == 1 and "no node" in bad.stderr
        # SIGKILL: no DISCONNECT; ibsim would keep the SM slot and refuse the next SM
        sm.kill()
        sm.wait(10)
        t = time.monotonic() + 60
        while " SM" in fab.cli("cmd", "attached").stdout and time.monotonic() < t:
            time.sleep(0.2)
        assert " SM" not in fab.cli("cmd", "attached").stdout
        fab.opensm("again.log")
    finally:
        if sm.poll() is None:
            sm.terminate()
            sm.wait(10)


def test_remote_udp_mode(tmp_path):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    f = Fab(tmp_path, extra=("-r", "-l", str(port)))
    try:
        out = f.tool("smpquery", "-D", "nodeinfo", "0,1", IBSIM_SERVER_NAME="127.0.0.1",
                     IBSIM_SERVER_PORT=str(port))
        assert "Switch" in out
    finally:
        f.close()


def test_cli_errors(tmp_path):
    env = _env("x")
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "serve",
                        str(tmp_path / "missing.net")], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "bad.net").write_text('Switch 4 "a"\n[1] "zz"[1]\n')
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "serve",
                        str(tmp_path / "bad.net")], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "bad.net:2" in r.stderr
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "-o",
                        str(tmp_path / "x.net"), "--hosts-per-leaf", "40"], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "error" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "serve", str(tmp_path / "bad.net"),
                        "--spin-us", "-5"], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == \
        "softrdma fabric serve: error: argument --spin-us: -5 is out of range (0-1000000)"


def test_portinfo_sets_as_the_real_ibsim_keeps_them(tmp_path):
    """The same directed-route PortInfo Sets and Gets from a client at leaf001, on the
    real ibsim and on `softrdma fabric serve`, same .net: the same answers, byte for
    byte -- a switch's external port keeps the LID, LMC and SM LID a Set wrote
    (reserved by the IBA, reported by ibsim), port 0 and a CA port as always."""
    net = str(tmp_path / "ft.net")
    subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves", "4", "--spines",
                    "2", "--hosts-per-leaf", "4", "--radix", "8", "-o", net], check=True, env=_env("x"),
                   capture_output=True)

    def run(server):
        base = _base()
        cmd = ["ibsim", "-s", "-n", net] if server == "ibsim" else \
            [sys.executable, "-m", "softrdma", "fabric", "serve", net, "--no-console"]
        proc = subprocess.Popen(cmd, env=_env(base), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, cwd=str(tmp_path))
        try:
            _wait_bound(f"{base}:ctl", proc=proc)
            ctl, data, _ = _fake_client(base, 4100000 + os.getpid() % 1000, "leaf001")
            out = []
            for path, port, values in (([], 3, dict(Lid=77, SMLid=5, LMC=2)),   # an external port
                                       ([], 0, dict(Lid=9, SMLid=5, LMC=0)),    # port 0
                                       ([1], 0, dict(Lid=12, SMLid=5, LMC=1)),  # host0001's port
                                       ([], 3, dict(Lid=0, SMLid=0, LMC=0))):
                cur = None
                for method, payload in ((1, b""), (2, None), (1, b"")):
                    if payload is None:         # a Set of what the Get said, with new values
                        f = smp.PORT_INFO.decode(cur)
                        f.update(values, LinkState=0, PhysLinkState=0)
                        payload = bytes(smp.PORT_INFO.encode(f))
                    mad = smp.build_dr_smp(method, smp.SmpAttr.PORT_INFO, path, port, payload, tid=len(out) + 1)
                    data.send(ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad))
                    rsp = ibsim.parse_request(data.recv(512))
                    assert rsp.status == 0
                    cur = rsp.mad[64:128]
                    out.append((int.from_bytes(rsp.mad[4:6], "big"), bytes(cur)))
            ctl.send(ibsim.build_ctl(SimCtlType.DISCONNECT, b"", _))
            ctl.close()
            data.close()
            return out
        finally:
            proc.terminate()
            proc.wait(10)
            proc.stderr.close()

    theirs, ours = run("ibsim"), run("softrdma")
    for i, (a, b) in enumerate(zip(theirs, ours)):
        assert a == b, f"answer {i}: ibsim {smp.PORT_INFO.decode(a[1])} ours {smp.PORT_INFO.decode(b[1])}"
    assert smp.PORT_INFO.decode(ours[2][1])["Lid"] == 77 and smp.PORT_INFO.decode(ours[2][1])["LMC"] == 2
