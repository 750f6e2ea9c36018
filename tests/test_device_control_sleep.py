"""Control requests cost the daemon no pass over the data path.

A request (create a QP, query a port, ...) is no data-path work: it must
not wake every QP's rings (a pass over all of them, then polling all of
them while the daemon spins), which made QP creation slow down with the
number of QPs alive.  A queue created while the daemon sleeps sleeps too,
so its first post rings the doorbell.  No timing is asserted (the rates are
in benchmarks/qp_create.py); what is checked is the rings' sleep flag, which
the library sees in shared memory.
"""

from __future__ import annotations

import time

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.uapi.shm import RING_CONSUMER_SLEEPING
from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_QPT_UD, IBV_WC_SUCCESS, IBV_WR_SEND

IPV4_GID = 1             # on lo: fe80::(MAC) at 0, ::ffff:127.0.0.1 at 1
QKEY = 0x11111111


@pytest.fixture
def verbs(monkeypatch):
    with daemon_in_shm("ctlsleep") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        from softrdma.verbs import addr, cq, device, mr, pd, qp, wr
        yield device, pd, mr, cq, qp, addr, wr


def _asleep(qp) -> bool:
    return bool(qp.sq.flags & RING_CONSUMER_SLEEPING) and bool(qp.rq.flags & RING_CONSUMER_SLEEPING)


def _wait_asleep(qp, timeout: float = 60.0) -> None:
    """Readiness: the daemon went to sleep (it does once idle a moment)."""
    end = time.monotonic() + timeout
    while not _asleep(qp):
        assert time.monotonic() < end, "the daemon never slept"
        time.sleep(0.005)


def test_requests_leave_sleeping_rings_asleep_and_new_queues_sleep_too(verbs):
    device, pd_m, mr_m, cq_m, qp_m, addr_m, wr_m = verbs
    ctx = device.Context(name="rxe0")
    pd = pd_m.PD(ctx)
    cq = cq_m.CQ(ctx, 16)
    attr = qp_m.QPAttr()
    attr.qkey = QKEY

    def ud():
        return qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_UD, scq=cq, rcq=cq, cap=qp_m.QPCap(4, 4)), attr)

    old = [ud() for _ in range(8)]
    _wait_asleep(old[0])
    for _ in range(20):
        ctx.query_port(1)
        # the reply came after the request was handled: had it woken the
        # rings, they would be awake now (they sleep again only after a
        # quiet spell of the daemon's)
        assert all(_asleep(q) for q in old)
    new = ud()                                # itself control requests (create, modify to RTS)
    assert _asleep(new), "a queue created while the daemon sleeps must sleep too"
    assert all(_asleep(q) for q in old)
    # and its doorbell works: a UD send from the new QP to an old one
    mr = mr_m.MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
    mr.write(b"hello", 5)
    old[0].post_recv(wr_m.RecvWR(1, 1, [wr_m.SGE(mr.buf + 1024, 40 + 64, mr.lkey)]))
    ah = addr_m.AH(pd, addr_m.AHAttr(gr=addr_m.GlobalRoute(dgid=ctx.query_gid(1, IPV4_GID), sgid_index=IPV4_GID),
                                     is_global=1))
    s = wr_m.SendWR(2, IBV_WR_SEND, 1, sg=[wr_m.SGE(mr.buf, 5, mr.lkey)])
    s.set_wr_ud(ah, old[0].qp_num, QKEY)
    new.post_send(s)
    got = {}
    end = time.monotonic() + 60
    while len(got) < 2 and time.monotonic() < end:
        got.update((w.wr_id, w.status) for w in cq.poll(4)[1])
    assert got == {1: IBV_WC_SUCCESS, 2: IBV_WC_SUCCESS}
    assert mr.read(5, 1024 + 40) == b"hello"
    ctx.close()
