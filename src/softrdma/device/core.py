"""A device as the daemon hosts it: its port, its objects, its data path.

``Device`` owns the MR table (``transport.memory.MemoryTable`` over the
applications' shared memory), the QPs (``transport.QP``) and the
shared-memory ends the applications talk to:

* ``DevQP``: a QP with its SQ/RQ rings (``WorkQueueConsumer``) and doorbell;
* ``DevCQ``: a CQ ring (``CompletionQueueProducer``); the transport pushes
  WCs into it; an armed CQ signals its completion channel;
* ``DevSRQ``: an SRQ ring feeding a ``transport.SRQ``.

UD multicast groups and their sockets are ``mcast`` (``device.mcast``).

``Device.poll_rings`` moves posted WQEs into the transport, ``route`` sends
what the transport emits (over the device's ``RoceSocket``, or straight to
another device of the same daemon without a socket), ``deliver`` feeds
received packets to QPs by destination QPN, ``tick`` fires QP timers --
after reading the sockets empty, so that no ACK timer runs out over an ACK
already received -- and ``stalled`` keeps a stall of the daemon from being
charged to the peers.  The daemon's loop calls them; nothing here blocks.

Peers are who they claim to be (rxe's check_addr): a packet for an RC or UC
QP is taken only if its source address is the QP's destination (the AV's
dgid) and its destination address the one the QP sends from (the AV's
sgid), on the socket and the same-daemon paths alike; anything else is dropped and
counted (``dropped_bad_addr``) before the transport sees it.  The address
pair is worked out once per AV (``DevQP.peer``) -- per packet it is one
comparison.  UD QPs (and QP1) take datagrams from anyone, as in rxe.

Capture (``device.capture``): while ``Device.tap`` is set, every packet the
device sends or receives -- socket and loopback paths, fault path included
-- is handed to it; when it is None the only cost is that test.  While a
capture is open on either end, ``local_peer`` returns None: the traffic
goes as packets, so that the capture sees them.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct

from ..enums import ibv_event_type, ibv_wc_opcode, ibv_wc_status, ints
from ..errors import VerbsError
from ..transport.counters import RXE_HW_COUNTERS, Counter, new_counters
from ..transport.memory import MemoryTable
from ..transport.qp import QP, SRQ, DeviceCaps
from ..transport.wr import WC, AddressVector
from ..uapi.capture import NO_CORRUPTION, RX, TX
from ..uapi.queues import CompletionQueueProducer, WorkQueueConsumer
from ..wire.errors import WireError
from ..wire.icrc import ROCEV2_UDP_PORT, ipv4_header, ipv6_header
from ..wire.packet import check
from .capture import Capture, Tap
from .faults import Faults, FaultSettings, corrupt_position
from .gid import GidTable
from .gsi import Gsi
from .mcast import McastGroups, is_multicast_gid
from .net import RoceSocket, gid_to_ip
from .wqe import decode_recv_wqe, decode_send_wqe

EV = ints(ibv_event_type)
ST = ints(ibv_wc_status)
WCO = ints(ibv_wc_opcode)
RC, UC, UD = 2, 3, 4      # IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD
BAD_ADDR = int(Counter.dropped_bad_addr)
_V4_MAPPED = bytes(10) + b"\xff\xff"
WC_RECV_BIT = int(WCO.IBV_WC_RECV)   # ibv_wc_opcode: every receive opcode has this bit (128)
_HANDLE = struct.Struct("<I")
DRAIN_BATCHES = 64        # receive passes (of net.RX_BUDGET datagrams) a drain may take: a full socket buffer


class DevCQ:
    def __init__(self, handle: int, ring, channel, owner):
        self.handle = handle
        self.ring = ring
        self.producer = CompletionQueueProducer(ring)
        self.channel = channel            # DevChannel or None
        self.owner = owner
        self.qps = owner.device.qps       # the device's QPs by number (the dict lives as long as the device)
        self.overrun_reported = False

    def push(self, wc: WC, solicited=False) -> None:
        # The WQE's queue slot is free before its completion is visible (as
        # rxe advances the queue before posting the CQE): an application
        # that posts again on seeing the CQE must find room.
        dqp = self.qps.get(wc.qp_num)
        if dqp is not None:
            if wc.opcode & WC_RECV_BIT:
                dqp.publish_rq()
            else:
                dqp.publish_sq()
        stored, notify = self.producer.push(wc, bool(solicited))
        if not stored:
            if not self.overrun_reported:
                self.overrun_reported = True
                self.owner.event(EV.IBV_EVENT_CQ_ERR, cq=self.handle)
            return
        if notify and self.channel is not None:
            self.channel.signal(self.handle)


class DevChannel:
    """A completion channel: a SEQPACKET socketpair; the daemon writes the
    handle of the CQ that fired, ``get_cq_event`` reads it.  SEQPACKET, not
    datagrams: the application's end sees the daemon's end close (EOF,
    POLLHUP), as a uverbs channel reports its device gone."""

    def __init__(self, handle: int):
        self.handle = handle
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.ours.setblocking(False)

    def signal(self, cq_handle: int) -> None:
        try:
            self.ours.send(_HANDLE.pack(cq_handle))
        except (BlockingIOError, OSError):
            pass                           # the app stopped reading: events coalesce, as in the kernel

    def close(self) -> None:
        self.ours.close()
        if self.theirs is not None:         # None once handed to the application
            self.theirs.close()


class DevQP:
    def __init__(self, handle: int, qp: QP, sq, rq, doorbell: int, owner, srq: "DevSRQ | None" = None):
        self.handle = handle
        self.qp = qp
        self.sq = WorkQueueConsumer(sq)
        self.rq = WorkQueueConsumer(rq) if rq is not None else None
        self.sq_ring, self.rq_ring = sq, rq
        self.doorbell = doorbell
        self.owner = owner
        self.srq = srq
        # the (source, destination) address bytes packets for this QP must
        # carry, worked out for the AV object ``peer_av`` (None: not checked)
        self.peer_av = None
        self.peer: tuple[bytes, bytes] | None = None

    def publish_sq(self) -> None:
        self.sq.publish(len(self.qp.sq))

    def publish_rq(self) -> None:
        if self.rq is not None:
            self.rq.publish(len(self.qp.rq))
        elif self.srq is not None:
            self.srq.wq.publish(len(self.srq.srq.rq))

    def publish(self) -> None:
        """Free the ring slots of the WQEs the transport is done with."""
        self.publish_sq()
        self.publish_rq()


class DevSRQ:
    def __init__(self, handle: int, srq: SRQ, ring, doorbell: int, owner):
        self.handle = handle
        self.srq = srq
        self.ring = ring
        self.wq = WorkQueueConsumer(ring)
        self.doorbell = doorbell
        self.owner = owner


class Device:
    def __init__(self, name: str, netdev: str, addresses: list[str], *, mac: bytes = bytes(6),
                 port: int = 4791, caps: DeviceCaps | None = None, bind: bool = True, netdev_index: int = 0):
        self.name = name
        self.netdev = netdev
        self.netdev_index = netdev_index
        self.ifindex = 0                             # set by the daemon (rdma link's index)
        self.mac = mac
        self.caps = caps or DeviceCaps(active_mtu=3)
        self.memory = MemoryTable()
        self.qps: dict[int, DevQP] = {}              # qp_num -> DevQP
        self.srqs: list[DevSRQ] = []
        self.tx: list = []                           # shared transport output of all QPs
        self.events: list = []                       # shared transport async events
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
        self.traffic = {"tx_packets": 0, "tx_bytes": 0, "rx_packets": 0, "rx_bytes": 0}
        self.route_cache: dict = {}
        self.faults: Faults | None = None
        self.tap: Tap | None = None                  # set while a capture is open
        self._next_qpn = 0x11
        self.counters = new_counters()               # of QPs already destroyed
        self.rx_dropped = {"icrc": 0, "wire": 0, "unknown_qpn": 0}
        self.state = 4                               # PORT_ACTIVE
        self.gso = True                              # send with UDP GSO (``rdma link add ... gso off``)
        self.mcast = McastGroups(self)               # UD multicast groups, their sockets
        self.gsi = Gsi(self)                         # QP1: MADs (the CM)

    def gid(self, index: int) -> bytes | None:
        e = self.gid_table[index] if 0 <= index < self.gid_table.capacity else None
        return e.gid if e is not None else None

    @property
    def gids(self) -> list[bytes]:
        """GIDs by index up to the last used slot (free slots: zero GID)."""
        used = dict((i, e.gid) for i, e in self.gid_table)
        return [used.get(i, bytes(16)) for i in range(max(used) + 1)] if used else []

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
                except OSError:
                    continue                      # e.g. an IPv6 address still in DAD: next event retries
                self.sockets.append(sock)
                opened.append(sock)
        self.addresses = want
        self._by_ip = {sk.ip: sk for sk in self.sockets}
        for dqp in self.qps.values():             # a GID index may now stand for another address
            dqp.peer_av = None
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

    def set_gso(self, on: bool) -> None:
        """Send bursts as UDP GSO super-packets (on) or one datagram per
        sendmsg (off: what a capture on a veth, or a raw-socket peer, needs
        -- a veth hands a GSO packet to the other namespace unsplit)."""
        self.gso = bool(on)
        for sk in self.sockets:
            sk.gso = self.gso

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []
        self.mcast.close()

    # -- objects
    def alloc_qpn(self) -> int:
        while self._next_qpn in self.qps:
            self._next_qpn = (self._next_qpn + 1) & 0xFFFFFF or 0x11
        qpn = self._next_qpn
        self._next_qpn = (qpn + 1) & 0xFFFFFF or 0x11
        return qpn

    def add_qp(self, dqp: DevQP) -> None:
        self.qps[dqp.qp.qp_num] = dqp
        if dqp.qp.qp_type == RC:
            dqp.qp.local_peer = self.local_peer
            dqp.qp.local_traffic = self._local_traffic

    def _local_traffic(self, qp, peer, fwd, back) -> None:
        """Port counts for a message ``transport.loopback`` ran without
        packets: as if ``fwd`` went from this device to the peer's, ``back``
        the other way."""
        other = self.route_cache[(qp.av.dgid, qp.av.sgid_index)][0]
        t, o = self.traffic, other.traffic
        t["tx_packets"] += fwd[0]
        t["tx_bytes"] += fwd[1]
        o["rx_packets"] += fwd[0]
        o["rx_bytes"] += fwd[1]
        o["tx_packets"] += back[0]
        o["tx_bytes"] += back[1]
        t["rx_packets"] += back[0]
        t["rx_bytes"] += back[1]

    def local_peer(self, qp):
        """The RC peer of ``qp`` if it lives in this daemon and nothing (fault
        injection, a capture on either device) stands between them:
        ``transport.loopback`` may then run whole messages.  Known once the
        route has been resolved (by the first packet)."""
        if self.faults is not None or self.tap is not None:
            return None
        av = qp.av
        r = self.route_cache.get((av.dgid, av.sgid_index))
        if r is None or r[0].__class__ is not Device or r[0].faults is not None or r[0].tap is not None:
            return None                               # not resolved, remote, a multicast fan-out,
                                                      # faulty, or captured
        dqp = r[0].qps.get(qp.dest_qpn)
        if dqp is None or not r[0].accepts(dqp, r[3], r[4]):
            return None                               # (not its peer: the packets get dropped, counted)
        # receives posted but not yet read from the peer's ring count too:
        # else a SEND that finds none would take the packets (and an RNR)
        peer = dqp.qp
        if dqp.rq is not None:
            if not peer.rq:
                r[0]._pull_rq(dqp)
        elif dqp.srq is not None and not dqp.srq.srq.rq:
            r[0]._pull_srq(dqp.srq)
        return peer

    def remove_qp(self, dqp: DevQP) -> None:
        qp = dqp.qp
        cnt = self.counters
        for i, v in enumerate(qp.cnt):
            cnt[i] += v
        self.qps.pop(qp.qp_num, None)
        self.tx[:] = [t for t in self.tx if t[0] is not qp]

    def add_capture(self, cap: Capture) -> None:
        if self.tap is None:
            self.tap = Tap()
        self.tap.captures.append(cap)

    def remove_capture(self, cap: Capture) -> None:
        tap = self.tap
        if tap is not None and cap in tap.captures:
            tap.captures.remove(cap)
            if not tap.captures:
                self.tap = None

    def counter_totals(self) -> list[int]:
        """Every counter (``transport.counters.Counter`` order) summed over
        the live QPs and the destroyed ones."""
        tot = list(self.counters)
        for d in self.qps.values():
            for i, v in enumerate(d.qp.cnt):
                tot[i] += v
        return tot

    def hw_counters(self) -> dict[str, int]:
        tot = self.counter_totals()
        return {c.name: tot[c] for c in RXE_HW_COUNTERS}

    # -- data path
    def poll_rings(self, now: float) -> bool:
        """Move posted WQEs into the transport; True if any was found.  At
        most a ring's worth per queue and pass (an honest producer is never
        further ahead; a producer index written far ahead by a broken or
        hostile process costs one ring per pass, not a loop of 2^31)."""
        busy = False
        for srq in self.srqs:
            busy |= self._pull_srq(srq)
        for dqp in list(self.qps.values()):
            qp = dqp.qp
            if dqp.rq is not None:
                busy |= self._pull_rq(dqp)
            sq = dqp.sq
            budget = sq.ring.nslots
            while budget and (slot := sq.take()) is not None:
                budget -= 1
                busy = True
                try:
                    wqe = decode_send_wqe(slot, dqp.owner.ah_lookup)
                except ValueError:
                    wqe = None
                    wr_id = int.from_bytes(slot[0:8], "little")
                sq.release()
                try:
                    if wqe is None:
                        raise ValueError("malformed send WQE")
                    qp.post_send(wqe, now)
                except (ValueError, VerbsError):
                    self._wqe_error(dqp, wqe.wr_id if wqe is not None else wr_id, recv=False)
            dqp.publish()
        return busy

    def _pull_srq(self, srq: DevSRQ) -> bool:
        wq = srq.wq
        found = False
        budget = wq.ring.nslots
        while budget and (slot := wq.take()) is not None:
            budget -= 1
            found = True
            try:
                srq.srq.post_recv(decode_recv_wqe(slot))
            except (ValueError, VerbsError):
                pass                           # a malformed WQE from the app: dropped (SRQ stays usable)
            wq.release()
        wq.publish(len(srq.srq.rq))
        return found

    def _pull_rq(self, dqp: DevQP) -> bool:
        rq = dqp.rq
        qp = dqp.qp
        found = False
        budget = rq.ring.nslots
        while budget and (slot := rq.take()) is not None:
            budget -= 1
            found = True
            try:
                wqe = decode_recv_wqe(slot)
            except ValueError:
                wqe = None
                wr_id = int.from_bytes(slot[0:8], "little")
            rq.release()                  # exactly once per slot, whatever follows
            try:
                if wqe is None:
                    raise ValueError("malformed receive WQE")
                qp.post_recv(wqe)
            except (ValueError, VerbsError):
                self._wqe_error(dqp, wqe.wr_id if wqe is not None else wr_id, recv=True)
        return found

    def _wqe_error(self, dqp: DevQP, wr_id: int, recv: bool) -> None:
        """A WQE the library should never have written: complete it with
        IBV_WC_LOC_QP_OP_ERR and take the QP to ERR, as hardware does."""
        qp = dqp.qp
        cq = qp.recv_cq if recv else qp.send_cq
        cq.push(WC(wr_id, ST.IBV_WC_LOC_QP_OP_ERR, WCO.IBV_WC_RECV if recv else WCO.IBV_WC_SEND, qp.qp_num))
        qp.to_error()

    def route(self, devices_by_ip: dict, now: float) -> bool:
        """Send what the transport produced.  Same-daemon destinations get
        the packet directly (no socket, no ICRC: nothing can corrupt it)."""
        tx = self.tx
        if not tx:
            return False
        items = tx[:]
        tx.clear()
        cache = self.route_cache
        port = self.udp_port
        faults = self.faults
        tap = self.tap
        npkts = nbytes = 0
        bursts: dict = {}                              # (socket, destination) -> packets, in order
        for qp, pkt, av in items:
            key = (av.dgid, av.sgid_index)
            r = cache.get(key)
            if r is None:
                r = cache[key] = self._resolve_route(av, devices_by_ip)
            if faults is not None:
                for due, bit in faults.fate(now):
                    if due > now:
                        faults.hold(due, (r, qp.qp_num, pkt, bit))
                    else:
                        self._transmit(r, qp.qp_num, pkt, bit, now)
                continue
            peer, sock, dst_ip, src_b, dst_b = r
            if peer is not None:
                if tap is not None:
                    tap.packet(TX, qp.qp_num, src_b, dst_b, ROCEV2_UDP_PORT, ROCEV2_UDP_PORT, pkt)
                peer.deliver_one(memoryview(pkt), src_b, dst_b, now, self)
            elif sock is None:
                continue
            else:
                if tap is not None:
                    tap.packet(TX, qp.qp_num, src_b, dst_b, sock.port, port, pkt)
                b = bursts.get((sock, dst_ip))
                if b is None:
                    bursts[(sock, dst_ip)] = [pkt]
                else:
                    b.append(pkt)
                continue
            npkts += 1
            nbytes += len(pkt) + 4
        for (sock, dst_ip), pkts in bursts.items():
            tx0, by0 = sock.stats.tx_packets, sock.stats.tx_bytes
            sock.send_burst(pkts, dst_ip, port)
            npkts += sock.stats.tx_packets - tx0
            nbytes += sock.stats.tx_bytes - by0
        self.traffic["tx_packets"] += npkts
        self.traffic["tx_bytes"] += nbytes
        return True

    def _transmit(self, r, qpn: int, pkt, corrupt_bit, now: float) -> None:
        """One packet of QP ``qpn`` through the fault path (delayed,
        duplicated, damaged)."""
        peer, sock, dst_ip, src_b, dst_b = r
        tap = self.tap
        if tap is not None and (peer is not None or sock is not None):
            sport, dport = (ROCEV2_UDP_PORT, ROCEV2_UDP_PORT) if peer is not None else (sock.port, self.udp_port)
            flipped = NO_CORRUPTION if corrupt_bit is None else corrupt_position(corrupt_bit, len(pkt))
            tap.packet(TX, qpn, src_b, dst_b, sport, dport, pkt, flipped)
        if peer is not None:
            if corrupt_bit is not None:
                self.rx_dropped["icrc"] += 1       # the ICRC would have caught it
                return
            peer.deliver_one(memoryview(pkt), src_b, dst_b, now, self)
        elif sock is None or not sock.send(pkt, dst_ip, self.udp_port, corrupt_bit):
            return
        self.traffic["tx_packets"] += 1
        self.traffic["tx_bytes"] += len(pkt) + 4

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
            for _, _, (r, qpn, pkt, bit) in sorted(held):      # nothing held back is lost by switching off
                self._transmit(r, qpn, pkt, bit, 0.0)
        else:
            old = self.faults
            self.faults = Faults(settings, seed)
            if old is not None:
                self.faults.counters = old.counters
                self.faults.held = old.held

    def _resolve_route(self, av, devices_by_ip: dict):
        """(peer device or None, socket, destination IP, source and
        destination address bytes) for an address vector; cached per
        (dgid, sgid_index) in ``route_cache`` until addresses change.
        A multicast GID routes to a ``mcast.Fanout`` in the peer's place."""
        if is_multicast_gid(av.dgid):
            return self.mcast.route(av, devices_by_ip)
        dst_ip = gid_to_ip(av.dgid)
        src_ip, sock = self._source(av.sgid_index, ":" in dst_ip)
        src_b, dst_b = ipaddress.ip_address(src_ip).packed, ipaddress.ip_address(dst_ip).packed
        peer = devices_by_ip.get(dst_ip)
        if len(src_b) != len(dst_b):        # a GID that changed family under a QP: nothing can go
            peer = sock = None
        return (peer, sock, dst_ip, src_b, dst_b)

    def receive(self, sock: RoceSocket, now: float) -> None:
        batch: dict[int, list] = {}
        grhs: dict[int, list] = {}
        tap = self.tap
        qps = self.qps
        dst = sock.ip_bytes
        for pkt, src, sport in sock.recv():
            if tap is not None:                # every packet that arrived whole, malformed ones too
                tap.packet(RX, (pkt[5] << 16) | (pkt[6] << 8) | pkt[7], src, dst, sport, sock.port, pkt)
            try:
                check(pkt)
            except WireError:
                self.rx_dropped["wire"] += 1
                continue
            dqpn = (pkt[5] << 16) | (pkt[6] << 8) | pkt[7]
            dqp = qps.get(dqpn)
            if dqp is None:
                if dqpn == 1:
                    self.traffic["rx_packets"] += 1
                    self.traffic["rx_bytes"] += len(pkt) + 4
                    self.gsi.receive(pkt, src, dst, now)
                else:
                    self.rx_dropped["unknown_qpn"] += 1
                continue
            qp = dqp.qp
            peer = dqp.peer if dqp.peer_av is qp.av else self._peer(dqp)
            if peer is not None and (src != peer[0] or dst != peer[1]) and not _same_pair(peer, src, dst):
                qp.cnt[BAD_ADDR] += 1
                continue
            batch.setdefault(dqpn, []).append(pkt)
            self.traffic["rx_packets"] += 1
            self.traffic["rx_bytes"] += len(pkt) + 4
            if qp.qp_type == UD:           # only UD receive buffers get the GRH
                grhs.setdefault(dqpn, []).append(_grh(src, dst, len(pkt) + 4))
        for dqpn, pkts in batch.items():
            dqp = self.qps.get(dqpn)
            if dqp is not None:
                dqp.qp.receive_batch(pkts, now, grhs.get(dqpn))

    def deliver_one(self, pkt, src: bytes, dst: bytes, now: float, sender: Device | None = None) -> None:
        """A packet from ``sender``, a device of this daemon (the loopback
        path: no socket, no ICRC)."""
        tap = self.tap
        if tap is not None and sender is not self:    # a packet to itself: captured once, as TX
            tap.packet(RX, (pkt[5] << 16) | (pkt[6] << 8) | pkt[7], src, dst, ROCEV2_UDP_PORT, ROCEV2_UDP_PORT,
                       pkt)
        try:
            check(pkt)
        except WireError:
            self.rx_dropped["wire"] += 1
            return
        dqpn = (pkt[5] << 16) | (pkt[6] << 8) | pkt[7]
        dqp = self.qps.get(dqpn)
        if dqp is None:
            if dqpn == 1:
                self.traffic["rx_packets"] += 1
                self.traffic["rx_bytes"] += len(pkt) + 4
                self.gsi.receive(pkt, src, dst, now)
            else:
                self.rx_dropped["unknown_qpn"] += 1
            return
        qp = dqp.qp
        peer = dqp.peer if dqp.peer_av is qp.av else self._peer(dqp)
        if peer is not None and (src != peer[0] or dst != peer[1]) and not _same_pair(peer, src, dst):
            qp.cnt[BAD_ADDR] += 1
            return
        self.traffic["rx_packets"] += 1
        self.traffic["rx_bytes"] += len(pkt) + 4
        qp.receive(pkt, now, _grh(src, dst, len(pkt) + 4) if qp.qp_type == UD else None)

    def _peer(self, dqp: DevQP) -> tuple[bytes, bytes] | None:
        """Work out ``dqp.peer`` for the QP's current AV (rxe check_addr's
        operands): for a connected QP whose AV names a destination, the
        dgid's address (the packets' source) and the address this QP sends
        from (their destination: the sgid's, as ``route`` sends; when no
        socket has the sgid's address, the device's first, which is where
        the peer sees our packets come from), 4 bytes for IPv4(-mapped)
        GIDs, else 16.  None for UD, and for a QP not yet given a
        destination (its state drops the packet)."""
        qp = dqp.qp
        av = qp.av
        peer = None
        if qp.qp_type in (RC, UC) and av is not None and any(av.dgid):
            peer = (_addr_bytes(av.dgid), ipaddress.ip_address(self._source(av.sgid_index)[0]).packed)
        dqp.peer_av, dqp.peer = av, peer
        return peer

    def accepts(self, dqp: DevQP, src: bytes, dst: bytes) -> bool:
        """Would ``dqp`` take a packet from ``src`` to ``dst``?"""
        peer = dqp.peer if dqp.peer_av is dqp.qp.av else self._peer(dqp)
        return peer is None or (src == peer[0] and dst == peer[1]) or _same_pair(peer, src, dst)

    def next_deadline(self) -> float | None:
        """The earliest QP timer, without firing any."""
        nxt = None
        for dqp in self.qps.values():
            d = dqp.qp.deadline
            if d is not None and (nxt is None or d < nxt):
                nxt = d
        return nxt

    def tick(self, now: float, devices_by_ip: dict | None = None) -> float | None:
        """Fire due timers; return the earliest pending deadline.

        Before a timer fires, the sockets are read until the kernel holds
        nothing more (``drain``): a daemon that was not scheduled for a
        while finds the ACKs that came meanwhile waiting there, and an ACK
        timer must not run out over an ACK that has arrived (rxe's timer is
        a kernel timer, and the softirq that receives runs whatever process
        is on the CPU).  Costs nothing while no timer is due."""
        nxt = None
        due = None
        for dqp in self.qps.values():
            d = dqp.qp.deadline
            if d is None:
                continue
            if d <= now:
                if due is None:
                    due = [dqp.qp]
                else:
                    due.append(dqp.qp)
            elif nxt is None or d < nxt:
                nxt = d
        if due is None:
            return nxt
        self.drain(now, devices_by_ip)
        for qp in due:
            d = qp.deadline
            if d is not None and d <= now:
                qp.tick(now)
                d = qp.deadline
            if d is not None and (nxt is None or d < nxt):
                nxt = d
        return nxt

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

    def stalled(self, since: float, until: float) -> None:
        """The daemon did not run from ``since`` to ``until`` (descheduled
        on a busy host, or busy elsewhere): no QP could see an ACK in that
        time, so the ACK timers stop for it (``transport.QP.stalled``) --
        the stall is the host's, not the peer's."""
        for dqp in self.qps.values():
            if dqp.qp.timer_at is not None:
                dqp.qp.stalled(since, until)

    def port_attrs(self) -> dict:
        mtu = self.caps.active_mtu
        return {"state": self.state, "max_mtu": self.caps.max_mtu, "active_mtu": mtu, "gid_tbl_len": 1024,
                "port_cap_flags": 0x00010000, "max_msg_sz": self.caps.max_msg_sz, "pkey_tbl_len": 1,
                "lid": 0, "sm_lid": 0, "lmc": 0, "max_vl_num": 1, "sm_sl": 0, "subnet_timeout": 0,
                "init_type_reply": 0, "active_width": 1, "active_speed": 1, "phys_state": 5,
                "link_layer": 2, "bad_pkey_cntr": 0, "qkey_viol_cntr": 0}

    def av_from(self, d: dict) -> AddressVector:
        return AddressVector(dgid=bytes.fromhex(d.get("dgid", "00" * 16)), sgid_index=d.get("sgid_index", 0),
                             flow_label=d.get("flow_label", 0), hop_limit=d.get("hop_limit", 64),
                             traffic_class=d.get("traffic_class", 0), sl=d.get("sl", 0), dlid=d.get("dlid", 0),
                             port_num=d.get("port_num", 1), is_global=d.get("is_global", True))


