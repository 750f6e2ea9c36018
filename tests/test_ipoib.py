"""IPoIB end to end: a 2-switch fabric, three IB hosts in three network
namespaces (a daemon with ``--ipoib`` in each, its mlx5_0 on a CA), and
softrdma's SM with a partitions.conf (the default partition, and 0x8001
with h1 and h3 only).  ib0 gets its carrier once the broadcast group is
joined; IPv4 and IPv6 ping between every pair; ARP entries carry IPoIB
hardware addresses; a TCP transfer is byte-exact; a P_Key child reaches
its partition only; an SM restart that moves every LID costs a bounded
outage.  Connected mode: pings of more than the UD MTU between every
pair, 100 MB over TCP on the RC connections, idle connections ended and
made again, mixed modes, a REJ's fall-back to datagrams, the mode switch
back.  h1's CA has a second port on a subnet of its own (switch sw3, host
h5): ib1 on it.  One fabric for the module."""

from __future__ import annotations

import errno
import itertools
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from daemon_helpers import RunningDaemon
from ib_helpers import IbFabric, add_ib, control, link
from ibfabric_helpers import NET_2SW
from netns_helpers import need_root, sh
from shm_helpers import shm_dir
from test_wire_tshark import tshark  # noqa: F401 -- the tshark fixture
from wait_helpers import stop, wait_for

HOSTS = ("h1", "h2", "h3")
# the 2-switch fabric, and h1's CA a 2-port one whose port 2 is on a second subnet: switch sw3 with host h5
NET = NET_2SW.replace('Ca 1 "h1"\n[1] "sw1"[1]\n', 'Ca 2 "h1"\n[1] "sw1"[1]\n[2] "sw3"[1]\n') + \
    'Switch 4 "sw3"\n[1] "h1"[2]\n[2] "h5"[1]\nCa 1 "h5"\n[1] "sw3"[2]\n'
assert 'Ca 2 "h1"' in NET
_INSTANCES = itertools.count()
PARTITIONS = "Default=0x7fff, ipoib : ALL=full;\nP1=0x8001, ipoib : h1=full, h3=full;\n"
# (the SM's partitions.conf names ports by GUID: filled in from the fabric below)


def _v4(i: int) -> str:
    return f"10.77.0.{i + 1}"


def _v6(i: int) -> str:
    return f"fd77::{i + 1}"


