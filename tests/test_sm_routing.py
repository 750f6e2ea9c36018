"""softrdma.sm's LID manager and routing engines against real opensm's own output.

The fixtures (tests/data/opensm, see its README) are opensm 3.3.23's
opensm-lfts.dump and guid2lid after one heavy sweep of a fresh ibsim fabric.
The subnet is built straight from the same .net (tests/sm_helpers.load_net),
as discovery would find it; LIDs, LFTs and the guid2lid file must come out
byte for byte the same, for minhop, updn and ftree alike; and with opensm -l 2
(LMC 2: four LIDs per CA port, every one routed, spread over different paths)
for minhop and updn.
"""

import random

import pytest

from sm_helpers import fixture, load_net, roots, subnet_from_fabric
from softrdma.sm import checks, lft_dump
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.routing import compute

TOPOS = ["ft2_64", "ft2_324", "ft3_648", "ft3_1296", "ft2_2048"]


LMC_TOPOS = ["ft2_64", "ft2_324", "ft3_648"]


def build(topo, lmc=0):
    s = load_net(fixture(topo + ".net.xz"))
    g = Guid2Lid()
    assign_lids(s, g, lmc)
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


# --- LMC > 0 (opensm -l 2) ---------------------------------------------------------------

@pytest.mark.parametrize("topo", LMC_TOPOS)
def test_lmc_lids_and_guid2lid_as_opensm(topo):
    s, g = build(topo, 2)
    assert g.dumps() == fixture(f"{topo}.minhop.lmc2.guid2lid.xz")
    sm = s.ports[s.sm_port_guid]
    assert (sm.lid, sm.lmc) == (4, 2)              # LID 1 is not aligned to 4: 4..7
    for p in s.ports.values():
        if p.node.is_switch:
            assert p.lmc == 0                      # no enhanced switch port 0 (lmc_esp0)
        else:
            assert p.lmc == 2 and p.lid % 4 == 0
    by_lid = s.port_by_lid()
    assert len(by_lid) == sum(1 << p.lmc for p in s.ports.values())


@pytest.mark.parametrize("engine", ["minhop", "updn"])
@pytest.mark.parametrize("topo", LMC_TOPOS)
def test_lmc_lfts_identical_to_opensm(topo, engine):
    s, _ = build(topo, 2)
    used, lfts = compute(s, engine, roots(topo))
    assert used == engine
    assert lft_dump.dumps(s, lfts) == fixture(f"{topo}.{engine}.lmc2.lfts.xz")


@pytest.mark.parametrize("topo,engine", [("ft2_324", "minhop"), ("ft2_324", "updn"),
                                         ("ft3_648", "updn")])
def test_lmc_reaches_every_lid_without_credit_loop(topo, engine):
    # (minhop on ft3_648 has a credit loop, with LMC 0 as well, through routes to switch
    # LIDs that go down and up again -- opensm's minhop builds the very same LFTs)
    s, _ = build(topo, 2)
    _, lfts = compute(s, engine, roots(topo))
    assert checks.unreachable(s, lfts) == []      # every LID of every range
    assert checks.credit_loop(s, lfts) is None    # over all of them


@pytest.mark.parametrize("engine", ["minhop", "updn"])
def test_lmc_spreads_a_ports_lids_over_spines(engine):
    s, _ = build("ft2_324", 2)
    _, lfts = compute(s, engine, roots("ft2_324"))
    # from a leaf, the four LIDs of a CA on another leaf leave by four different uplinks
    # that reach four different spines
    leaf = next(sw for sw in s.switches() if sw.desc == "leaf001")
    far = [p for p in s.ports.values() if not p.node.is_switch and p.remote.node is not leaf]
    spread = 0
    for p in far:
        spines = {leaf.ports[lfts[leaf][lid]].remote.node for lid in range(p.lid, p.lid + 4)}
        spread += len(spines) == 4
    assert spread == len(far)


def test_lmc_ftree_falls_back_to_minhop():
    # opensm's ftree: "LMC > 0 is not supported by fat-tree routing", minhop instead
    s, _ = build("ft2_64", 2)
    used, lfts = compute(s, "ftree", roots("ft2_64"))
    assert used == "minhop"
    assert lft_dump.dumps(s, lfts) == fixture("ft2_64.minhop.lmc2.lfts.xz")