def _addr_bytes(gid: bytes) -> bytes:
    """The address a RoCEv2 GID stands for, as packed bytes (IPv4-mapped:
    the 4 IPv4 bytes, as a socket reports an IPv4 source)."""
    gid = bytes(gid)
    return gid[12:] if gid[:12] == _V4_MAPPED else gid


def _same_pair(peer: tuple[bytes, bytes], src: bytes, dst: bytes) -> bool:
    """The slow path of the address check, after the byte comparison
    failed: the same addresses in the other form (an IPv4 peer reported as
    ``::ffff:a.b.c.d`` by a dual-stack socket)."""
    if len(src) == 16 and src[:12] == _V4_MAPPED:
        src = src[12:]
    if len(dst) == 16 and dst[:12] == _V4_MAPPED:
        dst = dst[12:]
    return src == peer[0] and dst == peer[1]


def _grh(src: bytes, dst: bytes, udp_payload_len: int) -> bytes:
    """The 40-byte network header a UD receive buffer starts with (rxe's
    layout: IPv4 in the last 20 bytes, IPv6 in all 40)."""
    if len(src) == 4:
        return bytes(20) + ipv4_header(src, dst, udp_payload_len)
    return ipv6_header(src, dst, udp_payload_len)


__all__ = ["Device", "DevQP", "DevCQ", "DevSRQ", "DevChannel"]
