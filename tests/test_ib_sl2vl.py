"""SL2VL in the fabric's data plane: at each switch a data packet's SL goes
through the SL2VL table of (input port, output port) as the SM set it
(the SMA's SLtoVLMappingTable); an SL that maps to VL15 on that hop drops
the packet there, counted in the input port's PortRcvSwitchRelayErrors
(IBA: a VL mapping error); other SLs, and the same SL on other hops, pass
with PortXmitData as before.  Each hop rewrites the LRH's VL (and the
VCRC): the receiving port sees the VL of the last hop.  Multicast branches
follow the same tables."""

from softrdma.fabric import model, topo
from softrdma.fabric.agents import Sma
from softrdma.wire.mad import Method
from softrdma.fabric.dataplane import DataPlane
from softrdma.wire import lrh, smp
from softrdma.wire.fastpath import vcrc

from ibfabric_helpers import NET_2SW, data_packet, program

LID = {"h1": 3, "h2": 4, "h4": 6}


def test_an_sl_mapped_to_vl15_is_dropped_where_the_table_says():
    fab = topo.loads(NET_2SW)
    program(fab)
    sw1 = fab.node("sw1")
    # the SM's Set of sw1's table for input port 1 (h1) to output port 3 (to sw2): SL 3 -> VL15
    vls = list(range(15)) + [7]
    vls[3] = 15
    sma = Sma(None)
    st, _ = sma._sl2vl(sw1, None, Method.SET, (1 << 8) | 3, smp.encode_sl2vl(vls).ljust(64, b"\0"))
    assert st == 0 and sw1.sl2vl[(1, 3)] == smp.encode_sl2vl(vls)
    fab.touch()
    dp = DataPlane(fab)
    h1, h2, h4 = (fab.node(n).ports[1] for n in ("h1", "h2", "h4"))
    attached = {h1, h2, h4}
    pkts = {sl: data_packet(LID["h4"], LID["h1"], bytes([sl]) * 64, sl=sl) for sl in (0, 3, 4)}
    relay0 = sw1.ports[1].pc[model.PC_RCV_SW_RELAY_ERRORS] if sw1.ports[1].pc else 0
    out, _ = dp.forward(h1, [pkts[0], pkts[3], pkts[4]], attached)
    # SL 3 went no further; the others arrive on the VL of sw2's default table
    assert [bytes(p) for p in out[h4]] == [pkts[0], on_vl(pkts[4], 4)]
    assert sw1.ports[1].pc[model.PC_RCV_SW_RELAY_ERRORS] == relay0 + 1
    words = sum(len(pkts[s]) - 2 for s in (0, 4)) // 4
    assert fab.node("sw2").ports[2].pc[model.PC_XMIT_DATA] == words          # only what passed
    # the same SL through another output port (1 -> 2, to h2): that table is the default
    out, _ = dp.forward(h1, [data_packet(LID["h2"], LID["h1"], sl=3)], attached)
    assert list(out) == [h2]
    # a new table (SL 3 -> VL 3 again) takes effect: the routes are made again
    vls[3] = 3
    sma._sl2vl(sw1, None, Method.SET, (1 << 8) | 3, smp.encode_sl2vl(vls).ljust(64, b"\0"))
    fab.touch()
    out, _ = dp.forward(h1, [pkts[3]], attached)
    assert [bytes(p) for p in out[h4]] == [on_vl(pkts[3], 3)]


def on_vl(pkt: bytes, vl: int) -> bytes:
    """``pkt`` as a switch sends it on VL ``vl``: the LRH's VL nibble and a
    VCRC of its own (computed here, not by the code under test)."""
    f = bytearray(pkt)
    f[0] = vl << 4 | (f[0] & 0xF)
    body = bytes(f[:-2])
    return body + vcrc(body).to_bytes(2, "little")


def _fabric(tables: dict, mft: dict):
    """NET_2SW programmed, with SL2VL ``tables`` ({(switch, in, out): {SL: VL}},
    the rest IBA's default) set by the SMA and MFT entries ``mft``:
    (fabric, data plane, CA ports by name, the CA ports attached)."""
    fab = topo.loads(NET_2SW)
    program(fab)
    sma = Sma(None)
    for (sw, inp, out), changes in tables.items():
        vls = list(range(15)) + [7]
        for sl, vl in changes.items():
            vls[sl] = vl
        st, _ = sma._sl2vl(fab.node(sw), None, Method.SET, (inp << 8) | out,
                           smp.encode_sl2vl(vls).ljust(64, b"\0"))
        assert st == 0
    for sw, entries in mft.items():
        fab.node(sw).mft = entries
    fab.touch()
    ca = {n: fab.node(n).ports[1] for n in ("h1", "h2", "h3", "h4")}
    return fab, DataPlane(fab), ca, set(ca.values())


