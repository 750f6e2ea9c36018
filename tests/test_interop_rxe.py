"""Interop with the kernel's Soft-RoCE (rdma_rxe) in ../shared/interop/rxe-vm.

Opt-in (``pytest -m interop``): needs root and the guest running:

    cd ../shared/interop/rxe-vm && RXEVM_OUT=/some/dir ./build.sh && RXEVM_OUT=/some/dir ./start.sh
    RXEVM_OUT=/some/dir python -m pytest -m interop tests/test_interop_rxe.py

(``RXEVM_MTU=9000 ./start.sh`` for the 4096-byte path MTU cases.)  A softrdmad
runs in the harness's network namespace on its tap; the guest's
ibv_rc_pingpong / ibv_ud_pingpong talk to softrdma's, each side as server
and as client.  Every RoCE packet the host receives is captured with
tcpdump and its ICRC verified over the real IPv4 header (Verdict.FULL).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest

from softrdma.wire.icrc import Verdict, verify

pytestmark = pytest.mark.interop

HARNESS = os.environ.get("RXEVM_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                       "shared", "interop", "rxe-vm")
NETNS = os.environ.get("RXEVM_NETNS", "rxevm")
TAP = os.environ.get("RXEVM_TAP", "rxetap0")
GUEST_IP = os.environ.get("RXEVM_GUEST_IP", "10.77.0.2")
RUN = "/dev/shm/softrdma-interop"
#: the IPv6 ULAs the ``v6`` fixture puts on the tap and the guest's eth0
HOST_V6, GUEST_V6_ULA = os.environ.get("RXEVM_HOST_IP6", "fd77::1"), os.environ.get("RXEVM_GUEST_IP6", "fd77::2")
GUEST_V6: set = set()          # the guest's IPv6 addresses (packed), filled by the v6 fixture
LINE = re.compile(r"(\d+) iters in [\d.]+ seconds = [\d.]+ usec/iter")


def guest(cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(HARNESS, "guest.sh"), "-n", cmd], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def vm():
    if os.geteuid() != 0:
        pytest.fail("interop needs root")
    r = guest("cat /sys/class/net/eth0/mtu; rxe-gid-index", timeout=30)
    if r.returncode != 0:
        pytest.fail(f"the rxe guest is not running (start it with {HARNESS}/start.sh): {r.stderr.strip()}")
    mtu, gid_index = r.stdout.split()
    os.makedirs(RUN, exist_ok=True)
    env = {**os.environ, "SOFTRDMA_RUN": RUN, "SOFTRDMA_AUTOSTART": "0"}
    log = open(os.path.join(RUN, "daemon.log"), "w")
    d = subprocess.Popen(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", "daemon", "-f",
                          "--device", f"rxe0:{TAP}"], env=env, stdout=log, stderr=subprocess.STDOUT)
    end = time.monotonic() + 15
    while not os.path.exists(os.path.join(RUN, "softrdmad.pid")):
        assert d.poll() is None and time.monotonic() < end, open(log.name).read()
        time.sleep(0.05)
    yield {"mtu": int(mtu), "gid_index": int(gid_index), "env": env}
    d.terminate()
    d.wait(10)
    shutil.rmtree(RUN, ignore_errors=True)


def _wait_guest_listening(t, port: int = 18515, rdma_cm: bool = False, timeout: float = 60) -> None:
    """Until the guest's tool (run by thread ``t``) listens on TCP ``port``,
    or with an rdma_cm ID on ``port`` (``rdma resource show cm_id``): its
    start over ssh under TCG takes from one to several seconds."""
    end = time.monotonic() + timeout
    probe = (f"rdma resource show cm_id | grep -q 'state LISTEN.*src-addr [^ ]*:{port} '" if rdma_cm
             else f"ss -Hltn 'sport = :{port}' | grep -q LISTEN")
    while guest(probe, timeout=30).returncode != 0:
        assert t.is_alive() and time.monotonic() < end, "the guest's server never listened"


def _wait_host_listening(vm, host, port: int, rdma_cm: bool, timeout: float = 60, banner: str = "") -> None:
    """Until softrdma's server ``host`` listens: on TCP ``port`` (seen in
    its namespace's /proc/PID/net/tcp*), or with an rdma_cm ID in LISTEN on
    it (``rdma resource show cm_id``, which lists IDs bound to an address);
    an rdma_cm server bound to the wildcard: until it printed ``banner``,
    the line it prints as it starts to listen."""
    end = time.monotonic() + timeout
    while True:
        if rdma_cm and banner:
            if host.printed(banner):
                return
        elif rdma_cm:
            r = subprocess.run(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", "rdma", "resource",
                                "show", "cm_id"], env=vm["env"], capture_output=True, text=True, timeout=60)
            if re.search(rf"state LISTEN .*src-addr \S+:{port} ", r.stdout):
                return
        else:
            for name in ("tcp", "tcp6"):
                try:
                    rows = open(f"/proc/{host.pid}/net/{name}").read().splitlines()[1:]
                except OSError:
                    rows = []
                if any(r.split()[3] == "0A" and int(r.split()[1].rsplit(":", 1)[1], 16) == port for r in rows):
                    return
        assert host.poll() is None and time.monotonic() < end, "softrdma's server never listened"
        time.sleep(0.1)


class _Host:
    """A softrdma tool in the namespace whose output a thread collects as it
    comes (so a test can wait for a line), with Popen's interface."""

    def __init__(self, vm, args):
        import threading
        self.proc = subprocess.Popen(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", *args],
                                     env={**vm["env"], "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list = []
        self._t = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self._t.start()

    def __getattr__(self, name):
        return getattr(self.proc, name)

    def printed(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def communicate(self, timeout=None):
        self.proc.wait(timeout)
        self._t.join(10)
        return "".join(self.lines), None


def _host(vm, args):
    return _Host(vm, args)


def _capture(path):
    p = subprocess.Popen(["ip", "netns", "exec", NETNS, "tcpdump", "-i", TAP, "-B", "32768", "-w", path,
                          "--immediate-mode", "-U", "udp", "port", "4791"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:                   # capturing once it says so
        if "listening on" in line:
            break
    return p


def _verify_capture(path, v6_csums: list | None = None) -> tuple[int, int]:
    """(packets from the guest, of which ICRC FULLy verified), IPv4 and
    IPv6; ``v6_csums`` collects the UDP checksums of the guest's IPv6 ones."""
    data = open(path, "rb").read()
    magic = struct.unpack_from("<I", data)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    seen = ok = 0
    guest4 = bytes(int(x) for x in GUEST_IP.split("."))
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from(endian + "IIII", data, off)
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        ip = frame[14:]
        if frame[12:14] == b"\x08\x00" and ip[12:16] == guest4:
            ihl = (ip[0] & 0xF) * 4
        elif frame[12:14] == b"\x86\xdd" and ip[6] == 17 and ip[8:24] in GUEST_V6:
            ihl = 40
        else:
            continue
        sport, dport, ulen, csum = struct.unpack_from(">HHHH", ip, ihl)
        if dport != 4791:
            continue
        if ihl == 40 and v6_csums is not None:
            v6_csums.append(csum)
        seen += 1
        verdict, _ = verify(ip[ihl + 8:ihl + ulen], ip_hdr=ip[:ihl], sport=sport, dport=dport)
        ok += verdict is Verdict.FULL
    return seen, ok


@pytest.mark.parametrize("kind", ["rc", "ud"])
@pytest.mark.parametrize("softrdma_role", ["server", "client"])
@pytest.mark.parametrize("mtu", [1024, 4096])
def test_pingpong_with_kernel_rxe(vm, tmp_path, kind, softrdma_role, mtu):
    if mtu == 4096 and vm["mtu"] < 4200:
        pytest.fail("the 4096-byte cases need the guest started with RXEVM_MTU=9000")
    _pingpong(vm, tmp_path, kind, softrdma_role, mtu, vm["gid_index"], vm["gid_index"])


def _pingpong(vm, tmp_path, kind, softrdma_role, mtu, host_gid, guest_gid, v6_csums=None):
    """ibv_{kind}_pingpong, softrdma's (GID index ``host_gid``) against the
    guest's (``guest_gid``); the out-of-band TCP exchange is over IPv4
    either way, the RoCE traffic over the GIDs' addresses."""
    tool = f"ibv_{kind}_pingpong"
    iters = 100
    size = 4096 if kind == "rc" else (mtu if mtu < 4096 else 2048)
    common = ["-n", str(iters), "-s", str(size)]
    if kind == "rc":
        common += ["-m", str(mtu)]
    gcmd = f"timeout 60 {tool} -d rxe0 -g {guest_gid} {' '.join(common)}"
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    try:
        if softrdma_role == "server":
            host = _host(vm, [tool, "-g", str(host_gid), *common])
            _wait_host_listening(vm, host, 18515, False)
            g = guest(f"{gcmd} 10.77.0.1")
        else:
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(gcmd)))
            t.start()
            _wait_guest_listening(t)
            host = _host(vm, [tool, "-g", str(host_gid), *common, GUEST_IP])
            t.join(90)
            g = res["g"]
        out, _ = host.communicate(timeout=90)
    finally:
        time.sleep(0.5)
        cap.terminate()
        cap.wait(10)
    assert host.returncode == 0, out
    assert g.returncode == 0, g.stdout + g.stderr
    for text in (out, g.stdout):
        m = LINE.search(text)
        assert m and int(m.group(1)) == iters, text
    seen, ok = _verify_capture(pcap, v6_csums)
    assert seen >= iters and ok == seen, (seen, ok)
    print(f"{tool} mtu {mtu} softrdma {softrdma_role} GID {host_gid}/{guest_gid}: {seen} packets from rxe, all "
          f"ICRC FULL; host: {LINE.search(out).group(0)}; guest: {LINE.search(g.stdout).group(0)}")


_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)(\s+[\d.]+){5,7}\s*$", re.M)


@pytest.mark.parametrize("tool,size", [("ib_write_bw", 65536), ("ib_read_bw", 65536), ("ib_send_bw", 65536),
                                       ("ib_atomic_bw", 8), ("ib_write_lat", 2)])
@pytest.mark.parametrize("softrdma_role", ["client", "server"])
def test_perftest_with_kernel_rxe(vm, tmp_path, tool, size, softrdma_role):
    """softrdma's perftest against the guest's real perftest 4.5 (which says
    6.06 on the wire), both roles: the run completes on both sides and each
    prints its result row; every packet from rxe has a FULL ICRC."""
    _perftest(vm, tmp_path, tool, size, softrdma_role, [])


@pytest.mark.parametrize("tool,size", [("ib_write_bw", 65536), ("ib_send_lat", 2), ("ib_read_bw", 65536),
                                       ("ib_write_lat", 2)])
@pytest.mark.parametrize("softrdma_role", ["client", "server"])
def test_perftest_rdma_cm_with_kernel_rxe(vm, tmp_path, tool, size, softrdma_role):
    """``-R``: the QPs connected by rdma_cm -- softrdma's CM against the
    kernel's ib_cm and the guest's librdmacm, both roles."""
    _perftest(vm, tmp_path, tool, size, softrdma_role, ["-R"])


def _perftest(vm, tmp_path, tool, size, softrdma_role, extra, gids=None, addrs=(GUEST_IP, "10.77.0.1"),
              v6_csums=None):
    """``gids``: (host's, guest's) GID index (default: the IPv4 one);
    ``addrs``: (guest's, host's) address for the exchange / rdma_cm."""
    iters = 100 if tool.endswith("lat") else 200
    common = ["-d", "rxe0", "-n", str(iters), "-F", *extra]
    host_x, guest_x = gids or (vm["gid_index"], vm["gid_index"])
    if tool != "ib_atomic_bw":
        common += ["-s", str(size)]
    hx = [] if "-R" in extra else ["-x", str(host_x)]
    gx = "" if "-R" in extra else f" -x {guest_x}"
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    t0 = time.monotonic()
    host = None
    try:
        if softrdma_role == "client":
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(f"timeout 100 {tool} {' '.join(common)}{gx}",
                                                                   timeout=120)))
            t.start()
            _wait_guest_listening(t, 18515, "-R" in extra)
            host = _host(vm, [tool, *common, *hx, addrs[0]])
            t.join(130)
            g = res["g"]
        else:
            host = _host(vm, [tool, *common, *hx])
            _wait_host_listening(vm, host, 18515, "-R" in extra, banner="Waiting for client to connect")
            g = guest(f"timeout 100 {tool} {' '.join(common)}{gx} {addrs[1]}", timeout=120)
        out, _ = host.communicate(timeout=130)
        took = time.monotonic() - t0
    finally:
        time.sleep(0.5)
        cap.terminate()
        cap.wait(10)
        if host is not None and host.poll() is None:     # never left to hold the port for the next case
            host.kill()
            host.wait()
    assert host.returncode == 0, out
    assert g.returncode == 0, g.stdout + g.stderr
    if tool == "ib_write_lat" and "-R" in extra:
        # perftest 4.5 disconnects right after its results: softrdma's side
        # answers the DREQ at once (it once polled forever, the guest's DREQ
        # retried for ~80 s)
        print(f"ib_write_lat -R softrdma {softrdma_role}: both sides done {took:.1f} s after the start")
        assert took < 60, took
    row = _LAT_ROW if tool.endswith("lat") else _BW_ROW
    client_out = out if softrdma_role == "client" else g.stdout
    m = row.search(client_out)
    assert m and int(m.group(1)) == (size if tool != "ib_atomic_bw" else 8) and int(m.group(2)) == iters, client_out
    seen, ok = _verify_capture(pcap, v6_csums)
    print(f"{tool} {' '.join(extra)} softrdma {softrdma_role}: {seen} packets from rxe, {ok} ICRC FULL; "
          f"row: {m.group(0).strip()}")
    assert seen > 0 and ok == seen, (seen, ok)


