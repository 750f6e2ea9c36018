"""perftest: ib_send_bw, ib_write_bw, ib_read_bw, ib_atomic_bw and the four
_lat tools (softrdma.tools.perftest).

Checked against docs/formats/perftest.md and ../shared/interop/rxe-vm/NOTES.md
("perftest 4.5-0.17"), not against the module itself:

* the out-of-band messages byte for byte (the keys NOTES.md recorded), the
  report fields as IEEE big-endian doubles, the version-dependent sizes;
* fake peers written from the recorded exchange: a perftest 4.5-0.17
  ("6.06") server for softrdma's client and a perftest client for
  softrdma's server (its RDMA half made with the verbs library), checking
  every message the tool writes and the numbers the server prints;
* every tool in every connection mode perftest allows for it, server and
  client as two processes on a real softrdmad, tables parsed back, plus
  the options that change the loops (-q, --use-srq, -b, -e, -l, -Q, -a,
  -D, --run_infinitely, --out_json);
* option parsing and its errors, perftest's messages;
* the numbers: the peak search against perftest's quadratic loop, the
  latency statistics against the C rules.

No timing assertions.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm
from wait_helpers import free_port, wait_listening
from softrdma.tools.perftest import comm as C
from softrdma.tools.perftest import params as P
from softrdma.tools.perftest import report as R

# --------------------------------------------------------------------------- the formats, as the doc writes them
KEYS_GID = re.compile(rb"^([0-9a-f]{4}):([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{8}):([0-9a-f]{16}):"
                      rb"((?:[0-9a-f]{2}:){16})([0-9a-f]{8}):\x00$")
BW_ROW = re.compile(r"^ (\d+) +(\d+) +(-?\d+\.\d\d) +(-?\d+\.\d\d) *\t\t +(\d+\.\d{6})$")
BW_ROW_EXT = re.compile(r"^ (\d+) +(\d+) +(\d+\.\d{6}) +(\d+\.\d{6}) +(\d+\.\d{6})$")
LAT_ROW = re.compile(r"^ (\d+) +(\d+) +" + r"\s+".join([r"(\d+\.\d\d)"] * 7) + r"\s*$")
BW_TITLE = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
BW_TITLE_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
LAT_TITLE = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   "
             "99% percentile[usec]   99.9% percentile[usec] ")
LINE = "-" * 87
ADDR = re.compile(r"^ (local|remote) address: LID (0000|0x[0-9a-f]{2,}) QPN 0x([0-9a-f]{4,}) PSN 0x([0-9a-f]{4,6})"
                  r"(?: OUT 0x([0-9a-f]{2,}))?(?: RKey 0x([0-9a-f]{6,}) VAddr 0x([0-9a-f]{14,}))?$")
GID_LINE = re.compile(r"^ GID: (\d{2,3}:){15}\d{2,3}$")

# NOTES.md, "perftest 4.5-0.17", client then server keys of ib_write_bw -d rxe0 -x 1
OBSERVED_KEYS = [
    b"0000:0001:000014:c66531:0000055d:00007fb14ce34000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\x00",
    b"0000:0001:000013:31e5da:0000048a:00007f5dab593000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\x00",
]
RXE_GID = bytes(10) + b"\xff\xff" + bytes([10, 77, 0, 2])


def be_double(x: float) -> bytes:
    return struct.pack(">d", x)


# --------------------------------------------------------------------------- 1. the messages
def test_keys_byte_for_byte():
    d0 = C.Dest(lid=0, out_reads=1, qpn=0x14, psn=0xC66531, rkey=0x55D, vaddr=0x7FB14CE34000, gid=RXE_GID,
                srqn=0, gid_index=1)
    d1 = C.Dest(lid=0, out_reads=1, qpn=0x13, psn=0x31E5DA, rkey=0x48A, vaddr=0x7F5DAB593000, gid=RXE_GID,
                srqn=0, gid_index=1)
    for d, raw in zip((d0, d1), OBSERVED_KEYS):
        assert len(raw) == C.KEY_MSG_SIZE_GID == 108
        assert C.encode_keys(d) == raw
        back = C.decode_keys(raw, with_gid=True)
        back.gid_index = 1
        assert back == d
    # ib_read_bw: out_reads 0x0080 (the device's max_qp_rd_atom, 128 on rxe and softrdma)
    assert C.encode_keys(C.Dest(out_reads=128, gid_index=1))[5:9] == b"0080"
    # the GID-less form (IB without -x): 59 bytes, "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" + NUL
    short = C.encode_keys(C.Dest(lid=0x1a, out_reads=1, qpn=0x12, psn=0xabcdef, rkey=0x99, vaddr=0x1000, srqn=7))
    assert short == b"001a:0001:000012:abcdef:00000099:0000000000001000:00000007\x00"
    assert len(short) == C.KEY_MSG_SIZE == 59
    assert C.decode_keys(short, with_gid=False) == C.Dest(0x1a, 1, 0x12, 0xabcdef, 0x99, 0x1000, bytes(16), 7, -1)
    assert C.decode_keys(b"garbage\x00" + bytes(51), with_gid=False) is None


def test_numbers_on_the_wire():
    # version: char[16]; system data: big-endian ints; MTU: "%d" in 2 bytes; reports: big-endian doubles
    assert b"6.24".ljust(16, b"\0") == P.VERSION.encode().ljust(16, b"\0")
    assert struct.pack(">i", 4096) == b"\x00\x00\x10\x00" and struct.pack(">i", 64) == b"\x00\x00\x00\x40"
    assert be_double(44.5) == bytes.fromhex("4046400000000000")
    assert C.version_float("6.06") == 6.06 and C.version_float("5.33abc") == 5.33 and C.version_float("") == 0.0


def test_bw_and_latency_rows_format():
    row = R.report_fmt_bw(65536, 5000, 11030.78, 11030.45, 0.176487)
    assert row == " 65536      5000             11030.78            11030.45\t\t     0.176487"
    row = R.report_fmt_bw(2, 1000, 4.42, 1.09, 0.570447)
    assert row == " 2          1000             4.42               1.09   \t\t     0.570447"
    assert BW_ROW.match(row)
    assert BW_ROW_EXT.match(R.report_fmt_bw_ext(8, 224958464, 0.0, 0.048, 7.498617))
    lat = R.report_fmt_lat(2, 100000, 40.88, 2994.82, 47.80, 50.25, 13.70, 76.42, 185.04)
    # " %-7lu %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"
    assert lat == (" 2       100000          40.88          2994.82      47.80    \t       50.25       \t13.70  \t\t"
                   "76.42   \t\t185.04 ")
    # a public rxe transcript (LKML, tabs expanded to 8 columns by the mail) shows the same columns
    assert lat.expandtabs(8).split() == "2 100000 40.88 2994.82 47.80 50.25 13.70 76.42 185.04".split()
    assert LAT_ROW.match(lat)
    assert R.pingpong_data(P.init_params(P.WRITE, P.BW, "x"), C.Dest(0, 1, 0x9b, 0x57bb8f, 0x1fd4bc, 0x7f0e0c8aa000,
                                                                          RXE_GID, 0, 1), False, 1) == (
        " local address: LID 0000 QPN 0x009b PSN 0x57bb8f RKey 0x1fd4bc VAddr 0x007f0e0c8aa000\n"
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:02\n")


def _peak_bruteforce(tp, tc, n, post_list, cq_mod):
    """perftest's loop, literally."""
    opt = (tc[0] - tp[0]) & 0xFFFFFFFFFFFFFFFF
    for i in range(0, n, post_list):
        j = ((i + 1 + cq_mod - 1) // cq_mod) * cq_mod - 1
        while j < n:
            t = ((tc[j] - tp[i]) & 0xFFFFFFFFFFFFFFFF) // (j - i + 1)
            opt = min(opt, t)
            j += cq_mod
        if n % cq_mod:
            j = n - 1
            opt = min(opt, ((tc[j] - tp[i]) & 0xFFFFFFFFFFFFFFFF) // (j - i + 1))
    return opt


def test_peak_search_equals_perftests_loop():
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randint(1, 60)
        cq_mod = rng.choice([1, 2, 3, 7, 10])
        post_list = rng.choice([1, 1, 2])
        if post_list > 1:
            cq_mod = post_list
            n -= n % post_list
            if n == 0:
                continue
        t, tp, tc = 10_000, [0] * n, [0] * n
        for k in range(0, n, post_list):
            t += rng.randint(1, 500)
            tp[k] = t
        signaled = [j for j in range(n) if j % cq_mod == cq_mod - 1] + ([n - 1] if n % cq_mod else [])
        for j in signaled:
            tc[j] = max(tp[j - (j % post_list)], t) + rng.randint(1, 3000)
            t = tc[j]
        assert R.peak_delta(tp, tc, n, post_list, cq_mod) == _peak_bruteforce(tp, tc, n, post_list, cq_mod)


def test_latency_statistics_c_rules():
    p = P.init_params(P.WRITE, P.LAT, "ib_write_lat")
    p.iters = 8
    # round trips of 10..70 us plus two outliers; write: half a round trip
    tposted = [0]
    for d in [10_000, 30_000, 20_000, 70_000, 40_000, 50_000, 60_000, 1_000_000]:
        tposted.append(tposted[-1] + d)
    s = R.lat_stats(p, tposted)
    # 7 deltas sorted, the two largest dropped -> 5 measured; median of 5 = third
    assert s["measure_cnt"] == 5
    assert s["delta"][:5] == [10_000, 20_000, 30_000, 40_000, 50_000]
    assert s["latency"] == 30_000 / 2000
    assert s["average"] == (5 + 10 + 15 + 20 + 25) / 5
    # C: each deviation truncated to int before squaring: 10,5,0,-5,-10
    assert s["stdev"] == math.sqrt((100 + 25 + 0 + 25 + 100) / 5)
    assert (s["iters_99"], s["iters_99_9"]) == (5, 5)
    p.verb = P.READ                                   # read/atomic: the whole round trip
    assert R.lat_stats(p, tposted)["latency"] == 30.0


# --------------------------------------------------------------------------- 2. options
def _parse(capsys, tool, argv):
    verb, tst = {"ib_send_bw": (P.SEND, P.BW), "ib_write_bw": (P.WRITE, P.BW), "ib_read_bw": (P.READ, P.BW),
                 "ib_atomic_bw": (P.ATOMIC, P.BW), "ib_send_lat": (P.SEND, P.LAT),
                 "ib_write_lat": (P.WRITE, P.LAT), "ib_read_lat": (P.READ, P.LAT),
                 "ib_atomic_lat": (P.ATOMIC, P.LAT)}[tool]
    r = P.parse(argv, tool, verb, tst)
    out, err = capsys.readouterr()
    return r, out, err


@pytest.mark.parametrize("tool,argv,err", [
    ("ib_write_bw", ["-n", "3"], " Iteration num should be between 5 and 100000000\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-n", "12x"], " Iteration num argument 12x should be uint64_t\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-p", "x1"], " Port argument x1 should be int\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-t", "0"], " Tx depth should be between 1 and 15000\n Parser function exited with Error\n"),
    ("ib_send_bw", ["-r", "0"], "  Rx depth should be between 1 and 16384\n Parser function exited with Error\n"),
    ("ib_read_bw", ["-r", "4"], " On RDMA verbs rx depth can be only 1\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-e"], " Events feature not available on WRITE verb\n Parser function exited with Error\n"),
    ("ib_send_lat", ["-b"], " Bidirectional is only available in BW test\n Parser function exited with Error\n"),
    ("ib_send_lat", ["-q", "2"], " Multiple QPs only available on bw tests\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-A", "CMP_AND_SWAP"],
     " You are not running the atomic_lat/bw test!\n To change the atomic action type, you must run one of the"
     " atomic tests\n Parser function exited with Error\n"),
    ("ib_atomic_bw", ["-A", "SWAP"], " Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}\n"),
    ("ib_read_bw", ["-c", "UC"], " UC connection not possible in READ/ATOMIC verbs\n"),
    ("ib_write_bw", ["-c", "UD"], " UD connection only possible in SEND verb\n"),
    ("ib_send_bw", ["-c", "XRC"], " XRC not detected in libibverbs\n"),
    ("ib_send_bw", ["-c", "FOO"], " Invalid Connection type. Please choose from {RC,UC,UD,XRC,DC,SRD}\n"),
    ("ib_write_bw", ["-s", "0"], " Message Size should be between 1 and 2147483647\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-p", "1", "-p", "2"], " Duplicated argument: -p \n Parser function exited with Error\n"),
    ("ib_write_bw", ["--out_json", "--out_json"], " Duplicated argument: out_json \n Parser function exited with Error\n"),
    ("ib_read_bw", ["-I", "64"], " Inline feature not available on READ/Atomic verbs\n Parser function exited with Error\n"),
    ("ib_write_bw", ["-N", "-D", "2", "-f", "1"], "please check that DURATION > 2*MARGIN\n"),
    ("ib_write_bw", ["-D", "2", "-a"], "Duration mode currently doesn't support running on all sizes.\n"),
    ("ib_send_lat", ["--run_infinitely"], " run_infinitely exists only in BW tests for now.\n"),
    ("ib_write_bw", ["-l", "3", "-n", "10"], "Number of iterations must be a multiple of post list size\n"),
    ("ib_write_bw", ["--use-srq"], ""),
    ("ib_write_bw", ["-T", "3"], ""),
    ("ib_write_bw", ["--use_cuda=0"], " Parser function exited with Error\n"),
    ("ib_write_bw", ["a", "b"], " Invalid Command line. Please check command rerun \n"),
])
def test_option_errors(capsys, tool, argv, err):
    r, out, got = _parse(capsys, tool, argv)
    assert r == 1
    assert got == err
    if argv == ["--use-srq"]:
        assert out == P.RESULT_LINE + " Using SRQ only avavilible in SEND tests.\n"
    if argv == ["-T", "3"]:
        assert out == " TOS only valid for rdma_cm based QP and RawEth QP \n"
    if argv == ["--use_cuda=0"]:
        assert out == " Unsupported memory type\n"


