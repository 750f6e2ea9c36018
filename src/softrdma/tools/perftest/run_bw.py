"""perftest's bandwidth loops (perftest_resources.c): ``run_iter_bw`` (the
requester of every BW test), ``run_iter_bw_server`` (the SEND receiver),
``run_iter_bi`` (bidirectional SEND), the ``--run_infinitely`` variants and
``perform_warm_up``.

The loops keep perftest's accounting -- up to ``tx_depth`` WRs in flight
per QP, one completion per ``cq_mod`` WRs (``-Q``) or per post list
(``-l``), completions polled 16 at a time, time stamps of every post and
of every completion for the peak figure -- and do as little Python per
message as they can: the WRs are prebuilt (one per buffer position, see
``Resources.set_send_wqes``), a post is a list index, a flag store and the
verbs call, and nothing is allocated per message besides what the verbs
library hands back from a poll.

The last WR of an iterations run is always signaled, whatever ``-Q`` says
(newer perftest's ``fill_count``); otherwise a count that is not a
multiple of the moderation would leave the last completions unreported and
the loop waiting forever.
"""

from __future__ import annotations

import sys

from ...enums import ibv_send_flags as _F, ibv_wc_status as _S
from ...verbs.errors import PyverbsError
from . import params as P
from .progress import PROGRESS
from .timing import Duration, Idle, now

# plain ints on the per-message paths (an IntFlag operation builds enum members)
IBV_SEND_SIGNALED = int(_F.IBV_SEND_SIGNALED)
IBV_WC_SUCCESS = int(_S.IBV_WC_SUCCESS)

CTX_POLL_BATCH = 16
CHECK_ALIVE_S = 60


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


class Run:
    """The time stamps of one measurement (tposted / tcompleted)."""

    def __init__(self, p: P.Params):
        n = 1 if p.noPeak else max(1, p.iters * p.num_of_qps)
        self.tposted = [0] * n
        self.tcompleted = [0] * n
        self.last_iters = 0


def notify_events(res) -> bool:
    """ctx_notify_events(): sleep until a CQ event, ack it, re-arm the CQ."""
    try:
        cq = res.channel.get_cq_event()
    except PyverbsError:
        _err("Failed to get cq_event\n")
        return False
    if cq is None:
        _err("Failed to get cq_event\n")
        return False
    cq.ack_events(1)
    try:
        cq.req_notify(False)
    except PyverbsError:
        _err("Couldn't request CQ notification\n")
        return False
    return True


class Events:
    """-e: sleep on the completion channel when a poll found nothing.

    perftest waits for an event before each poll; a poll takes at most 16
    completions, so when more were waiting than one poll takes, the rest
    would never raise another event (the CQ is re-armed after they came)
    and the loop would sleep for ever.  Waiting only after an empty poll
    drains the CQ first -- ``run_iter_bw_server``'s do/while does the same.
    Without -e, ``wait()`` is never called."""

    __slots__ = ("res", "need")

    def __init__(self, res):
        self.res = res
        self.need = True

    def before_poll(self) -> bool:
        """Sleep for an event if the last poll was empty; False on error."""
        if self.need:
            self.need = False
            return notify_events(self.res)
        return True

    def polled(self, ne: int) -> None:
        if not ne:
            self.need = True


def comp_error_send(wc, scnt: int, ccnt: int) -> None:
    _err(" Completion with error at client\n")
    _err(f" Failed status {int(wc.status)}: wr_id {int(wc.wr_id)} syndrom 0x{int(wc.vendor_err):x}\n")
    _err(f"scnt={scnt}, ccnt={ccnt}\n")


def comp_error_recv(wc, rcnt: int) -> None:
    _err(" Completion with error at server\n")
    _err(f" Failed status {int(wc.status)}: wr_id {int(wc.wr_id)} syndrom 0x{int(wc.vendor_err):x}\n")
    _err(f" rcnt={rcnt}\n")


def _post_error(index: int, scnt: int) -> None:
    _err(f"Couldn't post send: qp {index} scnt={scnt} \n")


