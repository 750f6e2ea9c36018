"""The sans-IO fabric: discovery by hand with DR SMPs, LFTs programmed by
Set and LID routing that follows them, PortInfo state machine, counters,
traps, the .net parser/writer and the generators."""

import struct

import pytest

from softrdma.fabric import gen, model, route, topo
from softrdma.fabric.model import FabricError
from softrdma.wire import smp
from softrdma.wire.ibsim import ETIMEDOUT
from softrdma.wire.mad import Method
from softrdma.wire.smp import PhysState, PortState, SmpAttr, SmpStatus

GET, SET = Method.GET, Method.SET


@pytest.fixture
def ft():
    f, _ = gen.fat_tree2(leaves=4, spines=2, hosts_per_leaf=4, radix=8)
    return f, route.Router(f)


def dr(r, src, path, attr, mod=0, method=GET, data=b""):
    out = r.inject(src, smp.build_dr_smp(method, attr, path, mod, data, tid=7),
                   0xFFFF, 0xFFFF, 0, 0)
    assert len(out) == 1
    d = out[0]
    assert d.port is src
    return d


def test_discover_by_hand(ft):
    """BFS over DR paths from host0001: every node found once, every
    NodeInfo/PortInfo consistent with the topology."""
    f, r = ft
    sm = f.by_id["host0001"].ports[1]
    seen = {}
    queue = [[]]
    while queue:
        path = queue.pop(0)
        d = dr(r, sm, path or [], SmpAttr.NODE_INFO)
        assert d.status == 0 and not d.dropped
        assert smp.parse_dr(d.mad).direction == 1 and smp.parse_dr(d.mad).hop_ptr == 0
        ni = smp.NODE_INFO.decode(d.mad, 64)
        if ni["Guid"] in seen:
            continue
        seen[ni["Guid"]] = path
        desc = smp.decode_node_desc(dr(r, sm, path, SmpAttr.NODE_DESC).mad[64:128])
        node = f.by_guid[ni["Guid"]]
        assert desc == node.nodeid and ni["NumPorts"] == node.nports
        if ni["NodeType"] != 2:
            if path:
                continue
            queue.append([1])
            continue
        for p in range(1, ni["NumPorts"] + 1):
            pi = smp.PORT_INFO.decode(dr(r, sm, path, SmpAttr.PORT_INFO, p).mad, 64)
            assert pi["LocalPort"] == ni["LocalPort"]     # the port the SMP came in on
            if pi["PhysLinkState"] == PhysState.LINK_UP and p != ni["LocalPort"]:
                assert pi["LinkState"] == PortState.INIT and pi["LinkWidthActive"] == 2
                queue.append(path + [p])
    assert len(seen) == len(f.nodes) == 4 + 2 + 16


def test_bad_paths_time_out(ft):
    f, r = ft
    sm = f.by_id["host0001"].ports[1]
    d = dr(r, sm, [1, 99], SmpAttr.NODE_INFO)
    assert d.dropped and d.status == ETIMEDOUT
    d = dr(r, sm, [1, 1, 1], SmpAttr.NODE_INFO)        # through a CA: not allowed
    assert d.dropped
    m = smp.build_dr_smp(GET, SmpAttr.NODE_INFO, [1], hop_ptr=1)
    assert r.inject(sm, m, 0xFFFF, 0xFFFF, 0, 0)[0].dropped


def test_unknown_attr_and_set_of_readonly(ft):
    f, r = ft
    sm = f.by_id["host0001"].ports[1]
    assert smp.parse_dr(dr(r, sm, [], 0x00FF).mad).status == SmpStatus.ATTR_UNSUPPORTED
    assert smp.parse_dr(dr(r, sm, [], SmpAttr.NODE_INFO, method=SET).mad).status == \
        SmpStatus.ATTR_UNSUPPORTED
    assert smp.parse_dr(dr(r, sm, [], SmpAttr.PORT_INFO, 5).mad).status == SmpStatus.BAD_PARAM
    # SMInfo is the SM's: delivered to whoever listens on that port, not answered
    out = r.inject(sm, smp.build_dr_smp(GET, SmpAttr.SM_INFO, [1, 5, 1]), 0xFFFF, 0xFFFF, 0, 0)
    assert out[0].port.node.nodeid != "host0001" and not out[0].dropped


