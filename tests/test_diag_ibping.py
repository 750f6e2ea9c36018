"""`softrdma ibping` (client and -S server) against the real ibping.

One small fat tree, served by `softrdma fabric serve` and by the real
`ibsim` (the module runs once per server), swept once by the real
`opensm -o`.  Two ping servers listen at the same time: the real
`ibping -S` (SIM_SET_ISSM=1, as umad2sim needs) on host0016 and
softrdma's on host0015.  Each is pinged by the real client and by
softrdma's -- the four combinations -- and the output must be the same
as the real client's against the real server, except for the times.
The vendor-class MADs (class 0x32, OUI 0x001405) go LID-routed through
the fabric server to the client attached with issm on the destination
node; a LID where nobody listens loses the ping (ETIMEDOUT at once).

Normalised: the times ("time X.XXX ms", "time N ms", the rtt line),
umad2sim's "sim_connect: attached as client" line and the pid in
"[pid]".  Needs opensm, ibsim-utils and infiniband-diags: skipped when
missing, except in CI (CI=true), where that fails.
"""

import contextlib
import io
import os
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from sm_helpers import SIMSO, have_ibsim, need_ibsim, norm_err, sim_cwd, sim_env, start_fabric, unique_base

pytestmark = need_ibsim()

REAL_NODE, OUR_NODE = "host0016", "host0015"





def _norm_out(text):
    text = re.sub(r"time \d+\.\d{3} ms", "time T ms", text)
    text = re.sub(r"time \d+ ms$", "time N ms", text, flags=re.M)
    return re.sub(r"rtt min/avg/max = \S+ ms", "rtt min/avg/max = T ms", text)


class Fabric:
    def __init__(self, tmp, server):
        self.tmp = tmp
        self.server = server
        self.base = unique_base("pg")
        net = tmp / "ft.net"
        subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves", "4",
                        "--spines", "2", "--hosts-per-leaf", "4", "--radix", "8", "-o", str(net)],
                       check=True, env=sim_env(self.base, tmp), capture_output=True)
        self.proc = start_fabric(server, net, self.base, tmp)
        log = tmp / "osm.log"
        subprocess.run(["opensm", "-o", "-f", str(log)], cwd=sim_cwd() or tmp, capture_output=True, timeout=60,
                       env=sim_env(self.base, tmp, LD_PRELOAD=SIMSO))
        assert "SUBNET UP" in log.read_text()
        self.servers = []

    # --- running the tools ---------------------------------------------------------------
    def popen(self, real, args, host=None, **extra):
        cmd = ["ibping", *args] if real else [sys.executable, "-m", "softrdma", "ibping", *args]
        env = sim_env(self.base, self.tmp, SIM_HOST=host, LD_PRELOAD=SIMSO if real else None, **extra)
        return subprocess.Popen(cmd, cwd=(real and sim_cwd()) or self.tmp, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, real, args, host=None):
        p = self.popen(real, args, host)
        out, err = p.communicate(timeout=30)
        assert "Traceback" not in err, err
        return p.returncode, _norm_out(out), norm_err(err)

    def ours(self, args, host=None):
        """softrdma's ibping in this process (quicker than a new python)."""
        from softrdma.tools.ibdiag import ibping
        out, err = io.StringIO(), io.StringIO()
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(sim_env(self.base, self.tmp, SIM_HOST=host))
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = ibping.main(list(args))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return rc, _norm_out(out.getvalue()), norm_err(err.getvalue())

    def lid(self, host):
        from softrdma.tools import ibstat
        out = io.StringIO()
        saved = dict(os.environ)
        os.environ.update(sim_env(self.base, self.tmp, SIM_HOST=host))
        try:
            with contextlib.redirect_stdout(out):
                assert ibstat.main(["ibsim0", "1"]) == 0
        finally:
            os.environ.clear()
            os.environ.update(saved)
        text = out.getvalue()
        return int(re.search(r"Base lid: (\d+)", text).group(1)), \
            re.search(r"Port GUID: (0x[0-9a-f]+)", text).group(1)

    def start_server(self, real, host):
        p = (self.popen(True, ["-S"], host, SIM_SET_ISSM="1") if real else
             self.popen(False, ["-S"], host))
        self.servers.append(p)
        lid, _ = self.lid(host)
        if real:
            # umad2sim crashes on a MAD of a class nobody registered: let it get that far
            want = f"@{self.base}:in{p.pid}".encode()
            end = time.monotonic() + 60
            while True:
                with open("/proc/net/unix", "rb") as f:
                    if want in f.read():
                        break
                assert p.poll() is None and time.monotonic() < end, "the real ping server did not attach"
                time.sleep(0.05)
            time.sleep(0.5)
        end = time.monotonic() + 60
        while "1 received" not in self.ours(["-c", "1", "-f", str(lid)])[1]:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < end, "the ping server does not answer"
            time.sleep(0.1)
        return p, lid

    def close(self):
        for p in self.servers:
            if p.poll() is None:
                p.terminate()
                try:
                    p.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module", params=["softrdma", "ibsim"])