def _rate_gap_ns(p: P.Params) -> int:
    """The software rate limiter's time between bursts of ``burst_size``."""
    if p.rate_units == P.MEGA_BYTE_PS:
        pps = int(p.rate_limit / p.size * 1048576)
    elif p.rate_units == P.GIGA_BIT_PS:
        pps = int(p.rate_limit / (p.size * 8) * 1000000000)
    else:
        pps = int(p.rate_limit)
    bursts = pps // max(1, p.burst_size)
    return int(1e9 / bursts) if bursts > 0 else 0


def perform_warm_up(res, p: P.Params) -> bool:
    """perform_warm_up() (--perform_warm_up): a tx_depth of WRs per QP, all
    completed, before the measurement."""
    if not p.perform_warm_up:
        return True
    session = p.tx_depth if p.post_list == 1 else p.post_list
    res.send_cq.poll(p.tx_depth)
    for index, qp in enumerate(res.qps):
        wr = res.send_wrs[index][0]
        outstanding = 0
        for w in range(0, session, p.post_list):
            try:
                qp.post_send(wr)
            except PyverbsError:
                _err(f"Couldn't post send during warm up: qp {index} scnt={w} \n")
                _err("Problems with warm up\n")
                return False
            outstanding += 1 if p.post_list > 1 or wr.send_flags & IBV_SEND_SIGNALED else 0
        idle = Idle()
        while outstanding:
            ne, wcs = res.send_cq.poll(1)
            if not ne:
                idle.wait()
                continue
            if wcs[0].status != IBV_WC_SUCCESS:
                _err("Problems with warm up\n")
                return False
            outstanding -= 1
    return True


def run_iter_bw(res, p: P.Params, run: Run) -> bool:
    """The requester loop of every BW test."""
    qps = res.qps
    nq = len(qps)
    posts = [qp.post_send for qp in qps]
    wrs = res.send_wrs
    npos = res.positions
    poll = res.send_cq.poll
    post_list, cq_mod, tx_depth = p.post_list, p.cq_mod, p.tx_depth
    comp_inc = post_list if post_list > 1 else cq_mod
    no_peak = p.noPeak
    tposted, tcompleted = run.tposted, run.tcompleted
    dur = None
    if p.test_type == P.DURATION:
        dur = run.duration = Duration(p, run)
        dur.arm()
    iters = p.iters
    last = iters - 1
    tot_iters = iters * nq
    scnt = [0] * nq
    ccnt = [0] * nq
    totscnt = totccnt = 0
    if p.test_type == P.ITERATIONS and no_peak:
        tposted[0] = now()
    rate = p.rate_limit_type == P.SW_RATE_LIMIT
    gap_ns = _rate_gap_ns(p) if rate else 0
    gap_deadline = 0
    sending_burst = False
    burst_iter = 0
    idle = Idle()
    events = Events(res) if p.use_event else None
    show = PROGRESS.enabled
    state = dur.poll() if dur else P.END_STATE
    sig = IBV_SEND_SIGNALED
    while totscnt < tot_iters or totccnt < tot_iters or (dur is not None and state != P.END_STATE):
        for index in range(nq):
            if rate and not sending_burst:
                t = now()
                if gap_deadline > t:
                    continue
                gap_deadline = t + gap_ns
                sending_burst = True
                burst_iter = 0
            s = scnt[index]
            heads = wrs[index]
            post = posts[index]
            while (s < iters or dur is not None) and s - ccnt[index] < tx_depth and not (rate and not sending_burst):
                if post_list == 1:
                    wr = heads[s % npos]
                    wr.send_flags = sig if (cq_mod == 1 or s % cq_mod == cq_mod - 1 or
                                            (dur is None and s == last)) else 0
                else:
                    wr = heads[0]
                if not no_peak:
                    tposted[totscnt] = now()
                if dur is not None and dur.poll() == P.END_STATE:
                    break
                try:
                    post(wr)
                except PyverbsError:
                    _post_error(index, s)
                    scnt[index] = s
                    return False
                s += post_list
                totscnt += post_list
                if rate:
                    burst_iter += post_list
                    if burst_iter >= p.burst_size:
                        sending_burst = False
            scnt[index] = s
        if totccnt < tot_iters or (dur is not None and totccnt < totscnt):
            if events is not None and not events.before_poll():
                return False
            ne, wcs = poll(CTX_POLL_BATCH)
            if events is not None:
                events.polled(ne)
            if ne:
                idle.reset()
                for wc in wcs:
                    if wc.status != IBV_WC_SUCCESS:
                        comp_error_send(wc, totscnt, totccnt)
                        return False
                    ccnt[wc.wr_id] += comp_inc
                    totccnt += comp_inc
                    if not no_peak:
                        if totccnt >= tot_iters - 1:
                            tcompleted[tot_iters - 1] = now()
                        else:
                            tcompleted[totccnt - 1] = now()
                    if dur is not None and dur.state == P.SAMPLE_STATE:
                        p.iters += comp_inc
            else:
                idle.wait()
        elif dur is not None:
            idle.wait()
        if dur is not None:
            state = dur.poll()
            if show:
                _show_duration(p, dur)
        elif show:
            PROGRESS.update(f"{P.TESTS_STR[p.verb]} {p.size} B: {totccnt}/{tot_iters} completed")
    if no_peak and p.test_type == P.ITERATIONS:
        tcompleted[0] = now()
    return True