# -- rdma_cm: rping, and the CM's messages compared with the kernel's ---------------------------------

#: fields that differ per connection by nature: IDs, QPNs, PSNs, GUIDs, GIDs,
#: the flow label (hashed from the ports), the TID (agent number and comm ID)
_PER_CONNECTION = {"tid", "local_comm_id", "remote_comm_id", "local_qpn", "starting_psn", "local_ca_guid",
                   "primary_local_port_gid", "primary_remote_port_gid", "primary_flow_label", "remote_qpn_eecn"}
_CM_SEEN: dict = {}


def _cm_messages(path) -> list:
    """(sender IP, packet summary, decoded CM message) for every MAD to QP1."""
    from softrdma.wire.cm import decode
    from softrdma.wire.packet import parse
    data = open(path, "rb").read()
    endian = "<" if struct.unpack_from("<I", data)[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off, out = 24, []
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from(endian + "IIII", data, off)
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        ip = frame[14:]
        ihl = (ip[0] & 0xF) * 4
        pkt = ip[ihl + 8:-4]
        if (pkt[5] << 16 | pkt[6] << 8 | pkt[7]) != 1:
            continue
        p = parse(pkt)
        mad = bytes(p.payload)
        summary = {"opcode": p.opcode, "pkey": p.pkey, "qkey": p.deth.qkey, "sqp": p.deth[1], "len": len(mad),
                   "mad_hdr": mad[0:4].hex() + mad[16:18].hex(), "ttl": ip[8]}
        out.append((".".join(map(str, ip[12:16])), summary, decode(mad)))
    return out


@pytest.mark.parametrize("softrdma_role", ["server", "client"])
def test_rping_with_kernel_rxe(vm, tmp_path, softrdma_role):
    """softrdma rping against the guest's librdmacm rping, both roles, 10
    verified pings; every packet from rxe has a FULL ICRC."""
    pcap = _rping(vm, tmp_path, softrdma_role, "10.77.0.1", GUEST_IP)
    for src, summary, m in _cm_messages(pcap):
        who = "kernel" if src == GUEST_IP else "softrdma"
        _CM_SEEN.setdefault((who, m["message"]), (summary, m))


def _rping(vm, tmp_path, softrdma_role, host_ip, guest_ip, v6_csums=None) -> str:
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    try:
        if softrdma_role == "server":
            host = _host(vm, ["rping", "-s", "-v", "-V", "-a", host_ip, "-C", "10"])
            _wait_host_listening(vm, host, 7174, True)
            g = guest(f"timeout 60 rping -c -v -V -a {host_ip} -C 10", timeout=90)
        else:
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(
                f"timeout 60 rping -s -v -V -a {guest_ip} -C 10", timeout=90)))
            t.start()
            _wait_guest_listening(t, 7174, True)
            host = _host(vm, ["rping", "-c", "-v", "-V", "-a", guest_ip, "-C", "10"])
            t.join(100)
            g = res["g"]
        out, _ = host.communicate(timeout=90)
    finally:
        time.sleep(0.5)
        cap.terminate()
        cap.wait(10)
    assert host.returncode == 0, out
    assert g.returncode == 0, g.stdout + g.stderr
    client_out = g.stdout if softrdma_role == "server" else out
    assert client_out.count("ping data: rdma-ping-") == 10, client_out
    seen, ok = _verify_capture(pcap, v6_csums)
    assert seen > 0 and ok == seen, (seen, ok)
    print(f"rping {host_ip} <-> {guest_ip} softrdma {softrdma_role}: {seen} packets from rxe, all ICRC FULL")
    return pcap


