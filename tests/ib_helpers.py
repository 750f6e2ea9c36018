"""IB device tests: a stand-in fabric data socket (``FakeFabric``) speaking
``wire.fabriclink`` -- CAs by name with a LID each, PORT_INFO pushed on
attach and on every change, PACKETS forwarded by DLID -- for the device's
unit tests; and an IB device added to a running daemon (``add_ib``)."""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import threading

import pytest

from daemon_helpers import RunningDaemon
from ibfabric_helpers import NET_2SW

from softrdma.uapi.control import recv_msg, send_msg
from softrdma.wire import fabriclink as fl
from softrdma.wire import smp
from softrdma.wire.lrh import parse_lrh

PREFIX = 0xFE80000000000000


def port_info_msg(lid: int, guid: int, *, state: int = 4, phys: int = 5, sm_lid: int = 1, sm_sl: int = 0,
                  lmc: int = 0, pkeys=(0xFFFF,), width: int = 2, speed: int = 4, ext: int = 0, mtu: int = 5) -> bytes:
    ni = smp.NODE_INFO.encode(BaseVers=1, ClassVers=1, NodeType=1, NumPorts=1, SystemGuid=guid, Guid=guid,
                              PortGuid=guid, PartCap=len(pkeys), LocalPort=1, VendorId=0x2C9)
    pi = smp.PORT_INFO.encode(GidPrefix=PREFIX, Lid=lid, SMLid=sm_lid, CapMask=0x02510868, LocalPort=1,
                              LinkWidthEnabled=width, LinkWidthSupported=width, LinkWidthActive=width,
                              LinkSpeedSupported=speed, LinkState=state, PhysLinkState=phys, LMC=lmc,
                              LinkSpeedActive=speed, LinkSpeedEnabled=speed, NeighborMTU=mtu, SMSL=sm_sl,
                              VLCap=1, MtuCap=mtu, GuidCap=1, SubnetTimeout=18, LinkSpeedExtActive=ext)
    gi = smp.encode_guid_info([guid] + [0] * 7)
    return fl.pack_port_info(bytes(ni), bytes(pi), gi, pkeys)