@pytest.mark.parametrize("tool,argv,out", [
    ("ib_send_bw", ["-g", "-q", "2"], "Only 1 QP supported in multicast\n"),
    ("ib_send_bw", ["-g", "-b"], "Bidirectional mode not supported in multicast\n"),
    ("ib_send_bw", ["-g", "-R"], P.RESULT_LINE + " Perftest still doesn't support Multicast with rdma_cm\n"),
    ("ib_send_bw", ["-g", "-O"], " Dual-port mode not supported in multicast feature\n"),
])
def test_multicast_dependencies(capsys, tool, argv, out):
    """force_dependecies' multicast rules (stdout, exit 1, as perftest's)."""
    r, got, err = _parse(capsys, tool, argv)
    assert (r, got.endswith(out)) == (1, True), (got, err)


def test_multicast_options(capsys):
    r, out, err = _parse(capsys, "ib_write_bw", ["-g"])
    assert (r, err) == (1, " MultiCast feature only available on SEND verb\n Parser function exited with Error\n")
    p, _, _ = _parse(capsys, "ib_send_bw", ["-g", "-c", "RC", "-M", "255:14:0:0:0:0:0:0:0:0:255:255:239:1:2:3"])
    assert (p.use_mcg, p.connection_type, p.gid_index, p.user_mgid) == \
        (True, P.UD, 0, "255:14:0:0:0:0:0:0:0:0:255:255:239:1:2:3")      # UD forced, GID index 0
    from softrdma.tools.perftest import mcast
    assert mcast.set_multicast_gid(None, False) == bytes([255, 1, 0, 0, 0, 2, 201, 133]) + bytes(8)
    assert mcast.set_multicast_gid(None, True)[15] == 1                   # the client's group (send_lat)
    assert mcast.set_multicast_gid("0xff:0x0e:0:0:0:0:0:0:0:0:255:255:239:1:2:3", True) == \
        b"\xff\x0e" + bytes(8) + b"\xff\xff" + bytes([239, 1, 2, 3])