def _bring_up(f, r):
    """What an SM does: LIDs by DR, LFTs, Armed, Active.  Returns lid -> port."""
    sm = f.by_id["host0001"].ports[1]
    paths = {"host0001": []}
    queue = [(sm.node, [])]
    while queue:                    # BFS in the model for DR paths (the test's "SM")
        n, path = queue.pop(0)
        for p in n.external_ports():
            if p.remote is None or (path == [] and not n.is_switch and p.num != 1):
                continue
            m = p.remote.node
            if m.nodeid not in paths and (n.is_switch or not path):
                paths[m.nodeid] = path + [p.num]
                queue.append((m, path + [p.num]))
    lids = {}
    for i, n in enumerate(f.nodes):
        lid = i + 1
        num = 0 if n.is_switch else 1
        pi = smp.PORT_INFO.encode(Lid=lid, SMLid=1, LinkState=0)
        d = dr(r, sm, paths[n.nodeid], SmpAttr.PORT_INFO, num, SET, pi)
        assert smp.parse_dr(d.mad).status == 0
        lids[lid] = n
    # minhop-ish LFTs: computed here from the model's links
    for n in f.nodes:
        if not n.is_switch:
            continue
        lft = bytearray(b"\xff" * 64)
        for lid, dst in lids.items():
            if dst is n:
                lft[lid] = 0
                continue
            lft[lid] = _first_hop(n, dst)
        d = dr(r, sm, paths[n.nodeid], SmpAttr.LINEAR_FWD_TABLE, 0, SET, bytes(lft))
        assert smp.parse_dr(d.mad).status == 0 and bytes(d.mad[64:128]) == bytes(lft)
        si = smp.SWITCH_INFO.encode(LinearFdbTop=len(lids))
        assert smp.parse_dr(dr(r, sm, paths[n.nodeid], SmpAttr.SWITCH_INFO, 0, SET, si).mad).status == 0
    for state in (PortState.ARMED, PortState.ACTIVE):
        for n in f.nodes:
            for p in n.ports:
                if p is None or (p.num and p.remote is None):
                    continue
                d = dr(r, sm, paths[n.nodeid], SmpAttr.PORT_INFO, p.num, SET,
                       smp.PORT_INFO.encode(Lid=p.lid, SMLid=p.smlid, LinkState=state))
                assert smp.parse_dr(d.mad).status == 0, (p, state)
    return lids


def _first_hop(sw, dst):
    """BFS over switches for the first port towards dst."""
    from collections import deque
    q = deque([(sw, None)])
    seen = {sw}
    while q:
        n, first = q.popleft()
        for p in n.external_ports():
            if p.remote is None:
                continue
            m = p.remote.node
            f0 = first or p.num
            if m is dst:
                return f0
            if m.is_switch and m not in seen:
                seen.add(m)
                q.append((m, f0))
    return 0xFF


