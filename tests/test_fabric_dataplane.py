"""fabric.dataplane: native IB packets forwarded through the switches'
LFTs and MFTs of a small fabric, and the counters each drop lands in."""

import pytest

from softrdma.fabric import model, topo
from softrdma.fabric.dataplane import DataPlane, mad_packet
from softrdma.fabric.route import Router
from softrdma.wire import fabriclink, lrh
from softrdma.wire.errors import WireError
from softrdma.wire.headers import BTH, DETH
from softrdma.wire.opcodes import Opcode
from softrdma.wire.smp import PortState

from ibfabric_helpers import NET_2SW, data_packet, program



@pytest.fixture
def fab():
    f = topo.loads(NET_2SW)
    program(f)
    return f


def port(f, name, num=1):
    return f.node(name).ports[num]


def pc(f, name, num, slot):
    p = port(f, name, num)
    return p.pc[slot] if p.pc else 0


def all_attached(f):
    return {p for p in f.ports() if not p.node.is_switch}


def test_unicast_across_a_switch_hop_is_byte_exact_and_counted(fab):
    dp = DataPlane(fab)
    pkts = [data_packet(6, 3, bytes([i]) * (64 + i)) for i in range(5)]
    out, mads = dp.forward(port(fab, "h1"), pkts, all_attached(fab))
    assert mads == [] and list(out) == [port(fab, "h4")]
    assert [bytes(p) for p in out[port(fab, "h4")]] == pkts
    words = sum(len(p) - 2 for p in pkts) // 4
    for name, num, slot in (("h1", 1, model.PC_XMIT_DATA), ("sw1", 1, model.PC_RCV_DATA),
                            ("sw1", 3, model.PC_XMIT_DATA), ("sw2", 3, model.PC_RCV_DATA),
                            ("sw2", 2, model.PC_XMIT_DATA), ("h4", 1, model.PC_RCV_DATA)):
        assert pc(fab, name, num, slot) == words, (name, num)
    assert pc(fab, "sw2", 2, model.PC_XMIT_PKTS) == 5
    assert pc(fab, "sw1", 2, model.PC_XMIT_PKTS) == 0
    # the same route again (cached) counts again
    dp.forward(port(fab, "h1"), pkts[:1], all_attached(fab))
    assert pc(fab, "sw2", 2, model.PC_XMIT_PKTS) == 6


def test_one_switch_and_back(fab):
    dp = DataPlane(fab)
    p = data_packet(4, 3)
    out, _ = dp.forward(port(fab, "h1"), [p], all_attached(fab))
    assert [bytes(x) for x in out[port(fab, "h2")]] == [p]
    assert pc(fab, "sw2", 3, model.PC_RCV_PKTS) == 0


def test_bad_packets_count_in_port_rcv_errors_of_the_receiving_port(fab):
    dp = DataPlane(fab)
    good = data_packet(6, 3)
    bad_vcrc = bytearray(good)
    bad_vcrc[-1] ^= 1
    bad_len = good[:-4]
    not_ib = bytearray(good)
    not_ib[1] &= ~3                       # LNH raw
    out, _ = dp.forward(port(fab, "h1"), [bytes(bad_vcrc), bad_len, bytes(not_ib), b"\0" * 5, good],
                        all_attached(fab))
    assert [bytes(x) for x in out[port(fab, "h4")]] == [good]
    assert pc(fab, "sw1", 1, model.PC_RCV_ERRORS) == 4
    assert dp.stats["bad"] == 4


def test_no_lft_entry_and_beyond_top_are_switch_relay_errors(fab):
    dp = DataPlane(fab)
    out, _ = dp.forward(port(fab, "h1"), [data_packet(9, 3)], all_attached(fab))
    assert out == {}
    assert pc(fab, "sw1", 1, model.PC_RCV_SW_RELAY_ERRORS) == 1
    sw2 = fab.node("sw2")
    sw2.lft_top = 5                       # LID 6 beyond LinearFDBTop
    fab.touch()
    out, _ = dp.forward(port(fab, "h1"), [data_packet(6, 3)], all_attached(fab))
    assert out == {}
    assert pc(fab, "sw2", 3, model.PC_RCV_SW_RELAY_ERRORS) == 1
    assert pc(fab, "sw1", 3, model.PC_XMIT_PKTS) == 1       # it crossed the first link
    # an output port equal to the input port is a loop
    sw2.lft_top = 6
    sw2.lft[6] = 3
    fab.touch()
    dp.forward(port(fab, "h1"), [data_packet(6, 3)], all_attached(fab))
    assert pc(fab, "sw2", 3, model.PC_RCV_SW_RELAY_ERRORS) == 2


