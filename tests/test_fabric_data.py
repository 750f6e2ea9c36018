"""The fabric server's data socket: fake IB device ports (raw SEQPACKET
clients speaking wire.fabriclink) attached to the CAs of a 2-switch
fabric -- attach rules, PORT_INFO pushes, forwarding, link events,
detach, malformed input."""

import errno
import os
import socket
import threading

import pytest

from softrdma.fabric import model, topo
from softrdma.fabric.commands import control
from softrdma.fabric.server import Server
from softrdma.wire import fabriclink, smp
from softrdma.wire.smp import PortState

from ibfabric_helpers import LID, NET_2SW, FakeDevice, data_packet, program

_seq = [0]


class InProcess:
    """``Server`` on NET_2SW (programmed as after a sweep) running in a thread."""

    def __init__(self, tmp, programmed=True, net=NET_2SW):
        _seq[0] += 1
        self.fabric = topo.loads(net)
        if programmed:
            program(self.fabric)
        self.path = str(tmp / "fab.data")
        self.srv = Server(self.fabric, f"ibdt{os.getpid()}n{_seq[0]}", data_socket=self.path)
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        self.devs = []

    def _run(self):
        while not self.stop.is_set():
            self.srv.run_once(0.02)

    def dev(self, node, port=1, name=None):
        d = FakeDevice(self.path, node, port, name or f"dev-{node}")
        self.devs.append(d)
        return d

    def control(self, line):
        return control(self.srv.base, line)

    def close(self):
        for d in self.devs:
            d.close()
        self.stop.set()
        self.t.join(5)
        self.srv.close()


@pytest.fixture
def fab(tmp_path):
    f = InProcess(tmp_path)
    yield f
    f.close()
    assert not os.path.exists(f.path), "the data socket file stays after exit"


def _pi(info):
    return smp.PORT_INFO.decode(info.port_info)


def test_attach_pushes_what_the_sma_answers(fab):
    d = fab.dev("h1")
    d.wait(lambda: d.infos, what="PORT_INFO")
    info = d.infos[0]
    pi = _pi(info)
    assert pi["Lid"] == LID["h1"] and pi["LinkState"] == PortState.ACTIVE and pi["LocalPort"] == 1
    ni = smp.NODE_INFO.decode(info.node_info.ljust(64, b"\0"))
    h1 = fab.fabric.node("h1")
    assert ni["Guid"] == h1.guid and ni["PortGuid"] == h1.ports[1].guid and ni["NodeType"] == 1
    assert smp.decode_guid_info(info.guid_info)[0] == h1.ports[1].guid
    assert info.pkeys[0] == 0xFFFF and len(info.pkeys) == model.CA_PARTITION_CAP
    # the quoted name, the node GUID and a port GUID select the CA as well
    for sel in ('"h2"', f"{fab.fabric.node('h3').guid:#x}", f"{fab.fabric.node('h4').ports[1].guid:#x}"):
        d = fab.dev(sel)
        d.wait(lambda: d.infos, what=f"PORT_INFO for {sel}")


@pytest.mark.parametrize("node,port,err", [("nope", 1, errno.ENOENT), ("sw1", 1, errno.EINVAL),
                                           ("h1", 2, errno.EINVAL)])
def test_attach_refused(fab, node, port, err):
    d = fab.dev(node, port)
    assert d.wait_error()[0] == err


def test_port_taken_then_freed_by_a_closed_connection(fab):
    a = fab.dev("h1", name="first")
    a.wait(lambda: a.infos)
    b = fab.dev("h1", name="second")
    e = b.wait_error()
    assert e[0] == errno.EBUSY and "first" in e[1]
    a.close()
    c = fab.dev("h1", name="third")
    c.wait(lambda: c.infos, what="PORT_INFO after re-attach")
    assert "third" in fab.control("attached")


