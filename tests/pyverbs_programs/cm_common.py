"""What the rdma_cm test programs share (pyverbs API only)."""

import sys

import pyverbs.enums as e
from pyverbs.cmid import CMEvent, ConnParam
from pyverbs.qp import QPCap, QPInitAttr


def next_event(ch, want):
    """The channel's next event, which must be ``want`` (else exit 1)."""
    ev = CMEvent(ch)
    if ev.event_type != want:
        print(f"unexpected {ev.event_str()} status {ev.status}", flush=True)
        sys.exit(1)
    return ev


def ud_accept(cmid, n: int, size: int, send_wr: int = 2):
    """A passive UD ID's QP with ``n`` receives of ``size`` bytes (+ the
    40-byte GRH area) posted, accepted (SIDR_REP with its QPN); the MR."""
    cmid.create_qp(QPInitAttr(qp_type=e.IBV_QPT_UD, cap=QPCap(max_send_wr=send_wr, max_recv_wr=n + 1)))
    mr = cmid.reg_msgs(size + 40)
    for _ in range(n):
        cmid.post_recv(mr)
    cmid.accept(ConnParam(qp_num=cmid.qpn))
    print("accepted", flush=True)
    return mr
