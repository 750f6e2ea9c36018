"""SL2VL in the fabric's data plane: at each switch a data packet's SL goes
through the SL2VL table of (input port, output port) as the SM set it
(the SMA's SLtoVLMappingTable); an SL that maps to VL15 on that hop drops
the packet there, counted in the input port's PortRcvSwitchRelayErrors
(IBA: a VL mapping error); other SLs, and the same SL on other hops, pass
with PortXmitData as before."""

from softrdma.fabric import model, topo
from softrdma.fabric.agents import Sma
from softrdma.wire.mad import Method
from softrdma.fabric.dataplane import DataPlane
from softrdma.wire import smp

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
    assert [bytes(p) for p in out[h4]] == [pkts[0], pkts[4]]              # SL 3 went no further
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
    assert [bytes(p) for p in out[h4]] == [pkts[3]]
