"""The IB CM agent of one port: its ID table, its output and its receive.

Modelled on the kernel's drivers/infiniband/core/cm.c: one ``CmAgent`` per
port (its CA GUID and GID) owns the connection IDs (``ids.CmId``) whose
states are ``ib_cm_state``'s.  No sockets, threads or clocks:

* inputs are calls -- ``listen``, ``connect`` (REQ), ``receive(mad, src_gid,
  now)``, ``accept`` (REP), ``reject`` (REJ), ``send_rtu``, ``disconnect``
  (DREQ), ``send_drep``, ``send_mra``, ``established`` (COMM_EST),
  ``sidr_request``/``sidr_reply``, ``destroy``, ``tick(now)``;
* outputs are two lists the caller drains: ``mads`` (``OutMad``: the 256
  bytes and the destination GID) and ``events`` (``CmEvent``), and
  ``deadline``, when ``tick`` wants to be called next.

This module holds what every message shares: the tables (local IDs,
listens, remote comm IDs, remote QPNs, remote SIDR requests), ``destroy``
(answering the peer as cm_destroy_id does), sending (responses for no ID
too: cm_issue_rej, cm_issue_drep) and the receive dispatch.  Each message's
handling is in the module of its job, mixed in here: ``request`` (REQ, REP,
RTU, LAP/APR), ``reject`` (REJ, MRA), ``disconnect`` (DREQ, DREP), ``sidr``
(SIDR_REQ, SIDR_REP), ``timers`` (retries, timeouts, TIMEWAIT),
``init_qp_attr`` (ib_cm_init_qp_attr), ``counters`` (ib_cm's sysfs groups).
"""

from __future__ import annotations

import random

from ...wire.cm import CmMsgResponse, RejReason, SidrStatus, decode, encode_mad
from ...wire.errors import WireError
from .counters import COUNTER_INDEX, CmCounters
from .disconnect import CmDisconnect
from .ids import CmEvent, CmEventType, CmId, CmState, OutMad
from .init_qp_attr import CmInitQpAttr
from .reject import CmReject
from .request import CmRequest
from .sidr import CmSidr
from .timers import CmTimers


