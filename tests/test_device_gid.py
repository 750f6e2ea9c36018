"""softrdma.device.gid against the real rxe0 of ../shared/interop/rxe-vm
(NOTES.md) and the rules of roce_gid_mgmt.c / cache.c."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softrdma.device.gid import (
    ROCE_V2, ZERO_GID, GidEntry, GidTable, default_gid, eui64, gid_from_str, gid_str,
)
from softrdma.wire.gid import gid_ip, ip_gid, ipv4_gid, ipv6_gid

ip = ipaddress.ip_address

# The guest of ../shared/interop/rxe-vm: eth0 = 52:54:00:77:00:02, 10.77.0.2/24.
RXEVM_MAC = bytes.fromhex("525400770002")
RXEVM_IPV4 = ip("10.77.0.2")
# Its IPv6 link-local (EUI-64, addr_gen_mode 0) is the default GID's value.
RXEVM_LL = ip("fe80::5054:ff:fe77:2")
# NOTES.md "rxe in the guest": the populated GID table of rxe0, literally.
RXEVM_GIDS = {
    0: "fe80:0000:0000:0000:5054:00ff:fe77:0002",
    1: "0000:0000:0000:0000:0000:ffff:0a4d:0002",
}


# -- the pure functions ---------------------------------------------------------

def test_default_gid_is_the_notes_index_0():
    assert gid_str(default_gid(RXEVM_MAC)) == RXEVM_GIDS[0]
    assert gid_str(default_gid("52:54:00:77:00:02")) == RXEVM_GIDS[0]
    # it equals the EUI-64 link-local the kernel gives eth0
    assert default_gid(RXEVM_MAC) == RXEVM_LL.packed


def test_ipv4_gid_is_the_notes_index_1_and_the_pingpong_wire_form():
    g = ipv4_gid(RXEVM_IPV4)
    assert gid_str(g) == RXEVM_GIDS[1]
    # ibv_rc_pingpong sends the raw 16 bytes as hex (NOTES "Out-of-band")
    assert g.hex() == "00000000000000000000ffff0a4d0002"
    assert ipv4_gid("10.77.0.1").hex() == "00000000000000000000ffff0a4d0001"
    assert ip_gid(RXEVM_IPV4) == g


def test_ipv4_gid_matches_the_simulators():
    from softrdma.sim import gid_of
    assert ipv4_gid("192.0.2.7") == gid_of("192.0.2.7")


def test_ipv6_gid_is_the_address():
    a = ip("2001:db8::1")
    assert ipv6_gid(a) == a.packed
    assert gid_str(ipv6_gid(a)) == "2001:0db8:0000:0000:0000:0000:0000:0001"
    assert ip_gid("2001:db8::1") == a.packed


def test_eui64_is_rxes_node_guid():
    # ibv_devinfo on rxe0: node_guid 5054:00ff:fe77:0002
    assert eui64(RXEVM_MAC).hex() == "505400fffe770002"
    # the U/L bit is flipped, not set: a locally administered MAC clears it
    assert eui64("02:00:00:00:00:01").hex() == "000000fffe000001"


def test_bad_macs_and_gids():
    for bad in (b"\x00" * 5, "52:54:00:77:00", "52:54:00:77:00:02:03"):
        with pytest.raises(ValueError):
            default_gid(bad)
    with pytest.raises(ValueError):
        gid_str(b"\x00" * 15)
    for bad in ("", "fe80", "zzzz:0000:0000:0000:0000:0000:0000:0000", "1:2:3"):
        with pytest.raises(ValueError):
            gid_from_str(bad)


def test_gid_str_is_the_kernels_pI6_and_round_trips():
    assert gid_str(ZERO_GID) == "0000:0000:0000:0000:0000:0000:0000:0000"
    assert gid_str(bytes(range(16))) == "0001:0203:0405:0607:0809:0a0b:0c0d:0e0f"
    for text in RXEVM_GIDS.values():
        assert gid_str(gid_from_str(text)) == text
        assert gid_from_str(text + "\n") == gid_from_str(text)   # a sysfs read
    # any IPv6 spelling is accepted
    assert gid_from_str("::ffff:10.77.0.2") == ipv4_gid(RXEVM_IPV4)
    assert gid_from_str("FE80::5054:FF:FE77:2") == default_gid(RXEVM_MAC)


def test_gid_ip_is_rdma_gid2ip():
    assert gid_ip(ipv4_gid(RXEVM_IPV4)) == RXEVM_IPV4
    assert gid_ip(default_gid(RXEVM_MAC)) == RXEVM_LL


# -- the table ------------------------------------------------------------------

def test_rxevm_table_exactly():
    """rxe0's real table: the default GID at 0, the IPv4 GID at 1, and the
    EUI-64 link-local deduplicated into the default slot: two entries."""
    t = GidTable("eth0")
    assert t.capacity == 1024
    changes = t.sync(RXEVM_MAC, [RXEVM_IPV4, RXEVM_LL])
    assert [(i, gid_str(e.gid)) for i, e in t] == sorted(RXEVM_GIDS.items())
    assert all(e.type == ROCE_V2 == "RoCE v2" and e.ndev == "eth0" for _, e in t)
    assert len(t) == 2
    assert [(i, old, new.gid) for i, old, new in changes] == [
        (0, None, default_gid(RXEVM_MAC)), (1, None, ipv4_gid(RXEVM_IPV4))]
    assert t.find(RXEVM_GIDS[1]) == 1
    assert t.find(ipv4_gid(RXEVM_IPV4)) == 1
    assert t.find("::ffff:10.77.0.2") == 1
    assert t.find(ipv4_gid("10.77.0.1")) is None
    assert t[2] is None
    with pytest.raises(IndexError):
        t[1024]
    with pytest.raises(IndexError):
        t[-1]
    # the same state again changes nothing
    assert t.sync(RXEVM_MAC, [RXEVM_IPV4, RXEVM_LL]) == []


def test_new_addresses_take_the_lowest_free_slot_and_nothing_moves():
    t = GidTable("eth0")
    a, b, c, d, e = (ip(f"10.0.0.{i}") for i in range(1, 6))
    t.sync(RXEVM_MAC, [a, b, c])
    assert [t.find(ipv4_gid(x)) for x in (a, b, c)] == [1, 2, 3]

    changes = t.sync(RXEVM_MAC, [a, c])                       # b goes
    assert changes == [(2, GidEntry(ipv4_gid(b), ROCE_V2, "eth0"), None)]
    assert [t.find(ipv4_gid(x)) for x in (a, c)] == [1, 3]      # c stays at 3
    assert t[2] is None

    t.sync(RXEVM_MAC, [a, c, d])                              # d reuses 2
    assert t.find(ipv4_gid(d)) == 2
    t.sync(RXEVM_MAC, [a, c, d, e])                           # e after the end
    assert t.find(ipv4_gid(e)) == 4

    t.sync(RXEVM_MAC, [])                                     # all go ...
    assert [i for i, _ in t] == [0]                           # ... but the default
    t.sync(RXEVM_MAC, [e])
    assert t.find(ipv4_gid(e)) == 1                           # never slot 0


def test_removal_and_addition_in_one_sync_reuse_the_freed_slot():
    t = GidTable("eth0")
    t.sync(RXEVM_MAC, [ip("10.0.0.1"), ip("10.0.0.2")])
    changes = t.sync(RXEVM_MAC, [ip("10.0.0.2"), ip("10.0.0.9")])
    assert t.find(ipv4_gid("10.0.0.9")) == 1
    assert changes == [(1, GidEntry(ipv4_gid("10.0.0.1"), ROCE_V2, "eth0"),
                        GidEntry(ipv4_gid("10.0.0.9"), ROCE_V2, "eth0"))]


def test_ipv4_before_ipv6_and_every_ipv6_gets_a_gid():
    """add_netdev_ips: default, then IPv4, then IPv6.  No IPv6 address is
    skipped: a stable-privacy link-local (not the EUI-64) and a global both
    get slots; only the EUI-64 link-local is absorbed by the default GID."""
    t = GidTable("eth0")
    stable_ll = ip("fe80::1c2d:3e4f:5a6b:7c8d")
    glob = ip("2001:db8:77::2")
    t.sync(RXEVM_MAC, [glob, RXEVM_LL, stable_ll, RXEVM_IPV4])
    assert t.find(ipv4_gid(RXEVM_IPV4)) == 1
    assert t.find(ipv6_gid(glob)) == 2
    assert t.find(ipv6_gid(stable_ll)) == 3
    assert t.find(default_gid(RXEVM_MAC)) == 0
    assert len(t) == 4


def test_removing_the_eui64_link_local_keeps_the_default_gid():
    t = GidTable("eth0")
    t.sync(RXEVM_MAC, [RXEVM_IPV4, RXEVM_LL])
    assert t.sync(RXEVM_MAC, [RXEVM_IPV4]) == []
    assert t[0].gid == default_gid(RXEVM_MAC)


def test_an_ipv4_mapped_ipv6_address_is_the_same_gid():
    t = GidTable("eth0")
    t.sync(RXEVM_MAC, [ip("10.1.1.1"), ip("::ffff:10.1.1.1")])
    assert len(t) == 2 and t.find(ipv4_gid("10.1.1.1")) == 1


def test_mac_change_rebuilds_like_netdev_changeaddr():
    t = GidTable("eth0")
    a, b, c = ip("10.0.0.1"), ip("10.0.0.2"), ip("2001:db8::5")
    t.sync(RXEVM_MAC, [a, b, c])
    t.sync(RXEVM_MAC, [b, c])                    # slot 1 freed: b at 2, c at 3
    assert (t.find(ipv4_gid(b)), t.find(ipv6_gid(c))) == (2, 3)
    new_mac = "52:54:00:77:00:99"
    changes = t.sync(new_mac, [b, c])
    # everything deleted, then default, IPv4, IPv6 re-added from the bottom
    assert [(i, gid_str(e.gid)) for i, e in t] == [
        (0, "fe80:0000:0000:0000:5054:00ff:fe77:0099"),
        (1, gid_str(ipv4_gid(b))),
        (2, gid_str(ipv6_gid(c))),
    ]
    assert [i for i, _, _ in changes] == [0, 1, 2, 3]
    assert changes[-1][2] is None                # slot 3 emptied


def test_full_table_refuses_like_enospc():
    t = GidTable("eth0", capacity=3)
    t.sync(RXEVM_MAC, [ip("10.0.0.1"), ip("10.0.0.2"), ip("10.0.0.3")])
    assert [i for i, _ in t] == [0, 1, 2]
    assert t.refused == [ipv4_gid("10.0.0.3")]
    t.sync(RXEVM_MAC, [ip("10.0.0.2"), ip("10.0.0.3")])      # room again
    assert t.find(ipv4_gid("10.0.0.3")) == 1 and t.refused == []


def test_clear_empties_everything():
    t = GidTable("eth0")
    t.sync(RXEVM_MAC, [RXEVM_IPV4])
    changes = t.clear()
    assert len(t) == 0 and [i for i, _, _ in changes] == [0, 1]
    t.sync(RXEVM_MAC, [RXEVM_IPV4])
    assert len(t) == 2


def test_text_addresses_and_ndev_name():
    t = GidTable("enp1s0")
    t.sync("52:54:00:77:00:02", ["10.77.0.2"])
    assert t[1] == GidEntry(ipv4_gid(RXEVM_IPV4), "RoCE v2", "enp1s0")
    assert "0a4d:0002" in repr(t)


# -- property: an independent model of the allocator ----------------------------

POOL = [ip(f"10.9.0.{i}") for i in range(1, 9)] + [ip(f"2001:db8::{i:x}") for i in range(1, 9)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(POOL), unique=True), min_size=1, max_size=12))
def test_sync_sequences_against_a_model(steps):
    cap = 10
    t = GidTable("eth0", capacity=cap)
    assert [i for i, _, _ in t.sync(RXEVM_MAC, [])] == [0]     # the default GID
    model: dict[int, bytes] = {}         # index -> gid, non-default slots only
    for addrs in steps:
        wanted = [ip_gid(a) for a in addrs if a.version == 4] + \
                 [ip_gid(a) for a in addrs if a.version == 6]
        before = dict(model)
        model = {i: g for i, g in model.items() if g in wanted}
        for g in wanted:
            if g in model.values():
                continue
            free = [i for i in range(1, cap) if i not in model]
            if free:
                model[free[0]] = g
        changes = t.sync(RXEVM_MAC, addrs)
        got = {i: e.gid for i, e in t if i != 0}
        assert got == model
        assert t[0].gid == default_gid(RXEVM_MAC)
        # survivors never move
        for i, g in before.items():
            if g in wanted and i in got:
                assert got[i] == g
        # the reported changes are exactly the differing slots
        expect = sorted(set(before.items()) ^ set(model.items()))
        assert sorted({i for i, _, _ in changes}) == sorted({i for i, _ in expect})
