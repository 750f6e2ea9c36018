"""The IB Communication Manager (IBA ch. 12) as a sans-IO state machine.

Modelled on the kernel's drivers/infiniband/core/cm.c: one ``CmAgent`` per
port (its CA GUID and GID) owns the connection IDs (``CmId``) whose states
are ``ib_cm_state``'s.  No sockets, threads or clocks:

* inputs are calls -- ``listen``, ``connect`` (REQ), ``receive(mad, src_gid,
  now)``, ``accept`` (REP), ``reject`` (REJ), ``send_rtu``, ``disconnect``
  (DREQ), ``send_drep``, ``send_mra``, ``established`` (COMM_EST),
  ``sidr_request``/``sidr_reply``, ``destroy``, ``tick(now)``;
* outputs are two lists the caller drains: ``mads`` (``OutMad``: the 256
  bytes and the destination GID) and ``events`` (``CmEvent``), and
  ``deadline``, when ``tick`` wants to be called next.

What the kernel does, and so this does:

* Timeouts (cm_convert_to_ms: 4.096 us * 2^t, as 1 << max(t - 8, 0) ms).
  A REQ waits ``2 * packet life time + the remote CM response timeout``;
  a REP the REQ's local CM response timeout; a DREQ the connection's
  timeout.  An MRA replaces the wait by ``its service timeout + the ack
  timeout``.  After ``max_cm_retries`` re-sends: REQ_ERROR / REP_ERROR
  (back to IDLE) or DREQ_ERROR (TIMEWAIT) -- cm_process_send_error.
* Duplicates (cm_dup_req_handler, cm_dup_rep_handler, cm_dreq_handler,
  cm_rtu_handler): counted in ``cm_rx_duplicates``; a duplicate REQ is
  answered by the stored MRA in MRA_REQ_SENT, by REJ(stale connection) in
  TIMEWAIT, and dropped otherwise (the REP's own retries answer it); a
  duplicate REP by the RTU in ESTABLISHED or the MRA in MRA_REP_SENT; a
  duplicate DREQ by a DREP in TIMEWAIT; a DREQ for no connection by a
  DREP (cm_issue_drep).
* REJs: no listener -> INVALID_SERVICE_ID, an unsupported transport ->
  INVALID_TRANSPORT_TYPE, a second connection from the same remote QP ->
  STALE_CONN, ``destroy`` in REQ_SENT -> TIMEOUT (with the CA GUID as ARI,
  found by the other side through its remote-ID table), the consumer's
  ``reject`` with its reason and private data.
* LAP/APR (path migration is not implemented): dropped, as the kernel does
  on a RoCE port; ``answer_lap=True`` answers a LAP with APR(UNSUPPORTED).
* Transaction IDs: the agent's ``hi_tid`` << 32 | the local comm ID for
  requests, the request's TID for responses (cm_form_tid).  Comm IDs are
  random, nonzero, 32 bits.
* Counters ``cm_tx_msgs``, ``cm_tx_retries``, ``cm_rx_msgs``,
  ``cm_rx_duplicates`` (ib_cm's sysfs groups), each a list indexed by
  ``CmAttr - 0x10`` (CM_REQ_COUNTER ... CM_APR_COUNTER); ``rx_drops``
  counts the MADs ``decode`` refused.
* ``qp_attrs(cm_id, "RTR"/"RTS")`` -- ib_cm_init_qp_attr.
* SIDR (UD): ``sidr_request`` / ``sidr_reply``; no listener -> SIDR_REP
  status UNSUPPORTED (cm_reject_sidr_req); duplicates by (request ID,
  source GID) counted and dropped; no answer after the retries ->
  SIDR_REQ_ERROR.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import IntEnum

from ...enums import ibv_qp_attr_mask as M
from ...enums import ibv_qp_state as QPS
from ...wire.cm import (
    PRIVATE_DATA_SIZE,
    AprStatus,
    CmMsgResponse,
    RejReason,
    SidrStatus,
    decode,
    encode_mad,
)
from ...wire.errors import WireError

__all__ = [
    "COUNTER_NAMES",
    "AcceptParams",
    "CmAgent",
    "CmEvent",
    "CmEventType",
    "CmId",
    "CmState",
    "ConnectParams",
    "OutMad",
    "cm_convert_to_ms",
    "qp_attr_mask",
]


class CmState(IntEnum):
    """enum ib_cm_state."""

    IDLE = 0
    LISTEN = 1
    REQ_SENT = 2
    REQ_RCVD = 3
    MRA_REQ_SENT = 4
    MRA_REQ_RCVD = 5
    REP_SENT = 6
    REP_RCVD = 7
    MRA_REP_SENT = 8
    MRA_REP_RCVD = 9
    ESTABLISHED = 10
    DREQ_SENT = 11
    DREQ_RCVD = 12
    TIMEWAIT = 13
    SIDR_REQ_SENT = 14
    SIDR_REQ_RCVD = 15


class CmEventType(IntEnum):
    """enum ib_cm_event_type."""

    REQ_ERROR = 0
    REQ_RECEIVED = 1
    REP_ERROR = 2
    REP_RECEIVED = 3
    RTU_RECEIVED = 4
    USER_ESTABLISHED = 5
    DREQ_ERROR = 6
    DREQ_RECEIVED = 7
    DREP_RECEIVED = 8
    TIMEWAIT_EXIT = 9
    MRA_RECEIVED = 10
    REJ_RECEIVED = 11
    LAP_ERROR = 12
    LAP_RECEIVED = 13
    APR_RECEIVED = 14
    SIDR_REQ_ERROR = 15
    SIDR_REQ_RECEIVED = 16
    SIDR_REP_RECEIVED = 17


#: The counter index of each message (enum cm_counter_index).
COUNTER_NAMES = ("req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep",
                 "lap", "apr")
_INDEX = {n.upper(): i for i, n in enumerate(COUNTER_NAMES)}

# Transport service types of the REQ.
RC, UC = 0, 1
QP_TYPE_RC, QP_TYPE_UC, QP_TYPE_UD = "RC", "UC", "UD"


def cm_convert_to_ms(iba_time: int) -> int:
    """4.096 us * 2^iba_time, in (rounded-up power of two) milliseconds."""
    return 1 << max(iba_time - 8, 0)


def cm_ack_timeout(ca_ack_delay: int, packet_life_time: int) -> int:
    """The QP's local ACK timeout exponent (cm.c cm_ack_timeout)."""
    ack_timeout = packet_life_time + 1
    if ack_timeout >= ca_ack_delay:
        ack_timeout += ca_ack_delay >= ack_timeout - 1
    else:
        ack_timeout = ca_ack_delay + (ack_timeout >= ca_ack_delay - 1)
    return min(31, ack_timeout)