def test_cm_messages_match_kernel(vm):
    """Every CM message both sides sent in the rping runs above (REQ, REP,
    RTU, DREQ, DREP): softrdma's has the kernel's packet framing (opcode,
    P_Key, Q_Key, source QP, MAD header) and the kernel's value in every
    field that is not per connection."""
    kinds = sorted({k for _, k in _CM_SEEN})
    if not kinds:
        pytest.skip("run with test_rping_with_kernel_rxe (it records the messages)")
    compared = []
    for kind in kinds:
        if ("kernel", kind) not in _CM_SEEN or ("softrdma", kind) not in _CM_SEEN:
            continue
        (ks, km), (ss, sm) = _CM_SEEN[("kernel", kind)], _CM_SEEN[("softrdma", kind)]
        assert ss == ks, (kind, ss, ks)
        diff = {f: (sm[f], km[f]) for f in km if f not in _PER_CONNECTION and f != "private_data" and sm[f] != km[f]}
        assert not diff, (kind, diff)
        compared.append(kind)
    assert {"REQ", "REP", "RTU", "DREQ", "DREP"} <= set(compared), compared
    print("CM messages identical to the kernel's but per-connection fields:", compared)


@pytest.mark.parametrize("tool", ["ucmatose", "udaddy"])
@pytest.mark.parametrize("softrdma_role", ["server", "client"])
def test_cm_tools_with_kernel_rxe(vm, tool, softrdma_role):
    """librdmacm's ucmatose (RC, many connections) and udaddy (UD via SIDR)
    against softrdma's, both roles: both sides end with 'return status 0'."""
    n = ["-c", "5", "-C", "5"]
    if softrdma_role == "server":
        host = _host(vm, [tool, *n])
        _wait_host_listening(vm, host, 7471 if tool == "ucmatose" else 7174, True, banner="starting server")
        g = guest(f"timeout 60 {tool} -s 10.77.0.1 {' '.join(n)}", timeout=90)
    else:
        import threading
        res = {}
        t = threading.Thread(target=lambda: res.update(g=guest(f"timeout 60 {tool} {' '.join(n)}", timeout=90)))
        t.start()
        _wait_guest_listening(t, 7471 if tool == "ucmatose" else 7174, True)
        host = _host(vm, [tool, "-s", GUEST_IP, *n])
        t.join(100)
        g = res["g"]
    out, _ = host.communicate(timeout=90)
    assert host.returncode == 0 and out.rstrip().endswith("return status 0"), out
    assert g.returncode == 0 and g.stdout.rstrip().endswith("return status 0"), g.stdout + g.stderr