def test_lmc_lid_manager_keeps_ranges_on_resweep():
    s, g = build("ft2_64", 2)
    before = {p.guid: (p.lid, p.lmc) for p in s.ports.values()}
    s2 = load_net(fixture("ft2_64.net.xz"), sm_node="host0064")
    assign_lids(s2, Guid2Lid.loads(g.dumps()), 2)
    assert {p.guid: (p.lid, p.lmc) for p in s2.ports.values()} == before
    # the same fabric, now LMC 0 with that cache: every port keeps its base LID
    s3 = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s3, Guid2Lid.loads(g.dumps()), 0)
    assert {p.guid: p.lid for p in s3.ports.values()} == {g_: v[0] for g_, v in before.items()}


def test_lmc_lid_manager_drops_unaligned_records():
    # an LMC-0 cache under LMC 2: records of CA ports are not aligned/wide enough, so the
    # ports get fresh aligned ranges; switches (1 LID) keep theirs
    s, g = build("ft2_64", 0)
    s2 = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s2, Guid2Lid.loads(g.dumps()), 2)
    used = set()
    for p in s2.ports.values():
        n = 1 << p.lmc
        assert p.lid % n == 0
        rng = set(range(p.lid, p.lid + n))
        assert not rng & used
        used |= rng
        if p.node.is_switch:
            assert p.lid == s.ports[p.guid].lid


def test_lmc_esp0_gives_enhanced_switch_port0_a_range():
    # lmc_esp0 TRUE and SwitchInfo.EnhancedPort0: switch port 0 gets 2^LMC LIDs too, every
    # one routed (to port 0 on the switch itself); without EnhancedPort0 lmc_esp0 changes nothing
    from softrdma.wire.smp import SWITCH_INFO
    plain, _ = build("ft2_64", 2)
    s = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s, Guid2Lid(), 2, lmc_esp0=True)
    assert {p.guid: p.lid for p in s.ports.values()} == {p.guid: p.lid for p in plain.ports.values()}
    s = load_net(fixture("ft2_64.net.xz"))
    for sw in s.switches():
        sw.switch_info = bytes(SWITCH_INFO.encode(LinearFdbCap=49152, EnhancedPort0=1))
    assign_lids(s, Guid2Lid(), 2, lmc_esp0=True)
    for p in s.ports.values():
        assert p.lmc == 2 and p.lid % 4 == 0
    _, lfts = compute(s, "minhop", None)
    assert checks.unreachable(s, lfts, cas_only=False) == []
    for sw in s.switches():
        assert all(lfts[sw][lid] == 0 for lid in range(sw.base_lid(), sw.base_lid() + 4))


@pytest.mark.parametrize("engine", ["minhop", "updn"])
@pytest.mark.parametrize("a,b", [(0, 2), (2, 0)])
def test_lmc_change_on_a_programmed_subnet_as_opensm(a, b, engine):
    # opensm -l a, then a new opensm -l b on the same fabric and cache: the ports report the
    # LIDs/LMCs of the first run, the guid2lid file is the first run's (fixtures lmc0to2/lmc2to0)
    s, g = build("ft2_64", a)
    s2 = load_net(fixture("ft2_64.net.xz"))
    for guid, p in s.ports.items():
        s2.ports[guid].lid, s2.ports[guid].lmc = p.lid, p.lmc
    g2 = Guid2Lid.loads(g.dumps())
    assign_lids(s2, g2, b)
    assert g2.dirty and g2.dumps() == fixture(f"ft2_64.{engine}.lmc{a}to{b}.guid2lid.xz")
    used, lfts = compute(s2, engine, roots("ft2_64"))
    assert used == engine
    assert lft_dump.dumps(s2, lfts) == fixture(f"ft2_64.{engine}.lmc{a}to{b}.lfts.xz")
    if a == 0:
        # CA ports on a LID divisible by 4 keep it; the others move above every LID in use
        kept = [p for guid, p in s2.ports.items() if not p.node.is_switch and p.lid == s.ports[guid].lid]
        assert kept and all(p.lid % 4 == 0 for p in kept)
    else:
        # every port keeps its base LID; the LFTs still span the old LMC-2 ranges
        assert all(p.lid == s.ports[guid].lid for guid, p in s2.ports.items())
        assert s2.max_lid() == s.max_lid()


def test_guid2lid_unchanged_is_not_rewritten():
    s, g = build("ft2_64", 2)
    g2 = Guid2Lid.loads(g.dumps())
    s2 = load_net(fixture("ft2_64.net.xz"))
    for guid, p in s.ports.items():
        s2.ports[guid].lid, s2.ports[guid].lmc = p.lid, p.lmc
    assert assign_lids(s2, g2, 2) == [] and not g2.dirty


