"""Helpers of the SM tests: the opensm fixtures, and a Subnet straight from a .net file.

``load_net`` parses with softrdma.fabric.topo (the fabric's .net parser, GUIDs
as ibsim assigns them) and builds the ``softrdma.sm.subnet.Subnet`` that
discovery would find, for the pure routing tests.
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import subprocess
import sys
import time

from softrdma.sm.subnet import NODE_CA, NODE_SWITCH, Node, Subnet
from wait_helpers import stop

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "opensm")
SIMSO = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
_sim_cwd: list[str] = []


def sim_cwd() -> str | None:
    """The working directory for a process umad2sim is preloaded into.  umad2sim
    builds a fake sysfs in ``./sys-<pid>`` at every start and deletes it at exit:
    on ext4 those few dozen creates and unlinks cost a real tool ~50 ms of system
    time, on a tmpfs ~2 ms.  One directory on /dev/shm for this test process
    (removed when it exits); None (the caller's own) where there is no /dev/shm."""
    if not _sim_cwd:
        import atexit
        import tempfile
        try:
            path = tempfile.mkdtemp(prefix=f"softrdma-umad2sim-{os.getpid()}-", dir="/dev/shm")
        except OSError:
            path = None
        else:
            atexit.register(shutil.rmtree, path, True)
        _sim_cwd.append(path)
    return _sim_cwd[0]


def fixture(name: str) -> str:
    path = os.path.join(DATA, name)
    if path.endswith(".xz"):
        return lzma.decompress(open(path, "rb").read()).decode()
    return open(path).read()


def roots(topo: str) -> set[int]:
    return {int(x, 16) for x in fixture(topo + ".roots").split()}


def subnet_from_fabric(fabric, sm_node: str | None = None) -> Subnet:
    """The Subnet discovery would build on ``fabric`` (softrdma.fabric's model), SM on ``sm_node``
    (default: the first record, where ibsim attaches clients)."""
    subnet = Subnet()
    mine = {}
    for fn in fabric.nodes:
        n = subnet.add_node(Node(fn.guid, NODE_SWITCH if fn.is_switch else NODE_CA, fn.nports,
                                 fn.desc, sys_guid=fn.sysguid))
        mine[fn] = n
        for fp in fn.ports:
            if fp is not None:
                subnet.add_port(n, fp.num, fp.guid)
    for fn in fabric.nodes:
        for fp in fn.ports:
            if fp is not None and fp.remote is not None:
                subnet.link(mine[fn].ports[fp.num], mine[fp.remote.node].ports[fp.remote.num])
    sm = mine[fabric.node(sm_node)] if sm_node else mine[fabric.nodes[0]]
    subnet.sm_node = sm
    subnet.sm_port_guid = sm.guid if sm.is_switch else sm.ports[1].guid
    return subnet


def load_net(text: str, sm_node: str | None = None) -> Subnet:
    from softrdma.fabric import topo
    return subnet_from_fabric(topo.loads(text), sm_node)


def have_ibsim() -> bool:
    return all(shutil.which(t) for t in ("ibsim", "opensm", "ibroute", "ibnetdiscover")) \
        and os.path.exists(SIMSO)


def missing_tools(tools) -> list[str]:
    """Which of ``tools`` (commands) and umad2sim are not installed."""
    return [t for t in tools if shutil.which(t) is None] + ([SIMSO] if not os.path.exists(SIMSO) else [])


def skip_without_opensm() -> None:
    """At a test module's top: outside CI, no opensm skips the module (under
    CI=true the tools are installed, and ``missing_tools`` fails a test)."""
    import pytest
    if os.environ.get("CI") != "true" and shutil.which("opensm") is None:
        pytest.skip("opensm not installed (apt-get install opensm ibsim-utils infiniband-diags)",
                    allow_module_level=True)


def need_ibsim():
    """pytest skip marker: skip only outside CI when the Debian packages are missing."""
    import pytest
    missing = not have_ibsim()
    return pytest.mark.skipif(missing and os.environ.get("CI") != "true",
                              reason="opensm/ibsim-utils/infiniband-diags not installed")


SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
_seq = [0]


def unique_base(prefix: str) -> str:
    """An IBSIM_SOCKNAME of its own for one fabric of this test process."""
    _seq[0] += 1
    return f"{prefix}{os.getpid()}n{_seq[0]}"


def sim_env(base: str, tmp, **extra) -> dict:
    """The environment of a fabric client: this fabric, opensm's dirs in ``tmp``, none of
    the caller's umad2sim settings; ``extra`` on top (None: left out)."""
    env = dict(os.environ, IBSIM_SOCKNAME=base, PYTHONPATH=SRC, OSM_CACHE_DIR=str(tmp), OSM_TMP_DIR=str(tmp))
    for k in ("LD_PRELOAD", "SIM_HOST", "SIM_SET_ISSM", "IBSIM_SERVER_NAME", "IBSIM_SERVER_PORT"):
        env.pop(k, None)
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def start_fabric(server: str, net, base: str, tmp, log=None, timeout: float = 10.0):
    """The real ``ibsim`` or ``softrdma fabric serve`` (no console) on ``net`` as fabric
    ``base``, once its ``@<base>:ctl`` socket is bound; output to ``log`` or nowhere."""
    cmd = ["ibsim", "-s", "-n", str(net)] if server == "ibsim" else \
        [sys.executable, "-m", "softrdma", "fabric", "serve", "--no-console", str(net)]
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=tmp, env=sim_env(base, tmp), stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
    want = f"@{base}:ctl".encode()          # shown as @<base>:ctl@ (the name ends in a NUL)
    end = time.monotonic() + timeout
    while True:
        with open("/proc/net/unix", "rb") as f:
            if want in f.read():
                return proc
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"the fabric server exited or bound nothing: {want!r}")
        time.sleep(0.05)