def test_bad_option_prints_usage(capsys):
    r, out, err = _parse(capsys, "ib_read_lat", ["-k"])
    assert r == 1
    assert err == ("ib_read_lat: option requires an argument -- 'k'\n Invalid Command or flag.\n"
                   " Please check command line and run again.\n\n Parser function exited with Error\n")
    assert out == P.usage("ib_read_lat", P.READ, P.LAT)
    assert "  -o, --outs=<num>  num of outstanding read/atom(default max of device)\n" in out
    assert "-a, --all" in out and "-b, --bidirectional" not in out and "-A, --atomic_type" not in out
    usage = P.usage("ib_atomic_bw", P.ATOMIC, P.BW)
    assert "-a, --all" not in usage and "-s, --size" not in usage and "-A, --atomic_type" in usage


def test_defaults_and_dependencies(capsys):
    p, out, _ = _parse(capsys, "ib_write_bw", [])
    assert (p.size, p.iters, p.tx_depth, p.rx_depth, p.cq_mod, p.port, p.gid_index) == \
        (65536, 5000, 128, 1, 1, 18515, -1)          # cq_mod 1: message above 8 KiB
    p, _, _ = _parse(capsys, "ib_send_bw", ["-n", "101", "-s", "64"])
    assert (p.iters, p.rx_depth, p.cq_mod, p.noPeak) == (101, 102, 100, True)    # rx_depth: odd WA; server: no peak
    p, out, _ = _parse(capsys, "ib_send_bw", ["-c", "UD", "-n", "40", "x"])
    assert (p.rx_depth, p.machine, p.servername) == (40, P.CLIENT, "x")
    p, _, _ = _parse(capsys, "ib_atomic_lat", [])
    assert (p.size, p.tx_depth, p.cq_mod, p.atomicType, p.inline_size) == (8, 1, 1, P.FETCH_AND_ADD, 0)
    p, out, _ = _parse(capsys, "ib_write_bw", ["-D", "8"])
    assert (p.test_type, p.iters, p.margin, p.noPeak) == (P.DURATION, 0, 2, True)
    assert out == " WARNING: BW peak won't be measured in this run.\n"
    p, _, _ = _parse(capsys, "ib_write_bw", ["-a", "-i", "257", "-x", "300"])
    assert (p.size, p.ib_port, p.gid_index, p.use_gid_user) == (P.MAX_SIZE, 1, 44, True)   # uint8_t casts
    p, _, _ = _parse(capsys, "ib_send_bw", ["-s", "4K", "--report_gbits", "--reversed", "srv"])
    assert (p.size, p.report_fmt, p.machine) == (4096, P.GBS, P.SERVER)
    assert _parse(capsys, "ib_write_bw", ["-V"])[:2] == (1, "Version: 6.24\n")


