"""What the daemon needs to know about a netdev: addresses, MAC, MTU
(rtnetlink through pyroute2)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NetdevInfo:
    name: str
    index: int
    mac: bytes
    mtu: int
    addresses: list[str] = field(default_factory=list)   # IPv4 first, then IPv6, in kernel order
    up: bool = True


def netdev_info(name: str) -> NetdevInfo:
    """Look ``name`` up; raises LookupError if there is no such netdev."""
    from pyroute2 import IPRoute
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=name)
        if not idx:
            raise LookupError(f"no netdev {name!r}")
        link = ipr.get_links(idx[0])[0]
        mac = link.get_attr("IFLA_ADDRESS") or "00:00:00:00:00:00"
        info = NetdevInfo(name, idx[0], bytes.fromhex(mac.replace(":", "")), link.get_attr("IFLA_MTU") or 1500,
                          up=bool(link["flags"] & 1))
        v4, v6 = [], []
        for a in ipr.get_addr(index=idx[0]):
            addr = a.get_attr("IFA_ADDRESS")
            (v4 if a["family"] == 2 else v6).append(addr)
        info.addresses = v4 + v6
        return info


def active_mtu(netdev_mtu: int) -> int:
    """rxe's active MTU (ibv_mtu) for a netdev MTU (eth_mtu_int_to_enum):
    the netdev MTU less RXE_MAX_HDR_LENGTH (80), rounded down to an IB MTU.
    Matches NOTES.md's measurements: 9000/4200 -> 4096, 4096/2200 -> 2048,
    2048/1500 -> 1024, 1100/1000 -> 512."""
    room = netdev_mtu - 80
    for mtu in (5, 4, 3, 2, 1):
        if room >= 128 << mtu:
            return mtu
    return 1
