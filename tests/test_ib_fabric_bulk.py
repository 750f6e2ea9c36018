"""The fabric's whole-message path (``DataPlane._whole``: one compiled
check and one route for a bulk transfer's PACKETS message) against the
packet-by-packet walk: for each message, the same packets to the same CA
port, the same MADs, the same counters on every port and the same stats;
whatever the whole-message path does not take (damage, a MAD, two QPs,
multicast, a drop, a P_Key a port refuses) still goes the walk's way."""

from __future__ import annotations

import pytest

from ibfabric_helpers import NET_2SW, data_packet, program
from softrdma.fabric import model, topo
from softrdma.fabric.dataplane import DataPlane, mad_packet
from softrdma.wire import fabriclink, lrh, smp


def _fabric():
    f = topo.loads(NET_2SW)
    program(f)
    return f


def _bulk(n=31, dlid=6, slid=3, pkey=0xFFFF, size=2048, sl=0, vl=0):
    return [data_packet(dlid, slid, bytes([i]) * size, pkey=pkey, sl=sl, vl=vl) for i in range(n)]


def _damaged(pkts, i):
    bad = bytearray(pkts[i])
    bad[-1] ^= 1
    return pkts[:i] + [bytes(bad)] + pkts[i + 1:]


def _bad_icrc(pkts, i):
    """A packet whose ICRC is wrong under a good VCRC: a switch passes it on."""
    bad = bytearray(pkts[i])
    bad[-3] ^= 0x40
    bad[-2:] = lrh.vcrc(bytes(bad[:-2])).to_bytes(2, "little")
    return pkts[:i] + [bytes(bad)] + pkts[i + 1:]


def _enforce(f):
    p = f.node("sw1").ports[1]
    p.part_enforce = model.PART_ENFORCE_IN
    p.pkeys = [0x8001] + [0] * 63
    f.touch(p)


def _sl3_to_vl15(f):
    """sw1's SL2VL table for h1's port to sw2's: SL 3 -> VL15 (a data packet of SL 3 goes no further)."""
    vls = list(range(15)) + [7]
    vls[3] = 15
    f.node("sw1").sl2vl = {(1, 3): smp.encode_sl2vl(vls)}
    f.touch()


def _down(f):
    f.node("sw2").ports[2].phys = 3                 # Disabled: the link to h4 is down


CASES = {
    "bulk across a hop": (None, [_bulk(), _bulk(5)]),
    "one switch": (None, [_bulk(dlid=4)]),
    "a damaged packet": (None, [_damaged(_bulk(8), 3)]),
    "a bad ICRC": (None, [_bad_icrc(_bulk(8), 2)]),
    "two QPs": (None, [_bulk(4) + [data_packet(6, 3, dqp=0x12)]]),
    "a MAD among them": (None, [_bulk(3) + [mad_packet(bytes(256), slid=3, dlid=1, sqp=1, dqp=1)]]),
    "to its own LID": (None, [_bulk(4, dlid=3)]),
    "no LFT entry": (None, [_bulk(4, dlid=40)]),
    "multicast": (None, [[data_packet(0xC001, 3, dqp=0xFFFFFF)] * 3]),
    "partitions enforced": (_enforce, [_bulk(4, pkey=0x8001), _bulk(4, pkey=0x8001), _bulk(4, pkey=0x8002),
                                       _bulk(4, pkey=0x0001)]),
    "link down": (_down, [_bulk(4)]),
    "an SL mapped to VL15": (_sl3_to_vl15, [_bulk(4, sl=3), _bulk(4, sl=4), _bulk(4, dlid=4, sl=3)]),
}


def _run(f, msgs, attached, fast: bool):
    dp = DataPlane(f)
    if not fast:
        dp._whole = lambda *a: None                 # the walk, packet by packet
    got = []
    for msg in msgs:
        whole, out, mads = dp.forward_message(f.node("h1").ports[1], msg, attached)
        if whole is not None:
            out = {whole: list(fabriclink.iter_packets(msg))}
        got.append(({(p.node.nodeid, p.num): [bytes(x) for x in v] for p, v in out.items()},
                    [tuple(m[1:]) for m in mads]))
    counts = {(p.node.nodeid, p.num): list(p.pc) for p in f.ports() if p.pc}
    return got, counts, dp.stats


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("unattached", [False, True])
def test_whole_message_path_equals_the_walk(case, unattached):
    setup, messages = CASES[case]
    msgs = [fabriclink.pack_packets(p) for p in messages]
    results = []
    for fast in (True, False):
        f = _fabric()
        if setup is not None:
            setup(f)
        attached = {p for p in f.ports() if not p.node.is_switch}
        if unattached:
            attached.discard(f.node("h4").ports[1])
        results.append(_run(f, msgs, attached, fast))
    assert results[0] == results[1]


def test_the_whole_message_path_takes_a_bulk_message():
    f = _fabric()
    dp = DataPlane(f)
    taken = []
    whole_path = dp._whole
    dp._whole = lambda *a: taken.append(whole_path(*a)) or taken[-1]
    h4 = f.node("h4").ports[1]
    for msg in (fabriclink.pack_packets(_bulk()), fabriclink.pack_packets(_damaged(_bulk(4), 1))):
        dp.forward_message(f.node("h1").ports[1], msg, {h4})
    assert taken == [h4, None]
    assert dp.stats["forwarded"] == 34 and dp.stats["bad"] == 1
    assert f.node("sw2").ports[2].pc[model.PC_XMIT_PKTS] == 34


def test_a_p_key_the_walk_passed_lets_bulk_messages_go_whole():
    """Partitions enforced on the way: the first message of a P_Key walks
    (and is checked port by port), the next ones of that P_Key go whole;
    another SL is another route, checked again.  (A message on a VL other
    than the one its route ends on walks: each packet's VL is rewritten;
    the SL 2 messages here come on the VL their route ends on, as from a
    sender whose SL2VL table maps as the switches' do.)"""
    f = _fabric()
    _enforce(f)
    dp = DataPlane(f)
    taken = []
    whole_path = dp._whole
    dp._whole = lambda *a: taken.append(whole_path(*a)) or taken[-1]
    h1, h4 = f.node("h1").ports[1], f.node("h4").ports[1]
    vl2 = dp._route(h1, 6, False, 2).vls[0]
    for pkts in (_bulk(4, pkey=0x8001), _bulk(4, pkey=0x8001), _bulk(4, pkey=0x8001, sl=2, vl=vl2),
                 _bulk(4, pkey=0x8001, sl=2, vl=vl2), _bulk(4, pkey=0x8002)):
        dp.forward_message(h1, fabriclink.pack_packets(pkts), {h4})
    assert taken == [None, h4, None, h4, None]
    assert dp.stats["forwarded"] == 16
