"""Partitions in softrdma's SM: partitions.conf as opensm reads it, P_Key tables as opensm programs them.

* The parser (sm.prtn_config) on ft2_64's subnet: names, P_Keys, flags,
  membership (defmember, =full/limited/both, allow_both_pkeys), the ALL*
  and SELF keywords, opensm's prefix matching, continuation lines and
  several definitions on a line, mgid lines, the default partition; a file
  that does not parse is logged as opensm logs it and the default partition
  is used instead.
* The P_Key manager (sm.pkey_mgr) on the same subnet: index order, indx0,
  the switch peer's packed table, and a second run that keeps every P_Key
  where it was.
* End to end, on the real ibsim: the same partitions.conf given to the real
  opensm and to ``softrdma opensm`` -- the real ``smpquery pkeys`` prints
  the same table on every port of the fabric (64 CAs, 6 switches, every
  switch port and port 0).
"""

import time

import pytest

from sm_helpers import IbsimFabric, every_port, fixture, load_net, with_ibsim_caps, need_ibsim, real_and_ours, saquery_transcript, wait_log
from softrdma.sm import log as L
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.pkey_mgr import PkeyTbl, Tables, process
from softrdma.sm.prtn_config import IPOIB_BCAST_MGID, Partitions, PrtnOptions, make_partitions, strtoul

H1, H2, H3, H4 = 0x0002c90400000001, 0x0002c90400000011, 0x0002c90400000021, 0x0002c90400000031
LEAF1 = 0x0002c90300100000

CONF_A = """# partitions of the test
Default=0x7fff, ipoib : ALL=full ;
P1=0x8001, ipoib, mtu=4, rate=7 : 0x0002c90400000001=full, 0x0002c90400000011, 0x0002c90400000021=both ;
P2=0x0002 : ALL_CAS=limited,
   SELF=full ;
P3=3, defmember=full : ALL_SWITCHES ;
"""
CONF_B = """Default=0x7fff,ipoib:ALL=full;
  # indx0 and limited/full mixes
 Gold=0x10, indx0, defmember=full: 0x0002c90400000011, 0x0002c90400000021=limited ; Silver=0x20 : ALL_CAS ; \
Bronze : 0x0002c90400000011=full, ALL_SWITCHES=both;
Storage=0x7001, sl=2, mtu=5, ipoib : 0x0002c90400000031, 0x0002c90400000041=full,
  0x0002c90400000051 , mgid=ff12:401b::1,rate=3,bogus,
  0x0002c90400000061 ;
"""


@pytest.fixture(scope="module")
def subnet():
    s = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s, Guid2Lid(), 0)
    return with_ibsim_caps(s)


def make(subnet, tmp_path, text, **opts):
    path = tmp_path / "partitions.conf"
    path.write_text(text)
    log_path = tmp_path / "osm.log"
    log = L.Log(str(log_path), 0xFF)
    prtns, indx0 = Partitions(), {}
    ok = make_partitions(subnet, prtns, PrtnOptions(config_file=str(path), **opts), log, indx0)
    log.close()
    return ok, prtns, indx0, log_path.read_text()


def members(p, full):
    return {ph.guid for ph in p.members(full)}


def test_strtoul_is_cs():
    assert strtoul("0x7fff") == (0x7FFF, "")
    assert strtoul("010") == (8, "")
    assert strtoul("12ab") == (12, "ab")
    assert strtoul("zz") == (0, "zz")