def test_lid_routing_follows_lfts_and_counters(ft):
    f, r = ft
    lids = _bring_up(f, r)
    assert all(p.state == PortState.ACTIVE for p in f.ports() if p.remote is not None)
    src = f.by_id["host0001"].ports[1]
    dst_lid = next(l for l, n in lids.items() if n.nodeid == "host0016")
    m = smp.build_smp(GET, SmpAttr.NODE_INFO, tid=1)
    out = r.inject(src, m, 0, dst_lid, 0, 0)
    assert out[0].port is src and not out[0].dropped
    assert (out[0].slid, out[0].dlid) == (dst_lid, src.lid)
    ni = smp.NODE_INFO.decode(out[0].mad, 64)
    assert ni["Guid"] == f.by_id["host0016"].guid
    # a PerfMgt query to the leaf of host0016: its port 1 counts both hops of that SMP
    leaf4 = f.by_id["leaf004"]
    pm = smp.build_perf(GET, smp.PerfAttr.PORT_COUNTERS,
                        data=smp.PORT_COUNTERS.encode(PortSelect=4))
    out = r.inject(src, pm, 0, leaf4.ports[0].lid, 1, 1)
    pc = smp.PORT_COUNTERS.decode(out[0].mad, 64)
    assert pc["PortXmitPkts"] >= 1 and pc["PortRcvPkts"] >= 1
    assert pc["PortXmitData"] == pc["PortXmitPkts"] * route.MAD_WORDS
    # reprogram: leaf001 sends host0016's LID nowhere -> dropped, relay error counted
    leaf1 = f.by_id["leaf001"]
    leaf1.lft[dst_lid] = 0xFF
    out = r.inject(src, m, 0, dst_lid, 0, 0)
    assert out[0].dropped and out[0].status == ETIMEDOUT
    assert leaf1.ports[1].pc[model.PC_RCV_SW_RELAY_ERRORS] >= 1
    # and a different spine: route through port 6 instead of 5
    leaf1.lft[dst_lid] = 6
    assert not r.inject(src, m, 0, dst_lid, 0, 0)[0].dropped
    # clear counters by Set (CounterSelect all) and read zeros back
    clr = smp.build_perf(SET, smp.PerfAttr.PORT_COUNTERS,
                         data=smp.PORT_COUNTERS.encode(PortSelect=0xFF, CounterSelect=0xFFFF))
    out = r.inject(src, clr, 0, leaf4.ports[0].lid, 1, 1)
    assert smp.PORT_COUNTERS.decode(out[0].mad, 64)["PortXmitPkts"] == 0


def test_port_state_machine(ft):
    f, r = ft
    sm = f.by_id["host0001"].ports[1]
    set_pi = lambda st, path=[], num=1: smp.parse_dr(dr(
        r, sm, path, SmpAttr.PORT_INFO, num, SET, smp.PORT_INFO.encode(LinkState=st)).mad).status
    assert set_pi(PortState.ACTIVE) == SmpStatus.BAD_PARAM        # Init -> Active: no
    assert set_pi(PortState.INIT) == SmpStatus.BAD_PARAM
    assert set_pi(PortState.ARMED) == 0 and sm.state == PortState.ARMED
    assert set_pi(PortState.ACTIVE) == 0 and sm.state == PortState.ACTIVE
    assert set_pi(PortState.DOWN) == 0 and sm.state == PortState.INIT
    # disable the leaf's port 2 by PhysState: link down, trap needs LIDs (none): no trap
    d = dr(r, sm, [1], SmpAttr.PORT_INFO, 2, SET,
           smp.PORT_INFO.encode(PhysLinkState=PhysState.DISABLED))
    leaf = f.by_id["leaf001"]
    assert leaf.ports[2].phys == PhysState.DISABLED and leaf.ports[2].remote.state == PortState.DOWN
    assert leaf.state_change == 1
    dr(r, sm, [1], SmpAttr.PORT_INFO, 2, SET, smp.PORT_INFO.encode(PhysLinkState=PhysState.POLLING))
    assert leaf.ports[2].phys == PhysState.LINK_UP and leaf.ports[2].state == PortState.INIT


def test_link_events_send_trap128(ft):
    f, r = ft
    lids = _bring_up(f, r)
    leaf = f.by_id["leaf002"]
    out = r.link_down(leaf.ports[1])
    assert len(out) == 1
    t = out[0]
    assert t.port is f.by_id["host0001"].ports[1] and t.qp == 0
    assert t.mad[3] == Method.TRAP and struct.unpack_from(">H", t.mad, 16)[0] == SmpAttr.NOTICE
    n = smp.NOTICE.decode(t.mad, 64)
    assert n["NoticeTrapNumber"] == 128 and n["NoticeIssuerLID"] == leaf.ports[0].lid
    assert leaf.ports[1].pc[model.PC_LINK_DOWNED] == 1
    assert r.link_up(leaf.ports[1])[0].mad[3] == Method.TRAP
    assert leaf.ports[1].state == PortState.INIT


