"""The IB CM's timers: retried messages, their timeouts, and TIMEWAIT.

What cm.c does, with the time passed in (``tick(now)``):

* Timeouts (cm_convert_to_ms: 4.096 us * 2^t, as 1 << max(t - 8, 0) ms).
  A REQ waits ``2 * packet life time + the remote CM response timeout``;
  a REP the REQ's local CM response timeout; a DREQ the connection's
  timeout.  An MRA replaces the wait by ``its service timeout + the ack
  timeout`` (``reject``'s ``_rx_mra``).
* A retried message (ib_post_send_mad with retries) is ``cm_id.msg``;
  after ``max_cm_retries`` re-sends: REQ_ERROR / REP_ERROR (back to IDLE),
  DREQ_ERROR (TIMEWAIT) or SIDR_REQ_ERROR -- cm_process_send_error.
* TIMEWAIT (cm_enter_timewait) lasts the connection's ACK timeout, then
  TIMEWAIT_EXIT and IDLE.
* ``cm_ack_timeout``: the QP's local ACK timeout exponent from the CA's
  ACK delay and the path's packet life time.
"""

from __future__ import annotations

from .counters import COUNTER_INDEX
from .ids import CmEventType, CmId, CmState


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


class CmTimers:
    """Retries, timeouts and TIMEWAIT of ``CmAgent`` (a mixin)."""

    def _send_retried(self, cm_id: CmId, attr: str, fields: dict) -> None:
        """ib_post_send_mad with retries: the message is cm_id->msg."""
        mad = self._mad(attr, cm_id.tid, fields)
        cm_id.msg = mad
        cm_id.msg_attr = attr
        cm_id.msg_state = cm_id.state
        cm_id.msg_retries = 0
        cm_id.msg_timeout_s = cm_id.timeout_ms / 1000.0
        cm_id.msg_deadline = self.now + cm_id.msg_timeout_s
        self.cm_tx_msgs[COUNTER_INDEX[attr]] += 1
        self._emit_to(cm_id, attr, mad)

    def _cancel(self, cm_id: CmId) -> None:
        cm_id.msg = None
        cm_id.msg_deadline = None

    @property
    def deadline(self) -> float | None:
        ds = [d for d in (c.deadline for c in self.ids.values()) if d is not None]
        return min(ds) if ds else None

    def _enter_timewait(self, cm_id: CmId) -> None:
        """cm_enter_timewait: wait for the packets of the old QP to die."""
        self._cancel(cm_id)
        self._unlink(cm_id)        # cm_remove_remote(): remote ID and QPN may be reused
        cm_id.state = CmState.TIMEWAIT
        cm_id.timewait_deadline = self.now + cm_convert_to_ms(cm_id.ack_timeout) / 1000.0

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
            self.cm_tx_retries[COUNTER_INDEX[cm_id.msg_attr]] += 1
            self._emit_to(cm_id, cm_id.msg_attr, cm_id.msg)
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