def test_partitions_as_opensm_reads_them(subnet, tmp_path):
    ok, prtns, _, log = make(subnet, tmp_path, CONF_A)
    assert ok, log
    assert [(p.name, p.pkey) for p in prtns.ordered()] == \
        [("P1", 1), ("P2", 2), ("P3", 3), ("Default", 0x7FFF)]      # opensm's map order
    d, p1, p2, p3 = prtns.by_pkey[0x7FFF], prtns.by_pkey[1], prtns.by_pkey[2], prtns.by_pkey[3]
    assert len(members(d, True)) == 70 and not d.part
    assert members(p1, True) == {H1, H3} and members(p1, False) == {H2}   # "both" is full without -W
    assert members(p2, True) == {H1} and len(members(p2, False)) == 63     # SELF (host0001) made full
    assert len(members(p3, True)) == 6 and all(ph.node.is_switch for ph in p3.members(True))
    # ipoib: a broadcast group with the partition's P_Key and flags
    g = p1.mgroups[0]
    assert g.mgid == bytes.fromhex("ff12401b8001000000000000ffffffff")
    assert (g.mtu, g.rate, g.qkey, g.scope) == (4, 7, 0x0B1B, 2)
    assert d.mgroups[0].mgid == IPOIB_BCAST_MGID and not p2.mgroups


def test_flags_prefixes_continuations_and_mgid_lines(subnet, tmp_path):
    ok, prtns, indx0, log = make(subnet, tmp_path, CONF_B)
    assert ok, log
    gold, silver, storage = prtns.by_pkey[0x10], prtns.by_pkey[0x20], prtns.by_pkey[0x7001]
    assert members(gold, True) == {H2} and members(gold, False) == {H3}
    assert len(members(silver, False)) == 64
    bronze = prtns.find_by_name("Bronze")
    assert bronze.pkey == 1                                     # no P_Key given: opensm's counter
    assert storage.sl == 0                                      # sl= needs QoS, as opensm says:
    assert "Overriding SL 2 to default SL 0 on partition Storage as QoS is not enabled." in log
    # the mgid line takes the rest of its line; the next line goes on with members
    assert members(storage, False) == {H4, 0x0002c90400000051, 0x0002c90400000061}
    assert members(storage, True) == {0x0002c90400000041}
    assert "unrecognized mgroup flag 'bogus' - ignored" in log
    assert [g.mgid.hex() for g in storage.mgroups] == ["ff12401bf001000000000000ffffffff",
                                                       "ff12401bf00100000000000000000001"]
    assert {ph.guid: pk for ph, pk in indx0.items()} == {H2: 0x8010, H3: 0x0010}
    _, prtns2, _, _ = make(subnet, tmp_path, CONF_B, qos=True)
    assert prtns2.by_pkey[0x7001].sl == 2


def test_allow_both_pkeys(subnet, tmp_path):
    ok, prtns, _, log = make(subnet, tmp_path, "P=0x11 : 0x0002c90400000011=both, ALL_CAS=limited ;",
                             allow_both_pkeys=True)
    assert ok
    p = prtns.by_pkey[0x11]
    assert members(p, True) == set()                           # ALL_CAS=limited took host0002's full
    ok, prtns, _, _ = make(subnet, tmp_path, "P=0x11 : ALL_CAS=limited, 0x0002c90400000011=both ;",
                           allow_both_pkeys=True)
    assert members(prtns.by_pkey[0x11], True) == {H2} and H2 in members(prtns.by_pkey[0x11], False)


@pytest.mark.parametrize("text, line, what", [
    ("P1=0x8001 ALL ;", 1, "no partition definition found"),
    ("\n\nP1=0x80zz : ALL ;", 3, "bad partition definition"),
    ("P1=1 : 0x12zz ;", 1, "bad PortGUID"),
])
def test_a_bad_file_falls_back_to_the_default_partition(subnet, tmp_path, text, line, what, capfd):
    ok, prtns, _, log = make(subnet, tmp_path, text)
    assert not ok
    assert f"PARSE ERROR: line {line}: {what}" in log
    assert "Partition configuration was not fully processed" in log
    assert "Partition configuration in error; retrying with default config" in log
    assert f"PARSE ERROR: line {line}: {what}" in capfd.readouterr().err
    assert list(prtns.by_pkey) == [0x7FFF] and len(prtns.by_pkey[0x7FFF].full) == 70


def test_an_empty_file_is_an_error_too(subnet, tmp_path):
    ok, prtns, _, log = make(subnet, tmp_path, "# nothing\n")
    assert not ok and "retrying with default config" in log