def test_tables(ft):
    f, r = ft
    sm = f.by_id["host0001"].ports[1]
    pk = smp.encode_pkey_table([0xFFFF, 0x8001])
    d = dr(r, sm, [], SmpAttr.PKEY_TABLE, 0, SET, pk)
    assert smp.decode_pkey_table(d.mad[64:128])[:3] == (0xFFFF, 0x8001, 0)
    assert smp.parse_dr(dr(r, sm, [], SmpAttr.PKEY_TABLE, 2).mad).status == SmpStatus.BAD_PARAM
    d = dr(r, sm, [1], SmpAttr.SL_TO_VL_TABLE, (1 << 8) | 2, SET, smp.encode_sl2vl([0] * 16))
    assert smp.decode_sl2vl(dr(r, sm, [1], SmpAttr.SL_TO_VL_TABLE, (1 << 8) | 2).mad[64:72]) == (0,) * 16
    assert dr(r, sm, [1], SmpAttr.SL_TO_VL_TABLE, (1 << 8) | 3).mad[64] == 0x01
    va = smp.encode_vlarb([(0, 1)] * 8)
    d = dr(r, sm, [1], SmpAttr.VL_ARB_TABLE, (1 << 16) | 3, SET, va)
    assert smp.decode_vlarb(d.mad[64:128])[:2] == ((0, 1), (0, 1))
    assert smp.parse_dr(dr(r, sm, [1], SmpAttr.VL_ARB_TABLE, (2 << 16) | 3).mad).status == SmpStatus.BAD_PARAM
    d = dr(r, sm, [1], SmpAttr.MCAST_FWD_TABLE, smp.mft_attr_mod(0, 0), SET,
           smp.encode_mft([0b110]))
    assert smp.decode_mft(d.mad[64:128])[0] == 0b110 and f.by_id["leaf001"].mft == {0: 6}
    g = smp.decode_guid_info(dr(r, sm, [], SmpAttr.GUID_INFO).mad[64:128])
    assert g[0] == sm.guid
    si = smp.SWITCH_INFO.decode(dr(r, sm, [1], SmpAttr.SWITCH_INFO).mad, 64)
    assert si["LinearFdbCap"] == 30720 and si["PartEnforceCap"] == 64     # ibsim 0.10's


def test_topo_errors(tmp_path):
    bad = [
        ('Switch 4 "a"\n[1] "b"[1]\n', "unknown node"),
        ('Switch 4 "a"\n[5] "a"[1]\n', ":2:"),
        ('[1] "a"[1]\n', "before any"),
        ('Ca 1 "h"\nwhat is this\n', "cannot parse"),
        ('Ca 1 "h"\nCa 1 "h"\n', "twice"),
        ('Ca 2 "h"\nCa 1 "g"\nCa 1 "k"\ncaguid=0x10\n[1] "g"[1]\n', None),
    ]
    for text, msg in bad:
        p = tmp_path / "t.net"
        p.write_text(text)
        if msg is None:
            continue
        with pytest.raises(FabricError, match=msg):
            topo.load(str(p))
    p.write_text('Switch 2 "a"\n[1] "h"[1]\n[2] "g"[1]\nCa 1 "h"\n[1] "a"[2]\nCa 1 "g"\n')
    with pytest.raises(FabricError, match="conflicts"):
        topo.load(str(p))


