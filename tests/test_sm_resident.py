"""A resident `softrdma opensm` on the real ibsim: SMInfo, SA queries, traps, election.

* the master answers `sminfo` and `saquery` (NodeRecord, PathRecord,
  PortInfoRecord) with the same output as the real opensm on the same fabric,
  with LMC 0 and with LMC 2 (records asked by any LID of a range);
* a link pulled on ibsim's console sends trap 128 and the SM re-sweeps
  around it;
* two softrdma SMs: the lesser second one stands by, polls, and takes over
  when the master goes (a better second one gets a HANDOVER);
* with the real opensm: a master opensm hands the subnet over to a better
  softrdma SM; a lesser softrdma SM stands by under it and takes over when
  it stops; and ours hands the subnet over to a better opensm that comes up.

Needs opensm, ibsim-utils and infiniband-diags (skipped without them,
except with CI=true).  Short polling timers (sminfo_polling_timeout 300 ms,
one retry) keep each test to a few seconds.
"""

import difflib
import re
import subprocess
import sys
import time

import pytest

from sm_helpers import IbsimFabric as Fabric, need_ibsim, wait_log
from wait_helpers import DEADLINE_S, wait_for

pytestmark = [need_ibsim(), pytest.mark.slow]


@pytest.fixture
def fab(tmp_path):
    f = Fabric(tmp_path)
    yield f
    f.close()


def test_master_answers_sminfo_sa_and_traps(fab):
    sm = fab.our_sm("ours", None, "-s", "1")
    wait_log(sm, "SUBNET UP")
    out = fab.diag("sminfo")
    assert "sm guid 0x2c90400000001" in out and "state 3 SMINFO_MASTER" in out, out
    # ActCount is opensm's count of QP0 MADs sent: it moves as the master's light sweeps go on
    act = int(re.search(r"activity count (\d+)", out).group(1))
    assert act > 0, out
    wait_for(lambda: int(re.search(r"activity count (\d+)", fab.diag("sminfo")).group(1)) > act, DEADLINE_S,
             "the master's ActCount to advance")
    # one record per answer: opensm's table answers reach saquery through umad2sim cut to one
    # MAD of which umad2sim copies 224 bytes, so a second PortInfoRecord would end in heap garbage
    queries = [("saquery", "NR", "2"), ("saquery", "--src-to-dst", "1:70"), ("saquery", "PIR", "8/17"),
               ("saquery", "SWIR", "8"), ("saquery", "LR", "8/17"), ("saquery", "-g"),
               ("saquery", "MCMR"), ("saquery", "-c")]
    first = [fab.diag(*q) for q in queries]
    assert "NodeRecord dump" in first[0] and "dlid....................70" in first[1]

    # a spine link goes: ibsim sends trap 128, the SM sweeps again and routes around it
    fab.console('Unlink "leaf001"[17]')
    wait_log(sm, r"heavy sweep: trap 128")
    wait_log(sm, "SUBNET UP", count=2)
    route = fab.diag("ibroute", "2")
    assert re.search(r"^0x[0-9a-f]+ 029 ", route, re.M)
    assert not re.search(r"^0x[0-9a-f]+ 017 ", route, re.M), route

    # the same queries answered by the real opensm on the same fabric print the same
    fab.console('ReLink "leaf001"[17]')
    wait_log(sm, "SUBNET UP", count=3)
    # asked after the relink, so that both SMs answer about the same fabric
    ours = [_same_path(fab.diag(*q)) for q in queries]
    sm.terminate()
    sm.wait(10)
    real = fab.real_sm("real", "host0001", "-s", "5")
    wait_log(real, "SUBNET UP")
    end = time.monotonic() + 60
    while (theirs := [_same_path(fab.diag(*q)) for q in queries]) != ours and time.monotonic() < end:
        time.sleep(0.5)     # opensm may still be answering from an earlier sweep
    for q, a, b in zip(queries, theirs, ours):
        assert a == b, f"{q}: real opensm (-) vs ours (+)\n" + "".join(
            difflib.unified_diff(a.splitlines(True), b.splitlines(True)))


def _same_path(text: str) -> str:
    """A switch port's PortInfo LocalPort is the port the SM's directed-route
    SMP came in by: which of two equal paths a parallel discovery found first
    (after a link went down and up, opensm itself answers either).  Both SMs'
    records say so; the value is left out of the comparison."""
    return re.sub(r"(\tLocalPort:\.+)\d+", r"\1<entry port>", text)


