"""One IPoIB interface (RFC 4391): ``ib0`` on an IB port, or a P_Key
child ``ib0.8001`` -- the kernel's ipoib_dev_priv.  This module is its
datagram mode and what both modes share; connected mode (RFC 4755,
``mode`` "connected": unicast IP over an RC connection per neighbour, MTU
65520) is ``device.ipoib_cm``'s, reached from ``_path_send``.

The interface owns a UD endpoint on its port: a QPN of the device's space
(``IbPort.ulp_qps``: the port hands it the packets to that QPN), its
P_Key, and the Q_Key of its partition's broadcast group.  Its 20-byte
hardware address is that QPN and the port GID (``wire.ipoib.hw_addr``).

Port Active (and the P_Key in the port's table): the broadcast group
``ff12:401b:<pkey>::ffff:ffff`` is joined through the SA (MCMemberRecord
Set, ``device.ipoib_sa``); its record gives the Q_Key and the MTU (the
interface MTU is the group's IB MTU less the 4-byte header: 2044 for
2048), and the carrier goes on.  The port leaving Active, or the SM, our
LID or the P_Key table changing, or the SM asking for a client
reregistration (IBV_EVENT_CLIENT_REREGISTER: a new master SM knows no
member), flushes paths and groups and starts over, as the kernel's
ipoib_event does.

Transmit: a datagram the kernel routed out of the TUN device
(``device.ipoib_tun``) goes, with the 4-byte IPoIB header, in one UD SEND
(in connected mode, a unicast one to a neighbour with the RC flag in one
RC SEND of its connection; one longer than its path's MTU is answered
with an ICMP "fragmentation needed" / "packet too big"):
* IPv4 multicast, the limited or a subnet's broadcast, IPv6 multicast: to
  the group's MLID with a GRH to its MGID (``wire.ipoib.ipv4_mgid`` /
  ``ipv6_mgid``), after a join (created with the broadcast group's Q_Key,
  MTU, rate, SL, as ipoib does);
* unicast: the destination IP's neighbour (``device.ipoib_neigh``) gives
  the IPoIB address -- learnt from ARP (hardware type 32, over the
  broadcast group) or from IPv6 neighbour discovery (to the target's
  solicited-node group) -- and its GID's SA PathRecord the DLID and SL.
  Until both are known the datagrams wait (three at most).
Receive: a UD SEND to our QPN (or to a group we are attached to) with our
P_Key and Q_Key: IP datagrams into the TUN device; ARP and neighbour
discovery answered and learnt here (the TUN device has no link layer: the
kernel does neither on it).
"""

from __future__ import annotations

import ipaddress
import time

from ..transport.wr import AddressVector
from ..wire import ipoib as w
from ..wire.errors import WireError
from ..wire.lrh import MCAST_LID_BASE
from ..wire.opcodes import Opcode
from ..wire.packet import build
from .ipoib_cm import CM_COUNTERS, IpoibCm
from .ipoib_tun import ip_memberships
from .ipoib_neigh import (FAILED, FAILED_HOLD_S, INCOMPLETE, REACHABLE, SOLICIT_INTERVAL_S, SOLICIT_TRIES, STALE,
                          NeighTable)

UD = 4                                     # IBV_QPT_UD: what a multicast attach asks of a QP
UD_SEND_ONLY = int(Opcode.UD_SEND_ONLY)
MCAST_QPN = 0xFFFFFF
IB_MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
JOIN_RETRY_S = 1.0
MEMBERSHIP_POLL_S = 1.0
PATH_RECHECK_S = 1.0                       # a path re-asked at most this often for a mismatched SLID
COUNTERS = ("tx_packets", "tx_bytes", "rx_packets", "rx_bytes", "tx_multicast", "rx_multicast", "arp_tx", "arp_rx",
            "nd_tx", "nd_rx", "path_queries", "path_failures", "mcast_joins", "mcast_join_failures",
            "rx_drop_qkey", "rx_drop_pkey", "rx_drop_other", "tx_drop_no_carrier", "tx_drop_unresolved",
            "tx_drop_other", "path_stale") + CM_COUNTERS