def test_link_width_and_speed_as_ibsim_reads_them():
    """A port line's link comment sets that end only (the other end keeps the
    width=/speed= defaults unless its own line says otherwise); ends that enable
    no common speed or width do not load -- ibsim stops with the same words --
    and a link whose ends came to enable none stays down."""
    f = topo.loads('switchguid=0x100\nSwitch 4 "sw"\n[1] "h1"[1] # lid 0 4xSDR\n'
                   '[2] "h2"[1] # lid 0 12xQDR\ncaguid=0x200\nCa 1 "h1"\n[1] "sw"[1] # lid 0 4xQDR\n'
                   'Ca 1 "h2"\n[1] "sw"[2]\n')
    sw, h1, h2 = (f.by_id[n] for n in ("sw", "h1", "h2"))
    assert (sw.ports[1].speed_en, h1.ports[1].speed_en, sw.ports[1].speed_act) == (1, 7, 1)
    # h2's line says nothing: the net defaults (4X, SDR), not the switch's 12xQDR
    assert (h2.ports[1].width_en, h2.ports[1].speed_en) == (model.NET_WIDTH_ENABLED, model.NET_SPEED_ENABLED)
    assert (sw.ports[2].width_act, sw.ports[2].speed_act) == (2, 1)
    for text, what in (('speed=1\nSwitch 4 "sw"\n[1] "h"[1]\nspeed=4\nCa 1 "h"\n[1] "sw"[1]\n', "speed"),
                       ('width=1\nSwitch 4 "sw"\n[1] "h"[1]\nwidth=8\nCa 1 "h"\n[1] "sw"[1]\n', "width")):
        with pytest.raises(FabricError, match=rf'<text>:3: mismatched enabled {what} between "sw"\[1\] '
                                              rf'\(\d+\) and "h"\[1\] \(\d+\)'):
            topo.loads(text)
    r = route.Router(f)
    r.link_down(h1.ports[1])
    h1.ports[1].width_en = 8                   # 12X only, against the switch's 1X/4X
    with pytest.raises(FabricError, match="mismatched enabled width.*cannot train"):
        r.link_up(h1.ports[1])
    r.disable(h1.ports[1])
    r.enable(h1.ports[1])                      # an SM's Polling after Disabled: it does not train either
    assert h1.ports[1].phys == PhysState.POLLING
    assert h1.ports[1].phys != PhysState.LINK_UP and h1.ports[1].state == PortState.DOWN


def test_topo_ibnetdiscover_style_and_include(tmp_path):
    (tmp_path / "cas.net").write_text(
        'caguid=0x100\nCa\t1 "H-1"\t\t# "host one"\n[1](101) \t"S-1"[3]\t\t# lid 7 4xFDR\n')
    (tmp_path / "top.net").write_text(
        'switchguid=0x200(200)\nSwitch\t8 "S-1"\t\t# "sw one" base port 0 lid 3 lmc 0\n'
        '[3]\t"H-1"[1](101)\t\t# "host one" lid 7 4xFDR\ninclude cas.net\n')
    f = topo.load(str(tmp_path / "top.net"))
    s, h = f.by_id["S-1"], f.by_id["H-1"]
    assert s.guid == 0x200 and h.guid == 0x100 and h.ports[1].guid == 0x101
    assert s.desc == "sw one" and s.ports[0].lid == 3 and h.ports[1].lid == 7
    assert h.ports[1].speed_active == (4, 1) and f.node("host one") is h


def test_generators_roundtrip(tmp_path):
    for f, _ in (gen.single(8), gen.fat_tree2(4, 2, 16), gen.fat_tree3(2, 2, 2, 4, 4, 12),
                 gen.torus2d(3, 3, 2)):
        text = topo.dumps(f)
        p = tmp_path / "g.net"
        p.write_text(text)
        f2 = topo.load(str(p))
        assert topo.dumps(f2) == text and f2.stats() == f.stats()
    t, _ = gen.torus2d(4, 4, 1)
    assert t.stats()["links"] == 16 + 32
    with pytest.raises(FabricError):
        gen.fat_tree2(4, 2, 40, radix=36)