def test_no_file_is_everybody_full_with_the_broadcast_group(subnet, tmp_path):
    log = L.Log(None)
    prtns = Partitions()
    assert make_partitions(subnet, prtns, PrtnOptions(config_file=str(tmp_path / "none")), log)
    assert list(prtns.by_pkey) == [0x7FFF] and len(prtns.by_pkey[0x7FFF].full) == 70
    assert prtns.by_pkey[0x7FFF].mgroups[0].mgid == IPOIB_BCAST_MGID


def ibsim_tables(subnet):
    """Every port's table as ibsim has it before an SM: 0xffff at index 0."""
    t = Tables()
    for node in subnet.nodes.values():
        for p in node.ports.values():
            for b in range(2 if not (node.is_switch and p.num == 0) else 1):
                t.of(p).set_block(b, [0xFFFF] + [0] * 31 if b == 0 else [0] * 32)
    return t


def apply(tables, ops):
    for op in ops:
        if op[0] == "pkey":
            _, p, b, entries = op
            tables.of(p).set_block(b, entries)
        else:
            op[1].port_info = op[2]


def table(tables, subnet, guid, num=1):
    node = subnet.nodes[guid] if guid in subnet.nodes else subnet.ports[guid].node
    return [pk for blk in tables.of(node.ports[num]).blocks for pk in blk if pk]


def test_pkey_tables_in_opensms_order(subnet, tmp_path):
    _, prtns, indx0, _ = make(subnet, tmp_path, CONF_B)
    tables = ibsim_tables(subnet)
    ops = process(subnet, prtns, tables, L.Log(None), indx0=dict(indx0))
    apply(tables, ops)
    assert table(tables, subnet, H2) == [0x8010, 0x8001, 0x0020, 0xFFFF]
    assert table(tables, subnet, H3) == [0x0010, 0x0020, 0xFFFF]
    assert table(tables, subnet, LEAF1, 0) == [0xFFFF, 0x8001]
    assert table(tables, subnet, LEAF1, 2) == [0x8010, 0x8001, 0x0020, 0xFFFF]   # host0002's peer
    # enforcement on the CA-facing switch ports, none between switches
    enforced = {(op[1].node.guid, op[1].num) for op in ops if op[0] == "enforce"}
    assert (LEAF1, 2) in enforced and (LEAF1, 17) not in enforced


def test_a_second_sweep_keeps_every_pkey_where_it_was(subnet, tmp_path):
    _, prtns, indx0, _ = make(subnet, tmp_path, CONF_A)
    tables = ibsim_tables(subnet)
    apply(tables, process(subnet, prtns, tables, L.Log(None)))
    assert table(tables, subnet, H1) == [0xFFFF, 0x8001, 0x8002]
    # P1 goes, P4 comes: P2 stays at index 2, P4 goes after the last index ever used
    _, prtns, _, _ = make(subnet, tmp_path, CONF_A.replace("P1=0x8001", "P4=0x0004"), )
    _, prtns, _, _ = make(subnet, tmp_path, "Default=0x7fff:ALL=full;P2=2:ALL_CAS,SELF=full;P4=4:0x0002c90400000001=full;")
    ops = process(subnet, prtns, tables, L.Log(None))
    apply(tables, ops)
    blk = tables.of(subnet.ports[H1]).blocks[0]
    assert blk[:4] == [0xFFFF, 0, 0x8002, 0x8004]
    assert process(subnet, prtns, tables, L.Log(None)) == []        # nothing changes: nothing sent


def test_pkeytbl_keys_first_occurrence_wins():
    t = PkeyTbl()
    t.set_block(0, [0xFFFF, 0x0005, 0x8005] + [0] * 29)
    assert t.keys == {0x7FFF: (0, 0), 0x5: (0, 1)}


# -- end to end ----------------------------------------------------------------------------

def swept_tables(tmp_path, which, *args):
    tmp_path.mkdir(exist_ok=True)
    fab = IbsimFabric(tmp_path)
    try:
        sm = fab.real_sm("sm", "host0001", "-o", *args) if which == "real" else \
            fab.our_sm("sm", "host0001", "-o", *args)
        assert sm.wait(120) == 0 or which == "real", (sm.log.read_text()[-3000:])
        return every_port(fab, "pkeys"), sm.log.read_text()
    finally:
        fab.close()