def test_lmc_sa_answers_as_opensm(fab):
    # -l 2 on both SMs: a NodeRecord or PortInfoRecord asked by any LID of a range comes back
    # with the base LID; a PathRecord between two LIDs of ranges carries those LIDs
    # (GID to GID: 16 paths; over ibsim saquery prints three of opensm's, the third with zero
    # LIDs and bytes that change from run to run, so only the first two records are compared)
    queries = [("saquery", "NR", "14"), ("saquery", "PIR", "13"),
               ("saquery", "--src-to-dst", "6:15"), ("saquery", "--src-to-dst", "4:12"),
               ("saquery", "--sgid-to-dgid", "fe80::2:c904:0:1-fe80::2:c904:0:101")]

    def ask(q):
        out = fab.diag(*q)
        return "PathRecord dump:".join(out.split("PathRecord dump:")[:3]) if "--sgid-to-dgid" in q else out
    sm = fab.our_sm("ours", None, "-l", "2", "-s", "5")
    wait_log(sm, "SUBNET UP")
    ours = [ask(q) for q in queries]
    assert "dlid....................13" in ours[4] and "slid....................5" in ours[4]
    # softrdma's saquery reassembles the RMPP transfer: all 16 LID pairs, preference 0 first
    r = subprocess.run([sys.executable, "-m", "softrdma", "saquery", "--sgid-to-dgid", queries[4][2]],
                       cwd=fab.tmp, env=fab.env(SIM_HOST="host0002"), capture_output=True, text=True,
                       timeout=30)
    pairs = re.findall(r"dlid\.+(\d+)\s+slid\.+(\d+)", r.stdout)
    assert len(pairs) == 16 and pairs[:4] == [("12", "4"), ("13", "5"), ("14", "6"), ("15", "7")], r.stdout
    assert len(set(pairs)) == 16
    assert "lid.....................12" in ours[0] and "dlid....................15" in ours[2]
    sm.terminate()
    sm.wait(10)
    real = fab.real_sm("real", "host0001", "-l", "2", "-s", "5")
    wait_log(real, "SUBNET UP")
    end = time.monotonic() + 60
    while (theirs := [ask(q) for q in queries]) != ours and time.monotonic() < end:
        time.sleep(0.5)
    for q, a, b in zip(queries, theirs, ours):
        assert a == b, f"{q}: real opensm (-) vs ours (+)\n" + "".join(
            difflib.unified_diff(a.splitlines(True), b.splitlines(True)))


def test_standby_polls_and_takes_over(fab):
    a = fab.our_sm("a", None, "-s", "1")
    wait_log(a, "SUBNET UP")
    # same priority, bigger GUID: b is the lesser SM and stays standby (polling a)
    b = fab.our_sm("b", "host0064", "-s", "1")
    text = wait_log(b, "Entering STANDBY state")
    assert "Entering MASTER state" not in text and "master SM 0x0002c90400000001" in text
    time.sleep(1.0)
    assert "Entering MASTER state" not in b.log.read_text()
    a.terminate()
    a.wait(10)
    text = wait_log(b, "SUBNET UP")
    assert "is gone: taking over" in text
    assert "state 3 SMINFO_MASTER" in fab.diag("sminfo", "70")     # host0064's LID


def test_a_better_sm_coming_later_gets_a_handover(fab):
    """The master asks every SM's SMInfo on each light sweep (as opensm's
    light sweep does), so a better SM that came up after it -- standing by,
    as a discovering SM that finds a master does -- gets the subnet."""
    a = fab.our_sm("a", "host0064", "-s", "1")
    wait_log(a, "SUBNET UP")
    b = fab.our_sm("b", None, "-s", "1", "-p", "10")
    wait_log(a, "handed the subnet over to SM 0x0002c90400000001")
    wait_log(b, "SUBNET UP")
    out = fab.diag("sminfo")
    assert "sm guid 0x2c90400000001," in out and "state 3 SMINFO_MASTER" in out, out


def test_real_opensm_hands_over_to_ours(fab):
    # same priority, ours has the lower GUID: the real opensm master hands the subnet over
    real = fab.real_sm("real", "host0032", "-s", "5")
    wait_log(real, "SUBNET UP")
    ours = fab.our_sm("ours", None, "-s", "1")
    # opensm sends HANDOVER as soon as it sees ours (trap 144): ours gets it while still
    # discovering, or finds opensm already standing by; either way ours ends master.
    # opensm may see ours only at its next sweep (-s 5): on a loaded machine that
    # and the handover took more than 15 s once
    wait_log(ours, "SUBNET UP", timeout=45)
    wait_log(real, "Entering STANDBY state", timeout=45)
    out = fab.diag("sminfo")         # host0002's SM LID: now ours
    assert "sm guid 0x2c90400000001," in out and "state 3 SMINFO_MASTER" in out, out


def test_with_the_real_opensm(fab):
    # real opensm first, ours the lesser SM (bigger GUID): ours stands by under it,
    # then takes over when it stops
    real = fab.real_sm("real", "host0032", "-s", "5")
    wait_log(real, "SUBNET UP")
    ours = fab.our_sm("ours", "host0064", "-s", "1")
    text = wait_log(ours, "Entering STANDBY state")
    time.sleep(1.0)
    assert "Entering MASTER state" not in ours.log.read_text()
    real.terminate()
    real.wait(10)
    text = wait_log(ours, "SUBNET UP")
    assert "is gone: taking over" in text
    # a better opensm comes up: it stands by, ours hands the subnet over to it
    better = fab.real_sm("better", "host0048", "-p", "10", "-s", "5")
    wait_log(ours, "handed the subnet over to SM 0x0002c904000002f1 \\(priority 10\\)")
    wait_log(better, "Entering MASTER state")
    wait_log(ours, "Entering STANDBY state", count=2)
