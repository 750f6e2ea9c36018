"""UD multicast on a device: group membership, group sockets, delivery
(rxe_mcast.c, rxe_recv.c's rxe_rcv_mcast_pkt).

``McastGroups`` (one per ``Device``) keeps the groups UD QPs attached to
with ibv_attach_mcast, as rxe's mcg tree does: a group per multicast GID,
at most ``MAX_MCAST_QP_ATTACH`` QPs each, at most ``MAX_MCAST_GRP`` groups.

A multicast GID stands for an IP multicast group (``group_ip``): the RoCEv2
form ::ffff:a.b.c.d (rxe, rdma_cm) and rdma_cm's ff0e::ffff:a.b.c.d form are
IPv4 a.b.c.d, any other ff00::/8 GID is that IPv6 group.  While any QP of
the device is attached to a group, a ``McastSocket`` bound to the group's
address on the RoCE port has joined it on the device's netdev
(IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP); the last detach closes it, which
leaves the group.

Delivery is the port's (``transport.port``): a UD send to a multicast GID
(dest QPN 0xFFFFFF) resolves to a ``Route`` whose ``group`` is every device
of the daemon: every QP attached to the group there gets the packet directly
(as the same-daemon path does unicast), and it goes out once on the wire to
the group address (IP_MULTICAST_LOOP off: local members already have it).
From the wire, ``McastGroups.receive`` hands the packets to the port's
``deliver_mcast``.  The attached QPs by group address are the port's
``mcast_qps``, which this module keeps.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
import weakref

from ..errors import VerbsError
from ..transport.counters import PortCounter
from ..transport.port import Route
from ..uapi.limits import MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH
from ..wire.icrc import ROCEV2_UDP_PORT
from .net import RoceSocket

UD = 4                               # IBV_QPT_UD
_V4MAPPED = bytes(10) + b"\xff\xff"
_FF0E_V4 = b"\xff\x0e" + bytes(8) + b"\xff\xff"
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
IPV6_MULTICAST_ALL = getattr(socket, "IPV6_MULTICAST_ALL", 29)


def is_multicast_gid(gid: bytes) -> bool:
    """rdma_is_multicast_addr: ff00::/8, or an IPv4-mapped 224.0.0.0/4."""
    return gid[0] == 0xFF or (gid[:12] == _V4MAPPED and gid[12] & 0xF0 == 0xE0)


def group_ip(gid: bytes) -> str:
    """The IP multicast address a multicast GID stands for."""
    if (gid[:12] == _V4MAPPED or gid[:12] == _FF0E_V4) and gid[12] & 0xF0 == 0xE0:
        return socket.inet_ntoa(gid[12:16])
    return str(ipaddress.IPv6Address(bytes(gid)))


class McastSocket(RoceSocket):
    """A RoCE socket bound to a multicast group's address and port, joined
    on one interface.  IP_MULTICAST_ALL off: it receives only what its own
    membership covers, not every group another socket of the host joined."""

    def __init__(self, group: str, port: int, ifindex: int):
        self.ifindex = ifindex
        super().__init__(group, port, pool=8)

    def _bind(self, port: int) -> None:
        s = self.sock
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # several devices may join one group
        grp = socket.inet_pton(socket.AF_INET6 if self.v6 else socket.AF_INET, self.ip)
        if self.v6:
            s.setsockopt(socket.IPPROTO_IPV6, IPV6_MULTICAST_ALL, 0)
            s.bind((self.ip, port, 0, self.ifindex))             # a link-local group needs its scope
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP, grp + struct.pack("@I", self.ifindex))
        else:
            s.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
            s.bind((self.ip, port))
            s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                         struct.pack("@4s4si", grp, bytes(4), self.ifindex))      # struct ip_mreqn


def _prepare_sender(sock: RoceSocket, ifindex: int) -> None:
    """Let a device's unicast socket send to groups: out of the device's
    interface, and not looped back (local members get the packet directly)."""
    s = sock.sock
    if sock.v6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, ifindex)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP, 0)
    else:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, sock.ip_bytes)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)


class Group:
    __slots__ = ("gid", "ip", "members")

    def __init__(self, gid: bytes, ip: str):
        self.gid = gid
        self.ip = ip
        self.members: dict = {}          # transport QP -> LIDs it attached with (uverbs' mcast list)


class McastGroups:
    def __init__(self, dev):
        self.dev = dev
        self.groups: dict[bytes, Group] = {}
        self.sockets: dict[str, McastSocket] = {}      # group address -> its joined socket
        self._senders = weakref.WeakSet()              # unicast sockets set up to send to groups

    @property
    def xmit_packets(self) -> int:
        return self.dev.cnt[PortCounter.multicast_xmit_packets]

    @property
    def rcv_packets(self) -> int:
        return self.dev.cnt[PortCounter.multicast_rcv_packets]

    # -- membership (ib_attach_mcast / rxe_attach_mcast and the detach)
    def attach(self, qp, gid: bytes, lid: int) -> McastSocket | None:
        """Attach ``qp``; returns the group socket it opened, if it did."""
        if not is_multicast_gid(gid) or qp.qp_type != UD:
            raise VerbsError(errno.EINVAL, "multicast attach needs a UD QP and a multicast GID")
        grp = self.groups.get(gid)
        if grp is not None and qp in grp.members:
            grp.members[qp].add(lid)
            return None
        if grp is None and len(self.groups) >= MAX_MCAST_GRP:
            raise VerbsError(errno.ENOMEM, "too many multicast groups")
        if grp is not None and len(grp.members) >= MAX_MCAST_QP_ATTACH:
            raise VerbsError(errno.ENOMEM, "too many QPs attached to the group")
        ip = grp.ip if grp is not None else group_ip(gid)
        opened = None
        if ip not in self.sockets and self.dev.sockets:        # a device with a network joins the group
            try:
                opened = self.sockets[ip] = McastSocket(ip, self.dev.udp_port, self.dev.netdev_index)
            except OSError as e:
                raise VerbsError(e.errno or errno.EINVAL, f"joining {ip}: {e.strerror}") from None
        if grp is None:
            grp = self.groups[gid] = Group(gid, ip)
        grp.members[qp] = {lid}
        self._rebuild()
        return opened

    def detach(self, qp, gid: bytes, lid: int) -> McastSocket | None:
        """Detach ``qp`` (EINVAL if it was not attached with this GID and
        LID); returns the group socket closed with the last member."""
        grp = self.groups.get(gid)
        lids = grp.members.get(qp) if grp is not None else None
        if lids is None or lid not in lids:
            raise VerbsError(errno.EINVAL, "the QP is not attached to that group")
        lids.discard(lid)
        if lids:
            return None
        del grp.members[qp]
        return self._drop_if_empty(grp)

    def detach_all(self, qp) -> list[McastSocket]:
        """The QP is destroyed: it leaves every group (uverbs detaches its
        multicast list first)."""
        closed = []
        for grp in [g for g in self.groups.values() if qp in g.members]:
            del grp.members[qp]
            sock = self._drop_if_empty(grp)
            if sock is not None:
                closed.append(sock)
        return closed

    def _drop_if_empty(self, grp: Group) -> McastSocket | None:
        if not grp.members:
            del self.groups[grp.gid]
        self._rebuild()
        if any(g.ip == grp.ip for g in self.groups.values()):
            return None
        return self.sockets.pop(grp.ip, None)

    def _rebuild(self) -> None:
        by_ip: dict[bytes, list] = {}
        for g in self.groups.values():
            by_ip.setdefault(ipaddress.ip_address(g.ip).packed, []).extend(g.members)
        qps = self.dev.mcast_qps           # changed in place: an IB device's further ports hold the same dict
        qps.clear()
        qps.update((k, tuple(v)) for k, v in by_ip.items())

    def close(self) -> list[McastSocket]:
        socks = list(self.sockets.values())
        for s in socks:
            s.close()
        self.sockets.clear()
        self.groups.clear()
        self.dev.mcast_qps.clear()
        return socks

    # -- data path
    def receive(self, sock: McastSocket, now: float) -> None:
        """A group socket is readable."""
        dst = sock.ip_bytes
        deliver = self.dev.deliver_mcast
        for pkt, src, _sport in sock.recv():
            deliver(pkt, src, dst, now)

    def route(self, av, devices_by_ip: dict) -> Route:
        """``RocePort._resolve`` for a multicast destination GID."""
        dev = self.dev
        ip = group_ip(av.dgid)
        dst_b = ipaddress.ip_address(ip).packed
        v6 = len(dst_b) == 16
        src_ip, sock = dev._source(av.sgid_index)
        if sock is None or sock.v6 != v6:
            sock = next((s for s in dev.sockets if s.v6 == v6), None)
        if not dev.udp_port:
            sock = None                  # --port 0 (tests): no common port, the wire reaches nobody
        if sock is not None:
            if sock not in self._senders:
                _prepare_sender(sock, dev.netdev_index)
                self._senders.add(sock)
            src_b = sock.ip_bytes
        else:
            src = ipaddress.ip_address(src_ip)
            src_b = src.packed if (src.version == 6) == v6 else bytes(len(dst_b))
        devices = tuple({id(d): d for d in (dev, *devices_by_ip.values())}.values())
        return Route(None, devices, sock, ip, src_b, dst_b, ROCEV2_UDP_PORT, ROCEV2_UDP_PORT)


__all__ = ["McastGroups", "McastSocket", "is_multicast_gid", "group_ip"]
