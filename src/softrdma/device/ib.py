"""The InfiniBand link of a device's port: a CA port of a simulated fabric.

``IbPort`` is the ``transport.port.Port`` of a device attached to a CA port
of ``softrdma fabric serve`` (``device.fabric_link``: the socket).  The
fabric owns the port's model -- its SMA answers the SM, its links go up and
down -- and pushes each change as PORT_INFO; the port mirrors it (``apply``,
``device.ib_portinfo``):
state and physical state exactly as the fabric models them, LID, LMC, SM
LID and SL, subnet prefix, GUIDs (the GID table: GID i = subnet prefix +
GUID i), the P_Key table, width and speed, MTU, capability mask.  What
changed becomes the events the kernel sends (``ib_cache``, mlx5's port
events): PORT_ACTIVE / PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
GID_CHANGE, CLIENT_REREGISTER.  The connection's end is the port's: Down,
Polling, until the fabric is back.

Transmit: an address vector resolves to an ``IbRoute`` (DLID, SLID = base
LID | source path bits within the LMC, SL, and a GRH when ``is_global``),
cached per AV object; the packets of one pass leave as PACKETS messages
of up to ``fabriclink.MAX_MESSAGE`` (128 KiB), each sent as the list of its pieces (one ``sendmsg``:
the entries are never joined into one buffer).  A QP's run of MIDDLE packets (a ``SegmentRun``: the
port asks QPs for them, as a RoCE port with a socket does) is laid out as
PACKETS entries in one call (``wire.lrh.build_run``: LRH, GRH, BTH,
payload, ICRC, VCRC of each, compiled where built); any other packet is
encapsulated on its own (``wire.lrh.encap``).  An RC/UC path whose
static rate is below the link's gets a ``transport.static_rate``
limiter on its QP at its first packet: the requester is paced to that
rate from then on (the HCA's inter-packet delay).  Nothing is delivered
inside the daemon: two IB devices of one daemon talk through the
fabric's switches as two hosts would.  A port that is not Active sends
nothing: the packets are discarded and counted (PortXmitDiscards).

Receive: a PACKETS message whose packets are all for one QP (other than
QP0 and QP1), LRH-only, to this port's LID, with good CRCs and framing and
one accepted P_Key -- a bulk transfer's messages -- is checked whole
(``wire.lrh.verify_packets``) and handed to the port layer as one
``fastpath.Segments`` per run of equal-length packets, so the QP places
in-order MIDDLE runs in one call, as it does a RoCE GRO buffer
(``transport.segments``).  Anything else takes the checked path packet by
packet: each packet is checked (``wire.lrh.decap``: length, LNH, VCRC,
ICRC; else PortRcvErrors), its DLID must be the port's (within the LMC) or
a multicast LID, its BTH P_Key must match the port's table (IBA 10.9.3:
the low 15 bits equal, one of the two a full member; else the packet is
dropped and P_KeyViolations counted, as PortInfo and the kernel's
``bad_pkey_cntr``), then the port layer's demux (``receive_batch``) with a
``transport.unreliable.LinkSource`` as the source: UD completions carry
slid, sl, dlid_path_bits, and IBV_WC_GRH only when a GRH came.  Connected
QPs take packets by QPN, as on a real HCA (no address check).

Capture (``ibdump``): an IB port's tap is ``frame_tap`` (the port layer's
``tap``, which records IP packets, stays None): every frame handed to the
fabric and every frame received, LRH to VCRC as on the link.  While one is
open, received messages take the packet-by-packet path so each frame is
seen, and QPs send no runs.
"""

from __future__ import annotations

import errno
import struct

from ..enums import IBV_QPT_UD
from ..errors import VerbsError
from ..transport.port import MCAST_QPN, RX_BYTES, RX_PACKETS, TX_BYTES, TX_PACKETS, Port
from ..transport.qp import DeviceCaps
from ..transport.static_rate import IBV_RATE_MBPS, StaticRate
from ..transport.unreliable import LinkSource
from ..transport.wr import AddressVector
from ..uapi.capture import RX, TX
from ..uapi.shm import W_PRODUCER
from ..wire import fabriclink as fl
from ..wire import smp
from ..wire.errors import WireError
from ..wire.fastpath import BTH_BYTES, SegmentRun, Segments
from ..wire.lrh import (GRH_BYTES, ICRC_BYTES, LRH_BYTES, MCAST_LID_BASE, PERMISSIVE_LID, VCRC_BYTES, VL15, build_run,
                        decap, encap, pack_grh, run_lrh, verify_packets)