@dataclass
class OutMad:
    dest_gid: bytes
    data: bytes
    attr: str
    #: the local GID it leaves from (the connection's; the agent's by default)
    src_gid: bytes = b""


@dataclass
class CmEvent:
    type: CmEventType
    cm_id: CmId
    #: the received message's decoded fields (for *_RECEIVED), else {}
    msg: dict = field(default_factory=dict)
    listen_id: CmId | None = None

    @property
    def private_data(self) -> bytes:
        return self.msg.get("private_data", b"")


@dataclass
class ConnectParams:
    """ib_cm_req_param plus the path (sa_path_rec) fields the REQ carries."""

    service_id: int
    dest_gid: bytes
    qp_num: int
    starting_psn: int = 0
    qp_type: str = QP_TYPE_RC
    private_data: bytes = b""
    responder_resources: int = 1
    initiator_depth: int = 1
    remote_cm_response_timeout: int = 20
    local_cm_response_timeout: int = 20
    retry_count: int = 7
    rnr_retry_count: int = 7
    max_cm_retries: int = 15
    srq: bool = False
    # path
    path_mtu: int = 3            # enum ib_mtu: IB_MTU_1024
    packet_life_time: int = 18   # CMA_IBOE_PACKET_LIFETIME (6.1)
    flow_control: int = 1
    pkey: int = 0xFFFF
    flow_label: int = 0
    traffic_class: int = 0
    hop_limit: int = 64
    sl: int = 0
    qkey: int = 0
    #: the local GID the connection uses (the agent's when empty)
    local_gid: bytes = b""


@dataclass
class AcceptParams:
    """ib_cm_rep_param."""

    qp_num: int
    starting_psn: int = 0
    private_data: bytes = b""
    responder_resources: int = 1
    initiator_depth: int = 1
    target_ack_delay: int = 15
    failover_accepted: int = 0
    rnr_retry_count: int = 7
    srq: bool = False
    qkey: int = 0
    flow_control: int = 1


class CmId:
    """One connection (cm_id_private)."""

    def __init__(self, agent: CmAgent, local_id: int, context=None):
        self.agent = agent
        self.local_id = local_id
        self.remote_id = 0
        self.state = CmState.IDLE
        self.context = context
        self.service_id = 0
        self.service_mask = 0
        self.remote_gid = bytes(16)
        self.local_gid = bytes(16)
        self.remote_ca_guid = 0
        self.tid = 0
        self.qp_type = QP_TYPE_RC
        self.local_qpn = 0
        self.remote_qpn = 0
        self.remote_qkey = 0
        self.sq_psn = 0
        self.rq_psn = 0
        self.path_mtu = 3
        self.responder_resources = 0
        self.initiator_depth = 0
        self.retry_count = 7
        self.rnr_retry_count = 7
        self.ack_timeout = 0          # av.timeout: the QP's local ACK timeout
        self.packet_life_time = 0
        self.flow_label = 0
        self.traffic_class = 0
        self.hop_limit = 64
        self.sl = 0
        self.pkey = 0xFFFF
        self.timeout_ms = 0
        self.max_cm_retries = 0
        self.target_ack_delay = 0
        # the outstanding, retried request (cm_id_priv->msg)
        self.msg: bytes | None = None
        self.msg_attr = ""
        self.msg_state = CmState.IDLE   # msg->context[1]
        self.msg_retries = 0
        self.msg_timeout_s = 0.0
        self.msg_deadline: float | None = None
        self.timewait_deadline: float | None = None
        # stored for resending answers to duplicates
        self.mra_msg: bytes | None = None
        self.private_data = b""
        self.remote_key = None    # (remote comm id, remote CA GUID) in agent.remote_ids
        self.qpn_key = None

    @property
    def deadline(self) -> float | None:
        ds = [d for d in (self.msg_deadline, self.timewait_deadline) if d is not None]
        return min(ds) if ds else None

    def __repr__(self) -> str:
        return f"CmId({self.local_id:#010x}, {self.state.name})"


def _pd(data: bytes, msg: str) -> bytes:
    data = bytes(data or b"")
    if len(data) > PRIVATE_DATA_SIZE[msg]:
        raise ValueError(f"{msg} private data of {len(data)} bytes > {PRIVATE_DATA_SIZE[msg]}")
    return data


