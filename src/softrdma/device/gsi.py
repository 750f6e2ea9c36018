"""QP1, the GSI of a device's port: management datagrams on the wire.

What the kernel's MAD layer (drivers/infiniband/core/mad.c) does for the
general services interface, for one RoCE port:

* receive: a UD SEND_ONLY to QPN 1 whose DETH Q_Key is ``IB_QP1_QKEY``
  and whose payload is exactly one 256-byte MAD with base version 1 --
  anything else is dropped and counted (``dropped``, a list by
  ``transport.counters.GsiDrop``; ``rx_dropped`` by name);
* a response (method bit 0x80) is matched to the request it answers by
  its transaction ID (``request``: timeout, retries, one callback with the
  response or None -- the port's ``mgmt.agent.MadAgent`` keeps them, all
  64 TID bits, no window); unmatched responses go to the class's agent;
* a request goes to the agent registered for its management class (the
  CM, ``mgmt.cm.CmAgent``); a Get/Set that no agent takes is answered
  as generate_unmatched_resp does: GetResp with status
  UNSUPPORTED_METHOD_ATTRIB;
* send: the MAD as the payload of a UD SEND_ONLY from QPN 1 (DETH Q_Key
  ``IB_QP1_QKEY``, source QP 1, P_Key 0xFFFF), through the device's
  ordinary output (``Device.tx``), so the socket, loopback, fault and
  capture paths all see it.

Addresses are GIDs (RoCEv2: the IPv4-mapped or IPv6 address).  On an
InfiniBand port a MAD comes with the port's ``LinkSource`` (SLID, SL, the
GRH if any) and leaves LID-routed (``send_lid``); the port's umad files
(``device.umad``: the diags' MADs) see it first, then the answers to the
daemon's own requests (``request_lid``: rdma_cm's SA PathRecord queries),
then the class's agent (the CM, told the SLID and SL to answer to).  No clocks:
``tick(now)`` fires retries, ``deadline`` says when.
"""

from __future__ import annotations

from ..mgmt.agent import MadAgent
from ..transport.counters import GsiDrop, as_dict, new_gsi_drops
from ..transport.unreliable import LinkSource
from ..transport.wr import AddressVector
from ..wire.errors import WireError
from ..wire.gid import ip_gid
from ..wire.mad import (
    IB_MGMT_MAD_SIZE,
    IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB,
    IB_QP1,
    IB_QP1_QKEY,
    Method,
    parse_mad,
)
from ..wire.opcodes import Opcode
from ..wire.packet import build, parse

UD_SEND_ONLY = int(Opcode.UD_SEND_ONLY)
_GET, _SET, _GET_RESP = int(Method.GET), int(Method.SET), int(Method.GET_RESP)
DROP_OPCODE, DROP_QKEY, DROP_LENGTH, DROP_MAD = (int(GsiDrop.opcode), int(GsiDrop.qkey), int(GsiDrop.length),
                                             int(GsiDrop.mad))


