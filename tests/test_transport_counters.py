"""The counter registry (transport.counters) holds the device-level counts
too -- QP1's drops and a RoCE socket's counts -- by the names, in the order,
they were shown before they moved there (the daemon's ``links`` reply)."""

from softrdma.device.gsi import Gsi
from softrdma.device.net import RoceSocket
from softrdma.transport.counters import (
    DEVICE_FAULT_COUNTERS, RX_DROPPED, TRAFFIC, FaultCounter, GsiDrop, NetCounter, PortCounter, as_dict,
    new_fault_counters, new_gsi_drops, new_net_counters, new_port_counters)

GSI_DROPS = ("opcode", "qkey", "length", "mad")
NET = ("tx_packets", "tx_bytes", "tx_errors", "tx_gso_sends", "rx_packets", "rx_bytes", "rx_icrc_errors",
       "rx_short", "rx_gro_buffers", "rx_id_recovered", "rx_id_implausible")


def test_the_registry_holds_the_gsi_drops_and_the_socket_counts_in_their_order():
    assert tuple(c.name for c in GsiDrop) == GSI_DROPS
    assert tuple(c.name for c in NetCounter) == NET
    assert [int(c) for c in GsiDrop] == list(range(len(GSI_DROPS)))
    assert [int(c) for c in NetCounter] == list(range(len(NET)))
    assert new_gsi_drops() == [0] * len(GSI_DROPS) and new_net_counters() == [0] * len(NET)


def test_as_dict_names_members_and_pairs_in_their_order():
    c = list(range(10, 10 + len(PortCounter)))
    assert as_dict(c, TRAFFIC) == {"tx_packets": 10, "tx_bytes": 11, "rx_packets": 12, "rx_bytes": 13}
    assert list(as_dict(c, RX_DROPPED).items()) == [("icrc", 16), ("wire", 17), ("unknown_qpn", 18)]
    f = new_fault_counters()
    f[FaultCounter.corrupted] = 3
    assert as_dict(f, DEVICE_FAULT_COUNTERS) == {"lost": 0, "duplicated": 0, "reordered": 0, "delayed": 0,
                                                 "corrupted": 3}
    assert len(new_port_counters()) == len(PortCounter)


def test_the_readers_get_the_same_dicts():
    g = Gsi(None)
    g.receive(b"\x00" * 64, bytes(4), bytes(4), 0.0)        # not a UD SEND ONLY
    assert list(g.rx_dropped.items()) == [("opcode", 1), ("qkey", 0), ("length", 0), ("mad", 0)]
    s = RoceSocket("127.0.0.1", 0)
    try:
        assert s.send(bytes(64), "127.0.0.1", s.port)
        assert list(s.stats) == list(NET)
        assert s.stats["tx_packets"] == 1 and s.stats["tx_bytes"] == 68
    finally:
        s.close()
