"""softrdma ibdump (tools/ibdump.py, device/capture.py, verbs/capture.py).

* the tap on the device's data path, in process: every packet once, with
  the right direction, addresses and QP; nothing at all when no capture is
  open (and the packet-less short cut back); a full ring drops and counts
  while the traffic completes;
* the tool through a real softrdmad: a program sending every RC/UC/UD
  request opcode (PSNs across the 24-bit wrap, UD over IPv6) is captured;
  tshark decodes every frame as InfiniBand with the opcodes and PSNs the
  transport used, scapy's ICRC agrees with every frame, timestamps are
  monotonic and inside the capture window; ``-w -`` piped into ``tshark -r
  -``; drops counted and reported; -M, -p, -I, -q; damaged packets carry a
  bad ICRC; the option errors are ibdump's;
* across two network namespaces: a real UDP ping-pong captured on one side.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.device.capture import Capture
from softrdma.uapi.capture import BOTH, NO_CORRUPTION, RECORD, RX, TX, slot_size
from softrdma.device.core import Device, DevQP
from softrdma.uapi.shm import Ring
from softrdma.enums import IBV_MTU_1024, IBV_QPT_RC, IBV_WR_SEND
from softrdma.sim import connect_qps
from softrdma.tools import ibdump
from softrdma.transport.cq import CompletionQueue
from softrdma.transport.qp import QP, QPCap
from softrdma.transport.wr import AddressVector, RecvWQE, SendWQE
from softrdma.wire.opcodes import OPCODE_TABLE, Opcode
from test_wire_tshark import PAYLOAD_HEURISTICS, tshark  # noqa: F401 -- the tshark fixture
from wait_helpers import free_port, wait_for, wait_line, wait_listening

HERE = os.path.dirname(os.path.abspath(__file__))
OPS_PROG = os.path.join(HERE, "programs", "capture_ops.py")
PSN_MASK = 0xFFFFFF


# --------------------------------------------------------------------------- 1. the tap, in process
class Counting:
    """A capture that keeps what the tap hands it."""

    def __init__(self, directions=BOTH):
        self.directions = directions
        self.got = []

    def put(self, ts, direction, qpn, src, dst, sport, dport, pkt, flipped):
        self.got.append((direction, qpn, src, dst, sport, dport, bytes(pkt), flipped))


class _End:
    """What sim.connect_qps asks of a node: the address vector to a peer."""

    def __init__(self, dev: Device):
        self.dev = dev

    def av_to(self, other: _End) -> AddressVector:
        ip = ipaddress.ip_address(other.dev.addresses[0]).packed
        return AddressVector(dgid=bytes(10) + b"\xff\xff" + ip)


def _qp(dev: Device) -> QP:
    q = QP(IBV_QPT_RC, dev.alloc_qpn(), pd=dev, memory=dev.memory, send_cq=CompletionQueue(),
           recv_cq=CompletionQueue(), cap=QPCap(max_send_wr=64, max_recv_wr=64), sq_sig_all=True, caps=dev.caps, tx=dev.tx,
           events=dev.events)
    dev.add_qp(DevQP(0, q, Ring.create(4, 64), Ring.create(4, 64), -1, None))
    return q


def _setup(same_device=False):
    a = Device("rxe0", "lo", ["10.9.0.1"], bind=False)
    b = a if same_device else Device("rxe1", "lo", ["10.9.0.2"], bind=False)
    qa, qb = _qp(a), _qp(b)
    connect_qps(qa, qb, _End(a), _End(b), path_mtu=IBV_MTU_1024, psn_a=0xFFFFFE, psn_b=7)
    ma, mb = a.memory.reg_mr(a, 1 << 16, 0xF), b.memory.reg_mr(b, 1 << 16, 0xF)
    by_ip = {"10.9.0.1": a, "10.9.0.2": b}
    return a, b, qa, qb, ma, mb, by_ip


def _send(devs, by_ip, qa, qb, ma, mb, size: int, wr_id: int) -> None:
    """One SEND from qa to qb, driven to its completion through Device.route."""
    qb.post_recv(RecvWQE(wr_id, [(mb.addr, size, mb.lkey)]))
    qa.post_send(SendWQE(wr_id, IBV_WR_SEND, [(ma.addr, size, ma.lkey)]), time.monotonic())
    for _ in range(100):
        if not [d for d in devs if d.route(by_ip, time.monotonic())]:
            break
    assert [(w.wr_id, w.status) for w in qa.send_cq.poll(4)] == [(wr_id, 0)]
    assert [(w.wr_id, w.status) for w in qb.recv_cq.poll(4)] == [(wr_id, 0)]


def test_tap_sees_every_packet_once_and_nothing_when_off():
    a, b, qa, qb, ma, mb, by_ip = _setup()
    cnt = Counting()
    a.add_capture(cnt)
    assert a.tap is not None and b.tap is None
    _send((a, b), by_ip, qa, qb, ma, mb, 3000, 1)
    # while a capture is open on either end, RC goes as packets (no short cut)
    assert a.local_peer(qa) is None and b.local_peer(qb) is None
    src, dst = bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2])
    req = [g for g in cnt.got if g[0] == TX]
    assert [(g[1], g[2], g[3], g[4], g[5], g[7]) for g in req] == [(qa.qp_num, src, dst, 4791, 4791,
                                                                    NO_CORRUPTION)] * 3
    assert [(g[6][0], int.from_bytes(g[6][9:12], "big")) for g in req] == [(0, 0xFFFFFE), (1, 0xFFFFFF), (2, 0)]
    acks = [g for g in cnt.got if g[0] == RX]
    assert [(g[1], g[2], g[3], g[6][0], int.from_bytes(g[6][9:12], "big")) for g in acks] == [
        (qa.qp_num, dst, src, Opcode.RC_ACKNOWLEDGE, 0)]
    # capture off: the tap is gone, nothing reaches the old capture, and the
    # same-daemon short cut is back (no packet routed at all)
    a.remove_capture(cnt)
    assert a.tap is None
    seen = len(cnt.got)
    _send((a, b), by_ip, qa, qb, ma, mb, 3000, 2)
    assert len(cnt.got) == seen
    assert a.local_peer(qa) is qb
    tx0 = a.traffic["tx_packets"]
    qb.post_recv(RecvWQE(3, [(mb.addr, 3000, mb.lkey)]))
    qa.post_send(SendWQE(3, IBV_WR_SEND, [(ma.addr, 3000, ma.lkey)]), time.monotonic())
    assert not a.tx and not b.tx                              # done at once, no packet to route
    assert [(w.wr_id, w.status) for w in qa.send_cq.poll(4)] == [(3, 0)]
    assert a.traffic["tx_packets"] == tx0 + 3                # the port counts the packets it stands for


def test_receiving_device_records_rx_and_a_packet_to_itself_is_recorded_once():
    a, b, qa, qb, ma, mb, by_ip = _setup()
    rx_only = Counting(RX)
    b.add_capture(rx_only)
    _send((a, b), by_ip, qa, qb, ma, mb, 2000, 1)
    assert [(g[0], g[1], g[6][0]) for g in rx_only.got] == [(RX, qb.qp_num, 0), (RX, qb.qp_num, 2)]
    s, _, qs, qt, ms, mt, by_ip = _setup(same_device=True)
    both = Counting()
    s.add_capture(both)
    _send((s,), by_ip, qs, qt, ms, mt, 2000, 1)
    # two requests and one ACK, each once, as sent (Linux's packet sockets drop the looped-back copy too)
    assert [(g[0], g[1], g[6][0]) for g in both.got] == [(TX, qs.qp_num, 0), (TX, qs.qp_num, 2),
                                                         (TX, qt.qp_num, Opcode.RC_ACKNOWLEDGE)]


def test_a_full_ring_drops_and_counts_and_the_traffic_completes():
    a, b, qa, qb, ma, mb, by_ip = _setup()
    ring = Ring.create(2, slot_size(a.caps.max_mtu))
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    cap = Capture(Ring.attach(os.dup(ring.fd)), os.dup(bell), BOTH, a.caps.max_mtu)
    a.add_capture(cap)
    ma.write(os.urandom(8000))
    _send((a, b), by_ip, qa, qb, ma, mb, 8000, 1)              # 8 requests and an ACK: nobody reads
    assert cap.stats() == {"packets": 2, "bytes": 2 * (12 + 1024), "dropped": 7}
    assert ring.producer == 2
    recs = [RECORD.unpack_from(ring.slot(i)) for i in range(2)]
    assert [(r[4], r[3], r[1], r[2]) for r in recs] == [(TX, qa.qp_num, 12 + 1024, 12 + 1024)] * 2
    assert [bytes(ring.slot(i)[RECORD.size + 12:RECORD.size + 12 + 1024]) for i in range(2)] == [
        ma.read(1024, 0), ma.read(1024, 1024)]
    a.remove_capture(cap)
    cap.close()
    ring.close()
    os.close(bell)


def test_capture_refuses_entries_too_small_and_bad_directions():
    ring = Ring.create(4, slot_size(3))
    with pytest.raises(ValueError, match="cannot hold"):
        Capture(ring, -1, BOTH, 5)
    with pytest.raises(ValueError, match="directions"):
        Capture(ring, -1, 4, 3)
    ring.close()


def test_ib_frames_are_recorded_whole_and_a_bad_record_is_dropped_not_raised():
    """An IB port's frames (``Tap.frame``): recorded LRH to VCRC with no
    addresses (IB_FRAME), the local QP kept; the largest IB frame of a 4096
    MTU (LRH, GRH, the longest header run, pad, ICRC, VCRC) fits an entry.
    A record the tap cannot write -- what an IB port's source (LIDs, not IP
    bytes) made of the IP record once -- is dropped and counted: the data
    path never sees the exception."""
    from softrdma.device.capture import Tap
    from softrdma.transport.unreliable import LinkSource
    from softrdma.uapi.capture import IB_FRAME, IB_FRAME_EXTRA, MAX_HEADER_BYTES
    ring = Ring.create(4, slot_size(5))
    bell = os.eventfd(0, os.EFD_NONBLOCK)
    cap = Capture(Ring.attach(os.dup(ring.fd)), os.dup(bell), BOTH, 5)
    tap = Tap()
    tap.captures.append(cap)
    big = os.urandom(IB_FRAME_EXTRA + MAX_HEADER_BYTES + 4096 + 3)
    tap.frame(TX, 0x11, big)
    tap.frame(RX, 0x12, b"\x00\x02" + bytes(30))
    tap.packet(RX, 0x13, LinkSource(None, 5, 0, 0), b"", 0, 0, bytes(40))       # not IP addresses
    assert cap.stats() == {"packets": 2, "bytes": len(big) + 32, "dropped": 1} and cap.failed
    recs = [RECORD.unpack_from(ring.slot(i)) for i in range(2)]
    assert [(r[4], r[3], r[1], r[2], r[5], r[6], r[7], r[8]) for r in recs] == [
        (TX, 0x11, len(big), len(big), IB_FRAME, 0, 0, NO_CORRUPTION),
        (RX, 0x12, 32, 32, IB_FRAME, 0, 0, NO_CORRUPTION)]
    assert bytes(ring.slot(0)[RECORD.size:RECORD.size + len(big)]) == big
    cap.close()
    ring.close()
    os.close(bell)


# --------------------------------------------------------------------------- 2. the option errors
def _run(capsys, *argv):
    rc = ibdump.main(list(argv), prog="ibdump")
    out, err = capsys.readouterr()
    return rc, out, err


USAGE = ibdump._usage("ibdump")


def test_usage_is_ibdumps():
    assert USAGE.splitlines()[:3] == [
        "   ibdump - Dump Infiniband traffic from Mellanox Technologies ConnectX HCA",
        "            The dump file can be loaded by Wireshark for graphical traffic analysis", ""]
    assert '  -w, --write=<file>     dump file name (default "sniffer.pcap")' in USAGE
    assert "Each entry takes ~ MTU bytes of memory (default 12 - 4096 entries)" in USAGE


@pytest.mark.parametrize("argv,rc,out,err", [
    (["-h"], 0, USAGE, ""),
    (["-x"], 1, USAGE, "ibdump: invalid option -- 'x'\n"),
    (["--nope"], 1, USAGE, "ibdump: unrecognized option '--nope'\n"),
    (["-w"], 1, USAGE, "ibdump: option requires an argument -- 'w'\n"),
    (["extra"], 1, USAGE, ""),
    (["-C", "3"], 1, USAGE, ""),                    # in ibdump's optstring, no case for it
    (["-L"], 1, USAGE, ""),
    (["-b", "12x"], 1, USAGE, ""),
    (["-M", "1k"], 1, USAGE, ""),
    (["-i", "-1"], 1, USAGE, ""),
    (["-I", "both"], 1, USAGE, "-E- Bad parameter for direction flag\n"),
    (["--erf", "2"], 1, USAGE, "-E- Bad parameter for --erf flag. Expected 0 or 1\n"),
    (["-M", "100", "-p", "100"], 1, "", "-E- You can not use mem-mode and writer-thread simultaneously.\n"),
    (["-q", "1,2,zz"], 255, "", "-E- \"zz\" is not a numerical value\n-E- Failed to parse source QPs list\n"),
    (["-q", ",".join(map(str, range(17)))], 255, "",
     "-E- Too many csv elements\n-E- Failed to parse source QPs list\n"),
    (["-b", "21"], 1, "", "-E- --max-burst 21: at most 20 (2^20 capture entries of one packet each)\n"),
])
def test_option_errors_are_ibdumps(capsys, argv, rc, out, err):
    assert _run(capsys, *argv) == (rc, out, err)


@pytest.mark.parametrize("argv,why", [
    (["-m", "mt4119_pciconf0"], "--mst-dev: softrdma devices have no MST"),
    (["-T"], "--conti: the capture buffer is memory shared with softrdmad"),
    (["-j"], "--jumbo-mtu: every capture entry already holds the largest packet"),
    (["--decap"], "--decap: softrdma captures at the device, where there is no port-mirroring"),
])
def test_options_without_meaning_here_are_refused_with_the_reason(capsys, argv, why):
    rc, out, err = _run(capsys, *argv)
    assert (rc, out) == (1, "") and err.startswith("-E- " + why) and err.count("\n") == 1


def test_version_and_erf_0_and_option_forms(capsys):
    rc, out, err = _run(capsys, "-v")
    assert rc == 0 and out.startswith("ibdump, softrdma ") and err == ""
    cfg = ibdump.parse_args(["--erf", "0", "--ib-dev=rxe1", "-o", "x.pcap", "--max-burst", "0x3", "-s",
                             "--direction", "tx", "--src_qp", "0x11,18", "-i", "1"], "ibdump")
    assert (cfg.dev_name, cfg.out_file_name, cfg.log2entries, cfg.silent, cfg.directions, cfg.src_qps,
            cfg.ib_port) == ("rxe1", "x.pcap", 3, True, TX, {0x11, 18}, 1)
    cfg = ibdump.parse_args(["-w", "-"], "ibdump")
    assert cfg.to_stdout and cfg.silent


# --------------------------------------------------------------------------- 3. the tool on a real daemon
@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("ibdump") as d:
        yield d
        assert d.proc.poll() is None, "softrdmad ended during the capture tests"


def _env(d) -> dict:
    return {**d.env, "SOFTRDMA_AUTOSTART": "0"}


class Ibdump:
    """The tool as a subprocess; started means: capturing."""

    def __init__(self, d, *args, stdout=subprocess.PIPE):
        self.d = d
        self.silent = "-s" in args or "-" in args
        before = self._captures()
        self.proc = subprocess.Popen([sys.executable, "-m", "softrdma", "ibdump", *args], env=_env(d),
                                     stdout=stdout, stderr=subprocess.PIPE)
        self.head = b""
        try:
            if not self.silent:
                _, lines = wait_line(self.proc.stdout, r"^Ready to capture \(Press \^c to stop\):\n", proc=self.proc)
                self.head = b"".join(lines)
            else:
                wait_for(lambda: self._captures() > before, what="the capture to start", proc=self.proc)
        except AssertionError:
            self.proc.kill()
            self.proc.communicate()
            raise

    def _captures(self) -> int:
        return sum(1 for r in self.d.resources() if r["kind"] == "capture")

    def stop(self, sig=signal.SIGINT) -> tuple[int, bytes, str]:
        """Send ``sig`` (0: none, wait for the tool to end by itself)."""
        if sig and self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, self.head + (out or b""), err.decode()


def _ops(d) -> dict:
    r = subprocess.run([sys.executable, OPS_PROG], env=_env(d), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def read_pcap(path) -> list[tuple[int, bytes, int]]:
    """(timestamp ns, frame, original length) per record of a classic
    nanosecond pcap (the test's own reader)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, vmaj, vmin, _, _, _, link = struct.unpack_from("<IHHiIII", data)
    assert (magic, vmaj, vmin, link) == (0xA1B23C4D, 2, 4, 1)
    out, off = [], 24
    while off < len(data):
        sec, nsec, incl, orig = struct.unpack_from("<IIII", data, off)
        out.append((sec * 1_000_000_000 + nsec, data[off + 16:off + 16 + incl], orig))
        off += 16 + incl
    assert off == len(data)
    return out


FIELDS = ("frame.number", "frame.protocols", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "udp.srcport",
          "udp.dstport", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
          "infiniband.deth.srcqp", "infiniband.invariant.crc", "_ws.malformed")


def tshark_rows(tshark_path, pcap: str) -> list[dict]:
    cmd = [tshark_path, "-n", "-r", pcap, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]
    for proto in PAYLOAD_HEURISTICS:
        cmd += ["--disable-protocol", proto]
    for f in FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [dict(zip(FIELDS, line.split("\t"))) for line in r.stdout.splitlines()]


def _row(r: dict) -> tuple[int, int, int]:
    return int(r["infiniband.bth.opcode"]), int(r["infiniband.bth.destqp"], 16), int(r["infiniband.bth.psn"])


# The test's own packet model (IBA 9.2/9.4): per operation, the opcodes and PSNs it takes at MTU 1024.
FIRST_MIDDLE_LAST_ONLY = {"SEND": (0x00, 0x01, 0x02, 0x04), "SEND_WITH_IMM": (0x00, 0x01, 0x03, 0x05),
                          "SEND_WITH_INV": (0x00, 0x01, 0x16, 0x17), "RDMA_WRITE": (0x06, 0x07, 0x08, 0x0A),
                          "RDMA_WRITE_WITH_IMM": (0x06, 0x07, 0x09, 0x0B)}


def expected(ops, psn: int, base: int = 0):
    """(requests, read responses and atomic ACKs, ACK PSNs) as (opcode, PSN)."""
    req, resp, acks = [], [], []
    for name, size in ops:
        n = max(1, -(-size // 1024))
        if name in FIRST_MIDDLE_LAST_ONLY:
            f, m, last, only = FIRST_MIDDLE_LAST_ONLY[name]
            codes = [only] if n == 1 else [f] + [m] * (n - 2) + [last]
            req += [(base + c, (psn + i) & PSN_MASK) for i, c in enumerate(codes)]
            acks.append((psn + n - 1) & PSN_MASK)
        elif name in ("ATOMIC_WRITE", "FLUSH"):          # IBA 1.5: answered by an empty READ RESPONSE ONLY
            req.append((0x1D if name == "ATOMIC_WRITE" else 0x1C, psn))
            resp.append((0x10, psn))
        elif name == "RDMA_READ":
            req.append((0x0C, psn))
            codes = [0x10] if n == 1 else [0x0D] + [0x0E] * (n - 2) + [0x0F]
            resp += [(c, (psn + i) & PSN_MASK) for i, c in enumerate(codes)]
        else:
            req.append((0x13 if name == "CMP_SWP" else 0x14, psn))
            resp.append((0x12, psn))
        psn = (psn + n) & PSN_MASK
    return req, resp, acks


def _scapy_icrc_ok(frame: bytes) -> bool:
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Ether
    return Ether(frame)[BTH].compute_icrc(None) == frame[-4:]


def test_every_opcode_is_captured_decoded_with_the_transports_psns(daemon, tshark, tmp_path):
    pcap = str(tmp_path / "ops.pcap")
    t0 = time.time_ns()
    tool = Ibdump(daemon, "-w", pcap)
    info = _ops(daemon)
    rc, out, err = tool.stop()
    t1 = time.time_ns()
    out = out.decode()
    assert rc == 0, err
    # what ibdump prints, in its order
    assert out.startswith("Initiating resources ...\nsearching for IB devices in host\nPort active_mtu=4096\n")
    assert (" ------------------------------------------------\n"
            " Device                         : \"rxe0\"\n"
            " Physical port                  : 1\n"
            " Link layer                     : Ethernet\n"
            f" Dump file                      : {pcap}\n"
            " Sniffer WQEs (max burst size)  : 4096\n"
            " ------------------------------------------------\n\n"
            "\nReady to capture (Press ^c to stop):\n") in out
    assert out.endswith("\n\nInterrupted (signal 2) - exiting ...\n\n")
    recs = read_pcap(pcap)
    assert err == f"\nCaptured:  {len(recs):8d} packets, {sum(len(f) for _, f, _ in recs):8d} bytes\n"
    # timestamps: in order and inside the capture window
    ts = [t for t, _, _ in recs]
    assert ts == sorted(ts) and t0 <= ts[0] and ts[-1] <= t1
    # every frame whole, its ICRC the one scapy computes over it
    assert all(orig == len(f) for _, f, orig in recs)
    assert all(_scapy_icrc_ok(f) for _, f, _ in recs)
    rows = tshark_rows(tshark, pcap)
    assert len(rows) == len(recs)
    for r, (_, frame, _) in zip(rows, recs):
        assert re.fullmatch(r"eth:ethertype:(ip|ipv6):udp:infiniband(:data)?", r["frame.protocols"]), r
        assert r["_ws.malformed"] == "" and (r["udp.srcport"], r["udp.dstport"]) == ("4791", "4791"), r
        if r["infiniband.invariant.crc"] == "" and int(r["infiniband.bth.opcode"]) in (0x1C, 0x1D):
            continue                      # FLUSH, ATOMIC WRITE: Wireshark 4.0 shows them raw, ICRC and all
        assert int(r["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
    a, b, c, d, ud = info["a"], info["b"], info["c"], info["d"], info["ud"]
    got = [_row(r) for r in rows]
    # RC: A's requests exactly; B's read responses and atomic ACKs exactly; one ACK per SEND/WRITE
    req, resp, acks = expected(info["ops"], info["psn_a"])
    assert [(op, psn) for op, qp, psn in got if qp == b and op != 0x11] == req
    assert [(op, psn) for op, qp, psn in got if qp == a and op in (0x0D, 0x0E, 0x0F, 0x10, 0x12)] == resp
    assert [psn for op, qp, psn in got if qp == a and op == 0x11] == acks
    assert req[0] == (0x00, 0xFFFFFE) and req[2] == (0x02, 0)            # across the wrap
    # B's one SEND and A's ACK of it
    assert [(op, psn) for op, qp, psn in got if qp == a and op == 0x04] == [(0x04, info["psn_b"])]
    assert [(op, psn) for op, qp, psn in got if qp == b and op == 0x11] == [(0x11, info["psn_b"])]
    # UC: C's requests exactly, nothing answers
    req, _, _ = expected(info["uc_ops"], info["psn_c"], base=0x20)
    assert [(op, psn) for op, qp, psn in got if qp == d] == req
    assert not [1 for op, qp, psn in got if qp == c]
    # UD (over IPv6 ::1 when lo has it): E's two SENDs, DETH source QP E
    ip, lo = ("ipv6", "::1") if ud["ipv6"] else ("ip", "127.0.0.1")
    ud_rows = [r for r in rows if int(r["infiniband.bth.destqp"], 16) == ud["f"]]
    assert [(_row(r)[0], _row(r)[2], r[ip + ".src"], r[ip + ".dst"], int(r["infiniband.deth.srcqp"], 16))
            for r in ud_rows] == [(0x64, ud["psn_e"], lo, lo, ud["e"]), (0x65, ud["psn_e"] + 1, lo, lo, ud["e"])]
    # every RC/UC/UD opcode softrdma's transports send is there (CNPs are never sent; the
    # traffic here has no XRC QPs -- their opcodes' layout is test_wire_tshark's)
    assert {op for op, _, _ in got} == {i.opcode for i in OPCODE_TABLE
                                        if i is not None and i.opcode != Opcode.CNP and i.opcode < 0xA0}
    assert all(r["kind"] != "capture" for r in daemon.resources())           # closed with the tool


def test_write_dash_streams_into_tshark(daemon, tshark):
    tool = Ibdump(daemon, "-w", "-")
    ts = subprocess.Popen([tshark, "-n", "-r", "-", "-T", "fields", "-e", "infiniband.bth.opcode",
                           "-e", "infiniband.bth.psn"], stdin=tool.proc.stdout, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    tool.proc.stdout.close()                         # tshark holds the pipe now
    info = _ops(daemon)
    rc, _, err = tool.stop()
    out, _ = ts.communicate(timeout=60)
    assert rc == 0 and ts.returncode == 0
    rows = [line.split("\t") for line in out.splitlines()]
    m = re.fullmatch(r"\nCaptured:  +(\d+) packets, +(\d+) bytes\n", err)   # and nothing else: -w - is silent
    assert m and len(rows) == int(m.group(1)) > 40 and all(op and psn for op, psn in rows)
    req, _, _ = expected(info["ops"], info["psn_a"])
    assert [(int(op), int(psn)) for op, psn in rows][:3] == req[:3]


def test_a_stalled_reader_loses_records_not_traffic_and_says_so(daemon, tmp_path):
    """Two captures at once: one reader stopped (SIGSTOP) with a 4-entry
    ring, one with the default ring.  The traffic completes anyway; the small
    one keeps its first 4 records and reports how many it lost."""
    big, small = str(tmp_path / "big.pcap"), str(tmp_path / "small.pcap")
    full = Ibdump(daemon, "-w", big)
    stalled = Ibdump(daemon, "-b", "2", "-w", small)
    stalled.proc.send_signal(signal.SIGSTOP)
    try:
        _ops(daemon)
    finally:
        stalled.proc.send_signal(signal.SIGCONT)
    rc_small, out_small, err_small = stalled.stop()
    rc_big, _, err_big = full.stop()
    assert rc_small == rc_big == 0
    everything, kept = read_pcap(big), read_pcap(small)
    assert b"Sniffer WQEs (max burst size)  : 4\n" in out_small
    assert [f for _, f, _ in kept] == [f for _, f, _ in everything[:4]]
    assert err_small == (f"\nCaptured:  {4:8d} packets, {sum(len(f) for _, f, _ in kept):8d} bytes\n"
                         f"-W- {len(everything) - 4} packets were not captured: the capture ring (4 entries, "
                         "--max-burst 2) was full\n")
    assert "-W-" not in err_big


def test_mem_mode_stops_by_itself_when_its_buffer_is_full(daemon, tmp_path):
    pcap = str(tmp_path / "mem.pcap")
    tool = Ibdump(daemon, "-M", "3000", "-w", pcap)
    _ops(daemon)
    rc, out, err = tool.stop(sig=0)                   # no signal: the buffer filled
    out = out.decode()
    assert rc == 0 and "Interrupted" not in out
    assert out.endswith(f"\nBuffer full ...\n-I- Wrote file {pcap}\n")
    recs = read_pcap(pcap)
    dumped = [16 + len(f) for _, f, _ in recs]
    assert sum(dumped) >= 3000 > sum(dumped[:-1])
    assert err.startswith(f"\nCaptured:  {len(recs):8d} packets, ")


def test_writer_thread_and_direction_and_src_qp_filters(tmp_path):
    """-p (a writer thread), -I and -q, three captures at once on a fresh
    daemon (its QP numbers start at 0x11: A, B, C, D, E, F)."""
    with daemon_in_shm("ibdump-filters") as d:
        every, tx_b, rx = (str(tmp_path / n) for n in ("every.pcap", "txb.pcap", "rx.pcap"))
        tools = [Ibdump(d, "-p", "4096", "-w", every), Ibdump(d, "-I", "tx", "-q", "0x12", "-w", tx_b),
                 Ibdump(d, "-I", "rx", "-s", "-w", rx)]
        info = _ops(d)
        results = [t.stop() for t in tools]
        assert d.proc.poll() is None
    assert all(rc == 0 for rc, _, _ in results)
    assert (info["a"], info["b"]) == (0x11, 0x12)
    everything = read_pcap(every)
    assert len(everything) > 40
    # B's packets: everything addressed to A (one device: each packet is B's TX once)
    to_a = [f for _, f, _ in everything if int.from_bytes(f[14 + 20 + 8 + 5:14 + 20 + 8 + 8], "big") == 0x11]
    assert [f for _, f, _ in read_pcap(tx_b)] == to_a and to_a
    assert b" Monitored QPs:                 : 0x12\n" in results[1][1]
    # the device only talks to itself: nothing is recorded as received
    assert read_pcap(rx) == [] and results[2][1] == b""


def test_damaged_packets_carry_the_bad_icrc_they_had(daemon, tmp_path):
    """Fault injection flips a bit after the ICRC is computed: each damaged
    packet is in the capture with the flipped bit, so its ICRC fails."""
    pcap = str(tmp_path / "bad.pcap")
    env = _env(daemon)
    m = subprocess.run([sys.executable, "-c", "from softrdma.verbs.device import management as m; "
                        "m().call('link_set', name='rxe0', seed=5, faults={'corrupt': 0.03})"], env=env)
    assert m.returncode == 0
    try:
        tool = Ibdump(daemon, "-s", "-w", pcap)
        r = subprocess.run([sys.executable, "-m", "softrdma", "run", "--", sys.executable,
                            os.path.join(HERE, "pyverbs_programs", "rc_all_ops.py")], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        rc, _, err = tool.stop()
        assert rc == 0, err
    finally:
        got = subprocess.run([sys.executable, "-c", "from softrdma.verbs.device import management as m; "
                              "print(m().call('link_set', name='rxe0')[0]['fault_counters']['corrupted']); "
                              "m().call('link_set', name='rxe0', faults={})"], env=env, capture_output=True, text=True)
    corrupted = int(got.stdout)
    recs = read_pcap(pcap)
    bad = [f for _, f, _ in recs if not _scapy_icrc_ok(f)]
    assert corrupted > 0 and len(bad) == corrupted


def test_errors_on_the_device(daemon, tmp_path):
    def run(*args):
        r = subprocess.run([sys.executable, "-m", "softrdma", "ibdump", "-w", str(tmp_path / "x.pcap"), *args],
                           env=_env(daemon), capture_output=True, text=True, timeout=30)
        return r.returncode, r.stderr
    assert run("-d", "mlx5_0") == (1, "-E- IB device mlx5_0 wasn't found\n-E- failed to create resources\n")
    assert run("-i", "2", "-s") == (1, "-E- ibv_query_port on port 2 failed\n-E- failed to create resources\n")
    assert run("--a0-mode", "-s") == (1, "-E- This tool does not support A0 mode\n" + ibdump.A0_WHY + "\n")
    # ERF records of type InfiniBand are an IB port's: refused on a RoCE device
    assert run("--erf", "1", "-s") == (1, f"-E- {ibdump.REFUSED['erf']}\n-E- failed to create resources\n")
    assert ibdump.REFUSED["erf"].startswith("--erf 1: this device is RoCE (Ethernet link layer)")
    rc, err = run("-w", "/nonexistent/dir/x.pcap")
    assert (rc, err) == (1, "-E- Failed to open file /nonexistent/dir/x.pcap: No such file or directory\n"
                            "-E- failed to create resources\n")
    assert run("-w", "/dev/full", "-s") == (1, "-E- Failed writing to output file.\n")
    assert all(r["kind"] != "capture" for r in daemon.resources())


def test_the_daemon_going_away_ends_the_capture():
    with daemon_in_shm("ibdump-gone") as d:
        tool = Ibdump(d, "-s", "-w", os.devnull)
        d.proc.terminate()
        rc, out, err = tool.stop(sig=0)
    assert (rc, out, err) == (1, b"", "-E- poll CQ failed: softrdmad closed the connection\n"
                                      "-E- poll completion failed\n")


# --------------------------------------------------------------------------- 4. across two namespaces
def _ipv4_gid_index(h, i: int) -> str:
    """The index of host ``i``'s IPv4 GID (the daemon's business)."""
    prog = ("from softrdma.verbs import device; c = device.Context(name='rxe0'); "
            "print(next(k for k in range(16) if c.query_gid(1, k).raw[:12] == bytes(10) + bytes([255, 255])))")
    p = h.popen(i, [sys.executable, "-c", prog], stdout=subprocess.PIPE, text=True)
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0
    return out.strip()


def test_capture_of_a_real_udp_exchange_across_namespaces(tshark, tmp_path):
    from netns_helpers import TwoHosts, need_root
    need_root()
    h = TwoHosts()
    try:
        h.start_daemons()
        pcap = str(tmp_path / "ns.pcap")
        env = {**os.environ, "SOFTRDMA_RUN": h.run_dirs[0], "SOFTRDMA_AUTOSTART": "0"}
        tool = subprocess.Popen(["ip", "netns", "exec", h.ns[0], sys.executable, "-m", "softrdma", "ibdump",
                                 "-w", pcap], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_line(tool.stdout, "Ready to capture", proc=tool)
        gid = _ipv4_gid_index(h, 0)
        assert gid == _ipv4_gid_index(h, 1)
        port = str(free_port())
        srv = h.popen(1, [sys.executable, "-m", "softrdma", "ibv_rc_pingpong", "-g", gid, "-n", "5", "-s", "2000",
                          "-p", port], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_listening(int(port), srv)                 # in the server's namespace
        cli = h.popen(0, [sys.executable, "-m", "softrdma", "ibv_rc_pingpong", "-g", gid, "-n", "5", "-s", "2000",
                          "-p", port, h.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        c_out, c_err = cli.communicate(timeout=60)
        s_out, s_err = srv.communicate(timeout=60)
        assert cli.returncode == 0 and srv.returncode == 0, (c_err, s_err)
        tool.send_signal(signal.SIGINT)
        _, err = tool.communicate(timeout=30)
        assert tool.returncode == 0, err
        assert all(p.poll() is None for p in h.daemons)
    finally:
        h.close()

    def addr(out):
        local = next(line for line in out.splitlines() if "local address" in line)
        return int(local.split("QPN ")[1][:8], 16), int(local.split("PSN ")[1][:8], 16)

    (cqpn, cpsn), (sqpn, spsn) = addr(c_out), addr(s_out)
    rows = tshark_rows(tshark, pcap)
    assert rows and all(re.fullmatch(r"eth:ethertype:ip:udp:infiniband(:data)?", r["frame.protocols"])
                        and r["_ws.malformed"] == "" for r in rows)
    assert all(_scapy_icrc_ok(f) for _, f, _ in read_pcap(pcap))
    assert {(r["udp.srcport"], r["udp.dstport"]) for r in rows} == {("4791", "4791")}
    # (both daemons number their QPs from 0x11: the addresses tell the sides apart)
    sent = [_row(r) for r in rows if (r["ip.src"], r["ip.dst"]) == h.ip and _row(r)[0] != 0x11]
    recv = [_row(r) for r in rows if (r["ip.dst"], r["ip.src"]) == h.ip and _row(r)[0] != 0x11]
    assert len(sent) + len(recv) + sum(_row(r)[0] == 0x11 for r in rows) == len(rows)
    # 5 SENDs of 2000 bytes each way at ping-pong's MTU 1024: FIRST, LAST; PSNs from the printed ones
    assert sent == [(op, sqpn, (cpsn + i) & PSN_MASK) for i, op in enumerate([0, 2] * 5)]
    assert recv == [(op, cqpn, (spsn + i) & PSN_MASK) for i, op in enumerate([0, 2] * 5)]


def test_a_perftest_run_captured_opens_in_tshark_with_every_packet_decoded(daemon, tshark, tmp_path):
    """The issue's "done when": ibdump while softrdma's perftest runs
    (write, read, send and atomic bandwidth at MTU 1024, several packets a
    message): every frame decodes as InfiniBand, none malformed, and the
    requests of each test carry consecutive PSNs."""
    pcap = str(tmp_path / "perftest.pcap")
    tool = Ibdump(daemon, "-w", pcap)
    env = _env(daemon)
    for perf, extra in (("ib_write_bw", ["-s", "3000"]), ("ib_read_bw", ["-s", "3000"]),
                        ("ib_send_bw", ["-s", "3000"]), ("ib_atomic_bw", [])):
        args = [sys.executable, "-m", "softrdma", perf, "-d", "rxe0", "-n", "20", "-m", "1024", "-F", *extra,
                "-p", str(free_port())]
        srv = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_listening(int(args[-1]), srv)
        cli = subprocess.run(args + ["127.0.0.1"], env=env, capture_output=True, text=True, timeout=120)
        srv.communicate(timeout=60)
        assert cli.returncode == 0 and srv.returncode == 0, cli.stdout + cli.stderr
    rc, _, err = tool.stop()
    assert rc == 0, err
    recs = read_pcap(pcap)
    rows = tshark_rows(tshark, pcap)
    assert len(rows) == len(recs) > 200
    for r in rows:
        assert re.fullmatch(r"eth:ethertype:(ip|ipv6):udp:infiniband(:data)?", r["frame.protocols"]), r
        assert r["_ws.malformed"] == "", r
    ops = {int(r["infiniband.bth.opcode"]) for r in rows}
    # WRITE FIRST/MIDDLE/LAST, READ request and responses, SEND FIRST/MIDDLE/LAST, FETCH_ADD or CMP_SWAP, ACKs
    assert {0x06, 0x07, 0x08, 0x0C, 0x0D, 0x0E, 0x0F, 0x00, 0x01, 0x02, 0x11} <= ops and ops & {0x13, 0x14}
    by_qp: dict = {}
    for r in rows:
        op, qp, psn = _row(r)
        if op not in (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12):          # requests only
            by_qp.setdefault(qp, []).append(psn)
    for psns in by_qp.values():     # each QP's requests in PSN order: +1 a packet, +3 after a 3000-byte READ
        assert all((b - a) & 0xFFFFFF in (1, 3) for a, b in zip(psns, psns[1:])), psns