class FakeFabric:
    """A data socket at ``data_socket_path(base, directory)``: CA ``name``
    (``cas``: name -> LID) attaches, gets its PORT_INFO, and its packets go
    to the CA whose LID is their DLID (dropped when none)."""

    def __init__(self, directory: str, base: str, cas: dict[str, int]):
        self.path = fl.data_socket_path(base, directory)
        os.makedirs(directory, exist_ok=True)
        self.cas = dict(cas)
        self.guids = {n: 0x0002C90300000000 + lid for n, lid in cas.items()}     # fixed, whatever the LID
        self.attrs = {n: {} for n in cas}            # per CA: port_info_msg keywords
        self.conns: dict[str, socket.socket] = {}
        self.forwarded = 0
        self.dropped = 0
        self.attaches: list = []
        self.lock = threading.Lock()
        self.sel = selectors.DefaultSelector()
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.srv.bind(self.path)
        self.srv.listen(16)
        self.sel.register(self.srv, selectors.EVENT_READ, None)
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def guid(self, name: str) -> int:
        return self.guids[name]

    def _info(self, name: str) -> bytes:
        return port_info_msg(self.cas[name], self.guid(name), **self.attrs[name])

    def set(self, name: str, **kw) -> None:
        """Change a CA port's PortInfo (state=, lid=...) and push it."""
        with self.lock:
            if "lid" in kw:
                self.cas[name] = kw.pop("lid")
            self.attrs[name].update(kw)
            c = self.conns.get(name)
            if c is not None:
                c.send(self._info(name))

    def _run(self) -> None:
        while not self.stopping:
            for key, _ in self.sel.select(0.1):
                if key.data is None:
                    try:
                        c, _ = self.srv.accept()
                    except OSError:
                        continue
                    self.sel.register(c, selectors.EVENT_READ, [None, c])
                    continue
                self._readable(key.data)

    def _readable(self, slot) -> None:
        name, c = slot
        try:
            msg = c.recv(fl.MAX_MESSAGE + 64)
        except OSError:
            msg = b""
        with self.lock:
            if not msg:
                self.sel.unregister(c)
                c.close()
                if name is not None and self.conns.get(name) is c:
                    del self.conns[name]
                return
            t = fl.msg_type(msg)
            if t == fl.MsgType.ATTACH:
                port, node, dev = fl.parse_attach(msg)
                self.attaches.append((port, node, dev))
                if node not in self.cas:
                    c.send(fl.pack_error(2, f"no CA {node}"))
                    self.sel.unregister(c)
                    c.close()
                    return
                if node in self.conns:
                    c.send(fl.pack_error(16, f"{node} port {port} is taken"))
                    self.sel.unregister(c)
                    c.close()
                    return
                slot[0] = node
                self.conns[node] = c
                c.send(self._info(node))
            elif t == fl.MsgType.PACKETS:
                by_lid = {lid + bits: n for n, lid in self.cas.items()
                          for bits in range(1 << self.attrs[n].get("lmc", 0))}      # a CA's LIDs: its LMC's
                out: dict[str, list] = {}
                for p in fl.iter_packets(msg):
                    dst = by_lid.get(parse_lrh(p).dlid)
                    up = dst is not None and self.attrs[dst].get("state", 4) == 4 and dst in self.conns
                    if not up or self.attrs[name].get("state", 4) != 4:
                        self.dropped += 1
                        continue
                    out.setdefault(dst, []).append(bytes(p))
                    self.forwarded += 1
                for dst, pkts in out.items():
                    for m in fl.batches(pkts):
                        try:
                            self.conns[dst].send(m)
                        except OSError:
                            pass

    def close(self) -> None:
        """The server goes away: every connection closes."""
        if self.stopping:
            return
        self.stopping = True
        self.thread.join(5)
        with self.lock:
            for key in list(self.sel.get_map().values()):
                key.fileobj.close()
            self.sel.close()
            self.conns.clear()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def control(run_dir: str, op: str, **kw) -> dict:
    """One control request to the daemon of ``run_dir``; the reply (errno in it)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(os.path.join(run_dir, "softrdmad.sock"))
        send_msg(s, {"op": op, "seq": 1, **kw})
        msg, _ = recv_msg(s)
    finally:
        s.close()
    return msg


def add_ib(run_dir: str, name: str, fabric: str, node: str, port: int = 1) -> dict:
    return control(run_dir, "link_add", name=name, type="ib", fabric=fabric, node=node, port=port)


def link(run_dir: str, name: str) -> dict:
    return next(d for d in control(run_dir, "links")["links"] if d["ifname"] == name)


@pytest.fixture
def fake(shm_path, monkeypatch):
    """A stand-in fabric ``fab`` with CAs h1, h2, h3 (LIDs 3, 4, 5); the
    daemons and tools of the test find it through SOFTRDMA_FABRIC_DIR."""
    fdir = os.path.join(str(shm_path), "fabric")
    monkeypatch.setenv("SOFTRDMA_FABRIC_DIR", fdir)
    f = FakeFabric(fdir, "fab", {"h1": 3, "h2": 4, "h3": 5})
    yield f
    f.close()


@pytest.fixture
def daemon(shm_path, monkeypatch, fake):
    """A daemon (rxe0 on lo) that sees the stand-in fabric."""
    d = RunningDaemon(str(shm_path))
    monkeypatch.setenv("SOFTRDMA_RUN", str(shm_path))
    yield d
    d.stop()


# --- a live fabric: `softrdma fabric serve`, an SM, daemons' IB devices on its CAs ------------

def _second_link(net: str) -> str:
    """``net`` (ibfabric_helpers.NET_2SW) with a second link between the two switches."""
    return (net.replace('Switch 4 "sw1"', 'Switch 5 "sw1"').replace('Switch 4 "sw2"', 'Switch 5 "sw2"')
            .replace('[3] "sw2"[3]\n', '[3] "sw2"[3]\n[4] "sw2"[4]\n')
            .replace('[3] "sw1"[3]\n', '[3] "sw1"[3]\n[4] "sw1"[4]\n'))


NET_2SW_DUAL = _second_link(NET_2SW)


class IbFabric:
    """``softrdma fabric serve`` on ``net`` (a .net text) and, after
    ``sweep``, an SM (softrdma's, or the real opensm through libumad2sim);
    IB devices of daemons attach to its CAs (``attach``).  The fabric
    directory goes into ``os.environ`` (SOFTRDMA_FABRIC_DIR) for the daemons
    the test starts after it; ``close`` takes it out again."""

    def __init__(self, tmp, net: str):
        import sm_helpers
        from wait_helpers import wait_file
        self.tmp = tmp
        self.procs: list = []
        self.fdir = str(tmp / "fabdir")
        self._old_dir = os.environ.get(fl.DIR_ENV)
        os.environ[fl.DIR_ENV] = self.fdir
        (tmp / "fab.net").write_text(net)
        self.base = sm_helpers.unique_base("ibdev")
        try:
            self.server = sm_helpers.start_fabric("softrdma", tmp / "fab.net", self.base, tmp,
                                                  log=tmp / "server.log")
            self.procs.append(self.server)
            wait_file(fl.data_socket_path(self.base), self.server)
        except BaseException:
            self.close()
            raise

    def env(self, **extra) -> dict:
        import sm_helpers
        return sm_helpers.sim_env(self.base, self.tmp, **extra)

    def attach(self, run_dir: str, node: str, name: str = "mlx5_0") -> None:
        r = add_ib(run_dir, name, self.base, node)
        assert r["errno"] == 0, r

    def sweep(self, sm: str = "softrdma") -> None:
        """Start the SM and wait for its SUBNET UP."""
        import sm_helpers
        from wait_helpers import wait_for
        log = self.tmp / "osm.log"
        if sm == "softrdma":
            args, env = [sys.executable, "-m", "softrdma", "opensm", "-s", "0", "-f", str(log)], {}
        else:                                   # the real opensm through libumad2sim
            args, env = ["opensm", "-d2", "-s", "0", "-f", str(log)], {"LD_PRELOAD": sm_helpers.SIMSO}
        self.sm = subprocess.Popen(args, cwd=(env and sm_helpers.sim_cwd()) or self.tmp, env=self.env(**env),
                                   stdout=open(self.tmp / "sm.out", "w"),
                                   stderr=subprocess.STDOUT)
        self.procs.append(self.sm)
        wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 60, "SUBNET UP", proc=self.sm)

    def wait_active(self, run_dir: str, name: str = "mlx5_0") -> int:
        """The device's port Active; its LID."""
        from wait_helpers import wait_for
        wait_for(lambda: link(run_dir, name)["port_attr"]["state"] == 4, 60, f"{name} of {run_dir} Active")
        return link(run_dir, name)["port_attr"]["lid"]

    def fabric(self, *args) -> subprocess.CompletedProcess:
        """``softrdma fabric ARGS --sock BASE`` (link down/up ...)."""
        return subprocess.run([sys.executable, "-m", "softrdma", "fabric", *args, "--sock", self.base],
                              cwd=self.tmp, env=self.env(), capture_output=True, text=True, timeout=60)

    def close(self) -> None:
        from wait_helpers import stop
        for p in reversed(self.procs):
            stop(p)
        if self._old_dir is None:
            os.environ.pop(fl.DIR_ENV, None)
        else:
            os.environ[fl.DIR_ENV] = self._old_dir


class IbHosts:
    """A fabric on ``net``, a daemon per host of ``hosts`` (run directories
    under ``shm``) with its mlx5_0 on that CA, and the SM's sweep done:
    every port Active, ``lid`` by host (``sm=None``: no SM, the ports stay
    in Initialize; ``lid`` is empty)."""

    def __init__(self, tmp, shm, net: str, hosts, sm: str = "softrdma"):
        self.fabric = IbFabric(tmp, net)
        self.daemons: dict = {}
        try:
            for h in hosts:
                (shm / h).mkdir(parents=True)
                self.daemons[h] = RunningDaemon(str(shm / h))
                self.fabric.attach(self.daemons[h].run_dir, h)
            self.lid = {}
            if sm is not None:
                self.fabric.sweep(sm)
                self.lid = {h: self.fabric.wait_active(d.run_dir) for h, d in self.daemons.items()}
        except BaseException:
            self.close()
            raise

    def run_dir(self, h: str) -> str:
        return self.daemons[h].run_dir

    def close(self) -> None:
        for d in self.daemons.values():
            d.stop()
        self.fabric.close()


def two_hosts(tmp_path_factory, shm_path_module, sm: str, tag: str) -> IbHosts:
    """``IbHosts`` on NET_2SW's h1 and h4 (a switch hop apart) for a module
    fixture whose param ``sm`` ("softrdma" or "opensm") sweeps them; ``sm``
    is kept as the hosts' ``sm``."""
    import sm_helpers
    if not sm_helpers.have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    h = IbHosts(tmp_path_factory.mktemp(tag), shm_path_module / sm, NET_2SW, ("h1", "h4"), sm)
    h.sm = sm
    return h