from ..wire.opcodes import Opcode
from ..wire.packet import build
from .capture import Tap
from .core import DeviceCore
from .fabric_link import FabricLink
from .gid import ROCE_V1, GidTable
from .gsi import Gsi
from .ib_portinfo import (ACTIVE, DOWN, IB_COUNTERS, LINK_LAYER_IB, PKEY_VIOLATIONS, POLLING, RCV_ERRORS,
                          XMIT_BYTES, XMIT_DISCARDS, XMIT_PACKETS, LANE_MBPS, PortInfo, PortInfoMirror,
                          pkey_accepts)
from .umad import Umad

UD_SEND_ONLY = int(Opcode.UD_SEND_ONLY)
GID_TABLE_LEN = smp.GUIDS_PER_BLOCK  # the first GUIDInfo block: the GUIDs the fabric sends
ROUTE_CACHE_MAX = 4096
_PLEN = struct.Struct(">H")                  # a PACKETS entry's length (wire.fabriclink)
PACKETS_ENTRY_LRH = fl.HDR.size + 2          # where a PACKETS message's first LRH starts



def frame_dqpn(f) -> int:
    """The BTH DestQP of an IB frame (0 if it is too short to have one)."""
    b = LRH_BYTES + (GRH_BYTES if len(f) > 1 and f[1] & 3 == 3 else 0)
    return f[b + 5] << 16 | f[b + 6] << 8 | f[b + 7] if len(f) >= b + BTH_BYTES else 0


def _tap_entries(tap, qpn: int, entries) -> None:
    """The frames of PACKETS entries (a 2-byte length before each) to a capture."""
    i, n = 0, len(entries)
    while i + 2 <= n:
        ln = entries[i] << 8 | entries[i + 1]
        tap.frame(TX, qpn, entries[i + 2:i + 2 + ln])
        i += 2 + ln


def message_segments(msg, dqpn: int, groups) -> list:
    """A PACKETS message that ``lrh.verify_packets`` passed, as one
    ``Segments`` per run of equal-length entries (``groups``): each entry a
    be16 length and the LRH before the BTH, the VCRC after the ICRC."""
    view = memoryview(msg)
    return [Segments(view, off + seg * k, seg, dqpn, off, 2 + LRH_BYTES, VCRC_BYTES) for off, seg, k in groups]


class IbRoute:
    """Where an address vector's packets go: the LRH fields and, for a
    global AV, the GRH's (``sgid`` None: the source GID index is empty,
    nothing can go)."""

    __slots__ = ("av", "dlid", "slid", "sl", "grh", "sgid", "dgid", "tclass", "flow_label", "hop_limit", "pace")

    def __init__(self, av, dlid: int, slid: int, sl: int, sgid: bytes | None, pace: int = 0):
        self.pace = pace                # the static rate's Mb/s where below the link's (0: none)
        self.av = av
        self.dlid = dlid
        self.slid = slid
        self.sl = sl
        self.grh = bool(av.is_global)
        self.sgid = sgid
        self.dgid = bytes(av.dgid)
        self.tclass = av.traffic_class
        self.flow_label = av.flow_label
        self.hop_limit = av.hop_limit


