"""The IB CM's Service ID Resolution for UD QPs: SIDR_REQ and SIDR_REP.

``sidr_request`` (ib_send_cm_sidr_req) asks which UD QP (and Q_Key)
serves a service ID; a listener's agent answers SIDR_REQ_RECEIVED and
``sidr_reply`` (ib_send_cm_sidr_rep).  No listener -> SIDR_REP status
UNSUPPORTED (cm_reject_sidr_req); duplicates by (request ID, source GID)
are counted and dropped; no answer after the retries -> SIDR_REQ_ERROR
(``timers``).
"""

from __future__ import annotations

from ...wire.cm import SidrStatus
from .counters import COUNTER_INDEX
from .ids import QP_TYPE_UD, CmEventType, CmId, CmState, cm_private_data


class CmSidr:
    """SIDR_REQ and SIDR_REP of ``CmAgent`` (a mixin)."""

    def sidr_request(self, service_id: int, dest_gid: bytes, *, pkey: int = 0xFFFF, local_gid: bytes = b"",
                     private_data: bytes = b"", timeout_ms: int = 1000, max_cm_retries: int = 3,
                     now: float | None = None, context=None, dlid: int | None = None, sl: int = 0) -> CmId:
        """ib_send_cm_sidr_req: which UD QP (and Q_Key) serves ``service_id``?
        (InfiniBand: to LID ``dlid`` with SL ``sl``, the path's.)"""
        if now is not None:
            self.now = now
        pd = cm_private_data(private_data, "SIDR_REQ")
        cm_id = self.create_id(context)
        cm_id.qp_type = QP_TYPE_UD
        cm_id.service_id = service_id
        cm_id.remote_gid = bytes(dest_gid)
        cm_id.local_gid = bytes(local_gid) if local_gid else self.gid
        cm_id.pkey = pkey
        cm_id.remote_lid, cm_id.mad_sl = dlid, sl
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
        pd = cm_private_data(private_data, "SIDR_REP")
        self._out(cm_id, "SIDR_REP", {"requestid": cm_id.remote_id, "status": int(status),
                                      "qpn": qp_num, "serviceid": cm_id.service_id,
                                      "q_key": qkey, "additional_information": bytes(info),
                                      "private_data": pd})
        cm_id.state = CmState.IDLE
        self._unlink(cm_id)

    def _rx_sidr_req(self, m: dict, src: bytes) -> None:
        """cm_sidr_req_handler."""
        # the sender: its GID, or on InfiniBand without a GRH its LID
        key = (m["requestid"], src or (self._rx_lid or 0).to_bytes(2, "big"))
        if key in self.remote_sidr:                    # cm_insert_remote_sidr
            self.cm_rx_duplicates[COUNTER_INDEX["SIDR_REQ"]] += 1
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
        cm_id.remote_lid, cm_id.mad_sl = self._rx_lid, self._rx_sl
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