class IpoibHosts:
    """The fabric, the SM (softrdma's with the partitions.conf, or the real
    opensm with its default partition) and a daemon with ``--ipoib`` per
    host namespace of ``hosts``."""

    def __init__(self, tmp, hosts=HOSTS, sm: str = "softrdma"):
        need_root()
        if not shutil.which("ping"):            # (iputils-ping: a test dependency, as nftables)
            if os.environ.get("CI") == "true":
                pytest.fail("CI installs iputils-ping: this test must run")
            pytest.skip("needs ping (iputils-ping)")
        self.tag = f"{os.getpid() % 100000}{next(_INSTANCES)}"     # (two sets at once: the module's and another)
        self.tmp = tmp
        self.hosts = hosts
        self.ns: dict[str, str] = {}
        self.daemons: dict[str, RunningDaemon] = {}
        self.sm = None
        self.run_dirs: list[str] = []                 # (removed by close)
        self.fabric = IbFabric(tmp, NET)
        try:
            for h in hosts:
                self.add_host(h)
            # before any SM: the interface is there, without carrier (the port is not Active)
            self.carrier_before_sm = {h: [(i["ifname"], i["carrier"]) for i in self.ipoib(h)] for h in hosts}
            if sm == "softrdma":
                self.start_sm()
            else:
                self.fabric.sweep(sm)
                self.fabric.procs.remove(self.fabric.sm)           # (ended by the fabric's close)
                self.sm = self.fabric.sm
            for h in hosts:
                self.fabric.wait_active(self.run_dir(h))
            for h in hosts:
                i = HOSTS.index(h)
                self.ip(h, "addr", "add", f"{_v4(i)}/24", "dev", "ib0")
                self.ip(h, "addr", "add", f"{_v6(i)}/64", "dev", "ib0", "nodad")
            for h in hosts:
                wait_for(lambda h=h: self.ipoib(h)[0]["carrier"], 60, f"ib0 of {h} with its carrier")
        except BaseException:
            self.close()
            raise

    def add_host(self, h: str) -> None:
        """Host ``h``: its network namespace, a daemon with ``--ipoib`` in it, its mlx5_0 on CA ``h``."""
        ns = self.ns[h] = f"ipoib-{h}-{self.tag}"
        sh("ip", "netns", "del", ns, check=False)
        sh("ip", "netns", "add", ns)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        rd = shm_dir(f"ipoib-{h}-{self.tag}")
        self.run_dirs.append(rd)
        os.makedirs(rd, exist_ok=True)
        self.daemons[h] = RunningDaemon(rd, devices=(), args=("--ipoib",), prefix=("ip", "netns", "exec", ns))
        self.fabric.attach(rd, h)

    def run_dir(self, h: str) -> str:
        return self.daemons[h].run_dir

    def start_sm(self, *extra: str) -> None:
        """softrdma's SM with the partitions.conf (``extra``: more options, -l 1)."""
        from wait_helpers import wait_for as wf
        guids = {h: link(self.run_dir(h), "mlx5_0")["ib"]["port_guid"].replace(":", "") for h in self.hosts}
        conf = self.tmp / "partitions.conf"
        conf.write_text(PARTITIONS.replace("h1=full", f"0x{guids['h1']}=full").replace(
            "h3=full", f"0x{guids['h3']}=full"))
        log = self.tmp / "osm.log"
        if log.exists():
            log.unlink()
        self.sm = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-s", "0", "-P", str(conf),
                                    "-f", str(log), *extra], cwd=self.tmp, env=self.fabric.env(),
                                   stdout=open(self.tmp / "sm.out", "w"), stderr=subprocess.STDOUT)
        wf(lambda: log.exists() and "SUBNET UP" in log.read_text(), 60, "SUBNET UP", proc=self.sm)

    def stop_sm(self) -> None:
        stop(self.sm)
        self.sm = None

    def ip(self, h: str, *args: str) -> str:
        return sh("ip", "netns", "exec", self.ns[h], "ip", *args).stdout

    def run(self, h: str, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "SOFTRDMA_RUN": self.run_dir(h)}
        r = subprocess.run(["ip", "netns", "exec", self.ns[h], *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    def ipoib(self, h: str, name: str = "") -> list[dict]:
        r = control(self.run_dir(h), "ipoib", action="show", ifname=name)
        assert r["errno"] == 0, r
        return r["interfaces"]

    def close(self) -> None:
        for d in self.daemons.values():
            d.stop()
        if self.sm is not None:
            stop(self.sm)
        self.fabric.close()
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)
        for rd in self.run_dirs:
            shutil.rmtree(rd, ignore_errors=True)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    n = IpoibHosts(tmp_path_factory.mktemp("ipoib"))
    yield n
    n.close()


PAIRS = [(a, b) for a in HOSTS for b in HOSTS if a != b]


def ping(net, a: str, b: str, six: bool = False, count: int = 2) -> str:
    i = HOSTS.index(b)
    dst = _v6(i) if six else _v4(i)
    r = net.run(a, "ping", *(["-6"] if six else []), "-c", str(count), "-i", "0.2", "-W", "5", dst, check=False)
    assert r.returncode == 0, (a, b, r.stdout, r.stderr)
    return r.stdout


def test_ib0_mirrors_the_port(net):
    assert net.carrier_before_sm == {h: [("ib0", False)] for h in HOSTS}
    for i, h in enumerate(HOSTS):
        (ifc,) = net.ipoib(h)
        d = link(net.run_dir(h), "mlx5_0")
        gid = d["gids"][0]
        assert ifc["ifname"] == "ib0" and ifc["mode"] == "datagram" and ifc["pkey"] == 0xFFFF
        assert ifc["address"] == f"80:{ifc['qpn']:06x}"[:3] + ":".join(
            re.findall("..", f"{ifc['qpn']:06x}")) + ":" + ":".join(re.findall("..", gid))
        assert ifc["mtu"] == 2044 and ifc["qkey"] == 0x0B1B and ifc["carrier"]
        out = net.ip(h, "link", "show", "ib0")
        assert "mtu 2044" in out and "LOWER_UP" in out and "NO-CARRIER" not in out
        sysfs = os.path.join(net.run_dir(h), "sys", "net", "ib0")
        read = lambda f: open(os.path.join(sysfs, f)).read().strip()     # noqa: E731
        assert read("address") == ifc["address"] and read("mode") == "datagram"
        assert read("pkey") == "0xffff" and read("umcast") == "0" and read("type") == "32"


@pytest.mark.parametrize("six", [False, True], ids=["ipv4", "ipv6"])
def test_ping_between_every_pair(net, six):
    for a, b in PAIRS:
        out = ping(net, a, b, six)
        assert " 0% packet loss" in out


def test_arp_entries_have_ipoib_addresses(net):
    ping(net, "h1", "h2", count=1)
    h2 = net.ipoib("h2")[0]
    out = net.run("h1", sys.executable, "-m", "softrdma", "ip", "neigh", "show", "dev", "ib0").stdout
    assert re.search(rf"^{re.escape(_v4(1))} lladdr {re.escape(h2['address'])} REACHABLE$", out, re.M), out
    assert len(h2["address"].split(":")) == 20


def test_ibdump_on_an_ib_host_shows_ipoib_traffic_decoded(net, tshark):
    """ibdump on h1's IB device during pings over ib0: the pcap is what the
    real ibdump writes for an IB port (link type ERF, records of type
    INFINIBAND, the frames LRH to VCRC); tshark decodes the LRH, the BTH,
    the DETH, and inside the IPoIB payload the ARP exchange for an address
    nobody asked for yet and the ICMP echoes.  The daemon keeps serving
    during and after the capture."""
    import signal
    from wait_helpers import wait_line
    pcap = str(net.tmp / "ib0.pcap")
    new = "10.77.0.52"                               # h2's: its ARP exchange is in the capture
    net.ip("h2", "addr", "add", f"{new}/24", "dev", "ib0")
    env = {**os.environ, "SOFTRDMA_RUN": net.run_dir("h1"), "SOFTRDMA_AUTOSTART": "0"}
    dump = subprocess.Popen(["ip", "netns", "exec", net.ns["h1"], sys.executable, "-m", "softrdma", "ibdump",
                             "-d", "mlx5_0", "-w", pcap], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        _, head = wait_line(dump.stdout, r"^Ready to capture", proc=dump)
        assert " Link layer                     : Infiniband\n" in head, head
        ping(net, "h1", "h2", count=2)
        r = net.run("h1", "ping", "-c", "1", "-W", "5", new, check=False)
        assert r.returncode == 0, (r.stdout, r.stderr)
    finally:
        dump.send_signal(signal.SIGINT)
        out, err = dump.communicate(timeout=30)
    assert dump.returncode == 0, (out, err)
    n = int(re.search(r"Captured:\s+(\d+) packets", err).group(1))
    with open(pcap, "rb") as f:
        assert f.read(24)[20:24] == (197).to_bytes(4, "little")        # LINKTYPE_ERF, as ibdump's for IB
    fields = ("frame.protocols", "erf.types.type", "infiniband.lrh.slid", "infiniband.lrh.dlid",
              "infiniband.bth.opcode", "ip.src", "ip.dst", "icmp.type", "arp.opcode", "arp.dst.proto_ipv4")
    r = subprocess.run([tshark, "-r", pcap, "-T", "fields", "-E", "separator=|", *sum((["-e", f] for f in fields), [])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [dict(zip(fields, line.split("|"))) for line in r.stdout.splitlines()]
    assert len(rows) == n and n > 0
    assert all(x["erf.types.type"] == "21" and x["frame.protocols"].startswith("erf:infiniband") for x in rows), rows
    lids = {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in ("h1", "h2")}
    icmp = [x for x in rows if x["icmp.type"]]
    # echo requests h1 -> h2 and the replies, each a UD SEND (opcode 100) between the two LIDs
    for t, src, dst in (("8", "h1", "h2"), ("0", "h2", "h1")):
        got = [x for x in icmp if x["icmp.type"] == t and x["ip.dst"] in (_v4(1), new, _v4(0))]
        assert len(got) >= 3, icmp
        assert all(x["infiniband.bth.opcode"] == "100" and int(x["infiniband.lrh.slid"]) == lids[src]
                   and int(x["infiniband.lrh.dlid"]) == lids[dst] for x in got), got
        assert all("infiniband:ethertype:ip:icmp" in x["frame.protocols"] for x in got), got
    arp = {x["arp.opcode"] for x in rows if x["arp.opcode"] and x["arp.dst.proto_ipv4"] in (new, _v4(0))}
    assert arp == {"1", "2"}, rows                   # the request (to the broadcast group) and the reply
    # the daemon took every frame and still serves: the control socket answers, the link works
    assert net.daemons["h1"].proc.poll() is None
    assert net.ipoib("h1")[0]["carrier"]
    ping(net, "h1", "h2", count=1)
    # no ERF header: an IB port cannot be dumped so, as the real tool says
    r = net.run("h1", sys.executable, "-m", "softrdma", "ibdump", "-d", "mlx5_0", "-s", "--erf", "0", "-w",
                str(net.tmp / "x.pcap"), check=False)
    assert (r.returncode, r.stderr) == (255, "-E- Can not dump Infiniband traffic without an ERF header "
                                             "(--erf 0)\n"), r.stderr


def tcp_transfer(net, a: str, b: str, nbytes: int, timeout: float) -> None:
    """``nbytes`` of random data from a to b over TCP on ib0 (Python sockets
    in the namespaces): the receiver's SHA-256 is the sender's."""
    from wait_helpers import free_port
    port = free_port()
    dst = _v4(HOSTS.index(b))
    server = ("import socket,hashlib,sys\n"
              f"s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('{dst}',{port}));"
              " s.listen(1); print('listening', flush=True)\n"
              "c,_=s.accept(); h=hashlib.sha256(); n=0\n"
              "while True:\n b=c.recv(1<<20)\n if not b: break\n h.update(b); n+=len(b)\n"
              "print(n, h.hexdigest(), flush=True)\n")
    srv = subprocess.Popen(["ip", "netns", "exec", net.ns[b], sys.executable, "-c", server], stdout=subprocess.PIPE,
                           text=True)
    try:
        assert srv.stdout.readline().strip() == "listening"
        client = ("import socket,hashlib,os\n"
                  f"data=os.urandom({nbytes}); print(hashlib.sha256(data).hexdigest(), flush=True)\n"
                  f"c=socket.create_connection(('{dst}',{port}), timeout=30); c.sendall(data); c.close()\n")
        r = net.run(a, sys.executable, "-c", client, timeout=timeout)
        got = srv.stdout.readline().split()
        srv.wait(timeout)
        assert got == [str(nbytes), r.stdout.strip()]
    finally:
        stop(srv)


def test_tcp_transfer_is_byte_exact(net):
    tcp_transfer(net, "h1", "h3", 8 << 20, 120)


@pytest.mark.slow
def test_tcp_transfer_of_100_mb_is_byte_exact(net):
    tcp_transfer(net, "h2", "h3", 100 << 20, 600)


MC_RECV = """
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("239.1.2.3", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton("239.1.2.3") + socket.inet_aton(sys.argv[2]))
print("joined", flush=True); s.settimeout(float(sys.argv[3]))
try:
    print(s.recv(100).decode(), flush=True)
except socket.timeout:
    print("nothing", flush=True)
"""


def test_ip_multicast_goes_to_the_members_group(net):
    """h3 joins 239.1.2.3 on ib0: its interface joins the IB group
    ff12:401b:ffff::f01:203 within a second, and h1's datagrams to the IP
    group reach it; h2, no member, is not in the IB group."""
    from wait_helpers import free_port
    port = str(free_port("udp"))
    rx = {h: subprocess.Popen(["ip", "netns", "exec", net.ns[h], sys.executable, "-c", MC_RECV, port,
                               _v4(HOSTS.index(h)), "20"], stdout=subprocess.PIPE, text=True)
          for h in ("h3",)}
    try:
        for p in rx.values():
            assert p.stdout.readline().strip() == "joined"
        wait_for(lambda: "ff12:401b:ffff::f01:203" in net.ipoib("h3")[0]["groups"], 10, "h3's IB group join")
        send = ("import socket, sys, time\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('{_v4(0)}'))\n"
                f"for _ in range(200):\n s.sendto(b'hello group', ('239.1.2.3', {port})); time.sleep(0.1)\n")
        # (until the member has one: the SM programs the MFTs after the join)
        tx = subprocess.Popen(["ip", "netns", "exec", net.ns["h1"], sys.executable, "-c", send])
        try:
            assert rx["h3"].stdout.readline().strip() == "hello group"
        finally:
            stop(tx)
        assert net.ipoib("h3")[0]["counters"]["rx_multicast"] > 0
        assert "ff12:401b:ffff::f01:203" not in net.ipoib("h2")[0]["groups"]
    finally:
        for p in rx.values():
            stop(p)


def test_link_show_has_the_infiniband_addresses(net):
    (ifc,) = net.ipoib("h1", "ib0")
    out = net.run("h1", sys.executable, "-m", "softrdma", "ip", "-s", "-d", "link", "show", "ib0").stdout
    assert f"link/infiniband {ifc['address']} brd {ifc['broadcast']}" in out
    assert ifc["broadcast"] == "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"
    assert "ipoib pkey  0xffff mode  datagram umcast  0000" in out
    assert ifc["counters"]["rx_drop_qkey"] == 0
    m = re.search(r"IPoIB ARP: arp_tx (\d+)  arp_rx (\d+)", out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 0, out
    assert re.search(r"RX:.*\n\s+(\d+)\s+(\d+)", out)         # the kernel's own counters, as ever


def test_a_child_interface_reaches_its_partition_only(net):
    """P1 (0x8001) has h1 and h3: their ib0.8001 children ping; h2, outside
    P1, gets a child whose carrier never comes (the SA refuses its join),
    and nothing of P1 reaches it."""
    for i, h in enumerate(HOSTS):
        net.run(h, sys.executable, "-m", "softrdma", "ip", "link", "add", "link", "ib0", "name", "ib0.8001",
                "type", "ipoib", "pkey", "0x8001")
        net.ip(h, "addr", "add", f"10.78.0.{i + 1}/24", "dev", "ib0.8001")
    for h in ("h1", "h3"):
        wait_for(lambda h=h: net.ipoib(h, "ib0.8001")[0]["carrier"], 60, f"ib0.8001 of {h} with its carrier")
    (c1,) = net.ipoib("h1", "ib0.8001")
    assert c1["pkey"] == 0x8001 and c1["parent"] == "ib0" and c1["qpn"] != net.ipoib("h1", "ib0")[0]["qpn"]
    assert c1["broadcast"].startswith("00:ff:ff:ff:ff:12:40:1b:80:01:")
    r = net.run("h1", "ping", "-c", "2", "-i", "0.2", "-W", "5", "10.78.0.3", check=False)
    assert r.returncode == 0, r.stdout
    r = net.run("h1", "ping", "-c", "1", "-W", "1", "10.78.0.2", check=False)
    assert r.returncode != 0                                   # h2 is not in P1
    (c2,) = net.ipoib("h2", "ib0.8001")
    assert not c2["carrier"] and c2["counters"]["rx_packets"] == 0
    assert "NO-CARRIER" in net.ip("h2", "link", "show", "ib0.8001")
    assert net.run("h2", sys.executable, "-m", "softrdma", "ip", "link", "add", "link", "ib0", "name", "ib0.x",
                   "type", "ipoib", "pkey", "0x8001", check=False).stderr == "RTNETLINK answers: File exists\n"
    for h in HOSTS:
        net.run(h, sys.executable, "-m", "softrdma", "ip", "link", "del", "ib0.8001")
        assert [i["ifname"] for i in net.ipoib(h)] == ["ib0"]
    assert not os.path.exists(os.path.join(net.run_dir("h1"), "sys", "net", "ib0.8001"))
    # the sysfs way: echo 0x8001 > /sys/class/net/ib0/create_child, then delete_child
    files = os.path.join(net.run_dir("h1"), "sys", "net", "ib0")
    with open(os.path.join(files, "create_child"), "w") as f:
        f.write("0x8001\n")
    wait_for(lambda: [i["ifname"] for i in net.ipoib("h1")] == ["ib0", "ib0.8001"], 10, "ib0.8001 by create_child")
    with open(os.path.join(files, "delete_child"), "w") as f:
        f.write("0x8001\n")
    wait_for(lambda: [i["ifname"] for i in net.ipoib("h1")] == ["ib0"], 10, "ib0.8001 gone by delete_child")


def test_the_carrier_follows_the_port(net):
    """h2's link down: its port leaves Active, ib0 loses its carrier; up
    again (the SM's sweep makes the port Active), the carrier and the
    connectivity come back."""
    r = net.fabric.fabric("link", "down", "sw1", "2")
    assert r.returncode == 0, r.stderr
    try:
        wait_for(lambda: not net.ipoib("h2")[0]["carrier"], 30, "h2's ib0 without carrier")
        assert "NO-CARRIER" in net.ip("h2", "link", "show", "ib0")
    finally:
        r = net.fabric.fabric("link", "up", "sw1", "2")
        assert r.returncode == 0, r.stderr
    wait_for(lambda: net.ipoib("h2")[0]["carrier"], 60, "h2's ib0 with its carrier again")
    wait_for(lambda: net.run("h1", "ping", "-c", "1", "-W", "1", _v4(1), check=False).returncode == 0, 30,
             "h1 -> h2 again")


def test_an_sm_restart_asks_the_clients_to_reregister(net):
    """A new SM keeps every LID (its guid2lid cache) but knows no multicast
    member: its first sweep as master sets PortInfo.ClientReregister on every
    port (as opensm's), the fabric hands the bit to the device, the device
    raises IBV_EVENT_CLIENT_REREGISTER to its open contexts (a pyverbs
    program sees it) and IPoIB joins its groups again -- so a neighbour
    nobody has asked for yet is found by ARP over the new SM's broadcast
    group."""
    from test_ib_cma import pyverbs_env
    from wait_helpers import wait_line
    from softrdma.enums import IBV_EVENT_CLIENT_REREGISTER
    prog = os.path.join(os.path.dirname(__file__), "pyverbs_programs", "async_events.py")
    before = {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in HOSTS}
    joins = {h: net.ipoib(h)[0]["counters"]["mcast_joins"] for h in HOSTS}
    watch = subprocess.Popen(["ip", "netns", "exec", net.ns["h1"], sys.executable, prog, "mlx5_0",
                              str(IBV_EVENT_CLIENT_REREGISTER)], env=pyverbs_env(net, "h1"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_line(watch.stdout, "^ready$", proc=watch)
        net.stop_sm()
        net.start_sm()
        out, err = watch.communicate(timeout=60)
    finally:
        stop(watch)
    assert watch.returncode == 0 and str(IBV_EVENT_CLIENT_REREGISTER) in out.split(), (out, err)
    assert {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in HOSTS} == before
    for h in HOSTS:                                  # each interface joined its groups again
        wait_for(lambda h=h: net.ipoib(h)[0]["counters"]["mcast_joins"] > joins[h]
                 and net.ipoib(h)[0]["carrier"], 30, f"{h}'s joins after the reregister")
    fresh = "10.77.0.63"
    net.ip("h3", "addr", "add", f"{fresh}/24", "dev", "ib0")
    wait_for(lambda: net.run("h1", "ping", "-c", "1", "-W", "1", fresh, check=False).returncode == 0, 30,
             "h1 -> h3's new address (ARP over the new SM's broadcast group)")
    ping(net, "h2", "h1", count=1)


def test_an_sm_restart_with_new_lids_costs_a_bounded_outage(net):
    """The SM ends; a new one with LMC 1 moves the LIDs (an even one may stay).  The ports'
    LID_CHANGE makes each interface join its groups again and ask the SA
    for new paths: pings pass again within BOUND_S of the new SUBNET UP."""
    bound_s = 30.0
    before = {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in HOSTS}
    net.stop_sm()
    net.start_sm("-l", "1")
    t0 = time.monotonic()
    for h in HOSTS:
        wait_for(lambda h=h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lmc"] == 1, 60, f"{h}'s LMC 1 LIDs")
    after = {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in HOSTS}
    assert sum(after[h] != before[h] for h in HOSTS) >= 2, (before, after)       # (an aligned one may stay)

    def all_ping():
        for a, b in PAIRS:
            r = net.run(a, "ping", "-c", "1", "-W", "1", _v4(HOSTS.index(b)), check=False)
            if r.returncode:
                return False
        return True
    wait_for(all_ping, bound_s, "IPv4 connectivity back after the SM restart")
    assert time.monotonic() - t0 < bound_s
    for a, b in PAIRS:
        ping(net, a, b, six=True, count=1)
    lids = {h: link(net.run_dir(h), "mlx5_0")["port_attr"]["lid"] for h in HOSTS}
    paths = net.ipoib("h1")[0]["paths"]
    assert sorted(p["dlid"] for p in paths.values()) == sorted(lids[h] for h in ("h2", "h3"))


def test_rdma_cm_tools_by_ipoib_address(net):
    """rdma_cm on IB devices by IP: rdma_bind_addr on h3's ib0 address
    binds its IB port; rdma_resolve_addr from h2 asks the IPoIB neighbour
    (a cold cache: ARP first) and resolves onto h2's IB port with h3's GID;
    the route is the SA's; the IB CM connects.  rping (its data checked),
    ucmatose and ib_write_bw -R run between the two hosts by that address."""
    from daemon_helpers import wait_cm_listening
    from test_tool_perftest_rdma_cm import check, pair
    from wait_helpers import free_port
    dst = "10.77.0.33"                               # an address of h3's nobody has asked for yet
    net.ip("h3", "addr", "add", f"{dst}/24", "dev", "ib0")
    wait_for(lambda: net.ipoib("h3")[0] and dst in net.ip("h3", "addr", "show", "ib0"), 5, "h3's address")
    assert all(n["dst"] != dst for n in net.ipoib("h2")[0]["neighbours"])
    env = {h: {**os.environ, "SOFTRDMA_RUN": net.run_dir(h), "SOFTRDMA_AUTOSTART": "0"} for h in HOSTS}

    def popen(i, cmd, **kw):                          # 0: the server, on h3; 1: the client, on h2
        h = ("h3", "h2")[i]
        return subprocess.Popen(["ip", "netns", "exec", net.ns[h], *cmd], env=env[h], **kw)

    for tool, sargs, cargs in (("rping", ["-s", "-a", dst, "-C", "3", "-v"], ["-c", "-a", dst, "-C", "3", "-v"]),
                               ("ucmatose", ["-b", dst, "-C", "2"], ["-s", dst, "-C", "2"])):
        port = str(free_port())
        srv = popen(0, [sys.executable, "-m", "softrdma", tool, *sargs, "-p", port], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True)
        try:
            wait_cm_listening(net.run_dir("h3"), int(port), srv)
            cli = popen(1, [sys.executable, "-m", "softrdma", tool, *cargs, "-p", port], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
            cout, cerr = cli.communicate(timeout=120)
            sout, _ = srv.communicate(timeout=60)
        finally:
            stop(srv)
        assert cli.returncode == 0 and srv.returncode == 0, (tool, cout, cerr, sout)
        if tool == "rping":
            assert cout.count("ping data: rdma-ping-") == 3, cout
        else:
            assert "data transfers complete" in cout, cout
    assert any(n["dst"] == dst for n in net.ipoib("h2")[0]["neighbours"])      # rdma_cm's ARP
    check("ib_write_bw", pair(popen, "ib_write_bw", ["-R", "-d", "mlx5_0", "-n", "200"], dst, net.run_dir("h3")))


# -- connected mode (RFC 4755) -------------------------------------------------------------------------
def set_attr(net, h: str, attr: str, value: str, name: str = "ib0") -> dict:
    r = control(net.run_dir(h), "ipoib", action="set", ifname=name, attr=attr, value=value)
    assert r["errno"] == 0, r
    return r["interfaces"][0]


def cm_counters(net, h: str) -> dict:
    return net.ipoib(h)[0]["counters"]


def test_connected_mode_every_pair_pings_over_rc(net):
    """``echo connected > .../ib0/mode`` (h1 through the sysfs file, the
    others by the control command): the MTU goes to 65520; the address
    carries the RC flag.  Pings of 3000 bytes -- more than the UD MTU of
    2044 -- pass between every pair, IPv4 and IPv6: they go over the RC
    connections each host made to the others; an rping by IPoIB address
    still works."""
    from daemon_helpers import wait_cm_listening
    from wait_helpers import free_port
    sysfs = os.path.join(net.run_dir("h1"), "sys", "net", "ib0")
    with open(os.path.join(sysfs, "mode"), "w") as f:
        f.write("connected\n")
    wait_for(lambda: net.ipoib("h1")[0]["mode"] == "connected", 10, "h1's mode from its sysfs file")
    net.run("h2", sys.executable, "-m", "softrdma", "ip", "link", "set", "dev", "ib0", "type", "ipoib", "mode",
            "connected")
    assert set_attr(net, "h3", "mode", "connected")["mode"] == "connected"
    for h in HOSTS:
        ifc = net.ipoib(h)[0]
        assert ifc["mtu"] == 65520 and ifc["address"].startswith("80:"), ifc
        assert "mtu 65520" in net.ip(h, "link", "show", "ib0")
        wait_for(lambda h=h: open(os.path.join(net.run_dir(h), "sys", "net", "ib0", "mode")).read() == "connected\n",
                 5, f"{h}'s sysfs mode")
    before = {h: cm_counters(net, h) for h in HOSTS}
    for six in (False, True):
        for a, b in PAIRS:
            dst = _v6(HOSTS.index(b)) if six else _v4(HOSTS.index(b))
            r = net.run(a, "ping", *(["-6"] if six else []), "-c", "1", "-W", "5", "-s", "3000", dst, check=False)
            assert r.returncode == 0 and " 0% packet loss" in r.stdout, (a, b, r.stdout, r.stderr)
    for h in HOSTS:
        c = cm_counters(net, h)
        assert c["cm_tx_packets"] - before[h]["cm_tx_packets"] >= 4, c          # 2 peers x 2 families
        assert c["cm_rx_packets"] - before[h]["cm_rx_packets"] >= 4, c
        conns = net.ipoib(h)[0]["connections"]
        assert sorted(x["dir"] for x in conns if x["up"]) == ["rx", "rx", "tx", "tx"], conns
        assert all(x["mtu"] == 65524 for x in conns if x["dir"] == "tx"), conns
    out = net.run("h2", sys.executable, "-m", "softrdma", "ip", "-d", "-s", "link", "show", "ib0").stdout
    assert "mtu 65520" in out and "mode  connected" in out and "IPoIB CM: cm_tx_packets " in out, out
    port = str(free_port())
    env = {h: {**os.environ, "SOFTRDMA_RUN": net.run_dir(h), "SOFTRDMA_AUTOSTART": "0"} for h in HOSTS}
    srv = subprocess.Popen(["ip", "netns", "exec", net.ns["h3"], sys.executable, "-m", "softrdma", "rping", "-s",
                            "-a", _v4(2), "-C", "2", "-v", "-p", port], env=env["h3"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        wait_cm_listening(net.run_dir("h3"), int(port), srv)
        r = net.run("h1", sys.executable, "-m", "softrdma", "rping", "-c", "-a", _v4(2), "-C", "2", "-v", "-p", port,
                    timeout=120)
        assert r.stdout.count("ping data: rdma-ping-") == 2, r.stdout
        srv.communicate(timeout=60)
    finally:
        stop(srv)


def test_connected_mode_tcp_transfer_of_100_mb_goes_over_rc(net):
    """100 MB over TCP h2 -> h3 with MTU 65520: byte-exact, carried by h2's
    RC connection to h3 (its SEND bytes grow by at least the data; the
    segments are larger than the UD path could carry)."""
    tx0 = cm_counters(net, "h2")["cm_tx_bytes"]
    tcp_transfer(net, "h2", "h3", 100 << 20, 300)
    assert cm_counters(net, "h2")["cm_tx_bytes"] - tx0 >= 100 << 20
    assert net.ipoib("h2")[0]["mode"] == "connected"


def test_idle_connections_end_and_come_back(net):
    """With a short idle time (``cm_tx_idle``), h1's connection to h2 ends
    after the pings (the DREQ takes h2's half with it); the next ping
    connects again."""
    def tx_to_h2():
        gid = link(net.run_dir("h2"), "mlx5_0")["gids"][0]
        return [x for x in net.ipoib("h1")[0]["connections"] if x["dir"] == "tx" and x["up"]
                and ipaddr(x["peer"]) == gid]
    ping(net, "h1", "h2", count=1)
    assert tx_to_h2()
    c0 = cm_counters(net, "h1")
    h1_gid = link(net.run_dir("h1"), "mlx5_0")["gids"][0]

    def rx_from_h1():
        return [x for x in net.ipoib("h2")[0]["connections"] if x["dir"] == "rx" and ipaddr(x["peer"]) == h1_gid]
    assert rx_from_h1()
    set_attr(net, "h1", "cm_tx_idle", "1")
    try:
        wait_for(lambda: not tx_to_h2(), 10, "h1's idle connection to h2 ended")
        wait_for(lambda: not rx_from_h1(), 10, "h2's half ended by the DREQ")
        assert cm_counters(net, "h1")["cm_tx_idle_teardowns"] > c0["cm_tx_idle_teardowns"]
        set_attr(net, "h1", "cm_tx_idle", "60")
        r = net.run("h1", "ping", "-c", "2", "-i", "0.2", "-W", "5", "-s", "3000", _v4(1), check=False)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert tx_to_h2() and cm_counters(net, "h1")["cm_tx_connects"] > c0["cm_tx_connects"]
    finally:
        set_attr(net, "h1", "cm_tx_idle", "60")


def ipaddr(text: str) -> str:
    import ipaddress
    return ipaddress.IPv6Address(text).packed.hex()


def test_datagram_and_connected_hosts_talk(net):
    """h2 back in datagram mode (MTU 2044 again, its connections to others
    gone) and h1 in connected mode: pings and a TCP transfer pass both ways
    -- h1 sends over its RC connection to h2 (h2 still takes connections),
    h2 sends UD datagrams."""
    info = set_attr(net, "h2", "mode", "datagram")
    assert info["mode"] == "datagram" and info["mtu"] == 2044
    assert "mtu 2044" in net.ip("h2", "link", "show", "ib0")
    assert not [x for x in net.ipoib("h2")[0]["connections"] if x["dir"] == "tx"]
    c1, c2 = cm_counters(net, "h1"), cm_counters(net, "h2")
    ping(net, "h1", "h2", count=2)
    ping(net, "h2", "h1", six=True, count=2)
    tcp_transfer(net, "h1", "h2", 4 << 20, 120)
    tcp_transfer(net, "h2", "h1", 1 << 20, 120)
    n1, n2 = cm_counters(net, "h1"), cm_counters(net, "h2")
    assert n1["cm_tx_bytes"] - c1["cm_tx_bytes"] >= 4 << 20
    assert n2["cm_tx_packets"] == c2["cm_tx_packets"] and n2["tx_packets"] > c2["tx_packets"]


def test_a_rejected_connection_falls_back_to_datagrams(net):
    """h2 takes no more connections (``cm_max_conn_qp`` 0): h1's REQ gets a
    REJ, h1 sends h2 UD datagrams; a datagram larger than the UD MTU is
    answered with "fragmentation needed" (mtu 2044), and TCP still gets through."""
    set_attr(net, "h2", "cm_max_conn_qp", "0")
    try:
        set_attr(net, "h1", "mode", "datagram")           # (h1's connection to h2 ends)
        set_attr(net, "h1", "mode", "connected")
        c1, c2 = cm_counters(net, "h1"), cm_counters(net, "h2")
        # the first datagram waits for the connection and is lost with it (as the kernel's)
        net.run("h1", "ping", "-c", "1", "-W", "1", _v4(1), check=False)
        wait_for(lambda: cm_counters(net, "h1")["cm_tx_rejects"] > c1["cm_tx_rejects"], 10, "h1's REJ")
        ping(net, "h1", "h2", count=1)
        assert cm_counters(net, "h2")["cm_rx_rejects"] > c2["cm_rx_rejects"]
        r = net.run("h1", "ping", "-c", "3", "-i", "0.3", "-W", "2", "-M", "do", "-s", "3000", _v4(1), check=False)
        assert re.search(r"mtu ?= ?2044", r.stdout + r.stderr), (r.stdout, r.stderr)
        assert cm_counters(net, "h1")["tx_too_big"] > c1["tx_too_big"]
        tcp_transfer(net, "h1", "h2", 1 << 20, 120)
    finally:
        set_attr(net, "h2", "cm_max_conn_qp", "128")
        for h in HOSTS:
            set_attr(net, h, "mode", "datagram")
    for h in HOSTS:
        assert net.ipoib(h)[0]["mtu"] == 2044




def test_a_second_port_gets_ib1(net):
    """``rdma link add mlx5_0/2`` on h1 (its CA's port 2, on a second
    subnet with host h5 and an SM bound to that port's GUID, as the usual
    per-port opensm script runs it): the daemon makes ``ib1`` on that port,
    as ipoib_add_port does for each port; ib1 joins the broadcast group
    through port 2's QP1 and gets its carrier and its own address (port 2's
    GID, with the RC flag: port 2 has its own IB CM agent).  h1 and h5 ping
    each other over it, in datagram mode and then with ib1 in connected
    mode: the ping goes over an RC connection from port 2."""
    import sm_helpers
    r = add_ib(net.run_dir("h1"), "mlx5_0/2", net.fabric.base, "h1", port=2)
    assert r["errno"] == 0, r
    port2 = lambda: next(p for p in link(net.run_dir("h1"), "mlx5_0")["ports"] if p["port"] == 2)   # noqa: E731
    net.add_host("h5")
    log = net.tmp / "osm-port2.log"
    env = {k: v for k, v in net.daemons["h1"].env.items() if not k.startswith(("IBSIM_", "SIM_"))}
    env.update(OSM_CACHE_DIR=str(net.tmp / "p2"), OSM_TMP_DIR=str(net.tmp / "p2"), PYTHONPATH=sm_helpers.SRC)
    sm2 = subprocess.Popen([sys.executable, "-m", "softrdma", "opensm", "-g", "0x" + port2()["ib"]["port_guid"].replace(
        ":", ""), "-s", "0", "-f", str(log)], env=env, stdout=open(net.tmp / "sm-port2.out", "w"),
        stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.exists() and "SUBNET UP" in log.read_text(), 60, "SUBNET UP on port 2's subnet", proc=sm2)
        net.fabric.wait_active(net.run_dir("h5"))
        wait_for(lambda: any(i["ifname"] == "ib1" and i["carrier"] for i in net.ipoib("h1")), 60,
                 "h1's ib1 with carrier")
        (ib1,) = net.ipoib("h1", "ib1")
        p2 = port2()
        assert ib1["port"] == 2 and ib1["mtu"] == 2044 and ib1["pkey"] == 0xFFFF
        assert ib1["address"].startswith("80:") and ib1["address"].replace(":", "").endswith(p2["gids"][0]), ib1
        assert open(os.path.join(net.run_dir("h1"), "sys", "net", "ib1", "dev_port")).read().strip() == "1"
        net.ip("h1", "addr", "add", "10.82.0.1/24", "dev", "ib1")
        net.ip("h5", "addr", "add", "10.82.0.5/24", "dev", "ib0")
        wait_for(lambda: net.ipoib("h5")[0]["carrier"], 60, "h5's ib0 with its carrier")
        wait_for(lambda: net.run("h5", "ping", "-c", "1", "-W", "1", "10.82.0.1", check=False).returncode == 0, 30,
                 "h5 -> h1's ib1")
        out = net.run("h1", "ping", "-c", "2", "-i", "0.2", "-W", "5", "10.82.0.5").stdout
        assert " 0% packet loss" in out, out
        (n,) = [x for x in net.ipoib("h5")[0]["neighbours"] if x["dst"] == "10.82.0.1"]
        assert n["lladdr"] == ib1["address"]
        assert [p["dlid"] for p in net.ipoib("h5")[0]["paths"].values()] == [p2["port_attr"]["lid"]]
        r = control(net.run_dir("h1"), "ipoib", action="set", ifname="ib1", attr="mode", value="connected")
        assert r["errno"] == 0, r
        before, before5 = net.ipoib("h1", "ib1")[0]["counters"], net.ipoib("h5")[0]["counters"]
        out = net.run("h1", "ping", "-c", "1", "-W", "5", "-s", "3000", "10.82.0.5").stdout
        assert " 0% packet loss" in out, out
        # h1 sent over its RC connection from port 2, h5 (datagram mode) took it on its RC receive side
        (ib1,) = net.ipoib("h1", "ib1")
        c, c5 = ib1["counters"], net.ipoib("h5")[0]["counters"]
        assert c["cm_tx_packets"] > before["cm_tx_packets"], c
        assert c5["cm_rx_packets"] > before5["cm_rx_packets"], c5
        assert [x["dir"] for x in ib1["connections"] if x["up"]] == ["tx"], ib1["connections"]
        # rdma_cm by IP address over ib1: the address resolves on port 2 (IPoIB's neighbour),
        # the route comes from port 2's SA, the connection from port 2's CM
        from daemon_helpers import wait_cm_listening
        from wait_helpers import free_port
        port = str(free_port())
        env5 = {**os.environ, "SOFTRDMA_RUN": net.run_dir("h5"), "SOFTRDMA_AUTOSTART": "0"}
        srv = subprocess.Popen(["ip", "netns", "exec", net.ns["h5"], sys.executable, "-m", "softrdma", "rping", "-s",
                                "-a", "10.82.0.5", "-C", "2", "-v", "-p", port], env=env5, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        try:
            wait_cm_listening(net.run_dir("h5"), int(port), srv)
            r = net.run("h1", sys.executable, "-m", "softrdma", "rping", "-c", "-a", "10.82.0.5", "-C", "2", "-v",
                        "-p", port, timeout=120)
            assert r.stdout.count("ping data: rdma-ping-") == 2, r.stdout
            srv.communicate(timeout=60)
        finally:
            stop(srv)
        # the port goes (``rdma link delete mlx5_0/2``): its interface with it, in the daemon and in the kernel
        r = control(net.run_dir("h1"), "link_delete", name="mlx5_0/2")
        assert r["errno"] == 0, r
        assert [i["ifname"] for i in net.ipoib("h1")] == ["ib0"]
        assert "ib1" not in sh("ip", "netns", "exec", net.ns["h1"], "ip", "-o", "link", "show").stdout
        assert not os.path.exists(os.path.join(net.run_dir("h1"), "sys", "net", "ib1"))
    finally:
        stop(sm2)


def test_with_the_real_opensm(tmp_path):
    """The real opensm (through libumad2sim) serves the joins and the path
    records as well: its default partition's broadcast group, a ping each way."""
    import sm_helpers
    if sm_helpers.missing_tools(["opensm"]):
        if os.environ.get("CI") == "true":
            pytest.fail("CI installs opensm and ibsim-utils: this test must run")
        pytest.skip("needs opensm and libumad2sim")
    n = IpoibHosts(tmp_path, ("h1", "h3"), sm="opensm")
    try:
        assert n.ipoib("h1")[0]["qkey"] == 0x0B1B and n.ipoib("h1")[0]["mtu"] == 2044
        for a, b in (("h1", "h3"), ("h3", "h1")):
            ping(n, a, b, count=1)
            ping(n, a, b, six=True, count=1)
        # opensm restarted: its first master sweep sets ClientReregister (the ports
        # say they support it); IPoIB joins again, and ARP works over its group
        joins = {h: n.ipoib(h)[0]["counters"]["mcast_joins"] for h in n.hosts}
        stop(n.sm)
        (n.tmp / "osm.log").unlink()
        n.fabric.sweep("opensm")
        n.fabric.procs.remove(n.fabric.sm)
        n.sm = n.fabric.sm
        for h in n.hosts:
            wait_for(lambda h=h: n.ipoib(h)[0]["counters"]["mcast_joins"] > joins[h] and n.ipoib(h)[0]["carrier"],
                     30, f"{h}'s joins after opensm's reregister")
        n.ip("h3", "addr", "add", "10.77.0.73/24", "dev", "ib0")
        wait_for(lambda: n.run("h1", "ping", "-c", "1", "-W", "1", "10.77.0.73", check=False).returncode == 0, 30,
                 "h1 -> h3's new address after the opensm restart")
    finally:
        n.close()