class IbPort(PortInfoMirror, Port):
    """The port layer over a fabric link (see the module docstring)."""

    rx_port = 0
    #: a PF's virtual functions sharing this port (``device.ib_vf.Vports``): their packets, their PortInfo
    vports = None

    def __init__(self, base: str, node: str, port_num: int, name: str, directory: str | None = None, *,
                 num: int = 1):
        super().__init__()
        self.link = FabricLink(base, node, port_num, name, directory)
        self.fabric = base
        self.node_sel = node
        self.port_num = port_num                  # the CA port of the fabric this port is attached to
        self.num = num                            # the device's port number (ports/N, ibv_query_port)
        self.hca = self                           # the device (``IbDevice``) this port is a port of
        self.max_mtu = self.active_mtu = 5        # IBV_MTU_4096 until the fabric says
        self.pkey_table: tuple = (0xFFFF,)        # PartitionCap entries, those the SM left unset 0
        self.info = PortInfo()
        self.raw_info: fl.PortInfoMsg | None = None     # as the fabric sent it (a umad file's tool reads it)
        self.gid_table = GidTable("", GID_TABLE_LEN, ROCE_V1)
        self.lid = self.lmc = self.sm_lid = self.sm_sl = 0
        self.lmc_mask = 0
        self.state, self.phys_state = DOWN, POLLING
        self.pkeys: tuple = (0xFFFF,)
        self.accepts_pkey = pkey_accepts(self.pkeys)
        self.ib_cnt = [0] * len(IB_COUNTERS)
        # CapabilityMask bits this port holds: IsClientReregistrationSupported, as
        # ConnectX firmware sets it, and IsSM while an issm file is open (``set_port_cap``)
        self.cap_held = smp.CAP_IS_CLIENT_REREGISTRATION_SUPPORTED
        self.port_events: list[int] = []          # ibv_event_type, for the daemon to send the clients
        self.seen_info = False
        self.ulp_qps: dict = {}                   # QPN -> an in-daemon UD user (IPoIB: ``device.ipoib``)
        self.frame_tap = None                     # a capture's ``device.capture.Tap`` while one is open
        # what a RoCE port has and an IB port has not (the daemon reads them from every device)
        self.netdev = ""
        self.netdev_index = 0
        self.addresses: list[str] = []
        self.sockets: list = []
        self.gso = False
        self.udp_port = 0

    # -- address vectors
    def check_av(self, av, peers) -> None:
        """What create_ah / modify_qp (RTR) refuse on an IB port (EINVAL,
        as ib_uverbs' rdma_check_ah_attr / mlx5): a global AV whose source
        GID index is empty; a LID-routed AV to LID 0 or the permissive
        LID."""
        if av.is_global and self.gid(av.sgid_index) is None:
            raise VerbsError(errno.EINVAL, f"no GID at sgid_index {av.sgid_index}")
        if not av.is_global and av.dlid in (0, PERMISSIVE_LID):
            raise VerbsError(errno.EINVAL, f"DLID {av.dlid:#x} is not a destination")

    def _ib_route(self, av) -> IbRoute:
        slid = self.lid | (av.src_path_bits & self.lmc_mask)
        sgid = self.gid(av.sgid_index) if av.is_global else None
        pace = IBV_RATE_MBPS.get(av.static_rate, 0) if av.static_rate else 0
        name, lanes = self.rate
        return IbRoute(av, av.dlid, slid, av.sl, sgid, pace if pace < LANE_MBPS[name] * lanes else 0)

    # -- transmit (the port layer's ``route``, for a link with no same-daemon path)
    def route(self, peers, now: float) -> bool:
        """Encapsulate what the QPs produced and send it to the fabric as
        PACKETS messages; False if there was nothing.  A SegmentRun's
        packets are laid out as PACKETS entries in one call
        (``lrh.build_run``); other packets one by one (``encap``)."""
        tx = self.tx
        if not tx or self.routing:
            return False
        self.routing = True
        cache = self.route_cache
        msgs = []                                # PACKETS messages, whole
        parts: list = []                         # the entries of the one being filled
        npk = 0
        size = fl.HDR.size
        sent_pkts = nbytes = 0
        discards = dropped = 0
        active = self.state == ACTIVE and self.link.connected
        tap = self.frame_tap
        runs = tap is None
        try:
            while tx:
                items = tx[:]
                tx.clear()
                for qp, pkt, av in items:
                    is_run = pkt.__class__ is SegmentRun
                    if not active:
                        discards += pkt.count if is_run else 1
                        continue
                    if runs and qp.tx_runs is False:     # (QP1's sender: None, never asks)
                        qp.enable_runs()
                    r = cache.get(id(av))
                    if r is None or r.av is not av:
                        if len(cache) >= ROUTE_CACHE_MAX:
                            cache.clear()
                        r = cache[id(av)] = self._ib_route(av)
                    if r.grh and r.sgid is None:
                        discards += pkt.count if is_run else 1
                        continue
                    if r.pace and qp.rp is None and qp.qp_type != IBV_QPT_UD:
                        qp.rp = StaticRate(r.pace, now)      # the static rate paces the requester from now on
                    if is_run:
                        mtu = pkt.mtu
                        frame = LRH_BYTES + (GRH_BYTES if r.grh else 0) + BTH_BYTES + mtu + ICRC_BYTES + VCRC_BYTES
                        lrh = run_lrh(dlid=r.dlid, slid=r.slid, sl=r.sl, mtu=mtu, grh=r.grh)
                        grh = self._pack_grh(r, BTH_BYTES + mtu + ICRC_BYTES) if r.grh else b""
                        ent = frame + 2
                        i, total = 0, pkt.count
                        while i < total:
                            k = min(total - i, (fl.MAX_MESSAGE - size) // ent)
                            if k <= 0:
                                msgs.append([fl.HDR.pack(fl.MsgType.PACKETS, fl.VERSION, npk), *parts])
                                parts, npk, size = [], 0, fl.HDR.size
                                continue
                            parts.append(build_run(pkt.hdr, pkt.payload, mtu, total, i, k, pkt.psn0, pkt.ackreq_last,
                                                   pkt.last_hdr, pkt.first_hdr, lrh, grh))
                            if tap is not None:
                                _tap_entries(tap, qp.qp_num, parts[-1])
                            npk += k
                            size += k * ent
                            i += k
                        sent_pkts += total
                        nbytes += total * (BTH_BYTES + mtu + ICRC_BYTES)
                        continue
                    grh = self._pack_grh(r, len(pkt) + ICRC_BYTES) if r.grh else None
                    f = encap(pkt, dlid=r.dlid, slid=r.slid, sl=r.sl, grh=grh)
                    if tap is not None:
                        tap.frame(TX, qp.qp_num, f)
                    if size + 2 + len(f) > fl.MAX_MESSAGE and npk:
                        msgs.append([fl.HDR.pack(fl.MsgType.PACKETS, fl.VERSION, npk), *parts])
                        parts, npk, size = [], 0, fl.HDR.size
                    parts.append(_PLEN.pack(len(f)))
                    parts.append(f)
                    npk += 1
                    size += 2 + len(f)
                    sent_pkts += 1
                    nbytes += len(pkt) + ICRC_BYTES
            if npk:
                msgs.append([fl.HDR.pack(fl.MsgType.PACKETS, fl.VERSION, npk), *parts])
            dropped = self.link.send_messages(msgs) if msgs else 0
        finally:
            self.routing = False
        c = self.cnt
        sent = sent_pkts - dropped
        discards += dropped
        c[TX_PACKETS] += sent
        c[TX_BYTES] += nbytes
        ic = self.ib_cnt
        ic[XMIT_PACKETS] += sent
        ic[XMIT_BYTES] += nbytes
        ic[XMIT_DISCARDS] += discards
        return True

    @staticmethod
    def _pack_grh(r: IbRoute, pay_len: int) -> bytes:
        return pack_grh(sgid=r.sgid, dgid=r.dgid, pay_len=pay_len, tclass=r.tclass, flow_label=r.flow_label,
                        hop_limit=r.hop_limit)

    # -- receive
    def receive_message(self, msg, now: float) -> bool:
        """A PACKETS message whose packets all go to one QP of this port,
        checked whole (``lrh.verify_packets``: CRCs, DLID, framing, one
        DestQP and P_Key), handed to the port layer as one ``Segments``
        (the QP places in-order MIDDLE runs in one call).  False when it
        is not such a message: the packet-by-packet path takes it (and
        counts what is wrong)."""
        got = verify_packets(msg, self.lid, self.lmc_mask)
        if got is None:
            return False
        dqpn, groups = got
        if dqpn <= 1:                        # QP0, QP1: the MAD agents take them one by one
            return False
        b = PACKETS_ENTRY_LRH                # the first packet's LRH
        if (msg[b + LRH_BYTES + 2] << 8 | msg[b + LRH_BYTES + 3]) not in self.accepts_pkey:
            return False
        dlid = msg[b + 2] << 8 | msg[b + 3]
        src = LinkSource(None, msg[b + 6] << 8 | msg[b + 7], msg[b + 1] >> 4, dlid & self.lmc_mask)
        self.receive_batch([(segs, src, 0) for segs in message_segments(msg, dqpn, groups)], b"", 0, now)
        return True

    def receive_frames(self, frames, now: float) -> None:
        """Native IB packets the fabric delivered to this port."""
        datagrams = []
        ic = self.ib_cnt
        tap = self.frame_tap
        if tap is not None:                          # every frame that came, malformed ones too
            for f in frames:
                tap.frame(RX, frame_dqpn(f), f)
        lid, mask = self.lid, ~self.lmc_mask & 0xFFFF
        ok_pkeys = self.accepts_pkey
        mcast = []
        for f in frames:
            try:
                lrh, grh, body = decap(f)
            except WireError:
                ic[RCV_ERRORS] += 1
                continue
            dlid = lrh.dlid
            is_mc = MCAST_LID_BASE <= dlid < PERMISSIVE_LID
            if not is_mc and dlid != PERMISSIVE_LID and (dlid & mask) != lid:
                ic[RCV_ERRORS] += 1                  # not ours: a switch misrouted it
                continue
            if len(body) < 12:
                ic[RCV_ERRORS] += 1
                continue
            pkey = body[2] << 8 | body[3]
            if pkey not in ok_pkeys:
                ic[PKEY_VIOLATIONS] += 1
                continue
            src = LinkSource(bytes(grh) if grh is not None else None, lrh.slid, lrh.sl,
                             dlid & self.lmc_mask if not is_mc else 0)
            if is_mc and grh is not None and (body[5] << 16 | body[6] << 8 | body[7]) == MCAST_QPN:
                mcast.append((body, src, bytes(grh[24:40])))
            else:
                datagrams.append((body, src, 0))
        if datagrams:
            self.receive_batch(datagrams, b"", 0, now)
        for body, src, mgid in mcast:
            self.deliver_mcast(body, src, mgid, now)

    def _no_qp(self, dqpn: int, pkt, src, dst, now: float) -> None:
        """QP0's packets (SMPs answering a tool's umad file) to the GSI's
        umad files; an in-daemon UD user's (``ulp_qps``) to it; QP1's and
        the rest as the port layer has them."""
        if dqpn == 0 and self.gsi is not None:
            self.cnt[RX_PACKETS] += 1
            self.cnt[RX_BYTES] += len(pkt) + ICRC_BYTES
            self.gsi.receive_smp(pkt, src, now)
        elif dqpn in self.ulp_qps:
            self.cnt[RX_PACKETS] += 1
            self.cnt[RX_BYTES] += len(pkt) + ICRC_BYTES
            self.ulp_qps[dqpn].receive(pkt, now, src)
        else:
            Port._no_qp(self, dqpn, pkt, src, dst, now)

    def send_smp(self, mad: bytes, dlid: int) -> bool:
        """An SMP from QP0 (VL15; a directed-route one to the permissive
        LID leaves from the permissive LID too): straight to the fabric,
        as the kernel's SMI sends.  False when the fabric is not attached."""
        if not self.link.connected:
            return False
        slid = PERMISSIVE_LID if dlid == PERMISSIVE_LID else self.lid
        frame = encap(build(UD_SEND_ONLY, 0, 0, mad, deth=(0, 0)), dlid=dlid, slid=slid, vl=VL15)
        dropped = self.link.send_packets([frame])
        self.ib_cnt[XMIT_DISCARDS] += dropped
        if not dropped and self.frame_tap is not None:
            self.frame_tap.frame(TX, 0, frame)
        if not dropped:
            self.cnt[TX_PACKETS] += 1
            self.cnt[TX_BYTES] += len(frame) - 8 - 2       # as the port counts: BTH .. ICRC
        return not dropped

    # the port layer's link hooks
    def _resolve(self, av, peers):
        raise NotImplementedError("an IB port routes its own packets (IbPort.route)")

    def _peer(self, entry):
        entry.peer_av = entry.qp.av
        entry.peer = None
        return None

    def _grh(self, src, dst, nbytes):
        return src                                   # the LinkSource: transport.unreliable reads it

    def drain(self, now: float, devices_by_ip: dict | None = None) -> None:
        """Read the fabric connection empty (before a timer fires)."""
        self.service(now)

    def service(self, now: float) -> bool:
        """Read what the fabric sent: PORT_INFO mirrored, PACKETS received.
        False when the connection ended (the caller closes it)."""
        msgs, ended = self.link.receive()
        for t, msg in msgs:
            if t == fl.MsgType.PACKETS:
                if self.vports is not None and self.vports.receive(msg, now):
                    continue
                self.pull_receives()
                if self.frame_tap is None and self.receive_message(msg, now):
                    continue
                try:
                    frames = list(fl.iter_packets(msg))
                except WireError:
                    self.ib_cnt[RCV_ERRORS] += 1
                    continue
                self.receive_frames(frames, now)
            elif t == fl.MsgType.PORT_INFO:
                try:
                    self.apply(fl.parse_port_info(msg))
                except WireError:
                    continue
                if self.vports is not None:
                    self.vports.port_changed()
        return not ended

    def pull_receives(self) -> None:
        """Receives posted to the rings before these packets came (the
        device's own; a port without rings has none)."""

    def cc_changed(self) -> None:
        self.route_cache.clear()

    def set_gso(self, on: bool) -> None:
        pass


class IbSubPort(IbPort):
    """Port 2 (3, ...) of an ``IbDevice``: a port of its own -- its fabric
    link, PortInfo, LID, GID and P_Key tables, counters, QP0/QP1 (its own
    ``Gsi``) and umad files -- over the device's QPs (``qps``, shared: a
    QP is the device's, the port it sends from is its INIT ``port_num``).
    Port 1 is the device itself (``IbDevice`` is an ``IbPort``)."""

    def __init__(self, dev: "IbDevice", num: int, fabric: str, node: str, ca_port: int,
                 directory: str | None = None):
        IbPort.__init__(self, fabric, node, ca_port, dev.name, directory, num=num)
        self.hca = dev
        self.name = dev.name
        self.qps = dev.qps                           # the device's QPs: a packet to a QPN finds it on any port
        self.mcast_qps = dev.mcast_qps
        self.failures = dev.failures
        self.cc = dev.cc
        self.gsi = Gsi(self)                         # QP1 of this port: its MADs leave from it
        self.gsi.umad = Umad(self)

    def pull_receives(self) -> None:
        self.hca.pull_receives()

    def close(self) -> None:
        self.link.close()
        self.gsi.umad.close_all()


class IbDevice(DeviceCore, IbPort):
    """A device whose ports are CA ports of fabrics (``rdma link add NAME
    type ib fabric BASE node NODE``; ``NAME/2 ...`` adds port 2): port 1 is
    the device itself, further ports are ``IbSubPort``s (``ib_ports``).
    A QP's packets leave from the port its INIT ``port_num`` names (the
    kernel's ``qp->port``); each port receives into the device's QPs."""

    link_layer = LINK_LAYER_IB

    def __init__(self, name: str, fabric: str, node: str, *, port_num: int = 1, caps: DeviceCaps | None = None,
                 directory: str | None = None):
        IbPort.__init__(self, fabric, node, port_num, name, directory)
        self._init_core(name, caps or DeviceCaps(active_mtu=5))
        self.caps.link_layer = LINK_LAYER_IB
        self.mac = bytes(6)
        self.gsi.umad = Umad(self)                   # the diags' MADs through QP1 (``-C NAME``)
        self.ib_ports: list[IbPort] = [self]         # by port number - 1
        self.directory = directory

    def port(self, num: int) -> IbPort:
        """Port ``num`` (1-based); EINVAL when the device has no such port."""
        if type(num) is not int or not 1 <= num <= len(self.ib_ports):
            raise VerbsError(errno.EINVAL, f"{self.name} has no port {num}")
        return self.ib_ports[num - 1]

    def add_port(self, fabric: str, node: str, ca_port: int) -> IbSubPort:
        """The next port (``phys_port_cnt`` + 1), not yet connected."""
        p = IbSubPort(self, len(self.ib_ports) + 1, fabric, node, ca_port, self.directory)
        self.ib_ports.append(p)
        self.caps.phys_port_cnt = len(self.ib_ports)
        return p

    def remove_port(self, p: IbSubPort) -> None:
        """Take the last port away (``rdma link delete NAME/N``)."""
        assert p is self.ib_ports[-1] and p is not self
        self.ib_ports.pop()
        self.caps.phys_port_cnt = len(self.ib_ports)
        p.close()

    def route(self, peers, now: float) -> bool:
        """Each port sends what its QPs emitted: a QP's packets move to the
        port of its ``port_num`` first (one port: nothing to sort)."""
        ports = self.ib_ports
        if len(ports) == 1:
            return IbPort.route(self, peers, now)
        tx = self.tx
        if tx and not self.routing:
            keep = []
            for item in tx:
                n = getattr(item[0], "attr", None)
                n = n.port_num if n is not None else 1
                if n == 1 or n > len(ports):
                    keep.append(item)
                else:
                    ports[n - 1].tx.append(item)
            tx[:] = keep
        sent = IbPort.route(self, peers, now)
        for p in ports[1:]:
            sent = p.route(peers, now) or sent
        return sent

    def drain(self, now: float, devices_by_ip: dict | None = None) -> None:
        for p in self.ib_ports:
            p.service(now)

    def check_av(self, av, peers) -> None:
        """The AV's port (``port_num``: EINVAL when the device has none such) checks it."""
        IbPort.check_av(self.port(av.port_num) if av.port_num != 1 else self, av, peers)

    def add_qp(self, dqp) -> None:
        DeviceCore.add_qp(self, dqp)
        dqp.qp.local_peer = None                     # every packet crosses the fabric: no loopback short cut

    def local_peer_dqp(self, qp):
        return None

    def add_capture(self, cap) -> None:
        if self.frame_tap is None:
            self.frame_tap = Tap()
        self.frame_tap.captures.append(cap)

    def remove_capture(self, cap) -> None:
        tap = self.frame_tap
        if tap is not None and cap in tap.captures:
            tap.captures.remove(cap)
            if not tap.captures:
                self.frame_tap = None

    def pull_receives(self) -> None:
        """Take the receive WQEs already in the rings before a batch of
        packets is received: an application posts its receive before it
        tells the peer to send, and a HCA has seen that doorbell by the time
        the peer's packets arrive -- a UC message or a UD datagram must
        not be dropped for want of a WQE the ring holds."""
        for srq in self.srqs:
            if srq.wq.ring.words[W_PRODUCER] != srq.wq.tail:
                self._pull_srq(srq)
        for dqp in self.qps.values():
            rq = dqp.rq
            if rq is not None and rq.ring.words[W_PRODUCER] != rq.tail:
                self._pull_rq(dqp)

    def close(self) -> None:
        self.link.close()
        self.mcast.close()
        self.gsi.umad.close_all()
        for p in self.ib_ports[1:]:
            p.close()

    def remove_qp(self, dqp) -> None:
        DeviceCore.remove_qp(self, dqp)
        qp = dqp.qp
        for p in self.ib_ports[1:]:
            p.tx[:] = [t for t in p.tx if t[0] is not qp]

    def av_from(self, d: dict) -> AddressVector:
        return AddressVector(dgid=bytes.fromhex(d.get("dgid", "00" * 16)), sgid_index=d.get("sgid_index", 0),
                             flow_label=d.get("flow_label", 0), hop_limit=d.get("hop_limit", 64),
                             traffic_class=d.get("traffic_class", 0), sl=d.get("sl", 0), dlid=d.get("dlid", 0),
                             port_num=d.get("port_num", 1), is_global=bool(d.get("is_global", False)),
                             src_path_bits=d.get("src_path_bits", 0), static_rate=d.get("static_rate", 0))


__all__ = ["IbPort", "IbSubPort", "IbDevice", "IbRoute", "message_segments", "pkey_accepts", "LINK_LAYER_IB", "IB_COUNTERS"]
