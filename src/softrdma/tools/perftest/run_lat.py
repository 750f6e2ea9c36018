"""perftest's latency loops (perftest_resources.c): ``run_iter_lat_write``
(ping-pong of RDMA WRITEs, each side polling the last byte of its buffer
for the peer's counter), ``run_iter_lat`` (READ and ATOMIC, one at a time,
from the client only) and ``run_iter_lat_send`` (ping-pong of SENDs).

The time stamp taken before every post is the measurement: the difference
of two successive ones is one round trip (report.lat_stats turns them into
the table).  Waiting is a poll of shared memory or of a CQ ring with the
``Idle`` policy of timing.py.
"""

from __future__ import annotations

import os
import sys

from ...enums import ibv_send_flags as _F, ibv_wc_status as _S
from ...verbs.errors import PyverbsError
from . import params as P
from .progress import PROGRESS
from .run_bw import Events, comp_error_recv, comp_error_send, _repost
from .timing import Duration, Idle, now

# plain ints on the per-message paths (an IntFlag operation builds enum members)
IBV_SEND_SIGNALED = int(_F.IBV_SEND_SIGNALED)
IBV_WC_SUCCESS = int(_S.IBV_WC_SUCCESS)

_SPIN = 64


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


class LatRun:
    """tposted (one stamp per post) and the duration stamps."""

    def __init__(self, p: P.Params):
        self.tposted = [0] * max(1, p.iters)
        self.tcompleted = [0]


def _gap(p: P.Params) -> None:
    """--latency_gap: spin that many microseconds before each post."""
    if p.latency_gap:
        end = now() + p.latency_gap * 1000
        while now() < end:
            pass


def _show(p: P.Params, done: int, dur) -> None:
    if dur is not None:
        PROGRESS.update(f"{P.TESTS_STR[p.verb]} latency {p.size} B, -D {p.duration}: {p.iters} round trips"
                        f" sampled")
    else:
        PROGRESS.update(f"{P.TESTS_STR[p.verb]} latency {p.size} B: {done}/{p.iters}")


def run_iter_lat_write(res, p: P.Params, run: LatRun) -> bool:
    wr = res.send_wrs[0][0]
    wr.sg_list[0].length = p.size
    wr.send_flags = IBV_SEND_SIGNALED
    view = res.views[0]
    base = res.view_base[0]
    post_idx = res.buf_addr[0] + p.size - 1 - base
    poll_idx = res.rx_addr[0] + p.size - 1 - base
    post = res.qps[0].post_send
    poll = res.send_cq.poll
    dur = None
    if p.test_type == P.DURATION:
        dur = run.duration = Duration(p, run)
        dur.arm()
    iters = p.iters
    server = p.machine == P.SERVER
    tposted = run.tposted
    scnt = ccnt = rcnt = 0
    show = PROGRESS.enabled
    idle = Idle()
    while scnt < iters or ccnt < iters or rcnt < iters or (dur is not None and dur.poll() != P.END_STATE):
        if (rcnt < iters or dur is not None) and not (scnt < 1 and server):
            rcnt += 1
            target = rcnt & 0xFF
            if view[poll_idx] != target:
                n = 0
                while view[poll_idx] != target:
                    n += 1
                    if n > _SPIN:
                        os.sched_yield()
                        if dur is not None and not n & 255 and dur.poll() == P.END_STATE:
                            break
        if scnt < iters or dur is not None:
            _gap(p)
            if dur is None:
                tposted[scnt] = now()
            scnt += 1
            view[post_idx] = scnt & 0xFF
            try:
                post(wr)
            except PyverbsError:
                _err(f"Couldn't post send: scnt={scnt}\n")
                return False
        if dur is not None and dur.state == P.END_STATE:
            break
        if ccnt < iters or dur is not None:
            idle.reset()
            while True:
                ne, wcs = poll(1)
                if ne:
                    break
                idle.wait()
            if wcs[0].status != IBV_WC_SUCCESS:
                comp_error_send(wcs[0], scnt, ccnt)
                return False
            ccnt += 1
            if dur is not None and dur.poll() == P.SAMPLE_STATE:
                p.iters += 1
        if show:
            _show(p, ccnt, dur)
    return True


