"""How the engines hand work to each other (as rxe schedules its tasks): the
completer never calls the requester, it asks for it; the QP's dispatch runs
it.  The names of the completer's steps are rxe_comp.c's."""

from softrdma.enums import IBV_WR_SEND
from softrdma.transport import completer
from softrdma.transport.wr import SendWQE
from transport_helpers import Solo

RXE_COMP_STATES = ("COMPST_GET_ACK", "COMPST_GET_WQE", "COMPST_COMP_WQE", "COMPST_COMP_ACK", "COMPST_CHECK_PSN",
                   "COMPST_CHECK_ACK", "COMPST_READ", "COMPST_ATOMIC", "COMPST_WRITE_SEND", "COMPST_UPDATE_COMP",
                   "COMPST_ERROR_RETRY", "COMPST_RNR_RETRY", "COMPST_ERROR", "COMPST_EXIT", "COMPST_DONE")


def test_completer_states_are_rxes():
    assert tuple(s.name for s in completer.comp_state) == RXE_COMP_STATES
    assert [int(s) for s in completer.comp_state] == list(range(len(RXE_COMP_STATES)))


def _one_send_outstanding():
    s = Solo(timeout=14)
    s.qp.post_send(SendWQE(1, IBV_WR_SEND, [(s.mr.addr, 64, s.mr.lkey)]), 0.0)
    assert len(s.out()) == 1 and s.qp.req_psn == 1
    return s


def test_timeout_asks_the_requester_for_a_go_back():
    s = _one_send_outstanding()
    completer.ack_timeout(s.qp, 1.0)             # the completer alone: nothing re-sent yet
    assert s.qp.req_sched and s.qp.req_need_retry and not s.qp.tx and s.qp.req_psn == 1
    s.qp._req_task(1.0)                          # the dispatch runs the requester
    assert not s.qp.req_sched and not s.qp.req_need_retry
    assert len(s.out()) == 1 and s.qp.req_psn == 1 and s.qp.retry_cnt == s.qp.retry_cnt_init - 1


def test_tick_services_the_request_at_once():
    s = _one_send_outstanding()
    s.tick(s.qp.timer_at + 1e-6)
    assert not s.qp.req_sched and len(s.out()) == 1   # re-sent within the same tick


def test_rnr_expiry_is_a_requester_retry():
    s = _one_send_outstanding()
    completer.rnr_expired(s.qp, 0.5)
    assert s.qp.req_sched and s.qp.req_need_retry and not s.qp.tx