def test_4096_hosts_load_compact(tmp_path):
    """The issue's scale: 4096 hosts (64 leaves + 64 spines, radix 128) written,
    parsed and routed; ports carry no per-instance dict."""
    import time
    f, roots = gen.fat_tree2(leaves=64, spines=64, hosts_per_leaf=64, radix=128)
    p = tmp_path / "big.net"
    topo.dump(f, str(p))
    t0 = time.perf_counter()
    g = topo.load(str(p))
    dt = time.perf_counter() - t0
    assert g.stats() == dict(nodes=4224, switches=128, cas=4096, ports=4096 + 128 * 129,
                             links=8192)
    assert dt < 10, dt
    port = g.by_id["host4096"].ports[1]
    assert not hasattr(port, "__dict__") and not hasattr(port.node, "__dict__")
    r = route.Router(g)
    out = r.inject(g.by_id["host0001"].ports[1],
                   smp.build_dr_smp(GET, SmpAttr.NODE_DESC, [1, 65, 64, 64]), 0xFFFF, 0xFFFF, 0, 0)
    assert smp.decode_node_desc(out[0].mad[64:128]) == "host4096"


def test_lmc_range_answers_and_is_routed_per_lid(ft):
    """A port with LMC 2 owns LIDs base..base+3: PortInfo Set stores and reports the LMC,
    LID-routed MADs to any of the four reach it (following each LID's own LFT entries),
    the response comes from the LID asked for, and base+4 belongs to nobody."""
    f, r = ft
    _bring_up(f, r)
    sm = f.by_id["host0001"].ports[1]
    host = f.by_id["host0016"]
    leaf1, leaf4 = f.by_id["leaf001"], f.by_id["leaf004"]
    path = [1, 5, f.by_id["spine001"].ports.index(next(
        p for p in f.by_id["spine001"].ports if p and p.remote and p.remote.node is leaf4))]
    path.append(next(p.num for p in leaf4.ports if p and p.remote and p.remote.node is host))
    base = 32
    d = dr(r, sm, path, SmpAttr.PORT_INFO, 0, SET,
           smp.PORT_INFO.encode(Lid=base, LMC=2, SMLid=1, LinkState=0))
    pi = smp.PORT_INFO.decode(d.mad, 64)
    assert smp.parse_dr(d.mad).status == 0 and (pi["Lid"], pi["LMC"]) == (base, 2)
    assert (host.ports[1].lid, host.ports[1].lmc) == (base, 2)
    pi = smp.PORT_INFO.decode(dr(r, sm, path, SmpAttr.PORT_INFO, 0).mad, 64)
    assert (pi["Lid"], pi["LMC"]) == (base, 2)
    # a switch's port 0 has no enhanced port 0 here: its LMC stays 0
    d = dr(r, sm, [1], SmpAttr.PORT_INFO, 0, SET,
           smp.PORT_INFO.encode(Lid=leaf1.ports[0].lid, LMC=3, SMLid=1, LinkState=0))
    assert smp.PORT_INFO.decode(d.mad, 64)["LMC"] == 0 and leaf1.ports[0].lmc == 0
    # LFT entries for the four LIDs: leaf001 alternates between its two spines (ports 5, 7)
    for sw in (n for n in f.nodes if n.is_switch):
        for lid in range(base, base + 5):
            sw.lft[lid] = _first_hop(sw, host) if sw is not leaf1 else (5, 7)[(lid - base) % 2]
        sw.lft_top = base + 4
    spine_in = {s: s.ports[1].counters()[model.PC_RCV_PKTS]
                for s in (f.by_id["spine001"], f.by_id["spine002"])}
    m = smp.build_smp(GET, SmpAttr.NODE_INFO, tid=3)
    for lid in range(base, base + 4):
        out = r.inject(sm, m, 0, lid, 0, 0)
        assert not out[0].dropped and out[0].port is sm
        assert out[0].slid == lid                       # answered from the LID asked for
        assert smp.NODE_INFO.decode(out[0].mad, 64)["Guid"] == host.guid
        assert r.lid_route(sm, lid)[0] is host.ports[1]
    # both spines carried requests (port 1 of each spine faces leaf001)
    assert all(s.ports[1].counters()[model.PC_RCV_PKTS] >= spine_in[s] + 2 for s in spine_in)
    out = r.inject(sm, m, 0, base + 4, 0, 0)             # outside the range
    assert out[0].dropped
    # LMC back to 0: base+1 no longer reaches the port
    dr(r, sm, path, SmpAttr.PORT_INFO, 0, SET, smp.PORT_INFO.encode(Lid=base, LMC=0, SMLid=1, LinkState=0))
    assert r.inject(sm, m, 0, base + 1, 0, 0)[0].dropped
    assert not r.inject(sm, m, 0, base, 0, 0)[0].dropped


