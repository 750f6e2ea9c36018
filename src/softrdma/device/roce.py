"""The RoCEv2 link of a device's port (rxe_net.c): GIDs, addresses, UDP
sockets, routes.

``RocePort`` is the ``transport.port.Port`` of a device on an Ethernet
netdev: its GID table follows the netdev's addresses (roce_gid_mgmt), each
address has a ``RoceSocket``; an address vector resolves to a
``transport.port.Route`` -- to another device of the same daemon (no
socket, no ICRC), to a multicast group (``device.mcast``), or out of the
socket of its source GID.  The receive demux is the port's; what is
RoCE-specific in it lives here: check_addr's operands (IP addresses, an
IPv4 peer reported in either form) and the GRH a UD buffer gets (rxe's
layout: the IPv4 header in its last 20 bytes, IPv6 in all 40).

Peers are who they claim to be (rxe's check_addr): a packet for an RC or
UC QP is taken only if its source address is the QP's destination (the
AV's dgid) and its destination address the one the QP sends from (the
AV's sgid), on the socket and the same-daemon paths alike; anything else
is dropped and counted (``dropped_bad_addr``) before the transport sees
it.  The address pair is worked out once per AV (``_peer``) -- per packet
it is one comparison.  UD QPs (and QP1) take datagrams from anyone.
"""

from __future__ import annotations

import errno
import ipaddress

from ..errors import VerbsError
from ..transport.counters import NetCounter
from ..transport.port import Port, Route
from ..wire.icrc import ROCEV2_UDP_PORT, ipv4_header, ipv6_header
from .gid import GidTable
from .mcast import is_multicast_gid
from .net import RoceSocket, gid_to_ip

RC, UC = 2, 3                 # IBV_QPT_RC, IBV_QPT_UC
NET_TX_PACKETS, NET_TX_BYTES = int(NetCounter.tx_packets), int(NetCounter.tx_bytes)
_V4_MAPPED = bytes(10) + b"\xff\xff"
DRAIN_BATCHES = 64            # receive passes (of net.RX_BUDGET datagrams) a drain may take: a full socket buffer


