"""One port: receive demux and transmit routing (rxe_recv.c, rxe_net.c).

Sans-IO: the port never opens, reads or writes anything and never reads a
clock; the link below it hands packets up and takes them down.

Receive (rxe_rcv).  Every packet the link delivers -- from a socket
(``receive_batch``), from another port of the same daemon (``deliver``),
from the simulator's wire -- passes the same steps: the header check
(``wire.packet.rx_check``, which also gives the DestQP), the DestQP lookup
in ``qps``, QP1 to the GSI (``gsi``), an unknown QP dropped and counted,
the address check (rxe check_addr: a connected QP takes packets only from
its peer, ``_peer``), the port's counters, then the QP.  A multicast packet
(DestQP 0xFFFFFF, rxe_rcv_mcast_pkt) goes to every QP attached to its group
address (``deliver_mcast``, over ``mcast_qps``).

Transmit (rxe_net.c).  ``route`` sends what the QPs put in ``tx``: each
packet along the ``Route`` of its address vector, resolved once per
(destination GID, source GID index) and cached in ``route_cache``: to a port
of the same daemon (``Route.peer``: no wire, no ICRC), to every member of a
multicast group (``Route.group``) and the wire, or out of the link
(``Route.sock``: packets to one destination leave as one burst).  The
packets a same-daemon delivery makes the peer emit (ACKs, read responses)
are routed before ``route`` returns, so one call leaves every port empty.
``faults`` (``transport.faults``), when set, decides each packet's fate on
the way out; ``tap`` (a capture), when set, sees every packet.

The link.  What depends on the link layer -- its addresses, its headers,
how a packet leaves -- is the subclass's: ``_resolve`` (an address vector
to a ``Route``), ``_peer`` / ``_same_pair`` (check_addr's operands),
``_grh`` (the 40 bytes a UD receive buffer starts with), ``_send`` and
``_send_burst``.  RoCEv2 over UDP is ``device.roce.RocePort``; the
simulator's is ``sim.network.SimPort``; an InfiniBand link (LRH, LIDs,
VCRC, forwarding through a fabric) is another subclass beside them.
"""

from __future__ import annotations

from ..wire.errors import WireError
from ..wire.fastpath import SegmentRun, Segments
from ..wire.headers import bth_dqpn
from . import dcqcn
from ..wire.packet import rx_check
from .counters import Counter, PortCounter, new_port_counters
from .faults import Faults, FaultSettings

# capture directions (the capture record's direction bits)
RX = 1
TX = 2
UD = 4                               # IBV_QPT_UD
MCAST_QPN = 0xFFFFFF                 # IB_MULTICAST_QPN
ICRC_LEN = 4                         # counted in the port's byte counts, as rxe's PMA does
BAD_ADDR = int(Counter.dropped_bad_addr)
TX_PACKETS = int(PortCounter.tx_packets)
TX_BYTES = int(PortCounter.tx_bytes)
RX_PACKETS = int(PortCounter.rx_packets)
RX_BYTES = int(PortCounter.rx_bytes)
MC_XMIT = int(PortCounter.multicast_xmit_packets)
MC_RCV = int(PortCounter.multicast_rcv_packets)
DROP_ICRC = int(PortCounter.rx_dropped_icrc)
DROP_WIRE = int(PortCounter.rx_dropped_wire)
DROP_QPN = int(PortCounter.rx_dropped_unknown_qpn)
QP_ERRORS = int(PortCounter.qp_internal_errors)
MAX_FAILURES = 16                    # exceptions kept for the daemon to log (``failures``)


def route_key(av) -> tuple:
    """What a route is cached under (``Port.route_cache``): the destination,
    the source GID and the traffic class (the TOS differs by it)."""
    return (av.dgid, av.sgid_index, av.traffic_class)


class PortQP:
    """A QP as the port sees it: the transport QP and the address-check
    cache (``peer``: the (source, destination) address bytes its packets
    must carry, worked out for the AV object ``peer_av``; None: no check)."""

    __slots__ = ("qp", "peer_av", "peer")

    def __init__(self, qp):
        self.qp = qp
        self.peer_av = None
        self.peer = None


