"""End to end: `softrdma opensm` sweeps a real ibsim fabric (and softrdma's own fabric server),
then the real infiniband-diags read back what it programmed.

The LIDs (ibnetdiscover) and every switch's LFT (ibroute) must equal what
the real opensm 3.3.23 programmed on the same topology (tests/data/opensm),
and the SM's own opensm-lfts.dump and guid2lid files must be byte for byte
opensm's.  Needs opensm, ibsim-utils and infiniband-diags: skipped when they
are missing, except in CI (CI=true), where that is a failure.
"""

import re
import subprocess
import sys
import time

import pytest

from sm_helpers import SIMSO, fixture, have_ibsim, need_ibsim, sim_cwd, sim_env, start_fabric, unique_base
from softrdma.sm import lft_dump

pytestmark = need_ibsim()

@pytest.fixture
def fabric(tmp_path, request):
    """(base, tmp, topo) with a fabric server running topo; param: (topo, server)."""
    if not have_ibsim():
        pytest.fail("opensm/ibsim-utils/infiniband-diags missing (CI=true)")
    topo, server = request.param
    net = tmp_path / f"{topo}.net"
    text = fixture(topo + ".net.xz")
    if server == "softrdma-esp0":       # switches with an enhanced port 0
        text = re.sub(r'^(Switch\t\d+ "[^"]+")$', r"\1\t# enhanced port 0", text, flags=re.M)
    net.write_text(text)
    (tmp_path / "roots").write_text(fixture(topo + ".roots"))
    base = unique_base("smt")
    proc = start_fabric("ibsim" if server == "ibsim" else "softrdma", net, base, tmp_path,
                        log=tmp_path / "server.log")
    try:
        yield base, tmp_path, topo
    finally:
        proc.terminate()
        proc.wait(10)


def _opensm(base, tmp, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "softrdma", "opensm", *args], cwd=tmp,
                          env=sim_env(base, tmp), capture_output=True, text=True, timeout=timeout)


def _diag(base, tmp, *cmd):
    r = subprocess.run(list(cmd), cwd=sim_cwd() or tmp, env=sim_env(base, tmp, LD_PRELOAD=SIMSO),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _check_against_opensm(base, tmp, topo, engine):
    """The diags see opensm's LIDs and LFTs; the SM's dump files are opensm's.
    ``engine`` may carry a tag: "minhop.lmc2" is the opensm -l 2 fixture."""
    assert (tmp / "opensm-lfts.dump").read_text() == fixture(f"{topo}.{engine}.lfts.xz")
    assert (tmp / "guid2lid").read_text() == fixture(f"{topo}.{engine}.guid2lid.xz")
    want = lft_dump.loads(fixture(f"{topo}.{engine}.lfts.xz"))
    g2l = {int(g, 16): int(lo, 16) for g, lo, _ in
           (ln.split() for ln in fixture(f"{topo}.{engine}.guid2lid.xz").splitlines() if ln.strip())}
    net = _diag(base, tmp, "ibnetdiscover")
    seen = {}
    for m in re.finditer(r'^\[\d+\]\s+"[SH]-[0-9a-f]+"\[\d+\]\((\w+)\)\s+#\s+"[^"]*"\s+lid (\d+)', net, re.M):
        seen[int(m.group(1), 16)] = int(m.group(2))
    for m in re.finditer(r'^Switch\s+\d+\s+"S-([0-9a-f]+)".*base port 0 lid (\d+)', net, re.M):
        seen[int(m.group(1), 16)] = int(m.group(2))
    assert seen == g2l
    for sw_guid, table in want.items():
        out = _diag(base, tmp, "ibroute", str(g2l[sw_guid]))
        got = {int(m.group(1), 16): int(m.group(2))
               for m in re.finditer(r"^(0x[0-9a-f]+) (\d+) ", out, re.M)}
        assert got == table, f"switch 0x{sw_guid:016x}"


@pytest.mark.parametrize("engine", ["updn", "ftree"])
@pytest.mark.parametrize("fabric", [("ft2_324", "ibsim")], indirect=True)
def test_on_ibsim_as_opensm(fabric, engine):
    base, tmp, topo = fabric
    r = _opensm(base, tmp, "-o", "-R", engine, "-a", str(tmp / "roots"), "-D", "0x43",
                "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUBNET UP" in r.stdout
    log = (tmp / "osm.log").read_text()
    assert "SUBNET UP" in log and f"{engine} tables configured on all switches" in log
    _check_against_opensm(base, tmp, topo, engine)


@pytest.mark.parametrize("fabric", [("ft2_64", "ibsim")], indirect=True)
def test_minhop_then_resweep_keeps_everything(fabric):
    base, tmp, topo = fabric
    args = ["-o", "-D", "0x43", "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log")]
    r = _opensm(base, tmp, *args)
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "minhop")
    # a second SM run finds LIDs programmed and a guid2lid: nothing changes
    r = _opensm(base, tmp, *args)
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "minhop")