_RUN_MANY = """
import io, json, sys
from softrdma.cli import main
results = []
real_out, real_err = sys.stdout, sys.stderr
for argv in json.load(sys.stdin):
    sys.stdout, sys.stderr = out, err = io.StringIO(), io.StringIO()
    sys.argv = ["softrdma", *argv]
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    finally:
        sys.stdout, sys.stderr = real_out, real_err
    results.append((rc or 0, out.getvalue(), err.getvalue()))
json.dump(results, sys.stdout)
"""


def softrdma_many(cmds, cwd, env, timeout: float = 300) -> list:
    """``softrdma ARGS`` for each argument list of ``cmds``, all in one Python process (a new
    interpreter per case would be most of a comparison's time): each through softrdma's
    command line (``softrdma.cli.main``) with a stdout, stderr and exit code of its own;
    [(exit code, stdout, stderr)], none of them with a traceback."""
    import json
    r = subprocess.run([sys.executable, "-c", _RUN_MANY], input=json.dumps([list(c) for c in cmds]), cwd=cwd,
                       env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    out = [tuple(x) for x in json.loads(r.stdout)]
    assert len(out) == len(cmds) and not any("Traceback" in err for _, _, err in out), out
    return out


def norm_err(text: str) -> str:
    """A real tool's stderr without umad2sim's "attached" line and with pids masked."""
    lines = [ln for ln in text.splitlines(True) if "sim_connect: attached as client" not in ln]
    return re.sub(r"\[\d+\]", "[PID]", "".join(lines))


class IbsimFabric:
    """A fabric server on ft2_64 -- the real ibsim (its console on a pipe) or
    ``softrdma fabric serve`` -- and the SMs and diags started on it."""

    def __init__(self, tmp, server: str = "ibsim"):
        if not have_ibsim():
            import pytest
            pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")
        self.tmp = tmp
        self.base = unique_base("smr")
        (tmp / "ft.net").write_text(fixture("ft2_64.net.xz"))
        (tmp / "poll.conf").write_text("sminfo_polling_timeout 300\n\npolling_retry_number 1\n")
        self.procs = []
        cmd = ["ibsim", "-s", str(tmp / "ft.net")] if server == "ibsim" else \
            [sys.executable, "-m", "softrdma", "fabric", "serve", str(tmp / "ft.net")]
        self.sim = self._start(cmd, "ibsim.log", stdin=subprocess.PIPE)
        end = time.monotonic() + 60
        while f"@{self.base}:ctl".encode() not in open("/proc/net/unix", "rb").read():
            assert time.monotonic() < end, "ibsim did not start"
            time.sleep(0.05)

    def env(self, **extra):
        env = dict(os.environ, IBSIM_SOCKNAME=self.base, PYTHONPATH=SRC)
        for k in ("LD_PRELOAD", "SIM_HOST", "OSM_CACHE_DIR", "OSM_TMP_DIR"):
            env.pop(k, None)
        env.update(extra)
        return env

    def _start(self, cmd, out, stdin=subprocess.DEVNULL, **env):
        cwd = (sim_cwd() or self.tmp) if "LD_PRELOAD" in env else self.tmp
        p = subprocess.Popen(cmd, cwd=cwd, env=self.env(**env), stdin=stdin,
                             stdout=open(self.tmp / out, "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def our_sm(self, name, node=None, *args):
        d = self.tmp / name
        d.mkdir()
        extra = {"SIM_HOST": node} if node else {}
        p = self._start([sys.executable, "-m", "softrdma", "opensm", "-F", str(self.tmp / "poll.conf"),
                         "-f", str(d / "osm.log"), *args], f"{name}.out",
                        OSM_CACHE_DIR=str(d), OSM_TMP_DIR=str(d), **extra)
        p.log = d / "osm.log"
        return p

    def real_sm(self, name, node, *args):
        d = self.tmp / name
        d.mkdir()
        p = self._start(["opensm", "-d2", "-f", str(d / "osm.log"), *args], f"{name}.out",
                        OSM_CACHE_DIR=str(d), OSM_TMP_DIR=str(d), SIM_HOST=node, LD_PRELOAD=SIMSO)
        p.log = d / "osm.log"
        return p

    def console(self, line):
        self.sim.stdin.write(line.encode() + b"\n")
        self.sim.stdin.flush()

    def diag(self, *cmd, node="host0002"):
        r = subprocess.run(list(cmd), cwd=sim_cwd() or self.tmp, env=self.env(LD_PRELOAD=SIMSO, SIM_HOST=node),
                           capture_output=True, text=True, timeout=30)
        return r.stdout

    def close(self):
        for p in reversed(self.procs):
            stop(p)


def wait_log(proc, pattern, timeout=15.0, count=1):
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        try:
            text = proc.log.read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        if len(re.findall(pattern, text)) >= count:
            return text
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} (x{count}) in {proc.log}:\n{text[-3000:]}")


def ibnetdiscover_lids(disc: str) -> dict:
    """nodeid (NodeDescription) -> LID from ibnetdiscover's output."""
    out = {}
    for m in re.finditer(r'^(Switch|Ca)\s+\d+\s+"[^"]+"\s+# "([^"]+)"(.*)$', disc, re.M):
        lm = re.search(r"lid (\d+)", m.group(3))
        if lm:
            out[m.group(2)] = int(lm.group(1))
    for m in re.finditer(r'^\[\d+\].*# "([^"]+)" lid (\d+)', disc, re.M):
        out.setdefault(m.group(1), int(m.group(2)))
    return out


def every_port(fab: IbsimFabric, *query: str, node: str = "host0002") -> str:
    """The real ``smpquery <query> <lid> <port>`` of every port of ft2_64 (CA ports, every switch
    port and port 0), after an SM swept the fabric: one text, each answer under its port's name."""
    from softrdma.fabric import topo
    lids = ibnetdiscover_lids(fab.diag("ibnetdiscover", node=node))
    out = []
    for n in topo.loads(fixture("ft2_64.net.xz")).nodes:
        for num in (range(n.nports + 1) if n.is_switch else [1]):
            out.append(f"== {n.desc} port {num}\n" +
                       fab.diag("smpquery", *query, str(lids[n.desc]), str(num), node=node))
    return "".join(out)


def saquery_transcript(tmp_path, which: str, sm_args, files: dict, queries, ready) -> str:
    """A resident SM on host0001 of a fresh ft2_64 -- the real opensm (``which`` "real") or
    softrdma's -- given ``sm_args`` ("{tmp}" in them: ``tmp_path``) and ``files`` (name -> text,
    written in ``tmp_path`` first); then the real saquery's answers to ``queries(lids)`` (a list of
    (node, args); lids: node description -> LID as a string), asked once ``ready`` ((args, text):
    the answer to args holds text) says the SA is up: one transcript."""
    tmp_path.mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    fab = IbsimFabric(tmp_path)
    try:
        args = ["sm", "host0001", *(a.replace("{tmp}", str(tmp_path)) for a in sm_args)]
        sm = fab.our_sm(*args) if which == "ours" else fab.real_sm(*args)
        wait_log(sm, "SUBNET UP")
        lids = {k: str(v) for k, v in ibnetdiscover_lids(fab.diag("ibnetdiscover")).items()}
        (probe, text) = ready
        end = time.monotonic() + 30
        while text not in fab.diag("saquery", *(a.format(**lids) for a in probe)):  # the SA may lag its log
            assert time.monotonic() < end, f"{which} SM: no {text!r} from saquery {probe}"
            time.sleep(0.2)
        return "".join(f"$ {node} saquery {' '.join(q)}\n" + fab.diag("saquery", *q, node=node)
                       for node, q in queries(lids))
    finally:
        fab.close()


def real_and_ours(tmp_path, run):
    """``run(dir, which)`` with the real opensm, then with softrdma's SM, each in a directory
    of its own: (real, ours)."""
    return run(tmp_path / "real", "real"), run(tmp_path / "ours", "ours")


def with_ibsim_caps(subnet: Subnet) -> Subnet:
    """``subnet`` with what ibsim answers the P_Key manager: every port Active, PartitionCap
    64 on CAs and 8 on switches, PartitionEnforcementCap 64."""
    from softrdma.wire.smp import NODE_INFO, PORT_INFO, SWITCH_INFO
    for node in subnet.nodes.values():
        for p in node.ports.values():
            p.port_info = bytes(PORT_INFO.encode(LinkState=4))
        node.node_info = bytes(NODE_INFO.encode(PartCap=8 if node.is_switch else 64))
        if node.is_switch:
            node.switch_info = bytes(SWITCH_INFO.encode(PartEnforceCap=64))
    return subnet


class EchoSweep:
    """What an SM phase (QosSetup...) needs of a sweep: a queue that answers every Set with
    its own data, and keeps what was sent."""

    def __init__(self, subnet):
        from softrdma.sm import log as L
        self.subnet, self.log, self.failed, self.sent, self.phase = subnet, L.Log(None), 0, [], ""
        self.q = self

    def post_send(self, smp, cb):
        self.sent.append(smp)
        cb(smp)