def test_lmc_7_runs_out_of_lids_like_opensm():
    # 648 CA ports x 128 LIDs do not fit below 0xC000: the ports past the end stay on LID 0
    # (opensm: "ERR 0307: OPENSM RAN OUT OF LIDS!!!"), the others get their ranges
    s = load_net(fixture("ft3_648.net.xz"))
    g = Guid2Lid()
    assign_lids(s, g, 7)
    assert s.out_of_lids and all(p.lid == 0 for p in s.out_of_lids)
    got = [p for p in s.ports.values() if p.lid]
    assert len(got) + len(s.out_of_lids) == len(s.ports)
    assert max(p.lid + (1 << p.lmc) - 1 for p in got) <= 0xBFFF
    assert all(p.node.is_switch or p.lid % 128 == 0 for p in got)


# --- the LMC 0 arrays choose as the hop lists do ------------------------------------------

def _perturbed(s, lfts, seed):
    rnd = random.Random(seed)
    out = {}
    for sw, lft in lfts.items():
        t = bytearray(lft)
        for lid in range(len(t)):
            if rnd.random() < 0.3:
                t[lid] = rnd.choice([0, 0xFF, rnd.randint(1, sw.num_ports + 2)])
        out[sw] = bytes(t[:rnd.randint(len(t) // 2, len(t))])
    return out


def _torus():
    from softrdma.fabric import gen
    return subnet_from_fabric(gen.torus2d(5, 4, hosts_per_switch=3)[0])


@pytest.mark.parametrize("engine", ["minhop", "updn"])
@pytest.mark.parametrize("topo", ["ft2_64", "ft3_648", "torus", "ft2_324-cut"])
def test_array_port_choice_is_the_hop_lists_one(topo, engine):
    # vector.build_lfts on candidate masks against lfts.build_lfts on the hop lists (the LMC > 0
    # path, opensm's choice step by step): on a fat tree, a torus (no tree: uneven candidate sets)
    # and a fat tree with links cut (unreachable switches, uneven loads); on a first sweep and
    # with existing tables whose entries are partly kept, partly invalid, partly short
    from softrdma.sm.routing import lfts as lists, minhop, updn
    if topo == "torus":
        s = _torus()
        assign_lids(s, Guid2Lid(), 0)
        rts = {s.switches()[0].guid}
    else:
        s, _ = build(topo.split("-")[0])
        rts = roots(topo.split("-")[0])
    if topo.endswith("-cut"):
        rnd = random.Random(3)
        links = [p for sw in s.switches() for p in sw.ports.values()
                 if p.num and p.remote is not None and p.remote.node.is_switch]
        for p in rnd.sample(links, len(links) // 3):
            if p.remote is not None:
                p.remote.remote = None
                p.remote = None
    mod = minhop if engine == "minhop" else updn

    def by_lists(existing):
        hops = minhop.min_hop_tables(s) if engine == "minhop" else updn.updn_hop_tables(s, rts)
        return lists.build_lfts(s, hops, existing)

    first = mod.route(s, rts)
    assert first == by_lists(None)
    for seed in (1, 2):
        existing = _perturbed(s, first, seed)
        assert mod.route(s, rts, existing) == by_lists(existing)


def test_ftree_down_load_tie_break_compares_guids_as_numbers():
    # two up groups as loaded as each other, to remote switches as loaded as each other: the one
    # with the smaller remote GUID stays first.  0x..00ff < 0x..0100 as numbers, but not as
    # network-order bytes; opensm 3.3.23 compares numbers (its tables at 3,456 and 11,664 hosts,
    # switch GUID indices past 255, are ftree's only so)
    from softrdma.sm.routing import ftree
    from softrdma.sm.subnet import NODE_SWITCH, Node
    a, b = (ftree._Sw(Node(g, NODE_SWITCH, 4), 0) for g in (0x2C903000000FF, 0x2C90300000100))
    ga = ftree._Group(1, 2, 0x2C903000000FF, None, a, True)
    gb = ftree._Group(1, 3, 0x2C90300000100, None, b, True)
    ups = [ga, gb]
    assert ftree._bubble_down(ups)
    assert ups == [ga, gb]
    gb.counter_down = 0
    ga.counter_down = 1             # more loaded: goes behind
    ftree._bubble_down(ups)
    assert ups == [gb, ga]