class Route:
    """Where the packets of one address vector go (built once per
    destination, not per packet).

    ``peer``: a port of the same daemon that takes them directly;
    ``group``: the ports a multicast packet is delivered to (with
    ``sock``: the wire too); ``sock``: the link handle they leave by
    (RoCEv2: the UDP socket; None with no peer and no group: nowhere);
    ``dst_ip``: the destination as the link handle takes it; ``src``,
    ``dst``: the address bytes (check_addr, the GRH, a capture); ``sport``,
    ``dport``: the ports a capture records; ``burst``: the key packets to
    one destination are gathered under; ``tos``: the IP TOS byte its
    packets leave with (``dcqcn.CongestionControl.tos``)."""

    __slots__ = ("peer", "group", "sock", "dst_ip", "src", "dst", "sport", "dport", "burst", "runs", "tos")

    def __init__(self, peer, group, sock, dst_ip, src: bytes, dst: bytes, sport: int, dport: int):
        self.peer = peer
        self.group = group
        self.sock = sock
        self.dst_ip = dst_ip
        self.src = src
        self.dst = dst
        self.sport = sport
        self.dport = dport
        self.burst = (sock, dst_ip, 0)
        self.tos = 0
        # the link handle takes a SegmentRun whole (``takes_runs``)
        self.runs = peer is None and group is None and getattr(sock, "takes_runs", False)


