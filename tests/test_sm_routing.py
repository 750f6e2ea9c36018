"""softrdma.sm's LID manager and routing engines against real opensm's own output.

The fixtures (tests/data/opensm, see its README) are opensm 3.3.23's
opensm-lfts.dump and guid2lid after one heavy sweep of a fresh ibsim fabric.
The subnet is built straight from the same .net (tests/sm_helpers.load_net),
as discovery would find it; LIDs, LFTs and the guid2lid file must come out
byte for byte the same, for minhop, updn and ftree alike.
"""

import pytest

from sm_helpers import fixture, load_net, roots
from softrdma.sm import checks, lft_dump
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.routing import compute

TOPOS = ["ft2_64", "ft2_324", "ft3_648", "ft3_1296", "ft2_2048"]


def build(topo):
    s = load_net(fixture(topo + ".net.xz"))
    g = Guid2Lid()
    assign_lids(s, g)
    return s, g


@pytest.mark.parametrize("topo", TOPOS)
def test_lids_and_guid2lid_as_opensm(topo):
    s, g = build(topo)
    assert g.dumps() == fixture(f"{topo}.minhop.guid2lid.xz")
    assert s.ports[s.sm_port_guid].lid == 1


@pytest.mark.parametrize("engine", ["minhop", "updn", "ftree"])
@pytest.mark.parametrize("topo", TOPOS)
def test_lfts_identical_to_opensm(topo, engine):
    s, _ = build(topo)
    used, lfts = compute(s, engine, roots(topo))
    assert used == engine
    assert lft_dump.dumps(s, lfts) == fixture(f"{topo}.{engine}.lfts.xz")


@pytest.mark.parametrize("engine", ["updn", "ftree"])
@pytest.mark.parametrize("topo", ["ft2_324", "ft3_648", "ft3_1296", "ft2_2048"])
def test_reaches_all_and_is_deadlock_free(topo, engine):
    s, _ = build(topo)
    used, lfts = compute(s, engine, roots(topo))
    assert used == engine
    assert checks.unreachable(s, lfts) == []
    assert checks.credit_loop(s, lfts) is None


@pytest.mark.parametrize("topo", ["ft2_324", "ft3_648"])
def test_ftree_finds_the_roots_itself(topo):
    # without -a, ftree ranks from the CAs up: same tree, every CA pair routed, no credit loop,
    # and the worst link carries no more routes than opensm's own (rooted) ftree
    s, _ = build(topo)
    used, lfts = compute(s, "ftree", set())
    assert used == "ftree"
    assert checks.unreachable(s, lfts) == []
    assert checks.credit_loop(s, lfts) is None
    ref = {}
    for guid, table in lft_dump.loads(fixture(f"{topo}.ftree.lfts.xz")).items():
        lft = bytearray([0xFF]) * (max(table) + 1)
        for lid, port in table.items():
            lft[lid] = port
        ref[s.nodes[guid]] = lft
    assert max(checks.link_loads(s, lfts).values()) <= max(checks.link_loads(s, ref).values())


def test_ftree_on_a_single_switch_falls_back_to_minhop():
    s, _ = build("ft2_64")
    # cut the spines away: four separate leaves are no fat tree
    for sw in s.switches():
        if sw.desc.startswith("spine"):
            for p in sw.ports.values():
                if p.remote is not None:
                    p.remote.remote = None
                    p.remote = None
    used, _ = compute(s, "ftree", roots("ft2_64"))
    assert used == "minhop"


def test_lid_manager_keeps_lids_on_resweep():
    s, g = build("ft2_64")
    before = {p.guid: p.lid for p in s.ports.values()}
    s2 = load_net(fixture("ft2_64.net.xz"), sm_node="host0064")    # another SM, same cache
    changed = assign_lids(s2, Guid2Lid.loads(g.dumps()))
    assert changed and {p.guid: p.lid for p in s2.ports.values()} == before


def test_lid_manager_keeps_programmed_lids_without_cache():
    s, _ = build("ft2_64")
    s2 = load_net(fixture("ft2_64.net.xz"), sm_node="host0064")
    for guid, p in s.ports.items():
        s2.ports[guid].lid = p.lid
    assert assign_lids(s2, Guid2Lid()) == []


def test_updn_without_roots_falls_back_to_minhop():
    s, _ = build("ft2_64")
    used, lfts = compute(s, "updn", set())
    assert used == "minhop"
    assert lft_dump.dumps(s, lfts) == fixture("ft2_64.minhop.lfts.xz")


def test_credit_loop_is_found():
    # a ring of three switches routed "always clockwise" has a dependency cycle
    from softrdma.sm.subnet import NODE_SWITCH, Node, Subnet
    s = Subnet()
    sws = []
    for i in range(3):
        n = s.add_node(Node(0x100 + i, NODE_SWITCH, 2, f"sw{i}"))
        for p in range(3):
            s.add_port(n, p, n.guid)
        n.ports[0].lid = i + 1
        sws.append(n)
    for i in range(3):
        s.link(sws[i].ports[1], sws[(i + 1) % 3].ports[2])
    lfts = {}
    for i, sw in enumerate(sws):
        lft = bytearray([0xFF]) * 4
        for lid in (1, 2, 3):
            lft[lid] = 0 if lid == i + 1 else 1
        lfts[sw] = lft
    assert checks.unreachable(s, lfts) == []
    assert checks.credit_loop(s, lfts) is not None