_STATE_NAMES = {P.START_STATE: "warming up", P.SAMPLE_STATE: "measuring", P.STOP_SAMPLE_STATE: "cooling down"}


def _show_duration(p: P.Params, dur: Duration) -> None:
    PROGRESS.update(f"{P.TESTS_STR[p.verb]} {p.size} B, -D {p.duration}: {_STATE_NAMES.get(dur.state, 'done')},"
                    f" {dur.remaining_s():.0f} s left in this phase, {p.iters} messages sampled")


class _Alive:
    """check_alive(): every 60 s, a receiver that got nothing new gives up
    (UC/UD lose messages for good) and reports what it has."""

    def __init__(self):
        self.next_ns = now() + CHECK_ALIVE_S * 1_000_000_000
        self.last = 0

    def dead(self, count: int, total: int) -> bool:
        t = now()
        if t < self.next_ns:
            return False
        self.next_ns = t + CHECK_ALIVE_S * 1_000_000_000
        if count > self.last:
            self.last = count
            return False
        if count < total:
            _err(f" Did not get Message for 120 Seconds, exiting..\n Total Received={count}, Total Iters"
                 f" Required={total}\n")
            return True
        return False


def _repost(res, index: int, size_per_qp: int) -> None:
    """Post receive number ``recv_next[index]`` of a QP (its own WR for its
    buffer position)."""
    wrs = res.recv_wrs[index]
    k = res.recv_next[index]
    res.recv_next[index] = k + 1
    if res.srq is not None:
        res.srq.post_recv(wrs[k % len(wrs)])
    else:
        res.qps[index].post_recv(wrs[k % len(wrs)])


def run_iter_bw_server(res, p: P.Params, run: Run) -> bool:
    """The SEND receiver: count receives, re-post each one while more are due."""
    nq = p.num_of_qps
    size_per_qp = p.rx_depth // nq if p.use_srq else p.rx_depth
    tot_iters = p.iters * nq
    rcnt = 0
    rcnt_qp = [0] * nq
    poll = res.recv_cq.poll
    dur = None
    first_rx = True
    alive = _Alive() if p.test_type == P.ITERATIONS else None
    idle = Idle()
    events = Events(res) if p.use_event else None
    show = PROGRESS.enabled
    while rcnt < tot_iters or (dur is not None and dur.poll() != P.END_STATE) or \
            (p.test_type == P.DURATION and dur is None):
        if events is not None and not events.before_poll():
            _err(" Failed to notify events to CQ")
            return False
        ne, wcs = poll(CTX_POLL_BATCH)
        if events is not None:
            events.polled(ne)
        if ne:
            idle.reset()
            if first_rx:
                first_rx = False
                if p.test_type == P.DURATION:
                    dur = run.duration = Duration(p, run)
                    dur.arm()
                else:
                    run.tposted[0] = now()
            sampling = dur is not None and dur.poll() == P.SAMPLE_STATE
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    comp_error_recv(wc, rcnt_qp[0])
                    return False
                i = wc.wr_id
                rcnt_qp[i] += 1
                rcnt += 1
                if sampling:
                    p.iters += 1
                if p.test_type == P.DURATION or rcnt_qp[i] + size_per_qp <= p.iters:
                    try:
                        _repost(res, i, size_per_qp)
                    except PyverbsError:
                        _err(f"Couldn't post recv Qp={i} rcnt={rcnt_qp[i]}\n")
                        return False
            if show:
                if dur is not None:
                    _show_duration(p, dur)
                else:
                    PROGRESS.update(f"{P.TESTS_STR[p.verb]} {p.size} B: {rcnt}/{tot_iters} received")
        else:
            if alive is not None and alive.dead(rcnt, tot_iters):
                p.check_alive_exited = True
                break
            idle.wait()
    if p.test_type == P.ITERATIONS:
        run.tcompleted[0] = now()
    return True