class Port:
    """Receive demux and transmit routing for one port (see the module
    docstring); the link is the subclass's."""

    rx_port = 0                              # the transport port a capture records for ``deliver``

    def __init__(self):
        self.qps: dict = {}                  # qp_num -> PortQP (or a subclass: the device's DevQP)
        self.mcast_qps: dict = {}            # group address bytes -> the QPs attached to it
        self.tx: list = []                   # (qp, packet, av): what the QPs emit
        self.cnt = new_port_counters()       # ``PortCounter``
        self.route_cache: dict = {}          # (dgid, sgid_index) -> Route
        self.faults: Faults | None = None
        self.tap = None                      # a capture's Tap while one is open
        self.gsi = None                      # QP1's consumer: .receive(pkt, src, dst, now)
        self.routing = False                 # in ``route`` (a same-daemon peer leaves our output to us)
        self.cc = dcqcn.DEFAULT              # the device's ECN settings (TOS, the CE marks' CNPs)
        self.failures: list = []             # (QPN, exception) of ``qp_failed``, for the daemon's log
        # why this port's output is dropped before the link (an SR-IOV VF
        # failing its spoof check, or held down by its policy), else None;
        # and how many packets that dropped
        self.tx_blocked: str | None = None
        self.tx_blocked_drops = 0
        self.rx_blocked = False              # a port held down: same-daemon peers' packets do not reach it

    # -- the link (subclasses)
    def _resolve(self, av, peers) -> Route:
        raise NotImplementedError

    def _peer(self, entry) -> tuple[bytes, bytes] | None:
        """Work out ``entry.peer`` for the QP's current AV; None: no check."""
        entry.peer_av = entry.qp.av
        entry.peer = None
        return None

    def _same_pair(self, peer, src: bytes, dst: bytes) -> bool:
        """The address check's slow path, after the byte comparison failed."""
        return False

    def _grh(self, src: bytes, dst: bytes, nbytes: int) -> bytes:
        raise NotImplementedError

    def _send(self, r: Route, pkt, corrupt_bit) -> bool:
        raise NotImplementedError

    def _send_burst(self, sock, dst_ip, pkts: list, tos: int) -> tuple[int, int]:
        """Send ``pkts`` to one destination with IP TOS ``tos``; (packets,
        bytes) that left."""
        raise NotImplementedError

    # -- receive
    def receive_batch(self, datagrams, dst: bytes, dport: int, now: float, ce=()) -> None:
        """Packets the link received together (one recvmmsg): (packet,
        source address, source port) each, to address ``dst``.  The packets
        of one QP go to it as a batch (its ACKs coalesce).  ``ce``: the
        indexes of the entries that arrived CE-marked (the notification
        point's input, ``dcqcn.ce_marked``)."""
        if ce:
            self._ce_marked(datagrams, ce, now)
        batch: dict[int, list] = {}
        grhs: dict[int, list] = {}
        tap = self.tap
        qps = self.qps
        cnt = self.cnt
        grh = self._grh
        if tap is not None:                    # a capture sees every packet: no Segments whole
            datagrams = [(p, src, sport) for pkt, src, sport in datagrams
                         for p in (pkt.packets() if pkt.__class__ is Segments else (pkt,))]
        for pkt, src, sport in datagrams:
            if pkt.__class__ is Segments:
                # a checked GRO buffer for one QP (``fastpath.verify_segments``)
                dqpn = pkt.dqpn
                e = qps.get(dqpn)
                if e is None:
                    for p in pkt.packets():
                        self._no_qp(dqpn, p, src, dst, now)
                    continue
                qp = e.qp
                peer = e.peer if e.peer_av is qp.av else self._peer(e)
                if peer is not None and (src != peer[0] or dst != peer[1]) and not self._same_pair(peer, src, dst):
                    qp.cnt[BAD_ADDR] += pkt.count
                    continue
                cnt[RX_PACKETS] += pkt.count
                cnt[RX_BYTES] += pkt.nbytes
                if qp.qp_type == UD:
                    ps = pkt.packets()
                    batch.setdefault(dqpn, []).extend(ps)
                    grhs.setdefault(dqpn, []).extend(grh(src, dst, len(p) + ICRC_LEN) for p in ps)
                else:
                    batch.setdefault(dqpn, []).append(pkt)
                continue
            if tap is not None:                # every packet that arrived whole, malformed ones too
                tap.packet(RX, bth_dqpn(pkt), src, dst, sport, dport, pkt)
            try:
                dqpn = rx_check(pkt)
            except WireError:
                cnt[DROP_WIRE] += 1
                continue
            e = qps.get(dqpn)
            if e is None:
                self._no_qp(dqpn, pkt, src, dst, now)
                continue
            qp = e.qp
            peer = e.peer if e.peer_av is qp.av else self._peer(e)
            if peer is not None and (src != peer[0] or dst != peer[1]) and not self._same_pair(peer, src, dst):
                qp.cnt[BAD_ADDR] += 1
                continue
            batch.setdefault(dqpn, []).append(pkt)
            cnt[RX_PACKETS] += 1
            cnt[RX_BYTES] += len(pkt) + ICRC_LEN
            if qp.qp_type == UD:           # only UD receive buffers get the GRH
                grhs.setdefault(dqpn, []).append(grh(src, dst, len(pkt) + ICRC_LEN))
        for dqpn, pkts in batch.items():
            e = qps.get(dqpn)
            if e is not None:
                try:
                    e.qp.receive_batch(pkts, now, grhs.get(dqpn))
                except Exception as exc:      # noqa: BLE001 -- ours, not the peer's: the QP fails, not the port
                    self.qp_failed(e.qp, exc)

    def _ce_marked(self, datagrams, ce, now: float) -> None:
        """The CE-marked entries of a batch, to their QPs' notification point."""
        qps = self.qps
        for i in ce:
            pkt = datagrams[i][0]
            if pkt.__class__ is Segments:
                dqpn, n = pkt.dqpn, pkt.count
            elif len(pkt) >= 12:
                dqpn, n = bth_dqpn(pkt), 1
            else:
                continue
            e = qps.get(dqpn)
            if e is not None:
                dcqcn.ce_marked(e.qp, n, now)

    def deliver(self, pkt, src: bytes, dst: bytes, now: float, sender=None) -> None:
        """One packet from ``sender`` (a port of the same daemon: no wire,
        no ICRC; or the simulator's wire, its ICRC checked)."""
        tap = self.tap
        if tap is not None and sender is not self:    # a packet to itself: captured once, as TX
            tap.packet(RX, bth_dqpn(pkt), src, dst, self.rx_port, self.rx_port, pkt)
        try:
            dqpn = rx_check(pkt)
        except WireError:
            self.cnt[DROP_WIRE] += 1
            return
        e = self.qps.get(dqpn)
        if e is None:
            self._no_qp(dqpn, pkt, src, dst, now)
            return
        qp = e.qp
        peer = e.peer if e.peer_av is qp.av else self._peer(e)
        if peer is not None and (src != peer[0] or dst != peer[1]) and not self._same_pair(peer, src, dst):
            qp.cnt[BAD_ADDR] += 1
            return
        cnt = self.cnt
        cnt[RX_PACKETS] += 1
        cnt[RX_BYTES] += len(pkt) + ICRC_LEN
        try:
            qp.receive(pkt, now, self._grh(src, dst, len(pkt) + ICRC_LEN) if qp.qp_type == UD else None)
        except Exception as exc:              # noqa: BLE001 -- see ``qp_failed``
            self.qp_failed(qp, exc)

    def qp_failed(self, qp, exc: Exception) -> None:
        """Processing for ``qp`` raised: a fault of softrdma's own (the
        wire checks stop what a peer may send, the verbs checks what an
        application may post).  The QP goes to ERR with IBV_EVENT_QP_FATAL,
        as a NIC's QP does on an internal error, its packets of that pass
        are dropped, and the port carries on; the exception is kept in
        ``failures`` for the daemon to log, and counted."""
        self.cnt[QP_ERRORS] += 1
        if len(self.failures) < MAX_FAILURES:
            self.failures.append((qp.qp_num, exc))
        try:
            qp.to_error()
        except Exception as exc2:             # noqa: BLE001 -- a QP too broken to flush: it stays as it is
            if len(self.failures) < MAX_FAILURES:
                self.failures.append((qp.qp_num, exc2))

    def _no_qp(self, dqpn: int, pkt, src: bytes, dst: bytes, now: float) -> None:
        """No QP of that number: QP1's MADs go to the GSI, the rest is dropped."""
        cnt = self.cnt
        if dqpn == 1 and self.gsi is not None:
            cnt[RX_PACKETS] += 1
            cnt[RX_BYTES] += len(pkt) + ICRC_LEN
            self.gsi.receive(pkt, src, dst, now)
        else:
            cnt[DROP_QPN] += 1

    def deliver_mcast(self, pkt, src: bytes, dst: bytes, now: float) -> None:
        """One packet to group address ``dst``: to every QP attached to it
        here (rxe_rcv_mcast_pkt).  Each QP checks the Q_Key itself."""
        qps = self.mcast_qps.get(dst)
        if not qps:
            return
        cnt = self.cnt
        try:
            dqpn = rx_check(pkt)
        except WireError:
            cnt[DROP_WIRE] += 1
            return
        if dqpn != MCAST_QPN:
            cnt[DROP_QPN] += 1
            return
        n = len(pkt) + ICRC_LEN
        cnt[RX_PACKETS] += 1
        cnt[RX_BYTES] += n
        cnt[MC_RCV] += 1
        grh = self._grh(src, dst, n)
        for qp in qps:
            try:
                qp.receive(pkt, now, grh)
            except Exception as exc:          # noqa: BLE001 -- see ``qp_failed``
                self.qp_failed(qp, exc)

    # -- transmit
    def route(self, peers, now: float) -> bool:
        """Send what the QPs produced; False if there was nothing.
        ``peers``: the ports of this daemon by address (``_resolve``'s
        business).  What a same-daemon delivery makes a peer emit is routed
        before returning (by the peer, or -- when the peer is in its own
        ``route`` further up -- by that loop)."""
        tx = self.tx
        if not tx or self.routing:
            return False
        if self.tx_blocked is not None:
            self.tx_blocked_drops += len(tx)
            tx.clear()
            return True
        self.routing = True
        cache = self.route_cache
        cnt = self.cnt
        try:
            while tx:
                items = tx[:]
                tx.clear()
                faults = self.faults
                tap = self.tap
                npkts = nbytes = 0
                bursts: dict = {}                      # (link handle, destination) -> packets, in order
                for i, (qp, pkt, av) in enumerate(items):
                    key = (av.dgid, av.sgid_index, av.traffic_class)       # (route_key, inline)
                    r = cache.get(key)
                    if r is None:
                        r = cache[key] = self._route(av, peers)
                    if pkt.__class__ is SegmentRun and not (r.runs and faults is None and tap is None):
                        # a capture, fault injection, or a route that changed:
                        # the run as packets, in its place, and no more runs
                        # (one that may go whole takes the socket's branch below)
                        qp.tx_runs = False
                        tx[:0] = [(qp, p, av) for p in pkt.packets()] + items[i + 1:]
                        break
                    if faults is not None:
                        for due, bit in faults.fate(now, len(pkt)):
                            if due > now:
                                faults.hold(due, (r, qp.qp_num, pkt, bit))
                            else:
                                self._transmit(r, qp.qp_num, pkt, bit, now)
                        continue
                    peer = r.peer
                    if peer is not None:
                        if tap is not None:
                            tap.packet(TX, qp.qp_num, r.src, r.dst, r.sport, r.dport, pkt)
                        peer.deliver(memoryview(pkt), r.src, r.dst, now, self)
                    elif r.group is not None:
                        if tap is not None:
                            tap.packet(TX, qp.qp_num, r.src, r.dst, r.sport, r.dport, pkt)
                        self._fan_out(r, pkt, now)
                    elif r.sock is None:
                        continue
                    else:
                        if tap is not None:
                            tap.packet(TX, qp.qp_num, r.src, r.dst, r.sport, r.dport, pkt)
                        elif r.runs and qp.tx_runs is False:      # (QP1's sender: None, never asks)
                            qp.enable_runs()
                        b = bursts.get(r.burst)
                        if b is None:
                            bursts[r.burst] = [pkt]
                        else:
                            b.append(pkt)
                        continue
                    npkts += 1
                    nbytes += len(pkt) + ICRC_LEN
                for (sock, dst_ip, tos), pkts in bursts.items():
                    n, b = self._send_burst(sock, dst_ip, pkts, tos)
                    npkts += n
                    nbytes += b
                cnt[TX_PACKETS] += npkts
                cnt[TX_BYTES] += nbytes
                self._route_peers(peers, now)
        finally:
            self.routing = False
        return True

    def _route(self, av, peers) -> Route:
        """The link's route for ``av``, with the TOS its packets get (a CNP's
        AV carries ``dcqcn.CNP_TCLASS``)."""
        r = self._resolve(av, peers)
        cc = self.cc
        tc = av.traffic_class
        r.tos = cc.cnp_tos() if tc & dcqcn.CNP_TCLASS else cc.tos(tc)
        r.burst = (r.sock, r.dst_ip, r.tos)
        return r

    def _route_peers(self, peers, now: float) -> None:
        """Route what our deliveries made the ports of this daemon emit."""
        if peers:
            for p in peers.values():
                if p.tx and not p.routing:
                    p.route(peers, now)

    def _fan_out(self, r: Route, pkt, now: float) -> None:
        """A multicast packet: to the attached QPs of every port of the
        group, and once to the wire (local members already have it)."""
        for p in r.group:
            p.deliver_mcast(pkt, r.src, r.dst, now)
        self.cnt[MC_XMIT] += 1
        if r.sock is not None:
            self._send(r, pkt, None)

    def _transmit(self, r: Route, qpn: int, pkt, corrupt_bit, now: float) -> None:
        """One packet of QP ``qpn`` through the fault path (delayed,
        duplicated, damaged)."""
        tap = self.tap
        peer = r.peer if r.peer is not None else r.group
        if tap is not None and (peer is not None or r.sock is not None):
            if corrupt_bit is None:
                tap.packet(TX, qpn, r.src, r.dst, r.sport, r.dport, pkt)
            else:                              # the capture records which bit the link flipped
                tap.packet(TX, qpn, r.src, r.dst, r.sport, r.dport, pkt, corrupt_bit)
        if peer is not None:
            if corrupt_bit is not None:
                self.cnt[DROP_ICRC] += 1           # the ICRC would have caught it
                return
            if r.peer is not None:
                r.peer.deliver(memoryview(pkt), r.src, r.dst, now, self)
            else:
                self._fan_out(r, pkt, now)
        elif r.sock is None or not self._send(r, pkt, corrupt_bit):
            return
        self.cnt[TX_PACKETS] += 1
        self.cnt[TX_BYTES] += len(pkt) + ICRC_LEN

    def flush_held(self, now: float) -> bool:
        """Send the packets whose injected delay is over."""
        f = self.faults
        if f is None or not f.held:
            return False
        items = f.due(now)
        for r, qpn, pkt, bit in items:
            self._transmit(r, qpn, pkt, bit, now)
        return bool(items)

    def set_faults(self, settings: FaultSettings | None, seed: int | None = None) -> None:
        if settings is None or not settings.active():
            held = self.faults.held if self.faults is not None else []
            self.faults = None
            for _, _, (r, qpn, pkt, bit) in sorted(held, key=lambda h: h[:2]):   # nothing held back is lost
                self._transmit(r, qpn, pkt, bit, 0.0)
        else:
            old = self.faults
            self.faults = Faults(settings, seed)
            if old is not None:
                self.faults.cnt = old.cnt
                self.faults.held = old.held


__all__ = ["Port", "PortQP", "Route", "RX", "TX", "MCAST_QPN", "route_key"]
