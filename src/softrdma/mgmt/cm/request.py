"""The IB CM's connection establishment: REQ, REP, RTU (and COMM_EST).

As cm.c: ``connect`` (ib_send_cm_req) sends the REQ, a listener's agent
answers REQ_RECEIVED, ``accept`` (ib_send_cm_rep) the REP, ``send_rtu``
(ib_send_cm_rtu) the RTU; ``established`` is ib_cm_notify(COMM_EST),
when the passive QP got a packet before the RTU.

* Transaction IDs: the agent's ``hi_tid`` << 32 | the local comm ID for
  requests, the request's TID for responses (cm_form_tid).
* Duplicates (cm_dup_req_handler, cm_dup_rep_handler, cm_rtu_handler):
  counted in ``cm_rx_duplicates``; a duplicate REQ is answered by the
  stored MRA in MRA_REQ_SENT, by REJ(stale connection) in TIMEWAIT, and
  dropped otherwise (the REP's own retries answer it); a duplicate REP by
  the RTU in ESTABLISHED or the MRA in MRA_REP_SENT.
* A REQ for no listener is rejected INVALID_SERVICE_ID, one with an
  unsupported transport INVALID_TRANSPORT_TYPE, a second connection from
  the same remote QP STALE_CONN (``reject`` has the REJ and MRA).
* LAP/APR (path migration is not implemented): dropped, as the kernel does
  on a RoCE port; ``answer_lap=True`` answers a LAP with APR(UNSUPPORTED).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...wire.cm import AprStatus, CmMsgResponse, RejReason
from .counters import COUNTER_INDEX
from .ids import QP_TYPE_RC, QP_TYPE_UC, CmEventType, CmId, CmState, cm_private_data
from .timers import cm_ack_timeout, cm_convert_to_ms

# Transport service types of the REQ.
RC, UC = 0, 1


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
    #: InfiniBand: the path's DLID (None: RoCE, the LIDs are 0xFFFF), SLID,
    #: static rate and whether it stays in the subnet; the REQ's MADs go to the DLID
    dlid: int | None = None
    slid: int = 0xFFFF
    packet_rate: int = 0
    subnet_local: int = 0


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


class CmRequest:
    """REQ, REP, RTU, COMM_EST and LAP/APR of ``CmAgent`` (a mixin)."""

    def connect(self, p: ConnectParams, now: float | None = None, context=None) -> CmId:
        """ib_send_cm_req."""
        if now is not None:
            self.now = now
        if p.qp_type not in (QP_TYPE_RC, QP_TYPE_UC):
            raise ValueError(f"qp_type {p.qp_type!r}")
        pd = cm_private_data(p.private_data, "REQ")
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
        if p.dlid is not None:                        # cm_init_av_by_path: the CM's MADs take the path
            cm_id.remote_lid, cm_id.mad_sl = p.dlid, p.sl
            cm_id.path_dlid, cm_id.path_slid = p.dlid, p.slid
            cm_id.path_rate, cm_id.subnet_local = p.packet_rate, p.subnet_local
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
            "primary_local_port_lid": cm_id.path_slid, "primary_remote_port_lid": cm_id.path_dlid,
            "primary_local_port_gid": cm_id.local_gid, "primary_remote_port_gid": cm_id.remote_gid,
            "primary_flow_label": p.flow_label, "primary_packet_rate": cm_id.path_rate,
            "primary_traffic_class": p.traffic_class, "primary_hop_limit": p.hop_limit,
            "primary_sl": p.sl, "primary_subnet_local": cm_id.subnet_local,
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
        pd = cm_private_data(p.private_data, "REP")
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
        pd = cm_private_data(private_data, "RTU")
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

    def _rx_req(self, m: dict, src: bytes) -> None:
        key = (m["local_comm_id"], m["local_ca_guid"])
        cur = self.remote_ids.get(key)
        if cur is not None:                           # cm_dup_req_handler
            self.cm_rx_duplicates[COUNTER_INDEX["REQ"]] += 1
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
        if self._rx_lid is not None:
            # InfiniBand: answers go back to the REQ's SLID (cm_init_av_for_response); the
            # QP's path is the REQ's primary path seen from this side (cm_format_paths_from_req)
            cm_id.remote_lid, cm_id.mad_sl = self._rx_lid, self._rx_sl
            cm_id.path_dlid, cm_id.path_slid = m["primary_local_port_lid"], m["primary_remote_port_lid"]
            cm_id.path_rate, cm_id.subnet_local = m["primary_packet_rate"], m["primary_subnet_local"]
            src = src or bytes(m["primary_local_port_gid"])
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
        self.cm_rx_duplicates[COUNTER_INDEX["REP"]] += 1
        if cm_id.state == CmState.ESTABLISHED:
            self._out(cm_id, "RTU", self._rtu_fields(cm_id))
        elif cm_id.state == CmState.MRA_REP_SENT and cm_id.mra_msg is not None:
            self._resend_mra(cm_id)

    def _rx_rtu(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:
            return
        if cm_id.state not in (CmState.REP_SENT, CmState.MRA_REP_RCVD):
            self.cm_rx_duplicates[COUNTER_INDEX["RTU"]] += 1
            return
        self._cancel(cm_id)
        cm_id.state = CmState.ESTABLISHED
        self._event(CmEventType.RTU_RECEIVED, cm_id, m)

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