class CmAgent(CmRequest, CmReject, CmDisconnect, CmSidr, CmTimers, CmInitQpAttr, CmCounters):
    """The CM of one port."""

    def __init__(self, ca_guid: int, gid: bytes, *, hi_tid: int = 1, rng: random.Random | None = None,
                 now: float = 0.0, answer_lap: bool = False, ca_ack_delay: int = 15, port_num: int = 1):
        CmCounters.__init__(self)
        self.ca_guid = ca_guid
        self.port_num = port_num                  # the port it is the CM of (qp_attrs' port_num)
        self.gid = bytes(gid)
        self.hi_tid = hi_tid & 0xFFFFFFFF
        self.ca_ack_delay = ca_ack_delay          # the device's local CA ACK delay (rxe: 15)
        self.answer_lap = answer_lap
        self.rng = rng or random.Random()
        self.now = now
        self.ids: dict[int, CmId] = {}
        self.listens: list[CmId] = []
        self.remote_ids: dict[tuple[int, int], CmId] = {}
        self.remote_qpns: dict[tuple[int, int], CmId] = {}
        self.remote_sidr: dict[tuple[int, bytes], CmId] = {}
        self.mads: list[OutMad] = []
        self.events: list[CmEvent] = []
        self._rx_dst = self.gid
        self._rx_lid: int | None = None           # the SLID and SL of the MAD being received (IB)
        self._rx_sl = 0

    # --- ids ---------------------------------------------------------------------------
    def create_id(self, context=None) -> CmId:
        while True:
            local_id = self.rng.getrandbits(32)
            if local_id and local_id not in self.ids:
                break
        cm_id = CmId(self, local_id, context)
        self.ids[local_id] = cm_id
        return cm_id

    def destroy(self, cm_id: CmId) -> None:
        """ib_destroy_cm_id: answer the peer as cm_destroy_id does, then forget."""
        s = cm_id.state
        if s == CmState.LISTEN:
            self.listens.remove(cm_id)
        elif s in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD):
            self._cancel(cm_id)
            self._send_rej(cm_id, RejReason.TIMEOUT, ari=self.ca_guid.to_bytes(8, "big"),
                           msg_rejected=CmMsgResponse.REQ)
        elif s in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT, CmState.REP_RCVD, CmState.MRA_REP_SENT):
            self._send_rej(cm_id, RejReason.CONSUMER_DEFINED)
        elif s in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            self._cancel(cm_id)
            self._send_rej(cm_id, RejReason.CONSUMER_DEFINED)
        elif s == CmState.ESTABLISHED:
            self._send_dreq_msg(cm_id, b"")   # not waited for: the ID is gone
            self._cancel(cm_id)
        elif s == CmState.DREQ_RCVD:
            self._out(cm_id, "DREP", self._drep_fields(cm_id, b""))
        elif s == CmState.SIDR_REQ_RCVD:                 # cm_reject_sidr_req
            self._out(cm_id, "SIDR_REP", {"requestid": cm_id.remote_id, "status": SidrStatus.REJECT,
                                          "serviceid": cm_id.service_id})
        self._unlink(cm_id)
        self.ids.pop(cm_id.local_id, None)
        cm_id.state = CmState.IDLE

    def _unlink(self, cm_id: CmId) -> None:
        if cm_id.remote_key is not None and self.remote_ids.get(cm_id.remote_key) is cm_id:
            del self.remote_ids[cm_id.remote_key]
        if cm_id.remote_key is not None and self.remote_sidr.get(cm_id.remote_key) is cm_id:
            del self.remote_sidr[cm_id.remote_key]
        cm_id.remote_key = None
        if cm_id.qpn_key is not None and self.remote_qpns.get(cm_id.qpn_key) is cm_id:
            del self.remote_qpns[cm_id.qpn_key]
        cm_id.qpn_key = None

    def _reset_to_idle(self, cm_id: CmId) -> None:
        cm_id.state = CmState.IDLE
        self._cancel(cm_id)
        cm_id.timewait_deadline = None
        self._unlink(cm_id)

    # --- output --------------------------------------------------------------------------
    def _mad(self, attr: str, tid: int, fields: dict) -> bytes:
        return bytes(encode_mad(attr, tid=tid, **fields))

    def _emit(self, dest: bytes, attr: str, mad: bytes, src: bytes = b"", dlid: int | None = None,
              sl: int = 0) -> None:
        self.mads.append(OutMad(dest, mad, attr, src or self.gid, dlid, sl))

    def _emit_to(self, cm_id: CmId, attr: str, mad: bytes) -> None:
        """A MAD to the connection's peer: its GID, and on InfiniBand its LID and SL."""
        self._emit(cm_id.remote_gid, attr, mad, cm_id.local_gid, cm_id.remote_lid, cm_id.mad_sl)

    def _out(self, cm_id: CmId, attr: str, fields: dict) -> bytes:
        """Send an unretried message (a response)."""
        mad = self._mad(attr, cm_id.tid, fields)
        self.cm_tx_msgs[COUNTER_INDEX[attr]] += 1
        self._emit_to(cm_id, attr, mad)
        return mad

    def _event(self, etype: CmEventType, cm_id: CmId, msg: dict | None = None, **kw) -> None:
        self.events.append(CmEvent(etype, cm_id, msg or {}, **kw))

    def _issue(self, dest: bytes, attr: str, tid: int, fields: dict) -> None:
        """A response for no cm_id (cm_issue_rej, cm_issue_drep)."""
        self.cm_tx_msgs[COUNTER_INDEX[attr]] += 1
        self._emit(dest, attr, self._mad(attr, tid, fields), self._rx_dst, self._rx_lid, self._rx_sl)

    # --- consumer calls --------------------------------------------------------------------
    def listen(self, service_id: int, mask: int = 0xFFFFFFFFFFFFFFFF, context=None) -> CmId:
        """ib_cm_listen: REQs whose service ID & mask equal service_id & mask."""
        for other in self.listens:
            m = other.service_mask & mask
            if other.service_id & m == service_id & m:
                raise ValueError(f"service ID {service_id:#x} already listened on (EBUSY)")
        cm_id = self.create_id(context)
        cm_id.service_id = service_id & mask
        cm_id.service_mask = mask
        cm_id.state = CmState.LISTEN
        self.listens.append(cm_id)
        return cm_id

    # --- receive -------------------------------------------------------------------------------
    def receive(self, mad: bytes, src_gid: bytes, now: float, dst_gid: bytes = b"", *,
                src_lid: int | None = None, sl: int = 0) -> None:
        """A CM MAD from ``src_gid`` (to our ``dst_gid``); on an InfiniBand
        port from LID ``src_lid`` with SL ``sl`` (a LID-routed MAD has no
        GID: ``src_gid`` empty -- a REQ names its sender's GID itself);
        anything ``decode`` refuses is counted and dropped."""
        self.now = now
        self._rx_dst = bytes(dst_gid) or self.gid
        self._rx_lid, self._rx_sl = src_lid, sl
        try:
            m = decode(mad)
        except WireError:
            self.rx_drops += 1
            return
        name = m["message"]
        self.cm_rx_msgs[COUNTER_INDEX[name]] += 1
        getattr(self, "_rx_" + name.lower())(m, bytes(src_gid))

    def _lookup(self, local_id: int, remote_id: int | None) -> CmId | None:
        """cm_acquire_id: ours by local ID, its remote ID checked (None: any)."""
        cm_id = self.ids.get(local_id)
        if cm_id is None or (remote_id is not None and cm_id.remote_id != remote_id):
            return None
        return cm_id

    def _find_listen(self, service_id: int) -> CmId | None:
        for lid in self.listens:                      # cm_find_listen
            if service_id & lid.service_mask == lid.service_id:
                return lid
        return None