def test_link_down_drops_in_xmit_discards_and_the_route_cache_follows(fab):
    dp = DataPlane(fab)
    r = Router(fab)
    p = data_packet(6, 3)
    assert dp.forward(port(fab, "h1"), [p], all_attached(fab))[0]
    r.link_down(port(fab, "sw2", 2))
    out, _ = dp.forward(port(fab, "h1"), [p], all_attached(fab))
    assert out == {}
    assert pc(fab, "sw2", 2, model.PC_XMIT_DISCARDS) == 1
    r.link_up(port(fab, "sw2", 2))          # back to Init: data still needs Active
    dp.forward(port(fab, "h1"), [p], all_attached(fab))
    assert pc(fab, "sw2", 2, model.PC_XMIT_DISCARDS) == 2
    for q in (port(fab, "sw2", 2), port(fab, "h4")):
        q.state = PortState.ACTIVE
    fab.touch(port(fab, "h4"))
    assert dp.forward(port(fab, "h1"), [p], all_attached(fab))[0]


def test_sender_not_active(fab):
    dp = DataPlane(fab)
    port(fab, "h1").state = PortState.INIT
    assert dp.forward(port(fab, "h1"), [data_packet(6, 3)], all_attached(fab))[0] == {}
    assert pc(fab, "h1", 1, model.PC_XMIT_DISCARDS) == 1


def test_unattached_destination_is_discarded_by_the_last_switch_port(fab):
    dp = DataPlane(fab)
    out, _ = dp.forward(port(fab, "h1"), [data_packet(6, 3)], {port(fab, "h1")})
    assert out == {}
    assert pc(fab, "sw2", 2, model.PC_XMIT_DISCARDS) == 1
    assert pc(fab, "sw2", 2, model.PC_XMIT_PKTS) == 0
    assert pc(fab, "sw2", 3, model.PC_RCV_PKTS) == 1


def test_multicast_fans_out_through_the_mfts_never_back(fab):
    dp = DataPlane(fab)
    mlid = 0xC001
    # members h1, h3, h4: sw1 sends to 1 and 3, sw2 to 1, 2 and 3
    fab.node("sw1").mft = {1: 1 << 1 | 1 << 3}
    fab.node("sw2").mft = {1: 1 << 1 | 1 << 2 | 1 << 3}
    p = data_packet(mlid, 3, dqp=0xFFFFFF)
    out, _ = dp.forward(port(fab, "h1"), [p], all_attached(fab))
    assert set(out) == {port(fab, "h3"), port(fab, "h4")}
    assert pc(fab, "sw1", 1, model.PC_XMIT_PKTS) == 0        # not back to the sender
    assert pc(fab, "sw2", 3, model.PC_XMIT_PKTS) == 0        # not back where it came from
    assert pc(fab, "sw2", 1, model.PC_MCAST_XMIT) == 1
    # from h3: to h1 (across) and h4
    out, _ = dp.forward(port(fab, "h3"), [p], all_attached(fab))
    assert set(out) == {port(fab, "h1"), port(fab, "h4")}
    # an MLID with no MFT entry: relay error where it arrives
    dp.forward(port(fab, "h1"), [data_packet(0xC005, 3, dqp=0xFFFFFF)], all_attached(fab))
    assert pc(fab, "sw1", 1, model.PC_RCV_SW_RELAY_ERRORS) == 1


def test_partition_enforcement_on_switch_ports(fab):
    dp = DataPlane(fab)
    sw1_1 = port(fab, "sw1", 1)
    sw1_1.part_enforce = model.PART_ENFORCE_IN                # inbound
    sw1_1.pkeys = [0x8001] + [0] * 63
    fab.touch(sw1_1)
    ok = data_packet(6, 3, pkey=0x8001)
    limited = data_packet(6, 3, pkey=0x0001)     # limited member: a full one is in the table
    bad = data_packet(6, 3, pkey=0x8002)
    out, _ = dp.forward(port(fab, "h1"), [ok, limited, bad], all_attached(fab))
    assert [bytes(x) for x in out[port(fab, "h4")]] == [ok, limited]
    assert sw1_1.pc[model.PC_RCV_CONSTRAINT] == 1
    sw2_2 = port(fab, "sw2", 2)
    sw2_2.part_enforce = model.PART_ENFORCE_OUT                # outbound
    sw2_2.pkeys = [0x0001] + [0] * 63       # limited only: a limited sender is refused
    fab.touch(sw2_2)
    out, _ = dp.forward(port(fab, "h1"), [ok, limited], all_attached(fab))
    assert [bytes(x) for x in out[port(fab, "h4")]] == [ok]
    assert sw2_2.pc[model.PC_XMIT_CONSTRAINT] == 1


