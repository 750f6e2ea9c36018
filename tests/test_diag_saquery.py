"""`softrdma saquery` and softrdma's SA against the real saquery and the real opensm.

On a real ibsim (and on `softrdma fabric serve`) with ft2_64, an SM on
host0001 -- the real opensm or `softrdma opensm` -- and the tools on
host0002:

* every single-record query prints the same from the real saquery and from
  ours, whichever SM answers (umad2sim hands the real tool one MAD of which
  it copies 224 bytes, so tables -- and names, which saquery looks up in
  the NodeRecord table -- are compared another way);
* tables move by RMPP between our SA and our saquery, on both fabric
  servers: all 70 NodeRecords, each the same as the real tool's answer to
  `NR <lid>`, every LinkRecord of every linked port;
* multicast: three hosts join a group by SA Set, both SMs program the same
  MulticastForwardingTables (the real `ibroute -M` of every switch), a
  leave prunes the branch, `saquery -g`/`-m`/`MCMR` agree;
* a ServiceRecord registered by Set is listed by `saquery SR` and removed by
  Delete, on both SMs.
"""

import difflib
import re
import subprocess
import sys
import time

import pytest

from sm_helpers import IbsimFabric, need_ibsim, sim_cwd, softrdma_many, wait_log
from softrdma.wire.sa import MCMEMBER_RECORD, MCR_COMP, SERVICE_RECORD

pytestmark = [need_ibsim(), pytest.mark.slow]

SINGLE = [["NR", "2"], ["PIR", "2/1"], ["PIR", "8/17"], ["--src-to-dst", "1:70"], ["-s"], ["-c"],
          ["-g"], ["MCMR"], ["-m"], ["SR"], ["SWIR", "8"], ["LR", "8/17"], ["LFTR", "8/0"], ["MFTR"],
          ["-U", "0x0002c90400000010"], ["bogus"], ["-L"], ["-O"], ["--src-to-dst", "1"],
          ["--sgid-to-dgid", "fe80::2:c904:0:10-fe80::2:c904:0:3f1"]]