def test_the_receiver_sees_the_vl_of_the_last_hop():
    # sw1 (h1 -> sw2): SL 5 -> VL 2; sw2 (sw1 -> h4): SL 5 -> VL 6; sw2 (sw1 -> h3): identity;
    # the multicast group 0xC001: h2 (sw1's default table) and h4 (sw2's)
    _, dp, ca, attached = _fabric({("sw1", 1, 3): {5: 2}, ("sw2", 3, 2): {5: 6}},
                                  {"sw1": {1: 1 << 2 | 1 << 3}, "sw2": {1: 1 << 2}})
    h1, h2, h3, h4 = (ca[n] for n in ("h1", "h2", "h3", "h4"))
    p4 = data_packet(LID["h4"], LID["h1"], b"v" * 64, sl=5)
    p3 = data_packet(5, LID["h1"], b"w" * 64, sl=5)
    p0 = data_packet(LID["h4"], LID["h1"], b"z" * 64, sl=0)
    out, _ = dp.forward(h1, [p4, p3, p0], attached)
    got4 = [bytes(p) for p in out[h4]]
    assert got4 == [on_vl(p4, 6), p0]                     # SL 0: VL 0 on every hop, untouched
    assert [bytes(p) for p in out[h3]] == [on_vl(p3, 5)]
    for p in got4 + [bytes(q) for q in out[h3]]:
        lrh.decap(p)                          # the receiver's own check: VCRC, ICRC
    assert lrh.parse_lrh(got4[0]).vl == 6 and lrh.parse_lrh(got4[0]).sl == 5
    # a bulk message (many packets, one DLID, SL 5) takes the same VL
    many = [data_packet(LID["h4"], LID["h1"], bytes([i]) * 256, sl=5) for i in range(8)]
    out, _ = dp.forward(h1, many, attached)
    assert [bytes(p) for p in out[h4]] == [on_vl(p, 6) for p in many]
    # a multicast packet takes each branch's VL
    mlid = 0xC001
    pm = data_packet(mlid, LID["h1"], b"m" * 64, dqp=0xFFFFFF, sl=5)
    out, _ = dp.forward(h1, [pm], attached)
    assert [bytes(p) for p in out[h2]] == [on_vl(pm, 5)]
    assert [bytes(p) for p in out[h4]] == [on_vl(pm, 6)]


def test_multicast_drops_a_branch_whose_sl_maps_to_vl15():
    # sw2, from sw1 to h4: SL 3 -> VL15; the group 0xC002: h2, h3, h4
    mlid = 0xC002
    fab, dp, ca, attached = _fabric({("sw2", 3, 2): {3: 15}},
                                    {"sw1": {2: 1 << 2 | 1 << 3}, "sw2": {2: 1 << 1 | 1 << 2}})
    sw2 = fab.node("sw2")
    h1, h2, h3, h4 = (ca[n] for n in ("h1", "h2", "h3", "h4"))

    def relay():
        return sw2.ports[3].pc[model.PC_RCV_SW_RELAY_ERRORS] if sw2.ports[3].pc else 0

    r0 = relay()
    p3 = data_packet(mlid, LID["h1"], b"a" * 64, dqp=0xFFFFFF, sl=3)
    out, _ = dp.forward(h1, [p3], attached)
    assert set(out) == {h2, h3}                        # not h4
    assert relay() == r0 + 1
    assert not (sw2.ports[2].pc and sw2.ports[2].pc[model.PC_XMIT_PKTS])
    assert sw2.ports[1].pc[model.PC_MCAST_XMIT] == 1
    # another SL passes the same branch
    out, _ = dp.forward(h1, [data_packet(mlid, LID["h1"], b"b" * 64, dqp=0xFFFFFF, sl=4)], attached)
    assert set(out) == {h2, h3, h4} and relay() == r0 + 1