# -- IPv6: RoCE over IPv6 GIDs (rxe sends them with UDP checksum 0) ------------------------------------

def _host_gid_index(vm, ip: str) -> int | None:
    from softrdma.wire.gid import ip_gid
    from softrdma.verbs import device
    want = ip_gid(ip)
    old = os.environ.get("SOFTRDMA_RUN")
    os.environ["SOFTRDMA_RUN"] = RUN
    try:
        with device.Context(name="rxe0") as ctx:
            for i in range(16):
                if ctx.query_gid(1, i).raw == want:
                    return i
    finally:
        if old is None:
            del os.environ["SOFTRDMA_RUN"]
        else:
            os.environ["SOFTRDMA_RUN"] = old
    return None


def _guest_gid_index(gid_text: str) -> int | None:
    r = guest("rxe-gids", timeout=60)
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) >= 2 and f[1] == gid_text:
            return int(f[0])
    return None


@pytest.fixture(scope="module")
def v6(vm):
    """An IPv6 ULA on each end (the tap in the namespace, the guest's eth0),
    removed afterwards; the GID indices of the ULAs and link-locals."""
    import ipaddress
    from softrdma.device.gid import gid_str
    from softrdma.wire.gid import ip_gid
    subprocess.run(["ip", "netns", "exec", NETNS, "ip", "-6", "addr", "replace", f"{HOST_V6}/64", "dev", TAP,
                    "nodad"], check=True)
    r = guest(f"ip -6 addr replace {GUEST_V6_ULA}/64 dev eth0 nodad && ip -6 -o addr show dev eth0", timeout=30)
    assert r.returncode == 0, r.stderr
    for m in re.finditer(r"inet6 ([0-9a-f:]+)/", r.stdout):
        GUEST_V6.add(ipaddress.IPv6Address(m.group(1)).packed)
    host_ll = re.search(r"inet6 (fe80[0-9a-f:]+)/", subprocess.run(
        ["ip", "netns", "exec", NETNS, "ip", "-6", "-o", "addr", "show", "dev", TAP], capture_output=True,
        text=True).stdout).group(1)
    end = time.monotonic() + 30
    while True:
        hg, gg = _host_gid_index(vm, HOST_V6), _guest_gid_index(gid_str(ip_gid(GUEST_V6_ULA)))
        if hg is not None and gg is not None:
            break
        assert time.monotonic() < end, ("IPv6 GIDs never appeared", hg, gg)
        time.sleep(0.2)
    yield {"ula": (hg, gg), "link_local": (_host_gid_index(vm, host_ll), 0)}
    subprocess.run(["ip", "netns", "exec", NETNS, "ip", "-6", "addr", "del", f"{HOST_V6}/64", "dev", TAP])
    guest(f"ip -6 addr del {GUEST_V6_ULA}/64 dev eth0", timeout=30)