def test_unicast_across_a_switch_hop(fab):
    a, b = fab.dev("h1"), fab.dev("h4")
    for d in (a, b):
        d.wait(lambda d=d: d.infos)
    pkts = [data_packet(LID["h4"], LID["h1"], os.urandom(16 + 4 * i)) for i in range(50)]
    a.inject(pkts)
    assert b.take(50) == pkts
    words = sum(len(p) - 2 for p in pkts) // 4
    sw2 = fab.fabric.node("sw2")
    assert sw2.ports[2].pc[model.PC_XMIT_DATA] == words
    assert sw2.ports[2].pc[model.PC_XMIT_PKTS] == 50
    # and back
    b.inject([data_packet(LID["h1"], LID["h4"])])
    assert a.take(1) == [data_packet(LID["h1"], LID["h4"])]


def test_unattached_destination_counts_a_discard(fab):
    a = fab.dev("h1")
    a.wait(lambda: a.infos)
    a.inject([data_packet(LID["h3"], LID["h1"])])
    sw2_1 = fab.fabric.node("sw2").ports[1]
    a.wait(lambda: sw2_1.pc and sw2_1.pc[model.PC_XMIT_DISCARDS] == 1, what="a discard")


def test_link_down_pushes_port_info_and_drops(fab):
    a, b = fab.dev("h1"), fab.dev("h4")
    for d in (a, b):
        d.wait(lambda d=d: d.infos)
    assert fab.control("link down sw2 2").startswith("ok")
    b.wait(lambda: len(b.infos) >= 2, what="PORT_INFO after link down")
    pi = _pi(b.infos[-1])
    assert pi["LinkState"] == PortState.DOWN and pi["PhysLinkState"] != smp.PhysState.LINK_UP
    assert len(a.infos) == 1                 # nothing changed for h1
    a.inject([data_packet(LID["h4"], LID["h1"])])
    sw2_2 = fab.fabric.node("sw2").ports[2]
    a.wait(lambda: sw2_2.pc[model.PC_XMIT_DISCARDS] == 1, what="a discard at sw2[2]")
    assert fab.control("link up sw2 2").startswith("ok")
    b.wait(lambda: _pi(b.infos[-1])["LinkState"] == PortState.INIT, what="PORT_INFO Init")


def test_malformed_messages_close_only_their_connection(fab):
    good = fab.dev("h4")
    good.wait(lambda: good.infos)
    for junk in (b"", b"\x01", b"\x03\x01\x00\x05\x00", fabriclink.pack_port_info(
            bytes(40), bytes(64), bytes(64), [1]), b"\x09\x01\x00\x00"):
        d = fab.dev("h1") if junk != b"" else FakeDevice(fab.path, "h1", attach=False)
        if junk == b"":
            d.send(b"\x03\x01\x00\x00")     # PACKETS before ATTACH
        else:
            d.wait(lambda d=d: d.infos)
            d.send(junk)
        d.sock.settimeout(5)
        while True:
            m = d.sock.recv(70000)
            if not m:
                break
        d.close()
    # bad packets inside a good message are dropped and counted, the connection stays
    a = fab.dev("h1")
    a.wait(lambda: a.infos)
    bad = bytearray(data_packet(LID["h4"], LID["h1"]))
    bad[-2] ^= 0xFF
    a.inject([bytes(bad), data_packet(LID["h4"], LID["h1"])])
    assert good.take(1) == [data_packet(LID["h4"], LID["h1"])]
    assert fab.fabric.node("sw1").ports[1].pc[model.PC_RCV_ERRORS] == 1
    assert fab.srv.datasock.stats["bad_msgs"] == 5
    assert fab.control("stats").startswith("ok")


def test_port_cap_sets_is_sm_and_a_closed_connection_clears_it(fab):
    d = fab.dev("h2")
    d.wait(lambda: d.infos)
    assert not _pi(d.infos[-1])["CapMask"] & smp.CAP_IS_SM
    d.send(fabriclink.pack_port_cap(smp.CAP_IS_SM))
    d.wait(lambda: _pi(d.infos[-1])["CapMask"] & smp.CAP_IS_SM, what="IsSM in PORT_INFO")
    d.send(fabriclink.pack_port_cap(0, smp.CAP_IS_SM))
    d.wait(lambda: not _pi(d.infos[-1])["CapMask"] & smp.CAP_IS_SM, what="IsSM cleared")
    d.send(fabriclink.pack_port_cap(smp.CAP_IS_SM))
    d.wait(lambda: _pi(d.infos[-1])["CapMask"] & smp.CAP_IS_SM, what="IsSM again")
    h2 = fab.fabric.node("h2").ports[1]
    assert h2.has_sm
    d.close()
    fab.devs.remove(d)
    wait_for(lambda: not h2.has_sm, 5, "IsSM cleared by the connection's end")
    bad = fab.dev("h3")
    bad.wait(lambda: bad.infos)
    bad.send(fabriclink.pack_port_cap(1)[:-1])      # a short PORT_CAP: closed
    bad.sock.settimeout(5)
    while bad.sock.recv(70000):
        pass