class CmAgent:
    """The CM of one port."""

    def __init__(self, ca_guid: int, gid: bytes, *, hi_tid: int = 1, rng: random.Random | None = None,
                 now: float = 0.0, answer_lap: bool = False, ca_ack_delay: int = 15):
        self.ca_guid = ca_guid
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
        n = len(COUNTER_NAMES)
        self.cm_tx_msgs = [0] * n
        self.cm_tx_retries = [0] * n
        self.cm_rx_msgs = [0] * n
        self.cm_rx_duplicates = [0] * n
        self.rx_drops = 0
        self._rx_dst = self.gid

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

    def _enter_timewait(self, cm_id: CmId) -> None:
        """cm_enter_timewait: wait for the packets of the old QP to die."""
        self._cancel(cm_id)
        self._unlink(cm_id)        # cm_remove_remote(): remote ID and QPN may be reused
        cm_id.state = CmState.TIMEWAIT
        cm_id.timewait_deadline = self.now + cm_convert_to_ms(cm_id.ack_timeout) / 1000.0

    # --- output --------------------------------------------------------------------------
    def _mad(self, attr: str, tid: int, fields: dict) -> bytes:
        return bytes(encode_mad(attr, tid=tid, **fields))

    def _emit(self, dest: bytes, attr: str, mad: bytes, src: bytes = b"") -> None:
        self.mads.append(OutMad(dest, mad, attr, src or self.gid))

    def _out(self, cm_id: CmId, attr: str, fields: dict) -> bytes:
        """Send an unretried message (a response)."""
        mad = self._mad(attr, cm_id.tid, fields)
        self.cm_tx_msgs[_INDEX[attr]] += 1
        self._emit(cm_id.remote_gid, attr, mad, cm_id.local_gid)
        return mad

    def _send_retried(self, cm_id: CmId, attr: str, fields: dict) -> None:
        """ib_post_send_mad with retries: the message is cm_id->msg."""
        mad = self._mad(attr, cm_id.tid, fields)
        cm_id.msg = mad
        cm_id.msg_attr = attr
        cm_id.msg_state = cm_id.state
        cm_id.msg_retries = 0
        cm_id.msg_timeout_s = cm_id.timeout_ms / 1000.0
        cm_id.msg_deadline = self.now + cm_id.msg_timeout_s
        self.cm_tx_msgs[_INDEX[attr]] += 1
        self._emit(cm_id.remote_gid, attr, mad, cm_id.local_gid)

    def _cancel(self, cm_id: CmId) -> None:
        cm_id.msg = None
        cm_id.msg_deadline = None

    def _event(self, etype: CmEventType, cm_id: CmId, msg: dict | None = None, **kw) -> None:
        self.events.append(CmEvent(etype, cm_id, msg or {}, **kw))

    @property
    def deadline(self) -> float | None:
        ds = [d for d in (c.deadline for c in self.ids.values()) if d is not None]
        return min(ds) if ds else None

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

    def connect(self, p: ConnectParams, now: float | None = None, context=None) -> CmId:
        """ib_send_cm_req."""
        if now is not None:
            self.now = now
        if p.qp_type not in (QP_TYPE_RC, QP_TYPE_UC):
            raise ValueError(f"qp_type {p.qp_type!r}")
        pd = _pd(p.private_data, "REQ")
        cm_id = self.create_id(context)
        cm_id.service_id = p.service_id
        cm_id.remote_gid = bytes(p.dest_gid)
        cm_id.local_gid = bytes(p.local_gid) if p.local_gid else self.gid
        cm_id.qp_type = p.qp_type
        cm_id.local_qpn = p.qp_num
        # the REQ's starting PSN is the one the passive side sends with, i.e.
        # our receive PSN (cm_req_handler: sq_psn = REQ starting PSN; rdma_cm
        # sets rq_psn = its seq_num, the same number)
        cm_id.rq_psn = p.starting_psn & 0xFFFFFF
        cm_id.path_mtu = p.path_mtu
        cm_id.responder_resources = p.responder_resources
        cm_id.initiator_depth = p.initiator_depth
        cm_id.retry_count = p.retry_count
        cm_id.rnr_retry_count = p.rnr_retry_count
        cm_id.packet_life_time = p.packet_life_time
        cm_id.ack_timeout = cm_ack_timeout(self.ca_ack_delay, p.packet_life_time)   # cm_format_req
        cm_id.flow_label, cm_id.traffic_class = p.flow_label, p.traffic_class
        cm_id.hop_limit, cm_id.sl, cm_id.pkey = p.hop_limit, p.sl, p.pkey
        cm_id.timeout_ms = (cm_convert_to_ms(p.packet_life_time) * 2
                            + cm_convert_to_ms(p.remote_cm_response_timeout))
        cm_id.max_cm_retries = p.max_cm_retries
        cm_id.tid = (self.hi_tid << 32) | cm_id.local_id
        fields = {
            "local_comm_id": cm_id.local_id, "service_id": p.service_id, "local_ca_guid": self.ca_guid,
            "local_q_key": p.qkey, "local_qpn": p.qp_num,
            "responder_resources": p.responder_resources, "initiator_depth": p.initiator_depth,
            "remote_cm_response_timeout": p.remote_cm_response_timeout,
            "transport_service_type": RC if p.qp_type == QP_TYPE_RC else UC,
            "end_to_end_flow_control": p.flow_control, "starting_psn": cm_id.rq_psn,
            "local_cm_response_timeout": p.local_cm_response_timeout,
            "retry_count": p.retry_count, "partition_key": p.pkey,
            "path_packet_payload_mtu": p.path_mtu, "rnr_retry_count": p.rnr_retry_count,
            "max_cm_retries": p.max_cm_retries, "srq": int(p.srq),
            "primary_local_port_lid": 0xFFFF, "primary_remote_port_lid": 0xFFFF,
            "primary_local_port_gid": cm_id.local_gid, "primary_remote_port_gid": cm_id.remote_gid,
            "primary_flow_label": p.flow_label, "primary_packet_rate": 0,
            "primary_traffic_class": p.traffic_class, "primary_hop_limit": p.hop_limit,
            "primary_sl": p.sl, "primary_subnet_local": 0,
            "primary_local_ack_timeout": cm_id.ack_timeout, "private_data": pd,
        }
        cm_id.state = CmState.REQ_SENT
        self._send_retried(cm_id, "REQ", fields)
        return cm_id

    def accept(self, cm_id: CmId, p: AcceptParams, now: float | None = None) -> None:
        """ib_send_cm_rep."""
        if now is not None:
            self.now = now
        if cm_id.state not in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT):
            raise ValueError(f"accept in {cm_id.state.name} (EINVAL)")
        pd = _pd(p.private_data, "REP")
        cm_id.local_qpn = p.qp_num
        cm_id.rq_psn = p.starting_psn & 0xFFFFFF          # as the REQ's: what the peer sends with
        cm_id.responder_resources = p.responder_resources
        cm_id.initiator_depth = p.initiator_depth
        fields = {
            "local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id, "local_q_key": p.qkey,
            "local_qpn": p.qp_num, "starting_psn": cm_id.rq_psn,
            "responder_resources": p.responder_resources, "initiator_depth": p.initiator_depth,
            "target_ack_delay": p.target_ack_delay, "failover_accepted": p.failover_accepted,
            "end_to_end_flow_control": p.flow_control, "rnr_retry_count": p.rnr_retry_count, "srq": int(p.srq),
            "local_ca_guid": self.ca_guid, "private_data": pd,
        }
        cm_id.state = CmState.REP_SENT
        cm_id.private_data = pd
        self._send_retried(cm_id, "REP", fields)

    def send_rtu(self, cm_id: CmId, private_data: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_rtu."""
        if now is not None:
            self.now = now
        if cm_id.state not in (CmState.REP_RCVD, CmState.MRA_REP_SENT):
            raise ValueError(f"send_rtu in {cm_id.state.name} (EINVAL)")
        pd = _pd(private_data, "RTU")
        cm_id.private_data = pd
        cm_id.state = CmState.ESTABLISHED
        self._out(cm_id, "RTU", self._rtu_fields(cm_id))

    def established(self, cm_id: CmId, now: float | None = None) -> None:
        """ib_cm_notify(IB_EVENT_COMM_EST): the passive QP got a packet before
        the RTU, so the connection is up (cm_establish: USER_ESTABLISHED)."""
        if now is not None:
            self.now = now
        if cm_id.state == CmState.ESTABLISHED:
            return
        if cm_id.state not in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            raise ValueError(f"established in {cm_id.state.name} (EISCONN/EINVAL)")
        self._cancel(cm_id)
        cm_id.state = CmState.ESTABLISHED
        self._event(CmEventType.USER_ESTABLISHED, cm_id)

    def _rtu_fields(self, cm_id: CmId) -> dict:
        return {"local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id,
                    "private_data": cm_id.private_data}

    def _drep_fields(self, cm_id: CmId, pd: bytes) -> dict:
        return {"local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id, "private_data": pd}

    def reject(self, cm_id: CmId, reason: int = RejReason.CONSUMER_DEFINED, private_data: bytes = b"",
               ari: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_rej."""
        if now is not None:
            self.now = now
        s = cm_id.state
        pd = _pd(private_data, "REJ")
        if s in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD, CmState.REQ_RCVD, CmState.MRA_REQ_SENT,
                 CmState.REP_RCVD, CmState.MRA_REP_SENT):
            self._send_rej(cm_id, reason, pd, ari)
            self._reset_to_idle(cm_id)
        elif s in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            self._send_rej(cm_id, reason, pd, ari)
            self._enter_timewait(cm_id)
        else:
            raise ValueError(f"reject in {s.name} (EINVAL)")

    def _send_rej(self, cm_id: CmId, reason: int, pd: bytes = b"", ari: bytes = b"",
                  msg_rejected: int | None = None) -> None:
        """cm_format_rej: the message rejected follows from the state."""
        if msg_rejected is None:
            if cm_id.state in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT):
                msg_rejected = CmMsgResponse.REQ
            elif cm_id.state in (CmState.REP_RCVD, CmState.MRA_REP_SENT):
                msg_rejected = CmMsgResponse.REP
            else:
                msg_rejected = CmMsgResponse.OTHER
        local = 0 if cm_id.state == CmState.REQ_RCVD else cm_id.local_id   # cm_format_rej
        self._out(cm_id, "REJ", {"local_comm_id": local, "remote_comm_id": cm_id.remote_id,
                                     "message_rejected": msg_rejected, "reason": int(reason),
                                     "ari": bytes(ari), "private_data": pd})

    def send_mra(self, cm_id: CmId, service_timeout: int = 20, private_data: bytes = b"",
                 now: float | None = None, delay: bool = False) -> None:
        """ib_send_cm_mra: ask the peer to wait ``service_timeout`` (IBA time)
        longer.  ``delay`` (IB_CM_MRA_FLAG_DELAY, what rdma_cm uses) sends
        nothing now: the MRA only answers the peer's retries."""
        if now is not None:
            self.now = now
        pd = _pd(private_data, "MRA")
        if cm_id.state == CmState.REQ_RCVD:
            mraed, new = CmMsgResponse.REQ, CmState.MRA_REQ_SENT
        elif cm_id.state == CmState.REP_RCVD:
            mraed, new = CmMsgResponse.REP, CmState.MRA_REP_SENT
        else:
            raise ValueError(f"send_mra in {cm_id.state.name} (EINVAL)")
        cm_id.state = new
        fields = {"local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id,
                  "message_mraed": mraed, "service_timeout": service_timeout, "private_data": pd}
        if delay:
            cm_id.mra_msg = self._mad("MRA", cm_id.tid, fields)
        else:
            cm_id.mra_msg = self._out(cm_id, "MRA", fields)

    def _resend_mra(self, cm_id: CmId) -> None:
        self.cm_tx_msgs[_INDEX["MRA"]] += 1
        self._emit(cm_id.remote_gid, "MRA", cm_id.mra_msg, cm_id.local_gid)

    def disconnect(self, cm_id: CmId, private_data: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_dreq."""
        if now is not None:
            self.now = now
        if cm_id.state != CmState.ESTABLISHED:
            raise ValueError(f"disconnect in {cm_id.state.name} (EINVAL)")
        cm_id.state = CmState.DREQ_SENT
        self._send_dreq_msg(cm_id, _pd(private_data, "DREQ"))

    def _send_dreq_msg(self, cm_id: CmId, pd: bytes) -> None:
        self._send_retried(cm_id, "DREQ", {
            "local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id,
            "remote_qpn_eecn": cm_id.remote_qpn, "private_data": pd})

    def send_drep(self, cm_id: CmId, private_data: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_drep."""
        if now is not None:
            self.now = now
        if cm_id.state != CmState.DREQ_RCVD:
            raise ValueError(f"send_drep in {cm_id.state.name} (EINVAL)")
        pd = _pd(private_data, "DREP")
        cm_id.private_data = pd
        self._enter_timewait(cm_id)
        self._out(cm_id, "DREP", self._drep_fields(cm_id, pd))

    # --- QP attributes ------------------------------------------------------------------------
    def qp_attrs(self, cm_id: CmId, qp_state) -> dict:
        """ib_cm_init_qp_attr: the attributes of a modify to INIT, RTR or RTS
        ("INIT"/"RTR"/"RTS" or IBV_QPS_*), named as the transport's QPAttr
        (``ah_attr`` as AddressVector's keywords); ``to_qp_attr`` makes the
        QPAttr and its mask."""
        if not isinstance(qp_state, str):
            qp_state = {1: "INIT", 2: "RTR", 3: "RTS"}.get(int(qp_state), str(qp_state))
        if cm_id.state not in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD, CmState.REQ_RCVD,
                               CmState.MRA_REQ_SENT, CmState.REP_RCVD, CmState.MRA_REP_SENT,
                               CmState.REP_SENT, CmState.MRA_REP_RCVD, CmState.ESTABLISHED):
            raise ValueError(f"qp_attrs in {cm_id.state.name} (EINVAL)")
        rc = cm_id.qp_type == QP_TYPE_RC
        if qp_state == "INIT":
            # cm_init_qp_init_attr: remote write, plus read/atomic when
            # the peer may have reads outstanding with us
            flags = 0x2 | (0xC if cm_id.responder_resources else 0)
            return {"qp_state": int(QPS.IBV_QPS_INIT), "port_num": 1, "pkey_index": 0,
                    "qp_access_flags": flags}
        if qp_state == "RTR":
            if cm_id.state in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD):
                raise ValueError("RTR attributes before the REP (EINVAL)")
            a = {"qp_state": int(QPS.IBV_QPS_RTR),
                 "ah_attr": {"dgid": cm_id.remote_gid, "sgid_index": 0,
                             "flow_label": cm_id.flow_label, "hop_limit": cm_id.hop_limit,
                             "traffic_class": cm_id.traffic_class, "sl": cm_id.sl,
                             "is_global": True, "port_num": 1},
                 "path_mtu": cm_id.path_mtu, "dest_qp_num": cm_id.remote_qpn,
                 "rq_psn": cm_id.rq_psn}
            if rc:
                a["max_dest_rd_atomic"] = cm_id.responder_resources
                a["min_rnr_timer"] = 0
            return a
        if qp_state == "RTS":
            # cm_init_qp_rts_attr: the passive side goes to RTS before its REP
            if cm_id.state not in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT, CmState.REP_RCVD,
                                   CmState.MRA_REP_SENT, CmState.REP_SENT, CmState.MRA_REP_RCVD,
                                   CmState.ESTABLISHED):
                raise ValueError(f"RTS attributes in {cm_id.state.name} (EINVAL)")
            a = {"qp_state": int(QPS.IBV_QPS_RTS), "sq_psn": cm_id.sq_psn}
            if rc:
                a.update(timeout=cm_id.ack_timeout, retry_cnt=cm_id.retry_count,
                         rnr_retry=cm_id.rnr_retry_count, max_rd_atomic=cm_id.initiator_depth)
            return a
        raise ValueError(f"qp_state {qp_state!r}")

    # --- timers ------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        self.now = now
        for cm_id in list(self.ids.values()):
            if cm_id.msg_deadline is not None and cm_id.msg_deadline <= now:
                self._timeout(cm_id)
            if cm_id.timewait_deadline is not None and cm_id.timewait_deadline <= now:
                cm_id.timewait_deadline = None
                if cm_id.state == CmState.TIMEWAIT:
                    self._unlink(cm_id)
                    cm_id.state = CmState.IDLE
                    self._event(CmEventType.TIMEWAIT_EXIT, cm_id)

    def _timeout(self, cm_id: CmId) -> None:
        if cm_id.msg_retries < cm_id.max_cm_retries:
            cm_id.msg_retries += 1
            cm_id.msg_deadline = self.now + cm_id.msg_timeout_s
            self.cm_tx_retries[_INDEX[cm_id.msg_attr]] += 1
            self._emit(cm_id.remote_gid, cm_id.msg_attr, cm_id.msg, cm_id.local_gid)
            return
        state = cm_id.msg_state           # cm_process_send_error
        self._cancel(cm_id)
        if state != cm_id.state:
            return
        if state in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD):
            self._reset_to_idle(cm_id)
            self._event(CmEventType.REQ_ERROR, cm_id)
        elif state in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            self._reset_to_idle(cm_id)
            self._event(CmEventType.REP_ERROR, cm_id)
        elif state == CmState.DREQ_SENT:
            self._enter_timewait(cm_id)
            self._event(CmEventType.DREQ_ERROR, cm_id)
        elif state == CmState.SIDR_REQ_SENT:
            cm_id.state = CmState.IDLE
            self._event(CmEventType.SIDR_REQ_ERROR, cm_id)

    # --- receive -------------------------------------------------------------------------------
    def receive(self, mad: bytes, src_gid: bytes, now: float, dst_gid: bytes = b"") -> None:
        """A CM MAD from ``src_gid`` (to our ``dst_gid``); anything ``decode``
        refuses is counted and dropped."""
        self.now = now
        self._rx_dst = bytes(dst_gid) or self.gid
        try:
            m = decode(mad)
        except WireError:
            self.rx_drops += 1
            return
        name = m["message"]
        self.cm_rx_msgs[_INDEX[name]] += 1
        getattr(self, "_rx_" + name.lower())(m, bytes(src_gid))

    def _lookup(self, local_id: int, remote_id: int | None) -> CmId | None:
        """cm_acquire_id: ours by local ID, its remote ID checked (None: any)."""
        cm_id = self.ids.get(local_id)
        if cm_id is None or (remote_id is not None and cm_id.remote_id != remote_id):
            return None
        return cm_id

    def _issue(self, dest: bytes, attr: str, tid: int, fields: dict) -> None:
        """A response for no cm_id (cm_issue_rej, cm_issue_drep)."""
        self.cm_tx_msgs[_INDEX[attr]] += 1
        self._emit(dest, attr, self._mad(attr, tid, fields), self._rx_dst)

    def _find_listen(self, service_id: int) -> CmId | None:
        for lid in self.listens:                      # cm_find_listen
            if service_id & lid.service_mask == lid.service_id:
                return lid
        return None

    def _rx_req(self, m: dict, src: bytes) -> None:
        key = (m["local_comm_id"], m["local_ca_guid"])
        cur = self.remote_ids.get(key)
        if cur is not None:                           # cm_dup_req_handler
            self.cm_rx_duplicates[_INDEX["REQ"]] += 1
            if cur.state == CmState.MRA_REQ_SENT and cur.mra_msg is not None:
                self._resend_mra(cur)
            elif cur.state == CmState.TIMEWAIT:
                self._issue(src, "REJ", m["tid"], {
                    "local_comm_id": cur.local_id, "remote_comm_id": m["local_comm_id"],
                    "message_rejected": CmMsgResponse.REQ, "reason": RejReason.STALE_CONN})
            return

        def rej(reason):
            self._issue(src, "REJ", m["tid"], {
                "local_comm_id": 0, "remote_comm_id": m["local_comm_id"],
                "message_rejected": CmMsgResponse.REQ, "reason": reason})

        listener = self._find_listen(m["service_id"])
        if listener is None:
            rej(RejReason.INVALID_SERVICE_ID)
            return
        tst = m["transport_service_type"]
        if tst not in (RC, UC):
            rej(RejReason.INVALID_TRANSPORT_TYPE)
            return
        qkey = (m["local_ca_guid"], m["local_qpn"])
        if qkey in self.remote_qpns:                   # cm_insert_remote_qpn
            rej(RejReason.STALE_CONN)
            return
        cm_id = self.create_id(listener.context)
        cm_id.remote_id = m["local_comm_id"]
        cm_id.remote_ca_guid = m["local_ca_guid"]
        cm_id.remote_gid = src
        cm_id.local_gid = self._rx_dst
        cm_id.tid = m["tid"]
        cm_id.service_id = m["service_id"]
        cm_id.qp_type = QP_TYPE_RC if tst == RC else QP_TYPE_UC
        cm_id.remote_qpn = m["local_qpn"]
        cm_id.sq_psn = m["starting_psn"]
        cm_id.path_mtu = m["path_packet_payload_mtu"]
        cm_id.responder_resources = m["initiator_depth"]
        cm_id.initiator_depth = m["responder_resources"]
        cm_id.retry_count = m["retry_count"]
        cm_id.rnr_retry_count = m["rnr_retry_count"]
        cm_id.ack_timeout = m["primary_local_ack_timeout"]
        cm_id.packet_life_time = max(0, cm_id.ack_timeout - 1)
        cm_id.flow_label = m["primary_flow_label"]
        cm_id.traffic_class = m["primary_traffic_class"]
        cm_id.hop_limit = m["primary_hop_limit"]
        cm_id.sl = m["primary_sl"]
        cm_id.pkey = m["partition_key"]
        cm_id.timeout_ms = cm_convert_to_ms(m["local_cm_response_timeout"])
        cm_id.max_cm_retries = m["max_cm_retries"]
        cm_id.remote_key = key
        self.remote_ids[key] = cm_id
        cm_id.qpn_key = qkey
        self.remote_qpns[qkey] = cm_id
        cm_id.state = CmState.REQ_RCVD
        self._event(CmEventType.REQ_RECEIVED, cm_id, m, listen_id=listener)

    def _rx_rep(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], 0)
        if cm_id is None or cm_id.state not in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD):
            self._dup_rep(m)
            return
        key = (m["local_comm_id"], m["local_ca_guid"])
        if key in self.remote_ids:                     # cm_insert_remote_id in cm_rep_handler
            self._issue(src, "REJ", m["tid"], {
                "local_comm_id": cm_id.local_id, "remote_comm_id": m["local_comm_id"],
                "message_rejected": CmMsgResponse.REP, "reason": RejReason.STALE_CONN})
            return
        self._cancel(cm_id)
        cm_id.remote_id = m["local_comm_id"]
        cm_id.remote_ca_guid = m["local_ca_guid"]
        cm_id.remote_key = key
        self.remote_ids[key] = cm_id
        cm_id.remote_qpn = m["local_qpn"]
        cm_id.sq_psn = m["starting_psn"]
        # what the passive side grants: its responder resources bound our reads
        cm_id.initiator_depth = m["responder_resources"]
        cm_id.responder_resources = m["initiator_depth"]
        cm_id.rnr_retry_count = m["rnr_retry_count"]
        cm_id.target_ack_delay = m["target_ack_delay"]
        cm_id.ack_timeout = cm_ack_timeout(cm_id.target_ack_delay, cm_id.packet_life_time)
        cm_id.state = CmState.REP_RCVD
        self._event(CmEventType.REP_RECEIVED, cm_id, m)

    def _dup_rep(self, m: dict) -> None:
        """cm_dup_rep_handler."""
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:
            return
        self.cm_rx_duplicates[_INDEX["REP"]] += 1
        if cm_id.state == CmState.ESTABLISHED:
            self._out(cm_id, "RTU", self._rtu_fields(cm_id))
        elif cm_id.state == CmState.MRA_REP_SENT and cm_id.mra_msg is not None:
            self._resend_mra(cm_id)

    def _rx_rtu(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:
            return
        if cm_id.state not in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            self.cm_rx_duplicates[_INDEX["RTU"]] += 1
            return
        self._cancel(cm_id)
        cm_id.state = CmState.ESTABLISHED
        self._event(CmEventType.RTU_RECEIVED, cm_id, m)

    def _rx_rej(self, m: dict, src: bytes) -> None:
        """cm_acquire_rejected_id + cm_rej_handler."""
        if m["reason"] == RejReason.TIMEOUT:
            guid = int.from_bytes(m["ari"][:8], "big")
            cm_id = self.remote_ids.get((m["local_comm_id"], guid))
        elif m["message_rejected"] == CmMsgResponse.REQ:
            cm_id = self._lookup(m["remote_comm_id"], 0)
        else:
            cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:
            return
        s = cm_id.state
        if s in (CmState.REQ_SENT, CmState.MRA_REQ_RCVD, CmState.REP_SENT, CmState.MRA_REP_RCVD):
            if m["reason"] == RejReason.STALE_CONN:
                self._enter_timewait(cm_id)
            else:
                self._reset_to_idle(cm_id)
        elif s in (CmState.REQ_RCVD, CmState.MRA_REQ_SENT):
            self._reset_to_idle(cm_id)
        elif s in (CmState.REP_RCVD, CmState.MRA_REP_SENT, CmState.ESTABLISHED):
            self._enter_timewait(cm_id)
        else:
            return
        self._event(CmEventType.REJ_RECEIVED, cm_id, m)

    def _rx_mra(self, m: dict, src: bytes) -> None:
        mraed = m["message_mraed"]
        if mraed == CmMsgResponse.REQ:
            cm_id = self._lookup(m["remote_comm_id"], 0)
        else:
            cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:
            return
        timeout_s = (cm_convert_to_ms(m["service_timeout"]) + cm_convert_to_ms(cm_id.ack_timeout)) / 1000.0
        s = cm_id.state
        if s == CmState.REQ_SENT and mraed == CmMsgResponse.REQ:
            new = CmState.MRA_REQ_RCVD
        elif s == CmState.REP_SENT and mraed == CmMsgResponse.REP:
            new = CmState.MRA_REP_RCVD
        elif s in (CmState.MRA_REQ_RCVD, CmState.MRA_REP_RCVD):
            self.cm_rx_duplicates[_INDEX["MRA"]] += 1
            return
        else:
            return
        if cm_id.msg is None:
            return
        cm_id.msg_timeout_s = timeout_s            # ib_modify_mad
        cm_id.msg_deadline = self.now + timeout_s
        cm_id.state = new
        cm_id.msg_state = new
        self._event(CmEventType.MRA_RECEIVED, cm_id, m)

    def _rx_dreq(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:                               # cm_issue_drep
            self.cm_rx_duplicates[_INDEX["DREQ"]] += 1
            self._issue(src, "DREP", m["tid"], {"local_comm_id": m["remote_comm_id"],
                                                    "remote_comm_id": m["local_comm_id"]})
            return
        if cm_id.local_qpn != m["remote_qpn_eecn"]:
            return
        s = cm_id.state
        if s in (CmState.REP_SENT, CmState.DREQ_SENT, CmState.MRA_REP_RCVD):
            self._cancel(cm_id)
        elif s == CmState.ESTABLISHED:
            pass
        elif s == CmState.TIMEWAIT:
            self.cm_rx_duplicates[_INDEX["DREQ"]] += 1
            cm_id.tid = m["tid"]
            self._out(cm_id, "DREP", self._drep_fields(cm_id, cm_id.private_data))
            return
        elif s == CmState.DREQ_RCVD:
            self.cm_rx_duplicates[_INDEX["DREQ"]] += 1
            return
        else:
            return
        cm_id.state = CmState.DREQ_RCVD
        cm_id.tid = m["tid"]
        self._event(CmEventType.DREQ_RECEIVED, cm_id, m)

    def _rx_drep(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None or cm_id.state not in (CmState.DREQ_SENT, CmState.DREQ_RCVD):
            return
        self._enter_timewait(cm_id)
        self._event(CmEventType.DREP_RECEIVED, cm_id, m)

    def _rx_lap(self, m: dict, src: bytes) -> None:
        """No path migration.  The kernel drops LAPs (and APRs) on a RoCE port
        (cm_lap_handler: -EINVAL); with ``answer_lap`` the spec's answer, an
        APR with status UNSUPPORTED, goes back instead."""
        if not self.answer_lap:
            return
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None or cm_id.state != CmState.ESTABLISHED:
            return
        self._issue(src, "APR", m["tid"], {
            "local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id,
            "ar_status": AprStatus.UNSUPPORTED})

    def _rx_apr(self, m: dict, src: bytes) -> None:
        return                                          # we never send a LAP

    def _rx_sidr_req(self, m: dict, src: bytes) -> None:
        """cm_sidr_req_handler."""
        key = (m["requestid"], src)
        if key in self.remote_sidr:                    # cm_insert_remote_sidr
            self.cm_rx_duplicates[_INDEX["SIDR_REQ"]] += 1
            return
        listener = self._find_listen(m["serviceid"])
        if listener is None:                           # cm_reject_sidr_req
            self._issue(src, "SIDR_REP", m["tid"], {"requestid": m["requestid"],
                                                    "status": SidrStatus.UNSUPPORTED,
                                                    "serviceid": m["serviceid"]})
            return
        cm_id = self.create_id(listener.context)
        cm_id.remote_id = m["requestid"]
        cm_id.remote_gid = src
        cm_id.local_gid = self._rx_dst
        cm_id.tid = m["tid"]
        cm_id.service_id = m["serviceid"]
        cm_id.pkey = m["partition_key"]
        cm_id.qp_type = QP_TYPE_UD
        cm_id.remote_key = key
        self.remote_sidr[key] = cm_id
        cm_id.state = CmState.SIDR_REQ_RCVD
        self._event(CmEventType.SIDR_REQ_RECEIVED, cm_id, m, listen_id=listener)

    def _rx_sidr_rep(self, m: dict, src: bytes) -> None:
        """cm_sidr_rep_handler."""
        cm_id = self._lookup(m["requestid"], 0)
        if cm_id is None or cm_id.state != CmState.SIDR_REQ_SENT:
            return
        self._cancel(cm_id)
        cm_id.state = CmState.IDLE
        if m["status"] == SidrStatus.SUCCESS:
            cm_id.remote_qpn = m["qpn"]
            cm_id.remote_qkey = m["q_key"]
        self._event(CmEventType.SIDR_REP_RECEIVED, cm_id, m)

    # --- SIDR (UD service ID resolution) ----------------------------------------------------------
    def sidr_request(self, service_id: int, dest_gid: bytes, *, pkey: int = 0xFFFF, local_gid: bytes = b"",
                     private_data: bytes = b"", timeout_ms: int = 1000, max_cm_retries: int = 3,
                     now: float | None = None, context=None) -> CmId:
        """ib_send_cm_sidr_req: which UD QP (and Q_Key) serves ``service_id``?"""
        if now is not None:
            self.now = now
        pd = _pd(private_data, "SIDR_REQ")
        cm_id = self.create_id(context)
        cm_id.qp_type = QP_TYPE_UD
        cm_id.service_id = service_id
        cm_id.remote_gid = bytes(dest_gid)
        cm_id.local_gid = bytes(local_gid) if local_gid else self.gid
        cm_id.pkey = pkey
        cm_id.timeout_ms = timeout_ms
        cm_id.max_cm_retries = max_cm_retries
        cm_id.tid = (self.hi_tid << 32) | cm_id.local_id
        cm_id.state = CmState.SIDR_REQ_SENT
        self._send_retried(cm_id, "SIDR_REQ", {"requestid": cm_id.local_id, "partition_key": pkey,
                                               "serviceid": service_id, "private_data": pd})
        return cm_id

    def sidr_reply(self, cm_id: CmId, status: int = SidrStatus.SUCCESS, *, qp_num: int = 0,
                   qkey: int = 0, private_data: bytes = b"", info: bytes = b"",
                   now: float | None = None) -> None:
        """ib_send_cm_sidr_rep: answer a SIDR_REQ_RECEIVED; the ID goes back to IDLE."""
        if now is not None:
            self.now = now
        if cm_id.state != CmState.SIDR_REQ_RCVD:
            raise ValueError(f"sidr_reply in {cm_id.state.name} (EINVAL)")
        pd = _pd(private_data, "SIDR_REP")
        self._out(cm_id, "SIDR_REP", {"requestid": cm_id.remote_id, "status": int(status),
                                      "qpn": qp_num, "serviceid": cm_id.service_id,
                                      "q_key": qkey, "additional_information": bytes(info),
                                      "private_data": pd})
        cm_id.state = CmState.IDLE
        self._unlink(cm_id)


_MASK_OF = {"qp_state": M.IBV_QP_STATE, "port_num": M.IBV_QP_PORT, "pkey_index": M.IBV_QP_PKEY_INDEX,
            "qp_access_flags": M.IBV_QP_ACCESS_FLAGS, "ah_attr": M.IBV_QP_AV,
            "path_mtu": M.IBV_QP_PATH_MTU, "dest_qp_num": M.IBV_QP_DEST_QPN, "rq_psn": M.IBV_QP_RQ_PSN,
            "max_dest_rd_atomic": M.IBV_QP_MAX_DEST_RD_ATOMIC, "min_rnr_timer": M.IBV_QP_MIN_RNR_TIMER,
            "sq_psn": M.IBV_QP_SQ_PSN, "timeout": M.IBV_QP_TIMEOUT, "retry_cnt": M.IBV_QP_RETRY_CNT,
            "rnr_retry": M.IBV_QP_RNR_RETRY, "max_rd_atomic": M.IBV_QP_MAX_QP_RD_ATOMIC,
            "qkey": M.IBV_QP_QKEY}


def qp_attr_mask(attrs: dict) -> int:
    """The ibv_qp_attr_mask of a ``qp_attrs``-style dict (its keys)."""
    mask = 0
    for k in attrs:
        mask |= _MASK_OF[k]
    return int(mask)


def to_qp_attr(attrs: dict):
    """``qp_attrs``' dict -> (transport QPAttr, ibv_qp_attr_mask) for ``QP.modify``."""
    from ...transport.qp import QPAttr
    from ...transport.wr import AddressVector
    kw = dict(attrs)
    if "ah_attr" in kw:
        kw["ah_attr"] = AddressVector(**kw["ah_attr"])
    return QPAttr(**kw), qp_attr_mask(attrs)