def test_enhanced_switch_port0_takes_an_lmc(tmp_path):
    net = ('Switch\t4 "sw"\t# "sw" enhanced port 0\n[1]\t"h1"[1]\n[2]\t"h2"[1]\n\n'
           'Ca\t1 "h1"\n[1]\t"sw"[1]\n\nCa\t1 "h2"\n[1]\t"sw"[2]\n')
    f = topo.loads(net)
    sw = f.by_id["sw"]
    assert sw.enhanced_sp0 and "enhanced port 0" in topo.dumps(f)
    assert topo.loads(topo.dumps(f)).by_id["sw"].enhanced_sp0
    r = route.Router(f)
    h1 = f.by_id["h1"].ports[1]
    si = smp.SWITCH_INFO.decode(dr(r, h1, [1], SmpAttr.SWITCH_INFO).mad, 64)
    assert si["EnhancedPort0"] == 1
    d = dr(r, h1, [1], SmpAttr.PORT_INFO, 0, SET, smp.PORT_INFO.encode(Lid=8, LMC=2, SMLid=8, LinkState=0))
    assert smp.PORT_INFO.decode(d.mad, 64)["LMC"] == 2 and (sw.ports[0].lid, sw.ports[0].lmc) == (8, 2)
    # h1 and h2 need LIDs for the answers to come back
    dr(r, h1, [], SmpAttr.PORT_INFO, 0, SET, smp.PORT_INFO.encode(Lid=1, SMLid=8, LinkState=0))
    sw.lft[:] = b"\xff" * 64
    sw.lft[1] = 1
    sw.lft_top = 16
    m = smp.build_smp(GET, SmpAttr.NODE_INFO, tid=5)
    for lid in range(8, 12):            # every LID of the range is the switch's SMA
        out = r.inject(h1, m, 0, lid, 0, 0)
        assert not out[0].dropped and out[0].slid == lid
        assert smp.NODE_INFO.decode(out[0].mad, 64)["Guid"] == sw.guid
    assert r.inject(h1, m, 0, 12, 0, 0)[0].dropped


def _reference_router(f):
    """A Router whose directed routes take the general path only: every hop through
    ``_cross`` and every answer back by ``_dr_return`` (what the fast path replaces)."""
    r = route.Router(f)
    r._cross_vl15 = lambda out: r._cross(out, True, logical=False)
    r._dr_back = lambda hops, start, mad: None
    return r