def run_iter_bi(res, p: P.Params, run: Run) -> bool:
    """Bidirectional SEND: each side sends and receives; the server starts
    sending once its first message arrived."""
    nq = p.num_of_qps
    size_per_qp = p.rx_depth // nq if p.use_srq else p.rx_depth
    posts = [qp.post_send for qp in res.qps]
    wrs = res.send_wrs
    npos = res.positions
    post_list, cq_mod, tx_depth = p.post_list, p.cq_mod, p.tx_depth
    comp_inc = post_list if post_list > 1 else cq_mod
    no_peak = p.noPeak
    tposted, tcompleted = run.tposted, run.tcompleted
    if no_peak:
        tposted[0] = now()
    dur = None
    before_first_rx = True
    if p.machine == P.CLIENT:
        before_first_rx = False
        if p.test_type == P.DURATION:
            dur = run.duration = Duration(p, run)
            dur.arm()
    alive = _Alive() if p.test_type == P.ITERATIONS else None
    iters = p.iters
    last = iters - 1
    tot_iters = iters * nq
    scnt = [0] * nq
    ccnt = [0] * nq
    rcnt_qp = [0] * nq
    totscnt = totccnt = totrcnt = 0
    sig = IBV_SEND_SIGNALED
    idle = Idle()
    events = Events(res) if p.use_event else None
    if events is not None:
        events.need = False                 # the first round polls without waiting
    while (dur is not None and dur.poll() != P.END_STATE) or totccnt < tot_iters or totrcnt < tot_iters or \
            (p.test_type == P.DURATION and dur is None):
        progressed = False
        for index in range(nq):
            s = scnt[index]
            heads = wrs[index]
            while not before_first_rx and (s < iters or dur is not None) and s - ccnt[index] < tx_depth:
                if post_list == 1:
                    wr = heads[s % npos]
                    wr.send_flags = sig if (cq_mod == 1 or s % cq_mod == cq_mod - 1 or
                                            (dur is None and s == last)) else 0
                else:
                    wr = heads[0]
                if not no_peak:
                    tposted[totscnt] = now()
                if dur is not None and dur.state == P.END_STATE:
                    break
                try:
                    posts[index](wr)
                except PyverbsError:
                    _post_error(index, s)
                    return False
                s += post_list
                totscnt += post_list
                progressed = True
            scnt[index] = s
        if events is not None and not progressed and not events.before_poll():
            _err("Failed to notify events to CQ")
            return False
        ne, wcs = res.recv_cq.poll(p.rx_depth)
        if ne:
            progressed = True
            if p.machine == P.SERVER and before_first_rx:
                before_first_rx = False
                if p.test_type == P.DURATION:
                    dur = run.duration = Duration(p, run)
                    dur.arm()
            sampling = dur is not None and dur.poll() == P.SAMPLE_STATE
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    comp_error_recv(wc, totrcnt)
                    return False
                i = wc.wr_id
                rcnt_qp[i] += 1
                totrcnt += 1
                if sampling:
                    p.iters += 1
                if p.test_type == P.DURATION or rcnt_qp[i] + size_per_qp <= iters:
                    try:
                        _repost(res, i, size_per_qp)
                    except PyverbsError:
                        _err(f"Couldn't post recv Qp={i} rcnt={rcnt_qp[i]}\n")
                        return False
        elif alive is not None and alive.dead(totrcnt, tot_iters):
            p.check_alive_exited = True
            return True
        ne, wcs = res.send_cq.poll(CTX_POLL_BATCH)
        if ne:
            progressed = True
            sampling = dur is not None and dur.poll() == P.SAMPLE_STATE
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    comp_error_send(wc, totscnt, totccnt)
                    return False
                totccnt += comp_inc
                ccnt[wc.wr_id] += comp_inc
                if not no_peak:
                    if totccnt >= tot_iters - 1:
                        tcompleted[tot_iters - 1] = now()
                    else:
                        tcompleted[totccnt - 1] = now()
                if sampling:
                    p.iters += comp_inc
        if events is not None:
            events.polled(progressed)
        if progressed:
            idle.reset()
        elif events is None:
            idle.wait()
        if PROGRESS.enabled:
            if dur is not None:
                _show_duration(p, dur)
            else:
                PROGRESS.update(f"{P.TESTS_STR[p.verb]} {p.size} B: {totccnt}/{tot_iters} sent,"
                                f" {totrcnt}/{tot_iters} received")
    if no_peak and p.test_type == P.ITERATIONS:
        tcompleted[0] = now()
    return True