@pytest.fixture(scope="module")
def without_file(tmp_path_factory):
    """softrdma's SM with ``-P`` naming no file: every port's tables and the log, once for the
    module (the "none" case compares them with opensm's, the others tell them from their own)."""
    tmp = tmp_path_factory.mktemp("prtn")
    return swept_tables(tmp / "ours", "ours", "-P", str(tmp / "no-such-file"))


@need_ibsim()
@pytest.mark.slow
@pytest.mark.parametrize("conf", [CONF_A, CONF_B, None, "P1=0x80zz : ALL ;"], ids=["A", "B", "none", "bad"])
def test_pkey_tables_identical_to_opensms_on_every_port(tmp_path, conf, request):
    args = []
    if conf is not None:
        (tmp_path / "partitions.conf").write_text(conf)
        args = ["-P", str(tmp_path / "partitions.conf")]
    else:
        args = ["-P", str(tmp_path / "no-such-file")]
    real, real_log = swept_tables(tmp_path / "real", "real", *args)
    ours, our_log = swept_tables(tmp_path / "ours", "ours", *args) if conf is not None else \
        request.getfixturevalue("without_file")
    assert real.count("== ") == 64 + 6 * 37
    assert ours == real
    if conf and "80zz" in conf:
        for text in (real_log, our_log):
            assert "PARSE ERROR: line 1: bad partition definition" in text
            assert "Partition configuration in error; retrying with default config" in text
    elif conf:
        assert real != request.getfixturevalue("without_file")[0]


def resident_story(tmp_path, which):
    """A resident SM with CONF_A; the file changes (P1 goes, P4 comes); a spine link goes and
    comes back (traps, heavy sweeps): the tables once they hold P4, and the first ones."""
    tmp_path.mkdir()
    conf = tmp_path / "partitions.conf"
    conf.write_text(CONF_A)
    fab = IbsimFabric(tmp_path)
    try:
        args = ("sm", "host0001", "-s", "1", "-P", str(conf))
        sm = fab.our_sm(*args) if which == "ours" else fab.real_sm(*args)
        wait_log(sm, "SUBNET UP")
        first = every_port(fab, "pkeys")
        conf.write_text(CONF_A.replace("P1=0x8001", "P4=0x0004"))
        fab.console('Unlink "leaf001"[17]')
        fab.console('ReLink "leaf001"[17]')
        end = time.monotonic() + 60
        while "0x8004" not in (now := every_port(fab, "pkeys")) or "0x8001" in now:
            assert time.monotonic() < end, now
            time.sleep(0.5)
        return first, now
    finally:
        fab.close()


@need_ibsim()
@pytest.mark.slow
def test_resident_sm_keeps_indexes_as_opensm(tmp_path):
    """P1 leaves a hole at index 1 of host0001 and host0003; P4 goes after the last index used."""
    real_first, real = resident_story(tmp_path / "real", "real")
    our_first, ours = resident_story(tmp_path / "ours", "ours")
    assert our_first == real_first
    assert ours == real
    assert "== host0001 port 1\n   0: 0xffff 0x0000 0x8002 0x8004" in ours


CONF_SA = """Default=0x7fff, ipoib : ALL, SELF=full ;
P1=0x8001, ipoib, rate=7 : 0x0002c90400000011=full, 0x0002c90400000021 ;
P2=0x2 : 0x0002c90400000031, 0x0002c90400000041 ;
"""


