"""ECN on a device: the TOS RoCE packets leave with, CE marks seen on
receive, and the knobs through ``softrdma ecn`` and the ECN files of the
sysfs tree (written as on mlx5, taken within a second), the congestion
counters in hw_counters."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from softrdma.device.net import RoceSocket
from softrdma.transport.counters import CONGESTION_COUNTERS
from softrdma.wire.opcodes import Opcode
from softrdma.wire.packet import build

from daemon_helpers import daemon_in_shm
from wait_helpers import DEADLINE_S, wait_for


def _pair():
    a = RoceSocket("127.0.0.1", 0)
    b = RoceSocket("127.0.0.1", 0)
    return a, b


def _recv(sock, n: int = 1) -> list:
    got = []
    end = time.monotonic() + DEADLINE_S
    while len(got) < n and time.monotonic() < end:
        got += [(bytes(p), i in sock.ce) for i, (p, _, _) in enumerate(sock.recv())]
    return got


def test_ce_marks_are_seen_and_tos_goes_out():
    a, b = _pair()
    try:
        pkt = build(Opcode.RC_SEND_ONLY, 0x11, 5, b"x" * 16)
        a.set_tos(0x02)                                     # ECT(0): the default of a device
        assert a.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0x02
        assert a.send(pkt, "127.0.0.1", b.port)
        assert _recv(b) == [(bytes(pkt), False)]
        assert a.send(pkt, "127.0.0.1", b.port, tos=0xC3)    # a switch's CE mark (and DSCP 48)
        assert _recv(b) == [(bytes(pkt), True)]
        # a GSO burst with CE: every datagram of it is marked
        n = a.send_burst([build(Opcode.RC_SEND_MIDDLE, 0x11, i, b"y" * 1024) for i in range(8)], "127.0.0.1",
                         b.port, tos=0x03)
        assert n == 8
        got = _recv(b, 8)
        assert len(got) == 8 and all(ce for _, ce in got)
    finally:
        a.close()
        b.close()


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("ecn") as d:
        yield d


def _softrdma(d, *args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "softrdma", *args], env={**d.env, "SOFTRDMA_AUTOSTART": "0"},
                          capture_output=True, text=True, check=check, timeout=DEADLINE_S)


def test_ecn_command_shows_and_sets(daemon):
    out = _softrdma(daemon, "ecn", "rxe0").stdout
    assert out.startswith("rxe0 (lo):\n")
    assert "  roce_rp/rpg_time_reset 300\n" in out and "  roce_np/cnp_dscp 48\n" in out
    assert "  roce_rp/enable/7 1\n" in out and "  traffic_class 0\n" in out
    out = _softrdma(daemon, "ecn", "rxe0", "roce_rp", "rpg_ai_rate", "10", "roce_np", "enable", "3", "0").stdout
    assert "  roce_rp/rpg_ai_rate 10\n" in out and "  roce_np/enable/3 0\n" in out
    ecn = os.path.join(daemon.run_dir, "sys", "ecn", "lo")
    assert open(os.path.join(ecn, "roce_rp", "rpg_ai_rate")).read() == "10\n"
    assert open(os.path.join(ecn, "roce_np", "enable", "3")).read() == "0\n"
    # all or nothing: a bad value refuses the whole request, with the one-line reason
    r = _softrdma(daemon, "ecn", "rxe0", "roce_rp", "rpg_ai_rate", "20", "roce_rp", "rpg_gd", "99", check=False)
    assert r.returncode == 1 and "rpg_gd: 99 is not in 1-15" in r.stderr and "Traceback" not in r.stderr
    assert "  roce_rp/rpg_ai_rate 10\n" in _softrdma(daemon, "ecn", "rxe0").stdout
    for bad in (["rxe0", "roce_rp"], ["rxe0", "roce_xx", "a", "1"], ["rxe0", "roce_rp", "rpg_gd", "x"]):
        r = _softrdma(daemon, "ecn", *bad, check=False)
        assert r.returncode == 2 and r.stderr.startswith("softrdma ecn: error:") and "Traceback" not in r.stderr
    r = _softrdma(daemon, "ecn", "mlx9", check=False)
    assert r.returncode == 1 and "no device 'mlx9'" in r.stderr


def test_ecn_files_are_writable_as_on_mlx5(daemon):
    ecn = os.path.join(daemon.run_dir, "sys", "ecn", "lo")
    with open(os.path.join(ecn, "roce_rp", "rpg_time_reset"), "w") as f:
        f.write("555\n")
    wait_for(lambda: "  roce_rp/rpg_time_reset 555\n" in _softrdma(daemon, "ecn", "rxe0").stdout, DEADLINE_S,
             "the daemon to take the written value")
    with open(os.path.join(ecn, "roce_rp", "rpg_gd"), "w") as f:        # refused: the file shows 11 again
        f.write("77\n")
    wait_for(lambda: open(os.path.join(ecn, "roce_rp", "rpg_gd")).read() == "11\n", DEADLINE_S,
             "the refused value to be undone")
    assert "  roce_rp/rpg_gd 11\n" in _softrdma(daemon, "ecn", "rxe0").stdout


def test_hw_counters_have_the_congestion_counters(daemon):
    hw = os.path.join(daemon.run_dir, "sys", "class", "infiniband", "rxe0", "ports", "1", "hw_counters")
    for c in CONGESTION_COUNTERS:
        assert open(os.path.join(hw, c.name)).read() == "0\n"
    out = _softrdma(daemon, "rdma", "statistic", "show", "link", "rxe0/1").stdout
    assert "np_ecn_marked_roce_packets 0" in out and "rp_cnp_ignored 0" in out


def test_traffic_class_and_ect_on_the_wire():
    """Two hosts: ib_write_bw with --tclass 96 leaves with DSCP 24 and
    ECT(0); the device's default traffic class (softrdma ecn ... traffic_class)
    applies to address vectors naming none; with the reaction point off for
    the priority, the packets are Not-ECT.  nftables in the receiver counts
    what arrives."""
    import shutil
    from netns_helpers import TwoHosts, need_root
    from wait_helpers import free_port, wait_listening
    need_root()
    if not shutil.which("nft"):
        pytest.fail("nftables is a test dependency (the README's install line)")
    h = TwoHosts()
    try:
        h.start_daemons()
        rules = ("add table inet ecntest\n"
                 "add chain inet ecntest in { type filter hook input priority 0; }\n"
                 "add rule inet ecntest in udp dport 4791 ip dscp 24 ip ecn ect0 counter comment \"d24ect\"\n"
                 "add rule inet ecntest in udp dport 4791 ip dscp 26 ip ecn ect0 counter comment \"d26ect\"\n"
                 "add rule inet ecntest in udp dport 4791 ip dscp 24 ip ecn not-ect counter comment \"d24\"\n")
        subprocess.run(["ip", "netns", "exec", h.ns[1], "nft", "-f", "-"], input=rules, text=True, check=True)

        def counts() -> dict:
            out = h.exec(h.ns[1], "nft", "list", "table", "inet", "ecntest").stdout
            return {c: int(out.split(f'comment "{c}"')[0].rsplit("packets ", 1)[1].split()[0])
                    for c in ("d24ect", "d26ect", "d24")}

        def write_bw(*extra: str) -> None:
            port = str(free_port())
            args = [sys.executable, "-m", "softrdma", "ib_write_bw", "-d", "rxe0", "-n", "20", "-p", port, *extra]
            srv = h.popen(1, args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            wait_listening(int(port), srv)
            cli = h.popen(0, [*args, h.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out = cli.communicate(timeout=DEADLINE_S)[0]
            srv.communicate(timeout=DEADLINE_S)
            assert cli.returncode == 0, out

        def ecn(i: int, *words: str) -> None:
            env = {**os.environ, "SOFTRDMA_RUN": h.run_dirs[i], "SOFTRDMA_AUTOSTART": "0"}
            subprocess.run(["ip", "netns", "exec", h.ns[i], sys.executable, "-m", "softrdma", "ecn", "rxe0", *words],
                           env=env, check=True, capture_output=True)

        write_bw("--tclass", "96")
        c = counts()
        assert c["d24ect"] > 20 and c["d26ect"] == 0 and c["d24"] == 0, c
        ecn(0, "traffic_class", "104")
        write_bw()
        c2 = counts()
        assert c2["d26ect"] > 20 and c2["d24ect"] == c["d24ect"], c2
        ecn(0, "roce_rp", "enable", "3", "0")
        write_bw("--tclass", "96")
        c3 = counts()
        assert c3["d24"] > 20 and c3["d24ect"] == c["d24ect"], c3
    finally:
        h.close()
