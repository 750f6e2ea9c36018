"""The IB CM's disconnection: DREQ, DREP and the way into TIMEWAIT.

As cm.c: ``disconnect`` (ib_send_cm_dreq) sends the retried DREQ from
ESTABLISHED; the peer gets DREQ_RECEIVED and answers with ``send_drep``
(ib_send_cm_drep); both sides then wait in TIMEWAIT (``timers``).  A
duplicate DREQ is answered by a DREP in TIMEWAIT, a DREQ for no
connection by a DREP (cm_issue_drep); both are counted in
``cm_rx_duplicates``.
"""

from __future__ import annotations

from .counters import COUNTER_INDEX
from .ids import CmEventType, CmId, CmState, cm_private_data


class CmDisconnect:
    """DREQ and DREP of ``CmAgent`` (a mixin)."""

    def disconnect(self, cm_id: CmId, private_data: bytes = b"", now: float | None = None) -> None:
        """ib_send_cm_dreq."""
        if now is not None:
            self.now = now
        if cm_id.state != CmState.ESTABLISHED:
            raise ValueError(f"disconnect in {cm_id.state.name} (EINVAL)")
        cm_id.state = CmState.DREQ_SENT
        self._send_dreq_msg(cm_id, cm_private_data(private_data, "DREQ"))

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
        pd = cm_private_data(private_data, "DREP")
        cm_id.private_data = pd
        self._enter_timewait(cm_id)
        self._out(cm_id, "DREP", self._drep_fields(cm_id, pd))

    def _drep_fields(self, cm_id: CmId, pd: bytes) -> dict:
        return {"local_comm_id": cm_id.local_id, "remote_comm_id": cm_id.remote_id, "private_data": pd}

    def _rx_dreq(self, m: dict, src: bytes) -> None:
        cm_id = self._lookup(m["remote_comm_id"], m["local_comm_id"])
        if cm_id is None:                               # cm_issue_drep
            self.cm_rx_duplicates[COUNTER_INDEX["DREQ"]] += 1
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
            self.cm_rx_duplicates[COUNTER_INDEX["DREQ"]] += 1
            cm_id.tid = m["tid"]
            self._out(cm_id, "DREP", self._drep_fields(cm_id, cm_id.private_data))
            return
        elif s == CmState.DREQ_RCVD:
            self.cm_rx_duplicates[COUNTER_INDEX["DREQ"]] += 1
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