def fab(request, tmp_path_factory):
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")
    f = Fabric(tmp_path_factory.mktemp(f"ibping-{request.param}"), request.param)
    try:
        f.real_server, f.real_lid = f.start_server(True, REAL_NODE)
        f.our_server, f.our_lid = f.start_server(False, OUR_NODE)
        yield f
        alive = f.proc.poll() is None
    finally:
        f.close()
    assert alive, "the fabric server died"


def test_four_combinations_print_what_the_real_ibping_prints(fab):
    # non-flood pings sleep 1 s each: run the four clients side by side
    cases = [(real_c, lid, args) for lid in (fab.real_lid, fab.our_lid) for real_c in (True, False)
             for args in (["-c", "2", str(lid)],)]
    procs = [(c, fab.popen(c[0], c[2])) for c in cases]
    got = {}
    for (real_c, lid, _), p in procs:
        out, err = p.communicate(timeout=30)
        assert "Traceback" not in err, err
        got[real_c, lid] = (p.returncode, _norm_out(out), norm_err(err))
    ref = got[True, fab.real_lid]                       # real client, real server
    host = re.escape(ref[1].split("Pong from ", 1)[1].split(" (Lid", 1)[0])
    assert ref[0] == 0 and re.fullmatch(
        rf"Pong from {host} \(Lid \d+\): time T ms\n" * 2 +
        rf"\n--- {host} \(Lid \d+\) ibping statistics ---\n"
        r"2 packets transmitted, 2 received, 0% packet loss, time N ms\n"
        r"rtt min/avg/max = T ms\n", ref[1]), ref
    for key, res in got.items():
        want = (ref[0], ref[1].replace(f"(Lid {fab.real_lid})", f"(Lid {key[1]})"), ref[2])
        assert res == want, f"client {'real' if key[0] else 'ours'} -> Lid {key[1]}:\n{res}\n{want}"
    # flood: no Pong lines, only the statistics
    for lid in (fab.real_lid, fab.our_lid):
        args = ["-c", "5", "-f", str(lid)]
        mine, real = fab.run(False, args), fab.run(True, args)
        assert mine == real and "5 packets transmitted, 5 received, 0% packet loss" in mine[1], (mine, real)


# LIDs: host0002 is 8 (nobody pings there: the ping is lost), 1 is the sweep's SM node
SAME = ["-h", "", "-D 1", "-K 1", "-V", "-c 1 -f 0", "-c 1 -f x", "-c 1 -f 99999", "-c 0 22",
        "-c 2 -f 8", "-c 1 -f -L 8", "-c 1 -f 1", "-c 1 -f -G 0x0002c90400000001",
        "-c 1 -f -C mlx5_0 22", "-c 1 -f -P 2 22", "-c 1 -f -C ibsim0 -P 2 22", "-c 1 -f -t 0 8",
        "-c 1 -f -t x 8", "--bogus", "-c", "-c 1 -f -C ibsim0 -P 1 22",
        "-c 1 -f -o 0x123 22", "-c 1 -f -o 0x1405 21", "-c 1 -f -P 1 21", "-c 1 -f 22 99"]


def test_options_errors_and_lost_pings_as_the_real_one(fab):
    assert (fab.real_lid, fab.our_lid) == (22, 21)
    bad = []
    for case in SAME:
        args = case.split()
        mine, ref = fab.ours(args), fab.run(True, args)
        if mine != ref:
            bad.append(f"ibping {case}:\n  ours {mine!r}\n  real {ref!r}")
    # attached to a switch: the own port is port 0
    for case in ("-c 1 -f 22", "-c 1 -f -P 1 21"):
        mine, ref = fab.ours(case.split(), "leaf001"), fab.run(True, case.split(), "leaf001")
        if mine != ref:
            bad.append(f"SIM_HOST=leaf001 ibping {case}:\n  ours {mine!r}\n  real {ref!r}")
    assert not bad, "\n".join(bad)


def test_interrupt_prints_the_statistics(fab):
    """SIGINT ends an endless ping with the statistics and exit 0."""
    res = {}
    # each gets SIGINT half-way between its second and third ping
    procs = {True: fab.popen(True, [str(fab.our_lid)])}
    t_real = time.monotonic()                         # the real one pings at once
    procs[False] = fab.popen(False, [str(fab.our_lid)])
    # ours flushes each Pong line (the real one's stdout is a pipe: block-buffered)
    if not select.select([procs[False].stdout], [], [], 15)[0]:
        for p in procs.values():
            p.kill()
            p.communicate()
        raise AssertionError("softrdma's ibping printed no Pong within 15 s")
    first = procs[False].stdout.readline()
    assert first.startswith("Pong from "), first
    t_ours = time.monotonic()
    for real, t in sorted(((True, t_real), (False, t_ours)), key=lambda x: x[1]):
        time.sleep(max(0.0, t + 1.5 - time.monotonic()))
        procs[real].send_signal(signal.SIGINT)
    for real, p in procs.items():
        out, err = p.communicate(timeout=10)
        res[real] = (p.returncode, _norm_out(out if real else first + out), norm_err(err))
    for real, (rc, out, err) in res.items():
        m = re.search(r"(\d+) packets transmitted, (\d+) received, 0% packet loss", out)
        assert rc == 0 and err == "" and m and m.group(1) == m.group(2), res
        assert out.count("Pong from ") == int(m.group(1)) >= 1, res
    strip = re.compile(r"^(Pong from .*\n|\d+ packets transmitted, \d+ received)", re.M)
    assert strip.sub("", res[True][1]) == strip.sub("", res[False][1]), res