@pytest.mark.parametrize("which", ["ula", "link_local"])
@pytest.mark.parametrize("kind", ["rc", "ud"])
@pytest.mark.parametrize("softrdma_role", ["server", "client"])
def test_pingpong_ipv6_with_kernel_rxe(vm, v6, tmp_path, kind, softrdma_role, which):
    """ibv_rc/ud_pingpong over IPv6 GIDs (the ULA, and the link-local
    default GID), both roles; rxe's IPv6 packets carry UDP checksum 0 and
    reach softrdma (the host kernel would drop them on a plain socket)."""
    csums: list = []
    hg, gg = v6[which]
    assert hg is not None, f"no {which} GID on the host's device"
    _pingpong(vm, tmp_path, kind, softrdma_role, 1024, hg, gg, csums)
    assert csums and set(csums) == {0}, set(csums)


@pytest.mark.parametrize("tool,size", [("ib_write_bw", 65536), ("ib_read_bw", 65536)])
@pytest.mark.parametrize("softrdma_role", ["client", "server"])
def test_perftest_ipv6_with_kernel_rxe(vm, v6, tmp_path, tool, size, softrdma_role):
    """ib_write_bw / ib_read_bw over the IPv6 GIDs (-x), both roles."""
    csums: list = []
    _perftest(vm, tmp_path, tool, size, softrdma_role, [], gids=v6["ula"], v6_csums=csums)
    assert csums and set(csums) == {0}, set(csums)


@pytest.mark.parametrize("softrdma_role", ["server", "client"])
def test_rping_ipv6_with_kernel_rxe(vm, v6, tmp_path, softrdma_role):
    """rping over IPv6 addresses: rdma_cm resolves them to the IPv6 GIDs."""
    csums: list = []
    _rping(vm, tmp_path, softrdma_role, HOST_V6, GUEST_V6_ULA, csums)
    assert csums and set(csums) == {0}, set(csums)