class RocePort(Port):
    rx_port = ROCEV2_UDP_PORT     # what a capture records for the same-daemon path

    def __init__(self, netdev: str, addresses: list[str], mac: bytes, port: int, bind: bool, netdev_index: int):
        super().__init__()
        self.netdev = netdev
        self.netdev_index = netdev_index
        self.mac = mac
        ips = [ipaddress.ip_address(a) for a in addresses]
        # the GID table covers every address (roce_gid_mgmt); each address
        # gets a socket, a link-local one scoped to the netdev (its ifindex)
        self.gid_table = GidTable(netdev)
        self.gid_table.sync(mac, ips)
        self.addresses = [str(a) for a in ips if netdev_index or not a.is_link_local]
        self.sockets: list[RoceSocket] = []
        self.udp_port = port
        if bind:
            try:
                for a in self.addresses:
                    try:
                        self.sockets.append(RoceSocket(a, port, ifindex=netdev_index))
                    except OSError as e:
                        # an IPv6 address still in DAD (a link that just came up): the
                        # address event that ends DAD opens it (set_addresses)
                        if e.errno != errno.EADDRNOTAVAIL or ":" not in a:
                            raise
            except OSError as e:                     # e.g. the port is taken: name the address, leak nothing
                for s in self.sockets:
                    s.close()
                raise OSError(e.errno, e.strerror, f"[{a}]:{port}" if ":" in a else f"{a}:{port}") from None
        self._by_ip = {s.ip: s for s in self.sockets}
        self.gso = True                              # send with UDP GSO (``rdma link add ... gso off``)
        # the e-switch VLAN a VF's frames are tagged with (``device.vf_vlan``): a
        # same-daemon peer must be on the same one; None: untagged
        self.eswitch_vlan = None

    def gid(self, index: int) -> bytes | None:
        return self.gid_table.gid(index)

    @property
    def gids(self) -> list[bytes]:
        """GIDs by index up to the last used slot (free slots: zero GID)."""
        return self.gid_table.gids()

    def set_addresses(self, mac: bytes, addresses) -> tuple[list, list[RoceSocket], list[RoceSocket]]:
        """The netdev's addresses changed: follow them in the GID table and
        in the bound sockets.  Returns (GID changes, sockets opened, sockets
        retired); the caller unregisters the retired ones, then closes them."""
        self.route_cache.clear()
        ips = [ipaddress.ip_address(a) for a in addresses]
        changes = self.gid_table.sync(mac, ips)
        self.mac = mac
        want = [str(a) for a in ips if self.netdev_index or not a.is_link_local]
        opened, closed = [], []
        for sock in list(self.sockets):
            if sock.ip not in want:
                self.sockets.remove(sock)
                closed.append(sock)
        have = {sock.ip for sock in self.sockets}
        for a in want:
            if a not in have:
                try:
                    sock = RoceSocket(a, self.udp_port, ifindex=self.netdev_index)
                    sock.gso = self.gso
                    sock.set_tos(self.cc.tos(0))
                except OSError:
                    continue                      # e.g. an IPv6 address still in DAD: next event retries
                self.sockets.append(sock)
                opened.append(sock)
        self.addresses = want
        self._by_ip = {sk.ip: sk for sk in self.sockets}
        for e in self.qps.values():               # a GID index may now stand for another address
            e.peer_av = None
        return changes, opened, closed

    def _source(self, sgid_index: int, v6: bool | None = None) -> tuple[str, "RoceSocket | None"]:
        """(source IP, socket) for a source GID index: the GID's own socket;
        failing that (the GID went away, or its address has none), a socket
        of the destination's family (``v6``; None: any), else None -- the
        packets then go nowhere (counted), never out of the wrong family."""
        g = self.gid(sgid_index)
        if g is not None:
            ip = gid_to_ip(g)
            sock = self._by_ip.get(ip)
            if sock is not None and (v6 is None or sock.v6 == v6):
                return ip, sock
        sock = next((sk for sk in self.sockets if v6 is None or sk.v6 == v6), None)
        if sock is not None:
            return sock.ip, sock
        ip = next((a for a in self.addresses if v6 is None or (":" in a) == v6), None)
        if ip is not None:                   # no socket (not bound): the loopback path needs only the address
            return ip, None
        if g is not None:
            return gid_to_ip(g), None
        return ("::" if v6 else "0.0.0.0"), None

    def check_av(self, av, devices_by_ip: dict) -> None:
        """What modify_qp (RTR) and create_ah refuse with EINVAL for RoCE,
        besides a missing source GID: a source and destination of different
        IP families (rdma_resolve_ip: ``src->sa_family != dst->sa_family``),
        and a source GID whose address this host cannot send from (no socket:
        e.g. the default GID of a netdev without that link-local address)
        unless the destination is a device of this daemon."""
        g = self.gid(av.sgid_index)
        if g is None:
            raise VerbsError(errno.EINVAL, f"no GID at sgid_index {av.sgid_index}")
        src = gid_to_ip(g)
        if is_multicast_gid(av.dgid):
            return
        dst = gid_to_ip(av.dgid)
        if (":" in src) != (":" in dst):
            raise VerbsError(errno.EINVAL, f"source GID {src} and destination GID {dst} are of different IP families")
        if src not in self._by_ip and dst not in devices_by_ip and self.sockets:
            raise VerbsError(errno.EINVAL, f"no address {src} to send from on {self.netdev}")

    def cc_changed(self) -> None:
        """The ECN settings (``cc``) changed: the sockets' default TOS (an
        address vector without a traffic class) follows, and the routes'
        TOS with the next packet."""
        tos = self.cc.tos(0)
        for sk in self.sockets:
            sk.set_tos(tos)
        self.route_cache.clear()

    def set_gso(self, on: bool) -> None:
        """Send bursts as UDP GSO super-packets (on) or one datagram per
        sendmsg (off: what a capture on a veth, or a raw-socket peer, needs
        -- a veth hands a GSO packet to the other namespace unsplit)."""
        self.gso = bool(on)
        for sk in self.sockets:
            sk.gso = self.gso

    # -- the link under transport.port.Port
    def _resolve(self, av, devices_by_ip: dict) -> Route:
        """The route of an address vector; cached per (dgid, sgid_index) in
        ``route_cache`` until addresses change.  A multicast GID routes to
        its group (``McastGroups.route``)."""
        if is_multicast_gid(av.dgid):
            return self.mcast.route(av, devices_by_ip)
        dst_ip = gid_to_ip(av.dgid)
        src_ip, sock = self._source(av.sgid_index, ":" in dst_ip)
        src_b, dst_b = ipaddress.ip_address(src_ip).packed, ipaddress.ip_address(dst_ip).packed
        peer = devices_by_ip.get(dst_ip)
        if peer is not None:
            # no socket on this path: as rxe, the packets come from the source
            # GID's own address even when the netdev lacks it (the default GID
            # fe80::<EUI-64> of lo), which is what the peer's check_addr expects
            g = self.gid(av.sgid_index)
            if g is not None and (":" in gid_to_ip(g)) == (":" in dst_ip):
                src_b = ipaddress.ip_address(gid_to_ip(g)).packed
        if len(src_b) != len(dst_b) or (peer is not None and (
                peer.rx_blocked or getattr(peer, "eswitch_vlan", None) != self.eswitch_vlan)):
            peer = sock = None              # a GID that changed family under a QP, a port held down,
                                            # another VLAN: nothing goes
        if peer is not None or sock is None:
            return Route(peer, None, None if peer is not None else sock, dst_ip, src_b, dst_b,
                         ROCEV2_UDP_PORT, ROCEV2_UDP_PORT)
        return Route(None, None, sock, dst_ip, src_b, dst_b, sock.port, self.udp_port)

    def _send(self, r: Route, pkt, corrupt_bit) -> bool:
        return r.sock.send(pkt, r.dst_ip, self.udp_port, corrupt_bit, r.tos)

    def _send_burst(self, sock: RoceSocket, dst_ip: str, pkts: list, tos: int) -> tuple[int, int]:
        cnt = sock.cnt
        tx0, by0 = cnt[NET_TX_PACKETS], cnt[NET_TX_BYTES]
        sock.send_burst(pkts, dst_ip, self.udp_port, tos)
        return cnt[NET_TX_PACKETS] - tx0, cnt[NET_TX_BYTES] - by0

    def _peer(self, e) -> tuple[bytes, bytes] | None:
        """Work out ``e.peer`` for the QP's current AV (rxe check_addr's
        operands): for a connected QP whose AV names a destination, the
        dgid's address (the packets' source) and the address this QP sends
        from (their destination: the sgid's, as ``route`` sends; when no
        socket has the sgid's address, the device's first, which is where
        the peer sees our packets come from), 4 bytes for IPv4(-mapped)
        GIDs, else 16.  None for UD, and for a QP not yet given a
        destination (its state drops the packet)."""
        qp = e.qp
        av = qp.av
        peer = None
        if qp.qp_type in (RC, UC) and av is not None and any(av.dgid):
            sent_from = ipaddress.ip_address(self._source(av.sgid_index)[0]).packed
            g = self.gid(av.sgid_index)
            # a same-daemon peer sends to the sgid's own address (``_resolve``)
            own = _addr_bytes(g) if g is not None else sent_from
            peer = (_addr_bytes(av.dgid), sent_from, own)
        e.peer_av, e.peer = av, peer
        return peer

    def accepts(self, e, src: bytes, dst: bytes) -> bool:
        """Would the QP of entry ``e`` take a packet from ``src`` to ``dst``?"""
        peer = e.peer if e.peer_av is e.qp.av else self._peer(e)
        return peer is None or (src == peer[0] and dst == peer[1]) or self._same_pair(peer, src, dst)

    @staticmethod
    def _same_pair(peer: tuple[bytes, bytes], src: bytes, dst: bytes) -> bool:
        """The slow path of the address check, after the byte comparison
        failed: the same addresses in the other form (an IPv4 peer reported as
        ``::ffff:a.b.c.d`` by a dual-stack socket), or sent to the sgid's own
        address (a same-daemon peer, when the sgid has no socket)."""
        if len(src) == 16 and src[:12] == _V4_MAPPED:
            src = src[12:]
        if len(dst) == 16 and dst[:12] == _V4_MAPPED:
            dst = dst[12:]
        return src == peer[0] and (dst == peer[1] or dst == peer[2])

    @staticmethod
    def _grh(src: bytes, dst: bytes, udp_payload_len: int) -> bytes:
        """The 40-byte network header a UD receive buffer starts with (rxe's
        layout: IPv4 in the last 20 bytes, IPv6 in all 40)."""
        if len(src) == 4:
            return bytes(20) + ipv4_header(src, dst, udp_payload_len)
        return ipv6_header(src, dst, udp_payload_len)

    # -- the sockets
    def receive(self, sock: RoceSocket, now: float) -> None:
        """``sock`` is readable: what it holds, through the demux (with the
        CE marks it saw)."""
        pkts = sock.recv(segments=True)
        self.receive_batch(pkts, sock.ip_bytes, sock.port, now, sock.ce)

    def drain(self, now: float, devices_by_ip: dict | None = None) -> None:
        """Receive from every socket until it is empty (``DRAIN_BATCHES``
        receive passes at most: a peer sending without pause cannot hold
        us here), sending what each pass produced (the ACKs for the peer's
        data) before reading the next, when ``devices_by_ip`` is given."""
        for sock in self.sockets:
            for _ in range(DRAIN_BATCHES):
                self.receive(sock, now)
                if devices_by_ip is not None and self.tx:
                    self.route(devices_by_ip, now)
                if sock.rx_empty:
                    break

    def close_sockets(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []


def _addr_bytes(gid: bytes) -> bytes:
    """The address a RoCEv2 GID stands for, as packed bytes (IPv4-mapped:
    the 4 IPv4 bytes, as a socket reports an IPv4 source)."""
    gid = bytes(gid)
    return gid[12:] if gid[:12] == _V4_MAPPED else gid


__all__ = ["RocePort", "DRAIN_BATCHES"]