class Gsi:
    """QP1 of one device (one port)."""

    qp_num = IB_QP1
    tx_runs = None             # not a transport QP: the port never asks it for SegmentRuns

    def __init__(self, device):
        self.device = device
        self.psn = 0
        self.agents: dict[int, object] = {}        # mgmt class -> agent.receive(mad, src_gid, now, dst_gid)
        self.mad_agent = MadAgent(tid_mask=(1 << 64) - 1)    # our requests, dest = (GID, our GID)
        self.rx_mads = self.tx_mads = self.unsupported = 0
        self.dropped = new_gsi_drops()               # by GsiDrop
        self.umad = None                             # an IB port's umad files (device.umad.Umad)

    @property
    def rx_dropped(self) -> dict[str, int]:
        """The MADs dropped, by reason (``GsiDrop``)."""
        return as_dict(self.dropped, GsiDrop)

    @property
    def counters(self) -> dict:
        a = self.mad_agent
        return {"rx_mads": self.rx_mads, "tx_mads": self.tx_mads, "tx_retries": a.retried,
                "timeouts": a.failed, "unmatched_responses": a.unmatched, "unsupported": self.unsupported}

    @property
    def requests(self) -> dict:
        """The outstanding requests, by TID."""
        return self.mad_agent.sends

    # -- agents ------------------------------------------------------------------------------
    def register(self, mgmt_class: int, agent) -> None:
        """``agent.receive(mad, src_gid, now, dst_gid)`` takes this class's MADs."""
        self.agents[int(mgmt_class)] = agent

    # -- receive -----------------------------------------------------------------------------
    def receive(self, pkt, src: bytes, dst: bytes, now: float) -> None:
        """A packet for QPN 1 (framing already checked by ``wire.check``)
        from IP address ``src`` to ``dst`` (4 or 16 bytes)."""
        if pkt[0] != UD_SEND_ONLY:
            self.dropped[DROP_OPCODE] += 1
            return
        p = parse(pkt)
        if p.deth is None or p.deth.qkey != IB_QP1_QKEY:
            self.dropped[DROP_QKEY] += 1                  # rxe check_keys: a Q_Key violation
            return
        mad = p.payload
        if len(mad) != IB_MGMT_MAD_SIZE:
            self.dropped[DROP_LENGTH] += 1
            return
        try:
            hdr, _ = parse_mad(mad)
        except WireError:
            self.dropped[DROP_MAD] += 1
            return
        self.rx_mads += 1
        mad = bytes(mad)
        if src.__class__ is LinkSource:               # an InfiniBand port: LID-routed
            self._receive_ib(mad, hdr, src, p.deth.src_qp, now)
            return
        src_gid, dst_gid = ip_gid(src), ip_gid(dst)
        if self.mad_agent.deliver(mad, now, src_gid):
            return
        agent = self.agents.get(hdr.mgmt_class)
        if agent is not None:
            agent.receive(mad, src_gid, now, dst_gid)
        elif hdr.method in (_GET, _SET):
            self.unsupported += 1
            resp = bytearray(mad)
            resp[3] = _GET_RESP
            resp[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            self.send(bytes(resp), src_gid, dst_gid)

    def receive_smp(self, pkt, src, now: float) -> None:
        """A packet for QP0 of an IB port (an SMP answering a umad file's
        request: the port's own SMA is the fabric's): to the umad files."""
        if pkt[0] != UD_SEND_ONLY:
            self.dropped[DROP_OPCODE] += 1
            return
        p = parse(pkt)
        if p.deth is None:
            self.dropped[DROP_QKEY] += 1
            return
        if len(p.payload) != IB_MGMT_MAD_SIZE:
            self.dropped[DROP_LENGTH] += 1
            return
        self.rx_mads += 1
        umad = self.umad
        if umad is None or not umad.deliver(bytes(p.payload), src, p.deth.src_qp, now):
            self.dropped[DROP_MAD] += 1

    def _receive_ib(self, mad: bytes, hdr, src, sqp: int, now: float) -> None:
        """A MAD on an IB port: a umad file's (a tool's answer, or a request
        of a class it serves), else the daemon's agents (with the GRH's
        source GID when the MAD came with one), else a Get/Set answered
        UNSUPPORTED_METHOD_ATTRIB back to the SLID."""
        umad = self.umad
        if umad is not None and umad.deliver(mad, src, sqp, now):
            return
        if src.grh is not None:
            src_gid, dst_gid = bytes(src.grh[8:24]), bytes(src.grh[24:40])
        else:                                  # LID-routed: the sender is its SLID
            src_gid, dst_gid = b"", b""
        if self.mad_agent.deliver(mad, now, ("lid", src.slid, src.sl)):
            return                             # the answer to one of our requests (an SA query)
        agent = self.agents.get(hdr.mgmt_class)
        if agent is not None:
            agent.receive(mad, src_gid, now, dst_gid, src_lid=src.slid, sl=src.sl)
            return
        if hdr.method in (_GET, _SET):
            self.unsupported += 1
            resp = bytearray(mad)
            resp[3] = _GET_RESP
            resp[4:6] = IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB.to_bytes(2, "big")
            self.send_lid(bytes(resp), src.slid, sl=src.sl, dqpn=sqp)

    # -- send --------------------------------------------------------------------------------
    def send_lid(self, mad: bytes, dlid: int, *, sl: int = 0, dqpn: int = IB_QP1, qkey: int = IB_QP1_QKEY,
                 path_bits: int = 0, dgid: bytes | None = None, hop_limit: int = 64) -> None:
        """One MAD from QP1 of an InfiniBand port to LID ``dlid`` (a GRH to
        ``dgid`` when given), QP ``dqpn`` with Q_Key ``qkey``."""
        av = AddressVector(dgid=dgid or bytes(16), dlid=dlid, sl=sl, src_path_bits=path_bits,
                           is_global=dgid is not None, hop_limit=hop_limit)
        pkt = build(UD_SEND_ONLY, dqpn, self.psn, mad, deth=(qkey, IB_QP1))
        self.psn = (self.psn + 1) & 0xFFFFFF
        self.tx_mads += 1
        self.device.tx.append((self, pkt, av))

    def send(self, mad: bytes, dest_gid: bytes, src_gid: bytes = b"", *, hop_limit: int = 64,
             traffic_class: int = 0, flow_label: int = 0) -> None:
        """One MAD to QP1 of ``dest_gid``, from our GID ``src_gid``."""
        dev = self.device
        idx = dev.gid_table.find(bytes(src_gid)) if src_gid else None
        av = AddressVector(dgid=dest_gid, sgid_index=idx if idx is not None else self._default_index(),
                           hop_limit=hop_limit, traffic_class=traffic_class, flow_label=flow_label)
        pkt = build(UD_SEND_ONLY, IB_QP1, self.psn, mad, deth=(IB_QP1_QKEY, IB_QP1))
        self.psn = (self.psn + 1) & 0xFFFFFF
        self.tx_mads += 1
        dev.tx.append((self, pkt, av))

    def _default_index(self) -> int:
        """The first GID that has a socket (an address, not the link-local default)."""
        for i, e in self.device.gid_table:
            if i:
                return i
        return 0

    def request(self, mad: bytes, dest_gid: bytes, done, *, now: float, timeout_ms: int = 1000,
                retries: int = 3, src_gid: bytes = b"") -> None:
        """Send a request and call ``done(response_mad)`` when the response
        with its TID arrives, or ``done(None)`` after ``retries`` re-sends
        each ``timeout_ms`` unanswered.  A TID already outstanding: ValueError."""
        self.mad_agent.post_send(mad, done, dest=(bytes(dest_gid), bytes(src_gid)), own_tid=True,
                                 timeout=timeout_ms / 1000.0, retries=retries)
        self._flush(now)

    def request_lid(self, mad: bytes, dlid: int, done, *, now: float, sl: int = 0, timeout_ms: int = 1000,
                    retries: int = 3) -> None:
        """``request`` on an InfiniBand port: to QP1 of LID ``dlid`` (the
        SM's, for an SA query), LID-routed with SL ``sl``."""
        self.mad_agent.post_send(mad, done, dest=("lid", int(dlid), int(sl)), own_tid=True,
                                 timeout=timeout_ms / 1000.0, retries=retries)
        self._flush(now)

    def _flush(self, now: float) -> None:
        for dest, mad in self.mad_agent.take(now):
            if dest[0] == "lid":
                self.send_lid(mad, dest[1], sl=dest[2])
            else:
                self.send(mad, dest[0], dest[1])

    def cancel(self, tid: int) -> None:
        self.mad_agent.cancel(tid)

    @property
    def deadline(self) -> float | None:
        return self.mad_agent.deadline

    def tick(self, now: float) -> None:
        self.mad_agent.tick(now)
        self._flush(now)


__all__ = ["Gsi"]
