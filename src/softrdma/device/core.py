"""A device as the daemon hosts it: its port, its objects, its data path.

``DeviceCore`` is what every device has, whatever its link; a device class
adds its port: ``Device`` (``device.roce.RocePort``: the receive demux and
transmit routing of ``transport.port``, over the RoCEv2 link), and
``device.ib.IbDevice`` (``IbPort``, on an InfiniBand fabric).  It owns the
MR table (``transport.memory.MemoryTable`` over the applications' shared
memory), the QPs (``transport.QP``) and the shared-memory ends the
applications talk to:

* ``DevQP``: a QP with its SQ/RQ rings (``WorkQueueConsumer``) and doorbell;
* ``DevCQ``: a CQ ring (``CompletionQueueProducer``); the transport pushes
  WCs into it (``device.sendpath`` a run's CQEs at once, ``push_cqes``);
  an armed CQ signals its completion channel;
* ``DevSRQ``: an SRQ ring feeding a ``transport.SRQ``.

UD multicast groups and their sockets are ``mcast`` (``device.mcast``).

``Device.poll_rings`` moves posted WQEs into the transport -- the send
rings first, then the receive rings, so that a single-SGE SEND or WRITE to
an RC peer of this daemon goes slot to slot (``device.sendpath``) without a
``SendWQE`` or ``RecvWQE``, the rest as objects --, ``route`` (the
port's) sends what the transport emits, ``receive`` feeds received packets
to QPs by destination QPN, ``tick`` fires QP timers -- after reading the
sockets empty, so that no ACK timer runs out over an ACK already received
-- and ``stalled`` keeps a stall of the daemon from being charged to the
peers.  The daemon's loop calls them; nothing here blocks.

Capture (``device.capture``): while ``Device.tap`` is set, every packet the
device sends or receives -- socket and loopback paths, fault path included
-- is handed to it; when it is None the only cost is that test.  While a
capture is open on either end, ``local_peer`` returns None: the traffic
goes as packets, so that the capture sees them.
"""

from __future__ import annotations

import socket
import struct

from ..enums import ibv_event_type, ibv_wc_opcode, ibv_wc_status, ints
from ..errors import VerbsError
from ..transport.counters import RX_DROPPED, HW_COUNTERS, TRAFFIC, as_dict, new_counters
from ..transport.memory import MemoryTable
from ..transport.port import RX_BYTES, RX_PACKETS, TX_BYTES, TX_PACKETS, PortQP, route_key
from ..transport.qp import QP, SRQ, DeviceCaps
from ..transport.wr import AddressVector
from ..uapi.abi import WC
from ..uapi.queues import CompletionQueueProducer, WorkQueueConsumer
from ..uapi.shm import W_PRODUCER
from .capture import Capture, Tap
from .gid import eui64
from .gsi import Gsi
from .mcast import McastGroups
from .roce import RocePort
from .sendpath import send_burst
from .wqe import decode_recv_wqe, decode_send_wqe

EV = ints(ibv_event_type)
ST = ints(ibv_wc_status)
WCO = ints(ibv_wc_opcode)
RC = 2                    # IBV_QPT_RC
WC_RECV_BIT = int(WCO.IBV_WC_RECV)   # ibv_wc_opcode: every receive opcode has this bit (128)
_HANDLE = struct.Struct("<I")


class DevCQ:
    def __init__(self, handle: int, ring, channel, owner):
        self.handle = handle
        self.ring = ring
        self.producer = CompletionQueueProducer(ring)
        self.channel = channel            # DevChannel or None
        self.owner = owner
        self.qps = owner.device.qps       # the device's QPs by number (the dict lives as long as the device)
        self.overrun_reported = False
        self.wc_flags = 0                 # ibv_create_cq_wc_flags (the extended CQ's; 0 for ibv_create_cq)

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


    def push_cqes(self, cqes: list) -> None:
        """A batch of completions as ``abi.CQE`` field tuples (the
        same-daemon SEND / WRITE path, ``device.sendpath``), in order: what
        ``push`` does for each.  The caller has already published the queues
        whose WQEs they complete."""
        stored, notify = self.producer.push_cqes(cqes)
        if stored < len(cqes) and not self.overrun_reported:
            self.overrun_reported = True
            self.owner.event(EV.IBV_EVENT_CQ_ERR, cq=self.handle)
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