@pytest.mark.parametrize("fabric", [("ft2_64", "softrdma")], indirect=True)
def test_updn_on_softrdma_fabric_server(fabric):
    base, tmp, topo = fabric
    r = _opensm(base, tmp, "-o", "-R", "updn", "-a", str(tmp / "roots"), "-D", "0x43",
                "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log"))
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "updn")


@pytest.mark.parametrize("fabric", [("ft2_64", "ibsim")], indirect=True)
def test_lmc_from_config_file_on_ibsim_as_opensm(fabric):
    # 'lmc 2' in an opensm.conf (-F): LIDs, LFTs and dump files as opensm -l 2's
    base, tmp, topo = fabric
    (tmp / "opensm.conf").write_text("lmc 2\n\nlmc_esp0 FALSE\n")
    r = _opensm(base, tmp, "-F", str(tmp / "opensm.conf"), "-o", "-D", "0x43",
                "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log"))
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "minhop.lmc2")


@pytest.mark.parametrize("fabric", [("ft2_64", "ibsim")], indirect=True)
def test_lmc_0_then_2_on_ibsim_as_opensm(fabric):
    # an LMC-0 subnet (LIDs programmed, guid2lid written), then a new SM with -l 2: the LIDs
    # moved, the LFTs and the rewritten guid2lid as opensm's in the same two steps
    base, tmp, topo = fabric
    args = ["-o", "-D", "0x43", "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log")]
    r = _opensm(base, tmp, *args)
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    r = _opensm(base, tmp, "-l", "2", *args)
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "minhop.lmc0to2")


@pytest.mark.parametrize("fabric", [("ft2_64", "softrdma")], indirect=True)
def test_lmc_on_softrdma_fabric_server(fabric):
    """softrdma opensm -l 2 on softrdma's fabric server: opensm's LIDs and LFTs; the real
    smpquery reads LMC 2 on CA ports, and a LID-routed SMP to base+1..3 reaches the port."""
    base, tmp, topo = fabric
    r = _opensm(base, tmp, "-o", "-l", "2", "-R", "updn", "-a", str(tmp / "roots"), "-D", "0x43",
                "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log"))
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    _check_against_opensm(base, tmp, topo, "updn.lmc2")
    g2l = {int(g, 16): (int(lo, 16), int(hi, 16)) for g, lo, hi in
           (ln.split() for ln in (tmp / "guid2lid").read_text().splitlines() if ln.strip())}
    net = fixture(topo + ".net.xz")
    for host in ("host0001", "host0017", "host0064"):
        guid = int(re.search(rf'caguid=(0x[0-9a-f]+)\nCa\s+\d+\s+"{host}"', net).group(1), 16)
        lo, hi = g2l.get(guid) or g2l[guid + 1]
        assert hi == lo + 3 and lo % 4 == 0
        for lid in (lo, hi):
            pi = _diag(base, tmp, "smpquery", "portinfo", str(lid))
            assert re.search(r"^LMC:\.+2$", pi, re.M), pi
            assert re.search(rf"^Lid:\.+{lo}$", pi, re.M), pi
            nd = _diag(base, tmp, "smpquery", "nodedesc", str(lid))
            assert nd.strip().endswith(host), nd
    # a switch port 0 keeps LMC 0 (no lmc_esp0)
    sw = _diag(base, tmp, "smpquery", "portinfo", "8", "0")
    assert re.search(r"^LMC:\.+0$", sw, re.M), sw
    # the server's umad2sim attach (GET_PORTINFO) reports the range too
    st = _diag(base, tmp, "ibstat")
    assert "Base lid: 4" in st and "LMC: 2" in st, st