def run_iter_bw_infinitely(res, p: P.Params, run: Run, report) -> bool:
    """--run_infinitely, requester side: keep tx_depth WRs in flight on every
    QP, every WR signaled; every ``duration`` seconds print the BW of the
    period (catch_alarm_infintely) and start a new one.  Ends only with the
    process (Ctrl-C)."""
    nq = p.num_of_qps
    posts = [qp.post_send for qp in res.qps]
    wrs = res.send_wrs
    npos = res.positions
    for heads in wrs:
        for wr in heads:
            w = wr
            while w is not None:
                w.send_flags |= IBV_SEND_SIGNALED
                w = w.next_wr
    post_list = p.post_list
    inflight = [0] * nq
    sent = [0] * nq
    p.iters = 0
    run.tposted[0] = now()
    period_ns = p.duration * 1_000_000_000
    next_report = run.tposted[0] + period_ns
    idle = Idle()
    poll = res.send_cq.poll
    periods = 0
    while True:
        for index in range(nq):
            heads = wrs[index]
            while inflight[index] < p.tx_depth:
                try:
                    posts[index](heads[sent[index] % npos])
                except PyverbsError:
                    _err(f"Couldn't post send: {index} scnt={inflight[index]} \n")
                    return False
                inflight[index] += post_list
                sent[index] += post_list
        ne, wcs = poll(CTX_POLL_BATCH)
        if ne:
            idle.reset()
            for wc in wcs:
                if wc.status != IBV_WC_SUCCESS:
                    comp_error_send(wc, inflight[wc.wr_id], inflight[wc.wr_id])
                    return False
                inflight[wc.wr_id] -= 1          # every WR of a chain is signaled here
                p.iters += 1
        else:
            idle.wait()
        t = now()
        if t >= next_report:
            run.tcompleted[0] = t
            report(run)
            p.iters = 0
            run.tposted[0] = now()
            next_report = run.tposted[0] + period_ns
            periods += 1
        if PROGRESS.enabled:
            PROGRESS.update(f"--run_infinitely: period {periods + 1}, {p.iters} messages,"
                            f" {max(0.0, (next_report - t) / 1e9):.0f} s to the next report (Ctrl-C ends)")


def run_iter_bw_infinitely_server(res, p: P.Params) -> bool:
    """--run_infinitely, SEND receiver: re-post every receive, forever."""
    poll = res.recv_cq.poll
    size_per_qp = p.rx_depth // p.num_of_qps if p.use_srq else p.rx_depth
    idle = Idle()
    while True:
        ne, wcs = poll(CTX_POLL_BATCH)
        if not ne:
            idle.wait()
            continue
        idle.reset()
        for wc in wcs:
            if wc.status != IBV_WC_SUCCESS:
                _err("A completion with Error in run_infinitely_bw_server function")
                return False
            try:
                _repost(res, wc.wr_id, size_per_qp)
            except PyverbsError:
                _err(f"Couldn't post recv Qp={wc.wr_id}\n")
                return False