class Sa(IbsimFabric):
    def ours(self, *args, node="host0002"):
        r = subprocess.run([sys.executable, "-m", "softrdma", "saquery", *args], cwd=self.tmp,
                           env=self.env(SIM_HOST=node), capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout

    def ours_many(self, queries, node="host0002"):
        """``ours`` for each of ``queries``, all in one Python process."""
        return [(rc, out) for rc, out, _ in
                softrdma_many([("saquery", *q) for q in queries], self.tmp, self.env(SIM_HOST=node))]

    def real(self, *args, node="host0002"):
        r = subprocess.run(["saquery", *args], cwd=sim_cwd() or self.tmp, env=self.env(LD_PRELOAD=self.simso, SIM_HOST=node),
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout

    def sm(self, which):
        p = self.our_sm("sm", "host0001", "-s", "1") if which == "ours" else \
            self.real_sm("sm", "host0001", "-s", "1")
        wait_log(p, "SUBNET UP")
        return p

    def sa_call(self, node, method, attr, mask, rec):
        """One SA request from ``node`` through softrdma's SA client (saquery's)."""
        code = (f"import sys; from softrdma.tools.ibdiag import common, saquery as s\n"
                f"h = s.SaHandle('t', common.Config())\n"
                f"r = h.query({method}, {attr}, 0, {mask}, bytes.fromhex('{bytes(rec).hex()}'))\n"
                f"print(hex(r.status), *(x.hex() for x in r.records))\n")
        r = subprocess.run([sys.executable, "-c", code], cwd=self.tmp, env=self.env(SIM_HOST=node),
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        status, *recs = r.stdout.split()
        return int(status, 16), [bytes.fromhex(x) for x in recs]

    def tool(self, *cmd, node="host0002"):
        return subprocess.run(list(cmd), cwd=sim_cwd() or self.tmp, env=self.env(LD_PRELOAD=self.simso, SIM_HOST=node),
                              capture_output=True, text=True, timeout=30).stdout

    def port_gid(self, node):
        """The node's port GID, from its own NodeInfo (no SA table needed)."""
        out = self.tool("smpquery", "-D", "nodeinfo", "0", node=node)
        guid = int(re.search(r"PortGuid:\.+0x([0-9a-f]+)", out).group(1), 16)
        return (0xFE80000000000000 << 64) | guid


@pytest.fixture
def fab(tmp_path, request):
    f = Sa(tmp_path, getattr(request, "param", "ibsim"))
    f.simso = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
    yield f
    f.close()


@pytest.mark.parametrize("sm", ["ours", "real"])
def test_single_records_print_as_the_real_saquery(fab, sm):
    fab.sm(sm)
    for q, ours in zip(SINGLE, fab.ours_many(SINGLE)):
        assert ours == fab.real(*q), (sm, q)


@pytest.mark.parametrize("fab", ["ibsim", "softrdma"], indirect=True)
def test_tables_come_whole_by_rmpp(fab):
    sm = fab.sm("ours")
    rc, out = fab.ours("-N")
    assert rc == 0
    records = ["NodeRecord dump:\n" + r for r in out.split("NodeRecord dump:\n")[1:]]
    assert len(records) == 70
    lids = [int(r.split("lid.....................")[1].split()[0]) for r in records]
    assert lids == sorted(lids)
    for lid, rec in zip(lids, records):
        assert fab.real("NR", str(lid)) == (0, rec)
    # the real tool takes segment 1 only, at the length the SA gave it: one whole record
    assert fab.real("-N")[1] == records[0]
    rc, out = fab.ours("-x")
    assert out.count("LinkRecord dump:") == 2 * 136          # both ends of every link
    log = wait_log(sm, "SUBNET UP")
    assert "given up" not in log.split("saquery")[0] if "saquery" in log else True


def join_record(mgid, gid, join=1):
    rec = bytes(MCMEMBER_RECORD.encode(MGID=mgid, PortGID=gid, QKey=0x1234, TClass=0, PKey=0xFFFF, SL=0,
                                       FlowLabel=0, JoinState=join, Scope=2)).ljust(56, b"\0")
    mask = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "QKey", "TClass", "PKey", "SL", "FlowLabel",
                                     "JoinState"))
    return mask, rec


MGID = 0xFF121234000000000000000000000001


def mfts(fab):
    """The real `ibroute -M` of every switch (found by the real ibswitches)."""
    lids = re.findall(r'"(\w+)" base port 0 lid (\d+)', fab.tool("ibswitches"))
    assert len(lids) == 6
    return [fab.tool("ibroute", "-M", lid) for _, lid in sorted(lids)]


def settled(fab, ready, timeout=60.0):
    """The MFTs once ``ready`` holds (leaf001's table first) and two reads agree."""
    end = time.monotonic() + timeout
    prev = None
    while True:
        t = mfts(fab)
        if ready(t) and t == prev or time.monotonic() > end:
            return t
        prev = t if ready(t) else None
        time.sleep(0.3)


def multicast_story(fab, sm):
    p = fab.sm(sm)
    joined = {}
    for host in ("host0005", "host0040", "host0064"):
        status, recs = fab.sa_call(host, 0x02, 0x38, *join_record(MGID, fab.port_gid(host)))
        assert status == 0, host
        joined[host] = MCMEMBER_RECORD.decode(recs[0])
    assert {f["MLID"] for f in joined.values()} == {0xC001}
    wait_log(p, "SUBNET UP")
    before = settled(fab, lambda t: "0xc001" in t[0])    # opensm programs MFTs on its next sweep
    views = [fab.real("-g")[1], fab.ours("-g")[1], fab.ours("-m")[1], fab.ours("MCMR")[1]]
    # host0005 leaves: leaf001 has no member left, its branch goes
    status, _ = fab.sa_call("host0005", 0x15, 0x38, *join_record(MGID, fab.port_gid("host0005")))
    assert status == 0
    after = settled(fab, lambda t: "0xc001" not in t[0])
    # a join without the components a new group needs is refused (SA_ERR_REQ_INSUFFICIENT_COMPONENTS)
    mask, rec = join_record(0xFF121234000000000000000000000002, fab.port_gid("host0002"))
    status, _ = fab.sa_call("host0002", 0x02, 0x38, mask & ~MCR_COMP["QKey"], rec)
    return before, after, views, status


def test_multicast_trees_as_opensm(tmp_path):
    results = {}
    for sm in ("ours", "real"):
        d = tmp_path / sm
        d.mkdir()
        f = Sa(d)
        f.simso = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
        try:
            results[sm] = multicast_story(f, sm)
        finally:
            f.close()
    ours, real = results["ours"], results["real"]
    assert ours[0] == real[0]                   # every switch's MFT, after the joins
    assert ours[1] == real[1]                   # and after the leave
    assert "0xc001" in ours[0][0] and "0xc001" not in ours[1][0]      # leaf001 pruned
    for a, b in zip(ours[2], real[2]):          # -g, -m, MCMR as seen by the real and our saquery
        assert a == b, "".join(difflib.unified_diff(b.splitlines(True), a.splitlines(True)))
    assert "ff12:1234::1" in ours[2][0]
    assert ours[3] == real[3] == 0x600


@pytest.mark.parametrize("sm", ["ours", "real"])
def test_service_records(fab, sm):
    fab.sm(sm)
    gid = fab.port_gid("host0003")
    rec = bytearray(SERVICE_RECORD.encode(ServiceID=0x1000000000000042, ServiceGID=gid, ServiceP_Key=0xFFFF,
                                          ServiceLease=0xFFFFFFFF))
    rec[48:48 + 13] = b"softrdma-test"
    rec[112] = 7
    mask = 1 | 2 | 4 | 8 | 32                    # ID, GID, P_Key, lease, name
    status, recs = fab.sa_call("host0003", 0x02, 0x31, mask, bytes(rec))
    assert status == 0 and recs[0][:26] == bytes(rec[:26])
    rc, out = fab.ours("SR")
    assert rc == 0 and out.count("ServiceRecord dump:") == 1
    assert "ServiceID...............0x1000000000000042" in out
    assert "ServiceName.............softrdma-test" in out and "ServiceData8.1..........0x7" in out
    assert "ServiceKey..............<not displayed>" in out
    status, _ = fab.sa_call("host0003", 0x15, 0x31, 1 | 2 | 4, bytes(rec))
    assert status == 0
    assert fab.ours("SR") == (0, "")


@pytest.mark.parametrize("fab", ["softrdma"], indirect=True)
def test_malformed_mads_never_stop_the_sm(fab):
    sm = fab.sm("ours")
    code = """
import random
from softrdma.mgmt.umad import IbsimPort
rng = random.Random(7)
port = IbsimPort(issm=False)
for i in range(3000):
    mad = bytearray(rng.randbytes(256))
    mad[0] = rng.choice([1, 1, 1, 0, 2, 0x81])
    mad[1] = rng.choice([0x01, 0x81, 0x03, 0x03, 0x03, 0x32, 0x04])
    mad[2] = rng.choice([1, 2, 0x80])
    mad[3] = rng.choice([0x01, 0x02, 0x12, 0x15, 0x05, 0x81, 0x7F])
    if rng.random() < 0.3:
        mad[24:28] = bytes([1, rng.choice([1, 2, 3, 4, 9]), rng.randrange(256), rng.randrange(256)])
    qp = 0 if mad[1] in (0x01, 0x81) else 1
    port.send(bytes(mad), 1, qp, qp, rng.choice([256, 56, 1, 0, 300]))
    if i % 20 == 0:
        port.recv_all()
port.recv_all()
port.close()
"""
    r = subprocess.run([sys.executable, "-c", code], cwd=fab.tmp, env=fab.env(SIM_HOST="host0002"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    time.sleep(1.0)
    assert sm.poll() is None, "the SM died"
    assert "SMINFO_MASTER" in fab.tool("sminfo")
    assert fab.ours("NR", "2") == fab.real("NR", "2") and fab.ours("NR", "2")[1].startswith("NodeRecord dump")
    rc, out = fab.ours("-N")
    assert rc == 0 and out.count("NodeRecord dump:") == 70
    log = sm.log.read_text(errors="replace")
    assert "Traceback" not in log