def test_a_device_that_does_not_read_loses_packets_and_blocks_nobody(fab):
    slow, a, b, c = fab.dev("h4"), fab.dev("h1"), fab.dev("h2"), fab.dev("h3")
    for d in (slow, a, b, c):
        d.wait(lambda d=d: d.infos)
    big = data_packet(LID["h4"], LID["h1"], bytes(4000))
    for _ in range(400):                    # ~24 MB for a reader that never reads
        a.inject([big] * 15)
    pkt = data_packet(LID["h3"], LID["h2"])
    b.inject([pkt])
    assert c.take(1, 10) == [pkt]
    stats = dict(w.split("=") for w in fab.control("stats").split()[1:])
    assert int(stats["full_drops"]) >= 15 * int(stats["full"]) > 0 and int(stats["devices"]) == 4


NET_2PORT = NET_2SW.replace('Switch 4 "sw1"', 'Switch 5 "sw1"').replace(
    'Switch 4 "sw2"', 'Switch 5 "sw2"') + """
Ca 2 "hx"
[1] "sw1"[5]
[2] "sw2"[5]
"""


def test_a_two_port_ca_attaches_each_port(tmp_path):
    fab = InProcess(tmp_path, programmed=False, net=NET_2PORT)
    try:
        for num in (1, 2):
            d = fab.dev("hx", num, "mlx5_0")
            d.wait(lambda d=d: d.infos, what=f"PORT_INFO of port {num}")
            assert _pi(d.infos[0])["LocalPort"] == num
            assert smp.decode_guid_info(d.infos[0].guid_info)[0] == fab.fabric.node("hx").ports[num].guid
            assert smp.NODE_INFO.decode(d.infos[0].node_info.ljust(64, b"\0"))["NumPorts"] == 2
        assert "hx" in fab.control("attached")
    finally:
        fab.close()


def test_a_stale_socket_file_is_replaced_and_a_live_one_refused(tmp_path):
    path = tmp_path / "fab.data"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.close()                                   # stale: nobody listens
    f = InProcess(tmp_path)
    try:
        with pytest.raises(model.FabricError, match="another fabric server"):
            Server(topo.loads(NET_2SW), f"ibdt{os.getpid()}x", data_socket=f.path)
    finally:
        f.close()


# --- end to end: `softrdma fabric serve` + `softrdma opensm` + fake devices ------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

from sm_helpers import SIMSO, have_ibsim, sim_cwd, sim_env, start_fabric, unique_base  # noqa: E402
from wait_helpers import stop, wait_file, wait_for  # noqa: E402

from ibfabric_helpers import mad_of, sa_get  # noqa: E402
from softrdma.fabric.dataplane import mad_packet  # noqa: E402
from softrdma.wire import mad as madw  # noqa: E402
from softrdma.wire.sa import MCMEMBER_RECORD, MCR_COMP, PATH_RECORD, SA_DATA_OFFSET, SaAttr  # noqa: E402

HOSTS = ("h1", "h2", "h3", "h4")