@pytest.mark.parametrize("tool,argv,msg", [
    ("ib_send_bw", ["-W", "a"], "ib_send_bw: -W/--report-counters: perftest's counter reader is not built"),
    ("ib_write_bw", ["--use-null-mr"], "ib_write_bw: --use-null-mr: softrdma has no null MR"),
    ("ib_send_bw", ["-B", "00:11:22:33:44:55"], "ib_send_bw: -B: belongs to the raw_ethernet_* tests"),
    ("ib_write_bw", ["--rate_limit=5"], "ib_write_bw: --rate_limit_type=HW: softrdma devices have no hardware"),
])
def test_unsupported_options_fail_loudly(tool, argv, msg):
    r = subprocess.run([sys.executable, "-m", "softrdma", tool, *argv], capture_output=True, text=True, timeout=30,
                       env={**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert r.returncode == 1
    assert r.stderr.startswith(msg), r.stderr
    assert "Traceback" not in r.stderr


# --------------------------------------------------------------------------- the daemon and the processes
@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("perftest") as d:
        yield d


def tool_env(daemon, **extra) -> dict:
    return {**daemon.env, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_PROGRESS": "0", **extra}


def start_server(daemon, tool: str, args: list[str], port: int, cwd=None, env=None):
    # bytes, decoded without newline translation: a "\r" stays a "\r"
    proc = subprocess.Popen([sys.executable, "-m", "softrdma", tool, "-p", str(port), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or tool_env(daemon), cwd=cwd)
    try:
        wait_listening(port, proc)
    except AssertionError:
        proc.kill()
        proc.communicate()
        raise
    return proc


def run_pair(daemon, tool: str, args: list[str], timeout: float = 120, cwd=None, env=None):
    port = free_port()
    srv = start_server(daemon, tool, args, port, cwd=cwd, env=env)
    try:
        cli = subprocess.run([sys.executable, "-m", "softrdma", tool, "-p", str(port), *args, "127.0.0.1"],
                             capture_output=True, timeout=timeout, env=env or tool_env(daemon), cwd=cwd)
        sout, serr = srv.communicate(timeout=timeout)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
    return (cli.returncode, cli.stdout.decode(), cli.stderr.decode(), srv.returncode, sout.decode(),
            serr.decode())


def rows(out: str, pattern=BW_ROW) -> list[tuple]:
    found = []
    for line in out.splitlines():
        m = pattern.match(line)
        if m:
            found.append(tuple(float(x) if "." in x else int(x) for x in m.groups()))
    return found


def check_header(out: str, title: str, conn: str, role_client: bool, tst: int, verb: int) -> None:
    lines = out.splitlines()
    i = lines.index(" " * 20 + title) - 1
    assert lines[i] == LINE
    if lines[i + 2].startswith(" Test with events."):
        assert lines[i + 2] == " Test with events. Using rxe0_comp0"
        i += 1
    assert lines[i + 2] == " Dual-port       : OFF\t\tDevice         : rxe0"
    assert lines[i + 4] in (f" Connection type : {conn}\t\tUsing SRQ      : OFF",
                            f" Connection type : {conn}\t\tUsing SRQ      : ON")
    assert " Link type       : Ethernet" in lines
    assert any(re.fullmatch(r" GID index       : \d+", line) for line in lines)
    assert " rdma_cm QPs\t : OFF" in lines and " Data ex. method : Ethernet" in lines
    assert (" TX depth        : " in out) == (role_client or " Bidirectional " in title)
    if verb in (P.READ, P.ATOMIC):
        assert " Outstand reads  : 128" in lines
    else:
        assert " Max inline data : 0[B]" in lines
    assert any(re.fullmatch(r" Mtu             : \d+\[B\]", line) for line in lines)


def check_addresses(out: str, nqps: int, verb: int) -> None:
    lines = out.splitlines()
    addr = [ADDR.match(line) for line in lines if ADDR.match(line)]
    assert [m[1] for m in addr] == ["local"] * nqps + ["remote"] * nqps
    for m in addr:
        assert (m[5] is not None) == (verb == P.READ)
        assert (m[6] is not None) == (verb in (P.READ, P.WRITE))
    gids = [line for line in lines if GID_LINE.match(line)]
    assert len(gids) == 2 * nqps and all(":255:255:" in g for g in gids)     # the IPv4 GID, picked without -x


# --------------------------------------------------------------------------- 3. every tool, every mode
BW_CASES = [
    ("ib_write_bw", "RC", ["-n", "40", "-s", "4096", "-q", "2"]),
    ("ib_write_bw", "UC", ["-n", "30", "-s", "1024"]),
    ("ib_read_bw", "RC", ["-n", "30", "-s", "2048", "-e"]),
    ("ib_atomic_bw", "RC", ["-n", "30", "-A", "CMP_AND_SWAP"]),
    ("ib_send_bw", "RC", ["-n", "40", "-s", "512", "-Q", "8", "--report_gbits"]),
    ("ib_send_bw", "UC", ["-n", "30", "-s", "256", "-q", "2", "--use-srq"]),
    ("ib_send_bw", "UD", ["-n", "30", "-s", "512", "-e"]),
]


@pytest.mark.parametrize("tool,conn,args", BW_CASES, ids=[f"{t}-{c}" for t, c, _ in BW_CASES])
def test_bw_tools_end_to_end(daemon, tool, conn, args):
    verb = {"ib_write_bw": P.WRITE, "ib_read_bw": P.READ, "ib_atomic_bw": P.ATOMIC, "ib_send_bw": P.SEND}[tool]
    crc, cout, cerr, src, sout, serr = run_pair(daemon, tool, ["-c", conn, *args])
    assert (crc, src) == (0, 0), (cout, cerr, sout, serr)
    assert "Traceback" not in cerr + serr
    n = int(args[args.index("-n") + 1])
    nqps = int(args[args.index("-q") + 1]) if "-q" in args else 1
    size = 8 if verb == P.ATOMIC else int(args[args.index("-s") + 1])
    title = {P.WRITE: "RDMA_Write BW Test", P.READ: "RDMA_Read BW Test", P.SEND: "Send BW Test",
             P.ATOMIC: "Atomic CMP_AND_SWAP BW Test"}[verb]
    check_header(cout, title, conn, True, P.BW, verb)
    check_header(sout, title, conn, False, P.BW, verb)
    check_addresses(cout, nqps, verb)
    assert "\n************************************\n* Waiting for client to connect... *\n" in sout
    gbits = "--report_gbits" in args
    pattern = BW_ROW
    assert (BW_TITLE_G if gbits else BW_TITLE) in cout.splitlines()
    got = rows(cout, BW_ROW) or rows(cout, BW_ROW_EXT)
    assert len(got) == 1, cout
    bytes_, iters, peak, avg, rate = got[0]
    assert (bytes_, iters) == (size, n * nqps)
    assert avg > 0 and rate > 0 and peak >= 0
    # the average and the message rate agree: avg = rate x size
    factor = 125.0 if gbits else 2 ** 20 / 1e6
    assert math.isclose(avg, rate * size / factor, rel_tol=0.02, abs_tol=0.011)
    srows = rows(sout, pattern) or rows(sout, BW_ROW_EXT)
    if verb == P.SEND:
        assert srows and srows[0][:2] == (size, n * nqps) and srows[0][2] == 0.0      # the receiver's own, no peak
    else:
        assert srows == got                                                         # the client's, via the exchange
    assert cout.endswith(LINE + "\n") and sout.endswith(LINE + "\n")


# --odp, --mmap, --use_hugepages: MRs on the process's own memory (the daemon reaches it as ODP pages)
ODP_CASES = [
    ("ib_write_bw", "RC", ["-n", "30", "-s", "4096"]),
    ("ib_read_bw", "RC", ["-n", "30", "-s", "2048"]),
    ("ib_send_bw", "RC", ["-n", "30", "-s", "1024", "--mr_per_qp", "-q", "2"]),
    ("ib_send_bw", "UD", ["-n", "30", "-s", "512"]),
    ("ib_atomic_bw", "RC", ["-n", "20"]),
    ("ib_write_lat", "RC", ["-n", "30"]),                  # polls the last byte of its own (ODP) buffer
]


@pytest.mark.parametrize("tool,conn,args", ODP_CASES, ids=[f"{t}-{c}" for t, c, _ in ODP_CASES])
def test_odp_end_to_end(daemon, tool, conn, args):
    crc, cout, cerr, src, sout, serr = run_pair(daemon, tool, ["-c", conn, "--odp", *args])
    assert (crc, src) == (0, 0), (cout, cerr, sout, serr)
    assert "Traceback" not in cerr + serr
    n = int(args[args.index("-n") + 1]) * (int(args[args.index("-q") + 1]) if "-q" in args else 1)
    got = rows(cout, LAT_ROW) if tool.endswith("_lat") else rows(cout) or rows(cout, BW_ROW_EXT)
    assert len(got) == 1 and got[0][1] == n, cout


def test_odp_refused_where_perftest_refuses_it(daemon):
    """check_odp_support: UC has no ODP in perftest, whatever the device
    says; the client fails after the connection as perftest's ctx_init."""
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_write_bw", ["-c", "UC", "--odp", "-n", "10"], timeout=60)
    assert crc == 1 and "Traceback" not in cerr
    assert cerr.endswith(" ODP is not available on UC transport.\nfailed to create mr\nFailed to create MR\n"
                         " Couldn't create IB resources\n"), cerr


def test_mmap_file_buffers(daemon, tmp_path):
    """--mmap/--mmap-offset: each side's buffer is its file, mapped shared
    at the offset: the client's bytes arrive in the server's file, after
    the offset, and nothing before it changes."""
    size, page = 4096, mmap.PAGESIZE
    cli_file, srv_file = tmp_path / "client", tmp_path / "server"
    cli_file.write_bytes(b"\xab" * (1 << 20))
    srv_file.write_bytes(b"\xcd" * page + bytes((1 << 20) - page))
    port = free_port()
    base = ["-p", str(port), "-c", "RC", "-n", "20", "-s", str(size)]
    srv = start_server(daemon, "ib_send_bw", [*base[2:], "--mmap", str(srv_file), "--mmap-offset", str(page)], port)
    try:
        cli = subprocess.run([sys.executable, "-m", "softrdma", "ib_send_bw", *base, "--mmap", str(cli_file),
                              "127.0.0.1"], capture_output=True, text=True, timeout=120, env=tool_env(daemon))
        sout, serr = srv.communicate(timeout=120)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
    assert (cli.returncode, srv.returncode) == (0, 0), (cli.stdout, cli.stderr, sout, serr)
    assert re.search(r"^allocated mmap buffer of size \d+ at 0x[0-9a-f]+$", cli.stdout, re.M), cli.stdout
    assert re.search(rb"^allocated mmap buffer of size \d+ at 0x[0-9a-f]+$", sout, re.M), sout
    data = srv_file.read_bytes()
    assert data[:page] == b"\xcd" * page                     # before the offset: untouched
    assert b"\xab" * size in data[page:]                      # the client's message, in the server's file
    # a file that cannot be opened: perftest's messages (the open's on stdout, as its printf)
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_write_bw", ["-n", "5", "--mmap", str(tmp_path / "none")],
                                                timeout=60)
    assert src == 1 and crc == 1
    assert f"Unable to open '{tmp_path / 'none'}': No such file or directory\n" in sout
    assert serr.startswith("Couldn't allocate work buf.\nfailed to create mr\nFailed to create MR\n"), serr


def _free_huge_pages() -> int:
    try:
        with open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") as f:
            return int(f.read())
    except OSError:
        return 0


def test_use_hugepages(daemon):
    """--use_hugepages: the buffer is a SHM_HUGETLB segment; with no huge
    pages configured, perftest's failure."""
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_write_bw", ["-n", "10", "--use_hugepages"], timeout=60)
    assert "Traceback" not in cerr + serr
    if _free_huge_pages() >= 2:
        assert (crc, src) == (0, 0), (cerr, serr)
        assert len(rows(cout)) == 1
    else:
        assert (crc, src) == (1, 1)
        assert serr.startswith("Failed to allocate hugepages. Please configure hugepages\n"
                               "Failed to allocate hugepage region.\nfailed to create mr\nFailed to create MR\n")


MCAST_CASES = [
    ("ib_send_bw", ["-n", "40", "-s", "1024"]),
    ("ib_send_lat", ["-n", "30"]),                           # each side attached to its own group
    ("ib_send_bw", ["-n", "30", "-x", "1", "-M", "255:14:0:0:0:0:0:0:0:0:255:255:239:77:13:8"]),
]


@pytest.mark.parametrize("tool,args", MCAST_CASES, ids=["send_bw", "send_lat", "send_bw-M"])
def test_multicast_end_to_end(daemon, tool, args):
    """-g: the server's QP attached to the group, whose GID it gives as its
    own with QPN 0xFFFFFF; the client sends to the group."""
    crc, cout, cerr, src, sout, serr = run_pair(daemon, tool, ["-g", *args])
    assert (crc, src) == (0, 0), (cout, cerr, sout, serr)
    assert "Traceback" not in cerr + serr
    title = "Send BW Multicast Test" if tool == "ib_send_bw" else "Send Latency Multicast Test"
    for out in (cout, sout):
        assert f"                    {title}\n MultiCast runs on UD!\n" in out
        assert " Connection type : UD" in out
    mgid = "255:14:00:00:00:00:00:00:00:00:255:255:239:77:13:08" if "-M" in args else "255:01:00:00:00:02:201:133"
    remote = cout.split(" remote address: ")[1]
    assert remote.startswith("LID 0000 QPN 0xffffff ") and f" GID: {mgid}" in remote, cout
    n = int(args[args.index("-n") + 1])
    got = rows(cout, LAT_ROW) if tool.endswith("_lat") else rows(cout)
    assert len(got) == 1 and got[0][1] == n, cout


LAT_CASES = [
    ("ib_write_lat", "RC", ["-n", "30"]),
    ("ib_write_lat", "UC", ["-n", "20", "-s", "64"]),
    ("ib_read_lat", "RC", ["-n", "20", "-s", "128"]),
    ("ib_atomic_lat", "RC", ["-n", "20"]),
    ("ib_send_lat", "RC", ["-n", "30", "-e"]),
    ("ib_send_lat", "UC", ["-n", "20"]),
    ("ib_send_lat", "UD", ["-n", "20", "-s", "32"]),
]


@pytest.mark.parametrize("tool,conn,args", LAT_CASES, ids=[f"{t}-{c}" for t, c, _ in LAT_CASES])
def test_lat_tools_end_to_end(daemon, tool, conn, args):
    verb = {"ib_write_lat": P.WRITE, "ib_read_lat": P.READ, "ib_atomic_lat": P.ATOMIC, "ib_send_lat": P.SEND}[tool]
    crc, cout, cerr, src, sout, serr = run_pair(daemon, tool, ["-c", conn, *args])
    assert (crc, src) == (0, 0), (cout, cerr, sout, serr)
    assert "Traceback" not in cerr + serr
    n = int(args[args.index("-n") + 1])
    size = 8 if verb == P.ATOMIC else int(args[args.index("-s") + 1]) if "-s" in args else 2
    title = {P.WRITE: "RDMA_Write Latency Test", P.READ: "RDMA_Read Latency Test", P.SEND: "Send Latency Test",
             P.ATOMIC: "Atomic FETCH_AND_ADD Latency Test"}[verb]
    check_header(cout, title, conn, True, P.LAT, verb)
    check_addresses(cout, 1, verb)
    got = rows(cout, LAT_ROW)
    assert len(got) == 1 and got[0][:2] == (size, n), cout
    tmin, tmax, typical, avg, stdev, p99, p999 = got[0][2:]
    assert 0 < tmin <= typical <= tmax and tmin <= avg <= tmax and stdev >= 0 and tmin <= p99 <= p999 <= tmax
    both = verb in (P.WRITE, P.SEND)             # ping-pongs: both sides measure; read/atomic: client only
    assert bool(rows(sout, LAT_ROW)) == both
    assert (LAT_TITLE in sout.splitlines()) == both
    assert cout.endswith(LINE + "\n") and sout.endswith(LINE + "\n")


def test_bidirectional_and_json(daemon, tmp_path):
    for tool in ("ib_send_bw", "ib_write_bw"):
        crc, cout, cerr, src, sout, serr = run_pair(
            daemon, tool, ["-b", "-n", "20", "-s", "256", "--out_json", f"--out_json_file={tool}.json"], cwd=tmp_path)
        assert (crc, src) == (0, 0), (cout, cerr, sout, serr)
        title = ("Send" if tool == "ib_send_bw" else "RDMA_Write") + " Bidirectional BW Test"
        assert " " * 20 + title in cout.splitlines() and " TX depth        : 20" in sout.splitlines()
        c, s = rows(cout), rows(sout)
        assert len(c) == len(s) == 1 and c[0][:2] == (256, 20)
        assert math.isclose(c[0][3], s[0][3], rel_tol=1e-3, abs_tol=0.011)       # both print the sum of both
        doc = json.loads((tmp_path / f"{tool}.json").read_text())
        assert doc["test_info"]["test"] == title.replace(" ", "_")
        assert doc["test_info"]["Connection_type"] == "RC" and doc["test_info"]["Device"] == "rxe0"
        assert doc["test_info"]["TX_depth"] == 20
        res = doc["results"]
        assert (res["MsgSize"], res["n_iterations"]) == (256, 20)
        assert set(res) == {"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}
        assert res["BW_average"] in (c[0][3], s[0][3])


def test_latency_json_and_histogram(daemon, tmp_path):
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_read_lat", ["-n", "12", "-H", "--out_json"], cwd=tmp_path)
    assert (crc, src) == (0, 0), (cerr, serr)
    lines = cout.splitlines()
    h = lines.index("#, usec")
    samples = lines[h + 1:h + 10]                       # 12 iterations: 11 deltas, 9 after the tail
    assert [int(x.split(", ")[0]) for x in samples] == list(range(1, 10))
    values = [float(x.split(", ")[1]) for x in samples]
    assert values == sorted(values)
    doc = json.loads((tmp_path / "perftest_out.json").read_text())
    res = doc["results"]
    assert doc["test_info"]["test"] == "RDMA_Read_Latency_Test" and doc["test_info"]["Outstand_reads"] == 128
    row = rows(cout, LAT_ROW)[0]
    assert (res["MsgSize"], res["n_iterations"]) == (2, 12)
    assert [res[k] for k in ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99",
                             "percentile_99.9")] == list(row[2:])


@pytest.mark.slow                   # -a and -D runs
def test_sweep_duration_and_progress(daemon):
    # -a: every power of two from 2 to 2^23, one row each (the server prints the client's last one)
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_write_bw", ["-a", "-n", "5"])
    assert (crc, src) == (0, 0), (cerr, serr)
    assert [r[0] for r in rows(cout)] == [1 << i for i in range(1, 24)]
    assert [r[0] for r in rows(sout)] == [1 << 23]
    # -a on SEND: the sweep is synchronised per size; -D: iterations counted in the sample window
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_send_bw", ["-a", "-n", "5", "-c", "UD"])
    assert (crc, src) == (0, 0), (cerr, serr)
    assert [r[0] for r in rows(cout)] == [1 << i for i in range(1, 13)]        # UD: up to the 4096 MTU
    env = tool_env(daemon, SOFTRDMA_PROGRESS="1")
    crc, cout, cerr, src, sout, serr = run_pair(daemon, "ib_send_lat", ["-D", "2", "-s", "16"], env=env)
    assert (crc, src) == (0, 0), (cerr, serr)
    assert " #bytes        #iterations       t_avg[usec]    tps average" in cout.splitlines()
    # %-7.2f: a rate under 1000 keeps its padding (a loaded machine)
    assert re.search(r"^ 16 +\d+ +\d+\.\d\d +\d+\.\d\d *$", cout, re.M), cout
    # the progress line went to stderr, in place, and stdout has none of it
    assert "\r" in cerr and "\x1b[K" in cerr and "sampled" in cerr
    assert "\r" not in cout and "\x1b" not in cout


def test_run_infinitely_reports_each_period(daemon):
    port = free_port()
    srv = start_server(daemon, "ib_send_bw", ["--run_infinitely", "-D", "1", "-s", "1024"], port)
    cli = subprocess.Popen([sys.executable, "-m", "softrdma", "ib_send_bw", "-p", str(port), "--run_infinitely",
                            "-D", "1", "-s", "1024", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           env=tool_env(daemon))
    got = b""
    try:
        deadline = time.monotonic() + 60
        while len(rows(got.decode())) < 2 and time.monotonic() < deadline:
            if select.select([cli.stdout], [], [], 0.5)[0]:
                chunk = os.read(cli.stdout.fileno(), 65536)
                if not chunk:
                    break
                got += chunk
        assert len(rows(got.decode())) >= 2, got
        assert all(r[0] == 1024 and r[1] > 0 and r[3] > 0 for r in rows(got.decode()))
    finally:
        cli.send_signal(signal.SIGINT)               # the only way it ends, as with perftest
        srv.send_signal(signal.SIGINT)
        for proc in (cli, srv):
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    assert cli.returncode == 130


# --------------------------------------------------------------------------- 4. fake peers from the recording
def read_exact(s: socket.socket, n: int, timeout: float = 20.0) -> bytes:
    s.settimeout(timeout)
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    assert len(got) == n, (n, got)
    return got


class FakePeerQP:
    """The RDMA half of a fake perftest peer: one RC QP and an MR the other
    side writes into, made with the verbs library as perftest makes them."""

    def __init__(self, daemon, size: int, remote_access=None):
        from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE, IBV_QPT_RC
        from softrdma.verbs import cq, device, mr, pd, qp
        os.environ["SOFTRDMA_RUN"] = daemon.run_dir
        self.ctx = device.Context(name="rxe0")
        attr = self.ctx.query_port(1)
        self.gid_index = next(i for i in range(attr.gid_tbl_len)
                              if self.ctx.query_gid(1, i).raw[:12] == bytes(10) + b"\xff\xff")
        self.gid = self.ctx.query_gid(1, self.gid_index).raw
        self.pd = pd.PD(self.ctx)
        self.size = size
        remote = IBV_ACCESS_REMOTE_WRITE if remote_access is None else remote_access
        self.mr = mr.MR(self.pd, 2 * max(size, 4096), IBV_ACCESS_LOCAL_WRITE | remote)
        self.cq = cq.CQ(self.ctx, 128)
        self.qp = qp.QP(self.pd, qp.QPInitAttr(IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=qp.QPCap(64, 1, 1, 1),
                                               sq_sig_all=0))
        a = qp.QPAttr()
        a.qp_access_flags = remote
        self.qp.to_init(a)
        self.psn = 0x31E5DA

    def keys(self, out_reads=1) -> C.Dest:
        return C.Dest(0, out_reads, self.qp.qp_num, self.psn, self.mr.rkey, self.mr.buf + max(self.size, 4096),
                      self.gid, 0, self.gid_index)

    def connect(self, rem: C.Dest, rts: bool) -> None:
        from softrdma.enums import IBV_MTU_1024
        from softrdma.verbs import addr, qp
        a = qp.QPAttr()
        a.path_mtu, a.dest_qp_num, a.rq_psn, a.sq_psn = IBV_MTU_1024, rem.qpn, rem.psn, self.psn
        a.max_dest_rd_atomic, a.max_rd_atomic = 1, rem.out_reads
        a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 14, 7, 7
        a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=addr.GID(rem.gid), sgid_index=self.gid_index,
                                                    hop_limit=0xFF), is_global=1, port_num=1)
        if rts:
            self.qp.to_rts(a)
        else:
            self.qp.to_rtr(a)

    def write_all(self, rem: C.Dest, n: int) -> None:
        from softrdma.enums import IBV_SEND_SIGNALED, IBV_WR_RDMA_WRITE
        from softrdma.verbs import wr
        w = wr.SendWR(1, IBV_WR_RDMA_WRITE, 1, sg=[wr.SGE(self.mr.buf, self.size, self.mr.lkey)],
                      send_flags=IBV_SEND_SIGNALED)
        w.set_wr_rdma(rem.rkey, rem.vaddr)
        done = posted = 0
        end = time.monotonic() + 60
        while done < n and time.monotonic() < end:
            while posted < n and posted - done < 32:
                self.qp.post_send(w)
                posted += 1
            k, wcs = self.cq.poll(16)
            for c in wcs:
                assert c.status == 0
            done += k
        assert done == n

    def close(self):
        self.ctx.close()


def test_fake_perftest_server_against_client(daemon):
    """softrdma's ib_write_bw client against a server that speaks exactly
    what NOTES.md recorded from perftest 4.5-0.17 ("6.06"), step by step."""
    port = free_port()
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(1)
    peer = FakePeerQP(daemon, 8192)
    n, size = 12, 8192
    cli = subprocess.Popen([sys.executable, "-m", "softrdma", "ib_write_bw", "-p", str(port), "-n", str(n), "-s",
                            str(size), "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=tool_env(daemon))
    try:
        lsock.settimeout(20)
        s, _ = lsock.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # the step numbers are NOTES.md's table
        # 1. versions (the server reads first)
        assert read_exact(s, 16) == b"6.24" + bytes(12)
        s.sendall(b"6.06" + bytes(10) + b"\x00\x00")
        # 2, 3. cycle buffer, cache line size: big-endian ints
        assert read_exact(s, 4) == struct.pack(">i", os.sysconf("SC_PAGESIZE"))
        s.sendall(b"\x00\x00\x10\x00")
        assert struct.unpack(">i", read_exact(s, 4))[0] in (32, 64, 128)
        s.sendall(b"\x00\x00\x00\x40")
        # 4. the MTU enum, "%d" in two bytes; rxe's "3" (1024) wins against softrdma's 4096 on lo
        assert read_exact(s, 2) == b"5\x00"
        s.sendall(b"3\x00")
        # 5. the keys; then both sides move their QPs to RTR (the client on to RTS)
        raw = read_exact(s, 108)
        m = KEYS_GID.match(raw)
        assert m and m[2] == b"0001" and m[8] == b"00000000", raw
        rem = C.decode_keys(raw, True)
        assert rem.gid == peer.gid
        s.sendall(C.encode_keys(peer.keys()))
        peer.connect(rem, rts=False)
        # 6. the keys again, after both sides printed their local ones
        assert read_exact(s, 108) == raw
        s.sendall(C.encode_keys(peer.keys()))
        # 7. "after RTR"; then the client writes n x size into our MR
        assert read_exact(s, 108) == raw
        s.sendall(C.encode_keys(peer.keys()))
        # 8. end of the test
        assert read_exact(s, 108, timeout=30) == raw
        s.sendall(C.encode_keys(peer.keys()))
        # 9. reports: five fields, 8 bytes each; the 4.5-0.17 server sends uninitialised values
        fields = []
        for _ in range(5):
            fields.append(read_exact(s, 8))
            s.sendall(os.urandom(8))
        assert struct.unpack(">Q", fields[0])[0] == size and struct.unpack(">Q", fields[1])[0] == n
        peak, avg, rate = (struct.unpack(">d", f)[0] for f in fields[2:])
        assert avg > 0 and rate > 0 and peak >= avg * 0.5
        # 10, 11. close: keys, then "done\0" from both
        assert read_exact(s, 108) == raw
        s.sendall(C.encode_keys(peer.keys()))
        assert read_exact(s, 5) == b"done\x00"
        s.sendall(b"done\x00")
        try:                                           # and nothing else: EOF, or a reset (our unread
            assert s.recv(16) == b""                   # "done" made the client's close abortive)
        except ConnectionResetError:
            pass
        out, err = cli.communicate(timeout=20)
        assert cli.returncode == 0, (out, err)
        assert " Mtu             : 1024[B]" in out.splitlines()
        row = rows(out)[0]
        assert row[:2] == (size, n) and "%.2f" % avg == "%.2f" % row[3] and "%.6f" % rate == "%.6f" % row[4]
        s.close()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        lsock.close()
        peer.close()


def test_fake_perftest_client_against_server(daemon):
    """A perftest client ("6.06", NOTES.md's steps) against softrdma's
    ib_write_bw server: the server prints the numbers the client reports,
    exactly."""
    port = free_port()
    srv = start_server(daemon, "ib_write_bw", ["-s", "4096", "-n", "5000"], port)
    peer = FakePeerQP(daemon, 4096)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"6.06".ljust(16, b"\0"))                   # 1. the client writes first
        assert read_exact(s, 16) == b"6.24" + bytes(12)
        s.sendall(b"\x00\x00\x10\x00")                        # 2.
        assert read_exact(s, 4) == struct.pack(">i", os.sysconf("SC_PAGESIZE"))
        s.sendall(b"\x00\x00\x00\x40")                        # 3.
        read_exact(s, 4)
        s.sendall(b"3\x00")                                    # 4.
        assert read_exact(s, 2) == b"5\x00"
        s.sendall(C.encode_keys(peer.keys()))                 # 5.
        raw = read_exact(s, 108)
        rem = C.decode_keys(raw, True)
        assert rem.out_reads == 1 and rem.rkey and rem.vaddr
        peer.connect(rem, rts=True)
        for _ in range(2):                                    # 6., 7. (after RTR)
            s.sendall(C.encode_keys(peer.keys()))
            assert read_exact(s, 108) == raw
        peer.write_all(rem, 20)
        s.sendall(C.encode_keys(peer.keys()))                 # 8. end of the test
        assert read_exact(s, 108) == raw
        for mine in (struct.pack(">Q", 65536), struct.pack(">Q", 5000), be_double(44.5), be_double(35.8),
                     be_double(0.000573)):                    # 9.
            s.sendall(mine)
            read_exact(s, 8)
        s.sendall(C.encode_keys(peer.keys()))                 # 10. close
        assert read_exact(s, 108) == raw
        s.sendall(b"done\x00")                                # 11.
        out, err = (b.decode() for b in srv.communicate(timeout=20))
        assert srv.returncode == 0, (out, err)
        assert " 65536      5000             44.50              35.80  \t\t     0.000573" in out.splitlines()
        assert " Mtu             : 1024[B]" in out.splitlines()
        s.close()
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()
        peer.close()


def test_fake_perftest_server_against_read_lat_client(daemon):
    """The latency tools of the RDMA verbs exchange keys four times before
    the test (one more than the bandwidth tools); the ib_read_lat server
    only answers the client's READs and closes."""
    from softrdma.enums import IBV_ACCESS_REMOTE_READ
    port = free_port()
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(1)
    peer = FakePeerQP(daemon, 64, remote_access=IBV_ACCESS_REMOTE_READ)
    cli = subprocess.Popen([sys.executable, "-m", "softrdma", "ib_read_lat", "-p", str(port), "-n", "50", "-s",
                            "64", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=tool_env(daemon))
    try:
        lsock.settimeout(20)
        s, _ = lsock.accept()
        assert read_exact(s, 16) == b"6.24" + bytes(12)
        s.sendall(b"6.06".ljust(16, b"\0"))
        for mine, n in ((b"\x00\x00\x10\x00", 4), (b"\x00\x00\x00\x40", 4), (b"3\x00", 2)):
            read_exact(s, n)
            s.sendall(mine)
        raw = read_exact(s, 108)
        assert KEYS_GID.match(raw)[2] == b"0080"                # out_reads 128 for READ
        rem = C.decode_keys(raw, True)
        for k in range(4):                                      # extra, per QP, per QP + print, after RTR
            if k:
                assert read_exact(s, 108) == raw
            s.sendall(C.encode_keys(peer.keys(out_reads=128)))
            if k == 1:
                peer.connect(rem, rts=False)
        assert read_exact(s, 108, timeout=30) == raw            # the client is done: close
        s.sendall(C.encode_keys(peer.keys(out_reads=128)))
        assert read_exact(s, 5) == b"done\x00"
        s.sendall(b"done\x00")
        out, err = cli.communicate(timeout=20)
        assert cli.returncode == 0, (out, err)
        assert rows(out, LAT_ROW)[0][:2] == (64, 50)
        s.close()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        lsock.close()
        peer.close()


def test_peer_older_than_5_70_is_refused(daemon):
    """perftest's check_version_compatibility(): right after the versions."""
    port = free_port()
    srv = start_server(daemon, "ib_send_bw", [], port)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=20)
        s.sendall(b"5.60".ljust(16, b"\0"))
        assert read_exact(s, 16) == b"6.24" + bytes(12)
        out, err = (b.decode() for b in srv.communicate(timeout=20))
        assert (srv.returncode, err) == (1, "Current implementation is not compatible with versions older than"
                                            " 5.70\n")
        s.settimeout(5)
        assert s.recv(16) == b""
        s.close()
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.communicate()


def test_client_without_server_fails_cleanly(daemon):
    r = subprocess.run([sys.executable, "-m", "softrdma", "ib_send_bw", "-p", str(free_port()), "127.0.0.1"],
                       capture_output=True, text=True, timeout=30, env=tool_env(daemon))
    assert r.returncode == 1
    assert r.stderr.endswith("Couldn't connect to 127.0.0.1:%s\nUnable to open file descriptor for socket"
                             " connection\n Unable to init the socket connection\n" % r.args[5])
    r = subprocess.run([sys.executable, "-m", "softrdma", "ib_write_lat", "-d", "mlx5_0"], capture_output=True,
                       text=True, timeout=30, env=tool_env(daemon))
    assert (r.returncode, r.stderr) == (1, "IB device mlx5_0 not found\n Unable to find the Infiniband/RoCE device\n")
