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

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "interop", "rxe-vm")
NETNS = os.environ.get("RXEVM_NETNS", "rxevm")
TAP = os.environ.get("RXEVM_TAP", "rxetap0")
GUEST_IP = os.environ.get("RXEVM_GUEST_IP", "10.77.0.2")
RUN = "/dev/shm/softrdma-interop"
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


def _host(vm, args):
    return subprocess.Popen(["ip", "netns", "exec", NETNS, sys.executable, "-m", "softrdma", *args], env=vm["env"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _capture(path):
    p = subprocess.Popen(["ip", "netns", "exec", NETNS, "tcpdump", "-i", TAP, "-w", path, "--immediate-mode",
                          "-U", "udp", "port", "4791"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    return p


def _verify_capture(path) -> tuple[int, int]:
    """(packets from the guest, of which ICRC FULLy verified)."""
    data = open(path, "rb").read()
    magic = struct.unpack_from("<I", data)[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    seen = ok = 0
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack_from(endian + "IIII", data, off)
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        ip = frame[14:]
        if frame[12:14] != b"\x08\x00" or ip[12:16] != bytes(int(x) for x in GUEST_IP.split(".")):
            continue
        ihl = (ip[0] & 0xF) * 4
        sport, dport, ulen = struct.unpack_from(">HHH", ip, ihl)
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
    tool = f"ibv_{kind}_pingpong"
    iters = 100
    size = 4096 if kind == "rc" else (mtu if mtu < 4096 else 2048)
    common = ["-g", str(vm["gid_index"]), "-n", str(iters), "-s", str(size)]
    if kind == "rc":
        common += ["-m", str(mtu)]
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    try:
        if softrdma_role == "server":
            host = _host(vm, [tool, "-g", str(vm["gid_index"]), *common[2:]])
            time.sleep(2)
            g = guest(f"timeout 60 {tool} -d rxe0 {' '.join(common)} 10.77.0.1")
        else:
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(f"timeout 60 {tool} -d rxe0 {' '.join(common)}")))
            t.start()
            time.sleep(3)
            host = _host(vm, [tool, "-g", str(vm["gid_index"]), *common[2:], GUEST_IP])
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
    seen, ok = _verify_capture(pcap)
    assert seen >= iters and ok == seen, (seen, ok)
    print(f"{tool} mtu {mtu} softrdma {softrdma_role}: {seen} packets from rxe, all ICRC FULL; host: "
          f"{LINE.search(out).group(0)}; guest: {LINE.search(g.stdout).group(0)}")


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


@pytest.mark.parametrize("tool,size", [("ib_write_bw", 65536), ("ib_send_lat", 2), ("ib_read_bw", 65536)])
@pytest.mark.parametrize("softrdma_role", ["client", "server"])
def test_perftest_rdma_cm_with_kernel_rxe(vm, tmp_path, tool, size, softrdma_role):
    """``-R``: the QPs connected by rdma_cm -- softrdma's CM against the
    kernel's ib_cm and the guest's librdmacm, both roles."""
    _perftest(vm, tmp_path, tool, size, softrdma_role, ["-R"])


def _perftest(vm, tmp_path, tool, size, softrdma_role, extra):
    iters = 100 if tool.endswith("lat") else 200
    common = ["-d", "rxe0", "-n", str(iters), "-F", *extra]
    if not extra:
        common += ["-x", str(vm["gid_index"])]
    if tool != "ib_atomic_bw":
        common += ["-s", str(size)]
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    try:
        if softrdma_role == "client":
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(f"timeout 100 {tool} {' '.join(common)}",
                                                                   timeout=120)))
            t.start()
            time.sleep(4)
            host = _host(vm, [tool, *common, GUEST_IP])
            t.join(130)
            g = res["g"]
        else:
            host = _host(vm, [tool, *common])
            time.sleep(2)
            g = guest(f"timeout 100 {tool} {' '.join(common)} 10.77.0.1", timeout=120)
        out, _ = host.communicate(timeout=130)
    finally:
        time.sleep(0.5)
        cap.terminate()
        cap.wait(10)
    assert host.returncode == 0, out
    assert g.returncode == 0, g.stdout + g.stderr
    row = _LAT_ROW if tool.endswith("lat") else _BW_ROW
    client_out = out if softrdma_role == "client" else g.stdout
    m = row.search(client_out)
    assert m and int(m.group(1)) == (size if tool != "ib_atomic_bw" else 8) and int(m.group(2)) == iters, client_out
    seen, ok = _verify_capture(pcap)
    print(f"{tool} softrdma {softrdma_role}: {seen} packets from rxe, {ok} ICRC FULL; row: {m.group(0).strip()}")
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
    pcap = str(tmp_path / "cap.pcap")
    cap = _capture(pcap)
    try:
        if softrdma_role == "server":
            host = _host(vm, ["rping", "-s", "-v", "-V", "-a", "10.77.0.1", "-C", "10"])
            time.sleep(2)
            g = guest("timeout 60 rping -c -v -V -a 10.77.0.1 -C 10", timeout=90)
        else:
            import threading
            res = {}
            t = threading.Thread(target=lambda: res.update(g=guest(
                f"timeout 60 rping -s -v -V -a {GUEST_IP} -C 10", timeout=90)))
            t.start()
            time.sleep(4)
            host = _host(vm, ["rping", "-c", "-v", "-V", "-a", GUEST_IP, "-C", "10"])
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
    seen, ok = _verify_capture(pcap)
    assert seen > 0 and ok == seen, (seen, ok)
    for src, summary, m in _cm_messages(pcap):
        who = "kernel" if src == GUEST_IP else "softrdma"
        _CM_SEEN.setdefault((who, m["message"]), (summary, m))
    print(f"rping softrdma {softrdma_role}: {seen} packets from rxe, all ICRC FULL")


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