def test_packets_to_qp0_and_qp1_are_mads_for_the_router(fab):
    dp = DataPlane(fab)
    mad = bytes(range(256))
    pkt = mad_packet(mad, slid=3, dlid=1, sqp=1, dqp=1)
    out, mads = dp.forward(port(fab, "h1"), [pkt], all_attached(fab))
    assert out == {}
    assert len(mads) == 1
    m = mads[0]
    assert (m.port, m.slid, m.dlid, m.sqp, m.dqp, m.mad) == (port(fab, "h1"), 3, 1, 1, 1, mad)
    # what a device receives: a valid native packet, VL15 for QP0, Q_Key 0x80010000 for QP1
    lr, grh, body = lrh.decap(pkt)
    assert grh is None and lr.vl == 0 and (lr.dlid, lr.slid) == (1, 3)
    op, _, pkey, dqp, _ = BTH.unpack_from(body)
    assert (op, pkey, dqp) == (Opcode.UD_SEND_ONLY, 0xFFFF, 1)
    assert DETH.unpack_from(body, 12) == (0x80010000, 1)
    assert bytes(body[20:]) == mad
    assert lrh.parse_lrh(mad_packet(mad, slid=3, dlid=1, sqp=0, dqp=0)).vl == lrh.VL15
    short = mad_packet(mad[:100], slid=3, dlid=1, sqp=1, dqp=1)
    assert dp.forward(port(fab, "h1"), [short], all_attached(fab))[1] == []
    assert pc(fab, "sw1", 1, model.PC_RCV_ERRORS) == 1
    # the fabric ends MAD packets: a bad ICRC (under a good VCRC) is a receive error
    bad = bytearray(pkt)
    bad[-3] ^= 0x40
    bad[-2:] = lrh.vcrc(bytes(bad[:-2])).to_bytes(2, "little")
    assert dp.forward(port(fab, "h1"), [bytes(bad)], all_attached(fab))[1] == []
    assert pc(fab, "sw1", 1, model.PC_RCV_ERRORS) == 2


def _counts(f):
    return {(p.node.nodeid, p.num): list(p.pc) for p in f.ports() if p.pc}


def test_whole_message_fast_path_matches_the_split_path():
    pkts = [data_packet(6, 3, bytes([i]) * (40 + 4 * i)) for i in range(10)]
    msg = fabriclink.pack_packets(pkts)
    fast, slow = topo.loads(NET_2SW), topo.loads(NET_2SW)
    for f in (fast, slow):
        program(f)
    whole, out, mads = DataPlane(fast).forward_message(port(fast, "h1"), msg, all_attached(fast))
    assert whole is port(fast, "h4") and out == {} and mads == []
    # the same packets and one bad one: sorted packet by packet instead
    bad = bytearray(pkts[0])
    bad[-1] ^= 1
    whole2, out2, _ = DataPlane(slow).forward_message(
        port(slow, "h1"), fabriclink.pack_packets(pkts[:5] + [bytes(bad)] + pkts[5:]),
        all_attached(slow))
    assert whole2 is None and [bytes(p) for p in out2[port(slow, "h4")]] == pkts
    c_fast, c_slow = _counts(fast), _counts(slow)
    c_slow[("sw1", 1)][model.PC_RCV_ERRORS] -= 1
    assert c_fast == c_slow


def test_mixed_destinations_keep_their_order(fab):
    dp = DataPlane(fab)
    p = [data_packet(6, 3, b"a" * 8), data_packet(4, 3, b"b" * 8), data_packet(6, 3, b"c" * 8),
         mad_packet(bytes(256), slid=3, dlid=1, sqp=1, dqp=1), data_packet(4, 3, b"d" * 8),
         data_packet(0xC001, 3, b"e" * 8)]
    fab.node("sw1").mft = {1: 1 << 2}             # the multicast group: h2 only
    whole, out, mads = dp.forward_message(port(fab, "h1"), fabriclink.pack_packets(p),
                                          all_attached(fab))
    assert whole is None and len(mads) == 1
    assert [bytes(x) for x in out[port(fab, "h4")]] == [p[0], p[2]]
    assert [bytes(x) for x in out[port(fab, "h2")]] == [p[1], p[4], p[5]]


def test_broken_framing_is_a_wire_error(fab):
    dp = DataPlane(fab)
    good = fabriclink.pack_packets([data_packet(6, 3)])
    for msg in (good + b"\0", good[:-3], good[:4] + b"\x00", b"\x03\x01"):
        with pytest.raises(WireError):
            dp.forward_message(port(fab, "h1"), msg, all_attached(fab))
    assert not port(fab, "sw2", 2).pc              # a broken message counts nowhere
    # and a route it touched counts the next good message once
    dp.forward_message(port(fab, "h1"), good, all_attached(fab))
    assert port(fab, "sw2", 2).pc[model.PC_XMIT_PKTS] == 1