def test_our_server_detaches_when_killed(fab):
    """Killed by SIGTERM as the real one is, but it leaves the issm slot free:
    a new server attaches to the node at once, and answers."""
    p, lid = fab.our_server, fab.our_lid
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=10)
    assert p.returncode == -signal.SIGTERM
    assert "1 packets transmitted, 0 received, 100% packet loss" in fab.ours(["-c", "1", "-f", str(lid)])[1]
    fab.our_server, _ = fab.start_server(False, OUR_NODE)
    rc, out, _ = fab.run(True, ["-c", "1", "-f", str(lid)])
    assert rc == 0 and "1 received" in out
    # only one issm client per node: a second server there is refused
    rc, out, err = fab.run(False, ["-S"], OUR_NODE)
    assert rc == 255 and "ibsim refused CONNECT" in err, (rc, out, err)


def test_our_server_is_no_sm(fab):
    """`ibping -S` attaches with issm (ibsim routes the pings only to such a
    client) but, without SIM_SET_ISSM, leaves the IsSM capability bit alone:
    an SM must not take it for another SM.  The real one (SIM_SET_ISSM=1) sets it."""
    def capmask(host):
        from softrdma.tools import ibstat
        buf = io.StringIO()
        saved = dict(os.environ)
        os.environ.update(sim_env(fab.base, fab.tmp, SIM_HOST=host))
        try:
            with contextlib.redirect_stdout(buf):
                assert ibstat.main(["ibsim0", "1"]) == 0
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return int(re.search(r"Capability mask: (0x[0-9a-f]+)", buf.getvalue()).group(1), 16)
    assert not capmask(OUR_NODE) & 0x2
    assert capmask(REAL_NODE) & 0x2


def _clear_issm(fab, host, lid):
    """What a clean exit of the killed real ping server would have done
    (umad2sim closes the issm device: SET_ISSM 0).  A ping makes ibsim find
    the dead client (its write fails) and free its slot; softrdma's server
    frees it by its liveness check."""
    from softrdma.mgmt.umad import IbsimPort, TransportError
    from softrdma.wire import ibsim
    end = time.monotonic() + 60
    while True:
        fab.ours(["-c", "1", "-f", str(lid)])
        try:
            port = IbsimPort(sockname=fab.base, node=host, issm=True, set_issm=False)
            break
        except TransportError:
            assert time.monotonic() < end, "the dead ping server keeps its issm slot"
            time.sleep(0.2)
    port.control(ibsim.SimCtlType.SET_ISSM, b"\0\0\0\0")
    port.close()


def test_guid_address_through_a_resident_sm(fab):
    """-G: the GUID becomes a LID through a PathRecord from the SA of a resident
    real opensm (last in the module: it stays up).  The real ping server goes
    first: the SM would poll its SMInfo (IsSM is set), and umad2sim crashes on that."""
    fab.real_server.terminate()
    fab.real_server.communicate(timeout=10)
    _clear_issm(fab, REAL_NODE, fab.real_lid)
    log = fab.tmp / "resident.log"
    sm = subprocess.Popen(["opensm", "-d2", "-f", str(log)], cwd=sim_cwd() or fab.tmp, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=sim_env(fab.base, fab.tmp, LD_PRELOAD=SIMSO))
    fab.servers.append(sm)
    end = time.monotonic() + 60
    while "SUBNET UP" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < end and sm.poll() is None, "no SUBNET UP"
        time.sleep(0.1)
    _, guid = fab.lid(OUR_NODE)
    for case in (f"-c 2 -f -G {guid}", "-c 1 -f -G 0x0002c9040000ffff", f"-c 1 -f -G -t 200 {guid}"):
        mine, ref = fab.ours(case.split()), fab.run(True, case.split())
        assert mine == ref, f"ibping {case}:\n  ours {mine!r}\n  real {ref!r}"
    mine = fab.ours(f"-c 2 -f -G {guid}".split())
    assert mine[0] == 0 and f"(Lid {fab.our_lid}) ibping statistics" in mine[1] and \
        "2 packets transmitted, 2 received" in mine[1], mine