ALL_NODES = bytes.fromhex("ff020000000000000000000000000001")


def _is_nd(d) -> bool:
    """An IPv6 datagram that is a neighbour solicitation or advertisement."""
    return len(d) >= 41 and d[6] == w.ICMPV6 and d[40] in (w.ND_NS, w.ND_NA)


class Group:
    __slots__ = ("mgid", "mlid", "record", "tid", "queue", "member", "attached", "retry_at", "av")

    def __init__(self, mgid: bytes, member: bool):
        self.mgid = mgid
        self.mlid = 0
        self.record: dict | None = None
        self.tid: int | None = None
        self.queue: list = []
        self.member = member                  # a full member that receives (else only sends)
        self.attached = False
        self.retry_at = 0.0
        self.av: AddressVector | None = None


class IpoibIf:
    """One IPoIB interface (see the module docstring)."""

    qp_type = UD
    tx_runs = None                         # not a transport QP: the port never asks it for SegmentRuns

    def __init__(self, dev, sa, tun, pkey: int, parent: "IpoibIf | None" = None):
        self.dev = dev
        self.sa = sa
        self.tun = tun
        self.name = tun.name
        self.pkey = pkey | 0x8000
        self.parent = parent
        self.qp_num = dev.hca.alloc_qpn()       # (``dev``: the IB port; ``dev.hca`` its device)
        dev.ulp_qps[self.qp_num] = self
        self.qkey = w.IPOIB_QKEY_DEFAULT
        self.psn = 0
        self.umcast = 0
        self.table = NeighTable()
        self.groups: dict[bytes, Group] = {}
        self.bcast: Group | None = None
        self.bcast_mgid = w.broadcast_mgid(self.pkey)
        self.cnt = dict.fromkeys(COUNTERS, 0)
        self.addrs4: list[tuple[bytes, int]] = []
        self.addrs6: list[tuple[bytes, int]] = []
        self.bcast4: set[bytes] = {b"\xff\xff\xff\xff"}
        self.next_poll = 0.0
        self.memberships: set[bytes] = set()     # MGIDs of the interface's IP multicast groups
        self.waiters: dict[bytes, list] = {}     # IP -> rdma_cm's address resolutions waiting for it
        self.up = False
        self.mode = "datagram"                   # or "connected" (``set_mode``)
        self.ud_mtu = w.ud_mtu(2048)             # the broadcast group's IB MTU less the header
        self.cm = IpoibCm(self)                  # connected mode (RFC 4755)

    # -- identity
    @property
    def port_gid(self) -> bytes:
        return self.dev.gid(0) or bytes(16)

    @property
    def hw(self) -> bytes:
        # the RC flag in either mode, as ipoib_cm_dev_init sets it: every interface listens for connections
        return w.hw_addr(self.qp_num, self.port_gid, w.IPOIB_FLAG_CM)

    @property
    def broadcast_hw(self) -> bytes:
        return w.hw_addr(MCAST_QPN, self.bcast_mgid)

    def pkey_index(self) -> int | None:
        for i, k in enumerate(self.dev.pkeys):
            if k & 0x7FFF == self.pkey & 0x7FFF and k & 0x7FFF:
                return i
        return None

    # -- addresses (from rtnetlink, ``refresh_addresses``)
    def set_addresses(self, v4: list[tuple[bytes, int]], v6: list[tuple[bytes, int]]) -> None:
        self.addrs4, self.addrs6 = v4, v6
        b = {b"\xff\xff\xff\xff"}
        for a, plen in v4:
            if plen < 31:
                net = ipaddress.IPv4Network((a, plen), strict=False)
                b.add(net.broadcast_address.packed)
        self.bcast4 = b

    def source_for(self, dst: bytes, src: bytes | None) -> bytes | None:
        """Our address to reach on-link ``dst`` from (``src`` if it is ours
        and on the same subnet), or None when ``dst`` is not on-link here."""
        addrs = self.addrs4 if len(dst) == 4 else self.addrs6
        net = ipaddress.IPv4Network if len(dst) == 4 else ipaddress.IPv6Network
        d = ipaddress.ip_address(dst)
        for a, plen in addrs:
            if (src is None or a == src) and d in net((a, plen), strict=False):
                return a
        return None

    def solicit_for(self, ip: bytes, waiter, now: float) -> None:
        """Resolve ``ip`` with nothing to send yet (rdma_cm's address
        resolution): ``waiter(hardware address or None)`` when answered or given up."""
        n = self.table.neigh(ip)
        if n.hw is not None and n.state in (REACHABLE, STALE):
            waiter(n.hw)
            return
        self.waiters.setdefault(ip, []).append(waiter)
        if n.state == FAILED:
            n.state, n.tries = INCOMPLETE, 0
        if n.tries == 0 or now >= n.next_try:
            self._solicit(n, now)

    def _answer_waiters(self, ip: bytes, hw: bytes | None) -> None:
        for w_ in self.waiters.pop(ip, ()):
            w_(hw)

    def _src4(self, dst: bytes) -> bytes | None:
        for a, plen in self.addrs4:
            if ipaddress.IPv4Address(dst) in ipaddress.IPv4Network((a, plen), strict=False):
                return a
        return self.addrs4[0][0] if self.addrs4 else None

    def _src6(self, dst: bytes) -> bytes | None:
        for a, plen in self.addrs6:
            if ipaddress.IPv6Address(dst) in ipaddress.IPv6Network((a, plen), strict=False):
                return a
        return self.addrs6[0][0] if self.addrs6 else None

    # -- the port's state
    def port_up(self, now: float) -> None:
        """The port is Active (or changed under us): join the broadcast group again."""
        self.flush()
        if self.dev.state != 4 or self.pkey_index() is None or not self.dev.sm_lid:
            return
        self.up = True
        self.cm.listen()
        self.bcast = self._group(self.bcast_mgid, True)
        self._join(self.bcast, now)

    def port_down(self) -> None:
        self.flush()

    def set_mode(self, mode: str) -> None:
        """ipoib_set_mode: connected mode raises the MTU to IPOIB_CM_MTU
        (65520), datagram mode takes it back to the broadcast group's; the
        TX connections end either way (the kernel flushes the paths)."""
        if mode == self.mode:
            return
        self.mode = mode
        self.cm.flush_tx()
        if mode == "connected":
            self.tun.set_mtu(w.IPOIB_CM_MTU)
        else:
            self.tun.set_mtu(min(self.ud_mtu, self.tun.mtu))

    def flush(self) -> None:
        """Carrier off; groups left (the SM forgets them with the port), paths asked again."""
        self.up = False
        self.tun.set_carrier(False)
        for g in self.groups.values():
            if g.tid is not None:
                self.sa.cancel(g.tid)
            self._detach(g)
        self.groups.clear()
        self.memberships = set()
        for ip in list(self.waiters):
            self._answer_waiters(ip, None)
        self.bcast = None
        for p in self.table.paths.values():
            if p.tid is not None:
                self.sa.cancel(p.tid)
        self.table.flush_paths()
        self.cm.flush_tx()

    def close(self) -> None:
        self.flush()
        self.cm.close()
        self.dev.ulp_qps.pop(self.qp_num, None)
        self.tun.close()

    # -- multicast groups
    def _group(self, mgid: bytes, member: bool) -> Group:
        g = self.groups.get(mgid)
        if g is None:
            g = self.groups[mgid] = Group(mgid, member)
        elif member and not g.member:
            g.member = True
            if g.mlid:
                self._attach(g)
        return g

    def _join(self, g: Group, now: float) -> None:
        b = self.bcast
        create = None
        if g is not b:
            if b is None or b.record is None:
                return
            r = b.record
            create = {k: r[k] for k in ("QKey", "TClass", "SL", "FlowLabel", "Mtu", "Rate", "HopLimit")}
            create.update(MtuSelector=2, RateSelector=2)
        g.retry_at = now + JOIN_RETRY_S

        def done(status, rec, g=g):
            g.tid = None
            if self.groups.get(g.mgid) is not g:
                return
            if status != 0 or rec is None:
                self.cnt["mcast_join_failures"] += 1
                self.table.dropped += len(g.queue)
                g.queue.clear()
                g.retry_at = time.monotonic() + JOIN_RETRY_S
                return
            self.cnt["mcast_joins"] += 1
            self._joined(g, rec)
        g.tid = self.sa.join(g.mgid, self.port_gid, self.pkey, create, done)

    def _joined(self, g: Group, rec: dict) -> None:
        g.record = rec
        g.mlid = rec["MLID"]
        g.av = AddressVector(dgid=g.mgid, dlid=g.mlid, sl=rec["SL"], is_global=True, sgid_index=0,
                             hop_limit=rec["HopLimit"] or 1, traffic_class=rec["TClass"], flow_label=rec["FlowLabel"])
        if g.member:
            self._attach(g)
        if g is self.bcast:
            self.qkey = rec["QKey"]
            mtu = min(IB_MTU_BYTES.get(rec["Mtu"], 2048), IB_MTU_BYTES.get(self.dev.active_mtu, 2048))
            self.ud_mtu = w.ud_mtu(mtu)
            if self.mode == "datagram" and self.tun.mtu != self.ud_mtu:
                self.tun.set_mtu(self.ud_mtu)       # (connected mode keeps its MTU, as ipoib_mcast_join_finish)
            self.tun.set_carrier(True)
            now = time.monotonic()
            self.next_poll = 0.0
            self.poll_memberships(now)
        q, g.queue = g.queue, []
        for etype, d in q:
            self._send(g.av, MCAST_QPN, etype, d, mcast=True)

    def _attach(self, g: Group) -> None:
        if not g.attached and g.mlid >= MCAST_LID_BASE:
            self.dev.hca.mcast.attach(self, g.mgid, g.mlid)
            g.attached = True

    def _detach(self, g: Group) -> None:
        if g.attached:
            try:
                self.dev.hca.mcast.detach(self, g.mgid, g.mlid)
            except Exception:                # noqa: BLE001 -- already gone with the device's groups
                pass
            g.attached = False

    def wanted_groups(self, proc_v4: set[bytes], proc_v6: set[bytes]) -> set[bytes]:
        """The MGIDs this interface must be a member of: its IP multicast
        memberships (``/proc/net/igmp``, ``igmp6``), the IPv6 all-nodes
        group and each address's solicited-node group."""
        out = {w.ipv4_mgid(g, self.pkey) for g in proc_v4}
        six = set(proc_v6)
        if self.addrs6:
            six.add(ALL_NODES)
        six.update(w.solicited_node(a) for a, _ in self.addrs6)
        out.update(w.ipv6_mgid(g, self.pkey) for g in six)
        out.discard(self.bcast_mgid)
        return out

    def poll_memberships(self, now: float, proc_v4: set[bytes] | None = None,
                         proc_v6: set[bytes] | None = None) -> None:
        if self.bcast is None or self.bcast.record is None:
            return
        if proc_v4 is None:
            proc_v4, proc_v6 = ip_memberships(self.tun.name)
        want = self.wanted_groups(proc_v4, proc_v6)
        for mgid in want - self.memberships:
            g = self._group(mgid, True)
            if g.tid is None and not g.mlid:
                self._join(g, now)
        for mgid in self.memberships - want:
            g = self.groups.get(mgid)
            if g is not None and g.member:
                self._detach(g)
                g.member = False
                self.sa.leave(mgid, self.port_gid)
                del self.groups[mgid]
        self.memberships = want

    # -- timers
    @property
    def deadline(self) -> float | None:
        if not self.dev.state == 4:
            return None
        d = self.next_poll if self.up else None
        for g in self.groups.values():
            if not g.mlid and g.tid is None and (d is None or g.retry_at < d):
                d = g.retry_at
        for n in self.table.neighs.values():
            if n.state == INCOMPLETE and (n.queue or n.ip in self.waiters) and (d is None or n.next_try < d):
                d = n.next_try
        return d

    def tick(self, now: float) -> None:
        if not self.up:
            return
        for g in list(self.groups.values()):
            if not g.mlid and g.tid is None and now >= g.retry_at:
                if g is self.bcast or g.member:
                    self._join(g, now)
                else:
                    del self.groups[g.mgid]
        for n in list(self.table.neighs.values()):
            if n.state == INCOMPLETE and now >= n.next_try:
                if not n.queue and n.ip not in self.waiters:
                    continue
                if n.tries >= SOLICIT_TRIES:
                    self._answer_waiters(n.ip, None)
                    n.state = FAILED
                    n.next_try = now + FAILED_HOLD_S
                    self.table.dropped += len(n.queue)
                    self.cnt["tx_drop_unresolved"] += len(n.queue)
                    n.queue.clear()
                else:
                    self._solicit(n, now)
        if now >= self.next_poll:
            self.next_poll = now + MEMBERSHIP_POLL_S
            self.poll_memberships(now)

    # -- transmit
    def transmit(self, datagrams, now: float) -> None:
        """Datagrams the kernel routed out of the TUN device."""
        c = self.cnt
        if not self.up or self.bcast is None or self.bcast.record is None:
            c["tx_drop_no_carrier"] += len(datagrams)
            return
        for d in datagrams:
            if len(d) < 20:
                c["tx_drop_other"] += 1
                continue
            v = d[0] >> 4
            if v == 4:
                dst = d[16:20]
                if 224 <= dst[0] < 240 or dst in self.bcast4:
                    self._mcast(w.ipv4_mgid(dst, self.pkey) if dst not in self.bcast4 else self.bcast_mgid,
                                w.ETH_P_IP, d, now)
                else:
                    self._unicast(dst, w.ETH_P_IP, d, now)
            elif v == 6 and len(d) >= 40:
                dst = d[24:40]
                if dst[0] == 0xFF:
                    self._mcast(w.ipv6_mgid(dst, self.pkey), w.ETH_P_IPV6, d, now)
                else:
                    self._unicast(dst, w.ETH_P_IPV6, d, now)
            else:
                c["tx_drop_other"] += 1

    def _mcast(self, mgid: bytes, etype: int, d, now: float) -> None:
        g = self.groups.get(mgid)
        if g is not None and g.av is not None:
            self._send(g.av, MCAST_QPN, etype, d, mcast=True)
            return
        if g is None:
            g = self._group(mgid, False)          # a send-only use: joined, not attached
        self.table.enqueue(g.queue, (etype, bytes(d)))
        if g.tid is None:
            self._join(g, now)

    def _unicast(self, ip: bytes, etype: int, d, now: float) -> None:
        n = self.table.neighs.get(ip)
        if n is not None and n.hw is not None and n.state in (REACHABLE, STALE):
            self._path_send(n.hw, etype, d, now, True)
            return
        n = self.table.neigh(ip)
        if n.state == FAILED:
            if now < n.next_try:
                self.table.dropped += 1
                self.cnt["tx_drop_unresolved"] += 1
                return
            n.state, n.tries = INCOMPLETE, 0
        self.table.enqueue(n.queue, (etype, bytes(d)))
        if n.tries == 0:
            self._solicit(n, now)

    def _solicit(self, n, now: float) -> None:
        """An ARP request (IPv4) to the broadcast group, or a neighbour
        solicitation to the target's solicited-node group."""
        n.tries += 1
        n.next_try = now + SOLICIT_INTERVAL_S
        if n.family == 4:
            src = self._src4(n.ip)
            if src is None:
                return
            self.cnt["arp_tx"] += 1
            self._mcast(self.bcast_mgid, w.ETH_P_ARP,
                        w.build_arp(w.ARPOP_REQUEST, self.hw, src, bytes(20), n.ip), now)
        else:
            src = self._src6(n.ip)
            if src is None:
                return
            self.cnt["nd_tx"] += 1
            ns = w.build_ns(src, n.ip, self.hw)
            self._mcast(w.ipv6_mgid(ns[24:40], self.pkey), w.ETH_P_IPV6, ns, now)

    def _path_send(self, hw: bytes, etype: int, d, now: float, tun: bool = False) -> None:
        """``d`` to neighbour ``hw``: in connected mode a datagram from the
        TUN device over the neighbour's RC connection (``device.ipoib_cm``)
        when it can; else a UD SEND on the SA path to its GID."""
        if tun and self.mode == "connected" and self.cm.send(hw, etype, d, now):
            return
        _, qpn, gid = w.parse_hw_addr(hw)
        p = self.table.path(gid)
        if p.av is not None:
            self._send(p.av, qpn, etype, d)
            return
        self.table.enqueue(p.queue, (hw, etype, bytes(d), tun))
        if p.tid is None:
            self.cnt["path_queries"] += 1

            def done(status, rec, p=p):
                p.tid = None
                if self.table.paths.get(p.gid) is not p:
                    return
                if status != 0 or rec is None:
                    self.cnt["path_failures"] += 1
                    self.table.dropped += len(p.queue)
                    p.queue.clear()
                    return
                p.record = rec
                p.valid = True
                p.av = AddressVector(dlid=rec["DLID"], sl=rec["SL"], is_global=False)
                q, p.queue = p.queue, []
                for hw_, et, data, tun_ in q:
                    self._path_send(hw_, et, data, time.monotonic(), tun_)
            p.tid = self.sa.path_record(self.port_gid, gid, self.pkey, done)

    def _send(self, av: AddressVector, dqpn: int, etype: int, d, mcast: bool = False) -> None:
        if len(d) > self.ud_mtu:                      # (connected mode's MTU, on UD: ipoib_send)
            self.too_big(d, self.ud_mtu)
            return
        payload = w.IPOIB_HDR.pack(etype, 0) + bytes(d)
        pkt = build(UD_SEND_ONLY, dqpn, self.psn, payload, pkey=self.pkey, deth=(self.qkey, self.qp_num))
        self.psn = (self.psn + 1) & 0xFFFFFF
        c = self.cnt
        c["tx_packets"] += 1
        c["tx_bytes"] += len(d)
        if mcast:
            c["tx_multicast"] += 1
        self.dev.tx.append((self, pkt, av))

    # -- receive
    def receive(self, pkt, now: float, src) -> None:
        """A packet the port took for our QPN or a group we are attached to
        (BTH .. pad, framing checked); ``src``: the port's LinkSource."""
        c = self.cnt
        if len(pkt) < 24 or pkt[0] != UD_SEND_ONLY:
            c["rx_drop_other"] += 1
            return
        if ((pkt[2] << 8 | pkt[3]) ^ self.pkey) & 0x7FFF:
            c["rx_drop_pkey"] += 1
            return
        if int.from_bytes(pkt[12:16], "big") != self.qkey:
            c["rx_drop_qkey"] += 1
            return
        sqpn = int.from_bytes(pkt[17:20], "big")
        mcast = (pkt[5] << 16 | pkt[6] << 8 | pkt[7]) == MCAST_QPN
        if mcast and sqpn == self.qp_num and src.slid == self.dev.lid:
            return                                    # our own, back from the group
        end = len(pkt) - ((pkt[1] >> 4) & 3)
        try:
            etype, d = w.decap(memoryview(pkt)[20:end])
        except WireError:
            c["rx_drop_other"] += 1
            return
        c["rx_packets"] += 1
        c["rx_bytes"] += len(d)
        if mcast:
            c["rx_multicast"] += 1
        elif etype == w.ETH_P_IPV6 and not _is_nd(d):
            self._check_path(d[8:24], src, now)
        elif etype == w.ETH_P_IP and len(d) >= 20:
            self._check_path(d[12:16], src, now)
        self.deliver(etype, d, now)

    def deliver(self, etype: int, d, now: float) -> None:
        """A datagram received, on UD or an RC connection (``device.ipoib_cm``):
        ARP and neighbour discovery answered and learnt, IP into the TUN device."""
        if etype == w.ETH_P_ARP:
            self._arp(d, now)
        elif etype == w.ETH_P_IPV6 and _is_nd(d):
            self._nd(d, now)
        elif etype in (w.ETH_P_IP, w.ETH_P_IPV6):
            self.tun.write(d)
        else:
            self.cnt["rx_drop_other"] += 1

    def too_big(self, d, mtu: int) -> None:
        """``d`` does not fit the path it takes: dropped, and the sender told
        the MTU (ipoib_cm_skb_too_long: ICMP fragmentation needed / packet too big)."""
        self.cnt["tx_too_big"] += 1
        icmp = w.build_too_big(d, mtu)
        if icmp is not None:
            self.tun.write(icmp)

    def _check_path(self, ip, src, now: float) -> None:
        """A unicast datagram from a neighbour whose path we hold with
        another DLID than the packet's SLID: the neighbour's LID moved (an
        SM change we were not told of) -- ask the SA again."""
        n = self.table.neighs.get(bytes(ip))
        if n is None or n.hw is None:
            return
        p = self.table.paths.get(n.hw[4:])
        if p is None or p.av is None or p.av.dlid == src.slid or now < p.recheck_at:
            return
        p.recheck_at = now + PATH_RECHECK_S
        p.av = None
        p.valid = False
        self.cnt["path_stale"] += 1

    def _arp(self, d, now: float) -> None:
        try:
            a = w.parse_arp(d)
        except WireError:
            self.cnt["rx_drop_other"] += 1
            return
        self.cnt["arp_rx"] += 1
        mine = any(a.tpa == x for x, _ in self.addrs4)
        if a.spa != bytes(4) and (mine or a.spa in self.table.neighs):
            self._learnt(self.table.learn(a.spa, a.sha), now)
        if a.op == w.ARPOP_REQUEST and mine:
            self.cnt["arp_tx"] += 1
            self._path_send(a.sha, w.ETH_P_ARP, w.build_arp(w.ARPOP_REPLY, self.hw, a.tpa, a.sha, a.spa), now)

    def _nd(self, d, now: float) -> None:
        got = w.parse_nd(d)
        if got is None:
            self.cnt["rx_drop_other"] += 1
            return
        self.cnt["nd_rx"] += 1
        kind, src, _dst, target, ll = got
        if kind == w.ND_NS:
            mine = any(target == x for x, _ in self.addrs6)
            if ll is not None and src != bytes(16):
                self._learnt(self.table.learn(src, ll), now)
                if mine:
                    self.cnt["nd_tx"] += 1
                    self._path_send(ll, w.ETH_P_IPV6, w.build_na(target, src, target, self.hw), now)
        elif ll is not None:
            self._learnt(self.table.learn(target, ll), now)

    def _learnt(self, n, now: float) -> None:
        if n.ip in self.waiters:
            self._answer_waiters(n.ip, n.hw)
        q, n.queue = n.queue, []
        for etype, d in q:
            self._path_send(n.hw, etype, d, now, True)

    # -- views
    def neighbours(self) -> list[dict]:
        out = []
        for r in self.table.rows():
            ip = r["ip"]
            out.append({"dst": str(ipaddress.ip_address(ip)), "lladdr": w.format_hw_addr(r["hw"]) if r["hw"] else None,
                        "state": r["state"]})
        return out

    def info(self) -> dict:
        return {"ifname": self.name, "ifindex": self.tun.index, "device": self.dev.name, "port": self.dev.num,
                "parent": self.parent.name if self.parent else None, "pkey": self.pkey, "mode": self.mode,
                "umcast": self.umcast, "qpn": self.qp_num, "qkey": self.qkey, "mtu": self.tun.mtu,
                "carrier": bool(self.tun.carrier), "address": w.format_hw_addr(self.hw),
                "broadcast": w.format_hw_addr(self.broadcast_hw),
                "groups": {str(ipaddress.IPv6Address(g.mgid)): g.mlid
                           for g in self.groups.values()},
                "paths": {str(ipaddress.IPv6Address(p.gid)): {"dlid": p.record["DLID"], "sl": p.record["SL"]}
                          for p in self.table.paths.values() if p.record},
                "connections": self.cm.connections(),
                "counters": dict(self.cnt, tx_dropped_queue=self.table.dropped)}


__all__ = ["IpoibIf", "COUNTERS"]