def sa_queries(lid):
    """saquery's questions about partitions, from host0002 and host0001."""
    qs = [
        ("--smkey", "1", "PKTR", f"{lid['host0002']}/1/0"),       # trusted: the CA's block 0
        ("PKTR", f"{lid['host0002']}/1/0"),                       # untrusted: refused
        ("--smkey", "1", "PKTR", f"{lid['leaf001']}/2/0"),        # host0002's switch peer
        ("--smkey", "1", "PKTR", f"{lid['leaf001']}/0/0"),        # port 0: no P_Key shared
        ("--smkey", "1", "PKTR", f"{lid['leaf001']}/17/0"),       # a switch-to-switch port
        ("--smkey", "1", "PKTR", f"{lid['host0003']}/0/1"),       # block 1 (BlockNum as opensm's)
        ("--src-to-dst", f"{lid['host0002']}:{lid['host0003']}"),  # full-limited: P_Key 0x8001
        ("--src-to-dst", f"{lid['host0004']}:{lid['host0005']}"),  # limited-limited: no path
        ("--src-to-dst", f"{lid['host0001']}:{lid['host0005']}"),
        ("--pkey", "0x7fff", "--src-to-dst", f"{lid['host0002']}:{lid['host0003']}"),
        ("-g",), ("MCMR",),                                        # P1's broadcast group too
    ]
    return [(node, q) for node in ("host0002", "host0001") for q in qs]


def sa_answers(tmp_path, which):
    return saquery_transcript(tmp_path, which, ["-s", "1", "-P", "{tmp}/partitions.conf"],
                              {"partitions.conf": CONF_SA}, sa_queries,
                              (("--smkey", "1", "PKTR", "{leaf001}/17/0"), "PKeyTableRecord dump"))


@need_ibsim()
@pytest.mark.slow
def test_sa_honours_partitions_as_opensm(tmp_path):
    real, ours = real_and_ours(tmp_path, sa_answers)
    assert "pkey....................0x8001" in real and "PKeyTableRecord dump" in real
    assert ours == real


def test_sa_joins_and_paths_within_partitions(subnet, tmp_path):
    """The SA over the tables CONF_SA gives: a port joins only a group of its partition;
    two limited members have no path; a full and a limited member have one, with their P_Key."""
    from softrdma.sm.sa import SubnetAdmin
    from softrdma.wire.mad import Method
    from softrdma.wire.sa import MCMEMBER_RECORD, MCR_COMP, SA_STATUS_REQ_INVALID, SaAttr
    _, prtns, indx0, _ = make(subnet, tmp_path, CONF_SA)
    tables = ibsim_tables(subnet)
    apply(tables, process(subnet, prtns, tables, L.Log(None), indx0=dict(indx0)))
    from softrdma.sm.routing import compute
    subnet.partitions, subnet.pkey_tables = prtns, tables
    subnet.lfts = compute(subnet, "minhop", set())[1]
    try:
        sa = SubnetAdmin(subnet)
        p1_bcast = 0xFF12401B8001000000000000FFFFFFFF
        assert p1_bcast.to_bytes(16, "big") in sa.groups.by_mgid        # P1's IPoIB group, made by set_subnet

        def join(guid):
            gid = (0xFE80000000000000 << 64) | guid
            rec = bytes(MCMEMBER_RECORD.encode(MGID=p1_bcast, PortGID=gid, JoinState=1)).ljust(56, b"\0")
            mask = MCR_COMP["MGID"] | MCR_COMP["PortGID"] | MCR_COMP["JoinState"]
            return sa._set_or_delete(Method.SET, SaAttr.MCMEMBER_RECORD, mask, rec, subnet.ports[guid].lid, 0)[0]
        assert join(H2) == 0 and join(H3) == 0                           # P1's full and limited members
        assert join(H4) == SA_STATUS_REQ_INVALID                          # not in P1

        def paths(a, b):
            from softrdma.wire.sa import PATH_RECORD
            src, dst = subnet.ports[a], subnet.ports[b]
            return [PATH_RECORD.decode(r)["PKey"] for r in sa.pair_paths(src, dst, None, None, None)]
        assert paths(H2, H3) == [0x8001]
        assert paths(H4, 0x0002c90400000041) == []                        # limited-limited, in P2 and Default
        assert paths(H1, H4) == [0xFFFF]                                  # the SM: a full member of Default
    finally:
        subnet.partitions = subnet.pkey_tables = None
        subnet.lfts = {}