def test_directed_route_fast_path_is_the_general_one():
    """The same directed-route traffic -- a BFS discovery by NodeInfo/PortInfo Gets,
    PortInfo Sets, bad paths, DrSLID, a link down, ports with an error rate -- through
    the fast path and through the general one: the same deliveries, byte for byte,
    and the same counters on every port."""
    import random
    fabs = [gen.fat_tree2(leaves=4, spines=2, hosts_per_leaf=4, radix=8)[0] for _ in range(2)]
    routers = [route.Router(fabs[0]), _reference_router(fabs[1])]
    rng = random.Random(5)
    paths = [[], [1], [1, 5], [1, 5, 1], [1, 5, 2, 3], [1, 6, 4, 2], [1, 99], [1, 1, 1], [1, 5, 1, 1]]

    def both(fn):
        outs = [fn(f, r) for f, r in zip(fabs, routers)]
        a, b = ([(d.port.name, d.qp, bytes(d.mad), d.slid, d.dlid, d.sqp, d.status, d.dropped) for d in o]
                for o in outs)
        assert a == b
        return outs[0]

    for step in range(400):
        path = rng.choice(paths)
        attr, mod = rng.choice([(SmpAttr.NODE_INFO, 0), (SmpAttr.PORT_INFO, rng.randrange(9)),
                                (SmpAttr.SWITCH_INFO, 0), (SmpAttr.NODE_DESC, 0)])
        method, data = GET, b""
        if step % 37 == 5:                  # a Set that retrains the port the SMP came in by
            method, attr, mod = SET, SmpAttr.PORT_INFO, 0
            data = smp.PORT_INFO.encode(LinkState=1)
        slid = 0xFFFF if step % 11 else 1   # DrSLID: a LID-routed part first
        both(lambda f, r: r.inject(f.by_id["host0001"].ports[1],
                                   smp.build_dr_smp(method, attr, path, mod, data, tid=step, dr_slid=slid),
                                   0xFFFF, 0xFFFF if slid == 0xFFFF else 1, 0, 0))
        if step == 150:
            both(lambda f, r: r.link_down(f.by_id["leaf001"].ports[6]))
        if step == 250:
            for f in fabs:
                f.by_id["spine001"].ports[1].err_rate = 50
                f.by_id["leaf001"].ports[5].err_rate = 30
    for na, nb in zip(fabs[0].nodes, fabs[1].nodes):
        for pa, pb in zip(na.ports, nb.ports):
            if pa is not None:
                assert pa.pc == pb.pc, pa.name
    assert any(p is not None and p.pc for n in fabs[0].nodes for p in n.ports)


def test_port_info_from_its_cache_is_the_one_built_anew():
    """The SMA's PortInfo cache against building it each time: every port, by every
    arrival port, through state, LID, SM, width and link changes."""
    from softrdma.fabric import agents
    f, _ = gen.fat_tree2(leaves=4, spines=2, hosts_per_leaf=4, radix=8)
    r = route.Router(f)

    def check():
        for n in f.nodes:
            for p in n.ports:
                if p is not None:
                    for arrival in {0, 1, p.num}:
                        want = agents.build_port_info(agents._port_kind(n, p), p, arrival)
                        assert agents.port_info(n, p, arrival) == want, (p.name, arrival)
    check()
    leaf = f.by_id["leaf001"]
    for i, p in enumerate(q for n in f.nodes for q in n.ports if q is not None):
        p.lid, p.smlid, p.state = i + 1, 1, PortState.ARMED if i % 3 else PortState.ACTIVE
    f.by_id["host0001"].ports[1].has_sm = True
    leaf.ports[2].width_en = 1
    r.link_down(leaf.ports[5])
    check()
    r.link_up(leaf.ports[5])
    check()
    f.by_id["host0002"].ports[1].vports = object()      # a port with vports: CapabilityMask2's virtualization bit
    check()
    f.by_id["host0003"].ports[1].rereg_sup = True       # its device takes ClientReregister: CapMask's bit
    check()


def test_port_info_set_fields_from_their_cache_are_the_decoded_ones():
    """The SMA's decoded PortInfo Sets against decoding each: repeats, distinct data,
    and more distinct Sets than it keeps."""
    from softrdma.fabric import agents
    sets = [bytes(smp.PORT_INFO.encode(Lid=i % 1500 + 1, SMLid=1, LinkState=i % 5, OperVLs=i % 4))
            for i in range(3000)]
    for d in sets + sets[::-1] + [sets[7]] * 3:
        assert agents.port_info_fields(d) == smp.PORT_INFO.decode(d)
    assert len(agents._PORT_INFO_SETS) <= agents._PORT_INFO_SETS_MAX
