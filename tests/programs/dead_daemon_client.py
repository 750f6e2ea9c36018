"""A client busy in one verbs call when its softrdmad is killed.

    dead_daemon_client.py poll_cq|poll_cqex|post_send|post_recv|post_srq_recv|get_cq_event|get_async_event

Sets up what the call needs on rxe0, prints ``READY`` once it is in its
loop (or about to block), then loops on that call until it fails.  It
prints one JSON line: what ended the loop (``errno`` of the
PyverbsRDMAError, or ``event`` for get_async_event), ``t``, the
time.monotonic() of that moment (CLOCK_MONOTONIC: the test compares it
with its own clock), and what later verbs calls on the same context gave
(``after``: errno per call, ``async``: the async events then queued)."""

import errno
import json
import sys
import time

from softrdma.enums import IBV_EVENT_DEVICE_FATAL, IBV_MTU_1024, IBV_QPT_RC, IBV_QPT_UD, IBV_WR_SEND
from softrdma.verbs import addr, cq, cqex, device, mr, pd, qp, srq, wr
from softrdma.verbs.errors import PyverbsRDMAError

mode = sys.argv[1]
ctx = device.Context(name="rxe0")
p = pd.PD(ctx)
m = mr.MR(p, 4096, 15)
ch = cq.CompChannel(ctx)
c = cq.CQ(ctx, 16, channel=ch)
sge = [wr.SGE(m.buf, 64, m.lkey)]
ready = False


def say_ready():
    global ready
    if not ready:
        ready = True
        print("READY", flush=True)


def errno_of(fn):
    try:
        fn()
    except PyverbsRDMAError as e:
        return e.error_code
    except Exception as e:                          # noqa: BLE001 -- reported, the test fails on it
        return f"{type(e).__name__}: {e}"
    return 0


def rc_qp_sending_to_nobody():
    """An RC QP in RTS whose peer QP does not exist: its SENDs wait for ACKs
    (timeout 20: ~4 s per try), so its send queue fills and stays full."""
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=4, max_recv_wr=4)))
    gi = next(i for i in range(8) if str(ctx.query_gid(1, i)).startswith("0000:0000:0000:0000:0000:ffff"))
    a = qp.QPAttr()
    a.qp_access_flags, a.path_mtu, a.dest_qp_num = 15, IBV_MTU_1024, 0xABCDE
    a.max_dest_rd_atomic = a.max_rd_atomic = 1
    a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry = 12, 20, 7, 7
    a.ah_attr = addr.AHAttr(gr=addr.GlobalRoute(dgid=ctx.query_gid(1, gi), sgid_index=gi), is_global=1, port_num=1)
    q.to_rts(a)
    return q


def busy(call):
    """Loop on ``call`` (ENOMEM, a full queue, is part of the loop) until
    it raises anything else."""
    while True:
        try:
            call()
        except PyverbsRDMAError as e:
            if e.error_code != errno.ENOMEM:
                return {"errno": e.error_code, "msg": str(e)}
            say_ready()


if mode == "poll_cq":
    def call():
        say_ready()
        c.poll()
    end = busy(call)
elif mode == "poll_cqex":
    x = cqex.CQEX(ctx, cqex.CqInitAttrEx(16))

    def call():
        say_ready()
        x.start_poll()
    end = busy(call)
elif mode == "post_send":
    q = rc_qp_sending_to_nobody()
    end = busy(lambda: q.post_send(wr.SendWR(1, IBV_WR_SEND, 0, sg=sge)))
elif mode == "post_recv":
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_UD, scq=c, rcq=c, cap=qp.QPCap(max_send_wr=4, max_recv_wr=4)),
              qp.QPAttr())                          # to RTS: its receive queue fills and stays full
    end = busy(lambda: q.post_recv(wr.RecvWR(1, 1, sge)))
elif mode == "post_srq_recv":
    s = srq.SRQ(p, srq.SrqInitAttr(srq.SrqAttr(max_wr=4)))
    end = busy(lambda: s.post_recv(wr.RecvWR(1, 1, sge)))
elif mode == "get_cq_event":
    c.req_notify()
    say_ready()
    end = busy(lambda: ch.get_cq_event(c))
elif mode == "get_async_event":
    say_ready()
    ev = ctx.get_async_event()
    end = {"event": int(ev["event"])}
else:
    raise SystemExit(f"unknown mode {mode}")
end["t"] = time.monotonic()

end["after"] = {
    "poll_cq": errno_of(lambda: c.poll()),
    "req_notify": errno_of(lambda: c.req_notify()),
    "get_cq_event": errno_of(lambda: ch.get_cq_event(timeout=1)),
    "alloc_pd": errno_of(lambda: pd.PD(ctx)),
    "reg_mr": errno_of(lambda: mr.MR(p, 4096, 15)),
    "create_cq": errno_of(lambda: cq.CQ(ctx, 4)),
    "query_port": errno_of(lambda: ctx.query_port(1)),
}
if mode in ("post_send", "post_recv"):
    end["after"]["post_send"] = errno_of(lambda: q.post_send(wr.SendWR(2, IBV_WR_SEND, 0, sg=sge)))
    end["after"]["post_recv"] = errno_of(lambda: q.post_recv(wr.RecvWR(2, 1, sge)))
events = []
while True:
    try:
        events.append(int(ctx.get_async_event(timeout=1)["event"]))
    except PyverbsRDMAError as e:
        events.append(e.error_code)
        break
end["async"] = events
end["fatal"] = int(IBV_EVENT_DEVICE_FATAL)
# tearing down a context whose device is gone works (as after a disassociate)
end["close"] = errno_of(lambda: (c.close(), ch.close(), m.close(), p.close(), ctx.close()))
print(json.dumps(end), flush=True)