@pytest.mark.parametrize("fabric", [("ft2_64", "softrdma-esp0")], indirect=True)
def test_lmc_esp0_on_enhanced_switch_port0(fabric):
    # lmc_esp0 TRUE and switches whose port 0 is enhanced: switches get LMC ranges too,
    # every LID of every range is routed, and the switch answers on all of its LIDs
    base, tmp, topo = fabric
    (tmp / "opensm.conf").write_text("lmc 2\n\nlmc_esp0 TRUE\n")
    r = _opensm(base, tmp, "-F", str(tmp / "opensm.conf"), "-o", "-D", "0x43",
                "--dump_files_dir", str(tmp), "-f", str(tmp / "osm.log"))
    assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
    ranges = [(int(lo, 16), int(hi, 16)) for _, lo, hi in
              (ln.split() for ln in (tmp / "guid2lid").read_text().splitlines() if ln.strip())]
    assert len(ranges) == 70 and all(hi == lo + 3 and lo % 4 == 0 for lo, hi in ranges)
    lids = {lid for lo, hi in ranges for lid in range(lo, hi + 1)}
    for guid, table in lft_dump.loads((tmp / "opensm-lfts.dump").read_text()).items():
        assert set(table) == lids, f"switch 0x{guid:016x}"
    leaf1 = 8                                  # the SM's CA port takes 4..7, leaf001 8..11
    for lid in (leaf1, leaf1 + 3):
        pi = _diag(base, tmp, "smpquery", "portinfo", str(lid), "0")
        assert re.search(r"^LMC:\.+2$", pi, re.M) and re.search(rf"^Lid:\.+{leaf1}$", pi, re.M), pi
        assert _diag(base, tmp, "smpquery", "nodedesc", str(lid)).strip().endswith("leaf001")
    si = _diag(base, tmp, "smpquery", "switchinfo", str(leaf1 + 2))
    assert re.search(r"^EnhancedPort0:\.+1$", si, re.M), si


def test_no_fabric_is_a_clear_error(tmp_path):
    r = _opensm(unique_base("smt"), tmp_path, "-o", "-f", str(tmp_path / "osm.log"), timeout=30)
    assert r.returncode == 1
    assert "cannot reach the ibsim server" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args,msg", [
    (["-R", "lash"], "unsupported routing engine 'lash'"),
    (["-R", "updn,minhop"], "routing engine chains"),
    (["-l", "8"], "LMC must be 7 or less."),
    (["-u", "cns"], "cn_guid_file is not supported"),
    (["-d", "3"], "-d 3 is not supported"),
    (["-p", "16"], "priority must be 0..15"),
    (["-s", "x"], "invalid number"),
])
def test_bad_options_fail_like_argparse(tmp_path, args, msg):
    r = _opensm(unique_base("smt"), tmp_path, *args, timeout=30)
    assert r.returncode == 2
    assert msg in r.stderr and "usage:" in r.stderr and "Traceback" not in r.stderr


def test_config_file_round_trip(tmp_path):
    conf = tmp_path / "opensm.conf"
    r = _opensm(unique_base("smt"), tmp_path, "-R", "updn", "-s", "5", "-c", str(conf), timeout=30)
    assert r.returncode == 0, r.stderr
    text = conf.read_text()
    assert "routing_engine updn" in text and "sweep_interval 5" in text and "qos FALSE" in text
    conf.write_text(text + "babbling_port_policy TRUE\n")
    r = _opensm(unique_base("smt"), tmp_path, "-F", str(conf), "-o", timeout=30)
    assert r.returncode == 2 and "unsupported option 'babbling_port_policy'" in r.stderr


