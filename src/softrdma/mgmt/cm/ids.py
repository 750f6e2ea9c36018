"""The IB CM's connection IDs and what the agent hands its caller.

``CmState`` is enum ib_cm_state, ``CmEventType`` enum ib_cm_event_type;
``CmId`` is cm_id_private: one connection (or listen, or SIDR exchange)
with its state, the path and QP facts that REQ and REP carried, and the
outstanding, retried message (cm_id_priv->msg) that ``timers`` re-sends.
The agent's outputs are ``OutMad`` (the 256 bytes and the destination
GID) and ``CmEvent``.  Comm IDs are random, nonzero, 32 bits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from ...wire.cm import PRIVATE_DATA_SIZE

#: the QP types a CM ID connects (CmId.qp_type)
QP_TYPE_RC, QP_TYPE_UC, QP_TYPE_UD = "RC", "UC", "UD"


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


@dataclass
class OutMad:
    dest_gid: bytes
    data: bytes
    attr: str
    #: the local GID it leaves from (the connection's; the agent's by default)
    src_gid: bytes = b""
    #: on an InfiniBand port, the LID it goes to (None: GID-routed, RoCE) and its SL
    dlid: int | None = None
    sl: int = 0


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


class CmId:
    """One connection (cm_id_private)."""

    def __init__(self, agent, local_id: int, context=None):
        self.agent = agent              # the CmAgent whose table holds it
        self.local_id = local_id
        self.remote_id = 0
        self.state = CmState.IDLE
        self.context = context
        self.service_id = 0
        self.service_mask = 0
        self.remote_gid = bytes(16)
        self.local_gid = bytes(16)
        # InfiniBand: where the CM's MADs go (cm_id_priv->av: the path's DLID and SL for
        # the active side, the REQ's SLID and SL for the passive side; None on RoCE)
        self.remote_lid: int | None = None
        self.mad_sl = 0
        # the primary path's LIDs (the QP's address vector; 0xFFFF: RoCE, GID-routed)
        self.path_dlid = 0xFFFF
        self.path_slid = 0xFFFF
        self.path_rate = 0
        self.subnet_local = 0
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


def cm_private_data(data: bytes, msg: str) -> bytes:
    """The private data of a ``msg`` (``REQ``, ``REP``, ...), checked against its field's size."""
    data = bytes(data or b"")
    if len(data) > PRIVATE_DATA_SIZE[msg]:
        raise ValueError(f"{msg} private data of {len(data)} bytes > {PRIVATE_DATA_SIZE[msg]}")
    return data