class Live:
    """A fabric server on NET_2SW with a fake device on every CA and
    softrdma's SM resident; LIDs from the devices' PORT_INFO."""

    def __init__(self, tmp, sm="softrdma", sm_args=(), before_sm=None, pump=None):
        """``before_sm(self)`` runs once the devices are attached; ``pump(self)``
        while the SM sweeps (for a device that answers the SM)."""
        self.tmp = tmp
        self.procs = []
        self.dev = {}
        self.before_sm, self.pump = before_sm, pump
        self._old_dir = os.environ.get(fabriclink.DIR_ENV)
        try:
            self._start(sm, list(sm_args))
        except BaseException:
            self.close()
            raise

    def _start(self, sm, sm_args):
        tmp = self.tmp
        fdir = tmp / "fabdir"
        os.environ[fabriclink.DIR_ENV] = str(fdir)      # the server inherits it
        net = tmp / "fab.net"
        net.write_text(NET_2SW)
        self.base = unique_base("ibd")
        self.server = start_fabric("softrdma", net, self.base, tmp, log=tmp / "server.log")
        self.procs.append(self.server)
        self.path = fabriclink.data_socket_path(self.base, str(fdir))
        wait_file(self.path, self.server)
        self.dev = {h: FakeDevice(self.path, h, name=f"mlx5_{h}") for h in HOSTS}
        for d in self.dev.values():
            d.wait(lambda d=d: d.infos, what="PORT_INFO at attach")
        if self.before_sm:
            self.before_sm(self)
        if sm == "softrdma":
            self.sm = self.start([sys.executable, "-m", "softrdma", "opensm", "-s", "0", "-f",
                                  str(tmp / "osm.log"), *sm_args], "sm.out")
        else:                                   # the real opensm through libumad2sim
            self.sm = self.start(["opensm", "-d2", "-s", "0", "-f", str(tmp / "osm.log"), *sm_args],
                                 "sm.out", LD_PRELOAD=SIMSO)
        log = tmp / "osm.log"
        wait_for(lambda: (self.pump(self) if self.pump else None) or
                 (log.exists() and "SUBNET UP" in log.read_text()), 60, "SUBNET UP", proc=self.sm)
        self.lid = {}
        for h, d in self.dev.items():
            d.wait(lambda d=d: _pi(d.infos[-1])["LinkState"] == PortState.ACTIVE, 30,
                   f"{h} Active")
            self.lid[h] = _pi(d.infos[-1])["Lid"]
        self.sm_lid = _pi(self.dev["h1"].infos[-1])["SMLid"]

    def start(self, args, out, **env):
        cwd = (sim_cwd() or self.tmp) if "LD_PRELOAD" in env else self.tmp
        p = subprocess.Popen(args, cwd=cwd, env=sim_env(self.base, self.tmp, **env),
                             stdout=open(self.tmp / out, "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def softrdma(self, *args):
        return subprocess.run([sys.executable, "-m", "softrdma", *args], cwd=self.tmp,
                              env=sim_env(self.base, self.tmp), capture_output=True, text=True,
                              timeout=60)

    def diag(self, *cmd, node="h2"):
        r = subprocess.run(list(cmd), cwd=sim_cwd() or self.tmp, timeout=60, capture_output=True, text=True,
                           env=sim_env(self.base, self.tmp, LD_PRELOAD=SIMSO, SIM_HOST=node))
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def switch_lid(self, name):
        line = [ln for ln in self.diag("ibswitches").splitlines() if f'"{name}"' in ln][0]
        return int(line.split(" lid ")[1].split()[0])

    def counters(self, lid, port) -> dict:
        out = self.diag("perfquery", str(lid), str(port))
        return {k.strip(): int(v.strip(". \t"), 0) for k, v in
                (ln.split(":", 1) for ln in out.splitlines() if ":" in ln and "#" not in ln)
                if v.strip(". \t").lstrip("-").isdigit()}

    def close(self):
        for d in self.dev.values():
            d.close()
        for p in reversed(self.procs):
            stop(p)
        if self._old_dir is None:
            os.environ.pop(fabriclink.DIR_ENV, None)
        else:
            os.environ[fabriclink.DIR_ENV] = self._old_dir


@pytest.fixture(scope="module", params=["softrdma", "opensm"])
def live(tmp_path_factory, request):
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    lv = Live(tmp_path_factory.mktemp("live"), request.param)
    yield lv
    lv.close()
    assert not os.path.exists(lv.path)


def test_sweep_gives_the_devices_lids_and_unicast_crosses_the_switches(live):
    assert len(set(live.lid.values())) == 4 and 0 not in live.lid.values()
    assert live.sm_lid != 0
    for src, dst in (("h1", "h4"), ("h4", "h1"), ("h2", "h3"), ("h1", "h2")):
        pkts = [data_packet(live.lid[dst], live.lid[src], os.urandom(200 + i)) for i in range(20)]
        live.dev[src].inject(pkts)
        assert live.dev[dst].take(20) == pkts, (src, dst)


def test_fabric_show_lists_the_attached_devices(live, tmp_path):
    png = str(tmp_path / "fab.png")
    r = live.softrdma("fabric", "show", "--sock", live.base, "--text", "--png", png)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "IB devices attached: 4" in lines
    for h in HOSTS:
        assert f'  "{h}"[1] mlx5_{h}' in lines
    assert "links: 5 (Active 5)" in lines
    assert "mlx5_h1" in live.softrdma("fabric", "cmd", "--sock", live.base, "attached").stdout


def test_path_record_query_from_a_device(live):
    h1 = live.dev["h1"]
    rec = PATH_RECORD.encode(SLID=live.lid["h1"], DLID=live.lid["h4"], NumbPath=1)
    from softrdma.wire.sa import PR_COMP_DLID, PR_COMP_NUMBPATH, PR_COMP_SLID
    tid = 0x1234_5678
    q = sa_get(SaAttr.PATH_RECORD, rec, PR_COMP_SLID | PR_COMP_DLID | PR_COMP_NUMBPATH, tid,
               method=madw.SaMethod.GET_TABLE if hasattr(madw, "SaMethod") else 0x12)
    h1.inject([mad_packet(q, slid=live.lid["h1"], dlid=live.sm_lid, sqp=1, dqp=1)])
    lr, dqp, sqp, m = mad_of(h1.take(1)[0])
    assert (lr.dlid, lr.slid, dqp) == (live.lid["h1"], live.sm_lid, 1)
    assert m[1] == madw.MgmtClass.SUBN_ADM and m[3] & 0x80
    assert int.from_bytes(m[8:16], "big") == tid and int.from_bytes(m[4:6], "big") == 0
    pr = PATH_RECORD.decode(m[SA_DATA_OFFSET:SA_DATA_OFFSET + 64])
    assert (pr["SLID"], pr["DLID"]) == (live.lid["h1"], live.lid["h4"])


def test_a_mad_from_an_ibsim_client_reaches_a_device_and_back(live):
    """The real ibping (umad2sim, on h2) pings h1's LID: the device answers."""
    h1 = live.dev["h1"]
    p = subprocess.Popen(["ibping", "-c", "1", "-L", str(live.lid["h1"])], cwd=sim_cwd() or live.tmp,
                         env=sim_env(live.base, live.tmp, LD_PRELOAD=SIMSO, SIM_HOST="h2"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live.procs.append(p)
    lr, dqp, sqp, m = mad_of(h1.take(1, 20)[0])
    assert dqp == 1 and lr.slid == live.lid["h2"] and m[3] == madw.Method.GET
    resp = bytearray(m)
    resp[3] |= 0x80
    name = b"fake-h1"
    resp[40:40 + len(name) + 1] = name + b"\0"
    h1.inject([mad_packet(bytes(resp), slid=live.lid["h1"], dlid=lr.slid, sqp=1, dqp=sqp)])
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and "Pong from fake-h1" in out, out + err


def test_smps_from_a_device(live):
    """A device's own diag: a directed route to sw1 and a LID-routed SMP to sw2."""
    h1 = live.dev["h1"]
    dr = smp.build_dr_smp(madw.Method.GET, smp.SmpAttr.NODE_INFO, [1], tid=77)
    h1.inject([mad_packet(bytes(dr), slid=0xFFFF, dlid=0xFFFF, sqp=0, dqp=0)])
    lr, dqp, _, m = mad_of(h1.take(1)[0])
    assert lr.vl == 15 and dqp == 0 and smp.parse_dr(m).direction == 1
    ni = smp.NODE_INFO.decode(m[64:128])
    assert ni["NodeType"] == 2 and ni["LocalPort"] == 1
    lr_smp = smp.build_smp(madw.Method.GET, smp.SmpAttr.PORT_INFO, 2, tid=78)
    sw2_lid = live.switch_lid("sw2")
    h1.inject([mad_packet(bytes(lr_smp), slid=live.lid["h1"], dlid=sw2_lid, sqp=0, dqp=0)])
    lr, dqp, _, m = mad_of(h1.take(1)[0])
    assert m[3] == madw.Method.GET_RESP and int.from_bytes(m[4:6], "big") == 0
    assert smp.PORT_INFO.decode(m[64:128])["LinkState"] == PortState.ACTIVE


def test_device_to_device_mad(live):
    """QP1 MADs (CM, vendor classes) between two devices, LID-routed."""
    m = madw.build_mad(madw.MgmtClass.CM, 2, madw.Method.SEND, 0x10, tid=99)
    live.dev["h2"].inject([mad_packet(bytes(m), slid=live.lid["h2"], dlid=live.lid["h3"],
                                      sqp=1, dqp=1)])
    lr, dqp, sqp, got = mad_of(live.dev["h3"].take(1)[0])
    assert got == bytes(m) and (lr.slid, dqp, sqp) == (live.lid["h2"], 1, 1)


def test_multicast_after_an_mcmember_join(live):
    mgid = 0xFF15A01BFFFF0000000000000000ABCD        # rdma_cm-style, site-local: not IPoIB
    prefix = _pi(live.dev["h1"].infos[-1])["GidPrefix"]
    for i, h in enumerate(("h1", "h3", "h4")):
        guid = smp.decode_guid_info(live.dev[h].infos[-1].guid_info)[0]
        rec = MCMEMBER_RECORD.encode(MGID=mgid, PortGID=(prefix << 64) | guid, QKey=0x11111111,
                                     PKey=0xFFFF, JoinState=1, SL=0, TClass=0, FlowLabel=0)
        mask = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "QKey", "PKey", "JoinState", "SL",
                                          "TClass", "FlowLabel"))
        q = sa_get(SaAttr.MCMEMBER_RECORD, rec, mask, 500 + i, method=madw.Method.SET)
        live.dev[h].inject([mad_packet(q, slid=live.lid[h], dlid=live.sm_lid, sqp=1, dqp=1)])
        _, _, _, m = mad_of(live.dev[h].take(1)[0])
        assert int.from_bytes(m[4:6], "big") == 0, f"join of {h}: status {m[4:6].hex()}"
        mlid = MCMEMBER_RECORD.decode(m[SA_DATA_OFFSET:SA_DATA_OFFSET + 52])["MLID"]
    assert mlid >= 0xC000

    def delivered():
        live.dev["h1"].inject([data_packet(mlid, live.lid["h1"], b"m" * 64, dqp=0xFFFFFF)])
        try:
            return live.dev["h3"].take(1, 0.5) and live.dev["h4"].take(1, 2)
        except AssertionError:
            return False
    wait_for(delivered, 30, "multicast through the MFTs")
    assert live.dev["h2"].pkts == [] and live.dev["h1"].pkts == []


def test_perfquery_on_a_switch_port_shows_the_forwarded_words(live):
    sw2_lid = str(live.switch_lid("sw2"))
    live.diag("perfquery", "-R", sw2_lid, "2")
    pkts = [data_packet(live.lid["h4"], live.lid["h1"], os.urandom(1000)) for _ in range(30)]
    live.dev["h1"].inject(pkts)
    assert live.dev["h4"].take(30) == pkts
    out = live.diag("perfquery", "-x", sw2_lid, "2")
    vals = dict(ln.split(":", 1) for ln in out.splitlines() if ":" in ln)
    xmit = int(vals["PortXmitData"].strip(". \t"))
    npk = int(vals["PortXmitPkts"].strip(". \t"))
    words = sum(len(p) - 2 for p in pkts) // 4
    # SMPs of the SM may cross the link too: each is one 72-word MAD packet
    assert npk >= 30 and xmit - words == 72 * (npk - 30), out


def test_link_down_and_up(live):
    h1, h4 = live.dev["h1"], live.dev["h4"]
    n = len(h4.infos)
    r = live.softrdma("fabric", "link", "down", "sw2", "2", "--sock", live.base)
    assert r.returncode == 0, r.stderr
    h4.wait(lambda: len(h4.infos) > n and _pi(h4.infos[-1])["LinkState"] == PortState.DOWN,
            what="PORT_INFO Down")
    sw1, sw2 = live.switch_lid("sw1"), live.switch_lid("sw2")
    # where the packets die depends on whether the SM has re-routed yet: at
    # sw2[2] (link down: PortXmitDiscards) or, without a route to h4 any more,
    # where they enter a switch (PortRcvSwitchRelayErrors)
    where = ((sw2, 2, "PortXmitDiscards"), (sw2, 3, "PortRcvSwitchRelayErrors"),
             (sw1, 1, "PortRcvSwitchRelayErrors"))
    for lid, port, _ in where:
        live.diag("perfquery", "-R", str(lid), str(port))
    h1.inject([data_packet(live.lid["h4"], live.lid["h1"])] * 3)
    wait_for(lambda: sum(live.counters(lid, port)[c] for lid, port, c in where) == 3, 10,
             "3 drops counted")
    assert h4.pkts == []
    r = live.softrdma("fabric", "link", "up", "sw2", "2", "--sock", live.base)
    assert r.returncode == 0, r.stderr
    h4.wait(lambda: _pi(h4.infos[-1])["LinkState"] in (PortState.INIT, PortState.ACTIVE),
            what="PORT_INFO Init")
    # the SM sees the trap, sweeps, and h4 is back
    h4.wait(lambda: _pi(h4.infos[-1])["LinkState"] == PortState.ACTIVE, 30, "h4 Active again")
    pkt = data_packet(live.lid["h4"], live.lid["h1"])

    def arrives():
        h1.inject([pkt])
        try:
            return h4.take(1, 1) == [pkt]
        except AssertionError:
            return False
    wait_for(arrives, 30, "traffic to h4 again")
    h4.pkts.clear()


def test_a_killed_device_frees_its_port(live):
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from ibfabric_helpers import FakeDevice; "
            "d = FakeDevice(sys.argv[1], 'h2', name='doomed'); d.wait(lambda: d.infos); "
            "print('attached', flush=True); import time; time.sleep(600)")
    live.dev["h2"].close()
    p = subprocess.Popen([sys.executable, "-c", code, live.path, os.path.dirname(__file__)],
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    live.procs.append(p)
    assert p.stdout.readline().strip() == "attached"
    busy = FakeDevice(live.path, "h2", name="second")
    assert busy.wait_error()[0] == errno.EBUSY
    busy.close()
    p.kill()
    p.wait()
    again = FakeDevice(live.path, "h2", name="again")
    live.dev["h2"] = again
    again.wait(lambda: again.infos, what="PORT_INFO after the kill")
    assert _pi(again.infos[-1])["Lid"] == live.lid["h2"]
    live.dev["h1"].inject([data_packet(live.lid["h2"], live.lid["h1"])])
    assert again.take(1) == [data_packet(live.lid["h2"], live.lid["h1"])]


def test_malformed_input_leaves_the_server_serving(live):
    d = FakeDevice(live.path, "h3", attach=False)
    d.send(b"\xff" * 10)
    d.sock.settimeout(5)
    assert d.sock.recv(100) == b""
    d.close()
    live.dev["h1"].inject([data_packet(live.lid["h3"], live.lid["h1"])])
    assert live.dev["h3"].take(1) == [data_packet(live.lid["h3"], live.lid["h1"])]
    assert live.server.poll() is None
    assert "bad message" in (live.tmp / "server.log").read_text()


def test_partition_enforcement_with_the_real_opensm(tmp_path):
    """opensm's partitions: switch ports facing CAs enforce their CA's P_Keys."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    f = topo.loads(NET_2SW)
    guid = {h: f.node(h).ports[1].guid for h in HOSTS}
    conf = tmp_path / "partitions.conf"
    conf.write_text("Default=0x7fff, ipoib : ALL=full ;\n"
                    f"P1=0x0001 : {guid['h1']:#x}=full, {guid['h4']:#x}=full ;\n")
    lv = Live(tmp_path, "opensm", ["-P", str(conf)])
    try:
        lv.dev["h1"].wait(lambda: 0x8001 in lv.dev["h1"].infos[-1].pkeys, 10, "P_Key 0x8001 on h1")
        assert 0x8001 not in lv.dev["h2"].infos[-1].pkeys
        ok = data_packet(lv.lid["h4"], lv.lid["h1"], pkey=0x8001)
        lv.dev["h1"].inject([ok])
        assert lv.dev["h4"].take(1) == [ok]
        sw1 = lv.switch_lid("sw1")
        for port in (1, 2):
            lv.diag("perfquery", "-R", str(sw1), str(port))
        # h2 holds no 0x0001: its switch port refuses the packet coming in
        lv.dev["h2"].inject([data_packet(lv.lid["h3"], lv.lid["h2"], pkey=0x8001)] * 2)
        wait_for(lambda: lv.counters(sw1, 2)["PortRcvConstraintErrors"] == 2, 10,
                 "inbound constraint errors")
        # h1 does, h2 does not: refused going out to h2
        lv.dev["h1"].inject([data_packet(lv.lid["h2"], lv.lid["h1"], pkey=0x8001)])
        wait_for(lambda: lv.counters(sw1, 2)["PortXmitConstraintErrors"] == 1, 10,
                 "outbound constraint errors")
        assert lv.dev["h2"].pkts == [] and lv.dev["h3"].pkts == []
        # the default partition still carries everybody
        dflt = data_packet(lv.lid["h2"], lv.lid["h1"])
        lv.dev["h1"].inject([dflt])
        assert lv.dev["h2"].take(1) == [dflt]
    finally:
        lv.close()


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("sm", ["softrdma", "opensm"])
def test_an_sm_bound_to_a_device_port_is_asked_for_its_sminfo(tmp_path, sm, when):
    """PORT_CAP IsSM on h2 (before the SM's first sweep, or after it: then
    trap 144 tells the SM): the subnet's SM finds an SM there and asks it
    for its SMInfo through h2's QP0; h2 answers as a standby of lower priority."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing")
    asked = []
    guid = topo.loads(NET_2SW).node("h2").ports[1].guid

    def claim_sm(lv):
        d = lv.dev["h2"]
        d.send(fabriclink.pack_port_cap(smp.CAP_IS_SM))
        d.wait(lambda: _pi(d.infos[-1])["CapMask"] & smp.CAP_IS_SM, what="IsSM on h2")

    def answer(lv):
        d = lv.dev["h2"]
        try:
            d._pump(0.02)
        except ConnectionError:
            return
        for pkt in d.pkts:
            lr, dqp, sqp, m = mad_of(pkt)
            if dqp != 0 or int.from_bytes(m[16:18], "big") != smp.SmpAttr.SM_INFO or \
                    m[3] != madw.Method.GET:
                continue
            asked.append((lr.vl, m[1]))
            r = bytearray(m)
            r[3] = madw.Method.GET_RESP
            r[64:64 + 21] = smp.SM_INFO.encode(SmInfoGuid=guid, SmActivity=1, SmPriority=0,
                                               SmState=2)[:21]
            if m[1] == madw.MgmtClass.SUBN_DIRECTED_ROUTE:
                dr = smp.parse_dr(m)
                smp.set_dr_word(r, 1, 0, dr.hop_cnt, dr.hop_cnt)
            d.inject([mad_packet(bytes(r), slid=lr.dlid, dlid=lr.slid, sqp=0, dqp=sqp)])
        d.pkts.clear()

    # priority 1 beats the device's 0 (on equal priorities the lower GUID, h2's, would win)
    lv = Live(tmp_path, sm, ["-p", "1"], before_sm=claim_sm if when == "before" else None,
              pump=answer)
    try:
        if when == "after":
            assert not asked
            claim_sm(lv)
            wait_for(lambda: answer(lv) or asked, 30, "an SMInfo Get after trap 144")
        assert asked and all(vl == 15 for vl, _ in asked), asked
        assert _pi(lv.dev["h2"].infos[-1])["CapMask"] & smp.CAP_IS_SM
    finally:
        lv.close()