def test_lmc_options_as_opensm(tmp_path):
    conf = tmp_path / "opensm.conf"
    r = _opensm(unique_base("smt"), tmp_path, "-l", "3", "-c", str(conf), timeout=30)
    assert r.returncode == 0, r.stderr
    text = conf.read_text()
    assert "lmc 3\n" in text and "lmc_esp0 FALSE\n" in text
    # opensm's osm_subn_verify_config: a bad cached LMC falls back to 0, with its message
    conf.write_text("lmc 9\n")
    r = _opensm(unique_base("smt"), tmp_path, "-F", str(conf), "-c", str(tmp_path / "out.conf"), timeout=30)
    assert r.returncode == 0 and " Invalid Cached Option Value:lmc = 9:Using Default:0" in r.stdout
    assert "lmc 0\n" in (tmp_path / "out.conf").read_text()


def test_udp_remote_mode_on_softrdma_fabric_server(tmp_path):
    # ibsim's remote mode (IBSIM_SERVER_NAME/PORT), against softrdma's server on 127.0.0.1
    import random
    import socket
    net = tmp_path / "ft2_64.net"
    net.write_text(fixture("ft2_64.net.xz"))
    (tmp_path / "roots").write_text(fixture("ft2_64.roots"))
    def free(p):                      # nobody (another test run, say) holds it now
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", p))
                return True
            except OSError:
                return False
    port = random.randrange(20000, 60000, 16)
    while not free(port):
        port = random.randrange(20000, 60000, 16)
    env = sim_env(unique_base("smt"), tmp_path)
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "fabric", "serve", "-r", "-l", str(port),
                            "--no-console", str(net)], cwd=tmp_path, env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 60
        while True:           # bound once the port is taken
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                break
            finally:
                s.close()
            assert time.monotonic() < end, "fabric server did not bind"
            time.sleep(0.05)
        r = subprocess.run([sys.executable, "-m", "softrdma", "opensm", "-o", "-R", "updn", "-a",
                            str(tmp_path / "roots"), "-f", str(tmp_path / "osm.log")], cwd=tmp_path,
                           env=dict(env, IBSIM_SERVER_NAME="127.0.0.1", IBSIM_SERVER_PORT=str(port)),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "SUBNET UP" in r.stdout, r.stdout + r.stderr
        assert (tmp_path / "guid2lid").read_text() == fixture("ft2_64.updn.guid2lid.xz")
    finally:
        srv.terminate()
        srv.wait(10)


@pytest.mark.parametrize("fabric", [("ft2_64", "softrdma")], indirect=True)
def test_daemon_pidfile_and_log_prefix(fabric):
    """``-B -J FILE``: the SM goes to the background (the command returns),
    the daemon writes its pid there and removes it at exit; ``--log_prefix``
    starts every message of the log."""
    import os
    import signal
    from wait_helpers import DEADLINE_S, wait_for
    base, tmp, _ = fabric
    pidfile, log = tmp / "opensm.pid", tmp / "osm.log"
    r = _opensm(base, tmp, "-B", "-J", str(pidfile), "-f", str(log), "--log_prefix", "fab1", "-s", "1", timeout=60)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), DEADLINE_S, "the pid file")
    pid = int(pidfile.read_text())
    try:
        wait_for(lambda: "-> fab1: SUBNET UP" in log.read_text(), DEADLINE_S, "SUBNET UP in the log")
        assert all("-> fab1: " in ln for ln in log.read_text().splitlines() if "->" in ln)
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not pidfile.exists(), DEADLINE_S, "the daemon to remove its pid file")


def test_log_limit_truncates_as_osm_log(tmp_path, capsys):
    from softrdma.sm.log import Log
    path = tmp_path / "osm.log"
    lg = Log(str(path), max_size=1000)
    for i in range(40):
        lg.info(f"line {i:02d} " + "x" * 40)
    lg.close()
    text = path.read_text()
    assert len(text) <= 1000 + 100 and "line 39" in text and "line 00" not in text
    assert "osm_log: log file exceeds the limit 1000. Truncating." in capsys.readouterr().err
    r = _opensm(unique_base("smt"), tmp_path, "-L", "5", "-c", str(tmp_path / "o.conf"), timeout=30)
    assert r.returncode == 0 and "log_max_size 5\n" in (tmp_path / "o.conf").read_text()
