"""perftest -R and -z (softrdma.tools.perftest.rdma_cm), checked against
docs/formats/perftest.md ("-R and -z: rdma_cm"):

* ``struct pingpong_dest`` in network order, 56 bytes, as rdma_write_keys
  sends it;
* the option checks perftest makes for -R;
* ib_write_bw, ib_send_lat, ib_read_bw and ib_atomic_bw with -R across two
  network namespaces (two daemons, real UDP), server and client, the
  tables parsed back; ib_write_lat -z on one daemon.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import time

import pytest

from daemon_helpers import daemon_in_shm, wait_cm_listening
from netns_helpers import TwoHosts, need_root
from wait_helpers import DEADLINE_S, free_port
from softrdma.tools.perftest import comm as C
from softrdma.tools.perftest import rdma_cm as RC

BW_ROW = re.compile(r"^ (\d+) +(\d+) +(-?\d+\.\d\d) +(-?\d+\.\d\d) *\t\t +(\d+\.\d{6})$", re.M)
LAT_ROW = re.compile(r"^ (\d+) +(\d+) +" + r"\s+".join([r"(\d+\.\d\d)"] * 7) + r"\s*$", re.M)


def test_keys_struct_in_network_order():
    gid = bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3])
    d = C.Dest(lid=0, out_reads=128, qpn=0x11, psn=0xABCDEF, rkey=0x1234, vaddr=0x7F0011223344, gid=gid, srqn=0,
               gid_index=1)
    raw = RC.encode_dest(d)
    assert len(raw) == 56
    assert raw[:20] == bytes.fromhex("00000000" "00000080" "00000011" "00abcdef" "00001234")
    assert raw[20:24] == bytes(4)                                   # the padding before the 8-aligned vaddr
    assert raw[24:32] == bytes.fromhex("00007f0011223344") and raw[32:48] == gid
    assert raw[48:56] == bytes.fromhex("00000000" "00000001")
    back = RC.decode_dest(raw)
    assert (back.qpn, back.psn, back.rkey, back.vaddr, back.gid, back.out_reads) == (0x11, 0xABCDEF, 0x1234,
                                                                                     0x7F0011223344, gid, 128)
    assert struct.unpack(">i", RC.encode_dest(C.Dest(lid=-1))[:4])[0] == -1


@pytest.mark.parametrize("argv,out", [
    (["-R", "-q", "2"], " Perftest only supports 1 rmda_cm QP for now\n"),
    (["-R", "-c", "UC"], " UC is not supported in librdmacm\n"),
])
def test_rdma_cm_option_checks(argv, out):
    r = subprocess.run([sys.executable, "-m", "softrdma", "ib_send_bw", *argv], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "SOFTRDMA_AUTOSTART": "0"})
    assert r.returncode == 1 and r.stdout.endswith(out), r
    assert "Traceback" not in r.stderr


def pair(popen, tool, args, server_ip, run_dir):
    """Server first, on a free port; the client once the daemon in
    ``run_dir`` has the server's rdma_cm listener (a wildcard one is seen a
    moment before it listens: perftest's client then fails, no retry in
    establish_connection, and is run again within the deadline)."""
    args = [*args, "-p", str(free_port())]
    srv = popen(0, [sys.executable, "-m", "softrdma", tool, *args], stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
    try:
        wait_cm_listening(run_dir, int(args[-1]), srv)
        end = time.monotonic() + DEADLINE_S
        while True:
            cli = popen(1, [sys.executable, "-m", "softrdma", tool, *args, server_ip], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, text=True)
            cout, cerr = cli.communicate(timeout=120)
            if cli.returncode == 0 or srv.poll() is not None or "Unexpected CM event" not in cerr \
                    or time.monotonic() > end:
                break
        sout, serr = srv.communicate(timeout=DEADLINE_S)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return (cli.returncode, cout, cerr), (srv.returncode, sout, serr)


def check(tool, res):
    (crc, cout, cerr), (src, sout, serr) = res
    assert crc == 0 and src == 0, (tool, cout, cerr, sout, serr)
    for out in (cout, sout):
        assert " rdma_cm QPs\t : ON\n" in out and " Data ex. method : rdma_cm\n" in out, out
        assert "Traceback" not in out
    assert "Traceback" not in cerr + serr
    if tool.endswith("_bw"):
        rows = BW_ROW.findall(cout)
        assert len(rows) == 1 and int(rows[0][1]) == 200 and float(rows[0][3]) > 0, cout
        if tool != "ib_send_bw":
            assert BW_ROW.findall(sout) == rows                    # the server prints the client's report
    else:
        rows = LAT_ROW.findall(cout)
        assert len(rows) == 1 and int(rows[0][1]) == 200, cout


def test_across_two_namespaces():
    need_root()
    h = TwoHosts()
    env = {"SOFTRDMA_PROGRESS": "0"}
    try:
        h.start_daemons()

        def popen(i, args, **kw):
            return h.popen(i, ["env", *(f"{k}={v}" for k, v in env.items()), *args], **kw)
        for tool in ("ib_write_bw", "ib_send_lat", "ib_read_bw", "ib_atomic_bw"):
            check(tool, pair(popen, tool, ["-R", "-n", "200"], h.ip[0], h.run_dirs[0]))
    finally:
        h.close()


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("perftest-cm") as d:
        yield d


def test_z_exchange_over_rdma_cm_one_daemon(daemon):
    env = {**daemon.env, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_PROGRESS": "0"}

    def popen(i, args, **kw):
        return subprocess.Popen(args, env=env, **kw)
    (crc, cout, cerr), (src, sout, serr) = pair(popen, "ib_write_lat", ["-z", "-n", "200"], "127.0.0.1",
                                                daemon.run_dir)
    assert crc == 0 and src == 0, (cerr, serr)
    assert " rdma_cm QPs\t : OFF\n" in cout and " Data ex. method : rdma_cm\n" in cout, cout
    assert len(LAT_ROW.findall(cout)) == 1


PERFTEST45 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "perftest45_write_lat.py")


@pytest.mark.parametrize("softrdma_role", ["server", "client"])
def test_write_lat_r_peer_disconnects_first(softrdma_role):
    """``ib_write_lat -R`` against a peer that ends as perftest 4.5 does
    (no closing exchange; it disconnects at once): softrdma's side sees the
    DISCONNECTED in its closing read, answers the DREQ and exits 0 in
    seconds -- it used to poll the exchange QP forever -- and so does the
    peer, whose DREQ got its DREP instead of ~80 s of retries."""
    need_root()
    h = TwoHosts()
    env = ["env", "SOFTRDMA_PROGRESS=0"]
    port = 18606 if softrdma_role == "server" else 18607
    args = ["-R", "-n", "200", "-s", "2", "-p", str(port)]
    ours = [sys.executable, "-m", "softrdma", "ib_write_lat", *args]
    theirs = [sys.executable, PERFTEST45, *args]
    procs = []
    try:
        h.start_daemons()
        srv_cmd, cli_cmd = (ours, theirs) if softrdma_role == "server" else (theirs, ours)
        srv = h.popen(0, [*env, *srv_cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(srv)
        for _ in range(6):
            time.sleep(0.5)
            cli = h.popen(1, [*env, *cli_cmd, h.ip[0]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(cli)
            start = time.monotonic()
            cout, cerr = cli.communicate(timeout=60)
            if cli.returncode == 0 or srv.poll() is not None or "Unexpected CM event" not in cerr:
                break
        sout, serr = srv.communicate(timeout=60)
        took = time.monotonic() - start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        h.close()
    assert cli.returncode == 0 and srv.returncode == 0, (cout, cerr, sout, serr)
    assert len(LAT_ROW.findall(cout)) == 1, cout
    assert "Traceback" not in cerr + serr
    assert took < 40, took