def run_iter_lat(res, p: P.Params, run: LatRun) -> bool:
    """READ / ATOMIC latency: one WR, wait for its completion, again."""
    wr = res.send_wrs[0][0]
    wr.sg_list[0].length = p.size
    wr.send_flags = IBV_SEND_SIGNALED
    post = res.qps[0].post_send
    poll = res.send_cq.poll
    dur = None
    if p.test_type == P.DURATION:
        dur = run.duration = Duration(p, run)
        dur.arm()
    iters = p.iters
    tposted = run.tposted
    scnt = 0
    show = PROGRESS.enabled
    idle = Idle()
    events = Events(res) if p.use_event else None
    while scnt < iters or (dur is not None and dur.poll() != P.END_STATE):
        _gap(p)
        if dur is None:
            tposted[scnt] = now()
            scnt += 1
        try:
            post(wr)
        except PyverbsError:
            _err(f"Couldn't post send: scnt={scnt}\n")
            return False
        if dur is not None and dur.state == P.END_STATE:
            break
        idle.reset()
        while True:
            if events is not None and not events.before_poll():
                return False
            ne, wcs = poll(1)
            if events is not None:
                events.polled(ne)
            if ne:
                if wcs[0].status != IBV_WC_SUCCESS:
                    comp_error_send(wcs[0], scnt, scnt)
                    return False
                if dur is not None and dur.poll() == P.SAMPLE_STATE:
                    p.iters += 1
                break
            if events is None:
                idle.wait()
        if show:
            _show(p, scnt, dur)
    return True


def run_iter_lat_send(res, p: P.Params, run: LatRun) -> bool:
    """SEND latency: the server receives first, the client sends first; each
    side answers a receive with a send."""
    wr = res.send_wrs[0][0]
    wr.sg_list[0].length = p.size
    wr.send_flags = 0
    post = res.qps[0].post_send
    rpoll = res.recv_cq.poll
    spoll = res.send_cq.poll
    size_per_qp = p.rx_depth // p.num_of_qps if p.use_srq else p.rx_depth
    iters = p.iters
    client = p.machine == P.CLIENT
    cq_mod = p.cq_mod
    tposted = run.tposted
    dur = None
    first_rx = True
    scnt = rcnt = 0
    show = PROGRESS.enabled
    idle = Idle()
    events = Events(res) if p.use_event else None
    while scnt < iters or rcnt < iters or (dur is not None and dur.poll() != P.END_STATE) or \
            (p.test_type == P.DURATION and dur is None):
        if (rcnt < iters or p.test_type == P.DURATION) and not (scnt < 1 and client):
            idle.reset()
            while True:
                if events is not None and not events.before_poll():
                    _err(" Failed to notify events to CQ")
                    return False
                ne, wcs = rpoll(1)
                if events is not None:
                    events.polled(ne)
                if dur is not None and dur.state == P.END_STATE:
                    break
                if ne:
                    if first_rx:
                        first_rx = False
                        if p.test_type == P.DURATION:
                            dur = run.duration = Duration(p, run)
                            dur.arm()
                    wc = wcs[0]
                    if wc.status != IBV_WC_SUCCESS:
                        comp_error_recv(wc, rcnt)
                        return False
                    rcnt += 1
                    if dur is not None and dur.poll() == P.SAMPLE_STATE:
                        p.iters += 1
                    if p.test_type == P.DURATION or rcnt + size_per_qp <= iters:
                        try:
                            _repost(res, wc.wr_id, size_per_qp)
                        except PyverbsError:
                            _err(f"Couldn't post recv: rcnt={rcnt}\n")
                            return False
                    break
                if dur is not None and dur.poll() == P.END_STATE:
                    break
                if events is None:
                    idle.wait()
        if scnt < iters or (p.test_type == P.DURATION and (dur is None or dur.poll() != P.END_STATE)):
            _gap(p)
            if p.test_type == P.ITERATIONS:
                tposted[scnt] = now()
            scnt += 1
            signal = scnt % cq_mod == 0 or (p.test_type == P.ITERATIONS and scnt == iters)
            if signal:
                wr.send_flags = IBV_SEND_SIGNALED
            if dur is not None and dur.state == P.END_STATE:
                break
            try:
                post(wr)
            except PyverbsError:
                _err(f"Couldn't post send: scnt={scnt} \n")
                return False
            if signal:
                idle.reset()
                while True:
                    if events is not None and not events.before_poll():
                        _err(" Failed to notify events to CQ")
                        return False
                    ne, wcs = spoll(1)
                    if events is not None:
                        events.polled(ne)
                    if ne:
                        break
                    if events is None:
                        idle.wait()
                if wcs[0].status != IBV_WC_SUCCESS:
                    comp_error_send(wcs[0], scnt, scnt)
                    return False
                wr.send_flags = 0
        if show:
            _show(p, rcnt, dur)
    return True
