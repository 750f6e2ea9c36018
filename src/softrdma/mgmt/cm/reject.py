"""The IB CM's answers that stop or delay a connection: REJ and MRA.

* REJ (ib_send_cm_rej, cm_rej_handler): the message rejected follows from
  the state (cm_format_rej); a REJ of a REQ or REP we sent goes back to
  IDLE, or to TIMEWAIT for a stale connection; ``destroy`` in REQ_SENT
  rejects with TIMEOUT and the CA GUID as ARI, found by the other side
  through its remote-ID table (cm_acquire_rejected_id).
* MRA (ib_send_cm_mra, cm_mra_handler): asks the peer to wait longer; the
  peer's retried message then waits the MRA's service timeout plus the
  ACK timeout.  ``delay`` (IB_CM_MRA_FLAG_DELAY, rdma_cm's) sends nothing
  now: the stored MRA only answers the peer's retries.
"""

from __future__ import annotations

from ...wire.cm import CmMsgResponse, RejReason
from .counters import COUNTER_INDEX
from .ids import CmEventType, CmId, CmState, cm_private_data
from .timers import cm_convert_to_ms


class CmReject:
    """REJ and MRA of ``CmAgent`` (a mixin)."""

    def reject(self, cm_id: CmId, reason: int = RejReason.CONSUMER_DEFINED, private_data: bytes = b"",
               ari: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_rej."""
        if now is not None:
            self.now = now
        s = cm_id.state
        pd = cm_private_data(private_data, "REJ")
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

    def send_mra(self, cm_id: CmId, service_timeout: int = 20, private_data: bytes = b"",
                 now: float | None = None, delay: bool = False) -> None:
        """ib_send_cm_mra: ask the peer to wait ``service_timeout`` (IBA time)
        longer.  ``delay`` (IB_CM_MRA_FLAG_DELAY, what rdma_cm uses) sends
        nothing now: the MRA only answers the peer's retries."""
        if now is not None:
            self.now = now
        pd = cm_private_data(private_data, "MRA")
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
        self.cm_tx_msgs[COUNTER_INDEX["MRA"]] += 1
        self._emit_to(cm_id, "MRA", cm_id.mra_msg)

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
            self.cm_rx_duplicates[COUNTER_INDEX["MRA"]] += 1
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