class DevQP(PortQP):
    def __init__(self, handle: int, qp: QP, sq, rq, doorbell: int, owner, srq: "DevSRQ | None" = None):
        super().__init__(qp)          # the port's entry: the QP, its address-check cache
        self.handle = handle
        self.sq = WorkQueueConsumer(sq)
        self.rq = WorkQueueConsumer(rq) if rq is not None else None
        self.sq_ring, self.rq_ring = sq, rq
        self.doorbell = doorbell
        self.owner = owner
        self.srq = srq

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


class DeviceCore:
    """What a device is besides its link: its objects (MRs, QPs, SRQs, XRC
    domains), its rings and data path, its counters and timers.  A device
    class is this and a link's port: ``Device`` (RoCEv2, ``RocePort``),
    ``device.ib.IbDevice`` (InfiniBand, ``IbPort``).  The link's part it
    relies on: ``qps``, ``tx``, ``cnt``, ``route_cache``, ``faults``,
    ``tap``, ``qp_failed``, ``drain`` (read the link empty before a timer
    fires), ``close``, ``port_attrs``, ``av_from``."""

    link_layer = 2                                   # IBV_LINK_LAYER_ETHERNET

    def _init_core(self, name: str, caps: DeviceCaps | None) -> None:
        self.name = name
        self.ifindex = 0                             # set by the daemon (rdma link's index)
        self.caps = caps or DeviceCaps(active_mtu=3)
        self.cc = self.caps.cc                       # ECN / DCQCN (transport.dcqcn)
        self.memory = MemoryTable()
        self.srqs: list[DevSRQ] = []
        self.xrcds: dict = {}                        # XRC domains shared through a file, by (st_dev, st_ino)
        self.xrc_srqs: dict = {}                     # XRC SRQs by number (what an XRCETH names)
        self.next_srqn = 1
        self.events: list = []                       # shared transport async events
        self._next_qpn = 0x11
        self.counters = new_counters()               # of QPs already destroyed
        self.mcast = McastGroups(self)               # UD multicast groups, their sockets
        self.gsi = Gsi(self)                         # QP1: MADs (the CM)
        self.raw = None                              # device.raw.RawPort while raw packet QPs exist

    @property
    def traffic(self) -> dict[str, int]:
        """The port's traffic counts by name (``rdma statistic``, sysfs)."""
        return as_dict(self.cnt, TRAFFIC)

    @property
    def rx_dropped(self) -> dict[str, int]:
        """The packets the port dropped before any QP, by reason."""
        return as_dict(self.cnt, RX_DROPPED)

    # -- objects
    def alloc_qpn(self) -> int:
        ports = getattr(self, "ib_ports", ())          # an IB device's ports: their in-daemon users (IPoIB)
        while self._next_qpn in self.qps or any(self._next_qpn in p.ulp_qps for p in ports) or \
                (self.raw is not None and self._next_qpn in self.raw.numbers):
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
        t, o = self.cnt, self.route_cache[route_key(qp.av)].peer.cnt
        t[TX_PACKETS] += fwd[0]
        t[TX_BYTES] += fwd[1]
        o[RX_PACKETS] += fwd[0]
        o[RX_BYTES] += fwd[1]
        o[TX_PACKETS] += back[0]
        o[TX_BYTES] += back[1]
        t[RX_PACKETS] += back[0]
        t[RX_BYTES] += back[1]

    def local_peer(self, qp):
        """The RC peer of ``qp`` if it lives in this daemon and nothing (fault
        injection, a capture on either device) stands between them:
        ``transport.loopback`` may then run whole messages.  Known once the
        route has been resolved (by the first packet)."""
        found = self.local_peer_dqp(qp)
        if found is None:
            return None
        other, dqp = found
        # receives posted but not yet read from the peer's ring count too:
        # else a SEND that finds none would take the packets (and an RNR)
        peer = dqp.qp
        if dqp.rq is not None:
            if not peer.rq:
                other._pull_rq(dqp)
        elif dqp.srq is not None:
            if dqp.srq.srq.tm is not None:
                return None                           # tag matching parses each message: the packets
            if not dqp.srq.srq.rq:
                other._pull_srq(dqp.srq)
        return peer

    def local_peer_dqp(self, qp) -> "tuple[Device, DevQP] | None":
        """(device, DevQP) of ``local_peer``'s peer, its receive queue not
        looked at."""
        if self.faults is not None or self.tap is not None or self.tx_blocked is not None:
            return None
        av = qp.av
        r = self.route_cache.get(route_key(av))
        other = r.peer if r is not None else None
        if other is None or other.faults is not None or other.tap is not None or other.tx_blocked is not None:
            return None                               # not resolved, remote, a multicast group,
                                                      # faulty, or captured
        dqp = other.qps.get(qp.dest_qpn)
        if dqp is None or not other.accepts(dqp, r.src, r.dst):
            return None                               # (not its peer: the packets get dropped, counted)
        return other, dqp

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
        return {c.name: tot[c] for c in HW_COUNTERS}

    # -- data path
    def poll_rings(self, now: float) -> bool:
        """Move posted WQEs into the transport; True if any was found.  At
        most a ring's worth per queue and pass (an honest producer is never
        further ahead; a producer index written far ahead by a broken or
        hostile process costs one ring per pass, not a loop of 2^31).
        The SENDs and WRITEs ``send_burst`` qualifies go slot to slot; the
        first slot it does not is decoded, and the rest of that ring's pass
        with it."""
        busy = False
        for srq in self.srqs:
            busy |= self._pull_srq(srq)
        dqps = list(self.qps.values())
        for dqp in dqps:
            qp = dqp.qp
            sq = dqp.sq
            budget = sq.ring.nslots
            fast = qp.local_peer is not None          # an RC QP: SENDs/WRITEs to a peer here may go slot to slot
            while budget and (slot := sq.take()) is not None:
                if fast:
                    n = send_burst(self, dqp, budget, now)
                    if n:
                        budget -= n
                        busy = True
                        continue
                    fast = False                      # this slot is not for it: the rest of the pass neither
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
                except Exception as exc:                  # noqa: BLE001 -- ours: the QP fails, not the daemon
                    self.qp_failed(qp, exc)
                    break
        # the receive rings after every send ring: a receive the same-daemon
        # SEND path (``device.sendpath``) consumes is read from its slot, not
        # made a ``RecvWQE`` first
        for dqp in dqps:
            rq = dqp.rq
            if rq is not None and rq.ring.words[W_PRODUCER] != rq.tail:     # (_pull_rq's own test, inline:
                busy |= self._pull_rq(dqp)                                   # every QP, every pass)
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
                try:
                    qp.tick(now)
                except Exception as exc:              # noqa: BLE001 -- ours: the QP fails (Port.qp_failed)
                    self.qp_failed(qp, exc)
                d = qp.deadline
            if d is not None and (nxt is None or d < nxt):
                nxt = d
        return nxt

    def stalled(self, since: float, until: float) -> None:
        """The daemon did not run from ``since`` to ``until`` (descheduled
        on a busy host, or busy elsewhere): no QP could see an ACK in that
        time, so the ACK timers stop for it (``transport.QP.stalled``) --
        the stall is the host's, not the peer's."""
        for dqp in self.qps.values():
            if dqp.qp.timer_at is not None:
                dqp.qp.stalled(since, until)


class Device(DeviceCore, RocePort):
    """A device on an Ethernet netdev: RoCEv2 (rxe's)."""

    def __init__(self, name: str, netdev: str, addresses: list[str], *, mac: bytes = bytes(6),
                 port: int = 4791, caps: DeviceCaps | None = None, bind: bool = True, netdev_index: int = 0):
        RocePort.__init__(self, netdev, addresses, mac, port, bind, netdev_index)
        self._init_core(name, caps)
        self.state = 4                               # PORT_ACTIVE (the netdev's state: Daemon.refresh_netdev)
        self.cc_changed()

    @property
    def node_guid(self) -> bytes:
        """rxe's: the EUI-64 of the netdev's MAC."""
        return eui64(self.mac)

    sys_image_guid = node_guid

    def close(self) -> None:
        self.close_sockets()
        self.mcast.close()

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


__all__ = ["DeviceCore", "Device", "DevQP", "DevCQ", "DevSRQ", "DevChannel"]
