"""keep_pkey_indexes FALSE in softrdma's SM: P_Key tables packed again on every sweep, as opensm does.

* The P_Key manager (sm.pkey_mgr.process, ``keep_indexes=False``): a
  partition that goes leaves no hole, the next P_Key moves into its index;
  with the default (TRUE) the hole stays.
* The option: opensm.conf's ``keep_pkey_indexes FALSE`` is read and
  written back by ``-c``.
* End to end on the real ibsim: a resident SM with the option off, the
  partition file changes and a link bounce makes a heavy sweep -- the real
  ``smpquery pkeys`` prints the same tables of the CA ports whose partitions
  changed and of their switch ports after the real opensm as after ours, and
  the real saquery the same PathRecords (none to or from a port whose table
  was not set again: opensm forgets its P_Keys, as it forgets their indexes).
"""

import time

import pytest

from sm_helpers import (IbsimFabric, fixture, ibnetdiscover_lids, load_net, need_ibsim, real_and_ours, wait_log,
                        with_ibsim_caps)
from softrdma.sm import log as L
from softrdma.sm import main as sm_main
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.pkey_mgr import Tables, process
from softrdma.sm.prtn_config import Partitions, PrtnOptions, make_partitions

H1 = 0x0002c90400000001
BEFORE = """Default=0x7fff, ipoib : ALL=full ;
P1=0x8001 : 0x0002c90400000001=full, 0x0002c90400000011 ;
P2=0x0002 : ALL_CAS=limited, SELF=full ;
P3=0x0003 : 0x0002c90400000001, 0x0002c90400000021=full ;
"""
AFTER = BEFORE.replace("P1=0x8001", "P4=0x0004").replace("0x0002c90400000001=full, 0x0002c90400000011",
                                                         "0x0002c90400000031=full")


def _subnet():
    s = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s, Guid2Lid(), 0)
    return with_ibsim_caps(s)


def _sweep(subnet, tables, tmp_path, text, keep):
    (tmp_path / "partitions.conf").write_text(text)
    prtns, indx0 = Partitions(), {}
    assert make_partitions(subnet, prtns, PrtnOptions(config_file=str(tmp_path / "partitions.conf")), L.Log(None),
                           indx0)
    for op in process(subnet, prtns, tables, L.Log(None), indx0=indx0, keep_indexes=keep):
        if op[0] == "pkey":
            tables.of(op[1]).set_block(op[2], op[3])
    return tables.of(subnet.ports[H1]).blocks[0][:5]


@pytest.mark.parametrize("keep, after", [(True, [0xFFFF, 0, 0x8002, 0x0003, 0]),
                                         (False, [0xFFFF, 0x8002, 0x0003, 0, 0])], ids=["TRUE", "FALSE"])
def test_a_partition_that_goes_leaves_a_hole_only_when_indexes_are_kept(tmp_path, keep, after):
    subnet, tables = _subnet(), Tables()
    for node in subnet.nodes.values():          # ibsim's tables: 0xffff at index 0
        for p in node.ports.values():
            tables.of(p).set_block(0, [0xFFFF] + [0] * 31)
    assert _sweep(subnet, tables, tmp_path, BEFORE, keep) == [0xFFFF, 0x8001, 0x8002, 0x0003, 0]
    assert _sweep(subnet, tables, tmp_path, AFTER, keep) == after
    assert _sweep(subnet, tables, tmp_path, AFTER, keep) == after        # and stays there


def test_the_option_is_read_and_written(tmp_path):
    (tmp_path / "opensm.conf").write_text("keep_pkey_indexes FALSE\n")
    a = sm_main.build_parser().parse_args(["-F", str(tmp_path / "opensm.conf")])
    assert sm_main.settings(a)["keep_pkey_indexes"] is False
    assert sm_main.settings(sm_main.build_parser().parse_args([]))["keep_pkey_indexes"] is True
    assert sm_main.main(["-F", str(tmp_path / "opensm.conf"), "-c", str(tmp_path / "out.conf")]) == 0
    assert "keep_pkey_indexes FALSE\n" in (tmp_path / "out.conf").read_text()


# the CA ports whose partitions change, and their switch ports (leaf001 ports 1..4)
PORTS = [("host0001", 1), ("host0002", 1), ("host0003", 1), ("host0004", 1)] + [("leaf001", n) for n in (1, 2, 3, 4)]


def tables_after_a_change(tmp_path, which):
    """A resident SM with keep_pkey_indexes FALSE and BEFORE; the file becomes AFTER and a
    spine link bounces (a heavy sweep): smpquery pkeys of PORTS."""
    tmp_path.mkdir()
    conf, prtn = tmp_path / "opensm.conf", tmp_path / "partitions.conf"
    conf.write_text("sminfo_polling_timeout 300\npolling_retry_number 1\nkeep_pkey_indexes FALSE\n")
    prtn.write_text(BEFORE)
    fab = IbsimFabric(tmp_path)
    try:
        args = ("sm", "host0001", "-s", "1", "-F", str(conf), "-P", str(prtn))
        sm = fab.our_sm(*args) if which == "ours" else fab.real_sm(*args)
        wait_log(sm, "SUBNET UP")
        lids = ibnetdiscover_lids(fab.diag("ibnetdiscover"))

        def query():
            return "".join(f"== {n} port {num}\n" + fab.diag("smpquery", "pkeys", str(lids[n]), str(num))
                           for n, num in PORTS)
        first = query()
        prtn.write_text(AFTER)
        fab.console('Unlink "leaf001"[17]')
        fab.console('ReLink "leaf001"[17]')
        end = time.monotonic() + 60
        while "0x8001" in (now := query()) or "0x8004" not in now:
            assert time.monotonic() < end, now
            time.sleep(0.3)
        wait_log(sm, "SUBNET UP", 30, count=2)
        # the SA: a port whose table was not set again has no P_Keys it knows of, and no paths
        # (host0005 and host0006 are in no partition that changed; whether the link's coming
        # back makes a sweep of its own, which would empty every port's keys, is a race)
        paths = "".join(fab.diag("saquery", "--src-to-dst", f"{lids[a]}:{lids[b]}")
                        for a, b in (("host0005", "host0006"), ("host0006", "host0005")))
        return first + now + paths
    finally:
        fab.close()


@need_ibsim()
@pytest.mark.slow
def test_tables_packed_again_as_opensm_packs_them(tmp_path):
    real, ours = real_and_ours(tmp_path, tables_after_a_change)
    assert "== host0001 port 1\n   0: 0xffff 0x8002 0x0003 0x0000" in real      # no hole where P1 was
    assert "PathRecord dump" not in real
    assert ours == real
