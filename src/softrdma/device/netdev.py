"""What the daemon needs to know about a netdev: addresses, MAC, MTU
(rtnetlink through pyroute2)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field

# rtnetlink.h: the multicast groups of link and address changes, the
# message types whose body starts with an ifinfomsg or ifaddrmsg
RTMGRP_LINK, RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR = 0x1, 0x10, 0x100
_LINK_AND_ADDR_MSGS = {16, 17, 20, 21}          # RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR, RTM_DELADDR
_NLMSGHDR = struct.Struct("=IHHII")


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


class LinkEvents:
    """rtnetlink's link and address notifications, on a socket of its own:
    ``changed()`` reads every message waiting (non-blocking) and returns
    the interface indices they name.  (A pyroute2 socket queues messages
    inside the library, so a selector on its fd misses the ones it read
    ahead: a burst -- a macvlan made, its address added -- was seen late.)"""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                  socket.NETLINK_ROUTE)
        self.sock.bind((0, RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))

    def fileno(self) -> int:
        return self.sock.fileno()

    def changed(self) -> set[int]:
        out: set[int] = set()
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return out
            except OSError:                 # ENOBUFS: some were lost -- every device gets looked at
                out.add(-1)
                continue
            off = 0
            while off + _NLMSGHDR.size <= len(data):
                length, kind = _NLMSGHDR.unpack_from(data, off)[:2]
                if length < _NLMSGHDR.size:
                    break
                if kind in _LINK_AND_ADDR_MSGS and off + 24 <= len(data):
                    # ifinfomsg and ifaddrmsg both hold the index at byte 4 of the body
                    out.add(struct.unpack_from("=i", data, off + 20)[0])
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


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
